"""The one server-sent-events parser of the test suite, and a streaming httpx reader on it."""

from __future__ import annotations

import httpx

Event = tuple[str, str]


class SSEParser:
    """Line-by-line SSE parser (the WHATWG rules the tests rely on).

    An event is dispatched at the blank line that ends it, as ``(event, data)`` with multi-line
    data joined by ``\\n``; ``event`` resets to ``message`` after each block. Comment lines
    (``: heartbeat``) come out as ``("comment", text)`` when ``comments`` is true.
    """

    def __init__(self, *, comments: bool = False) -> None:
        self.comments = comments
        self._event = "message"
        self._data: list[str] = []

    def feed_line(self, line: str) -> list[Event]:
        """Events completed by one line (no line terminator)."""
        if line == "":
            return self.flush()
        if line.startswith(":"):
            return [("comment", line[1:].removeprefix(" "))] if self.comments else []
        name, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        return []

    def flush(self) -> list[Event]:
        """Dispatch the pending event, if it has data (also used for an unterminated tail)."""
        out = [(self._event, "\n".join(self._data))] if self._data else []
        self._event, self._data = "message", []
        return out


def sse_events(body: str, *, comments: bool = True) -> list[Event]:
    """``(event, data)`` pairs of a whole SSE body; accepts ``\\n`` and ``\\r\\n``."""
    parser = SSEParser(comments=comments)
    events: list[Event] = []
    for line in body.replace("\r\n", "\n").split("\n"):
        events += parser.feed_line(line)
    return events + parser.flush()


async def read_sse(client: httpx.AsyncClient, url: str, *, drop_after: int | None = None
                   ) -> list[Event]:
    """GET an SSE stream; stop abruptly (closing the connection) after ``drop_after`` events.

    Comments are skipped. Asserts a 200 answer with a ``text/event-stream`` content type.
    """
    parser = SSEParser()
    events: list[Event] = []
    async with client.stream("GET", url) as response:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = response.aiter_lines()
        try:
            async for line in lines:
                events += parser.feed_line(line)
                if drop_after is not None and len(events) >= drop_after:
                    return events  # leaving the block closes the connection mid-stream
        finally:
            await lines.aclose()  # close httpx's generator ourselves, not via the GC
    return events + parser.flush()
