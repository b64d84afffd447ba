/* Choosing the compute device (choose.c): the decision is a pure function
 * of what was asked and what the process sees, so the unit test can drive
 * every branch on a machine without a GPU. */
#ifndef BACKEND_CHOOSE_H
#define BACKEND_CHOOSE_H

#include <stdbool.h>
#include <stddef.h>

#include "whale/backend.h"

/* What the process sees. */
struct bk_device_probe {
    bool built;              /* this libwhale has the cuda backend */
    const char *visible;     /* CUDA_VISIBLE_DEVICES (NULL: unset) */
    int count;               /* GPUs the CUDA runtime reports (when built) */
    const char *error;       /* the runtime's error when it could not count them, else NULL */
};

/* Fills *p from this build, the environment and the CUDA runtime. */
void bk_device_probe_now(struct bk_device_probe *p);
/* The decision of whale_device_resolve for probe p. */
int bk_device_decide(enum whale_device asked, const struct bk_device_probe *p,
                     enum whale_device *out, char *why, size_t len);

#endif
