#!/usr/bin/env python3
"""One rank of a PyTorch CPU data-parallel GPT-2 training run: the peer that
contrib/bench/train-vs-peers.py measures whale-train against. Started once
per rank by the same launcher as whale-train (whale-run or srun), so both
sides get the same ranks, cores and placement.

  torch_gpt_dist.py MODE L C H V T B STEPS THREADS STORE_DIR

MODE: ddp   DistributedDataParallel (gloo), what a PyTorch user runs for DP,
            at its best settings: gradient_as_bucket_view (no copy of the
            gradients into the buckets) and static_graph;
      fsdp  FullyShardedDataParallel FULL_SHARD (ZeRO-3), one unit per block
            plus the root, when the installed torch can run it on CPU;
      fsdp2 fully_shard (FSDP2, per-parameter sharding over DTensor), one
            unit per block plus the root (torch >= 2.4);
      zero1 DistributedDataParallel (settings as ddp) + ZeroRedundancyOptimizer
            (optimizer state sharded, ZeRO-1): the peer of whale ZeRO-1, and
            the CPU alternative to FSDP for older torch.
B is the GLOBAL batch (sequences per step), split evenly over the ranks.
Rank and world come from WHALE_RANK/WHALE_WORLD (whale-run, srun --whale),
SLURM_PROCID/SLURM_NTASKS (plain srun) or RANK/WORLD_SIZE (torchrun).
Rendezvous is a TCPStore on rank 0 whose address rank 0 writes under
STORE_DIR (a directory all ranks see: namespace nodes of the minicluster
share the file system); the store and gloo's sockets use GLOO_SOCKET_IFNAME
(the driver sets lo under whale-run, eth0 under srun on the minicluster).
With a torch >= 2.0 the model uses scaled_dot_product_attention and AdamW
runs fused (foreach where fused is missing), as a careful torch user runs it;
subnormals are flushed to zero on both sides.
Rank 0 prints one JSON line: per-step global tokens/s after the first step
and the largest peak RSS of any rank.
"""
import os
import sys


def env_int(*names):
    for n in names:
        v = os.environ.get(n)
        if v not in (None, ""):
            return int(v)
    return None


def iface_addr():
    """IPv4 address of GLOO_SOCKET_IFNAME (127.0.0.1 for lo or when unset)."""
    import subprocess
    ifname = os.environ.get("GLOO_SOCKET_IFNAME", "lo")
    if ifname == "lo":
        return "127.0.0.1"
    out = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", ifname], capture_output=True,
                         text=True).stdout.split()
    if "inet" not in out:
        sys.exit("torch_gpt_dist: interface %s has no IPv4 address (GLOO_SOCKET_IFNAME)" % ifname)
    return out[out.index("inet") + 1].split("/")[0]


def rendezvous(store_dir, rank, world):
    """A TCPStore served by rank 0, whose address rank 0 publishes in a file
    under store_dir (renamed into place, so readers never see half of it).
    torch's FileStore hung now and then at exit here (one rank left waiting
    after the other had finished); a TCP store has no shared-file lifetime."""
    import socket
    import time
    import datetime
    import torch.distributed as dist
    path = os.path.join(store_dir, "addr")
    timeout = datetime.timedelta(seconds=300)
    if rank == 0:
        host = iface_addr()
        with socket.socket() as s:   # a free port; the store binds it right after
            s.bind((host, 0))
            port = s.getsockname()[1]
        store = dist.TCPStore(host, port, world, True, timeout, wait_for_workers=False)
        with open(path + ".tmp", "w") as f:
            f.write("%s %d\n" % (host, port))
        os.rename(path + ".tmp", path)
        return store
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > 300:
            sys.exit("torch_gpt_dist: rank %d: no store address from rank 0 in %s after 300 s" % (rank, path))
        time.sleep(0.05)
    host, port = open(path).read().split()
    return dist.TCPStore(host, int(port), world, False, timeout)


def fsdp_import():
    """torch 1.13 (Debian's python3-torch) cannot import its FSDP package on
    Python 3.11: a dataclass field defaults to an instance of another
    (unhashable) dataclass, which 3.11 rejects. torch 2.0 changed that field
    to default_factory; do the equivalent here (make the default hashable
    while the module loads) so the real FSDP code is what runs."""
    import dataclasses
    real = dataclasses.dataclass

    def patched(cls=None, /, **kw):
        def wrap(c):
            c = real(c, **kw)
            if c.__name__ == "TensorProperties" and c.__hash__ is None:
                c.__hash__ = object.__hash__
            return c
        return wrap if cls is None else wrap(cls)

    dataclasses.dataclass = patched
    try:
        import torch.distributed.fsdp as fsdp
    finally:
        dataclasses.dataclass = real
    return fsdp


def main():
    mode = sys.argv[1]
    L, C, H, V, T, B, steps, threads = map(int, sys.argv[2:10])
    store_dir = sys.argv[10]
    rank = env_int("WHALE_RANK", "SLURM_PROCID", "RANK")
    world = env_int("WHALE_WORLD", "SLURM_NTASKS", "WORLD_SIZE")
    if rank is None or world is None:
        sys.exit("torch_gpt_dist: no rank/world in the environment (WHALE_RANK, SLURM_PROCID, RANK)")
    if B % world:
        sys.exit("torch_gpt_dist: global batch %d does not split over %d ranks" % (B, world))
    import time
    import json
    import torch
    import torch.nn as nn
    import torch.distributed as dist
    torch.set_num_threads(threads)
    # Subnormal floats flushed to zero, as whale-train does by default
    # (WHALE_FLUSH_DENORMALS): without it the 124M shape's backward slowed
    # from step to step here (10, 35, then 101 s on one thread) as the
    # AdamW-updated weights and gradients produced subnormals.
    torch.set_flush_denormal(True)
    torch.manual_seed(0)
    import datetime
    dist.init_process_group("gloo", store=rendezvous(store_dir, rank, world), rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=300))

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_gpt import make_gpt        # the model train-vs-pytorch.py uses too
    m, Block = make_gpt(L, C, H, V, T, attn="auto")
    kw = dict(lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
    best_kw = dict(kw)
    try:                                  # fused AdamW on CPU: torch >= 2.4
        torch.optim.AdamW([torch.zeros(1, requires_grad=True)], fused=True)
        best_kw["fused"] = True
    except (TypeError, RuntimeError):
        if int(torch.__version__.split(".")[0]) >= 2:
            best_kw["foreach"] = True
    wrap = mode
    if mode == "ddp":
        model = nn.parallel.DistributedDataParallel(m, gradient_as_bucket_view=True, static_graph=True)
        opt = torch.optim.AdamW(model.parameters(), **best_kw)
        wrap = "DDP gradient_as_bucket_view static_graph, AdamW %s" % (
            "fused" if best_kw.get("fused") else "foreach" if best_kw.get("foreach") else "default")
        clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    elif mode == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        # DDP at its best settings (as mode ddp), the optimizer state sharded
        model = nn.parallel.DistributedDataParallel(m, gradient_as_bucket_view=True, static_graph=True)
        opt = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, **best_kw)
        clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        wrap = "DDP gradient_as_bucket_view static_graph + ZeroRedundancyOptimizer, AdamW %s" % (
            "fused" if best_kw.get("fused") else "foreach" if best_kw.get("foreach") else "default")
    elif mode == "fsdp":
        fsdp = fsdp_import()
        import functools
        from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
        policy = functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={Block})
        model = fsdp.FullyShardedDataParallel(m, sharding_strategy=fsdp.ShardingStrategy.FULL_SHARD,
                                              auto_wrap_policy=policy, device_id=torch.device("cpu"))
        opt = torch.optim.AdamW(model.parameters(), **kw)
        clip = lambda: model.clip_grad_norm_(1.0)
        wrap = "FSDP FULL_SHARD, one unit per block + root, device_id cpu, gloo"
    elif mode == "fsdp2":
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:
            try:
                from torch.distributed._composable.fsdp import fully_shard
            except ImportError:
                sys.exit("torch_gpt_dist: torch %s has no fully_shard (FSDP2)" % torch.__version__)
        for blk in m.h:
            fully_shard(blk)
        model = fully_shard(m)
        opt = torch.optim.AdamW(model.parameters(), **{k: v for k, v in best_kw.items() if k != "fused"})
        clip = lambda: torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        wrap = "FSDP2 fully_shard, one unit per block + root, gloo"
    else:
        sys.exit("torch_gpt_dist: unknown mode %s (ddp, fsdp, fsdp2, zero1)" % mode)

    b = B // world
    g = torch.Generator().manual_seed(1 + rank)
    times = []
    for i in range(steps):
        idx = torch.randint(0, V, (b, T), generator=g)
        tgt = torch.randint(0, V, (b, T), generator=g)
        t0 = time.perf_counter()
        loss = model(idx, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        clip()
        opt.step()
        times.append(time.perf_counter() - t0)
    # every rank's step ends at its optimizer step; the slowest rank sets the pace
    import resource
    t = torch.tensor(times + [resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0],
                     dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if rank == 0:
        t = t.tolist()
        rss, t = t[-1], t[:-1]
        run = t[1:] if steps > 1 else t
        print(json.dumps({"mode": mode, "ranks": world, "torch": torch.__version__, "wrap": wrap,
                          "step_tokens_per_s": [B * T / s for s in run], "peak_rss_mb": rss}), flush=True)
    # One rank in a few stayed behind in gloo/TCPStore teardown after the
    # result was printed (the launcher then waited for its timeout): meet at
    # a barrier, then leave without the interpreter's teardown.
    dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
