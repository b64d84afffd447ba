/* The device area plugged into whale-train's hooks: --device
 * cpu|cuda|auto (else WHALE_DEVICE, else auto) resolved before the engine
 * is created. The logic lives in train_device.c. */
#include "train_areas.h"
#include "train_device.h"

/* one whale-train per process: the flag's value until configure reads it */
static struct train_device dev;

static int set_device(struct train *t, const char *a)
{
    (void)t;
    dev.arg = a;
    return 0;
}

static const struct train_opt device_opts[] = {
    { "device", 1, set_device },
    { NULL, 0, NULL },
};

static int configure(struct train *t)
{
    return train_device_apply(&dev, &t->ec, t->rank) ? 2 : TRAIN_GO;
}

const struct train_area train_area_device = {
    .name = "device",
    .opts = device_opts,
    .usage = train_device_usage,
    .configure = configure,
};
