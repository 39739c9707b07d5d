#!/usr/bin/env python3
"""Checks the sizes the project keeps: no product source file over 800 lines, no product
function over 100 lines (150 in the bench crate), except functions kept whole on purpose.

Product source is every `.rs` file under `crates/*/src/`. A file's size counts its lines
outside in-file `#[cfg(test)]` modules (tests may sit beside the code they test). A
function's size runs from its `fn` line to its closing brace; functions inside `#[cfg(test)]`
modules are not counted. A function is kept whole on purpose when the line just above its
attributes and doc comment, or its doc comment, holds `Kept whole:` and a reason; at most
three such functions exist in the workspace.

Usage: scripts/sizes.py [--list N] [ROOT]
  --list N   also prints every function over N lines (a map for splitting), and passes.
Exit status 1 when a limit is passed.
"""

import os
import re
import sys

FILE_LIMIT = 800
FN_LIMIT = 100
FN_LIMIT_BENCH = 150
MAX_KEPT_WHOLE = 3

FN_START = re.compile(
    r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?(?:unsafe\s+)?"
    r"(?:extern\s+\"[^\"]*\"\s+)?fn\s+([A-Za-z_][A-Za-z0-9_]*)"
)


def blank_strings_and_comments(text):
    """Replaces the contents of strings, chars and comments with spaces, keeping newlines,
    so braces inside them are not counted."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', text[i:i + 40]) and not (
            i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            m = re.match(r'r(#*)"', text[i:])
            close = '"' + m.group(1)
            j = text.find(close, i + len(m.group(0)))
            j = n if j < 0 else j + len(close)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            m = re.match(r"'(\\.[^']*|[^\\'])'", text[i:i + 12])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def matching_brace(text, open_at):
    depth = 0
    for k in range(open_at, len(text)):
        if text[k] == "{":
            depth += 1
        elif text[k] == "}":
            depth -= 1
            if depth == 0:
                return k
    return len(text) - 1


def test_spans(text):
    """Line spans (start, end), 1-based and inclusive, of `#[cfg(test)]` items with a body."""
    spans = []
    for m in re.finditer(r"#\[cfg\(test\)\]", text):
        semi = text.find(";", m.end())
        brace = text.find("{", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue
        end = matching_brace(text, brace)
        spans.append((text.count("\n", 0, m.start()) + 1, text.count("\n", 0, end) + 1))
    return spans


def functions(text, lines):
    """(name, first line, last line) of every fn with a body."""
    found = []
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    for number, line in enumerate(lines, start=1):
        m = FN_START.match(line)
        if not m:
            continue
        start = offsets[number - 1]
        brace = text.find("{", start)
        semi = text.find(";", start)
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body
        end = matching_brace(text, brace)
        found.append((m.group(1), number, text.count("\n", 0, end) + 1))
    return found


def kept_whole(raw_lines, first):
    """Whether the comment block above line `first` (1-based) says `Kept whole:`."""
    k = first - 2
    while k >= 0:
        stripped = raw_lines[k].strip()
        if stripped.startswith("#[") or stripped.startswith("///") or stripped.startswith("//"):
            if "Kept whole:" in stripped:
                return True
            k -= 1
            continue
        break
    return False


def main(argv):
    list_over = None
    args = list(argv)
    if args[:1] == ["--list"]:
        list_over = int(args[1])
        args = args[2:]
    root = args[0] if args else "."
    problems, kept, listed = [], [], []
    crates = os.path.join(root, "crates")
    for crate in sorted(os.listdir(crates)):
        src = os.path.join(crates, crate, "src")
        if not os.path.isdir(src):
            continue
        limit = FN_LIMIT_BENCH if crate == "bench" else FN_LIMIT
        for dirpath, _dirs, files in os.walk(src):
            for name in sorted(files):
                if not name.endswith(".rs"):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8") as f:
                    raw = f.read()
                raw_lines = raw.split("\n")
                text = blank_strings_and_comments(raw)
                lines = text.split("\n")
                spans = test_spans(text)
                in_tests = lambda n: any(a <= n <= b for a, b in spans)
                test_lines = sum(b - a + 1 for a, b in spans)
                size = len(raw_lines) - (1 if raw.endswith("\n") else 0) - test_lines
                if size > FILE_LIMIT:
                    problems.append(f"{rel}: {size} lines outside tests (limit {FILE_LIMIT})")
                for fn, first, last in functions(text, lines):
                    if in_tests(first):
                        continue
                    length = last - first + 1
                    if list_over is not None and length > list_over:
                        listed.append(f"{length:5} {rel}:{first} {fn}")
                    if length > limit:
                        if kept_whole(raw_lines, first):
                            kept.append(f"{rel}:{first} {fn} ({length} lines)")
                        else:
                            problems.append(
                                f"{rel}:{first}: fn {fn} is {length} lines (limit {limit})"
                            )
    if list_over is not None:
        print("\n".join(sorted(listed, reverse=True)))
        return 0
    if len(kept) > MAX_KEPT_WHOLE:
        problems.append(
            f"{len(kept)} functions are kept whole (at most {MAX_KEPT_WHOLE}): " + "; ".join(kept)
        )
    for line in problems:
        print(line)
    if problems:
        return 1
    print(f"sizes: files within {FILE_LIMIT} lines, functions within {FN_LIMIT} "
          f"({FN_LIMIT_BENCH} in bench); kept whole: {len(kept)}")
    for line in kept:
        print(f"  kept whole: {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
