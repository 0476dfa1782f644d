"""Data that ships inside the package: a small demo knowledge base written for ragfind.

The demo corpus is a fictional product knowledge base (troubleshooting articles, release notes,
API reference, hardware pages, how-to guides, FAQ) for a made-up IoT company. It is full of the
identifiers keyword search must keep findable: part numbers (``XJ-2000``, ``QB-150L``), error
codes (``E_ACCESS_DENIED``), function names (``getUserById``) and versions (``v2.3.1``). All of
its text was written for this project.
"""

from __future__ import annotations

import json
from importlib import resources

__all__ = ["load_demo_corpus", "load_demo_queries"]


def _read_jsonl(name: str) -> list[dict]:
    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def load_demo_corpus() -> list[dict]:
    """Returns the bundled demo documents.

    Returns:
        a list of dicts with ``id`` (str, e.g. ``"ts-003"``), ``title``, ``text`` and
        ``category`` (``troubleshooting``, ``release notes``, ``API reference``, ``hardware``,
        ``how-to``, ``FAQ``, ``security``, ``guide``), in a fixed order.
    """
    return _read_jsonl("demo_corpus.jsonl")


def load_demo_queries() -> list[dict]:
    """Returns the demo queries: dicts with ``query`` (str) and ``relevant`` (the ids of the
    demo documents that answer it, best first)."""
    return _read_jsonl("demo_queries.jsonl")
