"""The workload of tools/callgrind/retriever_search.sh: ``N`` SciFact queries through
``Retriever.search`` (``whole``) or the ``BM25Index.search`` beneath it (``bm25``), run inside the
builtin ``sorted()`` that callgrind collects; a first call with ``N = build`` saves the Retriever
the others load.

Usage: python tools/callgrind/retriever_search.py FOLDER (build|whole|bm25) N
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))

import ragfind  # noqa: E402
from compare_pipeline_engine import scifact  # noqa: E402


def main() -> None:
    folder, mode, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    docs, queries = scifact()
    if mode == "build":
        r = ragfind.Retriever(encoder=None, cache_size=0)
        r.add_documents(docs)
        r.save(folder)
        r.close()
        return
    r = ragfind.Retriever.load(folder)
    r.result_cache.max_entries = 0
    qs = queries[:n]
    f = (lambda q: r.search(q, k=10)) if mode == "whole" else (lambda q: r.bm25.search(q, 10))
    for q in queries[-50:]:  # warm: lazy imports and first-call caches stay out of the count
        r.search(q, k=10)
        r.bm25.search(q, 10)
    sorted(range(len(qs)), key=lambda i: (f(qs[i]), 0)[1])


if __name__ == "__main__":
    main()
