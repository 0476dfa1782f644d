"""``ragfind serve`` against in-process search: what HTTP (uvicorn + Starlette + JSON) adds.

Builds a BM25 retriever over SciFact (``../shared/data`` or ``$RAGFIND_DATA``; the bundled demo
corpus without it), saves it, starts ``ragfind serve`` in its own process, then times the same
queries (each once, so no result-cache hits) three ways, interleaved by round:

- in-process ``Retriever.search`` in a separate process of its own (``--inproc`` mode);
- ``POST /search`` over one keep-alive connection (sequential latency);
- ``POST /search`` from ``--clients`` threads at once, a connection each (throughput).

The client is the standard library's ``http.client``: httpx adds several milliseconds of its
own per request on this machine, which would be measured as the server's.

Prints medians of per-query latency (ms), the ratio HTTP / in-process, and queries per second.

    PYTHONPATH=python python bench/compare_serve.py [--queries 300] [--rounds 3] [--clients 4]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def corpus() -> tuple:
    data = Path(os.environ.get("RAGFIND_DATA", ROOT.parent / "shared" / "data")) / "scifact"
    if (data / "corpus.jsonl").is_file():
        docs = [json.loads(x) for x in open(data / "corpus.jsonl", encoding="utf-8")]
        queries = [json.loads(x)["text"] for x in open(data / "queries.jsonl", encoding="utf-8")]
        docs = [{"id": d["_id"], "title": d.get("title", ""), "text": d["text"]} for d in docs]
        return "SciFact", docs, queries
    base = ROOT / "python" / "ragfind" / "data"
    docs = [json.loads(x) for x in open(base / "demo_corpus.jsonl", encoding="utf-8")]
    queries = [json.loads(x)["text"] for x in open(base / "demo_queries.jsonl", encoding="utf-8")]
    return "demo", [{"id": d["id"], "title": d.get("title", ""), "text": d["text"]} for d in docs], queries


class Connection:
    """One keep-alive HTTP/1.1 connection posting searches."""

    def __init__(self, port: int) -> None:
        self.conn = http.client.HTTPConnection("127.0.0.1", port)

    def search(self, q: str) -> None:
        body = json.dumps({"query": q, "k": 10}).encode()
        self.conn.request("POST", "/search", body=body, headers={"Content-Type": "application/json"})
        resp = self.conn.getresponse()
        data = resp.read()
        assert resp.status == 200, data

    def close(self) -> None:
        self.conn.close()


def inproc(folder: str, queries_file: str) -> None:
    import ragfind

    r = ragfind.Retriever.load(folder)
    queries = json.loads(Path(queries_file).read_text())
    r.search(queries[0], k=10, use_cache=False)  # warm-up
    out = []
    for q in queries:
        t = time.perf_counter()
        r.search(q, k=10, use_cache=False)
        out.append(time.perf_counter() - t)
    print(json.dumps(out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=300, help="queries per round (default 300)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients (default 4)")
    ap.add_argument("--inproc", nargs=2, metavar=("FOLDER", "QUERIES"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inproc:
        inproc(*args.inproc)
        return
    import httpx

    import ragfind

    name, docs, queries = corpus()
    tmp = Path(tempfile.mkdtemp(prefix="ragfind-serve-bench-"))
    r = ragfind.Retriever(encoder=None, chunk_size=None)
    r.add_documents(docs)
    r.save(tmp / "kb")
    r.close()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragfind",
            "serve",
            str(tmp / "kb"),
            "--port",
            str(port),
            "--log-level",
            "error",
        ],
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                if httpx.get(url + "/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        seq, local, tput = [], [], []
        for rnd in range(args.rounds):
            # A different query set per round (suffix) so the server's result cache never hits.
            qs = [f"{q} {rnd}" for q in (queries * 10)[: args.queries]]
            qfile = tmp / f"q{rnd}.json"
            qfile.write_text(json.dumps(qs))
            res = subprocess.run(
                [sys.executable, __file__, "--inproc", str(tmp / "kb"), str(qfile)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            local += json.loads(res.stdout)
            c = Connection(port)
            c.search("warm up")
            for q in qs:
                t = time.perf_counter()
                c.search(q + " seq")
                seq.append(time.perf_counter() - t)
            c.close()
            local_conn = threading.local()

            def one(q: str, local_conn: threading.local = local_conn) -> None:
                if not hasattr(local_conn, "c"):
                    local_conn.c = Connection(port)
                local_conn.c.search(q + " par")

            t = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                list(pool.map(one, qs))
            tput.append(len(qs) / (time.perf_counter() - t))
        med_local, med_seq = statistics.median(local), statistics.median(seq)
        n = f"{args.queries} queries x {args.rounds} rounds"
        print(f"corpus: {name} ({len(docs)} documents), BM25 stage, k=10, {n}")
        print(f"in-process Retriever.search   median {med_local * 1e3:8.3f} ms")
        ratio = f"{med_seq / med_local:.1f}x in-process, +{(med_seq - med_local) * 1e3:.3f} ms"
        print(f"POST /search (1 connection)   median {med_seq * 1e3:8.3f} ms   ({ratio})")
        qps = statistics.median(tput)
        one_conn = f"1 connection: {1 / med_seq:.0f}"
        print(f"POST /search ({args.clients} clients)     median {qps:8.0f} queries/s   ({one_conn})")
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
