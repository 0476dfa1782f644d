"""``ragfind serve --workers N``: N worker processes answer on one listening socket, as with
uvicorn's or gunicorn's ``--workers``, over one folder that a single writer process owns.

- The **writer** is the process started by the command. It replays the write log, owns it and
  the folder's checkpoints, listens on a private Unix socket for the writes the workers forward,
  starts the workers, restarts any that dies and stops them before its own shutdown folds the
  log. It answers no public request.
- Each **worker** loads the folder by itself, answers searches, explanations, document reads,
  ``/health`` and ``/metrics``, and forwards ``POST /documents`` and ``DELETE /documents/{id}``
  to the writer, which makes them durable before it answers, exactly as a single process does.
- A worker **follows** the writer through the folder: before each request it compares
  two ``stat`` results (the manifest and the write log) with what it last applied, and on a
  change replays the new log records (or reloads the folder after a checkpoint replaced it). A
  write acknowledged by any worker is therefore seen by every request that starts after the
  acknowledgement, whichever worker takes it.
- A worker exits when the writer does (it holds the read end of a pipe the writer never writes):
  a ``kill -9`` of the command leaves no process holding the port.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ragfind.persist.wal import read_records
from ragfind.serve.service import LOG_FILE, Service, load_retriever, replay, settle_heap

__all__ = ["Follower", "Workers", "watch_parent"]

log = logging.getLogger("ragfind.serve")

MANIFEST = "manifest.json"


class Follower:
    """A worker's view of the writer: forwards writes to it and applies what it logged.

    Args:
        service: the worker's :class:`Service` without a folder; its ``retriever`` is loaded
            here and replaced after each checkpoint.
        folder: the folder the writer owns.
        writer_socket: the writer's Unix socket.
        encoder: the query encoder to reload the folder with (None: the saved reference).
    """

    writable = True

    def __init__(self, service: Service, folder: str | os.PathLike, writer_socket: str, encoder: Any = None):
        self.service = service
        self.folder = Path(folder)
        self.log_path = self.folder / LOG_FILE
        # Every request stats both: plain strings, not a Path join each time.
        self._manifest_str = os.fspath(self.folder / MANIFEST)
        self._log_str = os.fspath(self.log_path)
        self.writer_socket = writer_socket
        self.encoder = encoder
        self._lock = threading.Lock()
        self._client: Any = None
        self.applied = 0  # records of the current log already applied
        self.seen: tuple = (None, None)  # the (manifest, log) state the retriever reflects
        self._catch_up_locked(attempts=3000)
        if self.service.retriever is None:
            raise RuntimeError(f"could not load {str(self.folder)!r}")

    def _state(self) -> tuple:
        try:
            manifest = os.stat(self._manifest_str).st_ino
        except FileNotFoundError:
            manifest = None
        try:
            st = os.stat(self._log_str)
            wal = (st.st_ino, st.st_size)
        except FileNotFoundError:
            wal = None
        return manifest, wal

    async def sync(self) -> None:
        """Applies whatever the writer logged since the last call (two stat calls when nothing)."""
        if self._state() != self.seen:
            await asyncio.get_running_loop().run_in_executor(None, self.catch_up)

    def catch_up(self) -> None:
        with self._lock:
            self._catch_up_locked()

    def _catch_up_locked(self, attempts: int = 20) -> None:
        for _ in range(attempts):  # a checkpoint racing the read: read again
            state = self._state()
            if state == self.seen:
                return
            if state[0] is None:  # the folder is being swapped: retry shortly
                time.sleep(0.01)
                continue
            retriever, reloaded = self.service.retriever, False
            if state[0] != self.seen[0]:
                try:
                    retriever, reloaded = load_retriever(self.folder, self.encoder), True
                    self.service.size_caches(retriever)
                except Exception as exc:  # mid-swap or mid-save: the next request retries
                    log.warning("worker %d: reloading %s failed, retrying: %s", os.getpid(), self.folder, exc)
                    time.sleep(0.01)
                    continue
                self.applied = 0
            records = read_records(self.log_path)[0]
            if len(records) < self.applied:  # the writer cut back a record it could not make durable
                self.seen = (None, None)
                continue
            replay(retriever, records[self.applied :])
            self.applied = len(records)
            if reloaded:
                # Published once it holds the logged writes too (requests past their sync read it).
                self.service.retriever = retriever
                if self.service.config.freeze_gc:
                    settle_heap()  # the old retriever can go, the new one stays
            if self._state()[0] == state[0]:
                self.seen = state
                return
        log.warning("worker %d: could not catch up with the writer; will retry", os.getpid())

    async def forward(self, request: Any, body: bytes) -> Any:
        """The writer's answer to this write; once it is acknowledged, this worker has applied it."""
        import httpx  # the serve extra
        from starlette.responses import Response

        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=httpx.AsyncHTTPTransport(uds=self.writer_socket),
                base_url="http://writer",
                timeout=120,
            )
        headers = {"content-type": "application/json"}
        if "authorization" in request.headers:
            headers["authorization"] = request.headers["authorization"]
        raw = request.scope.get("raw_path") or request.url.path.encode()
        try:
            resp = await self._client.request(
                request.method, raw.decode("latin-1"), content=body or None, headers=headers
            )
        except httpx.TransportError as exc:
            return Response(
                b'{"error":"the writer process is not answering: %s","status":503}'
                % str(exc).replace('"', "'").encode(),
                status_code=503,
                media_type="application/json",
                headers={"Retry-After": "1"},
            )
        if resp.status_code < 300:
            await self.sync()
        keep = {k: v for k, v in resp.headers.items() if k in ("retry-after", "www-authenticate")}
        return Response(
            resp.content, status_code=resp.status_code, media_type="application/json", headers=keep
        )

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def watch_parent(fd: int) -> None:
    """Exits this process once the pipe ``fd``'s write end closes (the writer has died)."""

    def wait() -> None:
        try:
            while os.read(fd, 1):
                pass
        except OSError:
            pass
        os._exit(0)

    threading.Thread(target=wait, name="ragfind-serve-parent", daemon=True).start()


class Workers:
    """The worker processes of the writer: started, restarted when they die, stopped.

    Args:
        n: how many.
        args: the ``ragfind serve`` arguments of each worker (the folder and its flags).
        sock: the listening socket they share.
        env: their environment.
    """

    def __init__(self, n: int, args: list, sock: Any, env: dict) -> None:
        self.n = n
        self.args = args
        self.sock = sock
        self.env = env
        self.procs: list = [None] * n
        self.stopping = threading.Event()
        self._read, self._write = os.pipe()
        self._monitor: threading.Thread | None = None

    def _spawn(self, i: int) -> None:
        fds = (self.sock.fileno(), self._read)
        cmd = [sys.executable, "-m", "ragfind", "serve", *self.args, "--worker-of", f"{fds[0]},{fds[1]}"]
        self.procs[i] = subprocess.Popen(cmd, env=self.env, pass_fds=fds)

    def start(self) -> None:
        for i in range(self.n):
            self._spawn(i)
        self._monitor = threading.Thread(target=self._watch, name="ragfind-serve-workers", daemon=True)
        self._monitor.start()

    def _watch(self) -> None:
        while not self.stopping.wait(0.5):
            for i, p in enumerate(self.procs):
                if p is not None and p.poll() is not None and not self.stopping.is_set():
                    log.warning("worker %d exited with %s; starting another", p.pid, p.returncode)
                    self._spawn(i)

    def stop(self, timeout: float = 15) -> None:
        """SIGTERM to each worker (they finish the requests they hold), then SIGKILL past ``timeout``."""
        self.stopping.set()
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        os.close(self._write)
        os.close(self._read)
