"""Exercise checks for lesson 02, single-head attention.

* :data:`SOFTMAX_ROWS` (numpy): a numerically stable softmax over the last axis.
* :data:`ATTENTION_WEIGHTS`: ``softmax(q k^T / sqrt(d_k))``.
* :data:`CAUSAL_ATTENTION_WEIGHTS`: the same with a causal mask.
* :data:`SINGLE_HEAD_ATTENTION`: from ``x`` and three weight matrices to the output.

Each check recognises the usual mistakes by their output and names them.

One rule for result types in all four checks. 2.1 is numpy: a torch tensor holding the right
numbers is named. 2.2-2.4 are torch: a NumPy array is named whatever its numbers, and also
when it came back on one case and the function raised on another. One rule for precision, as
in the rest of the course: a float32 result where the answer is float64 is accepted (it is as
close as the tolerance asks); a float64 result where the answer is float32, and a
half-precision one (float16, bfloat16) where it is not, are named, saying the values are right.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..tasks.worked_example import load_worked_example
from . import core as _core
from .core import Case, Feedback, Mistake, _Deadline, _plain
from .raising import DiagnosingExercise, RaisingMistake

__all__ = [
    "SOFTMAX_ROWS",
    "ATTENTION_WEIGHTS",
    "CAUSAL_ATTENTION_WEIGHTS",
    "SINGLE_HEAD_ATTENTION",
    "check_softmax_rows",
    "check_attention_weights",
    "check_causal_attention_weights",
    "check_single_head_attention",
]


def _worked_example_head(index: int) -> tuple[Tensor, ...]:
    """``x (3, 6)`` and head ``index``'s ``w_q, w_k, w_v`` from the seed-004 example, float64."""
    example = load_worked_example()
    head = example.heads[index]
    return tuple(torch.tensor(t.values) for t in (example.x, head.w_q, head.w_k, head.w_v))


# -- 2.1 softmax over the last axis (numpy) ---------------------------------------------
def _softmax_cases() -> list[Case]:
    rng = np.random.default_rng(2)
    example = load_worked_example()
    return [
        Case((example.article["S2"].values.copy(),), label="a (3, 3) score matrix"),  # the article's S^2
        Case((rng.normal(size=(2, 4)),), label="a (2, 4) array"),
        Case((rng.normal(size=(2, 3, 4)),), label="a 3-D (2, 3, 4) array"),
        Case((np.array([[1000.0, 1001.0, 998.0], [-3.0, 0.5, 2.0], [0.0, -1000.0, 1000.0]]),),
             label="large scores [[1000, 1001, 998], [-3, 0.5, 2], [0, -1000, 1000]]"),
    ]


@dataclass
class _SoftmaxExercise(DiagnosingExercise):
    """2.1: an answer normalised along the wrong axis, or over the whole array, is named by what
    its output sums to, however it was shifted (a row-max shift with a column sum matches no
    single Mistake's numbers).

    Precision (the module's rule, for numpy arrays): the cases are float64; a float32 result is
    accepted, a float16 one is named (``half_precision``), and so would be float64 where the
    answer is float32."""

    def check(self, fn) -> Feedback:
        """Grade ``fn``; never raises. The result must be a NumPy array: a torch tensor holding the
        right numbers is named. Precision: float32 where the answer is float64 (these
        cases) is accepted; float64 where it is float32, and float16, are named."""
        return super().check(fn)

    def _precision_slip(self, cases, outputs, expected) -> Feedback | None:
        for case, got, exp in zip(cases, outputs, expected, strict=False):
            if not (isinstance(got, np.ndarray) and isinstance(exp, np.ndarray) and got.shape == exp.shape
                    and got.dtype.kind == "f" and exp.dtype.kind == "f"):
                continue
            label = f" on {case.label}" if case.label else ""
            if got.dtype == np.float16 and exp.dtype != np.float16:
                if np.allclose(got.astype(exp.dtype), exp, rtol=1e-2, atol=1e-3, equal_nan=True):
                    return Feedback(self.title, "mistake",
                                    f"your values are right to about three digits{label}, but the array is "
                                    f"float16 (half precision), which keeps only about three significant "
                                    f"digits; the scores are {exp.dtype} and so is the answer.",
                                    "keep the scores' dtype: drop the .astype(np.float16) and return "
                                    "the result as it comes out.", mistake="half_precision")
            elif got.dtype == np.float64 and exp.dtype == np.float32:
                if self._close(got.astype(np.float32), exp):
                    return Feedback(self.title, "mistake",
                                    f"the values are right{label}, but your array is float64 and the scores "
                                    "and the answer are float32: something widened it on the way.",
                                    "keep the scores' dtype (no .astype(np.float64), no float64 constant "
                                    "array).", mistake="widened_to_float64")
        return None

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        key = self._normalised_wrongly(outputs, expected)
        return None if key is None else self._mistake_feedback(key)

    @staticmethod
    def _normalised_wrongly(outputs, expected) -> str | None:
        arrays = [np.asarray(got, dtype=float) if isinstance(got, np.ndarray) else None for got in outputs]
        if any(a is None or a.shape != np.shape(e) for a, e in zip(arrays, expected, strict=True)):
            return None
        with np.errstate(invalid="ignore"):
            if all(np.isclose(a.sum(), 1.0) for a in arrays):
                return "whole_matrix"
            rows_fine = all(np.allclose(a.sum(axis=-1), 1.0) for a in arrays)
            if not rows_fine and all(any(np.allclose(a.sum(axis=axis), 1.0) for axis in range(a.ndim - 1))
                                     for a in arrays):
                return "wrong_axis"  # every array sums to 1 along some axis, not the last
        return None


SOFTMAX_ROWS = _SoftmaxExercise(
    title="Exercise 2.1: softmax over each row",
    make_cases=_softmax_cases,
    mistakes=[
        Mistake("wrong_axis", "your entries sum to 1 along another axis (the columns, axis 0), not along "
                "each row: the softmax ran over the wrong axis.",
                "each query's row must sum to 1: use axis=-1 (with keepdims=True)."),
        Mistake("no_max_shift",
                "you get NaN on large scores: exp(1000) overflows to inf, and inf / inf is NaN.",
                "subtract each row's maximum before exp; softmax does not change when you "
                "shift a row by a constant."),
        Mistake("axis_1", "right on 2-D arrays, wrong on the 3-D one: you used axis=1, which is "
                "the last axis only when the array has two dims.",
                "use axis=-1 (the last axis, whatever the number of dims)."),
        Mistake("sum_axis_1", "right on 2-D arrays, wrong on the 3-D one: each row's maximum is "
                "right, but the sum you divide by runs along axis=1, which is the last axis only when "
                "the array has two dims.",
                "sum along the last axis too: e.sum(axis=-1, keepdims=True)."),
        Mistake("min_shift", "you get NaN on the row [0, -1000, 1000]: you shifted by the row "
                "minimum, so the largest entry becomes exp(2000), which overflows.",
                "shift by each row's maximum: then every exponent is <= 0 and exp cannot overflow."),
        Mistake("mean_shift", "you get NaN on the row [0, -1000, 1000]: you shifted by the row "
                "mean, which is 0 there, so the largest entry is still exp(1000), which overflows to "
                "inf, and inf / inf is NaN.",
                "shift by each row's maximum: then every exponent is <= 0 and exp cannot overflow."),
        Mistake("global_max_shift", "you get NaN on the row [-3, 0.5, 2]: you shifted by the maximum of "
                "the whole array (1001), not of each row, so that row's exp() underflows to 0 and "
                "you divide 0 by 0.",
                "take the maximum per row: scores.max(axis=-1, keepdims=True)."),
        Mistake("whole_matrix", "the whole array sums to 1, not each row: you divided by the "
                "sum of every entry.", "sum along the last axis only: e.sum(axis=-1, keepdims=True)."),
        Mistake("no_exp", "you divided the scores by their row sum without exponentiating.",
                "softmax is exp(s) / sum(exp(s)); the exp makes every weight positive."),
        RaisingMistake("no_keepdims",
                       "scores.max(axis=-1) (or e.sum(axis=-1)) without keepdims=True drops the "
                       "last axis, so the subtraction or division lines up with the wrong axis: "
                       "wrong numbers on a square array, a broadcasting error otherwise.",
                       "keep the reduced axis: scores.max(axis=-1, keepdims=True) and "
                       "e.sum(axis=-1, keepdims=True), shape (..., 1)."),
        Mistake("returned_tensor",
                "the numbers are right, but you returned a torch tensor: this exercise is in "
                "numpy and must return a numpy array (the lesson's numpy code uses it).",
                "use np.exp, .max(axis=-1, keepdims=True) and .sum(...) on the array; no torch."),
        Mistake("returned_list",
                "the numbers are right, but you returned a Python list: return the numpy array "
                "itself (the lesson's numpy code uses it as an array).",
                "drop the .tolist(): exps / exps.sum(axis=-1, keepdims=True) is already an array."),
    ],
    hint="subtract each row's maximum (keepdims=True) before np.exp, then divide by the row sums.",
    numpy_output=True,
)
check_softmax_rows = SOFTMAX_ROWS.check


# -- 2.2-2.4: torch exercises ----------------------------------------------------------
_RETURNED_NUMPY = _core._RETURNED_NUMPY[0]  # the message every tensor exercise gives; 2.2-2.4's hint
_RETURNED_NUMPY_HINT = ("stay in torch: use @, .transpose(-2, -1) and torch.softmax on the tensors you "
                        "are given, and drop the .numpy() / np.* calls.")


@dataclass
class _TorchExercise(DiagnosingExercise):
    """2.2-2.4: the answer must be a torch tensor. A NumPy array is named (``returned_numpy``)
    even when its numbers are right, and also when it came back on one case while another case
    raised (numpy code copied from the lesson's section 1 often works on one sequence and fails
    on the batch). Precision follows the module's rule (the core's ``_precision_slip``)."""

    def check(self, fn) -> Feedback:
        """Grade ``fn``; never raises. The result must be a torch tensor: a NumPy array is named,
        even with the right numbers. Precision: float32 where the answer is float64 is accepted;
        float64 where it is float32, and half precision, are named."""
        feedback = super().check(fn)
        if feedback.status != "error" or feedback.stopped:
            return feedback
        try:
            named = self._numpy_then_raised(fn)
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            named = None
        return feedback if named is None else named

    def _numpy_then_raised(self, fn) -> Feedback | None:
        """``returned_numpy`` when ``fn`` returned an array on a case before one it raised on."""
        gave_array = False
        for case in self.cases():
            args, kwargs = case.fresh()
            try:
                with warnings.catch_warnings(), _Deadline():
                    warnings.simplefilter("ignore")
                    got = fn(*args, **kwargs)
            except BaseException as exc:  # noqa: BLE001 - the raise the check already reported
                if not gave_array:
                    return None
                where = f" on {case.label}" if case.label else ""
                named = self._mistake_feedback("returned_numpy")
                named.message += f" (Your function then raised {type(exc).__name__}{where}.)"
                return named
            if not _plain(got, whole=True):  # an object of the answer's own class: nothing to name
                return None
            gave_array = gave_array or isinstance(got, np.ndarray)
        return None


# -- 2.2 attention weights from q and k -------------------------------------------------
_K_DOT_T = ("k.T reverses ALL the dims of k, so on a batch (B, Tk, d_k) becomes (d_k, Tk, B) and "
            "the product fails (on one sequence it works, which hides the bug).")
_K_DOT_T_HINT = "swap only the last two dims: k.transpose(-2, -1) (or k.mT)."


def _qk_cases() -> list[Case]:
    x, w_q, w_k, _ = _worked_example_head(1)
    g = torch.Generator().manual_seed(2)
    return [
        Case((x @ w_q, x @ w_k), label="q, k (3, 2)"),  # head 2 of the worked example
        Case((torch.randn(3, 4, generator=g), torch.randn(5, 4, generator=g)),
             label="q (3, 4), k (5, 4)"),
        Case((torch.randn(2, 4, 8, generator=g), torch.randn(2, 6, 8, generator=g)),
             label="batched q (2, 4, 8), k (2, 6, 8)"),
    ]


@dataclass
class _WeightsExercise(_TorchExercise):
    """2.2: weights divided by sqrt(d_k) after the softmax are named by what each row sums to,
    1/sqrt(d_k), whatever scores went into the softmax (scaled or not); the idea of lesson 04's
    ``scaled_after_softmax``."""

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        for case, got, exp in zip(cases, outputs, expected, strict=True):
            q = case.args[0] if case.args else None
            if not (isinstance(got, Tensor) and isinstance(q, Tensor) and got.dtype.is_floating_point
                    and tuple(got.shape) == tuple(np.shape(exp)) and q.shape[-1] > 1):
                return None
            sums = got.detach().to(torch.float64).sum(-1)
            if not bool(torch.isfinite(sums).all()) or not torch.allclose(
                    sums, torch.full_like(sums, 1 / math.sqrt(q.shape[-1])), atol=1e-4):
                return None
        return self._mistake_feedback("scaled_after_softmax")


ATTENTION_WEIGHTS = _WeightsExercise(
    title="Exercise 2.2: attention weights",
    make_cases=_qk_cases,
    mistakes=[
        Mistake("wrong_axis", "each column of your weights sums to 1: the softmax ran over the "
                "queries (dim=-2) instead of the keys.",
                "every query distributes its attention over the keys: torch.softmax(scores, dim=-1)."),
        Mistake("missing_scale", "your weights are too peaked: the scores were not divided by sqrt(d_k).",
                "divide the scores by the square root of d_k, the size of q's last axis, before the "
                "softmax."),
        Mistake("divided_by_dk", "your weights are too flat: you divided the scores by d_k "
                "instead of sqrt(d_k).", "use math.sqrt(d_k), the standard deviation of a dot "
                "product of d_k random unit-variance entries."),
        Mistake("scaled_by_num_keys", "you scaled by sqrt of the number of keys (k.shape[-2]) "
                "instead of sqrt(d_k) (the last dim).",
                "d_k is the width of each query and key vector: q.shape[-1]."),
        Mistake("scaled_by_num_queries", "you scaled by sqrt of the number of queries (q.shape[-2], "
                "the tokens) instead of sqrt(d_k), the width of each query and key vector.",
                "d_k is the last dim of q and k: q.shape[-1]."),
        Mistake("half_power_precedence", "your scores were divided by 2 * d_k, not by sqrt(d_k): ** binds "
                "tighter than /, so `d_k ** 1/2` is `(d_k ** 1) / 2`, and `scores / d_k ** 1/2` divides "
                "by d_k, then by 2 (`scores * d_k ** -1/2` does the same).",
                "a square root as a power needs brackets around the exponent: d_k ** (1/2), or "
                "d_k ** 0.5, or math.sqrt(d_k)."),
        Mistake("half_power_precedence_bracketed", "you divided the scores by d_k / 2, not by sqrt(d_k): "
                "** binds tighter than /, so Python reads `(d_k ** 1/2)` as `(d_k ** 1) / 2`. "
                "The two agree only when d_k = 4.",
                "a square root as a power needs brackets around the exponent: d_k ** (1/2), or "
                "d_k ** 0.5, or math.sqrt(d_k)."),
        Mistake("scaled_after_softmax", "each row of your weights sums to 1/sqrt(d_k), not 1: you divided "
                "by sqrt(d_k) after the softmax. The scaling belongs to the scores, before the softmax, "
                "which then makes every row sum to 1.",
                "scale first, softmax last: nothing should touch the weights after the softmax."),
        Mistake("returned_numpy", _RETURNED_NUMPY, _RETURNED_NUMPY_HINT),
        Mistake("softmax_dim0", "your softmax ran over dim=0: for one sequence (Tq, Tk) that is the "
                "queries (each column sums to 1), and for a batch it is the batch; never the keys.",
                "count from the end: torch.softmax(scores, dim=-1) is over the keys for any "
                "number of leading dims."),
        Mistake("softmax_dim1", "right for one sequence, wrong on the batch: dim=1 is the last dim "
                "only for 2-D scores; for (B, Tq, Tk) it is the queries.",
                "count from the end: torch.softmax(scores, dim=-1)."),
        Mistake("no_softmax", "you returned the scaled scores: without a softmax they are not "
                "weights (some are negative, and rows do not sum to 1).",
                "finish with torch.softmax(scores, dim=-1)."),
        Mistake("d_k_from_dim_1", "right for one sequence, wrong on the batch: you took d_k from "
                "q.shape[1], which is the number of queries when q is (B, T, d_k).",
                "count from the end: d_k = q.shape[-1]."),
        Mistake("keys_times_queries", "your matrix is k @ q^T: row i holds key i's scores against "
                "every query, not query i's scores against every key.",
                "row i must be query i: q @ k.transpose(-2, -1)."),
        RaisingMistake("k_dot_T", _K_DOT_T, _K_DOT_T_HINT),
    ],
    hint="multiply q by k with its last two dims swapped (k.transpose(-2, -1), so batches work), "
    "divide by sqrt(d_k) = sqrt(q.shape[-1]), then softmax over the keys (the last dim).",
)
check_attention_weights = ATTENTION_WEIGHTS.check


# -- 2.3 causal attention weights -------------------------------------------------------
def _causal_cases() -> list[Case]:
    g = torch.Generator().manual_seed(3)
    return [
        Case((torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)), label="q, k (4, 3)"),
        Case((torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)),
             label="batched q, k (2, 5, 4)"),
    ]


@dataclass
class _CausalExercise(_TorchExercise):
    """2.3: an additive mask with the wrong sign is named by where the weight sits (on the
    future keys), whatever large number was added: +1e9 and +1e4 round differently. Result type
    and precision as in every torch exercise here (:class:`_TorchExercise`)."""

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        if self._future_wins(outputs, expected):
            return self._mistake_feedback("additive_mask_wrong_sign")
        return None

    @staticmethod
    def _future_wins(outputs, expected) -> bool:
        """True when, in every output, each row but the last puts (almost) all of its weight on
        the keys after the query and the rows sum to 1."""
        for got, exp in zip(outputs, expected, strict=True):
            if not isinstance(got, Tensor) or tuple(got.shape) != tuple(np.shape(exp)) or got.shape[-1] < 2:
                return False
            weights = got.detach().to(torch.float64)
            if not bool(torch.isfinite(weights).all()) or not torch.allclose(
                    weights.sum(-1), torch.ones((), dtype=torch.float64), atol=1e-4):
                return False
            T = weights.shape[-1]
            past_and_self = torch.ones(T, T, dtype=torch.bool).tril()[:-1]  # rows 0 .. T-2
            if not bool((weights[..., :-1, :] * past_and_self).sum(-1).lt(1e-3).all()):
                return False
        return True


CAUSAL_ATTENTION_WEIGHTS = _CausalExercise(
    title="Exercise 2.3: causal attention weights",
    make_cases=_causal_cases,
    mistakes=[
        Mistake("mask_after_softmax", "your rows do not sum to 1: you zeroed the future after the "
                "softmax, so the weights it gave to the future are simply lost.",
                "mask the scores (set blocked ones to -inf) before the softmax."),
        Mistake("future_visible", "each query sees the future and not the past: the mask is the "
                "upper triangle instead of the lower one.",
                "query i may attend to key j when j <= i: that is the lower triangle (tril), not the "
                "upper one (triu)."),
        Mistake("masked_with_zero", "the future still gets weight: you set blocked scores to 0, "
                "and exp(0) = 1 is not 0.", "fill blocked scores with float('-inf'); exp(-inf) = 0."),
        Mistake("diagonal_blocked", "the first row is NaN: your mask also blocks each token from "
                "itself, so token 0 has nothing to attend to.",
                "keep the diagonal: tril() (not tril(-1))."),
        Mistake("diagonal_blocked_nan_zeroed", "your first row is all zeros and every other token is hidden "
                "from itself: your mask also blocks the diagonal, as tril(diagonal=-1) (or "
                "triu(diagonal=0) as the blocked part) does, and torch.nan_to_num turned token 0's NaN row "
                "into zeros. Query i may attend to keys 0 .. i, its own token included, and each row of "
                "weights sums to 1.",
                "keep the diagonal: tril() (diagonal=0), or block with triu(diagonal=1); then no row is NaN "
                "and nothing needs patching."),
        Mistake("diagonal_hidden", "each token (but the first) is hidden from itself: your mask keeps "
                "only the keys before the query, as tril(diagonal=-1) does, and the first row (NaN) "
                "was patched by letting token 0 see every key. Query i may attend to keys 0 .. i, "
                "its own token included.",
                "keep the diagonal: tril() (diagonal=0), which also leaves token 0 its own key."),
        Mistake("diagonal_hidden_first_key_kept", "each token but the first is hidden from itself: "
                "your mask keeps only the keys before the query, as tril(diagonal=-1) does, and the "
                "first row (NaN) was patched by letting token 0 see itself. Query i may attend to keys "
                "0 .. i, its own token included, so the diagonal belongs in the mask for every token.",
                "keep the diagonal: tril() (diagonal=0); then token 0 needs no patch."),
        Mistake("sees_next_key", "each query also sees the next key (query i attends to key i + 1): your "
                "mask keeps one diagonal too many above the main one, as tril(diagonal=1) does, so "
                "every token but the last peeks one step into the future.",
                "query i may attend to keys 0 .. i and no further: the main diagonal is the last one "
                "the mask keeps (tril's default, diagonal=0)."),
        Mistake("inverted_mask", "you blocked the allowed keys and kept the blocked ones (the last row "
                "is NaN): masked_fill(mask, ...) fills where the mask is True, and in this course True "
                "means 'may attend'. (nn.MultiheadAttention uses the opposite convention, "
                "True = blocked.)",
                "masked_fill fills where its mask is True, so give it the keys to block: the "
                "opposite (~) of your 'may attend' mask."),
        Mistake("missing_scale", "the mask is right, but your weights are too peaked: the scores were "
                "not divided by sqrt(d_k).",
                "divide the scores by the square root of d_k (q's last axis), then mask, then take the "
                "softmax."),
        Mistake("mask_not_applied", "your weights are those of attention without any mask: every "
                "query sees the future. (One way to get there: masked_fill returns a new tensor "
                "and leaves scores unchanged unless you keep its result.)",
                "masked_fill gives back a new tensor and leaves scores as they were: keep what it "
                "returns, and take the softmax of that."),
        Mistake("softmax_over_queries", "each column of your weights sums to 1: the softmax ran over "
                "the queries (dim=-2) instead of the keys.",
                "torch.softmax(scores, dim=-1), after the mask."),
        Mistake("keys_times_queries", "your scores are k @ q^T (row i is key i, not query i), so the "
                "mask blocks the wrong pairs.",
                "scores = q @ k.transpose(-2, -1) / sqrt(d_k), then mask."),
        Mistake("inf_after_softmax", "you filled the future with -inf *after* the softmax: those "
                "weights are -inf and the rows do not sum to 1.",
                "fill the scores with -inf before the softmax: exp(-inf) = 0 turns them into 0 weights."),
        Mistake("implicit_softmax_dim", "your weights sum to 1 over the axis PyTorch picks when a softmax "
                "names no dim= (dim=1 on 2-D input, dim=0, the batch, on 3-D; it warns that this is "
                "deprecated), not over the keys.",
                "always name the axis: torch.softmax(scores, dim=-1)."),
        Mistake("additive_mask_wrong_sign", "almost all of each row's weight sits on the future keys "
                "(j > i), the very ones the mask should block: your additive mask has the wrong sign. "
                "Adding a large positive number to the blocked scores makes them win the softmax; "
                "only a large negative one (or -inf) makes their weight vanish.",
                "the blocked scores (key j > query i) must go down, not up: add -inf there (or a "
                "large negative number), never a positive one."),
        RaisingMistake("k_dot_T", _K_DOT_T, _K_DOT_T_HINT),
        RaisingMistake("batch_dim_as_T",
                       "on the batch (2, 5, 4) your mask does not fit the scores: T = q.shape[0] is "
                       "the batch size there, not the number of tokens.",
                       "count from the end: T = q.shape[-2], so the mask is (T, T) for any number "
                       "of leading dims.", loose=True),
        Mistake("returned_numpy", _RETURNED_NUMPY, _RETURNED_NUMPY_HINT),
    ],
    hint="build a lower-triangular boolean (T, T) mask (True = may attend), fill the blocked "
    "scores with float('-inf'), and only then take the softmax over the last dim.",
)
check_causal_attention_weights = CAUSAL_ATTENTION_WEIGHTS.check


# -- 2.4 single-head attention, end to end ----------------------------------------------
def _single_head_cases() -> list[Case]:
    # In every case d_v == T, so that `v @ weights` runs and the check can name it.
    x, w_q, w_k, w_v = _worked_example_head(0)
    g = torch.Generator().manual_seed(4)
    weights = [torch.randn(6, d, generator=g) / math.sqrt(6) for d in (3, 3, 4)]
    return [
        Case((x, w_q, w_k, w_v), label="x (3, 6), d_k = 2, d_v = 3"),  # head 1 of the worked example
        Case((torch.randn(2, 4, 6, generator=g), *weights), label="batched x (2, 4, 6), d_k = 3, d_v = 4"),
    ]


SINGLE_HEAD_ATTENTION = _TorchExercise(
    title="Exercise 2.4: single-head attention",
    make_cases=_single_head_cases,
    mistakes=[
        Mistake("keys_as_values", "you averaged the keys (weights @ K), not the values.",
                "keys decide *where* to look; the output mixes the values: weights @ (x @ w_v)."),
        Mistake("returned_weights", "you returned the attention weights (T x T), not the output: "
                "the weights still have to average the values.",
                "finish with weights @ v, where v = x @ w_v."),
        Mistake("no_softmax", "you multiplied the values by the scaled scores: without a softmax "
                "they are not weights, and the output is not an average of the values.",
                "weights = torch.softmax(scores, dim=-1), then weights @ v."),
        Mistake("keys_from_w_q", "your keys were made with w_q: every score compares a query with "
                "another query.",
                "k = x @ w_k; only the queries use w_q."),
        Mistake("unprojected_values", "you averaged the raw inputs x instead of the values x @ w_v.",
                "project the values first: v = x @ w_v."),
        Mistake("transposed_weights", "you used the transposed weights (weights^T @ V): each output "
                "row then mixes by a column of the weights, which need not sum to 1.",
                "row i of the output is sum_j weights[i, j] * V[j]: weights @ V."),
        Mistake("values_first", "you multiplied in the wrong order (V @ weights); it only ran because "
                "d_v happens to equal T here.", "the weights come first: weights @ V, (T, T) @ (T, d_v)."),
        Mistake("missing_scale", "your output matches attention without the 1/sqrt(d_k) scaling.",
                "divide the scores by math.sqrt(d_k) before the softmax."),
        Mistake("scaled_by_d_model", "you divided the scores by sqrt(d_model) (the width of x) instead of "
                "sqrt(d_k) (the width of each query and key).",
                "d_k = w_q.shape[-1] (or q.shape[-1] after the projection), not x.shape[-1]."),
        Mistake("softmax_dim0", "your softmax ran over dim=0 (the queries for one sentence, the batch for "
                "a batch), not over the keys.",
                "each query's weights must sum to 1 over the keys: torch.softmax(scores, dim=-1)."),
        Mistake("causal_mask_applied", "your output matches *causal* attention: this exercise asks for no "
                "mask, so every query may attend to every key.",
                "drop the mask: softmax(q k^T / sqrt(d_k)) over all keys."),
        Mistake("softmax_dim1", "right for one sequence, wrong on the batch: dim=1 is the keys only "
                "for 2-D scores; for (B, T, T) it is the queries.",
                "count from the end: torch.softmax(scores, dim=-1)."),
        Mistake("scaled_by_d_v", "you divided the scores by sqrt(d_v), the width of the values, or "
                "by sqrt(T), the number of tokens (the two are equal in these test cases), instead "
                "of sqrt(d_k), the width of the queries and keys that were multiplied.",
                "d_k = w_q.shape[-1]; d_v only sets the width of the output."),
        Mistake("typed_in_scale", "you divided by sqrt(2), the worked example's d_k, typed in: on the "
                "batched case d_k is 3.", "take d_k from the data: q.shape[-1] (or w_q.shape[-1])."),
        Mistake("divided_by_dk", "your weights are too flat: you divided the scores by d_k instead of "
                "sqrt(d_k).", "divide by math.sqrt(q.shape[-1])."),
        RaisingMistake("k_dot_T", _K_DOT_T, _K_DOT_T_HINT),
        RaisingMistake("linear_layout",
                       "you wrote x @ w.T, lesson 01's habit: there the weights were in "
                       "nn.Linear's (d_out, d_in) layout. Here w_q is (d_model, d_k), rows = "
                       "input features, so the projection is x @ w_q with no transpose.",
                       "q, k, v = x @ w_q, x @ w_k, x @ w_v."),
        Mistake("returned_numpy", _RETURNED_NUMPY, _RETURNED_NUMPY_HINT),
    ],
    hint="project x three times (queries, keys, values), compute the weights as in Exercise 2.2, "
    "then average the values with them.",
)
check_single_head_attention = SINGLE_HEAD_ATTENTION.check
