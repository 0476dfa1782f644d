"""Framework filters in the metadata index: Haystack and LlamaIndex filtered calls against the
same calls unfiltered, on one corpus.

Usage:
    PYTHONPATH=python python bench/compare_framework_filters.py [--docs 50000] [--queries 200]
        [--rounds 3] [--warmup 20] [--before-runs 3]

Corpus: ``--docs`` short documents (4 words of a Zipf vocabulary), ``meta.tenant = i % 100`` and
``meta.price = i % 1000`` (a number for the range). Stores: Haystack's ``RagfindDocumentStore``
(its ``RagfindBM25Retriever``); LlamaIndex's ``RagfindRetriever`` over a BM25-only Retriever, and
a ``RagfindVectorStore`` (8-dimensional node embeddings) for ``get_nodes``.

Searches (k=10): unfiltered; 1% equality (tenant == 7); a 1% range (100 <= price < 110); an OR
of two values (tenant == 7 or 8, 2%). Each is run for ``--queries`` queries (3 words of the 20
most frequent, so that filtered calls find their 10 too: the "hits" column) per round, the
filters interleaved query by query, after ``--warmup`` untimed queries; the Retrievers' result
caches are off (``set_cache_size(0)``), so every call searches. ``filter_documents`` /
``get_nodes`` of the 1% filter: ``--queries`` calls per round. p50 over every timed call.
"before": what the previous code did first for that call, where it did (the framework's
evaluator over every stored document: Haystack's every filter, LlamaIndex's OR and NOT and
``get_nodes``), ``--before-runs`` calls.

Exactness is checked first: each filter's documents are exactly those of the predicate.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

WORDS = 5_000


def corpus(n: int, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    ranks = np.minimum(rng.zipf(1.2, size=(n, 4)), WORDS) - 1
    return [" ".join(f"w{r}" for r in row) for row in ranks]


def queries(n: int, seed: int = 1) -> list:
    # Words frequent enough that a 1% filter still leaves k matches: filtered and unfiltered
    # calls return as many documents (the "hits" column).
    rng = np.random.default_rng(seed)
    return [" ".join(f"w{w}" for w in rng.choice(20, size=3, replace=False)) for _ in range(n)]


def p50(times: list) -> float:
    return statistics.median(times) * 1000


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def haystack_rows(texts: list, qs: list, args: argparse.Namespace) -> list:
    from haystack import Document
    from haystack.utils.filters import document_matches_filter

    from ragfind.integrations.haystack import RagfindBM25Retriever, RagfindDocumentStore

    t = time.perf_counter()
    store = RagfindDocumentStore()
    docs = [
        Document(id=f"d{i}", content=x, meta={"tenant": i % 100, "price": i % 1000})
        for i, x in enumerate(texts)
    ]
    for lo in range(0, len(docs), 10_000):
        store.write_documents(docs[lo : lo + 10_000])
    store.retriever.set_cache_size(0)
    print(f"haystack: {len(docs)} documents written in {time.perf_counter() - t:.1f} s", flush=True)

    def eq(v):
        return {"field": "meta.tenant", "operator": "==", "value": v}

    filters = {
        "unfiltered": (None, lambda d: True),
        "1% equality": (eq(7), lambda d: d.meta["tenant"] == 7),
        "1% range": (
            {
                "operator": "AND",
                "conditions": [
                    {"field": "meta.price", "operator": ">=", "value": 100},
                    {"field": "meta.price", "operator": "<", "value": 110},
                ],
            },
            lambda d: 100 <= d.meta["price"] < 110,
        ),
        "2% OR of two values": (
            {"operator": "OR", "conditions": [eq(7), eq(8)]},
            lambda d: d.meta["tenant"] in (7, 8),
        ),
    }
    retriever = RagfindBM25Retriever(store, top_k=10)
    hits = {}
    for name, (flt, pred) in filters.items():
        got = store.filter_documents(flt)
        assert [d.id for d in got] == [d.id for d in docs if pred(d)], name
        found = [retriever.run(query=q, filters=flt)["documents"] for q in qs[:20]]
        assert all(pred(d) for f in found for d in f), name
        hits[name] = statistics.mean(len(f) for f in found)
    times: dict = {name: [] for name in filters}
    for q in qs[: args.warmup]:
        for flt, _ in filters.values():
            retriever.run(query=q, filters=flt)
    for _ in range(args.rounds):
        for q in qs:
            for name, (flt, _) in filters.items():
                times[name].append(timed(retriever.run, q, flt))
    one = filters["1% equality"][0]
    listed = [timed(store.filter_documents, one) for _ in range(args.queries * args.rounds)]
    before_search = before_list = None
    if args.before_runs:
        # The previous path: every stored document through Haystack's evaluator.
        def previous():
            return [d.id for d in store._documents() if document_matches_filter(filters=one, document=d)]

        before_list = p50([timed(previous) for _ in range(args.before_runs)])
        before_search = before_list  # the search evaluated the same list first
    base = p50(times["unfiltered"])
    rows = []
    for name in filters:
        call = f"RagfindBM25Retriever.run, {name}"
        rows.append(("Haystack", call, hits[name], p50(times[name]), base, before_search))
    n_one = len(store.filter_documents(one))
    rows.append(("Haystack", "filter_documents, 1% equality", n_one, p50(listed), None, before_list))
    return rows


def llama_index_rows(texts: list, qs: list, args: argparse.Namespace) -> list:
    from llama_index.core.schema import TextNode
    from llama_index.core.vector_stores.types import FilterCondition, MetadataFilter, MetadataFilters

    import ragfind
    from ragfind.integrations.llama_index import (
        RagfindRetriever,
        RagfindVectorStore,
        _evaluate,
        _user_metadata,
    )

    t = time.perf_counter()
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False)
    r.add_documents(
        [
            {"id": f"d{i}", "text": x, "metadata": {"tenant": i % 100, "price": i % 1000}}
            for i, x in enumerate(texts)
        ]
    )
    r.set_cache_size(0)
    print(f"llama-index: Retriever of {len(r)} documents in {time.perf_counter() - t:.1f} s", flush=True)

    def eq(v):
        return MetadataFilter(key="tenant", value=v)

    filters = {
        "unfiltered": (None, lambda md: True),
        "1% equality": (MetadataFilters(filters=[eq(7)]), lambda md: md["tenant"] == 7),
        "1% range": (
            MetadataFilters(
                filters=[
                    MetadataFilter(key="price", value=100, operator=">="),
                    MetadataFilter(key="price", value=110, operator="<"),
                ]
            ),
            lambda md: 100 <= md["price"] < 110,
        ),
        "2% OR of two values": (
            MetadataFilters(filters=[eq(7), eq(8)], condition=FilterCondition.OR),
            lambda md: md["tenant"] in (7, 8),
        ),
    }
    retrievers = {
        name: RagfindRetriever(r, k=10, filters=flt, stages=["bm25"]) for name, (flt, _) in filters.items()
    }
    hits = {}
    for name, (_, pred) in filters.items():
        found = [retrievers[name].retrieve(q) for q in qs[:20]]
        assert all(pred(n.node.metadata) for f in found for n in f), name
        hits[name] = statistics.mean(len(f) for f in found)
    times: dict = {name: [] for name in filters}
    for q in qs[: args.warmup]:
        for rt in retrievers.values():
            rt.retrieve(q)
    for _ in range(args.rounds):
        for q in qs:
            for name, rt in retrievers.items():
                times[name].append(timed(rt.retrieve, q))

    t = time.perf_counter()
    store = RagfindVectorStore(retriever_options={"cache_size": 0, "show_progress": False})
    rng = np.random.default_rng(2)
    vectors = rng.standard_normal((len(texts), 8)).astype(np.float32)
    nodes = [
        TextNode(
            id_=f"n{i}",
            text=x,
            metadata={"tenant": i % 100, "price": i % 1000},
            embedding=vectors[i].tolist(),
        )
        for i, x in enumerate(texts)
    ]
    for lo in range(0, len(nodes), 10_000):
        store.add(nodes[lo : lo + 10_000])
    print(
        f"llama-index: RagfindVectorStore of {len(nodes)} nodes in {time.perf_counter() - t:.1f} s",
        flush=True,
    )
    one = filters["1% equality"][0]
    got = store.get_nodes(filters=one)
    assert [n.node_id for n in got] == [n.node_id for n in nodes if n.metadata["tenant"] == 7]
    listed = [timed(store.get_nodes, None, one) for _ in range(args.queries * args.rounds)]
    before_search = before_list = None
    if args.before_runs:
        from ragfind.integrations import all_documents

        # The previous path: every stored node's metadata through the Python evaluator.
        def previous(retriever, flt):
            return [d for d, _, _, md in all_documents(retriever) if _evaluate(flt, _user_metadata(md))]

        either = filters["2% OR of two values"][0]
        before_search = p50([timed(previous, r, either) for _ in range(args.before_runs)])
        before_list = p50([timed(previous, store.client, one) for _ in range(args.before_runs)])
    base = p50(times["unfiltered"])
    rows = []
    for name in filters:
        # Before, an AND of == > >= < <= in already ran in the index; OR and NOT did not.
        before = before_search if "OR" in name else None
        call = f"RagfindRetriever.retrieve, {name}"
        rows.append(("LlamaIndex", call, hits[name], p50(times[name]), base, before))
    rows.append(
        ("LlamaIndex", "RagfindVectorStore.get_nodes, 1% equality", len(got), p50(listed), None, before_list)
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--before-runs", type=int, default=3)
    args = ap.parse_args()
    print(f"{platform.platform()}, {os.cpu_count()} CPUs, load average {load()}", flush=True)
    texts = corpus(args.docs)
    qs = queries(args.queries)
    rows = haystack_rows(texts, qs, args) + llama_index_rows(texts, qs, args)
    print(f"\nload average after: {load()}\n")
    print("| framework | call | hits | p50 ms | / unfiltered | before (evaluator over every document), ms |")
    print("|---|---|---:|---:|---:|---:|")
    for fw, call, n, ms, base, before in rows:
        ratio = f"{ms / base:.2f}x" if base else ""
        prev = f"{before:.1f}" if before is not None and "unfiltered" not in call else ""
        print(f"| {fw} | {call} | {n:g} | {ms:.3f} | {ratio} | {prev} |")


if __name__ == "__main__":
    main()
