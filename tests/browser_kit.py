"""What the browser tests share: Debian's Chromium through Playwright, skipped when either is
missing, except where ``NSYSAN_REQUIRE_BROWSER`` is set (CI), where a missing browser fails.

Test modules import ``CHROMIUM``, ``sync_api``, ``ARGS`` and ``shots_dir`` from here, set
``pytestmark = SKIP``, and take the ``browser`` fixture (conftest.py)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = os.environ.get("NSYSAN_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
if os.environ.get("NSYSAN_REQUIRE_BROWSER"):  # CI: a missing browser is a failure, not a skip
    assert CHROMIUM, "NSYSAN_REQUIRE_BROWSER is set but there is no chromium executable (apt-get install chromium)"
    from playwright import sync_api
else:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright not installed")
SKIP = pytest.mark.skipif(not CHROMIUM, reason="no chromium executable (apt-get install chromium)")
ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-dev-shm-usage", "--disable-extensions"]


@contextmanager
def launched() -> Iterator[Any]:
    """A headless Chromium (the ``browser`` fixture of conftest.py)."""
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def shots_dir(tmp_path: Path) -> Path:
    """Where screenshots go: ``$NSYSAN_SCREENSHOTS`` when set, else the test's temp folder."""
    d = Path(os.environ.get("NSYSAN_SCREENSHOTS") or tmp_path)
    d.mkdir(parents=True, exist_ok=True)
    return d
