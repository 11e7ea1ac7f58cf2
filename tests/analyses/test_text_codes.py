"""``frames.text_codes`` against its definition: each row's text (a missing value as ``nan``), the
distinct texts sorted, each row's code the index of its text; categorical columns (their own codes,
unused categories, more than 127 of them, missing values) and plain ones alike."""

import numpy as np
import pandas as pd
import pytest

from nsysan.analyses.frames import text_codes


def _by_definition(values: list[object]) -> tuple[list[int], list[str]]:
    text = ["nan" if v is None else str(v) for v in values]
    texts = sorted(set(text))
    return [texts.index(t) for t in text], texts


@pytest.mark.parametrize("seed", range(40))
def test_text_codes_as_defined(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(0, 400))
    m = int(rng.integers(1, 400))  # up to 400 distinct values: int16 category codes
    values: list[object] = [f"k{int(x)}" for x in rng.integers(0, m, size=n)]
    if seed % 3 == 0 and n:
        for i in rng.integers(0, n, size=4):
            values[int(i)] = None
    present = sorted({v for v in values if v is not None})
    unused = [f"unused{i}" for i in range(int(rng.integers(0, 6)))]
    if seed % 4 == 3:
        series = pd.Series(values, dtype=object)
    else:
        series = pd.Series(pd.Categorical(values, categories=present + unused if seed % 2 else None))
    codes, texts = text_codes(series)
    want_codes, want_texts = _by_definition(values)
    assert texts == want_texts
    assert codes.tolist() == want_codes
