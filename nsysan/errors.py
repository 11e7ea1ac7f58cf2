"""The nsysan error hierarchy. Library code raises these; only the command line (``nsysan.cli``) prints and exits."""

from __future__ import annotations


class NsysanError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; ``hint`` says what to do next."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


class UsageError(NsysanError):
    """Bad command-line arguments or options."""

    exit_code = 2


class TraceNotFoundError(NsysanError):
    """The path does not exist or is not a regular file."""

    exit_code = 3


class TraceUnreadableError(NsysanError):
    """The file exists but cannot be read (permissions, locked, I/O error)."""

    exit_code = 4


class NotSQLiteError(NsysanError):
    """The file is not an SQLite database (e.g. a .nsys-rep, a Git LFS pointer, random bytes)."""

    exit_code = 5


class CorruptTraceError(NsysanError):
    """SQLite reports the database as malformed or truncated."""

    exit_code = 6


class NotAnNsysExportError(NsysanError):
    """A valid SQLite database that is not an Nsight Systems export."""

    exit_code = 7


class OutputExistsError(NsysanError):
    """An output file exists and ``--force`` was not given."""

    exit_code = 8


class ResourceLimitError(NsysanError):
    """The trace exceeds a configured size limit."""

    exit_code = 9


class MemoryLimitError(ResourceLimitError):
    """The analysis of the trace would not fit in the memory available (estimated before loading)."""

    exit_code = 13


class ToolNotFoundError(NsysanError):
    """An external tool (nsys) is missing or too old."""

    exit_code = 10


class RegressionError(NsysanError):
    """A diff found a regression beyond the allowed threshold (the CI gate)."""

    exit_code = 11


class OutputError(NsysanError):
    """An output cannot be written: a read-only folder or file system, no space left, a name or path
    over the file system's limits, a parent that is a file, or an existing path that is not a regular
    file (a FIFO, a device, a directory, a link into /proc), which ``--force`` does not replace. The
    previous file of that name, if any, is left as it was."""

    exit_code = 12


def _all(cls: type[NsysanError]) -> list[type[NsysanError]]:
    return [cls] + [c for sub in cls.__subclasses__() for c in _all(sub)]


EXIT_CODES: dict[str, int] = {cls.__name__: cls.exit_code for cls in _all(NsysanError)}


def as_nsysan_error(e: BaseException) -> NsysanError:
    """What the command line says of ``e``: itself, or for running out of memory or of stack (a
    trace's input nested too deeply) the error class whose exit code that is."""
    if isinstance(e, NsysanError):
        return e
    if isinstance(e, MemoryError):
        return ResourceLimitError("out of memory; try --max-events or export a shorter time range")
    if isinstance(e, RecursionError):
        return UsageError("input nested too deeply")
    raise TypeError(f"no nsysan error for {type(e).__name__}")


# what ``explain`` says in words of its own (anything else is an internal error, a bug)
EXPLAINED = (NsysanError, KeyboardInterrupt, MemoryError, RecursionError)


def explain(e: BaseException) -> tuple[int, list[str]]:
    """What the command line prints of ``e`` (after ``nsysan: ``, each line escaped by the caller) and
    its exit code: an nsysan error (or running out of memory or stack) with its hint; Ctrl-C (130)
    or SIGTERM/SIGHUP (``_atomic.Terminated``: 128 + the signal); anything else an internal error
    (1), in one line, never a traceback."""
    if isinstance(e, (NsysanError, MemoryError, RecursionError)):
        err = as_nsysan_error(e)
        return err.exit_code, [f"error: {err}"] + ([f"hint: {err.hint}"] if err.hint else [])
    if isinstance(e, KeyboardInterrupt):
        signum = int(getattr(e, "signum", 2))
        if signum == 2:
            return 130, ["interrupted"]
        import signal

        return 128 + signum, [f"terminated ({signal.Signals(signum).name})"]
    return 1, [f"internal error: {type(e).__name__}: {e}"[:2000],
               "hint: please report this with the command line (NSYSAN_DEBUG=1 shows the traceback)"]
