"""pytest-benchmark suite for the ONNX encoders (ragfind only; peers are in compare_models.py).

    PYTHONPATH=python python -m pytest bench/bench_models.py --benchmark-only -q

Uses the default models (built offline into $RAGFIND_HOME on first use), 2 threads, and the
first 64 SciFact documents when ../shared/data is present (synthetic text otherwise).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import ragfind

THREADS = int(os.environ.get("RAGFIND_BENCH_THREADS", "2"))
DATA = Path(os.environ.get("RAGFIND_DATA", Path(__file__).resolve().parent.parent.parent / "shared" / "data"))


def _docs(n=64):
    corpus = DATA / "scifact" / "corpus.jsonl"
    if not corpus.exists():
        return [
            f"document {i} about protein folding, gene expression and cell signalling " * 20 for i in range(n)
        ]
    out = []
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            out.append(d["title"] + " " + d["text"])
            if len(out) == n:
                break
    return out


@pytest.fixture(scope="module", params=["all-MiniLM-L6-v2", "all-MiniLM-L6-v2-int8"])
def encoder(request):
    return ragfind.load_model(request.param, threads=THREADS)


def test_encode_64_docs(benchmark, encoder):
    docs = _docs()
    benchmark.extra_info["docs"] = len(docs)
    benchmark.pedantic(encoder.encode, args=(docs,), kwargs={"batch_size": 32}, rounds=3, warmup_rounds=1)


def test_encode_query(benchmark, encoder):
    benchmark(encoder.encode_query, "does vitamin D deficiency increase the risk of multiple sclerosis")


@pytest.fixture(scope="module", params=["tinybert-l2", "minilm-l6"])
def cross_encoder(request, tmp_path_factory):
    pytest.importorskip("torch")
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "models"))
    from _models_hf import MINILM_L6, TINYBERT_L2, save_random_bert

    shape = {"tinybert-l2": TINYBERT_L2, "minilm-l6": MINILM_L6}[request.param]
    hf = save_random_bert(tmp_path_factory.mktemp("hf"), shape)
    dst = tmp_path_factory.mktemp("rf") / "model"
    ragfind.export(hf, dst, role="cross-encoder")
    return ragfind.CrossEncoder(dst, threads=THREADS)


def test_rerank_100_passages(benchmark, cross_encoder):
    passages = [d[:1000] for d in _docs(100)]
    benchmark.pedantic(
        cross_encoder.rank, args=("what causes muscle cramps", passages), rounds=3, warmup_rounds=1
    )
