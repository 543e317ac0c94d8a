"""Battery 14's findings on the command lines, files and grading helpers (issue 38, fix44b): each
bad call now raises with the argument's (or option's) name, what was expected and what arrived,
or does what its docstring says; the valid call beside it still works."""

from __future__ import annotations

import signal
import sys

import pytest
from bad_input_cases import Case, assert_named

from course_utils import cli
from course_utils.bench import cli as bench_cli
from course_utils.model import train as TRN

# -- cli.call and cli.Interrupted name what they cannot use ---------------------------------
CLI_CASES = [
    Case("Interrupted str", lambda: cli.Interrupted("x"), TypeError, ["signum", "SIGINT (2)", "str 'x'"]),
    Case("Interrupted SIGHUP", lambda: cli.Interrupted(1), ValueError, ["signum", "SIGTERM (15)", "got 1"]),
    Case("Interrupted message int", lambda: cli.Interrupted(2, 5), TypeError, ["message", "str", "int 5"]),
    Case("call relay 999", lambda: cli.call(["true"], "p", relay=(999,)), ValueError,
         ["relay", "stop signal", "999"]),
    Case("call relay int", lambda: cli.call(["true"], "p", relay=2), TypeError, ["relay", "tuple", "int 2"]),
    Case("call a folder", lambda: cli.call(["/"], "p"), PermissionError, ["command[0]", "'/'", "a folder"]),
    Case("call a missing program", lambda: cli.call(["/nope/zz"], "p"), FileNotFoundError,
         ["command[0]", "'/nope/zz'", "not found"]),
]


@pytest.mark.parametrize("case", CLI_CASES, ids=lambda c: c.name)
def test_cli_call_and_interrupted_name_a_bad_argument(case):
    assert_named(case)


def test_cli_call_and_interrupted_controls():
    assert cli.Interrupted(signal.SIGTERM, "x").signum == 15
    assert cli.call([sys.executable, "-c", "pass"], "p", relay=(signal.SIGTERM,)) == 0
    assert cli.call([sys.executable, "-c", "raise SystemExit(3)"], "p", relay=[signal.SIGINT]) == 3


# -- an option given twice is refused by the shared parser (argparse kept the last) -----------
@pytest.mark.parametrize("argv, named", [
    (["mha", "--repeats", "1", "--repeats", "2"], "argument --repeats: given more than once (1, then 2)"),
    (["mha", "--repeats=1", "--rep", "3"], "argument --repeats: given more than once (1, then 3)"),
    (["gqa", "--whole-step", "--no-whole-step"],
     "argument --whole-step/--no-whole-step: given more than once"),
    (["train", "--seeds", "0", "--seeds", "1"], "argument --seeds: given more than once (0, then 1)"),
])
def test_bench_option_given_twice_is_refused(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        bench_cli.build_parser().parse_args(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and named in err, err


def test_train_option_given_twice_is_refused(capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", "--seed", "1", "--seed", "2"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --seed: given more than once (1, then 2)" in err, err


def test_options_given_once_and_adding_options_still_parse():
    args = bench_cli.build_parser().parse_args(["mha", "--repeats", "2"])
    assert args.repeats == 2
    parser = cli.ArgumentParser()
    parser.add_argument("--tag", action="append")
    parser.add_argument("-v", action="count", default=0)
    parser.add_argument("--x", type=int)
    args = parser.parse_args(["--tag", "a", "--tag", "b", "-v", "-v", "--x", "1"])
    assert (args.tag, args.v, args.x) == (["a", "b"], 2, 1)


# -- options that would be dropped without a word are refused --------------------------------
@pytest.mark.parametrize("argv, named", [
    (["gqa", "--bf16", "--no-whole-step"], "--bf16 would be ignored"),
    (["gqa", "--shapes", "1x64", "--no-whole-step"], "--shapes would be ignored"),
])
def test_bench_gqa_refuses_whole_step_options_without_the_whole_step(argv, named, capsys):
    with pytest.raises(SystemExit) as info:
        bench_cli.main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and named in err and "--no-whole-step" in err, err


def test_bench_gqa_check_takes_bf16_with_the_whole_step():
    from course_utils.bench import gqa_speed

    args = bench_cli.build_parser().parse_args(["gqa", "--bf16", "--context", "64", "--layers", "1"])
    gqa_speed._check_gqa_fits(args)  # no error: --bf16 has a whole step to shape


def test_train_refuses_replace_task_without_out(capsys):
    with pytest.raises(SystemExit) as info:
        TRN.main(["induction", "--steps", "1", "--replace-task", "--no-progress"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--replace-task" in err and "without --out" in err, err


# -- save_checkpoint takes any task name (documented): load_checkpoint holds it to that name ---
def test_save_checkpoint_records_a_task_of_ones_own_and_load_holds_it(tmp_path):
    from course_utils.model import checkpoint as CK
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    assert "Any name is" in CK.save_checkpoint.__doc__
    model = TinyTransformer(ModelConfig(vocab_size=11, max_len=8, d_model=8, num_heads=2, num_layers=1))
    CK.save_checkpoint(model, tmp_path / "m", task="zz", metrics={}, command="c")
    _, meta = CK.load_checkpoint(tmp_path / "m", task="zz")
    assert meta["task"] == "zz"
    with pytest.raises(CK.CheckpointError, match="'zz', expected 'induction'"):
        CK.load_checkpoint(tmp_path / "m", task="induction")


# -- write_secrets: the course folder lies outside the clone (one test, cli.place_in) --------


@pytest.mark.parametrize("inside", [".", "battery/zzcourse"])
def test_write_secrets_refuses_a_course_inside_the_clone(inside, tmp_path):
    from course_utils.exercises import autograde

    clone = tmp_path / "clone"
    (clone / "notebooks").mkdir(parents=True)
    (clone / "solutions").mkdir()
    (clone / "notebooks" / "02_single_head_attention.ipynb").write_text("{}")
    course = clone / inside
    with pytest.raises(ValueError, match=r"course: expected the nbgrader course folder outside"):
        autograde.write_secrets(course, ["02_single_head_attention"], clone / "solutions")
    assert not (course / autograde.SECRETS_NAME).exists()
    link = tmp_path / "link"  # a link into the clone is inside it too
    link.symlink_to(clone / "notebooks")
    with pytest.raises(ValueError, match=r"\(notebooks/ of the clone\)"):
        autograde.write_secrets(link, ["02_single_head_attention"], clone / "solutions")
    written = autograde.write_secrets(tmp_path / "course", ["02_single_head_attention"], clone / "solutions")
    assert written.is_file()


def test_write_secrets_blames_a_solutions_dir_without_notebooks_beside_it(tmp_path):
    from course_utils.exercises import autograde

    (tmp_path / "solutions").mkdir()
    with pytest.raises(FileNotFoundError) as info:
        autograde.write_secrets(tmp_path / "course", ["02_single_head_attention"], tmp_path / "solutions")
    message = str(info.value)
    assert message.startswith("solutions_dir:") and "holds no lesson notebooks" in message, message
    assert "lessons:" not in message


def test_place_in_names_inside_outside_and_a_loop(tmp_path):
    assert cli.place_in(tmp_path, tmp_path) == "."
    assert cli.place_in(tmp_path / "a" / "b", tmp_path) == "a/b"
    assert cli.place_in(tmp_path.parent, tmp_path) is None
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    with pytest.raises(ValueError, match="loops"):
        cli.place_in(tmp_path / "loop" / "x", tmp_path)


# -- read_store names what stands at the path (a folder was "no stored answers") --------------
def _odd(tmp_path, kind):
    import os

    path = tmp_path / "lesson02.pt"
    if kind == "a directory":
        path.mkdir()
    elif kind == "a FIFO (named pipe)":
        os.mkfifo(path)
    elif kind == "a symlink loop":
        path.symlink_to(path)
    else:
        path.symlink_to(tmp_path / "gone.pt")
    return path


@pytest.mark.parametrize("kind", ["a directory", "a FIFO (named pipe)", "a symlink loop", "a broken symlink"])
def test_read_store_names_what_is_at_the_path(kind, tmp_path):
    from course_utils.exercises import answers

    if kind.startswith("a FIFO") and not hasattr(__import__("os"), "mkfifo"):
        pytest.skip("no FIFOs here")
    with pytest.raises(ValueError) as info:
        answers.read_store(_odd(tmp_path, kind))
    message = str(info.value)
    assert message.startswith("lesson02.pt: expected a file of stored answers") and f"it is {kind}" in message


def test_read_store_still_says_missing_and_reads_a_store(tmp_path):
    from course_utils.exercises import answers

    with pytest.raises(FileNotFoundError, match="no stored answers at"):
        answers.read_store(tmp_path / "lesson02.pt")
    assert "exercises" in answers.read_store(answers.ANSWERS_DIR / "lesson02.pt")


# -- install_audit_hook checks its arguments before it installs anything (for good) -----------
def _hook_cases():
    good = {"check_key": "lesson02.check_softmax_rows", "answer": compile("x = 1", "<answer>", "exec"),
            "harness": [True]}
    bad = [("work", None, TypeError, "NoneType None"), ("work", "", ValueError, "str ''"),
           ("work", b"x", TypeError, "bytes b'x'"), ("work", "zz_nonsense", ValueError, "'zz_nonsense'"),
           ("check_key", b"x", TypeError, "bytes b'x'"), ("check_key", ["x"], TypeError, "list ['x']"),
           ("check_key", "zz", ValueError, "str 'zz'"), ("answer", -1, TypeError, "int -1"),
           ("answer", "x", TypeError, "str 'x'"), ("harness", "yes", TypeError, "str 'yes'"),
           ("harness", 2, TypeError, "int 2"), ("harness", [1], TypeError, "list [1]")]
    return [(good, name, value, error, got) for name, value, error, got in bad]


@pytest.mark.parametrize("good, name, value, error, got", _hook_cases(), ids=lambda v: repr(v)[:20])
def test_install_audit_hook_names_a_bad_argument(good, name, value, error, got, tmp_path, monkeypatch):
    from course_utils.exercises import sandbox

    installed = []
    monkeypatch.setattr(sys, "addaudithook", installed.append)  # never install one in the test process
    arguments = {"work": str(tmp_path), **good, name: value}
    with pytest.raises(error) as info:
        sandbox.install_audit_hook(**arguments)
    message = str(info.value)
    assert message.startswith(f"{name}: expected") and got in message, message
    assert installed == []
    sandbox.install_audit_hook(**{"work": str(tmp_path), **good})  # the control: installs one
    assert len(installed) == 1


# -- requested_shape: a first entry that is no tensor or shape is named (it read as ()) --------
@pytest.mark.parametrize("args", [[-1], [10**12], [float("nan")], ["x", 2]])
def test_requested_shape_names_a_first_entry_that_is_no_tensor(args):
    from course_utils.exercises import raising

    with pytest.raises(TypeError, match=r"args: expected the tensor \(or its shape"):
        raising.requested_shape(args)


def test_requested_shape_controls():
    import torch

    from course_utils.exercises import raising

    assert raising.requested_shape([(2, 3), 6]) == (6,)
    assert raising.requested_shape([torch.zeros(2, 3), (3, 2)]) == (3, 2)
    assert raising.requested_shape([(2, 3)]) == ()  # t.view(): no size, as documented
    assert raising.requested_shape([(2, 6), 2, 3.0]) == (2, 3.0)  # a learner's float slip, as given


# -- result_cap: expected_unseen junk was ignored (the cap then left the unseen outputs out) ---
@pytest.mark.parametrize("junk, error, words", [
    (float("nan"), TypeError, "float nan"), (object(), TypeError, "object <object"),
    (-1, TypeError, "int -1"), ([], ValueError, "one right output per unseen case (3), got 0"),
])
def test_result_cap_names_expected_unseen_junk(junk, error, words):
    from course_utils.exercises import autograde, lesson02

    cases = autograde.cases_of(lesson02.SOFTMAX_ROWS)
    unseen = cases[:3]
    with pytest.raises(error) as info:
        autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, unseen, junk)
    assert str(info.value).startswith("expected_unseen: expected") and words in str(info.value)


def test_result_cap_controls():
    from course_utils.exercises import autograde, lesson02

    cases = autograde.cases_of(lesson02.SOFTMAX_ROWS)
    plain = autograde.result_cap(lesson02.SOFTMAX_ROWS, cases)
    assert autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, []) == plain  # no unseen cases: the same cap
    more = autograde.result_cap(lesson02.SOFTMAX_ROWS, cases, cases[:1], [cases[0].args[0]])
    assert more > plain


# -- cli.run: a signal as main returns is the one line and 130, not a traceback and exit 1 -----
def test_run_reports_a_signal_that_comes_as_the_handlers_are_put_back(monkeypatch, capsys):
    import os

    put_back = cli._put_back
    sent = []

    def signal_first(previous):  # the signal lands after main returned, in run's finally
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)
        put_back(previous)

    monkeypatch.setattr(cli, "_put_back", signal_first)
    before = signal.getsignal(signal.SIGINT)
    cli.leaving("lesson01.pt written")
    try:
        code = cli.run(lambda argv: 0, [], "tool.py")
    finally:
        cli.leaving(cli.NOTHING_WRITTEN)
    assert code == 130
    assert capsys.readouterr().err == "tool.py: interrupted by SIGINT: lesson01.pt written\n"
    assert signal.getsignal(signal.SIGINT) is before  # put back all the same


# -- run_kernel: a kernel cancelled while starting, a dead kernel's poll: the one interruption --
def test_run_kernel_turns_a_cancelled_start_into_interrupted():
    import asyncio
    import os

    async def starting_kernel():  # nbclient's handler cancels the start (CancelledError, exit 1)
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, asyncio.current_task().cancel)
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(5)

    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(cli.Interrupted) as info:
        cli.run_kernel(starting_kernel(), "the kernel was shut down")
    assert info.value.signum == signal.SIGINT and "the kernel was shut down" in str(info.value)
    assert signal.getsignal(signal.SIGINT) is before


def test_run_kernel_leaves_no_failed_task_unretrieved(caplog):
    import asyncio
    import gc
    import os

    async def poll_dead_kernel():
        raise AssertionError  # what nbclient's _async_poll_kernel_alive gives once the kernel is gone

    async def cell_running():
        loop = asyncio.get_running_loop()
        stopped = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stopped.set)
        asyncio.ensure_future(poll_dead_kernel())
        await asyncio.sleep(0.01)  # the poll has failed; nobody awaits it
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stopped.wait(), 5)
        raise AssertionError

    with caplog.at_level("ERROR", logger="asyncio"), pytest.raises(cli.Interrupted):
        cli.run_kernel(cell_running(), "the kernel was shut down")
    gc.collect()
    assert "never retrieved" not in caplog.text, caplog.text


def test_publish_refuses_an_option_given_twice(capsys):
    import importlib
    from pathlib import Path

    scripts = str(Path(__file__).resolve().parent.parent / "scripts")
    if scripts not in sys.path:
        sys.path.insert(0, scripts)
    publish = importlib.import_module("publish")
    with pytest.raises(SystemExit) as info:
        publish.main(["--repo", "a/b", "--repo", "c/d", "--tag", "v1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "argument --repo: given more than once (a/b, then c/d)" in err, err
