#!/usr/bin/env python3
"""whale-train vs PyTorch: training tokens/s on the same GPT configuration,
same thread count, measured alternately in the same run.

PyTorch runs at its best CPU settings: OMP_WAIT_POLICY=passive (set before
torch loads libgomp) and torch.set_num_threads(threads); fp32, AdamW, the
same GPT-2 architecture (pre-LN, GELU-tanh MLP, causal attention, tied
output embedding). whale-train's tokens/s excludes its first (warm-up) step,
and so does PyTorch's.

  contrib/bench/train-vs-pytorch.py --build build [--shapes small,124m]
      [--reps 3] [--steps 6] [--threads 2]

Prints per-run figures, then over all steps of all runs the median and the
best step (the machine may be shared: the best step approximates an idle
machine, the median a busy one), tokens per CPU-second (work efficiency, not
throughput: it ignores how well each side keeps all its threads busy), the
whale/PyTorch ratios, and
whale's MFU against the best OpenBLAS sgemm rate whale-train measured in the
same run.
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile

SHAPES = {
    # name: (preset, layers, hidden, heads, vocab, seq, batch)
    "small": ("gpt-small", 4, 256, 4, 256, 128, 8),
    "124m": ("gpt2-124m", 12, 768, 12, 50257, 256, 4),
}

TORCH_CHILD = r'''
import os, sys, time, json
import torch, torch.nn as nn, torch.nn.functional as F
L, C, H, V, T, B, steps, threads = map(int, sys.argv[1:9])
torch.set_num_threads(threads)
torch.manual_seed(0)

class Block(nn.Module):
    def __init__(s):
        super().__init__()
        s.ln1, s.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        s.qkv, s.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        s.fc, s.mproj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        s.register_buffer("mask", torch.tril(torch.ones(T, T, dtype=torch.bool)))
    def forward(s, x):
        b, t, c = x.shape
        q, k, v = s.qkv(s.ln1(x)).split(C, dim=2)
        q = q.view(b, t, H, c // H).transpose(1, 2)
        k = k.view(b, t, H, c // H).transpose(1, 2)
        v = v.view(b, t, H, c // H).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / (c // H) ** 0.5)
        att = att.masked_fill(~s.mask[:t, :t], float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + s.proj(y)
        return x + s.mproj(F.gelu(s.fc(s.ln2(x)), approximate="tanh"))

class GPT(nn.Module):
    def __init__(s):
        super().__init__()
        s.wte, s.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        s.h = nn.ModuleList([Block() for _ in range(L)])
        s.lnf = nn.LayerNorm(C)
    def forward(s, idx, tgt):
        x = s.wte(idx) + s.wpe(torch.arange(idx.shape[1]))
        for blk in s.h:
            x = blk(x)
        logits = s.lnf(x) @ s.wte.weight.t()
        return F.cross_entropy(logits.view(-1, V), tgt.view(-1))

m = GPT()
opt = torch.optim.AdamW(m.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
times, cpus = [], []
for i in range(steps):
    idx = torch.randint(0, V, (B, T)); tgt = torch.randint(0, V, (B, T))
    c0 = time.process_time()
    t0 = time.perf_counter()
    loss = m(idx, tgt)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
    opt.step()
    times.append(time.perf_counter() - t0)
    cpus.append(time.process_time() - c0)
run = times[1:] if len(times) > 1 else times
crun = cpus[1:] if len(cpus) > 1 else cpus
print(json.dumps({"step_tokens_per_s": [B * T / t for t in run],
                  "step_tokens_per_cpu_s": [B * T / c for c in crun]}))
'''


def make_data(path, vocab, n):
    import random
    rnd = random.Random(1)
    if vocab <= 256:
        with open(path, "wb") as f:
            f.write(bytes(rnd.randrange(vocab) for _ in range(n)))
    else:
        with open(path, "wb") as f:
            f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
            f.write(struct.pack("<%dH" % n, *(rnd.randrange(vocab) for _ in range(n))))


def run_torch(shape, steps, threads):
    _, L, C, H, V, T, B = SHAPES[shape]
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(threads))
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    out = subprocess.run([py, "-c", TORCH_CHILD] + [str(v) for v in (L, C, H, V, T, B, steps, threads)],
                         env=env, check=True, capture_output=True, text=True).stdout
    d = json.loads(out.strip().splitlines()[-1])
    return d["step_tokens_per_s"], d["step_tokens_per_cpu_s"]


def run_whale(build, shape, steps, threads, data, tmp):
    preset, _, _, _, _, T, B = SHAPES[shape]
    exe = os.path.join(build, "runtime", "tools", "train", "whale-train")
    metrics = os.path.join(tmp, "m.jsonl")
    out = subprocess.run([exe, "--model", preset, "--data", data, "--steps", str(steps),
                          "--batch", str(B), "--seq", str(T), "--threads", str(threads),
                          "--no-progress", "--log-every", "1000000", "--metrics", metrics],
                         check=True, capture_output=True, text=True).stdout
    s = json.loads(out.strip().splitlines()[-1])["summary"]
    steps = [json.loads(l) for l in open(metrics) if l.startswith('{"step"')][1:]
    return ([x["tokens_per_s"] for x in steps], [x["mfu"] for x in steps], s["peak_gflops"],
            [B * T / x["cpu_s"] for x in steps if x.get("cpu_s")])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--steps", type=int, default=0, help="steps per run (default 20 small, 5 124m)")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for shape in a.shapes.split(","):
            preset, L, C, H, V, T, B = SHAPES[shape]
            steps = a.steps or (20 if shape == "small" else 5)
            data = os.path.join(tmp, shape + (".bin" if V > 256 else ".txt"))
            make_data(data, V, max(200000, 4 * B * (T + 1) * steps))
            wt, tt, mfu, peak, wc, tc = [], [], [], [], [], []
            for r in range(a.reps):
                t, t_cpu = run_torch(shape, steps, a.threads)
                w, m, p, w_cpu = run_whale(a.build, shape, steps, a.threads, data, tmp)
                tt += t; wt += w; mfu += m; peak.append(p); tc += t_cpu; wc += w_cpu
                print(f"{shape} rep {r + 1}: step tokens/s median pytorch {statistics.median(t):.0f}, "
                      f"whale {statistics.median(w):.0f} (ratio {statistics.median(w) / statistics.median(t):.2f}); "
                      f"sgemm peak {p:.0f} GFLOP/s", flush=True)
            mw, mt = statistics.median(wt), statistics.median(tt)
            bw, bt = max(wt), max(tt)
            pk = max(peak)
            print(f"{shape} ({preset}: L={L} d={C} T={T} B={B}, {a.threads} threads, {len(tt)} steps each):\n"
                  f"  median step: pytorch {mt:.0f} tok/s, whale {mw:.0f} tok/s, ratio {mw / mt:.2f}\n"
                  f"  best step:   pytorch {bt:.0f} tok/s, whale {bw:.0f} tok/s, ratio {bw / bt:.2f}\n"
                  f"  per CPU-second (median): pytorch {statistics.median(tc):.0f} tok, whale "
                  f"{statistics.median(wc):.0f} tok, ratio {statistics.median(wc) / statistics.median(tc):.2f}\n"
                  f"  whale MFU (best step) {100 * max(mfu) * statistics.median(peak) / pk:.0f} % "
                  f"of the best sgemm peak measured, {pk:.0f} GFLOP/s")

if __name__ == "__main__":
    main()
