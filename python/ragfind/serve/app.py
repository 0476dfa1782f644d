"""The ASGI app (Starlette): JSON endpoints over a :class:`~ragfind.serve.service.Service`, the
page at ``/`` and its static files.

Endpoints: ``POST /search``, ``POST /explain``, ``POST /documents``, ``GET|DELETE
/documents/{id}``, ``GET /info``, ``GET /health``, ``GET /metrics``. Errors are JSON
``{"error": message, "status": code, "field"?: name}``.
"""

from __future__ import annotations

import hmac
import json
import os
import time
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ragfind.serve.admission import Gate, Overloaded
from ragfind.serve.config import ServeConfig
from ragfind.serve.service import ApiError, Service, load_retriever

try:  # the JSON codec of the serve extra: encoding ten passages took a fifth of a request
    import orjson
except ImportError:  # pragma: no cover - the stdlib codec, slower but the same JSON
    orjson = None

__all__ = ["create_app", "load_retriever", "STATIC"]

STATIC = Path(__file__).parent / "static"


class FastJSONResponse(JSONResponse):
    """JSONResponse through orjson when installed (NaN and infinities become null either way)."""

    def render(self, content: Any) -> bytes:
        if orjson is not None:
            try:
                return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
            except TypeError:
                pass  # a type orjson does not know: the stdlib codec names it
        return super().render(content)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body, refused with 413 as soon as it is longer than ``limit`` bytes."""
    length = request.headers.get("content-length")
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise ApiError(400, f"Content-Length {length!r} is not an integer") from None
        if n > limit:
            raise ApiError(413, f"the body is {n} bytes; the limit is {limit}")
    buf = bytearray()
    async for chunk in request.stream():
        buf += chunk
        if len(buf) > limit:
            raise ApiError(413, f"the body is over the limit of {limit} bytes")
    if not buf:
        raise ApiError(400, "the body is empty; expected a JSON object")
    return parse_json(bytes(buf))


def parse_json(data: bytes) -> Any:
    """The parsed body, or a 400 naming the problem."""
    if orjson is not None:
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError:
            pass  # the stdlib parser below says what is wrong in plainer words
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ApiError(400, f"the body is not UTF-8: {exc}") from None
    except ValueError as exc:
        raise ApiError(400, f"invalid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid JSON: nested too deeply") from None


def create_app(
    retriever: Any = None,
    *,
    folder: str | os.PathLike | None = None,
    config: ServeConfig | None = None,
    encoder: Any = None,
    service: Service | None = None,
    follower: Any = None,
) -> Starlette:
    """The ASGI app over a retriever.

    Args:
        retriever: a loaded :class:`ragfind.Retriever`; None: loaded from ``folder``.
        folder: the retriever's folder: writes are logged there (durable before they are
            acknowledged) and folded into it by atomic saves. Without one, writes get 405.
        config: limits, the API key and the queue (:class:`ServeConfig`).
        encoder: the query encoder when loading ``folder`` (default: the saved reference).
        follower: a :class:`ragfind.serve.workers.Follower`: this app is one of several worker
            processes; it forwards writes to the writer process and follows its write log.

    Replays any write log left in ``folder`` by a crash before returning. Call
    ``app.state.service.close()`` (done at ASGI shutdown) to fold the log into the folder.
    """
    config = config or ServeConfig()
    if service is None:
        if retriever is None:
            if folder is None:
                raise ValueError("create_app needs a retriever or a folder")
            retriever = load_retriever(folder, encoder)
        service = Service(retriever, folder, config)
    key = config.api_key.encode() if config.api_key else None
    metrics = service.metrics
    gate = Gate(
        config.threads,
        config.queue_depth,
        config.queue_wait_ms / 1e3,
        config.inline_ms / 1e3,
        on_shed=metrics.shed,
    )

    def authorized(request: Request) -> bool:
        if key is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)

    def search_kind(body: Any) -> Any:
        # Searches that cost alike: the same stages and rerank choice.
        if not isinstance(body, dict):
            return None
        stages = body.get("stages")
        return ("/search", tuple(stages) if isinstance(stages, list) else stages, body.get("rerank"))

    def endpoint(
        route: str, handler, *, auth: bool = True, body: bool = False, queued: bool = True, kind=None
    ):
        created = 201 if route == "/documents" else 200

        async def run(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if auth and not authorized(request):
                    raise ApiError(401, "missing or wrong API key; send 'Authorization: Bearer <key>'")
                if queued:
                    gate.check(route)
                args: list = []
                if body:
                    args.append(await read_json(request, config.max_body_bytes))
                if "doc_id" in request.path_params:
                    args.append(request.path_params["doc_id"])
                if not queued:
                    out = handler(*args)
                else:
                    if follower is not None:
                        await follower.sync()  # every acknowledged write is seen, whoever took it
                    out = await gate.call(route, kind(*args) if kind else None, handler, *args)
                if isinstance(out, Response):
                    response = out
                else:
                    response = FastJSONResponse(out, status_code=created if request.method == "POST" else 200)
            except Overloaded as exc:
                response = FastJSONResponse(exc.body(), status_code=exc.status)
                response.headers["Retry-After"] = str(exc.retry_after)
            except ApiError as exc:
                response = FastJSONResponse(exc.body(), status_code=exc.status)
                if exc.status == 401:
                    response.headers["WWW-Authenticate"] = "Bearer"
            except OSError as exc:
                response = FastJSONResponse(
                    {"error": f"the write could not be made durable: {exc}", "status": 503}, status_code=503
                )
            except Exception as exc:  # a bug: name it, never a bare 500 page
                response = FastJSONResponse(
                    {"error": f"internal error: {type(exc).__name__}: {exc}", "status": 500}, status_code=500
                )
            metrics.request(route, request.method, response.status_code, time.perf_counter() - t0)
            return response

        return run

    def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    def metrics_page() -> Response:
        extra = {
            "ragfind_queue_admitted": (
                "gauge",
                "Requests admitted now (running and waiting).",
                gate.admitted,
            ),
            "ragfind_queue_running": ("gauge", "Requests running on a thread or the loop now.", gate.running),
            "ragfind_search_inline_total": (
                "counter",
                "Searches answered on the event loop (no thread hop).",
                gate.inline_runs,
            ),
        }
        return PlainTextResponse(service.metrics_text(extra), media_type="text/plain; version=0.0.4")

    def info() -> dict:
        out = service.info()
        if follower is not None:
            out["writable"] = follower.writable
        return out

    def write(route: str, method: str, local):
        if follower is None:
            return endpoint(route, local, body=method == "POST")

        async def forward(request: Request) -> Response:
            t0 = time.perf_counter()
            try:
                if not authorized(request):
                    raise ApiError(401, "missing or wrong API key; send 'Authorization: Bearer <key>'")
                data = b""
                if method == "POST":
                    parse = await read_json(request, config.max_body_bytes)
                    data = json.dumps(parse).encode() if orjson is None else orjson.dumps(parse)
                response = await follower.forward(request, data)
            except ApiError as exc:
                response = FastJSONResponse(exc.body(), status_code=exc.status)
                if exc.status == 401:
                    response.headers["WWW-Authenticate"] = "Bearer"
            metrics.request(route, method, response.status_code, time.perf_counter() - t0)
            return response

        return forward

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/health", endpoint("/health", service.health, auth=False, queued=False), methods=["GET"]),
        Route("/metrics", endpoint("/metrics", metrics_page, queued=False), methods=["GET"]),
        Route("/info", endpoint("/info", info, queued=False), methods=["GET"]),
        Route("/search", endpoint("/search", service.search, body=True, kind=search_kind), methods=["POST"]),
        Route("/explain", endpoint("/explain", service.explain, body=True), methods=["POST"]),
        Route("/documents", write("/documents", "POST", service.add), methods=["POST"]),
        Route("/documents/{doc_id:path}", endpoint("/documents/{id}", service.get), methods=["GET"]),
        Route(
            "/documents/{doc_id:path}", write("/documents/{id}", "DELETE", service.delete), methods=["DELETE"]
        ),
        Mount("/static", app=StaticFiles(directory=STATIC), name="static"),
    ]

    async def not_found(request: Request, exc: Exception) -> Response:
        code = getattr(exc, "status_code", 404)
        msg = "no such endpoint" if code == 404 else "method not allowed for this endpoint"
        return FastJSONResponse(
            {"error": f"{msg}: {request.method} {request.url.path}", "status": code}, status_code=code
        )

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(app):
        yield
        if follower is not None:
            await follower.aclose()
        await run_in_threadpool(service.close)
        gate.close()

    app = Starlette(routes=routes, exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan)
    app.state.service = service
    app.state.gate = gate
    return app
