/* Learning-rate schedule: linear warmup then cosine decay (GPT-2/3 recipe). */
#include "whale/optim.h"

#include <math.h>

float whale_lr_at(const struct whale_lr_schedule *s, int64_t step)
{
    if (s->warmup > 0 && step < s->warmup)
        return s->lr_max * (float)(step + 1) / (float)s->warmup;
    if (s->total <= s->warmup || step >= s->total)
        return step >= s->total && s->total > s->warmup ? s->lr_min : s->lr_max;
    double p = (double)(step - s->warmup) / (double)(s->total - s->warmup);
    double c = 0.5 * (1.0 + cos(M_PI * p));
    return (float)(s->lr_min + c * (s->lr_max - s->lr_min));
}
