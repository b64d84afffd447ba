/* A process started without launcher or contract is a world of one: every
 * collective works on the world/TP/PP/DP groups of size 1 (copies), and a
 * point-to-point call to itself is refused with WHALE_EINVAL. */
#include <stdio.h>
#include <string.h>

#include "whale/comm.h"
#include "whale/error.h"

int main(void)
{
    whale_ctx *ctx;
    int rc = whale_init(&ctx);
    if (rc) {
        fprintf(stderr, "init: %s\n", whale_strerror(rc));
        return 1;
    }
    int bad = 0;
    bad |= whale_rank(ctx) != 0 || whale_world_size(ctx) != 1 || whale_is_spare(ctx);
    whale_group *gs[4] = { whale_world(ctx), whale_tp_group(ctx), whale_pp_group(ctx), whale_dp_group(ctx) };
    for (int k = 0; k < 4; k++) {
        float x[5] = { 1, 2, 3, 4, 5 }, y[5] = { 0 }, z[5] = { 0 };
        bad |= !gs[k] || whale_group_size(gs[k]) != 1 || whale_group_rank(gs[k]) != 0;
        bad |= whale_allreduce(gs[k], x, y, 5, WHALE_FLOAT32, WHALE_AVG) != 0 || y[4] != 5;
        bad |= whale_reduce_scatter(gs[k], x, z, 5, WHALE_FLOAT32, WHALE_SUM) != 0 || z[2] != 3;
        bad |= whale_allgather(gs[k], x, y, 5, WHALE_FLOAT32) != 0 || y[0] != 1;
        bad |= whale_broadcast(gs[k], x, 5, WHALE_FLOAT32, 0) != 0;
        bad |= whale_reduce(gs[k], x, y, 5, WHALE_FLOAT32, WHALE_MAX, 0) != 0 || y[3] != 4;
        bad |= whale_barrier(gs[k]) != 0;
        whale_req *r;
        bad |= whale_iallreduce(gs[k], x, x, 5, WHALE_FLOAT32, WHALE_SUM, &r) != 0 || whale_wait(r) != 0 || x[1] != 2;
    }
    float v = 1;
    bad |= whale_send(whale_world(ctx), &v, 1, WHALE_FLOAT32, 0, 0) != WHALE_EINVAL;
    bad |= whale_allreduce(whale_world(ctx), &v, &v, 1, (enum whale_dtype)99, WHALE_SUM) != WHALE_EINVAL;
    bad |= whale_broadcast(whale_world(ctx), &v, 1, WHALE_FLOAT32, 3) != WHALE_EINVAL;
    bad |= whale_allreduce(NULL, &v, &v, 1, WHALE_FLOAT32, WHALE_SUM) != WHALE_EINVAL;
    bad |= whale_allreduce(whale_world(ctx), NULL, &v, 1, WHALE_FLOAT32, WHALE_SUM) != WHALE_EINVAL;
    bad |= whale_dev_available() && 0;
    whale_group *sub;
    int one = 0;
    bad |= whale_group_create(whale_world(ctx), &one, 1, &sub) != 0 || !sub || whale_group_size(sub) != 1;
    whale_group_free(sub);
    rc = whale_finalize(ctx);
    printf("comm_alone: %s\n", bad || rc ? "FAILED" : "OK");
    return bad || rc ? 1 : 0;
}
