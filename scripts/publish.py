#!/usr/bin/env python3
"""Stamp every Colab/Binder badge and link from the one published location.

The repository (``owner/name``) and the release tag live in ``[tool.course]`` of
pyproject.toml, nowhere else. This module writes, from them:

* in every notebook (``notebooks/`` and ``student/``): a first markdown cell with the
  Colab and Binder badges of that very notebook, and a first code cell that installs the
  course on Colab (and does nothing, printing nothing, anywhere else);
* in README.md: the lesson table's launch column and the generated "Colab and Binder"
  block between ``<!-- launch:begin -->`` and ``<!-- launch:end -->``.

    python3 course.py publish                                # re-stamp from the config
    python3 course.py publish --repo OWNER/NAME --tag vX.Y.Z # change the config, then stamp
    python scripts/publish.py --check                        # list disagreements; exit 1 if any

Stamping is idempotent: a second run changes nothing. ``stamp_notebook`` is the hook
for other tools (the student-notebook release step calls it on each notebook it writes).

``--repo`` must be a GitHub ``owner/name`` (owner: letters, digits and ``-``, 1-39, not
starting or ending with ``-``, no ``--``; name: letters, digits, ``.``, ``_``, ``-``, 1-100,
not ``.`` or ``..``, not ending in ``.git``) and ``--tag`` a release tag
``vMAJOR.MINOR.PATCH`` without leading zeros, at most 64 characters (git stores a tag as a
file named after it). Both are checked, every new file content is
computed, and ``--check`` is run on the new contents in memory, before anything is written;
each file is then replaced atomically (a temporary file and ``os.replace``), so a failed
publish leaves the tree as it was. A bad value, a missing or unreadable file, or a notebook
that is not one is reported on one line on stderr with exit status 2; new contents that
would fail the check are listed on stderr with exit status 1, and nothing is written.
Interrupted (Ctrl-C, SIGINT, or SIGTERM), it says on one line whether the files were written
(all or none) and exits 130 or 143.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":  # first thing: a signal while it starts gets one line (course_utils/cli.py)
    sys.path.append(str(Path(__file__).resolve().parent))  # scripts/, for course_cli
    from course_cli import load_cli

    load_cli().stop_at_once("publish.py", needs=("nbformat",))

import argparse  # noqa: E402
import importlib  # noqa: E402
import re  # noqa: E402
from dataclasses import dataclass  # noqa: E402

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIRS = ("notebooks", "student")
# GitHub's rules: owner 1-39 of [A-Za-z0-9-], not starting or ending with '-', no '--';
# name 1-100 of [A-Za-z0-9._-], not '.' or '..', not ending in '.git' (GitHub drops it, so
# the links would name another repository). Used with fullmatch: '$' would also accept a
# final newline.
REPO_FORMAT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9]|-(?=[A-Za-z0-9])){0,38}/"
                         r"(?!\.\.?\Z)(?!.*(?i:\.git)\Z)[A-Za-z0-9._-]{1,100}")
# semantic versioning: no leading zeros (v01.0.0 is not v1.0.0)
TAG_FORMAT = re.compile(r"v(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)\.(?:0|[1-9]\d*)")
# git keeps a tag as the file .git/refs/tags/<tag>, whose name a file system caps at 255 bytes;
# TAG_FORMAT's characters (v, digits, dots) pass every other `git check-ref-format` rule
TAG_MAX = 64
BADGES_TAG, SETUP_TAG = "launch-badges", "colab-setup"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"
README_BEGIN, README_END = "<!-- launch:begin -->", "<!-- launch:end -->"
PLACEHOLDERS = re.compile(r"OWNER/(?:REPO|NAME)|USERNAME/|your-(?:user|org)|\{(?:repo|tag)\}")
RELATIVE_NOTEBOOK_LINK = re.compile(r"\]\((?P<path>(?:notebooks|student)/[^)\s]+\.ipynb)\)")
# Every launch link the course writes, with the repository, the git ref and the path in it.
LINK_PATTERNS = (
    re.compile(r"https://colab\.research\.google\.com/github/(?P<repo>[^/\s]+/[^/\s]+)/blob/"
               r"(?P<ref>[^/\s]+)/(?P<path>[^\s)\"'?#]+)"),
    re.compile(r"https://mybinder\.org/v2/gh/(?P<repo>[^/\s]+/[^/\s?]+)/(?P<ref>[^/\s?)]+)"
               r"(?:\?urlpath=lab/tree/(?P<path>[^\s)\"'&#]+))?"),
    re.compile(r"git\+https://github\.com/(?P<repo>[^/\s@]+/[^/\s@]+?)(?:\.git)?@(?P<ref>[^\s\"'#]+)"),
    re.compile(r"https://github\.com/(?P<repo>[^/\s)\"'@]+/[^/\s)\"'.@]+)(?:/(?:blob|tree)/"
               r"(?P<ref>[^/\s)]+)/(?P<path>[^\s)\"'?#]+))?"),
)

# The Colab set-up cell. The logic is carried inline: course_utils is not installed yet
# when it runs. A non-editable install lands in site-packages, which is already on
# sys.path, so `import course_utils` works at once; an editable install (the old recipe)
# only adds a .pth file, and .pth files are read at interpreter start-up, hence the
# restart it needed. Colab's torch and numpy are held at their installed versions, so pip
# cannot replace a module that is already imported (which would also need a restart).
SETUP_CELL = '''\
# Set-up for Google Colab: installs the course at its release, keeping Colab's torch.
# Anywhere else this cell does nothing.
def colab_setup(source="course-utils @ git+https://github.com/{repo}@{tag}"):
    import importlib.util
    import subprocess
    import sys
    from importlib.metadata import version

    try:
        from google.colab import output
    except ImportError:
        return  # not on Colab
    if importlib.util.find_spec("course_utils") is None:
        # Keep Colab's torch and numpy: replacing an imported module would need a restart.
        keep = [f"{{name}}=={{version(name)}}" for name in ("torch", "numpy")]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", source, *keep], check=True)
        importlib.invalidate_caches()  # so this runtime imports it at once, no restart
    output.enable_custom_widget_manager()  # for the ipywidgets explorers


colab_setup()'''


@dataclass(frozen=True)
class Published:
    repo: str  # "owner/name" on GitHub
    tag: str  # release tag, e.g. "v0.2.0"

    def colab_url(self, path: str) -> str:
        return f"https://colab.research.google.com/github/{self.repo}/blob/{self.tag}/{path}"

    def binder_url(self, path: str) -> str:
        return f"https://mybinder.org/v2/gh/{self.repo}/{self.tag}?urlpath=lab/tree/{path}"

    def colab_badge(self, path: str) -> str:
        return f"[![Open in Colab]({COLAB_BADGE})]({self.colab_url(path)})"

    def binder_badge(self, path: str) -> str:
        return f"[![Launch Binder]({BINDER_BADGE})]({self.binder_url(path)})"

    def badges_cell(self, path: str) -> str:
        return f"{self.colab_badge(path)} {self.binder_badge(path)}"

    def setup_cell(self) -> str:
        return SETUP_CELL.format(repo=self.repo, tag=self.tag)


def _tools():
    """scripts/notebook_tools.py (reading notebooks, atomic writes, the one-line errors)."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    return importlib.import_module("notebook_tools")


def _shown(value: object, width: int | None = None) -> str:
    """cli.shown: a value for a message, even one whose repr raises."""
    return _cli().shown(value, width)


def _cli():
    """course_utils/cli.py (standard library only), through scripts/course_cli.py: its
    ArgumentParser refuses an option given twice, as every course tool's does."""
    here = str(Path(__file__).resolve().parent)
    if here not in sys.path:
        sys.path.insert(0, here)
    from course_cli import load_cli

    return load_cli()


def validate(repo: str, tag: str) -> None:
    if not isinstance(repo, str) or not REPO_FORMAT.fullmatch(repo):
        raise ValueError(
            f"repo must be a GitHub 'owner/name' (owner: 1-39 letters, digits or '-', not starting "
            f"or ending with '-', no '--'; name: 1-100 letters, digits, '.', '_' or '-', not '.' or "
            f"'..', not ending in '.git'), got {_shown(repo)}"
        )
    if not isinstance(tag, str) or not TAG_FORMAT.fullmatch(tag):
        raise ValueError(f"tag must be a release tag vMAJOR.MINOR.PATCH such as 'v0.2.0' (numbers "
                         f"without leading zeros; never a branch), got {_shown(tag)}")
    if len(tag) > TAG_MAX:
        raise ValueError(f"tag must be at most {TAG_MAX} characters (git stores a tag as a file named "
                         f"after it), got {len(tag)}: {_shown(tag[:24])}...")
    if PLACEHOLDERS.search(repo):
        raise ValueError(f"repo {_shown(repo)} is a placeholder, not a published repository")


def _read_pyproject(root: Path) -> str:
    try:
        return _tools().read_text(root / "pyproject.toml", "file")
    except _tools().ToolError as exc:
        raise ValueError(str(exc)) from None


def _config_from_text(text: str, where: str = "pyproject.toml") -> Published:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{where}: not valid TOML ({exc})") from None
    course = data.get("tool", {}).get("course")
    if not isinstance(course, dict):
        raise ValueError(f"{where}: no [tool.course] table (expected repository = \"owner/name\" and "
                         "tag = \"vX.Y.Z\" there; or give --repo and --tag)")
    missing = [key for key in ("repository", "tag") if key not in course]
    if missing:
        raise ValueError(f"{where}: [tool.course] lacks {' and '.join(missing)} (or give --repo and --tag)")
    repo, tag = course.get("repository"), course.get("tag")
    validate(repo, tag)
    return Published(repo, tag)


def load_config(root: Path = ROOT) -> Published:
    """The published location from ``[tool.course]`` in pyproject.toml."""
    return _config_from_text(_read_pyproject(root), str(root / "pyproject.toml"))


def set_config(repo: str, tag: str, root: Path = ROOT) -> Published:
    """Write the published location into ``[tool.course]`` of pyproject.toml (atomically,
    and only once the new file is known to be valid)."""
    text, published = config_text(repo, tag, root)
    _tools().write_atomically(root / "pyproject.toml", text)
    return published


def config_text(repo: str, tag: str, root: Path = ROOT) -> tuple[str, Published]:
    """pyproject.toml's new text with ``repo`` and ``tag`` in ``[tool.course]`` (and the
    package version ``tag`` without its ``v``), and the location it holds; writes nothing.
    Raises ``ValueError`` for a bad value or a pyproject.toml that cannot hold them."""
    validate(repo, tag)
    text = _read_pyproject(root)
    section = re.search(r"^\[tool\.course\]\n(?:(?!\[).*\n?)*", text, re.MULTILINE)
    if section is None:
        raise ValueError("pyproject.toml has no [tool.course] section to hold the published location")
    body = section.group(0)
    for key, value in (("repository", repo), ("tag", tag)):
        body, n = re.subn(rf'^{key}\s*=\s*"[^"]*"', f'{key} = "{value}"', body, flags=re.MULTILINE)
        if n != 1:
            raise ValueError(f"[tool.course] in pyproject.toml needs exactly one {key} = \"...\" line")
    text = text[:section.start()] + body + text[section.end():]
    # the package's version is the release's (v0.2.0 -> 0.2.0), so pip reports what the tag holds
    text, n = re.subn(r'^version = "[^"]*"', f'version = "{tag.removeprefix("v")}"', text, count=1,
                      flags=re.MULTILINE)
    if n != 1:
        raise ValueError('pyproject.toml needs a version = "..." line in [project]')
    published = _config_from_text(text, "the new pyproject.toml")
    if published != Published(repo, tag):  # never write a file that reads back otherwise
        raise ValueError(f"the new pyproject.toml would read back as {published}, not {repo} at {tag}")
    return text, published


# -- notebooks -----------------------------------------------------------------------

def _tagged(cell, tag: str) -> bool:
    return tag in cell.get("metadata", {}).get("tags", [])


REPOSITORY_FILE_LINK = re.compile(r"https://github\.com/(?P<repo>[^/\s)\"']+/[^/\s)\"']+)/(?P<kind>blob|tree)/"
                                  r"(?P<ref>[^/\s)\"']+)/")
# A markdown link from a notebook to a file of the repository by a relative path: it opens in
# JupyterLab and on GitHub, but not on Colab, which has only the notebook.
RELATIVE_FILE_LINK = re.compile(r"\]\((?P<path>(?:\.\.?/)?[\w.-]+/[^)\s]*)\)")


def _retarget_file_links(text: str, own: set[str], repo: str, tag: str) -> str:
    """``text`` with every link to a file of this course's repository (any repository in
    ``own``, lower case) moved to ``repo`` at ``tag``."""
    def move(m: re.Match) -> str:
        if m.group("repo").lower() not in own:
            return m.group(0)  # another project's file
        return f"https://github.com/{repo}/{m.group('kind')}/{tag}/"
    return REPOSITORY_FILE_LINK.sub(move, text)


def stamp_notebook(nb, repo_relative_path: str, published: Published | None = None,
                   files_tag: str | None = None):
    """Give ``nb`` (an nbformat v4 notebook) its badge cell and Colab set-up cell, in place.

    ``repo_relative_path`` is where the notebook is committed, e.g.
    ``"student/03_dimension_walkthrough.ipynb"``: the badges open that very file at the
    release tag, and markdown links to the repository's files (``https://github.com/REPO/blob/TAG/...``,
    REPO the configured one or the one the old badges named) move to the release, or to
    ``files_tag`` when given (a student tree, whose own tag holds no docs/ or tests/). Existing
    stamped cells (found by their tags) are rewritten, so calling
    this twice changes nothing. Returns ``nb``.
    """
    import nbformat

    if not isinstance(repo_relative_path, str) or not repo_relative_path.endswith(".ipynb") \
            or repo_relative_path.startswith("/"):
        raise ValueError("repo_relative_path must be the notebook's path inside the repository, "
                         f"e.g. 'notebooks/00_start_here.ipynb'; got {_shown(repo_relative_path)}")
    published = published or load_config()
    cells = [c for c in nb.cells if not (_tagged(c, BADGES_TAG) or _tagged(c, SETUP_TAG))]
    old = {tag: next((c for c in nb.cells if _tagged(c, tag)), None) for tag in (BADGES_TAG, SETUP_TAG)}

    # links to the repository's files follow the release, from the one the badges named
    old_badges = old[BADGES_TAG].source if old[BADGES_TAG] else ""
    own = {published.repo.lower()} | {m.group("repo").lower() for m in LINK_PATTERNS[0].finditer(old_badges)}
    for cell in cells:
        if cell.cell_type == "markdown":
            cell.source = _retarget_file_links(cell.source, own, published.repo, files_tag or published.tag)
    badges = old[BADGES_TAG] or nbformat.v4.new_markdown_cell()
    badges.source = published.badges_cell(repo_relative_path)
    badges.metadata = {"tags": [BADGES_TAG]}
    badges["id"] = BADGES_TAG
    setup = old[SETUP_TAG] or nbformat.v4.new_code_cell()
    if setup.source != published.setup_cell():  # a run of other code: its count and outputs go
        setup.source = published.setup_cell()
        setup.outputs, setup.execution_count = [], None
    setup.metadata = {"tags": [SETUP_TAG]}
    setup["id"] = SETUP_TAG

    first_code = next((i for i, c in enumerate(cells) if c.cell_type == "code"), len(cells))
    cells.insert(first_code, setup)  # the first code cell, after the title and introduction
    cells.insert(0, badges)
    nb.cells = cells
    nb.nbformat, nb.nbformat_minor = 4, 5
    return nb


def notebook_paths(root: Path = ROOT) -> list[Path]:
    return sorted(p for d in NOTEBOOK_DIRS for p in (root / d).glob("*.ipynb"))


def stamped_notebook_text(path: Path, root: Path = ROOT, published: Published | None = None
                          ) -> tuple[str, str]:
    """``(before, after)``: one notebook file's text and its stamped text; writes nothing.
    A file that is not a readable notebook raises ``ValueError`` naming it."""
    tools = _tools()
    try:
        before = tools.read_text(path, "notebook")
        nb = tools.read_notebook(path)
    except tools.ToolError as exc:
        raise ValueError(str(exc)) from None
    stamp_notebook(nb, path.relative_to(root).as_posix(), published)
    tools.ensure_cell_ids(nb)  # ids for any cell that lacks one
    return before, tools.notebook_text(nb)


def stamp_notebook_file(path: Path, root: Path = ROOT, published: Published | None = None) -> bool:
    """Stamp one notebook file (replaced atomically); True when its contents changed."""
    before, after = stamped_notebook_text(path, root, published)
    if after != before:
        _tools().write_atomically(path, after)
    return after != before


# -- README --------------------------------------------------------------------------

def _readme_block(published: Published) -> str:
    start = "notebooks/00_start_here.ipynb"
    return f"""{README_BEGIN}
- **Colab:** click a lesson's *Open in Colab* badge (in the lesson table below, or at the top of \
each notebook) to open the lesson with its exercises solved, or the *exercises* link next to the \
badge to open the student copy (`student/`), whose exercises you fill in. The first code cell \
installs the course from `{published.repo}` at release `{published.tag}` (Colab's own torch is kept) and \
turns on Colab's widget manager; run it, then carry on, no restart needed. A GPU runtime \
(Runtime → Change runtime type) runs the optional CUDA cells.
- **Binder:** {published.binder_badge(start)} opens JupyterLab on lesson 00 at release \
`{published.tag}`, built from `binder/` (CPU-only torch; Binder gives 2 GB of memory, and \
`python -m course_utils.bench memory` shows every lesson's peak).
{README_END}"""


def _split_row(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]


def stamp_readme(text: str, published: Published) -> str:
    """README with the launch block and the lesson table's launch column stamped."""
    block = _readme_block(published)
    if README_BEGIN in text and README_END in text:
        text = re.sub(re.escape(README_BEGIN) + r".*?" + re.escape(README_END), lambda _: block,
                      text, flags=re.DOTALL)
    else:
        raise ValueError(f"README.md needs the markers {README_BEGIN} and {README_END}")
    lines, out, in_table = text.split("\n"), [], False
    for line in lines:
        if line.startswith("| # | Notebook |"):
            in_table = True
            cells = _split_row(line)[:3] + ["Launch"]
        elif in_table and re.match(r"^\|\s*-", line):
            cells = ["---"] * 4
        elif in_table and line.startswith("|"):
            cells = _split_row(line)[:3]
            link = re.search(r"\]\((notebooks/\d\d_[a-z0-9_]+\.ipynb)\)", cells[1])
            student = link and f"student/{link.group(1).removeprefix('notebooks/')}"
            cells.append(f"{published.colab_badge(link.group(1))} "
                         f"[exercises]({published.colab_url(student)})" if link else "")
        else:
            in_table = False
            out.append(line)
            continue
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


# -- the check -----------------------------------------------------------------------

def _launch_links(text: str):
    for pattern in LINK_PATTERNS:
        yield from pattern.finditer(text)


def check(root: Path = ROOT, planned: dict[Path, str] | None = None) -> list[str]:
    """Every disagreement between the badges/links and the config, as readable lines.
    ``planned`` (path -> text, from :func:`planned_stamps`) is read in place of those files:
    publish checks its new files this way before writing any of them."""
    tools = _tools()
    planned = planned or {}

    def text_of(path: Path, what: str) -> str:
        return planned[path] if path in planned else tools.read_text(path, what)

    pyproject = root / "pyproject.toml"
    try:
        config = text_of(pyproject, "file")
        published = _config_from_text(config, str(pyproject))
    except tools.ToolError as exc:
        return [f"pyproject.toml [tool.course]: {exc}"]
    except (ValueError, KeyError) as exc:
        return [f"pyproject.toml [tool.course]: {exc}"]
    problems: list[str] = []
    version = tomllib.loads(config).get("project", {}).get("version")
    if version != published.tag.removeprefix("v"):
        problems.append(f"pyproject.toml: version {version} but the release tag is {published.tag} "
                        "(run python3 course.py publish --repo ... --tag ...)")
    try:
        texts: dict[str, str] = {"README.md": text_of(root / "README.md", "file")}
    except tools.ToolError as exc:
        return problems + [str(exc)]
    for path in notebook_paths(root):
        rel = path.relative_to(root).as_posix()
        try:
            nb = tools.parse_notebook(text_of(path, "notebook"), path)
        except tools.ToolError as exc:
            problems.append(f"{rel}: {str(exc).removeprefix(str(path) + ': ')}")
            continue
        texts[rel] = "\n".join(c.source for c in nb.cells)
        if nb.nbformat_minor < 5:
            problems.append(f"{rel}: nbformat 4.{nb.nbformat_minor}, expected 4.5 with cell ids")
        if not nb.cells or nb.cells[0].source != published.badges_cell(rel):
            problems.append(f"{rel}: first cell is not its badge cell (run python3 course.py publish)")
        code = [c for c in nb.cells if c.cell_type == "code"]
        if not code or code[0].source != published.setup_cell():
            problems.append(f"{rel}: first code cell is not the current Colab set-up cell")
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                for m in RELATIVE_FILE_LINK.finditer(cell.source):
                    url = f"https://github.com/{published.repo}/blob/{published.tag}/..."
                    problems.append(f"{rel}: relative link to {m.group('path')}, which does not open "
                                    f"on Colab: link {url} instead")
        if sum(_tagged(c, SETUP_TAG) for c in nb.cells) != 1 or sum(_tagged(c, BADGES_TAG)
                                                                    for c in nb.cells) != 1:
            problems.append(f"{rel}: expected exactly one badge cell and one set-up cell")
    readme = texts["README.md"]
    try:
        if stamp_readme(readme, published) != readme:
            problems.append("README.md: launch block or lesson table is stale "
                            "(run python3 course.py publish)")
    except ValueError as exc:
        problems.append(f"README.md: {exc}")
    for rel, text in texts.items():
        for m in RELATIVE_NOTEBOOK_LINK.finditer(text):
            if not (root / m.group("path")).is_file():
                problems.append(f"{rel}: link to {m.group('path')}, which does not exist")
        for m in PLACEHOLDERS.finditer(text):
            problems.append(f"{rel}: placeholder {_shown(m.group(0))}")
        for m in _launch_links(text):
            repo, ref, path = m.group("repo"), m.groupdict().get("ref"), m.groupdict().get("path")
            other_project = repo.split("/")[-1].lower() != published.repo.split("/")[-1].lower()
            if m.re is LINK_PATTERNS[3] and other_project:
                continue  # a link to another project's repository, not a launch link
            if repo.lower() != published.repo.lower():
                problems.append(f"{rel}: {m.group(0)} names {repo}, config says {published.repo}")
            if ref is not None and ref != published.tag:
                problems.append(f"{rel}: {m.group(0)} is pinned to {ref}, config says {published.tag}")
            if path is not None and not (root / path).is_file():
                problems.append(f"{rel}: {m.group(0)} points at {path}, which does not exist")
            elif path is not None and path.endswith(".md"):
                fragment = re.match(r"#([\w\-]+)", text[m.end():])
                anchors = markdown_anchors((root / path).read_text(encoding="utf-8"))
                if fragment and fragment.group(1) not in anchors:
                    problems.append(f"{rel}: {m.group(0)}#{fragment.group(1)} names no heading of {path}")
    return problems


def markdown_anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown text: lower case, punctuation other
    than hyphens and underscores dropped, spaces made hyphens (no de-duplication suffixes)."""
    return {re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
            for line in text.splitlines() if line.startswith("#")}


def planned_stamps(root: Path = ROOT, published: Published | None = None) -> dict[Path, str]:
    """The new text of every notebook and README.md under ``root`` that stamping changes
    (path -> text); writes nothing. Raises ``ValueError`` naming a file that cannot be
    read or stamped."""
    published = published or load_config(root)
    planned = {}
    for path in notebook_paths(root):
        before, after = stamped_notebook_text(path, root, published)
        if after != before:
            planned[path] = after
    readme = root / "README.md"
    tools = _tools()
    try:
        before = tools.read_text(readme, "file")
    except tools.ToolError as exc:
        raise ValueError(str(exc)) from None
    try:
        after = stamp_readme(before, published)
    except ValueError as exc:
        raise ValueError(f"{readme}: {exc}") from None
    if after != before:
        planned[readme] = after
    return planned


def write_all(planned: dict[Path, str]) -> None:
    """Write every planned file, all or nothing: when one cannot be written (an immutable
    file or folder, a full disk) every file is left as it was, and a ToolError says which."""
    _tools().write_all_atomically(planned, written="every stamped file was written")


def stamp_all(root: Path = ROOT, published: Published | None = None) -> list[str]:
    """Stamp every notebook and README.md under ``root``; the files that changed. Every new
    text is computed before the first file is written."""
    planned = planned_stamps(root, published)
    write_all(planned)
    return [p.relative_to(root).as_posix() for p in planned]


def main(argv: list[str] | None = None, *, root: Path = ROOT) -> int:
    """The command line; ``root`` is the repository to publish (tests pass a copy)."""
    parser = _cli().ArgumentParser(prog="python3 course.py publish", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repo", help="GitHub owner/name the course is published under")
    parser.add_argument("--tag", help="release tag the badges pin to, e.g. v0.2.0")
    parser.add_argument("--check", action="store_true", help="only report disagreements")
    args = parser.parse_args(argv)
    if args.check:
        if args.repo is not None or args.tag is not None:
            parser.error("--check reads the config as it is: give it without --repo and --tag")
        try:  # a missing or unreadable pyproject.toml is the command's input, not a disagreement
            _read_pyproject(root)
        except ValueError as exc:
            print(f"publish: {exc}; nothing was checked", file=sys.stderr)
            return 2
        problems = check(root)
        print("\n".join(problems) or "every badge and link agrees with [tool.course]")
        return 1 if problems else 0
    if (args.repo is None) != (args.tag is None):
        parser.error("give both --repo and --tag, or neither (then the config is used as it is)")
    try:
        # everything is computed and checked first; nothing is written if any of it fails
        planned: dict[Path, str] = {}
        if args.repo is not None:
            text, published = config_text(args.repo, args.tag, root)
            planned[root / "pyproject.toml"] = text
        else:
            published = load_config(root)
        planned.update(planned_stamps(root, published))
    except ValueError as exc:
        print(f"publish: {exc}", file=sys.stderr)
        return 2
    problems = check(root, planned)  # the new files, checked before any of them is written
    if problems:
        print(f"publish: the stamped files would not pass the check, so nothing was written "
              f"({len(problems)} problem(s)):", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 1
    try:
        write_all(planned)
    except _tools().ToolError as exc:
        print(f"publish: {exc}", file=sys.stderr)
        return 1
    changed = [p.relative_to(root).as_posix() for p in planned if p.name != "pyproject.toml"]
    print(f"published location: {published.repo} at {published.tag}")
    print(f"stamped: {', '.join(changed)}" if changed else "nothing to change")
    print(f"The badges open nothing until the tag exists on GitHub: commit, then "
          f"`git tag {published.tag} && git push origin {published.tag}`.")
    return 0


if __name__ == "__main__":  # interrupted (Ctrl-C, SIGTERM): one line, exit 130/143; the writes
    cli = _tools().cli  # are all or nothing (course_utils/cli.py)
    cli.leaving(cli.NOTHING_WRITTEN)
    sys.exit(cli.run(main, sys.argv[1:], "publish.py"))
