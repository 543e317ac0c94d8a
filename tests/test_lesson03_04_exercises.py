"""Lessons 03 and 04: slips written as a learner would write them, each named by its check.

The generic test in test_exercises.py feeds every registered Mistake's own implementation;
these are independent, natural ways of making the same slips (several of them raise, and the
check has to recognise the error), plus correct variants the checks must accept.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from course_utils.exercises import lesson03, lesson04

# -- 3.1 split_heads ---------------------------------------------------------------------------


def _split_width_first(x, num_heads):
    *lead, T, d = x.shape
    return x.reshape(*lead, T, -1, num_heads).transpose(-3, -2)  # (..., dk, T, h)


def test_split_check_names_heads_and_width_swapped():
    assert lesson03.check_split_heads(_split_width_first).mistake == "heads_and_width_swapped"


def _split_copied_from_the_trace(x, num_heads):
    """The section 1 trace's code, copied: right on (B, T, d) and on no other shape."""
    B, T, d = x.shape
    return x.view(B, T, num_heads, d // num_heads).transpose(1, 2)


def _split_general_view_front_transpose(x, num_heads):
    return x.unflatten(-1, (num_heads, -1)).transpose(1, 2)


@pytest.mark.parametrize("fn, key", [
    (_split_copied_from_the_trace, "batch_axis_assumed"),
    (lambda x, h: x.view(x.shape[0], x.shape[1], h, -1).transpose(1, 2), None),
    (_split_general_view_front_transpose, "axes_counted_from_the_front"),
])
def test_split_check_names_an_answer_written_for_one_batch_axis(fn, key):
    fb = lesson03.check_split_heads(fn)
    assert not fb.passed and fb.mistake == key
    if key is None:  # raises on (T, d) in another way: still told which input it was
        assert "one sentence without a batch axis" in fb.message or "leading axes" in fb.message


def test_split_check_is_passed_by_the_trace_code_only_on_batches():
    """The exercise asks for another case than the trace shows: the copied code passes the
    three batched cases and fails the other two."""
    fb = lesson03.check_split_heads(_split_copied_from_the_trace)
    assert "one sentence without a batch axis" in fb.message


@pytest.mark.parametrize("fn", [
    lambda x, h: torch.stack(x.chunk(h, dim=-1), dim=-3),
    lambda x, h: x.unflatten(-1, (h, -1)).transpose(-3, -2),
    lambda x, h: x.reshape(*x.shape[:-1], h, x.shape[-1] // h).movedim(-2, -3),
    lambda x, h: torch.einsum("...thk->...htk", x.view(*x.shape[:-1], h, -1)),
])
def test_split_check_accepts_other_correct_forms(fn):
    assert lesson03.check_split_heads(fn).passed


# -- 3.2 merge_heads ---------------------------------------------------------------------------


def _merge_view_after_transpose(heads):
    B, h, T, dk = heads.shape
    return heads.transpose(1, 2).view(B, T, -1)


@pytest.mark.parametrize("fn,key", [
    (lambda heads: heads.mean(1), "averaged_heads"),
    (lambda heads: heads.permute(0, 2, 1, 3), "not_flattened"),
    (lambda heads: torch.cat(list(heads.unbind(dim=1)), dim=1), "concatenated_along_tokens"),
    (_merge_view_after_transpose, "view_without_contiguous"),
])
def test_merge_check_names_natural_slips(fn, key):
    feedback = lesson03.check_merge_heads(fn)
    assert feedback.mistake == key, feedback
    assert "RuntimeError" not in feedback.message


def test_merge_check_still_reports_other_errors():
    def broken(heads):
        raise KeyError("oops")

    feedback = lesson03.check_merge_heads(broken)
    assert feedback.status == "error" and "KeyError" in feedback.message


def test_merge_check_accepts_cat_of_heads():
    assert lesson03.check_merge_heads(lambda heads: torch.cat(heads.unbind(1), dim=-1)).passed


# -- 3.3 and 3.4: counts -----------------------------------------------------------------------


def _params_for_one_head(d_model, num_heads, bias=True):
    d_k = d_model // num_heads
    total = 3 * d_model * d_k + d_model**2
    if bias:
        total += 3 * d_k + d_model
    return total


def test_parameter_count_check_names_one_head_only():
    assert lesson03.check_parameter_count(_params_for_one_head).mistake == "one_head_projections"


@pytest.mark.parametrize("fn,key", [
    (lambda T, d, h: h * T * T * (d // h) + h * T * T * (d // h - 1), "exact_flops"),
    (lambda T, d, h: h * T * T * (d // h) + h * T * T, "scaling_counted"),
])
def test_score_macs_check_names_flop_and_scaling_slips(fn, key):
    assert lesson03.check_score_macs(fn).mistake == key


# -- 4.1 head_weights --------------------------------------------------------------------------


def _rows_inclusive(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    q, k, v = w_in[:d], w_in[d:2 * d], w_in[2 * d:]
    rows = slice(head * dk, (head + 1) * dk - 1)  # "rows i*dk to (i+1)*dk - 1", typed as a slice
    return q[rows], k[rows], v[rows]


def _rows_from_one(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    return tuple(block[(head - 1) * dk:head * dk] for block in w_in.chunk(3))


def _offsets_from_one(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    head = head - 1  # "heads 1 ... h", as the formula numbers them
    start = head * dk  # for head 0: -dk, so the key and value slices read the block above
    return (w_in[start:start + dk], w_in[d + start:d + start + dk],
            w_in[2 * d + start:2 * d + start + dk])


@pytest.mark.parametrize("fn,key", [(_rows_inclusive, "inclusive_end"),
                                    (_rows_from_one, "heads_counted_from_one"),
                                    (_offsets_from_one, "heads_counted_from_one")])
def test_head_weights_check_names_indexing_slips(fn, key):
    assert lesson04.check_head_weights(fn).mistake == key


# -- 4.2 stack_weights -------------------------------------------------------------------------


@pytest.mark.parametrize("fn,key", [
    (lambda q, k, v: torch.stack(q + k + v), "stack_not_cat"),
    (lambda q, k, v: torch.cat([q, k, v]), "lists_not_unpacked"),
])
def test_stack_check_names_stack_and_nested_lists(fn, key):
    feedback = lesson04.check_stack_head_weights(fn)
    assert feedback.mistake == key, feedback
    assert "TypeError" not in feedback.message


# -- 4.3 mha_forward ---------------------------------------------------------------------------


def _forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False, *, transpose_k, divisor=None,
             softmax_dim=-1, merge=True):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (x @ w_in.T + b_in).chunk(3, dim=-1)
    q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))
    scores = q @ transpose_k(k) / (math.sqrt(dk) if divisor is None else divisor(dk))
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    heads = torch.softmax(scores, dim=softmax_dim) @ v  # (B, h, T, dk)
    if merge:
        heads = heads.transpose(1, 2).reshape(B, T, d)
    return heads @ w_out.T + b_out


def _learner(**options):
    return lambda *args, causal=False: _forward(*args, causal, **options)


@pytest.mark.filterwarnings("ignore::UserWarning")  # .T on a 4-D tensor is deprecated
@pytest.mark.parametrize("fn,key", [
    (_learner(transpose_k=lambda k: k.T), "k_T_reverses_all_axes"),
    (_learner(transpose_k=lambda k: k.transpose(1, 2)), "k_transposed_wrong_axes"),
    (_learner(transpose_k=lambda k: k.transpose(-2, -1), merge=False), "heads_not_merged"),
    (_learner(transpose_k=lambda k: k.transpose(-2, -1), divisor=lambda dk: dk), "scaled_by_d_k"),
    (_learner(transpose_k=lambda k: k.transpose(-2, -1), softmax_dim=1), "softmax_over_heads"),
])
def test_forward_check_names_axis_and_scale_slips(fn, key):
    feedback = lesson04.check_mha_forward(fn)
    assert feedback.mistake == key, feedback
    assert "RuntimeError" not in feedback.message


def test_forward_check_names_a_scale_applied_to_the_weights():
    def scaled_late(x, w_in, b_in, w_out, b_out, num_heads):
        B, T, d = x.shape
        dk = d // num_heads
        q, k, v = ((x @ w_in.T + b_in).view(B, T, 3 * num_heads, dk).transpose(1, 2)
                   .split(num_heads, dim=1))  # 3 x (B, h, T, dk)
        weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1) / math.sqrt(dk)  # scaled too late
        return (weights @ v).transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out

    feedback = lesson04.check_mha_forward(scaled_late)
    assert feedback.mistake == "scaled_after_softmax", feedback
    assert "sum to 1/sqrt(d_k)" in feedback.message


@pytest.mark.parametrize("divisor", [lambda dk: dk**1 / 2, lambda dk: 2, lambda dk: math.log2(dk)],
                         ids=["dk**1/2", "typed-in 2", "log2(dk)"])
def test_forward_check_turns_back_divisors_that_equal_sqrt_dk_only_when_dk_is_4(divisor):
    learner = _learner(transpose_k=lambda k: k.transpose(-2, -1), divisor=divisor)
    feedback = lesson04.check_mha_forward(learner)
    assert not feedback.passed, feedback


@pytest.mark.parametrize("where", ["v", "heads"])
def test_forward_check_names_a_scale_on_v_or_on_the_heads_as_after_the_softmax(where):
    def late(x, w_in, b_in, w_out, b_out, num_heads):
        B, T, d = x.shape
        dk = d // num_heads
        q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (x @ w_in.T + b_in).chunk(3, -1))
        if where == "v":
            v = v / math.sqrt(dk)
        heads = torch.softmax(q @ k.transpose(-2, -1), dim=-1) @ v
        if where == "heads":
            heads = heads / math.sqrt(dk)
        return heads.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out

    feedback = lesson04.check_mha_forward(late)
    assert feedback.mistake == "scaled_after_softmax" and "V or the heads' outputs" in feedback.message


def test_forward_check_names_scores_multiplied_by_sqrt_dk():
    feedback = lesson04.check_mha_forward(
        _learner(transpose_k=lambda k: k.transpose(-2, -1), divisor=lambda dk: 1 / math.sqrt(dk)))
    assert feedback.mistake == "scores_multiplied_by_sqrt_dk", feedback


def test_forward_check_accepts_mT_and_the_qkv_view_of_nanogpt():
    assert lesson04.check_mha_forward(_learner(transpose_k=lambda k: k.mT)).passed

    def nanogpt_style(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        B, T, d = x.shape
        q, k, v = (x @ w_in.T + b_in).view(B, T, 3, num_heads, d // num_heads).permute(2, 0, 3, 1, 4)
        att = q @ k.mT / math.sqrt(d // num_heads)
        if causal:  # nanoGPT's bias buffer: the lower triangle, 0 where a token may not look
            att = att.masked_fill(torch.tril(torch.ones(T, T)).view(1, 1, T, T) == 0, float("-inf"))
        heads = torch.softmax(att, dim=-1) @ v
        return heads.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out

    assert lesson04.check_mha_forward(nanogpt_style).passed


def _forward_with_views(x, w_in, b_in, w_out, b_out, num_heads, *, width, merge_view, contiguous=True):
    B, T, d = x.shape
    dk = width(d, num_heads)
    q, k, v = (x @ w_in.T + b_in).split(d, dim=-1)
    q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))
    heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1) @ v  # (B, h, T, dk)
    back = heads.transpose(1, 2)
    return (back.contiguous() if contiguous else back).view(*merge_view(B, T, d, dk)) @ w_out.T + b_out


def test_forward_check_does_not_blame_memory_layout_for_a_size_slip():
    """A view that fails because its sizes are wrong is not the classic contiguity slip."""
    float_width = lambda *a: _forward_with_views(*a, width=lambda d, h: d / h,  # noqa: E731
                                                 merge_view=lambda B, T, d, dk: (B, T, d))
    feedback = lesson04.check_mha_forward(float_width)
    assert feedback.mistake == "float_head_width" and "//" in feedback.hint

    wrong_merge = lambda *a: _forward_with_views(*a, width=lambda d, h: d // h,  # noqa: E731
                                                 merge_view=lambda B, T, d, dk: (B, T, dk))
    feedback = lesson04.check_mha_forward(wrong_merge)  # contiguous() was called: not that slip
    assert feedback.mistake != "merge_view_without_contiguous" and "contiguous" not in feedback.message

    no_contiguous = lambda *a: _forward_with_views(*a, width=lambda d, h: d // h,  # noqa: E731
                                                   merge_view=lambda B, T, d, dk: (B, T, d), contiguous=False)
    assert lesson04.check_mha_forward(no_contiguous).mistake == "merge_view_without_contiguous"


# -- 4.4 masks_for_torch -----------------------------------------------------------------------


def _additive_minus_1e9(attn_mask, key_padding_mask):
    return tuple(torch.zeros(m.shape).masked_fill(m == 0, -1e9) for m in (attn_mask, key_padding_mask))


@pytest.mark.parametrize("fn,key", [
    (lambda a, k: (k.logical_not(), a.logical_not()), "swapped_pair"),
    (lambda a, k: (not a, not k), "python_not"),
    (_additive_minus_1e9, "additive_masks"),
])
def test_mask_check_names_order_not_and_minus_1e9(fn, key):
    feedback = lesson04.check_masks_for_torch(fn)
    assert feedback.mistake == key, feedback
    assert "RuntimeError" not in feedback.message


def test_mask_check_accepts_equals_zero():
    assert lesson04.check_masks_for_torch(lambda a, k: (a == 0, k == 0)).passed


def test_head_weights_and_stack_checks_name_numpy_answers():
    def numpy_rows(w_in, num_heads, head):
        d = w_in.shape[1]
        dk = d // num_heads
        return tuple(block[head * dk:(head + 1) * dk].numpy() for block in w_in.split(d))
    assert lesson04.check_head_weights(numpy_rows).mistake == "returned_numpy"

    def numpy_stack(q_weights, k_weights, v_weights):
        return np.concatenate([w.numpy() for w in (*q_weights, *k_weights, *v_weights)])
    assert lesson04.check_stack_head_weights(numpy_stack).mistake == "returned_numpy"


def test_forward_check_names_swapped_keys_and_values_and_a_missing_split():
    def kv_swapped(x, w_in, b_in, w_out, b_out, num_heads):
        B, T, d = x.shape
        dk = d // num_heads
        q, v, k = (x @ w_in.T + b_in).split(d, dim=-1)
        q, k, v = (t.view(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))
        heads = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1) @ v
        return heads.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out
    assert lesson04.check_mha_forward(kv_swapped).mistake == "keys_and_values_swapped"

    def one_wide_head(x, w_in, b_in, w_out, b_out, num_heads):
        d = x.shape[-1]
        q, k, v = (x @ w_in.T + b_in).chunk(3, dim=-1)
        return torch.softmax(q @ k.mT / d ** 0.5, dim=-1) @ v @ w_out.T + b_out
    assert lesson04.check_mha_forward(one_wide_head).mistake == "no_head_split"


def test_head_weights_names_columns_transposed_to_the_right_shape():
    def columns_t(w_in, num_heads, head):
        d = w_in.shape[1]
        dk = d // num_heads
        return tuple(b[:, head * dk:(head + 1) * dk].T for b in w_in.split(d))
    assert lesson04.check_head_weights(columns_t).mistake == "columns_then_transposed"


# -- found by the learner trial of 2026-11-28 --------------------------------------------------


def _params_weight_slip_right_biases(slip):
    """A weight slip with the biases counted right (4 * d_model), as a learner wrote it."""
    def count(d_model, num_heads, bias=True):
        d_k = d_model // num_heads
        weights = {"full_width_heads": 3 * num_heads * d_model * d_model + d_model * d_model,
                   "w_o_per_head": 3 * d_model * d_model + num_heads * d_model * d_model,
                   "one_head_projections": 3 * d_model * d_k + d_model * d_model,
                   "only_three_matrices": 3 * d_model * d_model}[slip]
        return weights + (4 * d_model if bias else 0)
    return count


@pytest.mark.parametrize("key", ["full_width_heads", "w_o_per_head", "one_head_projections",
                                 "only_three_matrices"])
def test_parameter_count_names_a_weight_slip_whatever_the_biases(key):
    """The hint promises these names; the check gives them with the biases right, too."""
    feedback = lesson03.check_parameter_count(_params_weight_slip_right_biases(key))
    assert feedback.mistake == key, feedback


def test_parameter_count_leaves_an_unknown_wrong_count_unnamed():
    feedback = lesson03.check_parameter_count(lambda d, h, bias=True: 5 * d * d)
    assert feedback.status == "wrong" and feedback.mistake is None


def test_merge_check_names_heads_as_what_an_in_place_answer_changed():
    def transpose_in_place(heads):
        B, h, T, dk = heads.shape
        return heads.transpose_(1, 2).reshape(B, T, h * dk)

    feedback = lesson03.check_merge_heads(transpose_in_place)
    assert feedback.mistake == "edited_input_in_place", feedback
    assert "`heads`" in feedback.message and "head outputs" not in feedback.message
    assert "transpose_" in feedback.hint


@pytest.mark.parametrize("fn,name", [
    (lambda a, k: (a.logical_not_(), ~k), "attn_mask"),
    (lambda a, k: (~a, k.logical_not_()), "key_padding_mask"),
    # in place on the second case only (a batch of 3): named from that case's copies
    (lambda a, k: (~a, k.logical_not_() if k.shape[0] == 3 else ~k), "key_padding_mask"),
])
def test_mask_check_names_the_mask_an_in_place_answer_changed(fn, name):
    feedback = lesson04.check_masks_for_torch(fn)
    assert feedback.mistake == "edited_input_in_place", feedback
    assert f"`{name}`" in feedback.message and "head outputs" not in feedback.message


@pytest.mark.parametrize("fn", [
    lambda q, k, v: torch.cat(q, k, v),  # three arguments: "takes from 1 to 2 positional arguments"
    lambda q, k, v: torch.cat(q, k, v, dim=0),
    lambda q, k, v: torch.cat(q, k),  # the second list where dim goes
])
def test_stack_check_names_the_lists_given_as_separate_arguments(fn):
    feedback = lesson04.check_stack_head_weights(fn)
    assert feedback.mistake == "lists_not_unpacked", feedback
    assert "torch.cat(q_parts, k_parts, v_parts)" in feedback.message
    assert "ONE flat sequence of tensors" in feedback.message


def test_stack_check_names_lists_from_the_call_not_from_torchs_message():
    """torch's message for torch.cat(q, k, v) changed between versions (2.5.1: "received an
    invalid combination of arguments"; 2.13: "takes from 1 to 2 positional arguments"), so
    the slip is named from the arguments torch.cat refused: under another message too, and
    not for a TypeError of the answer's own that happens to read like torch's."""
    def reworded(q, k, v):
        try:
            return torch.cat(q, k, v)
        except TypeError:
            raise TypeError("a message no torch writes") from None

    def own_error(q, k, v):
        raise TypeError("expected Tensor as element 0 in argument 0, but got list")

    cat = torch.cat
    assert lesson04.check_stack_head_weights(reworded).mistake == "lists_not_unpacked"
    assert torch.cat is cat  # the recording wrapper is gone again
    feedback = lesson04.check_stack_head_weights(own_error)
    assert feedback.status == "error" and feedback.mistake != "lists_not_unpacked", feedback


def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    """Batched multi-head self-attention: (B, T, d) -> (B, T, d)."""
    raise NotImplementedError()  # the release's stub, as the student copy has it


def _keys_values_swapped(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    """The lesson's demo: the learner's mha_forward called with W_K and W_V exchanged."""
    w_q, w_k, w_v = w_in.chunk(3)
    b_q, b_k, b_v = b_in.chunk(3)
    return mha_forward(x, torch.cat([w_q, w_v, w_k]), torch.cat([b_q, b_v, b_k]), w_out, b_out, num_heads,
                       causal)


def test_forward_check_says_plainly_that_a_called_stub_is_still_to_write():
    feedback = lesson04.check_mha_forward(_keys_values_swapped)
    assert feedback.status == "not attempted", feedback
    assert "your function `mha_forward` is still the stub: write it" in feedback.message
    assert "not by your function's stub" not in feedback.message
    assert feedback.hint == "", "a hint before any attempt would answer 4.3 on Run All"


def test_forward_check_reports_an_error_raised_below_a_real_function():
    def unfinished_helper(q):
        import math as m  # a function with a body: not a stub
        raise NotImplementedError(m.pi)

    def calls_helper(x, w_in, b_in, w_out, b_out, num_heads):
        return unfinished_helper(x)

    feedback = lesson04.check_mha_forward(calls_helper)
    assert feedback.status == "error" and "NotImplementedError" in feedback.message


# -- second learner trial: float counts, a grown list, hints that do not give the answer away --


def _params_with_true_division(d_model, num_heads, bias=True):
    dk = d_model / num_heads  # the trial's answer: right value, returned as a float
    return 3 * num_heads * d_model * dk + d_model * d_model + (4 * d_model if bias else 0)


@pytest.mark.parametrize("check, fn", [
    (lesson03.check_parameter_count, _params_with_true_division),
    (lesson03.check_score_macs, lambda T, d, h: h * T ** 2 * (d / h)),
    (lesson03.check_score_macs, lambda T, d, h: float(T * T * d)),
])
def test_count_checks_name_a_float_holding_the_right_count(check, fn):
    fb = check(fn)
    assert not fb.passed and fb.mistake == "float_count", fb
    assert "//" in fb.hint


@pytest.mark.parametrize("check, fn", [
    (lesson03.check_parameter_count, lambda d, h, bias=True: 4.0 * d * d),
    (lesson03.check_score_macs, lambda T, d, h: 2.0 * T * T * d),
])
def test_count_checks_name_the_slip_of_a_wrong_float_not_its_type(check, fn):
    fb = check(fn)
    assert not fb.passed and fb.mistake in {"forgot_biases", "twice_the_scores"}, fb


def test_count_checks_accept_an_int_computed_with_floor_division():
    assert lesson03.check_score_macs(lambda T, d, h: h * T * T * (d // h)).passed
    assert lesson03.check_parameter_count(lambda d, h, bias=True: 4 * d * d + (4 * d if bias else 0)).passed


def _stack_by_extending(q_parts, k_parts, v_parts):
    q_parts.extend(k_parts)
    q_parts.extend(v_parts)
    return torch.cat(q_parts)


def _stack_by_adding_in_place(q_parts, k_parts, v_parts):
    k_parts += v_parts  # grows the caller's k_parts
    return torch.cat(q_parts + k_parts)


def _stack_by_appending(q_parts, k_parts, v_parts):
    for w in k_parts + v_parts:
        q_parts.append(w)
    return torch.cat(q_parts, dim=0)


@pytest.mark.parametrize("fn, name", [
    (_stack_by_extending, "q_parts"),
    (_stack_by_adding_in_place, "k_parts"),
    (_stack_by_appending, "q_parts"),
])
def test_stack_check_names_a_grown_caller_list(fn, name):
    fb = lesson04.check_stack_head_weights(fn)
    assert not fb.passed and fb.mistake == "changed_callers_list", fb
    assert f"`{name}`" in fb.message and "{list}" not in fb.message


def test_stack_check_still_passes_new_lists():
    assert lesson04.check_stack_head_weights(lambda q, k, v: torch.cat(q + k + v)).passed
    assert lesson04.check_stack_head_weights(lambda q, k, v: torch.cat([*q, *k, *v], dim=0)).passed


def test_not_attempted_hints_of_the_counts_do_not_state_the_answer():
    def stub(*args, **kwargs):
        raise NotImplementedError

    params = lesson03.check_parameter_count(stub)
    macs = lesson03.check_score_macs(stub)
    assert params.status == macs.status == "not attempted"
    assert "(d_model, d_k)" not in params.hint and "d_model per projection" not in params.hint
    assert "T * T * d_k" not in macs.hint and "h heads" not in macs.hint


def test_first_split_slip_does_not_print_the_code_answer():
    fb = lesson03.check_split_heads(_split_copied_from_the_trace)
    assert fb.mistake == "batch_axis_assumed"
    assert "x.view(" not in fb.hint and "transpose(-3, -2)" not in fb.hint


def test_head_weights_does_not_call_the_next_head_counted_from_one():
    """The from-1 comparison covers only the cases where head - 1 is a head, and an answer must
    match the slip on all of them: rows of the head after (head + 1) are not named so."""
    def next_head(w_in, num_heads, head):
        d = w_in.shape[1]
        dk = d // num_heads
        return tuple(block[(head + 1) * dk:(head + 2) * dk] for block in w_in.chunk(3))
    feedback = lesson04.check_head_weights(next_head)
    assert not feedback.passed and feedback.mistake == "one_head_too_far", feedback


def _offsets_one_too_far(w_in, num_heads, head):
    d = w_in.shape[1]
    dk = d // num_heads
    start = (head + 1) * dk  # for the last head: d, so Q and K read the next block, V nothing
    return (w_in[start:start + dk], w_in[d + start:d + start + dk],
            w_in[2 * d + start:2 * d + start + dk])


def _view_wrapped_one_too_far(w_in, num_heads, head):
    d = w_in.shape[1]
    return tuple(w_in.view(3, num_heads, d // num_heads, d)[:, (head + 1) % num_heads].unbind(0))


@pytest.mark.parametrize("fn", [_offsets_one_too_far, _view_wrapped_one_too_far])
def test_head_weights_names_one_head_too_far_from_the_other_heads(fn):
    """Issue 35: head i + 1's rows got the generic 'wrong values' message when the answer
    differs from the stored slip at the last head; it is named from the heads that exist."""
    feedback = lesson04.check_head_weights(fn)
    assert not feedback.passed and feedback.mistake == "one_head_too_far", feedback
    assert "head after (head + 1)" in feedback.message
    assert "For the last head there is no head after" in feedback.message


def _one_head_too_far_on(head_to_skip):
    """Rows of head i + 1 on every case but those with head ``head_to_skip`` (there: head i)."""
    def fn(w_in, num_heads, head):
        d = w_in.shape[1]
        dk = d // num_heads
        taken = head if head == head_to_skip else head + 1
        return tuple(block[taken * dk:(taken + 1) * dk] for block in w_in.chunk(3))
    return fn


def test_head_weights_names_one_head_too_far_only_when_every_case_agrees():
    """One case right among the wrong ones is not 'one head too far' (nor a pass)."""
    feedback = lesson04.check_head_weights(_one_head_too_far_on(0))
    assert not feedback.passed and feedback.mistake != "one_head_too_far", feedback


@pytest.mark.parametrize("style", ["split", "view"])
def test_head_weights_right_answers_pass_beside_the_head_comparisons(style):
    def right(w_in, num_heads, head):
        d = w_in.shape[1]
        if style == "view":
            return tuple(w_in.view(3, num_heads, d // num_heads, d)[:, head].unbind(0))
        dk = d // num_heads
        return tuple(block[head * dk:(head + 1) * dk] for block in w_in.split(d, dim=0))
    assert lesson04.check_head_weights(right).passed
