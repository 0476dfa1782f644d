"""The service's settings: limits on requests, the API key, where and when writes are folded."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ServeConfig", "DEFAULT_MAX_BODY", "DEFAULT_MAX_K"]

DEFAULT_MAX_BODY = 1 << 20  # 1 MB
DEFAULT_MAX_K = 1000


@dataclass(frozen=True)
class ServeConfig:
    """Settings of :func:`ragfind.serve.create_app`.

    Attributes:
        api_key: when set, every request but ``GET /health`` and the static page needs
            ``Authorization: Bearer <api_key>`` (401 otherwise).
        max_body_bytes: request bodies larger than this get 413 (checked while reading).
        max_k: the largest ``k`` a search may ask for.
        max_documents: the most documents one ``POST /documents`` may carry.
        checkpoint_bytes: when the write log grows past this, the folder is re-saved atomically
            and the log emptied (also done at shutdown and after a replay on start).
        read_only: refuse writes (405); no write log is opened.
        threads: threads running searches, explanations and document reads and writes.
        queue_depth: most such requests admitted at once (running and waiting for a thread);
            past it a request gets 503 with ``Retry-After`` at once.
        queue_wait_ms: longest wait for a thread; a request that waits longer gets 503 with
            ``Retry-After``. ``/health`` and ``/metrics`` never queue.
        inline_ms: searches of a kind (stages, rerank) whose average wall time is under this
            run on the event loop, skipping the hop to a thread (0: always a thread).
        freeze_gc: at startup (and after a worker reloads the folder) move what is loaded out
            of the cycle collector's sight (:func:`gc.freeze`), so that no full collection
            walks the retriever again. It changes the whole process (``gc.get_referrers`` no
            longer sees frozen objects), so ``ragfind serve`` sets it and the default is off.
        cache_size: entries of the retriever's embedding and result caches while served (0:
            none); None keeps the size saved with the folder (1,024 by default).
    """

    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_k: int = DEFAULT_MAX_K
    max_documents: int = 10_000
    checkpoint_bytes: int = 16 << 20
    read_only: bool = False
    threads: int = 8
    queue_depth: int = 256
    queue_wait_ms: float = 2000.0
    inline_ms: float = 1.0
    freeze_gc: bool = False
    cache_size: int | None = None

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_k",
            "max_documents",
            "checkpoint_bytes",
            "threads",
            "queue_depth",
        ):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} = {v!r}; expected a positive int")
        c = self.cache_size
        if c is not None and (isinstance(c, bool) or not isinstance(c, int) or c < 0):
            raise ValueError(f"cache_size = {c!r}; expected an int >= 0 or None")
        for name in ("queue_wait_ms", "inline_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < float("inf"):
                raise ValueError(f"{name} = {v!r}; expected a finite number >= 0")
        if self.queue_wait_ms <= 0:
            raise ValueError(f"queue_wait_ms = {self.queue_wait_ms!r}; expected a number > 0")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("api_key must be a non-empty str or None")
