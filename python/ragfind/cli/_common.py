"""Helpers shared by the ``index``, ``search``, ``eval`` and ``bench`` subcommands."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def read_documents(path: str) -> Iterator[dict]:
    """Documents from a JSON-lines file or a BEIR folder (its ``corpus.jsonl``).

    Each line is ``{"id" | "_id", "text", "title"?, "metadata"?}``; other keys become metadata.

    Raises:
        SystemExit: the file is missing or a line is not a JSON object with an id and a text.
    """
    p = Path(path)
    if p.is_dir():
        p = p / "corpus.jsonl"
    if not p.is_file():
        raise SystemExit(f"ragfind: no corpus at {str(path)!r} (expected a .jsonl file or a BEIR folder)")
    with open(p, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as exc:
                raise SystemExit(f"ragfind: {p}:{n}: not JSON ({exc})") from exc
            if not isinstance(obj, dict):
                raise SystemExit(f"ragfind: {p}:{n}: expected a JSON object")
            doc_id = obj.pop("id", obj.pop("_id", None))
            text = obj.pop("text", None)
            if doc_id is None or not isinstance(text, str):
                raise SystemExit(f"ragfind: {p}:{n}: a document needs an 'id' (or '_id') and a str 'text'")
            title = obj.pop("title", "") or ""
            metadata = obj.pop("metadata", None) or {}
            metadata.update(obj)
            yield {"id": str(doc_id), "title": str(title), "text": text, "metadata": metadata}


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
