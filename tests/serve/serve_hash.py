"""``python serve_hash.py FOLDER PORT``: uvicorn over a retriever folder built with the hashing
encoder (which ``ragfind serve`` cannot load by name), for the browser test."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import uvicorn  # noqa: E402
from serve_hash_encoder import HashEncoder  # noqa: E402

from ragfind.serve import create_app  # noqa: E402

if __name__ == "__main__":
    folder, port = sys.argv[1], int(sys.argv[2])
    uvicorn.run(
        create_app(folder=folder, encoder=HashEncoder()), host="127.0.0.1", port=port, log_level="warning"
    )
