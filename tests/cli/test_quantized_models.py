# Quantized checkpoints on the CPU against their dequantized twins (tests/fixtures/make_quantized_checkpoints.py):
# greedy ids by vLLM's rule (at the first differing token each side's choice is in the other's top-5) and logprobs
# of the shared prefix within a tolerance that covers activation quantization; plus the load errors of malformed
# checkpoints and configs, each naming the tensor or field.
import json
import os
import pathlib
import shutil
import struct
import sys

import pytest
from cli_helpers import run

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fixtures"))
import make_quantized_checkpoints as mqc  # noqa: E402

PROMPTS = [[1, 17, 80, 5, 33], [1, 200, 3, 3, 91, 120, 7, 64, 12]]
MAX_TOKENS = 12
# W4A16 runs f32 activations over exactly the twin's weights: only summation order differs. The W8A8 schemes
# quantize activations too (fp8: 3 mantissa bits, int8: per token), which the twin does not. Observed over the
# three architectures (max, mean) of |logprob difference| over the top-5 entries both sides share: fp8 (0.13, 0.03),
# int8 (0.04, 0.008); the bounds are about twice that. A wrong packing or scale layout moves them by whole nats.
TOLERANCE = {"gptq_g128": (2e-3, 1e-3), "gptq_g128_act_order": (2e-3, 1e-3), "gptq_channel": (2e-3, 1e-3),
             "awq_g128": (2e-3, 1e-3), "ct_int8_channel": (0.08, 0.016), "ct_fp8_channel": (0.25, 0.06),
             "fp8_tensor_static": (0.25, 0.06), "fp8_block": (0.25, 0.06)}
BASES = {"llama": "llama_gqa_f32", "qwen2": "qwen2_bias_f32", "qwen3": "qwen3_qknorm_f32"}


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    out = tmp_path_factory.mktemp("quantized")
    for arch, base in BASES.items():
        mqc.make(out / arch, ROOT / "tests" / "fixtures" / "models" / base, list(mqc.FORMATS))
    return out


def generate(llmserve_bin, model, prompt, *extra, check=True):
    return run(llmserve_bin, "generate", "--model", str(model), "--prompt-ids", ",".join(map(str, prompt)),
               "--output", "json", "--max-tokens", str(MAX_TOKENS), "--temperature", "0", "--logprobs", "5",
               "--ignore-eos", *extra, check=check)


def steps(out):
    o = json.loads(out)
    return [(lp["token_id"], {t[0]: t[1] for t in lp["top"]}, lp["logprob"]) for lp in o["logprobs"]]


@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("fmt", list(mqc.FORMATS))
def test_quantized_model_matches_its_dequantized_twin(llmserve_bin, checkpoints, arch, fmt):
    max_tol, mean_tol = TOLERANCE[fmt]
    diffs = []
    for prompt in PROMPTS:
        ours = steps(generate(llmserve_bin, checkpoints / arch / fmt, prompt).stdout)
        twin = steps(generate(llmserve_bin, checkpoints / arch / (fmt + "_dequantized"), prompt).stdout)
        for (a, a_top, a_lp), (b, b_top, b_lp) in zip(ours, twin):
            if a != b:  # vLLM's rule: the first difference is a near-tie both sides rank in their top-5
                assert a in b_top and b in a_top, (fmt, prompt, ours, twin)
                break
            diffs += [abs(lp - b_top[tok]) for tok, lp in a_top.items() if tok in b_top]
    if diffs:  # empty only when the very first token is a (checked) near-tie
        assert max(diffs) <= max_tol and sum(diffs) / len(diffs) <= mean_tol, (fmt, max(diffs), sum(diffs) / len(diffs))


def rewrite_tensors(model_dir, edit):
    """Reads model.safetensors, applies edit(header dict, data bytes) -> (header, data), writes it back."""
    path = model_dir / "model.safetensors"
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        tensors[name] = [info["dtype"], info["shape"], data[b:e]]
    edit(tensors)
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, blob) in sorted(tensors.items()):
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


L0 = "model.layers.0."


def drop(name):
    return lambda t: t.pop(name)


def reshape(name, shape):
    """The tensor stored with another shape (its bytes repeated / cut to fit)."""
    def edit(t):
        dtype, _, blob = t[name]
        size = {"F32": 4, "I32": 4, "F16": 2, "F8_E4M3": 1, "I8": 1}[dtype]
        count = 1
        for d in shape:
            count *= d
        t[name] = [dtype, shape, (blob * 2)[:count * size]]
    return edit


MALFORMED = [
    ("ct_fp8_channel", drop(L0 + "self_attn.k_proj.weight_scale"), L0 + "self_attn.k_proj.weight_scale"),
    ("fp8_tensor_static", drop(L0 + "mlp.up_proj.input_scale"), L0 + "mlp.up_proj.input_scale"),
    ("fp8_block", reshape(L0 + "mlp.down_proj.weight_scale_inv", [2, 3]), L0 + "mlp.down_proj.weight_scale_inv"),
    ("gptq_g128", reshape(L0 + "self_attn.o_proj.scales", [3, 256]), L0 + "self_attn.o_proj.scales"),
    ("gptq_g128", drop(L0 + "mlp.gate_proj.qzeros"), L0 + "mlp.gate_proj.qzeros"),
    ("gptq_g128_act_order", drop(L0 + "self_attn.v_proj.g_idx"), L0 + "self_attn.v_proj.g_idx"),
    ("awq_g128", reshape(L0 + "mlp.down_proj.qweight", [512, 31]), L0 + "mlp.down_proj.qweight"),
    ("ct_int8_channel", reshape(L0 + "self_attn.q_proj.weight", [256, 255]), L0 + "self_attn.q_proj.weight"),
]


@pytest.mark.parametrize("fmt,edit,name", MALFORMED, ids=[f"{m[0]}-{m[2].rsplit('.', 2)[-2]}-{i}"
                                                         for i, m in enumerate(MALFORMED)])
def test_malformed_checkpoint_names_the_tensor(llmserve_bin, checkpoints, tmp_path, fmt, edit, name):
    model = tmp_path / fmt
    shutil.copytree(checkpoints / "llama" / fmt, model)
    rewrite_tensors(model, edit)
    r = generate(llmserve_bin, model, PROMPTS[0], check=False)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert name in r.stderr, r.stderr


def test_g_idx_that_is_not_a_grouping_is_refused(llmserve_bin, checkpoints, tmp_path):
    model = tmp_path / "bad_g_idx"
    shutil.copytree(checkpoints / "llama" / "gptq_g128_act_order", model)

    def edit(t):
        for proj in ("mlp.gate_proj", "mlp.up_proj"):
            dtype, shape, blob = t[L0 + proj + ".g_idx"]
            t[L0 + proj + ".g_idx"] = [dtype, shape, struct.pack("<i", 1) * shape[0]]  # every column in group 1
    rewrite_tensors(model, edit)
    r = generate(llmserve_bin, model, PROMPTS[0], check=False)
    assert r.returncode != 0 and "g_idx" in r.stderr, r.stderr


CONFIG_ERRORS = [
    ({"quant_method": "gptq", "bits": 3, "group_size": 128}, "quantization_config.bits"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 64}, "quantization_config.group_size"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False}, "quantization_config.sym"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "checkpoint_format": "gptq_v2"},
     "quantization_config.checkpoint_format"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemv"}, "quantization_config.version"),
    ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64}, "quantization_config.q_group_size"),
    ({"quant_method": "fp8", "weight_block_size": [64, 64], "activation_scheme": "dynamic"},
     "quantization_config.weight_block_size"),
    ({"quant_method": "bitsandbytes"}, "quantization_config.quant_method 'bitsandbytes'"),
    ({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["model.layers.0.mlp.down_proj"]},
     "quantization_config.ignored_layers"),
]


@pytest.mark.parametrize("qc,field", CONFIG_ERRORS, ids=[c[1].split(".")[-1].split()[0] + str(i)
                                                         for i, c in enumerate(CONFIG_ERRORS)])
def test_unsupported_quantization_config_names_the_field(llmserve_bin, checkpoints, tmp_path, qc, field):
    model = tmp_path / "m"
    shutil.copytree(checkpoints / "llama" / "gptq_g128", model)
    config = json.loads((model / "config.json").read_text())
    config["quantization_config"] = qc
    (model / "config.json").write_text(json.dumps(config))
    r = generate(llmserve_bin, model, PROMPTS[0], check=False)
    assert r.returncode != 0 and field in r.stderr, r.stderr


def test_online_fp8_quantization_flag(llmserve_bin, checkpoints):
    twin = checkpoints / "llama" / "ct_fp8_channel_dequantized"
    ours = steps(generate(llmserve_bin, twin, PROMPTS[1], "--quantization", "fp8").stdout)
    plain = steps(generate(llmserve_bin, twin, PROMPTS[1]).stdout)
    assert ours[0][0] in plain[0][1] and abs(ours[0][2] - plain[0][2]) <= 0.25


@pytest.mark.parametrize("flag,message", [
    ("int4", "--quantization int4: not supported"),
    ("awq", "--quantization awq: the checkpoint has no quantization_config"),
])
def test_quantization_flag_errors(llmserve_bin, checkpoints, flag, message):
    r = generate(llmserve_bin, checkpoints / "llama" / "gptq_g128_dequantized", PROMPTS[0], "--quantization", flag,
                 check=False)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_quantization_flag_must_match_the_checkpoint(llmserve_bin, checkpoints):
    r = generate(llmserve_bin, checkpoints / "llama" / "gptq_g128", PROMPTS[0], "--quantization", "awq", check=False)
    assert r.returncode != 0 and "quant_method is 'gptq'" in r.stderr, r.stderr


@pytest.mark.parametrize("var", ["LLMSERVE_W4A16_GEMM_MIN_ROWS", "LLMSERVE_W4A16_GEMM_MAX_ROWS"])
@pytest.mark.parametrize("value", ["abc", "0", "12x"])
def test_bad_w4a16_gemm_rows_name_the_variable(llmserve_bin, checkpoints, var, value, monkeypatch):
    monkeypatch.setenv(var, value)
    r = generate(llmserve_bin, checkpoints / "llama" / "gptq_g128", PROMPTS[0], check=False)
    assert r.returncode != 0 and f"{var}='{value}' is not a positive integer" in r.stderr, r.stderr


# On the GPU machine (LLMSERVE_GPU_TESTS=1, LLMSERVE_BIN=build-gpu/bin/llmserve): each quantized model on cuda
# (bf16 activations) against the same checkpoint on the CPU (f32), by vLLM's rule; logprobs within 0.3 (bf16).
# W4A16 formats run twice: as shipped (the GEMV for these short batches) and with LLMSERVE_W4A16_GEMM_MIN_ROWS=1 (the
# tensor-core GEMM layout of ops::w4a16_gemm at every batch, prompts and decode alike).
@pytest.mark.skipif(os.environ.get("LLMSERVE_GPU_TESTS") != "1", reason="needs a GPU build (LLMSERVE_GPU_TESTS=1)")
@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("fmt,gemm_min_rows", [(f, None) for f in mqc.FORMATS] +
                         [(f, "1") for f in mqc.FORMATS if f.startswith(("gptq", "awq"))])
def test_gpu_greedy_matches_cpu(llmserve_bin, checkpoints, arch, fmt, gemm_min_rows, monkeypatch):
    if gemm_min_rows is not None:
        monkeypatch.setenv("LLMSERVE_W4A16_GEMM_MIN_ROWS", gemm_min_rows)
    for prompt in PROMPTS:
        gpu = steps(generate(llmserve_bin, checkpoints / arch / fmt, prompt, "--device", "cuda", "--dtype",
                             "bfloat16").stdout)
        cpu = steps(generate(llmserve_bin, checkpoints / arch / fmt, prompt).stdout)
        for (a, a_top, a_lp), (b, b_top, b_lp) in zip(gpu, cpu):
            if a != b:
                assert a in b_top and b in a_top, (fmt, prompt, gpu, cpu)
                break
            assert abs(a_lp - b_lp) <= 0.3, (fmt, prompt, a_lp, b_lp)


# LLMSERVE_FUSED_ACT_QUANT=1 on the CPU: the norms and the SiLU before the W8A8 GEMMs with dynamic per-token
# activations quantize in their own kernels (ops.h: rms_norm_quant, fused_add_rms_norm_quant, silu_and_mul_quant),
# with the unfused pair's arithmetic: the same output, logprobs bit for bit. qwen3 (q/k norms) runs QKV as three
# row-sliced GEMMs on quantized input; block fp8 quantizes per token and group of 128 columns in the same kernels.
@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("fmt", ["ct_fp8_channel", "ct_int8_channel", "fp8_block"])
def test_fused_activation_quantization_is_exact_on_cpu(llmserve_bin, checkpoints, arch, fmt, monkeypatch):
    runs = {}
    for value in ("0", "1"):
        monkeypatch.setenv("LLMSERVE_FUSED_ACT_QUANT", value)
        runs[value] = steps(generate(llmserve_bin, checkpoints / arch / fmt, PROMPTS[1]).stdout)
    assert runs["0"] == runs["1"]


@pytest.mark.parametrize("value", ["2", "yes", ""])
def test_bad_fused_act_quant_switch_names_the_variable(llmserve_bin, checkpoints, value, monkeypatch):
    monkeypatch.setenv("LLMSERVE_FUSED_ACT_QUANT", value)
    r = generate(llmserve_bin, checkpoints / "llama" / "ct_fp8_channel", PROMPTS[0], check=False)
    assert r.returncode != 0 and f"LLMSERVE_FUSED_ACT_QUANT='{value}' must be 0 or 1" in r.stderr, r.stderr


# On the GPU machine: the fused kernels (the default on cuda) against LLMSERVE_FUSED_ACT_QUANT=0 on the same device.
# The quantized activations are bit-identical (tests/gpu/quant_gpu_test.cc), so the GEMMs see the same bytes: the
# same ids, logprobs equal up to 1e-3 (a margin for any run-to-run reduction order; a wrong scale or row moves them
# by whole nats).
@pytest.mark.skipif(os.environ.get("LLMSERVE_GPU_TESTS") != "1", reason="needs a GPU build (LLMSERVE_GPU_TESTS=1)")
@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("fmt", ["ct_fp8_channel", "ct_int8_channel", "fp8_block"])
def test_gpu_fused_activation_quantization_matches_unfused(llmserve_bin, checkpoints, arch, fmt, monkeypatch):
    for prompt in PROMPTS:
        runs = {}
        for value in ("0", "1"):
            monkeypatch.setenv("LLMSERVE_FUSED_ACT_QUANT", value)
            runs[value] = steps(generate(llmserve_bin, checkpoints / arch / fmt, prompt, "--device", "cuda",
                                         "--dtype", "bfloat16").stdout)
        assert [s[0] for s in runs["0"]] == [s[0] for s in runs["1"]], (fmt, prompt, runs)
        for (_, _, a_lp), (_, _, b_lp) in zip(runs["0"], runs["1"]):
            assert abs(a_lp - b_lp) <= 1e-3, (fmt, prompt, a_lp, b_lp)


# On the GPU machine: block fp8 with a 40-token prompt, so that the prefill's GEMMs (m = 40) run DeepGEMM's kernel
# (17 to 256 rows; PROMPTS stay on the GEMV), against the same checkpoint on the CPU by vLLM's rule, and the same
# with LLMSERVE_DEEP_GEMM=0 (CUTLASS's blockwise kernel). A wrong scale layout or tile moves logprobs by whole nats.
LONG_PROMPT = [1] + [(7 * i + 3) % 250 + 2 for i in range(39)]


@pytest.mark.skipif(os.environ.get("LLMSERVE_GPU_TESTS") != "1", reason="needs a GPU build (LLMSERVE_GPU_TESTS=1)")
@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("deep_gemm", ["1", "0"])
def test_gpu_block_fp8_prefill_matches_cpu(llmserve_bin, checkpoints, arch, deep_gemm, monkeypatch):
    model = checkpoints / arch / "fp8_block"
    cpu = steps(generate(llmserve_bin, model, LONG_PROMPT).stdout)
    monkeypatch.setenv("LLMSERVE_DEEP_GEMM", deep_gemm)
    r = generate(llmserve_bin, model, LONG_PROMPT, "--device", "cuda", "--dtype", "bfloat16")
    path = "DeepGEMM's block-fp8 kernel" if deep_gemm == "1" else "CUTLASS blockwise-scaled fp8 GEMM"
    assert path in r.stderr, r.stderr
    gpu = steps(r.stdout)
    for (a, a_top, a_lp), (b, b_top, b_lp) in zip(gpu, cpu):
        if a != b:
            assert a in b_top and b in a_top, (arch, gpu, cpu)
            break
        assert abs(a_lp - b_lp) <= 0.3, (arch, a_lp, b_lp)


# On the GPU machine: CUDA graphs (FULL decode graphs, the default; sizes 1, 2, 4 to keep the capture short) against
# --enforce-eager for each quantized format, with the fused activation quantization on (the default on cuda).
# Replays run the eager kernels on the same inputs, so ids and logprobs are equal bit for bit (as printed): a graph
# that captured a stale scale pointer, a host-side activation scale or a buffer the eager path reallocates differs.
@pytest.mark.skipif(os.environ.get("LLMSERVE_GPU_TESTS") != "1", reason="needs a GPU build (LLMSERVE_GPU_TESTS=1)")
@pytest.mark.parametrize("arch", list(BASES))
@pytest.mark.parametrize("fmt", list(mqc.FORMATS))
def test_gpu_graphs_equal_eager(llmserve_bin, checkpoints, arch, fmt):
    model = checkpoints / arch / fmt
    cuda = ("--device", "cuda", "--dtype", "bfloat16")
    graphs = steps(generate(llmserve_bin, model, PROMPTS[1], *cuda, "--cuda-graph-capture-sizes", "1,2,4").stdout)
    eager = steps(generate(llmserve_bin, model, PROMPTS[1], *cuda, "--enforce-eager").stdout)
    assert graphs == eager, (arch, fmt)


@pytest.mark.parametrize("fmt,tensor,message", [
    ("awq_g128", "mlp.gate_proj.qweight", "is not a multiple of 8"),  # AWQ packs 8 outputs per int32
    ("gptq_g128", "mlp.gate_proj.qweight", "has shape [32, 512], expected [32, 260]"),  # GPTQ packs the input
])
def test_packed_dimension_that_does_not_divide_names_the_tensor(llmserve_bin, checkpoints, tmp_path, fmt, tensor,
                                                                 message):
    # A config whose intermediate_size (260) is not a multiple of the 8 nibbles packed per int32.
    model = tmp_path / fmt
    shutil.copytree(checkpoints / "llama" / fmt, model)
    config = json.loads((model / "config.json").read_text())
    config["intermediate_size"] = 260
    (model / "config.json").write_text(json.dumps(config))
    r = generate(llmserve_bin, model, PROMPTS[0], check=False)
    assert r.returncode != 0 and L0 + tensor in r.stderr and message in r.stderr, r.stderr
