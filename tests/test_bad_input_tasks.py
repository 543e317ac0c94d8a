"""Bad input to the training tasks: course_utils.tasks.synthetic (InductionTask, AgreementTask,
MixtureTask and their batches), two_relations (TwoKeyTask, LookupBatch, train_lookup, RunResult,
plots) and worked_example (load_worked_example, compute_steps). Batches inconsistent with their
fields, sizes beyond memory, meta or NaN models, repeated templates and malformed example files.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from bad_input_cases import BEYOND_FLOAT, Case, assert_named, meta_copy, raises_naming, refused, small_model

from course_utils.attention import validation as V
from course_utils.attention import validation as va
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.naive_mha import stack_head_weights
from course_utils.attention.shapes import parameter_table, peak_allocated_bytes, trace_shapes
from course_utils.bench import gqa_speed, mha_speed, timing
from course_utils.exercises import answers as ANS
from course_utils.interp.patching import flip_subject_number
from course_utils.model.train import AGREEMENT_TASK, evaluate_agreement, evaluate_induction
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks import synthetic as SY
from course_utils.tasks import synthetic as syn
from course_utils.tasks import two_relations, worked_example
from course_utils.tasks import two_relations as tr
from course_utils.tasks import worked_example as WE
from course_utils.tasks import worked_example as we
from course_utils.tasks.synthetic import (
    AgreementBatch,
    AgreementTask,
    InductionBatch,
    InductionTask,
    MixtureBatch,
    MixtureTask,
    agreement_accuracy,
    agreement_margins,
    detokenize,
    induction_accuracy,
)
from course_utils.tasks.two_relations import (
    LookupBatch,
    LookupModel,
    RunResult,
    TwoKeyTask,
    pair_class,
    swap_chance,
    swap_fraction,
)
from course_utils.tasks.worked_example import (
    Table,
    WorkedExampleError,
    compute_steps,
    load_worked_example,
    parse_worked_example,
    side_by_side,
)

# -- battery 5 ---------------------------------------------------------------------------------------

SM = small_model()


TOK = torch.tensor([[1, 2, 3, 4, 1, 2]])


def _mkfifo(tmp_path):
    path = tmp_path / "w.json"
    os.mkfifo(path)
    return path


def test_the_controls_beside_the_refused_calls_still_work():
    assert V.check_int(3, "x", minimum=1, maximum=5) == 3
    V.check_fits_in_memory(0, "buf")
    assert ModelConfig(vocab_size=10, max_len=8, mlp=True, d_mlp=32).mlp_width == 32
    assert SM.embed(TOK[:, :2], start=6).shape == (1, 2, 8)  # positions 6, 7: the last two
    assert SY.tokenize("the cat", add_bos=False).tolist() == SY.tokenize("the cat")[1:].tolist()
    assert WE.round_half_up(0.0105) == 0.011 and WE.round_half_up([1, 2]).tolist() == [1.0, 2.0]
    assert SY.InductionTask(train_periods=(2, 3)).train_periods == (2, 3)


def test_load_worked_example_names_a_fifo_without_reading_it(tmp_path):
    with pytest.raises(WE.WorkedExampleError, match=r"which is a FIFO \(named pipe\)"):
        WE.load_worked_example(_mkfifo(tmp_path))


# -- battery 6 (tasks) -------------------------------------------------------------------------------

@pytest.mark.parametrize("field", ["train_periods", "heldout_periods"])
def test_induction_task_refuses_period_one(field):
    periods = {"train_periods": (1, 2), "heldout_periods": (1,)}
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask(**{field: periods[field]})
    assert InductionTask(train_periods=(2, 3), heldout_periods=(5,)).train_periods == (2, 3)


def test_induction_sample_refuses_period_one():
    with pytest.raises(ValueError, match="every period must be at least 2.*got 1"):
        InductionTask().sample(2, torch.Generator().manual_seed(0), periods=(1,))


@pytest.mark.parametrize("heldout", ["y", 1, None])
def test_eval_batch_heldout_must_be_a_bool(heldout):
    with pytest.raises(TypeError, match="heldout"):
        InductionTask().eval_batch(4, heldout=heldout)


def test_induction_accuracy_names_a_batch_of_the_wrong_type():
    with pytest.raises(TypeError, match="batch must be an InductionBatch.*got int"):
        induction_accuracy(torch.randn(4, 32, 64), 5)


def test_agreement_task_refuses_a_repeated_template():
    with pytest.raises(ValueError, match=r"templates must list each template once.*repeats \['simple'\]"):
        AgreementTask(templates=("simple", "simple"))


def test_mixture_task_refuses_sentences_longer_than_the_induction_sequences():
    with pytest.raises(ValueError, match="agreement.max_len must be at most induction.seq_len=32.*got 40"):
        MixtureTask(agreement=AgreementTask(max_len=40))
    batch = MixtureTask(agreement=AgreementTask(max_len=32)).sample(4, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (4, 32)


def test_pair_class_names_mismatched_shapes():
    with pytest.raises(ValueError, match=r"symbol_a and symbol_b must have the same shape.*"
                       r"\(2,\) and \(3,\)"):
        pair_class(torch.tensor([1, 2]), torch.tensor([0, 1, 2]), 8)
    assert pair_class(torch.tensor([1, 2]), torch.tensor([0, 3]), 8).tolist() == [8, 19]


@pytest.mark.parametrize("measure", [swap_fraction, swap_chance])
def test_swap_measures_refuse_an_empty_batch(measure):
    task = TwoKeyTask()
    model = LookupModel(task, 16, 2)
    empty = LookupBatch(*(t[:0] for t in task.sample(4, seed=0)))  # take refuses an empty selection
    with pytest.raises(ValueError, match="batch must hold at least one example.*0 examples"):
        measure(model, empty)


def test_worked_example_tables_refuse_negative_decimals():
    example = load_worked_example()
    step = sorted(compute_steps(example))[0]
    with pytest.raises(ValueError, match="decimals must be None or an int >= 0.*got -1"):
        example.x.frame(decimals=-1)
    with pytest.raises(ValueError, match="decimals must be None or an int >= 0.*got -1"):
        side_by_side(example, step, decimals=-1)
    with pytest.raises(TypeError, match="decimals must be an int, got bool"):
        example.x.frame(decimals=True)
    assert example.x.frame(decimals=0).shape == example.x.values.shape


@pytest.mark.parametrize("decimals", [16, 20])
def test_worked_example_decimals_above_range_quote_only_allowed_values(decimals):
    """Too many decimals: the message quoted the range -15..15, yet -15 is refused too; it now
    quotes 0..15, and both ends of that range are accepted."""
    example = load_worked_example()
    with pytest.raises(ValueError, match=rf"decimals must be None or an int in 0\.\.15, got {decimals}$"):
        side_by_side(example, "Q2", decimals=decimals)
    with pytest.raises(ValueError, match=rf"decimals must be None or an int in 0\.\.15, got {decimals}$"):
        example.x.frame(decimals=decimals)
    assert side_by_side(example, "Q2", decimals=15).shape == side_by_side(example, "Q2", decimals=0).shape


# -- battery 7 (a) -----------------------------------------------------------------------------------

# a GPU index no machine here has: on a CPU-only torch "no usable CUDA GPU", else "only N GPU(s)"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"


MHA = MultiHeadAttention(8, 2)


GQA = GroupedQueryAttention(8, 2, 1)


CASES = [
    # row 1 and its neighbour padding_mask: an absent device is named before torch asserts
    (lambda: causal_mask(3, device=MISSING_GPU), ValueError, ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=MISSING_GPU), ValueError,
     ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=3), TypeError, ["device", "int 3"]),
    (lambda: causal_mask(3, device="xpu"), ValueError, ["device", "'cpu'", "'xpu'"]),
    # rows 2-6: the public project_qkv checks its inputs as forward does
    (lambda: MHA.project_qkv(*[torch.ones(8)] * 3), ValueError, ["query", "3-D", "d_model=8", "(8)"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.int64)] * 3), TypeError,
     ["query", "floating-point", "torch.int64"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 5)] * 3), ValueError, ["query", "d_model=8", "(1, 3, 5)"]),
    (lambda: MHA.project_qkv([[1.0]], [[1.0]], [[1.0]]), TypeError, ["query", "torch.Tensor", "list"]),
    (lambda: MHA.project_qkv(*[np.ones((1, 3, 8), np.float32)] * 3), TypeError,
     ["query", "torch.Tensor", "ndarray"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(2, 3, 8), torch.ones(2, 3, 8)), ValueError,
     ["batch size B", "(1, 3, 8)", "(2, 3, 8)"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(1, 4, 8), torch.ones(1, 3, 8)), ValueError,
     ["key", "value", "Tk", "(1, 4, 8)"]),
    (lambda: GQA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    # row 7: one 2-D tensor where a list of per-head parts belongs is no longer cut into rows
    (lambda: stack_head_weights(*[torch.ones(4, 8)] * 3), ValueError,
     ["q_parts", "list of tensors", "3-D", "2-D", "(4, 8)"]),
    # row 8: fn is called with no arguments
    (lambda: peak_allocated_bytes(lambda a: a), TypeError, ["fn", "no arguments", "<lambda>(a)"]),
    # rows 9, 10: int for a bool flag
    (lambda: trace_shapes(MHA, torch.ones(1, 3, 8), keep_tensors=2), TypeError,
     ["keep_tensors", "True or False", "int 2"]),
    (lambda: trace_shapes(MHA, torch.ones(1, 3, 8)).format(code=2), TypeError,
     ["code", "True or False", "int 2"]),
    # rows 48-50: the worked example's helpers take labelled NumPy matrices
    (lambda: we.article_matmul([[1.0]], [[1.0]]), TypeError, ["a", "2-D NumPy array", "list"]),
    (lambda: we.article_matmul(np.ones(3), np.ones((3, 1))), ValueError, ["a", "2-D", "(3,)"]),
    (lambda: we.output_rounding_budget([[1.0]], [[1.0]]), TypeError, ["weights", "2-D NumPy array", "list"]),
    (lambda: we.output_rounding_budget(np.ones((2, 2)), [[1.0]]), TypeError, ["values", "list"]),
    (lambda: we.Table("t", np.ones((2, 2)), ("a",), ("b", "c")), ValueError,
     ["Table('t').values", "one row per row label", "(1, 2)", "(2, 2)"]),
    (lambda: we.Table("t", np.ones((1, 1)), ["a"], ("b",)), TypeError, ["rows", "tuple of strs", "list"]),
    (lambda: we.Table("t", np.array([["x"]]), ("a",), ("b",)), TypeError, ["values", "real numbers", "<U1"]),
]


@pytest.mark.parametrize("call, error, words", CASES)
def test_battery7_call_is_named(call, error, words):
    refused(call, error, words)


def test_the_worked_example_still_builds_its_tables():
    example = we.load_worked_example()
    assert we.compare_with_article(example)["verdict"].isin(["rounding", "inherited", "slip"]).all()
    assert we.Table("t", np.ones((1, 2)), ("a",), ("b", "c")).frame().shape == (1, 2)


# -- battery 7 (b) -----------------------------------------------------------------------------------

# -- task metrics: logits of another vocabulary or of integers (rows 44-47) ----------------------
def _metric_cases() -> list[Case]:
    from course_utils.tasks import synthetic as SY

    induction = SY.InductionTask().eval_batch(4)
    sentences = SY.AgreementTask().eval_batch(4)
    B, T = sentences.tokens.shape
    largest = int(induction.tokens.max())
    return [
        Case("induction_accuracy V=10", lambda: SY.induction_accuracy(torch.randn(4, 32, 10), induction),
             ValueError, ["logits", f"up to {largest}", "V = 10"]),
        Case("induction_accuracy int64",
             lambda: SY.induction_accuracy(torch.ones(4, 32, 64, dtype=torch.long), induction),
             TypeError, ["logits", "floating-point", "torch.int64"]),
        Case("agreement_margins V=5", lambda: SY.agreement_margins(torch.randn(B, T, 5), sentences),
             ValueError, ["logits", f"up to {len(SY.AGREEMENT_VOCAB) - 1}", "V = 5"]),
        Case("agreement_accuracy V=5", lambda: SY.agreement_accuracy(torch.randn(B, T, 5), sentences),
             ValueError, ["logits", "V = 5"]),
        Case("agreement_accuracy int32",
             lambda: SY.agreement_accuracy(torch.ones(B, T, 70, dtype=torch.int32), sentences),
             TypeError, ["logits", "floating-point", "torch.int32"]),
        Case("agreement_margins batch=3", lambda: SY.agreement_margins(torch.randn(B, T, 70), 3),
             TypeError, ["batch", "AgreementBatch", "int"]),
    ]


@pytest.mark.parametrize("case", _metric_cases(), ids=lambda c: c.name)
def test_task_metrics_refuse_logits_that_cannot_score_the_batch(case):
    assert_named(case)


def test_task_metrics_still_score_logits_of_the_right_vocabulary():
    from course_utils.tasks import synthetic as SY

    induction = SY.InductionTask().eval_batch(4)
    sentences = SY.AgreementTask().eval_batch(4)
    perfect = torch.nn.functional.one_hot(induction.tokens.roll(-1, dims=1), 64).float()
    assert SY.induction_accuracy(perfect, induction) == 1.0
    assert 0.0 <= SY.agreement_accuracy(torch.randn(*sentences.tokens.shape, 70), sentences)["all"] <= 1.0


# -- battery 9 ---------------------------------------------------------------------------------------

def test_the_loosened_and_kept_rules_still_accept_what_they_should():
    """What the new refusals leave alone: 'cpu' and 'cpu:0', distinct values (NaN once, lists),
    an explicit tensor of parts, infinity where allowed, unequal NaN-free edits."""
    assert va.check_device("cpu") == torch.device("cpu") and va.check_device("cpu:0").type == "cpu"
    assert va.check_distinct([1.0, math.nan, 2.0], "xs")[0] == 1.0
    assert va.check_distinct([[1], [2]], "xs") == [[1], [2]]
    assert len(va.check_tensor_list(torch.ones(3, 2, 2), "parts", stacked_ndim=3)) == 3
    assert va.check_positive_number(math.inf, "timeout", allow_inf=True) == math.inf
    heads = torch.full((1, 2, 3, 4), math.nan)  # NaN in, NaN out: not the edit's doing
    assert va.check_edited_heads(heads.clone(), heads) is not heads
    budget = worked_example.output_rounding_budget(np.eye(2), np.ones((2, 3)))
    assert budget.shape == (2, 3) and np.isfinite(budget).all()
    spread = timing.RatioSpread("a", "b", 2.0, 1.8, 2.2, 1.5, 2.5, 5)
    assert spread.verdict().startswith("a: slower than b")
    assert parameter_table(8, [1, 2]).index.tolist() == [1, 2]


# -- 2. obscure: huge sizes, wrong names, raw torch errors, CLI tracebacks ---------------------
def _sweep_huge():
    return mha_speed.sweep_mha("seq_len", [10**7], repeats=1)


def _relations_huge():
    return two_relations.RelationsConfig(batch_size=10**10)


def _time_cold_huge():
    return gqa_speed.time_cold({"a": lambda: 1}, baseline="a", repeats=2, warmup=0, flush_bytes=2**50)


@pytest.mark.parametrize("call, argument", [(_sweep_huge, "seq_len"), (_relations_huge, "batch_size"),
                                            (_time_cold_huge, "flush_bytes")],
                         ids=["sweep_mha seq_len", "RelationsConfig batch_size", "time_cold flush_bytes"])
def test_a_size_beyond_memory_is_refused_under_its_own_name(call, argument):
    with pytest.raises(ValueError) as refused:
        call()
    message = str(refused.value)
    assert message.startswith(f"{argument} asks for ") and "GiB" in message, message
    assert "of memory" in message, message


# -- 4. raw Python errors from public helpers --------------------------------------------------
def _binary_worked_example(tmp_path):
    path = tmp_path / "garbage.json"
    path.write_bytes(bytes([0xC3, 0x28]) * 100)
    return lambda: worked_example.load_worked_example(path)


def test_load_worked_example_of_a_binary_file_is_named(tmp_path):
    with pytest.raises(worked_example.WorkedExampleError) as refused:
        _binary_worked_example(tmp_path)()
    assert "garbage.json is not a JSON text file (UTF-8)" in str(refused.value), str(refused.value)


# -- battery 10 --------------------------------------------------------------------------------------

HUGE = 10**12


# -- 2. learner-facing helpers name the argument, what they expected and what arrived ------------
TASK = tr.TwoKeyTask()


MODEL = tr.LookupModel(TASK, 16, 2)


BATCH = TASK.sample(4, seed=0)


def test_learner_facing_helpers_still_accept_good_input():
    assert AgreementTask(attractor_p=1, adjective_p=0.0).attractor_p == 1
    assert MixtureTask(induction_share=0.25).induction_share == 0.25
    assert detokenize((0, 1)) == detokenize(torch.tensor([0, 1]))
    assert len(tr.evaluate(MODEL, BATCH)) == 3
    assert len(tr.example_table(BATCH, 3)) == TASK.num_items
    assert tr.share_on_a(MODEL, BATCH).shape == (4,)
    assert trace_shapes(MultiHeadAttention(8, 2), torch.ones(2, 4, 8)).steps


@pytest.mark.parametrize("task, words", [
    (tr.TwoKeyTask(num_keys=HUGE), ["task.num_keys asks for", "GiB"]),
    (tr.TwoKeyTask(num_symbols=10**7), ["task.num_symbols asks for", "GiB"]),
], ids=["num_keys", "num_symbols"])
def test_lookup_model_refuses_a_task_beyond_memory_before_allocating(task, words):
    refused(lambda: tr.LookupModel(task, 16, 2), ValueError, words)


def test_lookup_model_refuses_a_width_beyond_memory():
    refused(lambda: tr.LookupModel(TASK, HUGE, 2), ValueError, ["d_model asks for", "GiB"])


def test_two_key_task_refuses_more_symbols_than_an_int64_class_holds():
    """A class is a * V + b in torch.int64: V = 10**12 would wrap around silently."""
    from course_utils.tasks.two_relations import TwoKeyTask

    with pytest.raises(ValueError, match=r"num_symbols must be an int in 2\.\.3037000499, got 1000000000000"):
        TwoKeyTask(num_symbols=10**12)
    assert TwoKeyTask(num_symbols=3037000499).num_classes <= 2**63 - 1


# -- battery 11 --------------------------------------------------------------------------------------

def test_a_task_that_fits_still_blames_batch_size():
    from course_utils.tasks.synthetic import InductionTask

    task = InductionTask(vocab_size=10**6)
    refused(lambda: task.sample(HUGE, torch.Generator().manual_seed(0)), ValueError, ["batch_size", "GiB"])


# -- items 9, 10, 14, 16 and check_seed: arguments of the wrong kind are named when given ---------
def _kinds_cases():
    import numpy as np

    from course_utils.attention import validation as va
    from course_utils.attention.hooks import HookPoint
    from course_utils.attention.shapes import measured_macs
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    model, batch = tr.LookupModel(task, 16, 1), task.sample(8, seed=0)
    return [
        ("add_hook module", lambda: HookPoint().add_hook(torch.nn.Linear(4, 4)), TypeError,
         ["a hook must be", "Linear.forward", "cannot take 2"]),
        ("measured_macs Linear", lambda: measured_macs(torch.nn.Linear(8, 8), torch.zeros(1, 2, 8)),
         TypeError, ["module must be", "MultiHeadAttention", "Linear"]),
        ("measured_macs torch MHA", lambda: measured_macs(torch.nn.MultiheadAttention(8, 2),
                                                          torch.zeros(1, 2, 8)),
         TypeError, ["module must be", "MultiheadAttention"]),
        ("accuracy_by_share edges None", lambda: tr.accuracy_by_share(model, batch, edges=None), TypeError,
         ["edges must be a list or tuple of numbers", "NoneType"]),
        ("accuracy_by_share edges str", lambda: tr.accuracy_by_share(model, batch, edges="ab"), TypeError,
         ["edges must be a list or tuple of numbers", "'ab'"]),
        ("accuracy_by_share edges item", lambda: tr.accuracy_by_share(model, batch, edges=(0.0, "a", 1.0)),
         TypeError, ["edges[1] must be a real number"]),
        ("check_int minimum str", lambda: va.check_int(3, "n", minimum="1"), TypeError,
         ["check_int's minimum", "n", "'1'"]),
        ("check_int maximum str", lambda: va.check_int(3, "n", maximum="10"), TypeError,
         ["check_int's maximum", "'10'"]),
        ("check_int minimum float", lambda: va.check_int(3, "n", minimum=0.5), TypeError,
         ["check_int's minimum", "0.5"]),
        ("check_int_list minimum str", lambda: va.check_int_list([1, 2], "xs", minimum="0"), TypeError,
         ["check_int's minimum", "xs"]),
        ("check_int_list empty, maximum str",
         lambda: va.check_int_list([], "xs", maximum="0", allow_empty=True), TypeError,
         ["check_int's maximum", "xs"]),
        ("check_seed np.float64", lambda: __import__("course_utils.env").env.check_seed(np.float64(1)),
         TypeError, ["seed must be an int"]),
    ]


KINDS = _kinds_cases()


@pytest.mark.parametrize("label, call, error, words", KINDS, ids=[c[0] for c in KINDS])
def test_wrong_kinds_are_named_when_given(label, call, error, words):
    refused(call, error, words)


# -- every table of the two-key task rounds to 0..MAX_DECIMALS digits, checked first ---------------
@pytest.mark.parametrize("digits, error", [(HUGE, ValueError), (-1, ValueError), ("3", TypeError)])
def test_two_relations_tables_check_digits(digits, error):
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    model, batch = tr.LookupModel(task, 16, 1), task.sample(8, seed=0)
    refused(lambda: tr.accuracy_by_share(model, batch, digits=digits), error, ["digits"])
    refused(lambda: tr.accuracy_table([], digits=digits), error, ["digits"])  # before the results


# -- battery 12 --------------------------------------------------------------------------------------

NAN = float("nan")


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


def test_helpers_controls():
    assert V.describe_device(torch.zeros(1)) == "device cpu"
    assert V.check_rows([0, 2], "rows", size=np.int64(3)).tolist() == [0, 2]
    assert V.check_ids(torch.tensor([0, 2]), "ids", high=3).tolist() == [0, 2]
    assert len(V.check_tensor_list(torch.ones(2, 3), "parts", stacked_ndim=2)) == 2
    assert ANS.same_raise(ANS.Raised("ValueError", "m"), "ValueError", "other", loose=True)
    assert WE.round_half_up(0.0105) == pytest.approx(0.011)


# -- battery 13 --------------------------------------------------------------------------------------

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


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

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


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

# -- task configs: a max_len no sentence fits is refused; fewer keys than items is documented --
def test_agreement_task_refuses_a_max_len_its_sentences_cannot_fit():
    from course_utils.tasks.synthetic import AgreementTask

    assert_named(Case("AgreementTask/max_len 3", lambda: AgreementTask(max_len=3), ValueError,
                      ["max_len=3", "longest sentence", "15 tokens", "max_len >= 15"]))
    assert_named(Case("AgreementTask/simple 6", lambda: AgreementTask(templates=("simple",), max_len=6),
                      ValueError, ["max_len=6", "7 tokens", "'simple'"]))
    task = AgreementTask(templates=("simple",), max_len=7)  # the bound is exact: the longest fits
    assert int(task.sample(500, torch.Generator().manual_seed(0)).lengths.max()) <= 7
    assert AgreementTask(templates=("simple",), adjective_p=0.0, opener_p=0.0, max_len=4).max_len == 4


def test_two_key_task_with_fewer_keys_than_items_does_what_its_docstring_says():
    from course_utils.tasks.two_relations import TwoKeyTask

    task = TwoKeyTask(num_items=8, num_keys=4)
    assert "num_keys`` may be below ``num_items" in TwoKeyTask.__doc__
    batch = task.sample(64, seed=0)
    asked_a, asked_b = batch.query_keys[:, :1], batch.query_keys[:, 1:]
    is_asked = (batch.item_keys == asked_a) | (batch.item_keys == asked_b)
    assert torch.equal(is_asked, batch.relation >= 0)  # asked-for keys only in their own copies
    assert int(batch.item_keys.max()) < 4


# -- battery 15 (fix45a) -----------------------------------------------------------------------------

_raises = raises_naming


# -- 1. worked example: Table and Head ----------------------------------------------------------------
@pytest.mark.parametrize(("field", "rows", "cols"), [("rows", ("a", "a"), ("b", "c")),
                                                       ("cols", ("a", "b"), ("c", "c"))])
def test_table_refuses_repeated_labels(field: str, rows, cols) -> None:
    _raises(ValueError, [f"Table('t').{field}", "distinct", "repeats"],
            lambda: we.Table("t", np.zeros((2, 2)), rows, cols))


def test_table_refuses_nan_values_naming_the_entry() -> None:
    values = np.zeros((2, 2))
    values[1, 0] = math.nan
    _raises(ValueError, ["Table('t').values", "finite", "(1, 0)"],
            lambda: we.Table("t", values, ("a", "b"), ("c", "d")))


def test_head_refuses_projections_that_disagree() -> None:
    head = we.load_worked_example().heads[0]
    renamed = tuple(f"r{i}" for i in range(len(head.w_k.rows)))
    other_rows = we.Table("k", head.w_k.values, renamed, head.w_k.cols)
    _raises(ValueError, ["Head(", ").w_k", "rows of Head.w_q"], lambda: replace(head, w_k=other_rows))
    narrow = we.Table("k", head.w_k.values[:, :1], head.w_k.rows, head.w_k.cols[:1])
    _raises(ValueError, [").w_k", "d_k", str(head.w_q.shape[1]), "got 1"], lambda: replace(head, w_k=narrow))


def test_worked_example_refuses_heads_and_w_o_that_disagree_with_features() -> None:
    example = we.load_worked_example()
    w_o = example.w_o
    short = we.Table("W_O", w_o.values[:-1], w_o.rows[:-1], w_o.cols)
    _raises(ValueError, ["WorkedExample.w_o", "sum of the heads' d_v", str(w_o.shape[0])],
            lambda: replace(example, w_o=short))


# -- 8. worked example: NaN after loading, deep JSON ----------------------------------------------------
@pytest.mark.parametrize("call", [we.compute_steps, we.recompute_from_article, we.compare_with_article])
def test_a_worked_example_changed_to_nan_is_named(call) -> None:
    example = we.load_worked_example()
    values = example.heads[1].w_v.values
    with pytest.raises(ValueError, match="read-only"):  # since battery 21 a Table keeps a read-only copy
        values[2, 1] = math.nan
    values.setflags(write=True)  # forced past that: the calls still name it
    values[2, 1] = math.nan
    _raises(we.WorkedExampleError, ["heads[1].w_v", "finite", "nan", "(2, 1)"], lambda: call(example))


def test_load_worked_example_refuses_json_nested_too_deep(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _raises(we.WorkedExampleError, ["deep.json", "too deeply"], lambda: we.load_worked_example(path))


def test_the_real_worked_example_still_loads() -> None:
    example = we.load_worked_example()
    assert json.loads(we.WORKED_EXAMPLE_PATH.read_text())["people"] == list(example.people)
    assert set(we.compute_steps(example)) >= set(we.PRINTED_STEPS)
    assert re.search(r"slip", " ".join(we.compare_with_article(example)["verdict"]))


# -- 1, 5, 6, 7. synthetic tasks ------------------------------------------------------------------------
def _agreement_batch():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(4, torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("change", "words"), [
    (lambda b: {"lengths": b.lengths + 50}, ["AgreementBatch.lengths", "row 0"]),
    (lambda b: {"verb_pos": b.lengths + 3}, ["AgreementBatch.verb_pos", "AgreementBatch.lengths", "row 0"]),
    (lambda b: {"verb_pos": torch.zeros_like(b.verb_pos), "lengths": torch.ones_like(b.lengths)},
     ["AgreementBatch.verb_pos", "1..T", "got 0"]),
    (lambda b: {"tokens": b.tokens[:, :2]}, ["AgreementBatch.verb_pos", "1..T = 1..2", "predict_pos"]),
    (lambda b: {"subject_pos": b.subject_pos - 50}, ["AgreementBatch.subject_pos", "AgreementBatch.lengths"]),
    (lambda b: {"correct_id": b.correct_id + 1000}, ["AgreementBatch.correct_id", "0..69"]),
    (lambda b: {"wrong_id": -b.wrong_id}, ["AgreementBatch.wrong_id", "0..69"]),
    (lambda b: {"tokens": b.tokens + 1000}, ["AgreementBatch.tokens", "0..69"]),
])
def test_agreement_batch_refuses_fields_that_do_not_fit_each_other(change, words: list[str]) -> None:
    batch = _agreement_batch()
    _raises(ValueError, words, lambda: replace(batch, **change(batch)))


def test_agreement_batch_still_takes_and_pads() -> None:
    from course_utils.tasks.synthetic import MixtureTask

    batch = _agreement_batch()
    assert len(batch.take([0, 2])) == 2
    cut = replace(batch, tokens=batch.tokens[:, : int(batch.predict_pos.max()) + 1])  # as trimmed_by_length
    assert cut.lengths.tolist() == batch.lengths.tolist()
    assert MixtureTask().pad(batch).tokens.shape[1] == MixtureTask().seq_len


def test_induction_and_mixture_batches_refuse_negative_token_ids() -> None:
    from course_utils.tasks.synthetic import InductionTask, MixtureTask

    generator = torch.Generator().manual_seed(0)
    induction = InductionTask().sample(2, generator)
    _raises(ValueError, ["InductionBatch.tokens", ">= 0", "-3"],
            lambda: replace(induction, tokens=induction.tokens - 3))
    mixture = MixtureTask().sample(4, generator)
    _raises(ValueError, ["MixtureBatch.tokens", ">= 0"], lambda: replace(mixture, tokens=-mixture.tokens - 1))


@pytest.mark.parametrize("bad", [-100, -5])
def test_next_token_targets_refuses_negative_ids(bad: int) -> None:
    from course_utils.tasks.synthetic import next_token_targets

    _raises(ValueError, ["tokens", ">= 0", str(bad), "position 1"],
            lambda: next_token_targets(torch.tensor([[1, bad, 2]])))


def test_induction_sample_refuses_an_int_as_periods() -> None:
    from course_utils.tasks.synthetic import InductionTask

    _raises(TypeError, ["periods", "list of ints", "int 5"],
            lambda: InductionTask().sample(2, torch.Generator(), periods=5))
    assert InductionTask().sample(2, torch.Generator(), periods=[5]).periods.tolist() == [5, 5]


def test_agreement_accuracy_names_verb_ids_beyond_the_logits() -> None:
    from course_utils.tasks.synthetic import AGREEMENT_VOCAB, agreement_accuracy

    batch = _agreement_batch()
    batch.correct_id[1] = 500  # changed in place, after the batch checked itself
    logits = torch.zeros(4, batch.tokens.shape[1], len(AGREEMENT_VOCAB))
    _raises(ValueError, ["batch.correct_id", "logits", f"V = {len(AGREEMENT_VOCAB)}", "500"],
            lambda: agreement_accuracy(logits, batch))


# -- 1. two_relations: LookupBatch, RunResult -----------------------------------------------------------
def _lookup_batch():
    from course_utils.tasks.two_relations import TwoKeyTask

    return TwoKeyTask().sample(4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("field", "cut"), [("item_symbols", lambda t: t[:2]),
                                            ("relation", lambda t: t[:, :3]),
                                            ("target", lambda t: t[:3]), ("query_keys", lambda t: t[:, :1])])
def test_lookup_batch_refuses_fields_of_other_sizes(field: str, cut) -> None:
    from course_utils.tasks.two_relations import LookupBatch

    batch = _lookup_batch()
    parts = batch._asdict()
    parts[field] = cut(parts[field])
    _raises(ValueError, [f"LookupBatch.{field}", "item_keys", str(tuple(parts[field].shape))],
            lambda: LookupBatch(**parts))


def test_lookup_batch_refuses_a_float_field_and_still_takes() -> None:
    from course_utils.tasks.two_relations import LookupBatch

    batch = _lookup_batch()
    _raises(TypeError, ["LookupBatch.target", "int64", "float32"],
            lambda: LookupBatch(*batch[:5], batch.target.float()))
    assert batch.take([1, 3]).num_examples == 2


@pytest.mark.parametrize(("accuracy", "relation", "label", "value"), [
    ([0.5, 1.5], (0.5, 0.5), "RunResult.accuracy[1]", "1.5"),
    ([-0.25], (0.5, 0.5), "RunResult.accuracy[0]", "-0.25"),
    ([0.5], (0.5, 2.0), "RunResult.relation_accuracy", "2.0"),
])
def test_run_result_accuracies_are_fractions(accuracy, relation, label: str, value: str) -> None:
    from course_utils.tasks.two_relations import RunResult

    steps = list(range(len(accuracy)))
    _raises(ValueError, [label, value],
            lambda: RunResult(2, 0, steps, accuracy, relation, torch.nn.Linear(1, 1)))


# -- battery 16 (fix46r) -----------------------------------------------------------------------------

# -- batch records: meta tensors and value ranges (silent) ------------------------------------------
def _induction():
    from course_utils.tasks.synthetic import InductionTask

    task = InductionTask(vocab_size=20, seq_len=16, train_periods=(2, 3, 4))
    return task.sample(4, torch.Generator().manual_seed(0))


def _agreement():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(6, torch.Generator().manual_seed(0))


def _mixture():
    from course_utils.tasks.synthetic import MixtureTask

    return MixtureTask().sample(4, torch.Generator().manual_seed(0))


def _meta(t):
    return torch.empty(t.shape, dtype=t.dtype, device="meta")


def _set(t, value):
    t = t.clone()
    t.view(-1)[0] = value
    return t


@pytest.mark.parametrize("make, field, change, words", [
    (_induction, "periods", _meta, ["InductionBatch.periods", "meta"]),
    (_induction, "scored", _meta, ["InductionBatch.scored", "meta"]),
    (_induction, "periods", lambda t: _set(t, -1), ["InductionBatch.periods", "2..16", "-1"]),
    (_induction, "periods", lambda t: _set(t, 0), ["InductionBatch.periods", "2..16", "got 0"]),
    (_induction, "periods", lambda t: _set(t, 10**6), ["InductionBatch.periods", "1000000"]),
    (_agreement, "lengths", _meta, ["AgreementBatch.lengths", "meta"]),
    (_agreement, "subject_pos", _meta, ["AgreementBatch.subject_pos", "meta"]),
    (_agreement, "verb_pos", _meta, ["AgreementBatch.verb_pos", "meta"]),
    (_agreement, "plural", _meta, ["AgreementBatch.plural", "meta"]),
    (_agreement, "attractor", _meta, ["AgreementBatch.attractor", "meta"]),
    (_mixture, "targets", _meta, ["MixtureBatch.targets", "meta"]),
    (_mixture, "real", _meta, ["MixtureBatch.real", "meta"]),
    (_mixture, "targets", lambda t: _set(t, -1), ["MixtureBatch.targets", "next token", "got -1"]),
    (_mixture, "targets", lambda t: _set(t, 10**6), ["MixtureBatch.targets", "got 1000000"]),
])
def test_batch_records_refuse_meta_tensors_and_values_out_of_range(make, field, change, words):
    from dataclasses import replace

    batch = make()
    with pytest.raises(ValueError) as info:
        replace(batch, **{field: change(getattr(batch, field))})
    assert all(w in str(info.value) for w in words), str(info.value)


def test_agreement_batch_refuses_the_same_verb_as_correct_and_wrong():
    from dataclasses import replace

    batch = _agreement()
    with pytest.raises(ValueError, match=r"AgreementBatch.correct_id and AgreementBatch.wrong_id must"):
        replace(batch, wrong_id=batch.correct_id.clone())


def test_the_batches_the_synthetic_tasks_make_still_pass():
    from course_utils.tasks.synthetic import MixtureTask

    for make in (_induction, _agreement, _mixture):
        make()
    MixtureTask().induction_eval(64)
    MixtureTask().agreement_eval(64)


# -- the two-key lookup: records, empty batches, labels, callbacks, meta models ---------------------
def _lookup_run():
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    return train_lookup(TwoKeyTask(), 2, seed=0, config=RelationsConfig(steps=4, eval_every=2, eval_size=64))


@pytest.fixture(scope="module")
def lookup_run():
    return _lookup_run()


@pytest.mark.parametrize("num_heads", [0, 10**13, 7])
def test_run_result_num_heads_must_be_the_models(lookup_run, num_heads):
    from dataclasses import replace

    with pytest.raises(ValueError) as info:
        replace(lookup_run, num_heads=num_heads)
    assert "RunResult.num_heads" in str(info.value) and str(num_heads) in str(info.value)


def test_evaluate_refuses_an_empty_batch(lookup_run):
    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask, evaluate

    empty = LookupBatch(*(t[:0] for t in TwoKeyTask().sample(4, seed=0)))  # take refuses an empty one
    with pytest.raises(ValueError, match=r"batch must hold at least one example.*0 examples"):
        evaluate(lookup_run.model, empty)


def test_lookup_batch_relation_must_follow_the_keys():
    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask

    batch = TwoKeyTask().sample(4, seed=0)
    relation = batch.relation.clone()
    relation[0, 0] = 5
    with pytest.raises(ValueError, match=r"LookupBatch.relation .*got 5"):
        LookupBatch(*batch[:4], relation, batch.target)


@pytest.mark.parametrize("title", [123, b"t", None])
@pytest.mark.parametrize("plot", ["plot_learning_curves", "plot_item_attention"])
def test_plot_titles_must_be_text(lookup_run, plot, title):
    import matplotlib

    matplotlib.use("Agg")
    from course_utils.tasks import two_relations as R

    args = (([lookup_run],) if plot == "plot_learning_curves"
            else (lookup_run.model, R.TwoKeyTask().sample(4, seed=0)))
    with pytest.raises(TypeError) as info:
        getattr(R, plot)(*args, title=title)
    assert "title must be a str" in str(info.value) and type(title).__name__ in str(info.value)


def test_train_lookup_checks_on_eval_arity_before_training():
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    with pytest.raises(TypeError, match=r"on_eval must be .*4 positional arguments.*<lambda>\(a\)"):
        train_lookup(TwoKeyTask(), 1, seed=0, config=RelationsConfig(steps=1, eval_every=1, eval_size=8),
                     on_eval=lambda a: a)


@pytest.mark.parametrize("call", ["attention_by_copies", "share_on_a", "weight_on_keys", "accuracy_by_share",
                                  "swap_fraction", "swap_chance", "plot_item_attention", "evaluate"])
def test_lookup_functions_refuse_a_meta_model(lookup_run, call):
    from course_utils.tasks import two_relations as R

    with pytest.raises(ValueError, match=r"model is on the meta device"):
        getattr(R, call)(meta_copy(lookup_run.model), R.TwoKeyTask().sample(8, seed=0))


# -- the agreement grammar's helpers and task ---------------------------------------------------------
@pytest.mark.parametrize("bad", [-1, 10**6])
def test_subject_position_refuses_ids_outside_the_vocabulary(bad):
    from course_utils.tasks.synthetic import subject_position, tokenize

    tokens = tokenize("the keys on the table are")
    tokens[0] = bad
    with pytest.raises(ValueError) as info:
        subject_position(tokens)
    assert "tokens must hold" in str(info.value) and str(bad) in str(info.value)


def test_detokenize_refuses_a_meta_tensor():
    from course_utils.tasks.synthetic import detokenize

    with pytest.raises(ValueError, match=r"tokens is on the meta device"):
        detokenize(torch.zeros(4, dtype=torch.long, device="meta"))


def test_agreement_task_templates_must_be_names():
    from course_utils.tasks.synthetic import AgreementTask

    with pytest.raises(TypeError, match=r"AgreementTask.templates\[0\] \(a template name\) must be one of "
                                        r"'simple'.*\(a str\), got list"):
        AgreementTask(templates=(["simple", "prepositional"],))


def test_agreement_task_templates_are_read_by_their_plain_value():
    """A template name is a choice (validation.check_choice): an object whose == raises is refused by its
    type (it escaped as its own error), and a str subclass is kept as the plain str it holds."""
    from bad_input_cases import LyingStr

    from course_utils.tasks.synthetic import AgreementTask

    class EqRaises:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("eq boom")

        __hash__ = object.__hash__

    message = raises_naming(TypeError, ["AgreementTask.templates[1] (a template name) must be one of",
                                        "'simple'", "(a str)", "got EqRaises"],
                            lambda: AgreementTask(templates=("simple", EqRaises())))
    assert "eq boom" not in message
    task = AgreementTask(templates=(LyingStr("simple"), "prepositional"))
    assert task.templates == ("simple", "prepositional") and {type(t) for t in task.templates} == {str}
    raises_naming(ValueError, ["templates must be a non-empty subset", "got an empty tuple"],
                  lambda: AgreementTask(templates=()))


# -- the worked example's written-out sum ------------------------------------------------------------
@pytest.mark.parametrize("field, value", [("total", -1.0), ("sum", -1.0), ("total", 104.001)])
def test_cheap_expansion_sums_must_agree_with_its_terms(field, value):
    from dataclasses import replace

    from course_utils.tasks.worked_example import load_worked_example

    cheap = load_worked_example().cheap
    with pytest.raises(ValueError) as info:
        replace(cheap, **{field: value})
    assert f"CheapExpansion.{field}" in str(info.value) and str(value) in str(info.value)


# -- battery 17 (fix47r) -----------------------------------------------------------------------------

# -- S6: the worked example's top-level keys --------------------------------------------------------
@pytest.mark.parametrize("key", ["zz_bogus", "w_o", "Heads"])
def test_worked_example_refuses_an_unknown_top_level_key(key):
    from course_utils.tasks.worked_example import (
        WORKED_EXAMPLE_PATH,
        WorkedExampleError,
        parse_worked_example,
    )

    data = json.loads(WORKED_EXAMPLE_PATH.read_text(encoding="utf-8"))
    data[key] = 1
    with pytest.raises(WorkedExampleError) as err:
        parse_worked_example(data)
    assert "unknown keys" in str(err.value) and repr(key) in str(err.value)
    assert "'people'" in str(err.value)  # what was expected


def test_shipped_worked_example_still_loads():
    from course_utils.tasks.worked_example import load_worked_example

    assert load_worked_example().people  # its optional "description" key is a known one


# -- O2: compare_heads checks its shared arguments in the parent ------------------------------------
def _config():
    from course_utils.tasks.two_relations import RelationsConfig

    return RelationsConfig(steps=2, batch_size=8, eval_every=1, eval_size=16)


@pytest.mark.parametrize("argument, value, error, shown", [
    ("task", None, TypeError, "NoneType"),
    ("task", "abc", TypeError, "'abc'"),
    ("task", 7, TypeError, "int 7"),
    ("config", True, TypeError, "bool True"),
    ("config", [], TypeError, "list []"),
    ("on_eval", 7, TypeError, "int"),
    ("heads", (1, 3), ValueError, "heads = 3"),
])
def test_compare_heads_checks_before_the_workers_start(argument, value, error, shown):
    from course_utils.tasks.two_relations import TwoKeyTask, compare_heads

    kwargs = {"task": TwoKeyTask(), "heads": (1, 2), "seeds": range(1), "config": _config(), "workers": 2}
    kwargs[argument] = value
    with pytest.raises(error) as err:  # not a RuntimeError carrying a worker's traceback
        compare_heads(**kwargs)
    assert argument in str(err.value) and shown in str(err.value)
    assert "worker" not in str(err.value)


# -- battery 18 (fix48rt) ----------------------------------------------------------------------------

# -- g12 / g20: worked-example rounding helpers -----------------------------------------------
@pytest.mark.parametrize("call, words", [
    (lambda: we.round_half_up(math.nan), ["x", "finite", "nan"]),
    (lambda: we.round_half_up(np.array([1.0, np.inf])), ["x", "finite", "inf", "(1,)"]),
    (lambda: we.article_matmul(np.ones((2, 3)), np.full((3, 2), np.nan)), ["b", "finite", "nan", "(0, 0)"]),
    (lambda: we.article_matmul(np.full((2, 3), -np.inf), np.ones((3, 2))), ["a", "finite", "-inf"]),
], ids=["round nan", "round inf", "matmul b nan", "matmul a -inf"])
def test_rounding_helpers_refuse_non_finite(call, words):
    raises_naming(ValueError, words, call)


@pytest.mark.parametrize("call", [
    lambda: we.round_half_up(np.array([1.2345]), -1),
    lambda: we.article_matmul(np.ones((2, 3)), np.ones((3, 2)), decimals=-1),
], ids=["round_half_up", "article_matmul"])
def test_rounding_helpers_refuse_negative_decimals(call):
    raises_naming(ValueError, ["decimals", ">= 0", "-1"], call)


@pytest.mark.parametrize("weights, value", [(np.full((2, 2), 2.0), "2.0"), (-np.ones((2, 2)), "-1.0")])
def test_output_rounding_budget_weights_are_fractions(weights, value):
    raises_naming(ValueError, ["weights", "[0, 1]", value, "(0, 0)"],
            lambda: we.output_rounding_budget(weights, np.ones((2, 3))))


def test_rounding_helpers_still_take_good_input():
    assert we.round_half_up(0.0105) == pytest.approx(0.011)
    assert we.round_half_up(np.array([1.25]), 0).tolist() == [1.0]
    assert we.output_rounding_budget(np.full((2, 2), 0.5), np.ones((2, 3))).shape == (2, 3)


# -- g19: Table ---------------------------------------------------------------------------------
@pytest.mark.parametrize("name, values, error, words", [
    ("t", np.zeros((2, 3), dtype=bool), TypeError, ["Table('t').values", "float", "bool"]),
    ("t", np.zeros((2, 3), dtype=np.int64), TypeError, ["Table('t').values", "float", "int64"]),
    ("", np.zeros((2, 3)), ValueError, ["Table.name", "non-empty", "''"]),
], ids=["bool values", "int values", "empty name"])
def test_table_refuses_non_float_values_and_empty_name(name, values, error, words):
    raises_naming(error, words, lambda: we.Table(name, values, ("a", "b"), ("x", "y", "z")))


# -- two_relations: g05, g15, g16, g17, g18 -----------------------------------------------------
@pytest.fixture(scope="module")
def lookup():
    from course_utils.tasks import two_relations as tr

    task = tr.TwoKeyTask()
    torch.manual_seed(0)
    return tr, task, tr.LookupModel(task, 16, 2), task.sample(8, seed=0)


@pytest.mark.parametrize("name", ["attention_by_copies", "weight_on_keys", "accuracy_by_share", "evaluate",
                                  "swap_fraction"])
def test_lookup_measures_refuse_an_empty_batch(lookup, name):
    tr, _, model, batch = lookup
    empty = tr.LookupBatch(*(t[:0] for t in batch))  # take refuses an empty selection
    raises_naming(ValueError, ["batch", "at least one example", "0 examples", "(0, 8)"],
            lambda: getattr(tr, name)(model, empty))


@pytest.mark.parametrize("field", ["item_keys", "item_symbols", "query_keys", "answer_symbols", "target"])
def test_lookup_batch_refuses_negative_ids(lookup, field):
    tr, _, _, batch = lookup
    fields = batch._asdict()
    fields[field] = fields[field].clone()
    fields[field][1] = -3  # row 1 (all of it for a 2-D field)
    raises_naming(ValueError, [f"LookupBatch.{field}", ">= 0", "-3", "row 1"],
                  lambda: tr.LookupBatch(**fields))


def test_lookup_batch_answers_follow_the_items(lookup):
    tr, _, _, batch = lookup
    answers = batch.answer_symbols.clone()
    answers[0, 0] = (answers[0, 0] + 1) % 8
    raises_naming(ValueError, ["LookupBatch.answer_symbols[:, 0]", "row 0", str(int(answers[0, 0]))],
            lambda: batch._replace(answer_symbols=answers))


@pytest.mark.parametrize("make, words", [
    (lambda b: b._replace(item_keys="x"), ["LookupBatch.item_keys", "int64", "str"]),
    (lambda b: b._replace(item_symbols=b.item_symbols[:3]), ["LookupBatch.item_symbols", "(8, 8)", "(3, 8)"]),
    (lambda b: type(b)._make(["x", *b[1:]]), ["LookupBatch.item_keys", "int64", "str"]),
], ids=["_replace str", "_replace 3 rows", "_make str"])
def test_lookup_batch_copies_are_checked(lookup, make, words):
    batch = lookup[3]
    with pytest.raises((TypeError, ValueError)) as info:
        make(batch)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_lookup_batch_copies_still_work(lookup):
    batch = lookup[3]
    assert batch._replace(target=batch.target.clone()).num_examples == 8
    assert type(batch)._make(list(batch)).num_examples == 8


def test_evaluate_refuses_a_batch_of_another_task(lookup):
    tr, _, model, _ = lookup
    other = tr.TwoKeyTask(num_symbols=4).sample(4, seed=0)
    raises_naming(ValueError, ["batch.target", "V = 8", "not from the model's task"],
            lambda: tr.evaluate(model, other))


@pytest.mark.parametrize("steps, words", [
    ([25, 0], ["RunResult.steps", "strictly increase", "= 25 then", "= 0"]),
    ([0, 0], ["RunResult.steps", "strictly increase", "= 0 then"]),
])
def test_run_result_steps_go_forward(lookup, steps, words):
    tr, _, model, _ = lookup
    raises_naming(ValueError, words, lambda: tr.RunResult(2, 0, steps, [0.1, 0.5], (0.5, 0.5), model))


def test_run_result_is_frozen_with_tuples(lookup):
    import dataclasses

    tr, _, model, _ = lookup
    run = tr.RunResult(2, 0, [0, 25], [0.1, 0.5], [0.5, 0.5], model)
    assert run.steps == (0, 25) and run.accuracy == (0.1, 0.5) and run.relation_accuracy == (0.5, 0.5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.steps = [25, 0]
    with pytest.raises(AttributeError):
        run.accuracy.append(2.0)
    raises_naming(ValueError, ["RunResult.steps", "strictly increase"],
            lambda: dataclasses.replace(run, steps=[3, 1]))


def test_accuracy_table_refuses_repeated_runs(lookup):
    tr, _, model, _ = lookup
    runs = [tr.RunResult(2, seed, [0, 25], [0.1, 0.5], (0.5, 0.5), model) for seed in (0, 1)]
    for call in (tr.accuracy_table, tr.plot_learning_curves):
        raises_naming(ValueError, ["results", "distinct", "repeats", "(2, 0)"],
                lambda call=call: call(runs + runs[:1]))


# -- synthetic: g07 (MixtureBatch), g13, g14 and the frozen batch records ----------------------
def test_induction_batch_refuses_a_scored_last_column():
    from course_utils.tasks.synthetic import InductionBatch, InductionTask

    b = InductionTask().eval_batch(4)
    scored = b.scored.clone()
    scored[2, -1] = True
    raises_naming(ValueError, ["InductionBatch.scored", "last column", "row 2"],
            lambda: InductionBatch(b.tokens, b.periods, scored))
    assert InductionBatch(b.tokens, b.periods, b.scored).scored is b.scored


def test_induction_accuracy_refuses_a_batch_with_nothing_scored():
    from course_utils.tasks.synthetic import InductionBatch, InductionTask, induction_accuracy

    b = InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(5,))
    # cut to T = 7 (BOS + one copy + 1): period 5 fixes no position with a next token, so
    # nothing is scored, and the record (which checks scored against the periods) agrees
    none = InductionBatch(b.tokens[:, :7], b.periods, torch.zeros(4, 7, dtype=torch.bool))
    raises_naming(ValueError, ["batch", "at least one position", "no scored position", "(4, 7)"],
            lambda: induction_accuracy(torch.randn(4, 7, 64), none))


@pytest.mark.parametrize("names, bad", [(["nope"] * 8, "'nope'"), (["simple"] * 7 + [""], "''")])
def test_agreement_batch_templates_are_templates(names, bad):
    import dataclasses

    from course_utils.tasks.synthetic import AgreementTask

    batch = AgreementTask().eval_batch(8)
    raises_naming(ValueError, ["AgreementBatch.template", "TEMPLATES", bad],
            lambda: dataclasses.replace(batch, template=names))


def _batches():
    from course_utils.tasks.synthetic import AgreementTask, InductionTask, MixtureTask

    return {"induction": InductionTask().eval_batch(4), "agreement": AgreementTask().eval_batch(4),
            "mixture": MixtureTask().sample(8, torch.Generator().manual_seed(0))}


@pytest.mark.parametrize("kind, field, value", [
    ("mixture", "num_induction", 9), ("induction", "scored", None), ("agreement", "template", ["nope"] * 4),
])
def test_batch_records_are_frozen(kind, field, value):
    import dataclasses

    batch = _batches()[kind]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(batch, field, value)


def test_mixture_task_parts_after_a_replace_is_checked():
    import dataclasses

    batch = _batches()["mixture"]
    raises_naming(ValueError, ["MixtureBatch.num_induction", "9"],
            lambda: dataclasses.replace(batch, num_induction=9).task_parts())
    assert [t.shape[0] for t, _ in batch.task_parts()] == [4, 4]


def test_agreement_template_is_a_tuple():
    batch = _batches()["agreement"]
    assert isinstance(batch.template, tuple) and len(batch.template) == 4
    assert batch.take([0, 2]).template == (batch.template[0], batch.template[2])


# -- battery 19 (fix49p) -----------------------------------------------------------------------------

def _small_lookup_batch():
    return TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)


@pytest.mark.parametrize("make, name, size",
                         [(_agreement_batch, "rows", 4), (_small_lookup_batch, "index", 6)],
                         ids=["AgreementBatch", "LookupBatch"])
def test_batch_take_refuses_a_mixed_selection(make, name, size):
    batch = make()
    with pytest.raises(TypeError, match=rf"{name}\[1\] is int 0"):
        batch.take([True, 0])
    batch.take([1, 0])  # indices alone, and a full mask, still select
    batch.take([True, False] * (size // 2))


# -- battery 19 (fix49rt) ----------------------------------------------------------------------------

def _short_induction_batch() -> syn.InductionBatch:
    task = syn.InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
    return task.sample(4, torch.Generator().manual_seed(0))


# -- g19: empty batches (B = 0) -----------------------------------------------------------------
@pytest.mark.parametrize("make, words", [
    (lambda: dataclasses.replace(b := _short_induction_batch(), tokens=b.tokens[:0], periods=b.periods[:0],
                                 scored=b.scored[:0]),
     ["InductionBatch.tokens", "at least one", "(0, 8)"]),
    (lambda: syn.AgreementBatch(*(getattr(_agreement_batch(), f.name)[:0]
                                  for f in dataclasses.fields(syn.AgreementBatch) if f.name != "template")),
     ["AgreementBatch.tokens", "at least one", "(0, "]),
    (lambda: dataclasses.replace(b := _mixture(), tokens=b.tokens[:0], targets=b.targets[:0],
                                 real=b.real[:0], num_induction=0),
     ["MixtureBatch.tokens", "at least one", "(0, 32)"]),
    (lambda: _agreement_batch().take(torch.zeros(0, dtype=torch.long)),
     ["rows", "at least one", "4 sentences", "empty"]),
    (lambda: _agreement_batch().take(torch.zeros(4, dtype=torch.bool)),
     ["rows", "at least one", "4 sentences", "empty"]),
    (lambda: _agreement_batch().take([]), ["rows", "at least one", "empty"]),
], ids=["induction", "agreement", "mixture", "take index", "take mask", "take list"])
def test_batch_records_refuse_an_empty_batch(make, words):
    raises_naming(ValueError, words, make)


# -- g18: batch records whose facts contradict each other ----------------------------------------
def _shift_scored(b: syn.InductionBatch) -> dict:
    scored = b.scored.clone()
    scored[1] = False
    return {"scored": scored}


def _break_repeat(b: syn.InductionBatch) -> dict:
    tokens = b.tokens.clone()
    tokens[2, -1] = (tokens[2, -1] % 15) + 1  # another ordinary token
    return {"tokens": tokens}


@pytest.mark.parametrize("change, words", [
    (lambda b: {"scored": torch.zeros_like(b.scored)},
     ["InductionBatch.scored", "period", "got False", "row 0"]),
    (_shift_scored, ["InductionBatch.scored", "got False", "row 1"]),
    (lambda b: {"periods": b.periods + 1}, ["InductionBatch.", "period", "row 0"]),
    (_break_repeat, ["InductionBatch.tokens", "repeat with the row's period", "row 2", "position 7"]),
], ids=["scored none", "scored a row off", "periods off by one", "tokens do not repeat"])
def test_induction_batch_facts_must_agree(change, words):
    batch = _short_induction_batch()
    raises_naming(ValueError, words, lambda: dataclasses.replace(batch, **change(batch)))


def _subject(b: syn.AgreementBatch) -> torch.Tensor:
    return b.tokens.gather(1, b.subject_pos[:, None])[:, 0]


_NEXT_LEMMA = {a: b for cycle in (("is", "was", "has"), ("are", "were", "have"))
               for a, b in zip(cycle, cycle[1:] + cycle[:1], strict=True)}


def _other_lemma(b: syn.AgreementBatch) -> dict:
    """wrong_id in the other number, but of another verb (were for is, ...)."""
    wrong = [syn.WORD_TO_ID[_NEXT_LEMMA[syn.AGREEMENT_VOCAB[i]]] for i in b.wrong_id.tolist()]
    return {"wrong_id": torch.tensor(wrong)}


@pytest.mark.parametrize("change, words", [
    (lambda b: {"correct_id": _subject(b)}, ["AgreementBatch.correct_id", "final verb", "row 0"]),
    (lambda b: {"plural": ~b.plural}, ["AgreementBatch.correct_id", "AgreementBatch.plural is", "row 0"]),
    (_other_lemma, ["AgreementBatch.wrong_id", "other number", "row 0"]),
], ids=["correct_id a noun", "plural flipped", "wrong_id another verb"])
def test_agreement_batch_verbs_must_agree_with_plural(change, words):
    batch = _agreement_batch()
    raises_naming(ValueError, words, lambda: dataclasses.replace(batch, **change(batch)))


def test_agreement_batch_may_carry_a_twins_sentences():
    """Documented, not refused: tokens are not checked against the facts (a twin's sentences)."""
    from course_utils.interp.patching import flip_subject_number

    batch = _agreement_batch()
    twin = flip_subject_number(batch)
    dataclasses.replace(batch, tokens=twin)
    # with the twin's facts, its attractor flags too (checked against tokens since battery 21):
    # one intervening noun, so the twin has an attractor where the sentence has none
    batch = syn.AgreementTask(templates=("simple", "prepositional", "object_relative", "subject_relative")
                              ).sample(8, torch.Generator().manual_seed(0))
    twin_attractor = ~batch.attractor & torch.tensor([name != "simple" for name in batch.template])
    dataclasses.replace(batch, tokens=flip_subject_number(batch), plural=~batch.plural,
                        correct_id=batch.wrong_id, wrong_id=batch.correct_id, attractor=twin_attractor)


def test_mixture_batch_real_must_mark_the_padding():
    batch = _mixture()
    raises_naming(ValueError, ["MixtureBatch.real", "induction rows", "got False", "row 0, column 0"],
            lambda: dataclasses.replace(batch, real=torch.zeros_like(batch.real)))
    real = batch.real.clone()
    real[batch.num_induction:] = True  # the sentences' padding marked real
    raises_naming(ValueError, ["MixtureBatch.real", "<pad>", "got True", f"row {batch.num_induction}"],
            lambda: dataclasses.replace(batch, real=real))


def _lookup() -> tr.LookupBatch:
    return tr.TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)


@pytest.mark.parametrize("change", [
    lambda t: (t + 1) % 16,
    lambda t: t + 16,
    lambda t: torch.cat([t[:1], t[1:] + 1]),
], ids=["target + 1", "target + V * V", "all but the first + 1"])
def test_lookup_batch_target_must_be_the_pair_class(change):
    batch = _lookup()
    target = change(batch.target)
    row = int((target != batch.target).nonzero()[0, 0])
    raises_naming(ValueError, ["LookupBatch.target", "a * V + b", f"got {int(target[row])}"],
            lambda: batch._replace(target=target))


def test_lookup_batch_target_is_checked_with_no_items():
    none = torch.zeros(2, 0, dtype=torch.long)  # T = 0: the symbols are only the answers'
    make = lambda target: tr.LookupBatch(none, none, torch.tensor([[0, 1], [0, 1]]),  # noqa: E731
                                         torch.tensor([[1, 2], [1, 3]]), none, torch.tensor(target))
    assert make([6, 7]).target.tolist() == [6, 7]
    raises_naming(ValueError, ["LookupBatch.target", "a * V + b", "row 1", "got 7"], lambda: make([7, 7]))


# -- g23: Table of no rows or no columns ---------------------------------------------------------
@pytest.mark.parametrize("shape, rows, cols, words", [
    ((0, 0), (), (), ["Table('t').rows", "at least one row", "()"]),
    ((0, 2), (), ("a", "b"), ["Table('t').rows", "at least one row"]),
    ((2, 0), ("a", "b"), (), ["Table('t').cols", "at least one column"]),
], ids=["0 x 0", "0 x 2", "2 x 0"])
def test_table_refuses_no_rows_or_columns(shape, rows, cols, words):
    raises_naming(ValueError, words, lambda: we.Table("t", np.ones(shape), rows, cols))


# -- good input still passes ---------------------------------------------------------------------
def test_the_batches_of_every_task_still_pass_with_attractors_and_empty_lookups():
    generator = torch.Generator().manual_seed(3)
    syn.InductionTask().sample(64, generator)
    syn.InductionTask().eval_batch(64)
    agreement = syn.AgreementTask().sample(64, generator)
    syn.AgreementTask(attractor_p=0.0, opener_p=1.0).sample(64, generator)
    cut = dataclasses.replace(agreement, tokens=agreement.tokens[:, : int(agreement.predict_pos.max()) + 1])
    assert len(cut.take(agreement.attractor)) == int(agreement.attractor.sum())
    syn.MixtureTask().sample(64, generator)
    syn.MixtureTask().agreement_eval(64)
    for seed in range(3):
        tr.TwoKeyTask().sample(32, seed=seed)
    tr.LookupBatch(*(t[:0] for t in tr.TwoKeyTask(num_symbols=2).sample(32, seed=0)))  # an empty one is valid
    assert we.Table("t", np.ones((1, 1)), ("a",), ("b",)).shape == (1, 1)


# -- battery 20 (fix50q) -----------------------------------------------------------------------------

# -- O4: TwoKeyTask.sample's seed range is named like InductionTask's ---------------------------
@pytest.mark.parametrize(("seed", "error", "words"), [
    (2**64, ValueError, ["seed", "2**64", str(2**64)]),
    (2**70, ValueError, ["seed", "2**64", str(2**70)]),
    (-1, ValueError, ["seed", ">= 0", "-1"]),
], ids=["2**64", "2**70", "-1"])
def test_twokey_sample_names_a_seed_out_of_range(seed: int, error: type[Exception], words: list[str]) -> None:
    raises_naming(error, words, lambda: TwoKeyTask().sample(4, seed=seed))


def test_twokey_sample_takes_a_numpy_seed_like_an_int() -> None:
    task = TwoKeyTask()
    assert torch.equal(task.sample(3, seed=np.int64(5)).item_keys, task.sample(3, seed=5).item_keys)


# -- S4: +inf / -inf logits are refused where a metric reads them, as NaN is ------------------
_INDUCTION = InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))


_AGREEMENT = AgreementTask()


def _induction_call(value: float):
    batch = _INDUCTION.eval_batch(4)
    logits = torch.zeros(4, 8, 16)
    logits[batch.scored] = value
    return lambda: induction_accuracy(logits, batch)


def _agreement_call(fn, value: float):
    batch = _AGREEMENT.sample(4, torch.Generator().manual_seed(0))
    logits = torch.zeros(4, batch.tokens.shape[1], _AGREEMENT.vocab_size)
    logits[torch.arange(4), batch.predict_pos, batch.wrong_id] = value
    return lambda: fn(logits, batch)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")], ids=["+inf", "-inf"])
@pytest.mark.parametrize("make", [
    _induction_call,
    lambda value: _agreement_call(agreement_margins, value),
    lambda value: _agreement_call(agreement_accuracy, value),
], ids=["induction_accuracy", "agreement_margins", "agreement_accuracy"])
def test_infinite_logits_are_refused_where_read(make, value: float) -> None:
    kind = "+inf" if value > 0 else "-inf"
    raises_naming(ValueError, ["logits", kind, "no prediction"], make(value))


def test_nan_logits_still_named_as_nan() -> None:
    raises_naming(ValueError, ["logits hold NaN at scored positions"], _induction_call(float("nan")))


# -- battery 21 (fix51p) -----------------------------------------------------------------------------

def _agreement_batch_of_16():  # 16 sampled sentences of the mixed templates
    return AgreementTask().sample(16, torch.Generator().manual_seed(0))


# -- 3: periods given as a list (range, array) are kept as a tuple of ints ------------------------
@pytest.mark.parametrize("make", [list, np.array, torch.tensor], ids=["list", "array", "tensor"])
def test_induction_task_keeps_periods_as_tuples(make):
    task = InductionTask(train_periods=make([2, 3, 4]), heldout_periods=make([5]))
    assert task.train_periods == (2, 3, 4) and task.heldout_periods == (5,)
    assert all(type(p) is int for p in (*task.train_periods, *task.heldout_periods))
    hash(task)  # a cache key of the evaluation (lru_cache): a list inside made it unhashable
    assert task == InductionTask(train_periods=(2, 3, 4), heldout_periods=(5,))
    assert InductionTask(train_periods=range(2, 5), heldout_periods=range(5, 6)) == task


# -- 4: a bad period names its field and entry -----------------------------------------------------
@pytest.mark.parametrize("field", ["train_periods", "heldout_periods"])
@pytest.mark.parametrize("period, error, words", [
    (-1, ValueError, ["positive int", "-1"]),
    (1, ValueError, ["at least 2", "got 1"]),
    (10**9, ValueError, ["1000000000", "vocab_size=64"]),
    (40, ValueError, ["40", "seq_len=32"]),
    (2.0, TypeError, ["int", "2.0"]),
], ids=["negative", "one", "huge", "too long", "float"])
def test_induction_task_period_errors_name_the_field(field, period, error, words):
    other = {"train_periods": [2, 3], "heldout_periods": [5]}
    other[field] = [period]
    raises_naming(error, [f"InductionTask.{field}[0]", *words], lambda: InductionTask(**other))


def test_induction_sample_period_errors_name_the_entry():
    task = InductionTask()
    raises_naming(ValueError, ["periods[1]", "40", "seq_len=32"],
                  lambda: task.sample(2, torch.Generator().manual_seed(0), periods=(2, 40)))


# -- 10: AgreementBatch's attractor flags are checked against its sentences ---------------------
@pytest.mark.parametrize("row", [0, 1, 2, 3])
def test_agreement_batch_refuses_a_wrong_attractor_flag(row):
    batch = _agreement_batch_of_16()
    attractor = batch.attractor.clone()
    attractor[row] = ~attractor[row]
    raises_naming(ValueError, ["AgreementBatch.attractor", f"got {bool(attractor[row])}", f"row {row}"],
                  lambda: dataclasses.replace(batch, attractor=attractor))


def test_agreement_batch_attractor_rule_leaves_twins_and_odd_tokens_alone():
    batch = _agreement_batch_of_16()
    dataclasses.replace(batch, tokens=flip_subject_number(batch))  # a twin's sentences, facts kept
    dataclasses.replace(batch, tokens=torch.zeros_like(batch.tokens))  # no sentence: not read
    assert AgreementTask().eval_batch(500).attractor.any()  # sampled batches pass


# -- 11: LookupBatch.take refuses an empty selection, as AgreementBatch.take does --------------------
@pytest.mark.parametrize("index", [slice(0, 0), slice(3, 1), [], torch.tensor([], dtype=torch.long),
                                   torch.zeros(4, dtype=torch.bool)],
                         ids=["slice", "reversed slice", "list", "tensor", "mask"])
def test_lookup_batch_take_refuses_an_empty_selection(index):
    batch = TwoKeyTask().sample(4, seed=0)
    raises_naming(ValueError, ["index", "at least one of the 4 examples", "empty selection"],
                  lambda: batch.take(index))


def test_agreement_and_lookup_take_share_the_rule():
    agreement = _agreement_batch_of_16().take([0, 1])
    raises_naming(ValueError, ["rows", "at least one of the 2 sentences", "empty selection"],
                  lambda: agreement.take([]))
    batch = TwoKeyTask().sample(4, seed=0)
    assert batch.take(slice(1, 3)).num_examples == 2 and batch.take([3]).num_examples == 1


@pytest.mark.parametrize("index", [slice(0, 4, 0), slice(0.5, 2), slice("a", None)],
                         ids=["zero step", "float bound", "str bound"])
def test_lookup_batch_take_names_a_slice_it_cannot_read(index):
    """Python's own "slice step cannot be zero" named no argument (the battery's re-run)."""
    batch = TwoKeyTask().sample(4, seed=0)
    raises_naming(ValueError, ["index as a slice", repr(index)], lambda: batch.take(index))


def test_lookup_batch_take_reads_a_negative_step_as_python_does():
    batch = TwoKeyTask().sample(4, seed=0)
    assert torch.equal(batch.take(slice(None, None, -1)).item_keys, batch.item_keys.flip(0))


# -- 12: Table (and CheapExpansion) keep read-only copies of their checked numbers -------------
def test_table_values_cannot_be_changed_after_the_check():
    given = np.ones((1, 1))
    table = Table("t", given, ("a",), ("x",))
    given[0, 0] = np.nan  # the caller's array: not the table's
    with pytest.raises(ValueError, match="read-only"):
        table.values[0, 0] = np.nan
    assert np.isfinite(table.frame().to_numpy()).all()


def test_cheap_expansion_arrays_are_read_only():
    cheap = load_worked_example().cheap
    for name in ("head_outputs", "weights", "products"):
        with pytest.raises(ValueError, match="read-only"):
            getattr(cheap, name)[0] = np.nan


# -- battery 22 (fix52p) -----------------------------------------------------------------------------

# -- 13: parse_worked_example names its argument, data, where no file is involved -------------------
@pytest.mark.parametrize("data", [None, 3, "x", [1]], ids=["None", "int", "str", "list"])
def test_parse_worked_example_names_data(data):
    message = raises_naming(WorkedExampleError, ["data", type(data).__name__],
                            lambda: parse_worked_example(data))
    assert "the file" not in message


def test_parse_worked_example_names_data_for_a_missing_key():
    message = raises_naming(WorkedExampleError, ["data", "'people'"], lambda: parse_worked_example({}))
    assert "the file" not in message


# -- 14: TwoKeyTask.sample checks its generator before using it ------------------------------------
@pytest.mark.parametrize("generator", [3, "g", 1.5, torch.tensor(0)], ids=["int", "str", "float", "tensor"])
def test_two_key_sample_checks_its_generator(generator):
    raises_naming(TypeError, ["generator must be a torch.Generator", type(generator).__name__],
                  lambda: TwoKeyTask().sample(4, generator=generator))


# -- battery 23 (fix53w) -----------------------------------------------------------------------------

# -- S4: output_rounding_budget took non-square weights and returned a (0, 3) / (1, 3) budget -------
@pytest.mark.parametrize("shape", [(0, 2), (1, 2)])
def test_rounding_budget_weights_square(shape: tuple[int, int]) -> None:
    from course_utils.tasks.worked_example import output_rounding_budget

    values = np.full((2, 3), 0.5)
    raises_naming(ValueError, ["weights", "(T, T)", str(shape)],
                  lambda: output_rounding_budget(np.full(shape, 0.5), values))
    assert output_rounding_budget(np.full((2, 2), 0.5), values).shape == (2, 3)  # the control


# -- battery 23 (fix53x) -----------------------------------------------------------------------------

def _induction_case():
    task = InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2, num_layers=1))
    return lambda seed: evaluate_induction(model, task, batch_size=4, seed=seed)


def _agreement_case():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=AGREEMENT_TASK.vocab_size, max_len=AGREEMENT_TASK.max_len,
                                        d_model=8, num_heads=2, num_layers=1))
    return lambda seed: evaluate_agreement(model, batch_size=4, seed=seed)


@pytest.mark.parametrize("case", [_induction_case, _agreement_case])
def test_evaluate_refuses_bool_seed_even_once_its_int_twin_is_cached(case):
    evaluate = case()
    evaluate(1)  # caches seed 1, whose lru_cache key equals True's
    raises_naming(TypeError, ["seed", "bool", "True"], lambda: evaluate(True))


# -- battery 25 (fix55) ------------------------------------------------------------------------------

# -- tasks: a batch longer than the mixture, and a memory refusal that named only n ----------------------
def test_a_mixture_refuses_an_agreement_batch_longer_than_its_sequences() -> None:
    import dataclasses

    from course_utils.tasks.synthetic import AgreementTask, MixtureTask

    mixture, batch = MixtureTask(), AgreementTask().sample(4, torch.Generator().manual_seed(0))
    extra = torch.zeros(4, mixture.seq_len, dtype=torch.long)  # a batch padded wider than the mixture
    longer = dataclasses.replace(batch, tokens=torch.cat([batch.tokens, extra], dim=1))
    raises_naming(ValueError, ["batch", f"seq_len={mixture.seq_len}", f"got {longer.tokens.shape[1]}"],
                  lambda: mixture.pad(longer))
    assert mixture.pad(batch).tokens.shape[1] == mixture.seq_len


def test_two_key_sampling_names_num_keys_when_it_would_not_fit() -> None:
    from course_utils.tasks.two_relations import TwoKeyTask

    raises_naming(ValueError, ["n asks for", "num_keys=1,000,000,000,000"],
                  lambda: TwoKeyTask(num_keys=10**12).sample(2, seed=0))


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_relations_config_documents_an_eval_every_above_steps() -> None:
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    assert "``eval_every`` above ``steps`` gives a learning curve of two points" in RelationsConfig.__doc__
    result = train_lookup(TwoKeyTask(), 1, 0, RelationsConfig(steps=3, eval_every=10, eval_size=64))
    assert result.steps == (0, 3)


def test_learning_curves_of_other_step_grids_are_refused_by_name() -> None:
    from course_utils.tasks.two_relations import LookupModel, RunResult, TwoKeyTask, plot_learning_curves

    model = LookupModel(TwoKeyTask(), 16, 2)
    results = [RunResult(2, 0, (0,), (0.5,), (0.5, 0.5), model),
               RunResult(2, 1, (0, 5), (0.5, 0.6), (0.5, 0.5), model)]
    raises_naming(ValueError, ["results of 2 heads", "one grid of steps", "(0,)", "(0, 5)"],
                  lambda: plot_learning_curves(results))


# -- battery 27 (fix57) ------------------------------------------------------------------------------

def test_lookup_metrics_refuse_a_model_with_nan_outputs() -> None:
    from course_utils.tasks import two_relations as T

    task = T.TwoKeyTask()
    model = T.LookupModel(task, 16, 2)
    for p in model.parameters():
        p.data.fill_(float("nan"))
    raises_naming(ValueError, ["model(batch)'s logits", "finite", "NaN"],
                  lambda: T.weight_on_keys(model, task.sample(4, seed=1)))


# -- battery 28 (fix58) ------------------------------------------------------------------------------

def test_a_lookup_batch_names_both_fields_that_disagree() -> None:
    import dataclasses

    from course_utils.tasks.two_relations import LookupBatch, TwoKeyTask

    batch = TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2).sample(6, seed=0)
    fields = ({f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
              if dataclasses.is_dataclass(batch) else batch._asdict())
    fields["item_symbols"] = fields["item_symbols"] + 10**6
    raises_naming(ValueError, ["LookupBatch.answer_symbols", "LookupBatch.item_symbols", "one of the two"],
                  lambda: LookupBatch(**fields))


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_next_token_targets_huge_pad_names_pad_id():
    from course_utils.tasks.synthetic import next_token_targets

    with pytest.raises(ValueError, match="pad_id"):
        next_token_targets(torch.randint(0, 16, (2, 8)), pad_id=BEYOND_FLOAT)


def test_pair_class_huge_names_num_symbols():
    from course_utils.tasks.two_relations import pair_class, split_pair_class

    with pytest.raises(ValueError, match="num_symbols"):
        pair_class(torch.tensor([0, 1]), torch.tensor([1, 2]), BEYOND_FLOAT)
    with pytest.raises(ValueError, match="num_symbols"):
        split_pair_class(torch.tensor([0, 1]), BEYOND_FLOAT)


def test_config_numpy_ints_stored_as_python_ints():
    import dataclasses
    import json

    import numpy as np

    from course_utils.model.train import TrainConfig
    from course_utils.tasks.two_relations import RelationsConfig

    config = TrainConfig(steps=np.int64(2), warmup_steps=np.int32(1))
    assert type(config.steps) is int and type(config.warmup_steps) is int
    json.dumps(dataclasses.asdict(config))
    relations = RelationsConfig(d_model=np.int64(16))
    assert type(relations.d_model) is int
    json.dumps(dataclasses.asdict(relations))


# -- battery 30 --------------------------------------------------------------------------------------

# -- lookup_evaluate_nan_model: evaluate over NaN logits reported accuracies ------------------------
def test_lookup_evaluate_refuses_a_model_with_nan_weights():
    from course_utils.tasks.two_relations import LookupModel, TwoKeyTask, evaluate

    torch.manual_seed(0)
    task = TwoKeyTask()
    model = LookupModel(task, 16, 2)
    batch = task.sample(8, seed=0)
    assert all(0.0 <= a <= 1.0 for a in evaluate(model, batch))  # a finite model is scored
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.train()
    with pytest.raises(ValueError, match="logits must hold finite numbers"):
        evaluate(model, batch)
    assert model.training  # the mode is put back before the error


# -- mixture_sample_huge_batch: a bare OverflowError naming no argument -----------------------------
def test_mixture_sample_refuses_a_huge_batch_size_by_name():
    from course_utils.tasks.synthetic import MixtureTask

    with pytest.raises(ValueError, match="batch_size must be an int in 2..9007199254740992"):
        MixtureTask().sample(10 ** 400, torch.Generator().manual_seed(0))


# -- battery 30 (e) ----------------------------------------------------------------------------------

def test_eval_batches_do_not_depend_on_default_dtype():
    from course_utils.tasks.synthetic import AgreementTask, InductionTask

    for task in (InductionTask(), AgreementTask()):
        a = task.eval_batch(16).tokens
        torch.set_default_dtype(torch.float64)
        try:
            b = task.eval_batch(16).tokens
        finally:
            torch.set_default_dtype(torch.float32)
        assert a.shape == b.shape and torch.equal(a, b), type(task).__name__


def test_induction_accuracy_rechecks_batch_changed_in_place():
    import pytest

    from course_utils.tasks.synthetic import InductionTask, induction_accuracy

    task = InductionTask()
    batch = task.eval_batch(4)
    logits = torch.randn(*batch.tokens.shape, task.vocab_size, generator=torch.Generator().manual_seed(0))
    induction_accuracy(logits, batch)
    batch.tokens.fill_(-5)
    with pytest.raises(ValueError, match="InductionBatch.tokens"):
        induction_accuracy(logits, batch)


def test_agreement_sentences_check_the_batch_again_after_an_in_place_resize():
    """``AgreementBatch.sentences`` zipped tokens and lengths without re-checking the batch: after
    ``tokens.resize_(0)`` it raised zip()'s bare "argument 2 is longer" (a cold battery's repro)."""
    from course_utils.tasks.synthetic import AgreementTask

    batch = AgreementTask().sample(3, torch.Generator().manual_seed(0))
    assert len(batch.sentences) == 3
    batch.tokens.resize_(0)
    raises_naming(ValueError, ["AgreementBatch.tokens", "(B, T)", "(0,)"], lambda: batch.sentences)


# -- battery 31 --------------------------------------------------------------------------------------

# -- accuracy_table_mixed_d_model: runs of two widths were averaged under the first run's dk ---------
def test_accuracy_table_and_curves_refuse_runs_of_two_widths(lookup):
    tr, task, model, _ = lookup
    wide = tr.LookupModel(task, 32, 1)
    narrow = tr.LookupModel(task, 16, 1)
    runs = [tr.RunResult(1, 0, [0, 25], [0.1, 0.5], (0.5, 0.5), narrow),
            tr.RunResult(1, 1, [0, 25], [0.2, 0.6], (0.5, 0.5), wide)]
    for call in (tr.accuracy_table, tr.plot_learning_curves):
        with pytest.raises(ValueError, match=r"^results must all be runs of one model width d_model .*got "
                                             r"d_model 16 in results\[0\] and 32 in results\[1\]"):
            call(runs)
    assert list(tr.accuracy_table(runs[:1]).columns) == ["1 head (dk=16)"]


# -- battery 34 (g3): a finite but huge number of the worked example overflowed a step ---------------
# X.values[0][0] = 1e200 died on compute_steps' internal "scores and weights disagree" assertion, and
# W_O.values[0][0] = 1e308 was blamed on the computed table 'Final'. The file's numbers are now
# bounded (LARGEST_VALUE) where they are read, naming the input table and cell.
@pytest.mark.parametrize("path, cell, value", [
    (("X",), (0, 0), 1e200), (("W_O",), (0, 0), 1e308), (("W_O",), (4, 5), -1e60),
    (("heads", 1, "W_K"), (2, 1), 1e100), (("article_printed", "Q2"), (1, 0), 10**60),
], ids=["X", "W_O", "W_O negative", "W_K^2", "article Q2 (an int)"])
def test_worked_example_refuses_a_number_whose_products_overflow(path, cell, value) -> None:
    data = json.loads(we.WORKED_EXAMPLE_PATH.read_text(encoding="utf-8"))
    table = data
    for key in path:
        table = table[key]
    table["values"][cell[0]][cell[1]] = value
    name = {"X": "X", "W_O": "W_O", "W_K": "W_K^2", "Q2": "article Q2"}[path[-1]]
    raises_naming(we.WorkedExampleError, [f"{name}.values[{cell[0]}][{cell[1]}]", "at most 1e+50",
                                          f"{float(value):g}", "too large"],
                  lambda: we.parse_worked_example(data))


def test_worked_example_number_just_below_the_bound_still_computes() -> None:
    data = json.loads(we.WORKED_EXAMPLE_PATH.read_text(encoding="utf-8"))
    data["X"]["values"][0][0] = we.LARGEST_VALUE
    data["W_O"]["values"][0][0] = -we.LARGEST_VALUE
    example = we.parse_worked_example(data)
    steps = we.compute_steps(example)  # every step finite: Table refuses anything else
    assert abs(steps["Final"].values[0, 0]) > 1e50
    assert len(we.compare_with_article(example)) > 0


@pytest.mark.parametrize("call", [we.compute_steps, we.recompute_from_article, we.compare_with_article,
                                  lambda example: we.side_by_side(example, "Final")])
def test_a_worked_example_built_with_a_huge_number_is_named(call) -> None:
    example = we.load_worked_example()
    values = example.w_o.values.copy()
    values[1, 2] = -1e308
    built = replace(example, w_o=we.Table("W_O", values, example.w_o.rows, example.w_o.cols))
    raises_naming(we.WorkedExampleError, ["example.w_o.values", "at most 1e+50", "-1e+308", "(1, 2)",
                                          "too large"], lambda: call(built))
