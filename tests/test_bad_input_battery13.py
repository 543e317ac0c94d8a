"""Battery 13's findings (issue 38) and fix38e's leftovers: each bad call now raises with the
argument's (or field's) name, what was expected and what arrived, or does what its docstring
says; the valid call beside it still works."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named, load_course

from course_utils.bench import train_speed as TS
from course_utils.model import train as TRN

# -- the training loop checks progress before it trains (bench_training(progress=1) ran on) ----
TRAIN_CASES = [
    Case("bench_training/progress int", lambda: TS.bench_training(progress=1), TypeError,
         ["progress", "True or False", "int 1"]),
    Case("train_induction/progress str", lambda: TRN.train_induction(steps=1, progress="no"), TypeError,
         ["progress", "True or False", "str 'no'"]),
]


@pytest.mark.parametrize("case", TRAIN_CASES, ids=lambda c: c.name)
def test_training_refuses_a_progress_that_is_no_bool(case):
    assert_named(case)


# -- fix38e left 1: an interrupted notebook run stops the tool (bench memory exited 0) ---------
class _ClientStoppedBySignal:
    """nbclient without a kernel: it sets the loop's SIGINT/SIGTERM handlers (they shut its kernel
    down), a signal arrives while a cell runs, and the dead kernel then fails the run with an
    AssertionError, as the real one does."""

    def __init__(self, nb, **kwargs) -> None:
        self.nb = nb

    async def async_execute(self, **kwargs):
        import asyncio
        import os
        import signal

        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stopped.set)
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), 5)
        raise AssertionError  # what the shut kernel gives


def _notebook(tmp_path):
    import nbformat

    path = tmp_path / "01_lesson.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")]), path)
    return path


@pytest.mark.skipif(__import__("os").name == "nt", reason="POSIX signals")
def test_bench_memory_interrupted_stops_with_one_line(tmp_path, monkeypatch, capsys):
    import signal

    import nbclient

    from course_utils import cli
    from course_utils.bench import cli as bench_cli

    monkeypatch.setattr(nbclient, "NotebookClient", _ClientStoppedBySignal)
    handler = signal.getsignal(signal.SIGTERM)
    code = cli.run(bench_cli.main, ["memory", str(_notebook(tmp_path))], "python -m course_utils.bench")
    err = capsys.readouterr().err
    assert code == 143, err
    assert err.strip().splitlines() == ["python -m course_utils.bench: interrupted by SIGTERM: the kernel "
                                        "running 01_lesson.ipynb was shut down; nothing was written"], err
    assert signal.getsignal(signal.SIGTERM) is handler


@pytest.mark.skipif(__import__("os").name == "nt", reason="POSIX signals")
def test_notebook_peak_memory_raises_interrupted_not_a_row(tmp_path, monkeypatch):
    import signal

    import nbclient

    from course_utils import cli
    from course_utils.bench import memory

    monkeypatch.setattr(nbclient, "NotebookClient", _ClientStoppedBySignal)
    previous = signal.signal(signal.SIGTERM, lambda *a: pytest.fail("the loop's handler did not run"))
    try:
        with pytest.raises(cli.Interrupted, match="SIGTERM: the kernel running 01_lesson.ipynb"):
            memory.notebook_peak_memory(_notebook(tmp_path))
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- fix38e left 4: an unknown option typed alone is named, not hidden by "required: ..." ------
def _tool_main(name):
    import sys
    from pathlib import Path

    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    return __import__(name).main


@pytest.mark.parametrize("tool, argv", [
    ("train", ["--bogus"]),
    ("train", ["--seed", "1", "--bogus"]),
    ("safe_collect", ["--bogus"]),
    ("version_matrix", ["--bogus"]),
])
def test_an_unknown_option_is_named_before_missing_arguments(tool, argv, capsys):
    main = TRN.main if tool == "train" else _tool_main(tool)
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "unrecognized arguments: --bogus" in err, err
    assert "required" not in err, err


@pytest.mark.parametrize("tool", ["train", "safe_collect", "version_matrix"])
def test_missing_arguments_are_still_named(tool, capsys):
    main = TRN.main if tool == "train" else _tool_main(tool)
    with pytest.raises(SystemExit):
        main([])
    err = capsys.readouterr().err
    assert "the following arguments are required" in err and "unrecognized" not in err, err


# -- fix38e left 5: check_record says "or None" for optional fields and spells out unions -------
def _optional_record():
    from course_utils.attention.validation import check_record

    @dataclasses.dataclass
    class Optional13:
        count: int | None
        items: list[torch.Tensor | np.ndarray | None]
        mode: typing.Literal["a", "b"] | None = None

        def __post_init__(self) -> None:
            check_record(self)
    return Optional13


@pytest.mark.parametrize("fields, error, words", [
    ({"count": -3}, ValueError, ["Optional13.count must be an int >= 0 or None, got -3"]),
    ({"count": "3"}, TypeError, ["Optional13.count must be an int or None, got str '3'"]),
    ({"mode": "c"}, ValueError, ["Optional13.mode must be one of 'a', 'b' or None, got str 'c'"]),
    ({"items": 3}, TypeError, ["Optional13.items must be a list of (Tensor or ndarray or None), got int"]),
    ({"items": [3]}, TypeError, ["Optional13.items[0] must be a Tensor or a ndarray or None, got int 3"]),
], ids=["int range", "int type", "literal", "list of union", "item"])
def test_check_record_names_optional_fields_and_unions_in_words(fields, error, words):
    record = _optional_record()
    assert_named(Case("record", lambda: record(**{"count": 1, "items": [], **fields}), error, words))
    assert record(None, [None]).count is None  # None is what the words say it is: allowed


# -- b13 silent: role scores and the arguments a role ignores ----------------------------------
def _scores_cases():
    from course_utils.interp import scores as S

    return [
        Case("verdict above 1", lambda: S.verdict(3.0), ValueError, ["score", "[0, 1]", "3.0"]),
        Case("verdict negative", lambda: S.verdict(-0.5), ValueError, ["score", "[0, 1]", "-0.5"]),
        Case("ideal_pattern period str", lambda: S.ideal_pattern("self", 4, period="4"), TypeError,
             ["period", "int", "str '4'"]),
        Case("ideal_pattern start float", lambda: S.ideal_pattern("first token", 4, start=1.5), TypeError,
             ["start", "int", "float 1.5"]),
        Case("chance_level period float", lambda: S.chance_level("previous token", 8, period=2.0),
             TypeError, ["period", "int", "float 2.0"]),
    ]


@pytest.mark.parametrize("case", _scores_cases(), ids=lambda c: c.name)
def test_scores_refuse_what_they_would_have_ignored(case):
    assert_named(case)


def test_scores_controls():
    from course_utils.interp import scores as S

    assert S.verdict(1.0) == "present" and S.verdict(0.0) == "absent"
    assert S.ideal_pattern("induction", 6, period=3).shape == (6, 6)
    assert 0.0 < S.chance_level("previous token", 8, period=None) < 1.0


# -- b13 silent: cli.leaving took None, an int or bytes (printed later, as the signal came) ------
@pytest.mark.parametrize("text, error", [(None, TypeError), (3, TypeError), (b"x", TypeError),
                                         ("", ValueError), ("  ", ValueError)], ids=repr)
def test_leaving_refuses_what_is_no_text(text, error):
    from course_utils import cli

    assert_named(Case("leaving", lambda: cli.leaving(text), error, ["text", "non-empty str", repr(text)]))
    cli.leaving(cli.NOTHING_WRITTEN)  # the control


# -- b13 silent: a negative salt (write_secrets makes them in 1..2**31 - 1) was used as given -----
def test_a_negative_salt_is_refused():
    from course_utils.exercises import autograde as AG

    exercise = AG.exercise_of("lesson02", "check_softmax_rows")
    for call in (lambda: AG.cases_of(exercise, -3), lambda: AG.unseen_cases(exercise, -3)):
        assert_named(Case("salt", call, ValueError, ["salt", "int >= 0", "-3"]))
    assert AG.unseen_cases(exercise, 3)  # the control


# -- b13 silent: RecordRefusedCall(names) took None, a str, an int, unknown and repeated names ---
@pytest.mark.parametrize("names, error, words", [
    (None, TypeError, ["names", "tuple", "NoneType"]),
    ("cat", TypeError, ["names", "tuple", "str 'cat'"]),
    (3, TypeError, ["names", "tuple", "int 3"]),
    (("nope",), ValueError, ["names", "no function 'nope'"]),
    (("cat", "cat"), ValueError, ["names", "distinct", "['cat']"]),
], ids=["none", "str", "int", "unknown", "repeated"])
def test_record_refused_call_checks_its_names(names, error, words):
    from course_utils.exercises.raising import RecordRefusedCall

    assert_named(Case("names", lambda: RecordRefusedCall(names), error, words))
    with RecordRefusedCall(("cat",)) as recorder:  # the control
        with pytest.raises(TypeError):
            torch.cat(1, 2)
    assert recorder.refused[0] == "cat"


# -- b13 precision_notes('cuda:9') -> note: documented (the device is only parsed); 'meta' is
# refused since battery 17 (tests/test_bad_input_battery17_fix47p.py) ----------------------------
def test_precision_notes_only_parses_the_device(monkeypatch):
    from course_utils.attention import sdpa_backends as SB

    assert "only parsed" in SB.precision_notes.__doc__
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert SB.precision_notes("cuda:9", torch.float32)  # any CUDA device gets the note, GPU or none
    assert SB.precision_notes("cpu", torch.float32) == []


# -- b13 obscure: MLP.forward and Block.forward had no input check (raw torch errors) ------------
def _stream_layers():
    from course_utils.model.transformer import MLP, Block, ModelConfig

    return {"MLP": MLP(8, 16), "Block": Block(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2,
                                                          mlp=True))}


@pytest.mark.parametrize("layer", ["MLP", "Block"])
@pytest.mark.parametrize("x, error, words", [
    ([1.0], TypeError, ["x must be a torch.Tensor", "list"]),
    (np.zeros((1, 2, 8)), TypeError, ["x must be a torch.Tensor", "ndarray"]),
    (torch.zeros(1, 2, 8, dtype=torch.long), TypeError, ["x must hold floating-point", "torch.int64"]),
    (torch.zeros(1, 2, 8, dtype=torch.float16), TypeError, ["x has dtype torch.float16", "torch.float32"]),
    (torch.zeros(1, 2, 8, device="meta"), ValueError, ["x is on device meta", "cpu"]),
    (torch.zeros(2, 8), ValueError, ["x must be 3-D", "d_model=8", "(2, 8)"]),
    (torch.zeros(1, 2, 5), ValueError, ["x last dim must be d_model=8", "(1, 2, 5)"]),
], ids=["list", "numpy", "int64", "float16", "meta", "2-D", "width"])
def test_stream_layers_check_their_input(layer, x, error, words):
    module = _stream_layers()[layer]
    assert_named(Case(layer, lambda: module(x), error, words))
    out = module(torch.zeros(1, 2, 8))  # the control
    assert (out if layer == "MLP" else out[0]).shape == (1, 2, 8)


# -- b13: StageRow(seconds=0).gb_per_s raised ZeroDivisionError; seconds=-1 gave -1e-06 GB/s ------
@pytest.mark.parametrize("seconds, error, words", [
    (0.0, ValueError, ["StageRow.seconds", "> 0", "0.0"]),
    (-1.0, ValueError, ["StageRow.seconds", "> 0", "-1.0"]),
    ("1", TypeError, ["StageRow.seconds", "real number", "str '1'"]),
], ids=["zero", "negative", "str"])
def test_stage_row_needs_a_time_above_zero(seconds, error, words):
    from course_utils.bench import gqa_speed as GS

    assert_named(Case("StageRow", lambda: GS.StageRow("read K and V", 4, seconds, 1000), error, words))
    assert GS.StageRow("read K and V", 4, 1e-6, 1000).gb_per_s == pytest.approx(1.0)  # the control


# -- b13: Raised(kind='') was kept (it would never match a raise); Timing without samples ---------
@pytest.mark.parametrize("kind", ["", "Value Error", "3"], ids=repr)
def test_raised_kind_must_name_an_exception_class(kind):
    from course_utils.exercises.answers import Raised

    assert_named(Case("Raised", lambda: Raised(kind, "m"), ValueError, ["Raised.kind", "exception class",
                                                                         repr(kind)]))
    assert Raised("MyOwnError", "").kind == "MyOwnError"  # an answer may raise its own class


def test_timing_without_samples_documents_its_best():
    from course_utils.bench.timing import Timing

    assert "median" in Timing.best_s.__doc__
    assert Timing("x", 2.0, 1.0).best_s == 2.0 and Timing("x", 2.0, 1.0, [3.0, 1.5, 2.0]).best_s == 1.5


# -- b13: forward_callables took an x of another dtype than the modules (refused only when called) --
def test_forward_callables_refuse_an_x_the_modules_cannot_take():
    from course_utils.bench import mha_speed as MS

    modules = {"torch": torch.nn.MultiheadAttention(8, 2, batch_first=True)}
    x16 = torch.zeros(1, 3, 8, dtype=torch.float16)
    assert_named(Case("dtype", lambda: MS.forward_callables(modules, x16), TypeError,
                      ["x (for modules['torch'])", "torch.float16", "torch.float32"]))
    assert MS.forward_callables(modules, torch.zeros(1, 3, 8))["torch"]().shape == (1, 3, 8)  # control


# -- b13: grading_preview(cells, 123, key) -> [] (no problem) for a name no answer can have --------
@pytest.mark.parametrize("name", [123, None, "", "not a name"], ids=repr)
def test_grading_preview_names_a_bad_name(name):
    from course_utils.exercises import sandbox as SB

    cells = ["def f(x):\n    return x\n"]
    problems = SB.grading_preview(cells, name, "lesson02.check_softmax_rows")
    assert len(problems) == 1 and "name" in problems[0] and repr(name)[:20] in problems[0], problems
    assert SB.grading_preview(cells, "f", "lesson02.check_softmax_rows") == []  # the control


# -- b13: grade_answer(salt=3, solutions_dir=None) graded without the unseen cases, without a word --
@pytest.mark.parametrize("salt, given, lacking", [(3, "salt=3", "solutions_dir=None"),
                                                  (None, "solutions_dir=", "salt=None")], ids=["salt", "dir"])
def test_grade_answer_wants_salt_and_solutions_dir_together(salt, given, lacking, tmp_path):
    from course_utils.exercises import autograde as AG

    folder = None if salt is not None else str(tmp_path)
    call = lambda: AG.grade_answer("lesson02", "check_softmax_rows", "def f(s):\n    return s\n", "f",  # noqa: E731
                                   salt=salt, solutions_dir=folder)
    assert_named(Case("pair", call, ValueError, ["salt and solutions_dir go together", given, lacking]))


# -- b13: `course.py student-tree notebooks/out` wrote 92 files inside the clone ------------------
def test_student_tree_inside_the_repository_is_refused():
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    sys.path.insert(0, str(root / "scripts"))
    try:
        import student_tree
    finally:
        sys.path.remove(str(root / "scripts"))
    target = root / "notebooks" / "out_by_test13"
    with pytest.raises(ValueError, match="inside this repository") as info:
        student_tree.build(target)
    assert "notebooks/out_by_test13/" in str(info.value) and not target.exists()


# -- b13: `course.py test 'a\x01b'` (a bare word, no such path) ran the whole collection ------------


def test_course_test_refuses_a_bare_word_that_is_no_path(capsys):
    course = load_course()
    assert course.missing_test_paths(["a\x01b"]) == ["a\x01b"]
    assert course.missing_test_paths(["tests", "--maxfail", "3", "-p", "no:cacheprovider"]) == []  # control
    assert course._main(["test", "a\x01b"]) == 2
    err = capsys.readouterr().err
    assert "no such test file or folder: 'a\\x01b'" in err and "nothing was run" in err, err


# -- b13: `notebook_tools build` of a draft whose markdown cell holds a bare line overwrote the lesson --
def test_build_refuses_a_markdown_line_that_is_no_comment(tmp_path, capsys):
    notebook_tools = _tool_main("notebook_tools").__globals__  # the script's module namespace
    draft, out = tmp_path / "draft.py", tmp_path / "out.ipynb"
    out.write_text("kept")
    draft.write_text("# %% [markdown]\n# # Title\nnot a comment\n# %%\nx = 1\n")
    assert notebook_tools["main"](["build", str(draft), str(out)]) == 2
    err = capsys.readouterr().err
    assert "line 3" in err and "'not a comment'" in err and "does not start with '# '" in err, err
    assert out.read_text() == "kept"
    draft.write_text("# %% [markdown]\n# # Title\n#\n\n# %%\nx = 1\n")  # the control
    assert notebook_tools["main"](["build", str(draft), str(out)]) == 0
    assert '"x = 1"' in out.read_text()


# -- b13 obscure: messages named another argument than the one given -----------------------------
def _wrong_name_cases():
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.attention.shapes import measured_macs
    from course_utils.env import pick_device
    from course_utils.exercises import sandbox as SBX
    from course_utils.exercises import your_attention as YA

    return [
        Case("pick_device prefer", lambda: pick_device("tpu"), ValueError, ["prefer must be", "'tpu'"]),
        Case("pick_device prefer int", lambda: pick_device(3), TypeError, ["prefer must be", "int"]),
        Case("train device", lambda: TRN.train_induction(steps=1, device="tpu"), ValueError,
             ["device must be", "'tpu'"]),
        Case("measured_macs x", lambda: measured_macs(MultiHeadAttention(8, 2), [1.0]), TypeError,
             ["x must be a torch.Tensor", "list"]),
        Case("hidden_paths extra", lambda: SBX.hidden_paths(3), TypeError, ["extra: expected a list", "int"]),
        Case("hidden_paths extra path", lambda: SBX.hidden_paths(Path("/tmp")), TypeError,
             ["extra: expected a list", "PosixPath"]),
        Case("run_with_your_attention checkpoint", lambda: YA.run_with_your_attention(lambda *a: None, 3),
             TypeError, ["checkpoint must be a str or Path", "int"]),
    ]


@pytest.mark.parametrize("case", _wrong_name_cases(), ids=lambda c: c.name)
def test_messages_name_the_argument_given(case):
    assert_named(case)


# -- b13 obscure: raw Python errors from validators given the wrong kind -------------------------
def _raw_error_cases():
    from course_utils.attention import validation as V
    from course_utils.bench import gqa_speed as GS

    return [
        Case("check_attention_fits batch str", lambda: V.check_attention_fits("3", 4, 8, 2), TypeError,
             ["batch must be an int", "str '3'"]),
        Case("check_attention_fits num_heads str", lambda: V.check_attention_fits(3, 4, 8, "2"), TypeError,
             ["num_heads must be an int", "str '2'"]),
        Case("stage_times groups None", lambda: GS.stage_times(None), TypeError,
             ["groups must be a list of ints", "NoneType"]),
        Case("stage_bandwidth groups None", lambda: GS.stage_bandwidth(None), TypeError,
             ["groups must be a list of ints", "NoneType"]),
        Case("make_kv_caches groups float", lambda: GS.make_kv_caches(4, 2, 8, 1, [4, 2.0]), TypeError,
             ["groups[1] must be an int", "float 2.0"]),
    ]


@pytest.mark.parametrize("case", _raw_error_cases(), ids=lambda c: c.name)
def test_validators_name_a_wrong_kind(case):
    assert_named(case)


# -- b13 obscure: cli.run/cli.call and the tools' main(argv) given no command line ---------------
def _command_line_cases():
    from course_utils import cli
    from course_utils.bench import cli as bench_cli

    return [
        Case("run main None", lambda: cli.run(None, [], "tool.py"), TypeError, ["main must be", "NoneType"]),
        Case("run main str", lambda: cli.run("main", [], "tool.py"), TypeError, ["main must be", "str"]),
        Case("run argv int", lambda: cli.run(lambda a: 0, 3, "tool.py"), TypeError,
             ["argv must be a list of str", "int 3"]),
        Case("call command empty", lambda: cli.call([], "tool.py"), ValueError, ["command must hold", "[]"]),
        Case("call command None", lambda: cli.call(None, "tool.py"), TypeError,
             ["command must be a list of str", "NoneType"]),
        Case("call command str", lambda: cli.call("ls -l", "tool.py"), TypeError,
             ["command must be a list of str", "str 'ls -l'"]),
        Case("bench main int", lambda: bench_cli.main(3), TypeError, ["argv must be a list of str", "int 3"]),
        Case("train main int", lambda: TRN.main(3), TypeError, ["argv must be a list of str", "int 3"]),
    ]


@pytest.mark.parametrize("case", _command_line_cases(), ids=lambda c: c.name)
def test_command_line_helpers_name_what_is_no_command_line(case):
    assert_named(case)


# -- b13 obscure: feedback_from(run=None) raised "'NoneType' object has no attribute 'lost'" -------
@pytest.mark.parametrize("run", [None, [], "run"], ids=repr)
def test_feedback_from_names_a_run_that_is_none(run):
    from course_utils.exercises import autograde as AG

    assert_named(Case("run", lambda: AG.feedback_from("lesson02", "check_softmax_rows", "f", run, []),
                      TypeError, ["run must be the answer's recorded run", type(run).__name__]))


# -- b13 obscure: load_worked_example said "file not found" for a symlink loop -------------------
def test_load_worked_example_names_a_symlink_loop_and_a_broken_link(tmp_path):
    import os

    from course_utils.tasks import worked_example as WE

    os.symlink(tmp_path / "loop2", tmp_path / "loop1")
    os.symlink(tmp_path / "loop1", tmp_path / "loop2")
    os.symlink(tmp_path / "gone", tmp_path / "broken")
    assert_named(Case("loop", lambda: WE.load_worked_example(tmp_path / "loop1"), WE.WorkedExampleError,
                      ["regular JSON file", "loop1", "a symlink loop"]))
    assert_named(Case("broken", lambda: WE.load_worked_example(tmp_path / "broken"), WE.WorkedExampleError,
                      ["regular JSON file", "broken", "a broken symlink"]))
    with pytest.raises(FileNotFoundError, match="not found"):  # the control: a plain missing file
        WE.load_worked_example(tmp_path / "nope.json")
    assert WE.load_worked_example().x.shape[0] > 0


# -- b13 obscure: a meta tensor of rows raised torch's "Tensor.item() cannot be called on meta" ------
def test_check_rows_names_a_meta_tensor():
    from course_utils.attention import validation as V

    meta = torch.tensor([0, 1], device="meta")
    assert_named(Case("rows meta", lambda: V.check_rows(meta, "rows", 4), ValueError,
                      ["rows is on the meta device", "(2)"]))
    assert V.check_rows(torch.tensor([0, 3]), "rows", 4).tolist() == [0, 3]  # the control


# -- b13 obscure: AttentionExplorer unpacked a list of two layers as (labels, one layer), miscounting --
def test_attention_explorer_names_a_function_that_returns_no_pair():
    from course_utils.interp.heatmaps import AttentionExplorer

    two_layers = lambda text: [torch.rand(1, 4, 2, 2)] * 2  # noqa: E731 - weights alone, no labels
    assert_named(Case("explorer", lambda: AttentionExplorer(two_layers, ["the cat"], 2, 4), ValueError,
                      ["attention_for must return a pair", "list of 2 item(s), the first a Tensor"]))
    pair = lambda text: (["the", "cat"], [torch.rand(1, 4, 2, 2)] * 2)  # noqa: E731 - the control
    assert AttentionExplorer(pair, ["the cat"], 2, 4).num_layers == 2


# -- b13: combine_masks(device='cpu') said "mask is on device cpu but the attention inputs are on cpu" --
def test_combine_masks_takes_a_device_name():
    from course_utils.attention import validation as V

    mask, padding = torch.ones(3, 3, dtype=torch.bool), torch.ones(2, 3, dtype=torch.bool)
    for device in ("cpu", torch.device("cpu")):
        out = V.combine_masks(mask, padding, batch=2, num_heads=1, num_queries=3, num_keys=3, device=device)
        assert out.shape == (2, 1, 3, 3) and bool(out.all())
    assert_named(Case("meta", lambda: V.combine_masks(mask, None, batch=2, num_heads=1, num_queries=3,
                                                      num_keys=3, device="meta"), ValueError,
                      ["mask is on device cpu", "inputs are on meta"]))


# -- b13 obscure: check_config_fields(texts=None / config='x') raised raw attribute errors ---------
def _config_cases():
    from course_utils.attention import validation as V
    from course_utils.attention.mla import MLAConfig

    config = MLAConfig("tiny", 1, 2, 4, 8, 2, "a test")
    return [
        Case("config str", lambda: V.check_config_fields("x", ("name",), {}), TypeError,
             ["config must be a config dataclass", "str 'x'"]),
        Case("texts None", lambda: V.check_config_fields(config, None, {}), TypeError,
             ["texts must be a tuple", "NoneType"]),
        Case("texts str", lambda: V.check_config_fields(config, "name", {}), TypeError,
             ["texts must be a tuple", "str 'name'"]),
        Case("unknown field", lambda: V.check_config_fields(config, ("nope",), {}), ValueError,
             ["MLAConfig has no field 'nope'"]),
    ]


@pytest.mark.parametrize("case", _config_cases(), ids=lambda c: c.name)
def test_check_config_fields_names_its_own_arguments(case):
    assert_named(case)


# -- b13: save_checkpoint replaced a .json that is no checkpoint's sidecar without a word -----------
@pytest.mark.parametrize("content", [b"", b"\xff\xfe binary", b"[1, 2, 3]", b'{"notes": "mine"}'],
                         ids=["empty", "binary", "json-array", "other-object"])
def test_save_checkpoint_keeps_a_json_that_is_no_sidecar(tmp_path, content):
    from course_utils.model import checkpoint as CK
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    (tmp_path / "mine.json").write_bytes(content)
    with pytest.raises(CK.CheckpointError, match="is not a checkpoint's sidecar"):
        CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c")
    assert (tmp_path / "mine.json").read_bytes() == content and not (tmp_path / "mine.safetensors").exists()
    CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c", replace_task=True)
    CK.save_checkpoint(model, tmp_path / "mine", task="toy", metrics={}, command="c")  # over its own: fine


# -- b13: read_secrets said "is missing" for a .course_grader.json that is a symlink loop ---------
def test_read_secrets_names_a_symlink_loop(tmp_path):
    import os

    from course_utils.exercises import autograde as AG

    secrets = tmp_path / AG.SECRETS_NAME
    os.symlink(tmp_path / "other", secrets)
    os.symlink(secrets, tmp_path / "other")
    assert_named(Case("loop", lambda: AG.read_secrets(tmp_path), ValueError, ["is a symlink loop", "source"]))
    (tmp_path / "other").unlink()
    secrets.unlink()
    assert_named(Case("missing", lambda: AG.read_secrets(tmp_path), FileNotFoundError, ["is missing"]))
    secrets.mkdir()
    assert_named(Case("folder", lambda: AG.read_secrets(tmp_path), ValueError, ["is a folder"]))


# -- b13: NaN/inf and 1e38 in the model's float streams: documented (they spread, unchecked) --------
def test_model_streams_document_that_non_finite_values_spread():
    from course_utils.attention import mha
    from course_utils.model import transformer as TF

    assert "Non-finite values" in TF.__doc__ and "1e38" in TF.__doc__ and "1e38" in mha.__doc__
    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1,
                                              mlp=True))
    out, _ = model.run_blocks(torch.full((1, 3, 8), float("nan")))
    assert out.isnan().all()  # as documented: no refusal, NaN out
    mlp = TF.MLP(8, 16)
    assert mlp(torch.full((1, 2, 8), float("nan"))).isnan().all()
