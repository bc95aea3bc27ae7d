#!/usr/bin/env python3
"""Lists the source files and functions over the house limits.

Files: C++ sources and headers outside tests over --max_file_lines (800).
Functions: top-level brace blocks (functions, and member functions defined
in a class body) over --max_function_lines (120), found by matching braces
with comments and string literals blanked; a lambda counts toward the
function that holds it. A heuristic, not a parser: good enough to keep the
limits visible.

Usage: tools/code_size.py [--max_file_lines N] [--max_function_lines N]
(from the repository root). Exits 0; prints "none" when nothing is over.
"""
import argparse
import re
import subprocess


def sources():
    files = subprocess.run(["git", "ls-files", "*.cc", "*.h", "*.cu"], check=True,
                           capture_output=True, text=True).stdout.split()
    return [f for f in files
            if not f.endswith("_test.cc") and not f.startswith(("tests/", "third_party/"))]


def blank_comments_and_strings(text):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"'(\\.|[^'\\\n])'", "' '", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def long_blocks(path, limit):
    lines = blank_comments_and_strings(open(path, encoding="utf-8").read()).split("\n")
    stack, out = [], []
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        scope = bool(re.match(r"(namespace|extern)\b", stripped) or
                     (re.match(r"(class|struct)\b", stripped) and stripped.endswith("{")))
        for ch in line:
            if ch == "{":
                stack.append(("scope" if scope else "block", number))
            elif ch == "}" and stack:
                kind, start = stack.pop()
                outer = all(k == "scope" for k, _ in stack)
                if kind == "block" and outer and number - start + 1 > limit:
                    out.append((number - start + 1, path, start))
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max_file_lines", type=int, default=800)
    parser.add_argument("--max_function_lines", type=int, default=120)
    args = parser.parse_args()
    files = sources()
    big = []
    for f in files:
        with open(f, encoding="utf-8") as text:
            n = sum(1 for _ in text)
        if n > args.max_file_lines:
            big.append((n, f))
    print(f"files over {args.max_file_lines} lines:")
    for n, f in sorted(big, reverse=True):
        print(f"  {n:5d}  {f}")
    if not big:
        print("  none")
    blocks = [b for f in files for b in long_blocks(f, args.max_function_lines)]
    print(f"functions over {args.max_function_lines} lines:")
    for n, f, start in sorted(blocks, reverse=True):
        print(f"  {n:5d}  {f}:{start}")
    if not blocks:
        print("  none")


if __name__ == "__main__":
    main()
