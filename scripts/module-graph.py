#!/usr/bin/env python3
"""The file-level dependency graph of src/: circles and arrows back up.

Usage: scripts/module-graph.py [--edges] [src-dir]

An arrow A -> B means a file A names an item defined in file B through a path
(`use crate::…`, `use super::…`, `crate::x::y` in code, or a child module's
name). A path through a `mod.rs` that re-exports (`pub use x::Y`) is followed
to the file that defines `Y`, and the re-export itself is no arrow (like
`mod x;`, it is the module's surface, not a use). Unit-test modules (`#[cfg(test)] mod …` to the end of the file) and
comments are left out: they are not the code's structure.

A circle is a strongly connected component of two or more files. An arrow back
up is one whose target lies in a higher layer than its source, by the layering
of docs/ARCHITECTURE.md (LAYERS below, top first). Wiring files that exist to
join the layers (lib.rs, main.rs, web/mod.rs's router) are exempt from the
"up" count, as the document says.

Prints the counts, then each circle and each upward arrow; exits 0 (a figure,
not a gate).
"""

import os
import re
import sys

# Top first: a module may use those listed after it, never one before. Prefixes
# of a file's path under src/ (the longest match wins); equal ranks may use each
# other (the same band).
LAYERS = [
    ("cli/", 100),
    ("runtime.rs", 95),
    ("demo/", 90),
    ("mcp/", 80),
    ("web/pages/", 70),
    ("web/guard/", 68),
    ("web/", 66),  # downloads, /metrics, health, login
    ("web/mod.rs", 64),  # the shell: AppState, router, errors, auth, site, layout
    ("web/error.rs", 64),
    ("web/problem.rs", 64),
    ("web/refusal.rs", 64),
    ("web/auth.rs", 64),
    ("web/auth_log.rs", 64),
    ("web/site.rs", 64),
    ("web/layout.rs", 64),
    ("web/assets.rs", 64),
    ("web/links.rs", 64),
    ("web/filters.rs", 64),
    ("web/server.rs", 64),
    ("web/limits.rs", 64),
    ("web/slow_bodies.rs", 64),
    ("tail/", 60),
    ("metrics/", 60),
    ("retention/", 55),
    ("export/", 50),
    ("evidence/", 45),
    ("auth/", 40),
    ("store/", 30),
    # The ports the store implements for the layers above it (the guard's is in guard/).
    ("tail/port.rs", 25),
    ("metrics/port.rs", 25),
    ("evidence/port.rs", 25),
    ("export/port.rs", 25),
    ("export/port/", 25),
    ("guard/", 20),
    ("time_input.rs", 15),
    ("duration.rs", 15),
    ("base/", 10),
]
# Files that join the layers on purpose (the crate root, the binary, the router).
WIRING = {"lib.rs", "main.rs", "web/mod.rs"}


def rank(rel):
    best = None
    for prefix, r in LAYERS:
        if rel == prefix or (prefix.endswith("/") and rel.startswith(prefix)):
            if best is None or len(prefix) > len(best[0]):
                best = (prefix, r)
    return best[1] if best else None


def strip(text):
    """Comments, string literals and the unit-test module out; code stays."""
    m = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = n if j < 0 else j + 2
        elif c == "r" and re.match(r'r#*"', text[i:]) and not re.match(r"\w", text[i - 1 : i] or " "):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|[^\\'])'", text[i:]):
            i += len(re.match(r"'(\\.|[^\\'])'", text[i:]).group(0))
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d, e}}` -> [[a, b], [a, c, d], [a, c, e]]."""
    # `X as Y` keeps X: marked before the spaces go (a name such as `classify`
    # holds the letters `as` too).
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    paths = []

    def walk(prefix, s):
        # split s at top-level commas
        depth, parts, cur = 0, [], ""
        for ch in s:
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for p in parts:
            if "{" in p:
                head = p[: p.index("{")].rstrip(":")
                inner = p[p.index("{") + 1 : p.rindex("}")]
                segs = [x for x in head.split("::") if x]
                walk(prefix + segs, inner)
            else:
                segs = [x.strip() for x in p.split("::") if x.strip()]
                if segs:
                    paths.append(prefix + segs)

    walk([], tree)
    return paths


def inline_modules(text):
    """The spans of `mod name { … }` blocks written inside a file."""
    spans = []
    for m in re.finditer(r"\bmod\s+\w+\s*\{", text):
        depth, i = 0, m.end() - 1
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        spans.append((m.end(), i))
    return spans


def outside_inline(path, spans, pos):
    """`path` as seen from the file's own module, or None when it stays inside the
    file (a `super::` or `self::` of an inline module that does not leave it)."""
    depth = sum(1 for a, b in spans if a <= pos < b)
    if depth == 0 or path[0] not in ("self", "super"):
        return path
    if path[0] == "self":
        return None
    n = 0
    while n < len(path) and path[n] == "super":
        n += 1
    if n <= depth:
        return None
    return ["super"] * (n - depth) + path[n:]


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # rel path -> stripped text
        for root, _, names in os.walk(src):
            for name in names:
                if name.endswith(".rs"):
                    path = os.path.join(root, name)
                    rel = os.path.relpath(path, src)
                    with open(path, encoding="utf-8") as f:
                        self.files[rel] = strip(f.read())
        self._exports = {}

    def module_file(self, mod):
        """The file of module path `mod` (list), or None."""
        if not mod:
            return "lib.rs"
        base = "/".join(mod)
        for cand in (base + ".rs", base + "/mod.rs"):
            if cand in self.files:
                return cand
        return None

    def module_of(self, rel):
        if rel in ("lib.rs", "main.rs"):
            return []
        p = rel[:-3].split("/")
        if p[-1] == "mod":
            p = p[:-1]
        return p

    def uses(self, rel):
        """Every (path, is_pub_use) named in file `rel`, as segment lists."""
        text = self.files[rel]
        inline = inline_modules(text)
        found = []
        for m in re.finditer(r"(\bpub(\([^)]*\))?\s+)?\buse\s+([^;]+);", text):
            for p in expand(m.group(3)):
                p = outside_inline(p, inline, m.start())
                if p:
                    found.append((p, bool(m.group(1))))
        code = re.sub(r"(\bpub(\([^)]*\))?\s+)?\buse\s+[^;]+;", lambda m: " " * len(m.group(0)), text)
        for m in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", code):
            p = outside_inline(m.group(1).split("::"), inline, m.start())
            if p:
                found.append((p, False))
        return found

    def absolute(self, rel, path):
        here = self.module_of(rel)
        if path[0] == "crate":
            return path[1:]
        if path[0] in ("self", "super"):
            mod = list(here)
            while path and path[0] in ("self", "super"):
                if path[0] == "super":
                    mod = mod[:-1]
                path = path[1:]
            return mod + path
        if self.module_file(here + [path[0]]):
            return here + path
        return None  # an external crate or std

    def exports(self, rel):
        """name -> absolute path, for `pub use` items of file `rel`."""
        if rel not in self._exports:
            table = {}
            for path, is_pub in self.uses(rel):
                if not is_pub:
                    continue
                a = self.absolute(rel, path)
                if a:
                    table[a[-1]] = a
                    if a[-1] == "*":
                        table.setdefault("*", []).append(a[:-1])
            self._exports[rel] = table
        return self._exports[rel]

    def resolve(self, path, depth=0):
        """The file that defines the item at absolute `path`."""
        mod = []
        for i, seg in enumerate(path):
            if seg == "*":
                break
            f = self.module_file(mod + [seg])
            if f:
                mod = mod + [seg]
                continue
            here = self.module_file(mod)
            ex = self.exports(here)
            if depth < 8 and seg in ex and ex[seg] != mod + [seg]:
                return self.resolve(ex[seg] + path[i + 1 :], depth + 1)
            return here
        return self.module_file(mod)

    def graph(self):
        edges = {}
        for rel in self.files:
            targets = set()
            for path, is_pub in self.uses(rel):
                if is_pub:
                    continue  # a re-export is the module's surface, not a use
                a = self.absolute(rel, path)
                if a is None:
                    continue
                t = self.resolve(a)
                if t and t != rel:
                    targets.add(t)
            edges[rel] = targets
        return edges


def circles(edges):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    src = args[0] if args else os.path.join(os.path.dirname(__file__), "..", "src")
    crate = Crate(src)
    edges = crate.graph()
    if "--edges" in sys.argv:
        for a in sorted(edges):
            for b in sorted(edges[a]):
                print(f"{a} -> {b}")
        return
    comps = circles(edges)
    up = []
    for a in sorted(edges):
        if a in WIRING:
            continue
        for b in sorted(edges[a]):
            ra, rb = rank(a), rank(b)
            if ra is not None and rb is not None and rb > ra:
                up.append((a, b))
    print(f"files: {len(edges)}  arrows: {sum(len(v) for v in edges.values())}")
    print(f"file circles: {len(comps)}  arrows back up: {len(up)}")
    for c in comps:
        print("circle: " + " <-> ".join(c))
    for a, b in up:
        print(f"up: {a} -> {b}")


if __name__ == "__main__":
    main()
