/* whale-train -> Slurm: report an agreed failure (train_report.c). */
#ifndef WHALE_TRAIN_REPORT_H
#define WHALE_TRAIN_REPORT_H

#include "whale/elastic.h"

void train_report_failures(const struct whale_membership_event *ev);

#endif
