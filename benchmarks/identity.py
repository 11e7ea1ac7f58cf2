"""Outputs of a checkout on every fixture and public export, to show that a restructuring changed
nothing: JSON, stdout, stderr, the exit code and the HTML of ``nsysan analyze`` per trace.

    python3 benchmarks/identity.py --out /tmp/before            # with this checkout's nsysan
    PYTHONPATH=/tmp/other python3 benchmarks/identity.py --out /tmp/after   # another checkout's
    python3 benchmarks/identity.py --compare /tmp/before /tmp/after
    python3 benchmarks/identity.py --out /tmp/some --only 'ladder|ddp'    # a subset, by name

Each trace is analysed in a fresh process with ``NSYSAN_NO_CACHE=1``, ``NO_COLOR=1`` and a fixed
terminal width, its outputs written under ``OUT/<name>/``. What differs between two runs by
construction is normalised in every file: the run's own wall time (``analysed in 0.26 s``), the
output folder (``OUT``) and the traces' folder (``TRACES``). Fixtures are decompressed once into
``OUT/../identity-traces``.
"""

from __future__ import annotations

import argparse
import lzma
import os
import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
CORPUS = ROOT.parent / "shared" / "corpus" / "public-exports"
TIMED = re.compile(rb"analysed\s+in\s+[0-9.]+\s+(s|ms)")  # (a narrow terminal may wrap it)


def traces(cache: Path) -> list[tuple[str, Path]]:
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for d in sorted(FIXTURES.iterdir()):
        xz = d / "trace.sqlite.xz"
        if not xz.exists():
            continue
        dst = cache / f"{d.name}.sqlite"
        if not dst.exists():
            with lzma.open(xz) as f, open(dst.with_suffix(".tmp"), "wb") as g:
                shutil.copyfileobj(f, g)
            dst.with_suffix(".tmp").rename(dst)
        out.append((d.name, dst))
    out += [(p.stem[:60], p) for p in sorted(CORPUS.glob("*.sqlite"))] if CORPUS.exists() else []
    return out


def run_one(name: str, path: Path, out: Path) -> None:
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, NSYSAN_NO_CACHE="1", NO_COLOR="1", COLUMNS="100")
    p = subprocess.run([sys.executable, "-m", "nsysan", "analyze", str(path), "--json", str(d / "out.json"),
                        "--html", str(d / "out.html"), "--force"], capture_output=True, env=env, cwd=d)
    # where this run put its traces and outputs is not part of what is compared
    places = [(str(out.resolve()).encode(), b"OUT"), (str(path.parent.resolve()).encode(), b"TRACES")]

    def norm(b: bytes) -> bytes:
        for old, new in places:
            b = b.replace(old, new)
        return TIMED.sub(b"analysed in T", b)

    (d / "stdout").write_bytes(norm(p.stdout))
    (d / "stderr").write_bytes(norm(p.stderr))
    (d / "rc").write_text(str(p.returncode))
    for f in ("out.json", "out.html"):
        if (d / f).exists():
            (d / f).write_bytes(norm((d / f).read_bytes()))


def compare(a: Path, b: Path) -> int:
    bad = 0
    for d in sorted(p for p in a.iterdir() if p.is_dir()):
        for f in sorted(d.iterdir()):
            other = b / d.name / f.name
            if not other.exists() or other.read_bytes() != f.read_bytes():
                print(f"differs: {d.name}/{f.name}")
                bad += 1
    n = sum(1 for p in a.iterdir() if p.is_dir())
    print(f"{n} traces, {bad} differing files")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", metavar="REGEX", help="only the traces whose name matches (re.search)")
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out or --compare")
    todo = traces(args.out.parent / "identity-traces")
    if args.only:
        todo = [t for t in todo if re.search(args.only, t[0])]
    with ThreadPoolExecutor(args.jobs) as ex:
        list(ex.map(lambda t: run_one(t[0], t[1], args.out), todo))
    print(f"{len(todo)} traces -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
