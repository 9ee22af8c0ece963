"""pytest set-up for the book: simulated devices for notebook kernels, nbval sanitising,
timings.

`make test` runs nbval on notebooks/ with the kernel in this environment. Kernels
inherit this process's environment, so setting it here decides the devices every
chapter's bootstrap sees. BOOK_DEVICES (below) switches to another simulated device
count or to real accelerators; BOOK_CPU=varied runs the kernels on other CPU code paths
than the default ones (see VARIED_CPU)."""

import datetime
import json
import os
import shutil
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent
RECORD = ROOT / "bench" / "chapter-times.jsonl"
# BOOK_DEVICES: unset = 8 simulated CPU devices, outputs compared with the stored ones;
# "4", "16", ... = that many simulated devices; "real" = the accelerators present. The
# last two run every cell and every assert but compare no outputs (device counts, names
# and timings differ).
BOOK_DEVICES = os.environ.get("BOOK_DEVICES", "")
# Stored outputs must not depend on the CPU. A run with BOOK_CPU=varied executes the
# chapters on other code paths than a default run on the same machine takes, and
# compares outputs strictly:
# - XLA generates code for SSE4.2 at most: its vectorised tanh, exp, ... then round
#   differently in the last bits, as they do between AVX-512 and AVX2 machines (seen: a
#   hash of jnp.tanh over 2^20 floats changes);
# - numpy's OpenBLAS uses its SSE-era Nehalem kernels instead of those it picks for this
#   CPU (their summation order differs: numpy's float32 `a @ w` changes in the last
#   bits);
# - XLA's Eigen matmuls run on one thread, as a machine with another core count may
#   split them;
# - XLA:CPU compiles without LLVM's optimisations (as the 4- and 64-device passes do):
#   the HLO is the same, the machine code another, and each chapter's many compiles
#   cheaper (all twelve chapters side by side at load 15-60 on 2026-11-29: 482 s of
#   kernel CPU against 531 at LLVM's default, every output equal; tests/test_passes.py
#   still sees the ISA-dependent digit fail with it).
# A printed digit that changes between two CPUs changes here too. Not covered: XLA's own
# matmul kernels, which no flag moves; chapters print bounds rather than digits of such
# results anyway.
VARIED_CPU = {
    "OPENBLAS_CORETYPE": "Nehalem",
    "XLA_FLAGS": "--xla_cpu_max_isa=SSE4_2 --xla_cpu_multi_thread_eigen=false"
    " --xla_backend_optimization_level=0",
}
BOOK_CPU = os.environ.get("BOOK_CPU", "")


def pytest_configure(config):
    if BOOK_DEVICES:
        config.option.nbval_lax = True
    if BOOK_DEVICES != "real" and accelerator_chips():
        os.environ["JAX_PLATFORMS"] = "cpu"  # the stored outputs are the CPU's
    elif BOOK_DEVICES != "real":
        # No chip here: leave the choice to the bootstrap, as a reader's kernel does
        # (it must start the CPU alone, though libtpu and the CUDA plugin are
        # installed, and print nothing else).
        os.environ.pop("JAX_PLATFORMS", None)
        # this process (the helper tests import JAX) has no chip to look for either
        import jax

        jax.config.update("jax_platforms", "cpu")
    if BOOK_DEVICES != "real":
        # stored outputs are for the default 8
        os.environ.pop("JAX_NUM_CPU_DEVICES", None)
        if BOOK_DEVICES:
            os.environ["JAX_NUM_CPU_DEVICES"] = BOOK_DEVICES
            # Outputs are not compared at other counts, so XLA:CPU may skip LLVM's
            # optimisations: the same programs, compiled faster and run a little slower
            # (chapter 1 at 64 devices: 42 s of kernel CPU instead of 60; chapter 6: 86
            # instead of 90). The HLO is unchanged: collectives, layouts and the TPU
            # and GPU compilers' programs read the same. The flag is XLA's, not the CPU
            # backend's: libtpu and XLA:GPU's compile-only builds take it too (their
            # HLO and memory figures were the same at 0 and 3, wip/reviews/
            # level0-audit.md), so a cell that compares a level with XLA's default
            # gives the default's level, 3, per compile (chapters 5, 6, 7, 9 and 11).
            flags = os.environ.get("XLA_FLAGS", "")
            os.environ["XLA_FLAGS"] = f"{flags} --xla_backend_optimization_level=0"
    if BOOK_CPU == "varied":
        os.environ.update(VARIED_CPU)
    elif BOOK_CPU:
        raise ValueError(f"BOOK_CPU={BOOK_CPU!r}: the only setting is BOOK_CPU=varied")
    if getattr(config.option, "nbval_sanitize_with", None) is None and hasattr(
        config.option, "nbval"
    ):
        config.option.nbval_sanitize_with = str(ROOT / "tests" / "nbval_sanitize.cfg")
    # What the kernels leave behind, libtpu's logs included, goes into a folder this
    # session owns and removes at its end (pytest_unconfigure).
    from tests.execute import kernel_scratch

    config.kernel_tmp = kernel_scratch("book-kernels-")
    # chapter -> wall seconds nbval spent on it
    config.notebook_seconds = defaultdict(float)
    config.notebook_cpu_seconds = {}  # chapter -> CPU seconds of its kernel process
    config.notebook_failed = set()
    config.load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else None


def pytest_collection_modifyitems(items):
    """nbval waits 5 s, fixed, for a cell's outputs after the kernel replies, and fails
    the cell if none came: on a machine busy with other work (load 50 seen here) that
    is a false failure. Wait up to a minute; a cell that hangs still fails, later."""
    for item in items:
        if hasattr(item, "output_timeout"):
            item.output_timeout = 60


def pytest_unconfigure(config):
    if getattr(config, "kernel_tmp", None):
        shutil.rmtree(config.kernel_tmp, ignore_errors=True)


def accelerator_chips() -> bool:
    """Whether JAX's own hardware search finds TPU or GPU chips on this machine (JAX
    is imported, not started: the kernels choose their devices)."""
    from jax._src import hardware_utils

    return bool(
        hardware_utils.num_available_tpu_chips_and_device_id()[0]
        or hardware_utils.has_visible_nvidia_gpu()
        or hardware_utils.num_available_amd_gpus(stop_at=1)
    )


def kernel_cpu_seconds(item):
    """User + system CPU seconds of the notebook's kernel process so far (all its
    threads), or None. Unlike wall time this hardly moves when other programs load the
    machine."""
    try:
        pid = item.parent.kernel.km.provisioner.process.pid
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (AttributeError, OSError, ValueError, IndexError):
        return None


def is_chapter(path: str) -> bool:
    """A chapter's notebook (timed, recorded), not a scratch one (test_passes.py)."""
    return path.startswith("notebooks/") and path.endswith(".ipynb")


def pytest_runtest_makereport(item, call):
    if call.when == "call" and is_chapter(item.nodeid.split("::")[0]):
        cpu = kernel_cpu_seconds(item)
        if cpu is not None:
            item.config.notebook_cpu_seconds[Path(item.nodeid.split("::")[0]).stem] = (
                cpu
            )


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::")[0]
    if is_chapter(path):
        _config.notebook_seconds[Path(path).stem] += report.duration
        if report.failed:
            _config.notebook_failed.add(Path(path).stem)


def pytest_sessionstart(session):
    global _config
    _config = session.config


def run_label() -> str:
    devices = (
        "real devices"
        if BOOK_DEVICES == "real"
        else f"{BOOK_DEVICES or 8} simulated CPU devices"
    )
    bare = "tests/bare" in os.environ.get("PYTHONPATH", "")  # tests/bare/sitecustomize
    return (
        devices
        + (", varied CPU code paths" if BOOK_CPU else "")
        + (", TPU and GPU compilers hidden" if bare else "")
    )


def cpu_model() -> str:
    """The shared helper (tests/helpers.py), imported when the report is written:
    importing it starts JAX in this process, which must not happen before the kernels
    have their devices."""
    from tests.helpers import cpu_model as shared

    return shared()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After nbval: each chapter's seconds against its budget, printed and appended to
    the record."""
    seconds = getattr(config, "notebook_seconds", {})
    if not seconds:
        return
    from tabulate import tabulate

    from tests.test_timing import budget_for, median_cpu, verdict

    times = ROOT / "notebooks" / "execution_times.json"
    stored = json.loads(times.read_text()) if times.exists() else {}
    cpu = config.notebook_cpu_seconds
    median = median_cpu(cpu)
    # the budgets are for 8 simulated devices; other counts are reported, not judged
    judged = not BOOK_DEVICES
    rows = [
        (
            name,
            f"{s:.1f}",
            f"{cpu[name]:.1f}" if name in cpu else "-",
            stored.get(name, "-"),
            budget_for(name) if judged else "-",
            verdict(name, s, cpu.get(name), median) if judged else "-",
            "FAILED" if name in config.notebook_failed else "ok",
        )
        for name, s in sorted(seconds.items())
    ]
    load = (
        (config.load_at_start, os.getloadavg()[0])
        if config.load_at_start is not None
        else None
    )
    terminalreporter.write_sep("-", f"chapter execution in seconds, {run_label()}")
    terminalreporter.write_line(
        tabulate(
            rows,
            headers=[
                "chapter",
                "wall",
                "kernel CPU",
                "make notebooks",
                "budget",
                "time",
                "cells",
            ],
        )
    )
    terminalreporter.write_line(
        f"{cpu_model()}, {os.cpu_count()} cores"
        + (
            f", load average {load[0]:.1f} at the start, {load[1]:.1f} at the end"
            if load
            else ""
        )
        + f"; record: {RECORD.relative_to(ROOT)}"
    )
    RECORD.parent.mkdir(exist_ok=True)
    with RECORD.open("a") as record:
        record.write(
            json.dumps(
                {
                    "date": datetime.datetime.now(datetime.UTC).isoformat(
                        timespec="seconds"
                    ),
                    "run": run_label(),
                    "cpu": cpu_model(),
                    "cores": os.cpu_count(),
                    "load": load,
                    "chapters": {
                        name: {
                            "wall": round(s, 1),
                            "cpu": round(cpu[name], 1) if name in cpu else None,
                        }
                        for name, s in sorted(seconds.items())
                    },
                }
            )
            + "\n"
        )
