"""pytest set-up for the book: simulated devices for notebook kernels, nbval sanitising, timings.

`make test` runs nbval on notebooks/ with the kernel in this environment. Kernels inherit this
process's environment, so setting it here decides the devices every chapter's bootstrap sees.
BOOK_DEVICES=real runs the chapters on the real accelerators instead, comparing no outputs (device
names and timings differ there) while every assert in the chapters still runs.
"""
import os
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
REAL_DEVICES = os.environ.get("BOOK_DEVICES") == "real"


def pytest_configure(config):
    if REAL_DEVICES:
        config.option.nbval_lax = True  # run every cell, compare no outputs
    else:
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ.pop("JAX_NUM_CPU_DEVICES", None)  # the stored outputs are for 8 devices
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
    _config.session_start = time.perf_counter()
