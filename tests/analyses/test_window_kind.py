"""A Window says its kind; the wording of findings and the per-iteration savings decide by it, not by
its label's text (issue 50)."""

from __future__ import annotations

import pandas as pd

from nsysan.analyses.gpu import Window
from nsysan.analysis import _capture_window, gpu_active
from nsysan.rules._wording import window_adjective, window_name


def test_wording_reads_kind_not_label() -> None:
    steady = Window(0, 10, "steady state", "steady")
    assert (window_name(steady), window_adjective(steady)) == ("the steady state", "steady-state ")
    # a label is text for people: a window of another kind with the same text is named by its kind
    other = Window(0, 10, "steady state", "capture")
    assert (window_name(other), window_adjective(other)) == ("the whole capture", "")
    assert window_name(Window(0, 10, "anything", "gpu_active")) == "the GPU-active part"
    assert window_name(Window(0, 10, "anything", "gpu_activity")) == "the span of GPU activity"
    assert window_name(Window(0, 10, "anything", "steady")) == "the steady state"
    assert window_name(Window(0, 0, "empty", "empty")) == "the whole capture"
    assert window_adjective(Window(0, 10, "anything", "gpu_active")) == ""


def test_windows_made_say_their_kind() -> None:
    ops = pd.DataFrame({"start_ns": [100, 300], "end_ns": [200, 400]})

    class Meta:
        start_ns = 0
        end_ns = 1_000

    class T:
        meta = Meta()

    cap = _capture_window(T(), ops)  # type: ignore[arg-type]
    assert (cap.kind, cap.label) == ("capture", "capture")
    act = gpu_active(ops, cap)
    assert (act.kind, act.label, act.start_ns, act.end_ns) == ("gpu_active", "GPU-active part", 100, 400)
    Meta.end_ns = None  # type: ignore[assignment]
    span = _capture_window(T(), ops)  # type: ignore[arg-type]
    assert (span.kind, span.label) == ("gpu_activity", "gpu activity")
    empty = _capture_window(T(), ops.iloc[:0])  # type: ignore[arg-type]
    assert (empty.kind, empty.label) == ("empty", "empty")
    # to_dict (the JSON's windows and a finding's window) is unchanged: no kind key
    assert set(cap.to_dict()) == {"start_ns", "end_ns", "dur_ns", "label"}
