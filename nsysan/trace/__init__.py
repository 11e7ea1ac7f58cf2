"""The only package that knows SQL and nsys table names: read an export into a typed ``Trace``.

The names are imported on first use (PEP 562), so ``nsysan.trace.prefetch`` can start reading a
trace before pandas is imported."""

from __future__ import annotations

from typing import Any

__all__ = ["Trace", "TraceMeta", "open_trace"]


def __getattr__(name: str) -> Any:
    if name == "open_trace":
        from nsysan.trace.load import open_trace

        return open_trace
    if name in ("Trace", "TraceMeta"):
        from nsysan.trace import model

        return getattr(model, name)
    raise AttributeError(f"module 'nsysan.trace' has no attribute {name!r}")
