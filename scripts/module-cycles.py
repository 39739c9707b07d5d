#!/usr/bin/env python3
"""Finds import cycles between the source files of a Rust crate.

Each file under `src/` is a module. An edge A -> B is any path in A, outside `#[cfg(test)]`
blocks, that names B through `crate::…` or `super::…` (`use` items and inline paths alike),
plus, with --parent-edges, a parent module's use of an item of its own child (`child::Item`,
as in `pub(crate) use session::Inbound`; declaring `mod child;` alone is not a use). A cycle
is a strongly connected component of more than one file.

With --top-level, every module counts as its top-level ancestor (`client::session` as
`client`) and the crate root (the wiring: it declares and re-exports everything) is left
out: the check is then that the crate's top-level modules form layers, whatever their files
do inside. --verbose prints the layers, lowest first.

Usage: scripts/module-cycles.py [--parent-edges] [--top-level] [--verbose] CRATE_DIR...
Exit status 1 if any crate has a cycle.
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)+|::\{)")


def modules(src):
    """Maps module path (tuple) -> file, for every .rs file under src."""
    found = {}
    for root, _dirs, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, src)[:-3].split(os.sep)
            if rel[-1] in ("mod", "lib", "main"):
                rel = rel[:-1]
            found[tuple(rel)] = path
    return found


def strip_tests(text):
    """Drops `#[cfg(test)]` items (a `mod tests { … }` or one item) and comments."""
    text = re.sub(r"//[^\n]*", "", text)
    out, i = [], 0
    marker = re.compile(r"#\[cfg\(test\)\]")
    while True:
        m = marker.search(text, i)
        if not m:
            out.append(text[i:])
            break
        out.append(text[i:m.start()])
        j = m.end()
        # Skip to the item's end: a `;` before any `{`, or the matching `}`.
        depth, k = 0, j
        while k < len(text):
            c = text[k]
            if c == ";" and depth == 0:
                k += 1
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    k += 1
                    break
            k += 1
        i = k
    return "".join(out)


def expand_use_groups(text):
    """`crate::a::{b, c::d}` -> `crate::a::b crate::a::c::d` (one level of braces suffices
    for the paths that name modules)."""
    pattern = re.compile(r"\b(crate|super)((?:::[A-Za-z_][A-Za-z0-9_]*)*)::\{([^{}]*)\}")
    while True:
        new = pattern.sub(
            lambda m: " ".join(
                f"{m.group(1)}{m.group(2)}::{part.strip()}"
                for part in m.group(3).split(",")
                if part.strip()
            ),
            text,
        )
        if new == text:
            return text
        text = new


def resolve(module, kind, segments, known):
    """The longest known module that a `crate::`/`super::` path names (None: itself)."""
    if kind == "crate":
        base = ()
    else:
        base = module[:-1]
        while segments and segments[0] == "super":
            base = base[:-1]
            segments = segments[1:]
    target = base
    best = base if base in known else None
    for seg in segments:
        target = target + (seg,)
        if target in known:
            best = target
        else:
            break
    return best


def edges(known, parent_edges):
    graph = {m: set() for m in known}
    for module, path in known.items():
        text = expand_use_groups(strip_tests(open(path, encoding="utf-8").read()))
        for m in re.finditer(r"\b(crate|super)((?:::(?:super|[A-Za-z_][A-Za-z0-9_]*))+)", text):
            segments = [s for s in m.group(2).split("::") if s]
            if m.group(1) == "super":
                segments = ["super"] + segments
                kind = "super"
                segments = segments[1:]
            else:
                kind = "crate"
            target = resolve(module, kind, segments, known)
            if target is not None and target != module:
                # A child naming its own ancestor through `super` counts like any other edge.
                graph[module].add(target)
        if parent_edges:
            for child in known:
                if len(child) == len(module) + 1 and child[: len(module)] == module:
                    uses = re.search(r"(?<![:\w])" + re.escape(child[-1]) + r"::", text)
                    if uses:
                        graph[module].add(child)
    return graph


def cycles(graph):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(component)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


def collapse(graph):
    """The graph of top-level modules, without the crate root; self-edges dropped."""
    top = lambda m: m[:1]
    out = {}
    for module, targets in graph.items():
        if not module:
            continue
        out.setdefault(top(module), set())
        for target in targets:
            if target and top(target) != top(module):
                out[top(module)].add(top(target))
    return out


def layers(graph):
    """Modules by layer: a module's layer is one above the highest module it uses."""
    level = {}

    def depth(v):
        if v not in level:
            level[v] = 0
            level[v] = 1 + max((depth(w) for w in graph[v]), default=-1)
        return level[v]

    for v in graph:
        depth(v)
    out = {}
    for v, d in level.items():
        out.setdefault(d, []).append(name(v))
    return [sorted(out[d]) for d in sorted(out)]


def name(module):
    return "::".join(module) or "(root)"


def main(argv):
    parent_edges = "--parent-edges" in argv
    verbose = "--verbose" in argv
    top_level = "--top-level" in argv
    crates = [a for a in argv if not a.startswith("--")]
    if not crates:
        print(__doc__)
        return 2
    failed = False
    for crate in crates:
        known = modules(os.path.join(crate, "src"))
        graph = edges(known, parent_edges)
        if top_level:
            graph = collapse(graph)
        found = cycles(graph)
        if verbose and top_level and not found:
            for number, names in enumerate(layers(graph)):
                print(f"  layer {number}: {', '.join(names)}")
        elif verbose:
            for module in sorted(graph):
                print(f"  {name(module)} -> {', '.join(sorted(name(t) for t in graph[module]))}")
        if found:
            failed = True
            for component in found:
                print(f"{crate}: cycle of {len(component)} modules: "
                      + ", ".join(sorted(name(m) for m in component)))
        else:
            print(f"{crate}: {len(graph)} modules, no cycle")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
