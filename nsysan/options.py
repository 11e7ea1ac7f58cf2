"""Validation of the analysis options, shared by the command line and the Python API, so both accept
the same values and reject the others with the same words: numbers (``--min-gap-us``,
``--warmup-factor``, ``--max-events``), rule thresholds (``--set``, ``--config``) and ``--disable``.
The rules (and pandas) are imported only when a rule option is given."""

from __future__ import annotations

import json
import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from nsysan._defaults import MAX_EVENTS, MIN_GAP_NS, WARMUP_FACTOR
from nsysan.errors import UsageError
from nsysan.units import clean_text

SET_SHAPE = "expected RULE.THRESHOLD=VALUE, e.g. host-bound-gap.min_frac=0.1"
CONFIG_SHAPE = "expected {\"rules\": {RULE: {THRESHOLD: VALUE}}}"


MAX_NUMBER = 1 << 62  # no count, size, time or threshold a user types is larger (and it fits int64)


def check_number(value: Any, *, minimum: float = 0.0, strict: bool = False, integer: bool = False) -> Any:
    """A finite number >= minimum (> with ``strict``; an integer with ``integer``), from a number or
    from command-line text; ``ValueError("'TEXT': expected a number >= 0")`` otherwise (the message
    the CLI shows after the option's name)."""
    what = ("an integer" if integer else "a number") + (f" > {minimum:g}" if strict else f" >= {minimum:g}")
    bad = ValueError(f"{clean_text(repr(value))[:80]}: expected {what}")
    if isinstance(value, str):
        try:
            v = int(value, 10) if integer else float(value)
        except (TypeError, ValueError):
            raise bad from None
    elif isinstance(value, bool) or not isinstance(value, numbers.Real):  # numpy numbers are Real too
        raise bad
    elif integer:
        if isinstance(value, float) or not float(value).is_integer():
            raise bad
        v = int(value)
    else:
        v = float(value)
    if v > MAX_NUMBER:  # (compared before isfinite: a 400-digit integer is no float)
        raise ValueError(f"{clean_text(repr(value))[:80]}: expected {what}, at most 2^62")
    if v < -MAX_NUMBER or not math.isfinite(v) or v < minimum or (strict and v == minimum):
        raise bad
    return v


# the keywords of ``nsysan.analyze`` (besides ``max_events``), as ``nsysan.analysis.analyze`` takes them
API_OPTIONS = ("iteration_range", "min_gap_us", "warmup_factor", "rule_config", "config", "set", "disable",
               "rules", "workers", "progress", "on_analyses")


class OptionError(ValueError, TypeError):
    """An invalid option of the Python API: an unknown keyword, or a value of the wrong kind. A
    ``ValueError``, as the README says; also a ``TypeError``, which Python raises for an unknown
    keyword, so code catching either sees it."""


def check_api_options(options: dict[str, Any]) -> None:
    """The keywords of ``nsysan.analyze``: known names, and values of the right kind (numbers, rule
    ids and thresholds are checked further by ``nsysan.analysis.options``, with the CLI's words);
    ``OptionError`` otherwise. An iterator given as ``set`` or ``disable`` is replaced by its list."""
    unknown = [str(k) for k in options if k not in API_OPTIONS]
    if unknown:
        raise OptionError(f"unknown option(s) {clean_text(', '.join(map(repr, unknown)))[:200]}; the options are: "
                          f"{', '.join(API_OPTIONS)}, max_events")

    def bad(name: str, what: str) -> OptionError:
        return OptionError(f"{name}: {clean_text(repr(options[name]))[:60]}: expected {what}")

    def given(name: str) -> bool:
        return options.get(name) is not None

    if "rules" in options and not isinstance(options["rules"], bool):
        raise bad("rules", "True or False")
    if given("workers"):
        try:
            check_number(options["workers"], integer=True)
        except ValueError:
            raise bad("workers", "an integer >= 0 (0: the default)") from None
    for name in ("progress", "on_analyses"):
        if given(name) and not callable(options[name]):
            raise bad(name, "a function")
    if given("config") and not isinstance(options["config"], str) and not hasattr(options["config"], "__fspath__"):
        raise bad("config", "the path of a JSON file")
    if given("rule_config") and not isinstance(options["rule_config"], Mapping):
        raise bad("rule_config", "{rule: {threshold: value}}")
    for name, what in (("set", '{"rule.threshold": value} or ["rule.threshold=value", ...]'), ("disable", "rule ids")):
        v = options.get(name)
        if v is None or isinstance(v, str) or (name == "set" and isinstance(v, Mapping)):
            continue
        if isinstance(v, (bytes, Mapping)) or not isinstance(v, Iterable):
            raise bad(name, what)
        options[name] = v = list(v)  # a generator is read once, here
        if not all(isinstance(x, str) for x in v):
            raise bad(name, what)


def check_threshold(rid: str, name: str, value: Any, default: Any) -> Any:
    """A threshold value of the default's kind (an integer where the default is one, else a number),
    finite and >= 0; a usage error that names it otherwise."""
    kind = "an integer" if isinstance(default, int) and not isinstance(default, bool) else "a number"
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= MAX_NUMBER
          and math.isfinite(value))
    if ok and kind == "an integer":
        ok = float(value).is_integer()
        value = int(value) if ok else value
    if not ok:
        shown = clean_text(json.dumps(value) if not isinstance(value, str) else value)[:60]
        raise UsageError(f"{rid}.{name}={shown}: expected {kind} >= 0, at most 2^62 (default {default})")
    return value


def parse_set(items: Sequence[str], source: str = "--set") -> dict[str, dict[str, Any]]:
    """``RULE.THRESHOLD=VALUE`` items (VALUE as JSON) as ``{rule: {threshold: value}}``, each checked
    against the rule's registered thresholds."""
    if not items:  # nothing to check: no need to import the rules (and pandas) here
        return {}
    from nsysan.rules import REGISTRY

    cfg: dict[str, dict[str, Any]] = {}
    for item in items:
        if not isinstance(item, str) or "=" not in item or "." not in item.split("=", 1)[0]:
            raise UsageError(f"{source} {clean_text(item)!r}: {SET_SHAPE}")
        key, value = item.split("=", 1)
        rid, name = key.rsplit(".", 1)
        if rid not in REGISTRY:
            raise UsageError(f"{source}: unknown rule {clean_text(rid)!r} (see `nsysan rules`)")
        if name not in REGISTRY[rid].thresholds:
            raise UsageError(f"{source}: rule {rid} has no threshold {clean_text(name)!r}; it has: "
                             f"{', '.join(REGISTRY[rid].thresholds) or 'none'}")
        try:
            parsed: Any = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            parsed = value
        try:
            parsed = check_threshold(rid, name, parsed, REGISTRY[rid].thresholds[name])
        except UsageError as e:
            raise UsageError(f"{source} {e}") from None
        cfg.setdefault(rid, {})[name] = parsed
    return cfg


def rules_config(rules: Any, source: str) -> dict[str, dict[str, Any]]:
    """``{rule: {threshold: value}}`` (a config file's ``rules`` object, or the API's ``rule_config``),
    checked as ``parse_set`` checks ``--set``."""
    if not isinstance(rules, Mapping):
        raise UsageError(f"{source} \"rules\" is not an object; {CONFIG_SHAPE}")
    items = []
    if rules:
        from nsysan.rules import REGISTRY

        unknown = [str(r) for r in rules if r not in REGISTRY]
        if unknown:  # also one with no thresholds, which parse_set would not see
            raise UsageError(f"{source} unknown rule(s) {clean_text(', '.join(unknown))} (see `nsysan rules`)")
    for rid, th in rules.items():
        if not isinstance(th, Mapping):
            raise UsageError(f"{source} rules.{clean_text(rid)} is not an object of thresholds; {CONFIG_SHAPE}")
        try:
            items += [f"{rid}.{k}={json.dumps(v)}" for k, v in th.items()]
        except (TypeError, ValueError) as e:  # a value JSON cannot hold (an object, NaN is fine)
            raise UsageError(f"{source} rules.{clean_text(rid)}: {clean_text(e)}") from None
    return parse_set(items, source=source)


def load_config(path: Path | None, option: str = "--config") -> dict[str, dict[str, Any]]:
    """The thresholds of a JSON config file ``{"rules": {rule: {threshold: value}}}`` (or the rules
    object alone)."""
    if path is None:
        return {}
    from nsysan.outputs import read_small_file

    shown = clean_text(path)
    try:
        data = json.loads(read_small_file(path, option).decode("utf-8"))
    except UnicodeDecodeError as e:
        raise UsageError(f"{option} {shown}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except (json.JSONDecodeError, RecursionError) as e:
        raise UsageError(f"{option} {shown}: not valid JSON ({clean_text(e) if not isinstance(e, RecursionError) else 'nested too deeply'})") from e
    if not isinstance(data, dict):
        raise UsageError(f"{option} {shown}: the top level is a JSON {type(data).__name__}; {CONFIG_SHAPE}")
    rules = data.get("rules", data)
    if not isinstance(rules, dict):
        raise UsageError(f"{option} {shown}: \"rules\" is not an object; {CONFIG_SHAPE}")
    return rules_config(rules, source=f"{option} {shown}:")


def disabled_rules(names: Iterable[str], option: str = "--disable") -> tuple[str, ...]:
    """The rules not to run, each once, in the order given; a usage error naming the unknown ones."""
    names = [names] if isinstance(names, str) else list(names)
    if not names:
        return ()
    from nsysan.rules import REGISTRY

    unknown = [str(r) for r in names if r not in REGISTRY]
    if unknown:
        raise UsageError(f"{option}: unknown rule(s) {clean_text(', '.join(unknown))}")
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class RuleConfig:
    """The rules' configuration of ``analyze``: the thresholds (``{rule: {threshold: value}}``:
    ``--config``, then ``--set`` over it) and the rules not to run (``--disable``)."""

    thresholds: dict[str, dict[str, Any]] = field(default_factory=dict)
    disabled: tuple[str, ...] = ()

    @classmethod
    def build(cls, config: Path | None, set_items: Sequence[str] | None,
              disable: Sequence[str] | None) -> RuleConfig:
        """The rule configuration of ``--config``, then ``--set`` over it, then ``--disable``."""
        thresholds: dict[str, dict[str, Any]] = load_config(config)
        for rid, th in parse_set(set_items or []).items():
            thresholds.setdefault(rid, {}).update(th)
        return cls(thresholds, disabled_rules(disable) if disable else ())

    @classmethod
    def from_api(cls, config: str | os.PathLike[str] | None, rule_config: Mapping[str, Any] | None,
                 settings: Mapping[str, Any] | Iterable[str] | None, disable: Iterable[str] | None) -> RuleConfig:
        """The rule configuration of the Python API's options (``nsysan.analysis.options``), checked as
        the command line's: ``config`` (a JSON file as ``--config``), then ``rule_config`` (the same
        ``{rule: {threshold: value}}`` as a dict; a ``"_disabled"`` entry in it names rules not to
        run), then ``settings`` (``{"rule.threshold": value}`` or ``["rule.threshold=value", ...]`` as
        ``--set``); ``disable``: rule ids, as ``--disable``. A usage error names what is wrong."""
        thresholds = load_config(Path(config), option="config") if config is not None else {}
        extra = dict(rule_config or {})
        off = extra.pop("_disabled", {})
        for rid, th in rules_config(extra, "rule_config:").items() if extra else ():
            thresholds.setdefault(rid, {}).update(th)
        if settings is not None:
            items = ([settings] if isinstance(settings, str) else
                     [f"{k}={json.dumps(v)}" for k, v in settings.items()] if isinstance(settings, Mapping)
                     else list(settings))
            for rid, th in parse_set(items, source="set").items():
                thresholds.setdefault(rid, {}).update(th)
        names = [*off, *([disable] if isinstance(disable, str) else disable or [])]
        return cls(thresholds, disabled_rules(names, option="disable") if names else ())

    def cache_key(self) -> dict[str, Any]:
        """The rules' part of a results cache key (``results.options_of``): the thresholds, with the
        disabled rules as ``"_disabled": {rule: True}`` (the form the cache's entries are keyed on).
        A new dict each time (its reader may change it)."""
        out: dict[str, Any] = {rid: dict(th) for rid, th in self.thresholds.items()}
        if self.disabled:
            out["_disabled"] = dict.fromkeys(self.disabled, True)
        return out


@dataclass(frozen=True)
class RunOptions:
    """What one trace of ``analyze`` is run with, made once from the parsed arguments
    (``from_args``); each trace's own outputs (``outputs``: path by output name, ``report.formats``),
    the inputs' identities not to write over (``protect``) and the SQLite file read (``source``) are
    set by ``pipeline.plan_analyze`` and ``analyze_single``. Plain values: it pickles, to a process
    of ``--jobs`` or a Dask worker. The defaults are the command line's."""

    iteration_range: str | None = None
    min_gap_ns: int = MIN_GAP_NS
    warmup_factor: float = WARMUP_FACTOR
    rule_config: RuleConfig = field(default_factory=RuleConfig)
    show_env: bool = False
    force: bool = False
    quiet: bool = False
    max_events: int = MAX_EVENTS
    interactive: bool = False  # one trace in this process: a progress line on a terminal
    time_range: tuple[float, float] | None = None
    outputs: dict[str, str] = field(default_factory=dict)
    protect: tuple[tuple[int, int], ...] = ()
    source: str | None = None

    @classmethod
    def from_args(cls, args: Any, many: bool) -> RunOptions:
        """The options every trace of the ``analyze`` command shares (its parsed ``args``)."""
        return cls(iteration_range=args.iteration_range, min_gap_ns=int(args.min_gap_us * 1000),
                   warmup_factor=args.warmup_factor, rule_config=RuleConfig.build(args.config, args.set, args.disable),
                   show_env=args.show_env, force=args.force, quiet=args.quiet, max_events=args.max_events,
                   interactive=not many, time_range=args.time_range)


# -- the command line's option values (argparse ``type=``: a bad value is its usage error) ---------

def _type_error(message: str) -> Exception:
    import argparse

    return argparse.ArgumentTypeError(message)


# each command's line in ``nsysan -h`` and the description its own ``-h`` opens with
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("analyse one or more nsys SQLite exports",
                "Where the time goes in nsys SQLite exports (or .nsys-rep reports, exported once with nsys), "
                "and the fixes ranked by the time each saves: a terminal summary and an HTML report; "
                "--json, --csv and --perfetto for more, --out-dir for several traces."),
    "rules": ("list the rules, their rationale and thresholds",
              "What each rule finds, why it matters, how to fix it, and its thresholds "
              "(change one with nsysan analyze --set RULE.THRESHOLD=VALUE)."),
    "profile": ("run a command under nsys and export SQLite",
                "Run COMMAND under Nsight Systems (nsys profile) and export the trace to SQLite, ready for "
                "nsysan analyze; --diagnose records everything the rules can use."),
    "diff": ("compare two traces (or nsysan JSON files): metrics, kernels, NVTX, findings",
             "What changed between two runs (traces or nsysan JSON files): metrics with a noise test, kernels, "
             "NVTX ranges, and the findings fixed, remaining and new; --fail-on-regression makes it a CI gate "
             "(exit 11)."),
    "compare": ("one table over many traces (an optimization ladder)",
                "One table over many traces, in order (an optimization ladder): each step's speedup and the "
                "total, GPU busy and the top finding of each."),
    "example": ("print the path of a bundled example trace",
                "Print the path of a bundled example trace (decompressed once into nsysan's cache). Any command "
                "takes 'example' or 'example:NAME' in place of a trace."),
}


def add_command(sub: Any, name: str) -> Any:
    """The subparser of command ``name`` (``COMMANDS``: its help line and description)."""
    line, description = COMMANDS[name]
    return sub.add_parser(name, help=line, description=description)


def one_line_parser(**kw: Any) -> Any:
    """argparse's parser (its subcommands' too), whose usage errors are one line (the option and what
    it accepts) and a hint, not its usage block of 7 to 11 lines (``-h`` prints that); exit 2."""
    import argparse

    class OneLineParser(argparse.ArgumentParser):
        def error(self, message: str) -> NoReturn:
            self.exit(2, f"{self.prog}: error: {clean_text(message)}\nnsysan: hint: `{self.prog} -h` lists the options\n")

    return OneLineParser(**kw)


def opt_number(option: str, **kw: Any) -> Any:
    """An argparse ``type`` for ``option``: ``check_number(text, **kw)``."""
    def parse(text: str) -> Any:
        try:
            return check_number(text, **kw)
        except ValueError as e:
            raise _type_error(str(e)) from None

    parse.__name__ = option  # argparse names the option in its message
    return parse


def time_range(text: str) -> tuple[float, float]:
    """``START:END`` in seconds from the capture's start, 0 <= START < END."""
    start, sep, end = text.partition(":")
    try:
        a, b = check_number(start), check_number(end)
    except ValueError:
        a = b = -1.0
    if not sep or not 0 <= a < b:
        raise _type_error(f"{clean_text(text)!r}: expected START:END in seconds from the capture's start, "
                          "0 <= START < END (e.g. 10:12.5)")
    return (float(a), float(b))


_SCHEDULER = re.compile(r"^(?:(?:tcp|ws)://)?[A-Za-z0-9_.\-\[\]:%]+(?::\d{1,5})?/?$")
# Dask schemes nsysan does not support: each needs more than an address (tls/wss: certificates; ucx:
# UCX-Py and its network; inproc: a scheduler inside this very process)
_UNSUPPORTED_SCHEMES = {"tls": "it needs TLS certificates, which nsysan does not pass to Dask",
                        "wss": "it needs TLS certificates, which nsysan does not pass to Dask",
                        "ucx": "it needs UCX-Py and a UCX network",
                        "inproc": "it names a scheduler inside the nsysan process itself"}


def scheduler_address(text: str) -> str:
    """A Dask scheduler address (``tcp://head:8786``, ``ws://head:8786`` or ``host:port``); other
    Dask schemes (``tls://``, ``wss://``, ``ucx://``, ``inproc://``) are refused with the reason."""
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    if scheme in _UNSUPPORTED_SCHEMES:
        raise _type_error(f"{clean_text(text)!r}: {scheme}:// schedulers are not supported ({_UNSUPPORTED_SCHEMES[scheme]}); "
                          "expected tcp://HOST:PORT (or ws://HOST:PORT, or HOST:PORT)")
    port = re.search(r":(\d{1,5})/?$", text)
    if (not _SCHEDULER.match(text) or text.startswith((":", "/")) or "://" not in text and ":" not in text
            or port and int(port.group(1)) > 65535):
        raise _type_error(f"{clean_text(text)!r}: expected a Dask scheduler address such as "
                          "tcp://head:8786 (or host:port, port 0-65535)")
    return text


def positive_jobs(jobs: int, n: int) -> int:
    """Workers: min(--jobs or the cores, traces, cores)."""
    from nsysan._executor import cpus

    cores = cpus()
    return max(1, min(jobs or cores, n, cores))


class LazyChoices(Sequence[str]):
    """An option's choices, from ``load()`` when argparse first uses them (to check a value, or to
    print help: diff's and compare's metric names come from ``nsysan.compare``, which imports numpy,
    10 ms before ``analyze`` could start reading the trace). ``add_argument`` also formats them once,
    only to check that it can: until ``ready`` is set (once the parser is built) they read as empty."""

    def __init__(self, load: Callable[[], Iterable[str]]) -> None:
        self.load = load
        self.ready = False

    def _items(self) -> list[str]:
        return list(self.load()) if self.ready else []

    def __getitem__(self, i: Any) -> Any:
        return self._items()[i]

    def __len__(self) -> int:
        return len(self._items())

    def __iter__(self) -> Any:
        return iter(self._items())

    def __contains__(self, x: object) -> bool:
        return x in self._items()
