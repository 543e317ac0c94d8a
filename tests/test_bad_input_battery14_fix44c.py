"""Battery 14's findings in the library functions (issue 38, helper fix44c): each bad call now
raises with the argument's name, what was expected and what arrived, or does what its docstring
says; the valid call beside it still works."""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention import sdpa_backends as SB
from course_utils.attention import validation as V
from course_utils.bench import timing as TM
from course_utils.interp import ablation as AB
from course_utils.interp import patching as PT
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _timings(names=("a", "b")):
    return [TM.Timing(n, 1e-3 * (i + 1), float(i + 1), [1e-3 * (i + 1)] * 3) for i, n in enumerate(names)]


# -- validation's own checks look at their arguments before computing a message from them -------
HEADS = torch.zeros(2, 2, 6, 4)
MASK = torch.ones(3, 3, dtype=torch.bool)
VALIDATION_CASES = [
    Case("check_heads_to_merge/d_k str", lambda: V.check_heads_to_merge(HEADS, 2, "3"), TypeError,
         ["d_k", "int", "str '3'"]),
    Case("check_heads_to_merge/num_heads str", lambda: V.check_heads_to_merge(HEADS, "3", 4), TypeError,
         ["num_heads", "int", "str '3'"]),
    Case("check_heads_to_merge/d_k list", lambda: V.check_heads_to_merge(HEADS, 2, [2]), TypeError,
         ["d_k", "int", "list [2]"]),
    Case("check_mask_fits/target int", lambda: V.check_mask_fits(MASK, 3, "(Tq, Tk)"),
         TypeError, ["target", "tuple of ints", "int 3"]),
    Case("check_record/not a dataclass", lambda: V.check_record(3), TypeError,
         ["check_record", "dataclass", "int 3"]),
    Case("check_record/a dataclass type", lambda: V.check_record(TM.Timing), TypeError,
         ["check_record", "instance of a dataclass", "type"]),
]


@pytest.mark.parametrize("case", VALIDATION_CASES, ids=lambda c: c.name)
def test_validation_checks_refuse_wrong_arguments_by_name(case):
    assert_named(case)


def test_validation_checks_still_pass_good_arguments():
    V.check_heads_to_merge(HEADS, 2, 4)
    V.check_mask_fits(torch.ones(3, 3, dtype=torch.bool), (1, 2, 3, 3), "(B, h, Tq, Tk)")
    V.check_record(_timings()[0])


# -- timing: names are looked up only once they can be; timings name each function once --------
TIMING_CASES = [
    Case("format_table/baseline list", lambda: TM.format_table("t", _timings(), ["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("paired_ratios/name list", lambda: TM.paired_ratios(_timings(), ["b"], "a"), TypeError,
         ["name", "function's name", "list ['b']"]),
    Case("ratio_spread/baseline list", lambda: TM.ratio_spread(_timings(), "b", ["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("paired_ratios/timings repeated", lambda: TM.paired_ratios(_timings() + _timings(), "b", "a"),
         ValueError, ["timings' names", "distinct", "repeats ['a', 'b']"]),
    Case("format_spread_table/timings repeated",
         lambda: TM.format_spread_table("t", _timings() + _timings(), "a"), ValueError,
         ["timings' names", "distinct", "repeats ['a', 'b']"]),
    Case("time_interleaved/baseline list",
         lambda: TM.time_interleaved({"a": lambda: None}, baseline=["a"], repeats=1, warmup=0), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("time_interleaved/progress object",
         lambda: TM.time_interleaved({"a": lambda: None}, baseline="a", repeats=1, warmup=0,
                                     progress=object()),
         TypeError, ["progress", "str", "or None", "object"]),
    Case("bench_mha/baseline list", lambda: _bench_mha()(1, 4, 8, 2, repeats=1, baseline=["batched"]),
         TypeError,
         ["baseline", "function's name", "list ['batched']"]),
    Case("time_cold/baseline list", lambda: _time_cold()({"a": lambda: None}, baseline=["a"]), TypeError,
         ["baseline", "function's name", "list ['a']"]),
    Case("backend_rejection_reason/label list",
         lambda: SB.backend_rejection_reason(["flash"], *[torch.zeros(1, 1, 2, 4)] * 3), ValueError,
         ["label", "one of", "list ['flash']"]),
]


def _bench_mha():
    from course_utils.bench.mha_speed import bench_mha
    return bench_mha


def _time_cold():
    from course_utils.bench.gqa_speed import time_cold
    return time_cold


@pytest.mark.parametrize("case", TIMING_CASES, ids=lambda c: c.name)
def test_timing_refuses_unhashable_names_and_repeated_timings(case):
    assert_named(case)


def test_timing_still_takes_good_names():
    assert TM.paired_ratios(_timings(), "b", "a") == [2.0, 2.0, 2.0]
    assert "ratio to a" in TM.format_table("t", _timings(), "a")
    rows = TM.time_interleaved({"a": lambda: None, ("b", 1): lambda: None}, baseline="a", repeats=2, warmup=0,
                               progress=None)
    assert [r.name for r in rows] == ["a", ("b", 1)]


# -- means given with method='zero': unused as documented (one call loops over both methods), but
# a means that method='mean' could not use is refused, naming both ------------------------------
def _ablation_setup():
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    tokens = torch.randint(0, 10, (2, 6))
    targets = torch.randint(0, 10, (2, 6))
    return model, tokens, AB.loss_evaluation(tokens, targets)


def _zero_with(means):
    model, tokens, evaluation = _ablation_setup()
    where = torch.ones(6, dtype=torch.bool)
    return {
        "measure": lambda: AB.measure(model, evaluation, [(0, 0)], means=means),
        "ablation_table": lambda: AB.ablation_table(model, evaluation, {"a": [(0, 0)]}, means=means),
        "pruning_curve": lambda: AB.pruning_curve(model, evaluation, [(0, 0), (0, 1)], means=means),
        "prunable_counts": lambda: PT.prunable_counts(model, evaluation, [[(0, 0)]], lambda n: True,
                                                      means=means),
        "position_ablated_logits": lambda: PT.position_ablated_logits(model, tokens, [(0, 0)], where,
                                                                      means=means),
    }


@pytest.mark.parametrize("means", ["x", object(), float("nan"), [], -1],
                         ids=["str", "obj", "nan", "list", "neg"])
@pytest.mark.parametrize("function", list(_zero_with(None)))
def test_zero_ablation_refuses_means_it_could_not_use(function, means):
    with pytest.raises(TypeError) as info:
        _zero_with(means)[function]()
    message = str(info.value)
    assert "means" in message and "method='zero'" in message and "method='mean'" in message, message
    assert type(means).__name__ in message, message


@pytest.mark.parametrize("function", list(_zero_with(None)))
def test_zero_ablation_still_takes_real_means_unused(function):
    model, tokens, _ = _ablation_setup()
    means = AB.mean_head_outputs(model, tokens)
    _zero_with(means)[function]()  # the documented loop over both methods with one means
    _zero_with(None)[function]()


# -- duplicates refused where check_distinct exists (a repeat would be run or drawn twice) -------
def _pair(text):
    words = text.split()
    return words, [torch.rand(1, 2, len(words), len(words))]


def _dup_cases():
    from course_utils.interp.heatmaps import AttentionExplorer
    from course_utils.tasks.synthetic import InductionTask

    model, tokens, _ = _ablation_setup()
    where = torch.ones(6, dtype=torch.bool)
    return [
        Case("position_ablated_logits/heads repeated",
             lambda: PT.position_ablated_logits(model, tokens, [(0, 0), (0, 0)], where), ValueError,
             ["heads", "lists a head twice", "L0H0 (0, 0)"]),
        Case("InductionTask.sample/periods repeated",
             lambda: InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(2, 2)), ValueError,
             ["periods", "distinct", "repeats [2]"]),
        Case("AttentionExplorer/sentences repeated", lambda: AttentionExplorer(_pair, ["a b", "a b"], 1, 2),
             ValueError, ["sentences", "distinct", "repeats ['a b']"]),
        Case("AttentionExplorer/sentence an int", lambda: AttentionExplorer(_pair, [10**12], 1, 2),
             TypeError, ["sentences[0]", "str", "int 1000000000000"]),
        Case("AttentionExplorer/sentences an int", lambda: AttentionExplorer(_pair, 3, 1, 2),
             TypeError, ["sentences", "list of example texts", "int 3"]),
    ]


@pytest.mark.parametrize("index", range(5))
def test_repeated_entries_and_wrong_sentences_are_refused(index):
    assert_named(_dup_cases()[index])


def test_distinct_entries_still_pass():
    from course_utils.interp.heatmaps import AttentionExplorer
    from course_utils.tasks.synthetic import InductionTask

    model, tokens, _ = _ablation_setup()
    logits = PT.position_ablated_logits(model, tokens, [(0, 0), (0, 1)], torch.ones(6, dtype=torch.bool))
    assert logits.shape == (2, 6, 10)
    batch = InductionTask().sample(4, torch.Generator().manual_seed(0), periods=(2, 3))
    assert set(batch.periods.tolist()) <= {2, 3}
    assert AttentionExplorer(_pair, ["a b", "a c"], 1, 2).sentences == ["a b", "a c"]


def test_prunable_counts_counts_a_repeated_order_as_documented():
    model, _, evaluation = _ablation_setup()
    order = [(0, 1), (0, 0)]
    calls = []
    counts, measured = PT.prunable_counts(model, evaluation, [order, order],
                                          lambda n: calls.append(n) or True)
    assert counts == [2, 2] and len(measured) == 2 and len(calls) == 4
    assert "repeat an order" in PT.prunable_counts.__doc__


# -- core.outcome: a case that is no Case is the caller's mistake, not the answer's raise -------
@pytest.mark.parametrize("case", ["x", -1, float("nan"), [], object()],
                         ids=["str", "neg", "nan", "list", "obj"])
def test_outcome_refuses_a_case_that_is_no_case(case):
    from course_utils.exercises import core

    assert_named(Case("outcome", lambda: core.outcome(abs, case), TypeError,
                      ["case", "must be a Case", type(case).__name__]))


def test_outcome_still_reports_what_the_answer_raised():
    from course_utils.exercises import core

    assert core.outcome(abs, core.Case((-2,))) == 2
    raised = core.outcome(lambda x: 1 / 0, core.Case((1,)))
    assert raised.kind == "ZeroDivisionError"


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


# -- decode_step: sizes, x and the flush buffer are checked before they are used ---------------
def _decoder():
    from course_utils.bench.decode_step import SmallDecoder

    return SmallDecoder(d_model=16, num_heads=2, num_kv_heads=2, num_layers=1, context=4, attention="course")


def _decode_cases():
    from course_utils.bench import decode_step as DS

    sizes = dict(context=4, batch=1)
    return [
        Case("check_decoder_fits/d_model None", lambda: DS.check_decoder_fits(None, 2, 2, 1, **sizes),
             TypeError, ["d_model", "int", "NoneType None"]),
        Case("check_decoder_fits/num_heads None", lambda: DS.check_decoder_fits(16, None, 2, 1, **sizes),
             TypeError, ["num_heads", "int", "NoneType None"]),
        Case("check_decoder_fits/names one",
             lambda: DS.check_decoder_fits(16, 2, 2, 1, **sizes, names=["a"]), TypeError,
             ["names", "pair of str", "list ['a']"]),
        *(Case(f"weights_pass/x {label}", lambda x=x: _decoder().weights_pass(x), error, ["x", shown])
          for label, x, error, shown in (("str", "x", TypeError, "str"), ("neg", -1, TypeError, "int"),
                                         ("nan", float("nan"), TypeError, "float"),
                                         ("list", [], TypeError, "list"),
                                         ("wrong shape", torch.zeros(3, 16), ValueError, "(3, 16)"))),
        Case("time_flushed/flush None", lambda: DS.time_flushed({"a": lambda: None}, None, 0, 1), TypeError,
             ["flush", "tensor", "NoneType None"]),
        Case("time_flushed/flush meta",
             lambda: DS.time_flushed({"a": lambda: None}, torch.ones(4, device="meta"), 0, 1), ValueError,
             ["flush", "meta device"]),
    ]


@pytest.mark.parametrize("index", range(10))
def test_decode_step_checks_sizes_x_and_flush(index):
    assert_named(_decode_cases()[index])


def test_decode_step_still_runs_good_calls():
    from course_utils.bench import decode_step as DS

    DS.check_decoder_fits(16, 2, 2, 1, context=4, batch=1)
    decoder = _decoder()
    assert decoder.weights_pass().shape == decoder.weights_pass(torch.zeros(1, 16)).shape == (1, 16)
    assert list(DS.time_flushed({"a": lambda: None}, torch.ones(4), 0, 2)) == ["a"]


# -- env, widgets, training: each argument checked where it arrives -----------------------------
def _explorer(**kwargs):
    import ipywidgets as widgets

    from course_utils.interp.widgets import Explorer

    return Explorer(lambda n: f"n={n}", {"n": widgets.IntSlider(value=1, min=0, max=3)}, **kwargs)


def _train(**kwargs):
    from course_utils.model.train import TrainConfig, train_model

    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))
    batch = lambda g: (torch.randint(0, 10, (2, 6), generator=g),) * 2  # noqa: E731
    return train_model(model, batch, TrainConfig(steps=1), progress=False, **kwargs)


MISC_CASES = [
    Case("Explorer/rows nan", lambda: _explorer(rows=float("nan")), TypeError,
         ["rows", "list of rows", "float nan"]),
    Case("Explorer/rows object", lambda: _explorer(rows=object()), TypeError,
         ["rows", "list of rows", "object"]),
    Case("Explorer/note int", lambda: _explorer(note=123), TypeError, ["note", "str", "int 123"]),
    Case("train_model/evaluate -1", lambda: _train(evaluate=-1), TypeError,
         ["evaluate", "function model", "int -1"]),
]


@pytest.mark.parametrize("case", MISC_CASES, ids=lambda c: c.name)
def test_misc_arguments_checked_where_they_arrive(case):
    assert_named(case)


def test_seed_everything_takes_a_numpy_int_as_check_seed_does():
    import random

    import numpy as np

    from course_utils.env import seed_everything

    drawn = torch.randn(3, generator=seed_everything(np.int64(2)))
    first = random.random()
    assert torch.equal(drawn, torch.randn(3, generator=seed_everything(2)))
    assert random.random() == first  # Python's generator seeded from the same int


def test_misc_good_arguments_still_work():
    assert _explorer(rows=[["n"]], note="no widgets here").note == "no widgets here"
    history = _train(evaluate=lambda model: {"x": 1.0}, eval_every=1)
    assert history is not None


# -- meta-device inputs named; the attention base class and run_with_cache say what is missing --
def _model():
    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=1))


def _meta_and_base_cases():
    from course_utils.attention.hooks import run_with_cache
    from course_utils.attention.mha import MultiHeadAttention, MultiHeadAttentionBase
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.tasks.synthetic import InductionTask, induction_accuracy
    from course_utils.tasks.worked_example import round_half_up

    batch = InductionTask().sample(4, torch.Generator().manual_seed(0))
    return [
        Case("ov_copying_score/meta model", lambda: ov_copying_score(_model().to("meta"), 0, [1, 2]),
             ValueError, ["model's weights", "meta device"]),
        Case("induction_accuracy/meta logits",
             lambda: induction_accuracy(torch.randn(4, batch.tokens.shape[1], 64, device="meta"), batch),
             ValueError, ["logits", "meta device"]),
        Case("round_half_up/meta", lambda: round_half_up(torch.ones(3, device="meta")), ValueError,
             ["x", "meta device"]),
        Case("MultiHeadAttentionBase()", lambda: MultiHeadAttentionBase(), TypeError,
             ["MultiHeadAttentionBase", "not a layer", "MultiHeadAttention(d_model, num_heads)"]),
        Case("run_with_cache/no inputs", lambda: run_with_cache(MultiHeadAttention(8, 2)), TypeError,
             ["run_with_cache", "MultiHeadAttention.forward", "query"]),
    ]


@pytest.mark.parametrize("index", range(5))
def test_meta_inputs_and_the_base_class_are_named(index):
    assert_named(_meta_and_base_cases()[index])


def test_meta_and_base_good_calls_still_work():
    from course_utils.attention.hooks import run_with_cache
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.tasks.worked_example import round_half_up

    assert ov_copying_score(_model(), 0, [1, 2]).shape == (2,)
    assert round_half_up(torch.tensor([0.25], dtype=torch.float64), 1).tolist() == pytest.approx([0.3])
    out, cache = run_with_cache(MultiHeadAttention(8, 2), torch.zeros(1, 3, 8))
    assert out[0].shape == (1, 3, 8) and "hook_pattern" in cache


# -- documented instead of refused: what the docstring says is what happens ---------------------
def test_frozen_final_norm_takes_a_component_with_extra_leading_dims_as_documented():
    from course_utils.interp.circuits import frozen_final_norm

    model, stream = _model(), torch.randn(2, 6, 8)
    parts = torch.randn(3, 2, 6, 8)  # one part per "head"
    each = torch.stack([frozen_final_norm(model, stream, p) for p in parts])
    assert torch.allclose(frozen_final_norm(model, stream, parts), each)
    assert frozen_final_norm(model, stream, parts[:1]).shape == (1, 2, 6, 8)
    assert "leading dims" in frozen_final_norm.__doc__


def test_loss_evaluation_leaves_the_vocabulary_check_to_the_model_as_documented():
    big = torch.full((2, 6), 10**6)
    evaluation = AB.loss_evaluation(big, big)
    assert "checked against a vocabulary where the evaluation meets one" in AB.loss_evaluation.__doc__
    assert_named(Case("measure/out of vocabulary", lambda: AB.measure(_model(), evaluation), ValueError,
                      ["tokens", "vocab_size=10", "1000000"]))


def test_paged_cache_stores_nan_as_documented():
    from course_utils.model.paged_cache import PagedCache

    cache = PagedCache(4, 2, 1, 4)
    cache.add_sequence("a")
    cache.append("a", torch.full((1, 1, 4), float("nan")), torch.randn(1, 1, 4))
    assert "NaN and infinity\n        are stored as given" in PagedCache.append.__doc__
    assert cache.lengths["a"] == 1


# -- Exercise: reference, forbidden and make_cases checked when it is made, or named at check --
def _exercise(**kwargs):
    from course_utils.exercises import core

    fields = dict(title="t", make_cases=lambda: [core.Case((-2,))]) | kwargs
    return core.Exercise(**fields)


EXERCISE_CASES = [
    Case("Exercise/reference object", lambda: _exercise(reference=object()), TypeError,
         ["reference", "a function or None", "object"]),
    Case("Exercise/reference -1", lambda: _exercise(reference=-1), TypeError, ["reference", "int -1"]),
    Case("Exercise/forbidden -1", lambda: _exercise(forbidden=-1), TypeError,
         ["forbidden", "list of functions", "int -1"]),
    Case("Exercise/make_cases arity", lambda: _exercise(make_cases=lambda n: []), TypeError,
         ["make_cases", "no arguments", "(n)"]),
]


@pytest.mark.parametrize("case", EXERCISE_CASES, ids=lambda c: c.name)
def test_exercise_checks_its_functions_when_made(case):
    assert_named(case)


def test_exercise_names_a_make_cases_that_returns_no_cases_at_check():
    def make_cases():
        return "xy"

    def own_abs(x):
        return x if x >= 0 else -x

    feedback = _exercise(make_cases=make_cases).check(own_abs)
    assert feedback.status == "error" and "make_cases" in feedback.message, feedback.message
    assert "list of Case" in feedback.message, feedback.message
    assert _exercise(reference=abs, forbidden=[max]).check(own_abs).passed


def test_exercise_still_takes_cases_made_by_a_generator():
    from course_utils.exercises import core

    def own_abs(x):
        return x if x >= 0 else -x

    exercise = _exercise(make_cases=lambda: (core.Case((v,)) for v in (-2, 3)), reference=abs)
    assert exercise.check(own_abs).passed
