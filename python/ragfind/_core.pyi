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
import numpy as np
import numpy.typing as npt

def dense_search(
    data: npt.NDArray[np.generic],
    storage: str,
    scales: npt.NDArray[np.float32] | None,
    sqnorms: npt.NDArray[np.float32] | None,
    q: npt.NDArray[np.float32],
    k: int,
    metric: str,
    allowed: npt.NDArray[np.uint8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]: ...
def dense_search_batch(
    data: npt.NDArray[np.generic],
    storage: str,
    scales: npt.NDArray[np.float32] | None,
    sqnorms: npt.NDArray[np.float32] | None,
    Q: npt.NDArray[np.float32],
    k: int,
    metric: str,
    allowed: npt.NDArray[np.uint8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
def dense_score_all(
    data: npt.NDArray[np.generic],
    storage: str,
    scales: npt.NDArray[np.float32] | None,
    sqnorms: npt.NDArray[np.float32] | None,
    q: npt.NDArray[np.float32],
    metric: str,
) -> npt.NDArray[np.float32]: ...
def dense_pairwise(A: npt.NDArray[np.float32], B: npt.NDArray[np.float32], op: str) -> npt.NDArray[np.float32]: ...
def dense_rowwise(A: npt.NDArray[np.float32], B: npt.NDArray[np.float32], op: str) -> npt.NDArray[np.float32]: ...
def dense_kernel_name() -> str: ...

# --- fusion ---

# --- late interaction ---

# --- sparse ---
