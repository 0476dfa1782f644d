"""The router's copy of the BM25 statistics against the shards' own: after every write, what the
acknowledgements carried (applied in order) equals each index's statistics read whole, for
every term; a change against another version is refused. Shard copies in this process (no Ray)."""

from __future__ import annotations

import random

import numpy as np

from ragfind.distributed.router import _CollectionStats
from ragfind.distributed.shard import ShardActor

OPTS = dict(encoder=None, chunk_size=None, cache_size=0)
WORDS = [f"w{i}" for i in range(300)]


def _doc(rng: random.Random, n: int) -> dict:
    return {"id": f"d{n}", "text": " ".join(rng.choice(WORDS[: 50 + n]) for _ in range(rng.randint(1, 12)))}


def _truth(shards: list, terms: list) -> tuple:
    n = total = 0
    df = np.zeros(len(terms), np.int64)
    for a in shards:
        sn, stotal, sdf = a.r.stage("bm25").index.term_stats(terms)
        n, total, df = n + sn, total + stotal, df + np.asarray(sdf, np.int64)
    return n, total, dict(zip(terms, df.tolist()))


def test_acknowledgements_keep_the_statistics_exact(tmp_path) -> None:
    rng = random.Random(7)
    shards = [ShardActor(s, str(tmp_path / f"s{s}"), OPTS) for s in range(2)]
    try:
        for a in shards:
            assert isinstance(a.promote(1, []), dict)
        stats = _CollectionStats(2)
        for s, a in enumerate(shards):
            assert stats.apply(s, a.bm25_table())
        held: list = [[], []]
        seq = [1, 1]
        n = 0
        for step in range(40):
            s = rng.randrange(2)
            a = shards[s]
            if held[s] and rng.random() < 0.35:
                gone = rng.sample(held[s], rng.randint(1, len(held[s])))
                ack = a.delete(1, seq[s], a.last, gone)
                held[s] = [d for d in held[s] if d not in gone]
            else:
                docs = [_doc(rng, n + i) for i in range(rng.randint(1, 5))]
                ack = a.add(1, seq[s], a.last, docs, list(range(n, n + len(docs))))
                n += len(docs)
                held[s] += [d["id"] for d in docs]
            seq[s] += 1
            assert stats.apply(s, ack["stats"]), step
            terms = list(dict.fromkeys(w for b in shards for w in b.r.stage("bm25").index._core.vocabulary()))
            got, versions = stats.read({"bm25": [terms]}, [0, 1], {})
            assert got["bm25"][0] == _truth(shards, terms), step
            assert versions == {0: shards[0].last, 1: shards[1].last}
        # A change against another version than the one held is refused (a whole table next).
        a = shards[0]
        ack = a.add(1, seq[0], a.last, [_doc(rng, n)], [n])
        ack["stats"]["base"] = -5
        assert not stats.apply(0, ack["stats"]) and stats.stale() == [0]
        assert stats.apply(0, a.bm25_table()) and stats.stale() == []
        terms = list(a.r.stage("bm25").index._core.vocabulary())
        assert stats.read({"bm25": [terms]}, [0, 1], {})[0]["bm25"][0] == _truth(shards, terms)
        # A copy asked at another version answers with its own numbers, not lists.
        import pickle

        q = " ".join(terms[:3])
        request = pickle.dumps(([("bm25", "bm25", [q])], None, 10, None, 0, {0: a.last - 1}))
        out = pickle.loads(a.first_stage(request))
        assert out["stale"] == a.last and "lists" not in out
    finally:
        for a in shards:
            a.wal.close()
