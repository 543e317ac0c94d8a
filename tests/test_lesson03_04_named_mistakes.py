"""Lessons 03 and 04: wrong answers that learner trial l4 got only a generic message for.

Each is written here as a learner would write it (not the solutions/ slip the store was built
from), and the check must name it; the right answer and a right variant of it still pass.
"""

from __future__ import annotations

import math

import pytest
import torch
from graded_here import graded_here, graded_outside

from course_utils.exercises import lesson03, lesson04

# -- 3.1 split_heads ---------------------------------------------------------------------------


def _split_true_division(x, num_heads):
    d_k = x.shape[-1] / num_heads  # 4.0, not 4
    return x.view(*x.shape[:-1], num_heads, d_k).transpose(-3, -2)


def _split_unflatten_true_division(x, num_heads):
    return x.unflatten(-1, (num_heads, x.shape[-1] / num_heads)).movedim(-2, -3)


def _split_permute_for_a_batch(x, num_heads):
    return x.view(*x.shape[:-1], num_heads, -1).permute(0, 2, 1, 3)


def _split_einsum_with_a_letter_per_axis(x, num_heads):
    heads = x.reshape(*x.shape[:-1], num_heads, x.shape[-1] // num_heads)
    return torch.einsum("bthk->bhtk", heads)


@pytest.mark.parametrize("fn, key, words", [
    (_split_true_division, "float_head_width", "d / num_heads gives 4.0"),
    (_split_unflatten_true_division, "float_head_width", "//"),
    (_split_permute_for_a_batch, "permute_lists_four_axes", "permute(0, 2, 1, 3)"),
    (_split_einsum_with_a_letter_per_axis, "einsum_letters_for_every_axis", "'bthk->bhtk'"),
])
def test_split_check_names_float_width_and_fixed_axis_lists(fn, key, words):
    fb = lesson03.check_split_heads(fn)
    assert not fb.passed and fb.mistake == key, fb
    assert words in fb.message + fb.hint


@pytest.mark.parametrize("fn", [
    lambda x, h: x.view(*x.shape[:-1], h, x.shape[-1] // h).transpose(-3, -2),
    lambda x, h: x.view(*x.shape[:-1], h, int(x.shape[-1] / h)).transpose(-3, -2),  # int() of the float
    lambda x, h: x.unflatten(-1, (h, -1)).permute(*range(x.dim() - 2), -2, -3, -1),  # permute built per dim
    lambda x, h: torch.einsum("...thk->...htk", x.unflatten(-1, (h, -1))),
])
def test_split_check_accepts_right_answers_near_the_named_slips(fn):
    assert lesson03.check_split_heads(fn).passed


def _split_then_scale_x_in_place(x, num_heads):
    heads = x.view(*x.shape[:-1], num_heads, -1).transpose(-3, -2)
    x /= 2  # in place: the view above shares x's memory
    return heads


def test_split_check_names_an_in_place_edit_behind_wrong_values():
    fb = lesson03.check_split_heads(_split_then_scale_x_in_place)
    assert not fb.passed and fb.mistake == "edited_x_in_place", fb
    assert "changed x" in fb.message


def test_split_check_leaves_a_wrong_answer_that_keeps_x_unnamed():
    fb = lesson03.check_split_heads(lambda x, h: x.view(*x.shape[:-1], h, -1).transpose(-3, -2) / 2)
    assert fb.status == "wrong" and fb.mistake is None, fb


# -- 3.2 merge_heads ---------------------------------------------------------------------------


def _merge_transposing_t_and_dk(heads):
    B, h, T, dk = heads.shape
    return heads.transpose(2, 3).reshape(B, T, h * dk)


def _merge_average_tiled(heads):
    B, h, T, dk = heads.shape
    return heads.mean(dim=1).tile(1, 1, h)


@pytest.mark.parametrize("fn, key", [
    (_merge_transposing_t_and_dk, "last_two_axes_swapped"),
    (_merge_average_tiled, "averaged_then_tiled"),
])
def test_merge_check_names_last_two_axes_and_a_tiled_average(fn, key):
    fb = lesson03.check_merge_heads(fn)
    assert not fb.passed and fb.mistake == key, fb


@pytest.mark.parametrize("fn", [
    lambda heads: heads.transpose(1, 2).reshape(heads.shape[0], heads.shape[2], -1),
    lambda heads: heads.permute(0, 2, 1, 3).flatten(2),
])
def test_merge_check_still_accepts_the_right_transpose(fn):
    assert lesson03.check_merge_heads(fn).passed


# -- 3.3 parameter_count -----------------------------------------------------------------------


def _params_bias_of_one_head(d_model, num_heads, bias=True):
    d_k = d_model // num_heads
    total = 4 * d_model * d_model
    if bias:
        total += 4 * d_k  # one head's bias for each projection
    return total


def _params_square_heads(d_model, num_heads, bias=True):
    d_k = d_model // num_heads
    return num_heads * 4 * d_k ** 2 + (4 * d_model if bias else 0)


@pytest.mark.parametrize("fn, key", [
    (_params_bias_of_one_head, "bias_width_d_k"),
    (_params_square_heads, "square_head_matrices"),
    (lambda d, h, bias=True: h * 4 * (d // h) ** 2, "square_head_matrices"),  # and no biases at all
])
def test_parameter_count_names_d_k_biases_and_square_heads(fn, key):
    fb = lesson03.check_parameter_count(fn)
    assert not fb.passed and fb.mistake == key, fb


def test_parameter_count_still_accepts_a_sum_over_heads():
    def per_head(d_model, num_heads, bias=True):
        d_k = d_model // num_heads
        head = 3 * (d_model * d_k + (d_k if bias else 0))
        return num_heads * head + d_model * d_model + (d_model if bias else 0)

    assert lesson03.check_parameter_count(per_head).passed


# -- 3.4 score_macs ----------------------------------------------------------------------------


@pytest.mark.parametrize("fn, key", [
    (lambda T, d, h: T * d * d, "projection_cost"),
    (lambda T, d, h: h * (T * (d // h)) * ((d // h) * T), "sizes_multiplied"),
    (lambda T, d, h: T * T * math.sqrt(d // h) * h, "sqrt_d_k_per_score"),  # a float
    (lambda T, d, h: int(h * T * T * math.sqrt(d // h)), "sqrt_d_k_per_score"),  # cut to an int
    (lambda T, d, h: round(h * T * T * (d // h) ** 0.5), "sqrt_d_k_per_score"),  # rounded
])
def test_score_macs_names_a_projection_multiplied_sizes_and_sqrt_d_k(fn, key):
    fb = lesson03.check_score_macs(fn)
    assert not fb.passed and fb.mistake == key, fb


def test_score_macs_leaves_an_unknown_count_unnamed():
    fb = lesson03.check_score_macs(lambda T, d, h: 3 * T * T * d)
    assert fb.status == "wrong" and fb.mistake is None, fb


# -- 4.1 head_weights --------------------------------------------------------------------------


def _head_weights_d_from_rows(w_in, num_heads, head):
    d_model = w_in.shape[0]  # 3 * d_model
    d_k = d_model // num_heads
    start = head * d_k
    return (w_in[start:start + d_k], w_in[d_model + start:d_model + start + d_k],
            w_in[2 * d_model + start:2 * d_model + start + d_k])


def _head_weights_split_by_rows(w_in, num_heads, head):
    w_q, w_k, w_v = torch.split(w_in, w_in.shape[0])  # one block: the unpacking fails
    d_k = w_in.shape[1] // num_heads
    rows = slice(head * d_k, (head + 1) * d_k)
    return w_q[rows], w_k[rows], w_v[rows]


def _head_weights_true_division(w_in, num_heads, head):
    d_model = w_in.shape[1]
    d_k = d_model / num_heads
    w_q, w_k, w_v = w_in.chunk(3)
    rows = slice(head * d_k, (head + 1) * d_k)
    return w_q[rows], w_k[rows], w_v[rows]


@pytest.mark.parametrize("fn, key", [
    (_head_weights_d_from_rows, "d_model_from_rows"),
    (_head_weights_split_by_rows, "one_block_from_split"),
    (_head_weights_true_division, "float_head_width"),
])
def test_head_weights_names_three_d_model_one_block_and_a_float_width(fn, key):
    fb = lesson04.check_head_weights(fn)
    assert not fb.passed and fb.mistake == key, fb
    assert "more entries than the answer" not in fb.message


def test_head_weights_still_accepts_int_of_a_division():
    def right(w_in, num_heads, head):
        d_k = int(w_in.shape[1] / num_heads)
        return tuple(b[head * d_k:(head + 1) * d_k] for b in w_in.chunk(3))

    assert lesson04.check_head_weights(right).passed


# -- 4.2 stack_head_weights --------------------------------------------------------------------


def _stack_summing_heads(q_parts, k_parts, v_parts):
    return torch.cat([torch.stack(q_parts).sum(0), torch.stack(k_parts).sum(0), torch.stack(v_parts).sum(0)])


def test_stack_check_names_summed_heads():
    fb = lesson04.check_stack_head_weights(_stack_summing_heads)
    assert not fb.passed and fb.mistake == "summed_heads", fb


# -- 4.3 mha_forward: the split and merge slips its hint list promises (trial: issue 35) ---------


def _forward_with(split, merge):
    """A learner's mha_forward whose split (B, T, d) -> (B, h, T, dk) and merge back to
    (B, T, d) are ``split(t, h, d_head)`` and ``merge(out, B, T, d)``; the rest is right."""
    def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        B, T, d = x.shape
        d_head = d // num_heads
        q, k, v = (split(t, num_heads, d_head) for t in (x @ w_in.T + b_in).chunk(3, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_head)
        if causal:  # sized from the scores, so a split slip shows in the values, not an error
            n = scores.shape[-1]
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        return merge(weights @ v, B, T, d) @ w_out.T + b_out
    return mha_forward


def _split(t, h, d_head):
    return t.view(*t.shape[:2], h, d_head).transpose(1, 2)


def _merge(out, B, T, d):
    return out.transpose(1, 2).reshape(B, T, d)


@pytest.mark.parametrize("fn, key, words", [
    (_forward_with(lambda t, h, dh: t.view(*t.shape[:2], dh, h).permute(0, 3, 1, 2), _merge),
     "split_interleaved", ["interleaved", "view(B, T, d_k, h)", "i, i+h"]),
    (_forward_with(lambda t, h, dh: t.reshape(*t.shape[:2], dh, h).transpose(2, 3).transpose(1, 2), _merge),
     "split_interleaved", ["interleaved", "consecutive run"]),
    (_forward_with(_split, lambda o, B, T, d: torch.cat(o.unbind(1)[::-1], dim=-1)),
     "merge_reversed_heads", ["reverse order", "head 0"]),
    (_forward_with(_split, lambda o, B, T, d: o.flip(1).transpose(1, 2).reshape(B, T, d)),
     "merge_reversed_heads", ["reverse order", "last head first"]),
    (_forward_with(_split, lambda o, B, T, d: o.permute(0, 2, 3, 1).reshape(B, T, d)),
     "merge_interleaved", ["merged the heads interleaved", "consecutive run"]),
    (_forward_with(_split, lambda o, B, T, d: torch.stack(o.unbind(1), dim=-1).flatten(-2)),
     "merge_interleaved", ["merged the heads interleaved"]),
    (_forward_with(lambda t, h, dh: t.view(*t.shape[:2], h, dh), _merge),
     "split_no_transpose_merge_transposed", ["without the transpose", "transposed at the merge"]),
])
def test_forward_check_names_the_split_and_merge_slips_of_its_hint(fn, key, words):
    fb = lesson04.check_mha_forward(fn)
    assert not fb.passed and fb.mistake == key, fb
    assert not [w for w in words if w not in fb.message], fb.message
    assert "largest difference" not in fb.message and fb.hint


def test_forward_check_still_passes_the_split_and_merge_written_these_ways():
    assert lesson04.check_mha_forward(_forward_with(_split, _merge)).passed
    assert lesson04.check_mha_forward(_forward_with(
        lambda t, h, dh: t.unflatten(-1, (h, dh)).permute(0, 2, 1, 3),
        lambda o, B, T, d: torch.cat(o.unbind(1), dim=-1))).passed


# -- 4.4 masks_for_torch -----------------------------------------------------------------------


def test_mask_check_names_one_minus_a_bool_mask():
    fb = lesson04.check_masks_for_torch(lambda attn_mask, kpm: (1 - attn_mask, 1 - kpm))
    assert not fb.passed and fb.mistake == "one_minus_mask", fb
    assert "RuntimeError" not in fb.message


def test_mask_check_one_minus_an_int_mask_is_named_as_not_boolean():
    fb = lesson04.check_masks_for_torch(lambda a, k: (1 - a.int(), 1 - k.int()))
    assert fb.mistake == "float_masks", fb


def test_mask_check_accepts_one_minus_then_back_to_bool():
    assert lesson04.check_masks_for_torch(lambda a, k: ((1 - a.int()).bool(), (1 - k.long()).bool())).passed


@pytest.mark.parametrize("code, key", [
    ("def masks_for_torch(attn_mask, key_padding_mask):\n    return 1 - attn_mask, 1 - key_padding_mask\n",
     "one_minus_mask"),
    ("def masks_for_torch(attn_mask, key_padding_mask):\n    return not attn_mask, not key_padding_mask\n",
     "python_not"),
])
@pytest.mark.parametrize("grade", [
    pytest.param(graded_here, id="recorded-here"),  # CI's slow step also runs it in a process of its own
    pytest.param(lambda *a: graded_outside(*a, sandboxed=False), id="own-process", marks=pytest.mark.slow)])
def test_the_grader_names_the_mask_slips_that_raise(code, key, grade):
    """The grader replays the recorded error without running a tensor operation: the slip is
    named from the error's text."""
    fb = grade("lesson04", "check_masks_for_torch", code, "masks_for_torch")
    assert not fb.passed and fb.mistake == key, fb


# -- 4.3 mha_forward with causal=True: the masking slips (cold trial: issue 35) ------------------


def _forward_masked(block):
    """A learner's mha_forward, right except for ``block(T)``: the (T, T) table, True where a
    query may NOT look, used with torch.where before the softmax; ``after`` applies it after."""
    def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        B, T, d = x.shape
        dk = d // num_heads
        q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (x @ w_in.T + b_in).chunk(3, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if causal:
            scores = torch.where(block(T), torch.tensor(float("-inf"), dtype=scores.dtype), scores)
        out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out
    return mha_forward


def test_forward_check_names_the_courses_causal_mask_where_the_mask_is_the_learners():
    from course_utils.attention.masks import causal_mask

    feedback = lesson04.check_mha_forward(_forward_masked(lambda T: ~causal_mask(T)))
    assert not feedback.passed and feedback.mistake == "called_reference", feedback
    assert "causal_mask" in feedback.message, feedback


def _future(T):
    return torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)


def _zeroed_after_softmax(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (x @ w_in.T + b_in).chunk(3, -1))
    weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1)
    if causal:
        weights = weights * torch.tril(torch.ones(T, T))  # the future zeroed, rows not renormalised
    return (weights @ v).transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out


def _zero_filled(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (x @ w_in.T + b_in).chunk(3, -1))
    scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if causal:
        scores = scores.masked_fill(_future(T), 0.0)
    return (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out


def _always_masked(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    return _forward_masked(_future)(x, w_in, b_in, w_out, b_out, num_heads, causal=True)


def _causal_ignored(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    return _forward_masked(_future)(x, w_in, b_in, w_out, b_out, num_heads)


@pytest.mark.parametrize("fn, key, words", [
    (_forward_masked(_future), None, []),
    (_causal_ignored, "causal_ignored", ["plain attention over all T tokens"]),
    (_always_masked, "causal_mask_added", ["causal=False too"]),
    (_forward_masked(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool))), "causal_diagonal_masked",
     ["diagonal", "NaN"]),
    (_forward_masked(lambda T: torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=2)),
     "causal_one_token_ahead", ["shifted by one", "t + 1"]),
    (_forward_masked(lambda T: torch.tril(torch.ones(T, T, dtype=torch.bool), diagonal=-1)),
     "causal_mask_transposed", ["upper triangle", "future"]),
    (_zeroed_after_softmax, "causal_mask_after_softmax", ["after the softmax", "sum to 1"]),
    (_zero_filled, "causal_filled_with_zero", ["0, not -inf"]),
])
def test_forward_check_names_the_masking_slips(fn, key, words):
    fb = lesson04.check_mha_forward(fn)
    if key is None:
        assert fb.passed, fb
        return
    assert not fb.passed and fb.mistake == key, fb
    assert not [w for w in words if w not in fb.message], fb.message
    assert "largest difference" not in fb.message and fb.hint
    # the hint says what to do, not which call the learner made (these use torch.where, *, triu)
    assert "masked_fill" not in fb.hint and "torch.where" not in fb.hint


def test_forward_check_tells_an_answer_for_the_old_signature_what_to_add():
    def old(x, w_in, b_in, w_out, b_out, num_heads):  # right, without causal
        return _forward_masked(_future)(x, w_in, b_in, w_out, b_out, num_heads)

    fb = lesson04.check_mha_forward(old)
    assert not fb.passed and fb.mistake == "no_causal_parameter", fb
    assert "takes no `causal` argument" in fb.message and "causal=False" in fb.hint

    def old_unscaled(x, w_in, b_in, w_out, b_out, num_heads):  # a slip of its own: still named
        B, T, d = x.shape
        dk = d // num_heads
        q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (x @ w_in.T + b_in).chunk(3, -1))
        out = torch.softmax(q @ k.transpose(-2, -1), -1) @ v
        return out.transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out

    fb = lesson04.check_mha_forward(old_unscaled)
    assert fb.mistake == "no_scaling" and "takes no `causal` argument" in fb.message, fb


def test_forward_check_names_a_split_without_transpose_whose_mask_does_not_fit():
    """With the heads split as (B, T, h, dk) the scores are (B, T, h, h), and a (T, T) mask
    raises: the check names the split, not the shape error."""
    def no_transpose(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        B, T, d = x.shape
        dk = d // num_heads
        q, k, v = (t.view(B, T, num_heads, dk) for t in (x @ w_in.T + b_in).split(d, -1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
        if causal:
            scores = scores.masked_fill(_future(T), float("-inf"))
        return (torch.softmax(scores, -1) @ v).reshape(B, T, d) @ w_out.T + b_out

    fb = lesson04.check_mha_forward(no_transpose)
    assert fb.mistake == "split_no_transpose", fb
