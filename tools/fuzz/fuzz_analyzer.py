"""atheris harness: arbitrary bytes and Unicode through every Analyzer configuration.

Run: python tools/fuzz/fuzz_analyzer.py WORKDIR tools/fuzz/corpus/analyzer -max_total_time=60
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["ragfind"]):
    import ragfind  # noqa: F401

from _common import check_analyzer, main  # noqa: E402

if __name__ == "__main__":
    main(check_analyzer)
