"""The outputs ``Analysis``'s convenience methods delegate to (``to_json``, ``to_html``, ``write_html``,
``__repr__`` ...), registered by ``nsysan.api`` when the package is imported: the frozen result
(``nsysan/analysis.py``) imports nothing of the renderers (``nsysan/report/``), which sit above it.
Imports nothing at import time (the spill's scope, ``nsysan._spill``, when an output is asked for)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OUTPUTS: dict[str, Callable[..., Any]] = {}


def register(**functions: Callable[..., Any]) -> None:
    OUTPUTS.update(functions)


def output(name: str) -> Callable[..., Any]:
    """The function registered as ``name``; ``nsysan`` (its ``__init__``) registers them all on import."""
    try:
        fn = OUTPUTS[name]
    except KeyError:
        raise RuntimeError(f"nsysan.api has not registered {name!r} (import nsysan.api)") from None
    from nsysan import _spill

    def within(*args: Any, **kwargs: Any) -> Any:
        with _spill.scope():  # an analysis in files (larger than memory): its report's arrays too
            return fn(*args, **kwargs)

    return within
