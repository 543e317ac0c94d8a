"""Battery 24 (issue 38), commands, files and grading (a development run at 3431e32): twins
called by another name, a check inside a diagnosis's rerun, an answer's os.chdir, the grader's
salt and huge ints, run_kernel's empty message."""
from __future__ import annotations

import asyncio
import os
import types

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils import cli
from course_utils.exercises import autograde, lesson02, lesson04, lesson07, sandbox


def _rows(scores):
    return torch.from_numpy(np.asarray(scores))


def _eye(q, k):
    return torch.eye(k.shape[-2], dtype=q.dtype).expand(*k.shape[:-2], k.shape[-2], k.shape[-2])


# -- the kernel's checks see a twin under another name ---------------------------------------------
@pytest.mark.parametrize("check, answer", [
    (lesson02.check_softmax_rows, lambda s: _rows(s).softmax(-1).numpy()),
    (lesson02.check_softmax_rows, lambda s: torch.special.softmax(_rows(s), -1).numpy()),
    (lesson02.check_softmax_rows, lambda s: torch.ops.aten._softmax(_rows(s), -1, False).numpy()),
    (lesson02.check_softmax_rows, lambda s: torch.ops.aten._softmax.default(_rows(s), -1, False).numpy()),
    (lesson02.check_attention_weights,
     lambda q, k: torch.ops.aten.scaled_dot_product_attention(q, k, _eye(q, k))),
    (lesson02.check_single_head_attention,
     lambda x, a, b, c: torch.ops.aten.scaled_dot_product_attention.default(x @ a, x @ b, x @ c)),
], ids=["Tensor.softmax", "torch.special.softmax", "aten._softmax", "aten._softmax.default",
        "aten sdpa", "aten sdpa.default"])
def test_a_twin_called_by_another_name_is_the_reference(check, answer):
    """Battery 24: these aliases of torch.softmax and F.scaled_dot_product_attention were graded
    correct by the kernel's check (the outside grader refused them by name already)."""
    feedback = check(answer)
    assert feedback.mistake == "called_reference", feedback


def _decode_step_by_aten(q_new, k_new, v_new, k_cache, v_cache):
    k, v = torch.cat([k_cache, k_new], 2), torch.cat([v_cache, v_new], 2)
    return torch.ops.aten.scaled_dot_product_attention(q_new, k, v, enable_gqa=True), k, v


def test_decode_step_by_aten_sdpa_is_the_reference():
    feedback = lesson07.check_decode_step(_decode_step_by_aten)
    assert feedback.mistake == "called_reference", feedback


def test_a_softmax_where_the_exercise_allows_it_is_still_correct():
    """No false alarm: 2.2 allows torch.softmax (and so Tensor.softmax): only sdpa is its twin."""
    def attention_weights(q, k):
        return (q @ k.transpose(-2, -1) / k.shape[-1] ** 0.5).softmax(-1)

    assert lesson02.check_attention_weights(attention_weights).passed


def _copy_of(f):
    """A function with ``f``'s code under another name (``__code__.replace``): not ``f``."""
    copy = types.FunctionType(f.__code__.replace(co_name=f.__code__.co_name + "_copy"), f.__globals__, None,
                              f.__defaults__, f.__closure__)
    copy.__kwdefaults__ = f.__kwdefaults__
    return copy


def test_a_torch_module_or_a_copy_of_the_courses_code_is_the_reference():
    """Battery 24: nn.MultiheadAttention's parameters summed, and copies of the course's own
    functions' code, were graded correct by the kernel's checks."""
    from course_utils.attention import gqa, shapes
    from course_utils.exercises import lesson03

    def by_torch(d, h, bias=True):
        return sum(p.numel() for p in torch.nn.MultiheadAttention(d, h, bias=bias).parameters())

    by_module = lesson03.check_parameter_count(by_torch)
    count = _copy_of(shapes.mha_parameter_count)
    by_copy = lesson03.check_parameter_count(lambda d, h, bias=True: count(d, h, bias=bias))
    kv = _copy_of(gqa.kv_cache_bytes)
    def cache_bytes(L, B, h, g, dk, T, bits):
        return kv(L, B, g, dk, T, bits // 8) if bits % 8 == 0 else kv(L, B, g, dk, T, 1) * bits // 8

    by_copy_7 = lesson07.check_cache_bytes(cache_bytes)
    math_kernel = lesson02.check_single_head_attention(
        lambda x, a, b, c: torch.ops.aten._scaled_dot_product_attention_math(x @ a, x @ b, x @ c)[0])
    for feedback in (by_module, by_copy, by_copy_7, math_kernel):
        assert feedback.mistake == "called_reference", feedback


# -- a check the answer calls inside a diagnosis's rerun answers at once ---------------------------
def test_an_answer_that_calls_its_own_check_gets_a_verdict_at_once():
    """Battery 24: 4.4 reran the answer outside the guard, so the inner check ran it again, and
    again (no verdict within 45 s)."""
    def masks_for_torch(attn_mask, key_padding_mask):
        lesson04.check_masks_for_torch(masks_for_torch)
        return ~attn_mask, ~key_padding_mask

    feedback = lesson04.check_masks_for_torch(masks_for_torch)
    assert feedback.mistake == "called_a_check", feedback


# -- the working directory is a setting the check puts back ----------------------------------------
def test_check_puts_back_the_working_directory_and_names_the_change(tmp_path):
    before = os.getcwd()

    def softmax_rows(scores):
        os.chdir(tmp_path)
        return np.zeros_like(scores)

    try:
        feedback = lesson02.check_softmax_rows(softmax_rows)
        after = os.getcwd()
    finally:
        os.chdir(before)
    assert after == before
    assert not feedback.passed and "working directory" in feedback.message, feedback


# -- the outside grader ------------------------------------------------------------------------------
def test_grade_answer_refuses_a_negative_salt_before_running_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(autograde, "reference_outputs", lambda *a: pytest.fail("ran the reference"))
    raises_naming(ValueError, ["salt", ">= 0", "-1"],
                  lambda: autograde.grade_answer("lesson02", "check_softmax_rows",
                                                 "def f(s):\n    return s\n", "f", salt=-1,
                                                 solutions_dir=str(tmp_path)))


@pytest.mark.parametrize("value", [10**1000, -(10**700)], ids=["10**1000", "-10**700"])
def test_the_answers_process_refuses_an_int_it_could_not_send_back(value):
    """Battery 24: 10**1000 could not be read back (torch.load reads ints of 255 bytes at most),
    and the feedback said the process ended without results."""
    raises_naming(sandbox.Refused, ["int", "digits", "600"], lambda: sandbox.to_plain(value))
    assert sandbox.to_plain(10**300) == 10**300


# -- run_kernel's message ------------------------------------------------------------------------------
def test_run_kernel_refuses_an_empty_message_and_closes_the_coroutine():
    async def work():
        return 1

    coroutine = work()
    raises_naming(ValueError, ["message", "non-empty"], lambda: cli.run_kernel(coroutine, " "))
    assert coroutine.cr_frame is None  # closed: no "never awaited" warning
    assert asyncio.iscoroutine(coroutine)
