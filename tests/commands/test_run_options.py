"""``RunOptions`` (issue 50): the options of ``analyze`` as one frozen value made once from the parsed
arguments, which pickles (``--jobs`` workers, Dask), with the command line's defaults."""

from __future__ import annotations

import dataclasses
import pickle

import pytest

from nsysan import cluster
from nsysan.cli.parser import build_parser
from nsysan.errors import UsageError
from nsysan.options import RuleConfig, RunOptions


def _args(*extra: str):
    return build_parser().parse_args(["analyze", "t.sqlite", *extra])


def test_the_defaults_are_the_command_lines() -> None:
    assert RunOptions.from_args(_args(), many=True) == RunOptions()
    assert RunOptions.from_args(_args(), many=False) == RunOptions(interactive=True)


def test_it_is_frozen_and_pickles() -> None:
    o = RunOptions.from_args(_args("--set", "host-bound-gap.min_frac=0.2", "--disable", "host-bound-gap",
                                   "--time-range", "1:2", "--min-gap-us", "2.5", "-q"), many=True)
    o = dataclasses.replace(o, outputs={"json": "a.json"}, protect=((1, 2),), source="t.sqlite")
    assert pickle.loads(pickle.dumps(o)) == o
    assert o.min_gap_ns == 2500 and o.time_range == (1.0, 2.0) and o.quiet and not o.interactive
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.quiet = False  # type: ignore[misc]
    # the rule config: the thresholds and the disabled rules, each its own field
    assert o.rule_config == RuleConfig({"host-bound-gap": {"min_frac": 0.2}}, ("host-bound-gap",))
    # the results cache keys on both, a new dict each time
    d = o.rule_config.cache_key()
    assert d == {"host-bound-gap": {"min_frac": 0.2}, "_disabled": {"host-bound-gap": True}}
    d["host-bound-gap"]["min_frac"] = 1
    assert o.rule_config.cache_key()["host-bound-gap"]["min_frac"] == 0.2
    assert RuleConfig().cache_key() == {}


def test_set_over_config_and_unknown_rules(tmp_path) -> None:
    cfg = tmp_path / "c.json"
    cfg.write_text('{"rules": {"host-bound-gap": {"min_frac": 0.3}}}')
    rc = RuleConfig.build(cfg, ["host-bound-gap.min_frac=0.4"], None)
    assert rc == RuleConfig({"host-bound-gap": {"min_frac": 0.4}}, ())
    with pytest.raises(UsageError, match="--disable: unknown rule"):
        RuleConfig.build(None, None, ["no-such-rule"])


def test_the_apis_rule_options() -> None:
    # a "_disabled" entry of the API's rule_config names rules not to run, as disable does
    rc = RuleConfig.from_api(None, {"launch-bound": {"min_kernels": 5}, "_disabled": {"sync-api": True}},
                             {"host-bound-gap.min_frac": 0.1}, ["host-bound-gap", "sync-api"])
    assert rc == RuleConfig({"launch-bound": {"min_kernels": 5}, "host-bound-gap": {"min_frac": 0.1}},
                            ("sync-api", "host-bound-gap"))
    with pytest.raises(UsageError, match="disable: unknown rule"):
        RuleConfig.from_api(None, None, None, ["no-such-rule"])


def test_the_cluster_sends_absolute_paths(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    o = RunOptions(outputs={"json": "a.json"}, quiet=True)
    [(t, got)] = cluster.absolute([("t.sqlite", o)])
    assert t == str(tmp_path.resolve() / "t.sqlite") and got.outputs == {"json": str(tmp_path.resolve() / "a.json")}
    assert got.quiet and o.outputs == {"json": "a.json"}
