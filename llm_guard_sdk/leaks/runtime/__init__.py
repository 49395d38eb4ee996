"""Leak tools that run inside the served process, next to the guard.

The sweeper (closed sessions must be gone after a grace period), on-demand heap snapshots and
their difference (``heap_diff``; not the guard's warn-level snapshots), and the forensics both
use and the pytest plugin reuses: what to track (``tracking``, with ``DeathWatch``), reference
chains, retained sizes and back-reference graphs.
"""
