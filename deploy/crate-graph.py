#!/usr/bin/env python3
"""The workspace's crates and the arrows between them, from `cargo metadata`.

  deploy/crate-graph.py                  prints the picture (a Mermaid graph, top layer first)
  deploy/crate-graph.py --check FILE     fails when FILE's picture (between the markers
                                         <!-- crate-graph --> and <!-- /crate-graph -->)
                                         is not the one the workspace has now

Only the project's own library and binary crates and the arrows of normal dependencies
between them are drawn (tests, benchmarks and fuzz targets are left out).
"""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BEGIN, END = "<!-- crate-graph -->", "<!-- /crate-graph -->"
LEFT_OUT = {"oed-tests", "oed-benches", "oed-tls-bench"}


def graph():
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"],
            cwd=ROOT,
        )
    )
    ours = {p["name"]: p for p in meta["packages"] if p["name"] not in LEFT_OUT}
    edges = {
        name: sorted(
            d["name"] for d in p["dependencies"] if d["name"] in ours and d.get("kind") is None
        )
        for name, p in ours.items()
    }
    # Floors: a crate stands one above the highest crate it uses.
    floor = {}

    def up(n):
        if n not in floor:
            floor[n] = 1 + max((up(d) for d in edges[n]), default=0)
        return floor[n]

    for n in edges:
        up(n)
    order = sorted(edges, key=lambda n: (-floor[n], n))
    lines = ["```mermaid", "graph TD"]
    for n in order:
        for d in edges[n]:
            lines.append(f"  {n.replace('-', '_')}[{n}] --> {d.replace('-', '_')}[{d}]")
    lines.append("```")
    return "\n".join(lines)


def main():
    g = graph()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        text = open(sys.argv[2], encoding="utf-8").read()
        if BEGIN not in text or END not in text:
            print(f"{sys.argv[2]}: no {BEGIN} ... {END} block", file=sys.stderr)
            return 1
        have = text.split(BEGIN, 1)[1].split(END, 1)[0].strip()
        if have != g:
            print(
                f"{sys.argv[2]}: the crate graph is not the workspace's; put this between the markers:\n{g}",
                file=sys.stderr,
            )
            return 1
        print(f"{sys.argv[2]}: the crate graph is the workspace's")
        return 0
    if len(sys.argv) > 1:
        print(__doc__, file=sys.stderr)
        return 2
    print(g)
    return 0


if __name__ == "__main__":
    sys.exit(main())
