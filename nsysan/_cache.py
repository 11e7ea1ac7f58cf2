"""Where nsysan keeps what it caches: one folder per kind under the user's cache directory. Read
by the inputs (exported reports), the outputs, the results cache, the bundled examples and the
template cache: it imports nothing of nsysan, so every layer can use it."""

from __future__ import annotations

import os
from pathlib import Path


def user_cache(kind: str) -> Path:
    """nsysan's folder ``kind`` in the user's cache: ``$XDG_CACHE_HOME/nsysan/KIND``, else
    ``~/.cache/nsysan/KIND`` (bundled examples, .nsys-rep exports, analyses); not created here."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "nsysan" / kind
