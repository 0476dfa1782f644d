"""Drop-in replacements for other libraries' APIs, backed by ragfind's C++ core.

``ragfind.compat.rank_bm25``: ``BM25Okapi``, ``BM25L``, ``BM25Plus`` with rank_bm25's
constructors, methods and scores; switch by changing one import.

``ragfind.compat.bm25s``: bm25s's ``tokenize``, ``Tokenizer``, ``BM25`` (five methods) and
``Results`` with its shapes, dtypes and scores: ``import ragfind.compat.bm25s as bm25s``.
"""
