"""The NVTX ranges ``nsysan profile --annotate`` adds to a program it records (issue 53).

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
they were added by the recorder.
"""

from __future__ import annotations

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
