"""Battery 9's leftovers in the scripts, CLIs and interp helpers (issue 38): a write through a
link, hangs, silent commands and helpers that gave a wrong result or a raw error. Each is now
refused by name (what was expected, what arrived) before anything is written, or done right."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))

import exercise_answers  # noqa: E402
import nbgrader_tools  # noqa: E402


def _tree(folder: Path) -> dict[str, bytes | str]:
    """Every path under ``folder``: a file's bytes, a link's target, a folder's mark."""
    found = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        found[key] = (f"-> {path.readlink()}" if path.is_symlink() else
                      "<folder>" if path.is_dir() else path.read_bytes())
    return found


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A copy of the lessons, student copies and INSTRUCTORS.md that release works on."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for folder in ("notebooks", "student"):
        shutil.copytree(ROOT / folder, clone / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    shutil.copy(ROOT / "INSTRUCTORS.md", clone / "INSTRUCTORS.md")
    monkeypatch.setattr(nbgrader_tools, "ROOT", clone)
    monkeypatch.setattr(nbgrader_tools, "NOTEBOOKS", clone / "notebooks")
    monkeypatch.setattr(nbgrader_tools, "STUDENT", clone / "student")
    monkeypatch.setattr(nbgrader_tools, "INSTRUCTORS", clone / "INSTRUCTORS.md")
    return clone


# -- 1. data loss and crashes of release, table and build -----------------------------------------
@pytest.mark.slow
def test_release_replaces_a_student_link_and_never_writes_through_it(course, tmp_path, capsys):
    """A link at student/05 pointing outside the clone: release wrote the student notebook into
    the file outside. Now the link is replaced by the file, as publish and notebook_tools do."""
    student = sorted((course / "student").glob("05_*.ipynb"))[0]
    expected = student.read_bytes()
    outside = tmp_path / "outside.ipynb"
    outside.write_text("OUTSIDE\n")
    student.unlink()
    student.symlink_to(outside)
    assert nbgrader_tools.main(["release"]) == 0, capsys.readouterr().err
    assert outside.read_text() == "OUTSIDE\n"
    assert not student.is_symlink() and student.read_bytes() == expected
    assert f"wrote student/{student.name}" in capsys.readouterr().out


@pytest.mark.slow
def test_release_with_a_folder_for_a_student_notebook_names_it_and_writes_nothing(course, capsys):
    student = sorted((course / "student").glob("05_*.ipynb"))[0]
    student.unlink()
    student.mkdir()
    lesson = sorted((course / "notebooks").glob("01_*.ipynb"))[0]
    nb = nbformat.read(lesson, as_version=4)
    nb.cells.append(nbformat.v4.new_markdown_cell("an edit that release would write"))
    nbformat.write(nb, lesson)
    before = _tree(course)
    assert nbgrader_tools.main(["release"]) == 1
    err = capsys.readouterr().err
    assert str(student) in err and "is a folder" in err and "nothing was written" in err, err
    assert "Traceback" not in err and _tree(course) == before


def test_a_solution_region_with_no_end_is_named_by_file_cell_and_line():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# Lesson"),
                nbformat.v4.new_code_cell("def f(x):\n    ### BEGIN SOLUTION\n    return x\n")]
    with pytest.raises(nbgrader_tools.FormatError,
                       match=r"06_x\.ipynb: cell 2, line 2: ### BEGIN SOLUTION with no ### END SOLUTION"):
        nbgrader_tools.convert(nb, "06_x.ipynb")


def test_table_write_with_instructors_a_folder_is_refused_by_name(course, capsys):
    (course / "INSTRUCTORS.md").unlink()
    (course / "INSTRUCTORS.md").mkdir()
    assert nbgrader_tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert "INSTRUCTORS.md: is a folder, expected a file" in err and "nothing was written" in err, err


@pytest.mark.parametrize("drop", [0, 1])
def test_table_write_without_its_markers_names_the_missing_one(course, capsys, drop):
    """The markers gone, `table --write` said "INSTRUCTORS.md was current" and wrote nothing."""
    instructors = course / "INSTRUCTORS.md"
    marker = nbgrader_tools.TABLE_MARKERS[drop]
    instructors.write_text(instructors.read_text().replace(marker, ""))
    before = instructors.read_bytes()
    assert nbgrader_tools.main(["table", "--write"]) == 1
    err = capsys.readouterr().err
    assert f"lacks the marker line(s) {marker}" in err and "nothing was written" in err, err
    assert instructors.read_bytes() == before
    assert nbgrader_tools.main(["release"]) == 1  # refused before any lesson is written
    assert "lacks the marker" in capsys.readouterr().err


def test_exercise_answers_build_with_the_store_a_file_is_refused_before_building(tmp_path, monkeypatch,
                                                                                capsys):
    store = tmp_path / "answers"
    store.write_text("not a folder\n")
    monkeypatch.setattr(exercise_answers.answers, "ANSWERS_DIR", store)
    monkeypatch.setattr(exercise_answers, "_attached_solutions", lambda: None)
    monkeypatch.setattr(exercise_answers, "compute", lambda: pytest.fail("built before the check"))
    assert exercise_answers.main(["build"]) == 1
    err = capsys.readouterr().err
    assert f"{store} is a file, not a folder" in err and "no stored answer was written" in err, err
    assert store.read_text() == "not a folder\n"


@pytest.mark.parametrize("argv, said", [([], "no command given; expected 'build' or 'check'"),
                                        (["--bogus"], "unknown arguments: --bogus; expected")])
def test_exercise_answers_without_a_command_says_so(capsys, argv, said):
    """Issue 38 hunt: with no arguments it said "unknown arguments: (none)"."""
    assert exercise_answers.main(argv) == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].startswith(said), err


# -- 2. hangs: every count option has a ceiling when parsed ---------------------------------------
@pytest.mark.parametrize("option", ["--agreement-steps", "--induction-max-steps"])
def test_bench_train_steps_beyond_the_ceiling_are_refused_when_parsed(option, capsys, monkeypatch):
    """`bench train --agreement-steps 10**12` was accepted and trained until killed."""
    from course_utils.bench import train_speed
    from course_utils.bench.cli import main

    monkeypatch.setattr(train_speed, "bench_training", lambda *a, **k: pytest.fail("it trained"))
    with pytest.raises(SystemExit) as stop:
        main(["train", option, str(10**12), "--seeds", "0"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert option in err and "at most 100,000 steps" in err and "'1000000000000'" in err, err


def test_bench_memory_timeout_has_a_ceiling(capsys):
    from course_utils.bench.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["memory", "--timeout", str(10**30)])
    err = capsys.readouterr().err
    assert "--timeout" in err and "at most 604,800 seconds" in err, err
    assert build_parser().parse_args(["memory", "--timeout", "60"]).timeout == 60


def test_train_steps_beyond_the_ceiling_are_refused_before_training(capsys):
    from course_utils.model import train

    with pytest.raises(SystemExit) as stop:
        train.main(["induction", "--steps", str(10**30), "--no-progress"])
    assert stop.value.code == 2
    assert f"--steps must be an int in 1..{train.MAX_STEPS}, got {10**30}" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"steps must be an int in 1\.\.100000, got 100001"):
        train.TrainConfig(steps=100_001)


# -- 3. silent commands -------------------------------------------------------------------------
@pytest.mark.parametrize("ending", ["/", "\\"])
def test_train_out_with_a_trailing_slash_is_refused_by_name(tmp_path, capsys, ending):
    """`train --out /tmp/x/` (a new folder meant) wrote /tmp/x.safetensors and /tmp/x.json."""
    from course_utils.model import train
    from course_utils.model.checkpoint import checkpoint_paths

    out = f"{tmp_path / 'new'}{ending}"
    with pytest.raises(SystemExit) as stop:
        train.main(["induction", "--steps", "1", "--no-progress", "--out", out])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert f"--out {out!r} ends in a slash, so it names a folder" in err and "induction" in err, err
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ValueError, match="ends in a slash, so it names a folder"):
        checkpoint_paths(out)


@pytest.mark.parametrize("course_dir", ["", "  ", str(ROOT)])
def test_source_into_an_empty_name_or_the_clone_is_refused(course_dir, capsys, monkeypatch):
    """`nbgrader_tools source ''` wrote source/, the grader's salts and nbgrader_config.py into
    the current folder (the clone's root)."""
    monkeypatch.setattr(nbgrader_tools, "fill_course_source", lambda *a: pytest.fail("it wrote"))
    assert nbgrader_tools.main(["source", course_dir]) == 2
    err = capsys.readouterr().err
    assert "COURSE_DIR" in err and repr(course_dir) in err and "outside" in err, err
    assert "nothing was written" in err


def test_the_graders_secrets_are_ignored_by_git():
    lines = [line.strip() for line in (ROOT / ".gitignore").read_text().splitlines()]
    assert ".course_grader.json" in lines


def _publish_copy(tmp_path: Path) -> Path:
    from publish_copy import copy_for_publish

    copy = tmp_path / "published"
    copy.mkdir()
    return copy_for_publish(copy)


def test_publish_with_nothing_changed_writes_nothing(tmp_path, capsys):
    """`course.py publish` with the config unchanged rewrote all 8 lessons (the set-up cell's
    execution_count 1 -> null) while `publish --check` said everything agreed."""
    import publish

    copy = _publish_copy(tmp_path)
    executed = [p for p in sorted((copy / "notebooks").glob("*.ipynb"))
                if any(publish._tagged(c, publish.SETUP_TAG) and c.execution_count
                       for c in nbformat.read(p, as_version=4).cells)]
    assert executed, "no lesson stores an executed set-up cell: this test checks nothing"
    assert publish.main(["--check"], root=copy) == 0
    before = _tree(copy)
    assert publish.main([], root=copy) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert _tree(copy) == before


def test_publish_to_a_new_tag_clears_the_old_setup_run(tmp_path):
    """The set-up cell's source changes with the tag: the old count and outputs belong to the
    old code, so they go."""
    import publish

    copy = _publish_copy(tmp_path)
    assert publish.main(["--repo", "someone/elsewhere", "--tag", "v9.9.9"], root=copy) == 0
    for path in sorted((copy / "notebooks").glob("*.ipynb")):
        setup = [c for c in nbformat.read(path, as_version=4).cells if publish._tagged(c, publish.SETUP_TAG)]
        assert setup and all(c.execution_count is None and c.outputs == [] for c in setup), path.name
        assert all("v9.9.9" in c.source or "someone/elsewhere" in c.source for c in setup), setup[0].source


# -- 4. interp helpers: silent results, sizes beyond memory, raw errors ---------------------------
def _interp_cases():
    import math

    import torch

    from course_utils.interp import ablation as A
    from course_utils.interp import circuits as C
    from course_utils.interp import heatmaps as H
    from course_utils.interp import patching as P
    from course_utils.interp import scores as S
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    config = ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(0, 10, (2, 6))
    targets = torch.randint(0, 10, (2, 6))
    evaluation = A.loss_evaluation(tokens, targets)
    weights = torch.softmax(torch.randn(2, 2, 5, 5), -1)
    grid = [torch.softmax(torch.randn(1, 2, 6, 6), -1)]
    two_heads = [(0, 0), (0, 1)]
    inf_diagonal = torch.where(torch.eye(4, dtype=torch.bool), math.inf, 0.0)
    return [  # (id, call, error, words: the argument, what was expected, what arrived)
        ("mean_by_group decimals 400",
         lambda: S.mean_by_group({"a": [1.0, 2.0]}, {"g": ["x", "y"]}, decimals=400),
         ValueError, ["decimals", "0..15", "400"]),
        ("head_score_table decimals 400",
         lambda: S.head_score_table({"induction": torch.rand(2, 2)}, decimals=400),
         ValueError, ["decimals", "0..15", "400"]),
        ("mean_by_group NaN label",
         lambda: S.mean_by_group({"a": [1.0, 2.0, 3.0]}, {"g": ["x", math.nan, None]}),
         ValueError, ["groups['g']", "label", "NaN or None", "[1, 2]"]),
        ("mean_by_group str values", lambda: S.mean_by_group({"a": "ab"}, {"g": ["x", "y"]}),
         TypeError, ["values['a']", "numbers, one per sequence", "str 'ab'"]),
        ("agreement_score empty positions", lambda: S.agreement_score(weights, [], []),
         ValueError, ["query_positions", "one position per sequence", "expected 2", "got none"]),
        ("induction_positions huge", lambda: S.induction_positions(10**12, 2, start=0),
         ValueError, ["seq_len", "GiB", "memory"]),
        ("induction_key_mask huge", lambda: S.induction_key_mask(10**12, 2, start=0),
         ValueError, ["seq_len", "GiB", "1,000,000,000,000"]),
        ("ideal_pattern huge", lambda: S.ideal_pattern("previous token", 10**6),
         ValueError, ["seq_len", "GiB", "1,000,000"]),
        ("chance_level huge", lambda: S.chance_level("previous token", 10**15),
         ValueError, ["seq_len", "GiB"]),
        ("chance_level start -1", lambda: S.chance_level("first token", 8, start=-1),
         ValueError, ["start", ">= 0", "-1"]),
        ("pruning_curve repeated count", lambda: A.pruning_curve(model, evaluation, two_heads, counts=[1, 1]),
         ValueError, ["counts", "distinct", "repeats [1]"]),
        ("pruning_curve no count", lambda: A.pruning_curve(model, evaluation, two_heads, counts=[]),
         ValueError, ["counts", "at least one", "[]"]),
        ("prunable_counts repeated head", lambda: P.prunable_counts(model, evaluation, [[(0, 0), (0, 0)]],
                                                                    lambda numbers: True),
         ValueError, ["orders[0]", "lists a head twice", "L0H0 (0, 0)"]),
        ("losses_along_orders repeated head", lambda: P.losses_along_orders(model, tokens, targets,
                                                                            [[(0, 1)], [(1, 0), (1, 0)]], 1),
         ValueError, ["orders[1]", "lists a head twice", "L1H0 (1, 0)"]),
        ("frozen_final_norm inf stream", lambda: C.frozen_final_norm(model, torch.full((2, 8), math.inf),
                                                                     torch.ones(2, 8)),
         ValueError, ["stream", "finite", "inf at index (0, 0)"]),
        ("plot_head inf weight", lambda: H.plot_head(inf_diagonal, list("abcd")),
         ValueError, ["weights", "[0, 1]", "inf at (query, key) (0, 0)"]),
        ("plot_all_heads huge panel", lambda: H.plot_all_heads(grid, list("abcdef"), panel_size=10**6),
         ValueError, ["panel_size", "pixels", "65,536"]),
        ("resampled_rows bool lengths", lambda: P.resampled_rows(torch.tensor([True]), torch.tensor([1]),
                                                                 generator=torch.Generator()),
         ValueError, ["lengths", "integer tensor", "torch.bool"]),
        ("resampled_outputs huge seq_len", lambda: P.resampled_outputs(
            model, torch.tensor([6]), tokens, torch.tensor([6, 6]), 10**9, generator=torch.Generator()),
         ValueError, ["seq_len", "GiB", "1,000,000,000"]),
        ("mean_head_outputs keep on meta", lambda: A.mean_head_outputs(
            model, tokens, keep=torch.ones(2, 6, dtype=torch.bool, device="meta")),
         ValueError, ["keep", "meta device", "(2, 6)"]),
        ("direct_logit_attribution edit_heads 3", lambda: P.direct_logit_attribution(
            model, tokens, torch.tensor([1, 2]), torch.ones(10), edit_heads=3),
         TypeError, ["edit_heads", "a function (layer, heads)", "int 3"]),
        ("resampled_one_at_a_time positions 99", lambda: P.resampled_one_at_a_time(
            model, tokens, A.head_outputs(model, tokens), torch.zeros(1, 2, dtype=torch.long), [(0, 0)],
            positions=torch.tensor([99, 0])),
         ValueError, ["positions", "0..5", "99"]),
    ]


INTERP = _interp_cases()


@pytest.mark.parametrize("call, error, words", [c[1:] for c in INTERP], ids=[c[0] for c in INTERP])
def test_an_interp_helper_refuses_by_name(call, error, words):
    import matplotlib

    matplotlib.use("Agg")
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


def test_the_bounded_interp_helpers_still_take_what_they_should():
    import math

    import torch

    from course_utils.interp import scores as S

    table = S.mean_by_group({"a": [1.0, 2.0, 4.0]}, {"g": ["x", "y", "y"]}, decimals=15)
    assert table.loc["y", "a"] == 3.0 and table.loc["y", "sentences"] == 2
    assert S.mean_by_group({"a": [1.0, 2.0]}, {"g": (g for g in (0, 0))}).loc[0, "a"] == 1.5  # any iterable
    assert 0 < S.chance_level("first token", 8, start=0) < 1
    queries, keys = S.induction_positions(9, 3, start=1)
    assert queries.tolist() == [4, 5, 6, 7, 8] and keys.tolist() == [2, 3, 4, 5, 6]
    table = S.head_score_table({"induction": torch.rand(2, 2)}, decimals=15)
    assert not math.isnan(table["top score"].iloc[0])


def test_a_solution_marker_after_code_with_no_end_is_named_too():
    """A BEGIN that is not at the start of its line passes the line check, and met max() of an
    empty sequence when the check call was split off."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("def f(x):\n    y = x  ### BEGIN SOLUTION\n    return y\n")]
    with pytest.raises(nbgrader_tools.FormatError, match=r"06_x\.ipynb, cell 0: unmatched solution markers"):
        nbgrader_tools.convert(nb, "06_x.ipynb")
