"""atheris harness: mutated dense-ivf index files through the loader (must raise cleanly or work).

Run: python tools/fuzz/fuzz_load_dense_ivf.py WORKDIR tools/fuzz/corpus/load_dense_ivf -max_total_time=60
(tools/fuzz/run.sh does this for every target). Input byte 0 picks the mode: bit 0 recomputes
the checksums (mutations then reach the structural checks), bit 1 mmap, bit 2 verify=False.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["ragfind"]):
    import ragfind  # noqa: F401

from _common import check_loader, main  # noqa: E402


def test_one_input(data: bytes) -> None:
    check_loader("dense-ivf", data)


if __name__ == "__main__":
    main(test_one_input)
