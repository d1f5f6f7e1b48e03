"""The largest files and longest functions under src/, test modules aside (issue 33's measure).

A file counts its lines up to its test module (a `#[cfg(...test...)]` line at the left margin
followed by a `mod` line), or all of them without one. A function counts from its `fn` line to
its closing brace, the first `}` at the `fn` line's indentation; declarations without a body
(ending in `;`) are not functions here.

Usage: python3 load/house_sizes.py [--top N] [--max-file 600] [--max-fn 80] [DIR]
Exits 1 when a file reaches --max-file lines or a function --max-fn lines, 0 otherwise.
"""

import argparse
import os
import re
import sys

FN = re.compile(r"^(\s*)(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?fn\s+(\w+)")


def code_lines(lines):
    """The lines before the file's test module."""
    for at, line in enumerate(lines):
        starts_tests = line.startswith("#[cfg(") and "test" in line
        if starts_tests and at + 1 < len(lines) and re.search(r"\bmod\s", lines[at + 1]):
            return lines[:at]
    return lines


def functions(lines):
    """(length, name) of every function with a body."""
    found = []
    for at, line in enumerate(lines):
        match = FN.match(line)
        if not match:
            continue
        indent = match.group(1)
        opened = False
        for end in range(at, len(lines)):
            text = lines[end].rstrip()
            if not opened:
                if end == at and text.endswith("}"):
                    found.append((1, match.group(7)))
                    break
                if text.endswith(";"):
                    break
                opened = text.endswith("{")
                continue
            if lines[end].startswith(indent + "}"):
                found.append((end - at + 1, match.group(7)))
                break
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", nargs="?", default="src")
    parser.add_argument("--top", type=int, default=5)
    parser.add_argument("--max-file", type=int, default=600)
    parser.add_argument("--max-fn", type=int, default=80)
    args = parser.parse_args()
    files, fns = [], []
    for root, _, names in os.walk(args.dir):
        for name in names:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            with open(path, encoding="utf-8") as file:
                lines = code_lines(file.read().split("\n"))
            files.append((len(lines), path))
            fns.extend((length, path, fn) for length, fn in functions(lines))
    files.sort(reverse=True)
    fns.sort(reverse=True)
    print(f"files (lines before the test module; limit {args.max_file}):")
    for length, path in files[: args.top]:
        print(f"  {length:5} {path}")
    print(f"functions (fn line to closing brace; limit {args.max_fn}):")
    for length, path, name in fns[: args.top]:
        print(f"  {length:5} {path} {name}")
    over = [f for f in files if f[0] >= args.max_file] + [f for f in fns if f[0] >= args.max_fn]
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
