"""Sharded folders (save/load, shard folders are ordinary Retriever folders, another shard
count), routing of adds and deletes by the stable hash, all-or-nothing writes, bad input."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import sharded_helpers
from sharded_helpers import load_collection

import ragfind
from ragfind.distributed import ShardedFolderError, ShardedRetriever, is_sharded_folder, shard_of

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow

OPTS = dict(encoder=None, chunk_size=None, cache_size=0)


@pytest.fixture(scope="module")
def small(ray_session):
    c = load_collection("cranfield")
    sharded = ShardedRetriever(3, **OPTS)
    sharded.add_documents(c["docs"][:300])
    yield sharded, c
    sharded.close()


def test_shard_of_is_stable() -> None:
    # The partition must never change between processes or versions: pinned values
    # (BLAKE2b-64 of the id's UTF-8 bytes, little-endian, modulo the shard count).
    assert [shard_of(str(i), 5) for i in range(8)] == [4, 0, 0, 1, 2, 2, 1, 0]
    assert [shard_of(x, 7) for x in ("a", "doc-1", "42", "é")] == [4, 4, 1, 5]
    assert shard_of(42, 7) == shard_of("42", 7)  # ids are stored as str
    assert shard_of("x" * 100, 1024) == 154
    code = "from ragfind.distributed import shard_of; print([shard_of(str(i), 5) for i in range(8)])"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "123", **_env()},
    )
    assert out.stdout.strip() == "[4, 0, 0, 1, 2, 2, 1, 0]"


def _env() -> dict:
    import os

    return dict(os.environ)


def test_routing_of_adds_and_deletes(small) -> None:
    sharded, c = small
    infos = sharded.shard_info()
    per = [0, 0, 0]
    for d in c["docs"][:300]:
        per[shard_of(d["id"], 3)] += 1
    assert [i["documents"] for i in infos] == per
    assert all(n > 50 for n in per)
    # Each shard holds exactly its documents.
    for d in c["docs"][:300:37]:
        s = shard_of(d["id"], 3)
        assert sharded._scatter({s: ("existing", [d["id"]])})[s] == [d["id"]]
        assert sharded._scatter({(s + 1) % 3: ("existing", [d["id"]])})[(s + 1) % 3] == []
    victim = c["docs"][5]["id"]
    s = shard_of(victim, 3)
    assert sharded.delete_documents([victim]) == 1
    assert sharded.shard_info()[s]["documents"] == per[s] - 1
    with pytest.raises(KeyError):
        sharded.get_document(victim)
    sharded.add_documents([c["docs"][5]])
    assert sharded.get_document(victim)["text"] == c["docs"][5]["text"]


def test_writes_are_all_or_nothing(small) -> None:
    sharded, c = small
    n = len(sharded)
    new = [{"id": f"new-{i}", "text": f"brand new text {i}"} for i in range(6)]
    with pytest.raises(ValueError, match="already in the store"):
        sharded.add_documents(new + [c["docs"][0]])
    assert len(sharded) == n
    with pytest.raises(ValueError, match="repeats id"):
        sharded.add_documents([new[0], new[0]])
    with pytest.raises(ValueError, match="lacks 'text'"):
        sharded.add_documents([{"id": "x"}])
    with pytest.raises(ValueError, match="no encoder"):
        sharded.add_documents(new, embeddings=[[0.0, 1.0]] * 6)
    with pytest.raises(KeyError, match="not in the store"):
        sharded.delete_documents([c["docs"][1]["id"], "no-such-doc"])
    assert len(sharded) == n
    assert sharded.get_document(c["docs"][1]["id"])["id"] == c["docs"][1]["id"]
    # Metadata that is not JSON is refused by the router's document check, before any shard.
    bad = [dict(new[i]) for i in range(6)]
    bad[3]["metadata"] = {"x": object()}
    with pytest.raises(TypeError, match=r"documents\[3\]\.metadata\.x .*expected a JSON value"):
        sharded.add_documents(bad)
    assert len(sharded) == n
    # A field keeps its kind across shards: the router knows what every shard holds.
    sharded.add_documents([{"id": "kind-0", "text": "kinds", "metadata": {"year": 2020}}])
    with pytest.raises(TypeError, match="field 'year' holds number values"):
        sharded.add_documents([dict(new[i], metadata={"year": str(i)}) for i in range(6)])
    assert len(sharded) == n + 1
    # A shard that refuses its part takes the others' back out: here the shard holding
    # kind-0 refuses, behind a router that has not seen that write (as one attached later).
    sharded._kinds = {}
    with pytest.raises(TypeError, match="field 'year' holds number values"):
        sharded.add_documents([dict(new[i], metadata={"year": str(i)}) for i in range(6)])
    assert len(sharded) == n + 1
    sharded.delete_documents(["kind-0"])


def test_save_load_and_shard_folders(small, tmp_path) -> None:
    sharded, c = small
    queries = [q for _, q in c["queries"][:15]]
    before = [[(p.doc_id, p.score) for p in sharded.search(q, k=10)] for q in queries]
    path = tmp_path / "kb"
    sharded.save(path)
    assert is_sharded_folder(path)
    m = json.loads((path / "shards.json").read_text())
    assert m["format"] == "ragfind-sharded" and m["version"] == 1 and m["num_shards"] == 3
    # A shard folder is an ordinary Retriever folder.
    r0 = ragfind.Retriever.load(path / "shard-0000", encoder=None)
    assert len(r0) == sharded.shard_info()[0]["documents"]
    assert not is_sharded_folder(path / "shard-0000")
    with ShardedRetriever.load(path) as loaded:
        assert len(loaded) == len(sharded)
        after = [[(p.doc_id, p.score) for p in loaded.search(q, k=10)] for q in queries]
        assert after == before
        # Writes after a load get fresh collection-wide ids and save again.
        loaded.add_documents([{"id": "after-load", "text": "a wing in a supersonic slipstream"}])
        assert loaded.search("supersonic slipstream wing", k=3)[0].doc_id in {
            p.doc_id for p in sharded.search("supersonic slipstream wing", k=20)
        } | {"after-load"}
        loaded.save(path)
    with ShardedRetriever.load(path, 3) as again:
        assert len(again) == len(sharded) + 1
    with pytest.raises(ShardedFolderError, match="holds 3 shards; num_shards = 2"):
        ShardedRetriever.load(path, 2)
    with pytest.raises(ShardedFolderError, match="single Retriever folder"):
        ShardedRetriever.load(path / "shard-0000")
    with pytest.raises(ShardedFolderError, match="not a folder"):
        ShardedRetriever.load(tmp_path / "missing")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(FileExistsError):
        sharded.save(tmp_path / "other")
    m["num_shards"] = 4
    m["lsn"] = [0, 0, 0, 0]
    (path / "shards.json").write_text(json.dumps(m))
    with pytest.raises(ShardedFolderError, match="lacks shard-0003"):
        ShardedRetriever.load(path)


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "2", 5000])
def test_bad_num_shards(bad) -> None:
    with pytest.raises(ValueError, match="num_shards"):
        ShardedRetriever(bad, **OPTS)


def test_bad_replicas() -> None:
    with pytest.raises(ValueError, match="replicas = 0"):
        ShardedRetriever(2, replicas=0, **OPTS)


def test_import_without_ray() -> None:
    code = (
        "import sys; sys.modules['ray'] = None\n"
        "import ragfind, ragfind.distributed as d\n"
        "try:\n    d.ShardedRetriever(2)\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert 'pip install "ragfind[ray]"' in out.stdout
