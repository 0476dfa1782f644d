"""Resource-limit scenarios, each in a fresh child process; prints wall time and peak RSS.

    PYTHONPATH=python python tools/resource_limits.py [--only NAME] [--quick]

Scenarios (figures recorded in RELIABILITY.md):
  query_terms     a BM25 query with 500, 2,000 and 5,000 distinct terms (100k-document corpus)
  k_1e7           k = 10**7 on BM25Index.search / search_batch, DenseIndex.search / search_batch,
                  LateInteractionIndex.search and rrf (small corpora: output is bounded by
                  the number of documents, or a clear error)
  doc_100mb       one 100 MB document through BM25Index.add, then a search
  million_docs    1,000,000 tiny documents in a BM25Index (add, search, save, load) and
                  1,000,000 8-dimensional vectors in an exact DenseIndex
Each child runs under RLIMIT_AS = 8 GiB so that a runaway allocation fails with MemoryError
instead of taking the machine down.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
import time

SCENARIOS = {
    "query_terms": """
        import numpy as np
        from ragfind import BM25Index
        rng = np.random.default_rng(0)
        vocab = np.array([f"w{i}" for i in range(60000)])
        index = BM25Index()
        index.add_tokenized([list(vocab[rng.integers(0, 60000, 20)]) for _ in range(100_000)])
        mark("built 100k docs")
        for n in (500, 2_000, 5_000):
            q = list(vocab[:n])
            t = time.perf_counter(); ids, s = index.search_tokenized(q, k=10); dt = time.perf_counter() - t
            mark(f"tokenized query of {n} terms: {dt*1e3:.0f} ms, {len(ids)} results")
            text = " ".join(q)
            t = time.perf_counter(); ids, s = index.search(text, k=10); dt = time.perf_counter() - t
            mark(f"text query of {n} terms ({len(text)/1e3:.0f} kB): {dt*1e3:.0f} ms")
    """,
    "k_1e7": """
        import numpy as np
        from ragfind import BM25Index, DenseIndex, LateInteractionIndex, rrf
        K = 10**7
        index = BM25Index(); index.add([f"alpha doc {i}" for i in range(1000)])
        ids, s = index.search("alpha", k=K); mark(f"BM25Index.search k=1e7 on 1000 docs: {len(ids)} results")
        out = index.search_batch(["alpha"] * 8, k=K, threads=2); mark(f"BM25Index.search_batch 8 x k=1e7: {len(out[0][0])} results each")
        rng = np.random.default_rng(0)
        d = DenseIndex(16); d.add(rng.standard_normal((1000, 16)).astype(np.float32))
        ids, s = d.search(rng.standard_normal(16).astype(np.float32), k=K); mark(f"DenseIndex.search k=1e7 on 1000 vectors: {len(ids)} results")
        try:
            ids, s = d.search_batch_padded(rng.standard_normal((8, 16)).astype(np.float32), k=K)
            mark(f"DenseIndex.search_batch_padded 8 x k=1e7: shape {ids.shape} (padded to k)")
        except (MemoryError, ValueError) as e:
            mark(f"DenseIndex.search_batch_padded 8 x k=1e7: {type(e).__name__}: {e}")
        h = DenseIndex(16, kind="hnsw"); h.add(rng.standard_normal((1000, 16)).astype(np.float32))
        ids, s = h.search(rng.standard_normal(16).astype(np.float32), k=K); mark(f"DenseIndex(hnsw).search k=1e7: {len(ids)} results")
        try:
            ids, s = h.search_batch_padded(rng.standard_normal((8, 16)).astype(np.float32), k=K)
            mark(f"DenseIndex(hnsw).search_batch_padded 8 x k=1e7: shape {ids.shape}")
        except (MemoryError, ValueError) as e:
            mark(f"DenseIndex(hnsw).search_batch_padded 8 x k=1e7: {type(e).__name__}: {e}")
        li = LateInteractionIndex(8); li.add([rng.standard_normal((4, 8)).astype(np.float32) for _ in range(1000)])
        ids, s = li.search(rng.standard_normal((3, 8)).astype(np.float32), k=K); mark(f"LateInteractionIndex.search k=1e7: {len(ids)} results")
        ids, s = rrf([list(range(1000)), list(range(500, 1500))], top_k=K); mark(f"rrf top_k=1e7: {len(ids)} results")
    """,
    "doc_100mb": """
        import numpy as np
        from ragfind import BM25Index
        rng = np.random.default_rng(0)
        words = np.array([f"word{i}" for i in range(50000)])
        text = " ".join(words[rng.integers(0, 50000, 100_000_000 // 9)])
        mark(f"made a {len(text)/1e6:.0f} MB document")
        index = BM25Index()
        t = time.perf_counter(); index.add([text, "a small word1 document"]); dt = time.perf_counter() - t
        mark(f"BM25Index.add of the 100 MB document: {dt:.1f} s, {index.stats()['num_terms']} terms")
        del text
        t = time.perf_counter(); ids, s = index.search("word1 word2", k=10); dt = time.perf_counter() - t
        mark(f"search: {dt*1e3:.1f} ms, {len(ids)} results")
    """,
    "million_docs": """
        import tempfile, os
        import numpy as np
        from ragfind import BM25Index, DenseIndex
        docs = [f"w{i % 1000} t{i % 7}" for i in range(1_000_000)]
        index = BM25Index()
        t = time.perf_counter(); index.add(docs); dt = time.perf_counter() - t
        mark(f"BM25Index.add 1M tiny docs: {dt:.1f} s")
        del docs
        t = time.perf_counter(); ids, s = index.search("w1 t3", k=10); dt = time.perf_counter() - t
        mark(f"search: {dt*1e3:.1f} ms")
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "i.bm25")
            t = time.perf_counter(); index.save(p); dt = time.perf_counter() - t
            mark(f"save: {dt:.2f} s, {os.path.getsize(p)/1e6:.0f} MB")
            del index
            t = time.perf_counter(); index = BM25Index.load(p); dt = time.perf_counter() - t
            mark(f"load (mmap): {dt:.2f} s")
            ids, s = index.search("w1 t3", k=10)
        del index
        rng = np.random.default_rng(0)
        X = rng.standard_normal((1_000_000, 8)).astype(np.float32)
        dense = DenseIndex(8)
        t = time.perf_counter(); dense.add(X); dt = time.perf_counter() - t
        mark(f"DenseIndex.add 1M x 8: {dt:.1f} s")
        t = time.perf_counter(); dense.search(X[0], k=10); dt = time.perf_counter() - t
        mark(f"DenseIndex.search: {dt*1e3:.1f} ms")
    """,
}

PRELUDE = """
import resource, sys, time, json
resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
T0 = time.perf_counter()
def mark(msg):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"t": round(time.perf_counter() - T0, 2), "peak_rss_mb": round(rss), "msg": msg}), flush=True)
mark("start (imports done)")
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=sorted(SCENARIOS))
    ap.add_argument("--timeout", type=float, default=300, help="seconds per scenario")
    args = ap.parse_args()
    failed = False
    for name, body in SCENARIOS.items():
        if args.only and name != args.only:
            continue
        code = "import ragfind\n" + PRELUDE + textwrap.dedent(body)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(
                [sys.executable, "-c", code],
                capture_output=True,
                text=True,
                env=os.environ,
                timeout=args.timeout,
            )
            stdout, stderr, rc = proc.stdout, proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            stderr, rc = f"TIMEOUT after {args.timeout} s", "timeout"
        print(f"== {name}: exit {rc}, {time.perf_counter() - t0:.1f} s")
        for line in stdout.splitlines():
            try:
                rec = json.loads(line)
                print(f"   {rec['t']:7.2f} s  peak RSS {rec['peak_rss_mb']:6d} MB  {rec['msg']}")
            except ValueError:
                print("   ", line)
        if rc != 0:
            failed = True
            print(stderr[-3000:])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
