"""The NVTX ranges ``nsysan profile --annotate`` adds to a program it records.

They are in a domain of nsysan's own, ``nsysan`` (shown by nsys as ``nsysan:step``), added by the
recorder's import hook (``nsysan/record/site/_nsysan_annotate.py``, which runs in the profiled
program and so cannot import this module: a test keeps the names equal):

* ``step``: one training iteration, a start/end range from the end of one ``Optimizer.step`` to
  the end of the next (the first from the first DataLoader batch or model forward); in a program
  with no optimizer, one top-level ``generate()`` call;
* the parts of a step (push/pop ranges): ``input wait`` (the DataLoader iterator's ``__next__``),
  ``forward`` (the outermost module call), ``backward``, ``optimizer`` (``Optimizer.step``),
  ``zero_grad``, ``training_step`` / ``validation_step`` (Lightning; ``training_step`` also HF
  Trainer's), ``evaluate`` (HF Trainer), ``generate`` (a ``generate()`` call in a program that
  also trains) and ``token`` (a model forward inside ``generate()``);
* every other range name in the domain is a function ``jax.jit`` returned, one range per call,
  named by the function (``train_step``);
* marks ``synchronize FILE:LINE`` and ``item FILE:LINE`` at the ``torch.cuda.synchronize`` and
  ``Tensor.item`` call sites.

The recorder's ranges are the iteration when the program has no ranges of its own; the report says
they were added by the recorder. One ``step`` is not an iteration: the one the last optimizer step
opens is never ended, and nsys closes it at the end of the capture (the program's teardown, often
seconds); :func:`iteration_steps` leaves out every ``step`` that holds no ``optimizer`` end.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

RECORDER_DOMAIN = "nsysan"

STEP = "step"
INPUT_WAIT = "input wait"
FORWARD = "forward"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
ZERO_GRAD = "zero_grad"
TRAINING_STEP = "training_step"
VALIDATION_STEP = "validation_step"
EVALUATE = "evaluate"
GENERATE = "generate"
TOKEN = "token"

# every fixed range name; anything else in the domain is a jitted JAX function
RANGES: tuple[str, ...] = (STEP, INPUT_WAIT, FORWARD, BACKWARD, OPTIMIZER, ZERO_GRAD, TRAINING_STEP,
                           VALIDATION_STEP, EVALUATE, GENERATE, TOKEN)
# the iteration, in order of preference: a training step, else one generate() call (also `step`)
ITERATION = STEP
# the parts of an iteration, as the "Steps within steps" breakdown shows them
SUBSTEPS: tuple[str, ...] = (INPUT_WAIT, ZERO_GRAD, FORWARD, BACKWARD, OPTIMIZER, TRAINING_STEP, VALIDATION_STEP,
                             EVALUATE, GENERATE, TOKEN)
# marks at synchronizing call sites: "<prefix> FILE:LINE"
SYNC_MARK = "synchronize"
ITEM_MARK = "item"
MARKS: tuple[str, ...] = (SYNC_MARK, ITEM_MARK)


def added_by_recorder(domain: str | None) -> bool:
    """Whether ranges of NVTX domain ``domain`` were added by ``nsysan profile --annotate``."""
    return domain is not None and domain.strip() == RECORDER_DOMAIN


def recorder_text(name: str, domain: str | None = None) -> str | None:
    """The range's text (``step``) when it is the recorder's (``nsysan:step``, or ``step`` with domain
    ``nsysan``), else None."""
    if added_by_recorder(domain):
        return name[len(RECORDER_DOMAIN) + 1:] if name.startswith(RECORDER_DOMAIN + ":") else name
    if domain is None and name.startswith(RECORDER_DOMAIN + ":"):
        return name[len(RECORDER_DOMAIN) + 1:]
    return None


def is_jitted_function(text: str) -> bool:
    """A recorder range text that is a jitted JAX function's call (not one of the fixed names)."""
    return text not in RANGES


def recorder_mask(nvtx: pd.DataFrame) -> np.ndarray:
    """Per row of ``nvtx`` (the trace's NVTX frame: ``domain``), whether the recorder added it."""
    if not len(nvtx):
        return np.zeros(0, dtype=bool)
    return (nvtx["domain"].astype("string").str.strip() == RECORDER_DOMAIN).fillna(False).to_numpy(dtype=bool)


def iteration_steps(nvtx: pd.DataFrame) -> pd.DataFrame:
    """The recorder's ``step`` ranges that are iterations: closed, and, where the process recorded any
    ``optimizer`` range, holding the end of one on its thread (start < optimizer end <= end). The
    step the last optimizer step opened, closed by nsys at the capture's end, is left out, and so is
    a step opened by a forward that no optimizer step followed (evaluation after training).

    ``nvtx``: the trace's NVTX frame (columns domain, text, start_ns, end_ns, pid, tid). Returns its
    rows (same columns and index), sorted by (pid, tid, start_ns)."""
    rec = nvtx.loc[recorder_mask(nvtx)]
    steps = rec.loc[(rec["text"] == STEP) & rec["end_ns"].notna()]
    opt = rec.loc[(rec["text"] == OPTIMIZER) & rec["end_ns"].notna()]
    if not len(steps):
        return steps
    keep = np.ones(len(steps), dtype=bool)
    with_opt = set(opt["pid"].astype(int))
    for (pid, tid), idx in steps.groupby(["pid", "tid"], sort=True).indices.items():
        if int(pid) not in with_opt:
            continue
        ends = np.sort(opt.loc[(opt["pid"] == pid) & (opt["tid"] == tid), "end_ns"].to_numpy(dtype=np.int64))
        s0 = steps["start_ns"].to_numpy(dtype=np.int64)[idx]
        s1 = steps["end_ns"].to_numpy(dtype=np.int64)[idx]
        # an optimizer end in (start, end]: the count of ends <= end exceeds the count of ends <= start
        keep[idx] = np.searchsorted(ends, s1, side="right") > np.searchsorted(ends, s0, side="right")
    return steps.loc[keep].sort_values(["pid", "tid", "start_ns"], kind="stable")
