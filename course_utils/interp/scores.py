"""Head scores: one number per attention head saying how much it behaves like a known role.

Every score reads attention weights, shaped like those the course's models return:

* ``(B, h, T, T)``: one layer, a batch of sequences;
* ``(h, T, T)``: one layer, one sequence;
* a list (or tuple) over layers of either, all the same shape.

and returns a tensor of scores, ``(h,)`` for one layer or ``(L, h)`` for a list of layers,
each a mean of attention weights, so between 0 and 1:

* :func:`previous_token_score`: mean weight from position i to position i-1;
* :func:`first_token_score`: mean weight to position 0 (an *attention sink*);
* :func:`induction_score`: on a sequence of random tokens repeated with period ``n``, the
  weight each token of a later copy puts on the tokens that came right *after* its earlier
  occurrences (every earlier copy, not only the last one), averaged over those queries:
  the prefix-matching score of Olsson et al., 2022;
* :func:`agreement_score`: mean weight from one query position per sequence (for the
  agreement task: the position that *predicts* the verb) to one key (the subject).

:func:`chance_level` gives what a head that spreads its weight evenly would score, and
:func:`role_verdicts` words a verdict with its margin to the threshold and its multiple of
chance, so that a score just under a threshold is not read as "absent".

Query position 0 is left out of the first two: under a causal mask it has no previous
token and can only attend to itself, so it says nothing about the head.

Bad input: every list or dict the caller gives (heads, orders, cases, scores, ...) is read through
``items_of`` / ``dict_of``, so one whose ``len()``, iteration or lookup raises is a TypeError
naming the argument, its own error chained, before any tensor work.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from ..attention.masks import causal_mask
from ..attention.validation import (
    MAX_DECIMALS,
    check_choice,
    check_fits_in_memory,
    check_flag,
    check_holds_values,
    check_int,
    check_names_free,
    check_real,
    dict_of,
    items_of,
    plain_str,
    shown,
)

__all__ = [
    "previous_token_score",
    "previous_token_by_position",
    "first_token_score",
    "induction_score",
    "agreement_score",
    "attention_mass",
    "mean_by_group",
    "head_score_table",
    "HEAD_TABLE_COLUMNS",
    "best_head",
    "chance_level",
    "verdict",
    "role_verdicts",
    "induction_positions",
    "induction_key_mask",
    "ideal_pattern",
    "IDEAL_ROLES",
]

AttentionInput = torch.Tensor | np.ndarray | Sequence[torch.Tensor | np.ndarray]


def _check_decimals(decimals: object) -> int:
    return check_int(decimals, "decimals", minimum=0, maximum=MAX_DECIMALS)


def _check_square_fits(seq_len: int, name: str, itemsize: int, copies: int, what: str) -> None:
    """A ``(T, T)`` tensor (``copies`` of them, ``itemsize`` bytes an entry) must fit in memory:
    refused under ``name`` before the allocator fails with a raw error."""
    check_fits_in_memory(copies * itemsize * seq_len * seq_len, name,
                         f"{copies} (T, T) {what} at T = {seq_len:,}")


def _to_tensor(x: object, what: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor or numpy array, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{what} must hold floating-point attention weights, got dtype {x.dtype}")
    check_holds_values(x, what)
    return x.detach().to("cpu", torch.float64)


def _as_layer_stack(weights: AttentionInput, *, check_rows: bool = True,
                   atol: float = 1e-3) -> tuple[torch.Tensor, bool]:
    """Bring attention weights to one shape ``(L, B, h, T, T)`` (float64, CPU).

    Returns the stack and whether the input was a list over layers (so the caller knows
    whether to return ``(L, h)`` or ``(h,)``). With ``check_rows`` each row must be
    non-negative and sum to 1 within ``atol``.
    """
    check_flag(check_rows, "check_rows")
    is_list = isinstance(weights, (list, tuple))
    if is_list:
        weights = items_of(weights, "weights", "a list of attention tensors, one per layer")  # its len()
        if len(weights) == 0:
            raise ValueError("weights must be one attention tensor per layer, got an empty list")
        layers = [_to_tensor(w, f"layer {i}'s attention weights") for i, w in enumerate(weights)]
        shapes = {tuple(w.shape) for w in layers}
        if len(shapes) != 1:
            raise ValueError(f"every layer must have the same shape, got shapes {sorted(shapes)}")
    else:
        layers = [_to_tensor(weights, "attention weights")]
    first = layers[0]
    if first.ndim not in (3, 4):
        raise ValueError("expected attention weights shaped (B, h, T, T) or (h, T, T) "
                         f"(or a list of those over layers), got shape {tuple(first.shape)}")
    if first.shape[-1] != first.shape[-2]:
        raise ValueError("head scores need self-attention weights, square in the last two "
                         f"dimensions (T, T); got {tuple(first.shape[-2:])}")
    if first.shape[-1] < 2:
        raise ValueError(f"need at least 2 positions to score a head, got T = {first.shape[-1]}")
    if first.numel() == 0:  # B = 0 or h = 0: every mean below would be over nothing
        raise ValueError(f"weights must hold at least one sequence and one head, got shape "
                         f"{tuple(first.shape)} ((B, h, T, T) or (h, T, T)): a score averages over them")
    stack = torch.stack([w if w.ndim == 4 else w.unsqueeze(0) for w in layers])  # (L, B, h, T, T)
    if check_rows:
        if not torch.isfinite(stack).all():
            layer, _, head, query, _ = (~torch.isfinite(stack)).nonzero()[0].tolist()
            raise ValueError(f"attention weights contain NaN or infinity (first at layer {layer}, head "
                             f"{head}, query {query}); check_rows=False skips this test")
        if (stack < -atol).any():
            raise ValueError(f"attention weights must be non-negative; the smallest is {stack.min():.4g}")
        sums = stack.sum(-1)  # (L, B, h, T)
        worst = sums.flatten()[(sums - 1).abs().argmax()].item()  # the row sum farthest from 1
        if abs(worst - 1) > atol:
            raise ValueError("each row of attention weights (one query, all keys) must sum to 1; "
                             f"one row sums to {worst:.4g}. Did you pass scores before the softmax, "
                             "or the transpose? (check_rows=False skips this test)")
    return stack, is_list


def _finish(per_head: torch.Tensor, is_list: bool) -> torch.Tensor:
    """``(L, h)`` scores -> ``(L, h)`` for a list input, ``(h,)`` for a single layer."""
    return per_head if is_list else per_head[0]


def previous_token_score(weights: AttentionInput, *, check_rows: bool = True) -> torch.Tensor:
    """Mean attention from each position i >= 1 to position i-1 (the sub-diagonal).

    Returns ``(h,)`` for one layer, ``(L, h)`` for a list over layers. A head that always
    looks one token back scores 1.
    """
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    sub_diagonal = stack.diagonal(offset=-1, dim1=-2, dim2=-1)  # (L, B, h, T-1): A[i, i-1]
    return _finish(sub_diagonal.mean(dim=(1, 3)), is_list)


def first_token_score(weights: AttentionInput, *, check_rows: bool = True) -> torch.Tensor:
    """Mean attention from each position i >= 1 to position 0 (the first token, e.g. BOS).

    High values mark an *attention sink*: a head parking its weight on the first token.
    Returns ``(h,)`` or ``(L, h)``.
    """
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    to_first = stack[..., 1:, 0]  # (L, B, h, T-1)
    return _finish(to_first.mean(dim=(1, 3)), is_list)


def _check_induction_layout(seq_len: int, period: int, start: int) -> None:
    seq_len, period, start = (check_int(value, name)
                              for name, value in (("seq_len", seq_len), ("period", period), ("start", start)))
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    if period < 2:
        raise ValueError(f"period must be at least 2 (with period 1 the 'next' token is the query "
                         f"itself), got {period}")
    if start < 0:
        raise ValueError(f"start must be >= 0, got {start}")
    if start + period >= seq_len:
        raise ValueError(f"no repeated copy to score: the first copy spans positions {start}.."
                         f"{start + period - 1} but the sequence has only {seq_len} positions "
                         f"(need T > start + period)")


def induction_positions(seq_len: int, period: int, *, start: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Queries of the repeated part and, for each, the key after its *nearest* earlier occurrence.

    Returns ``(queries, keys)``, each ``(n_q,)``: the tokens at ``start .. start+period-1``
    repeat from ``start+period`` on; for a query q the key is ``q - period + 1``, the token
    that followed the same token one period earlier. (From the third copy on there are
    more such keys, one per earlier copy: :func:`induction_key_mask` marks them all.)
    """
    _check_induction_layout(seq_len, period, start)
    check_fits_in_memory(2 * 8 * (seq_len - start - period), "seq_len",
                         f"two int64 position lists of {seq_len - start - period:,} queries")
    queries = torch.arange(start + period, seq_len)
    return queries, queries - period + 1


def induction_key_mask(seq_len: int, period: int, *, start: int) -> torch.Tensor:
    """``(T, T)`` bool: ``mask[q, k]`` is True when key k follows an earlier occurrence of
    query q's token, i.e. ``k = q - j * period + 1`` for some ``j >= 1`` with
    ``k - 1 >= start`` (the occurrence lies in the data, not before ``start``).

    Rows of the first copy (``q < start + period``) are all False: nothing to copy yet.
    """
    _check_induction_layout(seq_len, period, start)
    _check_square_fits(seq_len, "seq_len", 8, 3, "int64 distances and bool masks")
    q = torch.arange(seq_len).unsqueeze(1)  # (T, 1)
    k = torch.arange(seq_len).unsqueeze(0)  # (1, T)
    distance = q - (k - 1)  # how far back the occurrence k - 1 lies
    return (distance >= period) & (distance % period == 0) & (k - 1 >= start)


#: :func:`induction_score`'s ``average_over``; anything else is refused by validation.check_choice (a
#: TypeError for a value that is no str, a ValueError for another str).
AVERAGE_OVER = ("repeated queries", "all rows")


def induction_score(weights: AttentionInput, period: int, *, start: int,
                    average_over: str = "repeated queries", check_rows: bool = True) -> torch.Tensor:
    """Weight from each token of a repeated copy to the tokens after its earlier occurrences.

    Use it on random tokens repeated: positions ``start .. start+period-1`` hold the first
    copy (``start=1`` skips a BOS token at position 0), the rest repeats them. For each query
    q of a later copy, the weights on keys ``q - j*period + 1`` (``j = 1, 2, ...``, one per
    earlier copy) are summed, then averaged over queries and sequences. A perfect induction
    head scores 1 however many copies the sequence holds. Returns ``(h,)`` or ``(L, h)``.

    ``average_over="all rows"`` divides the same sum by all ``T`` rows instead (first copy
    and ``BOS`` included), as TransformerLens's ``detect_head`` does: a perfect head then
    scores only ``(T - start - period) / T``, so a threshold does not carry across the two.
    """
    average_over = check_choice(average_over, "average_over", AVERAGE_OVER)
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    queries, _ = induction_positions(stack.shape[-1], period, start=start)
    stripes = induction_key_mask(stack.shape[-1], period, start=start).to(stack.dtype)  # (T, T)
    per_row = (stack * stripes).sum(-1)  # (L, B, h, T): zero on rows with no earlier copy
    if average_over == "all rows":
        return _finish(per_row.mean(dim=(1, 3)), is_list)
    return _finish(per_row[..., queries].mean(dim=(1, 3)), is_list)


def previous_token_by_position(weights: AttentionInput, *, check_rows: bool = True) -> torch.Tensor:
    """Attention from query i to key i-1, averaged over the batch only: one value per position.

    Returns ``(h, T-1)`` for one layer or ``(L, h, T-1)`` for a list; entry ``i - 1`` is
    query ``i``. Its mean over the last axis is :func:`previous_token_score`; kept apart,
    it shows *where* in the sequence a head looks back.
    """
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    sub_diagonal = stack.diagonal(offset=-1, dim1=-2, dim2=-1)  # (L, B, h, T-1)
    by_position = sub_diagonal.mean(dim=1)  # (L, h, T-1)
    return by_position if is_list else by_position[0]


def _positions(positions: int | Sequence[int] | torch.Tensor, batch: int, seq_len: int,
               name: str) -> torch.Tensor:
    """``positions`` (an int for every sequence, or one per sequence) as a long ``(batch,)``
    tensor in ``0..seq_len-1``. Ints follow :func:`check_int` (a bool, even inside a list, is
    refused: torch would read True as position 1)."""
    if isinstance(positions, (bool, numbers.Integral)):  # a NumPy int too
        positions = [check_int(positions, name)] * batch
    if isinstance(positions, (list, tuple)):
        positions = items_of(positions, name, "an int or a sequence of ints")
        for i, position in enumerate(positions):
            if not isinstance(position, (list, tuple, np.ndarray, torch.Tensor)):  # nested: the shape check
                position = check_int(position, f"{name}[{i}]")
    if isinstance(positions, (str, bytes)):
        raise TypeError(f"{name} must be an int or a sequence of ints, got {type(positions).__name__} "
                        f"{shown(positions, 40)}")
    try:
        tensor = torch.as_tensor(positions)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{name} must be an int or a sequence of ints, got {type(positions).__name__} "
                        f"{shown(positions, 60)}") from None
    check_holds_values(tensor, name)
    tensor = tensor.cpu()  # the weights are stacked on the CPU
    if tensor.numel() == 0 and batch:
        raise ValueError(f"{name} must hold one position per sequence: expected {batch}, got none "
                         f"(an empty {type(positions).__name__})")
    if tensor.is_floating_point() or tensor.dtype == torch.bool:
        raise TypeError(f"{name} must be integers, got dtype {tensor.dtype}")
    if tensor.ndim != 1 or tensor.numel() != batch:
        raise ValueError(f"{name} must hold one position per sequence: expected {batch}, "
                         f"got shape {tuple(tensor.shape)}")
    if (tensor < 0).any() or (tensor >= seq_len).any():
        raise ValueError(f"{name} must lie in 0..{seq_len - 1} (T = {seq_len}), got {tensor.tolist()}")
    return tensor.long()


def agreement_score(weights: AttentionInput, query_positions: int | Sequence[int] | torch.Tensor,
                    subject_positions: int | Sequence[int] | torch.Tensor, *,
                    check_rows: bool = True) -> torch.Tensor:
    """Mean attention from one query position to one key (the subject), one pair per sequence.

    A causal language model chooses the verb at the position *before* it, the one whose
    logits predict it: pass that position (``AgreementBatch.predict_pos``) as
    ``query_positions`` to read the attention that informs the choice. Positions are ints
    (the same for every sequence) or one per sequence, ``(B,)``. Returns ``(h,)`` or ``(L, h)``.
    """
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    batch, seq_len = stack.shape[1], stack.shape[-1]
    queries = _positions(query_positions, batch, seq_len, "query_positions")
    subjects = _positions(subject_positions, batch, seq_len, "subject_positions")
    later = (subjects > queries).nonzero().flatten()
    if later.numel():
        b = int(later[0])
        raise ValueError(f"subject_positions must not come after query_positions: a causal model's query "
                         f"at position i reads keys 0..i only, so the score would be 0; sequence {b} has "
                         f"subject {int(subjects[b])} after query {int(queries[b])}")
    rows = torch.arange(batch)
    by_sequence = stack.permute(1, 3, 4, 0, 2)  # (B, T, T, L, h)
    picked = by_sequence[rows, queries, subjects]  # (B, L, h): A[b, :, :, query_b, subject_b]
    return _finish(picked.mean(dim=0), is_list)


def attention_mass(weights: AttentionInput, query_positions: int | Sequence[int] | torch.Tensor,
                   key_mask: torch.Tensor, *, per_sequence: bool = False,
                   check_rows: bool = True) -> torch.Tensor:
    """Total weight that one query per sequence puts on a set of keys, averaged over sequences.

    ``key_mask`` is ``(B, T)`` (or ``(T,)``, the same for every sequence) bool: the keys to
    count. With a single key per sequence this is :func:`agreement_score`. Returns ``(h,)``
    or ``(L, h)``; with ``per_sequence=True`` no average is taken: ``(B, h)`` or ``(B, L, h)``.
    """
    check_flag(per_sequence, "per_sequence")
    stack, is_list = _as_layer_stack(weights, check_rows=check_rows)
    batch, seq_len = stack.shape[1], stack.shape[-1]
    queries = _positions(query_positions, batch, seq_len, "query_positions")
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool:
        raise TypeError(f"key_mask must be a bool tensor (B, T), got {type(key_mask).__name__}"
                        + (f" of dtype {key_mask.dtype}" if isinstance(key_mask, torch.Tensor) else ""))
    check_holds_values(key_mask, "key_mask")
    key_mask = key_mask.cpu()  # the weights are stacked on the CPU
    if key_mask.ndim == 1:
        key_mask = key_mask.unsqueeze(0).expand(batch, -1)
    if tuple(key_mask.shape) != (batch, seq_len):
        raise ValueError(f"key_mask must have shape (B, T) = {(batch, seq_len)}, got {tuple(key_mask.shape)}")
    rows = stack.permute(1, 3, 0, 2, 4)[torch.arange(batch), queries]  # (B, L, h, T): each query's row
    mass = (rows * key_mask[:, None, None, :].to(rows.dtype)).sum(-1)  # (B, L, h)
    if per_sequence:
        return mass if is_list else mass[:, 0]
    return _finish(mass.mean(dim=0), is_list)


def mean_by_group(values: dict[str, torch.Tensor | Sequence[float]], groups: dict[str, Sequence], *,
                  decimals: int = 3) -> pd.DataFrame:
    """Average each per-sequence value within groups of sequences, with a count column.

    ``values`` maps a column name to ``(N,)`` numbers (one per sequence); ``groups`` maps a
    grouping name (``"template"``, ``"subject"``) to ``N`` labels. Returns one row per
    group (sorted by label), a ``"sentences"`` count first, then the mean of each value. Each
    label is hashable (a str, number or tuple) and the labels of a grouping sortable together.
    A value column named ``"sentences"`` or like a grouping is refused, a ValueError naming it:
    it would overwrite the count, or the grouping's labels (the rows grouped by the values); so
    is a grouping named ``"sentences"`` (its index level would shadow the count column).
    """
    for name, given in (("values", values), ("groups", groups)):
        if not isinstance(given, dict):
            raise TypeError(f"{name} must be a dict {{column name: one entry per sequence}}, got "
                            f"{type(given).__name__} {shown(given, 60)}")
    _check_decimals(decimals)  # a negative one rounds the means (and counts) to tens
    for name, given, what in (("values", values, "value column"), ("groups", groups, "grouping")):
        if not given:
            raise ValueError(f"{name} must hold at least one {what} (mean_by_group averages values "
                             "within groups), got an empty dict")
    check_names_free(groups, "groups", ("sentences",), "the count column 'sentences' (reset_index would "
                     "fail on a grouping of that name)")
    check_names_free(values, "values", ("sentences", *(plain_str(g, "groups' name") for g in groups
                                                       if issubclass(type(g), str))),
                     "the count column 'sentences' and the groupings of groups")
    columns = {name: _value_column(v, f"values[{shown(name)}]") for name, v in values.items()}
    labels = {name: _label_column(g, f"groups[{shown(name)}]") for name, g in groups.items()}
    lengths = {len(v) for v in columns.values()} | {len(g) for g in labels.values()}
    if len(lengths) != 1:
        raise ValueError("every value and every grouping needs one entry per sequence; got lengths "
                         + ", ".join(f"{k}={len(v)}" for k, v in (columns | labels).items()))
    frame = pd.DataFrame({**labels, **columns})
    grouped = frame.groupby(list(labels), sort=True)
    try:  # the rows are sorted by label: pandas sorts what it can, and fails inside on the rest
        table, counts = grouped[list(columns)].mean(), grouped.size()
    except TypeError as err:
        raise TypeError(f"the labels of groups {list(labels)} must be sortable against each other (one row "
                        f"per group, sorted by label), got {err}") from None
    table.insert(0, "sentences", counts)
    return table.round(decimals)


def _value_column(given: object, name: str) -> np.ndarray:
    """One number per sequence as float64, or a TypeError naming ``name`` and what arrived."""
    if isinstance(given, (str, bytes, dict)):
        raise TypeError(f"{name} must be numbers, one per sequence (a tensor or list), got "
                        f"{type(given).__name__} {shown(given, 60)}")
    try:
        column = np.asarray(torch.as_tensor(given, dtype=torch.float64))
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be numbers, one per sequence (a tensor or list), got "
                        f"{type(given).__name__} {shown(given, 60)} ({err})") from None
    if column.ndim != 1:  # a lone number has no length to match the groupings against
        raise ValueError(f"{name} must be 1-D (one number per sequence), got shape {column.shape} "
                         f"from {type(given).__name__} {shown(given, 60)}")
    if np.isnan(column).any():  # pandas' mean skips NaN: the group's mean and count would disagree
        raise ValueError(f"{name} must hold numbers, got NaN at sequence {int(np.isnan(column).argmax())} "
                         f"(pandas would leave it out of its group's mean, but count it as a sentence)")
    return column


def _label_column(given: object, name: str) -> list:
    """One label per sequence; a missing label (NaN, None) is refused by position: pandas would
    drop its rows from every group without a word."""
    wrong = TypeError(f"{name} must be a sequence of labels, one per sequence, got "
                      f"{type(given).__name__} {shown(given, 60)}")
    if isinstance(given, (str, bytes, dict)):
        raise wrong
    try:
        labels = given.tolist() if isinstance(given, np.ndarray | pd.Series | torch.Tensor) else list(given)
    except TypeError:  # not iterable
        raise wrong from None
    missing = [i for i, label in enumerate(labels) if pd.api.types.is_scalar(label) and pd.isna(label)]
    if missing:
        raise ValueError(f"{name} has no label (NaN or None) at positions {missing[:6]}"
                         f"{' ...' if len(missing) > 6 else ''}: those sequences would be left out of "
                         "every group; give each sequence a label")
    for i, label in enumerate(labels):  # pandas groups by hashing: an unhashable label fails inside it
        try:
            hash(label)
        except TypeError:
            raise TypeError(f"{name}[{i}] must be a label usable as a group key (hashable: a str, number or "
                            f"tuple), got {type(label).__name__} {shown(label, 60)}") from None
    return labels


def _refuse_nan(grid: torch.Tensor, name: str) -> None:
    """A ranking of heads cannot place a NaN or infinite score: name the heads that hold one."""
    bad = ~torch.isfinite(grid)
    if bad.any():
        heads = [f"L{layer}H{head}" for layer, head in bad.nonzero().tolist()]
        found = [word for word, held in (("NaN", torch.isnan(grid)), ("inf", torch.isposinf(grid)),
                                         ("-inf", torch.isneginf(grid))) if held.any()]
        raise ValueError(f"{name} holds {' and '.join(found)} for {', '.join(heads[:6])}"
                         f"{' ...' if len(heads) > 6 else ''}: a score must be a finite number to be ranked "
                         "(a NaN: was a head's attention NaN, or a mean taken over no position? an infinity "
                         "would rank first or last whatever the other heads score)")


#: The columns :func:`head_score_table` adds beside the roles' (``"head"`` is its index): no role
#: may be named like one of them.
HEAD_TABLE_COLUMNS = ("head", "layer", "index", "top role", "top score")


def head_score_table(scores: dict[str, torch.Tensor], *, decimals: int = 3) -> pd.DataFrame:
    """One row per head: its scores, the role with the highest score, and that score.

    ``scores`` maps a role name to an ``(L, h)`` tensor (or ``(h,)`` for one layer). The table
    is sorted by that top score, highest first, and rounded to ``decimals``. A role named like
    one of the table's own columns (:data:`HEAD_TABLE_COLUMNS`: ``"head"``, ``"layer"``,
    ``"index"``, ``"top role"``, ``"top score"``) is refused, a ValueError naming it: its scores
    would overwrite that column, or the column them.
    """
    scores = dict_of(scores, "scores", "a non-empty dict {role name: (L, h) tensor}")
    if not isinstance(scores, dict) or not scores:
        raise ValueError(f"scores must be a non-empty dict {{role name: (L, h) tensor}}, got "
                         f"{type(scores).__name__} {shown(scores, 60)}")
    check_names_free(scores, "scores", HEAD_TABLE_COLUMNS, "its own columns (each head's name, layer, "
                     "index, top role and top score)")
    _check_decimals(decimals)
    grids = {}
    for role, value in scores.items():
        grid = _as_grid(value, f"scores[{shown(role)}]")
        if grid.ndim == 1:
            grid = grid.unsqueeze(0)
        if grid.ndim != 2:
            raise ValueError(f"scores[{shown(role)}] must be shaped (L, h) or (h,), got {tuple(grid.shape)}")
        _refuse_nan(grid, f"scores[{shown(role)}]")
        grids[role] = grid
    shapes = {tuple(g.shape) for g in grids.values()}
    if len(shapes) != 1:
        raise ValueError(f"every role's scores must have the same (L, h) shape, got {sorted(shapes)}")
    num_layers, num_heads = next(iter(shapes))
    rows = []
    for layer in range(num_layers):
        for head in range(num_heads):
            row = {"head": f"L{layer}H{head}", "layer": layer, "index": head}
            row.update({role: float(grid[layer, head]) for role, grid in grids.items()})
            rows.append(row)
    table = pd.DataFrame(rows).set_index("head")
    roles = list(grids)
    table["top role"] = table[roles].idxmax(axis=1)
    table["top score"] = table[roles].max(axis=1)
    table = table.sort_values(["top score", "layer", "index"], ascending=[False, True, True])
    return table.round(decimals)


def _as_grid(value: object, name: str) -> torch.Tensor:
    """Scores as a float64 tensor; anything that is not numbers is refused by name."""
    if isinstance(value, (str, bytes, dict)):
        raise TypeError(f"{name} must be a tensor of scores (L, h) or (h,), got {type(value).__name__}")
    try:
        grid = torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as err:
        raise TypeError(f"{name} must be a tensor of scores (L, h) or (h,), got {type(value).__name__} "
                        f"({err})") from None
    if grid.dtype == torch.bool or grid.is_complex():
        raise TypeError(f"{name} must hold real scores, got dtype {grid.dtype}")
    check_holds_values(grid, name)
    return grid.to("cpu", torch.float64)


def best_head(scores: torch.Tensor) -> tuple[int, int]:
    """``(layer, head)`` of the highest score in an ``(L, h)`` grid (first one on ties); a
    single layer's ``(h,)`` scores count as layer 0. A NaN or infinite score is refused (naming
    its head): it would be reported as the best, or rank first whatever the others score."""
    grid = _as_grid(scores, "scores")
    given = tuple(grid.shape)
    if grid.ndim == 1:  # one layer's (h,) scores
        grid = grid.unsqueeze(0)
    if grid.ndim != 2 or grid.numel() == 0:
        raise ValueError(f"expected an (L, h) grid (or (h,) row) of scores, got shape {given}")
    _refuse_nan(grid, "scores")
    flat = int(torch.argmax(grid))
    return divmod(flat, grid.shape[1])


#: :func:`ideal_pattern`'s roles; any other ``role`` is refused by validation.check_choice (a
#: TypeError for a value that is no str, a ValueError for another str).
IDEAL_ROLES = ("previous token", "first token", "induction", "uniform", "self")


def ideal_pattern(role: str, seq_len: int, *, period: int | None = None, start: int = 0) -> torch.Tensor:
    """A hand-built causal attention pattern ``(T, T)`` of a head that plays ``role`` perfectly.

    Roles: ``"previous token"`` (i -> i-1), ``"first token"`` (i -> 0), ``"induction"``
    (a query in a repeated copy -> ``q - period + 1``, the token after its nearest earlier
    occurrence; queries of the first copy -> 0), ``"uniform"``
    (1/(i+1) on every allowed key) and ``"self"`` (i -> i). Row 0 always attends to itself.

    ``period`` and ``start`` are read by ``"induction"`` only; the other roles ignore them (they
    are still checked to be of the right kind). They are accepted, not refused, because lesson 5
    builds every role's pattern in one loop with the same keywords
    (``ideal_pattern(role, T, period=5, start=1) for role in ROLES``).
    """
    role = check_choice(role, "role", IDEAL_ROLES)
    seq_len = check_int(seq_len, "seq_len", minimum=2)
    _check_period_start(period, start)  # used by "induction" only, but never of the wrong kind
    _check_square_fits(seq_len, "seq_len", 8, 2, "float64 patterns")
    pattern = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    rows = torch.arange(seq_len)
    if role == "previous token":
        pattern[rows, (rows - 1).clamp(min=0)] = 1.0
    elif role == "first token":
        pattern[:, 0] = 1.0
    elif role == "self":
        pattern[rows, rows] = 1.0
    elif role == "uniform":
        allowed = causal_mask(seq_len).to(torch.float64)  # (T, T): 1 where the query may look
        pattern = allowed / allowed.sum(-1, keepdim=True)
    else:
        if period is None:
            raise ValueError("the induction pattern needs period= (the length of one copy)")
        queries, keys = induction_positions(seq_len, period, start=start)
        pattern[:, 0] = 1.0
        pattern[queries, 0] = 0.0
        pattern[queries, keys] = 1.0
    return pattern


SCORED_ROLES = {"previous token": previous_token_score, "first token": first_token_score,
                "induction": induction_score}


def chance_level(role: str, seq_len: int, *, period: int | None = None, start: int = 1) -> float:
    """What a *uniform* causal head (query i spreads 1/(i+1) over keys 0..i) scores on ``role``.

    ``role`` is ``"previous token"``, ``"first token"`` or ``"induction"`` (which needs
    ``period`` and uses ``start``). Compare a trained head's score with this baseline:
    0.3 means little when chance is 0.25, and a lot when chance is 0.05.

    The other roles ignore ``period`` and ``start`` (still checked to be of the right kind):
    they are accepted, not refused, because lesson 5 asks every role's chance level in one
    loop with the same keywords (``chance_level(role, T, period=PERIOD) for role in ...``).
    """
    role = check_choice(role, "role", tuple(SCORED_ROLES))
    _check_period_start(period, start)  # used by "induction" only, but never of the wrong kind
    uniform = ideal_pattern("uniform", seq_len)[None]  # (1, T, T): one head
    if role == "induction":
        if period is None:
            raise ValueError("the induction chance level needs period= (the length of one copy)")
        return float(induction_score(uniform, period, start=start))
    return float(SCORED_ROLES[role](uniform))


def _check_period_start(period: object, start: object) -> None:
    """``period`` (None or an int >= 1) and ``start`` (an int >= 0), also for the roles that do not
    read them: a ``period="4"`` passed with ``role="previous token"`` is a mistake all the same."""
    if period is not None:
        period = check_int(period, "period", minimum=1)
    start = check_int(start, "start", minimum=0)


#: How far a role score may stray outside [0, 1] by float rounding (a sum of shares of attention).
SCORE_SLACK = 1e-6


def _check_threshold(threshold: object) -> float:
    threshold = check_real(threshold, "threshold")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must lie in (0, 1], got {threshold}")
    return threshold


def verdict(score: float, *, threshold: float = 0.5, margin: float = 0.05) -> str:
    """``"present"`` (score >= threshold + margin), ``"absent"`` (< threshold - margin), else
    ``"borderline"``: a score within ``margin`` of the line is too close to call. ``score`` is a
    role score (a share of attention, in [0, 1]); a number outside is refused, as NaN is, and so
    is a ``margin`` that would leave no score "absent" or "present"."""
    score = check_real(score, "score")  # NaN is refused: it is neither present nor absent
    if not -SCORE_SLACK <= score <= 1.0 + SCORE_SLACK:
        raise ValueError(f"score must be a role score in [0, 1] (a share of attention), got {shown(score)}")
    threshold = _check_threshold(threshold)  # plain floats (a float subclass's repr may raise)
    margin = check_real(margin, "margin")
    if not 0.0 <= margin < threshold:
        raise ValueError(f"margin must lie in [0, threshold={threshold}), got {margin}")
    if threshold + margin > 1.0:  # no role score (at most 1) could then be "present"
        raise ValueError(f"margin must keep threshold + margin <= 1 (a role score is at most 1, so no "
                         f"head could be called present), got threshold={threshold} + margin={margin}")
    if score >= threshold + margin:
        return "present"
    if score < threshold - margin:
        return "absent"
    return "borderline"


def _check_roles(roles: list, chance: dict) -> None:
    """Each role is one the course scores (:data:`SCORED_ROLES`) or one ``chance`` gives a level
    for (a role of your own), and each ``chance`` entry names a scored role: a misspelt name
    would otherwise get a confident verdict, or no chance level, without a word."""
    import difflib

    for role in roles:
        if role not in SCORED_ROLES and role not in chance:
            close = difflib.get_close_matches(str(role), list(SCORED_ROLES), n=1, cutoff=0.6)
            raise ValueError(f"scores has the role {shown(role)}, which is none of the course's roles "
                             f"{tuple(SCORED_ROLES)}" + (f" (did you mean {close[0]!r}?)" if close else "")
                             + "; a role of your own needs its chance level in chance={role: level}")
    extra = [r for r in chance if r not in roles]
    if extra:
        raise ValueError(f"chance has levels for {extra}, which scores does not hold (its roles: {roles})")


def role_verdicts(scores: dict[str, torch.Tensor], *, threshold: float = 0.5, margin: float = 0.05,
                  chance: dict[str, float] | None = None, decimals: int = 3) -> list[str]:
    """One sentence per role: its top head, the runner-up, and a worded verdict with margins.

    A role is *present* when its top head scores at least ``threshold + margin``, *absent*
    below ``threshold - margin`` and *borderline* in between. The distance to the threshold
    is printed, and with ``chance`` (role -> score of a uniform head) the multiple of chance.
    A role must be one of :data:`SCORED_ROLES` or have a ``chance`` entry (a role of your own),
    named unlike the columns of :func:`head_score_table` (:data:`HEAD_TABLE_COLUMNS`: a ValueError
    naming it); a chance level must lie below ``threshold`` (else a uniform head would pass it).
    """
    threshold, decimals = _check_threshold(threshold), _check_decimals(decimals)  # plain numbers (a
    margin = check_real(margin, "margin")  # subclass's repr raised in the sentences: battery 30)
    scores = dict_of(scores, "scores", "a non-empty dict {role name: (L, h) tensor}")
    chance = dict_of(chance, "chance", "a dict {role: chance score} or None")
    if chance is not None and not isinstance(chance, dict):
        raise TypeError(f"chance must be a dict {{role: chance score}} or None, got {type(chance).__name__}")
    for role, value in (chance or {}).items():
        value = check_real(value, f"chance[{shown(role)}]")
        if not 0.0 < value <= 1.0:  # what a uniform head scores: a share of its attention
            raise ValueError(f"chance[{shown(role)}] must be a score in (0, 1] (a uniform head's share of "
                             f"attention, see chance_level), got {shown(value)}")
        if value >= threshold:  # a uniform head would be called present: the verdict says nothing
            raise ValueError(f"chance[{shown(role)}] = {shown(value)} is at or above threshold = "
                             f"{threshold}: a head "
                             f"spreading its attention evenly would already pass the line; raise threshold "
                             f"above the chance level")
    table = head_score_table(scores, decimals=12)
    chance = chance or {}
    _check_roles(list(scores), chance)
    sentences = []
    for role in scores:
        ranked = table[role].sort_values(ascending=False, kind="stable")
        top, top_score = ranked.index[0], round(float(ranked.iloc[0]), decimals)
        times = (f" = {top_score / chance[role]:.1f}x chance ({chance[role]:.{decimals}f})"
                 if chance.get(role) else "")
        runner = (f"; next best {ranked.index[1]} at {float(ranked.iloc[1]):.{decimals}f}"
                  if len(ranked) > 1 else "")
        gap = top_score - threshold
        side = "above" if gap >= 0 else "below"
        word = verdict(top_score, threshold=threshold, margin=margin)
        outcome = {"present": "present", "absent": "absent",
                   "borderline": f"borderline (within {margin} of the line: too close to call)"}[word]
        sentences.append(f"{role}: best {top} scores {top_score:.{decimals}f}{times}, "
                         f"{abs(gap):.{decimals}f} {side} the {threshold} line{runner} -> {outcome}.")
    return sentences


# Lesson 05's tools inside the model moved to circuits.py; importable from here as before.
from .circuits import (  # noqa: E402,F401
    HeadTrace,
    direct_logit_attribution,
    head_output_norms,
    in_context_mass,
    next_token_loss,
    ov_copying_score,
    trace_heads,
)
