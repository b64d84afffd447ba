/* Calibration profiles: what whale-bench measured on the machine actually
 * used (compute efficiency, memory bandwidth, link alpha/beta per class),
 * in the Key=Value syntax of whale.conf. Format in whale/plan.h. */
#include "whale/plan.h"
#include "whale/error.h"
#include "whale/kv.h"
#include "whale/log.h"
#include "whale/outfile.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#define GiB 1073741824.0

static int cal_num(const struct whale_kv_line *l, const struct whale_kv *kv, double lo, double hi,
                   double *out)
{
    return whale_kv_to_double(l, kv, lo, hi, out);
}

static int cal_line(const struct whale_kv_line *l, void *user)
{
    struct whale_calib *cal = user;
    const char *kind = l->kv[0].key;
    const char *val0 = l->kv[0].value;
    int rc;
    double v;
    if (!strcasecmp(kind, "Calibration")) {
        if (strcmp(val0, "1")) {
            whale_error("%s:%d: Calibration=%s: only version 1 is known", l->file, l->line, val0);
            return WHALE_ECONF;
        }
        for (int i = 1; i < l->n; i++) {
            const struct whale_kv *kv = &l->kv[i];
            char *dst = !strcasecmp(kv->key, "Source") ? cal->source
                      : !strcasecmp(kv->key, "Host") ? cal->host
                      : !strcasecmp(kv->key, "Date") ? cal->date : NULL;
            size_t len = dst == cal->date ? sizeof cal->date : sizeof cal->source;
            if (!dst) {
                whale_error("%s:%d: unknown key '%s' (Calibration line: Source Host Date)", l->file,
                            l->line, kv->key);
                return WHALE_ECONF;
            }
            snprintf(dst, len, "%s", kv->value);
        }
        return 0;
    }
    if (!strcasecmp(kind, "Device")) {
        snprintf(cal->device, sizeof cal->device, "%s", val0);
        for (int i = 1; i < l->n; i++) {
            const struct whale_kv *kv = &l->kv[i];
            if (!strcasecmp(kv->key, "PeakTFLOPS")) {
                if ((rc = cal_num(l, kv, 1e-6, 1e6, &v))) return rc;
                cal->peak_flops = v * 1e12;
                cal->has |= WHALE_CAL_PEAK;
            } else if (!strcasecmp(kv->key, "MemoryGiB")) {
                if ((rc = cal_num(l, kv, 1e-3, 1e6, &v))) return rc;
                cal->mem_bytes = v * GiB;
                cal->has |= WHALE_CAL_MEM;
            } else if (!strcasecmp(kv->key, "MemBandwidthGBs")) {
                if ((rc = cal_num(l, kv, 1e-3, 1e6, &v))) return rc;
                cal->hbm_bw = v * 1e9;
                cal->has |= WHALE_CAL_HBM;
            } else if (!strcasecmp(kv->key, "GemmEfficiency")) {
                if ((rc = cal_num(l, kv, 1e-3, 1, &cal->gemm_eff))) return rc;
                cal->has |= WHALE_CAL_GEMM_EFF;
            } else if (!strcasecmp(kv->key, "GemmHalfDim")) {
                if ((rc = cal_num(l, kv, 0, 1e5, &cal->gemm_half_dim))) return rc;
                cal->has |= WHALE_CAL_GEMM_HALF;
            } else if (!strcasecmp(kv->key, "MemEfficiency")) {
                if ((rc = cal_num(l, kv, 1e-3, 1, &cal->mem_eff))) return rc;
                cal->has |= WHALE_CAL_MEM_EFF;
            } else if (!strcasecmp(kv->key, "KernelOverheadUs")) {
                if ((rc = cal_num(l, kv, 0, 1e6, &v))) return rc;
                cal->kernel_overhead = v * 1e-6;
                cal->has |= WHALE_CAL_KERNEL_OVH;
            } else if (!strcasecmp(kv->key, "DPOverlap")) {
                if ((rc = cal_num(l, kv, 0, 1, &cal->dp_overlap))) return rc;
                cal->has |= WHALE_CAL_DP_OVERLAP;
            } else if (!strcasecmp(kv->key, "ZeRO3Overlap")) {
                if ((rc = cal_num(l, kv, 0, 1, &cal->zero3_overlap))) return rc;
                cal->has |= WHALE_CAL_Z3_OVERLAP;
            } else if (!strcasecmp(kv->key, "Threads")) {
                if ((rc = cal_num(l, kv, 1, 4096, &cal->threads))) return rc;
                cal->has |= WHALE_CAL_CPU;
            } else if (!strcasecmp(kv->key, "CoresPerNode")) {
                if ((rc = cal_num(l, kv, 1, 65536, &cal->cores_per_node))) return rc;
            } else if (!strcasecmp(kv->key, "ThreadSyncUs")) {
                if ((rc = cal_num(l, kv, 0, 1e6, &v))) return rc;
                cal->thread_sync = v * 1e-6;
                cal->has |= WHALE_CAL_THREAD_SYNC;
            } else if (!strcasecmp(kv->key, "ParallelFraction")) {
                if ((rc = cal_num(l, kv, 0, 1, &cal->parallel_fraction))) return rc;
                cal->has |= WHALE_CAL_PAR_FRAC;
            } else if (!strcasecmp(kv->key, "CacheBytes")) {
                if ((rc = cal_num(l, kv, 1024, 1e12, &cal->cache_bytes))) return rc;
            } else if (!strcasecmp(kv->key, "SpillFactor")) {
                if ((rc = cal_num(l, kv, 0, 100, &cal->spill))) return rc;
                cal->has |= WHALE_CAL_SPILL;
            } else {
                whale_error("%s:%d: unknown key '%s' (Device line: PeakTFLOPS MemoryGiB "
                            "MemBandwidthGBs GemmEfficiency GemmHalfDim MemEfficiency "
                            "KernelOverheadUs DPOverlap ZeRO3Overlap Threads CoresPerNode "
                            "ParallelFraction ThreadSyncUs CacheBytes SpillFactor)",
                            l->file, l->line, kv->key);
                return WHALE_ECONF;
            }
        }
        if (!(cal->has & WHALE_CAL_SPILL) != !(cal->cache_bytes > 0)) {
            whale_error("%s:%d: CacheBytes= and SpillFactor= go together", l->file, l->line);
            return WHALE_ECONF;
        }
        return 0;
    }
    if (!strcasecmp(kind, "Link")) {
        int cls = -1;
        for (int k = 0; k < WHALE_PLAN_NLINK; k++)
            if (!strcasecmp(val0, whale_plan_link_name(k)))
                cls = k;
        if (cls < 0) {
            whale_error("%s:%d: Link=%s: expected nvlink, leaf or spine", l->file, l->line, val0);
            return WHALE_ECONF;
        }
        for (int i = 1; i < l->n; i++) {
            const struct whale_kv *kv = &l->kv[i];
            if (!strcasecmp(kv->key, "AlphaUs")) {
                if ((rc = cal_num(l, kv, 0, 1e7, &v))) return rc;
                cal->link[cls].alpha = v * 1e-6;
            } else if (!strcasecmp(kv->key, "BandwidthGBs")) {
                if ((rc = cal_num(l, kv, 1e-6, 1e6, &v))) return rc;
                cal->link[cls].bw = v * 1e9;
            } else {
                whale_error("%s:%d: unknown key '%s' (Link line: AlphaUs BandwidthGBs)", l->file,
                            l->line, kv->key);
                return WHALE_ECONF;
            }
        }
        cal->has |= WHALE_CAL_LINK0 << cls;
        return 0;
    }
    whale_error("%s:%d: unknown record '%s' (expected Calibration, Device or Link)",
                l->file, l->line, kind);
    return WHALE_ECONF;
}

int whale_calib_parse_string(const char *text, const char *origin, struct whale_calib *out)
{
    memset(out, 0, sizeof *out);
    return whale_kv_parse_string(text, origin, cal_line, out);
}

int whale_calib_load(const char *path, struct whale_calib *out)
{
    memset(out, 0, sizeof *out);
    return whale_kv_parse_file(path, cal_line, out);
}

int whale_calib_write(FILE *f, const struct whale_calib *cal)
{
    /* %.17g: the profile reads back to the same doubles */
    fprintf(f, "# whale calibration profile (whale-plan --calib FILE); see whale/plan.h\n");
    fprintf(f, "Calibration=1");
    if (cal->source[0]) fprintf(f, " Source=\"%s\"", cal->source);
    if (cal->host[0]) fprintf(f, " Host=\"%s\"", cal->host);
    if (cal->date[0]) fprintf(f, " Date=\"%s\"", cal->date);
    fputc('\n', f);
    if ((cal->has & (WHALE_CAL_LINK0 - 1)) || cal->device[0]) {
        fprintf(f, "Device=\"%s\"", cal->device[0] ? cal->device : "cpu");
        if (cal->has & WHALE_CAL_PEAK) fprintf(f, " PeakTFLOPS=%.17g", cal->peak_flops / 1e12);
        if (cal->has & WHALE_CAL_MEM) fprintf(f, " MemoryGiB=%.17g", cal->mem_bytes / GiB);
        if (cal->has & WHALE_CAL_HBM) fprintf(f, " MemBandwidthGBs=%.17g", cal->hbm_bw / 1e9);
        if (cal->has & WHALE_CAL_GEMM_EFF) fprintf(f, " GemmEfficiency=%.17g", cal->gemm_eff);
        if (cal->has & WHALE_CAL_GEMM_HALF) fprintf(f, " GemmHalfDim=%.17g", cal->gemm_half_dim);
        if (cal->has & WHALE_CAL_MEM_EFF) fprintf(f, " MemEfficiency=%.17g", cal->mem_eff);
        if (cal->has & WHALE_CAL_KERNEL_OVH) fprintf(f, " KernelOverheadUs=%.17g", cal->kernel_overhead * 1e6);
        if (cal->has & WHALE_CAL_DP_OVERLAP) fprintf(f, " DPOverlap=%.17g", cal->dp_overlap);
        if (cal->has & WHALE_CAL_Z3_OVERLAP) fprintf(f, " ZeRO3Overlap=%.17g", cal->zero3_overlap);
        if (cal->has & WHALE_CAL_CPU) fprintf(f, " Threads=%.17g", cal->threads);
        if (cal->cores_per_node > 0) fprintf(f, " CoresPerNode=%.17g", cal->cores_per_node);
        if (cal->has & WHALE_CAL_THREAD_SYNC) fprintf(f, " ThreadSyncUs=%.17g", cal->thread_sync * 1e6);
        if (cal->has & WHALE_CAL_PAR_FRAC) fprintf(f, " ParallelFraction=%.17g", cal->parallel_fraction);
        if (cal->has & WHALE_CAL_SPILL)
            fprintf(f, " CacheBytes=%.17g SpillFactor=%.17g", cal->cache_bytes, cal->spill);
        fputc('\n', f);
    }
    for (int k = 0; k < WHALE_PLAN_NLINK; k++)
        if (cal->has & (WHALE_CAL_LINK0 << k)) {
            fprintf(f, "Link=%s", whale_plan_link_name(k));
            fprintf(f, " AlphaUs=%.17g", cal->link[k].alpha * 1e6);
            if (cal->link[k].bw > 0) fprintf(f, " BandwidthGBs=%.17g", cal->link[k].bw / 1e9);
            fputc('\n', f);
        }
    return ferror(f) ? WHALE_EIO : 0;
}

int whale_calib_save(const char *path, const struct whale_calib *cal)
{
    FILE *f = whale_fopen_output(path, whale_output_private());
    if (!f) {
        whale_error("cannot write calibration profile %s: %s", path, whale_output_strerror(errno));
        return WHALE_EIO;
    }
    int rc = whale_calib_write(f, cal);
    if (whale_output_close(f) || rc) {
        whale_error("writing calibration profile %s failed", path);
        return WHALE_EIO;
    }
    return 0;
}

/* Amdahl: a step's serial part (small kernels that do not split, OpenMP
 * fork/join, the optimizer's per-tensor work) does not shrink with threads.
 * n threads on n cores run 1 / ((1 - p) + p / n) times one thread. */
static double cpu_speedup(const struct whale_calib *cal, double n)
{
    double p = cal->has & WHALE_CAL_PAR_FRAC ? cal->parallel_fraction : 1;
    return 1.0 / ((1 - p) + p / n);
}

double whale_calib_cpu_threads(const struct whale_calib *cal, int ranks_per_node,
                               int cores_per_node, int threads_per_rank)
{
    if (!(cal->has & WHALE_CAL_CPU) || cal->threads <= 0 || ranks_per_node < 1)
        return 1.0;
    double cores = cores_per_node > 0 ? cores_per_node : cal->cores_per_node;
    if (cores <= 0)   /* no core count anywhere: threads alone */
        return threads_per_rank > 0 ? threads_per_rank : cal->threads;
    double per_rank = cores / ranks_per_node;
    double threads = threads_per_rank > 0 ? threads_per_rank : fmax(1, floor(per_rank));
    /* more threads than cores per rank time-share the cores: no gain */
    return fmin(threads, per_rank);
}

double whale_calib_cpu_share(const struct whale_calib *cal, int ranks_per_node, int cores_per_node,
                             int threads_per_rank)
{
    if (!(cal->has & WHALE_CAL_CPU) || cal->threads <= 0 || ranks_per_node < 1)
        return 1.0;
    double n = whale_calib_cpu_threads(cal, ranks_per_node, cores_per_node, threads_per_rank);
    return (n >= 1 ? cpu_speedup(cal, n) : n) / cpu_speedup(cal, cal->threads);
}

void whale_calib_apply(const struct whale_calib *cal, struct whale_cluster *c)
{
    bool mixed = whale_cluster_is_mixed(c);
    double sync = 0;
    for (int i = 0; i < c->ngroups; i++) {
        struct whale_plan_device *g = &c->group[i].gpu;
        if (mixed && cal->device[0] && strcasecmp(cal->device, g->name))
            continue;
        /* CPU ranks on one node share its cores and memory bandwidth */
        double share = strcmp(g->name, "cpu") ? 1.0
                     : whale_calib_cpu_share(cal, c->group[i].gpus_per_node, c->cpu_cores_per_node,
                                             c->cpu_threads_per_rank);
        if (cal->has & WHALE_CAL_PEAK) g->peak_flops = cal->peak_flops * share;
        if (cal->has & WHALE_CAL_MEM) g->mem_bytes = cal->mem_bytes;
        if (cal->has & WHALE_CAL_HBM) g->hbm_bw = cal->hbm_bw * share;
        else if (share != 1.0) g->hbm_bw *= share;
        /* on the device, not only in c->eff: a measured 0 (flat, as
         * OpenBLAS is from 64 to 1024) must not fall back to the
         * catalogue's half-dimension */
        if (cal->has & WHALE_CAL_GEMM_HALF) g->gemm_half = cal->gemm_half_dim;
        if (cal->has & WHALE_CAL_SPILL) {
            g->cache_bytes = cal->cache_bytes;
            g->spill = cal->spill;
        }
        if ((cal->has & WHALE_CAL_THREAD_SYNC) && !strcmp(g->name, "cpu")) {
            double n = whale_calib_cpu_threads(cal, c->group[i].gpus_per_node,
                                               c->cpu_cores_per_node, c->cpu_threads_per_rank);
            if (n > 1)
                sync = fmax(sync, cal->thread_sync * log2(n));
        }
    }
    if (cal->has & WHALE_CAL_GEMM_EFF) c->eff.gemm_eff = cal->gemm_eff;
    if (cal->has & WHALE_CAL_GEMM_HALF) c->eff.gemm_half_dim = cal->gemm_half_dim;
    if (cal->has & WHALE_CAL_MEM_EFF) c->eff.mem_eff = cal->mem_eff;
    if (cal->has & WHALE_CAL_KERNEL_OVH) c->eff.kernel_overhead = cal->kernel_overhead;
    /* one overhead per layer pass for the whole cluster: the slowest group's */
    c->eff.kernel_overhead += sync;
    if (cal->has & WHALE_CAL_DP_OVERLAP) c->eff.dp_overlap = cal->dp_overlap;
    if (cal->has & WHALE_CAL_Z3_OVERLAP) c->eff.zero3_overlap = cal->zero3_overlap;
    for (int k = 0; k < WHALE_PLAN_NLINK; k++)
        if (cal->has & (WHALE_CAL_LINK0 << k)) {
            c->link[k].alpha = cal->link[k].alpha;
            if (cal->link[k].bw > 0)
                c->link[k].bw = cal->link[k].bw;
        }
}

int whale_calib_fit_gemm(double ds, double rs, double dl, double rl, struct whale_calib *cal)
{
    if (!(ds > 0 && dl > ds && rs > 0 && rl > 0)) {
        whale_error("calibration: GEMM sizes/rates must be positive with the large size larger");
        return WHALE_EINVAL;
    }
    double half = 0;
    if (rs < rl) {
        /* (g(ds) / g(dl))^3 = rs / rl with g(d) = d / (d + half) */
        double q = cbrt(rs / rl);
        double den = ds - q * dl;
        if (!(den < 0)) {
            whale_error("calibration: the small GEMM (%g) is too slow for the d/(d+k) model", ds);
            return WHALE_EINVAL;
        }
        half = ds * dl * (q - 1) / den;
    }
    double g = dl / (dl + half);
    cal->peak_flops = rl / (g * g * g);
    cal->gemm_eff = 1.0;
    cal->gemm_half_dim = half;
    cal->has |= WHALE_CAL_PEAK | WHALE_CAL_GEMM_EFF | WHALE_CAL_GEMM_HALF;
    return 0;
}

int whale_calib_fit_link(int p, double t_tiny, double bytes, double t_large, int cls,
                         struct whale_calib *cal)
{
    if (p < 2 || cls < 0 || cls >= WHALE_PLAN_NLINK || !(t_tiny >= 0) || !(bytes > 0) ||
        !(t_large > t_tiny)) {
        whale_error("calibration: link fit needs p >= 2, a link class, and a large message "
                    "slower than the tiny one");
        return WHALE_EINVAL;
    }
    double alpha = t_tiny / (2.0 * (p - 1));
    double bw = 2.0 * (p - 1) / p * bytes / (t_large - 2.0 * (p - 1) * alpha);
    cal->link[cls].alpha = alpha;
    cal->link[cls].bw = bw;
    cal->has |= WHALE_CAL_LINK0 << cls;
    return 0;
}
