"""atheris harness: mutated saved Retriever folders through Retriever.load (clean error or work).

Run: python tools/fuzz/fuzz_load_retriever.py WORKDIR tools/fuzz/corpus/load_retriever -max_total_time=60
(tools/fuzz/run.sh does this for every target). An input packs a whole folder (manifest, SQLite
store, BM25 and dense files; see _common.check_retriever); byte 0 picks the mode: bit 0 fixes
the index files' checksums, bit 1 the manifest's sizes and SHA-256s, bit 2 verify=False, bit 3
no encoder. A loaded retriever is searched, filtered, added to, saved, reloaded and deleted from.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["ragfind"]):
    import ragfind  # noqa: F401

from _common import check_retriever, main  # noqa: E402


def test_one_input(data: bytes) -> None:
    check_retriever(data)


if __name__ == "__main__":
    main(test_one_input)
