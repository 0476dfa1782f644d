"""Query embedding latency: one 10-word query, f32 MiniLM (all-MiniLM-L6-v2), 2 threads, against
its floor (the fastest ONNX Runtime configuration measured for the bare forward pass, plus the
tokenizer call).

Usage:
    PYTHONPATH=python python bench/compare_query_embedding.py [--rounds 15] [--per-round 30]

Every configuration runs ``--per-round`` queries per round, in turn, round after round (the order
turning each round), so load drifts on a shared machine hit them alike; each round's median is
divided by the same round's floor, and the table gives the median of those ratios and their range.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import ragfind
from ragfind.models.session import make_session

QUERY = "does vitamin d improve bone density in adults with osteoporosis"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--per-round", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    enc = ragfind.load_model("all-MiniLM-L6-v2", threads=args.threads)
    tok = enc.tokenizer
    e = tok.encode(QUERY)
    ids = np.asarray([e.ids], np.int64)
    all_feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": np.zeros_like(ids)}
    feeds = {n: all_feeds[n] for n in enc._input_names}
    out = enc.config.output
    model = enc.path / "model.onnx"

    def bound(session):
        b = session.io_binding()
        for n, v in feeds.items():
            b.bind_cpu_input(n, v)
        b.bind_output(out)
        return lambda: session.run_with_iobinding(b)

    # The encoder's session does not spin (the default, allow_spinning=False); the others are
    # the alternatives the floor is taken over.
    spin = make_session(model, args.threads, "all", None, True)
    one = make_session(model, 1, "all", None, False)
    forward = {
        f"session.run, {args.threads} threads (the encoder's session)": lambda: enc.session.run([out], feeds),
        f"session.run, {args.threads} threads, IO binding": bound(enc.session),
        f"session.run, {args.threads} threads, spinning (ONNX Runtime's default)": lambda: spin.run(
            [out], feeds
        ),
        "session.run, 1 thread": lambda: one.run([out], feeds),
    }
    cases = {
        "tokenizer.encode": lambda: tok.encode(QUERY),
        "Encoder.encode_query (tokenize, run, pool, normalize)": lambda: enc.encode_query(QUERY),
        **forward,
    }
    for f in cases.values():
        for _ in range(5):
            f()
    per: dict = {name: [] for name in cases}
    names = list(cases)
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            f = cases[name]
            ts = []
            for _ in range(args.per_round):
                t = time.perf_counter()
                f()
                ts.append(time.perf_counter() - t)
            per[name].append(statistics.median(ts) * 1e3)
    # The floor of each round: the tokenizer call plus the fastest bare forward pass that round.
    floor = [per["tokenizer.encode"][r] + min(per[n][r] for n in forward) for r in range(args.rounds)]
    print(
        f"one {len(e.ids)}-token query ({len(QUERY.split())} words), {args.rounds} rounds x {args.per_round}"
    )
    print()
    print("| path | median of round medians (ms) | / floor (median, range) |")
    print("|---|---:|---:|")
    for name in names + ["floor"]:
        vals = floor if name == "floor" else per[name]
        ratios = [v / f for v, f in zip(vals, floor)]
        print(
            f"| {name} | {statistics.median(vals):.3f} | "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}) |"
        )


if __name__ == "__main__":
    main()
