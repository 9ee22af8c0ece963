"""Copy tests/helpers.py's definitions into the chapters that carry them.

Chapters stay self-contained, so each one copies the shared helpers it uses into its
code cells; tests/test_sources.py fails when a copy differs from tests/helpers.py.
After changing a helper, run

    .venv/bin/python tests/sync_helpers.py          # rewrite book/*.md
    .venv/bin/python tests/sync_helpers.py --check  # only list what would change
    .venv/bin/python tests/sync_helpers.py 05_transformer  # only the chapters named

then `make notebooks` for the chapters it names. Every top-level definition in a
chapter's code cell whose name is a shared helper's is replaced by the canonical text;
a shared helper that a copied one now calls, and the chapter lacks, is inserted just
before the first definition that calls it.
"""

import ast
import re
import sys
from pathlib import Path

from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parent.parent
CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```$", re.M | re.S)


def definitions(source: str) -> list:
    """(name, first line, last line, text) of each top-level def, class and
    single-name assignment; lines are 0-based, inclusive."""
    lines = source.splitlines()
    found = []
    for node in ast.parse(TransformerManager().transform_cell(source)).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            first = min([d.lineno for d in node.decorator_list] + [node.lineno])
            name = node.name
        elif (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            first, name = node.lineno, node.targets[0].id
        else:
            continue
        text = "\n".join(lines[first - 1 : node.end_lineno])
        if isinstance(node, ast.Assign):  # its own text: a comment after it stays
            text = text[
                node.col_offset : len(text)
                - len(lines[node.end_lineno - 1])
                + node.end_col_offset
            ]
        found.append((name, first - 1, node.end_lineno - 1, text))
    return found


def canonical() -> dict:
    """name -> text of each definition in tests/helpers.py, in file order."""
    source = (ROOT / "tests" / "helpers.py").read_text()
    return {name: text for name, _, _, text in definitions(source)}


def calls(text: str, names) -> list:
    """The names among `names` that a definition's code uses (not its docstring)."""
    used = {node.id for node in ast.walk(ast.parse(text)) if isinstance(node, ast.Name)}
    return [n for n in names if n in used]


def split_cell(body: str) -> tuple:
    """A code cell's MyST metadata (between --- lines, or :key: lines) and its code."""
    if body.startswith("---\n"):
        end = body.index("---\n", 4) + 4
        return body[:end], body[end:]
    if body.startswith(":"):
        meta = re.match(r"((?::[^\n]*\n)+\n?)", body)[1]
        return meta, body[len(meta) :]
    return "", body


def sync(markdown: str, shared: dict) -> str:
    defined = set()
    for match in CELL.finditer(markdown):
        defined |= {name for name, *_ in definitions(split_cell(match[1])[1])}
    # shared helpers a copied one calls that the chapter lacks, transitively
    wanted = {n for n in defined if n in shared}
    missing, frontier = [], list(wanted)
    while frontier:
        for n in calls(shared[frontier.pop()], shared):
            if n not in defined and n not in missing:
                missing.append(n)
                frontier.append(n)

    def fix_cell(match):
        head, body = split_cell(match[1])
        lines = body.split("\n")
        for name, first, last, text in reversed(definitions(body)):
            if name not in shared:
                continue
            whole = "\n".join(lines[first : last + 1])
            new = whole.replace(text, shared[name], 1)  # a comment after it stays
            before = [m for m in missing if m in calls(shared[name], shared)]
            for m in before:
                missing.remove(m)
            inserted = "".join(
                shared[m] + "\n\n\n" for m in sorted(before, key=list(shared).index)
            )
            lines[first : last + 1] = (inserted + new).split("\n")
        return match[0].replace(match[1], head + "\n".join(lines), 1)

    return CELL.sub(fix_cell, markdown)


def main(check: bool, only: list) -> int:
    shared, changed = canonical(), []
    for path in sorted((ROOT / "book").glob("[0-9][0-9]_*.md")):
        if only and path.stem not in only:
            continue
        old = new = path.read_text()
        while (synced := sync(new, shared)) != new:  # an inserted helper may need one
            new = synced
        if new != old:
            changed.append(path.stem)
            if not check:
                path.write_text(new)
    verb = "would change" if check else "changed"
    print(f"{verb}: {' '.join(changed) or 'nothing'}")
    if changed and not check:
        print(f'now: make notebooks CHAPTERS="{" ".join(changed)}"')
    return 1 if changed and check else 0


if __name__ == "__main__":
    args = sys.argv[1:]
    sys.exit(main("--check" in args, [a for a in args if a != "--check"]))
