"""Checks for lesson 03 (the dimension walkthrough).

* 3.1 ``split_heads(x, num_heads)``: ``(..., T, d)`` -> ``(..., h, T, dk)``, any leading axes
* 3.2 ``merge_heads(heads)``: ``(B, h, T, dk)`` -> ``(B, T, d)``
* 3.3 ``parameter_count(d_model, num_heads, bias)``: parameters of multi-head attention
* 3.4 ``score_macs(seq_len, d_model, num_heads)``: multiply-adds of Q K^T, all heads
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from .cases import seen_or_unseen
from .core import Case, Exercise, Feedback, Mistake, _changes_its_input, _Deadline, _plain
from .raising import (  # names answers that raise
    DiagnosesRaisingAnswers,
    DiagnosingExercise,
    RaisingMistake,
    requested_shape,
)

__all__ = [
    "SPLIT_HEADS",
    "MERGE_HEADS",
    "PARAMETER_COUNT",
    "SCORE_MACS",
    "check_split_heads",
    "check_merge_heads",
    "check_parameter_count",
    "check_score_macs",
]


def _numbered(*shape: int) -> Tensor:
    """0, 1, 2, ... laid out in ``shape``: every entry says where it came from."""
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float32).reshape(shape)


# --- 3.1 split heads ---------------------------------------------------------------
def _split_cases() -> list[Case]:
    # sizes: the seen ones, or others for the grader's unseen cases (cases.seen_or_unseen)
    a, h_a = seen_or_unseen(((2, 5, 12), 3), ((3, 4, 10), 5), ((2, 6, 12), 4), ((1, 7, 18), 6))
    b, h_b = seen_or_unseen(((1, 3, 8), 2), ((2, 2, 9), 3), ((1, 5, 6), 2), ((3, 1, 8), 4))
    c, h_c = seen_or_unseen(((3, 4, 30), 5), ((2, 5, 24), 6), ((4, 3, 21), 7), ((2, 2, 20), 4))
    d, h_d = seen_or_unseen(((5, 12), 3), ((6, 8), 4), ((4, 15), 5), ((7, 6), 2))
    e, h_e = seen_or_unseen(((2, 3, 4, 8), 2), ((3, 2, 3, 6), 3), ((2, 2, 5, 12), 4), ((1, 3, 2, 10), 5))
    return [
        Case((_numbered(*a), h_a), label=f"x of shape {a}, h = {h_a}"),
        Case((_numbered(*b), h_b), label=f"x of shape {b}, h = {h_b}"),
        Case((torch.randn(*c, generator=torch.Generator().manual_seed(3)), h_c),
             label=f"random x of shape {c}, h = {h_c}"),
        Case((_numbered(*d), h_d), label=f"one sentence without a batch axis, x of shape {d}, h = {h_d}"),
        Case((_numbered(*e), h_e),
             label=f"two leading axes, x of shape {e} = (documents, sentences, T, d), h = {h_e}"),
    ]


class _SplitExercise(DiagnosingExercise):
    """Exercise 3.1: a wrong answer that also changed ``x`` in place is told so: its view of x
    shares x's memory, so an edit of x shows in the result."""

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.status != "wrong" or feedback.mistake is not None or feedback.stopped:
            return feedback
        try:
            edited = _changes_its_input(fn, self.cases())
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            edited = False
        return self._mistake_feedback("edited_x_in_place") if edited else feedback


SPLIT_HEADS = _SplitExercise(
    title="Exercise 3.1: split into heads",
    make_cases=_split_cases,
    mistakes=[
        Mistake("view_without_transpose",
                "the shape (..., h, T, dk) is right but the numbers are not: x.view(..., h, T, dk) "
                "cuts each sequence's memory into h blocks of T*dk numbers, so one 'head' "
                "mixes features of different tokens.",
                "view as (..., T, h, dk) first (this splits each token's d features), then "
                "swap the T and h axes with .transpose(-3, -2)."),
        Mistake("missing_transpose",
                "you returned (..., T, h, dk): the features are split correctly, but the head "
                "axis is still behind the token axis.",
                "add .transpose(-3, -2) so that the result is (..., h, T, dk)."),
        Mistake("transposed_wrong_dims",
                "you transposed the last two axes and got (..., T, dk, h): the axes to swap are "
                "the token axis (third from the end) and the head axis (second from the end).",
                "use .transpose(-3, -2), not .transpose(-2, -1)."),
        Mistake("transpose_before_split",
                "the shape is right but the values are not: you swapped the token and feature "
                "axes, (..., T, d) to (..., d, T), before reshaping, which interleaves tokens and "
                "features.",
                "split the feature axis first with .view(..., T, h, dk), then .transpose(-3, -2)."),
        Mistake("interleaved",
                "your head i takes columns i, i+h, i+2h, ...: the heads are interleaved instead of "
                "being consecutive blocks of d_k columns.",
                "view(..., T, h, dk) puts head i in columns i*dk to (i+1)*dk - 1, which is where the "
                "stacked W_Q puts head i's rows."),
        Mistake("heads_and_width_swapped",
                "you viewed as (..., T, dk, h) instead of (..., T, h, dk), so after the transpose "
                "you have (..., dk, T, h): dk 'heads' of width h. The head count comes first, the "
                "width of each head last.",
                "x.view(*x.shape[:-1], num_heads, d // num_heads), then .transpose(-3, -2)."),
        Mistake("axes_counted_from_the_front",
                "right for a batch (B, T, d), wrong for the other shapes: the axes your split swaps "
                "are counted from the front (as in .transpose(1, 2)), so on one sentence (T, h, dk) "
                "h and dk are swapped, and with two leading axes the second leading axis and T. "
                "The head and token axes are fixed only when counted from the end.",
                "after the view to (..., T, h, dk), swap the third and second axes from the end: "
                ".transpose(-3, -2)."),
        RaisingMistake("batch_axis_assumed",
                       "your function assumes exactly one axis before T, as in B, T, d = x.shape, so "
                       "it fails on one sentence (T, d) and on input with two leading axes.",
                       "keep whatever comes before the last axis without naming it (x.shape[:-1] is "
                       "all of it, however many axes there are), and count the axes you swap from "
                       "the end, as the exercise's shape (..., T, d) does.",
                       pattern="values to unpack"),
        Mistake("edited_x_in_place",
                "your result is wrong, and your function also changed x, the tensor it was given, in "
                "place (a method whose name ends in _, +=, or a slice assignment). view and transpose "
                "return views that share x's memory, so an edit of x shows in your result too, and "
                "the caller's x is changed as well.",
                "leave x as it is: splitting into heads needs no copy and no in-place step."),
        RaisingMistake("float_head_width",
                       "a size in your code is a float: d / num_heads gives 4.0, not 4, and view, "
                       "reshape, split and Python's slices take whole numbers (ints) only.",
                       "divide with //: d // num_heads stays an int when d splits evenly into heads.",
                       pattern="float"),
        RaisingMistake("permute_lists_four_axes",
                       "your .permute lists every axis by number, so it fits only tensors with exactly "
                       "that many axes: permute(0, 2, 1, 3), for example, works for one batch axis "
                       "(B, T, h, dk) and fails on one sentence (T, h, dk) and on two leading axes.",
                       "swap just the token and head axes, counting them from the end (transpose and "
                       "movedim take negative axes), and leave the leading axes alone.",
                       pattern="ordering of dimensions"),
        RaisingMistake("einsum_letters_for_every_axis",
                       "your einsum equation gives every axis its own letter, as in 'bthk->bhtk', so it "
                       "fits only input with exactly one axis before T: one sentence (T, h, dk) has one "
                       "axis fewer, and two leading axes one more.",
                       "einsum's ... stands for any number of leading axes: keep it on both sides of "
                       "the arrow and name only the axes you move.",
                       pattern="subscripts in the equation"),
    ],
    hint="first cut each token's d features into h pieces of width d // h (a view with shape "
         "(..., T, h, dk), keeping every axis before the last), then put the head axis in front "
         "of the token axis, counting axes from the end.",
)
check_split_heads = SPLIT_HEADS.check


# --- 3.2 merge heads ---------------------------------------------------------------
def _merge_cases() -> list[Case]:
    a = seen_or_unseen((2, 3, 5, 4), (3, 2, 4, 5), (2, 4, 3, 3), (1, 5, 2, 6))
    b = seen_or_unseen((1, 2, 3, 4), (2, 3, 2, 2), (1, 4, 3, 2), (2, 2, 4, 3))
    c = seen_or_unseen((2, 4, 6, 3), (3, 3, 5, 4), (1, 6, 4, 2), (2, 5, 3, 5))
    return [
        Case((_numbered(*a),), label=f"heads of shape {a}"),
        Case((_numbered(*b),), label=f"heads of shape {b}"),
        Case((torch.randn(*c, generator=torch.Generator().manual_seed(4)),),
             label=f"random heads of shape {c}"),
    ]



class _MergeExercise(DiagnosesRaisingAnswers):
    """Exercise 3.2: a ``.view`` that PyTorch refuses after the transpose gets its own message,
    and an answer that changes ``heads`` in place is told so in this exercise's terms."""

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.mistake != "edited_input_in_place":
            return feedback
        try:
            sure = _changes_its_input(fn, self.cases())
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            sure = False
        if not sure:
            return feedback
        return Feedback(self.title, "mistake",
                        "the merged values are right, but your function changed `heads`, the tensor it "
                        "was given, in place (transpose_, a slice assignment, or another method whose "
                        "name ends in _): whoever called merge_heads now finds their (B, h, T, dk) "
                        "tensor changed too.",
                        "use operations that return a new tensor (transpose, not transpose_), or work "
                        "on a copy, e.g. heads = heads.clone().", mistake=feedback.mistake)

    @staticmethod
    def _key_for(failed: tuple[str, list] | None) -> str | None:
        if (failed is not None and failed[0] == "view" and failed[1]
                and isinstance(failed[1][0], tuple) and len(failed[1][0]) == 4
                and len(requested_shape(failed[1])) == 3):
            return "view_without_contiguous"
        return None


MERGE_HEADS = _MergeExercise(
    title="Exercise 3.2: merge the heads",
    make_cases=_merge_cases,
    mistakes=[
        Mistake("view_without_transpose_back",
                "the shape (B, T, d) is right but the values are not: reshaping (B, h, T, dk) "
                "directly puts head 0's tokens side by side, so a 'token' row holds pieces of "
                "several tokens from the same head.",
                "move the head axis back next to dk first: heads.transpose(1, 2), then "
                ".contiguous().view(B, T, h * dk)."),
        Mistake("heads_interleaved",
                "the shape is right but the heads are interleaved: feature j of every head sits "
                "together instead of head 0's dk features, then head 1's, and so on.",
                "concatenation means the head axis is *outside* dk: permute to (B, T, h, dk), "
                "not (B, T, dk, h)."),
        Mistake("summed_heads",
                "you added the heads together and got (B, T, dk): multi-head attention "
                "concatenates them, giving (B, T, h * dk) = (B, T, d).",
                "keep every head's dk features, side by side: transpose(1, 2), then view."),
        Mistake("averaged_heads",
                "you averaged the heads and got (B, T, dk): multi-head attention keeps every head's "
                "features, side by side, giving (B, T, h * dk) = (B, T, d). Averaging would throw "
                "away what makes the heads different before W_O can combine them.",
                "keep every head's dk features, side by side: transpose(1, 2), then view."),
        Mistake("not_flattened",
                "you returned (B, T, h, dk): the order is right, but the head axis and the dk axis "
                "still have to be joined into one axis of h * dk features per token.",
                "finish with .contiguous().view(B, T, h * dk) (or .reshape)."),
        Mistake("concatenated_along_tokens",
                "you concatenated the heads along the token axis and got (B, h * T, dk): h * T "
                "'tokens' of width dk. Concat joins each token's head outputs along the FEATURE "
                "axis, so the result keeps T tokens of width h * dk.",
                "torch.cat(..., dim=-1) on the (B, T, dk) pieces, or transpose(1, 2) then view."),
        Mistake("last_two_axes_swapped",
                "the shape is right but the values are not: you swapped the last two axes (T and "
                "dk) before reshaping. To put each token's heads side by side, the head axis must "
                "move next to dk, which swaps axes 1 and 2 (heads and tokens), not the last two.",
                "transpose the head and token axes, (B, h, T, dk) -> (B, T, h, dk), then flatten "
                "the last two."),
        Mistake("averaged_then_tiled",
                "you averaged the heads and repeated the average h times to reach width d: the "
                "shape is right, but every head's block now holds the same numbers. Multi-head "
                "attention keeps each head's own output, side by side, for W_O to combine.",
                "no mean and no repeat: bring the token axis in front of the head axis, then flatten "
                "(h, dk) into h * dk."),
        Mistake("summed_then_tiled",
                "you added the heads together and repeated the sum h times to reach width d: the "
                "shape is right, but every head's block now holds the same numbers, the sum of all "
                "heads. Multi-head attention keeps each head's own output, side by side, for W_O to "
                "combine.",
                "no sum and no repeat: bring the token axis in front of the head axis, then flatten "
                "(h, dk) into h * dk."),
        Mistake("view_without_contiguous",
                "your .view raised an error: after .transpose(1, 2) the tensor is not contiguous "
                "in memory, and .view cannot copy. The order of your steps is right.",
                "call .contiguous() before .view(B, T, h * dk), or use .reshape, which copies when "
                "it has to."),
    ],
    hint="undo split_heads in reverse: bring the token axis back in front of the head axis, "
         "then flatten (h, dk) into one axis of h * dk. If .view complains about the tensor's "
         "size and stride, call .contiguous() first.",
)
check_merge_heads = MERGE_HEADS.check


# --- 3.3 parameter count -----------------------------------------------------------
def _random_shape_case(seed: int, *, with_bias: bool = False, with_length: bool = False) -> Case:
    """One more case drawn from a seeded generator (autograde draws it anew, from a secret salt)."""
    g = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    h = draw(2, 9)
    d_model = h * draw(2, 17)
    if with_length:
        T = draw(2, 40)
        return Case((T, d_model, h), label=f"T = {T}, d_model = {d_model}, h = {h} (drawn at random)")
    bias = bool(draw(0, 2)) if with_bias else False
    return Case((d_model, h), {"bias": bias},
                label=f"d_model = {d_model}, h = {h}, bias = {bias} (drawn at random)")


def _params_cases() -> list[Case]:
    return [
        Case((512, 8), {"bias": True}, label="d_model = 512, h = 8, bias = True"),
        Case((64, 8), {"bias": False}, label="d_model = 64, h = 8, bias = False"),
        Case((64, 8), {"bias": True}, label="d_model = 64, h = 8, bias = True"),
        Case((12, 3), {"bias": True}, label="d_model = 12, h = 3, bias = True"),
        Case((32, 1), {"bias": False}, label="d_model = 32, h = 1, bias = False"),
        _random_shape_case(31, with_bias=True),
    ]


# The weights (bias=False) of the slips that are about the weights, whatever the learner did
# with the biases: (d_model, h) -> count. h = 1 makes each of them right, as it should.
_WEIGHT_SLIPS = {
    "only_three_matrices": lambda d, h: 3 * d * d,
    "w_o_per_head": lambda d, h: (3 + h) * d * d,
    "full_width_heads": lambda d, h: (3 * h + 1) * d * d,
    "whole_layer_per_head": lambda d, h: 4 * h * d * d,
    "one_head_projections": lambda d, h: 3 * d * (d // h) + d * d,
    # (d_k, d_k) squares for all four matrices of every head. (Squares for W_Q, W_K, W_V with one
    # full W_O give 3 * h * d_k^2 + d^2 = 3 * d * d_k + d^2, the count of one_head_projections:
    # the two cannot be told apart by the number.)
    "square_head_matrices": lambda d, h: 4 * h * (d // h) ** 2,
}


class _CountExercise(Exercise):
    """3.3 and 3.4 ask for a count, an int: a float holding the right number (d_k taken as
    d_model / num_heads) compares equal to it, so it is named here instead of passing (and a
    tensor, by core's rule for int answers: :meth:`~.core.Exercise._returned_tensor`)."""

    int_answer = "a count"

    def _grade(self, cases, outputs, expected) -> Feedback:
        feedback = super()._grade(cases, outputs, expected)
        if feedback.passed and any(isinstance(o, (float, np.floating)) for o in outputs):
            return self._mistake_feedback("float_count")
        return feedback


def _float_count() -> Mistake:
    """A fresh Mistake for each exercise (solutions/ attaches each its own implementation)."""
    return Mistake(
        "float_count",
        "your number is right, but it is a float, not an int: a / somewhere made one (d_model / "
        "num_heads gives 64.0, not 64), and everything multiplied by it became a float too. A count "
        "is a whole number; a float prints with a trailing .0 and loses exactness above 2**53.",
        "divide with // where a size splits evenly (d_k = d_model // num_heads), so every step "
        "stays an int.")


def _same_count(got, expected: int) -> bool:
    return isinstance(got, (int, float)) and not isinstance(got, bool) and got == expected


class _ParameterCountExercise(_CountExercise):
    """Exercise 3.3: a slip in the weights is named whether the biases were counted right or
    not (the stored slips count their biases the same wrong way as their weights)."""

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.status != "wrong" or feedback.mistake is not None:
            return feedback
        try:
            key = self._weight_slip(fn)
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            key = None
        if key is None:
            return feedback
        m = next(m for m in self.mistakes if m.key == key)
        return Feedback(self.title, "mistake", m.message, m.hint, mistake=m.key)

    def _weight_slip(self, fn) -> str | None:
        sizes = {tuple(c.args[:2]) for c in self.cases()}
        with _Deadline():
            weights = {(d, h): fn(d, h, bias=False) for d, h in sizes}
        if not _plain(list(weights.values()), whole=True):  # the answer's own class: its methods could
            return None  # run without limit in the comparisons below
        for key, count in _WEIGHT_SLIPS.items():
            if all(_same_count(got, count(d, h)) for (d, h), got in weights.items()):
                return key
        return None


PARAMETER_COUNT = _ParameterCountExercise(
    title="Exercise 3.3: count the parameters",
    make_cases=_params_cases,
    mistakes=[
        Mistake("forgot_biases",
                "right without biases, but with bias=True each of the four projections also "
                "has a bias vector of d_model numbers.",
                "add 4 * d_model when bias is True."),
        Mistake("only_three_matrices",
                "you counted W_Q, W_K and W_V but not the output projection W_O.",
                "W_O is one more (d_model, d_model) matrix (plus a bias of d_model)."),
        Mistake("w_o_per_head",
                "you counted W_O once per head: there is one W_O for the whole layer, "
                "applied to the concatenation of all heads.",
                "W_Q, W_K, W_V are split into h slices; W_O is a single (d_model, d_model) matrix."),
        Mistake("full_width_heads",
                "you gave every head full (d_model, d_model) projections: each head's W_Q^i "
                "is only (d_model, d_k) with d_k = d_model / h.",
                "h slices of (d_model, d_k) make h * d_model * d_k = d_model^2 per matrix."),
        Mistake("whole_layer_per_head",
                "you counted a whole layer, 4 * d_model^2 (and its biases), for every head, then "
                "multiplied by h: the heads share the layer's four projections, each head holding a "
                "(d_model, d_k) slice of W_Q, W_K and W_V, and W_O is one matrix for all of them.",
                "count the four (d_model, d_model) matrices once: 4 * d_model^2, plus 4 * d_model "
                "biases; h only decides how they are sliced."),
        Mistake("bias_always_added",
                "right with bias=True, but with bias=False you still added 4 * d_model biases: the "
                "bias argument says whether the layer has bias vectors at all.",
                "add the 4 * d_model biases only when bias is True."),
        Mistake("forgot_output_bias",
                "you counted the biases of W_Q, W_K and W_V (3 * d_model) but not the bias b_O of "
                "the output projection.",
                "with bias=True there are four bias vectors of d_model: b_Q, b_K, b_V and b_O."),
        Mistake("bias_per_head",
                "you gave every head a full bias of d_model numbers for each of Q, K and V. A head's "
                "bias is a slice of d_k numbers of b_Q (likewise b_K, b_V), so the h heads together "
                "hold one bias vector of d_model per projection.",
                "biases: 4 * d_model in total (b_Q, b_K, b_V sliced into heads, plus b_O), whatever h is."),
        Mistake("all_biases_per_head",
                "you counted the four biases once per head: h * 4 * d_model. A head's bias is a "
                "slice of d_k numbers of b_Q (likewise b_K, b_V), so the h heads together hold one "
                "bias vector of d_model per projection, and b_O belongs to the whole layer.",
                "biases: 4 * d_model in total, whatever h is; only the weights' slicing depends on h."),
        Mistake("bias_width_d_k",
                "you gave each projection a bias of d_k numbers, one head's worth: b_Q, b_K and b_V "
                "each cover all h heads (a head's slice is d_k of their d_model numbers), and b_O has "
                "d_model too.",
                "with bias=True, each of the four projections adds one bias vector of d_model."),
        Mistake("square_head_matrices",
                "you counted square (d_k, d_k) matrices per head: a head's W_Q^i (and W_K^i, W_V^i) "
                "takes a token's full d_model features down to d_k, so it is (d_model, d_k), and W_O "
                "is one (d_model, d_model) matrix.",
                "count each head's slice as d_model * d_k, then the heads, then W_O."),
        Mistake("one_head_projections",
                "you counted the Q, K, V projections of ONE head (3 * d_model * d_k weights) plus "
                "W_O: every one of the h heads has its own W_Q^i, W_K^i, W_V^i.",
                "multiply one head's projections by h: h * d_model * d_k = d_model^2 per matrix."),
        _float_count(),
    ],
    hint="go through the four projections of section 1's table one at a time: how large is one "
         "head's slice of W_Q, and how many slices are there? What does W_O map from and to? Then "
         "ask what a bias adds to each projection.",
)
check_parameter_count = PARAMETER_COUNT.check


# --- 3.4 multiply-adds of the scores ------------------------------------------------
def _score_cases() -> list[Case]:
    return [
        Case((3, 512, 8), label="T = 3, d_model = 512, h = 8"),
        Case((10, 64, 8), label="T = 10, d_model = 64, h = 8"),
        Case((7, 12, 3), label="T = 7, d_model = 12, h = 3"),
        Case((5, 16, 1), label="T = 5, d_model = 16, h = 1"),
        _random_shape_case(34, with_length=True),
    ]


class _ScoreMacsExercise(_CountExercise):
    """Exercise 3.4: sqrt(d_k) in place of d_k is named whether the count came back as a float,
    rounded or cut to an int (its stored outputs are floats, which only the first matches)."""

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        def near_sqrt(case: Case, got) -> bool:
            T, d, h = case.args[:3]
            if isinstance(got, bool) or not isinstance(got, (int, float, np.integer, np.floating)):
                return False
            try:
                return abs(float(got) - h * T * T * math.sqrt(d // h)) <= 1
            except OverflowError:  # an int beyond float's range is no rounded sqrt(d_k) count
                return False
        if all(near_sqrt(c, g) for c, g in zip(cases, outputs, strict=True)):
            return self._mistake_feedback("sqrt_d_k_per_score")
        return None


SCORE_MACS = _ScoreMacsExercise(
    title="Exercise 3.4: multiply-adds of the scores",
    make_cases=_score_cases,
    mistakes=[
        Mistake("heads_counted_twice",
                "you multiplied by h and also used the full d_model: each head's dot products "
                "are only d_k long, so the h heads together cost T^2 * d_model, not h times that.",
                "per head: T * T * d_k; all heads: h * T * T * d_k."),
        Mistake("one_head_only",
                "you counted one head (T^2 * d_k): all h heads compute their own scores.",
                "multiply the per-head cost by h."),
        Mistake("twice_the_scores",
                "you got 2 * T^2 * d_model, twice the answer. Either you counted FLOPs (2 per "
                "multiply-add) or you added weights @ V (another T^2 * d_model) to the scores; "
                "the exercise asks only for the multiply-adds of Q K^T.",
                "count multiply-adds, not FLOPs, and count only the scores Q K^T, not weights @ V."),
        Mistake("linear_in_length",
                "the score matrix has T * T entries per head (every query meets every key): "
                "the cost grows with T^2, not T.",
                "each of the T^2 entries of a head's scores is a dot product of length d_k."),
        Mistake("causal_half",
                "you counted half of the T * T scores, as if a causal mask saved the other half. "
                "Q K^T computes every entry (the mask is applied afterwards), and the exercise has "
                "no mask.",
                "count all T * T entries per head: h * T * T * d_k."),
        Mistake("causal_triangle",
                "you counted only the T * (T + 1) / 2 entries a causal mask keeps. The matrix "
                "product computes all T * T of them; the mask only overwrites some afterwards (and "
                "there is no mask here).",
                "count all T * T entries per head: h * T * T * d_k."),
        Mistake("projections_added_qk",
                "you added the cost of computing Q and K (2 * T * d_model^2) to the scores. The "
                "exercise counts only the product Q K^T; the projections are separate rows of the "
                "cost table.",
                "leave out x @ W_Q and x @ W_K: only the T * T dot products of length d_k per head."),
        Mistake("projections_added_qkv",
                "you added the cost of the Q, K and V projections (3 * T * d_model^2) to the "
                "scores. The exercise counts only the product Q K^T.",
                "leave out the projections: only the T * T dot products of length d_k per head."),
        Mistake("one_mac_per_score",
                "you returned h * T^2, the number of scores. Each score is a dot product of two "
                "d_k-long vectors, which takes d_k multiply-adds.",
                "multiply the number of scores by d_k: h * T * T * d_k."),
        Mistake("exact_flops",
                "you counted floating-point operations exactly, d_k multiplications and d_k - 1 "
                "additions per score. The exercise counts multiply-adds: one per pair of numbers "
                "multiplied, so d_k per score.",
                "one multiply-add per term of each dot product: h * T * T * d_k."),
        Mistake("scaling_counted",
                "you added one operation per score for the 1/sqrt(d_k) scaling (h * T^2). The "
                "exercise leaves the scaling out, as it leaves out softmax and masks: it is "
                "element-wise and small next to the dot products.",
                "count only the dot products: h * T * T * d_k."),
        Mistake("projection_cost",
                "you returned T * d_model^2, the cost of one projection such as x @ W_Q "
                "((T, d_model) @ (d_model, d_model)). The exercise asks for the scores, Q K^T: "
                "per head a (T, d_k) @ (d_k, T) product.",
                "apply a * b * c to one head's Q and K^T, then count the heads."),
        Mistake("sizes_multiplied",
                "you multiplied the sizes of Q and K^T, (T * d_k) * (d_k * T), which counts the "
                "shared axis d_k twice. A product (a, b) @ (b, c) takes a * b * c multiply-adds: "
                "each of its a * c entries is one dot product of length b.",
                "per head: T * T entries, each a dot product of length d_k; then count the heads."),
        Mistake("sqrt_d_k_per_score",
                "you used sqrt(d_k) as the cost of one score: sqrt(d_k) is the number the scores are "
                "divided by afterwards. Each score is a dot product of two d_k-long vectors, which "
                "takes d_k multiply-adds.",
                "one multiply-add per term of each dot product: d_k per score."),
        _float_count(),
    ],
    hint="write down the shapes of one head's Q and K^T (section 1's table has them); a matrix "
         "product (a, b) @ (b, c) takes a * b * c multiply-adds. Then count the heads.",
)
check_score_macs = SCORE_MACS.check
