"""The ASGI edge: where requests enter the guard and where the guard answers by itself.

``middleware`` (:class:`GuardMiddleware`, admission and session wiring), ``connection`` (the
receive pump that notices disconnects, the send watch for dead peers), ``http`` and
``websocket`` (byte counting, ending a connection the guard closed),
``control`` (the guard's own routes and their auth) and ``responses`` (503 / 1013, JSON).
"""

from llm_guard_sdk.asgi.middleware import GuardMiddleware

__all__ = ["GuardMiddleware"]
