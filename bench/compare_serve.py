"""``ragfind serve`` under load: ``POST /search`` against the same server's ``GET /health``.

Builds SciFact retrievers (``$RAGFIND_DATA`` or ``../shared/data``; the bundled demo corpus
without it): BM25 only, and hybrid (BM25 + all-MiniLM-L6-v2 with the precomputed corpus vectors;
skipped without them). For each, it times in-process ``Retriever.search`` in a process of its
own, starts ``ragfind serve --read-only`` and drives it with wrk (``apt-get install wrk``: a C
client, so the client's cost is not charged to the server) over keep-alive loopback
connections, alternating ``/health`` and ``/search`` at each concurrency, for ``--rounds``
rounds. Every search carries a query text not sent before, so no cache ever answers. Reported:
medians over rounds of throughput, p50 and p99, and every non-200 answer or socket error.

Then the overload run: concurrency ``--overload-clients`` (default 128) against a server whose
queue is small (``--queue-depth``, ``--queue-wait-ms``), counting 200s, 503s (each must carry
Retry-After) and anything else, with wrk's timeout as the bound no request may pass.

    PYTHONPATH=python python bench/compare_serve.py [--duration 4] [--rounds 3] [--workers 1]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    return Path(os.environ.get("RAGFIND_DATA", ROOT.parent / "shared" / "data"))


def lines(path: Path) -> list:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]


def corpus() -> tuple:
    data = data_dir() / "scifact"
    if (data / "corpus.jsonl").is_file():
        docs = [
            {"id": d["_id"], "title": d.get("title", ""), "text": d["text"]}
            for d in lines(data / "corpus.jsonl")
        ]
        return "SciFact", docs, [q["text"] for q in lines(data / "queries.jsonl")]
    base = ROOT / "python" / "ragfind" / "data"
    docs = [
        {"id": d["id"], "title": d.get("title", ""), "text": d["text"]}
        for d in lines(base / "demo_corpus.jsonl")
    ]
    return "demo", docs, [q["query"] for q in lines(base / "demo_queries.jsonl")]


def build(tmp: Path, docs: list, modes: list) -> dict:
    import numpy as np

    import ragfind

    out = {}
    if "bm25" in modes:
        r = ragfind.Retriever(encoder=None, chunk_size=None)
        r.add_documents(docs)
        r.save(tmp / "bm25")
        r.close()
        out["bm25"] = tmp / "bm25"
    emb = data_dir() / "scifact" / "embeddings" / "all-MiniLM-L6-v2"
    if "hybrid" in modes and (emb / "corpus.npy").is_file():
        ids = [x for x in (emb / "corpus_ids.txt").read_text().split("\n") if x]
        row = {d: n for n, d in enumerate(ids)}
        matrix = np.load(emb / "corpus.npy")
        r = ragfind.Retriever(encoder=ragfind.load_model("all-MiniLM-L6-v2", threads=1), chunk_size=None)
        r.add_documents(docs, embeddings=matrix[[row[d["id"]] for d in docs]])
        r.save(tmp / "hybrid")
        r.close()
        out["hybrid"] = tmp / "hybrid"
    return out


def inproc(folder: str, queries_file: str, highlight: bool = False) -> None:
    """Child mode: per-query seconds of Retriever.search (no cache; ``highlight``: reading every
    passage's highlights too), one JSON list on stdout."""
    import ragfind

    r = ragfind.Retriever.load(folder)
    queries = json.loads(Path(queries_file).read_text())
    for q in queries[:20]:
        r.search(q + " warm", k=10, use_cache=False)
    out = []
    for q in queries:
        t = time.perf_counter()
        res = r.search(q, k=10, use_cache=False)
        if highlight:
            [p.highlights for p in res]
        out.append(time.perf_counter() - t)
    print(json.dumps(out))


LUA_SEARCH = """
local n = 0
local salt = 0
local threads = {}
function setup(thread)
  salt = salt + 1
  thread:set("salt", salt)
  table.insert(threads, thread)
end
function init(args) ok = 0; shed = 0; shed_no_retry = 0; other = 0 end
request = function()
  n = n + 1
  local b = '{"query": "' .. qs[(n % #qs) + 1] .. ' rROUND ' .. salt .. 'x' .. n .. '", "k": 10EXTRA}'
  return wrk.format("POST", "/search", {["Content-Type"] = "application/json"}, b)
end
response = function(status, headers, body)
  if status == 200 then ok = ok + 1
  elseif status == 503 or status == 429 then
    shed = shed + 1
    if headers["Retry-After"] == nil and headers["retry-after"] == nil then
      shed_no_retry = shed_no_retry + 1
    end
  else other = other + 1 end
end
done = function(summary, latency, requests)
  local t = {ok = 0, shed = 0, shed_no_retry = 0, other = 0}
  for _, th in ipairs(threads) do
    for k, _ in pairs(t) do t[k] = t[k] + th:get(k) end
  end
  io.write(string.format("STATUS ok=%d shed=%d shed_no_retry=%d other=%d\\n",
    t.ok, t.shed, t.shed_no_retry, t.other))
end
"""


#: More fields of every /search body (--highlight sets ', "highlight": true').
EXTRA_FIELDS = ""


def lua_search(path: Path, queries: list, rnd: int, think_ms: float = 0) -> None:
    """A wrk script posting a new query each time; ``think_ms``: each connection's pause after
    each answer, which sets the offered load (clients / (pause + latency))."""
    qs = "qs = {\n" + "".join("  " + json.dumps(json.dumps(q)[1:-1]) + ",\n" for q in queries) + "}\n"
    think = f"function delay() return {think_ms:.3f} end\n" if think_ms else ""
    script = LUA_SEARCH.replace("ROUND", str(rnd)).replace("EXTRA", EXTRA_FIELDS.replace("'", "\\'"))
    path.write_text(qs + script + think)


UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 6e4}


def ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    return float(m.group(1)) * UNITS[m.group(2)]


#: --pin: (the server's CPUs, wrk's CPUs) for taskset, or None (the scheduler places both).
PIN: tuple | None = None


def pinned(cmd: list, side: int) -> list:
    """``cmd`` under ``taskset -c`` to its side's CPUs of :data:`PIN` (0 server, 1 wrk)."""
    return cmd if PIN is None else ["taskset", "-c", PIN[side], *cmd]


def wrk(url: str, clients: int, seconds: float, script: Path | None, timeout_s: float = 10) -> dict:
    cmd = [
        "wrk",
        "-t",
        "1" if clients < 8 else "2",
        "-c",
        str(clients),
        "-d",
        f"{max(1, round(seconds))}s",
        "--latency",
    ]
    cmd += ["--timeout", f"{max(1, round(timeout_s))}s"]
    if script is not None:
        cmd += ["-s", str(script)]
    out = subprocess.run(pinned([*cmd, url], 1), capture_output=True, text=True, check=True).stdout
    lat = dict(re.findall(r"^\s+(50|99)%\s+(\S+)\s*$", out, re.M))
    n = int(re.search(r"(\d+) requests in", out).group(1))
    errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    status = re.search(r"STATUS ok=(\d+) shed=(\d+) shed_no_retry=(\d+) other=(\d+)", out)
    maxlat = re.search(r"Latency\s+\S+\s+\S+\s+(\S+)", out)
    return {
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)),
        "p50": ms(lat["50"]),
        "p99": ms(lat["99"]),
        "max": ms(maxlat.group(1)),
        "requests": n,
        "socket_errors": sum(int(x) for x in errors.groups()) if errors else 0,
        "timeouts": int(errors.group(4)) if errors else 0,
        "non200": int(non2xx.group(1)) if non2xx else 0,
        "status": dict(zip(("ok", "shed", "shed_no_retry", "other"), map(int, status.groups())))
        if status
        else None,
    }


def paired_c1(url: str, folder: Path, queries: list, n: int) -> dict:
    """Concurrency 1, paired: each step times one ``GET /health``, one ``POST /search`` (a new
    query) and the same search in process, back to back, so that the machine's load drifts alike
    over the three. Keep-alive ``http.client`` connections; the client's own cost is in both
    HTTP figures and cancels in their difference."""
    import http.client

    import ragfind

    r = ragfind.Retriever.load(folder)
    port = int(url.rsplit(":", 1)[1])
    c = http.client.HTTPConnection("127.0.0.1", port)

    def get(method: str, path: str, body: bytes | None = None) -> None:
        c.request(method, path, body=body, headers={"Content-Type": "application/json"})
        resp = c.getresponse()
        resp.read()
        assert resp.status == 200, resp.status

    health, search, local = [], [], []
    for i in range(n + 20):
        q = f"{queries[i % len(queries)]} paired{i}"
        t0 = time.perf_counter()
        get("GET", "/health")
        t1 = time.perf_counter()
        get("POST", "/search", json.dumps({"query": q, "k": 10, **HIGHLIGHT}).encode())
        t2 = time.perf_counter()
        res = r.search(q + " local", k=10, use_cache=False)
        if HIGHLIGHT:
            [p.highlights for p in res]  # what the server computes when asked
        t3 = time.perf_counter()
        if i >= 20:  # warm-up
            health.append(t1 - t0)
            search.append(t2 - t1)
            local.append(t3 - t2)
    c.close()
    r.close()
    med = statistics.median
    return {
        "health_p50": med(health) * 1e3,
        "search_p50": med(search) * 1e3,
        "inproc_p50": med(local) * 1e3,
        "extra_p50": med(s - h - lo for s, h, lo in zip(search, health, local)) * 1e3,
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


HIGHLIGHT: dict = {}  # --highlight: {"highlight": True}

SERVER_PYTHON = ROOT / "python"  # --server-python: serve another tree (e.g. the code before a change)


def serve(folder: Path, *flags: str) -> tuple:
    import http.client

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(SERVER_PYTHON))
    cmd = [sys.executable, "-m", "ragfind", "serve", str(folder), "--port", str(port), "--read-only"]
    # As an operator benchmarks: no access log (uvicorn formats its line even below info).
    proc = subprocess.Popen(pinned([*cmd, "--log-level", "error", "--no-access-log", *flags], 0), env=env)
    for _ in range(1200):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                c.close()
                return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the server did not start")


def tree_cpu(pid: int, system_only: bool = False) -> float:
    """CPU seconds (user + system; ``system_only``: system) of ``pid`` and its descendants (the
    workers of --workers N) so far, from /proc; NaN where there is no /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total, todo = 0.0, [pid]
    try:
        while todo:
            p = todo.pop()
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[12]) + (0 if system_only else int(fields[11]))) / tick
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(x) for x in (task / "children").read_text().split()]
    except (OSError, ValueError):
        return math.nan
    return total


def wrk_cpu(pid: int, url: str, clients: int, seconds: float, script: Path | None) -> dict:
    """:func:`wrk`, plus ``cpu_us``: the server's CPU per answered request over the run."""
    c0, s0 = tree_cpu(pid), tree_cpu(pid, True)
    out = wrk(url, clients, seconds, script)
    n = max(1, out["requests"])
    out["cpu_us"] = (tree_cpu(pid) - c0) / n * 1e6
    out["sys_us"] = (tree_cpu(pid, True) - s0) / n * 1e6  # the kernel's part: sockets, epoll
    return out


def cpu_ab(folder: Path, queries: list, trees: list, rounds: int, seconds: float, tmp: Path) -> None:
    """The server's CPU per ``GET /health`` and per ``POST /search`` at 32 clients, serving each
    of ``trees`` (PYTHONPATHs) in turn, alternated over ``rounds``; medians printed."""
    global SERVER_PYTHON
    rows: dict = {t: [] for t in trees}
    for rnd in range(rounds):
        script = tmp / f"cpu{rnd}.lua"
        lua_search(script, queries, 50 + rnd)
        for t in trees:
            SERVER_PYTHON = Path(t).resolve()
            proc, url = serve(folder)
            try:
                wrk(url + "/health", 8, 1, None)
                wrk(url + "/search", 4, 1, script)
                h = wrk_cpu(proc.pid, url + "/health", 32, seconds, None)
                q = wrk_cpu(proc.pid, url + "/search", 32, seconds, script)
            finally:
                proc.terminate()
                proc.wait(60)
            rows[t].append((h, q))
            print(
                f"round {rnd} {t}: /health {h['rps']:.0f} req/s {h['cpu_us']:.1f} us CPU, /search "
                f"{q['rps']:.0f} req/s {q['cpu_us']:.1f} us CPU, errors {h['non200'] + q['non200']}",
                flush=True,
            )
    print(
        "\n| server tree | CPU per /health (system) | CPU per /search (system) | CPU ratio "
        "| req/s ratio | errors |"
    )
    print("|---|---|---|---|---|---|")
    for t, rs in rows.items():
        ch = statistics.median(h["cpu_us"] for h, _ in rs)
        cq = statistics.median(q["cpu_us"] for _, q in rs)
        sh = statistics.median(h["sys_us"] for h, _ in rs)
        sq = statistics.median(q["sys_us"] for _, q in rs)
        rr = statistics.median(q["rps"] / h["rps"] for h, q in rs)
        errs = sum(h["non200"] + h["socket_errors"] + q["non200"] + q["socket_errors"] for h, q in rs)
        print(
            f"| {t} | {ch:.1f} us ({sh:.1f}) | {cq:.1f} us ({sq:.1f}) | {ch / cq:.2f} | {rr:.2f}x | {errs} |"
        )


def median_of(runs: list, key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=int, default=4, help="seconds per wrk run (default 4)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds, medians reported (default 3)")
    ap.add_argument("--concurrency", default="1,8,32,128", help="client counts (default 1,8,32,128)")
    ap.add_argument("--modes", default="bm25,hybrid", help="retrievers (default bm25,hybrid)")
    ap.add_argument("--workers", type=int, default=1, help="ragfind serve --workers (default 1)")
    ap.add_argument(
        "--server-python", type=Path, default=None, help="the server's PYTHONPATH (default: this tree)"
    )
    ap.add_argument("--paired", type=int, default=1000, help="paired c=1 steps (default 1000)")
    ap.add_argument("--serve-flags", default="", help="more ragfind serve flags, e.g. '--inline-ms 0'")
    ap.add_argument(
        "--pin",
        default=None,
        metavar="SERVER:WRK",
        help="CPU lists for taskset, the server's and wrk's, e.g. 0:1 (a one-process server on a core "
        "of its own, the load generator on the other); default: the scheduler places both",
    )
    ap.add_argument("--overload-clients", type=int, default=128, help="0: no overload run")
    ap.add_argument("--queue-depth", type=int, default=32, help="the overload server's --queue-depth")
    ap.add_argument("--queue-wait-ms", type=float, default=250, help="the overload server's --queue-wait-ms")
    ap.add_argument(
        "--highlight",
        action="store_true",
        help='searches ask for highlights ("highlight": true); in process, every passage\'s are read',
    )
    ap.add_argument("--inproc", nargs="+", metavar="ARG", help=argparse.SUPPRESS)
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    ap.add_argument(
        "--cpu-ab",
        nargs="+",
        type=Path,
        metavar="PYTHONPATH",
        default=None,
        help="only measure the server's CPU per request at 32 clients (BM25), serving each of these "
        "source trees in turn, alternated over --rounds (e.g. a checkout of the code before a change "
        "and python)",
    )
    args = ap.parse_args()
    if args.inproc:
        inproc(args.inproc[0], args.inproc[1], args.inproc[2:] == ["highlight"])
        return
    if args.highlight:
        global EXTRA_FIELDS, HIGHLIGHT
        EXTRA_FIELDS, HIGHLIGHT = ', "highlight": true', {"highlight": True}
    if args.pin is not None:
        global PIN
        server_cpus, _, wrk_cpus = args.pin.partition(":")
        if not server_cpus or not wrk_cpus or shutil.which("taskset") is None:
            raise SystemExit("--pin needs SERVER:WRK CPU lists and taskset (util-linux)")
        PIN = (server_cpus, wrk_cpus)
    if args.server_python is not None:
        global SERVER_PYTHON
        SERVER_PYTHON = args.server_python.resolve()
    if shutil.which("wrk") is None:
        raise SystemExit("needs wrk (apt-get install wrk)")
    name, docs, queries = corpus()
    tmp = Path(tempfile.mkdtemp(prefix="ragfind-serve-bench-"))
    levels = [int(x) for x in args.concurrency.split(",")]
    results: dict = {}
    if args.cpu_ab:
        try:
            cpu_ab(build(tmp, docs, ["bm25"])["bm25"], queries, args.cpu_ab, args.rounds, 5, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    try:
        folders = build(tmp, docs, args.modes.split(","))
        env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
        for mode, folder in folders.items():
            workers = ["--workers", str(args.workers)] if args.workers != 1 else []
            proc, url = serve(folder, *workers, *args.serve_flags.split())
            runs: dict = {c: {"health": [], "search": []} for c in levels}
            local: list = []  # in-process p50 per round, measured between the HTTP runs
            try:
                wrk(url + "/health", 8, 1, None)  # warm-up
                paired = paired_c1(url, folder, queries, args.paired) if args.paired else None
                for rnd in range(args.rounds):
                    qfile = tmp / "queries.json"
                    qfile.write_text(json.dumps([f"{q} local{rnd}" for q in queries[:300]]))
                    child = [sys.executable, __file__, "--inproc", str(folder), str(qfile)]
                    child += ["highlight"] if args.highlight else []
                    out = subprocess.run(child, env=env, capture_output=True, text=True, check=True).stdout
                    local.append(statistics.median(json.loads(out)) * 1e3)
                    script = tmp / f"search{rnd}.lua"
                    lua_search(script, queries, rnd)
                    wrk(url + "/search", 4, 1, script)
                    for c in levels:
                        runs[c]["health"].append(wrk_cpu(proc.pid, url + "/health", c, args.duration, None))
                        runs[c]["search"].append(wrk_cpu(proc.pid, url + "/search", c, args.duration, script))
            finally:
                proc.terminate()
                proc.wait(60)
            overload = None
            if args.overload_clients:
                flags = ["--queue-depth", str(args.queue_depth), "--queue-wait-ms", str(args.queue_wait_ms)]
                proc, url = serve(folder, *workers, *args.serve_flags.split(), *flags)
                try:
                    # 2x saturation: each client pauses so that together they offer twice the
                    # best /search throughput measured above.
                    sat = max(median_of(r["search"], "rps") for r in runs.values())
                    think_ms = 1e3 * args.overload_clients / (2 * sat)
                    script = tmp / "overload.lua"
                    lua_search(script, queries, 99, think_ms)
                    wrk(url + "/search", 4, 1, script)
                    # The bound: the queue's wait plus a slow search; wrk counts as a timeout
                    # any request not answered within it.
                    bound = math.ceil(args.queue_wait_ms / 1e3 + 1.0)
                    # One more client polls /health all along: it must keep answering.
                    probe: list = []
                    poll = threading.Thread(
                        target=lambda out, u: out.append(wrk(u + "/health", 1, args.duration * 2, None)),
                        args=(probe, url),
                    )
                    poll.start()
                    overload = wrk(url + "/search", args.overload_clients, args.duration * 2, script, bound)
                    poll.join()
                    overload.update(
                        bound_s=bound, saturation_rps=sat, think_ms=think_ms, health_during=probe[0]
                    )
                    health = wrk(url + "/health", 1, 1, None)
                    overload["health_p50_after"] = health["p50"]
                finally:
                    proc.terminate()
                    proc.wait(60)
            results[mode] = {
                "inproc_p50_ms": local,
                "paired_c1": paired,
                "runs": runs,
                "overload": overload,
            }
            report(name, len(docs), mode, results[mode], args)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


def report(corpus_name: str, n_docs: int, mode: str, res: dict, args) -> None:
    inproc_ms = statistics.median(res["inproc_p50_ms"])
    print(
        f"\n## {corpus_name} ({n_docs} docs), {mode}, --workers {args.workers} {args.serve_flags}"
        f"{' --highlight' if args.highlight else ''}, "
        f"medians of {args.rounds} rounds\n"
    )
    print(f"in-process Retriever.search p50: {inproc_ms:.3f} ms\n")
    print(
        "| clients | /health req/s | /search req/s | ratio | /health p50 | /health p99 "
        "| /search p50 | /search p99 | CPU per /health | CPU per /search | 503 | errors |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    runs = res["runs"]
    for c, r in runs.items():
        h, s = r["health"], r["search"]
        # 503: shed by the queue (all rounds); errors: any other non-200 or socket error.
        shed = sum(x["status"]["shed"] if x["status"] else 0 for x in s)
        errs = sum(x["socket_errors"] + x["non200"] for x in h + s) - shed
        ratio = median_of(s, "rps") / median_of(h, "rps")
        print(
            f"| {c} | {median_of(h, 'rps'):.0f} | {median_of(s, 'rps'):.0f} | {ratio:.2f}x | "
            f"{median_of(h, 'p50'):.3f} ms | {median_of(h, 'p99'):.2f} ms | {median_of(s, 'p50'):.3f} ms | "
            f"{median_of(s, 'p99'):.2f} ms | {median_of(h, 'cpu_us'):.0f} us | "
            f"{median_of(s, 'cpu_us'):.0f} us | {shed} | {errs} |"
        )
    if 1 in runs:
        h1, s1 = median_of(runs[1]["health"], "p50"), median_of(runs[1]["search"], "p50")
        # Per round: what HTTP added to the search beyond /health's round trip.
        extra = [
            s["p50"] - h["p50"] - loc
            for s, h, loc in zip(runs[1]["search"], runs[1]["health"], res["inproc_p50_ms"])
        ]
        print(
            f"\nc=1: /search p50 {s1:.3f} ms vs /health p50 + in-process p50 + 0.3 ms = "
            f"{h1 + inproc_ms + 0.3:.3f} ms; per round, /search - /health - in-process = "
            f"{', '.join(f'{x:+.3f}' for x in extra)} ms (target <= +0.3)"
        )
        if 32 in runs:
            s32 = runs[32]["search"]
            ratio = median_of(s32, "rps") / median_of(runs[32]["health"], "rps")
            p99 = median_of(s32, "p99")
            print(
                f"c=32: throughput {ratio:.2f}x /health (target >= 0.5x), p99 {p99:.1f} ms = "
                f"{p99 / s1:.1f}x the c=1 p50 (target <= 20x), errors "
                f"{sum(x['socket_errors'] + x['non200'] for x in s32)}"
            )
            # The floor of that p99: /health's own at 32 clients, a request that searches nothing.
            h99 = median_of(runs[32]["health"], "p99")
            print(f"c=32: /health's own p99 {h99:.1f} ms = {h99 / s1:.1f}x the /search c=1 p50 (its floor)")
    pc = res["paired_c1"]
    if pc:
        print(
            f"c=1 paired ({args.paired} steps): /health p50 {pc['health_p50']:.3f} ms, /search p50 "
            f"{pc['search_p50']:.3f} ms, in-process p50 {pc['inproc_p50']:.3f} ms; median of "
            f"(/search - /health - in-process) = {pc['extra_p50']:+.3f} ms (target <= +0.3)"
        )
    o = res["overload"]
    if o:
        st = o["status"]
        print(
            f"\noverload: {args.overload_clients} clients offering 2x the saturation "
            f"of {o['saturation_rps']:.0f} "
            f"req/s (each pausing {o['think_ms']:.0f} ms), --queue-depth {args.queue_depth} --queue-wait-ms "
            f"{args.queue_wait_ms:g}: {o['requests']} requests in {args.duration * 2:g} s, "
            f"{st['ok']} answered, "
            f"{st['shed']} shed with 503 ({st['shed_no_retry']} without Retry-After), {st['other']} other, "
            f"{o['timeouts']} past the {o['bound_s']:g} s bound, {o['socket_errors']} socket errors; "
            f"p50 {o['p50']:.1f} ms, p99 {o['p99']:.1f} ms, max {o['max']:.1f} ms; "
            f"/health meanwhile (1 client): {o['health_during']['requests']} answers, p50 "
            f"{o['health_during']['p50']:.3f} ms, p99 {o['health_during']['p99']:.2f} ms, "
            f"{o['health_during']['non200'] + o['health_during']['socket_errors']} errors; "
            f"/health p50 right after: {o['health_p50_after']:.3f} ms"
        )


if __name__ == "__main__":
    main()
