from __future__ import annotations

import gc
import inspect
import json
import lzma
import os
import re
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Bytecode caches on, whatever the shell says (PYTHONDONTWRITEBYTECODE=1): the suite starts hundreds of
# processes (``python -m nsysan`` runs, the parallel workers), and without a cache each one compiled
# the package's source again, and each worker rewrote the test modules' asserts again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# Hypothesis runs derandomized (a fixed seed per test) unless HYPOTHESIS_PROFILE=random: CI is
# reproducible, and a failure found at random is kept as an @example once fixed.
settings.register_profile("fixed", derandomize=True, deadline=None)
settings.register_profile("random", deadline=None, max_examples=1000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fixed"))

# The cyclic collector less often (every 20,000 allocations, not 700; older generations after 20 of the
# younger's collections, not 10): a test run allocates far more than a user's run and frees it by
# reference counting; the two busiest modules took 58 s with the default, 50 s with this.
gc.set_threshold(20_000, 20, 20)

# Every test sees the terminal a plain run sees (output piped, no COLUMNS/LINES): a parallel worker
# (pytest-xdist sets COLUMNS=80) or a user's shell prints the same; tests of the width set their own.
for _var in ("COLUMNS", "LINES"):
    os.environ.pop(_var, None)

# A test that fakes a small memory figure (NSYSAN_MEMORY_LIMIT) must not start the spill (nsysan/_spill.py)
# in a worker process: once started it stays for every later test of that worker. Spilling is tested
# in processes of its own (tests/test_spill.py), which set NSYSAN_SPILL themselves.
os.environ["NSYSAN_SPILL"] = "never"

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent  # the repository
FIXTURES = TESTS / "fixtures" / "traces"
SHARED = ROOT.parent / "shared"
CORPUS = SHARED / "corpus" / "public-exports"
FIXTURE_NAMES = sorted(p.name for p in FIXTURES.iterdir() if (p / "trace.sqlite.xz").exists())

# The tests live in folders by what they test (tests/analyses, tests/rules, ... : CONTRIBUTING.md), as
# plain modules (no __init__.py). Each folder goes on the import path as pytest puts tests/ itself, so a
# test imports a shared module (``import sqltruth``) or another test's helpers (``from test_inputs_profile
# import fake_nsys``) by name wherever the two live and whichever tests a run selects. File names stay
# unique across the folders (one module name each).
for _folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and any(p.glob("test_*.py"))):
    if str(_folder) not in sys.path:
        sys.path.append(str(_folder))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (pyproject's addopts): ``NSYSAN_TEST_WORKERS``, else one worker a CPU and one more,
    which runs while the tests that wait on purpose (timeouts, signals, servers) leave a CPU idle."""
    if os.environ.get("NSYSAN_TEST_WORKERS", "").isdigit():
        return int(os.environ["NSYSAN_TEST_WORKERS"])
    return _cpus() + 1


def _cpus() -> int:
    """The CPUs this process may run on (its affinity mask where the OS keeps one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


_TRACES = set(FIXTURE_NAMES) | ({p.name for p in CORPUS.glob("*.sqlite")} if CORPUS.exists() else set())


def _trace_of(value: object) -> str | None:
    """The fixture or public export a test parameter names (a name, a path, or a (kind, name) case)."""
    if isinstance(value, tuple) and len(value) == 2:
        value = value[1]
    if isinstance(value, (str, Path)):
        name = Path(value).name
        return name if name in _TRACES else None
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collection built (modules, parameters) lives to the end: out of the collector's way."""
    gc.freeze()


# Modules whose tests run as one unit on one worker: the tests that wait on purpose (export timeouts,
# signals, fake schedulers: ~95 s of waiting for ~14 s of CPU), so one worker waits while the others
# use the CPUs (spread over every worker at the end of the run, they left the CPUs idle together),
# and the browser's (one Chromium at a time).
ONE_UNIT = {"test_hostile_waits.py": "waiting", "test_browser.py": "browser", "test_browser_layout.py": "browser",
            "test_browser_timeline.py": "browser"}


def _groups_file() -> str | None:
    return os.environ.get("NSYSAN_TEST_GROUPS")


def pytest_configure(config: pytest.Config) -> None:
    """A parallel run's controller: the file through which the workers hand it each test's trace."""
    if config.pluginmanager.hasplugin("xdist") and not os.environ.get("PYTEST_XDIST_WORKER") and \
            (config.getoption("numprocesses", None) or 0) != 0:
        import tempfile

        fd, path = tempfile.mkstemp(prefix="nsysan-test-groups-", suffix=".json")
        os.close(fd)
        os.environ["NSYSAN_TEST_GROUPS"] = path  # the workers, started after this, inherit it


def pytest_unconfigure(config: pytest.Config) -> None:
    if _groups_file() and not os.environ.get("PYTEST_XDIST_WORKER"):
        Path(_groups_file()).unlink(missing_ok=True)
        os.environ.pop("NSYSAN_TEST_GROUPS", None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Parallel runs keep every test of one trace on one worker (``pytest_xdist_make_scheduler``), so
    its load and analysis (``opened``, ``analyzed``) are computed once per run, not once per worker.
    Each worker writes the tests' traces for the controller, which collects nothing itself."""
    path = _groups_file()
    if not (path and os.environ.get("PYTEST_XDIST_WORKER")):
        return
    from nsysan.outputs import write_atomic

    groups = {item.nodeid: unit for item in items if (unit := _unit_of(item))}
    write_atomic(Path(path), json.dumps(groups), force=True)  # every worker writes the same; one whole file


def _unit_of(item: pytest.Item) -> str | None:
    """The unit of work a test belongs to: its module's (``ONE_UNIT``), the trace its parameter names,
    or the one fixture its code reads; None: a unit of its own."""
    module = Path(str(item.fspath)).name
    if module in ONE_UNIT:
        return ONE_UNIT[module]
    params = getattr(getattr(item, "callspec", None), "params", {})
    for k in ("name", "case", "path", "stem"):
        trace = _trace_of(params.get(k))
        if trace:
            return trace
    return _named_in(item)


_NAMED = re.compile(r"\b(?:analysis|load)\(\s*\"([A-Za-z0-9_.-]+)\"")


def _named_in(item: pytest.Item) -> str | None:
    """The one fixture a test without a trace parameter reads through the ``analysis`` or ``load``
    fixture (``analysis("ladder_baseline")`` in its code), so it runs where that trace is analysed."""
    fn = getattr(item, "function", None)
    try:
        names = set(_NAMED.findall(inspect.getsource(fn))) if fn is not None else set()
    except (OSError, TypeError):
        return None
    names &= _TRACES
    return names.pop() if len(names) == 1 else None


@pytest.hookimpl(optionalhook=True)  # a run without pytest-xdist (-p no:xdist) does not know this hook
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's scheduling by scopes, largest first, a scope being a trace's tests (one unit on one
    worker) or a test alone. (``--dist loadgroup`` would do it from ``xdist_group`` markers, but
    pytest-xdist 3.8 renames the items through ``Item._nodeid``, which pytest 9 no longer reads: the
    groups were silently ignored.)"""
    from xdist.scheduler import LoadScopeScheduling

    class ByTrace(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                path = _groups_file()
                text = Path(path).read_text() if path and Path(path).exists() else ""
                self.groups = json.loads(text) if text else {}
            return self.groups.get(nodeid, nodeid)

    return ByTrace(config, log)


def _decompress_all(d: Path) -> None:
    """Every fixture into ``d``, on a thread per CPU (lzma lets go of the GIL while it decompresses:
    3 s of CPU, which the other workers would otherwise wait out on the lock), largest first."""
    from concurrent.futures import ThreadPoolExecutor

    def one(name: str) -> None:
        (d / f"{name}.sqlite").write_bytes(lzma.decompress((FIXTURES / name / "trace.sqlite.xz").read_bytes()))

    names = sorted(FIXTURE_NAMES, key=lambda n: -(FIXTURES / n / "trace.sqlite.xz").stat().st_size)
    with ThreadPoolExecutor(max_workers=_cpus()) as pool:
        list(pool.map(one, names))


@pytest.fixture(scope="session")
def fixture_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """All fixture traces decompressed once per test run into a temporary folder (one folder for all
    parallel workers: the first decompresses, the others wait for it), also read by ``sqltruth``."""
    import sqltruth

    base = tmp_path_factory.getbasetemp()
    d = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "fixture-traces"
    d.mkdir(exist_ok=True)
    with open(d / ".lock", "w") as lock:
        try:
            import fcntl

            fcntl.flock(lock, fcntl.LOCK_EX)
        except ImportError:  # no flock (Windows): each worker decompresses into its own folder
            d = tmp_path_factory.mktemp("traces")
        if not (d / ".done").exists():
            _decompress_all(d)
            (d / ".done").touch()
    sqltruth.DECOMPRESSED = d
    return d


# One load and one analysis per trace and options, computed once per test run (per worker when
# parallel) and shared by every test module that reads it (``opened``, ``analyzed``).
_traces: dict[str, object] = {}
_analyses: dict[tuple, object] = {}


def _key(opts: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in opts.items()))


def opened(path: str | Path):
    """``nsysan.open_trace(path)``, once per path per run."""
    import nsysan

    p = str(path)
    if p not in _traces:
        _traces[p] = nsysan.open_trace(p)
        gc.freeze()
    return _traces[p]


def analyzed(path: str | Path, **options):
    """``nsysan.analyze(opened(path), **options)``, once per path and options per run."""
    from nsysan.analysis import analyze

    key = (str(path), _key(options))
    if key not in _analyses:
        _analyses[key] = analyze(opened(path), **options)
        # kept for the whole run: out of the collector's way (each full collection walked every cached
        # analysis again: 16% of a module's time)
        gc.freeze()
    return _analyses[key]


@pytest.fixture(scope="session")
def load(fixture_dir: Path):
    return lambda name: opened(fixture_dir / f"{name}.sqlite")


@pytest.fixture(scope="session")
def analysis(fixture_dir: Path):
    return lambda name, **options: analyzed(fixture_dir / f"{name}.sqlite", **options)


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
