# llmserve.ops: every op of the engine's registry as a torch custom op — torch.library.opcheck (schema, fake /
# Meta kernel, dispatch) and the result against a pure-PyTorch reference on CPU and, where present, CUDA; then
# torch.compile(fullgraph=True) of a small Llama block built from the ops. Skipped where torch is absent (CI).
import math

import pytest

torch = pytest.importorskip("torch")
import llmserve.ops as ops  # noqa: E402  (torch is here, so the ops library must be built)
L = torch.ops.llmserve

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
gen = torch.Generator().manual_seed(0)


def rand(*shape, device="cpu", dtype=torch.float32):
    return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)


FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2)


def check(op, args, ref_outputs, atol=1e-4, rtol=1e-4):
    """opcheck on copies, then the op itself, comparing its written arguments with the reference's."""
    utils = {}
    # torch 2.11's schema check compares arguments with CPU arithmetic that float8 lacks ("mul_cpu_reduced_float"
    # not implemented): on float8 arguments only the fake-tensor, autograd-registration and AOT tests run.
    if any(isinstance(a, torch.Tensor) and a.dtype in FLOAT8 for a in args):
        utils = {"test_utils": ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")}
    torch.library.opcheck(op, [a.clone() if isinstance(a, torch.Tensor) else a for a in args], **utils)
    op(*args)
    for got, want in ref_outputs(args):
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol)


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def test_every_registry_op_is_registered():
    names = set(ops.op_names())
    for name in ("rms_norm", "fused_add_rms_norm", "rotary_embedding", "silu_and_mul", "reshape_and_cache",
                 "paged_attention", "apply_top_k_top_p_min_p", "apply_penalties", "sample", "linear"):
        assert name in names
    schema = str(L.rms_norm.default._schema)
    first, rest = schema.split(",", 1)  # `Tensor!` marks the written output (torch prints its alias set)
    assert first.startswith("llmserve::rms_norm(Tensor(") and "!" in first and first.endswith(" out")
    assert "!" not in rest and schema.endswith("-> ()")


@pytest.mark.parametrize("device", DEVICES)
def test_norms_activation_add_linear(device):
    x, w = rand(5, 64, device=device), rand(64, device=device)
    out = torch.empty_like(x)
    check(L.rms_norm, [out, x, w, 1e-6], lambda a: [(a[0], rms(x, w, 1e-6))])
    res = rand(5, 64, device=device)
    xs, rs = x.clone(), res.clone()
    check(L.fused_add_rms_norm, [xs, rs, w, 1e-6], lambda a: [(a[1], x + res), (a[0], rms(x + res, w, 1e-6))])
    g = rand(5, 128, device=device)
    out = torch.empty(5, 64, device=device)
    check(L.silu_and_mul, [out, g], lambda a: [(a[0], torch.nn.functional.silu(g[:, :64]) * g[:, 64:])])
    a0 = x.clone()
    check(L.add, [a0, res], lambda a: [(a[0], x + res)])
    wt, b = rand(32, 64, device=device), rand(32, device=device)
    out = torch.empty(5, 32, device=device)
    check(L.linear, [out, x, wt, b], lambda a: [(a[0], x @ wt.T + b)], atol=1e-3, rtol=1e-3)
    check(L.linear, [torch.empty(5, 32, device=device), x, wt, None], lambda a: [(a[0], x @ wt.T)], 1e-3, 1e-3)


def rope_ref(pos, x, head_dim, cache):
    n = x.shape[0]
    x = x.view(n, -1, head_dim)
    cos, sin = cache[pos, : head_dim // 2][:, None, :], cache[pos, head_dim // 2:][:, None, :]
    x1, x2 = x[..., : head_dim // 2], x[..., head_dim // 2:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).reshape(n, -1)


@pytest.mark.parametrize("device", DEVICES)
def test_rotary_and_cache(device):
    head_dim, n = 16, 4
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.arange(32).float()[:, None] * inv[None, :]
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)
    pos = torch.tensor([0, 3, 7, 31], device=device)
    q, k = rand(n, 4 * head_dim, device=device), rand(n, 2 * head_dim, device=device)
    check(L.rotary_embedding, [pos, q.clone(), k.clone(), head_dim, cache],
          lambda a: [(a[1], rope_ref(pos.cpu(), q.cpu(), head_dim, cache.cpu()).to(device)),
                     (a[2], rope_ref(pos.cpu(), k.cpu(), head_dim, cache.cpu()).to(device))])
    key, value = rand(n, 2, head_dim, device=device), rand(n, 2, head_dim, device=device)
    kc, vc = torch.zeros(3, 4, 2, head_dim, device=device), torch.zeros(3, 4, 2, head_dim, device=device)
    slots = torch.tensor([0, 5, -1, 11], device=device)

    def cache_ref(a):
        want_k, want_v = torch.zeros_like(kc), torch.zeros_like(vc)
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                want_k[s // 4, s % 4], want_v[s // 4, s % 4] = key[i], value[i]
        return [(a[2], want_k), (a[3], want_v)]

    check(L.reshape_and_cache, [key, value, kc, vc, slots], cache_ref)


@pytest.mark.parametrize("device", DEVICES)
def test_qk_norm_rotary_and_cache(device):
    # Qwen3's prologue as one op: per-head RMSNorm of q and k, rotate-half RoPE, k and v into their slots. On CUDA
    # with head_dim 64 it is the fused kernel; q, k, v are strided head views of one qkv buffer, as the model has them.
    head_dim, n, heads, kv_heads, eps = 64, 4, 4, 2, 1e-6
    inv = 1.0 / (1000000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    freqs = torch.arange(32).float()[:, None] * inv[None, :]
    cache = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)
    pos = torch.tensor([0, 3, 7, 31], device=device)
    qkv = rand(n, (heads + 2 * kv_heads) * head_dim, device=device)
    q_w, k_w = rand(head_dim, device=device).abs() + 0.5, rand(head_dim, device=device).abs() + 0.5
    kc, vc = torch.zeros(3, 4, kv_heads, head_dim, device=device), torch.zeros(3, 4, kv_heads, head_dim, device=device)
    slots = torch.tensor([0, 5, -1, 11], device=device)
    split = (heads * head_dim, (heads + kv_heads) * head_dim)
    q, k, v = (t.unflatten(1, (-1, head_dim)) for t in (qkv[:, :split[0]], qkv[:, split[0]:split[1]], qkv[:, split[1]:]))

    def ref(a):
        c = cache.cpu()
        want_q = rope_ref(pos.cpu(), rms(q.cpu(), q_w.cpu(), eps).reshape(n, -1), head_dim, c).to(device)
        want_k = rope_ref(pos.cpu(), rms(k.cpu(), k_w.cpu(), eps).reshape(n, -1), head_dim, c).to(device)
        want_kc, want_vc = torch.zeros_like(kc), torch.zeros_like(vc)
        for i, s in enumerate(slots.tolist()):
            if s >= 0:
                want_kc[s // 4, s % 4], want_vc[s // 4, s % 4] = want_k[i].view(kv_heads, head_dim), v[i]
        return [(a[1].reshape(n, -1), want_q), (a[2].reshape(n, -1), want_k), (a[9], want_kc), (a[10], want_vc)]

    check(L.qk_norm_rotary_embedding_and_cache,
          [pos, q.clone(), k.clone(), v, head_dim, cache, q_w, k_w, eps, kc, vc, slots], ref)


@pytest.mark.parametrize("device", DEVICES)
def test_paged_attention_decode_and_prefill(device):
    heads, kv_heads, head_dim, block = 4, 2, 16, 4
    kc, vc = rand(8, block, kv_heads, head_dim, device=device), rand(8, block, kv_heads, head_dim, device=device)
    # Request 0 decodes 1 token at context 6; request 1 prefills 3 tokens at context 5 (causal).
    qlens, seq_lens = [1, 3], [6, 5]
    table = torch.tensor([[2, 5], [7, 1]], dtype=torch.int32, device=device)
    q = rand(4, heads, head_dim, device=device)
    out = torch.empty_like(q)
    qsl = torch.tensor([0, 1, 4], dtype=torch.int32, device=device)
    sl = torch.tensor(seq_lens, dtype=torch.int32, device=device)
    slot = torch.zeros(4, dtype=torch.int64, device=device)
    scale = 1 / math.sqrt(head_dim)

    def ref(a):
        want, t = torch.zeros_like(q), 0
        for r, (ql, sl_) in enumerate(zip(qlens, seq_lens)):
            blocks = table[r].tolist()
            keys = torch.stack([kc[blocks[p // block], p % block] for p in range(sl_)])  # [sl, kvh, d]
            vals = torch.stack([vc[blocks[p // block], p % block] for p in range(sl_)])
            for j in range(ql):
                pos = sl_ - ql + j
                kk = keys[: pos + 1].repeat_interleave(heads // kv_heads, dim=1)
                vv = vals[: pos + 1].repeat_interleave(heads // kv_heads, dim=1)
                p = torch.softmax(torch.einsum("hd,shd->hs", q[t], kk) * scale, dim=-1)
                want[t] = torch.einsum("hs,shd->hd", p, vv)
                t += 1
        return [(a[0], want)]

    check(L.paged_attention, [out, q, kc, vc, qsl, sl, table, slot, 2, 1, 3, 6, None, scale, 0], ref)


@pytest.mark.parametrize("device", DEVICES)
def test_logits_ops(device):
    logits = rand(3, 50, device=device)
    check(L.log_softmax, [torch.empty_like(logits), logits], lambda a: [(a[0], torch.log_softmax(logits, -1))])
    values, ids = torch.empty(3, 5, device=device), torch.empty(3, 5, dtype=torch.int32, device=device)
    top = torch.topk(logits, 5)
    check(L.top_k, [values, ids, logits, 5], lambda a: [(a[0], top.values), (a[1], top.indices.int())])
    check(L.argmax, [torch.empty(3, dtype=torch.int32, device=device), logits],
          lambda a: [(a[0], logits.argmax(-1).int())])
    lp = torch.log_softmax(logits, -1)
    tok = torch.tensor([3, 10, 49], dtype=torch.int32, device=device)
    picked = lp.gather(1, tok.long()[:, None])[:, 0]
    ranks = (lp >= picked[:, None]).sum(-1).int()
    check(L.gather_token_logprobs, [torch.empty(3, device=device), torch.empty(3, dtype=torch.int32, device=device),
                                    lp, tok], lambda a: [(a[0], picked), (a[1], ranks)])


@pytest.mark.parametrize("device", DEVICES)
def test_sampling_ops(device):
    logits = rand(2, 40, device=device)
    temps = torch.tensor([0.5, 2.0], device=device)
    check(L.apply_temperature, [logits.clone(), temps], lambda a: [(a[0], logits / temps[:, None])])
    offs = torch.tensor([0, 2, 3], dtype=torch.int32, device=device)
    toks = torch.tensor([1, 7, 30], dtype=torch.int32, device=device)

    def masked(a):
        want = logits.clone()
        want[0, 1] = want[0, 7] = want[1, 30] = -math.inf
        return [(a[0], want)]

    check(L.mask_tokens, [logits.clone(), offs, toks], masked)
    bias = torch.tensor([1.0, -2.0, 3.0], device=device)

    def biased(a):
        want = logits.clone()
        want[0, 1] += 1.0
        want[0, 7] -= 2.0
        want[1, 30] += 3.0
        return [(a[0], want)]

    check(L.apply_logit_bias, [logits.clone(), offs, toks, bias], biased)
    # top-k 3 on row 0 (row 1: off): everything below the 3rd largest becomes -inf.
    top_k = torch.tensor([3, 0], dtype=torch.int32, device=device)
    top_p, min_p = torch.ones(2, device=device), torch.zeros(2, device=device)

    def topk_ref(a):
        want = logits.clone()
        kth = torch.topk(logits[0], 3).values[-1]
        want[0][logits[0] < kth] = -math.inf
        return [(a[0], want)]

    check(L.apply_top_k_top_p_min_p, [logits.clone(), top_k, top_p, min_p], topk_ref)
    # Penalties: repetition on prompt + output ids, frequency and presence on output ids.
    p_off, p_ids = torch.tensor([0, 1, 1], dtype=torch.int32, device=device), torch.tensor([4], dtype=torch.int32,
                                                                                            device=device)
    o_off, o_ids = torch.tensor([0, 2, 2], dtype=torch.int32, device=device), torch.tensor([4, 4], dtype=torch.int32,
                                                                                            device=device)
    rep, freq, pres = (torch.tensor(v, device=device) for v in ([2.0, 1.0], [0.5, 0.0], [0.25, 0.0]))

    def pen_ref(a):
        want = logits.clone()
        v = want[0, 4]
        want[0, 4] = (v / 2.0 if v > 0 else v * 2.0) - 0.5 * 2 - 0.25
        return [(a[0], want)]

    check(L.apply_penalties, [logits.clone(), p_off, p_ids, o_off, o_ids, rep, freq, pres], pen_ref)
    # Greedy rows take the argmax; a seeded row draws the same token twice.
    seeds, offsets = torch.tensor([0, 7], device=device), torch.tensor([0, 3], device=device)
    tz = torch.tensor([0.0, 1.0], device=device)
    first = torch.empty(2, dtype=torch.int32, device=device)
    torch.library.opcheck(L.sample, [first.clone(), logits, tz, seeds, offsets])
    L.sample(first, logits, tz, seeds, offsets)
    again = torch.empty_like(first)
    L.sample(again, logits, tz, seeds, offsets)
    assert first[0].item() == logits[0].argmax().item() and torch.equal(first, again)


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_and_scatter_sampled_ids(device):
    table, ids = rand(10, 8, device=device), torch.tensor([3, 0, 9, 3], dtype=torch.int32, device=device)
    check(L.embedding, [torch.empty(4, 8, device=device), ids, table], lambda a: [(a[0], table[ids.long()])])
    # A vocabulary-parallel rank holding rows [3, 8): its rows, zeros for the ids of other ranks.
    mine = (ids >= 3) & (ids < 8)
    masked = torch.where(mine[:, None], table[ids.long()], torch.zeros(4, 8, device=device))
    check(L.masked_embedding, [torch.empty(4, 8, device=device), ids, table[3:8].contiguous(), 3],
          lambda a: [(a[0], masked)])
    # Async scheduling's scatter: position index[i, 0] of the input ids takes sampled row index[i, 1].
    input_ids = torch.tensor([5, 6, 0, 7, 0, 8], dtype=torch.int32, device=device)
    sampled = torch.tensor([40, 41, 42], dtype=torch.int32, device=device)
    index = torch.tensor([[2, 1], [4, 0]], dtype=torch.int32, device=device)

    def scattered(a):
        want = input_ids.clone()
        want[index[:, 0].long()] = sampled[index[:, 1].long()]
        return [(a[0], want)]

    check(L.scatter_sampled_ids, [input_ids.clone(), sampled, index], scattered)


@pytest.mark.parametrize("device", DEVICES + ["meta"])
def test_rejected_arguments_raise_naming_the_op(device):
    # The op's check runs first: a RuntimeError with its message, nothing written, and the process goes on.
    x, w = torch.ones(3, 16, device=device), torch.ones(15, device=device)
    out = torch.full((3, 16), 7.0, device=device)
    with pytest.raises(RuntimeError, match="rms_norm"):
        L.rms_norm(out, x, w, 1e-6)
    if device != "meta":
        assert torch.equal(out, torch.full_like(out, 7.0))
    with pytest.raises(RuntimeError, match="silu_and_mul"):
        L.silu_and_mul(torch.empty(3, 7, device=device), torch.ones(3, 16, device=device))
    L.rms_norm(out, x, torch.ones(16, device=device), 1e-6)  # a good call afterwards still runs


def test_compiled_llama_block():
    torch._dynamo.reset()
    d, heads, head_dim = 64, 4, 16

    def block(x, w_norm, w_qkv, w_o, w_up, w_down, eps: float = 1e-6):
        h = torch.empty_like(x)
        L.rms_norm(h, x, w_norm, eps)
        qkv = torch.empty(x.shape[0], w_qkv.shape[0], dtype=x.dtype)
        L.linear(qkv, h, w_qkv, None)
        attn = torch.empty_like(x)
        L.linear(attn, qkv[:, :d].contiguous(), w_o, None)
        L.add(attn, x)
        up = torch.empty(x.shape[0], w_up.shape[0], dtype=x.dtype)
        L.linear(up, attn, w_up, None)
        act = torch.empty(x.shape[0], w_up.shape[0] // 2, dtype=x.dtype)
        L.silu_and_mul(act, up)
        out = torch.empty_like(x)
        L.linear(out, act, w_down, None)
        L.add(out, attn)
        return out

    args = (rand(6, d), rand(d), rand(3 * d, d), rand(d, d), rand(4 * d, d), rand(d, 2 * d))
    eager = block(*args)
    compiled = torch.compile(block, fullgraph=True, backend="aot_eager")(*args)
    torch.testing.assert_close(compiled, eager)


def test_quantized_ops_cpu():
    # dynamic_scaled_quantize (per token and per 128-group), scaled_mm (per-token x per-channel) and w4a16_linear
    # against PyTorch's own float8_e4m3fn conversion and dequantize-then-matmul.
    x = rand(5, 256) * 3
    for groups in (1, 2):
        out, scales = torch.empty(5, 256, dtype=torch.float8_e4m3fn), torch.empty(5, groups)
        g = 256 // groups
        want_s = torch.clamp(x.view(5, groups, g).abs().amax(-1) / 448.0, min=1.0 / (448 * 512))
        want_q = (x.view(5, groups, g) / want_s[..., None]).view(5, 256).to(torch.float8_e4m3fn)
        check(L.dynamic_scaled_quantize, [out, scales, x],
              lambda a: [(a[1], want_s), (a[0].float(), want_q.float())], atol=0, rtol=0)
    a = (rand(7, 128) * 100).to(torch.float8_e4m3fn)
    b = (rand(48, 128) * 100).to(torch.float8_e4m3fn)
    sa, sb, bias = rand(7, 1).abs() / 100, rand(48).abs() / 100, rand(48)
    out = torch.empty(7, 48)
    check(L.scaled_mm, [out, a, sa, b, sb, bias],
          lambda args: [(args[0], (a.float() * sa) @ (b.float() * sb[:, None]).T + bias)], atol=1e-3, rtol=1e-3)
    n, k, groups = 24, 256, 2
    qweight = torch.randint(0, 256, (n, k // 2), generator=gen, dtype=torch.uint8)
    wscales, zeros = rand(n, groups).abs() / 10, torch.randint(0, 17, (n, groups), generator=gen, dtype=torch.uint8)
    perm = torch.randperm(k, generator=gen).to(torch.int32)
    q = torch.stack([qweight & 0xF, qweight >> 4], dim=-1).view(n, k).float()
    w = (q - zeros.float().repeat_interleave(k // groups, 1)) * wscales.repeat_interleave(k // groups, 1)
    xw = rand(3, k)
    check(L.w4a16_linear, [torch.empty(3, n), xw, qweight, wscales, zeros, perm, None],
          lambda args: [(args[0], xw[:, perm.long()] @ w.T)], atol=1e-3, rtol=1e-3)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("qtype", [torch.float8_e4m3fn, torch.int8])
def test_fused_per_token_quant_ops(device, qtype):
    # rms_norm_quant, fused_add_rms_norm_quant and silu_and_mul_quant against PyTorch: the unfused op in f32, then
    # per-token scales amax / qmax and the dequantized output within half a quantization step of the unfused row
    # (PyTorch's float8 conversion / int8 rounding define the step; the two sides' norms round differently, so the
    # step is the tolerance, not exact bits). 16-bit activations on CUDA are rounded before quantizing (ops.h).
    qmax = 448.0 if qtype == torch.float8_e4m3fn else 127.0
    act = torch.float32 if device == "cpu" else torch.bfloat16

    def expect(y):
        y = y.to(act).float()  # the unfused op's stored row
        s = torch.clamp(y.abs().amax(-1, keepdim=True) / qmax, min=1.0 / (qmax * 512))
        step = (s / 8) if qtype == torch.float8_e4m3fn else s  # fp8: 3 mantissa bits (relative step <= 2^-3)

        def compare(a):
            q, scales = a[0].float(), a[1]
            torch.testing.assert_close(scales, s, atol=0, rtol=2e-2)
            err = (q * scales - y).abs()
            bound = (y.abs() / 8 if qtype == torch.float8_e4m3fn else 0) + step / 2 + s / 64
            if act != torch.float32:  # the two norms' 16-bit rows may differ by one bf16 ulp
                bound = bound + y.abs() / 128
            assert bool((err <= bound * 1.05 + 1e-6).all()), float((err - bound).max())
            return []
        return compare

    n, d = 5, 96
    x, w = rand(n, d, device=device, dtype=act) * 3, rand(d, device=device)
    out, scales = torch.empty(n, d, dtype=qtype, device=device), torch.empty(n, 1, device=device)
    check(L.rms_norm_quant, [out, scales, x, w, 1e-6], expect(rms(x.float(), w, 1e-6)))
    res = rand(n, d, device=device, dtype=act)
    summed = (x.float() + res.float()).to(act).float()
    check(L.fused_add_rms_norm_quant, [out, scales, x, res.clone(), w, 1e-6], expect(rms(summed, w, 1e-6)))
    g = rand(n, 2 * d, device=device, dtype=act) * 3
    gf = g.float()
    check(L.silu_and_mul_quant, [out, scales, g], expect(torch.nn.functional.silu(gf[:, :d]) * gf[:, d:]))


@pytest.mark.parametrize("device", DEVICES)
def test_moe_ops_match_torch(device):
    # The MoE chain against transformers' block written in PyTorch: softmax -> topk -> renormalise, then per token
    # the weighted sum of down(silu(gate x) * up x) over its experts. Continuous logits (no ties: torch.topk's tie
    # order is unspecified); ties are covered by test_moe_route_ties_to_the_lower_expert.
    T, E, k, H, I = 11, 8, 2, 32, 16
    x, logits = rand(T, H, device=device), rand(T, E, device=device)
    w13, w2 = rand(E, 2 * I, H, device=device) * 0.2, rand(E, H, I, device=device) * 0.2
    probs = torch.softmax(logits.float(), -1)
    tv, ti = torch.topk(probs, k)
    tv = tv / tv.sum(-1, keepdim=True)
    weights, ids = torch.empty(T, k, device=device), torch.empty(T, k, dtype=torch.int32, device=device)
    check(L.moe_route, [weights, ids, logits, 0, 1], lambda a: [(a[1].long(), ti), (a[0], tv)], 1e-6, 1e-5)
    block = 1
    cap = T * k
    sorted_pairs = torch.full((cap,), -7, dtype=torch.int32, device=device)
    pair_rows = torch.empty(T * k, dtype=torch.int32, device=device)
    offsets = torch.empty(E + 1, dtype=torch.int32, device=device)
    touched = torch.full((1,), 5, dtype=torch.int64, device=device)
    L.moe_align(sorted_pairs, pair_rows, offsets, touched, ids, block)
    flat = ids.flatten().long()
    assert touched.item() == 5 + torch.unique(flat).numel()  # a running count: the experts owning a pair added
    assert torch.equal(offsets.long().cpu(), torch.cat([torch.zeros(1, dtype=torch.long),
                                                        torch.bincount(flat, minlength=E).cumsum(0).cpu()]))
    assert torch.equal(sorted_pairs.long(), torch.sort(flat, stable=True).indices)
    # Routing and grouping in one op (CUDA: one kernel at up to 4 tokens): the same outputs as the two above.
    for tokens in (1, T):
        fw, fids = torch.empty(tokens, k, device=device), torch.empty(tokens, k, dtype=torch.int32, device=device)
        fsorted = torch.full((tokens * k,), -7, dtype=torch.int32, device=device)
        frows, foffsets = torch.empty(tokens * k, dtype=torch.int32, device=device), torch.empty_like(offsets)
        ftouched = torch.full((1,), 5, dtype=torch.int64, device=device)
        L.moe_route_and_align(fw, fids, logits[:tokens], 0, 1, fsorted, frows, foffsets, ftouched, block)
        sw, sids = torch.empty_like(fw), torch.empty_like(fids)
        L.moe_route(sw, sids, logits[:tokens], 0, 1)
        ssorted, srows = torch.full_like(fsorted, -7), torch.empty_like(frows)
        soffsets, stouched = torch.empty_like(foffsets), torch.full_like(ftouched, 5)
        L.moe_align(ssorted, srows, soffsets, stouched, sids, block)
        for a, b in ((fw, sw), (fids, sids), (fsorted, ssorted), (frows, srows), (foffsets, soffsets),
                     (ftouched, stouched)):
            assert torch.equal(a, b)
    gate_up, act = torch.empty(cap, 2 * I, device=device), torch.empty(cap, I, device=device)
    down, out = torch.empty(cap, H, device=device), torch.empty(T, H, device=device)
    L.moe_gemm(gate_up, x, w13, sorted_pairs, offsets, k, block)
    L.silu_and_mul(act, gate_up)
    L.moe_gemm(down, act, w2, sorted_pairs, offsets, 0, block)
    # The layer's form of the same step: the activation inside the down projection.
    fused = torch.empty(cap, H, device=device)
    L.moe_gemm_silu(fused, torch.empty(cap, I, device=device), gate_up, w2, sorted_pairs, offsets, block)
    torch.testing.assert_close(fused, down, atol=1e-5, rtol=1e-5)
    L.moe_combine(out, down, weights, pair_rows, None, None)
    want = torch.zeros(T, H, device=device)
    for t in range(T):
        for j in range(k):
            e = int(ti[t, j])
            g, u = (w13[e] @ x[t]).chunk(2)
            want[t] += tv[t, j] * (w2[e] @ (torch.nn.functional.silu(g) * u))
    torch.testing.assert_close(out, want, atol=1e-4, rtol=1e-4)
    # The combine folded into the next residual add + RMSNorm.
    res0, nw = rand(T, H, device=device), rand(H, device=device)
    summed = res0 + want
    check(L.moe_combine_add_rms_norm, [torch.empty(T, H, device=device), res0.clone(), down, weights, pair_rows, None,
                                       None, nw, 1e-6],
          lambda a: [(a[1], summed), (a[0], rms(summed, nw, 1e-6))])
    if device == "cuda":  # its one-kernel form (hidden > 256, 16-byte rows): the same bits as the two ops
        hb = 512
        eb, rb = rand(cap, hb, device=device, dtype=torch.bfloat16), rand(T, hb, device=device, dtype=torch.bfloat16)
        nb = rand(hb, device=device)
        x1, r1 = torch.empty(T, hb, device=device, dtype=torch.bfloat16), rb.clone()
        L.moe_combine_add_rms_norm(x1, r1, eb, weights, pair_rows, None, None, nb, 1e-6)
        x2, r2 = torch.empty_like(x1), rb.clone()
        L.moe_combine(x2, eb, weights, pair_rows, None, None)
        L.fused_add_rms_norm(x2, r2, nb, 1e-6)
        assert torch.equal(x1, x2) and torch.equal(r1, r2)


@pytest.mark.parametrize("device", DEVICES)
def test_moe_route_ties_to_the_lower_expert(device):
    logits = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, -2.0]], device=device)
    weights, ids = torch.empty(1, 3, device=device), torch.empty(1, 3, dtype=torch.int32, device=device)
    L.moe_route(weights, ids, logits, 1, 0)
    assert ids.tolist() == [[1, 2, 4]]


@pytest.mark.parametrize("device", DEVICES)
def test_moe_route_grouped_matches_deepseek_v3_router(device):
    # transformers' DeepseekV3TopkRouter, written here in PyTorch: sigmoid, + bias, group score = sum of each group's
    # top two, keep topk_group groups, top-k of the rest, weights from the unbiased scores, renormalised, scaled.
    T, E, k, n_group, topk_group, scale = 9, 64, 6, 8, 3, 2.5
    logits, bias = rand(T, E, device=device), rand(E, device=device) * 0.1
    scores = logits.sigmoid()
    choice = scores + bias
    group_scores = choice.view(T, n_group, E // n_group).topk(2, dim=-1)[0].sum(-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1)[1]
    mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1)
    mask = mask.unsqueeze(-1).expand(-1, n_group, E // n_group).reshape(T, E)
    ids_want = torch.topk(choice.masked_fill(~mask.bool(), float("-inf")), k=k, dim=-1)[1]
    w_want = scores.gather(1, ids_want)
    w_want = w_want / (w_want.sum(-1, keepdim=True) + 1e-20) * scale
    weights, ids = torch.empty(T, k, device=device), torch.empty(T, k, dtype=torch.int32, device=device)
    check(L.moe_route_grouped, [weights, ids, logits, bias, n_group, topk_group, 1, scale],
          lambda a: [(a[1].long(), ids_want), (a[0], w_want)], 1e-6, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_mla_ops_match_deepseek_v3_attention(device):
    # transformers' DeepseekV3Attention written in PyTorch (per head: keys [W_UK c, rope(k_pe)], values W_UV c, causal
    # softmax) against the absorbed pipeline over a paged latent cache: batched_linear with W_UK^T, mla_rotary_and_cache
    # (interleaved rope, one padding token with slot -1), mla_attention, batched_linear with W_UV. Request 0 decodes
    # its 6th token (5 cached by an earlier call), request 1 prefills 3 tokens.
    H, L_, R, P, V, block = 4, 32, 16, 16, 16, 4
    scale = 1 / math.sqrt(P + R)
    inv = 1.0 / (10000 ** (torch.arange(0, R, 2).float() / R))
    freqs = torch.arange(16).float()[:, None] * inv[None, :]
    cos_sin = torch.cat([freqs.cos(), freqs.sin()], dim=-1).to(device)
    w_uk, w_uv = rand(H, P, L_, device=device) * 0.3, rand(H, V, L_, device=device) * 0.3
    w_uk_t = w_uk.transpose(1, 2).contiguous()
    table = torch.tensor([[3, 0], [5, 2]], dtype=torch.int32, device=device)
    cache = torch.full((6, block, L_ + R), float("nan"), device=device)
    kv_all = [rand(6, L_ + R, device=device), rand(3, L_ + R, device=device)]  # every position's [c, k_pe] (raw)

    def slot(r, p):
        return int(table[r, p // block]) * block + p % block

    def rope(x, pos):  # interleaved pairs (x[2i], x[2i+1]) rotated by frequency i, kept in place
        c, s = cos_sin[pos, : R // 2], cos_sin[pos, R // 2:]
        out = x.clone()
        out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
        out[..., 1::2] = x[..., 1::2] * c + x[..., 0::2] * s
        return out

    # The cached 5 positions of request 0, written by an earlier step.
    hist = kv_all[0][:5].clone()
    scratch = rand(5, H, R, device=device)
    L.mla_rotary_and_cache(torch.arange(5, device=device), scratch, scratch, hist[:, L_:], hist[:, :L_], cos_sin, 1,
                           cache, torch.tensor([slot(0, p) for p in range(5)], device=device))
    # This step: request 0's position 5, request 1's positions 0..2, one padding token.
    positions = torch.tensor([5, 0, 1, 2, 0], device=device)
    slots = torch.tensor([slot(0, 5), slot(1, 0), slot(1, 1), slot(1, 2), -1], device=device)
    kv = torch.cat([kv_all[0][5:6], kv_all[1], rand(1, L_ + R, device=device)])
    q = rand(5, H, P + R, device=device)
    q_full = torch.full((5, H, L_ + R), float("nan"), device=device)
    q_lat = q_full[:, :, :L_].transpose(0, 1)
    check(L.batched_linear, [q_lat, q[:, :, :P].transpose(0, 1), w_uk_t],
          lambda a: [(a[0], torch.einsum("htp,hlp->htl", q[:, :, :P].transpose(0, 1), w_uk_t))])
    k_pe = kv[:, L_:]
    want_k = rope(k_pe.clone(), positions)
    L.mla_rotary_and_cache(positions, q[:, :, P:], q_full[:, :, L_:], k_pe, kv[:, :L_], cos_sin, 1, cache, slots)
    torch.testing.assert_close(k_pe, want_k, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(q_full[:, :, L_:], rope(q[:, :, P:], positions[:, None]), atol=1e-6, rtol=1e-6)
    qsl = torch.tensor([0, 1, 4], dtype=torch.int32, device=device)
    seq_lens = torch.tensor([6, 3], dtype=torch.int32, device=device)
    o_lat = torch.empty(5, H, L_, device=device)
    L.mla_attention(o_lat, q_full, cache, qsl, seq_lens, table, slots, 2, 1, 3, 6, None, scale)
    o = torch.empty(5, H, V, device=device)
    L.batched_linear(o.transpose(0, 1), o_lat.transpose(0, 1), w_uv)

    want = torch.zeros(5, H, V, device=device)
    for t, (r, pos) in enumerate([(0, 5), (1, 0), (1, 1), (1, 2)]):
        c = kv_all[r][: pos + 1, :L_]
        k_rot = rope(kv_all[r][: pos + 1, L_:], torch.arange(pos + 1, device=device))
        q_rot = rope(q[t, :, P:], torch.full((H,), pos, device=device))
        for h in range(H):
            scores = (c @ w_uk[h].T) @ q[t, h, :P] + k_rot @ q_rot[h]
            want[t, h] = torch.softmax(scores * scale, -1) @ (c @ w_uv[h].T)
    torch.testing.assert_close(o, want, atol=1e-4, rtol=1e-4)
    assert torch.equal(o_lat[4], torch.zeros_like(o_lat[4]))  # the padding token
