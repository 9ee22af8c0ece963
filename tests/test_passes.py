"""The experiment behind `make test`'s single strict pass (not part of `make test`; run
it with `.venv/bin/python -m pytest tests/test_passes.py`, about a minute).

`make test` once compared every output twice at 8 devices: on the default CPU code
paths and on varied ones (BOOK_CPU=varied). It now compares once, on the varied paths.
A printed digit that depends on the CPU's instruction set is what the two passes were
for; here a notebook prints one (a hash of jnp.tanh over 2^20 floats, which XLA
vectorises differently per ISA), stored from the default paths as `make notebooks`
stores every chapter. The default pass reproduces it on the machine that stored it, so
only the varied pass can catch it, and does: dropping the default pass lost nothing. A
chapter that fails only at 64 devices is caught by the 64-device pass, unchanged."""

import os
import subprocess
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
CELL = """import hashlib
import jax
import jax.numpy as jnp
import numpy as np
jax.config.update("jax_platforms", "cpu")
x = jnp.linspace(-3, 3, 2**20)
print(hashlib.sha256(np.asarray(jnp.tanh(x)).tobytes()).hexdigest()[:12])"""


def nbval(path, **env):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--nbval",
            "--nbval-current-env",
            str(path),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_only_the_varied_pass_catches_a_digit_that_depends_on_the_cpu(tmp_path):
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(CELL)]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    # stored as `make notebooks` stores a chapter: default code paths
    env = {
        k: os.environ.pop(k)
        for k in ("XLA_FLAGS", "OPENBLAS_CORETYPE")
        if k in os.environ
    }
    try:
        NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    finally:
        os.environ.update(env)
    path = ROOT / "_build" / "isa_digit.ipynb"
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, path)
    try:
        default = nbval(path)
        varied = nbval(path, BOOK_CPU="varied")
    finally:
        path.unlink()
    assert default.returncode == 0, default.stdout[-2000:]
    assert varied.returncode == 1 and "Cell outputs differ" in varied.stdout, (
        varied.stdout[-2000:]
    )
