"""The retrieval pipeline: documents in, passages out.

``retriever.py`` orchestrates; ``stages.py`` holds the stages it runs; ``chunking.py``,
``context.py`` and ``cache.py`` are the parts around them.
"""
