"""CrossEncoder parity with transformers' BertForSequenceClassification and sentence-transformers."""

from __future__ import annotations

import numpy as np
import pytest

import ragfind

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from _models_hf import MINILM_L6, TINYBERT_L2, save_random_bert  # noqa: E402

QUERY = "what causes muscle cramps after exercise"
PASSAGES = [
    "Muscle cramps are sudden involuntary contractions, often linked to dehydration and electrolyte loss.",
    "The Eiffel Tower is in Paris.",
    "Exercise-associated muscle cramping is thought to result from altered neuromuscular control " * 8,
    "cramps",
    "Regular stretching may reduce the frequency of nocturnal leg cramps in older adults.",
]


@pytest.fixture(
    scope="module", params=[("minilm-l6", MINILM_L6), ("tinybert-l2", TINYBERT_L2)], ids=lambda p: p[0]
)
def exported(request, tmp_path_factory):
    name, shape = request.param
    hf = save_random_bert(tmp_path_factory.mktemp(f"hf-{name}"), shape, num_labels=1)
    dst = tmp_path_factory.mktemp(f"rf-{name}") / "model"
    ragfind.export(hf, dst, role="cross-encoder")
    return hf, dst


def _reference_logits(hf, pairs, max_length=512):
    tok = transformers.AutoTokenizer.from_pretrained(str(hf))
    model = transformers.BertForSequenceClassification.from_pretrained(str(hf)).eval()
    feats = tok(
        [p[0] for p in pairs],
        [p[1] for p in pairs],
        padding=True,
        truncation=True,
        max_length=max_length,
        return_tensors="pt",
    )
    with torch.no_grad():
        return model(**feats).logits.numpy()


def test_logits_equal_transformers(exported):
    hf, dst = exported
    ce = ragfind.CrossEncoder(dst, threads=2)
    pairs = [(QUERY, p) for p in PASSAGES]
    ref = _reference_logits(hf, pairs)[:, 0]
    got = ce.predict(pairs, batch_size=2, activation="raw")
    assert np.std(ref) > 0.05  # the random head is not degenerate
    np.testing.assert_allclose(got, ref, atol=1e-4, rtol=0)
    np.testing.assert_allclose(ce.predict(pairs), 1 / (1 + np.exp(-ref)), atol=1e-5)  # default: sigmoid
    one_by_one = ce.predict(pairs, max_batch_tokens=1, activation="raw")
    np.testing.assert_allclose(one_by_one, ref, atol=1e-4, rtol=0)


def test_matches_sentence_transformers_cross_encoder(exported):
    st = pytest.importorskip("sentence_transformers")
    hf, dst = exported
    ref_model = st.CrossEncoder(str(hf), device="cpu")
    pairs = [(QUERY, p) for p in PASSAGES]
    ref = ref_model.predict(pairs)
    ce = ragfind.CrossEncoder(dst)
    np.testing.assert_allclose(ce.predict(pairs), ref, atol=1e-5)
    ranked = ce.rank(QUERY, PASSAGES, top_k=3, return_documents=True)
    ref_ranked = ref_model.rank(QUERY, PASSAGES, top_k=3)
    assert [r["corpus_id"] for r in ranked] == [r["corpus_id"] for r in ref_ranked]
    assert ranked[0]["text"] == PASSAGES[ranked[0]["corpus_id"]]
    assert [r["score"] for r in ranked] == sorted((r["score"] for r in ranked), reverse=True)


def test_pair_truncation_longest_first_matches_transformers(exported, tmp_path):
    hf, dst = exported
    ce = ragfind.CrossEncoder(dst)
    long_passage = "neuromuscular fatigue and electrolyte balance " * 200
    pairs = [(QUERY, long_passage), (QUERY * 30, long_passage)]
    assert ce.max_length == 512
    ref = _reference_logits(hf, pairs)[:, 0]
    np.testing.assert_allclose(ce.predict(pairs, activation="raw"), ref, atol=1e-4)


def test_two_label_head_softmax(tmp_path):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, num_labels=2, seed=3)
    ragfind.export(hf, tmp_path / "rf", role="cross-encoder")
    ce = ragfind.CrossEncoder(tmp_path / "rf")
    assert ce.num_labels == 2 and ce.activation == "softmax"
    pairs = [(QUERY, p) for p in PASSAGES]
    ref = _reference_logits(hf, pairs)
    np.testing.assert_allclose(ce.predict(pairs, activation="raw"), ref, atol=1e-4)
    probs = ce.predict(pairs)
    e = np.exp(ref - ref.max(1, keepdims=True))
    np.testing.assert_allclose(probs, e / e.sum(1, keepdims=True), atol=1e-5)
    ranked = ce.rank(QUERY, PASSAGES)
    assert ranked[0]["corpus_id"] == int(np.argmax(probs[:, 1]))


def test_int8_cross_encoder_tracks_float(exported, tmp_path):
    hf, dst = exported
    ragfind.export(hf, tmp_path / "int8", role="cross-encoder", quantize="int8")
    pairs = [(QUERY, p) for p in PASSAGES]
    f32 = ragfind.CrossEncoder(dst).predict(pairs, activation="raw")
    q8 = ragfind.CrossEncoder(tmp_path / "int8").predict(pairs, activation="raw")
    assert np.corrcoef(f32, q8)[0, 1] > 0.95


def test_activation_identity_from_config(tmp_path):
    hf = save_random_bert(tmp_path / "hf", TINYBERT_L2, num_labels=1, seed=5)
    ragfind.export(hf, tmp_path / "rf", role="cross-encoder", activation="identity")
    ce = ragfind.CrossEncoder(tmp_path / "rf")
    pairs = [(QUERY, PASSAGES[0])]
    np.testing.assert_allclose(ce.predict(pairs), ce.predict(pairs, activation="raw"))
    assert isinstance(ce.predict((QUERY, PASSAGES[0])), np.floating)


@pytest.mark.parametrize(
    "shape, fused",
    [((1, 64, 4, 128), True), ((1, 64, 4, 128), False), ((3, 96, 3, 192), False)],
    ids=["1-layer-fused", "1-layer-standard-ops", "3-layers-standard-ops"],
)
def test_cls_only_last_layer_matches_transformers(tmp_path, shape, fused):
    """The last layer runs for [CLS] alone (K and V folded into the query): a 1-layer model is
    nothing but that layer, and the standard-operator flavour builds it the same way."""
    hf = save_random_bert(tmp_path / "hf", shape, num_labels=1, seed=11)
    ragfind.export(hf, tmp_path / "rf", role="cross-encoder", fused=fused)
    ce = ragfind.CrossEncoder(tmp_path / "rf")
    pairs = [(QUERY, p) for p in PASSAGES] + [(QUERY * 3, PASSAGES[1] * 4)]
    ref = _reference_logits(hf, pairs)[:, 0]
    assert np.std(ref) > 0.01
    np.testing.assert_allclose(ce.predict(pairs, batch_size=3, activation="raw"), ref, atol=1e-4, rtol=0)
