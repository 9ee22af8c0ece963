"""Pairs and freshness: every chapter's markdown and notebook agree, and the notebook is executed."""
import json
from pathlib import Path

import jupytext
import nbformat
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
SOURCES = sorted((ROOT / "book").glob("[0-9][0-9]_*.md"))
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BOOTSTRAP = (ROOT / "tests" / "bootstrap.py").read_text().rstrip("\n")
CHAPTERS = sorted({p.stem for p in SOURCES} | {p.stem for p in NOTEBOOKS})


def code_cells(nb):
    return [c for c in nb.cells if c.cell_type == "code"]


def test_there_are_chapters():
    assert SOURCES, "no chapter sources book/NN_name.md"


@pytest.mark.parametrize("name", CHAPTERS)
def test_pair_exists(name):
    assert (ROOT / "book" / f"{name}.md").exists(), f"notebooks/{name}.ipynb has no book/{name}.md"
    assert (ROOT / "notebooks" / f"{name}.ipynb").exists(), \
        f"book/{name}.md has no notebooks/{name}.ipynb: run `make notebooks CHAPTERS={name}`"


@pytest.mark.parametrize("name", CHAPTERS)
def test_pair_cells_identical(name):
    md = jupytext.read(ROOT / "book" / f"{name}.md")
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    md_cells = [(c.cell_type, c.source) for c in md.cells]
    nb_cells = [(c.cell_type, c.source) for c in nb.cells]
    assert md_cells == nb_cells, f"book/{name}.md and its notebook differ: run `make notebooks CHAPTERS={name}`"
    tags = lambda cells: [c.metadata.get("tags", []) for c in cells]
    assert tags(md.cells) == tags(nb.cells), f"cell tags differ between book/{name}.md and its notebook"


@pytest.mark.parametrize("name", CHAPTERS)
def test_notebook_executed_in_order(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), \
        f"{name}: code cells not executed once, top to bottom (execution counts {counts})"


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_unexpected_errors(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        tagged = "raises-exception" in cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        if tagged:
            assert errors, f"{name}: code cell {i + 1} is tagged raises-exception but raised nothing"
        else:
            assert not errors, f"{name}: code cell {i + 1} stored an error: {errors[0].ename}: {errors[0].evalue}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_bootstrap_is_first_and_identical(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    first = code_cells(nb)[0].source
    assert first == BOOTSTRAP, f"{name}: the first code cell must be tests/bootstrap.py, unchanged"


@pytest.mark.parametrize("name", CHAPTERS)
def test_colab_metadata(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert nb.metadata.get("accelerator") == "TPU", f"{name}: Colab metadata accelerator: TPU missing"
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def test_toc_lists_every_chapter():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [entry["file"] for entry in toc.get("chapters", [])]
    assert files == [f"notebooks/{name}" for name in CHAPTERS], \
        f"_toc.yml chapters {files} should be the notebooks, in order: {CHAPTERS}"


def test_execution_report_covers_every_chapter():
    times = json.loads((ROOT / "notebooks" / "execution_times.json").read_text())
    assert sorted(times) == CHAPTERS, "run `make notebooks` to record every chapter's execution time"
