"""Nothing of a `make test` run outlives it: chapter 8 writes certificates and private
keys into a temp folder, and nbval may stop its kernel before the chapter removes them.
conftest.py points every kernel's TMPDIR at a folder the pytest session owns and
removes; `make test` runs this last, after every notebook session has ended."""

import os
import tempfile
from pathlib import Path

import pytest

STARTED = Path(__file__).resolve().parent.parent / "_build" / "test-started"


def test_no_temp_folder_of_the_run_is_left():
    if not STARTED.exists():
        pytest.skip("run by `make test`, which records when it started")
    since = float(STARTED.read_text())
    # conftest.py made this session's own folder before it pointed TMPDIR at it, so
    # gettempdir() is still the system's; that folder is removed when this session ends
    system_tmp = Path(tempfile.gettempdir())
    own = Path(os.environ.get("TMPDIR", "")).name
    left = [
        p.name
        for pattern in ("book-kernels-*", "book_ch8_*")
        for p in system_tmp.glob(pattern)
        if p.stat().st_mtime >= since and p.name != own
    ]
    assert not left, f"left in {system_tmp} by this run: {left}"


def test_no_tpu_compiler_log_of_the_run_is_left():
    """libtpu writes its logs to /tmp/tpu_logs (not TMPDIR) unless TPU_LOG_DIR names
    a folder; conftest.py names the session's own."""
    if not STARTED.exists():
        pytest.skip("run by `make test`, which records when it started")
    since = float(STARTED.read_text())
    logs = Path("/tmp/tpu_logs")
    left = [p.name for p in logs.glob("*") if p.lstat().st_mtime >= since]
    assert not left, f"left in {logs} by this run: {left[:4]} ({len(left)} files)"
