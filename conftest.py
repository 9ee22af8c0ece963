"""pytest set-up for the book: simulated devices for notebook kernels, nbval sanitising, timings.

`make test` runs nbval on notebooks/ with the kernel in this environment. Kernels inherit this
process's environment, so setting it here decides the devices every chapter's bootstrap sees.
BOOK_DEVICES (below) switches to another simulated device count or to real accelerators.
"""
import os
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# BOOK_DEVICES: unset = 8 simulated CPU devices, outputs compared with the stored ones;
# "4", "16", ... = that many simulated devices; "real" = the accelerators present. The last two run
# every cell and every assert but compare no outputs (device counts, names and timings differ).
BOOK_DEVICES = os.environ.get("BOOK_DEVICES", "")


def pytest_configure(config):
    if BOOK_DEVICES:
        config.option.nbval_lax = True
    if BOOK_DEVICES != "real":
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ.pop("JAX_NUM_CPU_DEVICES", None)   # stored outputs are for the default 8
        if BOOK_DEVICES:
            os.environ["JAX_NUM_CPU_DEVICES"] = BOOK_DEVICES
    if getattr(config.option, "nbval_sanitize_with", None) is None and hasattr(config.option, "nbval"):
        config.option.nbval_sanitize_with = str(ROOT / "tests" / "nbval_sanitize.cfg")
    config.notebook_seconds = defaultdict(float)  # chapter -> seconds nbval spent on it
    config.notebook_failed = set()


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if path.endswith(".ipynb"):
        _config.notebook_seconds[Path(path).stem] += report.duration
        if report.failed:
            _config.notebook_failed.add(Path(path).stem)


def pytest_sessionstart(session):
    global _config
    _config = session.config


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After nbval: a table of each chapter's seconds (this run, and when `make notebooks` stored it)."""
    seconds = getattr(config, "notebook_seconds", {})
    if not seconds:
        return
    import json
    from tabulate import tabulate
    times = ROOT / "notebooks" / "execution_times.json"
    stored = json.loads(times.read_text()) if times.exists() else {}
    from tests.test_timing import limit_for
    rows = [(name, f"{s:.1f}", stored.get(name, "-"), limit_for(name),
             "FAILED" if name in config.notebook_failed else "ok") for name, s in sorted(seconds.items())]
    devices = "real devices" if BOOK_DEVICES == "real" else f"{BOOK_DEVICES or 8} simulated CPU devices"
    terminalreporter.write_sep("-", f"chapter execution in seconds, {devices}")
    terminalreporter.write_line(tabulate(rows, headers=["chapter", "this run", "make notebooks", "limit", "cells"]))
