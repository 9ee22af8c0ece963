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


def run_cell(env_extra=None, preamble="", runs=1):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("JAX_NUM_CPU_DEVICES", "JAX_PLATFORMS")
    }
    env.update(env_extra or {})
    code = preamble + "\n".join([f"exec(open({str(BOOTSTRAP)!r}).read())"] * runs)
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
