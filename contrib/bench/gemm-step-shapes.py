#!/usr/bin/env python3
"""The GEMMs of one fp32 training step, two ways of running them on T threads:

  split    whale's way (runtime/src/backend/kernels.c, gemm_part): the larger
           output dimension cut into T blocks (multiples of 16), each block one
           single-threaded OpenBLAS call on its own thread; every thread packs
           the whole operand it does not split.
  threaded one OpenBLAS call with openblas_set_num_threads(T): OpenBLAS splits
           and shares its packed panels between its own threads.
  onednn   one dnnl_sgemm call (libdnnl.so.2, where present), threaded by oneDNN
           over OMP_NUM_THREADS (set to T here): what WHALE_FP32_GEMM=onednn runs.

  contrib/bench/gemm-step-shapes.py [--shapes small,124m] [--threads 2] [--reps 5]
      [--core Cooperlake]

Prints per (M, N, K, transposes, calls per step) the best wall GFLOP/s and the
best GFLOP per CPU-second of each way, and the totals of a step weighted by
the calls; a ratio above 1 favours the other way over `split`. The shapes are those of
train-vs-pytorch.py's sgemm reference: per layer the four linears' forward
(x W^T), input gradient (dy W) and weight gradient (dy^T x), then the LM head.
Python threads run the split blocks (ctypes drops the GIL during the call).
--core sets OPENBLAS_CORETYPE for this process (default: what `whale-bench
blas` would pick; Debian's OpenBLAS falls back to Prescott kernels on CPUs it
does not know). Figures on a loaded machine: read the per-CPU-second column.
"""
import argparse
import ctypes
import ctypes.util
import glob
import os
import sys
import threading
import time

SHAPES = {"small": (4, 256, 256, 128, 8), "124m": (12, 768, 50257, 256, 4)}   # L, C, V, T, B


def step_gemms(L, C, V, T, B):
    N = B * T
    out = []
    for (o, i) in [(3 * C, C), (C, C), (4 * C, C), (C, 4 * C)]:
        out += [(N, o, i, 0, 1, L), (N, i, o, 0, 0, L), (o, i, N, 1, 0, L)]
    return out + [(N, V, C, 0, 1, 1), (N, C, V, 0, 0, 1), (V, C, N, 1, 0, 1)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="small,124m")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--core", default=None, help="OPENBLAS_CORETYPE (must be set before OpenBLAS loads)")
    a = ap.parse_args()
    want = {"OMP_NUM_THREADS": str(a.threads), "OMP_WAIT_POLICY": "passive"}
    if a.core:
        want["OPENBLAS_CORETYPE"] = a.core
    if any(os.environ.get(k) != v for k, v in want.items()):
        os.environ.update(want)
        os.execv(sys.executable, [sys.executable] + sys.argv)
    cands = glob.glob("/usr/lib/*/openblas-pthread/libopenblas.so.0") + [ctypes.util.find_library("openblas")
                                                                          or "libopenblas.so.0"]
    ob = ctypes.CDLL(cands[0])
    ob.openblas_get_corename.restype = ctypes.c_char_p
    sg = ob.cblas_sgemm
    I, P = ctypes.c_int, ctypes.c_void_p
    sg.argtypes = [I, I, I, I, I, I, ctypes.c_float, P, I, P, I, ctypes.c_float, P, I]
    sg.restype = None
    nt = a.threads
    try:
        dn = ctypes.CDLL("libdnnl.so.2").dnnl_sgemm
        I64, P = ctypes.c_int64, ctypes.c_void_p
        dn.argtypes = [ctypes.c_char, ctypes.c_char, I64, I64, I64, ctypes.c_float, P, I64, P, I64,
                       ctypes.c_float, P, I64]
    except OSError:
        dn = None
    ways = ("split", "threaded") + (("onednn",) if dn else ())
    print(f"OpenBLAS {cands[0]}, kernels {ob.openblas_get_corename().decode()}, {nt} threads, "
          f"best of {a.reps}; load {open('/proc/loadavg').read().split()[:3]}")

    def call(ta, tb, M, N, K, A, lda, B, ldb, C, ldc):
        sg(101, 112 if ta else 111, 112 if tb else 111, M, N, K, 1.0, A, lda, B, ldb, 0.0, C, ldc)

    def split(ta, tb, M, N, K, A, lda, B, ldb, C, ldc, pa, pb, pc):
        sM = M >= N
        dim = M if sM else N
        chunk = ((dim + nt - 1) // nt + 15) // 16 * 16
        def part(i):
            lo, hi = i * chunk, min(dim, i * chunk + chunk)
            if lo >= hi:
                return
            if sM:
                ao = lo if ta else lo * lda
                call(ta, tb, hi - lo, N, K, pa + 4 * ao, lda, B, ldb, pc + 4 * lo * ldc, ldc)
            else:
                bo = lo * ldb if tb else lo
                call(ta, tb, M, hi - lo, K, A, lda, pb + 4 * bo, ldb, pc + 4 * lo, ldc)
        th = [threading.Thread(target=part, args=(i,)) for i in range(1, nt)]
        for t in th:
            t.start()
        part(0)
        for t in th:
            t.join()

    for shape in a.shapes.split(","):
        tot = {w: [0.0, 0.0] for w in ways}
        F = 0.0
        print(f"{shape}: {'M':>6} {'N':>6} {'K':>6} op  x  | GFLOP/s wall, per CPU-s: "
              + " | ".join(ways))
        for (M, N, K, ta, tb, cnt) in step_gemms(*SHAPES[shape]):
            A = (ctypes.c_float * (M * K))()
            Bm = (ctypes.c_float * (K * N))()
            C = (ctypes.c_float * (M * N))()
            lda, ldb = (M if ta else K), (K if tb else N)
            pa, pb, pc = (ctypes.addressof(x) for x in (A, Bm, C))
            keep = (A, Bm, C)   # the buffers live while their addresses are used
            A, Bm, C = pa, pb, pc
            res = {}
            assert keep
            for way in ways:
                bw = bc = 1e9
                for _ in range(a.reps):
                    if way == "split":
                        ob.openblas_set_num_threads(1)
                    else:
                        ob.openblas_set_num_threads(nt)
                    c0, t0 = time.process_time(), time.perf_counter()
                    if way == "split":
                        split(ta, tb, M, N, K, A, lda, Bm, ldb, C, N, pa, pb, pc)
                    elif way == "onednn":
                        dn(b"T" if ta else b"N", b"T" if tb else b"N", M, N, K, 1.0, A, lda, Bm, ldb, 0.0, C, N)
                    else:
                        call(ta, tb, M, N, K, A, lda, Bm, ldb, C, N)
                    bw, bc = min(bw, time.perf_counter() - t0), min(bc, time.process_time() - c0)
                res[way] = (bw, bc)
            f = 2.0 * M * N * K
            F += f * cnt / 1e9
            for w in ways:
                tot[w][0] += res[w][0] * cnt
                tot[w][1] += res[w][1] * cnt
            print(f"  {M:>6} {N:>6} {K:>6} {'nt'[ta]}{'nt'[tb]} {cnt:>2} | "
                  + " | ".join(f"{f / res[w][0] / 1e9:7.1f} {f / res[w][1] / 1e9:7.1f}" for w in ways), flush=True)
        print(f"  step total, GFLOP/s wall and per CPU-s (ratio to split): "
              + "; ".join(f"{w} {F / tot[w][0]:.1f} ({tot['split'][0] / tot[w][0]:.2f}), "
                          f"{F / tot[w][1]:.1f} ({tot['split'][1] / tot[w][1]:.2f})" for w in ways)
              + f"; load {open('/proc/loadavg').read().split()[:3]}", flush=True)

if __name__ == "__main__":
    main()
