"""Server-Sent Events framing, shared by the examples and the adapters."""

from __future__ import annotations

import json


def sse_event(data: str, *, event: str | None = None) -> str:
    """Frame one SSE event; every line of ``data`` gets its own ``data:`` field."""
    lines = [f"event: {event}"] if event else []
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return "\n".join(lines) + "\n\n"


def sse_json(payload: object, *, event: str | None = None) -> str:
    """Frame a JSON payload as one SSE event."""
    return sse_event(json.dumps(payload, separators=(",", ":")), event=event)


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
