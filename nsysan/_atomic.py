"""One way to replace a file atomically: write a temp file in the same folder, then rename it over
the target (``os.replace``), so a reader never sees a half-written file and, on any error, the temp
file is removed and the old file stays as it was. Imports nothing of nsysan: every layer may use it
(the outputs, the results cache, the bundled examples)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def replacing(path: str | os.PathLike[str], *, prefix: str = ".nsysan-", suffix: str = ".tmp",
              durable: bool = False, shared: bool = True) -> Iterator[IO[bytes]]:
    """A binary file whose content replaces ``path`` when the ``with`` block ends without an error.
    ``durable``: flushed and fsync'ed before the rename (on disk before it replaces the old file).
    ``shared``: the permissions a new file gets (0666 less the umask); otherwise mkstemp's 0600.
    The temp name is short (``prefix``, random, ``suffix``): the target's own name may already be
    near NAME_MAX. Errors (``OSError`` included) propagate to the caller."""
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=Path(path).parent)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            if durable:
                f.flush()
                os.fsync(f.fileno())
        if shared:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
