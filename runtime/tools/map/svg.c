/* whale-map --svg: switches on top, their nodes below, one square per task.
 * Colour: hue = PP stage, lightness = DP index within the stage; a dark
 * outline joins the tasks of one TP group on a node; grey = spare. */
#include "svg.h"
#include "whale/error.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define CELL 22      /* task square */
#define PAD 6
#define NODE_H (CELL + 2 * PAD + 16)
#define SW_H 24
#define LEVEL_GAP 46

static void xml_text(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

#define MAX_ROW_W 1800 /* px: wider steps wrap into rows */
#define MIN_W 720      /* px: the title and legend fit */

static int node_width(int ntasks)
{
    int w = ntasks * CELL + 2 * PAD;
    return w < 70 ? 70 : w;
}

/* Several rows: the switches above the leaves, listed at the top (a tree
 * over wrapped rows would cross every row). */
static void draw_upper_switches(FILE *f, const struct whale_topo *t, int maxlvl)
{
    if (!t || maxlvl < 1)
        return;
    int x = 20;
    for (int lvl = maxlvl; lvl >= 1; lvl--)
        for (int s = 0; s < t->nswitches; s++) {
            if (t->switches[s].level != lvl)
                continue;
            int nch = 0;
            for (int c = 0; c < t->nswitches; c++)
                nch += t->switches[c].parent == s;
            fprintf(f, "<rect x=\"%d\" y=\"66\" width=\"110\" height=\"%d\" rx=\"4\" fill=\"#eee\" "
                       "stroke=\"#555\"/>\n<text x=\"%d\" y=\"81\" text-anchor=\"middle\">",
                    x, SW_H, x + 55);
            xml_text(f, t->switches[s].name);
            fprintf(f, " (%d below)</text>\n", nch);
            x += 120;
        }
}

/* Several rows: over each row, a box per leaf switch spanning its nodes in
 * that row, named with its parent. */
static void draw_row_leaves(FILE *f, const struct whale_topo *t, const struct whale_layout *l,
                            const int *order, const int *leaf, const int *x0, const int *row,
                            const int *first, int m, int top, int row_h)
{
    (void)l;
    for (int q = 0; q < m;) {
        int i = order[q], e = q + 1;
        while (e < m && leaf[order[e]] == leaf[i] && row[order[e]] == row[i])
            e++;
        int last = order[e - 1];
        if (t && leaf[i] >= 0) {
            int y = top + row[i] * row_h;
            int w = x0[last] + node_width(first[last + 1] - first[last]) - x0[i];
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"4\" fill=\"#eee\" "
                       "stroke=\"#555\"/>\n<text x=\"%d\" y=\"%d\">", x0[i], y, w, SW_H, x0[i] + 6,
                    y + 15);
            xml_text(f, t->switches[leaf[i]].name);
            int p = t->switches[leaf[i]].parent;
            if (p >= 0) {
                fputs(" (under ", f);
                xml_text(f, t->switches[p].name);
                fputc(')', f);
            }
            fputs("</text>\n", f);
        }
        q = e;
    }
}

static void color_of(const struct whale_layout *l, int rank, char *buf, size_t n)
{
    struct whale_coords co;
    whale_grid_coords(&l->grid, rank, &co);
    int hue = l->pp > 1 ? (co.pp * 360 / l->pp + 200) % 360 : 210;
    int light = l->dp > 1 ? 40 + (co.dp * 35) / (l->dp - 1) : 55;
    snprintf(buf, n, "hsl(%d,65%%,%d%%)", hue, light);
}

int map_svg_write(FILE *f, const struct whale_map_input *in, const struct whale_layout *l)
{
    const struct whale_topo *t = in->topo;
    int n = l->nnodes;
    /* order nodes by their leaf (tree order by switch index), then step order */
    int *order = malloc((size_t)n * sizeof *order);
    int *leaf = malloc((size_t)n * sizeof *leaf);
    int *x0 = malloc((size_t)n * sizeof *x0);
    int *row = malloc((size_t)n * sizeof *row);
    int *first = calloc((size_t)n + 1, sizeof *first);
    int *byslot = malloc((size_t)l->ntasks * sizeof *byslot);
    int nsw = t ? t->nswitches : 0;
    double *swx = calloc((size_t)nsw + 1, sizeof *swx);
    int *swcnt = calloc((size_t)nsw + 1, sizeof *swcnt);
    int rc = 0;
    if (!order || !leaf || !x0 || !row || !first || !byslot || !swx || !swcnt) {
        rc = WHALE_ENOMEM;
        goto done;
    }
    for (int i = 0; i < n; i++) {
        int k = l->topo_node[i];
        leaf[i] = (t && k >= 0) ? t->nodes[k].leaf : -1;
    }
    int m = 0;
    for (int s = -1; s < nsw; s++)
        for (int i = 0; i < n; i++)
            if (leaf[i] == s)
                order[m++] = i;
    for (int k = 0; k < l->ntasks; k++)
        first[l->node_of_task[k] + 1]++;
    for (int i = 0; i < n; i++)
        first[i + 1] += first[i];
    for (int k = 0; k < l->ntasks; k++)
        byslot[first[l->node_of_task[k]] + l->local_of_task[k]] = k;
    int maxlvl = 0;
    for (int s = 0; s < nsw; s++)
        if (t->switches[s].level > maxlvl)
            maxlvl = t->switches[s].level;
    /* Nodes in rows of at most MAX_ROW_W px (a 128-node step was one row of
     * 25,000 px): one row keeps the whole switch tree above the nodes; with
     * several rows each row gets its own leaf-switch band and the upper
     * levels are listed at the top. */
    int x = 20, prev_leaf = -2, nrows = 1, widest = 0;
    for (int q = 0; q < m; q++) {
        int i = order[q];
        int w = node_width(first[i + 1] - first[i]);
        if (leaf[i] != prev_leaf && q)
            x += 24; /* gap between switches */
        if (q && x + w > MAX_ROW_W) {
            nrows++;
            x = 20;
        }
        prev_leaf = leaf[i];
        x0[i] = x;
        row[i] = nrows - 1;
        x += w + 8;
        if (x > widest)
            widest = x;
    }
    bool wrap = nrows > 1;
    int top = 80 + (nsw ? (wrap ? LEVEL_GAP : (maxlvl + 1) * LEVEL_GAP) : 0);
    int band = wrap && nsw ? SW_H + 24 : 0; /* a row's own leaf switches */
    int row_h = NODE_H + 40 + band;
#define NTOP(i) (top + row[i] * row_h + band)
    for (int q = 0; q < m && !wrap; q++) {
        int i = order[q];
        if (leaf[i] >= 0) {
            swx[leaf[i]] += x0[i] + node_width(first[i + 1] - first[i]) / 2.0;
            swcnt[leaf[i]]++;
        }
    }
    /* wide enough for the title and the legend (a 4-node step clipped them) */
    int width = widest + 20, height = top + nrows * row_h + 10;
    if (width < MIN_W)
        width = MIN_W;
    /* switch positions: leaves over their nodes, parents over children */
    for (int lvl = 1; lvl <= maxlvl && !wrap; lvl++)
        for (int s = 0; s < nsw; s++)
            if (t->switches[s].level == lvl - 1 && swcnt[s] && t->switches[s].parent >= 0) {
                int p = t->switches[s].parent;
                swx[p] += swx[s] / swcnt[s];
                swcnt[p]++;
                /* make the child's position final: mark by storing mean */
            }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"10\">\n",
            width, height, width, height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(f, "<text x=\"20\" y=\"22\" font-size=\"14\" font-weight=\"bold\">whale-map: TP=%d "
               "PP=%d DP=%d, %d ranks on %d nodes (%d spare), map=%s</text>\n",
            l->tp, l->pp, l->dp, l->world, l->nnodes, l->nspare_nodes,
            whale_map_policy_name(l->policy));
    fprintf(f, "<text x=\"20\" y=\"38\">colour: hue = PP stage, shade = DP index; black outline "
               "= TP group (on a node)</text>\n");
    fprintf(f, "<text x=\"20\" y=\"52\">dashed = NVLink domain; grey = spare. Link time per "
               "step %.4g s</text>\n", l->cost.seconds);
    if (wrap) {
        draw_upper_switches(f, t, maxlvl);
        draw_row_leaves(f, t, l, order, leaf, x0, row, first, m, top, row_h);
    }
    /* switches (one row: the whole tree above the nodes) */
    for (int s = 0; s < nsw && !wrap; s++) {
        if (!swcnt[s])
            continue;
        double cx = swx[s] / swcnt[s];
        int y = 66 + (maxlvl - t->switches[s].level) * LEVEL_GAP;
        int p = t->switches[s].parent;
        if (p >= 0 && swcnt[p]) {
            double px = swx[p] / swcnt[p];
            int py = 66 + (maxlvl - t->switches[p].level) * LEVEL_GAP;
            fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888\"/>\n", cx, y,
                    px, py + SW_H);
        }
        fprintf(f, "<rect x=\"%.1f\" y=\"%d\" width=\"60\" height=\"%d\" rx=\"4\" fill=\"#eee\" "
                   "stroke=\"#555\"/>\n", cx - 30, y, SW_H);
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", cx, y + 15);
        xml_text(f, t->switches[s].name);
        fputs("</text>\n", f);
    }
    /* multi-node NVLink domains: a dashed box around each run of drawn
     * nodes of one domain */
    for (int q = 0; q < m;) {
        int i = order[q];
        int k = l->topo_node[i];
        int dom = (t && k >= 0) ? t->nodes[k].domain : -1;
        int e = q + 1;
        while (dom >= 0 && e < m && l->topo_node[order[e]] >= 0 &&
               t->nodes[l->topo_node[order[e]]].domain == dom && row[order[e]] == row[i])
            e++;
        if (dom >= 0) {
            int last = order[e - 1];
            int wl = node_width(first[last + 1] - first[last]);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"6\" fill=\"none\" "
                       "stroke=\"#7a3db8\" stroke-dasharray=\"5,3\"/>\n",
                    x0[i] - 4, NTOP(i) - 4, x0[last] + wl - x0[i] + 8, NODE_H + 22);
            fprintf(f, "<text x=\"%d\" y=\"%d\" fill=\"#7a3db8\">NVLink domain ", x0[i],
                    NTOP(i) + NODE_H + 14);
            xml_text(f, t->domains[dom].name);
            fputs("</text>\n", f);
        }
        q = e;
    }
    /* nodes and tasks */
    for (int q = 0; q < m; q++) {
        int i = order[q];
        int nt = first[i + 1] - first[i];
        int w = node_width(nt);
        int ntop = NTOP(i);
        if (!wrap && leaf[i] >= 0 && swcnt[leaf[i]]) {
            double lx = swx[leaf[i]] / swcnt[leaf[i]];
            int ly = 66 + (maxlvl - t->switches[leaf[i]].level) * LEVEL_GAP + SW_H;
            fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#bbb\"/>\n",
                    x0[i] + w / 2, ntop, lx, ly);
        }
        int k = l->topo_node[i];
        int dom = (t && k >= 0) ? t->nodes[k].domain : -1;
        fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" rx=\"5\" fill=\"%s\" "
                   "stroke=\"%s\" stroke-width=\"%s\"/>\n", x0[i], ntop, w, NODE_H,
                l->spare_node[i] ? "#f4f4f4" : "#fafafa", dom >= 0 ? "#7a3db8" : "#444",
                dom >= 0 ? "2" : "1");
        fprintf(f, "<text x=\"%d\" y=\"%d\">", x0[i] + 4, ntop + 12);
        xml_text(f, in->nodes[i]);
        if (l->spare_node[i])
            fputs(" spare", f);
        fputs("</text>\n", f);
        for (int s = 0; s < nt; s++) {
            int task = byslot[first[i] + s];
            int r = l->rank_of_task[task];
            int cx = x0[i] + PAD + s * CELL, cy = ntop + 16 + PAD;
            char col[48] = "#bbbbbb";
            if (r >= 0)
                color_of(l, r, col, sizeof col);
            fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"%s\">"
                       "<title>task %d", cx + 1, cy, CELL - 2, CELL - 2, col, task);
            if (r >= 0) {
                struct whale_coords co;
                whale_grid_coords(&l->grid, r, &co);
                fprintf(f, " rank %d tp %d dp %d pp %d", r, co.tp, co.dp, co.pp);
            } else {
                fputs(" spare", f);
            }
            fprintf(f, "</title></rect>\n<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" "
                       "font-size=\"8\">%s%d</text>\n",
                    cx + CELL / 2, cy + CELL / 2 + 3, r >= 0 ? "" : "S", r >= 0 ? r : task);
        }
        /* TP groups: runs of tasks on this node with the same rank / TP */
        for (int s = 0; s < nt;) {
            int r = l->rank_of_task[byslot[first[i] + s]];
            int e = s + 1;
            while (r >= 0 && e < nt && l->rank_of_task[byslot[first[i] + e]] >= 0 &&
                   l->rank_of_task[byslot[first[i] + e]] / l->tp == r / l->tp)
                e++;
            if (r >= 0 && l->tp > 1)
                fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" "
                           "stroke=\"black\" stroke-width=\"1.5\" rx=\"3\"/>\n",
                        x0[i] + PAD + s * CELL, ntop + 16 + PAD - 1, (e - s) * CELL, CELL);
            s = e;
        }
    }
#undef NTOP
    fputs("</svg>\n", f);
    if (ferror(f))
        rc = WHALE_EIO;
done:
    free(order);
    free(leaf);
    free(x0);
    free(row);
    free(first);
    free(byslot);
    free(swx);
    free(swcnt);
    return rc;
}
