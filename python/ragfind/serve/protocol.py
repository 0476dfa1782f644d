"""uvicorn's httptools protocol with each response's head and body sent in one socket write.

uvicorn writes a response's status line and headers as soon as the app sends
``http.response.start``, and the body on ``http.response.body``: two ``send`` calls per answer,
each of which may wake the client (on loopback the send runs the receiver's TCP path). Here the
head is held back and joined to the first body write, so a short answer costs one ``send``
(bench/serve.md: 7-14 µs less system time per answer). Nothing else changes: parsing,
keep-alive, pipelining, flow control, timeouts and errors are uvicorn's own code.

A held head never waits past the current turn of the event loop: it goes out with the next
write, before the transport closes, when the response completes (a ``HEAD`` answer has no
body), or at the latest from a callback scheduled when it was held (an app that sends its head
and then waits before its body). ``100 Continue`` goes out at once.

Used by ``ragfind serve`` (``uvicorn.run(..., http=HeadJoiningProtocol)``); without httptools
uvicorn's h11 protocol is used unchanged (:func:`http_protocol`).
"""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["HeadJoiningProtocol", "HeldHeadTransport", "http_protocol"]

_HEAD = b"HTTP/1.1 "
_CONTINUE = b"HTTP/1.1 1"  # an interim answer (100 Continue) is never held


class HeldHeadTransport:
    """A transport that holds back a response head (a write starting ``HTTP/1.1 ``) until the
    next write, a close, :meth:`flush` or the next turn of the loop; every other call passes
    through to the real transport."""

    __slots__ = ("_transport", "_loop", "_held", "_scheduled")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: bytes | None = None
        self._scheduled = False

    def write(self, data: bytes) -> None:
        held = self._held
        if held is not None:
            self._held = None
            self._transport.write(held + data)
        elif type(data) is bytes and data.startswith(_HEAD) and not data.startswith(_CONTINUE):
            # (uvicorn joins every head into bytes; a body may be any buffer, never held)
            self._held = data
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon(self._flush_later)
        else:
            self._transport.write(data)

    def _flush_later(self) -> None:
        self._scheduled = False
        self.flush()

    def flush(self) -> None:
        """Writes a held head now."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():  # the peer left: nobody to write to
                self._transport.write(held)

    def writelines(self, lines: Any) -> None:
        self.write(b"".join(lines))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        self.flush()
        self._transport.write_eof()

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + (len(self._held) if self._held else 0)

    def __getattr__(self, name: str) -> Any:  # abort, get_extra_info, pause_reading, ...
        return getattr(self._transport, name)


def _base() -> type:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # the serve extra

    return HttpToolsProtocol


try:
    _Base: Any = _base()
except ImportError:  # no httptools: uvicorn serves with h11 (see http_protocol)
    _Base = None


if _Base is not None:

    class HeadJoiningProtocol(_Base):
        """uvicorn's ``HttpToolsProtocol`` over a :class:`HeldHeadTransport`."""

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(HeldHeadTransport(transport, self.loop))  # type: ignore[arg-type]

        def on_response_complete(self) -> None:
            self.transport.flush()  # type: ignore[attr-defined]  # a HEAD answer: no body write
            super().on_response_complete()

else:  # pragma: no cover - the serve extra installs httptools
    HeadJoiningProtocol = None  # type: ignore[assignment,misc]


def http_protocol() -> Any:
    """What ``ragfind serve`` passes as uvicorn's ``http``: :class:`HeadJoiningProtocol`, or
    ``"auto"`` (uvicorn's choice, h11) without httptools."""
    return HeadJoiningProtocol if HeadJoiningProtocol is not None else "auto"
