"""bench/matmul_rates.py runs in its CPU mode, so that the script that re-measures the
accelerator figures cannot rot between the rare runs on a GPU or TPU."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "matmul_rates.py"
LINE = re.compile(
    r"^\d+x\d+ @ \d+x\d+ (bfloat16|float16|float32): "
    r"-?\d+(\.\d+)? us, (\S+ TFLOP/s|below the noise)$"
)


def test_matmul_rates_runs_on_cpu():
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    header, *rows = out.stdout.strip().splitlines()
    assert header.startswith("# cpu, JAX ") and "shapes / 16" in header, header
    shapes = re.findall(r"^\s+\((\d+), (\d+), (\d+)\),", SCRIPT.read_text(), re.M)
    assert len(rows) == 3 * len(shapes), rows  # every shape in every dtype
    bad = [row for row in rows if not LINE.match(row)]
    assert not bad, bad


def test_collective_matmul_times_runs_on_cpu():
    """bench/collective_matmul_times.py checks each of chapter 4's programs against one
    jnp.dot before timing it; on CPU it must get through all five."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_NUM_CPU_DEVICES", None)
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "collective_matmul_times.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [r for r in out.stdout.splitlines() if not r.startswith("#")]
    assert len(rows) == 5, rows
    assert all(re.match(r"^[\w ,-]+: \d+(\.\d+)? us$", r) for r in rows), rows


def test_collective_matmul_times_copies_chapter_4s_programs():
    """The timed programs are chapter 4's: each definition the script shares with the
    chapter parses to the same code (formatting and comments aside). The chapter is read
    as tests/sync_helpers.py reads chapters."""
    import ast

    from tests.sync_helpers import CELL, definitions, split_cell

    def parsed(source):
        return {
            name: ast.dump(ast.parse(text)) for name, *_, text in definitions(source)
        }

    chapter = (ROOT / "book" / "04_collective_matmul.md").read_text()
    book = {}
    for cell in CELL.finditer(chapter):
        book.update(parsed(split_cell(cell[1])[1]))
    script = parsed((ROOT / "bench" / "collective_matmul_times.py").read_text())
    shared = {
        "TO_RIGHT",
        "TO_LEFT",
        "from_left",
        "from_right",
        "w_rows",
        "matmul_ag_blk",
        "matmul_cm_blk",
        "matmul_cm_bidi_blk",
        "matmul_rs_cm_blk",
    }
    assert shared <= script.keys() & book.keys()
    differ = [name for name in sorted(shared) if script[name] != book[name]]
    assert not differ, f"not chapter 4's code: {differ}"
