"""Type stubs for the native module ragfind._core (one section per area).

Checked against the compiled module by tools/check_stubs.py (CI runs it): names, kinds and every
function's parameters must match the bindings in cpp/bindings.
"""

from collections.abc import Callable as _Callable
from collections.abc import Sequence as _Sequence
from typing import Any as _Any

import numpy as _np
from numpy import float16 as _f16
from numpy import float32 as _f32
from numpy import int64 as _i64
from numpy import uint8 as _u8
from numpy import uint16 as _u16
from numpy import uint32 as _u32
from numpy import uint64 as _u64
from numpy.typing import NDArray as _NDArray

# Every pybind11 class has pybind11's metaclass (pybind11_builtins.pybind11_type, a subclass of
# type that cannot be imported); declared so that stubtest sees a custom metaclass on both sides.
class _Pybind11Type(type): ...

# --- cpu / dispatch ---
def cpu_features() -> dict[str, bool]: ...
def compiled_simd_levels() -> list[str]: ...
def supported_simd_levels() -> list[str]: ...
def best_simd_level() -> str: ...
def get_simd_level() -> str: ...
def set_simd_level(level: str) -> None: ...

# --- bm25 ---

class IndexFileError(ValueError): ...
class IndexWriteError(OSError): ...

class Analyzer(metaclass=_Pybind11Type):
    def __init__(
        self,
        lowercase: bool,
        stopwords: list[str],
        stem_words: _Callable[[list[str]], list[str]] | None,
        split_identifiers: bool,
        tokenizer: _Callable[[str], list[str]] | None,
        cjk_bigrams: bool = False,
        symbol_letters: bool = False,
        caps_text_symbols: bool = True,
        fold_accents: bool = False,
    ) -> None: ...
    def analyze(self, text: str | bytes) -> list[str]: ...
    def analyze_offsets(self, text: str) -> list[tuple[str, int, int, bool]]: ...
    def match_offsets(self, texts: list, terms: _Sequence[str]) -> list[list[tuple[int, int]]]: ...
    @property
    def num_surfaces(self) -> int: ...

class BM25AllowedSet(metaclass=_Pybind11Type):
    """A filter compiled for one BM25Core write generation: a byte per internal document.
    Made by BM25Core.compile_filter only (constructing one raises)."""
    def __init__(self, *args: _Any, **kwargs: _Any) -> None: ...
    @property
    def count(self) -> int: ...
    @property
    def generation(self) -> int: ...
    @property
    def mask(self) -> _NDArray[_u8]: ...

class BM25Core(metaclass=_Pybind11Type):
    def __init__(self, method: str, k1: float, b: float, delta: float, analyzer: Analyzer) -> None: ...
    def __len__(self) -> int: ...
    def add(
        self, texts: _Sequence[str | bytes], ids: _Sequence[int] | _Sequence[str] | None = None
    ) -> None: ...
    def add_tokenized(
        self, token_lists: _Sequence[_Sequence[str]], ids: _Sequence[int] | _Sequence[str] | None = None
    ) -> None: ...
    def delete(self, ids: _Sequence[int] | _Sequence[str]) -> None: ...
    def search(
        self, query: str, k: int, algorithm: int = 0, allowed: BM25AllowedSet | None = None
    ) -> tuple[_np.ndarray, _np.ndarray]: ...
    def search_tokenized(
        self, tokens: _Sequence[str], k: int, algorithm: int = 0, allowed: BM25AllowedSet | None = None
    ) -> tuple[_np.ndarray, _np.ndarray]: ...
    def search_batch(
        self,
        queries: _Sequence[_Any],
        k: int,
        threads: int,
        tokenized: bool = False,
        algorithm: int = 0,
        allowed: BM25AllowedSet | None = None,
    ) -> list[tuple[_np.ndarray, _np.ndarray]]: ...
    def search_batch_with_stats(
        self,
        queries: _Sequence[_Any],
        k: int,
        threads: int,
        tokenized: bool,
        algorithm: int,
        allowed: BM25AllowedSet | None,
        num_docs: int,
        total_len: int,
        dfs: _Sequence[dict[str, int]],
    ) -> list[tuple[_np.ndarray, _np.ndarray]]: ...
    def term_stats(self, terms: _Sequence[str]) -> tuple[int, int, _np.ndarray]: ...
    def compile_filter(self, ids: _np.ndarray) -> BM25AllowedSet: ...
    def compile_filter_bits(
        self, words: IdBitmap | _np.ndarray, previous: BM25AllowedSet | None = ...
    ) -> BM25AllowedSet: ...
    @property
    def generation(self) -> int: ...
    @property
    def id_kind(self) -> str | None: ...
    def get_scores(self, query: str | bytes | _Sequence[str]) -> _np.ndarray: ...
    def explain(self, query: str | bytes | _Sequence[str], doc_id: int | str) -> dict[str, _Any]: ...
    def ids(self) -> _np.ndarray: ...
    def term_ids(self, tokens: _Sequence[str]) -> _np.ndarray: ...
    def document_frequencies(self) -> _np.ndarray: ...
    def document_lengths(self) -> _np.ndarray: ...
    def vocabulary(self) -> list[str]: ...
    def rank_bm25_scores(
        self, terms: _np.ndarray, weights: _np.ndarray, kind: int, k1: float, b: float, delta: float
    ) -> _np.ndarray: ...
    def set_params(self, method: str, k1: float, b: float, delta: float) -> None: ...
    def stats(self) -> dict[str, _Any]: ...
    def save(self, path: str, analyzer_json: str) -> None: ...
    def enable_positions(self) -> None: ...
    def postings(self, term: str) -> tuple[_np.ndarray, _np.ndarray]: ...
    @property
    def has_positions(self) -> bool: ...
    def positions_bytes(self) -> int: ...
    def search_phrases(
        self,
        query: str,
        phrases: list[tuple[list[str], int]],
        k: int,
        allowed: BM25AllowedSet | None = None,
    ) -> tuple[_np.ndarray, _np.ndarray]: ...
    def phrase_score(
        self, query: str, phrases: list[tuple[list[str], int]], doc_id: int | str
    ) -> tuple[float, list[float]]: ...
    @staticmethod
    def read_analyzer_json(path: str) -> str: ...
    @staticmethod
    def load(path: str, mmap: bool, analyzer: Analyzer) -> BM25Core: ...
    @property
    def analyzer(self) -> Analyzer: ...

# --- dense ---

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
    subset: _NDArray[_i64] | None = None,
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
    subset: _NDArray[_i64] | None = None,
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

# --- dense: IVF ---

def ivf_train(
    X: _NDArray[_f32], nlist: int, metric: str, iters: int = 10, seed: int = 1234, threads: int = 0
) -> tuple[_NDArray[_f32], float, int]: ...
def ivf_assign(
    X: _NDArray[_f32], centroids: _NDArray[_f32], metric: str, threads: int = 0
) -> _NDArray[_i64]: ...
def ivf_search(
    centroids: _NDArray[_f32],
    starts: _NDArray[_i64],
    lens: _NDArray[_i64],
    data: _NDArray,
    storage: str,
    scales: _NDArray[_f32] | None,
    sqnorms: _NDArray[_f32] | None,
    exact: _NDArray[_f32] | None,
    q: _NDArray[_f32],
    k: int,
    nprobe: int,
    rerank: int,
    metric: str,
    allowed: _NDArray[_u8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[_NDArray[_i64], _NDArray[_f32]]: ...
def ivf_search_batch(
    centroids: _NDArray[_f32],
    starts: _NDArray[_i64],
    lens: _NDArray[_i64],
    data: _NDArray,
    storage: str,
    scales: _NDArray[_f32] | None,
    sqnorms: _NDArray[_f32] | None,
    exact: _NDArray[_f32] | None,
    Q: _NDArray[_f32],
    k: int,
    nprobe: int,
    rerank: int,
    metric: str,
    allowed: _NDArray[_u8] | None = None,
    threshold: float | None = None,
    threads: int = 0,
) -> tuple[_NDArray[_i64], _NDArray[_f32], _NDArray[_i64]]: ...

# --- dense: product quantisation ---

def pq_train(
    X: _NDArray[_f32], m: int, bits: int, iters: int = 10, seed: int = 1234, threads: int = 0
) -> _NDArray[_f32]: ...
def pq_encode(X: _NDArray[_f32], codewords: _NDArray[_f32], threads: int = 0) -> _NDArray[_u8]: ...
def pq4_pack(codes: _NDArray[_u8]) -> _NDArray[_u8]: ...
def pq4_scan(blocks: _NDArray[_u8], n: int, lut: _NDArray[_f32]) -> tuple[_NDArray[_u16], float, float]: ...
def pq8_scan(codes: _NDArray[_u8], lut: _NDArray[_f32]) -> _NDArray[_f32]: ...
def ivf_pq_search(
    centroids: _NDArray[_f32],
    codewords: _NDArray[_f32],
    blocks: _NDArray[_u8],
    row0: _NDArray[_i64],
    lens: _NDArray[_i64],
    pos: _NDArray[_i64] | None,
    exact: _NDArray[_f32] | _NDArray[_f16],
    Q: _NDArray[_f32],
    k: int,
    nprobe: int,
    rerank: int,
    threads: int = 0,
    start: _NDArray[_i64] | None = None,
    allowed: _NDArray[_u8] | None = None,
    metric: str = "ip",
    coarse: CoarseCentroids | None = None,
) -> tuple[_NDArray[_i64], _NDArray[_f32]]: ...

class CoarseCentroids(metaclass=_Pybind11Type):
    """The int8 form of IVF centroids (coarse_centroids); constructing one raises."""
    def __init__(self, *args: _Any, **kwargs: _Any) -> None: ...
    @property
    def nlist(self) -> int: ...
    @property
    def dim(self) -> int: ...

def coarse_centroids(centroids: _NDArray[_f32]) -> CoarseCentroids: ...
def rabitq_rotation(d: int, seed: int = 1234) -> _NDArray[_f32]: ...
def rabitq_encode(
    residuals: _NDArray[_f32], rotation: _NDArray[_f32], threads: int = 0
) -> tuple[_NDArray[_u64], _NDArray[_f32], _NDArray[_f32]]: ...
def ivf_rabitq_search(
    centroids: _NDArray[_f32],
    rotation: _NDArray[_f32],
    rot_centroids: _NDArray[_f32],
    bits: _NDArray[_u64],
    norm: _NDArray[_f32],
    ipq: _NDArray[_f32],
    cdot: _NDArray[_f32],
    start: _NDArray[_i64],
    lens: _NDArray[_i64],
    exact: _NDArray[_f32],
    Q: _NDArray[_f32],
    k: int,
    nprobe: int,
    rerank: int,
    threads: int = 0,
    allowed: _NDArray[_u8] | None = None,
    coarse: CoarseCentroids | None = None,
) -> tuple[_NDArray[_i64], _NDArray[_f32], _NDArray[_i64]]: ...
def rabitq_scan(codes: _NDArray[_u64], planes: _NDArray[_u64]) -> tuple[_NDArray[_u32], _NDArray[_u32]]: ...
def rabitq_kernel_name() -> str: ...
def pq4_kernel_name() -> str: ...

# --- dense: HNSW ---

class ReaderWriterLock(metaclass=_Pybind11Type):
    def __init__(self) -> None: ...
    def acquire_read(self) -> None: ...
    def release_read(self) -> None: ...
    def acquire_write(self) -> None: ...
    def release_write(self) -> None: ...

def hnsw_check_graph(graph: bytes | bytearray | memoryview | _np.ndarray, dim: int) -> dict[str, _Any]: ...
def hnsw_finish_single(
    lock: ReaderWriterLock,
    labels: _np.ndarray,
    dist: _np.ndarray,
    q: _NDArray[_f32],
    metric: int,
    threshold: float | None,
    n_labels: int,
    label_map: _NDArray[_i64] | None,
) -> tuple[_NDArray[_i64], _NDArray[_f32]]: ...

# --- fusion ---

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
class SparseImpactIndex(metaclass=_Pybind11Type):
    def __init__(self, dim: int, scale: float, exact: bool = False) -> None: ...
    @property
    def exact(self) -> bool: ...
    @property
    def forward_bytes(self) -> int: ...
    @property
    def dim(self) -> int: ...
    @property
    def scale(self) -> float: ...
    @property
    def num_docs(self) -> int: ...
    @property
    def dense_column_bytes(self) -> int: ...
    @property
    def num_dense_columns(self) -> int: ...
    @property
    def num_postings(self) -> int: ...
    @property
    def num_segments(self) -> int: ...
    @property
    def num_live(self) -> int: ...
    @property
    def generation(self) -> int: ...
    def add(self, indptr: _np.ndarray, indices: _np.ndarray, values: _np.ndarray) -> None: ...
    def remove(self, docs: _NDArray[_i64]) -> None: ...
    def search_batch(
        self,
        indptr: _np.ndarray,
        indices: _np.ndarray,
        values: _np.ndarray,
        k: int,
        n_threads: int = 0,
        algorithm: str = "auto",
        allowed: _NDArray[_u8] | None = None,
        generation: int = -1,
        query_cut: int = 0,
    ) -> tuple[_np.ndarray, _np.ndarray]: ...
    def score_all(self, indices: _np.ndarray, values: _np.ndarray) -> _np.ndarray: ...
    def weights(self, terms: _np.ndarray, doc: int) -> _np.ndarray: ...
    def export_arrays(self) -> tuple[_np.ndarray, _np.ndarray, _np.ndarray]: ...
    def install(
        self, num_docs: int, offsets: _np.ndarray, docs: _np.ndarray, stored: _np.ndarray
    ) -> None: ...
    def export_forward(self) -> tuple[_np.ndarray, _np.ndarray, _np.ndarray]: ...
    def install_forward(self, indptr: _np.ndarray, terms: _np.ndarray, values: _np.ndarray) -> None: ...

# ----- metadata (payload) index (bind_metadata.cpp)

class IdBitmap(metaclass=_Pybind11Type):
    """A bitmap over int ids (bit i: id i) in pages shared with the MetadataSelection it came from;
    the indexes compile it into their allowed sets. Read-only."""
    def __init__(self, *args: _Any, **kwargs: _Any) -> None: ...
    def __len__(self) -> int: ...
    def words(self) -> _NDArray[_u64]: ...
    def rows(self, first: int, n: int) -> _NDArray[_i64]: ...
    def mask(self, first: int, n: int) -> _NDArray[_u8]: ...
    def count(self, first: int, n: int) -> int: ...

class MetadataSelection(metaclass=_Pybind11Type):
    """A filter compiled by MetadataIndex.compile: its tree and the chunks it allowed at one index
    generation. Made by MetadataIndex only; MetadataIndex.refresh brings it up to date."""
    def __init__(self, *args: _Any, **kwargs: _Any) -> None: ...
    def __len__(self) -> int: ...
    @property
    def generation(self) -> int: ...

class MetadataIndex(metaclass=_Pybind11Type):
    """Metadata (payload) index: chunk ids by field value, for Retriever filters."""
    def __init__(self) -> None: ...
    def compile(self, tree: tuple[_Any, ...]) -> MetadataSelection: ...
    def refresh(self, selection: MetadataSelection) -> MetadataSelection: ...
    def selection_ids(self, selection: MetadataSelection) -> _NDArray[_i64]: ...
    def id_words(self, selection: MetadataSelection) -> IdBitmap | None: ...
    @property
    def generation(self) -> int: ...
    @property
    def kinds_version(self) -> int: ...
    def add(
        self, chunk_ids: _NDArray[_i64], metadata: list[dict[str, _Any] | None], extra: dict[str, list[_Any]]
    ) -> None: ...
    def remove(self, chunk_ids: _NDArray[_i64]) -> int: ...
    def select(self, tree: tuple[_Any, ...]) -> _NDArray[_i64]: ...
    def live_ids(self) -> _NDArray[_i64]: ...
    def kinds(self, field: str) -> int: ...
    def fields(self) -> list[str]: ...
    def __len__(self) -> int: ...
    def dump(self) -> bytes: ...
    @staticmethod
    def load(data: bytes) -> MetadataIndex: ...

# ----- passage columns of the document store (bind_passages.cpp)

class PassageColumnsView(metaclass=_Pybind11Type):
    """A read-only view of the passage columns (arrays checked once, kept alive)."""
    def __init__(
        self,
        arena: _NDArray[_u8],
        chunks: _NDArray[_i64],
        docs: _NDArray[_i64],
        keys: _NDArray[_i64],
        slots: _NDArray[_i64],
        cls: type,
        fields: tuple[_Any, ...],
        empty: _Any,
        metadata_of: _Callable[[str, str], tuple[_Any, str]],
        n_keys: int = ...,
    ) -> None: ...
    def set_keys(self, n: int) -> None: ...
    def rows(self, ids: _NDArray[_i64]) -> list[tuple[int, str, str, str, int, int, str, str]]: ...
    def passages(
        self,
        ids: _NDArray[_i64],
        fused: list[float] | _np.ndarray,
        stage_scores: _np.ndarray,
        stage: str,
        rank_views: tuple[_Any, ...],
        highlights: object,
        texts: list[str] | None = None,
    ) -> tuple[_Any, ...]: ...
    def rows_json(
        self, ids: _NDArray[_i64], fused: list[float] | _np.ndarray, stage_scores: _np.ndarray, stage: str
    ) -> bytes | None: ...

def slot_filler(cls: type, fields: tuple[_Any, ...], untrack: bool = False) -> _Callable[..., _Any]: ...
def json_row_maker(
    cls: type, fields: tuple[_Any, ...], names: tuple[str, ...], text: bool = False
) -> _Callable[..., _Any]: ...

# ----- WordPiece token counter for chunking (bind_text.cpp)

class WordPieceCounter(metaclass=_Pybind11Type):
    """BERT WordPiece token counter with the token offsets of HuggingFace ``tokenizers``."""
    def __init__(
        self,
        vocab: list[str],
        unk_token: str = "[UNK]",
        continuing_subword_prefix: str = "##",
        max_input_chars_per_word: int = 100,
        clean_text: bool = True,
        handle_chinese_chars: bool = True,
        strip_accents: bool = True,
        lowercase: bool = True,
        added_tokens: list[str] = [],
    ) -> None: ...
    def count(self, texts: _Sequence[str]) -> _NDArray[_i64]: ...
    def count_with_starts(
        self, texts: _Sequence[str], over: int
    ) -> tuple[_NDArray[_i64], list[_NDArray[_i64] | None]]: ...
    def token_starts(self, text: str) -> _NDArray[_i64] | None: ...
