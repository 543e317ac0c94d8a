"""The benchmark command line refuses what it cannot run when it parses it, naming the option."""

from __future__ import annotations

import os

import pytest

from course_utils.bench import cli


def _refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as stop:
        cli.main(argv)
    assert stop.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, words", [
    (["gqa", "--shapes", "1x99999999999"], ["--shapes", "CONTEXT in 1..65536", "1x99999999999"]),
    (["gqa", "--shapes", "5000x8"], ["--shapes", "BATCH in 1..1024"]),
    (["gqa", "--context", "1000000"], ["--context", "at most 65536 tokens"]),
    ([], ["choose a subcommand", "gqa", "memory", "test-memory"]),
    (["--bogus"], ["choose a subcommand", "gqa", "got '--bogus'"]),  # was "required: which"
    (["--repeats", "1", "mha"], ["choose a subcommand", "got '--repeats'"]),
    (["mah"], ["choose a subcommand", "mha", "got 'mah'"]),
])
def test_options_out_of_range_are_refused_when_parsed(capsys, argv, words):
    err = _refusal(capsys, argv)
    assert all(w in err for w in words), err


@pytest.mark.parametrize("extra", [[], ["--full"]])
def test_gqa_context_too_short_for_its_default_shapes_is_refused_when_parsed(capsys, monkeypatch, extra):
    """`gqa --context 1`: the default whole-step shapes made from it are 1x1 twice; the run ended,
    after the decode benchmark, in a traceback about a --shapes never given. Refused when parsed,
    naming --context, before anything runs."""
    from course_utils.bench import gqa_speed

    monkeypatch.setattr(gqa_speed, "bench_decode", lambda **kwargs: pytest.fail("a benchmark ran"))
    err = _refusal(capsys, ["gqa", "--context", "1", *extra])
    assert "--context 1" in err and "1x1 more than once" in err and "--context 2 or more" in err, err
    assert err.strip().splitlines()[-1].startswith("python -m course_utils.bench: error: --context 1 "), err


@pytest.mark.parametrize(("argv", "named"), [
    (["memory", "{long}.ipynb"], "argument notebooks: the notebook must name"),
    (["test-memory", "{long}.json"], "argument report: the report must name"),
], ids=["memory", "test-memory"])
def test_bench_names_a_path_with_a_name_too_long(capsys, tmp_path, argv, named):
    """QA battery 33: a 300-character file name gave a raw "File name too long" traceback (or an
    "unreadable" path); refused when parsed by cli.path_problem's rule, naming the argument."""
    err = _refusal(capsys, [a.format(long=tmp_path / ("n" * 300)) for a in argv])
    last = err.strip().splitlines()[-1]
    assert named in last and "255 bytes" in last and "File name too long" in last, err


def test_train_names_an_out_with_a_name_too_long(capsys, tmp_path):
    from course_utils.model import train

    with pytest.raises(SystemExit) as stop:
        train.main(["induction", "--steps", "2", "--out", str(tmp_path / ("n" * 300))])
    assert stop.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--out must name a checkpoint path stem" in last and "File name too long" in last, last
    assert os.listdir(tmp_path) == []


def test_an_empty_notebook_is_refused_by_name(capsys, tmp_path):
    (tmp_path / "empty.ipynb").write_text("")
    err = _refusal(capsys, ["memory", str(tmp_path / "empty.ipynb")])
    assert "empty.ipynb" in err and "not a notebook" in err and "empty" in err


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_test_memory_report_that_is_a_folder_or_fifo_says_which(capsys, tmp_path):
    from course_utils.bench import memory

    with pytest.raises(ValueError, match="is a directory"):
        memory.read_test_report(tmp_path)
    os.mkfifo(tmp_path / "fifo.json")
    with pytest.raises(ValueError, match=r"fifo\.json is a FIFO"):
        memory.read_test_report(tmp_path / "fifo.json")


@pytest.mark.parametrize("second", ["a.ipynb", "./a.ipynb", "sub/../a.ipynb"])
def test_memory_refuses_a_notebook_named_twice_before_running_any(capsys, tmp_path, monkeypatch, second):
    """Issue 38: `bench memory a a` ran the same notebook twice. Refused when parsed, naming the
    repeat (also when spelt another way), with nothing run or written."""
    import nbformat

    from course_utils.bench import memory

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1")]), "a.ipynb")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    monkeypatch.setattr(memory, "notebook_peak_memory", lambda *a, **k: pytest.fail("a notebook ran"))
    err = _refusal(capsys, ["memory", "a.ipynb", second])
    assert "notebooks" in err and f"got {second} more than once" in err, err
    assert sorted(p.name for p in tmp_path.rglob("*")) == before
