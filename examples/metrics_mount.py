"""The guard's metrics on your own ``/metrics``, beside your app's (FastAPI + prometheus-client).

``uvicorn examples.metrics_mount:app``, then ``curl localhost:8000/metrics``. The guard's
figures are also at ``/llm-guard/metrics`` (with the status route's auth); ``/metrics`` here is
public, as Prometheus scrapes it (and the guard never sheds it: it is an exempt path).

With ``PROMETHEUS_MULTIPROC_DIR`` set (several workers), every worker's values are in that
directory: the ``/metrics`` app reads them all through a ``MultiProcessCollector``.
"""

from __future__ import annotations

import os

from fastapi import FastAPI
from prometheus_client import REGISTRY, CollectorRegistry, Counter, make_asgi_app, multiprocess

from llm_guard_sdk import Guard, GuardConfig
from llm_guard_sdk.adapters.fastapi import install
from llm_guard_sdk.metrics import GuardMetrics

# The guard registers its metrics on the default registry, next to the app's own.
guard = Guard(GuardConfig(), extensions=[GuardMetrics(registry=REGISTRY)])
app = FastAPI()
install(app, guard=guard)
hellos = Counter("myapp_hellos_total", "Greetings served.")


@app.get("/hello")
async def hello() -> dict[str, str]:
    hellos.inc()
    return {"hello": "world"}


def metrics_app() -> object:
    """``make_asgi_app`` on the default registry, or on every worker's files in multiprocess."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return make_asgi_app(registry=registry)
    return make_asgi_app()


app.mount("/metrics", metrics_app())
