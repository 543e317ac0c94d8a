"""Lesson 07 checks against slips written the way a learner would write them.

Each wrong answer here is written differently from the Mistake implementation it should be
recognised as (expand instead of repeat_interleave, a hand-written softmax, ...), so these tests
show that the check names the slip rather than matching one exact piece of code.
"""

import torch
import torch.nn.functional as F

from course_utils.exercises import lesson07


def _cat(cache, new):
    return torch.cat([cache, new], dim=2)  # (B, g, T+1, dk)


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
        return layers * 2 * g * d_head * seq_len * (bits // 8)
    assert lesson07.check_cache_bytes(no_batch).mistake == "forgot_batch"


def test_decode_step_names_old_and_repeated_caches():
    def old_cache(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True), k_cache, v_cache
    assert lesson07.check_decode_step(old_cache).mistake == "returned_old_cache"

    def repeated_cache(q, k_new, v_new, k_cache, v_cache):
        b, g, t, dk = k_cache.shape
        h = q.shape[1]
        k = _cat(k_cache, k_new)[:, :, None].expand(b, g, h // g, t + 1, dk).reshape(b, h, t + 1, dk)
        v = _cat(v_cache, v_new)[:, :, None].expand(b, g, h // g, t + 1, dk).reshape(b, h, t + 1, dk)
        return F.scaled_dot_product_attention(q, k, v), k, v
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


def test_decode_step_without_enable_gqa_hints_at_it():
    def no_enable_gqa(q, k_new, v_new, k_cache, v_cache):
        k, v = _cat(k_cache, k_new), _cat(v_cache, v_new)
        return F.scaled_dot_product_attention(q, k, v), k, v
    feedback = lesson07.check_decode_step(no_enable_gqa)
    assert not feedback.passed and "enable_gqa=True" in repr(feedback)


def test_decode_step_appended_on_the_head_axis_hints_at_the_time_axis():
    def head_axis(q, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=1), torch.cat([v_cache, v_new], dim=1)
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=True), k, v
    feedback = lesson07.check_decode_step(head_axis)
    assert not feedback.passed and "dim 2" in repr(feedback)
