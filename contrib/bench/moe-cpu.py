#!/usr/bin/env python3
"""Mixture-of-experts training speed on the CPU (report only, no assertion).

Three runs of the same GPT shape at the same threads, rounds alternated:
  moe    whale-train, Experts=8 TopK=2 ExpertFFN=512 CapacityFactor=1.25
  dense  whale-train, the dense model of the same ACTIVE size (FFN = TopK x
         ExpertFFN = 1024): what a token's forward computes is the same but
         for the router
  torch  the same MoE model in PyTorch: tests/unit/engine/torch_reference.py's
         model with its MoE layer vectorised (the same routing, capacity in
         token order by a cumulative sum, aux and z losses; per-expert index
         and index_add) in fp32 with AdamW
With --ep (default on, --no-ep to skip) two more whale runs of the MoE model
as 2 processes through whale-run, the same global batch:
  dp2    DP 2, every rank runs every expert on its own tokens
  ep2    DP 2 with EP 2: each rank holds the compute of 4 experts, tokens
         move to their expert's rank by all-to-all(v) and back
  ep2nw  ep2 with WHALE_MOE_EP_WINDOW=0: the exchanges read the peers'
         buffers instead of receiving into shared-memory windows
(tokens/s of the whole step; ep2/dp2 is the cost or gain of the exchange at
this size; both ranks share this machine's cores).
Prints median tokens/s (warm-up step excluded) and, for whale, MFU against a
fixed peak (--peak-gflops, so the two whale runs are comparable): the MoE/dense
MFU ratio is the speed per active FLOP (target >= 0.8), whale/torch the
tokens/s ratio (issue target >= 1.2). The same ratio on CPU time (FLOP per
CPU-second of each step, from the metrics' cpu_s) is printed beside it: on a
machine shared with other work the wall-clock one swings by 2x between
rounds, the CPU-time one by a few per cent; it also charges the process's
background threads, which a quiet machine overlaps (there it read 0.84
where the wall-clock ratio read 1.00). --capacity dropless (default) makes
the FLOP count exact; with a capacity factor dropped tokens skip their
experts, which the active-FLOP count does not subtract.

  contrib/bench/moe-cpu.py --build build [--threads 1] [--steps 8] [--rounds 2]
      [--capacity dropless|X]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(os.path.dirname(HERE))
BASE = "Layers=4 Hidden=256 Heads=4 Seq=128 Vocab=256 TiedEmbeddings=yes"
MOE = " Experts=8 TopK=2 ExpertFFN=512 CapacityFactor=%s AuxLoss=0.01 ZLoss=0.001"
DENSE = " FFN=1024"
BATCH = 8

TORCH_CHILD = r'''
import os, sys, time, json, math
sys.path.insert(0, sys.argv[1])
import torch
import torch_reference as R
text, steps, threads, B = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
torch.manual_seed(0)
m = R.desc(text)
d = dict(kv.split("=") for kv in text.split())
C, V, T, E, Fe = m["C"], int(d["Vocab"]), int(d["Seq"]), m["E"], int(d["ExpertFFN"])
def p(*shape, std=0.02):
    return (torch.randn(*shape) * std).requires_grad_(True)
P = {"wte": p(V, C), "wpe": p(T, C), "lnf.w": torch.ones(C, requires_grad=True),
     "lnf.b": torch.zeros(C, requires_grad=True)}
for i in range(m["L"]):
    h = "h.%d." % i
    P[h + "ln1.w"] = torch.ones(C, requires_grad=True); P[h + "ln1.b"] = torch.zeros(C, requires_grad=True)
    P[h + "ln2.w"] = torch.ones(C, requires_grad=True); P[h + "ln2.b"] = torch.zeros(C, requires_grad=True)
    P[h + "attn.qkv.w"] = p(3, C, C); P[h + "attn.qkv.b"] = p(3, C, std=0)
    P[h + "attn.proj.w"] = p(C, C); P[h + "attn.proj.b"] = p(C, std=0)
    P[h + "moe.router.w"] = p(E, C)
    for e in range(E):
        x = h + "moe.expert.%d." % e
        P[x + "fc.w"] = p(Fe, C); P[x + "fc.b"] = p(Fe, std=0)
        P[x + "proj.w"] = p(C, Fe); P[x + "proj.b"] = p(C, std=0)
def moe_vec(h, P, pre, m, st):
    # the same MoE as torch_reference.moe, vectorised (no per-token Python
    # loop): capacity positions in token order from a cumulative sum
    B, T, C = h.shape
    x = h.reshape(B * T, C)
    N, E, K = B * T, m["E"], m["K"]
    logits = x @ P[pre + "moe.router.w"].T
    p = logits.softmax(-1)
    order = torch.sort(-logits.detach(), dim=-1, stable=True).indices[:, :K]
    g = p.gather(1, order)
    if m["renorm"]:
        g = g / g.sum(-1, keepdim=True)
    flat = order.reshape(-1)                      # assignments in token order
    onehot = torch.nn.functional.one_hot(flat, E)
    pos = (onehot.cumsum(0) * onehot).sum(-1) - 1  # position in its expert's list
    cap = math.ceil(m["cf"] * N * K / E) if m["cf"] > 0 else N * K
    keep = pos < cap
    tok = torch.arange(N).repeat_interleave(K)
    gf = g.reshape(-1)
    out = torch.zeros_like(x)
    for e in range(E):
        sel = ((flat == e) & keep).nonzero().squeeze(1)
        if sel.numel() == 0:
            continue
        y = R.ffn(x[tok[sel]], P, pre + "moe.expert.%d." % e, m)
        out = out.index_add(0, tok[sel], gf[sel][:, None] * y)
    f = onehot.sum(0).to(x.dtype) / (N * K)
    aux = E * (f * p.mean(0)).sum()
    z = (torch.logsumexp(logits, -1) ** 2).mean()
    st["loss"] = st["loss"] + m["aux"] * aux + m["z"] * z
    return out.reshape(B, T, C)
R.moe = moe_vec
opt = torch.optim.AdamW(P.values(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)
times = []
for s in range(steps):
    tok = torch.randint(0, V, (B, T)); tgt = torch.randint(0, V, (B, T))
    t0 = time.perf_counter()
    loss = R.forward(P, tok, tgt, m)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    times.append(time.perf_counter() - t0)
print(json.dumps({"tps": [B * T / t for t in times[1:]], "loss": loss.item()}))
'''


def whale(args, text, tmp, tag, launch=(), env=None):
    conf = os.path.join(tmp, tag + ".conf")
    with open(conf, "w") as f:
        f.write("Name=bench-%s %s\n" % (tag, text))
    met = os.path.join(tmp, tag + ".jsonl")
    if launch:
        launch = [os.path.join(args.build, "runtime/tools/run/whale-run")] + list(launch)
    cmd = list(launch) + [os.path.join(args.build, "runtime/tools/train/whale-train"), "--model", conf,
           "--data", args.data, "--format", "bytes", "--steps", str(args.steps), "--batch",
           str(BATCH), "--threads", str(args.threads), "--no-progress", "--metrics", met,
           "--peak-gflops", str(args.peak_gflops)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   env=dict(os.environ, **(env or {})))
    lines = [json.loads(l) for l in open(met)]
    st = [l for l in lines if "step" in l][1:]
    # FLOP per CPU-second of the step (mfu x peak x step_s / cpu_s): what
    # the process computed per second it ran, which time-sharing the cores
    # with other work changes far less than the wall-clock MFU
    rate = [l["mfu"] * args.peak_gflops * l["step_s"] / l["cpu_s"] for l in st if l.get("cpu_s")]
    return [l["tokens_per_s"] for l in st], [l["mfu"] for l in st], rate


def torch_run(args, text):
    py = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(args.threads))
    out = subprocess.run([py, "-c", TORCH_CHILD, os.path.join(SRC, "tests/unit/engine"),
                          text, str(args.steps), str(args.threads), str(BATCH)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out.strip().splitlines()[-1])["tps"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(SRC, "build"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--peak-gflops", type=float, default=100.0)
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-ep", action="store_true", help="skip the DP 2 / EP 2 runs")
    ap.add_argument("--capacity", default="dropless")
    ap.add_argument("--runs", default="moe,dense,torch,dp2,ep2,ep2nw",
                    help="comma-separated runs to make (default: all)")
    args = ap.parse_args()
    moe = MOE % args.capacity
    load0 = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        args.data = os.path.join(tmp, "corpus.txt")
        with open(args.data, "wb") as f:
            for root, _, files in os.walk(os.path.join(SRC, "runtime/src")):
                for n in sorted(files):
                    if n.endswith(".c"):
                        f.write(open(os.path.join(root, n), "rb").read())
        res = {"moe": ([], []), "dense": ([], []), "torch": ([], []), "dp2": ([], []),
               "ep2": ([], []), "ep2nw": ([], [])}
        cpu = {k: [] for k in res}
        launch = {"dp2": ["-n", "2", "--dp", "2"], "ep2": ["-n", "2", "--dp", "2", "--ep", "2"],
                  "ep2nw": ["-n", "2", "--dp", "2", "--ep", "2"]}
        envs = {"ep2nw": {"WHALE_MOE_EP_WINDOW": "0"}}
        for r in range(args.rounds):
            order = [k for k in ["moe", "dense", "torch", "dp2", "ep2", "ep2nw"]
                     if k in args.runs.split(",")]
            if r % 2:
                order.reverse()
            for k in order:
                if k == "torch":
                    if not args.no_torch:
                        res[k][0].extend(torch_run(args, BASE + moe))
                    continue
                if k in launch and args.no_ep:
                    continue
                tps, mfu, rate = whale(args, BASE + (DENSE if k == "dense" else moe), tmp, k,
                                 launch.get(k, ()), envs.get(k))
                res[k][0].extend(tps)
                res[k][1].extend(mfu)
                cpu[k].extend(rate)
    med = {k: statistics.median(v[0]) if v[0] else float("nan") for k, v in res.items()}
    mfu = {k: statistics.median(v[1]) if v[1] else float("nan") for k, v in res.items()}
    print("shape: %s, batch %d, %d thread(s), %d rounds x %d steps, load average %.1f -> %.1f"
          % (BASE, BATCH, args.threads, args.rounds, args.steps, load0, os.getloadavg()[0]))
    print("  whale MoE   (%s): %8.0f tokens/s, MFU %.1f %% of %.0f GFLOP/s" % (moe.strip(), med["moe"], 100 * mfu["moe"], args.peak_gflops))
    print("  whale dense (FFN=1024, same active size): %8.0f tokens/s, MFU %.1f %%" % (med["dense"], 100 * mfu["dense"]))
    print("  per active FLOP, MoE / dense: %.2f (target >= 0.8)" % (mfu["moe"] / mfu["dense"]))
    if cpu["moe"] and cpu["dense"]:
        print("  per active FLOP on CPU time (GFLOP per CPU-second of every thread, less "
              "sensitive to load, charges background threads too): "
              "MoE %.1f, dense %.1f, MoE / dense %.2f"
              % (statistics.median(cpu["moe"]), statistics.median(cpu["dense"]),
                 statistics.median(cpu["moe"]) / statistics.median(cpu["dense"])))
    if not args.no_torch:
        print("  PyTorch MoE (torch_reference.py, fp32, AdamW): %8.0f tokens/s" % med["torch"])
        print("  whale / PyTorch MoE tokens/s: %.2f (target >= 1.2)" % (med["moe"] / med["torch"]))
    if not args.no_ep:
        print("  whale MoE, 2 ranks DP 2      : %8.0f tokens/s" % med["dp2"])
        print("  whale MoE, 2 ranks EP 2 x DP 2: %8.0f tokens/s (EP 2 / DP 2: %.2f)"
              % (med["ep2"], med["ep2"] / med["dp2"]))
        print("  whale MoE, EP 2 x DP 2 without receive windows: %8.0f tokens/s (windows / none: %.2f)"
              % (med["ep2nw"], med["ep2"] / med["ep2nw"]))
    for k, v in res.items():
        if v[0]:
            print("  %-6s tokens/s per step, in run order: %s" % (k, " ".join("%.0f" % t for t in v[0])))


if __name__ == "__main__":
    main()
