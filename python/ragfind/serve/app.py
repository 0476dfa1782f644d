"""The ASGI app (Starlette): JSON endpoints over a :class:`~ragfind.serve.service.Service`, the
page at ``/`` and its static files.

Endpoints: ``POST /search``, ``POST /explain``, ``POST /documents``, ``GET|DELETE
/documents/{id}``, ``GET /info``, ``GET /health``, ``GET /metrics``. Errors are JSON
``{"error": message, "status": code, "field"?: name}``. ``/search`` adds each result's
``highlights`` only when the body asks (``"highlight": true``), as Elasticsearch and Solr do.
"""

from __future__ import annotations

import hmac
import json
import os
import time
from contextlib import asynccontextmanager
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
from ragfind.serve.service import ApiError, Service, load_retriever, render_json, settle_heap

try:  # the serve extra's JSON parser (answers are rendered by the service module)
    import orjson
except ImportError:  # pragma: no cover - the stdlib codec, slower but the same JSON
    orjson = None

__all__ = ["create_app", "load_retriever", "STATIC"]

STATIC = Path(__file__).parent / "static"


#: The headers of every JSON answer (content-length is added per answer).
JSON_HEADERS = [(b"content-type", b"application/json")]


class FastJSONResponse(JSONResponse):
    """JSONResponse through :func:`render_json`."""

    def render(self, content: Any) -> bytes:
        return render_json(content)


class AsgiEndpoint:
    """A plain ASGI app as a route's endpoint (Starlette takes a function for a request ->
    response handler)."""

    __slots__ = ("app",)

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)


class ServeApp(Starlette):
    """Starlette, with the routes in :attr:`direct` (``POST /search``) answered before its
    middleware and router: the endpoint catches every error itself, so they add nothing to the
    request that carries the load but their cost. Any other path (or a ``root_path``) is routed
    as usual."""

    direct: dict

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and not scope.get("root_path"):
            app = self.direct.get((scope["method"], scope["path"]))
            if app is not None:
                scope["app"] = self
                await app(scope, receive, send)
                return
        await super().__call__(scope, receive, send)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


async def read_json(request: Request, limit: int) -> Any:
    """The JSON body, refused with 413 as soon as it is longer than ``limit`` bytes."""
    return await read_body_json(request.headers.get("content-length"), request.receive, limit)


async def read_body_json(length: str | None, receive: Any, limit: int) -> Any:
    """:func:`read_json` over the ASGI ``receive`` and the ``Content-Length`` header value."""
    if length is not None:
        try:
            n = int(length)
        except ValueError:
            raise ApiError(400, f"Content-Length {length!r} is not an integer") from None
        if n > limit:
            raise ApiError(413, f"the body is {n} bytes; the limit is {limit}")
    parts: list = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect: nobody is left to answer
            raise ApiError(400, "the client disconnected before the body was complete")
        chunk = message.get("body", b"")
        if chunk:
            parts.append(chunk)
            size += len(chunk)
            if size > limit:
                raise ApiError(413, f"the body is over the limit of {limit} bytes")
        if not message.get("more_body", False):
            break
    if not size:
        raise ApiError(400, "the body is empty; expected a JSON object")
    return parse_json(parts[0] if len(parts) == 1 else b"".join(parts))


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

    def authorized(header: str) -> bool:
        if key is None:
            return True
        scheme, _, token = header.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)

    def search_kind(body: Any) -> Any:
        # Searches that cost alike: the same stages, rerank and highlight choices.
        if not isinstance(body, dict):
            return None
        stages = body.get("stages")
        stages = tuple(stages) if isinstance(stages, list) else stages
        kind = ("/search", stages, body.get("rerank"), body.get("highlight") is True)
        try:
            hash(kind)  # the admission gate keys its timings by it
        except TypeError:
            return None  # an object where a name or flag goes: the service answers 400
        return kind

    def endpoint(
        route: str, handler, *, auth: bool = True, body: bool = False, queued: bool = True, kind=None
    ):
        """A JSON endpoint as a plain ASGI app: the request's few headers read from the scope and
        its body from ``receive``, no Request or Response object (a fifth of a short search's
        cost under Starlette's routing and responses)."""
        created = 201 if route == "/documents" else 200

        async def answer(scope, receive) -> tuple:
            length = None
            authorization = ""
            for name, value in scope["headers"]:
                if name == b"content-length":
                    length = value.decode("latin-1")
                elif name == b"authorization":
                    authorization = value.decode("latin-1")
            if auth and not authorized(authorization):
                raise ApiError(401, "missing or wrong API key; send 'Authorization: Bearer <key>'")
            if queued:
                gate.check(route)
            args: list = []
            if body:
                args.append(await read_body_json(length, receive, config.max_body_bytes))
            params = scope.get("path_params")
            if params and "doc_id" in params:
                args.append(params["doc_id"])
            if follower is not None:
                await follower.sync()  # every acknowledged write is seen, whoever took it
            if not queued:
                return handler(*args)
            return await gate.call(route, kind(*args) if kind else None, handler, *args)

        async def run(scope, receive, send) -> None:
            t0 = time.perf_counter()
            headers = JSON_HEADERS
            try:
                out = await answer(scope, receive)
                if isinstance(out, Response):
                    await out(scope, receive, send)
                    metrics.request(route, scope["method"], out.status_code, time.perf_counter() - t0)
                    return
                status = created if scope["method"] == "POST" else 200
            except Overloaded as exc:
                out, status = exc.body(), exc.status
                headers = [*JSON_HEADERS, (b"retry-after", str(exc.retry_after).encode())]
            except ApiError as exc:
                out, status = exc.body(), exc.status
                if status == 401:
                    headers = [*JSON_HEADERS, (b"www-authenticate", b"Bearer")]
            except OSError as exc:
                out, status = {"error": f"the write could not be made durable: {exc}", "status": 503}, 503
            except Exception as exc:  # a bug: name it, never a bare 500 page
                out = {"error": f"internal error: {type(exc).__name__}: {exc}", "status": 500}
                status = 500
            try:
                data = out if type(out) is bytes else render_json(out)
            except Exception as exc:  # an answer JSON cannot hold: a bug, named
                data, status = render_json({"error": f"internal error: {exc}", "status": 500}), 500
            await send(
                {
                    "type": "http.response.start",
                    "status": status,
                    "headers": [*headers, (b"content-length", str(len(data)).encode())],
                }
            )
            await send({"type": "http.response.body", "body": data})
            metrics.request(route, scope["method"], status, time.perf_counter() - t0)

        return AsgiEndpoint(run)

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
                if not authorized(request.headers.get("authorization", "")):
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

    search = endpoint("/search", service.search_json, body=True, kind=search_kind)
    routes = [
        Route("/", page, methods=["GET"]),
        Route("/health", endpoint("/health", service.health, auth=False, queued=False), methods=["GET"]),
        Route("/metrics", endpoint("/metrics", metrics_page, queued=False), methods=["GET"]),
        Route("/info", endpoint("/info", info, queued=False), methods=["GET"]),
        Route("/search", search, methods=["POST"]),
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

    @asynccontextmanager
    async def lifespan(app):
        if config.freeze_gc:
            settle_heap()  # the server starts: what is loaded now stays
        yield
        if follower is not None:
            await follower.aclose()
        await run_in_threadpool(service.close)
        gate.close()

    app = ServeApp(routes=routes, exception_handlers={404: not_found, 405: not_found}, lifespan=lifespan)
    app.direct = {("POST", "/search"): search}
    app.state.service = service
    app.state.gate = gate
    return app
