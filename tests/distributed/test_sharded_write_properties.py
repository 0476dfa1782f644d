"""What is accepted is kept, through a ShardedRetriever: the write-path state machine of
tests/reliability/test_write_properties.py (random adds, well-formed and not, deletes, filtered
searches, saves and loads, checked after every step against the plain Python model) with the
router as the door. Few examples: each step is a round of Ray calls."""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule, run_state_machine_as_test

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "reliability"))

import sharded_helpers  # noqa: E402
from test_write_properties import RetrieverWrites  # noqa: E402

from ragfind.distributed import ShardedRetriever  # noqa: E402

ray_session = sharded_helpers.ray_session  # the session's local Ray (a fixture)

pytestmark = pytest.mark.slow


class ShardedWrites(RetrieverWrites):
    """Writes through a 2-shard router (BM25 only); a restart loads the last sharded save."""

    def new_retriever(self, cache_size):
        return ShardedRetriever(2, encoder=None, chunk_size=None, contextualize=False, cache_size=cache_size)

    @precondition(lambda self: self.saved is not None)
    @rule(cache_size=st.sampled_from([0, 64]))
    def restart(self, cache_size):
        self.close()
        self.r = ShardedRetriever.load(self.folder, encoder=None, contextualize=False, cache_size=cache_size)
        self.model, self.kinds = copy.deepcopy(self.saved)


def test_a_sharded_retriever_keeps_what_it_accepts(ray_session):
    run_state_machine_as_test(
        ShardedWrites,
        settings=settings(
            max_examples=int(os.environ.get("RAGFIND_SHARDED_PROPERTY_EXAMPLES", "4")),
            stateful_step_count=10,
            deadline=None,
            suppress_health_check=list(HealthCheck),
        ),
    )
