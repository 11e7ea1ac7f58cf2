"""pandas imported without pyarrow, in the command line's own process.

pandas imports pyarrow whenever it is installed (and builds ``pyarrow.compute``'s function
registry): 0.11 s of a 1.9 MB trace's 0.95 s on the 2-core machine, and 38 MiB of resident memory
(Arrow's libraries) that a 245 MB trace's peak carries too. nsysan's loader needs no Arrow unless it
reads a big table through ADBC (``trace/columns.py``), so ``nsysan analyze`` imports pandas while
``pyarrow`` is hidden from it; pandas then keeps its own Python string storage, and a later ADBC
read imports pyarrow as usual. A process that imported pandas already (a notebook, the tests) is
left as it is. ``NSYSAN_PANDAS_ARROW=1`` lets pandas find pyarrow again.
"""

from __future__ import annotations

import os
import sys


def pandas_without_arrow() -> None:
    """Import pandas with ``pyarrow`` hidden, then unhide it (once; see the module doc)."""
    if "pandas" in sys.modules or os.environ.get("NSYSAN_PANDAS_ARROW") or "pyarrow" in sys.modules:
        return
    sys.modules["pyarrow"] = None  # type: ignore[assignment]  # `import pyarrow` raises ImportError
    try:
        import pandas  # noqa: F401
    finally:
        if sys.modules.get("pyarrow", 0) is None:
            del sys.modules["pyarrow"]
