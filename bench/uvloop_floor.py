"""A one-core HTTP/1.1 keep-alive server with nothing in it: a bare uvloop protocol answering
every request (its body, if any, read and dropped) with ``/health``'s bytes after ``--busy-us``
of busy work. It shows what the event
loop and loopback alone do to latency under wrk at a given CPU per request (bench/serve.md).

Run: ``python bench/uvloop_floor.py --port 8798 --busy-us 90 &`` then
``wrk -t2 -c128 -d5s --latency http://127.0.0.1:8798/``.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import uvloop

BODY = b'{"status":"ok"}'
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(BODY),
    BODY,
)


def protocol(busy_s: float) -> type:
    class Floor(asyncio.Protocol):
        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
            self.transport, self.buf = transport, b""

        def data_received(self, data: bytes) -> None:
            self.buf += data
            while b"\r\n\r\n" in self.buf:
                head, _, rest = self.buf.partition(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                if len(rest) < length:  # the body is still on its way
                    return
                self.buf = rest[length:]
                t = time.perf_counter()
                while time.perf_counter() - t < busy_s:
                    pass
                self.transport.write(RESPONSE)

    return Floor


async def serve(port: int, busy_s: float) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_server(protocol(busy_s), "127.0.0.1", port, backlog=2048)
    await asyncio.Event().wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8798)
    ap.add_argument("--busy-us", type=float, default=0.0, help="busy work per request (default 0)")
    args = ap.parse_args()
    uvloop.run(serve(args.port, args.busy_us * 1e-6))


if __name__ == "__main__":
    main()
