"""Checks 5.x-7.x: the slips learner trial l6 got a generic (or no) message for, written the way a
learner writes them, are named; right answers written several ways still pass; and the hints a
wrong or blank answer prints point to the idea without giving away the answer's line."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from graded_here import graded_here, graded_outside

from course_utils.exercises import lesson05, lesson06, lesson07

# "The grader names it too": the quick suite records the answer here and hands the outcomes to
# the grader's own comparison; CI's slow step also runs it in a process of its own.
GRADERS = [pytest.param(graded_here, id="recorded-here"),
           pytest.param(lambda *a: graded_outside(*a, sandboxed=False), id="own-process",
                        marks=pytest.mark.slow)]


# -- 5.1 / 5.2: an edited pattern, one diagonal --------------------------------------------------
def _previous_right(pattern):
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def _previous_by_loop(pattern):
    T = pattern.shape[-1]
    i = torch.arange(1, T)
    return pattern[:, i, i - 1].sum(-1) / (T - 1)


def _previous_zeroes_its_input(pattern):
    below = pattern.diagonal(-1, -2, -1)  # a view of pattern
    pattern.zero_()
    return below.mean(-1)


def _previous_halves_its_input(pattern):
    pattern /= 2  # in place
    return pattern.diagonal(-1, -2, -1).mean(-1)


@pytest.mark.parametrize("answer", [_previous_zeroes_its_input, _previous_halves_its_input])
def test_5_1_a_wrong_score_that_edited_the_pattern_is_named(answer):
    fb = lesson05.check_previous_token_score(answer)
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb
    assert "changed `pattern`" in fb.message and "clone()" in fb.hint


def test_5_1_a_wrong_score_that_leaves_the_pattern_alone_stays_unnamed():
    fb = lesson05.check_previous_token_score(lambda p: p.diagonal(-1, -2, -1).mean(-1) / 2)
    assert fb.status == "wrong" and fb.mistake is None, fb


@pytest.mark.parametrize("answer", [_previous_right, _previous_by_loop])
def test_5_1_right_answers_pass(answer):
    assert lesson05.check_previous_token_score(answer).passed


@pytest.mark.parametrize("grade", GRADERS)
def test_5_1_the_grader_names_the_edited_pattern_too(grade):
    code = ("def previous_token_score(pattern):\n"
            "    below = pattern.diagonal(offset=-1, dim1=-2, dim2=-1)\n"
            "    pattern.zero_()\n"
            "    return below.mean(-1)\n")
    fb = grade("lesson05", "check_previous_token_score", code, "previous_token_score")
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb


def _induction_right(pattern, period):
    T = pattern.shape[-1]
    per_query = [pattern[:, q, torch.arange(q - period + 1, 1, -period)].sum(-1)
                 for q in range(period + 1, T)]
    return torch.stack(per_query, -1).mean(-1)


def _induction_by_mask(pattern, period):
    T = pattern.shape[-1]
    q, k = torch.arange(T)[:, None], torch.arange(T)[None, :]
    keys = ((q - k + 1) % period == 0) & (k >= 2) & (k <= q - period + 1)
    return (pattern * keys).sum(-1)[:, period + 1:].mean(-1)


def _induction_stripe_by_index(pattern, period):
    T = pattern.shape[-1]  # the stripe one period back, read along the whole diagonal
    return torch.stack([pattern[:, q, q - period + 1] for q in range(period - 1, T)], dim=-1).mean(-1)


def _induction_duplicate_diagonal(pattern, period):
    return torch.diagonal(pattern, -period, 1, 2).mean(-1)


@pytest.mark.parametrize("answer", [_induction_stripe_by_index, _induction_duplicate_diagonal])
def test_5_2_one_diagonal_of_the_pattern_is_named_at_any_offset(answer):
    fb = lesson05.check_induction_score(answer)
    assert not fb.passed and fb.mistake == "single_diagonal", fb


def test_5_2_a_wrong_score_that_edited_the_pattern_is_named():
    def clamps_its_input(pattern, period):
        pattern.clamp_(max=0.5)
        return _induction_right(pattern, period)

    fb = lesson05.check_induction_score(clamps_its_input)
    assert not fb.passed and fb.mistake == "edited_pattern_in_place", fb


@pytest.mark.parametrize("answer", [_induction_right, _induction_by_mask])
def test_5_2_right_answers_pass(answer):
    assert lesson05.check_induction_score(answer).passed


# -- 6.1 / 6.3: a median, a float32 layer output, a value for a name ---------------------------------
def _merged(edited):
    B, h, T, dk = edited.shape
    return edited.transpose(1, 2).reshape(B, T, h * dk)


def _ablate_with(fill):
    def answer(heads, reference_heads, head, out_proj):
        edited = heads.clone()
        edited[:, head] = fill(reference_heads[:, head])  # (B_ref, T, dk) -> (dk,)
        return out_proj(_merged(edited))
    return answer


@pytest.mark.parametrize("fill,key", [
    (lambda r: r.flatten(0, 1).median(dim=0)[0], "median_not_mean"),
    (lambda r: torch.from_numpy(np.median(r.numpy().reshape(-1, r.shape[-1]), axis=0)), "median_midpoint"),
])
def test_6_1_a_median_instead_of_the_mean_is_named(fill, key):
    fb = lesson06.check_mean_ablation(_ablate_with(fill))
    assert not fb.passed and fb.mistake == key, fb
    assert "median" in fb.message


def test_6_1_a_float32_output_of_a_float64_layer_is_named():
    cast_at_the_end = _ablate_with(lambda r: r.mean(dim=(0, 1)))

    def in_float32(heads, reference_heads, head, out_proj):
        edited = heads.float().clone()
        edited[:, head] = reference_heads[:, head].float().mean(dim=(0, 1))
        return F.linear(_merged(edited), out_proj.weight.float(), out_proj.bias.float())

    for answer in (lambda *a: cast_at_the_end(*a).float(), in_float32):
        fb = lesson06.check_mean_ablation(answer)
        assert not fb.passed and fb.mistake == "changed_dtype", fb
        assert "torch.float32" in fb.message and "torch.float64" in fb.message


def test_6_1_right_answers_pass():
    def by_where(heads, reference_heads, head, out_proj):
        mask = (torch.arange(heads.shape[1]) == head)[None, :, None, None]
        edited = torch.where(mask, reference_heads[:, head].mean(dim=(0, 1)), heads)
        B, h, T, dk = heads.shape
        return F.linear(edited.permute(0, 2, 1, 3).reshape(B, T, h * dk), out_proj.weight, out_proj.bias)

    for answer in (_ablate_with(lambda r: r.mean(dim=(0, 1))), by_where):
        assert lesson06.check_mean_ablation(answer).passed


@pytest.mark.parametrize("answer", [
    lambda t: t["task accuracy after"].min(),
    lambda t: t.min()["task accuracy after"],
    lambda t: float(t["loss change"].max()),  # another value of the table
    lambda t: int(t["task accuracy after"].to_numpy().argmax()),  # a position, not the lowest one
])
def test_6_3_a_number_instead_of_the_heads_name_is_named(answer):
    fb = lesson06.check_narrow_head(answer)
    assert not fb.passed and fb.mistake == "value_not_name", fb
    assert "not the head's name" in fb.message and "idxmin" not in fb.hint


@pytest.mark.parametrize("grade", GRADERS)
def test_6_3_the_grader_names_the_value_too(grade):
    code = "def head_the_task_needs(table):\n    return table['task accuracy after'].min()\n"
    fb = grade("lesson06", "check_narrow_head", code, "head_the_task_needs")
    assert not fb.passed and fb.mistake == "value_not_name", fb


@pytest.mark.parametrize("answer", [lambda t: t["task accuracy after"].idxmin(),
                                    lambda t: t.sort_values("task accuracy after").index[0]])
def test_6_3_right_answers_pass(answer):
    assert lesson06.check_narrow_head(answer).passed


# -- 7.1 / 7.2: a float32 buffer, a count in KiB, MiB or GiB --------------------------------------------
def test_7_1_a_copy_into_a_float32_buffer_is_named():
    def into_buffer(kv, num_heads):
        B, g, T, dk = kv.shape
        out = torch.empty(B, num_heads, T, dk)  # float32 by default
        for i in range(num_heads):
            out[:, i] = kv[:, i // (num_heads // g)]
        return out

    fb = lesson07.check_repeat_kv(into_buffer)
    assert not fb.passed and fb.mistake == "changed_dtype", fb


def _cache_right(layers, batch, h, g, d_head, seq_len, bits):
    return 2 * layers * batch * g * d_head * seq_len * bits // 8


@pytest.mark.parametrize("answer,key", [
    (lambda *a: int(_cache_right(*a) / 1024**2), "returned_mib"),
    (lambda *a: round(_cache_right(*a) / 2**20), "returned_mib"),
    (lambda *a: _cache_right(*a) / 1024, "returned_kib"),
    (lambda *a: _cache_right(*a) // 1024, "returned_kib"),
    (lambda *a: _cache_right(*a) // 2**30, "returned_gib"),
])
def test_7_2_a_count_in_binary_units_is_named_however_it_was_rounded(answer, key):
    fb = lesson07.check_cache_bytes(answer)
    assert not fb.passed and fb.mistake == key, fb


def test_7_2_a_count_off_by_a_little_is_still_told_by_how_much():
    fb = lesson07.check_cache_bytes(lambda *a: _cache_right(*a) + 3)
    assert fb.mistake is None and "off by +3" in fb.message


# -- 7.3: caches of another dtype, a sliding window ----------------------------------------------
def _grouped(q_new, k, v, scale=None):
    """Attention of one query per head, the h heads viewed as g groups: no K/V copy."""
    B, h, _, dk = q_new.shape
    scores = q_new.reshape(B, k.shape[1], -1, dk) @ k.transpose(-2, -1) * (scale or dk**-0.5)
    return (torch.softmax(scores, dim=-1) @ v).reshape(B, h, 1, dk)


def _decode_right(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    return _grouped(q_new, k, v), k, v


def _decode_grouped_matmul(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
    B, h, _, dk = q_new.shape
    g = k.shape[1]
    q = q_new.view(B, g, h // g, dk)
    weights = torch.softmax(q @ k.transpose(-1, -2) / dk**0.5, dim=-1)  # (B, g, h/g, T+1)
    return (weights @ v).view(B, h, 1, dk), k, v


@pytest.mark.parametrize("answer", [_decode_right, _decode_grouped_matmul])
def test_7_3_right_answers_pass(answer):
    assert lesson07.check_decode_step(answer).passed


def test_7_3_refuses_f_scaled_dot_product_attention_and_names_it():
    """Cell 47 prints F.scaled_dot_product_attention(q, k, v, enable_gqa=True) on a decode step's
    shapes (issue 35): 7.3 asks for the grouped attention by hand, so the check refuses that call."""
    def with_sdpa(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v

    fb = lesson07.check_decode_step(with_sdpa)
    assert not fb.passed and fb.mistake == "called_reference", fb
    assert "scaled_dot_product_attention" in fb.message
    assert lesson07.DECODE_STEP.check_trusted(with_sdpa).passed  # the same output: only the call is refused


@pytest.mark.slow
def test_7_3_the_grader_refuses_f_scaled_dot_product_attention_too():
    """In the answer's own process (the call watch runs there; recording here has none)."""
    code = ("import torch\nimport torch.nn.functional as F\n\n"
            "def decode_step(q_new, k_new, v_new, k_cache, v_cache):\n"
            "    k, v = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)\n"
            "    return F.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v\n")
    fb = graded_outside("lesson07", "check_decode_step", code, "decode_step", sandboxed=False)
    assert not fb.passed and fb.mistake == "called_reference", fb


def test_7_3_caches_cast_to_float32_are_named_not_passed():
    def all_float32(q_new, k_new, v_new, k_cache, v_cache):
        return _decode_right(*(t.float() for t in (q_new, k_new, v_new, k_cache, v_cache)))

    def caches_float32(q_new, k_new, v_new, k_cache, v_cache):
        out, k, v = _decode_right(q_new, k_new, v_new, k_cache, v_cache)
        return out, k.to(torch.float32), v.to(torch.float32)

    fb = lesson07.check_decode_step(all_float32)
    assert not fb.passed and fb.mistake == "changed_dtype", fb
    assert "output, key cache and value cache are torch.float32" in fb.message
    fb = lesson07.check_decode_step(caches_float32)
    assert fb.mistake == "changed_dtype" and "your key cache and value cache are" in fb.message


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_7_3_half_precision_is_named_by_its_dtype(dtype):
    def in_half(q_new, k_new, v_new, k_cache, v_cache):
        q, kn, vn, kc, vc = (t.to(dtype) for t in (q_new, k_new, v_new, k_cache, v_cache))
        k, v = torch.cat([kc, kn], dim=2), torch.cat([vc, vn], dim=2)
        copies = q.shape[1] // k.shape[1]
        scores = q @ k.repeat_interleave(copies, 1).transpose(-2, -1) / q.shape[-1] ** 0.5
        return torch.softmax(scores, dim=-1) @ v.repeat_interleave(copies, 1), k, v

    fb = lesson07.check_decode_step(in_half)
    assert not fb.passed and fb.mistake == "half_precision", fb


def test_7_3_a_wrong_answer_in_half_precision_is_not_blamed_on_the_dtype():
    def unscaled_half(q_new, k_new, v_new, k_cache, v_cache):
        k, v = torch.cat([k_cache, k_new], dim=2).half(), torch.cat([v_cache, v_new], dim=2).half()
        out = _grouped(q_new, k.double(), v.double(), scale=1.0)
        return out.half(), k, v

    assert lesson07.check_decode_step(unscaled_half).mistake != "half_precision"


def test_7_3_caches_that_dropped_their_oldest_token_are_named():
    def window(q_new, k_new, v_new, k_cache, v_cache):
        T = k_cache.shape[-2]
        k = torch.cat((k_cache, k_new), -2)[..., -T:, :]
        v = torch.cat((v_cache, v_new), -2)[..., -T:, :]
        return _grouped(q_new, k, v), k, v

    def attends_then_trims(q_new, k_new, v_new, k_cache, v_cache):
        out, k, v = _decode_right(q_new, k_new, v_new, k_cache, v_cache)
        return out, k[:, :, 1:], v[:, :, 1:]

    for answer in (window, attends_then_trims):
        fb = lesson07.check_decode_step(answer)
        assert not fb.passed and fb.mistake == "dropped_oldest_token", fb


@pytest.mark.parametrize("grade", GRADERS)
def test_7_3_the_grader_names_float32_caches_too(grade):
    code = ("import torch\n\n"
            "def decode_step(q_new, k_new, v_new, k_cache, v_cache):\n"
            "    q, kn, vn, kc, vc = (t.float() for t in (q_new, k_new, v_new, k_cache, v_cache))\n"
            "    k, v = torch.cat([kc, kn], dim=2), torch.cat([vc, vn], dim=2)\n"
            "    B, h, _, dk = q.shape\n"
            "    scores = q.reshape(B, k.shape[1], -1, dk) @ k.transpose(-2, -1) / dk ** 0.5\n"
            "    return (scores.softmax(-1) @ v).reshape(B, h, 1, dk), k, v\n")
    fb = grade("lesson07", "check_decode_step", code, "decode_step")
    assert not fb.passed and fb.mistake == "changed_dtype", fb


# -- 7.5: a softmax over the wrong axis, a float32 result ---------------------------------------------
@pytest.mark.parametrize("stack_dim,softmax_dim,key", [
    (0, 1, "softmax_over_batch"),
    (1, 0, "softmax_over_batch"),
    (0, -1, "softmax_over_heads"),
    (-1, -2, "softmax_over_heads"),
])
def test_7_5_a_softmax_over_the_wrong_axis_is_named(stack_dim, softmax_dim, key):
    def merge(out_a, lse_a, out_b, lse_b):
        w = torch.stack([lse_a, lse_b], dim=stack_dim).softmax(dim=softmax_dim)
        wa, wb = w.select(stack_dim, 0), w.select(stack_dim, 1)
        return wa.unsqueeze(-1) * out_a + wb.unsqueeze(-1) * out_b

    fb = lesson07.check_merge_halves(merge)
    assert not fb.passed and fb.mistake == key, fb


def test_7_5_a_right_formula_cast_to_float32_at_the_end_is_named():
    def cast_at_the_end(out_a, lse_a, out_b, lse_b):
        lse = torch.logaddexp(lse_a, lse_b)
        merged = torch.exp(lse_a - lse)[..., None] * out_a + torch.exp(lse_b - lse)[..., None] * out_b
        return merged.float()

    fb = lesson07.check_merge_halves(cast_at_the_end)
    assert not fb.passed and fb.mistake == "changed_dtype", fb


@pytest.mark.parametrize("answer,key,words", [
    (lambda oa, la, ob, lb: oa, "returned_out_a_only", ["returned out_a", "second range", "dropped"]),
    (lambda oa, la, ob, lb: oa.clone(), "returned_out_a_only", ["returned out_a", "dropped"]),
    (lambda oa, la, ob, lb: ob, "returned_out_b_only", ["returned out_b", "first range", "dropped"]),
    (lambda oa, la, ob, lb: 1.0 * ob + 0 * la[..., None], "returned_out_b_only", ["returned out_b"]),
])
def test_7_5_only_one_ranges_output_is_named(answer, key, words):
    """Issue 35: the hint list promises 'keeping only one range's output' is named; returning
    out_a (or out_b) untouched got the generic 'wrong values' message."""
    fb = lesson07.check_merge_halves(answer)
    assert not fb.passed and fb.mistake == key, fb
    assert not [w for w in words if w not in fb.message], fb.message
    assert "largest difference" not in fb.message and fb.hint


@pytest.mark.parametrize("answer", [
    lambda oa, la, ob, lb: torch.sigmoid(la - lb)[..., None] * oa + torch.sigmoid(lb - la)[..., None] * ob,
    lambda oa, la, ob, lb: (torch.stack([la, lb], -1).softmax(-1)[..., None]
                            * torch.stack([oa, ob], -2)).sum(-2),
])
def test_7_5_right_answers_pass(answer):
    assert lesson07.check_merge_halves(answer).passed


# -- hints: a wrong answer gets the idea, not the answer's line ------------------------------------
@pytest.mark.parametrize("exercise,answer_line", [
    (lesson05.PREVIOUS_TOKEN_SCORE, "offset=-1"),
    (lesson05.INDUCTION_SCORE, "arange(q - period + 1"),
])
def test_5_1_and_5_2_hints_do_not_print_the_answer_line(exercise, answer_line):
    hints = [exercise.hint] + [m.hint for m in exercise.mistakes]
    assert not [h for h in hints if answer_line in h]


def test_5_1_and_5_2_named_slips_get_hints_without_the_answer_line():
    """The trial's two slips whose hints printed the answer: the main diagonal (5.1) and keys
    down to key 1 (5.2)."""
    fb = lesson05.check_previous_token_score(lambda p: p.diagonal(0, -2, -1)[:, 1:].mean(-1))
    assert fb.mistake == "diagonal" and "offset=-1" not in fb.hint and "below the main" in fb.hint

    def down_to_key_one(pattern, period):
        T = pattern.shape[-1]
        return torch.stack([pattern[:, q, torch.arange(q - period + 1, 0, -period)].sum(-1)
                            for q in range(period + 1, T)], -1).mean(-1)

    fb = lesson05.check_induction_score(down_to_key_one)
    assert fb.mistake == "bos_as_occurrence" and "arange" not in fb.hint


def test_6_3_no_hint_names_the_method_that_answers_it():
    hints = [lesson06.NARROW_HEAD.hint] + [m.hint for m in lesson06.NARROW_HEAD.mistakes]
    hints.append(lesson06.check_narrow_head(lambda t: t.loc[[t["task accuracy after"].idxmin()]]).hint)
    assert not [h for h in hints if "idxmin" in h]


# -- blank checks: Run All prints their hints before the learner has written anything ----------------
def _stub(*args, **kwargs):
    raise NotImplementedError


@pytest.mark.parametrize("check,answer_bits", [
    (lesson06.check_narrow_head, ["idxmin"]),
    (lesson07.check_merge_halves, ["logaddexp", "exp(lse_half - lse)", "unsqueeze"]),
    (lesson07.check_cache_bytes, ["2 (K and V)", "x g x", "divided by 8"]),
])
def test_a_blank_check_does_not_print_the_answer(check, answer_bits):
    fb = check(_stub)
    assert fb.status == "not attempted", fb
    assert not [bit for bit in answer_bits if bit in str(fb)], str(fb)
