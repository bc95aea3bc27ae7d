#!/usr/bin/env python3
"""Checks the build graph against the layers the README declares.

Each of the README's lines `layers: A > B C > D ...` lists top-level
packages from the top down; packages in one group are peers. A package may
depend only on a package below it in a line that names both: never on a
peer, never upward, never across pictures. The dependencies are read from
`bazel query` (every target under //..., test targets included), at the
level of top-level folders. The folders in UNCHECKED (test scaffolding,
scripts, the root's aliases) are not checked; any other folder with targets
that no line names fails, so a new package has to take its place in the
picture.

Usage: tools/check_layers.py [README.md]   (run from the repository root)
Prints each edge that breaks the layering and exits 1, else one line and 0.
"""
import re
import subprocess
import sys

# Test scaffolding (tests/, testing/), scripts, the scenario's files and
# the root package (its aliases of the binaries): they may depend on
# anything, and anything's tests may use them.
UNCHECKED = {"tests", "testing", "tools", "examples", ""}


def declared_layers(readme):
    """One {package: rank} per `layers:` line; rank 0 is the top."""
    pictures = []
    for line in open(readme, encoding="utf-8"):
        m = re.match(r"\s*layers:\s*(.+)$", line)
        if m:
            groups = [g.split() for g in m.group(1).strip().strip("`").split(">")]
            pictures.append({pkg: rank for rank, group in enumerate(groups) for pkg in group})
    if not pictures:
        sys.exit(f"{readme}: no `layers:` line")
    return pictures


def folder(label):
    m = re.match(r"//([^/:]*)", label)
    return m.group(1) if m else None


def edges():
    out = subprocess.run(
        ["bazel", "query", "--output=graph", "--nograph:factored", "--noshow_progress",
         "deps(//...) intersect //..."],
        check=True, capture_output=True, text=True).stdout
    for a, b in re.findall(r'"(//[^"]+)"\s*->\s*"(//[^"]+)"', out):
        yield folder(a), folder(b), a, b


def main():
    readme = sys.argv[1] if len(sys.argv) > 1 else "README.md"
    pictures = declared_layers(readme)
    named = set().union(*pictures)
    broken, unnamed, checked = [], set(), set()
    for src, dst, a, b in edges():
        for f in (src, dst):
            if f not in named and f not in UNCHECKED:
                unnamed.add(f)
        if src == dst or src in UNCHECKED or src not in named or dst not in named:
            continue
        checked.add((src, dst))
        both = [p for p in pictures if src in p and dst in p]
        if not both:
            broken.append(f"{a} -> {b}: no `layers:` line names both {src} and {dst}")
        elif not any(p[dst] > p[src] for p in both):
            peer = any(p[dst] == p[src] for p in both)
            broken.append(f"{a} -> {b}: {src} may not depend on "
                          f"{'its peer' if peer else 'the layer above it,'} {dst}")
    for f in sorted(unnamed):
        broken.append(f"//{f}: has targets but no place in the README's `layers:` line")
    if broken:
        print("\n".join(sorted(set(broken))))
        return 1
    print(f"layers: {len(checked)} package-to-package dependencies, all downward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
