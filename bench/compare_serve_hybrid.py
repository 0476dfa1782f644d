"""A hybrid search (BM25 + all-MiniLM-L6-v2) served against the same search in process, one
client, one request at a time: where the time between the two goes.

Builds Cranfield (1,400 documents; ``$RAGFIND_DATA`` or ``../shared/data``) as a hybrid
Retriever from the precomputed corpus vectors, then times ``--queries`` searches (a new query
text each, no results cache) three ways, each in a process of its own, in turn per round:

- in process: ``Retriever.search`` back to back, and with ``--gap-ms`` of sleep before each
  (an HTTP client's round trip leaves the CPU idle between searches as well);
- served: ``ragfind serve --read-only`` on loopback, one keep-alive client (``http.client``),
  reporting the HTTP round trip and the server's own ``timings.total`` of the same request.

    PYTHONPATH=python python bench/compare_serve_hybrid.py [--queries 100] [--rounds 3]
        [--serve-arg=--threads=2 ...]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    return Path(os.environ.get("RAGFIND_DATA", ROOT.parent / "shared" / "data"))


def lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def build(folder: Path) -> list:
    import numpy as np

    import ragfind

    data = data_dir() / "cranfield"
    emb = data / "embeddings" / "all-MiniLM-L6-v2"
    # (two Cranfield documents have no text: no chunk, no vector)
    docs = [
        {"id": d["_id"], "title": d.get("title", ""), "text": d["text"]}
        for d in lines(data / "corpus.jsonl")
        if d["text"].strip()
    ]
    ids = [x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x]
    row = {d: n for n, d in enumerate(ids)}
    matrix = np.load(emb / "corpus.npy")
    r = ragfind.Retriever(chunk_size=None)
    r.add_documents(docs, embeddings=matrix[[row[d["id"]] for d in docs]])
    r.save(folder)
    r.close()
    return [q["text"] for q in lines(data / "queries.jsonl")]


def inproc(folder: str, queries_file: str, gap_ms: float) -> None:
    """Child mode: seconds per Retriever.search, one JSON list on stdout."""
    import ragfind

    r = ragfind.Retriever.load(folder)
    queries = json.loads(Path(queries_file).read_text())
    for q in queries[:10]:
        r.search(q + " warm", k=10, use_cache=False)
    out = []
    for q in queries:
        if gap_ms:
            time.sleep(gap_ms / 1e3)
        t = time.perf_counter()
        r.search(q, k=10, use_cache=False)
        out.append(time.perf_counter() - t)
    print(json.dumps(out))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def served(folder: Path, queries: list, serve_args: list) -> tuple:
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    cmd = [sys.executable, "-m", "ragfind", "serve", str(folder), "--port", str(port), "--read-only"]
    cmd += ["--no-access-log", "--log-level", "warning", "--cache-size", "0", *serve_args]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.time() + 120
        while True:
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("GET", "/health")
                conn.getresponse().read()
                break
            except OSError:
                if time.time() > deadline or proc.poll() is not None:
                    raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
                time.sleep(0.2)
        headers = {"Content-Type": "application/json"}

        def post(q: str) -> dict:
            conn.request("POST", "/search", json.dumps({"query": q, "k": 10}), headers)
            resp = conn.getresponse()
            body = resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{resp.status}: {body[:300]!r}")
            return json.loads(body)

        for q in queries[:10]:
            post(q + " warm")
        http_s, server_s = [], []
        for q in queries:
            t = time.perf_counter()
            answer = post(q)
            http_s.append(time.perf_counter() - t)
            server_s.append(answer["timings"]["total"] / 1e3)  # answered in ms
        return http_s, server_s
    finally:
        proc.terminate()
        proc.wait(30)


def ms(xs: list) -> float:
    return statistics.median(xs) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gap-ms", type=float, default=1.0)
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to ragfind serve")
    ap.add_argument("--inproc", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inproc:
        inproc(args.inproc[0], args.inproc[1], float(args.inproc[2]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "hybrid"
        queries = build(folder)[: args.queries]
        qfile = Path(tmp) / "queries.json"
        rows: dict = {"in process, back to back": [], f"in process, {args.gap_ms:g} ms gaps": []}
        rows.update({"served: HTTP round trip": [], "served: server timings.total": []})
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        for rnd in range(args.rounds):
            salted = [f"{q} r{rnd}" for q in queries]
            qfile.write_text(json.dumps(salted))
            for gap, name in [
                (0.0, "in process, back to back"),
                (args.gap_ms, f"in process, {args.gap_ms:g} ms gaps"),
            ]:
                out = subprocess.run(
                    [sys.executable, __file__, "--inproc", str(folder), str(qfile), str(gap)],
                    env=env,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                rows[name].append(ms(json.loads(out.stdout.strip().splitlines()[-1])))
            h, s = served(folder, [f"{q} s" for q in salted], args.serve_arg)
            rows["served: HTTP round trip"].append(ms(h))
            rows["served: server timings.total"].append(ms(s))
        load = os.getloadavg()
        print(f"# Cranfield hybrid, {len(queries)} queries x {args.rounds} rounds, k=10, no cache")
        print(f"serve args: {args.serve_arg or 'defaults'}; load average {load[0]:.2f} / {load[1]:.2f}\n")
        print("| path | p50 ms (median of rounds) | rounds |")
        print("|---|---:|---|")
        for name, vals in rows.items():
            print(f"| {name} | {statistics.median(vals):.2f} | {', '.join(f'{v:.2f}' for v in vals)} |")


if __name__ == "__main__":
    main()
