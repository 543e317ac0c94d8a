"""Lesson 07 checks against slips written the way a learner would write them.

Each wrong answer here is written differently from the Mistake implementation it should be
recognised as (expand instead of repeat_interleave, a hand-written softmax, ...), so these tests
show that the check names the slip rather than matching one exact piece of code.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import lesson07


def _cat(cache, new):
    return torch.cat([cache, new], dim=2)  # (B, g, T+1, dk)


def _grouped(q, k, v, scale=None):
    """7.3's attention by hand: the h query heads viewed as g groups, no K/V copy (the check
    refuses F.scaled_dot_product_attention)."""
    B, h, _, dk = q.shape
    scores = q.reshape(B, k.shape[1], -1, dk) @ k.transpose(-2, -1) * (scale or dk**-0.5)
    return (torch.softmax(scores, dim=-1) @ v).reshape(B, h, 1, dk)


def test_repeat_kv_names_h_copies_and_missing_dim():
    feedback = lesson07.check_repeat_kv(lambda kv, h: kv.repeat_interleave(h, dim=1))
    assert feedback.mistake == "repeated_h_times"
    feedback = lesson07.check_repeat_kv(lambda kv, h: kv.repeat_interleave(h // kv.shape[1]))
    assert feedback.mistake == "flattened_no_dim"


def test_repeat_kv_names_interleaving_written_with_expand():
    def expand_interleaved(kv, h):
        b, g, t, dk = kv.shape
        return kv[:, None].expand(b, h // g, g, t, dk).reshape(b, h, t, dk)
    assert lesson07.check_repeat_kv(expand_interleaved).mistake == "interleaved_groups"


def test_repeat_kv_accepts_expand_in_the_blocked_order():
    def expand_blocked(kv, h):
        b, g, t, dk = kv.shape
        return kv[:, :, None].expand(b, g, h // g, t, dk).reshape(b, h, t, dk)
    assert lesson07.check_repeat_kv(expand_blocked).passed


def test_cache_bytes_names_a_forgotten_batch():
    def no_batch(layers, batch, h, g, d_head, seq_len, bits):
        return layers * 2 * g * d_head * seq_len * bits // 8
    assert lesson07.check_cache_bytes(no_batch).mistake == "forgot_batch"


def test_decode_step_names_old_and_repeated_caches():
    def old_cache(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v), k_cache, v_cache
    assert lesson07.check_decode_step(old_cache).mistake == "returned_old_cache"

    def repeated_cache(q, k_new, v_new, k_cache, v_cache):
        b, g, t, dk = k_cache.shape
        h = q.shape[1]
        k = _cat(k_cache, k_new)[:, :, None].expand(b, g, h // g, t + 1, dk).reshape(b, h, t + 1, dk)
        v = _cat(v_cache, v_new)[:, :, None].expand(b, g, h // g, t + 1, dk).reshape(b, h, t + 1, dk)
        return _grouped(q, k, v), k, v  # groups of one head each, on the copy
    assert lesson07.check_decode_step(repeated_cache).mistake == "returned_repeated_cache"


def test_decode_step_names_a_softmax_over_the_query_axis():
    def manual(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        copies = q.shape[1] // k.shape[1]
        kr, vr = k.repeat_interleave(copies, 1), v.repeat_interleave(copies, 1)
        scores = torch.einsum("bhqd,bhkd->bhqk", q, kr) / q.shape[-1] ** 0.5
        scores = scores - scores.amax(dim=-2, keepdim=True)
        weights = scores.exp() / scores.exp().sum(dim=-2, keepdim=True)
        return weights @ vr, k, v
    assert lesson07.check_decode_step(manual).mistake == "softmax_over_queries"


def test_decode_step_names_the_two_ways_it_raises():
    """forgot_enable_gqa is kept for the course's own (trusted) check: a learner's call of
    F.scaled_dot_product_attention is refused before any diagnosis."""
    def no_enable_gqa(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return F.scaled_dot_product_attention(q, k, v), k, v
    feedback = lesson07.DECODE_STEP.check_trusted(no_enable_gqa)
    assert feedback.mistake == "forgot_enable_gqa" and "enable_gqa=True" in feedback.hint
    assert lesson07.check_decode_step(no_enable_gqa).mistake == "called_reference"

    def appended_on_features(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat((k_cache, k_new), -1), torch.cat((v_cache, v_new), -1)
        return _grouped(q, k, v), k, v
    feedback = lesson07.check_decode_step(appended_on_features)
    assert feedback.mistake == "appended_on_wrong_axis" and "dim=2" in feedback.hint


def test_decode_step_names_a_hand_written_product_with_unmatched_heads():
    def manual(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        weights = torch.softmax(torch.matmul(q, k.mT) * q.shape[-1] ** -0.5, dim=-1)
        return weights @ v, k, v
    assert lesson07.check_decode_step(manual).mistake == "heads_not_matched"


def test_decode_step_names_scale_new_token_only_and_swapped_caches():
    def by_dk(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        copies = q.shape[1] // k.shape[1]
        scores = q @ k.repeat_interleave(copies, 1).transpose(2, 3) / q.shape[-1]
        return scores.softmax(-1) @ v.repeat_interleave(copies, 1), k, v
    assert lesson07.check_decode_step(by_dk).mistake == "scaled_by_dk"

    def itself_only(q, k_new, v_new, k_cache, v_cache):
        copies = q.shape[1] // k_new.shape[1]
        return v_new.repeat_interleave(copies, 1), _cat(k_cache, k_new), _cat(v_cache, v_new)
    assert lesson07.check_decode_step(itself_only).mistake == "attended_new_token_only"

    def swapped(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return [_grouped(q, k, v), v, k]
    assert lesson07.check_decode_step(swapped).mistake == "returned_caches_swapped"


def test_decode_step_names_a_cache_left_without_the_new_token():
    # the check reads the returned caches: one appended and the other not, whatever the output
    def value_forgotten(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v), k, v_cache
    feedback = lesson07.check_decode_step(value_forgotten)
    assert feedback.mistake == "value_not_appended" and "v_new" in feedback.message

    def key_forgotten(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v), k_cache, v
    assert lesson07.check_decode_step(key_forgotten).mistake == "key_not_appended"

    def both_kept_old(q, k_new, v_new, k_cache, v_cache):  # neither appended: its own name
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v), k_cache, v_cache
    assert lesson07.check_decode_step(both_kept_old).mistake == "returned_old_cache"

    # torch's CPU attention accepts T+1 keys with T values (the course's trusted check still
    # names that output; a learner's F.scaled_dot_product_attention is refused first)
    def value_forgotten_sdpa(q, k_new, v_new, k_cache, v_cache):
        k = _cat(k_cache, k_new)
        copies = q.shape[1] // k.shape[1]
        out = F.scaled_dot_product_attention(q, k.repeat_interleave(copies, 1),
                                             v_cache.repeat_interleave(copies, 1))
        return out, k, v_cache
    assert lesson07.DECODE_STEP.check_trusted(value_forgotten_sdpa).mistake == "value_not_appended"


def test_decode_step_names_a_cache_left_behind_when_attention_refuses_it():
    """torch 2.5.1's attention with enable_gqa=True raises on T keys and T+1 values, where
    2.13's returns: the failed call's shapes (recorded on 2.5.1) name which cache was left
    behind, never forgot_enable_gqa; with equal lengths, unequal head counts still name that."""
    def key_for(q, k, v):
        return lesson07._DecodeExercise._key_for(("scaled_dot_product_attention", [q, k, v]))

    assert key_for((2, 4, 1, 8), (2, 2, 5, 8), (2, 2, 6, 8)) == "key_not_appended"
    assert key_for((2, 4, 1, 8), (2, 2, 6, 8), (2, 2, 5, 8)) == "value_not_appended"
    assert key_for((2, 4, 1, 8), (2, 2, 6, 8), (2, 2, 6, 8)) == "forgot_enable_gqa"

    def value_forgotten(q, k_new, v_new, k_cache, v_cache):
        k = _cat(k_cache, k_new)
        return F.scaled_dot_product_attention(q, k, v_cache, enable_gqa=True), k, v_cache
    feedback = lesson07.DECODE_STEP.check_trusted(value_forgotten)
    assert feedback.mistake == "value_not_appended" and "v_new" in feedback.message, feedback


def test_decode_step_names_caches_returned_as_none():
    def no_caches(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v), None, None
    assert lesson07.check_decode_step(no_caches).mistake == "caches_not_returned"

    def returned_nothing(q, k_new, v_new, k_cache, v_cache):
        _grouped(q, _cat(k_cache, k_new), _cat(v_cache, v_new))
    feedback = lesson07.check_decode_step(returned_nothing)  # no return at all: its own message
    assert feedback.mistake is None and "forget `return`" in feedback.message


def test_cache_bytes_with_swapped_head_parameters_is_told_to_check_their_order():
    def swapped(layers, batch, num_kv_heads, num_heads, d_head, seq_len, bits):
        return 2 * layers * batch * num_kv_heads * d_head * seq_len * bits // 8
    feedback = lesson07.check_cache_bytes(swapped)
    assert feedback.mistake == "used_query_heads" and "order" in feedback.hint


def test_decode_step_names_the_course_function():
    from course_utils import grouped_query_attention

    def course(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return grouped_query_attention(q, k, v)[0], k, v
    assert lesson07.check_decode_step(course).mistake == "called_reference"


def test_repeat_kv_names_the_feature_axis_a_missing_reshape_and_a_float_count():
    feedback = lesson07.check_repeat_kv(lambda kv, h: kv.repeat_interleave(h // kv.shape[1], dim=3))
    assert feedback.mistake == "repeated_feature_axis"
    feedback = lesson07.check_repeat_kv(lambda kv, h: kv.unsqueeze(2).expand(-1, -1, h // kv.size(1), -1, -1))
    assert feedback.mistake == "expanded_not_reshaped"
    for float_count in (lambda kv, h: torch.repeat_interleave(kv, h / kv.size(1), dim=1),
                        lambda kv, h: kv.repeat_interleave(repeats=h / kv.size(1), dim=1),
                        lambda kv, h: kv[:, :, None].expand(-1, -1, h / kv.size(1), -1, -1).flatten(1, 2)):
        assert lesson07.check_repeat_kv(float_count).mistake == "float_repeat_count"


def test_repeat_kv_reports_other_errors_unnamed():
    def typo(kv, h):
        return kv.repeat_interleave(h // kv.shape[1], dim=1) + undefined_name  # noqa: F821
    feedback = lesson07.check_repeat_kv(typo)
    assert feedback.status == "error" and feedback.mistake is None and "NameError" in feedback.message


def _right(layers, batch, h, g, d_head, seq_len, bits):
    return 2 * layers * batch * g * d_head * seq_len * bits // 8


def test_cache_bytes_passes_only_the_exact_count():
    assert lesson07.check_cache_bytes(_right).passed
    assert lesson07.check_cache_bytes(lambda *a: np.int64(_right(*a))).passed
    tensor = lesson07.check_cache_bytes(lambda *a: torch.tensor(_right(*a)))  # 0-d: the spec asks for an int
    assert not tensor.passed and tensor.mistake == "returned_tensor" and "value is right" in tensor.message
    feedback = lesson07.check_cache_bytes(lambda *a: _right(*a) + 1)  # within 1e-5 of the right count
    assert not feedback.passed and "off by +1)" in feedback.message
    feedback = lesson07.check_cache_bytes(lambda *a: round(_right(*a), -3))  # rounded to 1000 bytes
    assert not feedback.passed and "expected 1,073,741,824 bytes, got 1,073,742,000" in feedback.message
    feedback = lesson07.check_cache_bytes(lambda *a: _right(*a) // 100 * 100)  # rounded down
    assert not feedback.passed and "got 1,073,741,800 (off by -24)" in feedback.message
    feedback = lesson07.check_cache_bytes(lambda *a: _right(*a) // 1024 * 1024)  # whole KiB only
    assert feedback.mistake is None and "expected 2,310 bytes, got 2,048 (off by -262)" in feedback.message


def test_cache_bytes_names_bytes_per_element_floored_for_4_bit():
    def floored(layers, batch, h, g, d_head, seq_len, bits):
        bytes_per_number = bits // 8
        return 2 * layers * batch * g * d_head * seq_len * bytes_per_number
    feedback = lesson07.check_cache_bytes(floored)
    assert feedback.mistake == "floored_bytes_per_element" and "4-bit" in feedback.message


def test_cache_bytes_names_a_right_float():
    def true_division(layers, batch, h, g, d_head, seq_len, bits):
        return 2 * layers * batch * g * d_head * seq_len * (bits / 8)
    assert lesson07.check_cache_bytes(true_division).mistake == "returned_float"
    assert lesson07.check_cache_bytes(lambda *a: torch.tensor(float(_right(*a)))).mistake == "returned_tensor"


def test_cache_bytes_names_group_size_fixed_widths_d_head_and_gib():
    def group_size(layers, batch, h, g, d_head, seq_len, bits):
        return layers * 2 * batch * d_head * seq_len * (h // g) * bits // 8
    assert lesson07.check_cache_bytes(group_size).mistake == "used_group_size"

    def float32(layers, batch, h, g, d_head, seq_len, bits):
        return layers * batch * g * d_head * seq_len * 2 * 32 // 8
    assert lesson07.check_cache_bytes(float32).mistake == "assumed_float32"

    def half(layers, batch, h, g, d_head, seq_len, bits):
        return layers * batch * g * d_head * seq_len * 2 * 16 // 8
    assert lesson07.check_cache_bytes(half).mistake == "assumed_16_bit"

    def no_width(layers, batch, h, g, d_head, seq_len, bits):
        return 2 * layers * batch * g * seq_len * bits // 8
    assert lesson07.check_cache_bytes(no_width).mistake == "forgot_d_head"

    def gib(layers, batch, h, g, d_head, seq_len, bits):
        return bits * 2 * layers * batch * g * d_head * seq_len / 8 / 1024**3
    assert lesson07.check_cache_bytes(gib).mistake == "returned_gib"


def test_cache_bytes_names_the_course_function():
    from course_utils.attention.gqa import kv_cache_bytes

    def course(layers, batch, h, g, d_head, seq_len, bits):
        return kv_cache_bytes(layers, batch, g, d_head, seq_len, bits // 8)
    assert lesson07.check_cache_bytes(course).mistake == "called_reference"


def test_decode_step_raising_for_other_reasons_is_not_misnamed():
    """A cat along time of mismatched heads, or k.T reversing all axes, are not the slips
    'appended on the wrong axis' or 'heads not matched': the plain error report stands."""
    def new_token_repeated(q, k_new, v_new, k_cache, v_cache):
        copies = q.shape[1] // k_cache.shape[1]
        k = torch.cat([k_cache, k_new.repeat_interleave(copies, 1)], 2)  # g vs h heads: raises
        v = torch.cat([v_cache, v_new.repeat_interleave(copies, 1)], 2)
        return _grouped(q, k, v), k, v
    feedback = lesson07.check_decode_step(new_token_repeated)
    assert feedback.status == "error" and feedback.mistake is None

    def k_dot_T(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        copies = q.shape[1] // k.shape[1]
        scores = q @ k.repeat_interleave(copies, 1).T / q.shape[-1] ** 0.5  # .T reverses 4 axes
        return scores.softmax(-1) @ v.repeat_interleave(copies, 1), k, v
    feedback = lesson07.check_decode_step(k_dot_T)
    assert feedback.status == "error" and feedback.mistake is None


def test_decode_step_names_a_hand_written_causal_mask():
    def tril_mask(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        B, h, _, dk = q.shape
        scores = q.reshape(B, k.shape[1], -1, dk) @ k.transpose(-2, -1) / dk**0.5  # (B, g, h/g, T+1)
        mask = torch.ones(1, k.shape[2], dtype=torch.bool).tril()  # one query row, top-left: key 0 only
        weights = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        return (weights @ v).reshape(B, h, 1, dk), k, v
    feedback = lesson07.check_decode_step(tril_mask)
    assert feedback.mistake == "is_causal_in_decode" and "tril" in feedback.message


# -- 7.5 merge_halves, written the ways a learner would ----------------------------------------


def _merge_with_softmax(out_a, lse_a, out_b, lse_b):
    weights = torch.softmax(torch.stack([lse_a, lse_b], dim=-1), dim=-1)  # (B, h, 2): stable
    return weights[..., :1] * out_a + weights[..., 1:] * out_b


def _merge_by_hand(out_a, lse_a, out_b, lse_b):
    top = torch.maximum(lse_a, lse_b)
    wa, wb = torch.exp(lse_a - top), torch.exp(lse_b - top)
    return ((wa / (wa + wb)).unsqueeze(-1) * out_a + (wb / (wa + wb)).unsqueeze(-1) * out_b)


@pytest.mark.parametrize("fn", [_merge_with_softmax, _merge_by_hand])
def test_merge_halves_accepts_the_stable_ways_to_write_it(fn):
    assert lesson07.check_merge_halves(fn).passed


def _naive_shares(out_a, lse_a, out_b, lse_b):
    ea, eb = lse_a.exp(), lse_b.exp()
    return (ea / (ea + eb))[..., None] * out_a + (eb / (ea + eb))[..., None] * out_b


@pytest.mark.parametrize("fn,key", [
    (lambda oa, la, ob, lb: 0.5 * (oa + ob), "averaged"),
    (_naive_shares, "exp_overflow"),
    (lambda oa, la, ob, lb: _merge_with_softmax(oa, lb, ob, la), "weights_swapped"),
    (lambda oa, la, ob, lb: (la / (la + lb))[..., None] * oa + (lb / (la + lb))[..., None] * ob,
     "lse_used_as_sum"),
    (lambda oa, la, ob, lb: torch.where((la > lb).unsqueeze(-1), oa, ob), "kept_one_half"),
    (lambda oa, la, ob, lb: oa + ob, "summed"),
    (lambda oa, la, ob, lb: ((la - torch.logaddexp(la, lb)).unsqueeze(-1) * oa
                             + (lb - torch.logaddexp(la, lb)).unsqueeze(-1) * ob), "log_shares"),
])
def test_merge_halves_names_each_slip(fn, key):
    assert lesson07.check_merge_halves(fn).mistake == key


def test_merge_halves_names_any_overflow_by_the_large_case():
    def log_of_exp_sum(out_a, lse_a, out_b, lse_b):
        lse = torch.log(torch.exp(lse_a) + torch.exp(lse_b))  # inf for scores near 1000
        return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b

    assert lesson07.check_merge_halves(log_of_exp_sum).mistake == "exp_overflow"


def test_merge_halves_names_weights_without_a_last_axis_and_hides_the_traceback():
    def flat_weights(out_a, lse_a, out_b, lse_b):
        lse = torch.logsumexp(torch.stack([lse_a, lse_b]), dim=0)
        return torch.exp(lse_a - lse) * out_a + torch.exp(lse_b - lse) * out_b  # (B, h) * (B, h, dk)

    feedback = lesson07.check_merge_halves(flat_weights)
    assert feedback.mistake == "weights_not_unsqueezed" and "[..., None]" in feedback.hint
    assert "RuntimeError" not in feedback.message


def test_merge_halves_names_a_share_of_exp_lse_that_overflows_only_when_both_lse_are_large():
    """w = exp(la) / (exp(la) + exp(lb)) is right while one lse is small; with both above 709
    it is inf / inf. The case with every score near 750 catches it (it passed before)."""
    def shares_of_exp(out_a, lse_a, out_b, lse_b):
        w = torch.exp(lse_a) / (torch.exp(lse_a) + torch.exp(lse_b))
        return w[..., None] * out_a + (1 - w[..., None]) * out_b

    assert lesson07.check_merge_halves(shares_of_exp).mistake == "exp_overflow"


# -- slips named since the inference engineer's review (issue 27, item 9) -------------------
def test_repeat_kv_names_i_div_g_plain_expand_and_the_batch_axis():
    def i_div_g(kv, h):
        g = kv.shape[1]
        return kv[:, torch.tensor([i // g for i in range(h)])]  # IndexError with h = 6, g = 2

    def plain_expand(kv, h):
        B, g, T, dk = kv.shape
        return kv.expand(B, h, T, dk)  # RuntimeError: the head axis is not of size 1

    def batch_axis(kv, h):
        return kv.repeat_interleave(h // kv.shape[1], dim=0)

    for answer, key in ((i_div_g, "index_i_div_g"), (plain_expand, "expanded_head_axis"),
                        (batch_axis, "repeated_batch_axis")):
        feedback = lesson07.check_repeat_kv(answer)
        assert feedback.mistake == key, (key, feedback)
        assert "Traceback" not in feedback.message


def test_cache_bytes_names_mib_g_times_h_and_times_four():
    def mib(layers, batch, h, g, d_head, seq_len, bits):
        return 2 * layers * batch * g * d_head * seq_len * bits / 8 / 2**20

    def g_times_h(layers, batch, h, g, d_head, seq_len, bits):
        return 2 * layers * batch * g * h * d_head * seq_len * bits // 8

    def times_four(layers, batch, h, g, d_head, seq_len, bits):
        return 2 * layers * batch * g * d_head * seq_len * bits // 8 * 4

    for answer, key in ((mib, "returned_mib"), (g_times_h, "counted_g_times_h"), (times_four, "times_four")):
        assert lesson07.check_cache_bytes(answer).mistake == key


def test_decode_step_names_index_slips_value_cache_dropout_and_length_scale():
    def i_div_g(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        index = torch.tensor([i // k.shape[1] for i in range(q.shape[1])])
        return _grouped(q, k[:, index], v[:, index]), k, v  # IndexError where g = 1, h = 2

    def repeat_by_g(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        g = k.shape[1]
        kr, vr = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)  # g * g heads
        return torch.softmax(q @ kr.transpose(-2, -1) / q.shape[-1] ** 0.5, -1) @ vr, k, v

    def k_new_in_values(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, k_new)
        return _grouped(q, k, v), k, v

    def dropout_on(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        B, h, _, dk = q.shape
        weights = torch.softmax(q.reshape(B, k.shape[1], -1, dk) @ k.transpose(-2, -1) / dk**0.5, -1)
        return (F.dropout(weights, p=0.1) @ v).reshape(B, h, 1, dk), k, v

    def sqrt_length(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q, k, v, scale=k.shape[2] ** -0.5), k, v

    for answer, key in ((i_div_g, "kv_index_i_div_g"), (repeat_by_g, "repeated_by_g"),
                        (k_new_in_values, "new_key_in_value_cache"), (dropout_on, "random_output"),
                        (sqrt_length, "scaled_by_sqrt_length")):
        feedback = lesson07.check_decode_step(answer)
        assert feedback.mistake == key, (key, feedback)


# -- hints that follow the answer, a silent cast, scores too large for a plain exp ------------
def test_7_1_a_float32_copy_of_float64_heads_is_named():
    def cast(kv, num_heads):
        return kv.float().repeat_interleave(num_heads // kv.shape[1], dim=1)

    fb = lesson07.check_repeat_kv(cast)
    assert fb.mistake == "changed_dtype" and "torch.float32" in fb.message and "torch.float64" in fb.message


def test_7_1_interleaving_by_expand_gets_an_expand_hint_not_a_repeat_one():
    def expand_before_heads(kv, num_heads):
        B, g, T, dk = kv.shape
        return kv[:, None].expand(B, num_heads // g, g, T, dk).reshape(B, num_heads, T, dk)

    def tiled(kv, num_heads):
        return kv.repeat(1, num_heads // kv.shape[1], 1, 1)

    by_expand, by_repeat = lesson07.check_repeat_kv(expand_before_heads), lesson07.check_repeat_kv(tiled)
    assert by_expand.mistake == by_repeat.mistake == "interleaved_groups"
    assert "kv[:, :, None].expand" in by_expand.hint and ".repeat(" not in by_expand.hint
    assert "repeat_interleave(h // g, dim=1)" in by_repeat.hint


def _by_hand(q_new, k, v, scale):
    copies = q_new.shape[1] // k.shape[1]
    scores = q_new @ k.repeat_interleave(copies, dim=1).transpose(-2, -1) * scale
    return torch.softmax(scores, dim=-1) @ v.repeat_interleave(copies, dim=1)


def test_7_3_an_unscaled_answer_by_hand_is_told_to_divide_by_sqrt_dk():
    def unscaled_by_hand(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        return _by_hand(q_new, k, v, 1.0), k, v

    def unscaled_grouped(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        return _grouped(q_new, k, v, scale=1.0), k, v

    for answer in (unscaled_by_hand, unscaled_grouped):
        feedback = lesson07.check_decode_step(answer)
        assert feedback.mistake == "unscaled", feedback
        assert "scale=None" not in feedback.hint and "dk ** 0.5" in feedback.hint


# -- 7.3 by hand, group by group (issue 35): the five slips of the grouped step -------------------
def test_7_3_the_grouped_step_by_hand_passes():
    def grouped(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return _grouped(q_new, k, v), k, v

    assert lesson07.check_decode_step(grouped).passed


def test_7_3_groups_made_by_a_transpose_are_named_interleaved_with_a_hint_on_the_view():
    def interleaved(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        B, h, _, dk = q_new.shape
        g = k.shape[1]
        q = q_new.reshape(B, h // g, g, dk).transpose(1, 2)  # group j: heads j, j + g, ...
        out = torch.softmax(q @ k.transpose(-2, -1) / dk**0.5, dim=-1) @ v  # (B, g, h/g, dk)
        return out.transpose(1, 2).reshape(B, h, 1, dk), k, v

    feedback = lesson07.check_decode_step(interleaved)
    assert feedback.mistake == "interleaved_groups", feedback
    assert "(B, g, h // g, dk)" in feedback.hint and "interleaved" in feedback.hint


def test_7_3_attending_before_appending_is_named():
    def attends_first(q_new, k_new, v_new, k_cache, v_cache):
        out = _grouped(q_new, k_cache, v_cache)  # the new token never sees itself
        return out, _cat(k_cache, k_new), _cat(v_cache, v_new)

    assert lesson07.check_decode_step(attends_first).mistake == "skipped_new_token"


def test_7_3_the_new_key_and_value_in_the_wrong_caches_are_named():
    def value_into_key_cache(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, v_new), _cat(v_cache, k_new)
        return _grouped(q_new, k, v), k, v

    def key_into_value_cache(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, k_new)
        return _grouped(q_new, k, v), k, v

    assert lesson07.check_decode_step(value_into_key_cache).mistake == "appends_swapped"
    assert lesson07.check_decode_step(key_into_value_cache).mistake == "new_key_in_value_cache"


def test_7_3_caches_returned_with_h_heads_are_named_with_a_hint_that_needs_no_copy():
    def h_head_caches(q_new, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        copies = q_new.shape[1] // k.shape[1]
        return _grouped(q_new, k, v), k.repeat_interleave(copies, 1), v.repeat_interleave(copies, 1)

    feedback = lesson07.check_decode_step(h_head_caches)
    assert feedback.mistake == "returned_repeated_cache" and "no h-head copy" in feedback.hint


def test_7_3_a_softmax_without_the_max_shift_is_named_on_large_scores():
    def plain_exp(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        copies = q_new.shape[1] // k.shape[1]
        scores = q_new @ k.repeat_interleave(copies, dim=1).transpose(-2, -1) / q_new.shape[-1] ** 0.5
        weights = scores.exp() / scores.exp().sum(-1, keepdim=True)
        return weights @ v.repeat_interleave(copies, dim=1), k, v

    def shifted(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        return _by_hand(q_new, k, v, q_new.shape[-1] ** -0.5), k, v

    assert lesson07.check_decode_step(plain_exp).mistake == "softmax_without_max_shift"
    assert lesson07.check_decode_step(shifted).passed


def test_7_5_a_right_formula_in_float32_is_not_called_an_overflow():
    def in_float32(out_a, lse_a, out_b, lse_b):
        out_a, lse_a, out_b, lse_b = (t.float() for t in (out_a, lse_a, out_b, lse_b))
        lse = torch.logaddexp(lse_a, lse_b)
        return torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b

    def overflowing_in_float32(out_a, lse_a, out_b, lse_b):
        wa, wb = lse_a.float().exp(), lse_b.float().exp()
        return ((wa[..., None] * out_a.float() + wb[..., None] * out_b.float()) / (wa + wb)[..., None])

    fb = lesson07.check_merge_halves(in_float32)
    assert fb.mistake == "float32_rounding" and "overflow" not in fb.hint
    assert lesson07.check_merge_halves(overflowing_in_float32).mistake == "exp_overflow"


def test_7_3_new_key_and_value_appended_to_each_others_caches_are_named():
    """Learner trial l3: k_new into the value cache AND v_new into the key cache used to get
    only 'wrong values'. Written by hand here, not with F.scaled_dot_product_attention."""
    def swapped_appends(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat((k_cache, v_new), dim=-2), torch.cat((v_cache, k_new), dim=-2)
        group = q_new.shape[1] // k.shape[1]
        kh, vh = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        weights = torch.softmax(q_new @ kh.transpose(-2, -1) / q_new.shape[-1] ** 0.5, dim=-1)
        return weights @ vh, k, v

    feedback = lesson07.check_decode_step(swapped_appends)
    assert feedback.mistake == "appends_swapped", feedback
    assert "k_new went into the value cache" in feedback.message


def test_decode_step_names_groups_viewed_the_other_way_round():
    """A reading trial's slip: the h query heads viewed as (B, h/g, g, dk), with no transpose.
    Where h/g = g the view is the right one, elsewhere the product raises: named, not called a
    repeat the answer never made."""
    def groups_swapped(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        B, h, _, dk = q.shape
        g = k.shape[1]
        weights = torch.softmax(q.reshape(B, h // g, g, dk) @ k.transpose(-2, -1) / dk**0.5, dim=-1)
        return (weights @ v).reshape(B, h, 1, dk), k, v
    feedback = lesson07.check_decode_step(groups_swapped)
    assert feedback.mistake == "group_axes_swapped", feedback
    assert "repeat" not in feedback.message and "(B, g, h // g, dk)" in feedback.hint


def test_decode_step_names_a_softmax_over_a_groups_heads():
    def over_group_heads(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        B, h, _, dk = q.shape
        g = k.shape[1]
        weights = torch.softmax(q.reshape(B, g, h // g, dk) @ k.mT / dk**0.5, dim=2)
        return (weights @ v).reshape(B, h, 1, dk), k, v
    feedback = lesson07.check_decode_step(over_group_heads)
    assert feedback.mistake == "softmax_over_group_heads", feedback
