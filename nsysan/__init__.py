"""nsysan: where the time goes in an Nsight Systems trace, and what to change.

    import nsysan
    trace = nsysan.open_trace("report.sqlite")      # typed tables (pandas)
    result = nsysan.analyze(trace, min_gap_us=10)    # analyses + ranked findings (the CLI's options)
    result.findings[0].message, result.to_dict()     # JSON-ready dict (schema nsysan.analysis/2)
    result.write_html("report.html")                 # the CLI's report (also to_json, write_perfetto)
    nsysan.api.write_html(result, "report.html")     # the same, as a function of the result
"""

from __future__ import annotations

from nsysan._version import __version__

from typing import Any

from nsysan import api  # the outputs of an analysis (registered for ``Analysis``'s methods); imports no renderer yet


_LAZY = ("Trace", "TraceMeta", "open_trace")


def __getattr__(name: str) -> Any:
    # imported on first use (PEP 562): ``nsysan --version`` and argument errors do not pay for pandas
    if name in _LAZY:
        from nsysan import trace

        return getattr(trace, name)
    raise AttributeError(f"module 'nsysan' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the public names, the lazy ones included (dir() would list the module's __dict__ only, without
    # them and with helpers), and the submodules already imported; nothing is imported for it
    import types

    loaded = {n for n, v in globals().items() if isinstance(v, types.ModuleType) and not n.startswith("_")}
    return sorted({*__all__, *loaded, *(n for n in globals() if n.startswith("__"))})


def analyze(trace: Any, params: Any = None, *, max_events: int | None = None, **options: Any) -> Any:
    """Run every analysis and rule on a trace (a ``Trace``, or the path of an nsys SQLite export).

    Keywords as ``nsysan analyze`` options, same names and units: ``iteration_range="train_step"``,
    ``min_gap_us=10``, ``warmup_factor=1.5``, ``rule_config={"launch-bound": {"min_kernels": 50}}``,
    ``config="rules.json"``, ``set={"host-bound-gap.min_frac": 0.1}``, ``disable=["sync-api"]``,
    ``max_events=N`` (a path only: refuse larger traces), ``rules=False`` (analyses only),
    ``progress=f`` (``f(stage, done, total)``: each table loaded from a path, then each analysis step).
    Invalid values, values of the wrong kind and unknown options raise ``ValueError`` with the CLI's
    message (``nsysan.options.OptionError``, also a ``TypeError``). See ``nsysan.analysis.analyze``."""
    from nsysan.options import check_api_options

    check_api_options(options)  # before anything is imported or read
    from nsysan.analysis import analyze as _analyze
    from nsysan.analysis import options as _options
    from nsysan.trace import Trace, open_trace

    if not isinstance(trace, Trace):
        if max_events is not None:
            from nsysan.options import check_number

            try:
                max_events = check_number(max_events, integer=True)
            except ValueError as e:
                raise ValueError(f"max_events: {e}") from None
        # the options are checked before the trace is read, as the CLI checks them
        _options(**{k: v for k, v in options.items() if k not in ("rules", "workers", "progress", "on_analyses")})
        trace = open_trace(trace, max_rows=max_events, progress=options.get("progress"))
    elif max_events is not None:
        raise TypeError("max_events applies when loading a trace from a path; this one is already loaded")
    return _analyze(trace, params, **options)


__all__ = ["Trace", "TraceMeta", "__version__", "analyze", "api", "open_trace"]
