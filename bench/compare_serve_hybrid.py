"""A hybrid search (BM25 + all-MiniLM-L6-v2) served against the same search in process, one
client, one request at a time: where the time between the two goes.

Builds Cranfield (1,400 documents; ``$RAGFIND_DATA`` or ``../shared/data``) as a hybrid
Retriever from the precomputed corpus vectors, starts ``ragfind serve --read-only`` on it
(loopback, no results cache) and a bare HTTP server (``bench/uvloop_floor.py``: a uvloop
protocol that answers at once), then, in one client process holding the same Retriever, times
per query (a new query text each; the paths take turns query by query, so that the VM's drift
over minutes hits them alike):

- in process: ``Retriever.search`` after ``--gap-ms`` of sleep, then once more back to back;
- served: ``POST /search`` through one keep-alive ``http.client`` connection after the same
  sleep (the HTTP round trip, and the server's own ``timings.total`` of the same request);
- the floor of the HTTP exchange: the same request to the bare server after the same sleep.

Every timed call but "back to back" follows the same idle time, as a service's requests do: on
this VM a thread woken after a few idle milliseconds starts markedly slower than one that never
slept, and that lands on whichever path runs first after a pause. Each row is the median over
a round's queries, then the median of rounds; "served - in process" is the median of the
per-query differences.

    PYTHONPATH=python python bench/compare_serve_hybrid.py [--queries 100] [--rounds 3]
        [--gap-ms 10] [--serve-arg=--threads=2 ...]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from compare_serve import data_dir, free_port, lines  # the same corpus paths and port pick

ROOT = Path(__file__).resolve().parents[1]


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


def start(cmd: list, port: int, env: dict | None = None) -> tuple:
    """A server process and a keep-alive connection to it, once it answers ``GET /health``."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", "/health")
            conn.getresponse().read()
            return proc, conn
        except OSError:
            if time.time() > deadline or proc.poll() is not None:
                raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
            time.sleep(0.2)


def post(conn: http.client.HTTPConnection, q: str) -> bytes:
    conn.request("POST", "/search", json.dumps({"query": q, "k": 10}), {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = resp.read()
    if resp.status != 200:
        raise RuntimeError(f"{resp.status}: {body[:300]!r}")
    return body


def rounds(folder: Path, queries: list, n_rounds: int, serve_args: list, gap_s: float) -> dict:
    """Seconds per path and query, per round: ``{row: [[seconds per query] per round]}``."""
    import ragfind

    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    port, bare_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "ragfind", "serve", str(folder), "--port", str(port), "--read-only"]
    cmd += ["--no-access-log", "--log-level", "warning", "--cache-size", "0", *serve_args]
    server, conn = start(cmd, port, env)
    bare_cmd = [sys.executable, str(ROOT / "bench" / "uvloop_floor.py"), "--port", str(bare_port)]
    bare, bare_conn = start(bare_cmd, bare_port)
    r = ragfind.Retriever.load(folder)
    names = ["in process, after the gap", "in process, back to back"]
    names += ["served: HTTP round trip", "served: server timings.total", "bare HTTP server"]
    out: dict = {name: [] for name in names}
    try:
        for q in queries[:10]:  # warm-up
            r.search(q + " warm", k=10, use_cache=False)
            post(conn, q + " warm")
            post(bare_conn, q)
        for rnd in range(n_rounds):
            got: dict = {name: [] for name in names}
            for q in queries:
                time.sleep(gap_s)
                t = time.perf_counter()
                r.search(f"{q} r{rnd} i", k=10, use_cache=False)
                got["in process, after the gap"].append(time.perf_counter() - t)
                t = time.perf_counter()
                r.search(f"{q} r{rnd} j", k=10, use_cache=False)
                got["in process, back to back"].append(time.perf_counter() - t)
                time.sleep(gap_s)
                t = time.perf_counter()
                answer = json.loads(post(conn, f"{q} r{rnd} s"))
                got["served: HTTP round trip"].append(time.perf_counter() - t)
                got["served: server timings.total"].append(answer["timings"]["total"] / 1e3)  # in ms
                time.sleep(gap_s)
                t = time.perf_counter()
                post(bare_conn, q)
                got["bare HTTP server"].append(time.perf_counter() - t)
            for name in names:
                out[name].append(got[name])
    finally:
        r.close()
        for proc in (server, bare):
            proc.terminate()
            proc.wait(30)
    return out


def ms(xs: list) -> float:
    return statistics.median(xs) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gap-ms", type=float, default=10.0, help="idle time before each timed call")
    ap.add_argument("--serve-arg", action="append", default=[], help="passed to ragfind serve")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "hybrid"
        queries = build(folder)[: args.queries]
        times = rounds(folder, queries, args.rounds, args.serve_arg, args.gap_ms / 1e3)
    load = os.getloadavg()
    print(
        f"# Cranfield hybrid, {len(queries)} queries x {args.rounds} rounds, k=10, no cache, "
        f"{args.gap_ms:g} ms idle before each timed call"
    )
    print(f"serve args: {args.serve_arg or 'defaults'}; load average {load[0]:.2f} / {load[1]:.2f}\n")
    print("| path | p50 ms (median of rounds) | rounds |")
    print("|---|---:|---|")
    rows = dict(times)
    rows["served - in process (per query)"] = [
        [h - i for h, i in zip(http, inproc)]
        for http, inproc in zip(times["served: HTTP round trip"], times["in process, after the gap"])
    ]
    rows["served - its own timings.total (per query)"] = [
        [h - s for h, s in zip(http, total)]
        for http, total in zip(times["served: HTTP round trip"], times["served: server timings.total"])
    ]
    for name, per_round in rows.items():
        vals = [ms(x) for x in per_round]
        print(f"| {name} | {statistics.median(vals):.2f} | {', '.join(f'{v:.2f}' for v in vals)} |")


if __name__ == "__main__":
    main()
