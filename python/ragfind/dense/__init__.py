"""Dense vectors: SIMD similarity kernels, exact search, HNSW (through hnswlib) and IVF lists.

``DenseIndex`` (``index.py``) is the face: one class, ``kind="exact"``, ``"hnsw"`` or ``"ivf"``,
over one backend object of that kind (``exact.py``, ``hnsw.py``, ``ivf.py``). The raw kernels
``dot``, ``cosine`` and ``l2sq`` (``kernels.py``) run at the active SIMD level.
"""

from ragfind.dense.index import DenseIndex
from ragfind.dense.kernels import cosine, dot, l2sq

__all__ = ["DenseIndex", "dot", "cosine", "l2sq"]
