#!/usr/bin/env python3
"""Checks that every relative link in the repository's Markdown files resolves.

A link to a file or folder must name one that exists; a link with a `#fragment` to a Markdown
file must name a heading (or an HTML `id`/`name`) of that file, by GitHub's rules for anchors:
the heading's text as rendered, lower case, punctuation other than `-` and `_` removed, each
space a `-`, and `-1`, `-2`, ... appended to repeats. A fragment on another kind of file may only
be a line anchor (`#L12`, `#L12-L20`). Links with a scheme (`https:`, `mailto:`) are not
fetched: CI has no network, and their health is not this repository's to keep.

Usage: scripts/check-links.py [FILE.md ...]   (default: every Markdown file git knows of)
       scripts/check-links.py --self-test      (shows that dead links and anchors are caught)
Exit status 1 when a link is dead; each is printed as `file:line: link: why`.
"""

import os
import re
import subprocess
import sys
import tempfile
import unicodedata
from urllib.parse import unquote

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
HTML_ID = re.compile(r"""<[a-zA-Z][^>]*?\s(?:id|name)\s*=\s*["']([^"']+)["']""")
# [text](target) and ![alt](target), with an optional "title"; <target> for targets with spaces.
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+[\"'(][^)]*)?\)")
REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
LINE_ANCHOR = re.compile(r"^L\d+(-L\d+)?$")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def lines_outside_fences(text):
    """(line number, line) for every line not inside a fenced code block."""
    fence = None
    for number, line in enumerate(text.split("\n"), 1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                continue
            yield number, line
        elif match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
            fence = None


def rendered_text(heading):
    """A heading's text as GitHub renders it: markup gone, code spans and link texts kept."""
    text = CODE_SPAN.sub(lambda m: m.group(2).strip(), heading)
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)
    return re.sub(r"<[^>]+>", "", text).strip()


def slug(heading):
    """GitHub's anchor for a heading (github-slugger): lower case, keep letters, digits, marks,
    `-`, `_` and spaces, then each space becomes `-`."""
    kept = []
    for char in rendered_text(heading).lower():
        category = unicodedata.category(char)
        if char in "-_ " or category[0] in "LNM":
            kept.append(char)
    return "".join(kept).replace(" ", "-")


def anchors(text):
    """Every fragment a link into this Markdown text may name."""
    found = set()
    counts = {}
    previous = None
    for _, line in lines_outside_fences(text):
        heading = None
        atx = ATX.match(line)
        if atx:
            heading = atx.group(2) or ""
        elif previous and previous.strip() and SETEXT.match(line) and not previous.startswith(("|", "    ", "-", "*")):
            heading = previous.strip()
        if heading is not None:
            base = slug(heading)
            count = counts.get(base, 0)
            counts[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
        found.update(HTML_ID.findall(line))
        previous = line
    return found


def links(text):
    """(line number, target) for every link outside code."""
    for number, line in lines_outside_fences(text):
        if line.startswith(("    ", "\t")) and not line.lstrip().startswith(("-", "*", "|", "[")):
            continue  # an indented code block (a list item's continuation still counts)
        without_code = CODE_SPAN.sub("", line)
        for match in INLINE.finditer(without_code):
            yield number, match.group(1).strip("<>")
        reference = REFERENCE.match(without_code)
        if reference:
            yield number, reference.group(1).strip("<>")


def check_file(path, root, cache):
    """Dead links of one Markdown file, as printable lines."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    problems = []
    for number, target in links(text):
        if SCHEME.match(target) or target.startswith("//"):
            continue
        file_part, _, fragment = target.partition("#")
        file_part = re.sub(r"\?.*$", "", file_part)
        if file_part == "":
            resolved = path
        elif file_part.startswith("/"):
            resolved = os.path.normpath(os.path.join(root, file_part.lstrip("/")))
        else:
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), unquote(file_part)))
        where = f"{os.path.relpath(path, root)}:{number}: {target}"
        if not os.path.exists(resolved):
            problems.append(f"{where}: no such file {os.path.relpath(resolved, root)}")
            continue
        if not fragment:
            continue
        if resolved.endswith(".md") and os.path.isfile(resolved):
            if resolved not in cache:
                with open(resolved, encoding="utf-8") as file:
                    cache[resolved] = anchors(file.read())
            if fragment not in cache[resolved]:
                problems.append(f"{where}: no heading or id '{fragment}' in {os.path.relpath(resolved, root)}")
        elif not (os.path.isfile(resolved) and LINE_ANCHOR.match(fragment)):
            problems.append(f"{where}: '#{fragment}' names no place in {os.path.relpath(resolved, root)}")
    return problems


def markdown_files(root):
    """Markdown files git tracks or would track (untracked ones not ignored count too)."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", "--", "*.md"],
            cwd=root, check=True, capture_output=True,
        ).stdout.decode()
        names = [name for name in listed.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):
        names = [
            os.path.relpath(os.path.join(folder, name), root)
            for folder, dirs, files in os.walk(root)
            if not {"node_modules", "target", ".git"} & set(folder.split(os.sep))
            for name in files
            if name.endswith(".md")
        ]
    return sorted(os.path.join(root, name) for name in names if os.path.exists(os.path.join(root, name)))


def run(paths, root):
    cache = {}
    problems = []
    for path in paths:
        problems.extend(check_file(path, root, cache))
    return problems


def self_test():
    """A folder with one link of each kind, dead and alive: only the dead ones are reported."""
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        with open(os.path.join(root, "code.rs"), "w") as file:
            file.write("fn main() {}\n")
        with open(os.path.join(root, "docs", "page.md"), "w") as file:
            file.write(
                "# A page\n\n## Default mode (app servers)\n\n## REST over https: HTTP/1.1 and HTTP/2\n\n"
                "## `cluster.redis` and `--redis`\n\n## Twice\n\n## Twice\n\n<a id=\"kept\"></a>\n"
                "Setext heading\n---\n\n```sh\n# not a heading\n[not a link](gone.md)\n```\n"
                "[back](../README.md#start-here) [self](#twice-1) [html](#kept) [setext](#setext-heading)\n"
            )
        with open(os.path.join(root, "README.md"), "w") as file:
            file.write(
                "# Start here\n\n"
                "[ok](docs/page.md) [ok](docs/page.md#default-mode-app-servers)\n"
                "[ok](docs/page.md#rest-over-https-http11-and-http2) [ok](docs/page.md#clusterredis-and---redis)\n"
                "[ok](docs/) [ok](code.rs#L1) [ok](https://example.com/gone) `[code](gone.md)`\n"
                "[dead file](docs/gone.md)\n"
                "[dead anchor](docs/page.md#default-mode)\n"
                "[dead self](#nowhere)\n"
                "[dead code anchor](code.rs#main)\n"
                "[dead repeat](docs/page.md#twice-2)\n"
                "[ref]: docs/also-gone.md\n"
            )
        paths = [os.path.join(root, "README.md"), os.path.join(root, "docs", "page.md")]
        problems = run(paths, root)
        expected = [
            "README.md:6: docs/gone.md",
            "README.md:7: docs/page.md#default-mode",
            "README.md:8: #nowhere",
            "README.md:9: code.rs#main",
            "README.md:10: docs/page.md#twice-2",
            "README.md:11: docs/also-gone.md",
        ]
        reported = [problem.rsplit(": ", 1)[0] for problem in problems]
        if reported != expected:
            print("self-test failed: expected", *expected, "got", *problems, sep="\n  ")
            return 1
        print(f"self-test passed: {len(expected)} dead links found, nothing else reported")
        return 0


def main(argv):
    root = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
    if argv[1:] == ["--self-test"]:
        return self_test()
    paths = [os.path.abspath(path) for path in argv[1:]] or markdown_files(root)
    problems = run(paths, root)
    for problem in problems:
        print(problem)
    print(f"{len(paths)} Markdown files, {len(problems)} dead links")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
