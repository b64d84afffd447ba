#!/usr/bin/env python3
"""whale-train beside what users would run instead, multi-rank, CPU:
data parallelism against PyTorch DistributedDataParallel (gloo, with
gradient_as_bucket_view and static_graph), and ZeRO-3 against PyTorch FSDP
FULL_SHARD and FSDP2 fully_shard (gloo) -- or, where the installed torch
cannot run FSDP on CPU, against DDP + ZeroRedundancyOptimizer (ZeRO-1),
labelled as such, with whale-train ZeRO-1 beside it as the like-for-like;
and whale ZeRO-1 against DDP + ZeroRedundancyOptimizer (ZeRO-1 at DDP's
best settings) at every DP rank count, since sharding the optimizer is the
cheapest speed-up either side has once AdamW is a sizeable part of the step
(gpt2-124m on one thread per rank).

Same model (GPT-2 architecture, fp32, AdamW, clip 1.0), same global batch,
sequence, rank count, threads per rank (whale-train --threads, torch
set_num_threads, OMP_NUM_THREADS) and the same launcher for both sides:
whale-run -n N (one machine) and/or srun -N N -n N (one rank per node of a
Slurm allocation, e.g. the minicluster). Rounds alternate torch / whale so
both see the same machine load; per-step global tokens/s after the first
step, median and best over all rounds, the load average beside each round.

  contrib/bench/train-vs-peers.py [--build build] [--launcher whale-run,srun]
      [--ranks 2,4] [--zero3-ranks 2] [--zero1-ranks 2,4] [--model gpt-small|gpt2-124m] [--batch 16]
      [--steps 8] [--rounds 3] [--threads 1] [--torch-python /usr/bin/python3]
      [--raise]

On a shared machine, raise both the script and its ranks (one benchmark at
a time): flock LOCK setsid -w bash -c 'echo -20 > /proc/self/autogroup;
exec contrib/bench/train-vs-peers.py --raise ...' (srun ranks live in their
step's own scheduling group, which only --raise reaches).

--torch-python picks the interpreter whose torch is the peer. Debian's
torch 1.13 (/usr/bin/python3) cannot run FSDP on CPU; a torch >= 2.1 (a
PyPI venv) runs FSDP FULL_SHARD over gloo with device_id cpu, one unit per
block plus the root. The output names the torch version and wrapping used.

With a torch >= 2 the peer model uses scaled_dot_product_attention and
fused AdamW. The summary at the end has one line per (launcher, case): both
medians and bests, the whale/peer ratios and both sides' peak RSS; then,
per launcher and rank count, the peer's best configuration against whale's
best (target >= 1.2). The torch side is
contrib/bench/torch_gpt_dist.py, started once per rank by the launcher.
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
TORCH_CHILD = os.path.join(HERE, "torch_gpt_dist.py")
PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
TORCH_SEEN = {}   # (mode) -> "torch VERSION (PYTHON): wrapping", printed once

# preset: (layers, hidden, heads, vocab, seq)
MODELS = {
    "gpt-tiny": (2, 64, 4, 256, 64),
    "gpt-small": (4, 256, 4, 256, 128),
    "gpt2-124m": (12, 768, 12, 50257, 256),
}
# default (global batch, steps) per preset when --batch / --steps are not
# given: the 124M shape takes ~10 s per step and rank on one thread, so it
# runs a smaller batch and fewer steps to keep a round in minutes
DEFAULTS = {"gpt2-124m": (4, 4)}


def blas_core(build):
    """The OpenBLAS kernel family whale's tools run with (whale-bench blas:
    after their WHALE_BLAS_CORE fix-up). PyTorch loads the same OpenBLAS;
    it gets the same family through OPENBLAS_CORETYPE, so both sides
    multiply with the same kernels."""
    if os.environ.get("OPENBLAS_CORETYPE"):
        return os.environ["OPENBLAS_CORETYPE"]
    r = subprocess.run([os.path.join(build, "runtime/tools/bench/whale-bench"), "blas"],
                       capture_output=True, text=True)
    for line in r.stdout.splitlines():
        if line.startswith("core ") and line.split()[1:]:
            return line.split()[1]
    return None


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


# --raise: each rank raises its own scheduling group before it execs. Under
# srun a task shares the autogroup of its step's slurmstepd (a session of
# its own, gone with the step), not the caller's, so raising the calling
# session (as comm-vs-openmpi.sh -P does) would not reach the ranks; under
# whale-run the ranks are already in the caller's group and this is a no-op
# beside its raise. Both sides get the same wrapper.
RAISE = ["bash", "-c", 'echo -20 > /proc/self/autogroup 2>/dev/null; exec "$@"', "whale-raise"]


def launch(a, launcher, n, argv, env_extra, srun_opts=()):
    """Command line that starts argv on n ranks with the given launcher."""
    env = ["env"] + ["%s=%s" % kv for kv in env_extra.items()]
    if a.raise_ranks:
        argv = RAISE + list(argv)
    if launcher == "whale-run":
        return [os.path.join(a.build, "runtime/tools/run/whale-run"), "-n", str(n), "--timeout",
                str(a.timeout)] + env + argv
    return ["srun", "-N", str(n), "-n", str(n), "--time", str(max(1, a.timeout // 60))] + \
        list(srun_opts) + env + argv


def run_cmd(cmd, env, timeout):
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    if r.returncode:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd[:8]), r.returncode,
                                                  (r.stderr + r.stdout)[-2500:]))
    return r.stdout


def run_torch(a, launcher, n, mode, tmp):
    L, C, H, V, T = MODELS[a.model]
    store = tempfile.mkdtemp(dir=tmp, prefix="store-")
    argv = [a.torch_python, TORCH_CHILD, mode] + [str(v) for v in (L, C, H, V, T, a.batch, a.steps, a.threads)] + [store]
    ifname = "lo" if launcher == "whale-run" else a.srun_ifname
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(a.threads))
    if a.blas_core:
        env["OPENBLAS_CORETYPE"] = a.blas_core
    out = run_cmd(launch(a, launcher, n, argv, {"GLOO_SOCKET_IFNAME": ifname}), env, a.timeout + 60)
    for line in out.splitlines():
        if "{" in line:   # whale-run prefixes each line with "RANK: "
            d = json.loads(line[line.index("{"):])
            if mode not in TORCH_SEEN:
                TORCH_SEEN[mode] = "torch %s (%s): %s" % (d.get("torch"), a.torch_python, d.get("wrap", mode))
                print("peer for %s: %s" % (mode, TORCH_SEEN[mode]), flush=True)
            return d["step_tokens_per_s"], d.get("peak_rss_mb", float("nan"))
    raise RuntimeError("torch %s printed no result:\n%s" % (mode, out[-1500:]))


def run_whale(a, launcher, n, zero, data, tmp):
    T = MODELS[a.model][4]
    metrics = os.path.join(tmp, "w-%s-%d-%d.jsonl" % (launcher, n, zero))
    for f in os.listdir(tmp):
        if f.startswith(os.path.basename(metrics)):
            os.unlink(os.path.join(tmp, f))
    argv = [os.path.join(a.build, "runtime/tools/train/whale-train"), "--model", a.model, "--data",
            data, "--steps", str(a.steps), "--batch", str(a.batch), "--seq", str(T), "--threads",
            str(a.threads), "--zero", str(zero), "--no-progress", "--log-every", "1000000",
            "--metrics", metrics]
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(a.threads),
               WHALE_MODEL_PATH=os.path.join(SRC, "config", "models"))
    run_cmd(launch(a, launcher, n, argv, {}, ["--whale-dp=%d" % n]), env, a.timeout + 60)
    lines = open(metrics).read().splitlines()
    recs = [json.loads(l) for l in lines if l.startswith('{"step"')]
    summ = [json.loads(l)["summary"] for l in lines if l.startswith('{"summary"')]
    rss = summ[-1].get("peak_rss_mb", float("nan")) if summ else float("nan")
    # where whale's step goes (medians of the counted steps): compute,
    # exposed DP wait, and the rest (optimizer, clip, data, bookkeeping)
    split = {k: statistics.median(r.get(k, 0) / r["step_s"] for r in recs[1:])
             for k in ("compute_s", "wait_s")} if recs[1:] else {}
    return [a.batch * T / r["step_s"] for r in recs[1:]], rss, split


def fsdp_probe(a, tmp, mode="fsdp"):
    """Can the installed torch run FSDP FULL_SHARD (mode fsdp) or FSDP2's
    fully_shard (fsdp2) on CPU? Two ranks of the smallest model under
    whale-run; returns None or the reason it cannot."""
    keep = a.model, a.steps
    a.model, a.steps = "gpt-tiny", 2
    try:
        run_torch(a, "whale-run", 2, mode, tmp)
        return None
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        lines = [l for l in str(e).splitlines() if "Error" in l] or str(e).splitlines() or [""]
        return lines[-1].split(": ", 1)[-1].strip()
    finally:
        a.model, a.steps = keep


def make_data(path, n):
    import random
    rnd = random.Random(1)
    with open(path, "wb") as f:
        f.write(bytes(rnd.randrange(256) for _ in range(n)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--launcher", default="whale-run", help="whale-run, srun or both (comma-separated)")
    ap.add_argument("--ranks", default="2,4", help="DP rank counts for the DDP comparison")
    ap.add_argument("--zero3-ranks", default="2", help="rank counts for ZeRO-3 vs FSDP ('' for none)")
    ap.add_argument("--zero1-ranks", default=None,
                    help="rank counts for whale ZeRO-1 vs DDP + ZeroRedundancyOptimizer (default: "
                         "those of --ranks; '' for none)")
    ap.add_argument("--model", default="gpt-small", choices=sorted(MODELS))
    ap.add_argument("--batch", type=int, default=0,
                    help="global batch (sequences per step; default 16, gpt2-124m 4)")
    ap.add_argument("--steps", type=int, default=0,
                    help="steps per run, the first is not counted (default 8, gpt2-124m 4)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="threads per rank, both sides")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    ap.add_argument("--torch-python", default=PY,
                    help="interpreter whose torch is the peer (default %(default)s, Debian's torch 1.13, "
                         "which cannot run FSDP on CPU; a torch >= 2.1 venv can)")
    ap.add_argument("--raise", dest="raise_ranks", action="store_true",
                    help="each rank (both sides) raises its own scheduling group to nice -20 "
                         "(/proc/self/autogroup) before it starts: quieter figures on a shared "
                         "machine; run the script itself raised too (see --help)")
    ap.add_argument("--srun-ifname", default="eth0", help="gloo's interface under srun (eth0 on the minicluster)")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    db, ds = DEFAULTS.get(a.model, (16, 8))
    a.batch = a.batch or db
    a.steps = a.steps or ds
    a.blas_core = blas_core(a.build)
    launchers = [l for l in a.launcher.split(",") if l]
    if "both" in launchers:
        launchers = ["whale-run", "srun"]
    for l in launchers:
        if l not in ("whale-run", "srun"):
            ap.error("--launcher: whale-run, srun or both, not %r" % l)
    ranks = [int(x) for x in a.ranks.split(",") if x]
    z3 = [int(x) for x in a.zero3_ranks.split(",") if x]
    z1 = [int(x) for x in (a.ranks if a.zero1_ranks is None else a.zero1_ranks).split(",") if x]
    for n in ranks + z3 + z1:
        if n < 1 or a.batch % n:
            ap.error("--batch %d must split evenly over %d ranks" % (a.batch, n))

    with tempfile.TemporaryDirectory(dir=os.environ.get("WHALE_BENCH_TMP", "/tmp")) as tmp:
        # the store address and the data must be visible on every node: the
        # minicluster's nodes share /tmp (not a Slurm step's TmpFS); on a
        # real cluster point WHALE_BENCH_TMP at a shared file system
        data = os.path.join(tmp, "data.txt")
        L, C, H, V, T = MODELS[a.model]
        make_data(data, max(200000, 4 * a.batch * (T + 1) * a.steps))
        why = fsdp_probe(a, tmp) if z3 else None
        why2 = fsdp_probe(a, tmp, "fsdp2") if z3 else None
        if z3 and why2:
            print("FSDP2 (fully_shard) is not compared: %s" % why2, flush=True)
        if z3 and why:
            print("FSDP FULL_SHARD cannot run on CPU with this torch (%s); ZeRO-3 is compared with "
                  "DDP + ZeroRedundancyOptimizer (ZeRO-1) instead, and whale ZeRO-1 is shown beside "
                  "it" % why, flush=True)
        # case: (label, ranks, whale zero, torch mode)
        cases = [("DP%d vs DDP" % n, n, 0, "ddp") for n in ranks]
        for n in z3:
            if why:
                cases.append(("ZeRO-3 DP%d vs ZeroRedundancyOptimizer" % n, n, 3, "zero1"))
                cases.append(("ZeRO-1 DP%d vs ZeroRedundancyOptimizer" % n, n, 1, "zero1"))
            else:
                cases.append(("ZeRO-3 DP%d vs FSDP" % n, n, 3, "fsdp"))
            if not why2:
                cases.append(("ZeRO-3 DP%d vs FSDP2" % n, n, 3, "fsdp2"))
        for n in z1:
            if not (why and n in z3):   # not already compared above
                cases.append(("ZeRO-1 DP%d vs ZeroRedundancyOptimizer" % n, n, 1, "zero1"))
        print("model %s (L=%d d=%d T=%d), global batch %d, %d thread(s) per rank, %d steps per run "
              "(first not counted), %d rounds; OpenBLAS kernels %s on both sides" % (
                  a.model, L, C, T, a.batch, a.threads, a.steps, a.rounds, a.blas_core or "(OpenBLAS's choice)"),
              flush=True)
        res = {}
        for r in range(a.rounds):
            for launcher in launchers:
                for label, n, zero, mode in cases:
                    key = (launcher, label)
                    t_ld = load()
                    try:
                        t, t_rss = run_torch(a, launcher, n, mode, tmp)
                        w, w_rss, w_split = run_whale(a, launcher, n, zero, data, tmp)
                    except (RuntimeError, subprocess.TimeoutExpired) as e:
                        print("round %d %s %s: FAILED: %s" % (r + 1, launcher, label, e), flush=True)
                        continue
                    e = res.setdefault(key, {"t": [], "w": [], "ld": [], "trss": [], "wrss": [],
                                             "n": n, "zero": zero, "mode": mode})
                    e["t"] += t
                    e["w"] += w
                    e["ld"].append(t_ld)
                    e["trss"].append(t_rss)
                    e["wrss"].append(w_rss)
                    print("round %d %-9s %-40s torch %7.0f  whale %7.0f tok/s  ratio %.2f  "
                          "peak RSS per rank torch %.0f whale %.0f MiB  whale step: compute %.0f%%, "
                          "exposed DP wait %.0f%%  (load %s)" % (
                              r + 1, launcher, label, statistics.median(t), statistics.median(w),
                              statistics.median(w) / statistics.median(t), t_rss, w_rss,
                              100 * w_split.get("compute_s", 0), 100 * w_split.get("wait_s", 0), t_ld),
                          flush=True)
        print("\nsummary (global tokens/s per step; median and best over all rounds; peak RSS of the "
              "largest rank, MiB):")
        print("%-9s %-40s %9s %9s %6s %9s %9s %6s %8s %8s  %s" % ("launcher", "case", "torch med", "whale med",
              "ratio", "torch best", "whale best", "ratio", "torch RSS", "whale RSS",
              "load (1/5/15 min) per round"))
        for (launcher, label), e in res.items():
            t, w = e["t"], e["w"]
            mt, mw, bt, bw = statistics.median(t), statistics.median(w), max(t), max(w)
            print("%-9s %-40s %9.0f %9.0f %6.2f %9.0f %9.0f %6.2f %8.0f %8.0f  %s" % (
                launcher, label, mt, mw, mw / mt, bt, bw, bw / bt, max(e["trss"]), max(e["wrss"]),
                " | ".join(e["ld"])))
        # the comparison that counts: per launcher and rank count, the peer's
        # best configuration (DDP, FSDP or FSDP2, by median) against whale's
        # best (ZeRO 0 or 3)
        print("\nbest against best (per launcher and rank count, by median tokens/s):")
        for launcher in launchers:
            for n in sorted({e["n"] for (l, _), e in res.items() if l == launcher}):
                es = [(lab, e) for (l, lab), e in res.items() if l == launcher and e["n"] == n]
                tl, te = max(es, key=lambda x: statistics.median(x[1]["t"]))
                wl, we = max(es, key=lambda x: statistics.median(x[1]["w"]))
                mt, mw = statistics.median(te["t"]), statistics.median(we["w"])
                print("%-9s DP%d: best torch %s (%s) %.0f tok/s, %.0f MiB per rank; best whale ZeRO-%d "
                      "%.0f tok/s, %.0f MiB per rank; ratio %.2f (target >= 1.2), memory %.2f" % (
                          launcher, n, te["mode"], TORCH_SEEN.get(te["mode"], "?"), mt, max(te["trss"]),
                          we["zero"], mw, max(we["wrss"]), mw / mt, max(we["wrss"]) / max(te["trss"])))
        print("load average at the end: %s (other jobs on the machine distort the figures)" % load())


if __name__ == "__main__":
    main()
