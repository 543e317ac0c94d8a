#!/usr/bin/env python3
"""Authoring tools for the course notebooks (not needed by learners).

    python scripts/notebook_tools.py build DRAFT.py notebooks/NN_topic.ipynb
        Turn a percent-format draft (``# %%`` code cells, ``# %% [markdown]`` cells
        whose lines start with ``# ``) into a notebook.
    python scripts/notebook_tools.py execute notebooks/NN_topic.ipynb [...]
        Restart-and-run-all in place, then clean the stored state: no timings, no
        widget state, no machine-specific metadata. Prints each notebook's runtime.
    python scripts/notebook_tools.py student OUT_DIR notebooks/*.ipynb
        Write student versions: every ``### BEGIN SOLUTION`` ... ``### END SOLUTION``
        block becomes ``raise NotImplementedError`` and outputs are cleared.
    python scripts/notebook_tools.py upgrade notebooks/*.ipynb student/*.ipynb
        One-shot: rewrite notebooks as nbformat 4.5 with stable cell ids (kept when
        present, derived from the cell's content when missing), without executing them.

Notebooks are stored as nbformat 4.5 with a stable ``id`` on every cell, and with the
``language_info`` the kernel reports: JupyterLab gives a 4.4 notebook fresh ids when it
opens it, and writes the kernel's language_info when the kernel starts; either marks
the lesson modified (the "unsaved" dot) before the reader has touched anything.

Outputs policy: notebooks are committed *executed* (so a reader on GitHub sees every
table and figure); CI re-runs them under nbval and compares the cells marked
``# NBVAL_CHECK_OUTPUT``.
"""

from __future__ import annotations

import hashlib
import platform
import re
import sys
import time
from pathlib import Path

import nbformat

KERNEL = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
SOLUTION = re.compile(
    r"^(?P<indent>[ \t]*)### BEGIN SOLUTION[^\n]*\n.*?^[ \t]*### END SOLUTION[^\n]*(\n|$)",
    re.MULTILINE | re.DOTALL,
)


def build(draft: Path, out: Path) -> None:
    cells, kind, lines = [], None, []

    def flush():
        if kind is None:
            return
        text = "\n".join(lines).strip("\n")
        if kind == "markdown":
            text = "\n".join(line[2:] if line.startswith("# ") else line.lstrip("#")
                             for line in text.splitlines())
            cells.append(nbformat.v4.new_markdown_cell(text))
        else:
            cells.append(nbformat.v4.new_code_cell(text))

    for line in draft.read_text().splitlines():
        if line.startswith("# %%"):
            flush()
            kind, lines = ("markdown" if "[markdown]" in line else "code"), []
        else:
            lines.append(line)
    flush()
    for cell in cells:
        cell.pop("id", None)  # random ids from nbformat; ensure_cell_ids derives stable ones
    nb = nbformat.v4.new_notebook(cells=cells)
    clean(nb)
    nbformat.write(nb, out)


def _merge_streams(outputs: list) -> list:
    """Join consecutive stream outputs of the same name (the kernel may split one print)."""
    merged: list = []
    for out in outputs:
        if (merged and out.get("output_type") == "stream" and merged[-1].get("output_type") == "stream"
                and merged[-1].get("name") == out.get("name")):
            merged[-1]["text"] = merged[-1]["text"] + out["text"]
        else:
            merged.append(out)
    return [o for o in merged if not (o.get("output_type") == "stream" and not o["text"].strip())]


CELL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def ensure_cell_ids(nb: nbformat.NotebookNode) -> None:
    """Give every cell a valid, unique id; keep ids that are already valid and unique.

    A missing id is derived from the cell's type and source (sha1, 8 hex digits, with a
    ``-2``, ``-3``... suffix for repeated contents), so upgrading the same notebook twice,
    or on two machines, gives the same ids.
    """
    seen: set[str] = set()
    for cell in nb.cells:
        cell_id = cell.get("id")
        if isinstance(cell_id, str) and CELL_ID.match(cell_id) and cell_id not in seen:
            seen.add(cell_id)
        else:
            cell.pop("id", None)
    for cell in nb.cells:
        if "id" in cell:
            continue
        base = hashlib.sha1(f"{cell.cell_type}\n{cell.source}".encode()).hexdigest()[:8]
        candidate, n = base, 1
        while candidate in seen:
            n += 1
            candidate = f"{base}-{n}"
        cell["id"] = candidate
        seen.add(candidate)


def language_info() -> dict:
    """The ``language_info`` an ipykernel on this Python reports.

    JupyterLab writes the kernel's language_info into the notebook when the kernel starts;
    a stored value that differs marks the notebook modified at once. Storing what the
    kernel will report keeps a freshly opened lesson unmodified (on the same Python version).
    """
    return {"codemirror_mode": {"name": "ipython", "version": sys.version_info[0]},
            "file_extension": ".py", "mimetype": "text/x-python", "name": "python",
            "nbconvert_exporter": "python", "pygments_lexer": f"ipython{sys.version_info[0]}",
            "version": platform.python_version()}


def clean(nb: nbformat.NotebookNode) -> None:
    """Strip machine-specific state; store as nbformat 4.5 with stable cell ids."""
    nb.metadata = {"kernelspec": KERNEL, "language_info": language_info()}
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = _merge_streams(cell.outputs)
        cell.metadata.pop("execution", None)
        cell.metadata.pop("collapsed", None)
        cell.metadata.pop("scrolled", None)
    nb.nbformat, nb.nbformat_minor = 4, 5
    ensure_cell_ids(nb)


def upgrade(path: Path) -> bool:
    """Rewrite one notebook as nbformat 4.5 with stable ids; True when the file changed."""
    before = path.read_text()
    nb = nbformat.read(path, as_version=4)
    clean(nb)
    nbformat.write(nb, path)
    return path.read_text() != before


def execute(path: Path) -> float:
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(nb, timeout=600, kernel_name="python3", record_timing=False,
                            store_widget_state=False,
                            resources={"metadata": {"path": str(path.parent)}})
    start = time.perf_counter()
    client.execute()
    elapsed = time.perf_counter() - start
    clean(nb)
    nbformat.write(nb, path)
    return elapsed


def student_version(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.source = SOLUTION.sub(
            lambda m: f'{m["indent"]}raise NotImplementedError("your code here")\n', cell.source
        )
        cell.outputs, cell.execution_count = [], None
    return nb


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__)
        return 2
    command, args = argv[0], argv[1:]
    if command == "build":
        build(Path(args[0]), Path(args[1]))
    elif command == "execute":
        for name in args:
            print(f"{name}: {execute(Path(name)):.1f} s", flush=True)
    elif command == "upgrade":
        for name in args:
            print(f"{name}: {'upgraded' if upgrade(Path(name)) else 'already nbformat 4.5'}")
    elif command == "student":
        out_dir = Path(args[0])
        sources = [Path(name) for name in args[1:]]
        if any(src.resolve().parent == out_dir.resolve() for src in sources):
            print(f"refusing to write student versions into {out_dir}/: it holds the instructor "
                  "notebooks, which would be overwritten. Choose another folder, e.g. student/.")
            return 2
        out_dir.mkdir(parents=True, exist_ok=True)
        for src in sources:
            original = nbformat.read(src, as_version=4)
            blanks = sum(len(SOLUTION.findall(c.source)) for c in original.cells if c.cell_type == "code")
            nbformat.write(student_version(original), out_dir / src.name)
            print(f"{out_dir / src.name}: {blanks} solution(s) blanked")
    else:
        print(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
