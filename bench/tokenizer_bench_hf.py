#!/usr/bin/env python3
# Runs build/bin/tokenizer_bench and HF `tokenizers` on the identical corpus (the bench dumps it), then prints
# encode throughput side by side with the ratio ours / HF, single-threaded and with all threads.
# Each measurement follows one untimed warm-up pass over the corpus (word caches filled on both sides).
# Usage: .venv/bin/python bench/tokenizer_bench_hf.py [--repeats N] [--min-mb N]
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "tokenizer"))

HF_WORKER = r"""
import json, sys, time
from tokenizers import Tokenizer
docs = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8")]
nbytes = sum(len(d.encode()) for d in docs)
t = Tokenizer.from_file(sys.argv[2])
t.encode_batch(docs, add_special_tokens=False)  # warm-up, as ours
best = 1e30
for _ in range(int(sys.argv[3])):
    t0 = time.perf_counter()
    t.encode_batch(docs, add_special_tokens=False)
    best = min(best, time.perf_counter() - t0)
print(nbytes / 1e6 / best)
"""


def hf_rate(corpus, tokenizer_json, repeats, threads):
    env = dict(os.environ)
    if threads == 1:
        env.update(RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    else:
        env.pop("RAYON_NUM_THREADS", None)
        env["TOKENIZERS_PARALLELISM"] = "true"
    r = subprocess.run([sys.executable, "-c", HF_WORKER, str(corpus), str(tokenizer_json), str(repeats)],
                       env=env, capture_output=True, text=True, check=True)
    return float(r.stdout.strip())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-mb", type=float, default=4)
    ap.add_argument("--bench", default=str(ROOT / "build" / "bin" / "tokenizer_bench"))
    args = ap.parse_args()
    import hf_cases
    testdata = pathlib.Path(os.environ.get("LLMSERVE_TESTDATA", ROOT.parent / "shared" / "testdata"))
    tmp = pathlib.Path(tempfile.mkdtemp())
    dirs = {n: testdata / "tokenizers" / n for n in
            ["tinyllama-1.1b-chat-v1.0", "mistral-7b-instruct-v0.3", "phi-3-mini-4k-instruct", "phi-2", "falcon-7b"]}
    rebuilt = hf_cases.build_reconstructed(testdata, tmp)
    dirs.update({"gpt2": rebuilt["gpt2"], "llama3.2": rebuilt["llama3.2"]})
    corpus = tmp / "corpus.jsonl"
    base = [args.bench, "--testdata", str(testdata), "--min-mb", str(args.min_mb), "--repeats", "1"]
    header = subprocess.run(base + ["--dump-corpus", str(corpus)], capture_output=True, text=True, check=True)
    print(header.stdout.splitlines()[0])
    print(f"{'tokenizer':28s} {'ours 1t':>9s} {'HF 1t':>9s} {'ratio':>7s} {'ours all':>9s} {'HF all':>9s} {'ratio':>7s}"
          "   (MB/s, best of %d interleaved rounds)" % args.repeats)
    for name, d in dirs.items():
        # Rounds alternate ours and HF so that load from other processes hits both alike; keep each one's best.
        o1 = on = hf1 = hfn = 0.0
        for _ in range(args.repeats):
            out = subprocess.run(base + ["--tokenizer", str(d)], capture_output=True, text=True, check=True).stdout
            _, _, one, alls = out.splitlines()[2].split()
            o1, on = max(o1, float(one)), max(on, float(alls))
            hf1 = max(hf1, hf_rate(corpus, d / "tokenizer.json", 1, 1))
            hfn = max(hfn, hf_rate(corpus, d / "tokenizer.json", 1, 0))
        print(f"{name:28s} {o1:9.2f} {hf1:9.2f} {o1 / hf1:7.2f} {on:9.2f} {hfn:9.2f} {on / hfn:7.2f}", flush=True)

if __name__ == "__main__":
    main()
