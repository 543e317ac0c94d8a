"""A task that needs two relations at once, and a tiny model to compare 1 head with h heads.

The **two-key lookup**: each example is a short list of items, each item a *key* (an id
from ``num_keys``) holding a *symbol* (from ``num_symbols``). A question names two
different keys, ``a`` and ``b``; the answer is the ordered pair (symbol under ``a``,
symbol under ``b``), one of ``num_symbols ** 2`` classes. Each asked-for key may appear
on several items (1 to ``max_repeats`` copies, all holding the same symbol), like a fact
stated twice; the other items are distractors with other keys and random symbols.

The model (:class:`LookupModel`) embeds the question as one query vector, attends from
it to the items with :class:`course_utils.MultiHeadAttention` (keys from the item keys,
values from the item symbols only), and reads the answer out with a small MLP. A model
with 1 head and one with h heads have exactly the same parameters in number and shape.

Shapes: n examples, T = num_items, V = num_symbols, d = d_model, h heads.

:class:`LookupBatch` is a NamedTuple filled by :meth:`TwoKeyTask.sample`: when built (by
``_replace`` and ``_make`` too) it checks that its six tensors are int64 and of shapes that fit
each other, its ids >= 0 and its relations and answers consistent with its items (the upper
bounds belong to the task: the functions that take one with a model check that its keys,
symbols and classes fit the model's task). :class:`RunResult` is frozen and checks its fields
when built: its steps strictly increasing, its accuracies in [0, 1].
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm  # the text bar: no widget state is stored in executed notebooks

from ..attention.mha import MultiHeadAttention
from ..attention.shapes import count_parameters
from ..attention.validation import (
    MAX_DECIMALS,
    check_axes,
    check_callable,
    check_choice,
    check_distinct,
    check_finite,
    check_fits_in_memory,
    check_generator,
    check_head_dims,
    check_holds_values,
    check_ids,
    check_increasing,
    check_index,
    check_int,
    check_int_list,
    check_linear_weights_fit,
    check_model_holds_values,
    check_real,
    check_record,
    check_rows,
    freeze_fields,
    items_of,
    shown,
)
from ..env import check_seed, gradients_on, seed_everything, torch_threads
from ..parallel import default_workers, parallel_map

__all__ = [
    "EVAL_SEED",
    "TwoKeyTask",
    "LookupBatch",
    "pair_class",
    "split_pair_class",
    "LookupModel",
    "RelationsConfig",
    "RunResult",
    "evaluate",
    "train_lookup",
    "compare_heads",
    "accuracy_table",
    "plot_learning_curves",
    "count_parameters",
    "example_table",
    "attention_by_copies",
    "share_on_a",
    "weight_on_keys",
    "accuracy_by_share",
    "swap_fraction",
    "swap_chance",
    "plot_item_attention",
]

EVAL_SEED = 10_000  # every run is scored on the same held-out examples
_CHUNK_STEPS = 50  # training batches drawn per call to TwoKeyTask.sample


#: The most symbols whose V * V pair classes fit int64 (a 10**400 overflowed bare: battery 29).
_MAX_SYMBOLS = math.isqrt(2**63 - 1)


def pair_class(symbol_a: Tensor, symbol_b: Tensor, num_symbols: int) -> Tensor:
    """The class of the ordered answer (a's symbol, b's symbol): ``a * V + b``, shape kept."""
    V = check_int(num_symbols, "num_symbols", minimum=1, maximum=_MAX_SYMBOLS)
    check_ids(symbol_a, "symbol_a", V, "symbols")
    check_ids(symbol_b, "symbol_b", V, "symbols")
    if symbol_a.shape != symbol_b.shape:
        raise ValueError(f"symbol_a and symbol_b must have the same shape (one pair per entry), got "
                         f"{tuple(symbol_a.shape)} and {tuple(symbol_b.shape)}")
    return symbol_a * V + symbol_b


def split_pair_class(classes: Tensor, num_symbols: int) -> tuple[Tensor, Tensor]:
    """Inverse of :func:`pair_class`: ``(symbol_a, symbol_b)``, each shaped like ``classes``."""
    V = check_int(num_symbols, "num_symbols", minimum=1, maximum=_MAX_SYMBOLS)
    check_ids(classes, "classes", V * V, "pair classes")
    return classes // V, classes % V


class _LookupFields(NamedTuple):
    item_keys: Tensor  # (n, T) key id of each item
    item_symbols: Tensor  # (n, T) symbol held by each item
    query_keys: Tensor  # (n, 2) the two keys asked for, (a, b), a != b
    answer_symbols: Tensor  # (n, 2) symbol under a, symbol under b
    relation: Tensor  # (n, T) 0 = an item with key a, 1 = key b, -1 = distractor
    target: Tensor  # (n,) pair_class(answer a, answer b)


# each field's shape, in the dims n (examples) and T (items) that item_keys fixes
_LOOKUP_LAYOUT = {"item_keys": "nT", "item_symbols": "nT", "query_keys": "n2", "answer_symbols": "n2",
                  "relation": "nT", "target": "n"}
# the fields that hold ids (>= 0), and what they are
_LOOKUP_IDS = {"item_keys": "keys", "item_symbols": "symbols", "query_keys": "keys",
               "answer_symbols": "symbols", "target": "pair classes"}


class LookupBatch(_LookupFields):
    """``n`` examples of the two-key lookup (all int64), made by :meth:`TwoKeyTask.sample` and
    :meth:`take`. Checked when built: six int64 tensors, ``item_keys`` ``(n, T)`` fixing n and T
    for the others (a ValueError names ``LookupBatch.field`` and both shapes); keys, symbols
    and classes >= 0, ``relation`` following the keys, ``answer_symbols`` the symbols of the
    asked-for items and ``target`` their pair class ``a * V + b`` with one ``V`` for the whole
    batch (read off the batch itself). The upper bounds (``num_keys``, ``num_symbols``) belong to
    the task, which the batch does not know: the model that reads it checks them against its own
    task (``V`` included). A batch
    made by ``_replace`` or ``_make`` (the NamedTuple's copies) is checked the same way."""

    __slots__ = ()

    def __new__(cls, *args: Tensor, **kwargs: Tensor) -> LookupBatch:
        self = super().__new__(cls, *args, **kwargs)
        _check_lookup_fields(self)
        return self

    @classmethod
    def _make(cls, iterable) -> LookupBatch:
        """A batch from an iterable of the six fields, checked as :class:`LookupBatch` is (the
        NamedTuple's own ``_make``, which ``_replace`` calls too, skips ``__new__``)."""
        return cls(*iterable)

    @property
    def num_examples(self) -> int:
        return self.target.shape[0]

    def take(self, index: slice | Tensor) -> LookupBatch:
        """The examples at ``index`` (a slice, an index tensor, a list of ints or a bool mask of
        ``n`` entries); ``index`` must select at least one example, as ``AgreementBatch.take``'s rows.
        A slice selects what it selects from a Python list of the ``n`` examples (``slice(None,
        None, -1)`` reverses them); a zero step or non-int bounds are refused by name."""
        rows = _slice_rows(index, self.num_examples) if isinstance(index, slice) else index
        rows = check_rows(rows, "index", self.num_examples, "examples in the batch", nonempty=True)
        return LookupBatch(*(t[rows] for t in self))


def _slice_rows(index: slice, size: int) -> range:
    """The rows ``index`` selects from ``size`` examples, as Python slices a list of them."""
    try:
        return range(size)[index]
    except (TypeError, ValueError) as err:  # a zero step, float or str bounds
        raise ValueError(f"index as a slice must have int (or None) bounds and a non-zero step, got "
                         f"{shown(index)} ({err})") from None


def _check_lookup_fields(batch: LookupBatch) -> None:
    """The shapes of :class:`LookupBatch`'s fields against each other (their dtypes too)."""
    for name in _LOOKUP_LAYOUT:
        value = getattr(batch, name)
        if not isinstance(value, Tensor) or value.dtype != torch.int64:
            got = (f"dtype {value.dtype}" if isinstance(value, Tensor)
                   else f"{type(value).__name__} {shown(value, 40)}")
            raise TypeError(f"LookupBatch.{name} must be an int64 tensor, got {got}")
    if batch.item_keys.ndim != 2:
        raise ValueError(f"LookupBatch.item_keys must be (n, T), got shape {tuple(batch.item_keys.shape)}")
    n, T = batch.item_keys.shape
    for name, layout in _LOOKUP_LAYOUT.items():
        want = {"nT": (n, T), "n2": (n, 2), "n": (n,)}[layout]
        got = tuple(getattr(batch, name).shape)
        if got != want:
            raise ValueError(f"LookupBatch.{name} must be {want} (n = {n} examples, T = {T} items, from "
                             f"LookupBatch.item_keys {(n, T)}), got shape {got}")
    for name in _LOOKUP_LAYOUT:  # the checks below read values
        check_holds_values(getattr(batch, name), f"LookupBatch.{name}")
    for name in _LOOKUP_IDS:  # ids index embeddings: a negative one reads from the end
        values = getattr(batch, name)
        if values.numel() and int(values.min()) < 0:
            row = int((values < 0).nonzero()[0, 0])
            raise ValueError(f"LookupBatch.{name} must hold {_LOOKUP_IDS[name]} >= 0, got "
                             f"{int(values.min())} (first negative entry in row {row})")
    asked_a, asked_b = batch.query_keys[:, :1], batch.query_keys[:, 1:]
    wanted = torch.where(batch.item_keys == asked_a, 0, torch.where(batch.item_keys == asked_b, 1, -1))
    bad = (batch.relation != wanted).nonzero()
    if bad.numel():
        row, col = (int(i) for i in bad[0])
        raise ValueError(f"LookupBatch.relation must be 0 where an item holds the key a, 1 where it holds "
                         f"b and -1 for a distractor (from item_keys and query_keys), so "
                         f"{int(wanted[row, col])} at row {row}, item {col}; got "
                         f"{int(batch.relation[row, col])}")
    _check_answers(batch)
    _check_target(batch)


def _check_answers(batch: LookupBatch) -> None:
    """``answer_symbols`` are the symbols the asked-for items hold: ``[:, 0]`` on every item whose
    ``relation`` is 0 (key a), ``[:, 1]`` on every item whose relation is 1 (key b)."""
    for column, key in ((0, "a"), (1, "b")):
        held = batch.relation == column
        bad = (held & (batch.item_symbols != batch.answer_symbols[:, column:column + 1])).nonzero()
        if bad.numel():
            row, col = (int(i) for i in bad[0])
            raise ValueError(f"LookupBatch.answer_symbols[:, {column}] must be the symbol of the items under "
                             f"key {key} (relation {column}), but LookupBatch.item_symbols holds "
                             f"{int(batch.item_symbols[row, col])} at row {row} (item {col}) and "
                             f"answer_symbols {int(batch.answer_symbols[row, column])}: one of the two "
                             f"is wrong")


def _check_target(batch: LookupBatch) -> None:
    """``target`` is the pair class ``a * V + b`` of ``answer_symbols`` (a, b) with one ``V`` for the
    whole batch, above every symbol in it. The batch does not know its task's ``V`` (num_symbols),
    so ``V`` is read off the first example with ``a > 0`` (where ``a = 0``, the class is ``b``
    whatever ``V`` is); the model that reads the batch checks it against its own ``V``."""
    a, b = batch.answer_symbols.unbind(1)
    has_a = (a > 0).nonzero()
    V = None
    if has_a.numel():
        first = int(has_a[0, 0])
        V = (int(batch.target[first]) - int(b[first])) // int(a[first])
        largest = int(batch.answer_symbols.max())  # the items' symbols may be none (T = 0)
        if batch.item_symbols.numel():
            largest = max(largest, int(batch.item_symbols.max()))
        if V <= largest:
            raise ValueError(f"LookupBatch.target must be the pair class a * V + b of answer_symbols (a, b), "
                             f"with V (num_symbols) above every symbol in the batch (up to {largest}), got "
                             f"{int(batch.target[first])} at row {first}, where (a, b) = "
                             f"({int(a[first])}, {int(b[first])}): V would be {V}")
    want = b if V is None else a * V + b
    bad = (batch.target != want).nonzero()
    if bad.numel():
        row = int(bad[0, 0])
        read = "" if V is None else f" (V = {V}, read off row {first})"
        raise ValueError(f"LookupBatch.target must be the pair class a * V + b of answer_symbols (a, b), "
                         f"one V for the whole batch{read}, so {int(want[row])} at row {row}, where (a, b) = "
                         f"({int(a[row])}, {int(b[row])}); got {int(batch.target[row])}")


# What sample(n) allocates per example for the smallest task (num_items=2, num_keys=3):
# 12 * num_keys + 64 * num_items bytes (see its memory check).
_MIN_BYTES_PER_EXAMPLE = 12 * 3 + 64 * 2
# How LookupModel builds the values it reads: the item symbols alone, or tagged by their key.
# Anything else is refused by validation.check_choice (a TypeError for a value that is no str, a
# ValueError for another str); a str subclass is taken as the plain str it holds.
VALUE_KINDS = ("content", "tagged")


@dataclass(frozen=True)
class TwoKeyTask:
    """The two-key lookup. ``max_repeats=1`` gives every asked-for key exactly one item. The
    distractors' keys are drawn with replacement from the ``num_keys - 2`` keys not asked for,
    so ``num_keys`` may be below ``num_items`` (distractor keys then repeat more often; the
    asked-for keys still appear only in their own copies). Sizes
    beyond this machine's memory are refused where they would be allocated, not here: the
    number of examples by :meth:`sample`, ``num_keys`` and ``num_symbols`` by :class:`LookupModel`."""

    num_items: int = 8
    num_keys: int = 16
    num_symbols: int = 8
    max_repeats: int = 3

    def __post_init__(self) -> None:
        check_int(self.num_items, "TwoKeyTask.num_items", minimum=2)
        check_int(self.num_keys, "TwoKeyTask.num_keys", minimum=3)  # a, b and at least one distractor key
        # a class is a * V + b, a torch.int64: V * V must fit in it (3,037,000,499 squared does)
        check_int(self.num_symbols, "TwoKeyTask.num_symbols", minimum=2, maximum=math.isqrt(2**63 - 1))
        check_int(self.max_repeats, "TwoKeyTask.max_repeats", minimum=1)
        if 2 * self.max_repeats > self.num_items:
            raise ValueError(
                f"num_items={self.num_items} cannot hold max_repeats={self.max_repeats} copies of "
                f"each of the two asked-for keys: need num_items >= 2 * max_repeats"
            )

    @property
    def num_classes(self) -> int:
        """Number of possible answers: ordered pairs of symbols, V ** 2."""
        return self.num_symbols**2

    def sample(self, n: int, *, seed: int | None = None,
               generator: torch.Generator | None = None) -> LookupBatch:
        """``n`` examples, a deterministic function of ``seed`` (or of ``generator``'s state)."""
        n = check_int(n, "n", minimum=1)
        check_generator(generator)  # a seed given as generator=3 failed deep in torch.rand
        if (seed is None) == (generator is None):
            raise ValueError("pass exactly one of seed=... or generator=...")
        if generator is None:
            generator = torch.Generator().manual_seed(check_seed(seed))  # 0 <= seed < 2**64, named
        g, T, K, V = generator, self.num_items, self.num_keys, self.num_symbols
        # a few (n, K) and (n, T) tensors: a huge num_keys is named with n, since either may be the cause
        check_fits_in_memory(n * (12 * K + 64 * T), "n", f"{n} examples of {T} items, num_keys={K:,}")
        asked = torch.rand(n, K, generator=g).argsort(dim=1)[:, :2]  # (n, 2) distinct keys a, b
        copies = torch.randint(1, self.max_repeats + 1, (n, 2), generator=g)  # (n, 2)
        # distractor keys: uniform over the K - 2 keys that were not asked for
        other = torch.randint(0, K - 2, (n, T), generator=g)
        low, high = asked.min(dim=1, keepdim=True).values, asked.max(dim=1, keepdim=True).values
        other = other + (other >= low).long()
        other = other + (other >= high).long()
        # a random order of the T slots; the first copies[a] slots hold key a, the next hold b
        rank = torch.rand(n, T, generator=g).argsort(dim=1).argsort(dim=1)  # (n, T)
        is_a = rank < copies[:, :1]
        is_b = (rank >= copies[:, :1]) & (rank < copies.sum(dim=1, keepdim=True))
        answer = torch.randint(0, V, (n, 2), generator=g)  # (n, 2)
        noise = torch.randint(0, V, (n, T), generator=g)
        item_keys = torch.where(is_a, asked[:, :1], torch.where(is_b, asked[:, 1:], other))
        item_symbols = torch.where(is_a, answer[:, :1], torch.where(is_b, answer[:, 1:], noise))
        relation = torch.where(is_a, 0, torch.where(is_b, 1, -1))
        target = pair_class(answer[:, 0], answer[:, 1], V)
        return LookupBatch(item_keys, item_symbols, asked, answer, relation, target)


class LookupModel(nn.Module):
    """Question -> one query vector; attend to the items; MLP -> V**2 logits.

    Keys come from the item keys, values from the item symbols only (``values="content"``),
    so a value says *what* an item holds, not *where* or *under which key*. With
    ``values="tagged"`` the values are symbol + key embeddings instead.
    """

    def __init__(self, task: TwoKeyTask, d_model: int, num_heads: int, *, hidden: int = 64,
                 values: str = "content") -> None:
        super().__init__()
        if not isinstance(task, TwoKeyTask):
            raise TypeError(f"task must be a TwoKeyTask, got {type(task).__name__}")
        hidden = check_int(hidden, "hidden", minimum=1)
        values = check_choice(values, "values", VALUE_KINDS)
        d_model = check_int(d_model, "d_model", minimum=1)
        check_linear_weights_fit(  # the embeddings, attention and readout, before allocating
            d_model, (3 * task.num_keys, task.num_symbols, 4 * d_model, hidden),
            also=((hidden, task.num_classes),),
            sizes={"d_model": d_model, "hidden": hidden, "task.num_keys": task.num_keys,
                   "task.num_symbols": task.num_symbols})
        self.task, self.values = task, values
        self.key_embedding = nn.Embedding(task.num_keys, d_model)
        self.symbol_embedding = nn.Embedding(task.num_symbols, d_model)
        self.ask_first = nn.Embedding(task.num_keys, d_model)  # "what is under key a?"
        self.ask_second = nn.Embedding(task.num_keys, d_model)  # "what is under key b?"
        self.attention = MultiHeadAttention(d_model, num_heads)  # checks d_model % num_heads
        self.readout = nn.Sequential(nn.Linear(d_model, hidden), nn.ReLU(),
                                     nn.Linear(hidden, task.num_classes))

    def forward(self, batch: LookupBatch, *, need_weights: bool = False
                ) -> tuple[Tensor, Tensor | None]:
        """Returns ``(logits (n, V**2), weights (n, h, 1, T) or None)``."""
        _check_batch_fits(self, batch)
        a, b = batch.query_keys.unbind(dim=1)  # (n,), (n,)
        query = (self.ask_first(a) + self.ask_second(b)).unsqueeze(1)  # (n, 1, d)
        keys = self.key_embedding(batch.item_keys)  # (n, T, d)
        values = self.symbol_embedding(batch.item_symbols)  # (n, T, d)
        if self.values == "tagged":
            values = values + keys
        out, weights = self.attention(query, keys, values, need_weights=need_weights)  # (n, 1, d)
        return self.readout(out.squeeze(1)), weights  # (n, V**2)


def _check_batch(batch: object) -> None:
    """``batch`` is a :class:`LookupBatch`."""
    if not isinstance(batch, LookupBatch):
        raise TypeError(f"batch must be a LookupBatch (from TwoKeyTask.sample), got "
                        f"{type(batch).__name__} {shown(batch, 60)}")


def _check_batch_fits(model: object, batch: object) -> None:
    """``model`` is a :class:`LookupModel` and ``batch`` a :class:`LookupBatch` of its task: as
    many items per example, and keys and symbols in the ranges its embeddings know (another
    task's batch would otherwise fail in an embedding, "index out of range in self")."""
    if not isinstance(model, LookupModel):
        raise TypeError(f"model must be a LookupModel, got {type(model).__name__} {shown(model, 60)}")
    check_model_holds_values(model)
    _check_batch(batch)
    task = model.task
    T = batch.item_keys.shape[1]
    if T != task.num_items:
        raise ValueError(f"batch has {T} items per example, the model's task has {task.num_items}")
    for name, high, what in (("item_keys", task.num_keys, "keys"), ("query_keys", task.num_keys, "keys"),
                             ("item_symbols", task.num_symbols, "symbols"),
                             ("answer_symbols", task.num_symbols, "symbols")):
        try:
            check_ids(getattr(batch, name), f"batch.{name}", high, what)
        except ValueError as err:
            raise ValueError(f"{err}: the batch is not from the model's task {task}") from None
    # the class a * V + b depends on V: a batch of another task's V is scored against wrong classes
    want = pair_class(batch.answer_symbols[:, 0], batch.answer_symbols[:, 1], task.num_symbols)
    bad = (batch.target != want).nonzero()
    if bad.numel():
        row = int(bad[0, 0])
        raise ValueError(f"batch.target must be the pair class a * V + b of the answer symbols (a, b) with "
                         f"the model's V = {task.num_symbols}, so {int(want[row])} at row {row}, got "
                         f"{int(batch.target[row])}: the batch is not from the model's task {task}")


@dataclass(frozen=True)
class RelationsConfig:
    """The lookup model's width and the training settings shared by every run of a comparison
    (named apart from :class:`course_utils.model.train.TrainConfig`, which trains TinyTransformers).
    ``batch_size`` and ``eval_size`` beyond this machine's memory are refused here; ``d_model``
    and ``hidden`` where they are allocated, by :class:`LookupModel`. The held-out accuracy is
    measured before the first step, every ``eval_every`` steps and after the last, so an
    ``eval_every`` above ``steps`` gives a learning curve of two points: before and after."""

    d_model: int = 16
    hidden: int = 64
    steps: int = 400
    batch_size: int = 256
    lr: float = 3e-3
    eval_every: int = 25
    eval_size: int = 2048
    values: str = "content"

    def __post_init__(self) -> None:
        for name in ("d_model", "hidden", "steps", "batch_size", "eval_every", "eval_size"):
            # stored back as a Python int: a NumPy int stayed and broke JSON (battery 29)
            value = check_int(getattr(self, name), f"RelationsConfig.{name}", minimum=1)
            object.__setattr__(self, name, value)
        if check_real(self.lr, "RelationsConfig.lr") <= 0:  # NaN, infinity, bools, strings refused there
            raise ValueError(f"RelationsConfig.lr must be a finite number > 0, got {shown(self.lr)}")
        # stored back as the plain str (a str subclass is read by its value)
        object.__setattr__(self, "values", check_choice(self.values, "RelationsConfig.values", VALUE_KINDS))
        for name in ("batch_size", "eval_size"):  # before training draws the first batch
            n = getattr(self, name)
            check_fits_in_memory(n * _MIN_BYTES_PER_EXAMPLE, name, f"{n:,} examples of at least "
                                 f"{_MIN_BYTES_PER_EXAMPLE} bytes each, the smallest TwoKeyTask's")


@dataclass(frozen=True)
class RunResult:
    """One training run: its learning curve and final held-out accuracies. Frozen, with the
    curve kept as tuples (lists given are stored as tuples), so a result checked once stays as
    it was checked: ``steps`` strictly increase, one ``accuracy`` (a fraction) per step.
    ``recorded`` (step -> what ``on_eval`` returned) is kept read-only too (a list ``on_eval``
    returned is kept as a tuple)."""

    num_heads: int
    seed: int
    steps: tuple[int, ...]
    accuracy: tuple[float, ...]  # held-out accuracy of the whole answer, at each step in `steps`
    relation_accuracy: tuple[float, float]  # final accuracy of symbol a alone, of symbol b alone
    model: LookupModel = field(repr=False)
    recorded: dict[int, Any] = field(default_factory=dict, repr=False)  # step -> on_eval's result

    def __post_init__(self) -> None:
        freeze_fields(self)  # lists kept as tuples, recorded read-only
        # final_accuracy reads the last accuracy; accuracies are fractions of answers right
        check_record(self, nonempty=("steps", "accuracy"), fractions=("accuracy", "relation_accuracy"))
        check_increasing(self.steps, "RunResult.steps")  # a learning curve goes forward in time
        if len(self.steps) != len(self.accuracy):
            raise ValueError(f"RunResult.accuracy must hold one accuracy per step in RunResult.steps "
                             f"({len(self.steps)}), got {len(self.accuracy)}")
        heads = self.model.attention.num_heads
        if self.num_heads != heads:
            raise ValueError(f"RunResult.num_heads must be the number of heads of RunResult.model ({heads}), "
                             f"got {self.num_heads}")

    @property
    def final_accuracy(self) -> float:
        return self.accuracy[-1]


@torch.no_grad()
def evaluate(model: LookupModel, batch: LookupBatch) -> tuple[float, float, float]:
    """Accuracy of the whole answer, of symbol a alone and of symbol b alone (``batch`` must hold
    at least one example: the share of none right is no number; the model's logits must be
    finite: an argmax over NaN is no prediction)."""
    _check_batch_fits(model, batch)
    _check_not_empty(batch)
    was_training = model.training
    model.eval()
    logits = model(batch)[0]  # (n, V*V)
    model.train(was_training)
    check_finite(logits, "model(batch)'s logits", "does the model hold NaN or infinite weights? an argmax "
                 "over them is no prediction, so no accuracy can be read")
    predicted = logits.argmax(dim=-1)  # (n,)
    pred_a, pred_b = split_pair_class(predicted, model.task.num_symbols)
    return (
        (predicted == batch.target).double().mean().item(),
        (pred_a == batch.answer_symbols[:, 0]).double().mean().item(),
        (pred_b == batch.answer_symbols[:, 1]).double().mean().item(),
    )


def _check_run_settings(task: object, config: object, on_eval: object) -> None:
    """The arguments every run of :func:`train_lookup` shares: checked once in the parent by
    :func:`compare_heads`, so a bad one is named here rather than inside a worker's traceback."""
    if not isinstance(task, TwoKeyTask):
        raise TypeError(f"task must be a TwoKeyTask, got {type(task).__name__} {shown(task, 60)}")
    if not isinstance(config, RelationsConfig):
        raise TypeError(f"config must be a RelationsConfig, got {type(config).__name__} {shown(config, 60)}")
    if on_eval is not None:  # called at every evaluation with four arguments
        check_callable(on_eval, "on_eval", "callable or None: a function on_eval(num_heads, seed, step, "
                       "model)", nargs=4)


def train_lookup(task: TwoKeyTask, num_heads: int, seed: int,
                 config: RelationsConfig = RelationsConfig(), *,
                 on_eval: Callable[[int, int, int, LookupModel], Any] | None = None) -> RunResult:
    """Train one :class:`LookupModel` with Adam on fresh examples (deterministic in ``seed``).

    The model's initial weights and the training examples depend only on ``seed``, not on
    ``num_heads``: 1 head and h heads start from the very same numbers and see the same data.
    A longer run sees the same first batches as a shorter one, then more.
    ``on_eval(num_heads, seed, step, model)``, if given, is called at every evaluation
    (step 0 included), e.g. to record what the heads attend to during training; what it
    returns, unless ``None``, is kept in ``RunResult.recorded[step]``.
    """
    num_heads = check_int(num_heads, "num_heads", minimum=1)
    seed = check_seed(seed)  # a Python int in 0 <= seed < 2**64, as manual_seed takes
    _check_run_settings(task, config, on_eval)
    with torch_threads(1), gradients_on("train_lookup"):  # a caller's torch.no_grad() too
        seed_everything(seed)
        model = LookupModel(task, config.d_model, num_heads, hidden=config.hidden,
                            values=config.values)
        data = torch.Generator().manual_seed(seed)
        held_out = task.sample(config.eval_size, seed=EVAL_SEED)
        optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
        steps, accuracy = [0], [evaluate(model, held_out)[0]]
        recorded: dict[int, Any] = {}

        def record(step: int) -> None:
            if on_eval is not None and (value := on_eval(num_heads, seed, step, model)) is not None:
                recorded[step] = value

        record(0)
        for step in range(1, config.steps + 1):
            # examples come in chunks of _CHUNK_STEPS batches from one generator, so batch k is
            # the same whatever `steps` is (and sampling costs one call per chunk, not per step)
            if (step - 1) % _CHUNK_STEPS == 0:
                chunk = task.sample(_CHUNK_STEPS * config.batch_size, generator=data)
            first = ((step - 1) % _CHUNK_STEPS) * config.batch_size
            batch = chunk.take(slice(first, first + config.batch_size))
            loss = F.cross_entropy(model(batch)[0], batch.target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % config.eval_every == 0 or step == config.steps:
                steps.append(step)
                accuracy.append(evaluate(model, held_out)[0])
                record(step)
        final = evaluate(model, held_out)
    return RunResult(num_heads, seed, steps, accuracy, (final[1], final[2]), model, recorded)


def compare_heads(task: TwoKeyTask, heads: Sequence[int] = (1, 2), seeds: Sequence[int] = range(5),
                  config: RelationsConfig = RelationsConfig(), *,
                  on_eval: Callable[[int, int, int, LookupModel], Any] | None = None,
                  workers: int | None = None, progress: bool = False) -> list[RunResult]:
    """Train every (number of heads, seed) pair with the same config; results in that order.

    The runs are independent, so they go ``workers`` at a time on separate CPU cores
    (:func:`~course_utils.parallel.parallel_map`; default: one per core), with the same results
    as one after another. ``on_eval`` is passed to :func:`train_lookup`; with several workers it
    runs in a worker process, so keep what it returns (``RunResult.recorded``), not its side effects.
    ``progress=True`` shows a text progress bar of the finished runs: the runs then go in rounds
    of ``workers`` (runs of one config take about equally long, so little time is lost waiting)."""
    heads = check_distinct(check_int_list(heads, "heads", minimum=1), "heads", "head counts")
    seeds = check_distinct(check_int_list(seeds, "seeds", minimum=0), "seeds")
    _check_run_settings(task, config, on_eval)  # here, before any worker starts
    for num_heads in heads:  # as the model's attention will, before the workers start
        check_head_dims(config.d_model, num_heads, heads_name="heads")
    if not isinstance(progress, bool):
        raise TypeError(f"progress must be True or False, got {type(progress).__name__} {shown(progress)}")
    jobs = [(h, s) for h in heads for s in seeds]

    def run(job: tuple[int, int]) -> RunResult:
        return train_lookup(task, *job, config, on_eval=on_eval)

    if not progress:
        return parallel_map(run, jobs, workers=workers)
    at_once = default_workers(len(jobs)) if workers is None else check_int(workers, "workers", minimum=1)
    results: list[RunResult] = []
    with tqdm(total=len(jobs), desc=f"training {len(jobs)} runs", unit="run", leave=False) as bar:
        for first in range(0, len(jobs), at_once):
            results += parallel_map(run, jobs[first:first + at_once], workers=at_once)
            bar.update(len(jobs[first:first + at_once]))
    return results


def _head_label(num_heads: int, d_model: int) -> str:
    word = "head" if num_heads == 1 else "heads"
    return f"{num_heads} {word} (dk={d_model // num_heads})"


def accuracy_table(results: Sequence[RunResult], *, which: str = "final", digits: int = 3):
    """A pandas table: one row per seed plus ``mean``, one column per number of heads.

    ``which``: ``"final"`` (whole answer), ``"a"`` or ``"b"`` (one symbol alone); a str subclass
    is read as the plain str it holds, a value that is no str is a TypeError and another str a
    ValueError, both naming ``which`` and the three choices.
    ``results`` must be runs of one ``d_model`` (each column says its ``dk``), one per (heads,
    seed): runs of two widths, or one (heads, seed) twice, are a ValueError naming ``results``.
    """
    import pandas as pd

    which = check_choice(which, "which", ("final", "a", "b"))  # a str subclass: by its plain value
    _check_digits(digits)
    _check_results(results)
    pick = {"final": lambda r: r.final_accuracy, "a": lambda r: r.relation_accuracy[0],
            "b": lambda r: r.relation_accuracy[1]}[which]
    d_model = results[0].model.attention.d_model
    rows: dict[str, dict[str, float]] = {}
    for r in results:
        rows.setdefault(f"seed {r.seed}", {})[_head_label(r.num_heads, d_model)] = pick(r)
    table = pd.DataFrame(rows).T
    table.loc["mean"] = table.mean()
    return table.round(digits)


def _check_digits(digits: object) -> None:
    """The decimals a table is rounded to: an int in 0..MAX_DECIMALS (a negative count rounds the
    accuracies and shares, all in [0, 1], to tens, i.e. to 0; beyond MAX_DECIMALS pandas' round
    overflows)."""
    digits = check_int(digits, "digits", minimum=0, maximum=MAX_DECIMALS)


def _check_results(results: object) -> None:
    """``results`` is a non-empty list of :class:`RunResult` (what :func:`compare_heads` returns),
    one per (number of heads, seed), all of models of one width ``d_model``: a table column or a
    curve is labelled with one ``dk = d_model / h``, and runs of two widths would be averaged under
    it."""
    if isinstance(results, RunResult) or not isinstance(results, Sequence) or isinstance(results, str):
        raise TypeError(f"results must be a list of RunResult (what compare_heads returns), got "
                        f"{type(results).__name__}")
    items_of(results, "results", "a list of RunResult (what compare_heads returns)")  # its len() may raise
    if not results:
        raise ValueError("results must hold at least one RunResult (what compare_heads returns), got an "
                         "empty list: nothing to show")
    wrong = next((i for i, r in enumerate(results) if not isinstance(r, RunResult)), None)
    if wrong is not None:
        raise TypeError(f"results[{wrong}] must be a RunResult, got {type(results[wrong]).__name__}")
    # a table cell and a curve's mean hold one run per (heads, seed): a repeat would be merged
    check_distinct([(r.num_heads, r.seed) for r in results], "results", "runs (one per (num_heads, seed))")
    widths = [r.model.attention.d_model for r in results]
    other = next((i for i, width in enumerate(widths) if width != widths[0]), None)
    if other is not None:
        raise ValueError(f"results must all be runs of one model width d_model (each column is labelled "
                         f"with its dk = d_model / heads, and its seeds averaged), got d_model {widths[0]} "
                         f"in results[0] and {widths[other]} in results[{other}]: show each width's runs "
                         f"in a table of its own")


def _check_title(title: object) -> None:
    """A plot's ``title`` is text (``""`` for the default): an int or bytes would be drawn as its
    repr (``b'...'``) or silently replaced by the default (``b""``)."""
    if type(title) is not str:  # a str subclass's own str() may raise when matplotlib draws it
        raise TypeError(f"title must be a str ('' for the default title), got {type(title).__name__} "
                        f"{shown(title, 60)}")


def plot_learning_curves(results: Sequence[RunResult], ax=None, *, title: str = ""):
    """Held-out accuracy against training step: thin lines per seed, thick line per mean.
    ``results`` as in :func:`accuracy_table` (one ``d_model``), and the runs of one head count
    must share one grid of steps."""
    import matplotlib.pyplot as plt

    check_axes(ax)
    _check_title(title)
    _check_results(results)
    for h in {r.num_heads for r in results}:  # the mean is taken step by step
        grids = sorted({r.steps for r in results if r.num_heads == h})
        if len(grids) > 1:
            raise ValueError(f"results of {h} heads must share one grid of steps (their mean is taken step "
                             f"by step), got {len(grids)}: {shown(grids, 120)} (trained with other steps or "
                             f"eval_every?)")
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3))
    d_model = results[0].model.attention.d_model
    for i, h in enumerate(sorted({r.num_heads for r in results})):
        runs = [r for r in results if r.num_heads == h]
        color = f"C{i}"
        for r in runs:
            ax.plot(r.steps, r.accuracy, color=color, alpha=0.3, linewidth=1)
        mean = torch.tensor([r.accuracy for r in runs]).mean(dim=0)
        ax.plot(runs[0].steps, mean, color=color, linewidth=2.5,
                label=f"{_head_label(h, d_model)}, mean of {len(runs)}")
    ax.set_xlabel("training step")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title or "Two-key lookup: learning curves")
    ax.legend(loc="lower right", fontsize=8)
    ax.grid(alpha=0.3)
    return ax


RELATION_NAMES = {0: "a", 1: "b", -1: "-"}


def example_table(batch: LookupBatch, index: int = 0):
    """One example as a pandas table: one row per item (key, symbol, which key it answers)."""
    import pandas as pd

    _check_batch(batch)
    index = check_index(index, "index", batch.num_examples, "examples in the batch")
    return pd.DataFrame({
        "key": batch.item_keys[index].tolist(),
        "symbol": batch.item_symbols[index].tolist(),
        "answers key": [RELATION_NAMES[r] for r in batch.relation[index].tolist()],
    }).rename_axis("item")


@torch.no_grad()
def _predict_with_weights(model: LookupModel, batch: LookupBatch) -> tuple[Tensor, Tensor]:
    """``(predicted class (n,), attention weights (n, h, T))`` in eval mode."""
    _check_batch_fits(model, batch)
    was_training = model.training
    model.eval()
    logits, weights = model(batch, need_weights=True)  # (n, V*V), (n, h, 1, T)
    model.train(was_training)
    why = "does the model hold NaN or infinite weights? every metric over them would be NaN or class 0"
    check_finite(logits, "model(batch)'s logits", why)  # (a NaN table, no error: battery 27)
    check_finite(weights, "model(batch)'s attention weights", why)
    return logits.argmax(dim=-1), weights[:, :, 0, :]


@torch.no_grad()
def attention_by_copies(model: LookupModel, batch: LookupBatch, *, digits: int = 2):
    """Mean attention each head puts on key a's items and on key b's items, and the accuracy,
    for every (copies of a, copies of b). Rows: (copies a, copies b); the weights of one head
    on all items sum to 1, the rest goes to distractors."""
    import pandas as pd

    _check_digits(digits)
    _check_not_empty(batch)
    predicted, weights = _predict_with_weights(model, batch)  # (n,), (n, h, T)
    right = predicted == batch.target  # (n,)
    on_a = (weights * (batch.relation == 0)[:, None, :]).sum(-1)  # (n, h)
    on_b = (weights * (batch.relation == 1)[:, None, :]).sum(-1)  # (n, h)
    copies_a, copies_b = (batch.relation == 0).sum(1), (batch.relation == 1).sum(1)  # (n,), (n,)
    rows = {}
    for m_a in sorted(set(copies_a.tolist())):
        for m_b in sorted(set(copies_b.tolist())):
            sel = (copies_a == m_a) & (copies_b == m_b)
            if not sel.any():
                continue
            row = {}
            for i in range(weights.shape[1]):
                row[f"head {i} on a"] = on_a[sel, i].mean().item()
                row[f"head {i} on b"] = on_b[sel, i].mean().item()
            row["accuracy"] = right[sel].double().mean().item()
            rows[(m_a, m_b)] = row
    table = pd.DataFrame(rows).T
    table.index = table.index.set_names(["copies of a", "copies of b"])
    return table.round(digits)


def share_on_a(model: LookupModel, batch: LookupBatch, head: int = 0) -> Tensor:
    """Of the weight one head puts on the asked-for items, the share on key a's items:
    ``w_a / (w_a + w_b)``, shape (n,). 1 = only a, 0 = only b."""
    _check_batch_fits(model, batch)
    head = check_int(head, "head", minimum=0)
    if head >= model.attention.num_heads:
        raise ValueError(f"head must be < {model.attention.num_heads} (the model's heads), got {head}")
    weights = _predict_with_weights(model, batch)[1][:, head]  # (n, T)
    on_a = (weights * (batch.relation == 0)).sum(-1)  # (n,)
    on_b = (weights * (batch.relation == 1)).sum(-1)  # (n,)
    return on_a / (on_a + on_b)


@torch.no_grad()
def weight_on_keys(model: LookupModel, batch: LookupBatch) -> Tensor:
    """Mean weight each head puts on key a's items and on key b's items, shape (h, 2)
    (``batch`` must hold at least one example)."""
    _check_not_empty(batch)
    weights = _predict_with_weights(model, batch)[1]  # (n, h, T)
    on_a = (weights * (batch.relation == 0)[:, None, :]).sum(-1).mean(0)  # (h,)
    on_b = (weights * (batch.relation == 1)[:, None, :]).sum(-1).mean(0)  # (h,)
    return torch.stack([on_a, on_b], dim=1)


def accuracy_by_share(model: LookupModel, batch: LookupBatch, *, head: int = 0,
                      edges: Sequence[float] = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 1.0), digits: int = 3):
    """A pandas table: the questions grouped by :func:`share_on_a` into bands
    ``[edges[i], edges[i+1])`` (the last band includes 1): their number, the accuracy, the
    number of wrong answers and how many of those are the two symbols swapped
    (see :func:`swap_fraction`)."""
    import pandas as pd

    _check_digits(digits)
    if isinstance(edges, (str, bytes, dict, set, frozenset)) or not isinstance(edges, Sequence):
        raise TypeError(f"edges must be a list or tuple of numbers rising from 0 to 1, such as "
                        f"(0.0, 0.5, 1.0), got {type(edges).__name__} {shown(edges, 60)}")
    edges = [check_real(e, f"edges[{i}]") for i, e in enumerate(edges)]
    if len(edges) < 2 or edges[0] != 0.0 or edges[-1] != 1.0 or edges != sorted(set(edges)):
        raise ValueError(f"edges must rise strictly from 0 to 1, got {edges}")
    _check_not_empty(batch)
    share = share_on_a(model, batch, head)  # (n,)
    predicted = _predict_with_weights(model, batch)[0]  # (n,)
    right = predicted == batch.target  # (n,)
    swapped = (predicted == _swapped_class(batch, model.task.num_symbols)) & ~right  # (n,)
    rows = {}
    for i, (low, high) in enumerate(zip(edges[:-1], edges[1:], strict=True)):
        last = i == len(edges) - 2
        inside = (share >= low) & ((share <= high) if last else (share < high))
        label = f"[{low:.1f}, {high:.1f}{']' if last else ')'}"
        rows[label] = {"questions": int(inside.sum()),
                       "accuracy": right[inside].double().mean().item() if inside.any() else float("nan"),
                       "wrong": int((inside & ~right).sum()), "swapped": int((inside & swapped).sum())}
    table = pd.DataFrame(rows).T.rename_axis("share on a")
    for column in ("questions", "wrong", "swapped"):
        table[column] = table[column].astype(int)
    return table.round(digits)


def _swapped_class(batch: LookupBatch, num_symbols: int) -> Tensor:
    """The class of the answer with the two symbols swapped, (b's symbol, a's symbol), (n,)."""
    return pair_class(batch.answer_symbols[:, 1], batch.answer_symbols[:, 0], num_symbols)


def _check_not_empty(batch: object) -> None:
    """A mean or a fraction over no questions is no number (NaN, or a table of no rows): refuse
    the empty batch by name. The one rule of every measure that averages over the batch."""
    if isinstance(batch, LookupBatch) and batch.num_examples == 0:
        raise ValueError("batch must hold at least one example (a question) to average over: a mean "
                         f"over none is NaN; got a LookupBatch of 0 examples, shape "
                         f"{tuple(batch.item_keys.shape)}")


def swap_fraction(model: LookupModel, batch: LookupBatch) -> float:
    """Of the wrongly answered questions, the fraction answered with the two symbols swapped:
    (b's symbol, a's symbol) instead of (a's symbol, b's symbol). NaN if nothing is wrong."""
    _check_not_empty(batch)
    predicted = _predict_with_weights(model, batch)[0]  # (n,)
    swapped = _swapped_class(batch, model.task.num_symbols)  # (n,)
    wrong = predicted != batch.target
    if not wrong.any():
        return float("nan")
    return (predicted[wrong] == swapped[wrong]).double().mean().item()


def swap_chance(model: LookupModel, batch: LookupBatch) -> float:
    """What :func:`swap_fraction` would be by chance: if each wrong answer were any of the
    other ``V**2 - 1`` classes with equal probability, it would be the swapped one with
    probability ``1 / (V**2 - 1)`` when the two symbols differ, and never when they are equal
    (then the swap is the right answer). The mean over the wrongly answered questions; NaN if
    nothing is wrong."""
    _check_not_empty(batch)
    predicted = _predict_with_weights(model, batch)[0]  # (n,)
    wrong = predicted != batch.target
    if not wrong.any():
        return float("nan")
    differ = batch.answer_symbols[wrong, 0] != batch.answer_symbols[wrong, 1]
    return differ.double().mean().item() / (model.task.num_classes - 1)


@torch.no_grad()
def plot_item_attention(model: LookupModel, batch: LookupBatch, index: int = 0, ax=None, *,
                        title: str = ""):
    """Bar chart of each head's attention from the question to the items of one example.

    The title names the two keys asked for, the true answer and the model's answer.
    """
    import matplotlib.pyplot as plt

    _check_batch(batch)
    index = check_index(index, "index", batch.num_examples, "examples in the batch")
    _check_batch_fits(model, batch)
    check_axes(ax)
    _check_title(title)
    if ax is None:
        _, ax = plt.subplots(figsize=(5, 3))
    one = batch.take(slice(index, index + 1))
    predicted, weights = _predict_with_weights(model, one)
    weights = weights[0]  # (h, T)
    h, T = weights.shape
    width = 0.8 / h
    for i in range(h):
        ax.bar((torch.arange(T) + (i - (h - 1) / 2) * width).tolist(), weights[i].tolist(), width=width,
               color="C0" if h == 1 else f"C{i + 2}", label=f"head {i}")
    names = [RELATION_NAMES[r] for r in one.relation[0].tolist()]
    ax.set_xticks(range(T), [f"{k}\n({n})" for k, n in zip(one.item_keys[0].tolist(), names,
                                                              strict=True)])
    ax.set_xlabel("item: key (which key it answers)")
    ax.set_ylabel("attention weight")
    ax.set_ylim(0, 1)
    V = model.task.num_symbols
    a, b = one.query_keys[0].tolist()
    truth = tuple(one.answer_symbols[0].tolist())
    guess = tuple(t.item() for t in split_pair_class(predicted[0], V))
    verdict = "right" if guess == truth else "WRONG"
    header = title or f"{h} head{'s' * (h > 1)}"
    ax.set_title(f"{header}: asked a = {a}, b = {b}\nanswer {truth}, model says {guess} ({verdict})",
                 fontsize=9)
    ax.legend(fontsize=8)
    return ax


TrainConfig = RelationsConfig  # the name lesson 01 used before 2026-11-26: an alias, one class
