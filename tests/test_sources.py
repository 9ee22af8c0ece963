"""Pairs and freshness: every chapter's markdown and notebook agree, and the notebook is
executed."""

import json
import os
import re
import subprocess
import sys
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
    assert (ROOT / "book" / f"{name}.md").exists(), (
        f"notebooks/{name}.ipynb has no book/{name}.md"
    )
    assert (ROOT / "notebooks" / f"{name}.ipynb").exists(), (
        f"book/{name}.md has no notebooks/{name}.ipynb: "
        f"run `make notebooks CHAPTERS={name}`"
    )


@pytest.mark.parametrize("name", CHAPTERS)
def test_pair_cells_identical(name):
    md = jupytext.read(ROOT / "book" / f"{name}.md")
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    md_cells = [(c.cell_type, c.source) for c in md.cells]
    nb_cells = [(c.cell_type, c.source) for c in nb.cells]
    assert md_cells == nb_cells, (
        f"book/{name}.md and its notebook differ: run `make notebooks CHAPTERS={name}`"
    )
    tags = lambda cells: [c.metadata.get("tags", []) for c in cells]
    assert tags(md.cells) == tags(nb.cells), (
        f"cell tags differ between book/{name}.md and its notebook"
    )


@pytest.mark.parametrize("name", CHAPTERS)
def test_code_cells_fit_the_page_options_included(name):
    """Code lines are linted at 88 characters (ruff, ruff.toml); a code cell's options
    in the markdown source (its YAML: tags, a figure's alt text) are not code to ruff,
    and were found over 88 twice after editors' rewraps: held to the same 88 here."""
    text = (ROOT / "book" / f"{name}.md").read_text()
    long = [
        f"line {text.count(chr(10), 0, cell.start()) + 1 + i}: {len(line)} characters"
        for cell in re.finditer(
            r"^```\{code-cell\}[^\n]*\n(.*?)^```$", text, re.M | re.S
        )
        for i, line in enumerate(cell[1].splitlines(), 1)
        if len(line) > 88
    ]
    assert not long, f"book/{name}.md, in code cells: {long}"


@pytest.mark.parametrize("name", CHAPTERS)
def test_notebook_executed_in_order(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    counts = [c.execution_count for c in code_cells(nb)]
    assert counts == list(range(1, len(counts) + 1)), (
        f"{name}: code cells not executed once, top to bottom "
        f"(execution counts {counts})"
    )


@pytest.mark.parametrize("name", CHAPTERS)
def test_no_stored_errors(name):
    """Errors shown on purpose are caught by `expect_error`, which prints
    `Type: message`: a stored traceback means a cell failed (or a `raises-exception`
    cell, which stops Colab's Run all)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        assert "raises-exception" not in cell.metadata.get("tags", []), (
            f"{name}: code cell {i + 1} is tagged raises-exception; "
            "use `with expect_error(...)` instead"
        )
        errors = [o for o in cell.outputs if o.output_type == "error"]
        assert not errors, (
            f"{name}: code cell {i + 1} stored an error: "
            f"{errors[0].ename}: {errors[0].evalue}"
        )


@pytest.mark.parametrize("name", CHAPTERS)
def test_bootstrap_is_first_and_identical(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    first = code_cells(nb)[0]
    assert first.source == BOOTSTRAP, (
        f"{name}: the first code cell must be tests/bootstrap.py, unchanged"
    )
    # The site collapses its code (the reader sees the line it prints); Colab and
    # Jupyter show it.
    assert first.metadata.get("tags", []) == ["hide-input"], (
        f"{name}: tag the bootstrap cell hide-input"
    )


@pytest.mark.parametrize("name", CHAPTERS)
def test_colab_metadata(name):
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    assert nb.metadata.get("accelerator") == "TPU", (
        f"{name}: Colab metadata accelerator: TPU missing"
    )
    assert nb.metadata.get("kernelspec", {}).get("name") == "python3"


def test_toc_lists_every_chapter():
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    files = [entry["file"] for entry in toc.get("chapters", [])]
    assert files == [f"notebooks/{name}" for name in CHAPTERS], (
        f"_toc.yml chapters {files} should be the notebooks, in order: {CHAPTERS}"
    )


def test_intro_map_and_list_name_every_chapter():
    """The introduction's numbered list and its map of which chapter builds on which
    have one entry per chapter, and every chapter past the first has an arrow in."""
    intro = (ROOT / "book" / "intro.md").read_text()
    numbers = list(range(1, len(CHAPTERS) + 1))
    listed = [int(k) for k in re.findall(r"^ ?(\d+)\. \*\*", intro, re.M)]
    graph = re.search(r"digraph chapters \{(.*?)^\}", intro, re.M | re.S)[1]
    nodes = [int(k) for k in re.findall(r"\bc(\d+) \[label=", graph)]
    targets = {int(k) for k in re.findall(r"-> ?c(\d+)", graph)}
    assert listed == numbers, listed
    assert nodes == numbers, f"the intro's map has nodes {nodes}, not {numbers}"
    assert targets == set(numbers[1:]), sorted(targets)


def test_execution_report_covers_every_chapter():
    times = json.loads((ROOT / "notebooks" / "execution_times.json").read_text())
    assert sorted(times) == CHAPTERS, (
        "run `make notebooks` to record every chapter's execution time"
    )


def top_level_definitions(name):
    """(kind, name, source) of every top-level def, class and single-name assignment in
    a chapter."""
    import ast

    from IPython.core.inputtransformer2 import TransformerManager

    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    found = []
    for cell in code_cells(nb)[1:]:  # the bootstrap is checked on its own
        source = TransformerManager().transform_cell(cell.source)
        for node in ast.parse(source).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                first = min([d.lineno for d in node.decorator_list] + [node.lineno])
                text = "\n".join(source.splitlines()[first - 1 : node.end_lineno])
                found.append(("def", node.name, text))
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
            ):
                found.append(
                    ("assign", node.targets[0].id, ast.get_source_segment(source, node))
                )
    return found


def canonical_helpers():
    """name -> source of each definition in tests/helpers.py."""
    return {
        name: text
        for kind, name, text in _definitions_in(
            (ROOT / "tests" / "helpers.py").read_text()
        )
    }


def _definitions_in(source):
    import ast

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            yield (
                "def",
                node.name,
                "\n".join(source.splitlines()[first - 1 : node.end_lineno]),
            )
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            yield "assign", node.targets[0].id, ast.get_source_segment(source, node)


@pytest.mark.parametrize("name", CHAPTERS)
def test_shared_helpers_are_the_canonical_ones(name):
    """A chapter that defines one of the book's shared helpers copies tests/helpers.py
    exactly."""
    canonical = canonical_helpers()
    for kind, helper, text in top_level_definitions(name):
        if helper in canonical:
            assert text == canonical[helper], (
                f"{name}: `{helper}` differs from its one definition in "
                "tests/helpers.py; copy that one: .venv/bin/python "
                "tests/sync_helpers.py"
            )


# Each chapter's single-device reference model goes by these names (house style: `mlp`,
# `loss`, ...).
CHAPTER_MODELS = {"mlp", "loss", "train"}


def test_one_definition_per_function_name_across_chapters():
    """A function name means one thing in the whole book: defined in two chapters, it is
    the same code; and a name defined as a function in one chapter is not a plain value
    in another."""
    defs, values = {}, {}
    for name in CHAPTERS:
        for kind, helper, text in top_level_definitions(name):
            table = defs if kind == "def" else values
            table.setdefault(helper, {}).setdefault(text, []).append(name)

    def chapters(texts):
        return sorted({c for cs in texts.values() for c in cs})

    clashes = [
        f"`{h}` has {len(v)} different definitions (in {chapters(v)})"
        for h, v in defs.items()
        if h not in CHAPTER_MODELS and len(v) > 1 and len(chapters(v)) > 1
    ]
    clashes += [
        f"`{h}` is a function in {chapters(defs[h])} and a value in {chapters(v)}"
        for h, v in values.items()
        if h in defs
    ]
    assert not clashes, "; ".join(clashes)


def test_no_merge_conflict_markers():
    """A conflict resolved in a hurry can leave its markers behind (bench/README.md
    once did)."""
    import subprocess

    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True
    ).stdout.split()
    if not tracked:
        pytest.skip("not a git checkout")
    # "=======" alone can be a Markdown heading rule
    markers = ("<" * 7 + " ", ">" * 7 + " ")
    found = [
        f"{path}:{number}"
        for path in tracked
        if (ROOT / path).suffix
        in {".md", ".py", ".txt", ".yml", ".toml", ".cfg", ".json"}
        for number, line in enumerate(
            (ROOT / path).read_text(errors="replace").splitlines(), 1
        )
        if line.startswith(markers)
    ]
    assert not found, f"merge conflict markers at {found}"


def test_worker_run_by_hand_without_its_argument_says_what_it_needs():
    """book/multihost/worker.py (chapter 8's worker) is there to be run by hand too."""
    worker = ROOT / "book" / "multihost" / "worker.py"
    for argv in ([], ["{}"], ["not json"]):
        out = subprocess.run(
            [sys.executable, str(worker), *argv],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "JAX_PLATFORMS": "cpu"},
        )
        assert out.returncode == 1 and out.stdout == "", out
        assert out.stderr.startswith(
            "usage: python worker.py JSON, a JSON object with "
        ), out.stderr
        assert "Traceback" not in out.stderr


@pytest.mark.parametrize("name", CHAPTERS)
def test_every_figure_has_alt_text(name):
    """A figure says in words what it shows (issue 35): the drawing cell's metadata
    carries `mystnb: image: alt:` (myst-nb puts it on the page's <img>)."""
    nb = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    for i, cell in enumerate(code_cells(nb)):
        drawn = any(
            kind.startswith("image/")
            for output in cell.get("outputs", [])
            for kind in output.get("data", {})
        )
        alt = cell.metadata.get("mystnb", {}).get("image", {}).get("alt", "")
        if drawn:
            assert len(alt.split()) >= 8, (
                f"{name}: code cell {i} draws a figure without alt text of a sentence "
                "or more (`mystnb: image: alt:` in the cell's metadata)"
            )
