"""The outputs ``Analysis``'s convenience methods delegate to (``to_json``, ``to_html``, ``write_html``,
``__repr__`` ...), registered by ``nsysan.api`` when the package is imported: the frozen result
(``nsysan/analysis.py``) imports nothing of the renderers (``nsysan/report/``), which sit above it.
Imports nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

OUTPUTS: dict[str, Callable[..., Any]] = {}


def register(**functions: Callable[..., Any]) -> None:
    OUTPUTS.update(functions)


def output(name: str) -> Callable[..., Any]:
    """The function registered as ``name``; ``nsysan`` (its ``__init__``) registers them all on import."""
    try:
        return OUTPUTS[name]
    except KeyError:
        raise RuntimeError(f"nsysan.api has not registered {name!r} (import nsysan.api)") from None
