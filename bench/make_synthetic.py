"""Writes the synthetic BM25 benchmark corpus: N documents over a Zipfian vocabulary.

    python bench/make_synthetic.py                      # 1,000,000 docs -> bench/data/synthetic_1m/
    python bench/make_synthetic.py --docs 20000 --out bench/data/synthetic_20k

Everything is drawn from numpy's PCG64 with a fixed seed, so the same arguments always give
byte-identical files. Output folder:

    docs.txt      one document per line (lower-case pseudo-words separated by spaces)
    queries.txt   one query per line (2-5 words)
    meta.json     the parameters, token counts and SHA-256 of both files

Vocabulary: ``--vocab`` pronounceable pseudo-words (consonant-vowel syllables, >= 4 letters,
so every tokenizer keeps them and a stemmer leaves most of them alone). Word ranks follow a Zipf
law p(r) ~ 1 / (r + q)^s (Zipf-Mandelbrot, s=1.07, q=2.7, the shape of English text).
Document lengths are log-normal (median ~30 tokens, mean ~35: passage-sized). Query words are
drawn from the same law restricted to ranks >= 100, so queries mix mid-frequency and rare
terms the way real queries do rather than repeating the commonest words.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path

import numpy as np

CONSONANTS = list("bcdfghjklmnprstvz")
VOWELS = list("aeiou")


def make_vocabulary(size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` distinct pseudo-words of 2-4 consonant-vowel syllables, in random order."""
    syllables = [c + v for c in CONSONANTS for v in VOWELS]  # 85
    words: set[str] = set()
    out: list[str] = []
    while len(out) < size:
        n = size - len(out)
        lengths = rng.choice([2, 3, 4], size=n, p=[0.25, 0.5, 0.25])
        picks = rng.integers(0, len(syllables), size=(n, 4))
        for length, row in zip(lengths.tolist(), picks.tolist()):
            w = "".join(syllables[i] for i in row[:length])
            if w not in words:
                words.add(w)
                out.append(w)
    return np.array(out[:size], dtype=object)


def zipf_cdf(size: int, s: float, q: float) -> np.ndarray:
    weights = 1.0 / np.power(np.arange(1, size + 1, dtype=np.float64) + q, s)
    cdf = np.cumsum(weights)
    return cdf / cdf[-1]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, default=1_000_000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--vocab", type=int, default=300_000)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "data" / "synthetic_1m")
    args = p.parse_args(argv)

    start = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    vocab = make_vocabulary(args.vocab, rng)
    cdf = zipf_cdf(args.vocab, s=1.07, q=2.7)
    lengths = np.maximum(4, rng.lognormal(mean=np.log(30), sigma=0.55, size=args.docs)).astype(np.int64)
    args.out.mkdir(parents=True, exist_ok=True)
    docs_path = args.out / "docs.txt"
    chunk = 50_000
    with open(docs_path, "w", encoding="ascii") as f:
        for lo in range(0, args.docs, chunk):
            lens = lengths[lo : lo + chunk]
            ranks = np.searchsorted(cdf, rng.random(int(lens.sum())), side="right")
            words = vocab[np.minimum(ranks, args.vocab - 1)]
            bounds = np.concatenate([[0], np.cumsum(lens)])
            f.write("".join(" ".join(words[a:b]) + "\n" for a, b in zip(bounds[:-1], bounds[1:])))

    # queries: 2-5 words from ranks >= 100 of the same law
    tail = cdf[100:] - cdf[99]
    tail /= tail[-1]
    queries_path = args.out / "queries.txt"
    with open(queries_path, "w", encoding="ascii") as f:
        for n in rng.integers(2, 6, size=args.queries).tolist():
            ranks = 100 + np.searchsorted(tail, rng.random(n), side="right")
            f.write(" ".join(vocab[np.minimum(ranks, args.vocab - 1)]) + "\n")

    meta = {
        "docs": args.docs,
        "queries": args.queries,
        "vocab": args.vocab,
        "seed": args.seed,
        "zipf": {"s": 1.07, "q": 2.7},
        "doc_length": {"lognormal_median": 30, "sigma": 0.55, "min": 4},
        "tokens": int(lengths.sum()),
        "mean_doc_length": float(lengths.mean()),
        "docs_sha256": sha256(docs_path),
        "queries_sha256": sha256(queries_path),
    }
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(
        f"wrote {args.docs:,} docs ({meta['tokens']:,} tokens) and {args.queries} queries to {args.out} "
        f"in {time.perf_counter() - start:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
