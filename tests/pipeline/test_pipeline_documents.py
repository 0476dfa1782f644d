"""The one document check (ragfind.pipeline.documents) at every door: what a write may hold,
the errors that name the document and the field, and nothing written when a batch is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

import ragfind
from ragfind.pipeline.documents import (
    MAX_METADATA_DEPTH,
    DocumentError,
    DocumentTypeError,
    DocumentValueError,
    check_documents,
)
from ragfind.pipeline.retriever import Retriever


def bm25_only():
    return Retriever(encoder=None, chunk_size=None, contextualize=False)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, np.float32("nan")])
def test_nan_and_infinity_are_refused_and_the_folder_stays_loadable(tmp_path, value):
    r = bm25_only()
    r.add_documents([{"id": "ok", "text": "kept", "metadata": {"s": 1.5}}])
    with pytest.raises(DocumentValueError, match=r"documents\[1\]\.metadata\.s = .*finite") as err:
        r.add_documents([{"id": "b", "text": "fine"}, {"id": "a", "text": "x", "metadata": {"s": value}}])
    assert err.value.field == "documents[1].metadata.s"
    assert len(r) == 1 and r.search("fine", k=5).doc_ids == []
    r.save(tmp_path / "kb")
    assert len(Retriever.load(tmp_path / "kb")) == 1


def test_nested_nan_and_huge_numbers_are_refused():
    with pytest.raises(ValueError, match=r"metadata\.s\.deep\[1\] = nan"):
        check_documents([{"id": "a", "text": "x", "metadata": {"s": {"deep": [1, math.nan]}}}])
    with pytest.raises(ValueError, match="must fit a float64"):
        check_documents([{"id": "a", "text": "x", "metadata": {"s": 10**400}}])


def test_a_field_keeps_the_kind_of_its_first_value():
    r = bm25_only()
    r.add_documents([{"id": "a", "text": "one", "metadata": {"year": 2020, "tag": None}}])
    with pytest.raises(
        DocumentTypeError, match=r"field 'year' holds number values .*'b' gives it '2021', a str"
    ):
        r.add_documents([{"id": "b", "text": "two", "metadata": {"year": "2021"}}])
    # ints and floats are both numbers; null fits every field; a null-only field takes any kind
    r.add_documents([{"id": "c", "text": "three", "metadata": {"year": 2021.5, "tag": "x"}}])
    r.add_documents([{"id": "d", "text": "four", "metadata": {"year": None}}])
    with pytest.raises(TypeError, match="but field 'year' holds number values"):
        r.search("one", filters={"year": "2020"})
    assert set(r.search("one three four", k=5, filters={"year": {"$gte": 2020}}).doc_ids) == {"a", "c"}


def test_kinds_within_one_batch_and_of_documents_without_chunks():
    r = bm25_only()
    with pytest.raises(DocumentTypeError, match=r"first written by documents\[0\]"):
        r.add_documents(
            [
                {"id": "a", "text": "x", "metadata": {"f": True}},
                {"id": "b", "text": "y", "metadata": {"f": 1}},
            ]
        )
    assert len(r) == 0
    r.add_documents([{"id": "empty", "text": "", "metadata": {"f": True}}])  # no chunk, still a kind
    with pytest.raises(DocumentTypeError, match="holds bool values"):
        r.add_documents([{"id": "b", "text": "y", "metadata": {"f": 1}}])


def test_kinds_survive_save_and_load(tmp_path):
    r = bm25_only()
    r.add_documents([{"id": "empty", "text": " ", "metadata": {"f": "s"}}])
    r.save(tmp_path / "kb")
    back = Retriever.load(tmp_path / "kb")
    with pytest.raises(DocumentTypeError, match="holds str values"):
        back.add_documents([{"id": "b", "text": "y", "metadata": {"f": 1}}])


@pytest.mark.parametrize(
    "doc_id, error, match",
    [
        (None, DocumentTypeError, "is None, a NoneType"),
        (4.5, DocumentTypeError, "is 4.5, a float"),
        (True, DocumentTypeError, "is True, a bool"),
        (b"x", DocumentTypeError, "a bytes"),
        ("", DocumentValueError, "is empty"),
        ("\ud800", DocumentValueError, "lone surrogate"),
    ],
)
def test_ids_are_str_or_int_and_never_rewritten(doc_id, error, match):
    r = bm25_only()
    with pytest.raises(error, match=match):
        r.add_documents([{"id": doc_id, "text": "x"}])
    assert len(r) == 0


def test_int_ids_are_stored_as_their_decimal_string():
    r = bm25_only()
    r.add_documents([{"id": 7, "text": "seven"}, {"id": np.int64(8), "text": "eight"}])
    assert r.get_document(7)["id"] == "7" and r.get_document("8")["id"] == "8"


@pytest.mark.parametrize(
    "metadata, error, match",
    [
        ({"s": {1, 2}}, DocumentTypeError, "is a set"),
        ({"s": object()}, DocumentTypeError, "expected a JSON value"),
        ({1: "x"}, DocumentTypeError, "metadata keys must be str"),
        ({"s": "\udcff"}, DocumentValueError, "lone surrogate"),
        ([1], DocumentTypeError, r"\['metadata'\] is a list"),
    ],
)
def test_metadata_is_what_json_holds(metadata, error, match):
    with pytest.raises(error, match=match):
        check_documents([{"id": "a", "text": "x", "metadata": metadata}])


def test_nesting_is_bounded():
    deep: object = 1
    for _ in range(MAX_METADATA_DEPTH - 1):
        deep = [deep]
    check_documents([{"id": "a", "text": "x", "metadata": {"s": deep}}])
    with pytest.raises(DocumentValueError, match=f"more than {MAX_METADATA_DEPTH} deep"):
        check_documents([{"id": "a", "text": "x", "metadata": {"s": [deep]}}])


def test_stored_as_json_reads_back():
    (doc,) = check_documents(
        [
            {
                "id": 3,
                "text": "x",
                "title": None,
                "metadata": {"n": np.int64(2), "f": np.float32(0.5), "t": (1, "a")},
            }
        ]
    )
    assert doc == {"id": "3", "text": "x", "metadata": {"n": 2, "f": 0.5, "t": [1, "a"]}}
    assert type(doc["metadata"]["n"]) is int


def test_errors_are_the_builtin_classes_and_name_the_part():
    with pytest.raises(TypeError) as err:
        check_documents([{"id": "a", "text": 3}])
    assert isinstance(err.value, DocumentError) and err.value.field == "documents[0].text"


def test_filter_values_must_be_finite_and_doc_id_is_str_from_the_start():
    r = bm25_only()
    with pytest.raises(TypeError, match="field 'doc_id' holds str"):
        r.search("x", filters={"doc_id": True})
    r.add_documents([{"id": "a", "text": "x", "metadata": {"s": 1}}])
    with pytest.raises(ValueError, match="expected a finite number"):
        r.search("x", filters={"s": {"$gt": math.nan}})


def test_the_service_refuses_with_400_and_names_the_field(tmp_path):
    from ragfind.serve.service import ApiError, Service

    r = bm25_only()
    r.add_documents([{"id": "a", "text": "x", "metadata": {"year": 2020}}])
    r.save(tmp_path / "kb")
    s = Service(Retriever.load(tmp_path / "kb"), tmp_path / "kb")
    try:
        with pytest.raises(ApiError) as err:
            s.add({"documents": [{"id": "b", "text": "y", "metadata": {"year": "2021"}}]})
        assert err.value.status == 400 and err.value.field == "documents[0].metadata.year"
        with pytest.raises(ApiError) as err:
            s.add({"documents": [{"id": "b", "text": "y", "metadata": {"s": {"v": math.inf}}}]})
        assert err.value.status == 400 and err.value.field == "documents[0].metadata.s.v"
        assert len(s.retriever) == 1
    finally:
        s.close()


def test_replay_keeps_a_logged_add_it_now_refuses(tmp_path):
    """A log written by an older ragfind (NaN accepted) neither stops the start nor is lost."""
    from ragfind.persist.wal import WriteLog
    from ragfind.serve.service import LOG_FILE, Service, refused_file

    r = bm25_only()
    r.add_documents([{"id": "a", "text": "x"}])
    r.save(tmp_path / "kb")
    log = WriteLog(tmp_path / "kb" / LOG_FILE)
    log.append({"op": "add", "documents": [{"id": "n", "text": "nan", "metadata": {"s": math.nan}}]})
    log.append({"op": "add", "documents": [{"id": "b", "text": "fine"}]})
    log.close()
    s = Service(Retriever.load(tmp_path / "kb"), tmp_path / "kb")
    try:
        assert sorted(d for d in ("a", "b", "n") if _has(s.retriever, d)) == ["a", "b"]
        assert '"id": "n"' in refused_file(tmp_path / "kb").read_text()
    finally:
        s.close()
    assert len(Retriever.load(tmp_path / "kb")) == 2


def _has(r, doc_id):
    try:
        r.get_document(doc_id)
    except KeyError:
        return False
    return True


def test_every_door_uses_the_one_check():
    """The router and the service call the same function (no copy of the rules)."""
    import ragfind.distributed.router as router
    import ragfind.serve.service as service

    assert router.check_documents is check_documents and service.check_documents is check_documents
    assert (
        ragfind.Retriever.check_documents.__doc__
        and "check_documents" in ragfind.Retriever.check_documents.__doc__
    )
