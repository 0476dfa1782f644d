"""Metadata-filtered vs unfiltered BM25 search right after a one-document write, at scale.

Usage:
    PYTHONPATH=python python bench/compare_metadata_filters.py [--docs 1000000] [--queries 40]
        [--rounds 3] [--warmup 10] [--retriever] [--evaluate-every-time] [--shape short|long]

Default (the index + filter path): a ``BM25Index`` of ``--docs`` synthetic documents (Zipf
words, chunk id = document number) and the Retriever's own metadata index and filter compiler
(``MetadataFilters`` + ``FilterCompiler``). Before every timed search one document is written
to both (untimed), as in a service that writes while it reads: each filter the compiler keeps
is then one write behind, and is patched (the one chunk written is tested against it), and the
BM25 index is at a new generation, so the filter is compiled again into its allowed-set (from
the metadata index's bitmap over chunk ids, a word at a time). Filtered time = the filter
(metadata index) + the BM25 allowed-set + the filtered search; each part is printed.
``--evaluate-every-time`` keeps no filter (``FilterCompiler(max_entries=0)``): every search
evaluates its filter whole, as the first search of a filter does.
``--retriever`` runs through a BM25-only ``Retriever`` instead, in four settings side by side:
with and without a one-document ``add_documents`` before each search, and with the results
cache on (every query distinct, so each search misses and fills it) and off (``cache_size=0``);
the four settings take turns query by query, so that every cell sees the same machine.

Filters (selectivity over the corpus): 1% equality ``{"tenant": 7}``; 20% numeric range
``{"score": {"$gte": 0.3, "$lt": 0.5}}``; 60% ``$in`` ``{"lang": {"$in": ["en", "fr", "de"]}}``;
an ``$and``/``$or`` mix (~14%). Rounds interleave the filters query by query, after
``--warmup`` untimed queries done the same way; p50 over every timed search. Exactness: for a
few queries each filter's top k equals the unfiltered full ranking restricted by the same
predicate (computed with numpy over the metadata arrays).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
import types

import numpy as np

import ragfind

LANGS = ["en", "fr", "de", "es", "it"]
FILTERS = {
    "1% equality": {"tenant": 7},
    "20% numeric range": {"score": {"$gte": 0.3, "$lt": 0.5}},
    "60% $in": {"lang": {"$in": ["en", "fr", "de"]}},
    "$and/$or mix": {
        "$and": [
            {"$or": [{"lang": "en"}, {"tenant": {"$lt": 10}}]},
            {"score": {"$gte": 0.5}},
            {"$not": {"tenant": 3}},
        ]
    },
}


def predicate(name: str, tenant: np.ndarray, score: np.ndarray, lang: np.ndarray) -> np.ndarray:
    if name == "1% equality":
        return tenant == 7
    if name == "20% numeric range":
        return (score >= 0.3) & (score < 0.5)
    if name == "60% $in":
        return lang < 3
    return ((lang == 0) | (tenant < 10)) & (score >= 0.5) & (tenant != 3)


#: Data shapes: vocabulary, Zipf exponent, document length range (words), and whether the
#: tenant follows the document number (every 100th document) or is drawn at random.
SHAPES = {
    "short": (20_000, 1.2, (8, 40), False),
    "long": (100_000, 1.1, (30, 120), True),
}


class Corpus:
    def __init__(self, n: int, seed: int = 0, shape: str = "short") -> None:
        rng = np.random.default_rng(seed)
        self.rng = rng
        n_vocab, self.zipf, self.lengths, random_tenant = SHAPES[shape]
        self.vocab = np.asarray([f"w{i}" for i in range(n_vocab)], dtype=object)
        # Room for the documents written during the run: growing by concatenation would copy
        # the whole metadata per write and evict the caches the next search reads.
        cap = n + 200_000
        if random_tenant:
            self._tenant = rng.integers(0, 100, cap).astype(np.int64)
        else:
            self._tenant = (np.arange(cap) % 100).astype(np.int64)
        self._score = rng.random(cap)
        self._lang = rng.integers(0, len(LANGS), cap)
        self.n = n

    tenant = property(lambda self: self._tenant[: self.n])
    score = property(lambda self: self._score[: self.n])
    lang = property(lambda self: self._lang[: self.n])

    def texts(self, start: int, stop: int) -> list:
        rng = np.random.default_rng(start)
        lengths = rng.integers(*self.lengths, stop - start)
        words = np.minimum(rng.zipf(self.zipf, int(lengths.sum())), len(self.vocab)) - 1
        out, pos = [], 0
        for ln in lengths:
            out.append(" ".join(self.vocab[words[pos : pos + ln]]))
            pos += ln
        return out

    def metadata(self, start: int, stop: int) -> list:
        t, s, g = (
            self._tenant[start:stop].tolist(),
            self._score[start:stop].tolist(),
            self._lang[start:stop].tolist(),
        )
        return [{"tenant": a, "score": b, "lang": LANGS[c]} for a, b, c in zip(t, s, g)]

    def grow(self, k: int) -> tuple:
        """k more documents (ids n..n+k-1): texts and metadata."""
        start = self.n
        if start + k > len(self._tenant):
            raise RuntimeError("Corpus: out of room for more writes")
        self.n += k
        return self.texts(start, start + k), self.metadata(start, start + k)


class Collection(Corpus):
    """A judged collection's documents (cycled: document i is the collection's i % n) and
    queries, with the synthetic metadata of :class:`Corpus`; its MiniLM embeddings when the data
    folder has them (else the encoder embeds the documents)."""

    def __init__(self, name: str, seed: int = 0) -> None:
        import json
        from pathlib import Path

        data = (
            Path(os.environ.get("RAGFIND_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))
            / name
        )

        def rows(path: Path) -> list:
            return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]

        docs = [d for d in rows(data / "corpus.jsonl") if d["text"].strip()]
        self.docs = [d["text"] for d in docs]
        self.queries = [q["text"] for q in rows(data / "queries.jsonl")]
        super().__init__(len(docs), seed)
        self.embeddings = None
        emb = data / "embeddings" / "all-MiniLM-L6-v2"
        if (emb / "corpus.npy").is_file():
            ids = [x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x]
            row = {d: n for n, d in enumerate(ids)}
            self.embeddings = np.load(emb / "corpus.npy")[[row[d["_id"]] for d in docs]]

    def texts(self, start: int, stop: int) -> list:
        return [self.docs[i % len(self.docs)] for i in range(start, stop)]


def p50(xs: list) -> float:
    return statistics.median(xs) * 1e3


def time_rounds(args, queries: list, write_one, unfiltered, filtered) -> tuple:
    """Interleaved rounds: per query, a write then the unfiltered search, then per filter a
    write then the filtered search. ``filtered(q, flt)`` returns its parts' seconds (or Nones).
    Returns ``(times, parts)``: seconds per search and per-part seconds, by row name."""
    times: dict = {"unfiltered": [], **{name: [] for name in FILTERS}}
    parts: dict = {name: [] for name in FILTERS}
    # Untimed warm-up first: the first writes after a bulk build are slower to search after.
    for q in queries[: args.warmup]:
        write_one()
        unfiltered(q)
        for flt in FILTERS.values():
            write_one()
            filtered(q, flt)
    for _ in range(args.rounds):
        for q in queries:
            write_one()
            t = time.perf_counter()
            unfiltered(q)
            times["unfiltered"].append(time.perf_counter() - t)
            for name, flt in FILTERS.items():
                write_one()
                t = time.perf_counter()
                split = filtered(q, flt)
                times[name].append(time.perf_counter() - t)
                parts[name].append(split)
    return times, parts


def run_index(args, corpus: Corpus, queries: list) -> None:
    from ragfind.pipeline.filters import FilterCompiler, MetadataFilters
    from ragfind.sparse.bm25 import _compile_filter

    t0 = time.perf_counter()
    bm25 = ragfind.BM25Index()
    meta = MetadataFilters()
    step = 100_000
    for start in range(0, args.docs, step):
        stop = min(start + step, args.docs)
        ids = np.arange(start, stop, dtype=np.int64)
        bm25.add(corpus.texts(start, stop), ids=ids)
        meta.add(
            ids, [f"d{i}" for i in range(start, stop)], [""] * (stop - start), corpus.metadata(start, stop)
        )
    build = time.perf_counter() - t0
    store = types.SimpleNamespace(fields={"tenant", "score", "lang"}, kinds={}, kinds_version=0, generation=0)
    compiler = FilterCompiler(meta, store, max_entries=0 if args.evaluate_every_time else 256)

    def write_one() -> None:
        texts, md = corpus.grow(1)
        i = corpus.n - 1
        ids = np.asarray([i], np.int64)
        bm25.add(texts, ids=ids)
        meta.add(ids, [f"d{i}"], [""], md)
        store.generation += 1

    # Exactness first (a few queries, the full unfiltered ranking restricted by numpy).
    for q in queries[:3]:
        write_one()
        full_ids, _ = bm25.search(q, k=corpus.n)
        for name, flt in FILTERS.items():
            keep = predicate(name, corpus.tenant, corpus.score, corpus.lang)
            want = [i for i in full_ids.tolist() if keep[i]][: args.k]
            got, _ = bm25.search(q, k=args.k, filter=compiler(flt))
            assert got.tolist() == want, (name, q)

    def filtered(q: str, flt: dict) -> tuple:
        t = time.perf_counter()
        allowed = compiler(flt)  # the metadata index: the filter, kept and patched
        t1 = time.perf_counter()
        _compile_filter(bm25, allowed)  # BM25Index: its allowed-set (cached on the IdFilter)
        t2 = time.perf_counter()
        bm25.search(q, k=args.k, filter=allowed)
        return t1 - t, t2 - t1, time.perf_counter() - t2

    times, parts = time_rounds(args, queries, write_one, lambda q: bm25.search(q, k=args.k), filtered)
    report(args, build, corpus, times, parts, "BM25Index + MetadataFilters (the Retriever's filter path)")


def run_retriever(args, corpus: Corpus, queries: list) -> None:
    """A Retriever in four settings, side by side: with and without a one-document write before
    each search, with the results cache on (1,024 entries; every query distinct, so each search
    misses it and fills it) and off (``cache_size=0``). BM25-only over the synthetic corpus; the
    default hybrid (BM25 + MiniLM) over a judged collection (``--collection``)."""
    t0 = time.perf_counter()
    hybrid = isinstance(corpus, Collection)
    if hybrid:
        # Room for every query's embedding: embedded once before the timed searches (a write
        # does not change a query's embedding), so that each cell times the search itself.
        r = ragfind.Retriever(chunk_size=None, cache_size=len(corpus.queries) + 1024)
    else:
        r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False, cache_size=1024)
    if args.evaluate_every_time:
        r.stage_runner.filters.cache.resize(0)
    step = 50_000
    for start in range(0, corpus.n, step):
        stop = min(start + step, corpus.n)
        batch = [
            {"id": f"d{i}", "text": t, "metadata": m}
            for i, t, m in zip(range(start, stop), corpus.texts(start, stop), corpus.metadata(start, stop))
        ]
        emb = getattr(corpus, "embeddings", None)
        r.add_documents(batch, embeddings=None if emb is None else emb[start:stop])
    build = time.perf_counter() - t0
    n_docs = corpus.n
    writes: list = []

    def write_one() -> None:
        texts, md = corpus.grow(1)
        vec = None
        if hybrid and args.write_vectors:  # the document's embedding given with it: no inference
            vec = corpus.embeddings[(corpus.n - 1) % len(corpus.docs)][None, :]
        t = time.perf_counter()
        r.add_documents([{"id": f"d{corpus.n - 1}", "text": texts[0], "metadata": md[0]}], embeddings=vec)
        writes.append(time.perf_counter() - t)

    # Exact: each stage's filtered top k is its full ranking restricted by the predicate (a
    # fused list is not: its ranks are taken within the filtered lists).
    stages = [[s.name] for s in r.first_stages] if hybrid else [None]
    for q in (corpus.queries if hybrid else queries)[:2]:
        write_one()
        for run in stages:
            full = r.search(q, k=corpus.n, stages=run, use_cache=False).doc_ids
            for name, flt in FILTERS.items():
                keep = predicate(name, corpus.tenant, corpus.score, corpus.lang)
                want = [d for d in full if keep[int(d[1:])]][: args.k]
                got = r.search(q, k=args.k, filters=flt, stages=run, use_cache=False).doc_ids
                assert got == want, (name, q, run)

    # The four settings take turns query by query (the first one rotating), so that every cell
    # sees the same machine: a VM's speed drifts by 10-20% over the minutes one setting after
    # another would take, more than the write costs.
    rng = np.random.default_rng(11)
    pool = iter(range(10**9))

    def next_query() -> str:
        if hybrid:  # the collection's queries in turn (a write between makes a repeat miss)
            return corpus.queries[next(pool) % len(corpus.queries)]
        return " ".join(corpus.vocab[rng.integers(0, 300, 3)])

    embed_times = []
    for q in corpus.queries if hybrid else ():
        embed_times.append(r.search(q, k=1, use_cache=False).timings["embed"])
    settings = [("no write", 1024), ("write", 1024), ("no write", 0), ("write", 0)]
    PARTS = ("filter", "bm25", "dense", "fusion", "store") if hybrid else ("filter", "bm25", "store")
    rows = ["unfiltered", *FILTERS]
    times: dict = {key: {name: [] for name in rows} for key in settings}
    parts: dict = {key: {name: {} for name in rows} for key in settings}  # the search's own timings
    n_timed = args.queries * args.rounds
    for i in range(n_timed + args.warmup):
        for j in range(len(settings)):
            write, cache = key = settings[(i + j) % len(settings)]
            if hybrid:
                r.result_cache.resize(cache)
            else:
                r.set_cache_size(cache)
            q = next_query()  # a new one each: the cache misses
            if write == "no write":
                # The other settings' writes left each filter some writes behind: brought up to
                # date (untimed), as a service reading with no write between would have them.
                # Another query: one sharing the timed query's terms would warm its postings.
                other = next_query()
                for flt in FILTERS.values():
                    r.search(other, k=args.k, filters=flt, use_cache=False)
            for name, flt in [("unfiltered", None), *FILTERS.items()]:
                if write == "write":
                    write_one()
                t = time.perf_counter()
                res = r.search(q, k=args.k, filters=flt)
                if i >= args.warmup:
                    times[key][name].append(time.perf_counter() - t)
                    for part in PARTS:
                        parts[key][name].setdefault(part, []).append(res.timings.get(part, 0.0))
    results = {key: {name: p50(ts) for name, ts in times[key].items()} for key in settings}
    load = os.getloadavg()
    if hybrid:
        how = "writes with their vectors" if args.write_vectors else "writes embedded"
        what = f"hybrid Retriever (BM25 + MiniLM), {args.collection}, {how}"
    else:
        what = f"BM25-only Retriever, {args.shape}"
    print(f"# {what}: {n_docs:,} documents, k={args.k}, build {build:.0f} s")
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"load average {load[0]:.2f} / {load[1]:.2f} at the end; "
        f"{args.queries * args.rounds} distinct queries per cell; filters "
        + ("evaluated whole per search" if args.evaluate_every_time else "kept and patched per write")
    )
    print(f"one-document add_documents: p50 {p50(writes):.3f} ms over {len(writes)}")
    if hybrid:
        print(
            f"query embedding (MiniLM, once per query before the timed searches, kept): p50 "
            f"{p50(embed_times):.3f} ms; the cells below time the search after it"
        )
    print()
    head = " | ".join(f"{w}, cache {'on' if c else 'off'}" for w, c in settings)
    print(f"| search (p50 ms, / unfiltered) | {head} |")
    print("|---" + "|---:" * len(settings) + "|")
    for name in ["unfiltered", *FILTERS]:
        cells = []
        for key in settings:
            ms = results[key][name]
            cells.append(f"{ms:.3f} ({ms / results[key]['unfiltered']:.2f}x)")
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nwrite between / no write between, same search:")
    for name in ["unfiltered", *FILTERS]:
        on = results[("write", 1024)][name] / results[("no write", 1024)][name]
        off = results[("write", 0)][name] / results[("no write", 0)][name]
        print(f"- {name}: {on:.2f}x (cache on), {off:.2f}x (cache off)")
    print(f"\nparts (the search's own timings, p50 ms: {' / '.join(PARTS)}):\n")
    print(f"| search | {head} |")
    print("|---" + "|---:" * len(settings) + "|")
    for name in ["unfiltered", *FILTERS]:
        cells = [" / ".join(f"{p50(parts[key][name][part]):.3f}" for part in PARTS) for key in settings]
        print(f"| {name} | " + " | ".join(cells) + " |")


def report(args, build: float, corpus: Corpus, times: dict, parts: dict, label: str) -> None:
    base = p50(times["unfiltered"])
    kept = "evaluated whole per search" if args.evaluate_every_time else "kept and patched per write"
    print(f"# {label}: {args.docs:,} documents, one-document write before every search, k={args.k}")
    print(f"Filters {kept}.")
    print(
        f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
        f"build {build:.0f} s"
    )
    print(f"{len(times['unfiltered'])} searches per row ({args.rounds} rounds x {args.queries} queries)\n")
    print(
        "| search | allowed | p50 ms | p50 / unfiltered | filter (metadata index) ms | BM25 allowed-set ms "
        "| filtered search ms | filter + search / unfiltered |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| unfiltered | 100% | {base:.3f} | 1.00x | | | | |")
    for name in FILTERS:
        share = predicate(name, corpus.tenant, corpus.score, corpus.lang).mean()
        ms = p50(times[name])
        cols = []
        for i in range(3):
            xs = [p[i] for p in parts[name] if p[i] is not None]
            cols.append(f"{p50(xs):.3f}" if xs else "")
        rest = ""
        if cols[2]:
            rest = f"{(float(cols[0]) + float(cols[2])) / base:.2f}x"
        print(f"| {name} | {share:.1%} | {ms:.3f} | {ms / base:.2f}x | {' | '.join(cols)} | {rest} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--queries", type=int, default=40)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=10, help="untimed queries (each after a write) first")
    ap.add_argument("--retriever", action="store_true", help="through a BM25-only Retriever")
    ap.add_argument(
        "--evaluate-every-time",
        action="store_true",
        help="keep no filter: evaluate each whole per search",
    )
    ap.add_argument(
        "--collection",
        help="through the default hybrid Retriever over this judged collection of the data folder "
        "(e.g. scifact), its queries, and the synthetic metadata (implies --retriever)",
    )
    ap.add_argument(
        "--write-vectors",
        action="store_true",
        help="with --collection: each write gives its document's stored embedding (no inference "
        "in the write, whose model run otherwise evicts the caches the next search reads)",
    )
    ap.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default="short",
        help="short: 8-40 Zipf(1.2) words of 20,000, tenant = i %% 100; long: 30-120 Zipf(1.1) words of "
        "100,000, tenant drawn at random",
    )
    args = ap.parse_args()
    if args.collection:
        corpus = Collection(args.collection)
        args.retriever = True
    else:
        corpus = Corpus(args.docs, shape=args.shape)
    rng = np.random.default_rng(7)
    queries = [" ".join(corpus.vocab[rng.integers(0, 300, 3)]) for _ in range(args.queries)]
    (run_retriever if args.retriever else run_index)(args, corpus, queries)


if __name__ == "__main__":
    main()
