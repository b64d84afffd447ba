#!/usr/bin/env python3
"""whale-report: one self-contained HTML page (inline SVG, no network) from a
whale-train run's metrics JSONL files (rank 0's --metrics file, the
FILE-rank<R>.jsonl files of --rank-metrics) and Chrome traces (WHALE_TRACE).

Why Python rather than C: the tool is string formatting of HTML and SVG
around a few hundred numbers; the standard library does it with no extra
dependency, and it runs where the metrics are looked at (a login node, a
laptop), not inside the training step. See whale-report(1).
"""
import argparse
import errno
import html
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys

VERSION = "@VERSION@"

PALETTE = {
    "loss": "#1f77b4", "val": "#d62728", "tps": "#2ca02c", "mfu": "#9467bd",
    "compute": "#1f77b4", "wait": "#d62728", "bubble": "#ff7f0e", "data": "#8c564b",
    "ckpt": "#e377c2", "other": "#bbbbbb", "recompute": "#17becf", "hidden": "#aec7e8",
    "rss": "#7f7f7f", "cpu": "#bcbd22", "iowait": "#d62728", "gpu": "#2ca02c",
    "recovery": "#d62728", "skipped": "#ff7f0e", "straggler": "#d62728", "rank": "#1f77b4",
    "pred": "#ff7f0e", "meas": "#1f77b4", "ideal": "#999999",
}
CAT_COLORS = {"forward": "#1f77b4", "backward": "#2ca02c", "send": "#ff7f0e", "recv": "#ffbb78",
              "allreduce": "#d62728", "recompute": "#17becf", "optimizer": "#9467bd"}


def esc(s):
    return html.escape(str(s), quote=True)


def nice_ticks(lo, hi, n=5):
    """About n round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0, 1]
    if hi <= lo:
        hi = lo + (abs(lo) if lo else 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    t0 = math.floor(lo / step + 1e-9) * step
    ticks, t = [], t0
    while len(ticks) < 50:  # up to the first tick at or above hi: no mark leaves the frame
        ticks.append(round(t, 12))
        if t >= hi - step * 1e-9:
            break
        t += step
    return ticks


def fmt(v):
    a = abs(v)
    if a == 0:
        return "0"
    if a >= 1e9:
        return "%.3gG" % (v / 1e9)
    if a >= 1e6:
        return "%.3gM" % (v / 1e6)
    if a >= 1e4:
        return "%.3gk" % (v / 1e3)
    if a >= 1:
        return "%.4g" % v
    return "%.3g" % v


class Plot:
    """One SVG figure with a frame, axes and ticks; data drawn in data units."""

    def __init__(self, name, title, xlabel, ylabel, xr, yr, w=720, h=300, xint=False):
        self.name, self.title, self.w, self.h = name, title, w, h
        self.ml, self.mr, self.mt, self.mb = 72, 170, 34, 44
        self.xt = nice_ticks(*xr)
        if xint:  # counts (ranks, steps): whole-number ticks only
            self.xt = [t for t in self.xt if t == int(t)] or self.xt
        self.yt = nice_ticks(*yr)
        self.x0, self.x1 = self.xt[0], self.xt[-1]
        self.y0, self.y1 = self.yt[0], self.yt[-1]
        if self.x1 == self.x0:
            self.x1 = self.x0 + 1
        if self.y1 == self.y0:
            self.y1 = self.y0 + 1
        self.xlabel, self.ylabel = xlabel, ylabel
        self.parts, self.legend = [], []

    def X(self, x):
        return self.ml + (x - self.x0) / (self.x1 - self.x0) * (self.w - self.ml - self.mr)

    def Y(self, y):
        return self.h - self.mb - (y - self.y0) / (self.y1 - self.y0) * (self.h - self.mt - self.mb)

    def line(self, label, xs, ys, color, width=1.8, dash=None, dots=False):
        pts = [(x, y) for x, y in zip(xs, ys) if y is not None and math.isfinite(y)]
        if not pts:
            return
        d = " ".join("%s%.1f,%.1f" % ("M" if i == 0 else "L", self.X(x), self.Y(y))
                     for i, (x, y) in enumerate(pts))
        extra = ' stroke-dasharray="%s"' % dash if dash else ""
        self.parts.append('<path class="series" d="%s" fill="none" stroke="%s" stroke-width="%s"%s/>'
                          % (d, color, width, extra))
        if dots or len(pts) == 1:
            for x, y in pts:
                self.parts.append('<circle class="series" cx="%.1f" cy="%.1f" r="3" fill="%s"/>'
                                  % (self.X(x), self.Y(y), color))
        self.legend.append((label, color))

    def bars(self, xs, stacks, width_units=1.0):
        """stacks: [(label, color, ys)], drawn bottom-up at each x."""
        bw = max(1.0, abs(self.X(self.x0 + width_units) - self.X(self.x0)) * 0.85)
        base = [0.0] * len(xs)
        for label, color, ys in stacks:
            rects = []
            for i, (x, y) in enumerate(zip(xs, ys)):
                if y is None or not math.isfinite(y) or y <= 0:
                    continue
                top, bot = self.Y(base[i] + y), self.Y(base[i])
                rects.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.2f" fill="%s"/>'
                             % (self.X(x) - bw / 2, top, bw, max(bot - top, 0.3), color))
                base[i] += y
            if rects:
                self.parts.append('<g class="series">%s</g>' % "".join(rects))
                self.legend.append((label, color))

    def vmark(self, x, label, color):
        if x is None or not (self.x0 <= x <= self.x1):
            return
        X = self.X(x)
        self.parts.append('<line class="mark" x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="%s" '
                          'stroke-width="1.2" stroke-dasharray="4 3"><title>%s</title></line>'
                          % (X, X, self.mt, self.h - self.mb, color, esc(label)))

    def text(self, x, y, s, color="#333"):
        self.parts.append('<text x="%.1f" y="%.1f" font-size="11" fill="%s">%s</text>'
                          % (self.X(x), self.Y(y), color, esc(s)))

    def svg(self):
        w, h, ml, mb, mt, mr = self.w, self.h, self.ml, self.mb, self.mt, self.mr
        o = ['<svg xmlns="http://www.w3.org/2000/svg" class="fig" id="svg-%s" width="%d" height="%d" '
             'viewBox="0 0 %d %d" font-family="DejaVu Sans, sans-serif">' % (self.name, w, h, w, h),
             '<rect width="100%" height="100%" fill="#fff"/>',
             '<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>' % (ml, esc(self.title))]
        for t in self.yt:
            y = self.Y(t)
            o.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/>' % (ml, w - mr, y, y))
            o.append('<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>' % (ml - 5, y + 3, fmt(t)))
        for t in self.xt:
            x = self.X(t)
            o.append('<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" stroke="#ccc"/>' % (x, x, h - mb, h - mb + 4))
            o.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>' % (x, h - mb + 15, fmt(t)))
        o.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#888"/>'
                 % (ml, mt, w - ml - mr, h - mt - mb))
        o.append('<text x="%.1f" y="%d" font-size="11" text-anchor="middle">%s</text>'
                 % ((ml + w - mr) / 2, h - 8, esc(self.xlabel)))
        o.append('<text x="14" y="%.1f" font-size="11" text-anchor="middle" transform="rotate(-90 14 %.1f)">%s</text>'
                 % ((mt + h - mb) / 2, (mt + h - mb) / 2, esc(self.ylabel)))
        o.extend(self.parts)
        for i, (label, color) in enumerate(self.legend):
            y = mt + 8 + i * 16
            o.append('<rect x="%d" y="%d" width="12" height="10" fill="%s"/>' % (w - mr + 10, y - 8, color))
            o.append('<text x="%d" y="%d" font-size="11">%s</text>' % (w - mr + 27, y + 1, esc(label)))
        o.append('</svg>')
        return "\n".join(o)


def finite(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def num(r, k):
    v = r.get(k)
    return float(v) if finite(v) else None


def rank_of_file(path):
    m = re.search(r"-rank(\d+)\.[^/]*$", path)
    return int(m.group(1)) if m else None


def load_metrics(paths):
    """-> steps (rank 0, dict by step: the last record wins, as after a redo),
    per-rank records {rank: {step: rec}}, events, summary. Unknown fields and
    lines that are not JSON are skipped: other parts of Whale add fields."""
    steps, ranks, events, summary, bad = {}, {}, [], None, 0
    for p in paths:
        frank = rank_of_file(p)
        with open(p, encoding="utf-8", errors="replace") as f:
            for ln, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except (ValueError, RecursionError):  # RecursionError: nested too deeply
                    bad += 1
                    continue
                if not isinstance(r, dict):
                    continue
                if isinstance(r.get("summary"), dict):
                    summary = r["summary"]
                elif "event" in r:
                    events.append(r)
                elif finite(r.get("step")):
                    s = int(r["step"])
                    rk = r.get("rank", frank)
                    if rk is None:
                        if "val_loss" in r and "loss" not in r and s in steps:
                            steps[s].update(r)  # a validation record of that step
                        else:
                            steps.setdefault(s, {}).update(r)
                        ranks.setdefault(0, {})[s] = steps[s]
                    else:
                        ranks.setdefault(int(rk), {})[s] = r
    if bad:
        print("whale-report: skipped %d line(s) that are not JSON (or nested too deeply)" % bad, file=sys.stderr)
    return steps, ranks, events, summary


def fig_loss(steps, events):
    xs = sorted(s for s in steps if num(steps[s], "loss") is not None)
    vx = sorted(s for s in steps if num(steps[s], "val_loss") is not None)
    if not xs and not vx:
        return None
    ys = [steps[s]["loss"] for s in xs]
    vy = [steps[s]["val_loss"] for s in vx]
    allv = ys + vy
    p = Plot("loss", "Loss", "step", "loss", (min(xs + vx), max(xs + vx)), (min(allv), max(allv)))
    p.line("train loss", xs, ys, PALETTE["loss"])
    if vx:
        p.line("validation loss", vx, vy, PALETTE["val"], dots=True)
    for s in xs:
        if num(steps[s], "ckpt_stall_s"):
            p.vmark(s, "checkpoint at step %d" % s, PALETTE["ckpt"])
    for e in events:
        if e.get("event") == "recovery" and finite(e.get("failed_step")):
            p.vmark(e["failed_step"], "recovery: %s (%s), rank %s" % (e.get("kind"), e.get("how"), e.get("failed_rank")), PALETTE["recovery"])
    if any(num(steps[s], "ckpt_stall_s") for s in xs):
        p.legend.append(("checkpoint", PALETTE["ckpt"]))
    if any(e.get("event") == "recovery" for e in events):
        p.legend.append(("recovery", PALETTE["recovery"]))
    return p


def fig_throughput(steps):
    xs = sorted(s for s in steps if num(steps[s], "tokens_per_s") is not None)
    if not xs:
        return None
    ys = [steps[s]["tokens_per_s"] for s in xs]
    p = Plot("throughput", "Throughput", "step", "tokens / s", (min(xs), max(xs)), (0, max(ys)))
    p.line("tokens/s", xs, ys, PALETTE["tps"])
    # DP shares moved to follow the replicas' speeds (whale-train --rebalance)
    reb = [s for s in xs if isinstance(steps[s].get("rebalance"), dict)]
    for s in reb:
        r = steps[s]["rebalance"]
        p.vmark(s, "rebalance after step %d (%s): %s -> %s" % (s, r.get("reason"), r.get("from"), r.get("to")), PALETTE["recovery"])
    if reb:
        p.legend.append(("rebalance", PALETTE["recovery"]))
    return p


def fig_mfu(steps):
    xs = sorted(s for s in steps if num(steps[s], "mfu") is not None)
    if not xs:
        return None
    ys = [100 * steps[s]["mfu"] for s in xs]
    p = Plot("mfu", "Model FLOPs utilization", "step", "MFU %", (min(xs), max(xs)), (0, max(ys)))
    p.line("MFU", xs, ys, PALETTE["mfu"])
    return p


def fig_moe(steps):
    """Mixture-of-experts routing per step (the "moe" object of the lines):
    expert imbalance (max/mean tokens per expert) and the dropped fraction."""
    xs = sorted(s for s in steps if isinstance(steps[s].get("moe"), dict)
                and finite(steps[s]["moe"].get("imbalance")))
    if not xs:
        return None
    imb = [steps[s]["moe"]["imbalance"] for s in xs]
    worst = [steps[s]["moe"].get("imbalance_max", steps[s]["moe"]["imbalance"]) for s in xs]
    drop = [100 * (steps[s]["moe"].get("dropped_frac") or 0) for s in xs]
    top = max(worst + drop + [1.0])
    p = Plot("moe", "Expert routing", "step", "max/mean tokens per expert; dropped %",
             (min(xs), max(xs)), (0, top))
    p.line("imbalance (mean over MoE blocks)", xs, imb, PALETTE["mfu"])
    p.line("imbalance (worst block)", xs, worst, PALETTE["loss"], dash="4,3")
    p.line("dropped %", xs, drop, PALETTE["val"])
    return p


def split(r):
    """A step's wall time as compute / exposed communication / pipeline
    bubble / data wait / checkpoint / other (what the engine does not time)."""
    tot = num(r, "step_s") or 0.0
    comp = num(r, "compute_s") or 0.0
    wait = num(r, "wait_s") or 0.0
    bub = num(r, "pipe_wait_s") or 0.0
    data = num(r, "data_wait_s") or 0.0
    ck = num(r, "ckpt_stall_s") or 0.0
    other = max(tot - comp - wait - bub, 0.0)
    return comp, wait, bub, other, data, ck


def fig_split(steps):
    xs = sorted(s for s in steps if num(steps[s], "step_s") is not None)
    if not xs:
        return None
    parts = [split(steps[s]) for s in xs]
    tops = [sum(p) for p in parts]
    p = Plot("split", "Step time: compute, communication, wait, bubble", "step", "seconds",
             (min(xs) - 0.5, max(xs) + 0.5), (0, max(tops)))
    names = [("compute", "compute"), ("exposed comm (wait)", "wait"), ("pipeline bubble", "bubble"),
             ("other", "other"), ("data loader wait", "data"), ("checkpoint stall", "ckpt")]
    p.bars(xs, [(lab, PALETTE[key], [q[i] for q in parts]) for i, (lab, key) in enumerate(names)])
    hid = [max((num(steps[s], "comm_s") or 0) - (num(steps[s], "wait_s") or 0), 0) for s in xs]
    if any(hid):
        p.line("comm overlapped", xs, hid, "#555", width=1.2, dash="3 2")
    return p


MEM_KEYS = [("param_mb", "parameters"), ("act_mb", "activations"), ("arena_peak_mb", "device arena peak"),
            ("host_mb", "offloaded to host"), ("act_peak_mb", "activation peak (last step)"),
            ("peak_rss_mb", "process peak RSS")]


def fig_memory(steps, summary):
    items = []
    last = steps[max(steps)] if steps else {}
    for k, label in MEM_KEYS:
        v = num(summary or {}, k)
        if v is None:
            v = num(last, k)
        if v is not None and v > 0:
            items.append((label, v))
    if not items:
        return None
    n = len(items)
    p = Plot("memory", "Memory by category (MiB)", "MiB", "", (0, max(v for _, v in items)), (0, n), h=70 + 26 * n)
    colors = ["#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#17becf", "#7f7f7f"]
    rects = []
    for i, (label, v) in enumerate(items):
        y1, y0 = p.Y(n - i - 0.15), p.Y(n - i - 0.85)
        rects.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>'
                     % (p.X(0), y1, p.X(v) - p.X(0), y0 - y1, colors[i % 6], esc(label)))
        rects.append('<text x="%.1f" y="%.1f" font-size="11">%s: %.1f</text>' % (p.X(0) + 4, (y0 + y1) / 2 + 4, esc(label), v))
    p.parts.append('<g class="series">%s</g>' % "".join(rects))
    p.yt = []
    return p


def fig_rss(steps):
    xs = sorted(s for s in steps if num(steps[s], "rss_mb") is not None or num(steps[s], "peak_rss_mb") is not None)
    if not xs:
        return None
    rss = [num(steps[s], "rss_mb") for s in xs]
    pk = [num(steps[s], "peak_rss_mb") for s in xs]
    vals = [v for v in rss + pk if v is not None]
    p = Plot("rss", "Host memory over the run (rank 0)", "step", "MiB", (min(xs), max(xs)), (0, max(vals)))
    p.line("RSS", xs, rss, "#8c564b")
    p.line("peak RSS", xs, pk, "#e377c2", dash="4 2")
    gm = [num(steps[s], "gpu_mem_mb") for s in xs]
    if any(v is not None for v in gm):
        p.line("GPU memory", xs, gm, PALETTE["gpu"])
    return p


def fig_system(steps, ranks):
    xs = sorted(s for s in steps if num(steps[s], "cpu_util") is not None)
    if not xs:
        return None
    p = Plot("system", "CPU, I/O wait, GPU (rank 0's node)", "step", "cores busy / ratio",
             (min(xs), max(xs)), (0, max([steps[s]["cpu_util"] for s in xs] + [1.0])))
    p.line("CPU cores (rank 0)", xs, [steps[s]["cpu_util"] for s in xs], PALETTE["cpu"])
    p.line("node CPU busy (0..1)", xs, [num(steps[s], "node_cpu_util") for s in xs], "#555", width=1.2)
    p.line("I/O wait (0..1)", xs, [num(steps[s], "iowait") for s in xs], PALETTE["iowait"], width=1.2)
    g = [num(steps[s], "gpu_util") for s in xs]
    if any(v is not None for v in g):
        p.line("GPU util (0..1)", xs, g, PALETTE["gpu"])
    return p


def fig_network(steps):
    xs = sorted(s for s in steps if num(steps[s], "net_tcp_mb") is not None)
    if not xs:
        return None
    a = [steps[s]["net_tcp_mb"] for s in xs]
    b = [num(steps[s], "net_lo_mb") or 0 for s in xs]
    p = Plot("network", "Network bytes per step (rank 0's node)", "step", "MiB", (min(xs), max(xs)), (0, max(a + b + [0.001])))
    p.line("between nodes (tcp)", xs, a, "#1f77b4")
    p.line("same node (lo)", xs, b, "#ff7f0e")
    return p


def stragglers(ranks):
    """Per rank: mean compute, exposed comm and bubble over the steps every
    rank reported; a straggler computes > 10 % longer than the median rank
    (the others then wait for it: their wait grows instead)."""
    if len(ranks) < 2:
        return None
    common = set.intersection(*(set(v) for v in ranks.values()))
    if len(common) > 1:  # the first step carries start-up waits (peak measurement, warm caches)
        common.discard(min(common))
    if not common:
        return None
    rows = []
    for rk in sorted(ranks):
        recs = [ranks[rk][s] for s in common]
        mean = lambda k: statistics.fmean([num(r, k) or 0.0 for r in recs])
        rows.append((rk, mean("compute_s"), mean("wait_s"), mean("pipe_wait_s"), mean("step_s")))
    med = statistics.median(r[1] for r in rows)
    slow = {r[0] for r in rows if med > 0 and r[1] > 1.10 * med}
    return rows, slow, len(common)


def fig_ranks(ranks):
    st = stragglers(ranks)
    if not st:
        return None, None
    rows, slow, n = st
    xs = [r[0] for r in rows]
    tops = [r[1] + r[2] + r[3] for r in rows]
    p = Plot("ranks", "Per rank: mean compute / exposed comm / bubble over %d steps" % n, "rank",
             "seconds", (min(xs) - 0.5, max(xs) + 0.5), (0, max(tops + [r[4] for r in rows])))
    p.bars(xs, [("compute", PALETTE["compute"], [r[1] for r in rows]),
                ("exposed comm", PALETTE["wait"], [r[2] for r in rows]),
                ("bubble", PALETTE["bubble"], [r[3] for r in rows])])
    p.xt = xs if len(xs) <= 16 else [x for x in xs if x % max(1, len(xs) // 8) == 0]
    for x, r in zip(xs, rows):  # the mean step time of each rank: a tick above its bar
        p.parts.append('<line class="series" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#333" stroke-width="2"/>'
                       % (p.X(x) - 12, p.X(x) + 12, p.Y(r[4]), p.Y(r[4])))
    p.legend.append(("step time", "#333"))
    for rk in slow:
        p.text(rk - 0.3, tops[xs.index(rk)], "slow", PALETTE["straggler"])
    if slow:
        p.legend.append(("straggler (>10% above median compute)", PALETTE["straggler"]))
    return p, (rows, slow)


def load_traces(paths):
    rows = []
    for p in paths:
        with open(p, encoding="utf-8", errors="replace") as f:
            try:
                t = json.load(f)
            except (ValueError, RecursionError):
                print("whale-report: %s: not a JSON trace (or nested too deeply), skipped" % p, file=sys.stderr)
                continue
        evs = t.get("traceEvents", []) if isinstance(t, dict) else t
        spans = [e for e in evs if isinstance(e, dict) and e.get("ph") == "X" and finite(e.get("ts")) and finite(e.get("dur"))]
        rk = rank_of_file(p)
        if rk is None and spans:
            rk = spans[0].get("pid", len(rows))
        rows.append((rk, spans))
    return sorted(rows, key=lambda r: (r[0] is None, r[0]))


def fig_trace(traces):
    """The last two optimizer steps of every rank on one time axis."""
    if not traces:
        return None
    ends = []
    for rk, spans in traces:
        opt = sorted(e["ts"] + e["dur"] for e in spans if e.get("name") == "optimizer")
        if len(opt) >= 3:
            ends.append((opt[-3], opt[-1]))
        elif spans:
            ends.append((min(e["ts"] for e in spans), max(e["ts"] + e["dur"] for e in spans)))
    if not ends:
        return None
    t0 = min(a for a, _ in ends)
    t1 = max(b for _, b in ends)
    n = len(traces)
    p = Plot("trace", "Trace: the last two steps of every rank", "ms", "", (0, (t1 - t0) / 1000.0), (0, n), h=80 + 28 * n)
    p.yt = []
    used = set()
    rects = []
    for i, (rk, spans) in enumerate(traces):
        yb, yt = p.Y(n - i - 0.85), p.Y(n - i - 0.15)
        rects.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">rank %s</text>' % (p.ml - 4, (yb + yt) / 2 + 4, esc(rk)))
        for e in spans:
            a, b = e["ts"], e["ts"] + e["dur"]
            if b < t0 or a > t1:
                continue
            cat = e.get("cat", "")
            c = CAT_COLORS.get(cat, "#999")
            used.add(cat)
            x0, x1 = p.X((max(a, t0) - t0) / 1000.0), p.X((min(b, t1) - t0) / 1000.0)
            rects.append('<rect x="%.1f" y="%.1f" width="%.2f" height="%.1f" fill="%s"><title>%s</title></rect>'
                         % (x0, yt, max(x1 - x0, 0.5), yb - yt, c, esc(e.get("name", ""))))
    p.parts.append('<g class="series">%s</g>' % "".join(rects))
    for cat in sorted(used):
        p.legend.append((cat, CAT_COLORS.get(cat, "#999")))
    return p


def fig_events(steps, events):
    """Checkpoints, skipped steps and recoveries on the run's wall-clock time line."""
    xs = sorted(steps)
    t, acc = {}, 0.0
    for s in xs:
        acc += (num(steps[s], "step_s") or 0) + (num(steps[s], "ckpt_stall_s") or 0)
        t[s] = acc
    marks = []
    for s in xs:
        if num(steps[s], "ckpt_stall_s"):
            marks.append((t[s], 2, "checkpoint after step %d (%.3f s stall)" % (s, steps[s]["ckpt_stall_s"]), PALETTE["ckpt"]))
        if steps[s].get("skipped") is True:
            marks.append((t[s], 1, "step %d skipped (overflow)" % s, PALETTE["skipped"]))
    for e in events:
        if e.get("event") == "recovery":
            fs = e.get("failed_step")
            at = t.get(fs, t.get(fs - 1, 0.0) if finite(fs) else 0.0)
            marks.append((at, 0, "recovery (%s, %s): rank %s on %s, %s s" % (e.get("kind"), e.get("how"), e.get("failed_rank"), e.get("node"), fmt(e.get("total_s") or 0)), PALETTE["recovery"]))
    if not xs:
        return None
    p = Plot("events", "Events on the run's time line", "seconds of training", "", (0, max(acc, 1e-3)), (0, 3), h=170)
    p.yt = []
    lab = ["recovery", "skipped", "checkpoint"]
    g = []
    for i in range(3):
        g.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%s</text>' % (p.ml - 4, p.Y(i + 0.5) + 4, lab[i]))
    for at, row, label, c in marks:
        g.append('<circle cx="%.1f" cy="%.1f" r="5" fill="%s"><title>%s</title></circle>' % (p.X(at), p.Y(row + 0.5), c, esc(label)))
    g.append('<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#bbb"/>' % (p.X(0), p.X(acc), p.Y(2.95), p.Y(2.95)))
    p.parts.append('<g class="series">%s</g>' % "".join(g))
    for i, c in ((0, "recovery"), (1, "skipped"), (2, "ckpt")):
        p.legend.append((lab[i], PALETTE[c]))
    return p


def summary_rows(summary, steps, events):
    s = summary or {}
    rows = []
    def add(k, v):
        if v is not None and v != "":
            rows.append((k, v))
    n = s.get("steps", len(steps))
    redone = s.get("redone_steps")
    # a step computed again after a recovery counts once (whale-train(1))
    add("steps", "%s (%s redone after a recovery)" % (n, redone) if finite(redone) and redone > 0 else n)
    add("layout", "TP %s x PP %s x DP %s, ZeRO %s, %s, recompute %s" % (s.get("tp", "?"), s.get("pp", "?"), s.get("dp", "?"), s.get("zero", "?"), s.get("precision", "?"), s.get("recompute", "?")) if s else None)
    if finite(s.get("wall_s")):
        add("wall time", "%.1f s" % s["wall_s"])
    if finite(s.get("tokens")):
        add("tokens", fmt(s["tokens"]))
    if finite(s.get("tokens_per_s")):
        add("tokens/s", fmt(s["tokens_per_s"]))
    if finite(s.get("first_loss")) and finite(s.get("final_loss")):
        add("loss", "%.4f → %.4f" % (s["first_loss"], s["final_loss"]))
    if finite(s.get("best_val_loss")):
        add("best validation loss", "%.4f" % s["best_val_loss"])
    if finite(s.get("mfu")):
        add("MFU", "%.1f %%" % (100 * s["mfu"]))
    if finite(s.get("comm_overlap")):
        add("communication hidden", "%.0f %%" % (100 * s["comm_overlap"]))
    mo = s.get("moe")
    if isinstance(mo, dict):
        add("experts", "%s, top-%s, %s MoE blocks; %s of %s parameters active" % (
            mo.get("experts"), mo.get("topk"), mo.get("moe_blocks"), fmt(mo.get("active_params", 0)),
            fmt(mo.get("params", 0))))
        if finite(mo.get("imbalance")):
            add("expert routing", "imbalance %.2f mean, %.2f worst; dropped %.2f %%; aux %.4f, z-loss %.4f" % (
                mo["imbalance"], mo.get("imbalance_max", 0), 100 * (mo.get("dropped_frac") or 0),
                mo.get("aux", 0), mo.get("zloss", 0)))
    ck = s.get("checkpoints")
    if isinstance(ck, dict):
        add("checkpoints", "%s saved, %.2f s stalled" % (ck.get("saves"), ck.get("stall_s", 0)))
    rec = [e for e in events if e.get("event") == "recovery"]
    add("failures recovered", len(rec))
    # DP shares that followed the replicas' speeds: every move, from the
    # step lines (the summary's list stops at 64)
    reb = [(k, steps[k]["rebalance"]) for k in sorted(steps) if isinstance(steps[k].get("rebalance"), dict)]
    if reb or finite(s.get("rebalances")):
        add("DP rebalances", "%d%s" % (len(reb) or s.get("rebalances", 0), "".join(
            "; step %s (%s): %s → %s" % (k, r.get("reason"), ",".join(map(str, r.get("from") or [])),
                                        ",".join(map(str, r.get("to") or []))) for k, r in reb[:8])))
    c = s.get("cost")
    if isinstance(c, dict) and finite(c.get("usd")):
        add("cost", "$%.4f (%s)" % (c["usd"], c.get("price", "")))
        if finite(c.get("usd_per_mtok")):
            add("$ per million tokens", "%.4f" % c["usd_per_mtok"])
        if finite(c.get("usd_per_0.1_loss")):
            add("$ per 0.1 of loss", "%.4f" % c["usd_per_0.1_loss"])
    return rows


CHECK_JS = """
// For tests and the curious: what each figure rendered (its box on the page,
// how many drawn shapes, the extent of its data marks). Sets
// <body data-render-check=...>; `chromium --headless --dump-dom` shows it.
window.addEventListener('load', function () {
  var out = [];
  document.querySelectorAll('figure').forEach(function (f) {
    var r = f.querySelector('svg').getBoundingClientRect(), w = 0, h = 0, n = 0;
    f.querySelectorAll('.series').forEach(function (g) {
      var b = g.getBBox(); w = Math.max(w, b.width); h = Math.max(h, b.height);
      n += g.querySelectorAll('path,rect,circle').length + (g.tagName === 'g' ? 0 : 1);
    });
    out.push({id: f.id, x: r.left + window.scrollX, y: r.top + window.scrollY, w: r.width, h: r.height, shapes: n, bw: w, bh: h});
  });
  document.body.setAttribute('data-render-check', JSON.stringify(out));
});
"""


def page(title, figs, srows, notes):
    o = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
         "<title>%s</title>" % esc(title),
         "<style>body{font-family:'DejaVu Sans',sans-serif;margin:16px;background:#fafafa;color:#222}"
         "figure{margin:0 0 14px 0;padding:0;background:#fff;border:1px solid #ddd;width:720px}"
         "figcaption{font-size:12px;color:#555;padding:4px 8px}table{border-collapse:collapse;margin-bottom:14px}"
         "td{padding:2px 12px 2px 0;font-size:13px}td:first-child{color:#555}</style>",
         "</head><body>", "<h1 style='font-size:20px'>%s</h1>" % esc(title)]
    if srows:
        o.append("<table>%s</table>" % "".join("<tr><td>%s</td><td>%s</td></tr>" % (esc(k), esc(v)) for k, v in srows))
    for name, p, cap in figs:
        o.append('<figure id="fig-%s">%s<figcaption>%s</figcaption></figure>' % (name, p.svg(), esc(cap)))
    for n in notes:
        o.append("<p style='font-size:12px;color:#555'>%s</p>" % esc(n))
    o.append("<script>%s</script></body></html>" % CHECK_JS)
    return "\n".join(o)


def report(args):
    for p in args.metrics + (args.trace or []):
        if not os.path.isfile(p):
            sys.exit("whale-report: %s: no such file" % p)
    steps, ranks, events, summary = load_metrics(args.metrics)
    if not steps and not ranks:
        sys.exit("whale-report: %s: no step records (is it a whale-train --metrics file?)" % ", ".join(args.metrics))
    traces = load_traces(args.trace or [])
    figs, notes = [], []
    def add(name, p, cap):
        if p is not None:
            figs.append((name, p, cap))
    add("loss", fig_loss(steps, events), "Training loss per step, validation loss where the run evaluated; dashed lines: checkpoints and recoveries.")
    add("throughput", fig_throughput(steps), "Tokens per second of every step (rank 0).")
    add("mfu", fig_mfu(steps), "Model FLOPs utilization against the peak whale-train measured or was given.")
    add("moe", fig_moe(steps), "Mixture-of-experts routing (rank 0's MoE blocks): tokens per expert as max/mean, and the share of token-to-expert assignments dropped over capacity.")
    add("split", fig_split(steps), "Where each step's time went (rank 0): compute, communication the step waited for, pipeline bubble, the rest; data-loader wait and checkpoint stalls on top.")
    add("memory", fig_memory(steps, summary), "Memory by category at the end of the run (summary; offload adds the arena and host tiers).")
    add("rss", fig_rss(steps), "Host memory of rank 0 over the run.")
    add("system", fig_system(steps, ranks), "System metrics of rank 0 (whale-train --metrics; all ranks with --rank-metrics).")
    add("network", fig_network(steps), "Bytes through the network interfaces of rank 0's node per step (shared-memory transfers do not show).")
    p, st = fig_ranks(ranks)
    add("ranks", p, "Per-rank means over the steps every rank reported (--rank-metrics); a slow rank makes the others wait.")
    if st:
        rows, slow = st
        notes.append("Stragglers: %s." % (", ".join("rank %d" % r for r in sorted(slow)) if slow else "none (every rank within 10 % of the median compute time)"))
    elif len(ranks) < 2:
        notes.append("One rank's metrics only: run whale-train with --rank-metrics and pass the FILE-rank<R>.jsonl files for the per-rank view.")
    add("events", fig_events(steps, events), "Checkpoints, skipped steps and failure recoveries on the time line of training.")
    add("trace", fig_trace(traces), "Spans from WHALE_TRACE files, coloured by category.")
    title = args.title or "Whale run: %s" % os.path.basename(args.metrics[0])
    write_out(args, title, figs, summary_rows(summary, steps, events), notes)


def open_output(path):
    """A file to write, never through a symbolic link (one planted under the
    name in /tmp would redirect the write to the file it points at)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as e:
        if e.errno == errno.ELOOP:
            sys.exit("whale-report: cannot write %s: it is a symbolic link (output files are never "
                     "written through a link)" % path)
        raise
    return os.fdopen(fd, "w", encoding="utf-8")


def write_out(args, title, figs, srows, notes):
    if args.png and os.path.islink(args.png):  # chromium would follow it
        sys.exit("whale-report: cannot write %s: it is a symbolic link (output files are never "
                 "written through a link)" % args.png)
    with open_output(args.output) as f:
        f.write(page(title, figs, srows, notes))
    if args.svg_dir:
        os.makedirs(args.svg_dir, exist_ok=True)
        for name, p, _ in figs:
            with open_output(os.path.join(args.svg_dir, name + ".svg")) as f:
                f.write(p.svg())
    print("whale-report: wrote %s (%d figures%s)" % (args.output, len(figs),
          ", SVGs in %s" % args.svg_dir if args.svg_dir else ""), file=sys.stderr)
    if args.png:
        png(args.output, args.png, sum(p.h + 42 for _, p, _ in figs) + 40 + 20 * len(srows) + 80)


def png(page, out, height):
    """A PNG of the page through a headless Chromium (Debian's chromium)."""
    exe = next((shutil.which(c) for c in ("chromium", "chromium-browser", "google-chrome") if shutil.which(c)), None)
    if not exe:
        sys.exit("whale-report: --png needs chromium on PATH (apt-get install chromium); the HTML is written")
    r = subprocess.run([exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        "--force-device-scale-factor=1", "--window-size=800,%d" % height,
                        "--screenshot=" + os.path.abspath(out), "file://" + os.path.abspath(page)],
                       capture_output=True, text=True, timeout=120)
    if not os.path.exists(out):
        sys.exit("whale-report: chromium wrote no %s (rc %d): %s" % (out, r.returncode, r.stderr[-500:]))
    print("whale-report: wrote %s" % out, file=sys.stderr)


def scaling(args):
    """Rows from contrib/bench/scale.py (DIR/scale.jsonl, or DIR itself): {"mode": "strong"|"weak", "ranks": N,
    "layout": "...", "step_s": measured, "pred_step_s": whale-plan's}."""
    rows = []
    for p in args.metrics:
        # scale.py -o DIR writes DIR/scale.jsonl: the directory names its results
        if os.path.isdir(p):
            p = os.path.join(p, "scale.jsonl")
            if not os.path.isfile(p):
                sys.exit("whale-report --scaling: %s is a directory without scale.jsonl "
                         "(contrib/bench/scale.py -o DIR writes DIR/scale.jsonl)" % os.path.dirname(p))
        with open(p, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except (ValueError, RecursionError):
                    continue
                if isinstance(r, dict) and finite(r.get("ranks")) and finite(r.get("step_s")):
                    rows.append(r)
    if not rows:
        sys.exit("whale-report --scaling: no rows with ranks and step_s in %s" % ", ".join(args.metrics))
    figs, notes = [], []
    for mode in ("strong", "weak"):
        rs = sorted((r for r in rows if r.get("mode", "strong") == mode), key=lambda r: r["ranks"])
        if len(rs) < 1:
            continue
        base = rs[0]
        n0 = base["ranks"]
        def eff(r, key):
            t = r.get(key)
            t0 = base.get(key)
            if not (finite(t) and finite(t0)) or t <= 0:
                return None
            # strong: same work on more ranks, ideal t = t0 * n0 / n; weak: work grows with n, ideal t = t0
            return (t0 * n0 / (r["ranks"] * t)) if mode == "strong" else (t0 / t)
        xs = [r["ranks"] for r in rs]
        me = [eff(r, "step_s") for r in rs]
        pe = [eff(r, "pred_step_s") for r in rs]
        hi = max([v for v in me + pe if v is not None] + [1.0])
        p = Plot("%s-efficiency" % mode, "%s scaling efficiency" % mode.capitalize(), "ranks",
                 "efficiency (1 = ideal)", (min(xs), max(xs)), (0, hi * 1.05), xint=True)
        p.line("ideal", xs, [1.0] * len(xs), PALETTE["ideal"], dash="5 3")
        p.line("measured", xs, me, PALETTE["meas"], dots=True)
        if any(v is not None for v in pe):
            p.line("whale-plan prediction", xs, pe, PALETTE["pred"], dots=True, dash="2 2")
        figs.append((p.name, p, "%s scaling: %s" % (mode, "; ".join("%d ranks (%s): %.3f s measured, %s predicted" % (r["ranks"], r.get("layout", ""), r["step_s"], ("%.3f s" % r["pred_step_s"]) if finite(r.get("pred_step_s")) else "no") for r in rs))))
        q = Plot("%s-time" % mode, "%s scaling: step time" % mode.capitalize(), "ranks", "seconds per step",
                 (min(xs), max(xs)), (0, max([r["step_s"] for r in rs] + [r.get("pred_step_s") or 0 for r in rs])), xint=True)
        q.line("measured", xs, [r["step_s"] for r in rs], PALETTE["meas"], dots=True)
        q.line("whale-plan prediction", xs, [num(r, "pred_step_s") for r in rs], PALETTE["pred"], dots=True, dash="2 2")
        figs.append((q.name, q, "Measured step time beside whale-plan's prediction for the same layout."))
    write_out(args, args.title or "Whale scaling", figs, [], notes)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="whale-report", description=(
        "One self-contained HTML page (inline SVG, nothing fetched from the network) from a "
        "whale-train run: loss and validation loss, tokens/s and MFU, step time split, memory "
        "by category, system metrics, checkpoints and recoveries on the time line, a per-rank "
        "view that shows stragglers, and trace spans."),
        epilog="Example: whale-train ... --metrics run.jsonl --rank-metrics; "
               "whale-report run.jsonl run-rank*.jsonl --trace trace-rank*.json -o run.html. See whale-report(1).")
    ap.add_argument("metrics", nargs="+", help="metrics JSONL files: whale-train --metrics FILE and its FILE-rank<R>.jsonl (--rank-metrics); with --scaling, the scaling tool's results")
    ap.add_argument("-o", "--output", default="whale-report.html", help="HTML page to write (default whale-report.html)")
    ap.add_argument("--svg-dir", help="also write every figure as DIR/<name>.svg")
    ap.add_argument("--trace", nargs="+", metavar="FILE", help="Chrome traces (WHALE_TRACE's trace-rank<R>.json)")
    ap.add_argument("--title", help="page title")
    ap.add_argument("--png", metavar="FILE", help="also a PNG of the whole page (needs chromium)")
    ap.add_argument("--scaling", action="store_true", help="the inputs are scaling results: contrib/bench/scale.py's output directory (-o DIR) or its DIR/scale.jsonl; draw strong/weak scaling efficiency")
    ap.add_argument("-V", "--version", action="version", version="whale-report " + VERSION)
    args = ap.parse_args(argv)
    try:
        if args.scaling:
            scaling(args)
        else:
            report(args)
    except OSError as e:
        sys.exit("whale-report: %s" % e)
    except RecursionError:  # a JSON input nested deeper than Python's parser goes
        sys.exit("whale-report: an input is nested too deeply to read")
    return 0


if __name__ == "__main__":
    sys.exit(main())
