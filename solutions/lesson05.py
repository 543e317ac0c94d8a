"""Reference solutions and known mistakes of lesson05's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson05.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from course_utils.exercises.core import Case, Exercise, Feedback, Mistake
from course_utils.exercises.lesson05 import *
from course_utils.interp.scores import (
    best_head,
    first_token_score,
    ideal_pattern,
    induction_key_mask,
    induction_positions,
    induction_score,
    previous_token_score,
)


def _previous_token_reference(pattern: torch.Tensor) -> torch.Tensor:
    return previous_token_score(pattern, check_rows=False)


def _prev_diagonal(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=0, dim1=-2, dim2=-1)[:, 1:].mean(-1)


def _prev_super_diagonal(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1)


def _prev_includes_position_zero(pattern: torch.Tensor) -> torch.Tensor:
    seq_len = pattern.shape[-1]
    rows = torch.arange(seq_len)
    return pattern[:, rows, rows - 1].mean(-1)  # row 0 wraps round to the last key


def _prev_diagonal_all_queries(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(dim1=-2, dim2=-1).mean(-1)  # A[i, i] for every i, query 0 included


def _prev_clamped_position_zero(pattern: torch.Tensor) -> torch.Tensor:
    rows = torch.arange(pattern.shape[-1])
    return pattern[:, rows, (rows - 1).clamp(min=0)].mean(-1)  # query 0 reads key 0: A[0, 0]


def _prev_diagonal_default_dims(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(-1).mean(-1)  # default dim1=0, dim2=1: runs over heads and queries


def _prev_mean_over_heads(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(0)  # (T-1,): one value per position


def _prev_divided_by_T(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1) / pattern.shape[-1]  # T - 1 entries / T


def _prev_sum_not_mean(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).sum(-1)  # a total, not an average


def _prev_last_query_dropped(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1)[:, :-1].mean(-1)  # range(1, T - 1): stops early


def _prev_half_precision(pattern: torch.Tensor) -> torch.Tensor:
    return pattern.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1).half()  # float16: about 3 digits


def _induction_reference(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return induction_score(pattern, period, start=1, check_rows=False)


def _stripe(pattern: torch.Tensor, period: int, start: int, shift: int) -> torch.Tensor:
    """Like the reference, with every key moved by ``shift`` (0 = the reference's keys)."""
    seq_len = pattern.shape[-1]
    queries, _ = induction_positions(seq_len, period, start=start)
    keys = induction_key_mask(seq_len, period, start=start).roll(shift, dims=-1)  # (T, T)
    return (pattern * keys.to(pattern.dtype)).sum(-1)[:, queries].mean(-1)


def _induction_duplicate(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _stripe(pattern, period, 1, shift=-1)  # keys q - j*period: the earlier occurrences themselves


def _induction_previous(pattern: torch.Tensor, period: int) -> torch.Tensor:
    queries, _ = induction_positions(pattern.shape[-1], period, start=1)
    return pattern[:, queries, queries - 1].mean(-1)


def _induction_forgot_bos(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _stripe(pattern, period, 0, shift=0)  # also scores the last query of the first copy


def _induction_only_second_copy(pattern: torch.Tensor, period: int) -> torch.Tensor:
    queries, keys = induction_positions(pattern.shape[-1], period, start=1)
    return pattern[:, queries, keys].mean(-1)  # only one period back: misses the earlier copies


def _induction_all_rows(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return induction_score(pattern, period, start=1, average_over="all rows", check_rows=False)


def _induction_mean_over_copies(pattern: torch.Tensor, period: int) -> torch.Tensor:
    seq_len = pattern.shape[-1]
    queries, _ = induction_positions(seq_len, period, start=1)
    keys = induction_key_mask(seq_len, period, start=1).to(pattern.dtype)  # (T, T)
    per_query = (pattern * keys).sum(-1) / keys.sum(-1).clamp(min=1)  # mean over earlier copies
    return per_query[:, queries].mean(-1)


def _induction_keys_from(pattern: torch.Tensor, period: int, lowest_key: int,
                         combine: str = "sum") -> torch.Tensor:
    """A learner's loop with keys q - period + 1, q - 2*period + 1, ... down to ``lowest_key``."""
    per_query = []
    for q in range(period + 1, pattern.shape[-1]):
        on_keys = pattern[:, q, torch.arange(q - period + 1, lowest_key - 1, -period)]  # (h, copies)
        per_query.append(on_keys.sum(-1) if combine == "sum" else on_keys.amax(-1))
    return torch.stack(per_query, dim=-1).mean(-1)


def _induction_bos_as_occurrence(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _induction_keys_from(pattern, period, lowest_key=1)  # key 1: the 'token after BOS'


def _induction_missed_key_two(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _induction_keys_from(pattern, period, lowest_key=3)  # range(..., 2, -period) stops too early


def _induction_max_over_copies(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _induction_keys_from(pattern, period, lowest_key=2, combine="max")


def _induction_sum_over_queries(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _induction_keys_from(pattern, period, lowest_key=2) * (pattern.shape[-1] - period - 1)


def _induction_last_query_dropped(pattern: torch.Tensor, period: int) -> torch.Tensor:
    T = pattern.shape[-1]
    keys = induction_key_mask(T, period, start=1).to(pattern.dtype)  # (T, T)
    queries = torch.arange(period + 1, T - 1)  # range(period + 1, T - 1): stops one query early
    return (pattern * keys).sum(-1)[:, queries].mean(-1)


def _occurrence_loop(pattern: torch.Tensor, period: int, first_query: int, lowest_key: int,
                     copies: int | None = None) -> torch.Tensor:
    """A learner's loop that reads the earlier occurrences themselves (keys q - period,
    q - 2*period, ... down to ``lowest_key``, at most ``copies`` of them) from ``first_query`` on."""
    per_query = []
    for q in range(first_query, pattern.shape[-1]):
        keys = torch.arange(q - period, lowest_key - 1, -period)[:copies]
        per_query.append(pattern[:, q, keys].sum(-1))
    return torch.stack(per_query, dim=-1).mean(-1)


def _induction_occurrence_from_key_two(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _occurrence_loop(pattern, period, period + 1, lowest_key=2)  # the spec's k >= 2, on the wrong keys


def _induction_occurrence_one_back(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _occurrence_loop(pattern, period, period + 1, lowest_key=1, copies=1)


def _induction_occurrence_forgot_bos(pattern: torch.Tensor, period: int) -> torch.Tensor:
    return _occurrence_loop(pattern, period, period, lowest_key=1)  # queries from `period` too


def _induction_one_back_forgot_bos(pattern: torch.Tensor, period: int) -> torch.Tensor:
    # the stripe one period back read as a diagonal, over every row from `period` on
    return pattern.diagonal(offset=1 - period, dim1=-2, dim2=-1)[..., 1:].mean(-1)


def _induction_single_diagonal(pattern: torch.Tensor, period: int) -> torch.Tensor:
    # the textbook stripe copied as one diagonal: every row it crosses, one period back only
    return pattern.diagonal(offset=-(period - 1), dim1=-2, dim2=-1).mean(-1)


def _find_reference(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    return best_head(induction_score(attention, period, start=1, check_rows=False))


def _find_previous(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    return best_head(previous_token_score(attention, check_rows=False))


def _find_sink(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    return best_head(first_token_score(attention, check_rows=False))


def _find_duplicate(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    stack = torch.stack(attention)  # (L, h, T, T)
    queries, keys = induction_positions(stack.shape[-1], period, start=1)
    return best_head(stack[..., queries, keys - 1].mean(-1))


def _find_swapped(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    layer, head = _find_reference(attention, period)
    return head, layer


def _find_forgot_bos(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    return best_head(induction_score(attention, period, start=0, check_rows=False))


def _find_last_layer_only(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    scores = induction_score(attention[-1], period, start=1, check_rows=False)  # (h,): last layer only
    return len(attention) - 1, int(scores.argmax())


def _find_last_layer_renumbered(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    scores = induction_score(attention[-1:], period, start=1, check_rows=False)  # (1, h): a list of its own
    return best_head(scores)  # layer 0 of that list, not the model's last layer


def _find_flat_index(attention: list[torch.Tensor], period: int) -> int:
    scores = induction_score(attention, period, start=1, check_rows=False)  # (L, h)
    return int(scores.argmax())  # an index into the flattened (L * h) scores


def _find_one_based(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    layer, head = _find_reference(attention, period)
    return layer + 1, head + 1  # counted from 1, as in 'layer 1, head 1'


def _find_only_second_copy(attention: list[torch.Tensor], period: int) -> tuple[int, int]:
    return best_head(torch.stack([_induction_only_second_copy(p, period) for p in attention]))


REFERENCES = {
    'PREVIOUS_TOKEN_SCORE': _previous_token_reference,
    'INDUCTION_SCORE': _induction_reference,
    'FIND_INDUCTION_HEAD': _find_reference,
}

MISTAKES = {
    'PREVIOUS_TOKEN_SCORE': {
        'diagonal': _prev_diagonal,
        'diagonal_all_queries': _prev_diagonal_all_queries,
        'super_diagonal': _prev_super_diagonal,
        'includes_position_zero': _prev_includes_position_zero,
        'clamped_position_zero': _prev_clamped_position_zero,
        'diagonal_default_dims': _prev_diagonal_default_dims,
        'mean_over_heads': _prev_mean_over_heads,
        'divided_by_T': _prev_divided_by_T,
        'last_query_dropped': _prev_last_query_dropped,
        'sum_not_mean': _prev_sum_not_mean,
        'half_precision': _prev_half_precision,
    },
    'INDUCTION_SCORE': {
        'earlier_occurrence': _induction_duplicate,
        'previous_token': _induction_previous,
        'forgot_bos': _induction_forgot_bos,
        'only_second_copy': _induction_only_second_copy,
        'all_rows': _induction_all_rows,
        'mean_over_copies': _induction_mean_over_copies,
        'bos_as_occurrence': _induction_bos_as_occurrence,
        'missed_key_two': _induction_missed_key_two,
        'max_over_copies': _induction_max_over_copies,
        'last_query_dropped': _induction_last_query_dropped,
        'sum_over_queries': _induction_sum_over_queries,
        'occurrence_from_key_two': _induction_occurrence_from_key_two,
        'occurrence_one_back': _induction_occurrence_one_back,
        'occurrence_forgot_bos': _induction_occurrence_forgot_bos,
        'one_back_forgot_bos': _induction_one_back_forgot_bos,
        'single_diagonal': _induction_single_diagonal,
    },
    'FIND_INDUCTION_HEAD': {
        'previous_token_head': _find_previous,
        'sink_head': _find_sink,
        'duplicate_token_head': _find_duplicate,
        'swapped_layer_head': _find_swapped,
        'last_layer_only': _find_last_layer_only,
        'last_layer_renumbered': _find_last_layer_renumbered,
        'forgot_bos': _find_forgot_bos,
        'flat_index': _find_flat_index,
        'one_based': _find_one_based,
        'only_second_copy': _find_only_second_copy,
    },
}
