"""Exercise checks for lesson 05: reading attention heatmaps with head scores.

The cases are hand-built attention patterns (causal, rows summing to 1) mixed with random
ones, so every known mistake gives a different answer from the reference and from the
other mistakes.
"""

from __future__ import annotations

from typing import Any

import torch

from ..interp.scores import (
    ideal_pattern,
    induction_key_mask,
    induction_positions,
    induction_score,
)
from .core import (
    Case,
    Exercise,
    Feedback,
    Mistake,
    WatchesGivenLists,
    _changes_its_input,
)

__all__ = [
    "PREVIOUS_TOKEN_SCORE",
    "INDUCTION_SCORE",
    "FIND_INDUCTION_HEAD",
    "check_previous_token_score",
    "check_induction_score",
    "check_find_induction_head",
]


def _random_causal(num_heads: int, seq_len: int, seed: int, *, causal: bool = True,
                   sharpness: float = 2.0) -> torch.Tensor:
    """Random attention weights ``(h, T, T)``: softmax of random scores, causal by default."""
    gen = torch.Generator().manual_seed(seed)
    scores = sharpness * torch.randn(num_heads, seq_len, seq_len, generator=gen, dtype=torch.float64)
    if causal:
        blocked = torch.triu(torch.ones(seq_len, seq_len, dtype=torch.bool), 1)
        scores = scores.masked_fill(blocked, float("-inf"))
    return scores.softmax(-1)


def _duplicate_token_pattern(seq_len: int, period: int, start: int) -> torch.Tensor:
    """``(T, T)``: a repeated token attends to its own earlier occurrence (q - period); others to 0."""
    pattern = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    pattern[:, 0] = 1.0
    queries, keys = induction_positions(seq_len, period, start=start)
    pattern[queries, 0] = 0.0
    pattern[queries, keys - 1] = 1.0
    return pattern


# ---------------------------------------------------------------- previous-token score

def _previous_token_cases() -> list[Case]:
    ideal = torch.stack([ideal_pattern(r, 8, period=3, start=1)
                         for r in ("previous token", "first token", "induction", "uniform")])
    return [
        Case((_random_causal(3, 6, seed=50),), label="3 random causal heads, T = 6"),
        Case((ideal,), label="4 textbook heads (previous, first, induction, uniform), T = 8"),
        Case((_random_causal(2, 5, seed=51, causal=False),), label="2 bidirectional heads, T = 5"),
    ]



_EDITED_PATTERN = ("your result is wrong, and your function also changed `pattern`, the tensor it was "
                   "given, in place (a method ending in _ such as zero_(), a +=, or a slice assignment). "
                   "A diagonal or a slice of pattern is a view that shares its memory, so the edit shows "
                   "in what you read from it, and the caller's pattern changes too.",
                   "leave `pattern` as it is: a score only reads the weights. If you need to change "
                   "something, change a copy (pattern.clone()).")


class _NamesInPlaceEdits(Exercise):
    """5.1, 5.2: a wrong answer that also changed ``pattern`` in place is told so (its views of
    pattern share the memory, so the edit shows in its result); a right one gets the core's
    in-place message. Scores are read, not stored: a float32 result of float64 weights passes."""

    def check(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.status != "wrong" or feedback.mistake is not None or feedback.stopped:
            return feedback
        try:
            edited = _changes_its_input(fn, self.cases())
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            edited = False
        if not edited:
            return feedback
        return Feedback(self.title, "mistake", *_EDITED_PATTERN, mistake="edited_pattern_in_place")


class _PreviousTokenExercise(_NamesInPlaceEdits):
    """5.1: an answer returned in half precision is named however it got there (a .half() at the
    end, or the whole computation in float16 or bfloat16): its values are right to a few digits."""

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        halves = (torch.float16, torch.bfloat16)
        if all(isinstance(got, torch.Tensor) and got.dtype in halves and got.shape == exp.shape
               and torch.allclose(got.detach().to(exp.dtype), exp, rtol=1e-2, atol=1e-3)
               for got, exp in zip(outputs, expected, strict=True)):
            return self._mistake_feedback("half_precision")
        return None


PREVIOUS_TOKEN_SCORE = _PreviousTokenExercise(
    title="Exercise 5.1: previous-token score",
    make_cases=_previous_token_cases,
    mistakes=[
        Mistake("diagonal", "you read the main diagonal A[i, i]: that measures attention to the token "
                "itself, not to the one before it.",
                "the previous token of query i is key i - 1: the diagonal just below the main one."),
        Mistake("diagonal_all_queries", "you read the main diagonal A[i, i] over all T queries: that is "
                "attention to the token itself (and query 0, which can only look at itself, adds a free 1).",
                "the previous token of query i is key i - 1, and only queries 1 .. T-1 have one: the "
                "diagonal just below the main one has exactly those entries."),
        Mistake("super_diagonal", "you read the diagonal above the main one, A[i, i+1]: the NEXT token, "
                "which a causal head can never see (it is all zeros). offset=+1 does that, and so do "
                "offset=-1 with dim1 and dim2 swapped, or A[i-1, i] (row and column swapped).",
                "query i is the row (the second-last axis) and its previous token, key i - 1, the "
                "column: the entries one step below the main diagonal, not above it."),
        Mistake("includes_position_zero", "you averaged over all T queries, including query 0, which has no "
                "previous token (its 'previous' wrapped round to the last key).",
                "score only queries 1 .. T-1: the sub-diagonal has T - 1 entries."),
        Mistake("clamped_position_zero", "you counted query 0 by clamping its 'previous' key to 0, so it "
                "reads A[0, 0]: under a causal mask that is always 1, a free point for every head.",
                "query 0 has no previous token: leave it out and average over queries 1 .. T-1 only."),
        Mistake("diagonal_default_dims", "you got one number per key, not per head: your diagonal runs "
                "across the head axis and the query axis of the (h, T, T) pattern, pairing head i+1 with "
                "query i, which is what pattern.diagonal(-1) gives with its default dimensions "
                "(dim1=0, dim2=1).",
                "tell diagonal which two axes hold the T x T matrix (the last two), so that the head "
                "axis stays out of it."),
        Mistake("mean_over_heads", "you averaged over the heads instead of over the positions: you "
                "returned one number per position, but we want one number per head.",
                "average over the last axis of the sub-diagonal (positions), keep the head axis."),
        Mistake("divided_by_T", "you added up the T - 1 sub-diagonal weights but divided by T: query 0 "
                "has no previous token, so it must not count in the denominator either (a perfect "
                "previous-token head would score (T - 1) / T, not 1).",
                "divide by the number of queries that have a previous token, T - 1: or just .mean(-1) "
                "of the sub-diagonal."),
        Mistake("last_query_dropped", "you left out the last query, T - 1: a range's stop is exclusive, so "
                "range(1, T - 1) ends at T - 2.",
                "the queries are 1 .. T-1 inclusive: range(1, T)."),
        Mistake("sum_not_mean", "you returned the sum of the sub-diagonal weights, not their mean: the "
                "score then grows with the length T and is no longer between 0 and 1.",
                "average over the T - 1 queries: .mean(-1) instead of .sum(-1)."),
        Mistake("half_precision", "your scores are right to about three digits, but you returned them "
                "in half precision (float16 or bfloat16), which keeps only about three significant "
                "digits: they differ from the answer in the fourth, and every later score computed "
                "from them inherits the rounding.",
                "keep the pattern's own dtype: drop the .half() (or .to(torch.float16)) and return the "
                "mean as it comes out."),
    ],
    hint="take pattern[h, i, i-1] for i = 1 .. T-1 and average over i, one score per head: shape (h,).",
)
check_previous_token_score = PREVIOUS_TOKEN_SCORE.check


# ---------------------------------------------------------------- induction score

def _induction_cases() -> list[Case]:
    seq_len, period = 12, 4  # BOS + 4 tokens + 4 + 3: queries 9..11 have two earlier copies
    ideal = torch.stack([ideal_pattern("induction", seq_len, period=period, start=1),
                         _duplicate_token_pattern(seq_len, period, 1),
                         ideal_pattern("previous token", seq_len),
                         ideal_pattern("uniform", seq_len)])
    return [
        Case((ideal, period), label="textbook heads (induction, duplicate, previous, uniform), period 4"),
        Case((_random_causal(3, 11, seed=52), 3), label="3 random causal heads, T = 11, period 3 (3 copies)"),
        Case((_random_causal(2, 13, seed=53, sharpness=1.0), 6),
             label="2 random causal heads, T = 13, period 6"),
    ]


class _InductionExercise(_NamesInPlaceEdits):
    """5.2: the mean of a single diagonal of the pattern, at any offset, is named (the stripe of
    a textbook induction head lies on one, the score does not)."""

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        for case, got in zip(cases, outputs, strict=True):
            pattern = case.args[0]
            if not isinstance(got, torch.Tensor) or not isinstance(pattern, torch.Tensor):
                return None
            diagonals = (pattern.diagonal(offset=-k, dim1=-2, dim2=-1).mean(-1)
                         for k in range(pattern.shape[-1]))
            if not any(self._close(got, d) for d in diagonals):
                return None
        return self._mistake_feedback("single_diagonal")


INDUCTION_SCORE = _InductionExercise(
    title="Exercise 5.2: induction score",
    make_cases=_induction_cases,
    mistakes=[
        Mistake("earlier_occurrence", "you scored attention to the earlier occurrences of the same "
                "token (keys q - period, q - 2*period, ...). That is a duplicate-token head; an induction "
                "head looks one step further, at the token that came AFTER each occurrence.",
                "the keys are q - period + 1, q - 2*period + 1, ..."),
        Mistake("previous_token", "you scored attention to the previous position (key q - 1): that is the "
                "previous-token score restricted to the second copy.",
                "the key is one period back, plus one: q - period + 1."),
        Mistake("forgot_bos", "you started the second copy at position `period`, forgetting the BOS token at "
                "position 0: your first query is still in the first copy.",
                "with BOS at 0 the first copy is 1 .. period, so queries run from period + 1 to T - 1."),
        Mistake("only_second_copy", "you read only one period back (key q - period + 1). From the third copy "
                "on, a token has several earlier occurrences, and an induction head may attend to the token "
                "after any of them: your score misses the weight on the older copies.",
                "for each query, sum pattern[:, q, k] over k = q - period + 1, q - 2*period + 1, ... while "
                "k >= 2 (the occurrence k - 1 must be a token, not BOS), then average over queries."),
        Mistake("all_rows", "you divided by all T rows (as TransformerLens's detect_head does), so the "
                "first copy and BOS, which have nothing to copy, count as zeros: a perfect head scores "
                "only (T - 1 - period) / T, and a 0.5 line no longer means what it means here.",
                "average only over the queries of the repeated part, q = period + 1 .. T - 1."),
        Mistake("mean_over_copies", "you averaged over the earlier copies instead of adding them up: a "
                "head that splits its weight between two earlier copies is doing induction with all of it, "
                "but your score halves it.",
                "sum the weights on k = q - period + 1, q - 2*period + 1, ... for each query, then average "
                "over the queries."),
        Mistake("bos_as_occurrence", "you also counted key 1, the token right after BOS, as if BOS were "
                "an earlier occurrence of the query's token: BOS is a marker, not a token of the block, so "
                "what follows it is not a copy of anything.",
                "stop at k >= 2: the occurrence k - 1 must be a token of the block, so key 1 (after "
                "BOS) is never one of them."),
        Mistake("missed_key_two", "your keys stop one step too early and skip k = 2 (the token after the "
                "first token of the block). A range's stop is exclusive: range(q - period + 1, 2, -period) "
                "never reaches 2, so the first query of the second copy loses its only key, and the first "
                "query of each later copy its oldest one.",
                "keep every k >= 2: a range never reaches its stop, so the stop of a downward range "
                "must lie one below the smallest key you want."),
        Mistake("max_over_copies", "you took the largest weight over the earlier copies instead of adding "
                "them up: a head that splits its weight between two earlier copies is doing induction with "
                "all of it, but your score keeps only the larger part.",
                "sum over k = q - period + 1, q - 2*period + 1, ... for each query, then average over "
                "the queries."),
        Mistake("last_query_dropped", "you left out the last query, T - 1: a range's stop is exclusive, so "
                "range(period + 1, T - 1) ends at T - 2.",
                "the queries are period + 1 .. T - 1 inclusive: range(period + 1, T)."),
        Mistake("sum_over_queries", "you added up the per-query sums instead of averaging them over the "
                "queries: the score then grows with the length of the repeated part and leaves [0, 1].",
                "average over the queries q = period + 1 .. T - 1 (there are T - 1 - period of them)."),
        Mistake("occurrence_from_key_two", "you scored attention to the earlier occurrences of the same "
                "token themselves (keys q - period, q - 2*period, ...), stopping at k >= 2 as the "
                "definition says. That bound is right, but for the other keys: these are the duplicate-"
                "token head's. An induction head looks one step further, at the token AFTER each "
                "occurrence.",
                "move every key one step later, to the token after each occurrence, and keep the "
                "same bound k >= 2."),
        Mistake("occurrence_one_back", "two slips: you scored attention to the earlier occurrence of the "
                "same token itself (key q - period), and only the one a period back. An induction head "
                "looks at the token AFTER the occurrence (key q - period + 1), and from the third copy "
                "on it may use the one after any earlier occurrence, so the score adds them all up.",
                "for each query, sum pattern[:, q, k] over k = q - period + 1, q - 2*period + 1, ... "
                "while k >= 2, then average over the queries."),
        Mistake("occurrence_forgot_bos", "two slips: you scored attention to the earlier occurrences of "
                "the same token themselves (keys q - period, q - 2*period, ...), which is a duplicate-"
                "token head, and your queries start at position `period`, forgetting the BOS token at "
                "position 0, so the first one is still in the first copy.",
                "the keys are q - period + 1, q - 2*period + 1, ... (k >= 2), and the queries run from "
                "period + 1 to T - 1."),
        Mistake("one_back_forgot_bos", "two slips: your rows start at position `period`, forgetting the "
                "BOS token at 0 (that row is the last token of the first copy, with nothing to copy), "
                "and you read only one period back (key q - period + 1), so from the third copy on the "
                "weight on the token after an older occurrence is missed. A diagonal of the pattern "
                "cannot do both jobs.",
                "loop over q = period + 1 .. T - 1 and sum pattern[:, q, k] over k = q - period + 1, "
                "q - 2*period + 1, ... while k >= 2, then average over q."),
        Mistake("single_diagonal", "you averaged one diagonal of the pattern (pattern.diagonal with a "
                "single offset). A textbook induction head's stripe lies on diagonals, but the score is "
                "not one diagonal's mean: it averages only over the queries of the repeated part, "
                "q = period + 1 .. T - 1, and for each adds the weights on every key after an earlier "
                "occurrence (one period back, two periods back, ...), which lie on several diagonals.",
                "loop over the queries of the repeated part; for each, add up the weights on the keys "
                "that follow earlier occurrences of its token; then average over those queries."),
    ],
    hint="for q in period+1 .. T-1 sum pattern[:, q, k] over k = q - period + 1, q - 2*period + 1, ... "
         "(k >= 2), then average over q: shape (h,).",
)
check_induction_score = INDUCTION_SCORE.check


# ---------------------------------------------------------------- find the induction head

ROLE_MAKERS = {
    "induction": lambda T, p: ideal_pattern("induction", T, period=p, start=1),
    "previous": lambda T, p: ideal_pattern("previous token", T),
    "sink": lambda T, p: ideal_pattern("first token", T),
    "duplicate": lambda T, p: _duplicate_token_pattern(T, p, 1),
}


def _key_one_decoy(seq_len: int, period: int) -> torch.Tensor:
    """``(T, T)``: an induction head, except that from each query q = period, 2*period, ... it looks
    at key 1 (the token after BOS). Forgetting BOS (start=0) counts those rows as induction."""
    pattern = ideal_pattern("induction", seq_len, period=period, start=1)
    rows = torch.arange(period, seq_len, period)
    pattern[rows] = 0.0
    pattern[rows, 1] = 1.0
    return pattern


ROLE_MAKERS["key one"] = _key_one_decoy


def _spread_induction(seq_len: int, period: int) -> torch.Tensor:
    """``(T, T)``: an induction head that splits each query's weight evenly over the tokens after
    every earlier occurrence (keys q - period + 1, q - 2*period + 1, ..., k >= 2); BOS elsewhere."""
    keys = induction_key_mask(seq_len, period, start=1).to(torch.float64)
    pattern = keys / keys.sum(-1, keepdim=True).clamp(min=1)
    pattern[keys.sum(-1) == 0, 0] = 1.0
    return pattern


def _recent_only(seq_len: int, period: int) -> torch.Tensor:
    """``(T, T)``: 0.7 of each repeated query's weight on the token after the most recent occurrence
    only, the rest on BOS: it wins for a score that reads one period back and nothing older."""
    return 0.7 * ideal_pattern("induction", seq_len, period=period, start=1) + 0.3 * ideal_pattern(
        "first token", seq_len)


ROLE_MAKERS["spread induction"] = _spread_induction
ROLE_MAKERS["recent only"] = _recent_only


def _planted(layout: dict[str, tuple[int, int]], num_layers: int, num_heads: int, seq_len: int,
             period: int, seed: int) -> list[torch.Tensor]:
    """Per-layer ``(h, T, T)`` patterns: random heads, with a textbook role planted at each spot."""
    layers = [_random_causal(num_heads, seq_len, seed=seed + layer, sharpness=1.0)
              for layer in range(num_layers)]
    for role, (layer, head) in layout.items():
        layers[layer][head] = 0.85 * ROLE_MAKERS[role](seq_len, period) + 0.15 * layers[layer][head]
    return layers


def _find_cases() -> list[Case]:
    layouts = [
        ({"previous": (0, 1), "sink": (0, 3), "duplicate": (0, 0), "induction": (1, 2)}, 2, 4, 13, 5, 60),
        # the induction head need not sit in the last layer (here: the middle one of three)
        ({"induction": (1, 3), "previous": (0, 3), "sink": (2, 2), "duplicate": (2, 1)}, 3, 4, 15, 6, 70),
        # five copies of a 3-token block: this induction head spreads its weight over every earlier
        # copy, and a decoy puts 0.7 on the most recent one only, so a score that reads only one
        # period back ranks the decoy first
        ({"sink": (0, 0), "spread induction": (0, 2), "previous": (1, 1), "duplicate": (1, 0),
          "recent only": (1, 2)}, 2, 3, 16, 3, 80),
        # a decoy that wins only if the first copy's last token (position `period`) is scored
        # (with a duplicate-token head too, so that a duplicate score picks it in every case)
        ({"key one": (0, 1), "induction": (1, 2), "previous": (0, 0), "duplicate": (1, 1)}, 2, 3, 13, 4, 90),
    ]
    return [Case((_planted(layout, L, h, T, p, seed), p), label=f"{L} layers x {h} heads, period {p}")
            for layout, L, h, T, p, seed in layouts]


class _FindHeadExercise(WatchesGivenLists, Exercise):
    """5.3: ``attention`` is a list of per-layer patterns, which the core's in-place test does
    not look into; this check compares each pattern the answer was given with the case's own."""

    def _list_edit(self, original: tuple, given: tuple | None,
                   handed: tuple | None = None) -> Feedback | None:
        changed = _changed_layer(original[0], given[0] if given else None)
        if changed is None:
            return None
        return Feedback(self.title, "mistake",
                        f"the head is right, but your function changed its input `attention` "
                        f"(argument 1) in place: {changed}. The caller's list is the model's "
                        "recorded attention, so every later cell that reads it would see your "
                        "edit, not what the model did.",
                        "leave `attention` as it is: score with out-of-place operations "
                        "(pattern * mask, pattern[:, q, keys].sum(-1)), or edit a copy, "
                        "pattern = attention[layer].clone().",
                        mistake="edited_input_in_place")


def _changed_layer(original: Any, given: Any) -> str | None:
    """How the list the answer was given differs from the case's ``original`` list, or None."""
    if not isinstance(original, list) or given is None:
        return None
    if not isinstance(given, list) or len(given) != len(original):
        return "the list itself was changed (items added, removed or replaced)"
    for layer, (mine, theirs) in enumerate(zip(original, given, strict=True)):
        if not isinstance(theirs, torch.Tensor) or theirs.shape != mine.shape or theirs.dtype != mine.dtype:
            return f"layer {layer}'s pattern was replaced"
        if not torch.equal(mine.nan_to_num(), theirs.detach().nan_to_num()):
            return f"layer {layer}'s pattern now holds other values"
    return None


FIND_INDUCTION_HEAD = _FindHeadExercise(
    title="Exercise 5.3: find the induction head",
    make_cases=_find_cases,
    mistakes=[
        Mistake("previous_token_head", "you picked the previous-token head (the strongest sub-diagonal). "
                "It is the induction head's partner in the earlier layer, not the induction head.",
                "rank heads by the induction stripe: key q - period + 1 for queries in the second copy."),
        Mistake("sink_head", "you picked the head with the most attention on position 0 (an attention sink). "
                "A sink head parks its weight on BOS whatever the input.",
                "the induction head's weight sits on the stripe one period back, plus one."),
        Mistake("duplicate_token_head", "you picked the head that attends to the earlier occurrence of the "
                "same token (key q - period): a duplicate-token head. The induction head attends to the "
                "token right after that occurrence.",
                "use key q - period + 1, not q - period."),
        Mistake("swapped_layer_head", "you returned (head, layer): the right head, but the pair is the "
                "wrong way round.", "return (layer, head), as best_head does: the layer index first."),
        Mistake("last_layer_only", "you searched only the last layer. Induction heads often sit there, but "
                "not always: in some of the tests the best induction head is in an earlier layer.",
                "score every head of every layer and take the best of them all."),
        Mistake("last_layer_renumbered", "you searched only the last layer, and your pair numbers it "
                "layer 0: attention[-1:] (or attention[-1]) is a list or tensor of its own, whose "
                "first layer counts as 0, so the layer index you returned is not the model's (the "
                "last layer is len(attention) - 1). Induction heads often sit in the last layer, but "
                "not always: in some of the tests the best induction head is in an earlier layer.",
                "score every head of every layer, for layer, pattern in enumerate(attention), and "
                "return the (layer, head) of the best of them all."),
        Mistake("forgot_bos", "your score forgot that BOS sits at position 0 (start=0): it counts the last "
                "token of the first copy as a repeat, and the token right after BOS as something to copy, so "
                "a head that looks at position 1 from there wins.",
                "the first copy is positions 1 .. period; score queries period + 1 .. T - 1 "
                "and keys k >= 2."),
        Mistake("flat_index", "you returned one number, scores.argmax() over all the heads at once: an "
                "index into the flattened (layers x heads) scores, not a (layer, head) pair.",
                "turn the flat index back into a pair, divmod(index, num_heads), or let best_head do it."),
        Mistake("one_based", "you counted layers and heads from 1: the right head, but the course (and "
                "Python) count both from 0, so L1H2 is (1, 2).",
                "return the indices as they come out of argmax, without adding 1."),
        Mistake("only_second_copy", "you picked a head that puts its weight on the most recent earlier "
                "copy only, and missed the one that spreads its weight over every earlier copy (in the "
                "third test, a 3-token block repeated five times): your score reads only one period back "
                "(key q - period + 1), the slip exercise 5.2 names, so it undercounts an induction head "
                "that also looks at older copies.",
                "score as in exercise 5.2: for each query sum over k = q - period + 1, q - 2*period + 1, "
                "... while k >= 2, then average over the queries."),
    ],
    hint="score every head as in exercise 5.2, by its weight on the stripes period - 1, 2*period - 1, ... "
         "keys before each query (the token right after each earlier copy of the query's token), and "
         "return the (layer, head) of the largest.",
    forbidden=[induction_score],  # the library's score: the exercise asks for the learner's own
)
_LIBRARY_SCORE = f"`{induction_score.__module__}.{induction_score.__qualname__}`"  # as the watch names it


def check_find_induction_head(*args: Any, **kwargs: Any) -> Feedback:
    """Grade exercise 5.3; an answer that calls ``course_utils.interp.scores.induction_score`` (under any
    name, from any helper: the check watches the calls, not the names) is turned back, since the
    exercise asks for the learner's own score. A function of the learner's that happens to be
    called ``induction_score`` is not. Never raises."""
    feedback = FIND_INDUCTION_HEAD.check(*args, **kwargs)  # (a slip in the call is its feedback)
    if feedback.mistake == "called_reference" and _LIBRARY_SCORE in feedback.message:
        return Feedback(FIND_INDUCTION_HEAD.title, "mistake",
                        "your function calls induction_score from course_utils.interp.scores: this "
                        "exercise asks you to rank the heads with your own score, so that a slip in it "
                        "shows here.",
                        "reuse the loop of exercise 5.2 (or write the stripes again) and return the "
                        "(layer, head) of the largest score; best_head may pick the maximum.",
                        mistake="library_score")
    return feedback
