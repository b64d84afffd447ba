#!/usr/bin/env python3
"""Add whale_* names to runtime/libwhale.map (sorted, once each).

libwhale.so exports only what the tools call. When a tool starts calling
another whale_* function its link fails with "undefined reference to
`whale_x'": run this with those names (or pipe the link log into it:
`ninja -C build 2>&1 | contrib/libwhale-map-add.py -`).
"""
import os
import re
import sys

MAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "runtime", "libwhale.map")


def main(argv):
    if len(argv) < 2 or argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        return 0 if len(argv) >= 2 else 2
    text = sys.stdin.read() if argv[1:] == ["-"] else " ".join(argv[1:])
    # from a link log only the undefined references count (file names and
    # other words of the log may start with whale_ too)
    refs = re.findall(r"undefined reference to `(whale_\w+)'", text)
    new = set(refs) if argv[1:] == ["-"] else set(re.findall(r"\bwhale_\w+", text))
    s = open(MAP).read()
    head = s[: s.index("  global:\n") + len("  global:\n")]
    names = set(re.findall(r"^    (whale_\w+);$", s, re.M))
    added = sorted(new - names)
    body = "".join("    %s;\n" % n for n in sorted(names | new))
    open(MAP, "w").write(head + body + "  local: *;\n};\n")
    print("added: " + (" ".join(added) if added else "nothing"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
