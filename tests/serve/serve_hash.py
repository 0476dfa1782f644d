"""``python serve_hash.py FOLDER PORT [--late] [--api-key KEY]``: uvicorn over a retriever folder
built with the hashing encoder (which ``ragfind serve`` cannot load by name), for the browser
tests; ``--late`` serves an in-memory copy of the test documents with a late-interaction stage."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent.parent))

import uvicorn  # noqa: E402

import ragfind  # noqa: E402
from hash_encoders import HashEncoder, WordColbert  # noqa: E402
from ragfind.pipeline.stages.late import LateInteractionStage  # noqa: E402
from ragfind.serve import ServeConfig, create_app  # noqa: E402

if __name__ == "__main__":
    folder, port, flags = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    key = flags[flags.index("--api-key") + 1] if "--api-key" in flags else None
    config = ServeConfig(api_key=key)
    if "--late" in flags:
        from serve_fixtures import DOCS

        r = ragfind.Retriever(
            encoder=HashEncoder(),
            chunk_size=None,
            stages=[LateInteractionStage(WordColbert(), dtype="float32")],
        )
        r.add_documents(DOCS)
        app = create_app(r, config=config)
    else:
        app = create_app(folder=folder, encoder=HashEncoder(), config=config)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
