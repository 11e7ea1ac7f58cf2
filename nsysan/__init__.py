"""nsysan: where the time goes in an Nsight Systems trace, and what to change.

    import nsysan
    trace = nsysan.open_trace("report.sqlite")      # typed tables (pandas)
    result = nsysan.analyze(trace)                   # analyses + ranked findings
    result.findings[0].message, result.to_dict()     # JSON-ready dict (schema nsysan.analysis/2)
"""

from __future__ import annotations

__version__ = "0.1.0"

from typing import Any


def __getattr__(name: str) -> Any:
    # imported on first use (PEP 562): ``nsysan --version`` and argument errors do not pay for pandas
    if name in ("Trace", "TraceMeta", "open_trace"):
        from nsysan import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'nsysan' has no attribute {name!r}")


def analyze(trace: Any, **kwargs: Any) -> Any:
    """Run every analysis and rule on a trace (or a path). See ``nsysan.analysis.analyze``."""
    from nsysan.analysis import analyze as _analyze
    from nsysan.trace import Trace, open_trace

    if not isinstance(trace, Trace):
        trace = open_trace(trace)
    return _analyze(trace, **kwargs)


__all__ = ["Trace", "TraceMeta", "__version__", "analyze", "open_trace"]
