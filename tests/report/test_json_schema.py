"""The JSON Schema of ``--json`` (``nsysan/report/analysis-2.schema.json``, shipped in the package):
every fixture's and every public export's document conforms to it, the schema is the version the
document names, every top-level key the output writes is described, and the validator (nsysan's own,
``nsysan/report/schema.py``) finds what breaks a document."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from conftest import CORPUS, FIXTURE_NAMES, analyzed

from nsysan.report.jsonout import SCHEMA
from nsysan.report.schema import KEYWORDS, load, schema_path, validate

PUBLIC = sorted(CORPUS.glob("*.sqlite")) if CORPUS.exists() else []


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_fixture_s_json_conforms(name, analysis):
    # GIVEN the --json document of a fixture
    doc = json.loads(analysis(name).to_json())
    # THEN it conforms to the schema of the version it names
    assert doc["schema"] == SCHEMA
    assert validate(doc) == []


@pytest.mark.skipif(not PUBLIC, reason="public corpus not present (../shared)")
@pytest.mark.parametrize("path", PUBLIC, ids=[p.name[:40] for p in PUBLIC])
def test_every_public_export_s_json_conforms(path: Path):
    assert validate(json.loads(analyzed(path).to_json())) == []


def test_a_disabled_rule_conforms_too(analysis):
    # GIVEN a rule switched off (its log entry has no thresholds)
    doc = json.loads(analysis("ladder_baseline", disable=["launch-bound"]).to_json())
    assert {"rule": "launch-bound", "status": "disabled"} in doc["rules"]
    assert validate(doc) == []


def test_the_schema_is_the_version_the_document_names_and_ships_in_the_package():
    s = load()
    assert s["$id"] == SCHEMA and s["properties"]["schema"] == {
        "const": SCHEMA, "description": s["properties"]["schema"]["description"]}
    assert schema_path().parent.name == "report" and schema_path().parent.parent.name == "nsysan"
    assert schema_path().name == "analysis-2.schema.json"


def test_every_top_level_key_is_described_and_required(analysis):
    # GIVEN a document with every section
    doc = json.loads(analysis("ladder_baseline").to_json())
    s = load()
    # THEN the schema names each key the output writes, with what it means, and requires it
    assert set(doc) == set(s["properties"]) == set(s["required"])
    assert all(s["properties"][k].get("description") for k in doc)


def test_the_validator_finds_what_breaks_a_document(analysis):
    # GIVEN a conforming document broken five ways
    doc = json.loads(analysis("ladder_baseline").to_json())
    bad = copy.deepcopy(doc)
    bad["schema"] = "nsysan.analysis/1"
    del bad["windows"]
    bad["kernels"]["by_name"][0]["total_ns"] = 1.5  # a total in integer nanoseconds
    bad["findings"][0]["severity"] = "fatal"
    bad["rules"][0]["status"] = "skipped"
    # THEN each is reported at its path
    errs = validate(bad, load())
    for where in ("$.schema:", "$: required key 'windows' missing", "$.kernels.by_name[0].total_ns:",
                  "$.findings[0].severity:", "$.rules[0].status:"):
        assert any(e.startswith(where) for e in errs), (where, errs)
    assert len(errs) == 5, errs


def test_the_validator_refuses_keywords_it_does_not_check():
    # a schema it would check only in part is refused, not passed
    with pytest.raises(ValueError, match="oneOf"):
        validate({"a": 1}, {"type": "object", "oneOf": [{"required": ["a"]}]})
    assert "oneOf" not in KEYWORDS
    # the keywords it checks, each on a small case
    s = {"$defs": {"n": {"type": "integer", "minimum": 0}}, "type": "object",
         "properties": {"n": {"$ref": "#/$defs/n"}, "x": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
         "patternProperties": {"^p_": {"type": "boolean"}}, "additionalProperties": False}
    assert validate({"n": 3, "x": None, "p_a": True}, s) == []
    assert validate({"n": -1, "x": 2, "p_a": 1, "z": 0}, s) == [
        "$.n: -1 is below the minimum 0",
        "$.x: matches none of anyOf ($.x: int 2 is not string; $.x: int 2 is not null)",
        "$.p_a: int 1 is not boolean", "$.z: not allowed here"]
