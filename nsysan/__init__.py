"""nsysan: where the time goes in an Nsight Systems trace, and what to change."""

from __future__ import annotations

__version__ = "0.1.0"

from nsysan.trace import Trace, TraceMeta, open_trace

__all__ = ["Trace", "TraceMeta", "__version__", "open_trace"]
