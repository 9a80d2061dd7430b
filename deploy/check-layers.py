#!/usr/bin/env python3
"""Checks that no crate of the workspace has an import circle between its modules.

The rule, applied to every module of every crate under crates/: the modules declared
directly inside it (its children) may use each other only one way. "A uses B" when any
file of A's subtree names a path into B's subtree (`use crate::b::..`, `super::b::..`,
`crate::b::X` in code), with names a parent only re-exports (`pub use b::X;`) followed to
where they are defined. A parent and its own children may use each other (a module's
file is its facade); siblings may not, so layers inside a crate point one way only, as
Cargo makes them between crates.

Prints each circle with the paths that tie it and exits 1; exits 0 when there is none.
Usage: deploy/check-layers.py [CRATE_DIR ...] (default: every crates/*);
       deploy/check-layers.py --self-test (checks that it finds circles it must find).
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Comments and literals in one pass, left to right, so that a `//` inside a string is
# no comment and a quote inside a comment no string.
SKIPPED = re.compile(
    r'(?P<comment>//[^\n]*|/\*.*?\*/)'
    r'|b?r(#*)".*?"\2|b?"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])\'',
    re.S,
)
USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
MOD = re.compile(r"^\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;", re.M)
PATH = re.compile(r"\b(crate|super|self)((?:\s*::\s*\w+)+)")


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*mod\s+\w+\s*\{")


def strip(src):
    """The code of a file without comments, string contents and its unit tests (a test
    may use any module: it is no layer)."""
    src = SKIPPED.sub(lambda m: "" if m.group("comment") else '""', src)
    while True:
        m = TEST_MOD.search(src)
        if not m:
            return src
        depth, i = 1, m.end()
        while i < len(src) and depth:
            depth += {"{": 1, "}": -1}.get(src[i], 0)
            i += 1
        src = src[: m.start()] + src[i:]


def expand(tree):
    """`a::{b, c::{d, e as f}}` -> [[a, b], [a, c, d], [a, c, e]] (renames dropped)."""
    tree = re.sub(r"\s+as\s+\w+", "", tree)
    tree = re.sub(r"\s+", "", tree)
    out = []

    def walk(prefix, s):
        depth, parts, cur = 0, [], ""
        for ch in s:
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
                continue
            depth += ch == "{"
            depth -= ch == "}"
            cur += ch
        parts.append(cur)
        for p in parts:
            if not p:
                continue
            if "{" in p:
                head, rest = p.split("{", 1)
                walk(prefix + [x for x in head.split("::") if x], rest[:-1])
            else:
                out.append(prefix + [x for x in p.split("::") if x])

    walk([], tree)
    return out


class Crate:
    def __init__(self, src):
        self.src = src
        self.files = {}  # module path tuple -> file path
        self.find(("",), os.path.join(src, "lib.rs"))
        main = os.path.join(src, "main.rs")
        if not self.files and os.path.exists(main):
            self.find(("",), main)

    def find(self, mod, path):
        if not os.path.exists(path):
            return
        self.files[mod[1:]] = path
        text = strip(open(path, encoding="utf-8").read())
        base = os.path.dirname(path)
        if os.path.basename(path) not in ("lib.rs", "main.rs", "mod.rs"):
            base = os.path.join(base, os.path.basename(path)[:-3])
        for name in MOD.findall(text):
            for cand in (os.path.join(base, name + ".rs"), os.path.join(base, name, "mod.rs")):
                if os.path.exists(cand):
                    self.find(mod + (name,), cand)
                    break

    def paths(self, mod):
        """Every module path named in `mod`'s file, absolute, with `use` trees expanded."""
        text = strip(open(self.files[mod], encoding="utf-8").read())
        found = []
        for _, tree in USE.findall(text):
            found.extend(expand(tree))
        for head, rest in PATH.findall(USE.sub("", text)):
            found.append([head] + [x for x in re.sub(r"\s+", "", rest).split("::") if x])
        return [a for a in (self.absolute(mod, p) for p in found if p) if a is not None]

    def absolute(self, mod, p):
        """Path `p` as written in `mod`'s file, from the crate root; `None` when it names
        another crate."""
        if p[0] == "crate":
            return tuple(p[1:])
        if p[0] in ("super", "self"):
            base = list(mod)
            i = 0
            while i < len(p) and p[i] in ("super", "self"):
                if p[i] == "super" and base:
                    base.pop()
                i += 1
            return tuple(base + list(p[i:]))
        if p[0] in self.children(mod):
            return tuple(list(mod) + list(p))
        return None

    def children(self, mod):
        return {m[len(mod)] for m in self.files if len(m) == len(mod) + 1 and m[: len(mod)] == mod}

    def reexports(self, mod):
        """Names `mod`'s file hands on with `pub use`, mapped to the path they come from."""
        text = strip(open(self.files[mod], encoding="utf-8").read())
        out = {}
        for vis, tree in USE.findall(text):
            if not vis:
                continue
            for p in expand(tree):
                if p and p[-1] not in ("*", "self"):
                    out[p[-1]] = p
        return out

    def resolve(self, path, seen=None):
        """The module a path lands in: its longest known prefix, followed through
        re-exports of the name after it."""
        seen = seen or set()
        for n in range(len(path), -1, -1):
            mod = tuple(path[:n])
            if mod in self.files:
                break
        if n < len(path) and (mod, path[n]) not in seen:
            seen.add((mod, path[n]))
            via = self.reexports(mod).get(path[n])
            if via:
                target = self.absolute(mod, via)
                if target is None:
                    return mod  # another crate's name
                return self.resolve(target + tuple(path[n + 1 :]), seen)
        return mod


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
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

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(crate_dir):
    src = os.path.join(crate_dir, "src")
    crate = Crate(src)
    # For every parent: which child uses which sibling, and through what.
    ties = {}
    for mod in crate.files:
        for path in crate.paths(mod):
            target = crate.resolve(path)
            # The nearest common parent of the two modules, and the children of it
            # that hold each side.
            k = 0
            while k < min(len(mod), len(target)) and mod[k] == target[k]:
                k += 1
            if k == len(mod) or k == len(target):
                continue  # one is inside the other: a module and its facade
            parent, a, b = mod[:k], mod[k], target[k]
            ties.setdefault(parent, {}).setdefault((a, b), set()).add(
                (os.path.relpath(crate.files[mod], ROOT), "::".join(path))
            )
    found = []
    for parent, edges in sorted(ties.items()):
        graph = {}
        for a, b in edges:
            graph.setdefault(a, set()).add(b)
        for comp in circles(graph):
            found.append((parent, comp, edges))
    return found


def self_test():
    """Small crates with and without circles: the check must tell them apart."""
    import tempfile

    cases = {
        # name: (files, circles expected)
        "siblings": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\npub struct A;\n",
                      "b.rs": "pub struct B;\nfn f() { let _ = crate::a::A; }\n"}, 1),
        "through a re-export": ({"lib.rs": "mod m;\n", "m/mod.rs": "mod x;\nmod y;\npub use y::Y;\n",
                                 "m/x.rs": "use super::Y;\npub struct X;\n",
                                 "m/y.rs": "pub struct Y;\nuse super::x::X;\n"}, 1),
        "a facade and its children": ({"lib.rs": "mod m;\nuse m::X;\n", "m/mod.rs": "mod x;\npub use x::X;\npub struct P;\n",
                                       "m/x.rs": "use super::P;\npub struct X;\n"}, 0),
        "tests may reach anywhere": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n",
                                      "b.rs": "pub struct B;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n"}, 0),
        "comments and strings are no imports": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n",
                                                 "b.rs": "// crate::a::A\nconst S: &str = \"crate::a::A\";\n"}, 0),
        "a `//` inside a string": ({"lib.rs": "mod a;\nmod b;\n", "a.rs": "use crate::b::B;\n",
                                    "b.rs": "const U: &str = \"http://h\";\nfn f() { crate::a::g(\"x\") }\n"}, 1),
    }
    failed = 0
    for name, (files, want) in cases.items():
        with tempfile.TemporaryDirectory() as d:
            for rel, text in files.items():
                path = os.path.join(d, "src", rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
            got = len(check(d))
            if got != want:
                failed += 1
                print(f"self-test {name!r}: found {got} circle(s), expected {want}")
    print(f"check-layers self-test: {len(cases) - failed} of {len(cases)} cases right")
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    dirs = sys.argv[1:] or sorted(
        os.path.join(ROOT, "crates", d)
        for d in os.listdir(os.path.join(ROOT, "crates"))
        if os.path.exists(os.path.join(ROOT, "crates", d, "Cargo.toml"))
    )
    bad = 0
    for d in dirs:
        for parent, comp, edges in check(d):
            bad += 1
            where = "::".join(parent) or "the crate root"
            print(f"circle in {os.path.relpath(d, ROOT)} among the modules of {where}: {', '.join(comp)}")
            members = set(comp)
            for (a, b), uses in sorted(edges.items()):
                if a in members and b in members:
                    shown = sorted(uses)[:4]
                    more = f" (and {len(uses) - 4} more)" if len(uses) > 4 else ""
                    print(f"  {a} -> {b}: " + "; ".join(f"{f}: {p}" for f, p in shown) + more)
    if bad:
        print(f"{bad} import circle(s): a module that two others need belongs below both", file=sys.stderr)
        return 1
    print(f"no import circle between the modules of {len(dirs)} crate(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
