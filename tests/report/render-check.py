#!/usr/bin/env python3
"""Load a whale-report page in headless Chromium, read what each figure
rendered (the page's own check: box, shapes, extent of the data marks),
take a screenshot and count coloured pixels inside every figure's box.
Fails when a figure is missing, drew nothing, or is blank on screen.

usage: render-check.py PAGE.html OUT.png FIGURE-ID...   (ids without "fig-")
"""
import html
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import zlib


def chromium():
    for c in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(c)
        if p:
            return p
    sys.exit("render-check: no chromium on PATH (contrib/install-deps.sh installs it)")


BASE = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
        "--disable-dev-shm-usage", "--force-device-scale-factor=1", "--allow-file-access-from-files",
        "--virtual-time-budget=5000"]


def run(args, env_home):
    env = dict(os.environ, HOME=env_home)
    return subprocess.run([chromium()] + BASE + args, capture_output=True, text=True, env=env,
                          timeout=120)


def decode_png(path):
    """8-bit RGB/RGBA, non-interlaced (what Chromium writes) -> (w, h, rows of bytes, bpp)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, typ = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        pos += 12 + n
        if typ == b"IHDR":
            w, h, depth, ctype, _, _, inter = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and inter == 0, "unexpected PNG format"
            bpp = 3 if ctype == 2 else 4
        elif typ == b"IDAT":
            idat += body
        elif typ == b"IEND":
            break
    raw = zlib.decompress(idat)
    stride = w * bpp
    rows, prev, i = [], bytearray(stride), 0
    for _ in range(h):
        f = raw[i]
        line = bytearray(raw[i + 1:i + 1 + stride])
        i += 1 + stride
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b = prev[x]
            c = prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(line)
        prev = line
    return w, h, rows, bpp


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    page, png, want = os.path.abspath(sys.argv[1]), sys.argv[2], sys.argv[3:]
    home = os.path.dirname(os.path.abspath(png))
    url = "file://" + page
    r = run(["--dump-dom", url], home)
    m = re.search(r'data-render-check="([^"]*)"', r.stdout)
    if not m:
        sys.exit("render-check: the page's render check did not run (chromium rc %d):\n%s" % (r.returncode, r.stderr[-2000:]))
    figs = {f["id"]: f for f in json.loads(html.unescape(m.group(1)))}
    height = int(max(f["y"] + f["h"] for f in figs.values()) + 40)
    r = run(["--window-size=800,%d" % height, "--screenshot=" + os.path.abspath(png), url], home)
    if not os.path.exists(png):
        sys.exit("render-check: chromium wrote no screenshot (rc %d):\n%s" % (r.returncode, r.stderr[-2000:]))
    w, h, rows, bpp = decode_png(png)
    bad = 0
    for name in want:
        f = figs.get("fig-" + name)
        if not f:
            print("FAIL %-22s not on the page (figures: %s)" % (name, ", ".join(sorted(figs))))
            bad += 1
            continue
        x0, y0 = max(int(f["x"]), 0), max(int(f["y"]), 0)
        x1, y1 = min(int(f["x"] + f["w"]), w), min(int(f["y"] + f["h"]), h)
        colored = 0
        for y in range(y0, y1):
            row = rows[y]
            for x in range(x0, x1):
                p = row[x * bpp:x * bpp + 3]
                if max(p) - min(p) > 60:  # saturated: data marks, not text, grid or frame
                    colored += 1
        ok = f["shapes"] > 0 and f["bw"] > 0 and f["bh"] > 0 and colored >= 150
        bad += not ok
        print("%s %-22s box %dx%d at (%d,%d), %d shapes, marks %.0fx%.0f px, %d coloured pixels"
              % ("ok  " if ok else "FAIL", name, f["w"], f["h"], f["x"], f["y"], f["shapes"],
                 f["bw"], f["bh"], colored))
    print("screenshot %s: %dx%d" % (png, w, h))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
