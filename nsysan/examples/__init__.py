"""Bundled real example traces (recorded from ``workloads/`` on an H200 with nsys 2025.3; see
``tests/fixtures/traces/<name>/README.md``). Shipped xz-compressed; decompressed once into a cache
folder on first use, so the packaged file itself is never opened for writing. ``lzma`` and
``tempfile`` are imported when a trace is decompressed: ``names()`` runs with every ``nsysan -h``."""

from __future__ import annotations

from pathlib import Path

from nsysan._atomic import replacing
from nsysan.errors import TraceNotFoundError

DATA = Path(__file__).resolve().parent / "data"


# what each bundled trace shows (``nsysan example -h``)
ABOUT = {"ladder_baseline": "ResNet-18 inference on an H200, the optimization ladder's baseline; the default, "
                            "'example' alone",
         "launch_eager": "a loop of many small kernels launched one by one, launch-bound"}


def names() -> list[str]:
    return sorted(p.name.removesuffix(".sqlite.xz") for p in DATA.glob("*.sqlite.xz"))


def listing() -> str:
    """The bundled traces, each with what it shows: ``NAME: what``, separated by '; '."""
    return "; ".join(f"{n}: {ABOUT[n]}" if n in ABOUT else n for n in names())


def _cache_dir() -> Path:
    import tempfile

    from nsysan._cache import user_cache

    d = user_cache("examples")
    try:
        d.mkdir(parents=True, exist_ok=True)
        return d
    except OSError:
        d = Path(tempfile.gettempdir()) / "nsysan-examples"
        d.mkdir(parents=True, exist_ok=True)
        return d


def example_path(name: str = "ladder_baseline") -> Path:
    import lzma

    src = DATA / f"{name}.sqlite.xz"
    if not src.is_file():
        raise TraceNotFoundError(f"no bundled example {name!r}; available: {', '.join(names())}")
    dst = _cache_dir() / f"{name}.sqlite"
    if not dst.exists() or dst.stat().st_mtime < src.stat().st_mtime:
        with replacing(dst, prefix=f".{name}-", suffix=".tmp") as f:
            f.write(lzma.decompress(src.read_bytes()))
    return dst


def resolve(arg: str) -> str:
    """``example`` or ``example:NAME`` -> the bundled trace's path; anything else unchanged."""
    if arg == "example":
        return str(example_path())
    if arg.startswith("example:"):
        return str(example_path(arg.split(":", 1)[1]))
    return arg
