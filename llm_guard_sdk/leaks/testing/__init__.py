"""Leak tools that run at test time, used only by the pytest plugin.

The per-test check (``checker``), the follower that hooks every guard, the async generator
window, instance growth over repeated runs and the failure message. They build on the runtime
forensics in :mod:`llm_guard_sdk.leaks.runtime`; nothing at runtime imports them.
"""
