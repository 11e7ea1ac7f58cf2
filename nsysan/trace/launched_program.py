"""The program nsys launched, from the capture's ``META_DATA_CAPTURE`` rows."""

from __future__ import annotations

from collections.abc import Iterable


def launched_program(capture: Iterable[tuple[str, str]]) -> str | None:
    """The program nsys launched, from its ``META_DATA_CAPTURE`` rows (``TraceMeta.capture``, read at
    load): ``PROCESS_0:COMMAND`` and its first argument that is not an option (the script or ``-m``
    module), e.g. ``python3 train.py``; the other arguments (a rank, a step) are left out. None when
    the export does not say."""
    got = {str(k): str(v) for k, v in capture if str(k).startswith("PROCESS_0:")}
    cmd = got.get("PROCESS_0:COMMAND")
    if not cmd:
        return None
    args = [got[f"PROCESS_0:ARGUMENT_{i}"] for i in range(len(got)) if f"PROCESS_0:ARGUMENT_{i}" in got]
    words = [cmd]
    for i, a in enumerate(args):
        if a == "-m" and i + 1 < len(args):
            words += [a, args[i + 1]]
            break
        if not a.startswith("-"):
            words.append(a)
            break
    return " ".join(words)
