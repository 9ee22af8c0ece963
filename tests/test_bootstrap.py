"""The bootstrap cell (tests/bootstrap.py, the first cell of every chapter) under good
and bad set-ups.

Each case runs the cell in a fresh Python, as a reader's kernel would. Cases with
accelerators run on this CPU-only machine by replacing `jax.devices` with fake TPU
devices before the cell runs, so that the cell's choice is tested; real runs on TPU or
GPU use `BOOK_DEVICES=real make test`."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BOOTSTRAP = Path(__file__).resolve().parent / "bootstrap.py"

FAKE_ACCELERATORS = """
import jax
from jax._src import hardware_utils
hardware_utils.num_available_tpu_chips_and_device_id = lambda: ({count}, 0)
class FakeTpu:
    platform, device_kind = "tpu", "TPU v5 lite"
real_devices = jax.devices
# Until the cell asks for the CPU platform, JAX "sees" {count} TPU chips.
jax.devices = lambda backend=None: (
    real_devices(backend) if jax.config.jax_platforms == "cpu"
    else [FakeTpu()] * {count}
)
real_backend = jax.default_backend
jax.default_backend = lambda: (
    real_backend() if jax.config.jax_platforms == "cpu" else "tpu"
)
"""


def run_cell(env_extra=None, preamble="", runs=1, between=""):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS")
    }
    env.update(env_extra or {})
    code = preamble + f"\n{between}".join(
        [f"exec(open({str(BOOTSTRAP)!r}).read())"] * runs
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def lines(text):
    return [l for l in text.splitlines() if l.strip()]


@pytest.mark.parametrize("count", ["4", "8", "16"])
def test_simulated_devices_follow_the_variable(count):
    env = {} if count == "8" else {"JAX_NUM_CPU_DEVICES": count}
    out = run_cell(env)
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout) == [lines(out.stdout)[0]]
    # nothing else: no plugin (libtpu, CUDA) logs that it found no chip
    assert out.stderr == "", out.stderr
    assert lines(out.stdout)[0].endswith(f"cpu: {count} simulated CPU devices")


@pytest.mark.parametrize("bad", ["1000", "3", "0", "-8", "eight"])
def test_nonsense_device_count_is_one_sentence(bad):
    out = run_cell({"JAX_NUM_CPU_DEVICES": bad})
    assert out.returncode == 1
    assert "Traceback" not in out.stderr and out.stdout == ""
    assert lines(out.stderr) == [
        f"JAX_NUM_CPU_DEVICES={bad!r} makes no sense here: the book simulates 4, 8, "
        "16, 32 or 64 CPU devices (8 when the variable is unset)."
    ]


def test_empty_device_count_is_the_default():
    out = run_cell({"JAX_NUM_CPU_DEVICES": ""})
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout)[0].endswith("cpu: 8 simulated CPU devices")


def test_too_old_jax_names_the_upgrade_command():
    out = run_cell(preamble="import jax; jax.__version__ = '0.11.2'\n")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    (line,) = lines(out.stderr)
    assert (
        "needs JAX >= 0.12, found 0.11.2" in line
        and 'pip install -U "jax>=0.12"' in line
    )


def test_one_accelerator_falls_back_to_simulated_devices():
    out = run_cell(preamble=FAKE_ACCELERATORS.format(count=1))
    assert out.returncode == 0, out.stderr
    (line,) = lines(out.stdout)
    assert line.endswith(
        "cpu: 8 simulated CPU devices (found 1 TPU v5 lite; "
        "the book needs 4, 8, 16, ... accelerators)"
    )


@pytest.mark.parametrize("count", [2, 6])
def test_too_few_or_odd_accelerators_fall_back(count):
    out = run_cell(preamble=FAKE_ACCELERATORS.format(count=count))
    assert out.returncode == 0, out.stderr
    assert f"8 simulated CPU devices (found {count} TPU v5 lite" in out.stdout


def test_enough_accelerators_are_used():
    out = run_cell(preamble=FAKE_ACCELERATORS.format(count=8))
    assert out.returncode == 0, out.stderr
    (line,) = lines(out.stdout)
    assert line.endswith(": 8 real TPU v5 lite devices")


def test_running_the_cell_twice_keeps_the_devices():
    out = run_cell({"JAX_NUM_CPU_DEVICES": "4"}, runs=2)
    assert out.returncode == 0, out.stderr
    assert [l.split(": ")[1] for l in lines(out.stdout)] == [
        "4 simulated CPU devices"
    ] * 2


def test_the_xla_flag_many_tutorials_set_gives_the_count():
    flag = "--xla_force_host_platform_device_count"
    out = run_cell({"XLA_FLAGS": f"{flag}=16"})
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout)[0].endswith("cpu: 16 simulated CPU devices")
    out = run_cell({"XLA_FLAGS": f"{flag}=3"})
    assert out.returncode == 1
    assert lines(out.stderr)[0].startswith(f"{flag}='3' makes no sense here")


def test_another_count_in_the_same_kernel_says_restart():
    out = run_cell(
        {"JAX_NUM_CPU_DEVICES": "4"},
        runs=2,
        between="import os; os.environ['JAX_NUM_CPU_DEVICES'] = '16'\n",
    )
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout)[1].endswith(
        "4 simulated CPU devices (JAX started with these before; "
        "restart the kernel for 16)"
    )


def test_a_bad_count_in_a_notebook_is_one_line_not_a_traceback():
    """In a Jupyter kernel (Colab's too) the refusal is one line: IPython prints the
    error's _render_traceback_, not a traceback or SystemExit's "use %tb" notice."""
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(BOOTSTRAP.read_text())]
    env = {"JAX_NUM_CPU_DEVICES": "3"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        NotebookClient(
            nb, timeout=120, kernel_name="python3", allow_errors=True
        ).execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    (output,) = nb.cells[0].outputs
    assert output.output_type == "error" and output.ename == "SetupError"
    assert output.traceback == [
        "SetupError: JAX_NUM_CPU_DEVICES='3' makes no sense here: the book simulates "
        "4, 8, 16, 32 or 64 CPU devices (8 when the variable is unset)."
    ]


FAKE_MISSING = """
import importlib.util, subprocess
real_find_spec = importlib.util.find_spec
importlib.util.find_spec = lambda name, *a: (
    None if name in ("tabulate", "orbax.checkpoint") else real_find_spec(name, *a))
class Pip:
    returncode, stderr = {rc}, "ERROR: No matching distribution found for tabulate"
def fake_run(command, **options):
    print("ran:", " ".join(command[1:]))
    return Pip()
subprocess.run = fake_run
"""


def test_missing_packages_are_installed_at_the_locks_versions():
    out = run_cell(preamble=FAKE_MISSING.format(rc=0))
    assert out.returncode == 0, out.stderr
    assert lines(out.stdout)[:2] == [
        "Installing tabulate==0.10.0, orbax-checkpoint==0.12.8: missing here",
        "ran: -m pip install -q tabulate==0.10.0 orbax-checkpoint==0.12.8",
    ]
    assert lines(out.stdout)[2].endswith("cpu: 8 simulated CPU devices")


def test_a_failed_install_is_one_sentence():
    out = run_cell(preamble=FAKE_MISSING.format(rc=1))
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert lines(out.stderr) == [
        "pip could not install tabulate==0.10.0 orbax-checkpoint==0.12.8: "
        "ERROR: No matching distribution found for tabulate"
    ]


def test_the_installed_versions_are_the_locks():
    """What the bootstrap installs on Colab or Kaggle is what the book was run with."""
    import re

    pins = re.findall(r'"([\w-]+)==([\w.]+)"', BOOTSTRAP.read_text())
    lock = dict(
        line.split("==")
        for line in (BOOTSTRAP.parent.parent / "requirements.txt").read_text().split()
        if "==" in line
    )
    assert pins and all(lock.get(name) == version for name, version in pins), pins
