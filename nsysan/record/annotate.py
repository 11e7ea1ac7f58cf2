"""``nsysan profile --annotate``: the profiled command's environment, with nsysan's ``site`` folder
first on PYTHONPATH so that every Python process it starts (the program, ``python -m``, each
``torchrun`` / ``accelerate launch`` rank, DataLoader workers) runs nsysan's ``sitecustomize``: an
import hook that adds NVTX ranges in the ``nsysan`` domain around the framework calls that bound a
step (``site/_nsysan_annotate.py``; the analyzer's side is ``analyses/recorder_ranges.py``).

Only the child's environment changes; nsysan's own and the user's shell stay as they were, and the
user's own ``sitecustomize`` (the next one on the path) still runs. Where Python would not read
PYTHONPATH or ``sitecustomize`` (``python -I``, ``-E``, ``-S``; ``env -i``), :func:`blocked` says
why. Standard library only."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

SITE_DIR = Path(__file__).resolve().with_name("site")

_PY_ARG_FLAGS = ("W", "X")  # single-letter options whose value follows (-W ignore, -Xdev)


def _python_options(words: Sequence[str]) -> set[str]:
    """The one-letter options given to ``python`` before its program (``-c``/``-m``/script)."""
    letters: set[str] = set()
    i = 1
    while i < len(words):
        w = words[i]
        if w == "--" or not w.startswith("-") or w == "-" or w.startswith("--"):
            if w.startswith("--check-hash-based-pycs"):
                i += 1 if "=" in w else 2
                continue
            break
        for j, ch in enumerate(w[1:]):
            if ch in ("c", "m"):
                return letters
            letters.add(ch)
            if ch in _PY_ARG_FLAGS:
                if j == len(w) - 2:
                    i += 1  # its value is the next word
                break
        i += 1
    return letters


def blocked(command: Sequence[str]) -> str | None:
    """Why the annotations cannot reach ``command`` (None: they can): an environment emptied by
    ``env -i`` or ``env -u PYTHONPATH``, a Python run isolated (``-I``), ignoring PYTHONPATH
    (``-E``) or without ``site`` (``-S``)."""
    words = list(command)
    if words and os.path.basename(words[0]) == "env":
        rest = words[1:]
        while rest and (rest[0].startswith("-") or "=" in rest[0]):
            if rest[0] in ("-i", "--ignore-environment", "-") or rest[0] in ("-u", "--unset") and \
                    rest[1:2] == ["PYTHONPATH"] or rest[0] in ("-uPYTHONPATH", "--unset=PYTHONPATH"):
                return f"`env {rest[0]}` clears the environment that carries the annotations (PYTHONPATH)"
            rest = rest[1:]
        words = rest
    if not words:
        return None
    name = os.path.basename(words[0])
    if name.startswith(("python", "pypy")):
        opts = _python_options(words)
        for flag, why in (("I", "isolated mode ignores PYTHONPATH"), ("E", "ignores PYTHONPATH"),
                          ("S", "skips the site module, so no sitecustomize runs")):
            if flag in opts:
                return f"`{name} -{flag}` {why}"
    return None


def annotate_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with nsysan's site folder first on PYTHONPATH (the rest kept in order)."""
    old = environ.get("PYTHONPATH", "")
    return {**environ, "PYTHONPATH": str(SITE_DIR) + (os.pathsep + old if old else "")}
