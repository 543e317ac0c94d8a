"""The set-up files agree with each other, and every notebook is run by the suite."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

import yaml
from bad_input_cases import load_course

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_NAME = re.compile(r"^\d\d_[a-z0-9_]+\.ipynb$")
CONDA_NAMES = {"torch": "pytorch"}


def _name(requirement: str) -> str:
    return re.match(r"\s*([A-Za-z0-9_.-]+)", requirement).group(1).lower().replace("_", "-")


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _pyproject_names(*, learner_only: bool = False) -> set[str]:
    """Every dependency; ``learner_only`` leaves out the ``instructor`` extra (nbgrader),
    which Binder and the conda file do not install."""
    project = _pyproject()["project"]
    reqs = list(project["dependencies"])
    for name, extra in project["optional-dependencies"].items():
        if not (learner_only and name == "instructor"):
            reqs += extra
    return {_name(r) for r in reqs}


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;]+)\s*(;.*)?$", line.strip())
        if m and (m.group(3) is None or ">=" in m.group(3)):
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def test_torch_pinned_to_the_cpu_wheel_on_disk():
    assert _pins()["torch"] == "2.13.0"


def test_every_pyproject_dependency_is_pinned():
    pins = _pins()
    missing = sorted(n for n in _pyproject_names() if n not in pins)
    assert not missing, f"add exact pins to constraints.txt for {missing}"


def test_pyproject_uses_ranges_not_pins():
    project = _pyproject()["project"]
    for req in project["dependencies"]:
        assert "==" not in req, f"pyproject.toml should use a range for {req!r}"


def test_lesson_00_checks_the_floors_pyproject_declares():
    """The environment check of lesson 00 (env.REQUIRED_PACKAGES) must ask for the versions
    pyproject.toml requires, or it calls an environment ready that the lessons cannot run in."""
    from course_utils.env import REQUIRED_PACKAGES

    floors = {}
    for req in _pyproject()["project"]["dependencies"]:
        name, _, floor = req.partition(">=")
        floors[name.strip()] = floor.split(",")[0].strip()
    assert REQUIRED_PACKAGES == floors


def test_environment_yml_lists_the_same_packages():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    names = set()
    for dep in env["dependencies"]:
        if isinstance(dep, str) and _name(dep) not in {"python", "pip"}:
            names.add(_name(dep))
    expected = {CONDA_NAMES.get(n, n) for n in _pyproject_names(learner_only=True)}
    assert names == expected
    pip_section = next(d for d in env["dependencies"] if isinstance(d, dict))["pip"]
    assert "-e ." in pip_section


def test_binder_lists_the_same_packages_with_the_same_pins():
    lines = [line.strip() for line in (ROOT / "binder" / "requirements.txt").read_text().splitlines()]
    reqs = [line for line in lines if line and not line.startswith(("#", "-"))]
    assert {_name(r) for r in reqs} == _pyproject_names(learner_only=True)
    pins = _pins()
    for req in reqs:
        name, version = req.split("==")
        assert pins[_name(name)] == version, f"binder pins {req}, constraints.txt {pins[_name(name)]}"
    assert any("whl/cpu" in line for line in lines), "Binder must use CPU-only torch"
    assert "pip install --no-deps -e ." in (ROOT / "binder" / "postBuild").read_text()


def _readme_code_lines() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash)?\n(.*?)```", readme, re.DOTALL)
    return [line.split("#")[0].strip() for block in blocks for line in block.splitlines()]


def test_ci_runs_the_readme_test_command():
    assert "python3 course.py test" in _readme_code_lines()
    ci = (ROOT / ".ci" / "run").read_text()
    # the command whole, with no arguments of its own; CI may choose a CPU's code paths for it
    assert re.search(r"^(?:(?:MKL_CBWR|ATEN_CPU_CAPABILITY)=\w+\s+)*python3 course.py test(\s+#.*)?$",
                     ci, re.MULTILINE)


def test_readme_stays_a_one_minute_read():
    """Dated figures go to CHANGELOG.md and docs/, not into the README (issue 28)."""
    size = len((ROOT / "README.md").read_bytes())
    assert size <= 8 * 1024, f"README.md is {size} bytes; move detail to docs/ (limit 8 KiB)"


def _notebooks() -> list[Path]:
    """The repository's notebooks, leaving out student copies and whatever git ignores (an
    instructor's nbgrader course directory, mha-course/, made inside the clone)."""
    found = []
    for path in ROOT.rglob("*.ipynb"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in {".venv", "student", "build"} or ".ipynb_checkpoints" in rel.parts:
            continue
        found.append(rel)
    ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "--stdin"], capture_output=True,
                             text=True, input="\n".join(map(str, found))).stdout.split()
    return sorted(rel for rel in found if str(rel) not in ignored)


def test_pytest_collects_every_notebook():
    config = _pyproject()["tool"]["pytest"]["ini_options"]
    assert "notebooks" in config["testpaths"]
    assert "--nbval-lax" in config["addopts"]
    for rel in _notebooks():
        assert rel.parent == Path("notebooks"), f"{rel} is outside notebooks/: nbval won't run it"
        assert NOTEBOOK_NAME.match(rel.name), f"{rel.name} is not named NN_topic.ipynb"


def test_readme_lists_every_notebook():
    readme = (ROOT / "README.md").read_text()
    for rel in _notebooks():
        assert rel.name in readme, f"README's lesson table does not list {rel.name}"


@pytest.mark.parametrize("rel", _notebooks(), ids=str)
def test_notebook_is_clean(rel):
    text = (ROOT / rel).read_text()
    nb = json.loads(text)
    assert not re.search(r"/(root|work|tmp|home|Users)/[\w.-]+", text), "machine path stored"
    assert not re.search(r"\b0x[0-9a-f]{8,}\b", text), "memory address stored"
    assert "widgets" not in nb.get("metadata", {}), "widget state stored"
    code = "\n".join(c["source"] if isinstance(c["source"], str) else "".join(c["source"])
                     for c in nb["cells"] if c["cell_type"] == "code")
    assert "seed_everything(" in code, "every notebook seeds its randomness"
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            assert out.get("output_type") != "error", "a stored error output"
    assert "NBVAL_CHECK_OUTPUT" in code, "at least one cell's output is checked by CI"


# -- a non-editable install carries data/ (checkpoints, worked example) -----------------
def _source_files() -> list[str]:
    """What a clone holds: tracked files plus new, not ignored ones."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.splitlines()
    return [name for name in listed if (ROOT / name).is_file()]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel pip builds for `pip install .` or `pip install git+...@tag`."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in _source_files():
        if name.endswith(".ipynb"):  # the lessons are not part of the package
            continue
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                    "--disable-pip-version-check", "-q", "-w", str(tmp / "dist"), str(src)],
                   check=True, capture_output=True)
    (found,) = (tmp / "dist").glob("course_utils-*.whl")
    return found


def test_wheel_ships_every_module_and_every_data_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for path in sorted([*(ROOT / "course_utils").rglob("*.py"), *(ROOT / "course_utils").rglob("*.c")]):
        assert path.relative_to(ROOT).as_posix() in names, f"the wheel leaves out {path.name}"
    for path in sorted((ROOT / "data").rglob("*")):
        if path.is_file():
            assert f"course_utils/data/{path.relative_to(ROOT / 'data').as_posix()}" in names, \
                f"the wheel leaves out data/{path.relative_to(ROOT / 'data')}"


def test_installed_wheel_loads_a_checkpoint_and_the_worked_example(wheel, tmp_path):
    site = tmp_path / "site-packages"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import course_utils, course_utils.paths as p\n"
        "from course_utils import load_checkpoint\n"
        "from course_utils.tasks.worked_example import load_worked_example\n"
        "assert p.DATA_DIR == p.PACKAGE_DIR / 'data', p.DATA_DIR\n"
        "model = load_checkpoint('induction')[0]\n"
        "example = load_worked_example()\n"
        "print(course_utils.__file__, type(model).__name__, len(example.heads))\n"
    )
    env = {"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    location, model, heads = result.stdout.split()
    assert Path(location).is_relative_to(site), f"imported the checkout, not the wheel: {location}"
    assert model == "TinyTransformer" and int(heads) >= 1


# -- course.py installs with uv from the sources pip is configured with ------------------


def test_uv_installs_from_where_pip_would():
    listing = "\n".join([
        ":env:.cert='/etc/ssl/certs/ca.crt'",
        ":env:.find-links='/opt/wheels'",
        "global.find-links='/elsewhere'",  # the environment wins, as in pip
        "global.extra-index-url='file:///opt/pypi/simple https://mirror.example/simple'",
        "global.index-url='https://index.example/simple'",
        "install.no-index='false'",
        "global.timeout='60'",  # not a package source: left out
    ])
    course = load_course()
    args, env = course.pip_sources_for_uv(listing)
    assert args == ["--index-url", "https://index.example/simple",
                    "--extra-index-url", "file:///opt/pypi/simple",
                    "--extra-index-url", "https://mirror.example/simple",
                    "--find-links", "/opt/wheels"]
    assert env == {"SSL_CERT_FILE": "/etc/ssl/certs/ca.crt"}
    assert course.pip_sources_for_uv("install.no-index='true'\n") == (["--no-index"], {})
    assert course.pip_sources_for_uv("") == ([], {})


def test_uv_is_pinned_and_a_failed_uv_install_falls_back_to_pip(monkeypatch, tmp_path):
    assert re.search(r"^uv==[\d.]+ ", (ROOT / "constraints.txt").read_text(), re.MULTILINE)
    course = load_course()
    monkeypatch.setattr(course, "VENV", tmp_path)
    monkeypatch.setattr(course, "STAMP", tmp_path / "stamp")
    monkeypatch.setattr(course, "_venv_is_usable", lambda: True)
    ran = []

    def pip_config(cmd, **kwargs):
        assert cmd[:4] == [str(course._bin("python")), "-m", "pip", "config"], cmd
        return type("Out", (), {"returncode": 0, "stdout": ""})()

    def in_group(cmd, check=True, **kwargs):  # the installers run in a process group of their own
        ran.append(cmd)
        return 1 if "uv" in Path(cmd[0]).name else 0  # uv itself fails

    monkeypatch.setattr(course.subprocess, "run", pip_config)
    monkeypatch.setattr(course.cli, "run_in_group", in_group)
    course.ensure_environment()
    get_uv, uv_install, pip_install = ran[-3:]
    assert get_uv[-1] == "uv" and "--only-binary" in get_uv  # a wheel or nothing: never a Rust build
    assert uv_install[1:3] == ["pip", "install"] and "unsafe-best-match" in uv_install
    assert "--compile-bytecode" in uv_install  # pip compiles .pyc files at install; uv only if asked
    assert pip_install[1:4] == ["-m", "pip", "install"] and "uv" not in pip_install
    assert (tmp_path / "stamp").read_text() == course._fingerprint()

    (tmp_path / "stamp").unlink()  # COURSE_INSTALLER=pip: pip alone, uv never fetched
    monkeypatch.setenv("COURSE_INSTALLER", "pip")
    ran.clear()
    course.ensure_environment()
    assert len(ran) == 1 and ran[0][1:4] == ["-m", "pip", "install"] and "uv" not in ran[0]


# -- course.py test: one worker per core, torch threads shared out, nothing oversubscribed --
def test_workers_get_their_share_of_the_cores_as_torch_threads():
    spread = load_course().spread_over_cores
    quick = ["-m", "not slow"]
    assert spread(quick, 2, {}) == (["-n", "2", "--dist", "loadfile", *quick], {"OMP_NUM_THREADS": "1"})
    assert spread(quick, 16, {"X": "y"}) == (["-n", "4", "--dist", "loadfile", *quick],
                                             {"OMP_NUM_THREADS": "4", "X": "y"})
    assert spread(quick, 6, {})[1] == {"OMP_NUM_THREADS": "1"}  # 4 workers: 6 // 4 threads each
    slow = ["-m", "slow", "--dist", "load"]  # .ci/run's second command keeps its --dist
    assert spread(slow, 2, {}) == (["-n", "2", *slow], {"OMP_NUM_THREADS": "1"})
    # the caller's choices win: their threads, their workers, or one core and no workers
    assert spread(quick, 2, {"OMP_NUM_THREADS": "2"})[1] == {"OMP_NUM_THREADS": "2"}
    assert spread(["-n", "1", *quick], 2, {}) == (["-n", "1", *quick], {})
    assert spread(["--numprocesses=3"], 8, {}) == (["--numprocesses=3"], {})
    assert spread(quick, 1, {}) == (quick, {})


def test_nbformat_imports_without_compiling_a_uri_grammar():
    """Every pytest worker, nbval and nbgrader process imports nbformat, and so jsonschema;
    jsonschema 4.25+ then imports rfc3987-syntax, which compiles a grammar with lark (2.3 s
    a process here). constraints.txt pins jsonschema below that; an environment installed
    without the constraints (``scripts/version_matrix.py newest``) is skipped, by name."""
    from importlib.metadata import version

    installed = version("jsonschema")
    if tuple(int(part) for part in installed.split(".")[:2]) >= (4, 25):
        pytest.skip(f"jsonschema {installed} is not constraints.txt's pin (below 4.25): this "
                    "environment was installed without the course's constraints")
    code = "import sys, nbformat; print(sorted({'lark', 'rfc3987_syntax'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"importing nbformat also imported {done.stdout.strip()}"


def test_every_relative_link_in_the_readme_and_docs_resolves():
    """A newcomer's first page: each relative link names a file or folder that exists."""
    link = re.compile(r"\]\(((?!https?://|#|mailto:)[^)\s]+)\)")
    for page in [ROOT / "README.md", ROOT / "INSTRUCTORS.md", ROOT / "CHANGELOG.md",
                 *sorted((ROOT / "docs").glob("*.md"))]:
        for target in link.findall(page.read_text()):
            path = (page.parent / target.split("#")[0]).resolve()
            assert path.exists(), f"{page.relative_to(ROOT)} links to {target}, which does not exist"


def test_the_readme_performance_table_states_the_documented_targets_and_no_figures():
    """README's performance table mirrors docs/benchmarks.md's targets row for row, and holds no
    dated figure of its own (figures live in docs/ and CHANGELOG.md with their date and machine)."""
    def first_table_after(text: str, heading: str) -> list[str]:
        lines = text.split(heading, 1)[1].splitlines()
        start = next(i for i, line in enumerate(lines) if line.startswith("|"))
        end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
        return lines[start:end]

    readme = first_table_after((ROOT / "README.md").read_text(), "## Performance\n")
    documented = first_table_after((ROOT / "docs" / "benchmarks.md").read_text(), "## Targets\n")
    assert readme == documented and len(readme) >= 6
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", "\n".join(readme))


def test_no_link_or_install_follows_a_branch():
    """Every GitHub link and git install in the lessons and the pages a learner opens names a tag
    or a commit, never a branch (master, main, HEAD, dev...): what it shows must not change
    under the lesson that cites it."""
    branch = re.compile(r"github\.com/[\w.-]+/[\w.-]+/(?:blob|tree|raw)/(master|main|HEAD|dev|develop)/"
                        r"|git\+https?://\S+?@(master|main|HEAD|dev|develop)\b")
    pages = [*sorted((ROOT / "notebooks").glob("*.ipynb")), *sorted((ROOT / "student").glob("*.ipynb")),
             ROOT / "README.md", ROOT / "INSTRUCTORS.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = [f"{page.relative_to(ROOT)}: {m.group(0)}" for page in pages
             for m in branch.finditer(page.read_text(encoding="utf-8"))]
    assert not found, found
