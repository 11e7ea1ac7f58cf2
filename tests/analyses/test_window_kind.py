"""A Window says its kind; the wording of findings and the per-iteration savings decide by it, not by
its label's text (issue 50)."""

from __future__ import annotations

import pandas as pd
import pytest
from conftest import CORPUS, analyzed

from nsysan.analyses.gpu import Window
from nsysan.analysis import _capture_window, gpu_active


def test_wording_reads_kind_not_label() -> None:
    steady = Window(0, 10, "steady state", "steady")
    assert (steady.named, steady.adjective) == ("the steady state", "steady-state ")
    # a label is text for people: a window of another kind with the same text is named by its kind
    other = Window(0, 10, "steady state", "capture")
    assert (other.named, other.adjective) == ("the whole capture", "")
    assert Window(0, 10, "anything", "gpu_active").named == "the GPU-active part"
    assert Window(0, 10, "anything", "gpu_activity").named == "the span of GPU activity"
    assert Window(0, 10, "anything", "steady").named == "the steady state"
    assert Window(0, 0, "empty", "empty").named == "the whole capture"
    assert Window(0, 10, "anything", "gpu_active").adjective == ""


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


@pytest.mark.parametrize("name", ["nevakrien__python_c_nvidia__report1", "ynan1__aws_gpu__nsys_profiling_report2"])
def test_the_idle_samples_note_names_the_window_judged(name: str) -> None:
    """Without an iteration model the idle-samples note (JSON, findings) speaks of the window judged,
    never of a steady state: these exports have CPU samples and no iteration model."""
    path = CORPUS / f"{name}.sqlite"
    if not path.exists():
        pytest.skip("public corpus not present (../shared)")
    a = analyzed(path)
    assert a.steady.kind != "steady"
    note = a.idle_samples.note if a.idle_samples is not None else ""
    assert note, "these exports' samples leave a note (none on the launching threads, or none in the gaps)"
    assert "steady state" not in note and a.steady.named in note
