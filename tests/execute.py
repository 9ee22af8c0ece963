"""Execute chapter notebooks in place with 8 simulated CPU devices; record each one's
seconds.

`make notebooks` calls this after jupytext has synced book/*.md into notebooks/*.ipynb.
The seconds go to notebooks/execution_times.json, which tests/test_timing.py reads."""

import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

TIMES = Path(__file__).resolve().parent.parent / "notebooks" / "execution_times.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_terminal_colours(nb) -> None:
    """rich (jax.debug.visualize_array_sharding) displays HTML plus a plain-text copy
    coloured with terminal escape codes. The site and Colab show the HTML; the stored
    plain text is kept plain. tests/nbval_sanitize.cfg drops the same codes when nbval
    compares a fresh run with it."""
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "text/html" in data and "text/plain" in data:
                data["text/plain"] = ANSI.sub("", data["text/plain"])


def kernel_scratch(prefix: str) -> str:
    """A new folder for what notebook kernels leave behind, named to them (they inherit
    the environment) as TMPDIR (chapter 8's certificates and private keys when a kernel
    is stopped before the chapter cleans up) and as TPU_LOG_DIR: libtpu logs into
    /tmp/tpu_logs whatever TMPDIR says, unless that names an existing folder. The
    caller removes it (make test: conftest.py; make notebooks: main below)."""
    scratch = tempfile.mkdtemp(prefix=prefix)
    os.environ["TMPDIR"] = scratch
    os.environ["TPU_LOG_DIR"] = os.path.join(scratch, "tpu_logs")
    os.makedirs(os.environ["TPU_LOG_DIR"])
    return scratch


def execute(path: Path) -> float:
    nb = nbformat.read(path, as_version=4)
    start = time.perf_counter()
    # Any error stops here (errors shown on purpose are caught in the cell by
    # expect_error).
    NotebookClient(
        nb,
        timeout=600,
        kernel_name="python3",
        resources={"metadata": {"path": str(path.parent)}},
    ).execute()
    seconds = time.perf_counter() - start
    strip_terminal_colours(nb)
    nbformat.write(nb, path)
    return seconds


def main(paths: list[str]) -> None:
    os.environ["JAX_PLATFORMS"] = "cpu"  # the stored outputs are the simulated-CPU ones
    # so the bootstrap's default of 8 applies
    os.environ.pop("JAX_NUM_CPU_DEVICES", None)
    # (a make notebooks run beside a make test would otherwise fail its leftovers check)
    scratch = kernel_scratch("book-execute-")
    times = json.loads(TIMES.read_text()) if TIMES.exists() else {}
    try:
        for p in map(Path, paths):
            seconds = execute(p)
            times[p.stem] = round(seconds, 1)
            print(f"{p}: executed in {seconds:.1f} s")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    TIMES.write_text(json.dumps(dict(sorted(times.items())), indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
