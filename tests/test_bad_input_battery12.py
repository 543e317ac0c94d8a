"""Battery 12's silent and obscure cases in the Python API (issue 38): each bad call now raises
with the argument's (or field's) name, what was expected and what arrived, and the valid call
beside it still works."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention import shapes
from course_utils.attention import validation as V
from course_utils.bench import decode_step as DS
from course_utils.bench import gqa_speed as GS
from course_utils.bench import memory as MEM
from course_utils.bench import timing as TI
from course_utils.exercises import answers as ANS
from course_utils.exercises import autograde as AG
from course_utils.exercises import cases as CASES
from course_utils.exercises import sandbox as SB
from course_utils.exercises import your_attention as YA
from course_utils.model import train as TRN
from course_utils.model import transformer as TF
from course_utils.tasks import synthetic as SY
from course_utils.tasks import worked_example as WE

NAN = float("nan")

# -- 1. result records: one shared check (validation.check_record) ------------------------------
RUN = YA.ModelRun(torch.zeros(1, 2, 3), 1.0, 1.0)  # a valid run, for the records that hold one
RECORD_CASES = [
    Case("AttentionMacs/neg", lambda: shapes.AttentionMacs(-3, 3, 3, 3), ValueError,
         ["AttentionMacs.qkv_projections", "int >= 0", "-3"]),
    Case("AttentionMacs/str", lambda: shapes.AttentionMacs(3, "3", 3, 3), TypeError,
         ["AttentionMacs.scores", "int", "str '3'"]),
    Case("AttentionMacs/none", lambda: shapes.AttentionMacs(3, 3, None, 3), TypeError,
         ["AttentionMacs.attend", "int", "NoneType"]),
    Case("AttentionMacs/nan", lambda: shapes.AttentionMacs(3, 3, 3, NAN), TypeError,
         ["AttentionMacs.output_projection", "int", "float nan"]),
    Case("ShapeTrace/sizes int", lambda: shapes.ShapeTrace(3), TypeError,
         ["ShapeTrace.sizes", "dict", "int 3"]),
    Case("ShapeTrace/diff bool", lambda: shapes.ShapeTrace({"B": 1}, max_abs_diff=True), TypeError,
         ["ShapeTrace.max_abs_diff", "real number", "bool True"]),
    Case("ShapeTrace/tensors", lambda: shapes.ShapeTrace({"B": 1}, tensors={"x": 3}), TypeError,
         ["ShapeTrace.tensors['x']", "Tensor", "int 3"]),
    Case("StepRow/bool", lambda: DS.StepRow(True, 16, 1, 3, 3), TypeError,
         ["StepRow.batch", "int", "bool True"]),
    Case("StepRow/str", lambda: DS.StepRow(1, "3", 1, 3, 3), TypeError, ["StepRow.context", "str '3'"]),
    Case("StepRow/sample neg", lambda: DS.StepRow(1, 3, 1, 3, 3, [0.1, -1.0]), ValueError,
         ["StepRow.samples_s[1]", "> 0", "-1.0"]),
    Case("DecodeRow/bool", lambda: GS.DecodeRow(1, True), TypeError, ["DecodeRow.cache_bytes", "bool"]),
    Case("DecodeRow/samples nan", lambda: GS.DecodeRow(1, 3, {"sdpa": [NAN]}), ValueError,
         ["DecodeRow.samples_s['sdpa'][0]", "finite", "nan"]),
    Case("DecodeRow/samples list", lambda: GS.DecodeRow(1, 3, [0.1]), TypeError,
         ["DecodeRow.samples_s", "dict", "list"]),
    Case("NotebookMemory/str", lambda: MEM.NotebookMemory("x", "0.1", 1.0), TypeError,
         ["NotebookMemory.peak_mb", "real number", "str '0.1'"]),
    Case("NotebookMemory/neg", lambda: MEM.NotebookMemory("x", 0.1, -1.0), ValueError,
         ["NotebookMemory.seconds", ">= 0", "-1.0"]),
    Case("NotebookMemory/cells", lambda: MEM.NotebookMemory("x", 0.1, 1.0, cells="abc"), TypeError,
         ["NotebookMemory.cells", "list of CellTime", "str 'abc'"]),
    Case("NotebookMemory/cells bools", lambda: MEM.NotebookMemory("x", 0.1, 1.0, cells=[True]), TypeError,
         ["NotebookMemory.cells[0]", "CellTime", "bool True"]),
    Case("NotebookMemory/error", lambda: MEM.NotebookMemory("x", 0.1, 1.0, error=None), TypeError,
         ["NotebookMemory.error", "str", "NoneType"]),
    Case("CellTime/bool", lambda: MEM.CellTime(True, 0.5, "x"), TypeError, ["CellTime.index", "bool"]),
    Case("CellTime/nan", lambda: MEM.CellTime(1, NAN, "x"), ValueError,
         ["CellTime.seconds", "finite", "nan"]),
    Case("History/task", lambda: TRN.History(task=5), TypeError, ["History.task", "str", "int 5"]),
    Case("History/steps str", lambda: TRN.History("t", steps="3"), TypeError,
         ["History.steps", "list of int", "str '3'"]),
    Case("History/loss nan", lambda: TRN.History("t", loss=[NAN]), ValueError,
         ["History.loss[0]", "finite", "nan"]),
    Case("ModelRun/accuracy", lambda: YA.ModelRun(torch.zeros(1, 2, 3), "x", 1.0), TypeError,
         ["ModelRun.accuracy", "real number", "str 'x'"]),
    Case("ModelRun/logits none", lambda: YA.ModelRun(None, 1.0, 1.0), TypeError,
         ["ModelRun.logits", "Tensor", "NoneType"]),
    Case("ModelRun/logits 1-D", lambda: YA.ModelRun(torch.zeros(3), 1.0, 1.0), ValueError,
         ["ModelRun.logits", "3-D", "(3)"]),
    Case("ModelRun/logits meta", lambda: YA.ModelRun(torch.zeros(1, 2, 3, device="meta"), 1.0, 1.0),
         ValueError, ["ModelRun.logits", "meta"]),
    Case("SwapReport/tokens", lambda: YA.SwapReport(None, "ab", torch.ones(1, 2), RUN, None),
         TypeError, ["SwapReport.tokens", "Tensor", "str 'ab'"]),
    Case("SwapReport/yours", lambda: YA.SwapReport(None, torch.zeros(1, 2), torch.ones(1, 2), RUN, "x"),
         TypeError, ["SwapReport.yours", "ModelRun", "str 'x'"]),
    Case("Outcome/kind", lambda: SB.Outcome(5), ValueError,
         ["Outcome.kind", "'value', 'raised', 'refused', 'lost'", "int 5"]),
    Case("Outcome/stub", lambda: SB.Outcome("value", stub="yes"), TypeError,
         ["Outcome.stub", "True or False", "str 'yes'"]),
    Case("Outcome/error", lambda: SB.Outcome("raised", error=None), TypeError,
         ["Outcome.error", "tuple (str, str)", "NoneType"]),
    Case("Outcome/used", lambda: SB.Outcome("value", used=b"x"), TypeError, ["Outcome.used", "bytes"]),
    Case("Outcome/inputs_after str", lambda: SB.Outcome("value", inputs_after="ab"), TypeError,
         ["Outcome.inputs_after", "list", "str 'ab'"]),
    Case("Outcome/inputs_after int item", lambda: SB.Outcome("value", inputs_after=[5]), TypeError,
         ["Outcome.inputs_after[0]", "Tensor", "ndarray", "int 5"]),
    Case("Outcome/inputs_after list of str", lambda: SB.Outcome("value", inputs_after=[["x"]]), TypeError,
         ["Outcome.inputs_after[0]", "a list of", "list ['x']"]),
    Case("Run/outcomes", lambda: SB.Run(None), TypeError, ["Run.outcomes", "list", "NoneType"]),
    Case("Run/defined", lambda: SB.Run([], defined=5), TypeError, ["Run.defined", "tuple", "int 5"]),
    Case("Raised/kind", lambda: ANS.Raised(5, "m"), TypeError, ["Raised.kind", "str", "int 5"]),
    Case("RatioSpread/baseline", lambda: TI.RatioSpread("x", None, 1.0, 0.9, 1.1, 0.8, 1.2, 1), TypeError,
         ["RatioSpread.baseline", "str", "NoneType"]),
]


@pytest.mark.parametrize("case", RECORD_CASES, ids=lambda c: c.name)
def test_result_records_refuse_bad_fields(case):
    assert_named(case)


def test_result_records_keep_valid_values():
    """NumPy numbers, None where the annotation allows it, and the NaN a field documents still go in."""
    assert shapes.AttentionMacs(np.int64(3), 3, 0, 3).total == 9
    assert math.isnan(shapes.ShapeTrace({"B": 1}).max_abs_diff)  # not compared yet
    assert DS.StepRow(1, 16, 1, 3, 64, [np.float64(0.5), 1]).best_s == 0.5
    failed = MEM.NotebookMemory("x", None, 0.5, "RuntimeError: x", [MEM.CellTime(0, 0.1, "")])
    assert failed.verdict == "not measured"
    history = TRN.History("t", eval_steps=[1], eval_metrics=[{"acc": NAN, "logit_diff": -1.0}],
                          target_metric="logit_diff", target=-0.5)
    assert history.metric("logit_diff") == [-1.0]
    assert math.isnan(YA.ModelRun(torch.zeros(1, 2, 3), 0.5, NAN).loss)  # a learner's NaN output
    after = [torch.ones(2), np.zeros(2), [torch.ones(1)], None]
    assert SB.Outcome("value", inputs_after=after).inputs_after is after
    forged = SB._outcome({"kind": "value", "value": 1, "after": [5, "x", [1], {"__tensor__": torch.ones(2)}]})
    assert forged.inputs_after[:3] == [None, None, None]  # what the answer's process forged: dropped
    assert torch.equal(forged.inputs_after[3], torch.ones(2))
    run = SB.Run([[SB.Outcome("raised", error=["ValueError", "m"])]], lost=None)
    assert run.outcomes[0][0].kind == "raised"



# -- 2. AgreementTask.max_len, InductionTask periods, subject_position ---------------------------
TASK_CASES = [
    *(Case(f"AgreementTask/max_len {v!r}", lambda v=v: SY.AgreementTask(max_len=v), error,
           ["max_len", "int", repr(v)])
      for v, error in ((-3, ValueError), (True, TypeError), (2.5, TypeError), ("3", TypeError),
                       (NAN, TypeError), (None, TypeError))),
    *(Case(f"InductionTask/{name} {v!r}", lambda name=name, v=v: SY.InductionTask(**{name: v}), TypeError,
           [name, "list of ints", shown])
      for name in ("train_periods", "heldout_periods")
      for v, shown in ((3, "int 3"), (True, "bool True"), (2.5, "float 2.5"), (np.int64(3), "int64"),
                       (torch.tensor(2), "shape ()"))),
    Case("subject_position/float", lambda: SY.subject_position(torch.zeros(3)), ValueError,
         ["tokens", "1-D tensor of token ids", "torch.float32", "(3)"]),
    Case("subject_position/2-D", lambda: SY.subject_position(torch.zeros(2, 3, dtype=torch.long)), ValueError,
         ["tokens", "1-D", "(2, 3)"]),
    Case("subject_position/str", lambda: SY.subject_position("the cat is"), TypeError,
         ["tokens", "1-D tensor", "str 'the cat is'"]),
    Case("subject_position/meta",
         lambda: SY.subject_position(torch.zeros(3, dtype=torch.long, device="meta")), ValueError,
         ["tokens", "meta"]),
]


@pytest.mark.parametrize("case", TASK_CASES, ids=lambda c: c.name)
def test_task_fields_refused_when_made(case):
    assert_named(case)


def test_task_controls_still_work():
    assert SY.AgreementTask(max_len=np.int64(20)).max_len == 20
    task = SY.InductionTask(train_periods=[2, 3], heldout_periods=np.array([5]))
    assert list(task.heldout_periods) == [5]
    assert SY.subject_position(SY.tokenize("the cat is")) == 2


# -- 3. validators' own flags ---------------------------------------------------------------------
@pytest.mark.parametrize("flag", [1, "yes", None, torch.tensor(True)], ids=repr)
def test_validator_flags_must_be_bools(flag):
    with pytest.raises(TypeError, match="check_real's finite .for x. must be True or False"):
        V.check_real(3.0, "x", finite=flag)
    with pytest.raises(TypeError, match="check_positive_number's allow_inf .for x. must be True or False"):
        V.check_positive_number(3.0, "x", allow_inf=flag)
    assert V.check_real(float("inf"), "x", finite=False) == float("inf")
    assert V.check_positive_number(float("inf"), "x", allow_inf=True) == float("inf")


# -- 4. copy_module, flush_note's multiple -------------------------------------------------------
@pytest.mark.parametrize("value", [5, None, "model"], ids=repr)
def test_copy_module_refuses_a_non_module(value):
    with pytest.raises(TypeError, match=r"module must be a torch.nn.Module to copy, got "):
        CASES.copy_module(value)
    layer = torch.nn.Linear(2, 2)
    assert CASES.copy_module(layer).weight is not layer.weight


def test_flush_multiple_is_bounded_everywhere():
    for call in (lambda: DS.flush_note(2**20, multiple=10**13), lambda: DS.flush_bytes(10**13)):
        with pytest.raises(ValueError, match=rf"multiple must be an int in 1..{DS.MAX_FLUSH_MULTIPLE}, "
                                             r"got 10000000000000"):
            call()
    llc = DS.last_level_cache_bytes()[0]
    note = DS.flush_note(2**10, multiple=4)  # 1 KiB: no longer shown as "0 MiB"
    assert note is None if 2**10 >= 4 * llc else "flush capped at 0.000977 MiB" in note


# -- 5. MLP sizes, refused before allocating -----------------------------------------------------
@pytest.mark.parametrize("d_model, d_mlp, error, words", [
    (-3, 8, ValueError, ["d_model", "positive int", "-3"]),
    (True, 8, TypeError, ["d_model", "int", "bool True"]),
    (8, 2.5, TypeError, ["d_mlp", "int", "float 2.5"]),
    (8, "3", TypeError, ["d_mlp", "int", "str '3'"]),
    (8, None, TypeError, ["d_mlp", "int", "NoneType"]),
    (8, 10**13, ValueError, ["d_mlp", "GiB", "more than this machine"]),
], ids=lambda v: repr(v)[:12])
def test_mlp_sizes_checked(d_model, d_mlp, error, words):
    assert_named(Case("MLP", lambda: TF.MLP(d_model, d_mlp), error, words))
    assert TF.MLP(np.int64(4), 8).fc_in.out_features == 8


# -- 8. NumPy seeds -----------------------------------------------------------------------------
def test_numpy_seeds_accepted_like_python_ints():
    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    converted = TF.convert_model(model, 1, seed=np.int64(2))
    again = TF.convert_model(model, 1, seed=2)
    assert all(torch.equal(a, b) for a, b in zip(converted.state_dict().values(),
                                                 again.state_dict().values(), strict=True))
    decoder = DS.SmallDecoder(64, 2, 1, 1, context=8, seed=np.int64(2), attention="course")
    assert decoder.d_model == 64
    with pytest.raises(TypeError, match="seed must be an int"):
        DS.SmallDecoder(64, 2, 1, 1, context=8, seed=2.0, attention="course")


# -- 9. describe_device, Block(config), head_sets, subject_position, check_rows/check_ids bounds --
HELPER_CASES = [
    *(Case(f"describe_device/{v!r}", lambda v=v: V.describe_device(v), TypeError,
           ["describe_device needs a tensor", type(v).__name__]) for v in ([1, 2], None, "x")),
    *(Case(f"Block/{v!r}", lambda v=v: TF.Block(v), TypeError, ["config", "ModelConfig", type(v).__name__])
      for v in (5, None, "x")),
    Case("check_rows/size str", lambda: V.check_rows([0, 1], "rows", size="3"), TypeError,
         ["check_rows's size", "int", "str '3'"]),
    Case("check_rows/size nan", lambda: V.check_rows([0, 1], "rows", size=NAN), TypeError,
         ["check_rows's size", "float nan"]),
    Case("check_ids/high str", lambda: V.check_ids(torch.tensor([1]), "ids", high="3"), TypeError,
         ["check_ids's high", "int", "str '3'"]),
    Case("check_ids/high nan", lambda: V.check_ids(torch.tensor([1]), "ids", high=NAN), TypeError,
         ["check_ids's high", "float nan"]),
    *(Case(f"check_tensor_list/stacked_ndim {v!r}",
           lambda v=v: V.check_tensor_list([torch.ones(2)], "parts", stacked_ndim=v), error,
           ["check_tensor_list's stacked_ndim (for parts)", repr(v)])
      for v, error in (("3", TypeError), (NAN, TypeError), (-3, ValueError), (True, TypeError))),
    Case("unseen_cases/salt None",
         lambda: AG.unseen_cases(AG.exercise_of("lesson02", "check_softmax_rows"), None), TypeError,
         ["salt", "int", "None"]),
    Case("same_raise/loose 1",
         lambda: ANS.same_raise(ANS.Raised("ValueError", "m"), "ValueError", "m", loose=1), TypeError,
         ["loose", "True or False", "int 1"]),
    Case("round_half_up/True", lambda: WE.round_half_up(True), TypeError, ["x", "number", "bool"]),
]


@pytest.mark.parametrize("case", HELPER_CASES, ids=lambda c: c.name)
def test_helpers_name_what_arrived(case):
    assert_named(case)


def test_helpers_controls():
    assert V.describe_device(torch.zeros(1)) == "device cpu"
    assert V.check_rows([0, 2], "rows", size=np.int64(3)).tolist() == [0, 2]
    assert V.check_ids(torch.tensor([0, 2]), "ids", high=3).tolist() == [0, 2]
    assert len(V.check_tensor_list(torch.ones(2, 3), "parts", stacked_ndim=2)) == 2
    assert ANS.same_raise(ANS.Raised("ValueError", "m"), "ValueError", "other", loose=True)
    assert WE.round_half_up(0.0105) == pytest.approx(0.011)


def test_measure_zeroed_sets_names_head_sets():
    from course_utils.interp import patching as P

    model = TF.TinyTransformer(TF.ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    tokens = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    evaluation = P.Evaluation(tokens, lambda logits: {"mean": float(logits.mean())})
    with pytest.raises(TypeError, match=r"head_sets must be a list of head sets, .* got NoneType None"):
        P.measure_zeroed_sets(model, evaluation, None)
    assert len(P.measure_zeroed_sets(model, evaluation, [[(0, 1)], []])) == 2


# -- 10. explorers answer an unknown keyword with a message --------------------------------------
@pytest.mark.slow  # the first explorer of a process takes seconds (ipywidgets)
def test_dimension_explorer_names_its_sliders(capsys):
    from course_utils.interp import widgets as W

    explorer = W.show_dimension_explorer(zzz=3, batch=2)
    message = explorer.last_text
    assert "zzz=3" in message and all(k in message for k in ("batch", "seq_len", "d_model", "num_heads"))
    assert "zzz=3 is not a slider" in capsys.readouterr().out


# -- 11. parallel_map with an endless or huge iterable -------------------------------------------
@pytest.mark.parametrize("items, shown", [(itertools.count(), "more (a count"),
                                          (range(10**13), "10,000,000,000,000")], ids=["endless", "huge"])
def test_parallel_map_refuses_too_many_jobs(items, shown):
    from course_utils.parallel import MAX_JOBS, parallel_map

    wanted = rf"items must hold at most {MAX_JOBS:,} jobs, got {re.escape(shown)}"
    with pytest.raises(ValueError, match=wanted):
        parallel_map(abs, items, timeout=2)
    assert parallel_map(abs, (x for x in (-1, -2)), workers=1) == [1, 2]


# -- 12. an answer returning a Tensor subclass is not compared as if plain -----------------------
class _Liar(torch.Tensor):
    """Battery 12's answer: every allclose/equal/isclose says "equal"."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        result = super().__torch_function__(func, types, args, kwargs or {})
        name = getattr(func, "__name__", "")
        if name in ("allclose", "equal"):
            return True
        if name == "isclose":
            return torch.ones_like(args[0], dtype=torch.bool)
        return result


def _attention_weights(q, k):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)


def test_tensor_subclass_answer_2_2_is_named_not_misdiagnosed():
    from course_utils.exercises import lesson02

    assert lesson02.check_attention_weights(_attention_weights).passed
    for answer in (lambda q, k: (_attention_weights(q, k) * 0 + 7).as_subclass(_Liar),
                   lambda q, k: _attention_weights(q, k).as_subclass(_Liar)):  # right values, still a liar
        feedback = lesson02.check_attention_weights(answer)
        assert not feedback.passed and feedback.mistake is None
        assert "class _Liar, a subclass of torch.Tensor" in feedback.message
        assert "sqrt(d_k)" not in feedback.message
    parameter = lesson02.check_attention_weights(lambda q, k: torch.nn.Parameter(_attention_weights(q, k)))
    assert parameter.passed  # nn.Parameter does not redefine the comparisons


def test_tensor_subclass_answer_4_3_and_inside_a_tuple():
    from course_utils.exercises import lesson04

    feedback = lesson04.check_mha_forward(lambda *a, **k: (torch.full((2,), 7.0).as_subclass(_Liar), None))
    assert not feedback.passed
    assert "class _Liar, a subclass of torch.Tensor inside the tuple" in feedback.message


@pytest.mark.slow
def test_tensor_subclass_answer_named_by_every_check():
    import importlib

    for n in range(1, 8):
        module = importlib.import_module(f"course_utils.exercises.lesson0{n}")
        for name in sorted(k for k in vars(module) if k.startswith("check_")):
            feedback = getattr(module, name)(lambda *a, **k: torch.full((2,), 7.0).as_subclass(_Liar))
            assert not feedback.passed and "a subclass of torch.Tensor" in feedback.message, (name, feedback)
