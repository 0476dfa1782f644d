"""Drop-in replacements for other libraries' APIs, backed by ragfind's C++ core.

``ragfind.compat.rank_bm25``: ``BM25Okapi``, ``BM25L``, ``BM25Plus`` with rank_bm25's
constructors, methods and scores; switch by changing one import.
"""
