"""The JSON Schema of the ``--json`` document (``nsysan.analysis/2``), shipped in the package
(``nsysan/report/analysis-2.schema.json``), and a small validator for the part of JSON Schema
(draft 2020-12) it uses, so that checking a document needs no other package.

The schema's version is the document's ``schema`` value: a consumer reads ``analysis-N.schema.json``
for ``nsysan.analysis/N``. docs/json.md says when N changes (a key removed or renamed, a type or a
meaning changed) and when it does not (a key added: consumers ignore keys they do not know)."""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

from nsysan.report.jsonout import SCHEMA

# what the validator understands; a schema using another keyword is refused rather than half-checked
KEYWORDS = frozenset({"$schema", "$id", "$defs", "$ref", "$comment", "title", "description", "type", "properties",
                      "required", "additionalProperties", "patternProperties", "items", "enum", "const", "minimum",
                      "maximum", "anyOf", "examples"})
_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def schema_path(name: str = SCHEMA) -> Path:
    """The schema file of document schema ``name`` (``nsysan.analysis/2`` -> ``analysis-2.schema.json``)."""
    kind, _, version = name.removeprefix("nsysan.").partition("/")
    return Path(__file__).with_name(f"{kind}-{version}.schema.json")


@cache
def load(name: str = SCHEMA) -> dict[str, Any]:
    """The JSON Schema of document schema ``name`` (parsed; cached)."""
    doc: dict[str, Any] = json.loads(schema_path(name).read_text("utf-8"))
    return doc


def _is(value: Any, t: str) -> bool:
    if t == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if t == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, _TYPES[t])


def _check(value: Any, s: dict[str, Any] | bool, root: dict[str, Any], path: str, errors: list[str]) -> None:
    if s is True:
        return
    if s is False:
        errors.append(f"{path}: not allowed here")
        return
    unknown = set(s) - KEYWORDS
    if unknown:
        raise ValueError(f"schema at {path} uses keywords this validator does not know: {sorted(unknown)}")
    if "$ref" in s:
        ref = s["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"only local references (#/$defs/...) are supported, not {ref!r}")
        _check(value, root["$defs"][ref.removeprefix("#/$defs/")], root, path, errors)
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        if not any(_is(value, t) for t in types):
            errors.append(f"{path}: {type(value).__name__} {json.dumps(value)[:60]} is not {' or '.join(types)}")
            return
    if "enum" in s and value not in s["enum"]:
        errors.append(f"{path}: {json.dumps(value)[:60]} is not one of {s['enum']}")
    if "const" in s and value != s["const"]:
        errors.append(f"{path}: {json.dumps(value)[:60]} is not {json.dumps(s['const'])}")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in s and value < s["minimum"]:
            errors.append(f"{path}: {value} is below the minimum {s['minimum']}")
        if "maximum" in s and value > s["maximum"]:
            errors.append(f"{path}: {value} is above the maximum {s['maximum']}")
    if "anyOf" in s:
        tries = []
        for sub in s["anyOf"]:
            e: list[str] = []
            _check(value, sub, root, path, e)
            if not e:
                break
            tries.append(e)
        else:
            errors.append(f"{path}: matches none of anyOf ({'; '.join(t[0] for t in tries if t)})")
    if isinstance(value, dict):
        props = s.get("properties", {})
        for k in s.get("required", ()):
            if k not in value:
                errors.append(f"{path}: required key {k!r} missing")
        pats = [(re.compile(p), sub) for p, sub in s.get("patternProperties", {}).items()]
        for k, v in value.items():
            sub_path = f"{path}.{k}"
            matched = False
            if k in props:
                _check(v, props[k], root, sub_path, errors)
                matched = True
            for rx, sub in pats:
                if rx.search(k):
                    _check(v, sub, root, sub_path, errors)
                    matched = True
            if not matched and "additionalProperties" in s:
                _check(v, s["additionalProperties"], root, sub_path, errors)
    if isinstance(value, list) and "items" in s:
        for i, v in enumerate(value):
            _check(v, s["items"], root, f"{path}[{i}]", errors)


def validate(doc: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """Every way ``doc`` breaks ``schema`` (default: the schema its ``schema`` key names, else the
    current one), as ``path: what`` lines; [] when it conforms."""
    if schema is None:
        name = doc.get("schema") if isinstance(doc, dict) else None
        schema = load(name if isinstance(name, str) and schema_path(name).is_file() else SCHEMA)
    errors: list[str] = []
    _check(doc, schema, schema, "$", errors)
    return errors
