from __future__ import annotations

import lzma
import os
from pathlib import Path

import pytest
from hypothesis import settings

# Hypothesis runs derandomized (a fixed seed per test) unless HYPOTHESIS_PROFILE=random: CI is
# reproducible, and a failure found at random is kept as an @example once fixed.
settings.register_profile("fixed", derandomize=True, deadline=None)
settings.register_profile("random", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

# Every test sees the terminal a plain run sees (output piped, no COLUMNS/LINES): a parallel worker
# (pytest-xdist sets COLUMNS=80) or a user's shell prints the same; tests of the width set their own.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
SHARED = Path(__file__).resolve().parents[2] / "shared"
CORPUS = SHARED / "corpus" / "public-exports"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "trace.sqlite.xz").exists())


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All fixture traces decompressed once into a session temp folder."""
    d = tmp_path_factory.mktemp("traces")
    for name in FIXTURE_NAMES:
        (d / f"{name}.sqlite").write_bytes(lzma.decompress((FIXTURES / name / "trace.sqlite.xz").read_bytes()))
    return d


_cache: dict[str, object] = {}


@pytest.fixture(scope="session")
def load(fixture_dir: Path):
    import nsysan

    def _load(name: str):
        if name not in _cache:
            _cache[name] = nsysan.open_trace(fixture_dir / f"{name}.sqlite")
        return _cache[name]

    return _load


_analyses: dict[str, object] = {}


@pytest.fixture(scope="session")
def analysis(load):
    from nsysan.analysis import analyze

    def _an(name: str):
        if name not in _analyses:
            _analyses[name] = analyze(load(name))
        return _analyses[name]

    return _an


@pytest.fixture(scope="session", autouse=True)
def _private_results_cache(tmp_path_factory: pytest.TempPathFactory):
    """The analysis cache (nsysan/results.py) of this test run: its own folder, not the user's."""
    import os

    old = os.environ.get("NSYSAN_CACHE_DIR")
    os.environ["NSYSAN_CACHE_DIR"] = str(tmp_path_factory.mktemp("results-cache"))
    yield
    if old is None:
        os.environ.pop("NSYSAN_CACHE_DIR", None)
    else:
        os.environ["NSYSAN_CACHE_DIR"] = old


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium through Playwright (tests/browser_kit.py: skipped or required)."""
    from browser_kit import launched

    with launched() as b:
        yield b
