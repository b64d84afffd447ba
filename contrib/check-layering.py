#!/usr/bin/env python3
"""Fail on an include that goes up (or sideways) the module stack that
runtime/ARCHITECTURE.md describes. usage: check-layering.py [SOURCE_ROOT]"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..")
doc = os.path.join(root, "runtime", "ARCHITECTURE.md")
level, owner, exceptions = {}, {}, set()
for line in open(doc):
    m = re.match(r"\|\s*(\d+)\s*\|\s*(\w+)\s*\|([^|]*)\|", line)
    if m:
        mod = m.group(2)
        level[mod] = int(m.group(1))
        for h in m.group(3).split():
            owner[h] = mod
    m = re.match(r"- `(\w+) -> (\w+)`", line)
    if m:
        exceptions.add((m.group(1), m.group(2)))
if not level or not owner:
    sys.exit("check-layering: no module table in %s" % doc)

# every public header and every module folder must be in the table
problems = []
inc = os.path.join(root, "runtime", "include", "whale")
for h in sorted(os.listdir(inc)):
    if h.endswith(".h") and h[:-2] not in owner:
        problems.append("runtime/include/whale/%s: not in the module table of %s" % (h, doc))
src = os.path.join(root, "runtime", "src")
for m in sorted(os.listdir(src)):
    if os.path.isdir(os.path.join(src, m)) and m not in level:
        problems.append("runtime/src/%s: module not in the module table" % m)

pat = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def module_of_include(path, own):
    if path.startswith("whale/"):
        return owner.get(path[6:-2])
    if "/" in path:
        return path.split("/")[0] if path.split("/")[0] in level else None
    return own


def check(path, mod, header_owner=None):
    for n, line in enumerate(open(path, errors="replace"), 1):
        m = pat.match(line)
        if not m or m.group(1) == "whale_config.h":
            continue
        target = module_of_include(m.group(1), mod)
        if target is None or target == mod:
            continue
        if (mod, target) in exceptions:
            continue
        if level[target] >= level[mod] and mod != "tools":
            rel = os.path.relpath(path, root)
            problems.append("%s:%d: %s (level %d) includes %s of %s (level %d): modules include "
                            "only lower levels (runtime/ARCHITECTURE.md)"
                            % (rel, n, mod, level[mod], m.group(1), target, level[target]))


for m in os.listdir(src):
    d = os.path.join(src, m)
    for dirpath, _, files in os.walk(d):
        for f in files:
            if f.endswith((".c", ".h", ".cu", ".cc")):
                check(os.path.join(dirpath, f), m)
for h in os.listdir(inc):
    if h.endswith(".h") and h[:-2] in owner:
        check(os.path.join(inc, h), owner[h[:-2]])
sp = os.path.join(root, "spank")
for f in os.listdir(sp):
    if f.endswith((".c", ".h")):
        check(os.path.join(sp, f), "spank")

for p in problems:
    print(p)
print("check-layering: %d module(s), %d problem(s)" % (len(level), len(problems)))
sys.exit(1 if problems else 0)
