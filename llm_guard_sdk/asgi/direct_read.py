"""The awaitable an idle WebSocket's ``receive()`` returns: a direct read without a frame.

An app waiting between prompts holds its ``receive()`` awaitable for hours, and an idle
session's cost is mostly such objects. A coroutine (``async def``) costs ~200 B whatever it
does; :class:`DirectRead` is a small object that implements the coroutine protocol itself
(``send``/``throw``/``close``, so ``await``, ``create_task`` and ``wait_for`` accept it) and
drives, one after the other, the awaitables the connection hands it:

1. while the pump reads, the hand-over that stops it (:meth:`DirectReader.hand_over`);
2. the server's own ``receive()`` (:meth:`DirectReader.begin_direct_read`), whose message the
   connection accounts (:meth:`DirectReader.end_direct_read`);
3. on the client's ``websocket.disconnect``, the session's close
   (:meth:`DirectReader.close_disconnected`), before the message is returned.

When reading directly is not allowed (frames queued, a guarded stream open, another reader)
it drives the connection's inbox read instead (:meth:`DirectReader.queued_receive`). Nothing is
decided before the first ``send``: a ``receive()`` created and awaited later (``create_task``)
sees the connection as it is then.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Coroutine
from typing import Any, Protocol

from llm_guard_sdk.types import Message

_QUEUED, _HAND_OVER, _READ, _CLOSE = range(4)


class DirectReader(Protocol):
    """The connection side of a direct read (``WebSocketConnection``)."""

    disconnect_type: str

    def may_read_directly(self) -> bool: ...  # noqa: D102
    def pump_running(self) -> bool: ...  # noqa: D102
    def hand_over(self) -> Coroutine[Any, Any, None]: ...  # noqa: D102
    def begin_direct_read(self) -> Awaitable[Message]: ...  # noqa: D102
    def end_direct_read(self, message: Message) -> Message: ...  # noqa: D102
    def direct_read_cancelled(self) -> Message | None: ...  # noqa: D102
    def direct_read_failed(self) -> Message: ...  # noqa: D102
    def abandon_direct_read(self) -> None: ...  # noqa: D102
    def close_disconnected(self) -> Coroutine[Any, Any, None]: ...  # noqa: D102
    def queued_receive(self) -> Coroutine[Any, Any, Message]: ...  # noqa: D102


class DirectRead(Coroutine[Any, Any, Message]):
    """One app ``receive()`` call on a WebSocket connection (see the module docstring)."""

    __slots__ = ("_conn", "_inner", "_message", "_phase")

    def __init__(self, conn: DirectReader) -> None:
        self._conn = conn
        self._inner: Any = None  # the iterator being driven; None before the first send
        self._phase = _QUEUED
        self._message: Message | None = None  # the disconnect returned once the close ran

    def __await__(self) -> DirectRead:  # type: ignore[override]  # an iterator, as a coroutine
        return self

    def __next__(self) -> Any:
        return self.send(None)

    def send(self, value: Any) -> Any:
        """Advance: start on the first call, then pass ``value`` to the awaitable driven."""
        if self._inner is None:
            self._plan()
            value = None
        return self._drive(None, value)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        """Raise into the awaitable driven (a cancel of the app's task arrives here)."""
        args = (typ,) if val is None and tb is None else (typ, val, tb)
        if self._inner is None:
            raise typ if val is None else val
        return self._drive(args, None)

    def close(self) -> None:
        """The app's coroutine was closed while awaiting this: stop the awaitable driven."""
        inner, self._inner = self._inner, None
        if self._phase == _READ:
            self._conn.abandon_direct_read()
        close = getattr(inner, "close", None)
        if close is not None:
            close()

    def _plan(self) -> None:
        """Choose what to drive next from the connection's state now."""
        conn = self._conn
        inner: Any
        if not conn.may_read_directly():
            self._phase, inner = _QUEUED, conn.queued_receive()
        elif conn.pump_running():
            self._phase, inner = _HAND_OVER, conn.hand_over()
        else:
            self._phase, inner = _READ, conn.begin_direct_read()
            if not isinstance(inner, Coroutine):
                inner = inner.__await__()
        self._inner = inner

    def _drive(self, throw_args: tuple[Any, ...] | None, value: Any) -> Any:
        while True:
            inner = self._inner
            try:
                if throw_args is not None:
                    return inner.throw(*throw_args)
                if value is None and not hasattr(inner, "send"):
                    return next(inner)
                return inner.send(value)
            except StopIteration as stop:
                result = stop.value
            except BaseException as exc:
                result = self._failed(exc)
            self._done(result)  # raises StopIteration with the message, or plans the next step
            throw_args = value = None

    def _failed(self, exc: BaseException) -> Message:
        """What the driven awaitable raised: a message to go on with, else raised on."""
        if self._phase != _READ:
            raise exc
        conn = self._conn
        if isinstance(exc, asyncio.CancelledError):
            final = conn.direct_read_cancelled()
            if final is None:
                raise exc  # the app's own cancel
            self._phase = _CLOSE  # nothing more to do: the guard's close is delivered
            self._message = final
            return final
        if not isinstance(exc, Exception):
            conn.abandon_direct_read()
            raise exc
        return conn.direct_read_failed()

    def _done(self, result: Any) -> None:
        phase = self._phase
        if phase == _HAND_OVER:
            self._plan()
            return
        if phase == _READ:
            message = self._conn.end_direct_read(result)
            if message is result and message["type"] == self._conn.disconnect_type:
                # The client's own disconnect: the session is closed before the app hears it.
                self._phase, self._message = _CLOSE, message
                self._inner = self._conn.close_disconnected()
                return
            raise StopIteration(message)
        if phase == _CLOSE:
            raise StopIteration(self._message)
        raise StopIteration(result)
