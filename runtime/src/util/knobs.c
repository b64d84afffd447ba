/* The WHALE_* variables (whale/knobs.h). Keep the list sorted by name; one
 * line of meaning each (whale-train(1)'s ENVIRONMENT table is this table). */
#include "whale/knobs.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "whale/log.h"

const struct whale_knob whale_knobs[] = {
    { "WHALE_BENCH_REEXEC", "contract", "", "internal: whale-bench re-executed itself with OPENBLAS_CORETYPE" },
    { "WHALE_BF16_GEMM", "enum", "auto", "the GEMM of bf16 training's linear layers on a CPU: auto (oneDNN's bf16 matmul where the CPU has AMX-BF16, else sgemm), onednn (where it has AVX512_BF16; slower than sgemm without AMX here), or sgemm" },
    { "WHALE_BLAS_CORE", "enum", "auto", "OpenBLAS kernels: auto (whale-train/whale-bench restart with OPENBLAS_CORETYPE set when OpenBLAS fell back to generic kernels on an AVX2/AVX-512 CPU), off, or a core name" },
    { "WHALE_CKPT_ASYNC", "bool", "1", "checkpoint saves copy to host memory and write in a background thread (0: synchronous)" },
    { "WHALE_CKPT_BUSY", "enum", "wait", "a save due while the previous one is still writing: wait for it, skip this one, or defer it to the first step after the running one ends (whale-train; at most one save in flight, no stall)" },
    { "WHALE_CKPT_CHUNK_MB", "int", "32", "checkpoint chunk size in MiB (1..4096)" },
    { "WHALE_CKPT_COMMIT_TIMEOUT", "int", "600", "seconds rank 0 waits for every rank's part of a checkpoint (1..86400)" },
    { "WHALE_CKPT_DELTA", "int", "0", "up to K delta saves (bit-pattern differences against the last full save, zstd) between full ones; 0 = off (0..1000000)" },
    { "WHALE_CKPT_DIR", "path", "the plan's ckpt_dir", "checkpoint root (--whale-ckpt-dir overrides)" },
    { "WHALE_CKPT_EVERY", "spec", "the plan's ckpt_every", "save every N steps or every T (30s, 10m, 2h) (--whale-ckpt-every overrides)" },
    { "WHALE_CKPT_FAULT", "spec", "", "testing: enospc_after=BYTES, slow_ms=MS, kill_rank=R inject checkpoint write faults" },
    { "WHALE_CKPT_INCREMENTAL", "bool", "1", "hard-link bundles whose content hash matches the previous checkpoint" },
    { "WHALE_CKPT_KEEP", "int", "3", "keep the last K checkpoints, 0 keeps all (--ckpt-keep overrides; whale.conf CkptKeep is the site default)" },
    { "WHALE_CKPT_MILESTONE_EVERY", "int", "0", "checkpoints of step multiples of M are milestones that retention never removes (--ckpt-milestone-every overrides; whale.conf CkptMilestoneEvery is the site default; SIGUSR2 to whale-train marks the next one)" },
    { "WHALE_CKPT_MOMENTS", "enum", "exact", "AdamW moments in checkpoints: exact or int8 (per-128 scales)" },
    { "WHALE_CKPT_PRIORITY", "enum", "low", "CPU priority of the thread that hashes and writes a save: low (nice +10), normal, or idle (SCHED_IDLE); the deferred snapshot copy keeps the caller's" },
    { "WHALE_CKPT_PRIVATE", "bool", "0", "checkpoints, metrics and traces owner-only (never group/world-readable)" },
    { "WHALE_CKPT_SNAPSHOT", "enum", "deferred in whale-train (copy with offload)", "copy: the save copies the tensors before the step goes on; deferred: a background copy overlaps forward/backward and the optimizer waits for it" },
    { "WHALE_CKPT_READERS", "int", "4", "threads that read a checkpoint's tensors in parallel on load (1..64)" },
    { "WHALE_CKPT_READ_DIRECT", "bool", "1", "load reads chunks of 256 KiB and more with O_DIRECT, bypassing the page cache (buffered where the file system refuses it)" },
    { "WHALE_CKPT_RUN_ID", "string", "the job and step id", "identifies one run's saves (a replacement rank joins the same run)" },
    { "WHALE_CKPT_WEIGHTS", "enum", "exact", "weights in checkpoints: exact, bf16 or fp16" },
    { "WHALE_CKPT_ZSTD", "int", "0", "zstd level for checkpoint data after a byte shuffle, 0 = off (0..19)" },
    { "WHALE_CKPT_WRITERS", "int", "2", "threads per rank that write a save's bundle files at once, each fdatasyncing its own (1..16)" },
    { "WHALE_COLL_ALGO", "spec", "auto", "force ring, rd, raben, hier, tree or shm for every collective, or per collective: allreduce=ring,broadcast=tree" },
    { "WHALE_COLL_CHUNK", "size", "2097152", "collective pipelining unit in bytes" },
    { "WHALE_COLL_MODEL", "spec", "measured", "link model shm=ALPHA_US:GBPS,net=ALPHA_US:GBPS,copy=ALPHA_US:GBPS instead of the probe" },
    { "WHALE_COLL_PROBE", "enum", "cached", "force: measure the links again; 0: no probe (defaults)" },
    { "WHALE_COLL_WINDOW", "int", "2", "collective chunks in flight (1..64)" },
    { "WHALE_CONF", "contract", "", "the site config the plugin used (whale.conf path)" },
    { "WHALE_CUDA_STREAM_ORDERED", "bool", "0", "1: --device cuda without a stream sync per backend call (syncs at the engine's host-access points; untested on a GPU; PP > 1 and ZeRO 1-3 keep the per-call sync)" },
    { "WHALE_DEVICE", "enum", "auto", "whale-train compute device: cpu, cuda or auto (--device overrides)" },
    { "WHALE_DEVICE_MEM", "size", "unlimited", "device memory budget per rank, e.g. 12G (--device-mem overrides)" },
    { "WHALE_DP", "contract", "", "data-parallel degree" },
    { "WHALE_DP_RANK", "contract", "", "this rank's data-parallel index" },
    { "WHALE_DP_SHARES", "spec", "the plan's dp_batch, else even", "micro-batches per DP replica (N,N,..) or auto: measured over the first steps and re-measured (--dp-shares overrides)" },
    { "WHALE_ELASTIC", "bool", "0", "1: heartbeats and failure agreement without spares too (a DP > 1 step may shrink)" },
    { "WHALE_EP", "contract", "", "expert-parallel degree: divides DP, expert groups of EP consecutive DP ranks" },
    { "WHALE_FAULT", "spec", "", "testing: kill|hang:rank=R:step=S[:phase=P][;...] fails a rank (see whale-train(1))" },
    { "WHALE_FLUSH_DENORMALS", "bool", "1", "CPU kernels flush subnormal floats to zero (FTZ/DAZ; 0: keep IEEE subnormals, slower where values near 0 occur)" },
    { "WHALE_FP32_GEMM", "enum", "openblas", "the library of the CPU's fp32 GEMMs (linear layers, LM head): openblas (sgemm split over whale's threads) or onednn (oneDNN's sgemm, threaded by oneDNN; builds with libdnnl-dev; other rounding in the last bits)" },
    { "WHALE_GENERATE_REEXEC", "contract", "", "internal: whale-generate re-executed itself with OMP_WAIT_POLICY=passive" },
    { "WHALE_GRAD_ACCUM", "int", "the plan's num_micro_batches, else 1", "micro-batches per step (--grad-accum overrides)" },
    { "WHALE_HANG_TIMEOUT", "number", "0 (off)", "seconds a computing rank's progress may stand still before it is failed as hung" },
    { "WHALE_HEARTBEAT", "number", "0.5 with spares, else off", "heartbeat interval in seconds (0: off)" },
    { "WHALE_JOB_NO_KILL", "contract", "", "sbatch/salloc: the job was submitted with --no-kill (elastic steps need it)" },
    { "WHALE_LOCAL_RANK", "contract", "", "index of this task on its node" },
    { "WHALE_LOG", "enum", "warn (whale-train: info)", "log level: error, warn, info, debug or trace" },
    { "WHALE_MEMBERSHIP", "enum", "coordinator", "elastic steps: how the survivors agree on a membership change: coordinator (the lowest member collects every proposal) or tree (the membership protocol's two-phase ballot over a tree of the tasks, O(log N) hops, messages of O(failed) size)" },
    { "WHALE_MICRO_BATCH", "int", "the plan's micro_batch, else batch/(DP x accum)", "samples per micro-batch per rank (--micro-batch overrides)" },
    { "WHALE_MODEL_PATH", "path", "", "':'-separated folders searched for model presets (NAME.conf) before the installed ones" },
    { "WHALE_MOE_EP_WINDOW", "bool", "1", "MoE expert parallelism on one node: the token exchanges receive into shared-memory windows the peers write (0: the receiver reads the peers' buffers)" },
    { "WHALE_NCCL_TIMEOUT", "number", "600", "seconds a NCCL collective may take before the watchdog aborts it" },
    { "WHALE_NODE", "contract", "", "node name this task was mapped to" },
    { "WHALE_NODE_GRACE", "number", "0", "elastic steps: seconds the survivors wait for a member gone silent (link, hang) to come back before dropping its DP replica or stopping, when no spare is free (0..86400; srun --whale-node-grace, whale.conf NodeGrace=)" },
    { "WHALE_NTASKS", "contract", "", "all tasks of the step, spares included" },
    { "WHALE_OFFLOAD", "enum", "the plan's offload, else none", "none, optimizer or params (--offload overrides)" },
    { "WHALE_OFFLOAD_PREFETCH", "int", "1", "ZeRO 3 + offload=params: layers fetched ahead (--offload-prefetch overrides)" },
    { "WHALE_OFFLOAD_MOVER", "enum", "ucx", "how the local offload tier moves: ucx (RMA through a private UCX endpoint: self/cma/posix, cuda_copy on a GPU) or memcpy" },
    { "WHALE_OFFLOAD_TARGET", "spec", "local", "where offloaded optimizer state lives: local, spares or a host list" },
    { "WHALE_PEER_TIMEOUT", "number", "5", "seconds before a dead or silent peer fails pending operations (WHALE_EPEER)" },
    { "WHALE_PLAN", "contract", "", "the plan: inline JSON (starts with '{') or a path" },
    { "WHALE_PP", "contract", "", "pipeline-parallel degree" },
    { "WHALE_PP_LAYERS", "spec", "the plan's stage_layers, else balanced by cost", "transformer blocks per pipeline stage, e.g. 3,1 (--pp-layers overrides)" },
    { "WHALE_PP_RANK", "contract", "", "this rank's pipeline stage" },
    { "WHALE_PROGRESS_SLEEP", "int", "32", "yields of a waiting thread before it sleeps on the UCX event fd (0..1048576, 0: never, yield and nap)" },
    { "WHALE_RANK", "contract", "", "logical rank of this task (-1 for a spare)" },
    { "WHALE_RANKMAP", "contract", "", "logical rank -> task id, compact, or @FILE" },
    { "WHALE_REBALANCE", "spec", "off (auto: 0.15:3)", "re-measure the DP replicas' speeds every step and move micro-batches when a step would be TH faster for K steps: TH[:K] or off (--rebalance overrides)" },
    { "WHALE_REDUNDANCY_EVERY", "spec", "auto", "elastic steps: refresh the in-memory copy every K steps (0..1000000; 0: local rollback only), or auto: K starts at 1 and rises so that a refresh blocks at most 5 % of a step; auto:MIN (testing): K at least MIN (1..16) from step 4 on" },
    { "WHALE_REPORT", "contract", "", "FIFO of this node's slurmstepd for failure reports" },
    { "WHALE_RMA_PROTO", "enum", "auto", "one-sided transfers to remote peers: auto (tagged messages for PEER-mode peers), tag or ucx" },
    { "WHALE_SHM", "bool", "1", "allreduce, reduce-scatter and allgather of one-node groups through a shared segment (0: UCX messages only)" },
    { "WHALE_SHM_CHUNK", "size", "1048576 (less from 16 ranks on)", "bytes of the vector per shared-memory collective step (4096..67108864); unset: 1 MiB, or 16 MiB / (ranks + 1) from 16 ranks on (at least 256 KiB); vectors of a few steps are cut into 8 (2 with more ranks than cores)" },
    { "WHALE_SHM_CMA", "bool", "0", "1: large shared-memory collectives read the peers' buffers directly (process_vm_readv, single copy) instead of going through the segment's slots (off by default: slower where page pinning is dear, e.g. in VMs)" },
    { "WHALE_SHM_CMA_MIN", "size", "1048576", "bytes of a vector from which the single-copy path is taken" },
    { "WHALE_SHM_CMA_STEP", "size", "131072", "bytes of a block reduced per single-copy step (4096..16777216)" },
    { "WHALE_SHM_STREAM_MIN", "size", "twice the core's L2", "receive vectors of at least this many bytes leave shared-memory collectives with streaming (non-temporal) stores, which skip the read of each line and keep the slots in cache (0: always; a huge value: never)" },
    { "WHALE_SIMD", "enum", "best available", "host AdamW: force scalar, avx2 or avx512" },
    { "WHALE_SITE_LIMITS", "contract", "", "the site limits record slurmstepd wrote (root's, read-only; whale.conf(5), SITE LIMITS)" },
    { "WHALE_SLOWDOWN", "spec", "", "testing: rank=R:factor=F[:step=S] makes rank R's compute count F times (it sleeps the difference) from step S" },
    { "WHALE_SPARE", "contract", "", "1 for a hot-spare task, else 0" },
    { "WHALE_SPIN", "int", "16 (100000 when bound to a core)", "idle polls before a waiting rank yields its core" },
    { "WHALE_TASK_ID", "contract", "", "Slurm/whale-run task id of this task" },
    { "WHALE_TP", "contract", "", "tensor-parallel degree" },
    { "WHALE_TP_RANK", "contract", "", "this rank's tensor-parallel index" },
    { "WHALE_TRACE", "path", "", "write a Chrome/Perfetto trace per rank: the rank goes before the extension (trace.json -> trace-rank0.json), or replaces %r" },
    { "WHALE_TRAIN_REEXEC", "contract", "", "internal: whale-train re-executed itself with OMP_WAIT_POLICY=passive and/or OPENBLAS_CORETYPE" },
    { "WHALE_UCX_PEER_MODE", "bool", "0", "1: UCX peer error handling for every endpoint, also on this node" },
    { "WHALE_WORLD", "contract", "", "working ranks = TP x PP x DP" },
    { "WHALE_ZERO", "int", "the plan's zero, else 0", "ZeRO stage 0..3 (--zero overrides)" },
    { "WHALE_ZERO_LATE_GATHER", "bool", "0", "testing: ZeRO 1/2 gather each bucket's updated weights only when a layer waits for them, the other ranks' weights NaN until then (a read that does not wait shows as a NaN loss)" },
    { NULL, NULL, NULL, NULL },
};

const struct whale_knob *whale_knob_find(const char *name)
{
    for (const struct whale_knob *k = whale_knobs; k->name; k++)
        if (!strcmp(k->name, name))
            return k;
    return NULL;
}

const char *whale_knob_getenv(const char *name)
{
    static atomic_int warned;
    if (!whale_knob_find(name) && !atomic_exchange(&warned, 1))
        whale_warn("%s is read but not declared in the knob table (util/knobs.c): a bug", name);
    return getenv(name);
}

void whale_knobs_print(FILE *f, const char *prefix, int markdown)
{
    if (markdown)
        fputs("| variable | type | default | meaning |\n|---|---|---|---|\n", f);
    for (const struct whale_knob *k = whale_knobs; k->name; k++) {
        if (prefix && strncmp(k->name, prefix, strlen(prefix)))
            continue;
        if (markdown)
            fprintf(f, "| `%s` | %s | %s | %s |\n", k->name, k->type, *k->dflt ? k->dflt : "-",
                    k->meaning);
        else
            fprintf(f, "%-26s %-8s %s\n%26s default: %s\n", k->name, k->type, k->meaning, "",
                    *k->dflt ? k->dflt : "-");
    }
}
