"""The retrieval pipeline: documents in, passages out.

``retriever.py`` orchestrates; ``stages/`` holds the stages it runs (one file each); ``chunking.py``,
``context.py`` and ``cache.py`` are the parts around them.
"""
