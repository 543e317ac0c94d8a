"""Synthetic tasks for the tiny transformer: induction (copying) and subject-verb agreement.

Every sampler is deterministic given a ``torch.Generator``: the same seed gives the same
batch on every machine.

*Induction.* A sequence is ``BOS`` followed by a random prefix of ``p`` distinct tokens,
repeated until the sequence is full. The period ``p`` is drawn per sequence, and the
evaluation uses periods that training never shows, so a model that merely learned "look
back a fixed distance" cannot pass: it has to find the previous occurrence of the current
token and copy what came after it.

*Agreement.* Word-level sentences from a toy English grammar, ending with the verb whose
number must agree with the subject, across prepositional phrases and relative clauses that
may contain an *attractor* noun of the opposite number ("the keys near the door are").

*Mixture.* Both tasks for one model (lesson 6): each batch holds induction sequences and
sentences (right-padded), so one model must learn both and its heads may split the work.

:class:`AgreementBatch`, :class:`InductionBatch`, :class:`MixtureBatch` are records filled by
this module's functions; each checks its fields when built (dtypes, shapes, at least one row, and
that the token ids, positions and facts fit each other), so a hand-made batch that does not hang
together is refused by name. They are frozen dataclasses (list fields kept as tuples), so no
field can be replaced after that check; ``dataclasses.replace`` makes a new batch, checked again.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, fields, replace

import torch
from torch import Tensor

from ..attention.validation import (
    check_choice,
    check_dims_not_empty,
    check_distinct,
    check_fits_in_memory,
    check_flag,
    check_holds_values,
    check_ids,
    check_int,
    check_int_list,
    check_real,
    check_record,
    check_rows,
    describe_shape,
    freeze_fields,
    items_of,
    shown,
)
from ..env import check_seed

__all__ = [
    "BOS",
    "InductionTask",
    "InductionBatch",
    "induction_accuracy",
    "AgreementBatch",
    "AgreementTask",
    "AGREEMENT_VOCAB",
    "AGREEMENT_PAD",
    "AGREEMENT_BOS",
    "TEMPLATES",
    "tokenize",
    "detokenize",
    "subject_position",
    "agreement_margins",
    "agreement_accuracy",
    "next_token_targets",
    "MixtureBatch",
    "MixtureTask",
]

IGNORE_INDEX = -100  # targets with this value are left out of the loss (F.cross_entropy's default)


# =====================================================================================
# Induction
# =====================================================================================
BOS = 0  # induction task: token 0 starts every sequence; ordinary tokens are 1 .. vocab_size-1


def _check_batch_tensors(batch: object, **fields: tuple[torch.dtype, str]) -> None:
    """The tensors of a task's batch record: each ``field=(dtype, dims)`` holds values (not on
    the meta device) of that dtype and is ``(B, T)`` (``"BT"``) or ``(B,)`` (``"B"``), B and T
    read from ``batch.tokens``, B at least 1 (a batch of no rows scores as NaN). Only the device,
    dtype and shape are read here (no values): batches are made at every training step; the records
    read the few values they range-check."""
    kind = type(batch).__name__
    tokens = batch.tokens
    for name in ("tokens", *fields):
        check_holds_values(getattr(batch, name), f"{kind}.{name}")
    if tokens.ndim != 2:
        raise ValueError(f"{kind}.tokens must be (B, T), got shape {tuple(tokens.shape)}")
    # B = 0: every accuracy over the batch would be a mean of nothing, NaN
    check_dims_not_empty(tokens, f"{kind}.tokens", ("B",))
    for name, (dtype, dims) in fields.items():
        value = getattr(batch, name)
        want = tuple(tokens.shape) if dims == "BT" else tuple(tokens.shape[:1])
        layout = "(B, T)" if dims == "BT" else "(B,)"
        if value.dtype != dtype:
            raise TypeError(f"{kind}.{name} must be a {dtype} tensor {layout}, got dtype {value.dtype}")
        if tuple(value.shape) != want:
            raise ValueError(f"{kind}.{name} must be {layout} = {want} (B, T from tokens), got shape "
                             f"{tuple(value.shape)}")


def _check_token_ids(batch: object, name: str, vocab_size: int | None = None) -> None:
    """``batch.<name>`` holds token ids >= 0 (below ``vocab_size`` where the task fixes one): a
    negative id is no token (and -100 would be read as "ignore" by the loss)."""
    label = f"{type(batch).__name__}.{name}"
    ids = getattr(batch, name)
    check_holds_values(ids, label)
    if vocab_size is not None:
        check_ids(ids, label, vocab_size, "token ids")
    elif ids.numel() and int(ids.min()) < 0:
        raise ValueError(f"{label} must hold token ids >= 0, got {int(ids.min())}")


def _check_in_range(batch: object, name: str, low: int, high: int, what: str) -> None:
    """Every entry of ``batch.<name>`` lies in ``low..high``; else a ValueError naming the field,
    the first row out of range and its value."""
    values = getattr(batch, name)
    bad = ((values < low) | (values > high)).nonzero()
    if bad.numel():
        row = int(bad[0, 0])
        raise ValueError(f"{type(batch).__name__}.{name} must hold {what}, in {low}..{high}, got "
                         f"{int(values[row])} at row {row}")


@dataclass(frozen=True)
class InductionBatch:
    """``tokens`` ``(B, T)`` long; ``periods`` ``(B,)`` in ``2..T``; ``scored`` ``(B, T)`` bool
    marks the positions whose *next* token is fixed by an earlier occurrence (the logits at
    position ``t`` predict ``tokens[:, t + 1]``; the last column is never scored: there is no
    next token, and a True there is refused). The facts are checked against each other: each row
    repeats with its period, and ``scored`` is exactly ``period + 1 <= t <= T - 2``. Frozen, like
    every batch record here: its fields cannot be replaced after the check
    (``dataclasses.replace`` makes a new, checked one).

    ``tokens`` must be ids >= 0; their upper bound is the model's vocabulary, which the batch does
    not know (an :class:`InductionTask` may have any ``vocab_size``): an id beyond it is refused
    by the model that reads the batch (TinyTransformer names ``tokens`` and its vocab_size)."""

    tokens: Tensor
    periods: Tensor
    scored: Tensor

    def __post_init__(self) -> None:
        _check_induction_batch(self)

    @property
    def targets(self) -> Tensor:
        """Next-token targets ``(B, T)`` for the language-model loss (last column ignored)."""
        return next_token_targets(self.tokens)


def _check_induction_batch(batch: InductionBatch) -> None:
    """The checks of a new :class:`InductionBatch`, run again by :func:`induction_accuracy`: a
    frozen record freezes its fields, not the values of its tensors, which can be changed in place
    after the batch was built."""
    check_record(batch)
    _check_batch_tensors(batch, tokens=(torch.long, "BT"), periods=(torch.long, "B"),
                         scored=(torch.bool, "BT"))
    _check_token_ids(batch, "tokens")
    _check_in_range(batch, "periods", 2, batch.tokens.shape[1],
                    "a period of at least 2 (see InductionTask) that fits in the T tokens")
    last = batch.scored[:, -1].nonzero() if batch.tokens.shape[1] else batch.scored[:, :0]
    if last.numel():
        raise ValueError(f"InductionBatch.scored must be False in the last column (position "
                         f"{batch.tokens.shape[1] - 1} has no next token to predict), got True at row "
                         f"{int(last[0, 0])}")
    _check_induction_facts(batch)


def _check_induction_facts(batch: InductionBatch) -> None:
    """Each row repeats with its period (``tokens[t] == tokens[t - p]`` from ``t = p + 1`` on: the
    first copy starts after ``BOS``) and ``scored`` marks exactly the positions that period fixes:
    ``p + 1 <= t <= T - 2`` (the query was seen at ``t - p``, and position ``t`` has a next token).
    Else a ValueError naming the field, the first broken row and position, and that row's period."""
    T = batch.tokens.shape[1]
    position = torch.arange(T, device=batch.tokens.device).unsqueeze(0)  # (1, T)
    period = batch.periods.to(position.device).unsqueeze(1)  # (B, 1)
    fixed = (position >= period + 1) & (position <= T - 2)
    earlier = batch.tokens.gather(1, (position - period).clamp(min=0))  # tokens[t - p]
    broken = (("tokens", (position >= period + 1) & (batch.tokens != earlier),
               "repeat with the row's period (tokens[t] == tokens[t - period] from t = period + 1 on)"),
              ("scored", batch.scored.to(position.device) != fixed,
               "be True exactly where the period fixes the next token (period + 1 <= t <= T - 2)"))
    for name, bad, wanted in broken:
        where = bad.nonzero()
        if where.numel():
            row, col = (int(i) for i in where[0])
            value = getattr(batch, name)[row, col].item()
            raise ValueError(f"InductionBatch.{name} must {wanted}, got {value} at row {row}, position "
                             f"{col}, where the period is {int(batch.periods[row])}")


def _check_generator(generator: object) -> None:
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"generator must be a torch.Generator (e.g. torch.Generator().manual_seed(0)), "
            f"got {type(generator).__name__}"
        )


def _check_count(name: str, value: object) -> int:
    return check_int(value, name, minimum=1)


def _check_period(period: object, name: str) -> None:
    """A period is an int of at least 2, as induction_score and induction_positions ask: with
    period 1 the next token is the query itself, so nothing is copied from earlier. ``name`` is
    the entry checked (``InductionTask.train_periods[0]``), named in the message."""
    _check_count(name, period)
    if period == 1:
        raise ValueError(f"{name}: every period must be at least 2: with period 1 the next token is "
                         f"the query itself, so there is nothing to copy from earlier, got 1")


@dataclass(frozen=True)
class InductionTask:
    """Repeated random sequences with a random period per sequence.

    ``vocab_size`` counts ``BOS``; ``seq_len`` counts ``BOS`` too. Training periods and
    held-out periods are disjoint, and no training period is a multiple of a held-out one
    (looking back 10 positions would solve period 5). Every period must leave at least one
    scored position: ``BOS`` + one copy + 2 more tokens fit in ``seq_len``. A long period
    may therefore repeat only partly (period 16 in 32 tokens: one copy and 15 tokens of the
    second), while a short one repeats many times (period 2: 15 copies and a half). The periods may
    be given as any list of ints (a range, an array); they are kept as tuples of Python ints, so the
    task stays hashable (its evaluation batches are cached by task), and a bad entry is named as
    ``InductionTask.train_periods[i]`` (or ``heldout_periods[i]``).

    Sizes beyond this machine's memory (``vocab_size`` or ``seq_len`` of 10**12) are refused
    where they would be allocated, by :meth:`sample` before it draws a batch, not here.
    """

    vocab_size: int = 64
    seq_len: int = 32
    train_periods: tuple[int, ...] = (2, 3, 4, 6, 7, 8, 9, 11, 12, 14, 16)
    # no training period is a multiple of a held-out one: "look back d" for a trained d
    # never solves a held-out sequence (looking back 10 would solve period 5)
    heldout_periods: tuple[int, ...] = (5, 10, 13)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "seq_len"):  # kept as plain ints (an int subclass's repr may raise)
            object.__setattr__(self, name, _check_count(f"InductionTask.{name}", getattr(self, name)))
        # one sequence of sample(): a permutation of the vocabulary (12 bytes a token) and its rows
        per_sequence = {"vocab_size": 12 * int(self.vocab_size), "seq_len": 48 * int(self.seq_len)}
        check_fits_in_memory(sum(per_sequence.values()), max(per_sequence, key=per_sequence.__getitem__),
                             f"one sequence of {self.seq_len} tokens drawn from {self.vocab_size:,} "
                             f"(a permutation of the vocabulary per sequence)")
        for name in ("train_periods", "heldout_periods"):  # a lone int or a str is not a list of periods
            # kept as a tuple of ints (a list, range or array too): the task is a cache key when evaluated
            periods = tuple(check_int_list(getattr(self, name), f"InductionTask.{name}"))
            object.__setattr__(self, name, periods)
        for name in ("train_periods", "heldout_periods"):  # sampling is uniform over the entries
            periods = list(getattr(self, name))
            repeated = sorted({p for p in periods if periods.count(p) > 1})
            if repeated:
                raise ValueError(f"{name} must list each period once (a repeated one would be drawn more "
                                 f"often), got {tuple(periods)}, which repeats {repeated}")
        overlap = sorted(set(self.train_periods) & set(self.heldout_periods))
        if overlap:
            raise ValueError(f"train_periods and heldout_periods must be disjoint, both have {overlap}")
        for name in ("train_periods", "heldout_periods"):
            for i, p in enumerate(getattr(self, name)):
                where = f"InductionTask.{name}[{i}]"
                _check_period(p, where)
                if p > self.vocab_size - 1:
                    raise ValueError(
                        f"{where} = {p}: period {p} needs {p} distinct tokens but vocab_size="
                        f"{self.vocab_size} has only {self.vocab_size - 1} besides BOS"
                    )
                if 1 + p + 2 > self.seq_len:
                    raise ValueError(f"{where} = {p}: period {p} is too long for seq_len={self.seq_len}: "
                                     f"nothing to score")
        multiples = sorted((t, h) for t in self.train_periods for h in self.heldout_periods if t % h == 0)
        if multiples:
            raise ValueError(
                f"training period {multiples[0][0]} is a multiple of held-out period {multiples[0][1]}: "
                "a model that looks back a fixed trained distance would pass the held-out test"
            )

    def sample(
        self, batch_size: int, generator: torch.Generator, *, periods: tuple[int, ...] | None = None
    ) -> InductionBatch:
        """A batch whose periods are drawn uniformly from ``periods`` (default: training; each
        period once)."""
        _check_generator(generator)
        batch_size = _check_count("batch_size", batch_size)
        periods = self.train_periods if periods is None else tuple(check_int_list(periods, "periods"))
        check_distinct(periods, "periods", "periods (they are drawn uniformly: a repeated one would be "
                       "drawn more often)")
        for i, p in enumerate(periods):
            _check_period(p, f"periods[{i}]")
            if p > self.vocab_size - 1 or p + 3 > self.seq_len:
                raise ValueError(
                    f"periods[{i}] = {p}: period {p} does not fit vocab_size={self.vocab_size}, "
                    f"seq_len={self.seq_len}"
                )
        B, T = batch_size, self.seq_len
        # a permutation of the vocabulary per sequence (floats, then int64 ids) and a few (B, T) tensors
        check_fits_in_memory(B * (12 * self.vocab_size + 48 * T), "batch_size",
                             f"{B} sequences of {T} tokens")
        choice = torch.randint(len(periods), (B,), generator=generator)
        period = torch.tensor(periods)[choice]  # (B,)
        # p distinct tokens per sequence: a random permutation of 1..V-1, cut to max period (draws in
        # float32 whatever the default dtype, so a seed gives the same batch)
        perm = torch.rand(B, self.vocab_size - 1, generator=generator, dtype=torch.float32)
        perm = perm.argsort(dim=-1) + 1
        offset = torch.arange(T - 1).unsqueeze(0) % period.unsqueeze(1)  # (B, T-1): j mod p
        body = perm.gather(1, offset)  # (B, T-1): the prefix repeated
        tokens = torch.cat([torch.full((B, 1), BOS), body], dim=1)  # (B, T)
        # position t (t >= p + 1) holds a token first seen at t - p, whose successor is the answer
        position = torch.arange(T).unsqueeze(0)  # (1, T)
        scored = (position >= period.unsqueeze(1) + 1) & (position <= T - 2)
        return InductionBatch(tokens=tokens, periods=period, scored=scored)

    def eval_batch(self, batch_size: int = 512, seed: int = 1234, *, heldout: bool = True) -> InductionBatch:
        """A fixed evaluation batch (same every call): held-out periods by default."""
        check_flag(heldout, "heldout")
        periods = self.heldout_periods if heldout else self.train_periods
        return self.sample(batch_size, torch.Generator().manual_seed(check_seed(seed)), periods=periods)


def next_token_targets(tokens: Tensor, pad_id: int | None = None) -> Tensor:
    """``targets[:, t] = tokens[:, t + 1]``; the last column (and padding) is ``-100``.
    Token ids must be >= 0: a ``-100`` among them would silently become "ignore" in the loss."""
    if not isinstance(tokens, Tensor) or tokens.dtype != torch.long:
        got = f"dtype {tokens.dtype}" if isinstance(tokens, Tensor) else type(tokens).__name__
        raise TypeError(f"tokens must be a torch.long tensor (B, T) of token ids, got {got}")
    if tokens.ndim != 2:
        raise ValueError(f"tokens must be 2-D (B, T), got shape {tuple(tokens.shape)}")
    check_holds_values(tokens, "tokens")
    if tokens.numel() and int(tokens.min()) < 0:
        row, col = (int(i) for i in (tokens < 0).nonzero()[0])
        raise ValueError(f"tokens must hold token ids >= 0 (a target of {IGNORE_INDEX} is read as 'ignore' "
                         f"by the loss), got {int(tokens[row, col])} at row {row}, position {col}")
    if pad_id is not None:
        pad_id = check_int(pad_id, "pad_id", minimum=0, maximum=2**63 - 1)  # int64 ids (10**400: battery 29)
    targets = torch.full_like(tokens, IGNORE_INDEX)
    targets[:, :-1] = tokens[:, 1:]
    if pad_id is not None:
        targets[targets == pad_id] = IGNORE_INDEX
    return targets


def _check_logits(logits: object, tokens: Tensor, largest_id: int) -> None:
    """``logits`` is a floating ``(B, T, V)`` tensor over the batch's ``tokens`` whose vocabulary
    holds every id the metric reads (up to ``largest_id``): a smaller one scores a target it
    cannot name as simply wrong, or indexes past its end."""
    if not isinstance(logits, Tensor):
        raise TypeError(f"logits must be a torch.Tensor (B, T, V), got {type(logits).__name__}")
    if logits.ndim != 3 or tuple(logits.shape[:2]) != tuple(tokens.shape):
        raise ValueError(
            f"logits must be (B, T, V) with (B, T) = {tuple(tokens.shape)}, got {tuple(logits.shape)}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating-point scores (the model's output), got dtype "
                        f"{logits.dtype}")
    check_holds_values(logits, "logits")  # a meta tensor has no argmax to score
    if logits.shape[-1] <= largest_id:
        raise ValueError(f"logits must score every token id this metric reads, up to {largest_id} (so V > "
                         f"{largest_id}), got V = {logits.shape[-1]}: logits from a model of another task?")


def _refuse_non_finite_where_read(read: Tensor, where: str) -> None:
    """The logits a metric reads (``read``, gathered from ``logits``) are finite: an argmax or a
    margin over NaN is no prediction, and one over +-inf is no better (``inf - inf`` is NaN, and an
    argmax among tied infinities is the first column, not a prediction). No lesson passes
    infinite logits (the models' outputs are finite; nothing masks logits with -inf before
    scoring). Positions a metric does not read may hold NaN (a partial forward pass fills them
    so)."""
    if not read.is_floating_point():
        return
    bad = ~torch.isfinite(read)
    if bool(bad.any()):
        value = float(read[bad][0])
        kind = "NaN" if bool(torch.isnan(read).any()) else ("+inf" if value > 0 else "-inf")
        raise ValueError(f"logits hold {kind} at {where} that this metric reads: an argmax or a margin "
                         f"over {kind} is no prediction, so no score can be read from them")


def induction_accuracy(logits: Tensor, batch: InductionBatch) -> float:
    """Fraction of scored positions where the argmax prediction is the true next token
    (``batch`` must score at least one position: a fraction of none is NaN). The batch is checked
    again as when it was built (a tensor of it changed in place since is refused)."""
    if not isinstance(batch, InductionBatch):
        raise TypeError(f"batch must be an InductionBatch (from InductionTask.sample or eval_batch), "
                        f"got {type(batch).__name__}")
    _check_induction_batch(batch)  # its tensors may have been changed in place since it was built
    if not bool(batch.scored.any()):
        raise ValueError(f"batch must score at least one position (an accuracy over none is NaN), got an "
                         f"InductionBatch of {batch.tokens.shape[0]} rows, shape "
                         f"{tuple(batch.tokens.shape)}, with no scored position")
    _check_logits(logits, batch.tokens, int(batch.tokens.max()) if batch.tokens.numel() else 0)
    prediction = logits[:, :-1].argmax(-1)  # (B, T-1): predicts tokens[:, 1:]
    correct = prediction == batch.tokens[:, 1:].to(prediction.device)
    scored = batch.scored[:, :-1].to(prediction.device)
    _refuse_non_finite_where_read(logits[:, :-1][scored], "scored positions")
    return float(correct[scored].float().mean())


# =====================================================================================
# Agreement
# =====================================================================================
AGREEMENT_PAD, AGREEMENT_BOS = "<pad>", "<bos>"

# (singular, plural) pairs
NOUNS: tuple[tuple[str, str], ...] = (
    ("cat", "cats"), ("dog", "dogs"), ("key", "keys"), ("table", "tables"),
    ("boy", "boys"), ("girl", "girls"), ("teacher", "teachers"), ("book", "books"),
    ("door", "doors"), ("car", "cars"), ("bird", "birds"), ("house", "houses"),
    ("man", "men"), ("child", "children"), ("box", "boxes"), ("lamp", "lamps"),
)
TRANSITIVE_VERBS: tuple[tuple[str, str], ...] = (
    ("sees", "see"), ("likes", "like"), ("chases", "chase"), ("knows", "know"), ("helps", "help"),
)
TARGET_VERBS: tuple[tuple[str, str], ...] = (("is", "are"), ("was", "were"), ("has", "have"))
ADJECTIVES: tuple[str, ...] = ("old", "small", "red", "big", "new")
PREPOSITIONS: tuple[str, ...] = ("on", "near", "behind", "under", "beside")
# optional words before the subject, so that it does not always sit at the same position;
# "they say" / "she says" put a verb of either number before the subject, a distractor
OPENERS: tuple[tuple[str, ...], ...] = (
    ("perhaps",), ("today",), ("i", "think"), ("she", "says"), ("they", "say"),
)

AGREEMENT_VOCAB: tuple[str, ...] = (
    AGREEMENT_PAD, AGREEMENT_BOS, "the", "that",
    *ADJECTIVES, *PREPOSITIONS, *dict.fromkeys(w for opener in OPENERS for w in opener),
    *(w for pair in NOUNS for w in pair),
    *(w for pair in TRANSITIVE_VERBS for w in pair),
    *(w for pair in TARGET_VERBS for w in pair),
)
WORD_TO_ID: dict[str, int] = {w: i for i, w in enumerate(AGREEMENT_VOCAB)}
PAD_ID, BOS_ID = WORD_TO_ID[AGREEMENT_PAD], WORD_TO_ID[AGREEMENT_BOS]
_NOUN_IDS = {WORD_TO_ID[w] for pair in NOUNS for w in pair}
_NOUN_NUMBER = torch.full((len(AGREEMENT_VOCAB),), -1, dtype=torch.long)  # id -> 0 singular, 1 plural noun
_NOUN_NUMBER[[WORD_TO_ID[s] for s, _ in NOUNS]], _NOUN_NUMBER[[WORD_TO_ID[p] for _, p in NOUNS]] = 0, 1
_SINGULAR_VERB_IDS = torch.tensor([WORD_TO_ID[s] for s, _ in TARGET_VERBS])
_PLURAL_VERB_IDS = torch.tensor([WORD_TO_ID[p] for _, p in TARGET_VERBS])

# the final verbs' number (0 singular, 1 plural, -1 not a final verb) and other form (is <-> are)
_VERB_NUMBER = torch.full((len(AGREEMENT_VOCAB),), -1, dtype=torch.long)
_VERB_NUMBER[_SINGULAR_VERB_IDS], _VERB_NUMBER[_PLURAL_VERB_IDS] = 0, 1
_OTHER_VERB = torch.full((len(AGREEMENT_VOCAB),), -1, dtype=torch.long)
_OTHER_VERB[_SINGULAR_VERB_IDS], _OTHER_VERB[_PLURAL_VERB_IDS] = _PLURAL_VERB_IDS, _SINGULAR_VERB_IDS

# name -> shape; every sentence may start with an opener ("i think", ...); S = subject
# noun, A = an intervening noun (an attractor when its number differs from S's), V = verb
TEMPLATES: dict[str, str] = {
    "simple": "the [adj] S V",
    "prepositional": "the [adj] S prep the [adj] A V",
    "object_relative": "the [adj] S that the [adj] A verbs(A) V",
    "subject_relative": "the [adj] S that verbs(S) the [adj] A V",
    "two_prepositions": "the [adj] S prep the [adj] A prep the [adj] A V",
}
_TEMPLATE_NAMES = tuple(TEMPLATES)


@dataclass(frozen=True)
class AgreementBatch:
    """Padded sentences and the facts needed to score them.

    ``tokens`` ``(B, T)`` long, right-padded with ``<pad>``, each row
    ``<bos> ... verb``; ``lengths`` ``(B,)``; ``subject_pos`` ``(B,)`` index of the subject
    noun; ``verb_pos`` ``(B,)`` index of the final verb token; the logits at
    ``predict_pos = verb_pos - 1`` are the ones that predict it. ``plural`` ``(B,)`` bool:
    the subject's number; ``attractor`` ``(B,)`` bool: an intervening noun of the
    opposite number; ``correct_id``/``wrong_id`` ``(B,)``: the verb that agrees and the
    same verb in the other number; ``template`` names each sentence's shape, one of
    :data:`TEMPLATES` per row (or nothing), kept as a tuple (a list given is stored as one).
    The verb facts are checked against ``plural``: ``correct_id`` is a final verb in that number,
    ``wrong_id`` the same verb in the other. They are not checked against ``tokens`` (nor is
    ``template``): a batch may legitimately carry a twin's sentences, the subject flipped by
    :func:`course_utils.interp.patching.flip_subject_number`, with the original facts.
    ``attractor`` is checked against ``tokens`` on the rows that hold their own sentence (the
    subject noun in the number ``plural`` says): a noun between subject and verb of the other
    number, or none; a twin's row (subject flipped, facts kept) is not read. A twin batch that
    flips ``plural`` and the verbs must flip ``attractor`` to the twin's too. Frozen: its
    fields cannot be replaced after the check.
    """

    tokens: Tensor
    lengths: Tensor
    subject_pos: Tensor
    verb_pos: Tensor
    plural: Tensor
    attractor: Tensor
    correct_id: Tensor
    wrong_id: Tensor
    template: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        freeze_fields(self)  # a list of templates is kept as a tuple
        check_record(self)
        _check_batch_tensors(self, tokens=(torch.long, "BT"), lengths=(torch.long, "B"),
                             subject_pos=(torch.long, "B"), verb_pos=(torch.long, "B"),
                             plural=(torch.bool, "B"), attractor=(torch.bool, "B"),
                             correct_id=(torch.long, "B"), wrong_id=(torch.long, "B"))
        if self.template and len(self.template) != self.tokens.shape[0]:
            raise ValueError(f"AgreementBatch.template must name one template per sentence "
                             f"({self.tokens.shape[0]}) or be empty, got {len(self.template)} names")
        unknown = next((i for i, name in enumerate(self.template) if name not in TEMPLATES), None)
        if unknown is not None:
            raise ValueError(f"AgreementBatch.template must name templates of TEMPLATES "
                             f"({', '.join(TEMPLATES)}), got {shown(self.template[unknown], 60)} at row "
                             f"{unknown}")
        for name in ("tokens", "correct_id", "wrong_id"):
            _check_token_ids(self, name, len(AGREEMENT_VOCAB))
        same = (self.correct_id == self.wrong_id).nonzero()
        if same.numel():  # the margin between a verb and itself is 0 whatever the model does
            row = int(same[0, 0])
            raise ValueError(f"AgreementBatch.correct_id and AgreementBatch.wrong_id must differ (the verb "
                             f"in the subject's number and in the other), both are {int(self.wrong_id[row])} "
                             f"at row {row}")
        _check_agreement_positions(self)
        _check_agreement_facts(self)
        _check_attractor_flags(self)

    def take(self, rows: Tensor) -> AgreementBatch:
        """The sentences at ``rows`` (an index tensor ``(n,)``, a list of ints or a bool mask of
        ``B`` entries), as a batch of their own; ``rows`` must select at least one sentence."""
        # an AgreementBatch holds at least one sentence
        rows = check_rows(rows, "rows", self.tokens.shape[0], "sentences in the batch", nonempty=True)
        tensors = {f.name: getattr(self, f.name)[rows] for f in fields(self) if f.name != "template"}
        return AgreementBatch(**tensors, template=[self.template[i] for i in rows.tolist()])

    @property
    def predict_pos(self) -> Tensor:
        """``(B,)`` the position whose logits predict the verb (``verb_pos - 1``)."""
        return self.verb_pos - 1

    @property
    def targets(self) -> Tensor:
        """Next-token targets ``(B, T)`` (padding and the last column ignored)."""
        return next_token_targets(self.tokens, pad_id=PAD_ID)

    @property
    def sentences(self) -> list[str]:
        """Each sentence as words (``<bos>`` and padding left out). The batch is checked again
        first: a frozen record freezes its fields, not its tensors' values, which can be changed
        (or resized) in place after it was built."""
        self.__post_init__()
        rows = zip(self.tokens, self.lengths.tolist(), strict=True)
        return [" ".join(detokenize(row[1:n])) for row, n in rows]

    def __len__(self) -> int:
        return self.tokens.shape[0]


def _check_agreement_positions(batch: AgreementBatch) -> None:
    """Each sentence ends with its verb: ``verb_pos`` = ``lengths - 1``, in 1..T (``predict_pos``
    = verb_pos - 1 is then a column of ``tokens``), and ``subject_pos`` lies before it, in
    0..verb_pos - 1. A sentence may be longer than T: a batch cut after its last ``predict_pos``
    (:func:`course_utils.interp.patching.trimmed_by_length`) keeps every sentence's length and
    positions. The first row that breaks a rule is named."""
    T = batch.tokens.shape[1]
    rules = (("verb_pos", batch.verb_pos != batch.lengths - 1, "AgreementBatch.lengths - 1 (the verb ends "
              "the sentence)"),
             ("verb_pos", (batch.verb_pos < 1) | (batch.verb_pos > T), f"in 1..T = 1..{T} (predict_pos = "
              f"verb_pos - 1 must be a column of AgreementBatch.tokens)"),
             ("subject_pos", (batch.subject_pos < 0) | (batch.subject_pos >= batch.verb_pos),
              "in 0..AgreementBatch.verb_pos - 1 (the subject comes before the verb)"))
    for name, broken, wanted in rules:
        bad = broken.nonzero()
        if bad.numel():
            row = int(bad[0, 0])
            raise ValueError(f"AgreementBatch.{name} must be {wanted}, got {int(getattr(batch, name)[row])} "
                             f"at row {row}, where AgreementBatch.lengths is {int(batch.lengths[row])}, "
                             f"verb_pos {int(batch.verb_pos[row])} and T is {T}")


def _check_agreement_facts(batch: AgreementBatch) -> None:
    """The verb facts agree with ``plural``: ``correct_id`` is a final verb (is/are, was/were,
    has/have) in the number ``plural`` says and ``wrong_id`` the same verb in the other number.
    ``tokens`` is not read here: a batch may carry a twin's sentences (the subject in the other
    number, :func:`course_utils.interp.patching.flip_subject_number`) with the original facts, so
    the subject noun and the verb in ``tokens`` are not checked against them. The first row that
    breaks a rule is named, with the words involved."""
    plural, correct, wrong = batch.plural.cpu().long(), batch.correct_id.cpu(), batch.wrong_id.cpu()
    rules = (("correct_id", _VERB_NUMBER[correct] != plural, "a final verb (is/are, was/were, has/have) in "
              "the number AgreementBatch.plural says"),
             ("wrong_id", wrong != _OTHER_VERB[correct],
              "AgreementBatch.correct_id's verb in the other number"))
    for name, broken, wanted in rules:
        bad = broken.nonzero()
        if bad.numel():
            row = int(bad[0, 0])
            value = int(getattr(batch, name)[row])
            raise ValueError(f"AgreementBatch.{name} must be {wanted}, got {value} "
                             f"({AGREEMENT_VOCAB[value]!r}) at row {row}, where AgreementBatch.plural is "
                             f"{bool(plural[row])} and AgreementBatch.correct_id is "
                             f"{AGREEMENT_VOCAB[int(correct[row])]!r}")


def _check_attractor_flags(batch: AgreementBatch) -> None:
    """``attractor`` says whether a noun between the subject and the verb has the other number than
    ``plural``, on every row whose ``tokens`` are its own sentence (the noun at ``subject_pos`` in
    the number ``plural`` says). Rows that carry a twin's sentence (the subject flipped, facts
    kept) or tokens that are no sentence are not read. The first row that breaks the rule is named."""
    tokens, plural = batch.tokens.cpu(), batch.plural.cpu().long()
    number = _NOUN_NUMBER[tokens]  # (B, T): 0 singular noun, 1 plural noun, -1 no noun
    rows, position = torch.arange(len(batch)), torch.arange(tokens.shape[1]).unsqueeze(0)
    subject_pos, verb_pos = batch.subject_pos.cpu().unsqueeze(1), batch.verb_pos.cpu().unsqueeze(1)
    between = (position > subject_pos) & (position < verb_pos)
    expected = (between & (number >= 0) & (number != plural.unsqueeze(1))).any(dim=1)
    own = number[rows, batch.subject_pos.cpu()] == plural
    bad = (own & (expected != batch.attractor.cpu())).nonzero()
    if bad.numel():
        row = int(bad[0, 0])
        words = " ".join(detokenize(tokens[row, 1:int(verb_pos[row])]))  # the sentence up to its verb
        raise ValueError(f"AgreementBatch.attractor must say whether a noun between the subject and the verb "
                         f"has the other number than AgreementBatch.plural, got {bool(batch.attractor[row])} "
                         f"at row {row}, whose sentence {shown(words)} (plural {bool(plural[row])}) has "
                         f"{'one' if expected[row] else 'none'}")


class _Draws:
    """Pulls uniform random numbers from a pre-drawn row, one call to the Generator per batch."""

    def __init__(self, values: list[float]) -> None:
        self.values, self.i = values, 0

    def index(self, n: int) -> int:
        value = self.values[self.i]
        self.i += 1
        return min(int(value * n), n - 1)

    def coin(self, p: float = 0.5) -> bool:
        value = self.values[self.i]
        self.i += 1
        return value < p


_DRAWS_PER_SENTENCE = 24


def _noun_phrase(draws: _Draws, plural: bool, adjective_p: float) -> tuple[list[str], int]:
    """``the [adj] noun``; returns the words and the index of the noun within them."""
    words = ["the"]
    if draws.coin(adjective_p):
        words.append(ADJECTIVES[draws.index(len(ADJECTIVES))])
    words.append(NOUNS[draws.index(len(NOUNS))][int(plural)])
    return words, len(words) - 1


def _sentence(draws: _Draws, template: str, attractor_p: float, adjective_p: float, opener_p: float) -> dict:
    plural = draws.coin()
    attractor_plural = (not plural) if draws.coin(attractor_p) else plural
    words = list(OPENERS[draws.index(len(OPENERS))]) if draws.coin(opener_p) else []
    subject_words, subject = _noun_phrase(draws, plural, adjective_p)
    subject += len(words)
    words.extend(subject_words)
    intervening: list[bool] = []  # number of each noun between subject and verb

    def add_phrase(number: bool) -> None:
        phrase, _ = _noun_phrase(draws, number, adjective_p)
        words.extend(phrase)
        intervening.append(number)

    if template in ("prepositional", "two_prepositions"):
        words.append(PREPOSITIONS[draws.index(len(PREPOSITIONS))])
        add_phrase(attractor_plural)
        if template == "two_prepositions":
            words.append(PREPOSITIONS[draws.index(len(PREPOSITIONS))])
            add_phrase(attractor_plural if draws.coin() else not attractor_plural)
    elif template == "object_relative":  # the cat that the dogs chase ...
        words.append("that")
        add_phrase(attractor_plural)
        words.append(TRANSITIVE_VERBS[draws.index(len(TRANSITIVE_VERBS))][int(attractor_plural)])
    elif template == "subject_relative":  # the cat that chases the dogs ...
        words.append("that")
        words.append(TRANSITIVE_VERBS[draws.index(len(TRANSITIVE_VERBS))][int(plural)])
        add_phrase(attractor_plural)
    lemma = draws.index(len(TARGET_VERBS))
    words.append(TARGET_VERBS[lemma][int(plural)])
    return {
        "words": words, "subject": subject + 1, "plural": plural, "lemma": lemma,
        "attractor": any(n != plural for n in intervening), "template": template,
    }


@dataclass(frozen=True)
class AgreementTask:
    """Sentences from :data:`TEMPLATES`; ``attractor_p`` is the chance that the
    intervening noun has the opposite number to the subject. ``templates`` is a non-empty tuple
    or list of distinct names of :data:`TEMPLATES`, kept as a tuple of plain strs: a name that is
    no str is a TypeError, an unknown one a ValueError, both naming its position."""

    templates: tuple[str, ...] = _TEMPLATE_NAMES
    attractor_p: float = 0.5
    adjective_p: float = 0.3
    opener_p: float = 0.3
    max_len: int = 16  # longest: <bos> she says the old S prep the old A prep the old A V = 15

    def __post_init__(self) -> None:
        if isinstance(self.templates, (str, bytes)) or not isinstance(self.templates, (tuple, list)):
            raise TypeError(f"AgreementTask.templates must be a tuple of template names from "
                            f"{list(TEMPLATES)}, got "
                            f"{type(self.templates).__name__} {shown(self.templates, 60)}")
        # kept as a tuple of plain strs, as InductionTask keeps its periods (a list whose len() raises
        # is named: battery 30); each name is one of TEMPLATES, read by check_choice (a non-str by its
        # type, before any comparison; a str subclass by its plain value)
        names = items_of(self.templates, "AgreementTask.templates", "a tuple of template names")
        if not names:
            raise ValueError(f"templates must be a non-empty subset of {list(TEMPLATES)}, got an empty "
                             f"{type(self.templates).__name__}")
        object.__setattr__(self, "templates", tuple(
            check_choice(t, f"AgreementTask.templates[{i}] (a template name)", tuple(TEMPLATES))
            for i, t in enumerate(names)))
        repeated = sorted({t for t in self.templates if self.templates.count(t) > 1})
        if repeated:  # sampling is uniform over the entries
            raise ValueError(f"templates must list each template once (a repeated one would be drawn "
                             f"more often), got {tuple(self.templates)}, which repeats {repeated}")
        for name in ("attractor_p", "adjective_p", "opener_p"):
            value = check_real(getattr(self, name), f"AgreementTask.{name} (a probability in [0, 1])")
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"AgreementTask.{name} must lie in [0, 1], got {value}")
            object.__setattr__(self, name, value)  # a plain float (a subclass's repr may raise)
        object.__setattr__(self, "max_len", check_int(self.max_len, "AgreementTask.max_len (the longest "
                                                      "sentence, in tokens)", minimum=1))
        longest = max(self.templates, key=self._longest)
        if self.max_len < self._longest(longest):
            raise ValueError(f"AgreementTask.max_len={self.max_len} is shorter than the longest sentence "
                             f"these templates can make: {self._longest(longest)} tokens "
                             f"({shown(longest)}: <bos>, "
                             f"{TEMPLATES[longest]!r}, with an opener and every optional adjective, as "
                             f"opener_p and adjective_p allow); pass max_len >= {self._longest(longest)}")

    def _longest(self, template: str) -> int:
        """The most tokens a sentence of ``template`` can have: ``<bos>``, its words, every
        ``[adj]`` (if ``adjective_p`` > 0) and the longest opener (if ``opener_p`` > 0)."""
        words = TEMPLATES[template].split()
        adjectives = words.count("[adj]")
        return (1 + len(words) - adjectives + (adjectives if self.adjective_p > 0 else 0)
                + (max(map(len, OPENERS)) if self.opener_p > 0 else 0))

    @property
    def vocab_size(self) -> int:
        return len(AGREEMENT_VOCAB)

    def sample(self, batch_size: int, generator: torch.Generator) -> AgreementBatch:
        """``batch_size`` random sentences, padded to the longest one."""
        _check_generator(generator)
        batch_size = _check_count("batch_size", batch_size)
        # the draws become Python floats (about 32 bytes each), then a sentence of Python objects
        check_fits_in_memory(batch_size * (_DRAWS_PER_SENTENCE + 1) * 64, "batch_size",
                             f"{batch_size} sentences")
        uniforms = torch.rand(batch_size, _DRAWS_PER_SENTENCE + 1, generator=generator,
                              dtype=torch.float32).tolist()  # float32 whatever the default dtype
        sentences = []
        for row in uniforms:
            draws = _Draws(row)
            template = self.templates[draws.index(len(self.templates))]
            sentences.append(_sentence(draws, template, self.attractor_p, self.adjective_p, self.opener_p))
        return _collate(sentences, self.max_len)

    def eval_batch(self, batch_size: int = 2000, seed: int = 4321) -> AgreementBatch:
        """A fixed evaluation set (the same on every call and machine)."""
        return self.sample(batch_size, torch.Generator().manual_seed(check_seed(seed)))


def _collate(sentences: list[dict], max_len: int) -> AgreementBatch:
    lengths = [len(s["words"]) + 1 for s in sentences]  # + BOS
    if max(lengths) > max_len:
        raise ValueError(f"a sentence has {max(lengths)} tokens, more than max_len={max_len}")
    T = max(lengths)
    tokens = torch.full((len(sentences), T), PAD_ID, dtype=torch.long)
    for i, s in enumerate(sentences):
        tokens[i, : lengths[i]] = torch.tensor([BOS_ID] + [WORD_TO_ID[w] for w in s["words"]])
    plural = torch.tensor([s["plural"] for s in sentences])
    lemma = torch.tensor([s["lemma"] for s in sentences])
    singular_ids, plural_ids = _SINGULAR_VERB_IDS[lemma], _PLURAL_VERB_IDS[lemma]
    return AgreementBatch(
        tokens=tokens,
        lengths=torch.tensor(lengths),
        subject_pos=torch.tensor([s["subject"] for s in sentences]),
        verb_pos=torch.tensor(lengths) - 1,
        plural=plural,
        attractor=torch.tensor([s["attractor"] for s in sentences]),
        correct_id=torch.where(plural, plural_ids, singular_ids),
        wrong_id=torch.where(plural, singular_ids, plural_ids),
        template=[s["template"] for s in sentences],
    )


def tokenize(sentence: str, *, add_bos: bool = True) -> Tensor:
    """Words -> token ids ``(T,)`` long (with ``<bos>`` first by default).

    Lower-cases and ignores the punctuation ``.,!?:;"()``; raises ``ValueError`` naming
    every unknown word, with a close known word where there is one ("did you mean 'table'?").
    """
    if not isinstance(sentence, str):
        raise TypeError(f"sentence must be a str, got {type(sentence).__name__}")
    check_flag(add_bos, "add_bos")
    words = re.sub(r'[.,!?:;"()]', " ", sentence.lower()).split()
    if not words:
        raise ValueError("sentence is empty: write a few words, e.g. 'the keys on the table are'")
    unknown = [w for w in words if w not in WORD_TO_ID or w in (AGREEMENT_PAD, AGREEMENT_BOS)]
    if unknown:
        unknown = sorted(set(unknown), key=unknown.index)
        known = AGREEMENT_VOCAB[2:]
        close = {w: difflib.get_close_matches(w, known, n=1, cutoff=0.75) for w in unknown}
        guesses = [f"{match[0]!r}" + (f" for {shown(w)}" if len(unknown) > 1 else "")
                   for w, match in close.items() if match]
        suggestion = f" Did you mean {', '.join(guesses)}?" if guesses else ""
        raise ValueError(
            f"unknown word(s) {unknown} in {shown(sentence)}.{suggestion} The grammar knows {len(known)} "
            f"words (see course_utils.tasks.AGREEMENT_VOCAB), e.g. nouns such as "
            f"{', '.join(pair[0] for pair in NOUNS[:4])}."
        )
    ids = [WORD_TO_ID[w] for w in words]
    return torch.tensor(([BOS_ID] if add_bos else []) + ids, dtype=torch.long)


def detokenize(tokens: Tensor | list[int]) -> list[str]:
    """Token ids ``(T,)`` -> words (``<bos>``/``<pad>`` kept, so positions line up)."""
    if isinstance(tokens, Tensor) and (tokens.ndim != 1 or tokens.dtype.is_floating_point
                                       or tokens.dtype.is_complex or tokens.dtype == torch.bool):
        raise ValueError(f"tokens must be one sentence of integer ids (T,), got a {tokens.dtype} "
                         f"tensor of shape {tuple(tokens.shape)}")
    if not isinstance(tokens, (Tensor, list, tuple, range)):
        raise TypeError(f"tokens must be one sentence of integer ids: a (T,) tensor or a list of ints, "
                        f"got {type(tokens).__name__} {shown(tokens, 60)}")
    if isinstance(tokens, Tensor):
        check_holds_values(tokens, "tokens")
    ids = (tokens.tolist() if isinstance(tokens, Tensor)  # a list whose len() raises is named
           else items_of(tokens, "tokens", "one sentence of integer ids: a (T,) tensor or a list of ints"))
    wrong_kind = [i for i in ids if isinstance(i, bool) or not isinstance(i, int)]
    if wrong_kind:
        raise TypeError(f"tokens must be integer ids, got {shown(wrong_kind[:5], 120)}")
    bad = [i for i in ids if not 0 <= i < len(AGREEMENT_VOCAB)]
    if bad:
        raise ValueError(f"token ids must lie in [0, {len(AGREEMENT_VOCAB)}), got {bad}")
    return [AGREEMENT_VOCAB[i] for i in ids]


def subject_position(tokens: Tensor) -> int:
    """Index of the subject noun in one sentence ``(T,)``: the first noun (in this grammar
    the subject is always the first noun)."""
    wanted = "one sentence as a 1-D tensor of token ids (T,), e.g. tokenize(...)"
    if not isinstance(tokens, Tensor):
        raise TypeError(f"tokens must be {wanted}, got {type(tokens).__name__} {shown(tokens, 60)}")
    if tokens.ndim != 1 or tokens.is_floating_point() or tokens.is_complex() or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must be {wanted}, got a {tokens.dtype} tensor of shape "
                         f"{describe_shape(tokens)}")
    check_ids(tokens, "tokens", len(AGREEMENT_VOCAB), "token ids of the agreement grammar")
    for i, t in enumerate(tokens.tolist()):
        if t in _NOUN_IDS:
            return i
    raise ValueError(f"tokens must hold a noun (the subject), got {shown(' '.join(detokenize(tokens)))}"
                     + (" (an empty sentence)" if tokens.numel() == 0 else ""))


def agreement_margins(logits: Tensor, batch: AgreementBatch) -> Tensor:
    """``(B,)`` logit of the agreeing verb minus the logit of the same verb in the other
    number, read at ``predict_pos``. Positive = the model agrees with the subject."""
    if not isinstance(batch, AgreementBatch):
        raise TypeError(f"batch must be an AgreementBatch (from AgreementTask.sample or eval_batch), "
                        f"got {type(batch).__name__}")
    _check_logits(logits, batch.tokens, len(AGREEMENT_VOCAB) - 1)
    for name in ("correct_id", "wrong_id"):  # re-read: the batch's tensors may be changed in place
        check_ids(getattr(batch, name), f"batch.{name} (verb ids, read as columns of logits, V = "
                  f"{logits.shape[-1]})", logits.shape[-1], "ids")
    rows = torch.arange(len(batch), device=logits.device)
    at_verb = logits[rows, batch.predict_pos.to(logits.device)]  # (B, V)
    _refuse_non_finite_where_read(at_verb, "predict_pos (the position before the verb)")
    correct = at_verb.gather(1, batch.correct_id.to(logits.device).unsqueeze(1)).squeeze(1)
    wrong = at_verb.gather(1, batch.wrong_id.to(logits.device).unsqueeze(1)).squeeze(1)
    return correct - wrong


def agreement_accuracy(logits: Tensor, batch: AgreementBatch) -> dict[str, float]:
    """Share of sentences where the agreeing verb outscores its other-number form:
    ``{"all", "attractor", "no_attractor"}`` plus one entry per template present."""
    right = (agreement_margins(logits, batch) > 0).cpu()
    result = {"all": float(right.float().mean())}
    for name, keep in (("attractor", batch.attractor), ("no_attractor", ~batch.attractor)):
        result[name] = float(right[keep].float().mean()) if keep.any() else float("nan")
    for name in TEMPLATES:
        keep = torch.tensor([t == name for t in batch.template])
        if keep.any():
            result[name] = float(right[keep].float().mean())
    return result


# =====================================================================================
# Mixture: induction and agreement in one model (lesson 6)
# =====================================================================================
def _check_next_token_targets(batch: MixtureBatch) -> None:
    """Each of ``batch.targets`` is ``IGNORE_INDEX`` (-100) or the next token (``tokens[:, t + 1]``;
    the last column has none, so it is ignored); else a ValueError naming the first bad entry."""
    targets, tokens = batch.targets, batch.tokens
    nxt = torch.full_like(tokens, IGNORE_INDEX)
    nxt[:, :-1] = tokens[:, 1:]
    bad = ((targets != IGNORE_INDEX) & (targets != nxt)).nonzero()
    if bad.numel():
        row, col = (int(i) for i in bad[0])
        raise ValueError(f"MixtureBatch.targets must hold the next token (tokens[:, t + 1], "
                         f"{int(nxt[row, col])} here) or {IGNORE_INDEX} (not scored), got "
                         f"{int(targets[row, col])} at row {row}, column {col}")


def _check_mixture_real(batch: MixtureBatch) -> None:
    """``batch.real`` is True on every induction row (the first ``num_induction``) and on the
    sentences' tokens other than ``<pad>``, and a target is counted only where the position and
    its next token are both real; else a ValueError naming the first bad entry."""
    n, real = batch.num_induction, batch.real
    expected = torch.ones_like(real)
    expected[n:] = batch.tokens[n:] != PAD_ID
    counted = batch.targets[:, :-1] != IGNORE_INDEX
    rules = (("real", real != expected, real, f"be True on the induction rows (the first num_induction = "
              f"{n}) and on the sentences' tokens other than <pad> (id {PAD_ID})"),
             ("targets", counted & ~(real[:, :-1] & real[:, 1:]), batch.targets, f"be {IGNORE_INDEX} (not "
              "counted) where the position or its next token is padding (MixtureBatch.real False)"))
    for name, broken, values, wanted in rules:
        bad = broken.nonzero()
        if bad.numel():
            row, col = (int(i) for i in bad[0])
            raise ValueError(f"MixtureBatch.{name} must {wanted}, got {values[row, col].item()} at row "
                             f"{row}, column {col}")


@dataclass(frozen=True)
class MixtureBatch:
    """``tokens`` ``(B, T)`` long: the first ``num_induction`` rows are induction sequences,
    the rest agreement sentences (right-padded with ``<pad>``); ``targets`` ``(B, T)``: the next
    token, or ``-100`` where nothing is predicted (and wherever a position or its next token is
    padding); ``real`` ``(B, T)`` bool: not padding (every induction token, the sentences' tokens
    other than ``<pad>``), checked against ``tokens``.
    Frozen: ``num_induction``, which :meth:`task_parts` splits at, cannot change after the check.

    ``tokens`` must be ids >= 0; their upper bound is the model's vocabulary, which the batch does
    not know: an id beyond it is refused by the model that reads the batch."""

    tokens: Tensor
    targets: Tensor
    real: Tensor
    num_induction: int

    def __post_init__(self) -> None:
        check_record(self)
        _check_batch_tensors(self, tokens=(torch.long, "BT"), targets=(torch.long, "BT"),
                             real=(torch.bool, "BT"))
        _check_token_ids(self, "tokens")
        if self.num_induction > self.tokens.shape[0]:
            raise ValueError(f"MixtureBatch.num_induction must be at most the batch's {self.tokens.shape[0]} "
                             f"rows, got {self.num_induction}")
        _check_next_token_targets(self)
        _check_mixture_real(self)

    def task_parts(self) -> list[tuple[Tensor, Tensor]]:
        """The batch as ``[(tokens, targets)]`` per task: the induction rows ``(n, T)``, then the
        sentence rows ``(B - n, T')`` cut after the longest sentence (``T'`` its real tokens), so
        the padding columns after it are not computed. Every counted target stays: the parts'
        mean losses weighed by their counted targets give the batch's mean loss (up to float
        rounding). A part with no rows is left out."""
        n = self.num_induction
        sentences = slice(n, self.tokens.shape[0])
        cut = int(self.real[sentences].sum(1).max()) if self.tokens.shape[0] > n else 0
        parts = [(self.tokens[:n], self.targets[:n]),
                 (self.tokens[sentences, :cut], self.targets[sentences, :cut])]
        return [(tokens, targets) for tokens, targets in parts if tokens.numel()]


@dataclass(frozen=True)
class MixtureTask:
    """Induction sequences and agreement sentences for one model, in one vocabulary.

    Both tasks keep their own token ids, so the ids overlap (induction's random symbols
    1..63 are also words of the grammar); the first token tells the tasks apart: induction's
    ``BOS`` (0) or the sentences' ``<bos>`` (1). (With separate ids, 134 in all, the
    3-layer model of lesson 6 failed to form induction heads within 1,000 steps.)
    ``induction_share`` is the fraction of each batch that is induction sequences.
    """

    induction: InductionTask = InductionTask()
    agreement: AgreementTask = AgreementTask()
    induction_share: float = 0.5

    def __post_init__(self) -> None:
        if not isinstance(self.induction, InductionTask) or not isinstance(self.agreement, AgreementTask):
            raise TypeError(f"MixtureTask.induction and MixtureTask.agreement must be an InductionTask "
                            f"and an AgreementTask, got {type(self.induction).__name__} and "
                            f"{type(self.agreement).__name__}")
        if self.agreement.max_len > self.induction.seq_len:  # the two kinds share one (B, T) batch
            raise ValueError(
                f"agreement.max_len must be at most induction.seq_len={self.induction.seq_len} (sentences "
                f"are padded to the induction length, induction sequences are not), got "
                f"{self.agreement.max_len}"
            )
        share = check_real(self.induction_share,
                           "MixtureTask.induction_share (a share strictly between 0 and 1)")
        if not 0.0 < share < 1.0:
            raise ValueError(f"MixtureTask.induction_share must lie strictly between 0 and 1, got {share}")
        object.__setattr__(self, "induction_share", share)  # a plain float (a subclass's repr may raise)
        if BOS == BOS_ID:
            raise ValueError("the two tasks' start tokens must differ")

    @property
    def vocab_size(self) -> int:
        return max(self.induction.vocab_size, self.agreement.vocab_size)

    @property
    def seq_len(self) -> int:
        return max(self.induction.seq_len, self.agreement.max_len)

    @property
    def pad_id(self) -> int:
        return PAD_ID

    def pad(self, batch: AgreementBatch) -> AgreementBatch:
        """An agreement batch right-padded to :attr:`seq_len` (ids unchanged); a batch longer
        than :attr:`seq_len` (made by another grammar's task) is refused."""
        if not isinstance(batch, AgreementBatch):
            raise TypeError(f"batch must be an AgreementBatch, got {type(batch).__name__}")
        if batch.tokens.shape[1] > self.seq_len:
            raise ValueError(f"batch must be at most this mixture's seq_len={self.seq_len} tokens long, got "
                             f"{batch.tokens.shape[1]} (tokens of shape {tuple(batch.tokens.shape)}): was it "
                             f"sampled from another task than this mixture's agreement task?")
        tokens = torch.full((len(batch), self.seq_len), PAD_ID, dtype=torch.long)
        tokens[:, : batch.tokens.shape[1]] = batch.tokens
        return replace(batch, tokens=tokens)

    def sample(self, batch_size: int, generator: torch.Generator) -> MixtureBatch:
        """``round(batch_size * induction_share)`` induction sequences (training periods),
        then sentences (``batch_size`` at most 2**53: the share is taken in floats, exact up to there)."""
        _check_generator(generator)
        batch_size = check_int(batch_size, "batch_size", minimum=2, maximum=2**53)  # some of each task
        num_induction = min(max(round(batch_size * self.induction_share), 1), batch_size - 1)
        induction = self.induction.sample(num_induction, generator)
        sentences = self.pad(self.agreement.sample(batch_size - num_induction, generator))
        tokens = torch.cat([induction.tokens, sentences.tokens])  # (B, T)
        targets = torch.cat([induction.targets, sentences.targets])
        real = torch.cat([torch.ones_like(induction.tokens, dtype=torch.bool), sentences.tokens != PAD_ID])
        return MixtureBatch(tokens=tokens, targets=targets, real=real, num_induction=num_induction)

    def induction_eval(self, batch_size: int = 512, seed: int = 1234) -> InductionBatch:
        """The fixed held-out-period induction batch."""
        return self.induction.eval_batch(batch_size, seed)

    def agreement_eval(self, batch_size: int = 2000, seed: int = 4321) -> AgreementBatch:
        """The fixed agreement evaluation sentences, padded to :attr:`seq_len`."""
        return self.pad(self.agreement.eval_batch(batch_size, seed))
