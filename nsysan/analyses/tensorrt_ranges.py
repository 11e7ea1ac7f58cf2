"""TensorRT's own NVTX ranges: which labels are TensorRT's, which are engine executions, which are
Myelin-internal, and the ONNX nodes a layer's name says it fused.

**What TensorRT emits.** With NVTX tracing (``nsys -t nvtx``) TensorRT pushes, in its ``TensorRT``
domain, one range per engine execution, ``ExecutionContext::execute`` (the synchronous
``execute``/``executeV2``) or ``ExecutionContext::enqueue`` (``enqueueV2``/``enqueueV3`` on a
stream; bare ``enqueueV3``/``executeV2`` texts are recognised too), and inside it, unless the
engine was built with ``ProfilingVerbosity::kNONE``, one range per layer, named after the ONNX
nodes it fused (``/layer1/layer1.0/conv1/Conv + /layer1/layer1.0/relu/Relu``; pointwise fusions
``PWN(PWN(/a/Sigmoid), /a/Mul)``; parallel branches ``A || B``), the format conversions it inserted
(``Reformatting CopyNode for Input Tensor 0 to <layer>``), and Myelin regions
(``{ForeignNode[/first.../last]}``), whose internals Myelin marks in its ``myelin``/``myelin-exec``
domains (``myelinGraphExecute``...; internal, never layers). Which of them are executions and
layers: ``tensorrt`` (the module that assembles the view).
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

TRT_DOMAINS = frozenset({"tensorrt"})
MYELIN_DOMAINS = frozenset({"myelin", "myelin-exec"})
# an engine execution's whole text (a final newline allowed), and the prefixes of TensorRT's other
# texts: set lookups and prefixes, not a regex call per label (``range_kinds`` decides each of 300,000
# distinct labels)
EXEC_TEXTS = frozenset(f"{p}ExecutionContext::{m}" for p in ("", "I")
                       for m in ("execute", "executeV2", "enqueue", "enqueueV2", "enqueueV3")) \
    | {"enqueueV2", "enqueueV3", "executeV2"}
TRT_PREFIXES = ("ExecutionContext::", "IExecutionContext::", "Reformatting CopyNode", "{ForeignNode[")
SYNC_TEXT = re.compile(r"execute(?:V2)?$")
REFORMAT_NAME = re.compile(r"^Reformatting CopyNode\b")
OUTSIDE = "(outside layer ranges)"


def _text(name: str, domain: str | None) -> str:
    return name[len(domain) + 1:] if domain and name.startswith(domain + ":") else name


def range_texts(rg: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """The range text (label without its ``domain:`` prefix) of the given rows, computed once per
    distinct (label, domain)."""
    if len(rows) == 0:
        return np.zeros(0, dtype=object)
    names = pd.Series(rg["name"].to_numpy()[rows], dtype=object).astype(str)
    doms = (pd.Series(rg["domain"].to_numpy()[rows], dtype=object) if "domain" in rg
            else pd.Series([None] * len(rows), dtype=object))
    doms = doms.where(doms.notna(), "")
    codes, uniq = pd.factorize(pd.MultiIndex.from_arrays([names.to_numpy(), doms.astype(str).to_numpy()]))
    lut = np.array([_text(str(n), str(d) or None) for n, d in uniq], dtype=object)
    return lut[codes]


def range_kinds(rg: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per NVTX range (``nvtx.ranges`` rows): is it TensorRT's (domain or text), an execution
    range, a Myelin-internal range. Decided once per distinct label."""
    n = len(rg)
    if n == 0:
        z = np.zeros(0, dtype=bool)
        return z, z, z
    # one label = one (domain, text): nsys labels a range in a domain "domain:text"
    codes, uniq = pd.factorize(rg["name"])
    first = np.full(len(uniq), -1, dtype=np.int64)
    first[codes[::-1]] = np.arange(n - 1, -1, -1)
    doms = rg["domain"].to_numpy()[first] if "domain" in rg else np.full(len(uniq), None)
    trt, ex, my = (np.zeros(len(uniq), dtype=bool) for _ in range(3))
    for i, (name, d) in enumerate(zip(uniq.tolist(), doms.tolist())):
        if d is None or d is pd.NA or (isinstance(d, float) and np.isnan(d)):
            text, dl = str(name), ""
        else:
            d = str(d).strip()
            text, dl = _text(str(name), d or None), d.lower()
        m = dl in MYELIN_DOMAINS
        e = text in EXEC_TEXTS or (text[-1:] == "\n" and text[:-1] in EXEC_TEXTS)
        my[i] = m
        trt[i] = dl in TRT_DOMAINS or m or text.startswith(TRT_PREFIXES) or e
        ex[i] = e and not m
    return trt[codes], ex[codes], my[codes]


def execution_rows(rg: pd.DataFrame) -> np.ndarray:
    """Mask of the engine executions among ``nvtx.ranges`` rows: execution ranges that hold no
    other execution range (push/pop nesting, ``parent``)."""
    _, ex, _ = range_kinds(rg)
    if not ex.any():
        return ex
    parent = rg["parent"].to_numpy()
    inner_of = parent[ex & (parent >= 0)]
    outer = np.zeros(len(rg), dtype=bool)
    outer[inner_of[ex[inner_of]]] = True
    return ex & ~outer


def layer_rows(rg: pd.DataFrame, ex_mask: np.ndarray,
                exec_of_row: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The layer ranges (push/pop ranges whose parent is an execution): their rows in ``rg``,
    execution, start and end, ordered by (execution, start)."""
    parent = rg["parent"].to_numpy()
    style_pp = (rg["style"] == "PushPop").to_numpy()
    is_layer = (parent >= 0) & style_pp & ~ex_mask
    is_layer &= exec_of_row[np.maximum(parent, 0)] >= 0
    layer_pos = np.flatnonzero(is_layer)
    l_exec = exec_of_row[parent[layer_pos]]
    l_start = rg["start_ns"].to_numpy()[layer_pos]
    lorder = np.lexsort((l_start, l_exec))
    layer_pos, l_exec, l_start = layer_pos[lorder], l_exec[lorder], l_start[lorder]
    return layer_pos, l_exec, l_start, rg["end_ns"].to_numpy()[layer_pos]


def onnx_nodes(text: str) -> list[str]:
    """The ONNX nodes a layer name says it fused (empty for reformats and copies)."""
    if REFORMAT_NAME.match(text) or text == OUTSIDE:
        return []
    m = re.match(r"^\{ForeignNode\[(.*)\]\}$", text)
    if m:
        return [p for p in m.group(1).split("...") if p]
    parts = re.split(r"\s+\+\s+|\s+\|\|\s+|,\s+", text.replace("PWN(", ""))
    return [p.strip().rstrip(")").strip() for p in parts if p.strip().rstrip(")").strip()]
