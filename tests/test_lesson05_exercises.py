"""Lesson 05's exercise slips that are not plain ``Mistake`` objects, and the slips added for
issue 10, fed as a learner would write them (loops, not the reference's vector code)."""

from __future__ import annotations

import torch

from course_utils.exercises import lesson05
from course_utils.interp.scores import best_head, induction_score


def test_find_head_with_the_library_score_is_turned_back():
    def uses_library(attention, period):
        return best_head(induction_score(attention, period, start=1))

    feedback = lesson05.check_find_induction_head(uses_library)
    assert not feedback.passed and feedback.mistake == "library_score"
    assert "your own score" in feedback.message


def test_find_head_with_a_nested_library_call_is_turned_back():
    def nested(attention, period):
        def score(layers):
            return induction_score(layers, period, start=1)
        return best_head(score(attention))

    assert lesson05.check_find_induction_head(nested).mistake == "library_score"


def _own_score(pattern, period, first_query, first_key):
    T = pattern.shape[-1]
    per_query = [pattern[:, q, torch.arange(q - period + 1, first_key - 1, -period)].sum(dim=-1)
                 for q in range(first_query, T)]
    return torch.stack(per_query, dim=-1).mean(dim=-1)


def test_find_head_with_own_score_passes_and_forgetting_bos_fails():
    def own(attention, period):
        return best_head(torch.stack([_own_score(p, period, period + 1, 2) for p in attention]))

    def forgot_bos(attention, period):  # queries from `period`, keys from 1: BOS not skipped
        return best_head(torch.stack([_own_score(p, period, period, 1) for p in attention]))

    assert lesson05.check_find_induction_head(own).passed
    feedback = lesson05.check_find_induction_head(forgot_bos)
    assert not feedback.passed and feedback.mistake == "forgot_bos"


def test_learner_style_slips_in_the_scores_are_named():
    def default_dims(pattern):
        return pattern.diagonal(-1).mean(-1)

    assert lesson05.check_previous_token_score(default_dims).mistake == "diagonal_default_dims"

    def all_rows(pattern, period):  # TransformerLens-style: sum over the repeated part / all T rows
        T = pattern.shape[-1]
        total = sum(pattern[:, q, torch.arange(q - period + 1, 1, -period)].sum(dim=-1)
                    for q in range(period + 1, T))
        return total / T

    def mean_over_copies(pattern, period):
        T = pattern.shape[-1]
        per_query = [pattern[:, q, torch.arange(q - period + 1, 1, -period)].mean(dim=-1)
                     for q in range(period + 1, T)]
        return torch.stack(per_query, dim=-1).mean(dim=-1)

    assert lesson05.check_induction_score(all_rows).mistake == "all_rows"
    assert lesson05.check_induction_score(mean_over_copies).mistake == "mean_over_copies"


def test_learner_style_slips_added_by_review_are_named():
    """Wrong answers a reviewer fed as a learner: each one used to get a generic 'wrong values'."""
    def divided_by_T(pattern):
        T = pattern.shape[-1]
        return sum(pattern[:, i, i - 1] for i in range(1, T)) / T

    def summed(pattern):
        return sum(pattern[:, i, i - 1] for i in range(1, pattern.shape[-1]))

    assert lesson05.check_previous_token_score(divided_by_T).mistake == "divided_by_T"
    assert lesson05.check_previous_token_score(summed).mistake == "sum_not_mean"

    def keys_down_to(lowest_key, combine=torch.sum):
        def score(pattern, period):
            per_query = [combine(pattern[:, q, torch.arange(q - period + 1, lowest_key - 1, -period)], -1)
                         for q in range(period + 1, pattern.shape[-1])]
            return torch.stack(per_query, dim=-1).mean(dim=-1)
        return score

    def amax(x, dim):
        return x.max(dim=dim).values

    def summed_over_queries(pattern, period):
        return sum(pattern[:, q, torch.arange(q - period + 1, 1, -period)].sum(dim=-1)
                   for q in range(period + 1, pattern.shape[-1]))

    assert lesson05.check_induction_score(keys_down_to(1)).mistake == "bos_as_occurrence"
    assert lesson05.check_induction_score(keys_down_to(3)).mistake == "missed_key_two"
    assert lesson05.check_induction_score(keys_down_to(2, amax)).mistake == "max_over_copies"
    assert lesson05.check_induction_score(summed_over_queries).mistake == "sum_over_queries"
    assert lesson05.check_induction_score(keys_down_to(2)).passed

    def scores(attention, period):
        return torch.stack([_own_score(p, period, period + 1, 2) for p in attention])  # (L, h)

    def flat(attention, period):
        return int(scores(attention, period).argmax())

    def one_based(attention, period):
        layer, head = best_head(scores(attention, period))
        return layer + 1, head + 1

    assert lesson05.check_find_induction_head(flat).mistake == "flat_index"
    assert lesson05.check_find_induction_head(one_based).mistake == "one_based"


def test_find_head_names_the_library_call_not_the_name():
    """The check watches calls: a helper outside the answer that calls the library score is turned
    back, and a learner's own function that happens to be called induction_score is not."""
    def library_helper(attention, period):
        return induction_score(attention, period, start=1)

    def via_helper(attention, period):
        return best_head(library_helper(attention, period))
    assert lesson05.check_find_induction_head(via_helper).mistake == "library_score"

    namespace = {"torch": torch, "best_head": best_head, "_own_score": _own_score}
    exec("def induction_score(attention, period):\n"  # the learner's own, same name as the library's
         "    return torch.stack([_own_score(p, period, period + 1, 2) for p in attention])\n"
         "def answer(attention, period):\n"
         "    return best_head(induction_score(attention, period))\n", namespace)
    assert lesson05.check_find_induction_head(namespace["answer"]).passed


def test_find_head_returning_the_right_pair_as_a_tensor_is_told_to_return_a_tuple():
    def as_tensor(attention, period):
        scores = torch.stack([_own_score(p, period, period + 1, 2) for p in attention])  # (L, h)
        return (scores == scores.max()).nonzero()[0]  # tensor([layer, head])
    feedback = lesson05.check_find_induction_head(as_tensor)
    assert feedback.mistake is None and "values are right" in feedback.message and "tuple" in feedback.message


def test_previous_token_score_with_swapped_dims_is_told_rows_and_columns():
    def swapped(pattern):
        return pattern.diagonal(offset=-1, dim1=-1, dim2=-2).mean(dim=-1)
    feedback = lesson05.check_previous_token_score(swapped)
    assert feedback.mistake == "super_diagonal" and "swapped" in feedback.message


def test_find_head_names_a_duplicate_score_summed_over_copies():
    """Written like exercise 5.2's loop but one position too far back (keys q - j*period)."""
    def duplicate_loop(attention, period):
        stack = torch.stack(attention)  # (L, h, T, T)
        T = stack.shape[-1]
        per_query = [stack[..., q, torch.arange(q - period, 0, -period)].sum(-1)
                     for q in range(period + 1, T)]
        return best_head(torch.stack(per_query, dim=-1).mean(dim=-1))
    assert lesson05.check_find_induction_head(duplicate_loop).mistake == "duplicate_token_head"


def test_scores_name_a_query_range_that_stops_one_early():
    def previous_loop(pattern):
        T = pattern.shape[-1]
        return torch.stack([pattern[:, i, i - 1] for i in range(1, T - 1)], dim=-1).mean(dim=-1)
    assert lesson05.check_previous_token_score(previous_loop).mistake == "last_query_dropped"

    def induction_loop(pattern, period):
        T = pattern.shape[-1]
        per_query = [pattern[:, q, torch.arange(q - period + 1, 1, -period)].sum(dim=-1)
                     for q in range(period + 1, T - 1)]
        return torch.stack(per_query, dim=-1).mean(dim=-1)
    assert lesson05.check_induction_score(induction_loop).mistake == "last_query_dropped"


def _occurrences(pattern, period, first_query, lowest_key, copies=None):
    """A learner's loop over the earlier occurrences themselves (keys q - period, q - 2*period, ...)."""
    per_query = []
    for q in range(first_query, pattern.shape[-1]):
        total = torch.zeros(pattern.shape[0], dtype=pattern.dtype)
        k, seen = q - period, 0
        while k >= lowest_key and (copies is None or seen < copies):
            total = total + pattern[:, q, k]
            k, seen = k - period, seen + 1
        per_query.append(total)
    return torch.stack(per_query, dim=-1).mean(dim=-1)


def test_learner_trial_l3_slips_in_the_scores_are_named():
    """Answers that used to get only 'wrong values' (learner trial l3): a float16 result in 5.1,
    and in 5.2 every way of reading the earlier occurrence itself, which the lesson's hint box
    promises the check names, and the two compound slips."""
    def half(pattern):
        return pattern.diagonal(-1, 1, 2).mean(-1).half()

    def bfloat_throughout(pattern):
        p = pattern.to(torch.bfloat16)
        return torch.stack([p[:, i, i - 1] for i in range(1, p.shape[-1])], dim=-1).mean(-1)

    for answer in (half, bfloat_throughout):
        feedback = lesson05.check_previous_token_score(answer)
        assert feedback.mistake == "half_precision" and "float16" in feedback.message, feedback

    def occurrence_k2(pattern, period):  # the definition's k >= 2, copied onto the wrong keys
        return _occurrences(pattern, period, period + 1, lowest_key=2)

    def occurrence_one_back(pattern, period):
        return _occurrences(pattern, period, period + 1, lowest_key=1, copies=1)

    def occurrence_from_period(pattern, period):  # and BOS forgotten: queries from `period`
        return _occurrences(pattern, period, period, lowest_key=1)

    expected = {occurrence_k2: "occurrence_from_key_two", occurrence_one_back: "occurrence_one_back",
                occurrence_from_period: "occurrence_forgot_bos"}
    for answer, key in expected.items():
        feedback = lesson05.check_induction_score(answer)
        assert feedback.mistake == key, feedback
        assert "earlier occurrence" in feedback.message

    def stripe_as_diagonal(pattern, period):  # rows period .. T-1 of the diagonal one period back
        rows = torch.arange(period, pattern.shape[-1])
        return pattern[:, rows, rows - period + 1].mean(dim=-1)
    feedback = lesson05.check_induction_score(stripe_as_diagonal)
    assert feedback.mistake == "one_back_forgot_bos" and "BOS" in feedback.message, feedback



def test_find_head_names_a_score_that_reads_only_one_period_back():
    """5.2's main slip reused in 5.3 picked the right head on the old cases (learner trial l3):
    the third case's induction head spreads its weight over five copies, a decoy does not."""
    def one_back(attention, period):
        grid = []
        for pattern in attention:
            queries = torch.arange(period + 1, pattern.shape[-1])
            grid.append(pattern[:, queries, queries - period + 1].mean(dim=-1))
        return best_head(torch.stack(grid))
    feedback = lesson05.check_find_induction_head(one_back)
    assert feedback.mistake == "only_second_copy" and "one period back" in feedback.message, feedback


def test_find_head_names_an_answer_that_edits_the_callers_attention():
    """An answer that zeroes the BOS column in place still finds the right head; the check says
    which argument it changed. Dropping a layer from the list is named too, and the same edit
    on clones passes."""
    def zero_bos_in_place(attention, period):
        for pattern in attention:
            pattern[..., 0] = 0.0
        return best_head(torch.stack([_own_score(p, period, period + 1, 2) for p in attention]))

    feedback = lesson05.check_find_induction_head(zero_bos_in_place)
    assert feedback.mistake == "edited_input_in_place", feedback
    assert "`attention` (argument 1)" in feedback.message and "layer 0" in feedback.message
    assert "clone()" in feedback.hint

    def drops_a_layer(attention, period):
        layer, head = best_head(torch.stack([_own_score(p, period, period + 1, 2) for p in attention]))
        attention.pop()
        return layer, head
    feedback = lesson05.check_find_induction_head(drops_a_layer)
    assert feedback.mistake == "edited_input_in_place" and "the list itself" in feedback.message, feedback

    def on_a_copy(attention, period):
        copies = [p.clone() for p in attention]
        for pattern in copies:
            pattern[..., 0] = 0.0
        return best_head(torch.stack([_own_score(p, period, period + 1, 2) for p in copies]))
    assert lesson05.check_find_induction_head(on_a_copy).passed


def test_find_head_names_the_last_layer_searched_alone_and_renumbered():
    """Learner trial l19: searching attention[-1:] gives the pair (0, head), the last layer
    renumbered 0; it got a generic 'expected int 1, got int 0'."""
    def last_layer(attention, period):
        return best_head(torch.stack([_own_score(p, period, period + 1, 2) for p in attention[-1:]]))
    feedback = lesson05.check_find_induction_head(last_layer)
    assert feedback.mistake == "last_layer_renumbered"
    assert "only the last layer" in feedback.message and "layer 0" in feedback.message
