/* whale-train --device cpu|cuda|auto (train_device.c). */
#ifndef TRAIN_DEVICE_H
#define TRAIN_DEVICE_H

#include <stdio.h>

#include "whale/engine.h"

struct train_device {
    const char *arg; /* --device (NULL: WHALE_DEVICE, else auto) */
};

void train_device_usage(FILE *f);
/* Resolves the device (--device, else WHALE_DEVICE, else auto) against this
 * build and the GPUs the task sees, says on rank 0 which one and why, and
 * sets ec->device. Non-zero, with the reason on stderr, when the device
 * asked for cannot be used or the value is not cpu, cuda or auto. */
int train_device_apply(const struct train_device *d, struct whale_engine_config *ec, int rank);

#endif
