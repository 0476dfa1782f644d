"""The passage columns a search fetches from equal the SQLite tables they mirror, after every
kind of write: inserts (in and out of id order), rollbacks, deletes, compactions, reopening."""

from __future__ import annotations

import random

import numpy as np
import pytest

import ragfind
from ragfind.pipeline import passage_columns
from ragfind.pipeline.passage_columns import PassageColumns
from ragfind.pipeline.store import DocumentStore


def _all_ids(store: DocumentStore) -> list:
    return store.chunk_ids().tolist()


def _check(store: DocumentStore, probe: list) -> None:
    """fetch (columns) equals fetch_sql (tables) on every stored id and on absent ones."""
    ids = _all_ids(store)
    assert store.columns.ids().tolist() == ids
    assert store.fetch(ids) == store.fetch_sql(ids)
    assert store.fetch(probe) == store.fetch_sql(probe)
    assert store.fetch([]) == {}


def _text(rng: random.Random) -> str:
    alphabet = "abc xyz é漢字\n\t🙂\x00'\""
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))


def _insert(store: DocumentStore, rng: random.Random, ids: list, n_doc: list) -> list:
    docs, chunks = [], []
    for cid in ids:
        if not docs or rng.random() < 0.6:
            n_doc[0] += 1
            md = "{}" if rng.random() < 0.5 else f'{{"source": "{_text(rng)!s}"}}'.replace("\\", "")
            docs.append((f"doc-{n_doc[0]}", _text(rng), _text(rng), '{"a": 1}' if md.count('"') != 4 else md))
        chunks.append(
            (cid, docs[-1][0], 0, rng.randrange(100), rng.randrange(100, 200), -1, _text(rng), _text(rng))
        )
    store.begin_insert(docs, chunks, set())
    return [d[0] for d in docs]


@pytest.mark.parametrize("seed", range(4))
def test_columns_equal_tables_through_random_writes(seed, monkeypatch):
    monkeypatch.setattr(passage_columns, "_COMPACT_MIN_DEAD", 8)  # compact often
    rng = random.Random(seed)
    store = DocumentStore()
    next_id, n_doc, docs = 0, [0], []
    for _ in range(60):
        op = rng.random()
        if op < 0.5 or not docs:
            n = rng.randrange(1, 12)
            if rng.random() < 0.3:
                # Out of order: ids below the largest (as a shard's policy gives), never live.
                live = set(_all_ids(store))
                ids = rng.sample([i for i in range(next_id + 50) if i not in live], n)
            else:
                ids = list(range(next_id, next_id + n))
            new_docs = _insert(store, rng, ids, n_doc)
            _check(store, ids + [-1, 10**12])
            if rng.random() < 0.25:
                store.rollback()
            else:
                store.commit()
                docs += new_docs
                next_id = max(next_id, max(ids) + 1)
        else:
            gone = rng.sample(docs, rng.randrange(1, min(len(docs), 6) + 1))
            store.remove(gone)
            docs = [d for d in docs if d not in gone]
        _check(store, [rng.randrange(-2, next_id + 5) for _ in range(10)])
    # Reopened from the tables alone (a folder saved before the columns existed).
    again = DocumentStore(store.db, next_id)
    ids = _all_ids(store)
    assert again.fetch(ids) == store.fetch_sql(ids)


def test_insert_checks_ids_and_changes_nothing():
    cols = PassageColumns()
    cols.append([("d", "t", "x", "{}")], [(5, "d", 0, 0, 1, -1, "a", "")])
    before = (cols.ids().tolist(), cols.rows([5]), cols.mark())
    with pytest.raises(ValueError, match="already stored"):
        cols.append([("e", "t", "x", "{}")], [(3, "e", 0, 0, 1, -1, "b", ""), (5, "e", 1, 0, 1, -1, "c", "")])
    with pytest.raises(ValueError, match="repeat"):
        cols.append([("e", "t", "x", "{}")], [(7, "e", 0, 0, 1, -1, "b", ""), (7, "e", 1, 0, 1, -1, "c", "")])
    assert (cols.ids().tolist(), cols.rows([5]), cols.mark()) == before


def test_view_follows_writes_that_stay_in_its_buffers():
    cols = PassageColumns()

    def add(i: int) -> None:
        cols.append([(f"d{i}", "t", "x", "{}")], [(i, f"d{i}", 0, 0, 1, -1, f"text {i}", "")])

    def fresh_rows(ids: list) -> list:
        other = PassageColumns()
        other._arena, other._chunks, other._docs = cols._arena, cols._chunks, cols._docs
        other._keys, other._slots = cols._keys, cols._slots
        return other.rows(ids)  # a view made now, from the same arrays

    for i in range(20):
        add(i)
    view = cols.view()
    kept = 0
    for i in range(20, 200):
        add(i)
        kept += cols._view is view
        view = cols.view()
        assert cols.rows([i, i - 1, 10**9]) == fresh_rows([i, i - 1, 10**9])
        assert [r[0] for r in cols.rows([i])] == [i]
    assert kept > 150  # most appends wrote into the room past the live rows: the view followed
    mark = cols.mark()
    add(500)
    cols.rollback(mark)  # a truncation: followed too
    assert cols._view is view and cols.rows([500, 199]) == fresh_rows([500, 199])
    cols.remove(np.asarray([199]))  # the last id: a truncation
    assert cols.rows([199, 198]) == fresh_rows([199, 198]) and len(cols.rows([199])) == 0
    cols.remove(np.asarray([3]))  # inside: new key arrays, so a new view
    assert cols.rows([3, 4]) == fresh_rows([3, 4]) and [r[0] for r in cols.rows([3, 4])] == [4]
    cols.append([("dx", "t", "x", "{}")], [(3, "dx", 0, 0, 1, -1, "back", "")])  # out of order
    assert [r[2] for r in cols.rows([3])] == ["back"]
    with pytest.raises(ValueError, match="n_keys"):
        cols.view().set_keys(len(cols._keys.buf) + 1)


def test_compaction_keeps_rows_and_frees_bytes():
    cols = PassageColumns()
    docs = [(f"d{i}", f"title {i}", "", "{}") for i in range(100)]
    chunks = [(i, f"d{i // 2 % 100}", 0, i, i + 1, -1, "text " * 50 + str(i), "ctx") for i in range(200)]
    cols.append(docs, chunks)
    keep = list(range(0, 200, 7))
    want = cols.rows(keep)
    cols.remove(np.asarray([i for i in range(200) if i not in keep]))
    cols.compact()
    assert cols.rows(range(200)) == want
    assert cols.mark()[0] < 200 * 255 // 4  # the arena shrank to the live strings


def test_retriever_writes_keep_columns_equal(tmp_path):
    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    docs = [
        {
            "id": f"d{i}",
            "title": f"T{i}",
            "text": f"alpha beta {i} gamma",
            "metadata": {"source": f"s{i}"} if i % 2 else {},
        }
        for i in range(30)
    ]
    r.add_documents(docs)
    r.delete_documents(["d3", "d4"])
    r.add_documents([{"id": "d3", "text": "alpha replaced"}])  # an update: delete then add
    with pytest.raises(ValueError):
        r.add_documents([{"id": "new", "text": "alpha"}, {"id": "d5", "text": "dup"}])
    ids = _all_ids(r.store)
    assert r.store.fetch(ids) == r.store.fetch_sql(ids)
    hit = r.search("alpha", k=50)
    assert sorted(p.id for p in hit) == ids
    r.save(tmp_path / "saved")
    loaded = ragfind.Retriever.load(tmp_path / "saved")
    assert loaded.store.fetch(ids) == r.store.fetch_sql(ids)
    assert [(p.id, p.text, p.source, p.score) for p in loaded.search("alpha", k=50)] == [
        (p.id, p.text, p.source, p.score) for p in hit
    ]


def _fields(p) -> tuple:
    return (
        p.id,
        p.doc_id,
        p.text,
        p.title,
        p.source,
        p.score,
        p.start,
        p.end,
        dict(p.metadata),
        p.context,
        dict(p.ranks),
        dict(p.scores),
        p.highlights,
    )


@pytest.mark.parametrize("chunk_size", [None, 16])
def test_native_passages_equal_the_rows_path(monkeypatch, chunk_size):
    """A one-list search builds its passages natively from the columns; the same search through
    the store rows (the path of several lists, and of runners without ``passages``) gives
    equal passages: metadata with and without source or url, contexts, several chunks per
    document (chunk_size=16), deleted chunks."""
    from ragfind.pipeline.runner import LocalStages

    words = ["alpha", "beta", "gamma", "delta", "omega", "kappa", "sigma"]
    docs = []
    for i in range(80):
        md = [{}, {"source": f"src-{i}"}, {"url": f"http://x/{i}"}, {"lang": "en", "n": i}][i % 4]
        text = " ".join(words[(i * j) % len(words)] for j in range(1, 30 + i % 20)) + " Ünïcode 漢字"
        docs.append({"id": f"d{i}", "title": f"Title {i}", "text": text, "metadata": md})
    r = ragfind.Retriever(encoder=None, cache_size=0, chunk_size=chunk_size)
    r.add_documents(docs)
    r.delete_documents([f"d{i}" for i in range(0, 80, 9)])
    queries = ["alpha", "beta gamma", "omega kappa sigma", "Ünïcode", "delta"]
    filters = [None, {"lang": "en"}, {"doc_id": "nowhere"}]

    def results() -> dict:
        return {
            (q, k, i): [_fields(p) for p in r.search(q, k=k, filters=f)]
            for q in queries
            for k in (1, 5, 40)
            for i, f in enumerate(filters)
        }

    ranked = results()  # search and passages in one runner step
    monkeypatch.delattr(LocalStages, "ranked_list")
    native = results()  # the first stage, then the passages of its list
    monkeypatch.delattr(LocalStages, "passages")
    slow = results()
    assert ranked == native == slow
    assert any(ranked[(q, 40, 1)] for q in queries) and not any(ranked[(q, 40, 2)] for q in queries)
    fast = ranked
    assert any(p[4] != p[1] for ps in fast.values() for p in ps)  # a source from metadata
    assert chunk_size is None or r.n_chunks > len(docs)


def test_saved_columns_load_mapped_and_old_folders_rebuild(tmp_path):
    import json

    from ragfind.pipeline.saved import COLUMNS_FILE, MANIFEST, RetrieverFolderError

    r = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    r.add_documents([{"id": f"d{i}", "title": "T", "text": f"alpha {i} beta"} for i in range(40)])
    r.delete_documents(["d39", "d5"])
    want = [_fields(p) for p in r.search("alpha beta", k=50)]
    r.save(tmp_path / "new")
    loaded = ragfind.Retriever.load(tmp_path / "new")
    assert isinstance(loaded.store.columns._arena.buf, np.memmap)
    assert [_fields(p) for p in loaded.search("alpha beta", k=50)] == want
    # Writes after a load copy the mapped arrays (deleting the last id first: a truncation).
    loaded.delete_documents(["d38"])
    loaded.add_documents([{"id": "new", "text": "alpha gamma"}])
    ids = _all_ids(loaded.store)
    assert loaded.store.fetch(ids) == loaded.store.fetch_sql(ids)

    # A folder saved before the columns existed: no file, no manifest entry; rebuilt.
    r.save(tmp_path / "old")
    (tmp_path / "old" / COLUMNS_FILE).unlink()
    manifest = json.loads((tmp_path / "old" / MANIFEST).read_text())
    del manifest["files"][COLUMNS_FILE]
    (tmp_path / "old" / MANIFEST).write_text(json.dumps(manifest))
    old = ragfind.Retriever.load(tmp_path / "old")
    assert [_fields(p) for p in old.search("alpha beta", k=50)] == want

    # Columns of another store (unverified load): refused, naming the columns.
    other = ragfind.Retriever(encoder=None, chunk_size=None, cache_size=0)
    other.add_documents([{"id": "x", "text": "alpha"}])
    other.store.columns.save(tmp_path / "new" / COLUMNS_FILE)
    manifest = json.loads((tmp_path / "new" / MANIFEST).read_text())
    manifest["files"][COLUMNS_FILE]["size"] = (tmp_path / "new" / COLUMNS_FILE).stat().st_size
    (tmp_path / "new" / MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(RetrieverFolderError, match="passage columns"):
        ragfind.Retriever.load(tmp_path / "new", verify=False)
    with pytest.raises(RetrieverFolderError):
        ragfind.Retriever.load(tmp_path / "new")  # the checksum of the manifest


def test_corrupt_columns_raise_instead_of_reading_outside(tmp_path):
    cols = PassageColumns()
    cols.append([("d", "t", "x", "{}")], [(1, "d", 0, 0, 1, -1, "abc", "")])
    cols.save(tmp_path / "c")
    loaded = PassageColumns.load(tmp_path / "c", mmap=False)
    assert loaded.rows([1]) == cols.rows([1])
    loaded._chunks.buf[0, 5] = 1 << 40  # the text span past the arena
    loaded._view = None
    with pytest.raises(ValueError, match="outside the arena"):
        loaded.rows([1])


@pytest.mark.parametrize("length", [0, 1, 7, 8, 63, 64, 65, 127, 128, 129, 200, 1500])
def test_texts_decode_with_a_non_ascii_character_anywhere(length):
    """Texts are copied as ASCII while checked 64 bytes at a time and decoded as UTF-8 from the
    first block holding another byte: every length around the block and word edges, with one
    non-ASCII character at each edge, reads back equal to the stored text."""
    base = "".join(chr(97 + i % 26) for i in range(length))
    places = sorted({p for p in (0, 7, 8, 63, 64, 65, 127, 128, length - 1) if 0 <= p < length})
    texts = [base] + [base[:p] + ch + base[p + 1 :] for p in places for ch in ("é", "漢", "🙂")]
    cols = PassageColumns()
    cols.append(
        [(f"d{i}", t, t, "{}") for i, t in enumerate(texts)],
        [(i + 1, f"d{i}", 0, 0, len(t), -1, t, t) for i, t in enumerate(texts)],
    )
    rows = cols.rows(list(range(1, len(texts) + 1)))
    assert [r[2] for r in rows] == texts  # the text
    assert [r[3] for r in rows] == texts  # the title
    assert [r[7] for r in rows] == texts  # the context


def test_slot_filler_builds_frozen_instances_and_checks_its_input():
    from dataclasses import fields

    from ragfind import _core
    from ragfind.pipeline.results import SLOTS, Passage, SearchResult, passage_from_fields, result_from_fields

    values = (7, "d", "text", "T", "src", 0.5, 0, 4, {"a": 1}, "", {"bm25": 1}, {"bm25": 2.0}, [(0, 4)])
    p = passage_from_fields(*values)
    assert p == Passage(*values) and [getattr(p, f.name) for f in fields(Passage)] == list(values)
    r = result_from_fields((p,), {"total": 1.0}, False, ("q",), (), ())
    assert r == SearchResult((p,), {"total": 1.0}, False, ("q",), (), ()) and list(r) == [p]
    with pytest.raises(TypeError, match="expected 13 values, got 2"):
        passage_from_fields(1, 2)
    with pytest.raises(TypeError, match="member descriptor"):
        _core.slot_filler(Passage, (object(),))
    with pytest.raises(ValueError, match="not a slot of"):
        _core.slot_filler(SearchResult, SLOTS)  # Passage's slots lie outside a SearchResult
    import gc

    assert not gc.is_tracked(p) and gc.is_tracked(r)  # Passage's filler untracks, the result's not
    with pytest.raises(ValueError, match="untrack: .* not a class with slots"):
        _core.slot_filler(_core.PassageColumnsView, (), untrack=True)
