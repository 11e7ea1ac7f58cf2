"""What the choice of the iteration range learnt besides its candidates list, read by the nesting
decisions and the levels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np


@dataclass
class _Facts:
    """What ``_candidates`` learnt besides the list, for the nesting decisions and the levels: each
    considered name's rows in ``rg`` (positions, row order), the names that passed the basic tests
    (own range, repeated, GPU work, not sub-microsecond), the program's own repeated ranges with
    their median depth (GPU work or not: the levels shown), and the launch sums behind the coverages."""
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    basic: set[str] = field(default_factory=set)
    repeated: dict[str, float] = field(default_factory=dict)  # own ranges repeated on a thread: median depth
    sums: Callable[[tuple[tuple[int, int], ...]], tuple[np.ndarray, np.ndarray]] | None = None
    by_thread: dict[tuple[int, int], np.ndarray | slice] = field(default_factory=dict)
    owned_total: int = 0
    cols: dict[str, np.ndarray] = field(default_factory=dict)  # rg's int64 columns (``_instances``)
