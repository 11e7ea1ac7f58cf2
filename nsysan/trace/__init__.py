"""The only package that knows SQL and nsys table names: read an export into a typed ``Trace``."""

from nsysan.trace.load import open_trace
from nsysan.trace.model import Trace, TraceMeta

__all__ = ["Trace", "TraceMeta", "open_trace"]
