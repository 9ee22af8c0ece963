"""What the stored notebooks publish: nothing of the machine that executed them, nothing
raw, nothing long.

The site and Colab show the outputs stored in notebooks/*.ipynb. They must read the same
whoever ran `make notebooks`: no path of that machine (its checkout and the folder above
it, its home, the kernel's temporary files, the virtual environment's site-packages), no
terminal escape codes, and no output too long to read. Cells stay short too (one idea
per cell)."""

import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
MAX_OUTPUT_LINES = 40
# Chapter -> (median, 90th percentile) of code-cell lines, the bootstrap cell left out.
CELL_LINES = {
    "01_pmap": (10, 20),
    "02_jit_sharding": (10, 20),
    "03_shard_map": (10, 20),
}
DEFAULT_CELL_LINES = (12, None)


def machine_paths() -> list[str]:
    """Paths of this machine that could leak into an output. The machine that stored the
    outputs may differ from the one testing them, hence also the generic patterns below.
    """
    home = str(Path.home())
    return [p for p in {str(ROOT), str(ROOT.parent), home} if len(p) > 1]


# The one escape code an output may store: expect_error's red exception type at the
# start of a line (termcolor, forced, so the bytes are the same on every machine); the
# site shows it red.
RED_ERROR_TYPE = re.compile(r"(?m)^\x1b\[31m([A-Z]\w*)\x1b\[0m: ")


def without_red_error_types(text: str) -> str:
    return RED_ERROR_TYPE.sub(r"\1: ", text)


LEAKS = [
    (re.compile(r"\x1b\["), "a terminal escape code"),
    (re.compile(r"ipykernel_\d+"), "a kernel's temporary file"),
    (re.compile(r"site-packages"), "an installed package's path"),
    (
        re.compile(
            r"(?<![\w.:/])/(?:home|root|Users|tmp|var/folders|private|work)/[\w.-]"
        ),
        "an absolute path",
    ),
]


def output_texts(output) -> list[str]:
    """Every piece of text an output stores: stream text, each mimetype's data, an
    error's lines."""
    texts = []
    if "text" in output:
        texts.append(output["text"])
    for value in output.get("data", {}).values():
        texts.append(value if isinstance(value, str) else json.dumps(value))
    texts += [
        output.get("ename", ""),
        output.get("evalue", ""),
        *output.get("traceback", []),
    ]
    return ["".join(t) if isinstance(t, list) else t for t in texts]


def code_cells(path):
    nb = json.loads(path.read_text())
    return [c for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_carry_nothing_of_the_machine(path):
    problems = []
    for i, cell in enumerate(code_cells(path), 1):
        for output in cell.get("outputs", []):
            for text in map(without_red_error_types, output_texts(output)):
                for path_text in machine_paths():
                    if path_text in text:
                        problems.append(f"cell {i}: {path_text!r}")
                for pattern, what in LEAKS:
                    if match := pattern.search(text):
                        problems.append(
                            f"cell {i}: {what} "
                            f"({text[max(0, match.start() - 30) : match.end() + 30]!r})"
                        )
    assert not problems, f"{path.name} stores: " + "; ".join(sorted(set(problems))[:10])


def test_the_scan_finds_what_it_looks_for():
    leaky = [
        {"output_type": "stream", "text": "\x1b[31mred\x1b[0m"},
        {
            "output_type": "error",
            "ename": "E",
            "evalue": "",
            "traceback": ["File /tmp/ipykernel_123/456.py:3"],
        },
        {
            "output_type": "stream",
            "text": "at /work/main/.venv/lib/python3.12/site-packages/jax/x.py",
        },
        {"output_type": "display_data", "data": {"text/plain": f"{ROOT}/notebooks"}},
    ]
    clean = {
        "output_type": "stream",
        "text": "see https://docs.jax.dev/en/latest/notebooks/x.html and P('data')",
    }
    for output in leaky:
        text = " ".join(output_texts(output))
        assert any(p.search(text) for p, _ in LEAKS) or any(
            m in text for m in machine_paths()
        ), output
    assert not any(p.search(" ".join(output_texts(clean))) for p, _ in LEAKS)
    red = "\x1b[31mValueError\x1b[0m: D = 3 does not divide\n"
    assert not any(p.search(without_red_error_types(red)) for p, _ in LEAKS)
    for other in (
        "\x1b[32mValueError\x1b[0m: x",
        "x \x1b[31mValueError\x1b[0m: y",
        "\x1b[31mValueError\x1b[0m: \x1b[1mbold\x1b[0m",
    ):
        assert any(p.search(without_red_error_types(other)) for p, _ in LEAKS), other


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_outputs_are_short(path):
    long = []
    for i, cell in enumerate(code_cells(path), 1):
        for output in cell.get("outputs", []):
            text = "".join(output.get("text", "")) or "".join(
                output.get("data", {}).get("text/plain", "")
            )
            if text.count("\n") > MAX_OUTPUT_LINES:
                long.append(f"cell {i} ({text.count(chr(10))} lines)")
    assert not long, f"{path.name}: outputs over {MAX_OUTPUT_LINES} lines: {long}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_are_short(path):
    lengths = sorted(
        len("".join(c["source"]).splitlines()) for c in code_cells(path)[1:]
    )
    median_max, p90_max = CELL_LINES.get(path.stem, DEFAULT_CELL_LINES)
    median = statistics.median(lengths)
    p90 = lengths[min(len(lengths) - 1, round(0.9 * (len(lengths) - 1)))]
    assert median <= median_max, (
        f"{path.stem}: median code cell {median} lines (at most {median_max})"
    )
    assert p90_max is None or p90 <= p90_max, (
        f"{path.stem}: 90th percentile {p90} lines (at most {p90_max})"
    )
