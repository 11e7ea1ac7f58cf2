"""The output formats of an analysis, in one table (``OUTPUTS``) that the ``analyze`` command's
options (``cli/parser.py``), the planning, checking and writing of a run (``pipeline``) and the
Python API (``api.write``, ``api.render``, and the ``Analysis`` methods through them) all read.

A new format is one renderer module (a function ``render(a, *, show_env=False, early=None) -> str``,
optionally ``pieces`` with the same arguments yielding that text in pieces to write as they are made,
or ``stream(a, path, *, force, protect)`` for an output written as it is made) plus one ``Output``
entry in ``OUTPUTS`` below (or ``register``): its option, help, file ending, how it is written.
Nothing else names it.

Imported by the command line's parser at start-up: it imports no renderer (each is imported when
an output is written) and nothing heavy."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAME_MAX = 255  # bytes in one path component on Linux, macOS and Windows file systems

# the tables ``--csv DIR`` writes (``jsonout.csv_tables``), checked before the trace is read
CSV_NAMES = ("kernels", "kernel_configs", "cuda_api", "os_runtime", "memcpy", "memset", "nvtx", "launches",
             "overlap", "gpu_busy", "gaps", "iterations", "iteration_breakdown", "collectives", "ranks",
             "nsys_analyze", "findings")

Protect = Sequence[tuple[int, int]]


@dataclass(frozen=True)
class Output:
    """One output format of ``nsysan analyze`` and the API.

    ``name``: its key (``api.write(a, name, path)``, a run's outputs by name). ``flag``, ``metavar``,
    ``help``: its option of ``analyze``. ``label``: the progress line's "writing <label>".
    ``render(a, *, show_env, early)``: the whole text (for ``api.render``), with ``pieces`` (same
    arguments) yielding it in pieces that a write puts in the file as they come (no whole text of a
    large report held); or ``stream(a, path, *, force, protect)``: writes it as it is made (a large
    timeline, a folder of tables). ``suffix``: its file's ending per trace in
    ``--out-dir`` (``<trace><suffix>``); None: not written there. ``one_trace``: what it holds of one
    trace, when it is refused with several traces or ``--out-dir`` (the message names it); else it is
    written per trace only through ``--out-dir`` (with a suffix) or not at all. ``files(path)``: the
    files a path stands for (a folder's tables), each checked before any work; None: the path itself.
    ``write_order``: its place among one trace's writes. ``off``: an option turning a default output off
    and its help (``--no-html``). ``default(trace, paths)``: its path when its option is not given
    (``paths``: the options given, by name). ``preload``: modules imported before the analysis when it
    is written (before the garbage collector resumes). ``early(a)``: work begun as soon as the analyses
    are done (before the rules), handed back to ``render`` as ``early``, begun only when one of the
    outputs named in ``early_with`` is written too (whose writing it overlaps). ``cached``: its text is
    kept in the results cache, which ``compare`` and ``diff`` read instead of analysing again."""

    name: str
    flag: str
    metavar: str
    help: str
    label: str
    render: Callable[..., str] | None = None
    stream: Callable[..., Any] | None = None
    pieces: Callable[..., Iterable[str]] | None = None
    suffix: str | None = None
    one_trace: str | None = None
    files: Callable[[str], list[str]] | None = None
    write_order: int = 100
    off: tuple[str, str] | None = None
    default: Callable[[str, Mapping[str, str | None]], str | None] | None = None
    preload: tuple[str, ...] = ()
    early: Callable[[Any], Any] | None = None
    early_with: tuple[str, ...] = ()
    cached: bool = False

    @property
    def dest(self) -> str:
        """Its option's attribute in the parsed arguments."""
        return self.flag.lstrip("-").replace("-", "_")

    @property
    def off_dest(self) -> str | None:
        return self.off[0].lstrip("-").replace("-", "_") if self.off else None

    def planned(self, path: str) -> list[str]:
        """The files ``path`` stands for, to check before any work."""
        return self.files(path) if self.files is not None else [path]

    def shown(self, path: str) -> str:
        """How a run's summary names what it wrote (a folder with its slash)."""
        return str(Path(path)) + "/" if self.files is not None else path

    def write(self, a: Any, path: str | os.PathLike[str], *, force: bool, protect: Protect = (),
              show_env: bool = False, early: Any = None) -> str | None:
        """Write it to ``path`` (atomically, never over an input in ``protect``, over an existing file
        nsysan did not write only with ``force``); returns the text when it was rendered whole."""
        if self.stream is not None:
            self.stream(a, Path(path), force=force, protect=protect)
            return None
        from nsysan.outputs import write_atomic

        if self.pieces is not None:
            _write_pieces(self.pieces(a, show_env=show_env, early=early), Path(path), force=force, protect=protect)
            return None
        assert self.render is not None
        text = self.render(a, show_env=show_env, early=early)
        write_atomic(Path(path), text, force=force, protect=protect)
        return text


def _write_pieces(pieces: Iterable[str], path: Path, *, force: bool, protect: Protect) -> None:
    """``write_atomic`` of the text the pieces make, a megabyte at a time."""
    from nsysan.outputs import atomic_file

    with atomic_file(path, force=force, protect=protect) as f:
        held: list[str] = []
        size = 0
        for s in pieces:
            held.append(s)
            size += len(s)
            if size >= 1 << 20:
                f.write("".join(held).encode("utf-8", "backslashreplace"))
                held, size = [], 0
        f.write("".join(held).encode("utf-8", "backslashreplace"))


def fit_name(name: str, suffix: str) -> str:
    """``name + suffix``, the name shortened to fit one path component (NAME_MAX bytes)."""
    budget = NAME_MAX - len(suffix.encode())
    raw = os.fsencode(name)
    if len(raw) <= budget:
        return name + suffix
    import hashlib  # a stable tag: two long names that share their first 240 bytes stay apart

    tag = hashlib.sha256(raw).hexdigest()[:8]
    return os.fsdecode(raw[:budget - 9]) + "-" + tag + suffix


# -- the renderers, imported when an output is written ----------------------------------------------

def _json(a: Any, *, show_env: bool = False, early: Any = None) -> str:
    from nsysan.report.jsonout import to_json

    return to_json(a, show_env=show_env)


def _html(a: Any, *, show_env: bool = False, early: Any = None) -> str:
    return "".join(_html_pieces(a, show_env=show_env, early=early))


def _html_pieces(a: Any, *, show_env: bool = False, early: Any = None) -> Iterable[str]:
    from nsysan._version import __version__
    from nsysan.report import html, view

    return html.pieces(view.build(a, show_env=show_env, generated_by=f"nsysan {__version__}", timeline=early))


def _html_default(trace: str, paths: Mapping[str, str | None]) -> str:
    """Next to ``--json``, or ``./<trace>.nsysan.html``."""
    if paths.get("json"):
        return str(Path(str(paths["json"])).with_suffix(".html"))
    return fit_name(Path(trace).stem, ".nsysan.html")


def _timeline_early(a: Any) -> Any:
    from nsysan.report import timeline

    return timeline.start(a)


def _csv(a: Any, folder: Path, *, force: bool, protect: Protect = ()) -> None:
    from nsysan.report.jsonout import write_csv

    write_csv(a, folder, force=force, protect=protect)


def _perfetto(a: Any, path: Path, *, force: bool, protect: Protect = ()) -> None:
    from nsysan.report.perfetto import write_perfetto

    write_perfetto(a, path, force=force, protect=protect)


# -- the table: the options in this order in ``nsysan analyze -h`` ----------------------------------

OUTPUTS: list[Output] = [
    Output("json", "--json", "OUT.json", "write the analysis as JSON (schema nsysan.analysis/2)", "JSON",
           render=_json, suffix=".json", write_order=0, cached=True),
    Output("html", "--html", "OUT.html", "write the HTML report here (default: next to --json, or "
           "./<trace>.nsysan.html)", "HTML report", render=_html, pieces=_html_pieces, suffix=".html", write_order=2,
           off=("--no-html", "do not write an HTML report"), default=_html_default,
           preload=("nsysan.report.html", "nsysan.report.view"),
           # the report's timeline encodes while the rules run and the JSON is written
           early=_timeline_early, early_with=("json",)),
    Output("csv", "--csv", "DIR", "write the tables as CSV files into DIR", "CSV tables", stream=_csv,
           files=lambda d: [str(Path(d) / f"{n}.csv") for n in CSV_NAMES], write_order=1),
    Output("perfetto", "--perfetto", "OUT.json", "write the timeline (GPU ops per stream, idle gaps with "
           "their causes, NVTX ranges, CUDA API calls, findings) as Chrome trace-event JSON for "
           "ui.perfetto.dev or chrome://tracing", "Perfetto timeline", stream=_perfetto, one_trace="timeline",
           write_order=3),
]


def register(o: Output) -> None:
    """Add a format after the table's (a plug-in's; nsysan's own are entries of ``OUTPUTS`` above); its
    option comes last among the outputs' in ``nsysan analyze -h`` when the parser is built after this."""
    if any(x.name == o.name or x.flag == o.flag for x in OUTPUTS):
        raise ValueError(f"an output named {o.name!r} or with option {o.flag} is already registered")
    OUTPUTS.append(o)


def output(name: str) -> Output:
    """The output format ``name`` (``KeyError`` naming the known ones)."""
    for o in OUTPUTS:
        if o.name == name:
            return o
    raise KeyError(f"no output format {name!r} (known: {', '.join(o.name for o in OUTPUTS)})")
