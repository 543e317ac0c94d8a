"""Battery 27, fix pass 57: each bad input it found refused by name (or documented)."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.bad_input_cases import load_course, raises_naming, tiny_model

ROOT = Path(__file__).resolve().parent.parent


# -- the outside grader refused right answers that seeded torch or used @torch.no_grad() ----------------
@pytest.mark.slow
@pytest.mark.parametrize("line", ["    torch.manual_seed(0)\n", "@torch.no_grad()\n",
                                  "@torch.inference_mode()\n"])
def test_the_grader_scores_a_right_answer_that_seeds_or_decorates(line: str) -> None:
    from course_utils.exercises import autograde

    body = "    return torch.softmax(scores, dim=-1) @ values\n"
    head = "def attend(scores, values):\n"
    code = "import torch\n" + (head + line + body if line.startswith("    ") else line + head + body)
    feedback = autograde.grade_answer("lesson01", "check_attend", code, "attend", salt=None,
                                      solutions_dir=None, per_call=30)
    assert feedback.passed, feedback.message


# -- an answer's changes to process state that the check did not put back --------------------------------
def _right_attend_that(change):
    def attend(scores, values):
        change()
        return torch.softmax(scores, dim=-1) @ values
    return attend


@pytest.mark.parametrize(("change", "read", "named"), [
    (lambda: os.environ.__setitem__("NBGRADER_EXECUTION", "1"), lambda: os.environ.get("NBGRADER_EXECUTION"),
     "os.environ['NBGRADER_EXECUTION'] from None to '1'"),
    (lambda: torch.autograd.set_detect_anomaly(True), torch.is_anomaly_enabled, "anomaly detection"),
    (lambda: torch.set_float32_matmul_precision("medium"), torch.get_float32_matmul_precision,
     "float32 matmul precision"),
    (lambda: np.set_printoptions(precision=1), lambda: np.get_printoptions()["precision"], "print options"),
    (lambda: torch.set_printoptions(precision=1), lambda: torch._tensor_str.PRINT_OPTS.precision,
     "print options"),
    (lambda: setattr(torch.backends.mkldnn, "enabled", False), lambda: torch.backends.mkldnn.enabled,
     "torch.backends.mkldnn.enabled"),
])
def test_check_puts_back_process_state_an_answer_changed_and_names_it(change, read, named) -> None:
    from course_utils.exercises import lesson01

    before = read()
    feedback = lesson01.check_attend(_right_attend_that(change))
    assert read() == before
    assert not feedback.passed and named in feedback.message, feedback


def test_a_feedback_status_must_be_exactly_a_str() -> None:
    from course_utils.exercises.core import Feedback

    class AlwaysEqual(str):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    raises_naming(ValueError, ["Feedback.status", "(a str)", "AlwaysEqual"],
                  lambda: Feedback("Exercise 1.1", AlwaysEqual("wrong"), "made up"))


# -- a deleted current folder ----------------------------------------------------------------------------
def _in_a_deleted_folder(*command: str) -> subprocess.CompletedProcess:
    gone = tempfile.mkdtemp()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(["sh", "-c", f'cd "{gone}" && rmdir "{gone}" && exec "$@"', "sh", *command],
                          env=env, capture_output=True, text=True, timeout=120)


def test_a_tool_started_in_a_deleted_folder_says_so_in_one_line() -> None:
    result = _in_a_deleted_folder(sys.executable, "-m", "course_utils.bench", "mha", "--repeats", "1")
    assert result.returncode == 2, result.stderr
    assert "python -m course_utils.bench: the current folder cannot be read" in result.stderr
    assert "Traceback" not in result.stderr and "FATAL" not in result.stderr


def test_importing_the_package_in_a_deleted_folder_is_an_import_error_saying_why() -> None:
    result = _in_a_deleted_folder(sys.executable, "-c", "import course_utils")
    assert result.returncode == 1, result.stderr
    assert "ImportError: course_utils cannot be imported: the current folder cannot be read" in result.stderr


def test_the_shape_trace_names_a_folder_deleted_after_torch_loaded() -> None:
    code = ("import os, tempfile\nfrom course_utils.attention.shapes import dimension_report\n"
            "d = tempfile.mkdtemp(); os.chdir(d); os.rmdir(d)\n"
            "try:\n    dimension_report(2, 10, 512, 8)\nexcept FileNotFoundError as e:\n    print(e)\n")
    result = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            capture_output=True, text=True, timeout=120)
    assert "the current folder cannot be read" in result.stdout, result.stdout + result.stderr
    assert "FlopCounterMode" in result.stdout


def test_course_py_names_a_pyproject_that_is_not_toml(tmp_path: Path) -> None:
    course = load_course()
    for name in course.INPUTS:
        (tmp_path / name).write_text((ROOT / name).read_text())
    assert course.inputs_problem(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text("[[[ not toml")
    problem = course.inputs_problem(tmp_path)
    assert problem is not None and "pyproject.toml is not valid TOML" in problem, problem


# -- small helpers that let an odd value escape ----------------------------------------------------------
def test_parallel_map_names_a_len_that_fails() -> None:
    from course_utils.parallel import parallel_map

    class Items:
        def __iter__(self):
            return iter([1, 2])

        def __len__(self):
            return -1

    raises_naming(TypeError, ["items", "len()", "Items"], lambda: parallel_map(abs, Items()))


def test_gradients_on_checks_its_label() -> None:
    from course_utils.env import gradients_on

    def enter() -> None:
        with gradients_on(5):
            pass

    raises_naming(TypeError, ["what", "int 5"], enter)


def test_check_path_names_an_fspath_that_raises() -> None:
    from course_utils.paths import check_path

    class BrokenPath:
        def __fspath__(self) -> str:
            raise RuntimeError("boom")

    raises_naming(TypeError, ["notebook", "BrokenPath", "__fspath__ failed", "boom"],
                  lambda: check_path(BrokenPath(), "notebook"))


def test_a_value_whose_repr_raises_is_named_by_its_type() -> None:
    from course_utils import causal_mask
    from course_utils.attention.validation import check_device

    class BadRepr:
        def __repr__(self) -> str:
            raise RuntimeError("boom")

    for call in (lambda: check_device(BadRepr()), lambda: causal_mask(3, device=BadRepr())):
        raises_naming(TypeError, ["device", "BadRepr whose repr raised RuntimeError"], call)


@pytest.mark.parametrize(("call", "name"), [
    (lambda: __import__("course_utils.attention.validation", fromlist=["x"]).check_real(10**400, "value"),
     "value"),
    (lambda: __import__("course_utils").MultiHeadAttention(8, 2, dropout=10**400), "dropout"),
    (lambda: __import__("course_utils.model.train", fromlist=["x"]).TrainConfig(lr=10**400),
     "TrainConfig.lr"),
])
def test_an_int_no_float_holds_is_named(call, name) -> None:
    raises_naming(ValueError, [name, "fits a float", "int too large"], call)


def test_sparse_tensors_are_named() -> None:
    from course_utils import padding_mask

    model = tiny_model()
    raises_naming(TypeError, ["lengths", "dense", "sparse_coo", "to_dense()"],
                  lambda: padding_mask(torch.tensor([1, 2]).to_sparse()))
    raises_naming(TypeError, ["tokens", "dense", "sparse_coo"],
                  lambda: model(torch.randint(0, 16, (2, 6)).to_sparse()))


# -- modules and models changed after construction -------------------------------------------------------
@pytest.mark.parametrize(("edit", "error", "words"), [
    (lambda m: setattr(m, "num_heads", 4), ValueError, ["MultiHeadAttention.d_model", "num_heads=4"]),
    (lambda m: setattr(m, "in_proj", torch.nn.Linear(8, 12)), ValueError,
     ["MultiHeadAttention.in_proj.weight", "(24, 8)", "(12, 8)", "forward reads it"]),
    (lambda m: setattr(m, "out_proj", None), TypeError, ["MultiHeadAttention.out_proj", "None"]),
])
def test_forward_names_a_size_or_layer_changed_after_construction(edit, error, words) -> None:
    from course_utils import MultiHeadAttention

    module = MultiHeadAttention(8, 2)
    edit(module)
    raises_naming(error, words, lambda: module(torch.randn(1, 3, 8)))


def test_a_model_with_a_block_removed_is_named() -> None:
    from course_utils.interp.ablation import head_importance

    model = tiny_model()
    model.blocks = model.blocks[:1]
    tokens = torch.randint(0, 16, (2, 6))
    raises_naming(ValueError, ["1 blocks", "num_layers=2", "after construction"],
                  lambda: head_importance(model, tokens, tokens))


# -- gradients, dtypes and NaN -------------------------------------------------------------------------
def test_gradient_functions_name_inference_mode() -> None:
    from course_utils.interp.ablation import head_importance
    from course_utils.interp.patching import sequence_gate_gradients

    model, tokens = tiny_model(), torch.randint(0, 16, (2, 6))
    for f in (head_importance, sequence_gate_gradients):
        with torch.inference_mode():
            raises_naming(RuntimeError, [f.__name__, "inference_mode()"],
                          lambda f=f: f(model, tokens, tokens))


def test_gates_and_caches_keep_their_dtype_under_a_float64_default() -> None:
    from course_utils.interp.ablation import gates_without, head_importance
    from course_utils.interp.patching import sequence_gate_gradients
    from course_utils.model.kv_cache import QuantizedCache

    model, tokens = tiny_model(), torch.randint(0, 16, (2, 6))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert head_importance(model, tokens, tokens).shape == (2, 2)
        assert sequence_gate_gradients(model, tokens, tokens).shape == (2, 2, 2)
        assert gates_without(model, [(0, 1)]).dtype == torch.float32
        cache = QuantizedCache(1, 1, 2, 4, 8, group=2)
    finally:
        torch.set_default_dtype(before)
    cache.append(0, torch.randn(1, 2, 1, 4), torch.randn(1, 2, 1, 4))
    assert cache.length == 1


def test_lookup_metrics_refuse_a_model_with_nan_outputs() -> None:
    from course_utils.tasks import two_relations as T

    task = T.TwoKeyTask()
    model = T.LookupModel(task, 16, 2)
    for p in model.parameters():
        p.data.fill_(float("nan"))
    raises_naming(ValueError, ["model(batch)'s logits", "finite", "NaN"],
                  lambda: T.weight_on_keys(model, task.sample(4, seed=1)))


def test_train_model_names_a_batch_whose_targets_are_all_ignored() -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = tiny_model()

    def sample_batch(generator):
        return torch.zeros(2, 6, dtype=torch.long), torch.full((2, 6), -100)

    raises_naming(ValueError, ["sample_batch", "all -100", "step 1"],
                  lambda: train_model(model, sample_batch, TrainConfig(steps=2), progress=False))


# -- explorers never raise, even on an ASCII stdout ------------------------------------------------------
def test_an_explorer_prints_on_an_ascii_stdout() -> None:
    code = ("from course_utils.interp.widgets import dimension_explorer; "
            "dimension_explorer(heads='\\u00e9t\\u00e9')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="ascii"))
    assert result.returncode == 0, result.stderr
    assert "heads='\\xe9t\\xe9' is not a slider" in result.stdout, result.stdout


# -- the same root cause in the bench helpers and measure (battery 27's final run) ---------------------
def _huge_int_cases():
    import pandas as pd

    from course_utils.bench import memory as MEM
    from course_utils.bench import mha_speed as MS
    from course_utils.bench import timing as TM
    from course_utils.interp import ablation as AB

    huge = 10**400
    tokens = torch.randint(0, 16, (2, 6), generator=torch.Generator().manual_seed(0))
    record = {"t": {"peak_mb": 1, "start_mb": 1, "children_mb": 0, "seconds": huge}}
    return [
        (lambda: MS.bench_mha(1, 4, 8, 2, repeats=1, target_sample_s=huge), "target_sample_s"),
        (lambda: TM.Timing("a", huge, 1.0, (huge,)), "Timing('a').median_s"),
        (lambda: TM.clock_elapsed(0, huge, "x"), "clock"),
        (lambda: MEM.format_test_report(record), "seconds="),
        (lambda: MS.plot_sweep(pd.DataFrame({"a": [huge]}, index=[1], dtype=object), None, title="t"),
         "table['a']"),
        (lambda: AB.measure(tiny_model(), AB.Evaluation(tokens, lambda logits: {"a": huge})),
         "numbers a float holds"),
    ]


@pytest.mark.parametrize("index", range(6))
def test_an_int_no_float_holds_is_named_by_the_bench_helpers_and_measure(index: int) -> None:
    call, words = _huge_int_cases()[index]
    raises_naming(ValueError, [words], call)
