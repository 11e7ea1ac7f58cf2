"""Python's cyclic garbage collector, paused while ``nsysan analyze`` imports its libraries.

Importing numpy, pyarrow, pandas and jinja2 creates several hundred thousand objects (modules,
classes, functions) that live until the process ends. The collector runs every 700 allocations and
a full collection walks every tracked object, so during the imports it walked that growing heap
over and over for nothing, and each later full collection walked it again. ``pause()`` stops it
before the imports; ``resume()`` moves everything alive by then into the permanent generation
(``gc.freeze``: never walked again) and starts it again, so the analysis' own cyclic garbage is
collected as usual. On the 2-core machine this took a 1.9 MB trace's whole ``analyze --json --html``
from 1.00 to 0.87 of its CPU time (20 alternating pairs, median ratio; the same as no collection
at all), with the same outputs and the same peak memory.
"""

from __future__ import annotations

import gc

_paused = False


def pause() -> None:
    """Stop the cyclic collector (if it runs) until ``resume``."""
    global _paused
    if gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """After the imports: freeze what exists and restart the collector ``pause`` stopped (once)."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
