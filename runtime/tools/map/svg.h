/* SVG drawing of a layout for whale-map. */
#ifndef WHALE_MAP_SVG_H
#define WHALE_MAP_SVG_H

#include <stdio.h>

#include "whale/map.h"

/* Nodes under their leaf switches (and those under spines), each task a
 * square coloured by PP stage (hue) and DP index (shade), TP groups
 * outlined, spares grey. Returns 0 or a negative WHALE_E* code. */
int map_svg_write(FILE *f, const struct whale_map_input *in, const struct whale_layout *l);

#endif
