#!/usr/bin/env python3
"""Writes THIRD-PARTY-NOTICES.md: every third-party crate in Cargo.lock (from `cargo metadata`)
with its licence, which of the project's programs it goes into, and the licence files each
crate ships, reproduced once per distinct text; then the JavaScript the dashboard embeds.

Usage: python3 scripts/third-party-notices.py           (rewrites the file)
       python3 scripts/third-party-notices.py --check   (fails when the file is not what this
                                                         script would write, e.g. after
                                                         Cargo.lock gained a crate)
Reads the crates' sources from Cargo's registry cache (`cargo metadata` fetches what is missing).
"""

import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, "THIRD-PARTY-NOTICES.md")
VENDOR = os.path.join(ROOT, "crates", "node", "assets", "dashboard", "vendor")
# The programs the project ships, in the order their crates are claimed.
PROGRAMS = ["switchyard", "switchyard-bench"]
LICENCE_FILE = re.compile(r"^(licen[cs]e|copying|unlicense|notice|copyright)([-._].*)?$", re.I)
# The dashboard's vendored files (crates/node/assets/dashboard/vendor/README.md): package, the
# variable of scripts/vendor-dashboard.sh that pins its version, licence, files, licence file.
JAVASCRIPT = [
    ("@microsoft/signalr", "SIGNALR_VERSION", "MIT", "signalr.min.js", "signalr.LICENSE"),
    ("uplot", "UPLOT_VERSION", "MIT", "uPlot.iife.min.js, uPlot.min.css", "uPlot.LICENSE"),
]


# C libraries a crate builds from sources it carries and links into the binary: their licence
# files, relative to the crate, beside the crate's own.
BUNDLED = {
    "tikv-jemalloc-sys": ["jemalloc/COPYING"],
}


def vendored_version(variable):
    with open(os.path.join(ROOT, "scripts", "vendor-dashboard.sh"), encoding="utf-8") as f:
        found = re.search(rf"^{variable}=(\S+)$", f.read(), re.M)
    if not found:
        sys.exit(f"scripts/vendor-dashboard.sh sets no {variable}")
    return found.group(1)


def metadata():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--locked"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def programs_of(meta):
    """Package id -> the first of PROGRAMS whose build (normal and build dependencies, any
    platform) needs it; crates only tests and benchmarks' dev-dependencies need get "tests"."""
    nodes = {node["id"]: node for node in meta["resolve"]["nodes"]}
    by_name = {p["name"]: p["id"] for p in meta["packages"] if p["id"] in meta["workspace_members"]}
    claimed = {}
    for program in PROGRAMS:
        stack = [by_name[program]]
        while stack:
            current = stack.pop()
            if current in claimed:
                continue
            claimed[current] = program
            for dep in nodes[current]["deps"]:
                kinds = {kind["kind"] for kind in dep["dep_kinds"]}
                if kinds & {None, "build"}:
                    stack.append(dep["pkg"])
    return claimed


def normalized(text):
    lines = [line.rstrip() for line in text.replace("\r\n", "\n").split("\n")]
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return "\n".join(lines)


def licence_files(package):
    root = os.path.dirname(package["manifest_path"])
    names = sorted(n for n in os.listdir(root) if LICENCE_FILE.match(n) and os.path.isfile(os.path.join(root, n)))
    declared = package.get("license_file")
    if declared and os.path.basename(declared) not in names and os.path.isfile(os.path.join(root, declared)):
        names.append(declared)
    names += [n for n in BUNDLED.get(package["name"], []) if os.path.isfile(os.path.join(root, n))]
    texts = []
    for name in names:
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            text = normalized(f.read())
        if text:
            texts.append((name, text))
    return texts


def fence(text):
    longest = max((len(m) for m in re.findall(r"`{3,}", text)), default=2)
    return "`" * (longest + 1)


def render(meta):
    members = set(meta["workspace_members"])
    programs = programs_of(meta)
    packages = sorted(
        (p for p in meta["packages"] if p["id"] not in members),
        key=lambda p: (p["name"], p["version"]),
    )
    texts = {}  # text -> (number, [crate names])
    rows = []
    for package in packages:
        label = f"{package['name']} {package['version']}"
        numbers = []
        for _, text in licence_files(package):
            entry = texts.setdefault(text, (len(texts) + 1, []))
            entry[1].append(label)
            numbers.append(entry[0])
        cited = ", ".join(f"[{n}](#licence-{n})" for n in numbers) or "none shipped"
        licence = (package.get("license") or "see its licence file").replace("/", " OR ").replace("|", "\\|")
        use = programs.get(package["id"], "tests")
        rows.append(f"| {package['name']} | {package['version']} | {licence} | {use} | {cited} |")
    lines = [
        "# Third-party notices",
        "",
        "Switchyard itself is under the MIT licence ([LICENSE](LICENSE)). Its programs are built",
        "from the Rust crates below, and the service's dashboard embeds the JavaScript further down.",
        "Each licence text the crates ship is reproduced once, with the crates it came with.",
        "",
        "Generated by `python3 scripts/third-party-notices.py` from Cargo.lock and each crate's",
        "published files; `scripts/test.sh` fails when this file is not what the script writes (for",
        "example after Cargo.lock gained a crate). \"Goes into\" names the first program whose build",
        "needs the crate (`switchyard`, the service; `switchyard-bench`, the benchmark tool), or",
        "`tests` for crates only the tests and benchmarks' harnesses use.",
        "",
        "## Rust crates",
        "",
        "| crate | version | licence | goes into | licence texts |",
        "|:--|:--|:--|:--|:--|",
        *rows,
        "",
        "## JavaScript in the dashboard",
        "",
        "Vendored by `scripts/vendor-dashboard.sh` into `crates/node/assets/dashboard/vendor/` and",
        "served by the service at `/dashboard/assets/`.",
        "",
        "| package | version | licence | files | licence text |",
        "|:--|:--|:--|:--|:--|",
    ]
    javascript_texts = []
    for name, variable, licence, files, licence_file in JAVASCRIPT:
        version = vendored_version(variable)
        with open(os.path.join(VENDOR, licence_file), encoding="utf-8") as f:
            text = normalized(f.read())
        entry = texts.setdefault(text, (len(texts) + 1, []))
        entry[1].append(f"{name} {version} (JavaScript)")
        javascript_texts.append(entry[0])
        lines.append(f"| {name} | {version} | {licence} | {files} | [{entry[0]}](#licence-{entry[0]}) |")
    lines += ["", "## Licence texts", ""]
    for text, (number, users) in sorted(texts.items(), key=lambda item: item[1][0]):
        marker = fence(text)
        lines += [
            f'<a id="licence-{number}"></a>',
            f"### {number}",
            "",
            "Shipped with: " + ", ".join(users) + ".",
            "",
            marker + "text",
            text,
            marker,
            "",
        ]
    return "\n".join(lines)


def listed_crates(text):
    return set(re.findall(r"^\| ([^ |]+) \| ([^ |]+) \|", text, re.M))


def main():
    check = "--check" in sys.argv[1:]
    written = render(metadata())
    if not check:
        with open(OUTPUT, "w", encoding="utf-8") as f:
            f.write(written)
        print(f"wrote {os.path.relpath(OUTPUT, ROOT)}")
        return 0
    try:
        with open(OUTPUT, encoding="utf-8") as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    if current == written:
        print("THIRD-PARTY-NOTICES.md lists every crate in Cargo.lock, with its licence texts")
        return 0
    missing = sorted(listed_crates(written) - listed_crates(current))
    extra = sorted(listed_crates(current) - listed_crates(written))
    print("THIRD-PARTY-NOTICES.md is out of date: run python3 scripts/third-party-notices.py")
    for name, version in missing:
        print(f"  not listed: {name} {version}")
    for name, version in extra:
        print(f"  listed but no longer in Cargo.lock: {name} {version}")
    if not missing and not extra:
        print("  (the same crates; a licence, a licence text or which program uses a crate changed)")
    return 1


if __name__ == "__main__":
    sys.exit(main())
