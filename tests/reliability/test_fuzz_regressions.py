"""Replays the fuzz seed corpus and every input a fuzz run ever flagged (tools/fuzz).

Each file in tools/fuzz/corpus/<target>/ and tests/reliability/fuzz_regressions/<target>/ goes through the
same check the atheris harness runs: loaders (a saved Retriever folder too) must load and work
or raise ValueError/OSError, the analyzer must return non-empty str terms, the query path must
return sane results. A crash found by tools/fuzz/run.sh becomes a regression test by copying its
artifact into tests/reliability/fuzz_regressions/<target>/.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "fuzz"))

from _common import (  # noqa: E402
    check_add_documents,
    check_analyzer,
    check_loader,
    check_query,
    check_query_parser,
    check_retriever,
)

CHECKS = {
    "analyzer": check_analyzer,
    "query": check_query,
    "query_parser": check_query_parser,
    "add_documents": check_add_documents,
    "load_bm25": lambda data: check_loader("bm25", data),
    "load_dense_exact": lambda data: check_loader("dense-exact", data),
    "load_dense_hnsw": lambda data: check_loader("dense-hnsw", data),
    "load_late": lambda data: check_loader("late", data),
    "load_sparse": lambda data: check_loader("sparse", data),
    "load_retriever": check_retriever,
}


def _inputs():
    for folder in (ROOT / "tools" / "fuzz" / "corpus", ROOT / "tests" / "reliability" / "fuzz_regressions"):
        for target in CHECKS:
            d = folder / target
            if d.is_dir():
                for f in sorted(d.iterdir()):
                    if f.is_file():
                        yield pytest.param(target, f, id=f"{folder.name}/{target}/{f.name}")


INPUTS = list(_inputs())


@pytest.mark.parametrize("target,path", INPUTS)
def test_fuzz_input_is_handled_cleanly(target, path):
    CHECKS[target](path.read_bytes())


def test_seed_corpus_exists():
    targets = {p.values[0] for p in INPUTS}
    assert targets >= set(CHECKS), f"missing seeds for {set(CHECKS) - targets}"
