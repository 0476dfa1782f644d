"""The ``ragfind`` command line: one module per subcommand, each with ``register(subparsers)``."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import NoReturn

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


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors end, as the commands' own, in one line on stderr
    (naming the option and what it expected) and exit status 2; ``--help`` shows the usage.
    Subparsers are of the same class."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {' '.join(message.split())} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="ragfind", description="Fast, exact retrieval for RAG.")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        importlib.import_module(f"ragfind.cli.{name}").register(sub)
    return parser


class CommandError(SystemExit):
    """A mistake in the command's input: ``str(error)`` is the one-line message (already printed
    to stderr by :func:`main`), and the exit status is 2, as for argparse's usage errors."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.code = 2


def _one_line(exc: BaseException) -> str:
    # KeyError quotes its argument; every other message is used as is.
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(str(msg).split()) or type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """Runs one subcommand; a bad input ends with a one-line error on stderr and exit status 2
    (``RAGFIND_DEBUG=1`` shows the traceback instead)."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except CommandError:
        raise
    except SystemExit as exc:
        if not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        raise CommandError(exc.code) from None
    except (ValueError, OSError, KeyError) as exc:
        # Missing or malformed folders, files and models, unknown names: the user's input.
        if os.environ.get("RAGFIND_DEBUG"):
            raise
        msg = f"ragfind {args.command}: {_one_line(exc)}"
        print(msg, file=sys.stderr)
        raise CommandError(msg) from None


if __name__ == "__main__":
    sys.exit(main())
