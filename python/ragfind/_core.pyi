"""Type stubs for the native module ragfind._core (one section per area)."""

# --- cpu / dispatch ---
def cpu_features() -> dict[str, bool]: ...
def compiled_simd_levels() -> list[str]: ...
def supported_simd_levels() -> list[str]: ...
def best_simd_level() -> str: ...
def get_simd_level() -> str: ...
def set_simd_level(level: str) -> None: ...

# --- bm25 ---

# --- dense ---
from numpy import float32 as _f32  # noqa: E402
from numpy import int64 as _i64  # noqa: E402
from numpy import uint8 as _u8  # noqa: E402
from numpy.typing import NDArray as _NDArray  # noqa: E402

def dense_search(
    data: _NDArray,
    storage: str,
    scales: _NDArray[_f32] | None,
    sqnorms: _NDArray[_f32] | None,
    q: _NDArray[_f32],
    k: int,
    metric: str,
    allowed: _NDArray[_u8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[_NDArray[_i64], _NDArray[_f32]]: ...
def dense_search_batch(
    data: _NDArray,
    storage: str,
    scales: _NDArray[_f32] | None,
    sqnorms: _NDArray[_f32] | None,
    Q: _NDArray[_f32],
    k: int,
    metric: str,
    allowed: _NDArray[_u8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[_NDArray[_i64], _NDArray[_f32], _NDArray[_i64]]: ...
def dense_score_all(
    data: _NDArray,
    storage: str,
    scales: _NDArray[_f32] | None,
    sqnorms: _NDArray[_f32] | None,
    q: _NDArray[_f32],
    metric: str,
) -> _NDArray[_f32]: ...
def dense_pairwise(A: _NDArray[_f32], B: _NDArray[_f32], op: str) -> _NDArray[_f32]: ...
def dense_rowwise(A: _NDArray[_f32], B: _NDArray[_f32], op: str) -> _NDArray[_f32]: ...
def dense_kernel_name() -> str: ...

# --- fusion ---
from typing import Any as _Any  # noqa: E402
from typing import Sequence as _Sequence  # noqa: E402

def rrf(
    lists: _Sequence[_Any], k: float = 60.0, weights: _Sequence[float] | None = None, top_k: int | None = None
) -> tuple[_NDArray, _NDArray]: ...
def fuse_scores(
    lists: _Sequence[_Any],
    norm: str = "min-max",
    method: str = "sum",
    weights: _Sequence[float] | None = None,
    top_k: int | None = None,
) -> tuple[_NDArray, _NDArray]: ...

# --- late interaction ---
import numpy as _np

def maxsim_list(
    query_vectors: _np.ndarray, documents: list[_np.ndarray], n_threads: int = 0, check_finite: bool = True
) -> _np.ndarray: ...
def maxsim_packed(
    query_vectors: _np.ndarray,
    tokens: _np.ndarray,
    offsets: _np.ndarray,
    doc_ids: _np.ndarray | None = None,
    n_threads: int = 0,
    check_finite: bool = True,
) -> _np.ndarray: ...
def maxsim_explain(query_vectors: _np.ndarray, document: _np.ndarray) -> tuple[_np.ndarray, _np.ndarray]: ...
def first_non_finite(array: _np.ndarray) -> int: ...

# --- sparse ---
class SparseImpactIndex:
    def __init__(self, dim: int, scale: float) -> None: ...
    @property
    def dim(self) -> int: ...
    @property
    def scale(self) -> float: ...
    @property
    def num_docs(self) -> int: ...
    @property
    def num_postings(self) -> int: ...
    @property
    def num_segments(self) -> int: ...
    def add(self, indptr: _np.ndarray, indices: _np.ndarray, values: _np.ndarray) -> None: ...
    def search_batch(
        self,
        indptr: _np.ndarray,
        indices: _np.ndarray,
        values: _np.ndarray,
        k: int,
        n_threads: int = 0,
        algorithm: str = "auto",
    ) -> tuple[_np.ndarray, _np.ndarray]: ...
    def score_all(self, indices: _np.ndarray, values: _np.ndarray) -> _np.ndarray: ...
    def weights(self, terms: _np.ndarray, doc: int) -> _np.ndarray: ...
    def export_arrays(self) -> tuple[_np.ndarray, _np.ndarray, _np.ndarray]: ...
    def install(self, num_docs: int, offsets: _np.ndarray, docs: _np.ndarray, stored: _np.ndarray) -> None: ...
