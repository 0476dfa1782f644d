"""The ``ragfind`` command line: one module per subcommand, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import sys

# Subcommand modules under ragfind.cli; each defines register(subparsers) which adds its parser
# and sets ``func`` (a callable taking the parsed args and returning an exit code).
COMMANDS = [
    "demo",
    # export
    "export",
    # index, search, eval, bench
    "index",
    "search",
    "eval",
    "bench",
    # serve (the serve extra)
    "serve",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragfind", description="Fast, exact retrieval for RAG.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"ragfind.cli.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
