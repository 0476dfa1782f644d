"""ragfind.distributed.build: JSONL/Parquet -> Ray Data (chunk + embed on an encoder actor pool)
-> shard folders that ShardedRetriever.load opens with the results of one Retriever."""

from __future__ import annotations

import json

import pytest
import sharded_helpers
from sharded_helpers import assert_same, load_collection

import ragfind
from ragfind.distributed import ShardedRetriever, build, is_sharded_folder

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = [
    pytest.mark.slow,
    # Ray Data warns about its own deprecated settings while it sets up a pipeline.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:ray.*"),
]


def test_build_jsonl_and_parquet(ray_session, tmp_path) -> None:
    c = load_collection("scifact", limit=300)
    docs = c["docs"]
    src = tmp_path / "corpus.jsonl"
    with open(src, "w", encoding="utf-8") as fh:
        for d in docs:
            fh.write(json.dumps({"_id": d["id"], "text": d["text"], "metadata": d["metadata"]}) + "\n")
    opts = dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)
    out = build(src, tmp_path / "kb", 2, num_encoders=1, batch_size=200, show_progress=False, **opts)
    assert is_sharded_folder(out)
    assert ragfind.Retriever.load(out / "shard-0001", encoder=c["encoder"]).n_chunks > 0
    single = ragfind.Retriever(**opts)
    single.add_documents(docs)
    with ShardedRetriever.load(out, 2, encoder=c["encoder"]) as sharded:
        assert len(sharded) == len(docs)
        for _, q in c["queries"][:10]:
            assert_same(single, sharded, q, k=10)
            assert_same(single, sharded, q, k=10, filters={"bucket": 3}, stages=["bm25"])
    # Parquet, the same documents: the same shards.
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = pa.table({"id": [d["id"] for d in docs], "text": [d["text"] for d in docs]})
    pq.write_table(table, tmp_path / "corpus.parquet")
    out2 = build(tmp_path / "corpus.parquet", tmp_path / "kb2", 2, show_progress=False, **opts)
    with ShardedRetriever.load(out2, encoder=c["encoder"]) as sharded2:
        assert [i["documents"] for i in sharded2.shard_info()] == [
            len(ragfind.Retriever.load(out / f"shard-000{s}", encoder=c["encoder"])) for s in range(2)
        ]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        build(src, out, 2, show_progress=False, **opts)
    with pytest.raises(ValueError, match="num_shards"):
        build(src, tmp_path / "kb3", 0, **opts)


def test_build_does_not_hang_with_as_many_encoders_as_cpus(ray_session, tmp_path) -> None:
    import threading

    from ragfind.distributed.indexing import encoder_cpus

    assert encoder_cpus(2, 2) == 0.5 and encoder_cpus(8, 8) == 0.875 and encoder_cpus(1, 1) == 0.5
    c = load_collection("scifact", limit=60)
    src = tmp_path / "corpus.jsonl"
    with open(src, "w", encoding="utf-8") as fh:
        for d in c["docs"]:
            fh.write(json.dumps({"_id": d["id"], "text": d["text"]}) + "\n")
    opts = dict(encoder=c["encoder"], chunk_size=None, contextualize=False, cache_size=0)
    done: list = []

    def run() -> None:
        # The session's Ray has 2 CPUs: 2 encoders used to hold both, and the reads never ran.
        done.append(
            build(src, tmp_path / "kb", 2, num_encoders=2, batch_size=30, show_progress=False, **opts)
        )

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout=240)
    assert done, "build() with num_encoders == CPUs did not finish"
    with ShardedRetriever.load(done[0], encoder=c["encoder"]) as sharded:
        assert len(sharded) == len(c["docs"])


def _write_jsonl(path, ids) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for i in ids:
            fh.write(json.dumps({"id": i, "text": f"document {i} about topic {int(i[1:]) % 97}"}) + "\n")


def test_shard_builder_catches_an_id_repeated_in_a_batch_or_added_before() -> None:
    from ragfind.distributed.indexing import _ShardBuilder

    b = _ShardBuilder(0, dict(encoder=None, chunk_size=None, cache_size=0))
    doc = lambda i: json.dumps({"id": i, "text": f"text of {i}"})  # noqa: E731
    b.add([doc("a"), doc("b")], [0, 1], [b"", b""])
    with pytest.raises(ValueError, match="document id 'c' is repeated in the source"):
        b.add([doc("c"), doc("d"), doc("c")], [2, 3, 4], [b""] * 3)
    with pytest.raises(ValueError, match="document id 'a' is repeated in the source"):
        b.add([doc("e"), doc("a")], [5, 6], [b""] * 2)
    assert len(b.r) == 2  # nothing of a refused batch was added


def test_build_catches_an_id_repeated_far_apart_and_leaves_out_untouched(ray_session, tmp_path) -> None:
    import threading

    # The repeat of d00003 comes 3000 documents and 30 batches later: the driver keeps no ids,
    # the builder of its shard catches it.
    ids = [f"d{i:05d}" for i in range(3000)] + ["d00003"]
    src = tmp_path / "corpus.jsonl"
    _write_jsonl(src, ids)
    opts = dict(encoder=None, chunk_size=None, cache_size=0)
    out = tmp_path / "kb"
    _write_jsonl(tmp_path / "ok.jsonl", ids[:-1])
    build(tmp_path / "ok.jsonl", out, 3, batch_size=500, show_progress=False, **opts)  # an existing folder
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    errors: list = []

    def run(dst, overwrite) -> None:
        try:
            build(src, dst, 3, batch_size=100, show_progress=False, overwrite=overwrite, **opts)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            errors.append(exc)

    for dst, overwrite in ((tmp_path / "fresh", False), (out, True)):
        errors.clear()
        t = threading.Thread(target=run, args=(dst, overwrite), daemon=True)
        t.start()
        t.join(timeout=240)
        assert not t.is_alive(), "build() with a repeated id did not finish"
        assert len(errors) == 1 and type(errors[0]) is ValueError, errors
        assert str(errors[0]) == "document id 'd00003' is repeated in the source"
    assert not (tmp_path / "fresh").exists()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl", "kb", "ok.jsonl"]  # no temp folder


def test_build_record_without_id_is_a_plain_value_error(ray_session, tmp_path) -> None:
    src = tmp_path / "corpus.jsonl"
    rows = [{"id": f"d{i}", "text": f"text number {i}"} for i in range(50)]
    rows[37] = {"text": "no id here"}
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "kb"
    with pytest.raises(ValueError, match="no 'id' field") as info:
        build(src, out, 2, num_encoders=1, batch_size=20, show_progress=False, encoder=None, chunk_size=None)
    assert type(info.value) is ValueError  # not a Ray Data error that also claims to be one
    assert not out.exists() and not list(tmp_path.glob(".kb.tmp-*"))
