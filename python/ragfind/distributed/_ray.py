"""The one place Ray is imported (lazily), with the error that names the extra."""

from __future__ import annotations

from typing import Any


def require_ray() -> Any:
    try:
        import ray  # the ray extra
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            'ragfind.distributed needs Ray; install it with: pip install "ragfind[ray]"'
        ) from exc
    return ray
