"""Helpers shared by the ``index``, ``search``, ``eval`` and ``bench`` subcommands: the corpus
reader and the argparse types of their options (a bad value names its option)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ragfind.errors import check_k
from ragfind.pipeline.documents import a_json_type


def read_documents(path: str) -> Iterator[tuple[int, dict]]:
    """``(line number, document)`` of each document of a JSON-lines file or a BEIR folder (its
    ``corpus.jsonl``), for ``ragfind index``.

    Each line is ``{"id" | "_id", "text", "title"?, "metadata"?}``; other keys become metadata.

    Raises:
        SystemExit: the file is missing, or a line is not UTF-8, not JSON, not an object, or
            lacks a usable id or text, or has a title or metadata of the wrong type: one line
            naming the file and the line number.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "corpus.jsonl"
    if not p.is_file():
        raise SystemExit(
            f"ragfind index: no corpus at {str(path)!r} (expected a .jsonl file or a BEIR folder)"
        )
    with open(p, "rb") as f:
        for n, raw in enumerate(f, 1):
            bad = _line_error(p, n)
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise bad(f"not UTF-8 ({exc.reason} at byte {exc.start})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line.strip(), parse_constant=_not_json)
            except json.JSONDecodeError as exc:
                raise bad(f"not JSON ({exc.msg} at column {exc.colno})") from None
            except ValueError as exc:
                raise bad(f"not JSON ({exc})") from None
            if not isinstance(obj, dict):
                raise bad(f"the line is {a_json_type(obj)}; expected an object with an 'id' and a 'text'")
            doc_id = obj.pop("id", None)
            alt_id = obj.pop("_id", None)
            doc_id = alt_id if doc_id is None else doc_id
            text = obj.pop("text", None)
            if doc_id is None:
                raise bad("a document needs an 'id' (or '_id') and a 'text'; this one has no id")
            if isinstance(doc_id, bool) or not isinstance(doc_id, (str, int)) or doc_id == "":
                raise bad(
                    f"'id' is {a_json_type(doc_id)} ({doc_id!r}); expected a non-empty string or an integer"
                )
            if text is None:
                raise bad("a document needs an 'id' (or '_id') and a 'text'; this one has no text")
            if not isinstance(text, str):
                raise bad(f"'text' is {a_json_type(text)}; expected a string")
            title = obj.pop("title", None)
            if title is not None and not isinstance(title, str):
                raise bad(f"'title' is {a_json_type(title)}; expected a string")
            metadata = obj.pop("metadata", None)
            if metadata is not None and not isinstance(metadata, dict):
                raise bad(f"'metadata' is {a_json_type(metadata)}; expected an object")
            metadata = {**(metadata or {}), **obj}
            yield n, {"id": str(doc_id), "title": title or "", "text": text, "metadata": metadata}


def _line_error(path: Path, n: int) -> Any:
    return lambda what: SystemExit(f"ragfind index: {path}:{n}: {what}")


def _not_json(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# ----------------------------------------------------------------------------- option types
# argparse reports what these raise as "argument --NAME: MESSAGE", so each bad value names its
# option; a plain ValueError would read "invalid <function name> value".


def positive_int(text: str) -> int:
    """An int >= 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def nonnegative_int(text: str) -> int:
    """An int >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def k_value(text: str) -> int:
    """A search's k, checked as the library checks it (:func:`ragfind.errors.check_k`: the
    same message); a k past the number of passages is clamped by the search."""
    try:
        k = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"k must be a positive int, got {text!r}") from None
    try:
        return check_k(k)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def chunk_size(text: str) -> int | str | None:
    """``auto``, ``none`` (whole documents: None) or a positive number of tokens."""
    low = text.strip().lower()
    if low in ("auto", "none"):
        return None if low == "none" else "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of tokens, 'auto' or 'none', got {text!r}"
        )
    return value


def overlap_fraction(text: str) -> float:
    """A chunk overlap, as a fraction of the chunk in [0, 0.5]."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value <= 0.5:  # NaN fails it too
        raise argparse.ArgumentTypeError(f"expected a fraction in [0, 0.5], got {text!r}")
    return value


def parse_filters(items: list) -> dict:
    """``["lang=en", "year>=2020", 'tags=["a","b"]']`` -> a Retriever filter dict.

    Values are read as JSON when they parse (numbers, true/false, lists), else as strings.
    """
    out: dict[str, Any] = {}
    for item in items or []:
        for op, mongo in (
            (">=", "$gte"),
            ("<=", "$lte"),
            ("!=", "$ne"),
            ("=", "$eq"),
            (">", "$gt"),
            ("<", "$lt"),
        ):
            if op in item:
                name, raw = item.split(op, 1)
                try:
                    value = json.loads(raw)
                except ValueError:
                    value = raw
                if mongo == "$eq" and isinstance(value, list):
                    mongo = "$in"
                out.setdefault(name.strip(), {})[mongo] = value
                break
        else:
            raise SystemExit(f"ragfind: --filter {item!r}: expected FIELD=VALUE (or >=, <=, !=, >, <)")
    return out


def ms(seconds: float) -> str:
    """Seconds as a short millisecond string."""
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-4 else f"{seconds * 1e6:.1f} us"
