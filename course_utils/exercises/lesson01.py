"""Checks for lesson 01 (why multiple heads).

* 1.1 ``attend(scores, values)``: one softmax per query row, then the weighted average of
  the values, ``(Tq, Tk), (Tk, dv) -> (Tq, dv)``
* 1.2 ``head_scores(x, w_q, w_k, num_heads)``: one scaled score matrix per head from the
  stacked projection weights, ``(T, d) -> (h, T, T)``
* 1.3 ``relation_accuracy(logits, target, num_symbols)``: accuracy of each half of a
  two-key lookup answer (prediction = argmax), ``(n, V*V), (n,) -> (2,)``
"""

from __future__ import annotations

import torch
from torch import Tensor

from .core import Case, Exercise, Mistake
from .raising import DiagnosingExercise, RaisingMistake

__all__ = [
    "ATTEND",
    "HEAD_SCORES",
    "RELATION_ACCURACY",
    "check_attend",
    "check_head_scores",
    "check_relation_accuracy",
]


# --- 1.1 one softmax, one blend -------------------------------------------------------
def _attend_cases() -> list[Case]:
    g = torch.Generator().manual_seed(11)
    return [
        Case((torch.tensor([[2.0, 2.0, 0.0], [4.0, 0.0, 1.0]]),
              torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0]])),
             label="2 queries, 3 keys, values of width 4 (query 0 scores keys 0 and 1 equally)"),
        Case((torch.tensor([[-3.0, 0.5, -1.0, 2.0], [1.0, -2.0, -0.5, -4.0], [-1.0, -1.0, 3.0, 0.0]]),
              torch.randn(4, 2, generator=g)),
             label="scores with negative entries, 3 queries x 4 keys"),
        Case((torch.rand(4, 5, generator=g) * 3 + 0.1, torch.randn(5, 3, generator=g)),
             label="random positive scores, 4 queries x 5 keys"),
    ]


ATTEND = Exercise(
    title="Exercise 1.1: one softmax, one blend",
    make_cases=_attend_cases,
    mistakes=[
        Mistake("wrong_axis",
                "your weights sum to 1 down each column (over the queries), not along each row: "
                "the softmax ran over dim 0.",
                "each query chooses among the keys: torch.softmax(scores, dim=-1)."),
        Mistake("no_softmax",
                "you multiplied the raw scores by the values: without a softmax the weights are "
                "not positive numbers that sum to 1, so the output is not an average.",
                "turn each row of scores into weights first: torch.softmax(scores, dim=-1)."),
        Mistake("no_exp",
                "you divided each row of scores by its sum, without exponentiating first.",
                "softmax is exp(s) / sum(exp(s)); torch.softmax does it (and is stable)."),
        Mistake("exp_not_normalised",
                "you exponentiated the scores but never divided each row by its sum: the weights "
                "are positive but do not sum to 1, so the output is not an average of the values.",
                "softmax is exp(s) / sum(exp(s)) along each row; torch.softmax(scores, dim=-1) does "
                "both (and is stable)."),
        Mistake("sigmoid_weights",
                "you turned the scores into weights with a sigmoid: it squashes each score on its "
                "own, so a query's weights do not sum to 1 and the output is not an average.",
                "the keys compete for each query: torch.softmax(scores, dim=-1) makes each row sum to 1."),
        Mistake("ignores_scores",
                "every query got the plain mean of the values: the scores were not used.",
                "the scores decide how much of each value a query takes: softmax(scores) @ values."),
        Mistake("scaled_by_num_keys",
                "you divided the scores by sqrt(Tk), the square root of the number of keys. This "
                "exercise gets scores that are already scaled: use them as they are.",
                "weights = torch.softmax(scores, dim=-1), with no extra scaling. (When attention "
                "does scale, it divides by sqrt(dk), the width of a query, never by the length.)"),
        Mistake("scaled_by_value_width",
                "you divided the scores by sqrt of the values' width. This exercise gets scores "
                "that are already scaled: use them as they are.",
                "weights = torch.softmax(scores, dim=-1), with no extra scaling."),
        Mistake("whole_matrix",
                "your weights sum to 1 over the whole score matrix, not along each row: one "
                "softmax over every entry leaves each query with only a slice of the weight.",
                "one softmax per query row: torch.softmax(scores, dim=-1), not over the flattened "
                "matrix."),
        Mistake("returned_weights",
                "you returned the weights, softmax(scores), one row per query and one column per "
                "key: the exercise asks for what they blend, the weighted average of the value rows.",
                "finish with the product: torch.softmax(scores, dim=-1) @ values, of shape (Tq, dv)."),
    ],
    hint="turn each row of scores (one query) into weights that are positive and sum to 1, then "
         "take the weighted average of the value rows: a (Tq, Tk) by (Tk, dv) product.",
)
check_attend = ATTEND.check


# --- 1.2 one score matrix per head ------------------------------------------------------
def _head_scores_cases() -> list[Case]:
    g = torch.Generator().manual_seed(12)
    cases = []
    for T, d, h in ((4, 6, 2), (5, 8, 4), (3, 6, 3)):
        x, w_q, w_k = (torch.randn(T, d, generator=g), torch.randn(d, d, generator=g),
                       torch.randn(d, d, generator=g))
        cases.append(Case((x, w_q, w_k, h), label=f"x of shape ({T}, {d}), num_heads = {h}"))
    return cases


HEAD_SCORES = DiagnosingExercise(
    title="Exercise 1.2: one score matrix per head",
    make_cases=_head_scores_cases,
    mistakes=[
        Mistake("in_out_layout",
                "your projections read w_q and w_k as (d_in, d_out) matrices (x @ w_q, as lesson "
                "02 writes it, or the columns of w_q). These weights are in nn.Linear's layout, "
                "(d_out, d_in): row j of w_q makes output feature j, so q = x @ w_q.T and head i "
                "owns rows i*dk:(i+1)*dk.",
                "compute q = x @ w_q.T and k = x @ w_k.T (each (T, d)), then split the last dim "
                "into heads."),
        Mistake("interleaved_heads",
                "your heads are interleaved: view(T, dk, h) gives head i the features i, i+h, "
                "i+2h, ... of each token. In nn.Linear's stacked layout head i owns the block of "
                "features i*dk:(i+1)*dk.",
                "split the last dim as (h, dk), heads first: .view(T, h, dk).transpose(0, 1)."),
        Mistake("divided_by_dk",
                "the pattern is right but the scores are too small: you divided by dk instead of "
                "sqrt(dk).",
                "divide by math.sqrt(dk): the standard deviation of a dot product of dk "
                "unit-variance entries is sqrt(dk)."),
        Mistake("one_big_head",
                "all your heads hold the same matrix, the full-width score x W_Q^T (x W_K^T)^T / "
                "sqrt(d): that is one huge head copied h times, not h heads.",
                "split q and k into h slices of width dk = d // h and compare slice i with "
                "slice i only."),
        Mistake("sqrt_d_model",
                "the pattern is right but the scores are too small: you divided by sqrt(d_model) "
                "instead of sqrt(dk), the width of one head.",
                "each head compares vectors of length dk = d // num_heads: divide by sqrt(dk)."),
        Mistake("no_scale",
                "the pattern is right but the scores are too large: you did not divide by "
                "sqrt(dk).",
                "divide each head's q @ k^T by sqrt(dk), with dk = d // num_heads, so that the "
                "scores do not grow with the width of a head."),
        Mistake("reshape_no_transpose",
                "you reshaped the (T, d) projection straight to (h, T, dk): that cuts the numbers "
                "in the wrong places, so a 'head' holds pieces of several tokens.",
                "first view it as (T, h, dk) (each token's d features split into h groups), then "
                "swap the first two dims: .view(T, h, dk).transpose(0, 1)."),
        Mistake("softmax",
                "you returned attention weights: each row went through a softmax. This function "
                "should return the scaled scores, before any softmax.",
                "stop after dividing by sqrt(dk); the softmax comes later."),
        Mistake("keys_first",
                "each of your matrices is transposed: you computed k @ q^T (or made the queries "
                "with w_k and the keys with w_q), so row i holds the scores of key i, not of query i.",
                "row i must be query i: q @ k.transpose(-2, -1)."),
        Mistake("keys_from_w_q",
                "your keys were made with w_q: every score compares a query with another query.",
                "k = x @ w_k.T; only the queries use w_q."),
        RaisingMistake("float_dk",
                       "torch refused your head width: d / num_heads is a float (3.0, not 3) even "
                       "when it divides exactly, and view, reshape or split need ints.",
                       "use integer division, dk = d // num_heads.", pattern="got float"),
    ],
    hint="project with the full weights, split the last dim into (h, dk), bring h to the front, "
         "then compare each head's queries with its own keys and divide by sqrt(dk).",
)
check_head_scores = HEAD_SCORES.check


# --- 1.3 accuracy of each relation ------------------------------------------------------
def _relation_accuracy_per_symbol_logits(logits: Tensor, target: Tensor, num_symbols: int) -> Tensor:
    n, V = logits.shape[0], num_symbols
    grid = logits.view(n, V, V)  # (n, symbol a, symbol b)
    pred_a, pred_b = grid.sum(dim=2).argmax(dim=1), grid.sum(dim=1).argmax(dim=1)
    right_a, right_b = pred_a == target // V, pred_b == target % V
    return torch.stack([right_a.double().mean(), right_b.double().mean()])


def _split_vote_case() -> Case:
    """Answers whose best single class and best symbol-by-symbol guess disagree."""
    V = 3
    logits = torch.zeros(4, V * V)
    logits[:, 0] = 3.0  # the argmax class is (0, 0) in every row ...
    logits[:2, 3:6] = 2.8  # ... but rows 0-1 spread a lot of weight over a = 1, b = anything
    logits[2:, [1, 4, 7]] = 2.8  # ... and rows 2-3 over b = 1, a = anything
    target = torch.tensor([0, 0, 0, 4])  # (0, 0) three times, then (1, 1)
    return Case((logits, target, V), label="4 answers, V = 3, where the best pair (0, 0) is not "
                                           "the best symbol taken one at a time")


def _relation_case(pred_pairs: list[tuple[int, int]], true_pairs: list[tuple[int, int]], V: int,
                   seed: int, label: str, *, spread: float = 1.0, lead: float = 10.0) -> Case:
    g = torch.Generator().manual_seed(seed)
    n = len(pred_pairs)
    logits = spread * torch.randn(n, V * V, generator=g)  # (n, V*V)
    predicted = torch.tensor([a * V + b for a, b in pred_pairs])
    logits[torch.arange(n), predicted] += lead  # argmax = the intended prediction
    target = torch.tensor([a * V + b for a, b in true_pairs])
    return Case((logits, target, V), label=label)


def _relation_cases() -> list[Case]:
    return [
        _relation_case([(0, 1), (2, 2), (1, 0), (2, 1)], [(0, 1), (2, 0), (1, 2), (0, 1)], 3, 21,
                       "4 answers, V = 3"),
        _relation_case([(3, 1), (0, 2), (1, 1), (2, 3), (0, 0)],
                       [(3, 1), (0, 1), (1, 0), (2, 2), (3, 0)], 4, 22, "5 answers, V = 4"),
        _relation_case([(1, 2), (0, 0), (2, 1), (1, 1), (0, 2), (2, 0)],
                       [(1, 2), (0, 1), (2, 1), (0, 0), (0, 2), (1, 0)], 3, 23,
                       "6 answers, V = 3, flat logits (the model is barely sure of its argmax)",
                       spread=0.05, lead=0.2),
        _split_vote_case(),
    ]


RELATION_ACCURACY = DiagnosingExercise(
    title="Exercise 1.3: accuracy of each relation",
    make_cases=_relation_cases,
    mistakes=[
        Mistake("swapped",
                "your two numbers are in the wrong order: class = a * V + b, so a = class // V "
                "and b = class % V.",
                "return [accuracy of a, accuracy of b], with a = class // V."),
        Mistake("whole_answer",
                "both numbers are the accuracy of the whole answer (a and b both right); each "
                "relation should be scored on its own.",
                "decode a = class // V and b = class % V for predictions and targets, then "
                "compare a with a and b with b."),
        Mistake("mixed_decoding",
                "you decoded predictions and targets in opposite ways (// for one, % for the "
                "other), so you compared a's symbol with b's.",
                "use the same rule for both: a = class // V, b = class % V."),
        Mistake("both_with_mod",
                "both numbers are b's accuracy: you decoded a with % as well. class = a * V + b, "
                "so class % V is b, and a is class // V.",
                "a = class // V (floor division), b = class % V."),
        Mistake("probabilities",
                "you averaged the probability the model gives to the right symbol. Accuracy "
                "counts each prediction (the argmax) as right or wrong, however sure the model is.",
                "predicted = logits.argmax(dim=-1); then compare decoded classes."),
        Mistake("per_symbol_argmax",
                "you decoded each symbol on its own (the most likely a after summing probabilities "
                "or logits over b, and the reverse). The model answers with one class, the argmax "
                "over all V*V pairs; "
                "the best symbol taken alone can differ from the symbol in the best pair.",
                "predicted = logits.argmax(dim=-1) over all V*V classes, then a = predicted // V "
                "and b = predicted % V."),
        Mistake("counts",
                "you returned how many answers got each symbol right, not the fraction.",
                "divide by the number of examples: .float().mean() instead of .sum()."),
        Mistake("true_division",
                "you decoded a with /, true division: predicted / V is a fraction that still holds "
                "b's part, so it matches the target only when the whole class does.",
                "use floor division for a: predicted // V (and predicted % V for b)."),
        Mistake("error_rate",
                "you returned the error rate, 1 - accuracy: the share of answers that got each "
                "symbol wrong.", "return the share that got it right."),
        RaisingMistake("bool_mean",
                       "torch cannot average a bool tensor: the comparison gives True/False, and "
                       ".mean() needs numbers.",
                       "call .float() on the comparison before .mean()."),
    ],
    hint="the prediction is the argmax class; class c stands for the pair (c // V, c % V): decode "
         "the prediction and the target the same way, then score each half on its own. A "
         "comparison gives a bool tensor: call .float() on it before .mean().",
)
check_relation_accuracy = RELATION_ACCURACY.check
