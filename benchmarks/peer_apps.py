"""The apps :mod:`benchmarks.peers` serves: one Starlette streaming endpoint, four ways.

``GET /stream?n=N&s=S`` streams ``N`` chunks of ``S`` bytes from an async generator through
Starlette's ``StreamingResponse`` (what FastAPI apps return), as fast as it is consumed:

* ``bare_app``: the endpoint alone;
* ``guarded_app``: ``GuardMiddleware`` around it, the generator wrapped in ``guard_stream``
  (the SDK's realistic setup: per-session and per-stream traffic counted, disconnects watched);
* ``middleware_app``: ``GuardMiddleware`` alone, the generator not wrapped (splits the cost);
* ``basehttp_app``: the same byte counting done the common way, a Starlette
  ``BaseHTTPMiddleware`` that wraps the response's body iterator to count chunks and bytes;
* ``otel_app``: OpenTelemetry's ASGI middleware (``OpenTelemetryMiddleware``) with an SDK
  ``TracerProvider`` and no exporter (spans are made and dropped: the instrumentation's own cost).

A module of its own so that every uvicorn process imports only what it serves:
``python -m uvicorn benchmarks.peer_apps:otel_app`` builds the OpenTelemetry provider, the
others do not need the ``bench`` extra.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llm_guard_sdk import GuardConfig, GuardMiddleware, guard_stream


async def chunks(count: int, size: int) -> AsyncIterator[bytes]:
    """The 'model': ``count`` chunks of ``size`` bytes, as fast as they are consumed."""
    chunk = b"x" * size
    for _ in range(count):
        yield chunk


def _params(request: Request) -> tuple[int, int]:
    return int(request.query_params.get("n", "1000")), int(request.query_params.get("s", "32"))


def make_app(*, guarded_stream: bool = False, middleware: list[Middleware] | None = None
             ) -> Starlette:
    """The streaming endpoint, its generator optionally in ``guard_stream``."""

    async def stream(request: Request) -> Response:
        count, size = _params(request)
        body: AsyncIterator[bytes] = chunks(count, size)
        if guarded_stream:
            body = guard_stream(body, name="bench")
        return StreamingResponse(body, media_type="application/octet-stream")

    return Starlette(routes=[Route("/stream", stream)], middleware=middleware or [])


class ByteCounter(BaseHTTPMiddleware):
    """Counts each response's chunks and bytes by wrapping its body iterator (the peer)."""

    chunks_total = 0
    bytes_total = 0

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        body = response.body_iterator  # type: ignore[attr-defined]

        async def counted() -> AsyncIterator[Any]:
            async for chunk in body:
                ByteCounter.chunks_total += 1
                ByteCounter.bytes_total += len(chunk)
                yield chunk

        response.body_iterator = counted()  # type: ignore[attr-defined]
        return response


def _otel(app: Any) -> Any:
    from opentelemetry.instrumentation.asgi import OpenTelemetryMiddleware
    from opentelemetry.sdk.trace import TracerProvider

    return OpenTelemetryMiddleware(app, tracer_provider=TracerProvider())


def __getattr__(name: str) -> Any:
    """Build each app on first use, so a server builds only its own (PEP 562)."""
    if name == "bare_app":
        app: Any = make_app()
    elif name == "guarded_app":
        app = GuardMiddleware(make_app(guarded_stream=True),
                              config=GuardConfig.defaults(sources=("process",)))
    elif name == "middleware_app":
        app = GuardMiddleware(make_app(), config=GuardConfig.defaults(sources=("process",)))
    elif name == "basehttp_app":
        app = make_app(middleware=[Middleware(ByteCounter)])
    elif name == "otel_app":
        app = _otel(make_app())
    else:
        raise AttributeError(name)
    globals()[name] = app
    return app
