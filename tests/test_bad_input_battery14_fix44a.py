"""Battery 14 (issue 38): the result records the package fills in and returns refuse fields
that are not what their annotations say, naming ``Class.field`` (helper fix44a)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import pkgutil
import re

import numpy as np
import pytest
import torch

import course_utils
from course_utils.attention.shapes import TraceStep
from course_utils.bench.decode_step import StepRow, WholeStep
from course_utils.bench.gqa_speed import DecodeBench, DecodeRow
from course_utils.bench.mha_speed import DeviceComparison
from course_utils.interp.circuits import HeadTrace
from course_utils.tasks.synthetic import AgreementBatch, InductionBatch, MixtureBatch
from course_utils.tasks.two_relations import RunResult
from course_utils.tasks.worked_example import CheapExpansion, Head


def _public_dataclasses() -> list[type]:
    found: list[type] = []
    for info in pkgutil.walk_packages(course_utils.__path__, "course_utils."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and dataclasses.is_dataclass(obj) and obj.__module__ == module.__name__
                    and not name.startswith("_") and obj not in found):
                found.append(obj)
    return found


@pytest.mark.parametrize("cls", _public_dataclasses(), ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_public_dataclass_refuses_a_wrong_typed_field_naming_it(cls: type) -> None:
    """Every field set to a bare object(): the constructor refuses, naming the class and a field
    (``Class.field``, or ``Class(name).field`` for the timing records that carry a name)."""
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    with pytest.raises((TypeError, ValueError)) as caught:
        cls(**{name: object() for name in fields})
    named = "|".join(map(re.escape, fields))
    assert re.search(rf"\b{cls.__name__}(\([^)]*\))?\.({named})\b", str(caught.value)), str(caught.value)


def _timing():
    from course_utils.bench.timing import Timing

    return Timing("nn.MultiheadAttention", 1e-3, 1.0, [1e-3])


def test_device_comparison_keeps_a_nan_or_inf_difference_as_measured() -> None:
    """An output that overflowed gives a NaN or inf max |diff|: reported as DIFFERS, not refused."""
    from course_utils.bench.timing import Timing

    for diff in (float("nan"), float("inf")):
        timings = [_timing(), Timing("F.sdpa", 1e-3, 1.0, [1e-3])]  # a diff is of a timed function
        report = DeviceComparison("t", timings, {"F.sdpa": diff}, 0.1, 1.0, {"F.sdpa": False}).report()
        assert "DIFFERS" in report


def _step_row() -> StepRow:
    return StepRow(1, 8, 1, 100, 100, [1e-3])


@pytest.mark.parametrize(("make", "label"), [
    (lambda: TraceStep(3, "x", ("B",), (2,), 0, True), "TraceStep.name"),
    (lambda: TraceStep("x", "x", ("B",), (2,), -1, True), "TraceStep.macs"),
    (lambda: TraceStep("x", "x", ("B",), (2,), 0, torch.tensor(True)), "TraceStep.contiguous"),
    (lambda: TraceStep("x", b"x", ("B",), (2,), 0, True), "TraceStep.code"),
    (lambda: TraceStep("x", "x", ("B",), (-2,), 0, True), "TraceStep.shape[0]"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1.5, [_step_row()], [1e-3], 10,
                       (0, ""), 0), "WholeStep.threads"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, None, 1, [_step_row()], [1e-3], 10,
                       (0, ""), 0), "WholeStep.attention"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, None, [1e-3], 10,
                       (0, ""), 0), "WholeStep.rows"),
    (lambda: DecodeBench(4, 16, 8, 1, None, 1, [], [1e-3], [], 0), "DecodeBench.batch"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, None, [1e-3], [], 0), "DecodeBench.rows"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, [DecodeRow(4, 4096, {"course": [1e-3]})], [1e-3], [], 0,
                         read_one_thread_s=[-1.0]),
     "DecodeBench.read_one_thread_s[0]"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": "x"}, 0.1, 1.0, {"cpu": True}),
     "DeviceComparison.max_abs_diff"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, float("inf"), {"cpu": True}),
     "DeviceComparison.reference_std"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, 1.0, {"cpu": None}),
     "DeviceComparison.agree"),
    (lambda: DeviceComparison("t", [_timing()], {"cpu": 0.0}, 0.1, 1.0, {"gpu": True}),
     "DeviceComparison.agree"),
    (lambda: DeviceComparison("t", [], {"cpu": 0.0}, 0.1, 1.0, {"cpu": True}), "DeviceComparison.timings"),
    (lambda: HeadTrace(torch.zeros(1, 2, 3), [], None, []), "HeadTrace.head_outputs"),
    (lambda: HeadTrace(torch.zeros(1, 2, 3), [], [], [[1.0]]), "HeadTrace.residual[0]"),
    (lambda: InductionBatch([[1, 2]], torch.zeros(1), torch.zeros(1, 2)), "InductionBatch.tokens"),
    (lambda: InductionBatch(torch.zeros(1, 2), np.zeros(1), torch.zeros(1, 2)), "InductionBatch.periods"),
    (lambda: AgreementBatch(*[torch.zeros(1)] * 3, None, *[torch.zeros(1)] * 4), "AgreementBatch.verb_pos"),
    (lambda: MixtureBatch(torch.zeros(1, 2), None, torch.zeros(1, 2), 0), "MixtureBatch.targets"),
    (lambda: MixtureBatch(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2), 0.5),
     "MixtureBatch.num_induction"),
    (lambda: RunResult(2, 0, [1], 0.5, (0.5, 0.5), torch.nn.Linear(1, 1)), "RunResult.accuracy"),
    (lambda: RunResult(True, 0, [1], [0.5], (0.5, 0.5), torch.nn.Linear(1, 1)), "RunResult.num_heads"),
    (lambda: RunResult(2, 0, [1], [float("nan")], (0.5, 0.5), torch.nn.Linear(1, 1)),
     "RunResult.accuracy[0]"),
    (lambda: Head("a", None, None, None), "Head.w_q"),
    (lambda: Head(3, None, None, None), "Head.name"),
    (lambda: CheapExpansion("x", np.zeros(5), 1.0, (0, 1), np.zeros(2), 1.0), "CheapExpansion.head_outputs"),
    (lambda: CheapExpansion(np.zeros(5), np.zeros(5), float("inf"), (0, 1), np.zeros(2), 1.0),
     "CheapExpansion.total"),
])
def test_battery14_record_constructor_refuses_the_field(make, label: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        make()


# -- exercises: Feedback, Exercise, RaisingMistake -------------------------------------------------
def _cases() -> list:
    from course_utils.exercises.cases import Case

    return [Case((1.0,))]


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"stopped": "no"}, "Feedback.stopped"), ({"stopped": 1}, "Feedback.stopped"),
    ({"stopped": None}, "Feedback.stopped"), ({"mistake": 3}, "Feedback.mistake"),
    ({"mistake": float("nan")}, "Feedback.mistake"),
])
def test_feedback_refuses_stopped_and_mistake_of_the_wrong_kind(kwargs: dict, label: str) -> None:
    from course_utils.exercises.core import Feedback

    with pytest.raises(TypeError, match=re.escape(label)):
        Feedback("e", "correct", "m", **kwargs)


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"reference": object()}, "Exercise.reference"), ({"reference": -1}, "Exercise.reference"),
    ({"forbidden": [-1]}, "Exercise.forbidden"), ({"forbidden": len}, "Exercise.forbidden"),
    ({"hint": None}, "Exercise.hint"),
])
def test_exercise_refuses_a_reference_or_forbidden_that_is_not_a_function(kwargs: dict, label: str) -> None:
    from course_utils.exercises.core import Exercise

    with pytest.raises(TypeError, match=re.escape(label)):
        Exercise("t", _cases, **kwargs)


@pytest.mark.parametrize("built", ["x", 1, None, [1.0]])
def test_exercise_names_a_make_cases_that_returns_no_cases_when_it_checks(built: object) -> None:
    """make_cases runs when the cases are needed (documented): its result is named then."""
    from course_utils.exercises.core import Exercise

    feedback = Exercise("t", lambda: built, reference=lambda x: x).check(lambda x: x)
    assert feedback.status == "error"
    assert "make_cases" in feedback.message and "not a list of Case" in feedback.message


@pytest.mark.parametrize(("kwargs", "label"), [
    ({"loose": 1}, "RaisingMistake.loose"), ({"loose": "yes"}, "RaisingMistake.loose"),
    ({"pattern": None}, "RaisingMistake.pattern"), ({"key": ""}, "RaisingMistake.key"),
])
def test_raising_mistake_refuses_loose_and_pattern_of_the_wrong_kind(kwargs: dict, label: str) -> None:
    from course_utils.exercises.raising import RaisingMistake

    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        RaisingMistake(**{"key": "k", "message": "m", "hint": "h", **kwargs})


# -- fields a method relies on: order, choice, non-empty ------------------------------------------
def test_ratio_spread_refuses_q1_above_q3() -> None:
    from course_utils.bench.timing import RatioSpread

    with pytest.raises(ValueError, match=r"RatioSpread\('a'\) must have .*q1 <= median <= q3"):
        RatioSpread("a", "b", 1.0, 2.0, 0.5, 0.1, 3.0, 5)


def test_ratio_spread_of_equal_ratios_is_accepted() -> None:
    """The ordering check leaves room for the rounding of statistics.quantiles."""
    from course_utils.bench.timing import Timing, ratio_spread

    timings = [Timing("a", 0.3, 3.0, [0.3] * 7), Timing("b", 0.1, 1.0, [0.1] * 7)]
    spread = ratio_spread(timings, "a", "b")
    assert spread.q1 <= spread.q3 * (1 + 1e-9) and "slower" in spread.verdict()


def test_stage_row_refuses_a_stage_it_does_not_time() -> None:
    from course_utils.bench.gqa_speed import StageRow

    with pytest.raises(ValueError, match=r"StageRow\.stage must be one of 'scores'"):
        StageRow("zz", 1, 1.0, 100)


def test_history_to_dict_names_a_nan_loss_appended_after_construction() -> None:
    from course_utils.model.train import History

    history = History("induction")
    history.steps.append(1)
    history.loss.append(float("nan"))
    with pytest.raises(ValueError, match=r"History\.loss\[0\]"):
        history.to_dict()


def test_history_task_is_a_free_label_as_documented() -> None:
    """Documented, not refused: train_model's task is any label ("custom" by default)."""
    from course_utils.model.train import History

    assert History("zz").to_dict()["task"] == "zz"
    assert "any str" in History.__doc__


def test_step_row_without_samples_names_the_field_in_best_s() -> None:
    # battery 18: a frozen StepRow can never be filled, so one without samples is refused when made
    with pytest.raises(ValueError, match=r"StepRow\.samples_s must hold at least one item"):
        StepRow(1, 8, 1, 100, 100)


@pytest.mark.parametrize(("make", "label"), [
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, [], [1e-3], 10, (0, ""), 0), "WholeStep.rows"),
    (lambda: WholeStep(64, 4, 2, 4, torch.float32, "fused", 1, [_step_row()], [], 10, (0, ""), 0),
     "WholeStep.read_s"),
    (lambda: DecodeBench(4, 16, 8, 1, 1, 1, [], [1e-3], [], 0), "DecodeBench.rows"),
])
def test_records_refuse_an_empty_list_their_methods_take_the_best_of(make, label: str) -> None:
    with pytest.raises(ValueError, match=re.escape(label) + " must hold at least one item"):
        make()


def test_decode_bench_names_a_probe_that_was_not_timed() -> None:
    bench = DecodeBench(4, 16, 8, 1, 1, 1, [DecodeRow(4, 4096, {"course": [1e-3]})], [1e-3], [], 0)
    with pytest.raises(ValueError, match=r"DecodeBench\.read_s is empty"):
        bench.read_gb_per_s  # noqa: B018 (the property raises)
    with pytest.raises(ValueError, match=r"DecodeBench\.copy_s is empty"):
        bench.copy_gb_per_s  # noqa: B018


@pytest.mark.parametrize(("fields", "field"), [
    ({"codes": None}, "codes"), ({"scale": [1.0]}, "scale"), ({"zero": torch.zeros(0)}, "codes"),
])
def test_quantized_is_checked_when_built_and_by_dequantize_kv(fields: dict, field: str) -> None:
    """Quantized checks its fields when built (battery 16a); one made by _replace (tuple
    machinery, no check) is still refused by dequantize_kv, which names its bad field."""
    from course_utils.model.kv_cache import Quantized, dequantize_kv, quantize_kv

    good = quantize_kv(torch.randn(2, 4))
    with pytest.raises((TypeError, ValueError), match=re.escape(f"Quantized.{field}")):
        Quantized(**{**good._asdict(), **fields})
    with pytest.raises((TypeError, ValueError), match=re.escape(f"q.{field}")):
        dequantize_kv(good._replace(**fields))


def test_model_run_keeps_a_nan_loss_as_documented() -> None:
    from course_utils.exercises.your_attention import ModelRun

    assert math.isnan(ModelRun(torch.zeros(1, 2, 3), 0.5, float("nan")).loss)
    assert "may be NaN" in ModelRun.__doc__


# -- task batches: dtype and shape of their tensors -----------------------------------------------
def _long(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.long)


def _bool(*shape: int) -> torch.Tensor:
    return torch.zeros(shape, dtype=torch.bool)


@pytest.mark.parametrize(("make", "error", "label"), [
    (lambda: InductionBatch(torch.zeros(2, 5), _long(2), _bool(2, 5)), TypeError, "InductionBatch.tokens"),
    (lambda: InductionBatch(_long(2, 5, 1), _long(2), _bool(2, 5)), ValueError, "InductionBatch.tokens"),
    (lambda: InductionBatch(_long(2, 5), _long(3), _bool(2, 5)), ValueError, "InductionBatch.periods"),
    (lambda: InductionBatch(_long(2, 5), _long(2), torch.full((2, 5), float("nan"))), TypeError,
     "InductionBatch.scored"),
    (lambda: InductionBatch(_long(2, 5), _long(2), _bool(10)), ValueError, "InductionBatch.scored"),
    (lambda: AgreementBatch(_long(2, 5), _long(2), _long(2), torch.full((2,), float("nan")), _bool(2),
                            _bool(2), _long(2), _long(2)), TypeError, "AgreementBatch.verb_pos"),
    (lambda: AgreementBatch(_long(2, 5), _long(2), _long(2, 1), _long(2), _bool(2), _bool(2), _long(2),
                            _long(2)), ValueError, "AgreementBatch.subject_pos"),
    (lambda: AgreementBatch(_long(2, 5), _long(2), _long(2), _long(2), _bool(2), _bool(2), _long(2),
                            _long(2), ["simple"]), ValueError, "AgreementBatch.template"),
    (lambda: MixtureBatch(_long(10), _long(10), _bool(10), 0), ValueError, "MixtureBatch.tokens"),
    (lambda: MixtureBatch(_long(2, 5), _long(2, 5, 1), _bool(2, 5), 0), ValueError, "MixtureBatch.targets"),
    (lambda: MixtureBatch(_long(2, 5), _long(2, 5), _bool(2, 5), 3), ValueError,
     "MixtureBatch.num_induction"),
])
def test_task_batches_refuse_tensors_of_the_wrong_dtype_or_shape(make, error: type, label: str) -> None:
    with pytest.raises(error, match=re.escape(label)):
        make()


def test_task_batches_sampled_and_taken_pass_their_own_checks() -> None:
    from course_utils.tasks.synthetic import AgreementTask, InductionTask, MixtureTask

    for task in (InductionTask(), AgreementTask(), MixtureTask()):
        batch = task.sample(4, torch.Generator().manual_seed(0))
        assert batch.tokens.shape[0] == 4
    agreement = AgreementTask().sample(4, torch.Generator().manual_seed(0))
    assert agreement.take(torch.tensor([0, 2])).tokens.shape[0] == 2


@pytest.mark.parametrize(("steps", "accuracy", "label"), [
    ([], [], "RunResult.steps must hold at least one item"),
    ([1, 2], [0.5], "RunResult.accuracy must hold one"),
])
def test_run_result_refuses_an_accuracy_curve_final_accuracy_cannot_read(steps, accuracy, label) -> None:
    from course_utils.tasks.two_relations import LookupModel

    model = LookupModel.__new__(LookupModel)  # the checks before it refuse first; no model is built
    with pytest.raises(ValueError, match=re.escape(label)):
        RunResult(2, 0, steps, accuracy, (0.5, 0.5), model)


def _trace_parts(B: int = 1, T: int = 3, layers: int = 2) -> dict:
    return {"logits": torch.zeros(B, T, 5), "attention": [torch.zeros(B, 2, T, T) for _ in range(layers)],
            "head_outputs": [torch.zeros(B, 2, T, 4) for _ in range(layers)],
            "residual": [torch.zeros(B, T, 4) for _ in range(layers + 1)]}


@pytest.mark.parametrize(("change", "label"), [
    ({"logits": torch.zeros(3, 5)}, "HeadTrace.logits"),
    ({"residual": [torch.zeros(1, 3, 4)] * 2}, "HeadTrace.residual must hold 3"),
    ({"attention": [torch.zeros(1, 2, 3, 3)]}, "HeadTrace.attention must be empty"),
    ({"head_outputs": [torch.zeros(1, 2, 3, 4), torch.zeros(2, 3, 4)]}, "HeadTrace.head_outputs[1]"),
    ({"head_outputs": [torch.zeros(1, 2, 3, 4), torch.zeros(1, 2, 7, 4)]}, "HeadTrace.head_outputs[1]"),
    ({"residual": [torch.zeros(1, 3, 4), torch.zeros(2, 3, 4), torch.zeros(1, 3, 4)]},
     "HeadTrace.residual[1]"),
])
def test_head_trace_refuses_parts_that_do_not_fit_its_logits(change: dict, label: str) -> None:
    with pytest.raises((TypeError, ValueError), match=re.escape(label)):
        HeadTrace(**{**_trace_parts(), **change})


def test_head_trace_without_attention_is_accepted() -> None:
    assert HeadTrace(**{**_trace_parts(), "attention": []}).attention == ()


def test_timing_refuses_a_name_that_is_not_a_str_or_a_tuple() -> None:
    from course_utils.bench.timing import Timing

    with pytest.raises(TypeError, match=r"Timing\.name must be a str or a tuple, got list"):
        Timing(["a"], 1e-3, 1.0, [1e-3])
    assert Timing((16, True), 1e-3, 1.0, [1e-3]).name == (16, True)  # lesson 07's (N, cached) rows


@pytest.mark.parametrize("cls_name", ["ablation.Evaluation", "patching.EvaluationAt"])
def test_evaluation_refuses_a_score_of_the_wrong_arity(cls_name: str) -> None:
    module, name = cls_name.split(".")
    cls = getattr(importlib.import_module(f"course_utils.interp.{module}"), name)
    extra = {"positions": torch.zeros(1, dtype=torch.long)} if name == "EvaluationAt" else {}
    with pytest.raises(TypeError, match=rf"{name}\.score .* cannot take 1"):
        cls(tokens=torch.zeros(1, 3, dtype=torch.long), score=lambda: {}, **extra)
    assert "runs when the evaluation does" in " ".join(cls.__doc__.split()) or name == "EvaluationAt"


@pytest.mark.parametrize(("change", "label"), [
    ({"article": {}}, "WorkedExample.article must hold the printed steps"),
    ({"people": ()}, "WorkedExample.people must hold at least one item"),
    ({"features": ("a",)}, "WorkedExample.x must be (people, features)"),
])
def test_worked_example_refuses_parts_that_do_not_fit(change: dict, label: str) -> None:
    from course_utils.tasks.worked_example import load_worked_example

    with pytest.raises(ValueError, match=re.escape(label)):
        dataclasses.replace(load_worked_example(), **change)


@pytest.mark.parametrize(("change", "label"), [
    ({"weights": np.full(5, np.nan)}, "CheapExpansion.weights"),
    ({"head_outputs": np.zeros((5, 1))}, "CheapExpansion.head_outputs"),
    ({"products": np.zeros(3)}, "CheapExpansion.products"),
    ({"positions": (0, 9)}, "CheapExpansion.positions"),
])
def test_cheap_expansion_refuses_arrays_that_do_not_fit(change: dict, label: str) -> None:
    from course_utils.tasks.worked_example import load_worked_example

    with pytest.raises(ValueError, match=re.escape(label)):
        dataclasses.replace(load_worked_example().cheap, **change)


def test_lookup_batch_documents_its_check_and_a_model_function_names_a_bad_field() -> None:
    """LookupBatch checks its dtypes and shapes when built (fix45a); _replace checks them too
    (fix48rt), naming the field."""
    from course_utils.tasks import two_relations as tr

    assert "int64 and of shapes that fit each other" in " ".join(tr.__doc__.split())
    task = tr.TwoKeyTask()
    model = tr.LookupModel(task, num_heads=1, d_model=8, hidden=8)
    batch = task.sample(4, generator=torch.Generator().manual_seed(0))
    with pytest.raises((TypeError, ValueError), match=r"LookupBatch\.item_keys"):
        tr.evaluate(model, batch._replace(item_keys=batch.item_keys.float()))


def test_kept_run_is_internal_as_documented() -> None:
    from course_utils.interp import ablation

    assert "KeptRun" not in ablation.__all__
    assert "checked when built" in " ".join(ablation.KeptRun.__doc__.split())  # since battery 16


@pytest.mark.parametrize("symbolic", [(), ("B", "T")])
def test_trace_step_refuses_symbolic_names_that_do_not_match_its_shape(symbolic: tuple) -> None:
    with pytest.raises(ValueError, match=r"TraceStep\.symbolic must name each of the 1 dims"):
        TraceStep("x", "x", symbolic, (2,), 0, True)


def test_raised_takes_any_exception_class_name_as_documented() -> None:
    from course_utils.exercises.answers import Raised

    assert Raised("MyOwnError", "m").kind == "MyOwnError"
    assert "any identifier" in " ".join(Raised.__doc__.split())
    with pytest.raises(ValueError, match=r"Raised\.kind"):
        Raised("Value Error", "m")
