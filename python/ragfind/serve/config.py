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
    """

    api_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY
    max_k: int = DEFAULT_MAX_K
    max_documents: int = 10_000
    checkpoint_bytes: int = 16 << 20
    read_only: bool = False

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_k", "max_documents", "checkpoint_bytes"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} = {v!r}; expected a positive int")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key):
            raise ValueError("api_key must be a non-empty str or None")
