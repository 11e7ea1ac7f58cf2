"""An analysis in, a comparison out: ``load`` reads a saved nsysan JSON file (schema
``nsysan.analysis/2``, checked as untrusted input) or analyses a trace (through the results cache);
``dumps`` writes a diff or ladder as strict JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from nsysan.errors import UsageError
from nsysan.saved import loads_saved, validate_saved


def load(source: str | Path, iteration_range: str | None = None) -> dict[str, Any]:
    """An analysis as a dict: from a saved nsysan JSON file, or by analysing a trace."""
    from nsysan.units import clean_text

    path = Path(source)
    if path.suffix == ".json":
        from nsysan.outputs import read_small_file

        shown = clean_text(path)
        raw = read_small_file(path, "saved analysis")
        try:
            d, bad = loads_saved(raw.decode("utf-8"))
        except RecursionError:
            raise UsageError(f"{shown}: not an nsysan JSON file (nested too deeply)") from None
        except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
            raise UsageError(f"{shown}: not an nsysan JSON file ({clean_text(e)})") from e
        if bad:  # a number no float holds, anywhere in the file (not only in the fields checked below)
            raise UsageError(f"{shown}: a damaged nsysan JSON file: {clean_text(bad)}",
                             hint="write it again with nsysan analyze TRACE --json OUT.json")
        if isinstance(d, dict) and d.get("schema") == "nsysan.analysis/1":
            raise UsageError(f"{shown}: an nsysan.analysis/1 file, whose iteration times are latencies; "
                             "analyse the trace again (nsysan.analysis/2 compares periods)")
        if not isinstance(d, dict) or d.get("schema") != "nsysan.analysis/2":
            raise UsageError(f"{shown}: not an nsysan analysis (expected schema nsysan.analysis/2)")
        bad = validate_saved(d)
        if bad:
            raise UsageError(f"{shown}: a damaged nsysan.analysis/2 file: {clean_text(bad)}",
                             hint="write it again with nsysan analyze TRACE --json OUT.json")
        return d
    from nsysan import results

    k = results.key(path, results.options_of(iteration_range))
    d = results.get(k)  # analysed before with these options (nsysan analyze, compare or diff)
    if d is not None:
        return d
    from nsysan.analysis import Params, analyze
    from nsysan.report.jsonout import analysis_to_dict, dumps
    from nsysan.trace import open_trace

    d = analysis_to_dict(analyze(open_trace(path), Params(iteration_range=iteration_range)))
    results.put(k, dumps(d))
    return d


def finite(v: Any) -> Any:
    """``v`` with every NaN or infinite float replaced by None: JSON has no such numbers."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: finite(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [finite(x) for x in v]
    if isinstance(v, np.generic):
        return finite(v.item())
    return v


def dumps(d: dict[str, Any]) -> str:
    """A diff or ladder as strict JSON (sorted keys, no NaN)."""
    return json.dumps(finite(d), sort_keys=True, indent=1, allow_nan=False, default=str) + "\n"
