"""The outputs ``Analysis``'s convenience methods delegate to (``to_json``, ``to_html``, ``write_html``,
``__repr__`` ...), registered by ``nsysan.api`` when the package is imported: the frozen result
(``nsysan/analysis.py``) imports nothing of the renderers (``nsysan/report/``), which sit above it.
Imports nothing but the spill's scope (``nsysan._spill``, standard library only) when registering."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

OUTPUTS: dict[str, Callable[..., Any]] = {}


def register(**functions: Callable[..., Any]) -> None:
    """Register each function under its name, to run inside the spill's scope (``nsysan._spill``: an
    analysis in files, larger than memory, keeps its report's arrays in files too)."""
    OUTPUTS.update((name, _scoped(fn)) for name, fn in functions.items())


def _scoped(fn: Callable[..., Any]) -> Callable[..., Any]:
    from nsysan import _spill

    @functools.wraps(fn)
    def within(*args: Any, **kwargs: Any) -> Any:
        with _spill.scope():
            return fn(*args, **kwargs)

    return within


def output(name: str) -> Callable[..., Any]:
    """The function registered as ``name``; ``nsysan`` (its ``__init__``) registers them all on import."""
    try:
        return OUTPUTS[name]
    except KeyError:
        raise RuntimeError(f"nsysan.api has not registered {name!r} (import nsysan.api)") from None
