#!/usr/bin/env python3
"""Host offload benchmark, every competitor measured in the same run.

1. Host AdamW: one optimizer step over the parameter tensors of a preset
   (default gpt2-124m: 148 tensors, 124.4 M parameters) with whale's host
   AdamW (`whale-bench offload adamw`: host threads + AVX-512/AVX2 chosen at
   run time) against PyTorch's torch.optim.AdamW on the same tensor sizes,
   same thread count: the single-tensor loop (foreach=False), the
   multi-tensor path (foreach=True) and fused=True where this torch supports
   it on CPU (reported as unsupported otherwise). Target: whale >= 1.5x the
   best PyTorch variant. Beside them, measured in the same run: the streaming
   bound (a loop moving AdamW's 28 B/param without its arithmetic; every
   AdamW is reported as a fraction of it, and the verdict says how much any
   AdamW could gain over torch at equal bytes) and the arithmetic alone (data
   in L2). Labelled apart: the step as training runs it (clip: whale folds the
   clip coefficient, torch runs clip_grad_norm_ then AdamW; mixed bf16: whale
   writes the bf16 copy in the same pass, torch copies after AdamW).
2. Step-time overhead of each offload mode against none, and the fraction of
   transfers hidden: whale-train on the same model and batch with
   --offload none / optimizer (ZeRO 0) and none / optimizer / params (ZeRO 3),
   median step time over the steps after the first. Target: optimizer offload
   <= 15 % of the step time on the gpt2-124m shape.

   A mode written MODE@spare keeps the state in a spare task's memory
   (whale-run -n 2 --nodes 2 --spares 1, --whale-offload-target spares; e.g. 3:params@spare).
   A mode written optimizer@memcpy runs with WHALE_OFFLOAD_MOVER=memcpy (the
   local tier without UCX) for comparison. The arena peak drop of each mode
   is checked against the formula (target: within 5 %).

  contrib/bench/offload-bench.py --build build [--model gpt2-124m] [--layers N]
      [--threads 2] [--reps 5] [--steps 4] [--seq 128] [--batch 4] [--skip-train]
      [--modes 0:none,0:optimizer,0:optimizer@memcpy,3:none,3:optimizer,3:params]
      [--rounds 3] [--adamw-rounds 3] [--torch-python PY] [--skip-adamw] [--summary FILE]

PyTorch runs with OMP_WAIT_POLICY=passive (set before torch loads) and
torch.set_num_threads(threads); its interpreter is --torch-python, else
WHALE_BENCH_TORCH_PYTHON, else /usr/bin/python3 (Debian's torch 1.13: no CPU
fused AdamW). Inside a session raised to nice -20 (offload-bench.sh -q) the
step-time targets are judged whatever the machine's load (shown beside).
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import shutil
import tempfile

TORCH_CHILD = r'''
import sys, time, json
import torch
sizes = json.loads(sys.argv[1]); reps = int(sys.argv[2]); threads = int(sys.argv[3])
torch.set_num_threads(threads)
g = torch.Generator().manual_seed(0)
params = [torch.nn.Parameter(torch.rand(n, generator=g) * 0.1) for n in sizes]
for p in params:
    p.grad = torch.rand(p.shape, generator=g) * 1e-3
out = {"torch": torch.__version__, "threads": torch.get_num_threads()}
for name, kw in (("single-tensor", {"foreach": False}), ("foreach", {"foreach": True}),
                 ("fused", {"fused": True})):
    try:
        opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                                weight_decay=0.1, **kw)
        opt.step()  # warm-up: creates the moments
    except Exception as ex:  # fused on CPU needs a newer torch
        out[name] = {"unsupported": str(ex).splitlines()[0][:120]}
        continue
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); opt.step(); ts.append(time.perf_counter() - t0)
    ts.sort()
    out[name] = {"best_s": ts[0], "median_s": ts[len(ts) // 2]}
    del opt
# As a training step runs it (labelled apart from the plain kernel figures):
# clip = clip_grad_norm_ (norm pass + in-place scale of every gradient) then
# AdamW; mixed = AdamW on the fp32 master then the bf16 copy the model uses.
best = "fused" if "median_s" in out.get("fused", {}) else "foreach"
kw = {"fused": True} if best == "fused" else {"foreach": True}
opt = torch.optim.AdamW(params, lr=6e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, **kw)
opt.step()
p16 = [p.detach().to(torch.bfloat16) for p in params]
def clip():
    torch.nn.utils.clip_grad_norm_(params, 1e-3)
    opt.step()
def mixed():
    opt.step()
    with torch.no_grad():
        for a, b in zip(p16, params):
            a.copy_(b)
for name, fn in (("clip+" + best, clip), ("mixed-bf16+" + best, mixed)):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    ts.sort()
    out[name] = {"best_s": ts[0], "median_s": ts[len(ts) // 2]}
print(json.dumps(out))
'''


def model_sizes(conf):
    kv = {}
    for tok in open(conf).read().split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            kv[k] = v
    L, C, V, T = int(kv["Layers"]), int(kv["Hidden"]), int(kv["Vocab"]), int(kv["Seq"])
    F = int(kv.get("FFN", 4 * C))
    s = [V * C, T * C]
    for _ in range(L):
        s += [C, C, 3 * C * C, 3 * C, C * C, C, C, C, F * C, F, C * F, C]
    return s + [C, C]


def torch_python(asked=None):
    """--torch-python / WHALE_BENCH_TORCH_PYTHON (e.g. a venv with a torch that has the CPU
    fused AdamW), else the first python with torch (Debian's /usr/bin/python3 first)."""
    if asked:
        r = subprocess.run([asked, "-c", "import torch"], capture_output=True)
        if r.returncode:
            sys.exit("offload-bench: --torch-python %s cannot import torch" % asked)
        return asked
    for py in (os.environ.get("WHALE_BENCH_TORCH_PYTHON"), "/usr/bin/python3", sys.executable):
        if not py:
            continue
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode == 0:
            return py
    return None


def whale_adamw(build, model, reps, threads, env):
    out = subprocess.run([os.path.join(build, "runtime/tools/bench/whale-bench"), "offload",
                          "adamw", "-m", model, "-r", str(reps)],
                         capture_output=True, text=True, env=env, check=True).stdout
    res = {}
    for line in out.splitlines():
        if line.startswith("#"):
            print(line)
            continue
        f = line.split()
        if len(f) >= 3 and (f[0].startswith("whale-") or f[0].startswith("bound-")):
            res[f[0]] = {"best_s": float(f[1]), "median_s": float(f[2])}
        if f and f[0] == "impl":
            print(line)
    return res


def split_mode(mode):
    """'optimizer@memcpy' -> ('optimizer', 'memcpy'): the mover for that run."""
    m, _, mover = mode.partition("@")
    return m, mover or "ucx"


def train(build, args, mode, zero, env, tmp):
    off, mover = split_mode(mode)
    m = os.path.join(tmp, "m-%s-%d.jsonl" % (mode.replace("@", "-"), zero))
    cmd = [os.path.join(build, "runtime/tools/train/whale-train"), "--model", args.model_arg,
           "--data", args.data, "--steps", str(args.steps), "--batch", str(args.batch),
           "--seq", str(args.seq), "--threads", str(args.threads), "--no-progress",
           "--zero", str(zero), "--offload", off, "--metrics", m]
    if mover == "spare":  # remote tier: one worker + one spare lending its memory (whale-run,
        # UCX shared memory on this node), no elastic copies (they would walk the state)
        cmd = [os.path.join(build, "runtime/tools/run/whale-run"), "-n", "2", "--nodes", "2", "--spares", "1",
               "--no-label", "--timeout", "900"] + cmd + ["--whale-offload-target", "spares"]
        # (a generous peer timeout: a loaded 2-core node can starve heartbeats for seconds)
        env, mover = dict(env, WHALE_REDUNDANCY_EVERY="0", WHALE_PEER_TIMEOUT="120"), "ucx"
    load = os.getloadavg()[0]
    r = subprocess.run(cmd, capture_output=True, text=True,
                       env=dict(env, WHALE_OFFLOAD_MOVER=mover))
    if r.returncode:
        sys.exit("whale-train failed (%s): %s" % (" ".join(cmd), r.stderr.strip()[-2000:]))
    lines = [json.loads(l) for l in open(m)]
    steps = [l for l in lines if "step" in l][1:]  # the first step warms caches
    summ = [l["summary"] for l in lines if "summary" in l][0]
    return {"step_s": statistics.median(s["step_s"] for s in steps),
            "cpu_s": statistics.median(s.get("cpu_s", 0) for s in steps),
            "hidden": summ.get("offload_hidden"), "arena_mb": summ.get("arena_peak_mb"),
            "host_mb": summ.get("host_mb", 0.0), "offload_s": summ.get("offload_s", 0.0),
            "param_mb": summ.get("param_mb"), "mover": summ.get("offload_mover", "-"),
            "loss": summ["final_loss"], "load": load}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--model", default="gpt2-124m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--data", default=None)
    ap.add_argument("--skip-train", action="store_true")
    ap.add_argument("--modes", default="0:none,0:optimizer,3:none,3:optimizer,3:params",
                    help="ZeRO:offload runs; each ZeRO stage's first one is the baseline")
    ap.add_argument("--layers", type=int, default=0,
                    help="blocks of the model (0: the preset's); the width stays the preset's")
    ap.add_argument("--summary", default=None,
                    help="append the targets' verdicts to this file (the .sh prints it last)")
    ap.add_argument("--adamw-rounds", type=int, default=3,
                    help="alternated whale/torch AdamW runs (each --reps steps)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternate the runs this many times; report each mode's best and "
                         "median (over rounds) of its median step")
    ap.add_argument("--torch-python", default=None,
                    help="interpreter whose torch is the competitor (default: "
                         "WHALE_BENCH_TORCH_PYTHON, else /usr/bin/python3)")
    ap.add_argument("--skip-adamw", action="store_true",
                    help="only the whale-train overhead runs")
    args = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = dict(os.environ, OMP_WAIT_POLICY="passive", OMP_NUM_THREADS=str(args.threads),
               OPENBLAS_NUM_THREADS=str(args.threads),
               WHALE_MODEL_PATH=os.path.join(root, "config", "models"))
    conf = os.path.join(root, "config", "models", args.model + ".conf")
    args.model_arg = args.model
    if args.layers:  # the preset's width with fewer blocks, as a .conf of its own
        text = re.sub(r"Layers=\d+", "Layers=%d" % args.layers, open(conf).read())
        text = re.sub(r"Name=(\S+)", r"Name=\1-L%d" % args.layers, text)
        conf = os.path.join(tempfile.mkdtemp(prefix="whale-offload-model-"),
                            "%s-L%d.conf" % (args.model, args.layers))
        open(conf, "w").write(text)
        args.model_arg = conf
    sizes = model_sizes(conf)
    args.verdicts = []
    print("# offload benchmark: %s, %d tensors, %.1f M parameters, %d threads, %d cores"
          % (args.model, len(sizes), sum(sizes) / 1e6, args.threads, os.cpu_count()))

    if args.skip_adamw:
        train_overhead(args, env, root)
        write_summary(args)
        return
    # ---- 1. host AdamW vs torch.optim.AdamW, alternated ----
    adamw_section(args, env, sizes)

    # ---- 2. step-time overhead of each offload mode ----
    if not args.skip_train:
        train_overhead(args, env, root)
    write_summary(args)


def raised():
    """True inside a session raised to nice -20 (offload-bench.sh -q): the kernel shares CPU
    between sessions first, so the machine's load average hardly reaches this one."""
    try:
        return "nice -20" in open("/proc/self/autogroup").read()
    except OSError:
        return False


def load_note(load):
    return "load %.1f%s" % (load, ", raised session" if raised() else "")


def med_over(runs, key):
    """the best (over the alternated runs) of each run's median"""
    vals = [r[key]["median_s"] for r in runs if "median_s" in r.get(key, {})]
    return min(vals) if vals else None


def adamw_section(args, env, sizes):
    P = sum(sizes)
    py = torch_python(args.torch_python)
    whale_runs, torch_runs, loads = [], [], []
    for _ in range(args.adamw_rounds):  # alternated: a load change hits both alike
        loads.append(os.getloadavg()[0])
        whale_runs.append(whale_adamw(args.build, args.model_arg, args.reps, args.threads, env))
        if py:
            r = subprocess.run([py, "-c", TORCH_CHILD, json.dumps(sizes), str(args.reps),
                                str(args.threads)], capture_output=True, text=True, env=env)
            if r.returncode == 0:
                torch_runs.append(json.loads(r.stdout.strip().splitlines()[-1]))
            else:
                print("# torch failed: " + r.stderr.strip().splitlines()[-1])
        loads.append(os.getloadavg()[0])
    load = max(loads)
    bound = med_over(whale_runs, "bound-stream28")
    comp = med_over(whale_runs, "bound-compute-l2")
    w = med_over(whale_runs, "whale-host")

    def row(name, sec, nbytes=28):
        print("%-30s %9.4f %9.1f %8.2f %9.2f %8.2f" % (
            name, sec, P / sec / 1e6, P * nbytes / sec / 1e9, bound / sec, sec / w))

    print("\n## host AdamW, %d threads, %.1f M params, %d alternated runs, each the median of %d "
          "steps; figures: the best run (load %s)" % (
              args.threads, P / 1e6, args.adamw_rounds, args.reps,
              " ".join("%.1f" % x for x in loads)))
    print("%-30s %9s %9s %8s %9s %8s" % ("plain AdamW step (fp32)", "median_s", "Mparam/s",
                                         "GB/s@28B", "of bound", "x whale"))
    print("%-30s %9.4f %9.1f %8.2f %9.2f %8s" % ("bound: 28 B/param streamed", bound, P / bound
                                                 / 1e6, P * 28 / bound / 1e9, 1.0, "-"))
    print("%-30s %9.4f %9.1f %8s %9s %8s   (arithmetic only: data in L2)" % (
        "bound: AdamW compute in L2", comp, P / comp / 1e6, "-", "-", "-"))
    row("whale host (1 region, SIMD)", w)
    row("whale host, 1 region/tensor", med_over(whale_runs, "whale-pertensor"))
    row("whale engine loop", med_over(whale_runs, "whale-loop"))
    best_torch, best_name, tver = None, None, None
    if torch_runs:
        tver = torch_runs[0]["torch"]
        for name in ("single-tensor", "foreach", "fused"):
            tv = med_over(torch_runs, name)
            if tv is None:
                print("%-30s %9s  (%s)" % ("torch " + name, "-",
                                           torch_runs[0][name].get("unsupported", "failed")))
                continue
            row("torch %s %s" % (tver, name), tv)
            if best_torch is None or tv < best_torch:
                best_torch, best_name = tv, name
    print("\n%-30s %9s %9s %8s %9s %8s" % ("as in a training step (labelled)", "median_s",
                                           "Mparam/s", "GB/s", "of bound", "x whale"))
    wc, wm = med_over(whale_runs, "whale-clip"), med_over(whale_runs, "whale-mixed-bf16")
    print("%-30s %9.4f %9.1f %8.2f %9.2f %8s   (norm pass + AdamW, clip folded: 32 B/param)"
          % ("whale clip + AdamW", wc, P / wc / 1e6, P * 32 / wc / 1e9, bound / wc, "1.00"))
    print("%-30s %9.4f %9.1f %8.2f %9.2f %8s   (fp32 master + bf16 copy, one pass: 30 B/param)"
          % ("whale mixed bf16", wm, P / wm / 1e6, P * 30 / wm / 1e9, bound / wm, "1.00"))
    tc = tm = None
    if torch_runs:
        for key in torch_runs[0]:
            if key.startswith("clip+"):
                tc = med_over(torch_runs, key)
                print("%-30s %9.4f %9.1f %8s %9.2f %8.2f   (clip_grad_norm_ then AdamW)" % (
                    "torch " + key, tc, P / tc / 1e6, "-", bound / tc, tc / wc))
            if key.startswith("mixed-bf16+"):
                tm = med_over(torch_runs, key)
                print("%-30s %9.4f %9.1f %8s %9.2f %8.2f   (AdamW on fp32, then bf16 copy_)" % (
                    "torch " + key, tm, P / tm / 1e6, "-", bound / tm, tm / wm))
    print("# 'of bound': the streaming bound's time over this time (1.00 = moves AdamW's bytes "
          "as fast as a loop that only moves them)")
    busy = load > 1.5 * os.cpu_count() and not raised()
    if best_torch is None:
        args.verdicts.append("host AdamW >= 1.5x torch.optim.AdamW: not judged (no PyTorch)")
        return
    ratio = best_torch / w
    ceiling = best_torch / bound  # the most any AdamW at 28 B/param can gain over torch
    what = ("host AdamW >= 1.5x torch.optim.AdamW (plain fp32 step, best torch variant: %s "
            "%s, same tensors, same run)" % (tver, best_name))
    fig = ("%.2fx; whale at %.2f, torch at %.2f of the 28 B/param streaming bound (%.2f GB/s), "
           "so at most %.2fx is possible at equal bytes; %s" % (
               ratio, bound / w, bound / best_torch, P * 28 / bound / 1e9, ceiling,
               load_note(load)))
    if "median_s" not in torch_runs[0].get("fused", {}):
        what += " [this torch has no CPU fused AdamW: -p PYTHON with torch >= 2.4 compares " \
                "against it]"
    if ratio >= 1.5:
        v = "met"
    elif busy:
        v = "not judged (load %.1f on %d cores)" % (load, os.cpu_count())
    elif ceiling < 1.5:
        v = "NOT MET: out of reach at equal bytes (torch is within %.0f %% of the bound)" % (
            100 * (1 - bound / best_torch))
    else:
        v = "NOT MET"
    args.verdicts.append("%s: %s -- %s" % (what, fig, v))
    if tc and tm:
        args.verdicts.append(
            "as a training step runs it (labelled, not the plain figure): clip + AdamW %.2fx, "
            "mixed bf16 AdamW %.2fx torch %s %s -- figure, no target" % (
                tc / wc, tm / wm, tver, best_name))


def verdict(args, what, ok, figure, load_sensitive=False):
    """met / not met; a step-time figure is judged only at a load up to 1.5x the cores (or in
    a raised session, -q) and with 3+ alternated rounds, else 'not judged' (the figure is
    still printed)."""
    load = os.getloadavg()[0]
    busy = (load > 1.5 * os.cpu_count() and not raised()) or getattr(args, "rounds", 3) < 3
    if load_sensitive:
        figure += "; " + load_note(load)
    if load_sensitive and busy:
        v = "not judged: load %.1f on %d cores, %d round(s)" % (load, os.cpu_count(),
                                                                 getattr(args, "rounds", 0))
    elif ok:
        v = "met"
    else:
        v = "NOT MET"
    args.verdicts.append("%s: %s -- %s" % (what, figure, v))


def write_summary(args):
    if args.summary:
        with open(args.summary, "a") as f:
            for v in args.verdicts:
                f.write(v + "\n")
    else:
        print("\n# summary")
        for v in args.verdicts:
            print(v)


def train_overhead(args, env, root):
    tmp = tempfile.mkdtemp(prefix="whale-offload-bench-")
    if not args.data:
        args.data = os.path.join(tmp, "corpus.txt")
        with open(args.data, "wb") as f:
            for d in ("runtime/src", "runtime/tools"):
                for dp, _, fs in os.walk(os.path.join(root, d)):
                    for n in sorted(fs):
                        if n.endswith(".c"):
                            f.write(open(os.path.join(dp, n), "rb").read())
    print("\n# whale-train %s%s, seq %d, batch %d, %d steps (median of steps 2..), %d rounds "
          "alternated" % (args.model, " with %d layers" % args.layers if args.layers else "",
                          args.seq, args.batch, args.steps, args.rounds))
    runs = [(int(z), o) for z, o in (m.split(":") for m in args.modes.split(","))]
    res = {}
    load0 = os.getloadavg()
    try:
        for _ in range(args.rounds):  # alternated: a load change hits every mode alike
            for zero, mode in runs:
                measure(args, mode, zero, env, tmp, res)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report(args, runs, res)
    load1 = os.getloadavg()
    print("# load average (1/5/15 min) at the start %.1f/%.1f/%.1f, at the end %.1f/%.1f/%.1f "
          "on %d cores: overheads below ~1.5x the step-to-step noise are not resolved"
          % (load0 + load1 + (os.cpu_count(),)))


def measure(args, mode, zero, env, tmp, res):
    """One whale-train run; every round is kept (best and median reported)."""
    r = train(args.build, args, mode, zero, env, tmp)
    res.setdefault((zero, mode), []).append(r)


def report(args, runs, res):
    bases = {}
    for zero, mode in runs:
        bases.setdefault(zero, res[(zero, mode)])
    print("%-30s %9s %9s %9s %9s %7s %9s %9s %8s %8s" % (
        "", "best_s", "overhead", "median_s", "overhead", "hidden", "arena_MB", "drop/form",
        "cpu_s", "cpu ovh"))
    for zero, mode in runs:
        rs, base = res[(zero, mode)], bases[zero]
        off, mover = split_mode(mode)
        best = min(r["step_s"] for r in rs)
        med = statistics.median(r["step_s"] for r in rs)
        bbest = min(r["step_s"] for r in base)
        bmed = statistics.median(r["step_s"] for r in base)
        hid = statistics.median(r["hidden"] or 0 for r in rs)
        # arena peak drop against the formula (fp32, DP 1: U = P elements):
        # optimizer 2 moments x 4 B x P, params also the 4 B x P shard
        pbytes = base[0]["param_mb"] or 0
        want = {"optimizer": 2 * pbytes, "params": 3 * pbytes}.get(off, 0)
        drop = base[0]["arena_mb"] - rs[0]["arena_mb"]
        form = "-" if not want else "%.3f" % (drop / want)
        loads = " ".join("%.0f" % r["load"] for r in rs)
        # CPU seconds per step (every thread of the process): unlike the wall
        # time it hardly moves with the machine's load; it counts work, not
        # what is hidden, so it bounds the overhead of the added work
        cmed = statistics.median(r["cpu_s"] for r in rs)
        bcmed = statistics.median(r["cpu_s"] for r in base)
        print("%-30s %9.3f %8.1f%% %9.3f %8.1f%% %7s %9.1f %9s %8.2f %7.1f%%  (rounds: %s s; "
              "load %s; mover %s)" % (
            "ZeRO %d offload %s" % (zero, mode), best, 100 * (best - bbest) / bbest, med,
            100 * (med - bmed) / bmed, "-" if off == "none" else "%.2f" % hid,
            rs[0]["arena_mb"], form, cmed, 100 * (cmed - bcmed) / bcmed if bcmed else 0,
            " ".join("%.3f" % r["step_s"] for r in rs), loads,
            rs[0]["mover"] if off != "none" else "-"))
        if rs[0]["loss"] != base[0]["loss"]:
            print("  final loss %.6f differs from none (%.6f)" % (rs[0]["loss"], base[0]["loss"]))
        if off == "none":
            continue
        tag = "ZeRO %d offload %s" % (zero, mode)
        if want:
            verdict(args, "arena peak drop = formula within 5 %% (%s)" % tag,
                    abs(drop - want) <= 0.05 * want,
                    "%.1f MB dropped, formula %.1f MB" % (drop, want))
        verdict(args, "same final loss as none (%s)" % tag, rs[0]["loss"] == base[0]["loss"],
                "%.6f" % rs[0]["loss"])
        if off == "optimizer" and mover == "ucx":
            verdict(args, "optimizer-offload overhead <= 15 %% of step time (%s, median of %d "
                    "rounds, hidden %.2f)" % (tag, len(rs), hid), (med - bmed) / bmed <= 0.15,
                    "%+.1f %% (best %+.1f %%; CPU time %+.1f %%)" % (
                        100 * (med - bmed) / bmed, 100 * (best - bbest) / bbest,
                        100 * (cmed - bcmed) / bcmed if bcmed else 0),
                    load_sensitive=True)


if __name__ == "__main__":
    main()
