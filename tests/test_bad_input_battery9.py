"""Battery 8's leftovers (issue 38): inputs that gave a silent wrong result, an error naming the
wrong argument, a misleading exercise message or a raw Python error. Each is now refused by
name (what was expected, what arrived), or gives the right result."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_utils import paths
from course_utils.attention import shapes
from course_utils.attention import validation as va
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.shapes import parameter_table, trace_shapes
from course_utils.bench import decode_step, gqa_speed, mha_speed, timing
from course_utils.exercises import answers, sandbox
from course_utils.model import kv_cache
from course_utils.model.checkpoint import checkpoint_paths
from course_utils.tasks import two_relations, worked_example

# -- 1. silent results --------------------------------------------------------------------------
# (call, error type, words the message must hold: the argument, what was expected, what arrived)
SILENT = [
    ("parameter_table duplicate head count", lambda: parameter_table(8, [2, 2]), ValueError,
     ["head_counts", "distinct", "[2, 2]", "repeats [2]"]),
    ("RatioSpread nan ratio", lambda: timing.RatioSpread("a", "b", math.nan, 1, 1, 1, 1, 3), ValueError,
     ["RatioSpread('a').median", "finite number > 0", "nan"]),
    ("RatioSpread 0 repeats", lambda: timing.RatioSpread("a", "b", 1.0, 1, 1, 1, 1, 0), ValueError,
     ["RatioSpread('a').repeats", "positive int", "got 0"]),
    ("make_read_probe empty buffer", lambda: decode_step.make_read_probe(torch.empty(0)), ValueError,
     ["buffer", "at least one number", "(0,)"]),
    ("random_buffer seed -1", lambda: decode_step.random_buffer(64, seed=-1), ValueError,
     ["seed", ">= 0", "-1"]),
    ("grading_note cells str", lambda: sandbox.grading_note("x = 1", "lesson02.check_softmax_rows"),
     TypeError, ["cells", "list of str", "str 'x = 1'"]),
    ("grading_note unknown check", lambda: sandbox.grading_note(["x = 1"], "bogus"), ValueError,
     ["check_key", "lessonNN.check_xxx", "'bogus'"]),
    ("ShapeTrace.format code str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
     .format(code="no"), TypeError, ["code", "True or False", "str 'no'"]),
    ("trace_shapes keep_tensors str", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8),
                                                           keep_tensors="yes"),
     TypeError, ["keep_tensors", "True or False", "str 'yes'"]),
    ("Table values vs row labels", lambda: worked_example.Table("t", np.ones((2, 2)), ("a",), ("b", "c")),
     ValueError, ["Table('t').values", "one row per row label", "(1, 2)", "(2, 2)"]),
    ("output_rounding_budget nan", lambda: worked_example.output_rounding_budget(
        np.full((2, 2), np.nan), np.ones((2, 2))), ValueError, ["weights", "finite", "nan at index (0, 0)"]),
    ("checkpoint_paths NUL", lambda: checkpoint_paths("ind\x00uction"), ValueError,
     ["name_or_path", "NUL", "'ind\\x00uction'"]),
    ("check_device cpu:3", lambda: va.check_device("cpu:3"), ValueError, ["device", "'cpu:3'", "use 'cpu'"]),
    ("check_distinct nan twice", lambda: va.check_distinct([math.nan, math.nan], "xs"), ValueError,
     ["xs", "distinct", "repeats [nan]"]),
    ("check_tensor_list one tensor", lambda: va.check_tensor_list(torch.ones(2, 2), "parts"), TypeError,
     ["parts", "list or tuple of tensors", "one tensor of shape (2, 2)"]),
    ("check_positive_number inf", lambda: va.check_positive_number(math.inf, "x"), ValueError,
     ["x", "finite number > 0", "inf"]),
    ("check_table duplicate columns", lambda: va.check_table(
        __import__("pandas").DataFrame([[1, 2]], columns=["a", "a"]), "t", ("a",)), ValueError,
     ["t", "distinct column names", "repeats ['a']"]),
    ("check_tensor sparse", lambda: va.check_tensor(torch.ones(2, 2).to_sparse(), "x", ndim=2), TypeError,
     ["x", "dense (strided)", "sparse_coo"]),
    ("check_edited_heads all NaN", lambda: va.check_edited_heads(torch.full((1, 2, 3, 4), math.nan),
                                                                  torch.ones(1, 2, 3, 4)),
     ValueError, ["edit_heads's result", "finite", "nan at index (0, 0, 0, 0)"]),
]


def test_sweep_mha_refuses_a_repeated_size_before_measuring(monkeypatch):
    """sweep_mha('batch', [1, 1]) measured twice and returned one row."""
    measured = []
    monkeypatch.setattr(mha_speed, "bench_mha", lambda *a, **k: measured.append(a) or [])
    with pytest.raises(ValueError) as refused:
        mha_speed.sweep_mha("batch", [1, 1], repeats=1)
    assert "values must list distinct sizes" in str(refused.value) and "repeats [1]" in str(refused.value)
    assert measured == []


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


def test_multi_head_attention_with_inf_input_is_documented_not_refused():
    """The check would cost a pass over the data every forward (10% at lesson 04's sizes, and a
    GPU wait), so forward leaves it to check_finite; its docstring says so, and check_finite names
    the input."""
    assert "check_finite" in MultiHeadAttention.forward.__doc__
    x = torch.full((1, 2, 8), math.inf)
    with pytest.raises(ValueError, match=r"query must hold finite numbers, got inf at index \(0, 0, 0\)"):
        va.check_finite(x, "query")


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


def test_train_batch_size_beyond_memory_is_refused_when_parsed(tmp_path, capsys):
    from course_utils.model import train

    out = tmp_path / "induction"
    with pytest.raises(SystemExit) as info:
        train.main(["induction", "--steps", "1", "--no-progress", "--batch-size", "1000000000",
                    "--out", str(out)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--batch-size asks for" in err and "1,000,000,000 sequences" in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


def test_bench_train_seeds_beyond_torch_are_refused_when_parsed(capsys):
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(["train", "--seeds", str(2**70), "--induction-max-steps", "1"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and "--seeds" in err and "0..2**64-1" in err and str(2**70) in err, err


FAST = torch.randn(2, 2, 5, 4)
FAST_ATTENTION = [
    ("list q", ([1], [1], [1], None, False), TypeError, ["q must be a torch.Tensor", "got list"]),
    ("int causal_only", (FAST, FAST, FAST, None, 1), TypeError, ["causal_only", "True or False", "int 1"]),
    ("mask of other Tq, Tk", (FAST, FAST, FAST, torch.ones(3, 3, dtype=torch.bool), False), ValueError,
     ["allowed of shape (3, 3)", "(2, 2, 5, 5)"]),
    ("k of other dk", (FAST, torch.randn(2, 2, 5, 3), FAST, None, False), ValueError,
     ["k must be (B=2, g=2, Tk, dk=4)", "got (2, 2, 5, 3)"]),
]


@pytest.mark.parametrize("args, error, words", [c[1:] for c in FAST_ATTENTION],
                         ids=[c[0] for c in FAST_ATTENTION])
def test_fast_attention_checks_its_inputs_by_name(args, error, words):
    with pytest.raises(error) as refused:
        MultiHeadAttention(8, 2).fast_attention(*args)
    assert all(w in str(refused.value) for w in words), str(refused.value)


def test_fast_attention_still_matches_the_step_by_step_heads():
    m = MultiHeadAttention(8, 2)
    causal = torch.ones(5, 5, dtype=torch.bool).tril()[None, None]
    fused = m.fast_attention(FAST, FAST, FAST, causal.expand(2, 2, 5, 5), False)
    by_steps = torch.softmax((FAST @ FAST.transpose(-2, -1) / 2).masked_fill(~causal, -math.inf), -1) @ FAST
    assert torch.allclose(fused, by_steps, atol=1e-5)


def test_release_with_a_file_for_student_says_so_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """`course.py release` with student/ a file raised FileExistsError, after rewriting the lessons."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "scripts"))
    import nbgrader_tools as tools

    student = tmp_path / "student"
    student.write_text("keep\n")
    monkeypatch.setattr(tools, "STUDENT", student)
    monkeypatch.setattr(tools, "_lessons", lambda: pytest.fail("a lesson was read before the check"))
    assert tools.main(["release"]) == 1
    err = capsys.readouterr().err
    assert f"{student} is a file, not a folder" in err and "nothing was written" in err, err
    assert student.read_text() == "keep\n" and sorted(p.name for p in tmp_path.iterdir()) == ["student"]


# -- 3. exercise messages that named the wrong cause ---------------------------------------------
def test_an_answer_that_calls_a_check_is_told_so_and_the_next_check_works():
    """It was told "you called the reference: your function uses `answers.stored`"."""
    from course_utils.exercises import lesson01

    def calls_the_check(scores, values):
        return lesson01.check_attend(lambda s, v: v)

    feedback = lesson01.check_attend(calls_the_check)
    assert not feedback.passed and feedback.mistake == "called_a_check", feedback
    assert "calls a check (Exercise 1.1" in feedback.message and "answers.stored" not in feedback.message

    def attend(scores, values):
        weights = torch.exp(scores - scores.max(-1, keepdim=True).values)
        return weights / weights.sum(-1, keepdim=True) @ values

    assert lesson01.check_attend(attend).passed  # nothing of the nested call is left behind


def test_a_nested_tensor_answer_is_named_as_one():
    """It was told "(RuntimeError: Internal error: NestedTensorImpl doesn't support sizes...)"."""
    import warnings

    from course_utils.exercises import lesson01

    def nested(scores, values):
        weights = torch.exp(scores) / torch.exp(scores).sum(-1, keepdim=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's "nested tensors are in prototype stage"
            return torch.nested.nested_tensor([weights @ values])

    feedback = lesson01.check_attend(nested)
    assert not feedback.passed and "a nested tensor of 1 tensor (torch.float32)" in feedback.message, feedback
    assert "Internal error" not in feedback.message and "Expected a tensor of shape" in feedback.message


# -- 4. raw Python errors from public helpers --------------------------------------------------
def _binary_worked_example(tmp_path):
    path = tmp_path / "garbage.json"
    path.write_bytes(bytes([0xC3, 0x28]) * 100)
    return lambda: worked_example.load_worked_example(path)


def _other_tasks_batch():
    model = two_relations.LookupModel(two_relations.TwoKeyTask(), 16, 2)
    batch = two_relations.TwoKeyTask(num_keys=40, num_items=8).sample(4, seed=0)
    return model(batch)


def _naive_without_a_head():
    from course_utils.attention.naive_mha import NaiveMultiHeadAttention

    naive = NaiveMultiHeadAttention(8, 2)
    del naive.heads[1]
    return naive.to_batched()


RAW = [
    ("dequantize_kv misfit scale", lambda: kv_cache.dequantize_kv(
        kv_cache.Quantized._make((torch.ones(1, 1, 2, 4, dtype=torch.int8), torch.ones(3), None))),
     ValueError, ["q.scale", "fit the codes (1, 1, 2, 4)", "got (3)"]),
    ("LookupModel other task's batch", _other_tasks_batch, ValueError,
     ["batch.item_keys", "keys in 0..15", "max 38", "not from the model's task"]),
    ("NaiveMHA.to_batched after del heads[1]", _naive_without_a_head, ValueError,
     ["heads", "num_heads=2", "got 1"]),
    ("make_read_probe clock=3", lambda: decode_step.make_read_probe(torch.ones(16), clock=3), TypeError,
     ["clock", "function of no arguments", "int 3"]),
    ("time_cold progress=3", lambda: gqa_speed.time_cold(
        {"a": lambda: 1}, baseline="a", repeats=2, warmup=0, progress=3), TypeError,
     ["progress", "a str", "int 3"]),
    ("format_spread_table title None", lambda: timing.format_spread_table(
        None, timing.time_interleaved({"a": lambda: 1}, baseline="a", repeats=3, warmup=0), "a"),
     TypeError, ["title", "a str", "NoneType None"]),
    ("peak_allocated_bytes fn of one argument", lambda: shapes.peak_allocated_bytes(lambda a: a),
     TypeError, ["fn", "no arguments", "<lambda>(a)"]),
    ("weight_on_keys None", lambda: two_relations.weight_on_keys(
        None, two_relations.TwoKeyTask().sample(4, seed=0)),
     TypeError, ["model", "LookupModel", "NoneType"]),
    ("recompute_from_article dict", lambda: worked_example.recompute_from_article({}), TypeError,
     ["example", "WorkedExample", "dict {}"]),
    ("output_rounding_budget lists", lambda: worked_example.output_rounding_budget([[1.0]], [[1.0]]),
     TypeError, ["weights", "2-D NumPy array", "list"]),
    ("path_kind None", lambda: paths.path_kind(None), TypeError,
     ["path", "str or Path", "NoneType"]),
    ("encode_case None", lambda: answers.encode_case(None), TypeError,
     ["case", "a Case", "NoneType"]),
    ("cases_signature 5", lambda: answers.cases_signature(5), TypeError,
     ["cases", "list of Case", "int 5"]),
    ("describe_shape list", lambda: va.describe_shape([1, 2]), TypeError,
     ["describe_shape", "tensor", "list"]),
    ("describe_shape None", lambda: va.describe_shape(None), TypeError,
     ["describe_shape", "tensor", "NoneType"]),
    ("check_holds_values None", lambda: va.check_holds_values(None, "x"), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("check_finite ndarray", lambda: va.check_finite(np.ones((2, 2)), "x"), TypeError,
     ["x", "torch.Tensor", "ndarray"]),
    ("check_same_dtype_and_device list", lambda: va.check_same_dtype_and_device([torch.ones(1)]), TypeError,
     ["tensors", "dict", "list"]),
    ("check_distinct lists", lambda: va.check_distinct([[1], [1]], "xs"), ValueError,
     ["xs", "distinct", "repeats [[1]]"]),
    ("check_tensor ndim -1", lambda: va.check_tensor(torch.ones(2), "x", ndim=-1), ValueError,
     ["ndim", "int >= 0", "-1"]),
    ("RelationsConfig values 'x'", lambda: two_relations.RelationsConfig(values="x"), ValueError,
     ["values", "('content', 'tagged')", "'x'"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in (*SILENT, *RAW)],
                         ids=[f"silent-{c[0]}" for c in SILENT] + [f"raw-{c[0]}" for c in RAW])
def test_a_silent_result_or_raw_error_is_now_refused_by_name(call, error, words):
    """Battery 8's rows 11-16 (silent results) and 23 (raw Python errors): each call is refused
    with an error whose message holds every listed word."""
    with pytest.raises(error) as refused:
        call()
    message = str(refused.value)
    assert all(w in message for w in words), message


def test_load_worked_example_of_a_binary_file_is_named(tmp_path):
    with pytest.raises(worked_example.WorkedExampleError) as refused:
        _binary_worked_example(tmp_path)()
    assert "garbage.json is not a JSON text file (UTF-8)" in str(refused.value), str(refused.value)


def test_causal_attention_with_no_position_is_empty():
    """T = 0 raised "stack expects a non-empty TensorList" (when the payoff ran each prefix); the
    empty result is (B, 0, d), without calling the learner's function on no tokens."""
    from course_utils.exercises.your_attention import causal_attention_with

    calls = []

    def fn(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        calls.append((x.shape, causal))
        return x

    out = causal_attention_with(fn, torch.ones(2, 0, 8), MultiHeadAttention(8, 2))
    assert out.shape == (2, 0, 8) and calls == []
    assert causal_attention_with(fn, torch.ones(1, 3, 8), MultiHeadAttention(8, 2)).shape == (1, 3, 8)
    assert calls == [((1, 3, 8), True)]


def test_dequantize_kv_still_reads_what_quantize_kv_makes():
    x = torch.randn(1, 2, 8, 4)
    for per in ("token", "channel"):
        for symmetric in (True, False):
            back = kv_cache.dequantize_kv(kv_cache.quantize_kv(x, per=per, symmetric=symmetric))
            assert back.shape == x.shape and (back - x).abs().max() < 0.1
