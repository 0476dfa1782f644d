"""``ragfind demo``: ragfind's main job on its bundled defaults (filled in by issue 2 / issue 5)."""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("demo", help="index the bundled corpus and answer a few queries, with timings")
    p.set_defaults(func=run)


def run(args) -> int:
    raise SystemExit("ragfind demo: the BM25 engine is not built yet")
