"""atheris harness: query strings with phrases (quotes, slop, escapes, unbalanced quotes, huge
slop) through parse_query, a positional BM25Index and the highlighter.

Run: python tools/fuzz/fuzz_query_parser.py WORKDIR tools/fuzz/corpus/query_parser -max_total_time=60
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["ragfind"]):
    import ragfind  # noqa: F401

from _common import check_query_parser, main  # noqa: E402

if __name__ == "__main__":
    main(check_query_parser)
