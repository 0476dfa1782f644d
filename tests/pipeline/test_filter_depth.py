"""A filter nested deeper than MAX_FILTER_DEPTH levels is a ValueError naming its depth (not a
RecursionError), in the Retriever (cached or not) and in ``ragfind search --filter``."""

from __future__ import annotations

import pytest

import ragfind
from ragfind.cli import main
from ragfind.pipeline.filters import MAX_FILTER_DEPTH, check_filters


def nested(levels: int) -> dict:
    f: dict = {"lang": "en"}
    for _ in range(levels - 1):
        f = {"$and": [f]}
    return f


@pytest.fixture(scope="module")
def retriever():
    r = ragfind.Retriever(encoder=None, chunk_size=None, contextualize=False, show_progress=False)
    r.add_documents([{"id": str(i), "text": f"cat {i}", "metadata": {"lang": "en"}} for i in range(4)])
    return r


def test_the_bound_is_32_levels(retriever):
    assert MAX_FILTER_DEPTH == 32
    assert len(retriever.search("cat", filters=nested(32))) == 4
    for levels in (33, 300, 5000):
        for use_cache in (True, False):
            with pytest.raises(ValueError, match=r"^filters are nested 33 levels deep; at most 32 "):
                retriever.search("cat", filters=nested(levels), use_cache=use_cache)


def test_every_kind_of_nesting_counts():
    deep_not: dict = {"lang": "en"}
    for _ in range(40):
        deep_not = {"$not": deep_not}
    field_not: dict = {"$eq": "en"}
    for _ in range(40):
        field_not = {"$not": field_not}
    lists: list = ["en"]
    for _ in range(40):
        lists = [lists]
    for f in (deep_not, {"lang": field_not}, {"lang": {"$in": lists}}):
        with pytest.raises(ValueError, match="nested 33 levels deep"):
            check_filters(f)
    check_filters({"$or": [{"a": {"$in": [1, 2]}}, {"b": {"$not": {"$gt": 3}}}]})


def test_the_cli_refuses_it_in_one_line(tmp_path, retriever, capsys):
    folder = tmp_path / "r"
    retriever.save(folder)
    value = "[" * 60 + '"en"' + "]" * 60
    with pytest.raises(SystemExit) as exc:
        main(["search", str(folder), "cat", "--filter", f"lang={value}"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "filters are nested 33 levels deep" in err, err
    assert main(["search", str(folder), "cat", "--filter", "lang=en"]) == 0  # a flat one still works
