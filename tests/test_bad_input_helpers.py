"""Issue 38, third pass: the helpers one step off the main entry points (figures, tables,
backends, trainers' evaluators, scores, task batches) refuse bad input with a message that
names the argument, what was expected and what arrived, and the shared validators behind
them (ints, int lists, row selections, axes, arities) keep one rule everywhere."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named

from course_utils.attention import masks, naive_mha, sdpa_backends, shapes, split_figure
from course_utils.attention.kv_figure import plot_kv_cache_growth, plot_kv_sharing
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.validation import check_callable, check_int_list, check_rows
from course_utils.bench import decode_step as bench_decode
from course_utils.bench import gqa_speed, memory, mha_speed, timing
from course_utils.exercises import autograde, sandbox
from course_utils.exercises.your_attention import forward_with, plot_block
from course_utils.interp import ablation
from course_utils.interp.heatmaps import sentence_attention_fn
from course_utils.interp.scores import agreement_score, attention_mass
from course_utils.model.train import (
    TrainConfig,
    evaluate_agreement,
    evaluate_induction,
    train_agreement,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks import synthetic
from course_utils.tasks.two_relations import (
    TwoKeyTask,
    pair_class,
    plot_item_attention,
    plot_learning_curves,
    split_pair_class,
)

torch.manual_seed(0)
MHA = MultiHeadAttention(8, 2)
X = torch.randn(2, 5, 8)
Q4 = torch.randn(1, 2, 3, 4)
M = TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2)).eval()
TOK = torch.tensor([[1, 2, 3, 4]])
W = torch.softmax(torch.randn(8, 2, 6, 6, generator=torch.Generator().manual_seed(0)), -1)
EV = ablation.loss_evaluation(TOK, TOK.roll(-1, 1))
AGREE = synthetic.AgreementTask().sample(8, torch.Generator().manual_seed(0))
LOOKUP = TwoKeyTask().sample(4, seed=0)
INDUCTION = synthetic.InductionTask().sample(2, torch.Generator().manual_seed(0))
r = torch.randn

CASES = [
    # attention: merge_heads, the nn.MultiheadAttention mask converters, the naive head
    Case("merge_heads 3-D", lambda: MHA.merge_heads(r(2, 5, 4)), ValueError, ["heads", "4-D", "(2, 5, 4)"]),
    Case("merge_heads h*dk != d_model", lambda: MHA.merge_heads(r(2, 3, 5, 4)), ValueError,
         ["heads", "d_model = 8", "(2, 3, 5, 4)"]),
    Case("to_torch_attn_mask 1-D", lambda: masks.to_torch_attn_mask(torch.ones(3, dtype=torch.bool)),
         ValueError, ["mask", "2-D", "(3,)"]),
    Case("to_torch_key_padding_mask 3-D",
         lambda: masks.to_torch_key_padding_mask(torch.ones(2, 3, 4, dtype=torch.bool)), ValueError,
         ["key_padding_mask", "(B, Tk)", "(2, 3, 4)"]),
    Case("AttentionHead d_k 0", lambda: naive_mha.AttentionHead(8, 0), ValueError, ["d_k", "positive", "0"]),
    Case("AttentionHead d_k float", lambda: naive_mha.AttentionHead(8, 2.0), TypeError,
         ["d_k", "int", "2.0"]),
    Case("stack_head_weights dtype mix",
         lambda: naive_mha.stack_head_weights([r(4, 8)] * 2, [r(4, 8).double()] * 2, [r(4, 8)] * 2),
         TypeError, ["k_parts[0]", "dtype", "float64"]),
    Case("stack_head_weights a str", lambda: naive_mha.stack_head_weights("abc", [r(4, 8)], [r(4, 8)]),
         TypeError, ["q_parts", "list of tensors", "str"]),
    Case("stack_head_weights list of ints", lambda: naive_mha.stack_head_weights([1], [r(4, 8)], [r(4, 8)]),
         TypeError, ["q_parts[0]", "Tensor", "int"]),
    # attention: tables and figures
    Case("parameter_table []", lambda: shapes.parameter_table(8, []), ValueError, ["head_counts", "empty"]),
    Case("parameter_table 2", lambda: shapes.parameter_table(8, 2), TypeError,
         ["head_counts", "list", "int 2"]),
    Case("parameter_table [2, 2.0]", lambda: shapes.parameter_table(8, [2, 2.0]), TypeError,
         ["head_counts[1]", "int", "2.0"]),
    Case("parameter_table [2, True]", lambda: shapes.parameter_table(8, [2, True]), TypeError,
         ["head_counts[1]", "bool"]),
    Case("cost_table []", lambda: shapes.cost_table(1, 4, 8, []), ValueError, ["head_counts", "empty"]),
    Case("frame_to_text str", lambda: shapes.frame_to_text("x"), TypeError, ["frame", "DataFrame", "str"]),
    Case("plot_split_merge ax str", lambda: split_figure.plot_split_merge(ax="x"), TypeError,
         ["ax", "Axes", "str 'x'"]),
    Case("plot_kv_sharing ax list", lambda: plot_kv_sharing(ax=[1, 2]), TypeError, ["ax", "Axes", "list"]),
    Case("plot_kv_cache_growth ax int", lambda: plot_kv_cache_growth(ax=3), TypeError, ["ax", "Axes", "int"]),
    # attention: the SDPA backend helpers
    Case("backend_rejection_reason label",
         lambda: sdpa_backends.backend_rejection_reason("bogus", Q4, Q4, Q4), ValueError,
         ["label", "flash", "'bogus'"]),
    Case("backend_rejection_reason int label", lambda: sdpa_backends.backend_rejection_reason(3, Q4, Q4, Q4),
         TypeError, ["label", "int 3"]),
    Case("sdpa_backend_callables wrong x", lambda: sdpa_backends.sdpa_backend_callables(MHA, r(2, 5, 6)),
         ValueError, ["x", "d_model=8", "(2, 5, 6)"]),
    Case("sdpa_backend_callables unknown member",
         lambda: sdpa_backends.sdpa_backend_callables(MHA, X, {"a": "bogus"}), ValueError,
         ["backends['a']", "MATH", "'bogus'"]),
    Case("sdpa_backend_callables list", lambda: sdpa_backends.sdpa_backend_callables(MHA, X, []), TypeError,
         ["backends", "dict", "list"]),
    # model: forward's flags and hooks, the task evaluators and trainers
    Case("model return_attention=1", lambda: M(TOK, return_attention=1), TypeError,
         ["return_attention", "True or False", "int 1"]),
    Case("model edit_heads of one argument", lambda: M(TOK, edit_heads=lambda h: h), TypeError,
         ["edit_heads", "2 positional", "<lambda>(h)"]),
    Case("train_agreement config dict", lambda: train_agreement({"vocab_size": 3}, steps=1, progress=False),
         TypeError, ["config", "ModelConfig", "dict"]),
    Case("evaluate_induction model too small", lambda: evaluate_induction(M), ValueError,
         ["model's config", "vocab_size=12", "max_len=10", "induction"]),
    Case("evaluate_agreement model too small", lambda: evaluate_agreement(M), ValueError,
         ["model's config", "vocab_size=12", "agreement"]),
    Case("evaluate_induction not a model", lambda: evaluate_induction(torch.nn.Linear(2, 2)), TypeError,
         ["model", "TinyTransformer", "Linear"]),
    Case("evaluate_induction batch_size 0", lambda: evaluate_induction(M, batch_size=0), ValueError,
         ["batch_size", "positive", "0"]),
    Case("forward_with fn=3", lambda: forward_with(M, TOK, fn=3), TypeError, ["fn", "function", "int 3"]),
    Case("forward_with fn of two arguments", lambda: forward_with(M, TOK, fn=lambda x, w: x), TypeError,
         ["fn", "6 positional", "(x, w)"]),
    Case("plot_block ax str", lambda: plot_block(ax="x"), TypeError, ["ax", "Axes", "str"]),
    # interp: scores, measures, the explorer's attention function
    Case("agreement_score subject after query", lambda: agreement_score(W, 2, 5), ValueError,
         ["subject_positions", "after", "subject 5", "query 2"]),
    Case("attention_mass per_sequence 'y'",
         lambda: attention_mass(W, 3, torch.ones(8, 6, dtype=torch.bool), per_sequence="y"), TypeError,
         ["per_sequence", "True or False", "'y'"]),
    Case("measure duplicate names", lambda: ablation.measure(M, [EV, EV]), ValueError,
         ["evaluations[1]", "'loss'", "own names"]),
    Case("sentence_attention_fn Linear", lambda: sentence_attention_fn(torch.nn.Linear(2, 2)), TypeError,
         ["model", "TinyTransformer", "Linear"]),
    # tasks: targets, accuracy, row selections, pair classes, plots
    Case("next_token_targets float tokens", lambda: synthetic.next_token_targets(torch.zeros(2, 3)),
         TypeError, ["tokens", "torch.long", "float32"]),
    Case("next_token_targets 1-D", lambda: synthetic.next_token_targets(torch.zeros(3, dtype=torch.long)),
         ValueError, ["tokens", "2-D", "(3,)"]),
    Case("next_token_targets pad_id 1.5",
         lambda: synthetic.next_token_targets(torch.zeros(2, 3, dtype=torch.long), pad_id=1.5), TypeError,
         ["pad_id", "int", "1.5"]),
    Case("induction_accuracy NaN logits", lambda: synthetic.induction_accuracy(
        torch.full((2, 32, 64), float("nan")), INDUCTION), ValueError,
         ["logits", "NaN", "scored positions"]),
    Case("AgreementBatch.take out of range", lambda: AGREE.take(torch.tensor([100])), IndexError,
         ["rows", "0..7", "100"]),
    Case("AgreementBatch.take negative", lambda: AGREE.take([-1]), IndexError, ["rows", "0..7", "-1"]),
    Case("AgreementBatch.take bool of wrong length", lambda: AGREE.take(torch.ones(3, dtype=torch.bool)),
         ValueError, ["rows", "bool mask", "8", "(3)"]),
    Case("AgreementBatch.take floats", lambda: AGREE.take(torch.tensor([1.0])), TypeError,
         ["rows", "integer", "float32"]),
    Case("LookupBatch.take out of range", lambda: LOOKUP.take(torch.tensor([9])), IndexError,
         ["index", "0..3", "9"]),
    Case("pair_class symbol out of range",
         lambda: pair_class(torch.tensor([9]), torch.tensor([0]), 8), ValueError, ["symbol_a", "0..7", "9"]),
    Case("pair_class float symbols",
         lambda: pair_class(torch.tensor([1.0]), torch.tensor([0]), 8), TypeError, ["symbol_a", "float32"]),
    Case("split_pair_class out of range", lambda: split_pair_class(torch.tensor([100]), 8), ValueError,
         ["classes", "0..63", "100"]),
    Case("plot_learning_curves ax str", lambda: plot_learning_curves([], ax="x"), TypeError, ["ax", "Axes"]),
    Case("plot_item_attention index bool", lambda: plot_item_attention(None, LOOKUP, index=True), TypeError,
         ["index", "int", "bool"]),
    # bench: tables, spreads, buffers, clocks, decoders, caches, the lesson 4 versions
    Case("format_table []", lambda: timing.format_table("t", [], "a"), ValueError,
         ["timings", "non-empty", "[]"]),
    Case("ratio_spread zero baseline sample", lambda: timing.ratio_spread(
        [timing.Timing("a", 1.0, 1.0, [0.0, 1.0, 2.0]), timing.Timing("b", 1.0, 1.0, [1.0] * 3)], "b", "a"),
         ValueError,
         ["baseline 'a'", "0.0 s", "positive"]),
    Case("format_slowest_cells count -1",
         lambda: memory.format_slowest_cells(memory.NotebookMemory("x", 1.0, 1.0), -1), ValueError,
         ["count", "positive", "-1"]),
    Case("format_test_report top 0", lambda: memory.format_test_report({}, top=0), ValueError, ["top", "0"]),
    Case("notebook_peak_memory timeout 0", lambda: memory.notebook_peak_memory("x.ipynb", timeout=0),
         ValueError, ["timeout", "1..604800", "0"]),
    Case("flush_note size -1", lambda: bench_decode.flush_note(-1), ValueError, ["size", "-1"]),
    Case("random_buffer 3 bytes", lambda: bench_decode.random_buffer(3), ValueError,
         ["num_bytes", ">= 4", "3"]),
    Case("random_buffer 2**62", lambda: bench_decode.random_buffer(2**62), ValueError,
         ["num_bytes", "GiB", "memory"]),
    Case("read_bandwidth int buffer",
         lambda: bench_decode.read_bandwidth(torch.ones(10, dtype=torch.long), repeats=1), TypeError,
         ["buffer", "floating", "int64"]),
    Case("read_bandwidth empty buffer", lambda: bench_decode.read_bandwidth(torch.empty(0), repeats=1),
         ValueError, ["buffer", "at least one", "(0,)"]),
    Case("run_conditions 0", lambda: bench_decode.run_conditions(0), ValueError, ["threads", "1..", "0"]),
    Case("clock_for -1", lambda: bench_decode.clock_for(-1), ValueError, ["threads", "-1"]),
    Case("SmallDecoder int weights",
         lambda: bench_decode.SmallDecoder(16, 2, 2, 1, context=4, weight_dtype=torch.int32), TypeError,
         ["weight_dtype", "floating", "int32"]),
    Case("SmallDecoder huge context", lambda: bench_decode.SmallDecoder(16, 2, 2, 1, context=10**12),
         ValueError, ["context", "GiB", "memory"]),
    Case("make_kv_caches int dtype", lambda: gqa_speed.make_kv_caches(4, 8, 4, 1, [4], dtype=torch.int64),
         TypeError, ["dtype", "floating", "int64"]),
    Case("make_kv_caches meta", lambda: gqa_speed.make_kv_caches(4, 8, 4, 1, [4], device="meta"), ValueError,
         ["device", "'meta'"]),
    Case("time_cold no steps",
         lambda: gqa_speed.time_cold({}, baseline="a", repeats=1, warmup=0, progress=None), ValueError,
         ["steps", "non-empty", "{}"]),
    Case("time_cold flush_bytes -1", lambda: gqa_speed.time_cold(
        {"a": lambda: 1}, baseline="a", repeats=1, warmup=0, flush_bytes=-1, progress=None), ValueError,
         ["flush_bytes", ">= 4", "-1"]),
    Case("lesson_implementations 10, 3", lambda: mha_speed.lesson_implementations(10, 3), ValueError,
         ["num_heads = 3", "d_model = 10"]),
    Case("lesson_implementations meta", lambda: mha_speed.lesson_implementations(8, 2, device="meta"),
         ValueError, ["device", "'meta'"]),
    Case("bench_mha batch 0", lambda: mha_speed.bench_mha(0, 4, 8, 2, repeats=1), ValueError,
         ["batch", "positive", "0"]),
    Case("count_dispatched_ops 3", lambda: mha_speed.count_dispatched_ops(3), TypeError,
         ["fn", "function", "3"]),
    # the shared validators themselves
    Case("check_int_list set", lambda: check_int_list({1, 2}, "sizes"), TypeError, ["sizes", "list", "set"]),
    Case("check_rows 2-D", lambda: check_rows(torch.zeros(2, 2, dtype=torch.long), "rows", 4), ValueError,
         ["rows", "1-D", "(2, 2)"]),
    Case("check_callable arity", lambda: check_callable(lambda: 0, "fn", "f(a)", nargs=1), TypeError,
         ["fn", "1 positional argument", "<lambda>()"]),
    # the grader's helpers (the battery's last misc lines)
    Case("answer_source one string", lambda: sandbox.answer_source("def f(): pass", "f"), TypeError,
         ["cells", "list", "str"]),
    Case("answer_source cell out of range", lambda: sandbox.answer_source(["def f(): pass"], "f", 99),
         ValueError, ["answer_cell", "0..0", "99"]),
    Case("rules_broken unknown check", lambda: sandbox.rules_broken("x", "lesson99.check_x"), ValueError,
         ["check_key", "lessonNN.check_xxx", "lesson99.check_x"]),
    Case("cases_of None", lambda: autograde.cases_of(None), TypeError, ["exercise", "Exercise", "NoneType"]),
    Case("grade_notebook None", lambda: autograde.grade_notebook(None, salt=None, solutions_dir=None),
         TypeError, ["nb", "nbformat", "NoneType"]),
    Case("grade_answer per_call 0", lambda: autograde.grade_answer(
        "lesson02", "check_softmax_rows", "def softmax_rows(s):\n    return s\n", "softmax_rows", salt=None,
        solutions_dir=None, per_call=0), ValueError, ["per_call", "seconds", "0"]),
]


def test_a_secrets_file_that_is_not_json_is_named(tmp_path):
    (tmp_path / autograde.SECRETS_NAME).write_text("{not json")
    (tmp_path / autograde.SECRETS_NAME).chmod(0o600)  # owner-only, as write_secrets makes it
    with pytest.raises(ValueError, match="not the grader's secrets file .*nbgrader_tools.py source"):
        autograde.read_secrets(tmp_path)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_helper_bad_input_is_named(case):
    assert_named(case)


def test_the_validators_accept_what_they_should():
    assert check_int_list((np.int64(2), 4), "h") == [2, 4]
    assert check_int_list((h for h in [1, 2]), "h") == [1, 2]
    mask = torch.tensor([True, False, True, False])
    assert check_rows(mask, "rows", 4).tolist() == [0, 2]
    assert check_rows([3, 0], "rows", 4).tolist() == [3, 0]
    assert check_rows(np.array([1]), "rows", 4).tolist() == [1]
    check_callable(print, "fn", nargs=3)  # a built-in whose signature is unreadable or variadic passes
    check_callable(lambda *a: a, "fn", nargs=6)


def test_a_bool_mask_takes_the_rows_it_keeps_templates_included():
    """The mask used to pick the tensors' rows but index the template list by True/False (1/0)."""
    keep = torch.zeros(8, dtype=torch.bool)
    keep[[2, 5]] = True
    taken = AGREE.take(keep)
    assert taken.template == (AGREE.template[2], AGREE.template[5])
    assert torch.equal(taken.tokens, AGREE.tokens[[2, 5]])


def test_stack_head_weights_takes_a_stacked_tensor_like_a_list():
    parts = torch.randn(3, 2, 4, 8)  # (q/k/v, h, dk, d)
    from_lists = naive_mha.stack_head_weights(list(parts[0]), list(parts[1]), list(parts[2]))
    assert torch.equal(naive_mha.stack_head_weights(parts[0], parts[1], parts[2]), from_lists)


def test_a_short_runs_default_warmup_reaches_the_learning_rate_at_the_last_step():
    config = TrainConfig(steps=10, lr=1e-2)  # the default warm-up, 20 steps, is cut to the run
    rates = [config.lr_at(s) for s in range(10)]
    assert rates == sorted(rates) and rates[-1] == pytest.approx(1e-2)
    assert rates[0] == pytest.approx(1e-3)
    longer = TrainConfig(steps=100, lr=1e-2, warmup_steps=10)  # a warm-up inside the run is unchanged
    assert longer.lr_at(9) == pytest.approx(1e-2) and longer.lr_at(0) == pytest.approx(1e-3)


def test_nan_logits_count_only_where_a_metric_reads_them():
    """A partial forward pass leaves NaN where no metric looks: those positions are allowed."""
    logits = torch.zeros(2, 32, 64)
    scored = INDUCTION.scored[:, :-1]
    unread = (~scored).nonzero()[0].tolist()
    logits[unread[0], unread[1]] = float("nan")
    assert 0.0 <= synthetic.induction_accuracy(logits, INDUCTION) <= 1.0
    read = scored.nonzero()[0].tolist()
    logits[read[0], read[1]] = float("nan")
    with pytest.raises(ValueError, match="NaN at scored positions"):
        synthetic.induction_accuracy(logits, INDUCTION)


def test_agreement_score_takes_numpy_int_positions():
    assert torch.equal(agreement_score(W, np.int64(4), np.int64(1)), agreement_score(W, 4, 1))


def test_run_with_your_attention_reports_a_function_of_the_wrong_arity():
    """The learner's run never raises because of their function: the arity check becomes the
    report's error line, naming what was expected."""
    from course_utils.exercises.your_attention import run_with_your_attention

    report = run_with_your_attention(lambda x, w_in: x, batch_size=2)
    assert "fn must be" in report.error and "6 positional" in report.error and "(x, w_in)" in report.error


@pytest.mark.parametrize("raise_it, words", [
    (lambda: sys.exit(3), "called exit() (SystemExit: 3)"),
    (lambda: (_ for _ in ()).throw(type("Odd", (BaseException,), {})("odd")), "Odd: odd"),
])
def test_run_with_your_attention_answers_a_base_exception_of_the_learner(raise_it, words):
    """SystemExit (or another BaseException) from the learner's function must not escape the
    run and end the kernel: it becomes the report's error line."""
    from course_utils.exercises.your_attention import run_with_your_attention

    def mha_forward(x, w_in, b_in, w_out, b_out, n_heads, causal=False):
        raise_it()

    report = run_with_your_attention(mha_forward, batch_size=2)
    assert words in report.error and report.yours is None


@pytest.mark.parametrize("projection", ["3d", "polar"])
@pytest.mark.parametrize("draw", ["plot_split_merge", "plot_kv_sharing", "plot_kv_cache_growth", "plot_head",
                                  "plot_block"])
def test_plots_refuse_3d_and_polar_axes_by_name(draw, projection):
    """A 3-D or polar Axes is a matplotlib Axes, so check_axes let it through and the drawing
    failed inside matplotlib (Axes3D.text() missing 's', QuadMesh has no do_3d_projection,
    KeyError 'top'). It is refused up front, naming ax, its class and its projection."""
    import matplotlib.pyplot as plt

    from course_utils.interp.heatmaps import plot_head

    weights = masks.masked_softmax(torch.randn(4, 4), masks.causal_mask(4))
    calls = {"plot_split_merge": split_figure.plot_split_merge, "plot_kv_sharing": plot_kv_sharing,
             "plot_kv_cache_growth": plot_kv_cache_growth, "plot_block": plot_block,
             "plot_head": lambda ax: plot_head(weights, list("abcd"), ax=ax)}
    fig = plt.figure()
    try:
        ax = fig.add_subplot(projection=projection)
        wanted = rf"^ax must be a 2-D matplotlib Axes .*projection '{projection}'"
        with pytest.raises(TypeError, match=wanted):
            calls[draw](ax=ax)
        assert not ax.texts and not ax.collections and not ax.patches  # refused before drawing anything
    finally:
        plt.close(fig)
