/* The local offload tier's UCX transport (whale/ltier.h): a private UCP
 * context, worker and endpoint to itself in UCP_ERR_HANDLING_MODE_NONE, so
 * UCX can choose its `self` transport (host memory) or cuda_copy (device
 * memory) rather than tcp; host-tier buffers are registered once and moves
 * are ucp_put_nbx into them or ucp_get_nbx out of them. */
#define _GNU_SOURCE
#include "whale/ltier.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ucp/api/ucp.h>

#include "whale/error.h"
#include "whale/log.h"

#define LT_MAX_REGS 16

struct lt_reg {
    char *buf;
    size_t len;
    ucp_mem_h memh;
    ucp_rkey_h rkey;   /* unpacked on our own endpoint */
};

struct whale_ltier {
    pthread_mutex_t mu;
    ucp_context_h ucp;
    ucp_worker_h worker;
    ucp_ep_h ep;
    struct lt_reg reg[LT_MAX_REGS];
    int nreg;
    int64_t put_bytes, get_bytes;
    char transport[128];
};

/* "lane[0]:  0:self/memory0.0 md[0] ..." -> "self/memory0.0", joined by ','. */
static void describe_lanes(whale_ltier *t)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    snprintf(t->transport, sizeof t->transport, "unknown");
    if (!f)
        return;
    ucp_ep_print_info(t->ep, f);
    fclose(f);
    size_t o = 0;
    for (char *p = text; p && (p = strstr(p, "lane[")); p++) {
        char *c = strchr(p, ':');
        if (!c)
            break;
        c = strchr(c + 1, ':'); /* past the transport's index */
        if (!c)
            break;
        char name[48];
        if (sscanf(c + 1, "%47s", name) != 1)
            continue;
        if (strstr(t->transport, name) && o)
            continue;
        int w = snprintf(t->transport + o, sizeof t->transport - o, "%s%s", o ? "," : "", name);
        if (w < 0 || (size_t)w >= sizeof t->transport - o)
            break;
        o += (size_t)w;
    }
    free(text);
}

int whale_ltier_open(whale_ltier **out)
{
    *out = NULL;
    whale_ltier *t = calloc(1, sizeof *t);
    if (!t)
        return WHALE_ENOMEM;
    pthread_mutex_init(&t->mu, NULL);
    ucp_config_t *cfg = NULL;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    const char *what = "ucp_config_read";
    if (st == UCS_OK) {
        ucp_params_t prm = {
            .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
            .features = UCP_FEATURE_RMA,
            .estimated_num_eps = 1,
        };
        what = "ucp_init";
        st = ucp_init(&prm, cfg, &t->ucp);
        ucp_config_release(cfg);
    }
    if (st == UCS_OK) {
        ucp_worker_params_t wp = {
            .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
            .thread_mode = UCS_THREAD_MODE_SERIALIZED, /* under t->mu */
        };
        what = "ucp_worker_create";
        st = ucp_worker_create(t->ucp, &wp, &t->worker);
    }
    ucp_address_t *addr = NULL;
    size_t alen = 0;
    if (st == UCS_OK) {
        what = "ucp_worker_get_address";
        st = ucp_worker_get_address(t->worker, &addr, &alen);
    }
    if (st == UCS_OK) {
        ucp_ep_params_t ep = {
            .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
            .address = addr,
            .err_mode = UCP_ERR_HANDLING_MODE_NONE, /* lets UCX use self / shared memory */
        };
        what = "ucp_ep_create";
        st = ucp_ep_create(t->worker, &ep, &t->ep);
        ucp_worker_release_address(t->worker, addr);
    }
    if (st != UCS_OK) {
        whale_error("local offload tier: %s: %s", what, ucs_status_string(st));
        whale_ltier_close(t);
        return WHALE_EUCX;
    }
    describe_lanes(t);
    *out = t;
    return 0;
}

static void wait_req(whale_ltier *t, void *r, ucs_status_t *st)
{
    if (r == NULL) {
        *st = UCS_OK;
        return;
    }
    if (UCS_PTR_IS_ERR(r)) {
        *st = UCS_PTR_STATUS(r);
        return;
    }
    while ((*st = ucp_request_check_status(r)) == UCS_INPROGRESS)
        ucp_worker_progress(t->worker);
    ucp_request_free(r);
}

void whale_ltier_close(whale_ltier *t)
{
    if (!t)
        return;
    while (t->nreg > 0)
        whale_ltier_unregister(t, t->reg[t->nreg - 1].buf);
    if (t->ep) {
        ucp_request_param_t prm = { .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                    .flags = UCP_EP_CLOSE_FLAG_FORCE };
        ucs_status_t st;
        wait_req(t, ucp_ep_close_nbx(t->ep, &prm), &st);
    }
    if (t->worker)
        ucp_worker_destroy(t->worker);
    if (t->ucp)
        ucp_cleanup(t->ucp);
    pthread_mutex_destroy(&t->mu);
    free(t);
}

int whale_ltier_register(whale_ltier *t, void *buf, size_t len)
{
    if (!t || !buf || !len) {
        whale_error("whale_ltier_register: %s", !t ? "NULL tier" : !buf ? "NULL buffer"
                                                              : "length 0");
        return WHALE_EINVAL;
    }
    pthread_mutex_lock(&t->mu);
    if (t->nreg == LT_MAX_REGS) {
        pthread_mutex_unlock(&t->mu);
        whale_error("local offload tier: more than %d registered buffers", LT_MAX_REGS);
        return WHALE_ERANGE;
    }
    struct lt_reg *g = &t->reg[t->nreg];
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE,
        .address = buf,
        .length = len,
        .memory_type = UCS_MEMORY_TYPE_HOST,
    };
    void *kbuf = NULL;
    size_t klen = 0;
    ucs_status_t st = ucp_mem_map(t->ucp, &mp, &g->memh);
    if (st == UCS_OK) {
        st = ucp_rkey_pack(t->ucp, g->memh, &kbuf, &klen);
        if (st == UCS_OK) {
            st = ucp_ep_rkey_unpack(t->ep, kbuf, &g->rkey);
            ucp_rkey_buffer_release(kbuf);
        }
        if (st != UCS_OK)
            ucp_mem_unmap(t->ucp, g->memh);
    }
    if (st != UCS_OK) {
        pthread_mutex_unlock(&t->mu);
        whale_error("local offload tier: registering %zu bytes: %s", len, ucs_status_string(st));
        return WHALE_EUCX;
    }
    g->buf = buf;
    g->len = len;
    t->nreg++;
    pthread_mutex_unlock(&t->mu);
    return 0;
}

void whale_ltier_unregister(whale_ltier *t, void *buf)
{
    if (!t || !buf)
        return;
    pthread_mutex_lock(&t->mu);
    for (int i = 0; i < t->nreg; i++) {
        if (t->reg[i].buf != buf)
            continue;
        ucp_rkey_destroy(t->reg[i].rkey);
        ucp_mem_unmap(t->ucp, t->reg[i].memh);
        t->reg[i] = t->reg[--t->nreg];
        break;
    }
    pthread_mutex_unlock(&t->mu);
}

static struct lt_reg *find(whale_ltier *t, const void *p, size_t len)
{
    const char *c = p;
    for (int i = 0; i < t->nreg; i++)
        if (c >= t->reg[i].buf && len <= t->reg[i].len &&
            (size_t)(c - t->reg[i].buf) <= t->reg[i].len - len)
            return &t->reg[i];
    return NULL;
}

int whale_ltier_copy(whale_ltier *t, void *dst, const void *src, size_t len,
                     enum whale_ltier_mem other)
{
    if (!len)
        return 0;
    pthread_mutex_lock(&t->mu);
    struct lt_reg *gd = find(t, dst, len), *gs = gd ? NULL : find(t, src, len);
    if (!gd && !gs) {
        pthread_mutex_unlock(&t->mu);
        whale_error("local offload tier: a copy of %zu bytes touches no registered buffer", len);
        return WHALE_EINVAL;
    }
    ucp_request_param_t prm = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_MEMORY_TYPE,
        .memory_type = other == WHALE_LTIER_CUDA ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST,
    };
    ucs_status_t st;
    if (gd) {
        wait_req(t, ucp_put_nbx(t->ep, src, len, (uint64_t)(uintptr_t)dst, gd->rkey, &prm), &st);
        if (st == UCS_OK) { /* visible at dst before the caller reads it */
            ucp_request_param_t fp = { 0 };
            wait_req(t, ucp_ep_flush_nbx(t->ep, &fp), &st);
        }
        if (st == UCS_OK)
            t->put_bytes += (int64_t)len;
    } else {
        wait_req(t, ucp_get_nbx(t->ep, dst, len, (uint64_t)(uintptr_t)src, gs->rkey, &prm), &st);
        if (st == UCS_OK)
            t->get_bytes += (int64_t)len;
    }
    pthread_mutex_unlock(&t->mu);
    if (st != UCS_OK) {
        whale_error("local offload tier: %s of %zu bytes: %s", gd ? "put" : "get", len,
                    ucs_status_string(st));
        return WHALE_EUCX;
    }
    return 0;
}

const char *whale_ltier_transport(const whale_ltier *t)
{
    return t ? t->transport : "none";
}

void whale_ltier_counts(const whale_ltier *t, int64_t *put_bytes, int64_t *get_bytes)
{
    whale_ltier *m = (whale_ltier *)t;
    pthread_mutex_lock(&m->mu);
    *put_bytes = m->put_bytes;
    *get_bytes = m->get_bytes;
    pthread_mutex_unlock(&m->mu);
}
