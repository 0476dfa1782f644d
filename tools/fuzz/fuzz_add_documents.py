"""atheris harness: batches of documents (JSON, with NaN, invalid Unicode, nesting, odd ids and
kinds) through Retriever.add_documents, then save and load: a write is kept whole or refused
with TypeError/ValueError and leaves nothing.

Run: python tools/fuzz/fuzz_add_documents.py WORKDIR tools/fuzz/corpus/add_documents -max_total_time=60
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import atheris  # noqa: E402

with atheris.instrument_imports(include=["ragfind"]):
    import ragfind  # noqa: F401

from _common import check_add_documents, main  # noqa: E402

if __name__ == "__main__":
    main(check_add_documents)
