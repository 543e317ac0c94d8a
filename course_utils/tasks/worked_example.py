"""The two-head worked example of seed 004 (Alex, Emma, Daniel): load, validate, recompute.

The article prints its inputs (``X`` 3x6, two heads' ``W_Q``, ``W_K``, ``W_V``, and ``W_O``
5x6) and its results rounded to 3 decimals. This module

* loads ``data/worked_example_004.json`` and checks every shape, label and number (finite,
  at most :data:`LARGEST_VALUE` in size, so that no step overflows), raising
  :class:`WorkedExampleError` (a ``ValueError``) that names what was expected and what
  arrived;
* recomputes every step with the course's own :func:`scaled_dot_product_attention`, in
  float64 (:func:`compute_steps`);
* recomputes each printed step a second way, from the article's *own printed* (rounded)
  inputs to that step (:func:`recompute_from_article`), to tell rounding from slips;
* compares entry by entry (:func:`compare_with_article`).

The two heads have different value widths (d_v = 3 and 2), so the concatenation is 5 wide
and ``W_O`` is 5x6. Standard multi-head attention (``MultiHeadAttention``) uses equal
widths d_k = d_v = d_model / h; that is why this example is computed head by head.

:class:`Table`, :class:`Head`, :class:`CheapExpansion`, :class:`WorkedExample` are records filled
by this module's functions; each checks its fields when built (kinds, shapes, labels, finite
numbers, and that the parts fit each other). Their NumPy arrays stay mutable, so the functions
that compute from an example check its numbers again.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from ..attention.mha import scaled_dot_product_attention
from ..attention.validation import (
    MAX_DECIMALS,
    check_holds_values,
    check_int,
    check_record,
    finite,
    is_real,
    plain_str,
    shown,
)
from ..paths import DATA_DIR, check_path, path_kind

__all__ = [
    "WORKED_EXAMPLE_PATH",
    "PRINTED_STEPS",
    "ROUNDING",
    "INHERITED_TOL",
    "VERDICTS",
    "LARGEST_VALUE",
    "output_rounding_budget",
    "STEP_INPUTS",
    "DOCUMENTED_SLIPS",
    "WorkedExampleError",
    "Table",
    "Head",
    "CheapExpansion",
    "WorkedExample",
    "load_worked_example",
    "parse_worked_example",
    "compute_steps",
    "round_half_up",
    "article_matmul",
    "recompute_from_article",
    "compare_with_article",
    "side_by_side",
]

WORKED_EXAMPLE_PATH = DATA_DIR / "worked_example_004.json"

#: The article's printed tables, in the order the article computes them.
# the keys a worked-example file holds at its top level ("description" is optional prose)
TOP_LEVEL_KEYS = ("description", "people", "features", "X", "heads", "W_O", "article_printed")
PRINTED_STEPS = ("Q2", "K2", "V2", "S2", "A1", "A2", "Output1", "Output2", "Concat", "Final")

#: A value printed with 3 decimals is within half a unit of the last digit of the truth.
ROUNDING = 0.0005
#: Recomputed from the article's own rounded inputs, a printed value should land within
#: 1.5 units of its last digit (rounding inside the step, e.g. sqrt(2) taken as 1.414).
INHERITED_TOL = 0.0015
#: The three verdicts of :func:`compare_with_article`, in the order the lesson lists them.
VERDICTS = ("rounding", "inherited", "slip")

#: The largest size (absolute value) a number of a worked example may have. The scores
#: ``(X W_Q)(X W_K)^T`` multiply four of its numbers and add ``d_model^2 d_k`` such products (the
#: article's way rounds products of two). Four numbers of 1e50 multiply to 1e200, far below
#: float64's limit (1.8e308) at any size of table; much larger ones overflow a score or an output
#: to infinity, and the error would then name a computed table, not the input.
LARGEST_VALUE = 1e50
_TOO_LARGE = ("too large (the steps multiply up to four of the example's numbers, which could overflow "
              "float64)")

#: Which printed tables each printed table is computed from (in this article).
STEP_INPUTS: dict[str, tuple[str, ...]] = {
    "Q2": (), "K2": (), "V2": (), "S2": ("Q2", "K2"), "A1": (), "A2": ("S2",),
    "Output1": ("A1",), "Output2": ("A2", "V2"), "Concat": ("Output1", "Output2"), "Final": ("Concat",),
}

#: (step, row, column) -> explanation, for every entry whose verdict is "slip".
#: ``tests/test_worked_example.py`` checks that this list and the computed verdicts agree.
DOCUMENTED_SLIPS: dict[tuple[str, str, str], str] = {
    ("Output1", "Emma", "info-upscale"): (
        "the clearest slip: printed 1.068, exact 1.180; the printed A^1 row with V^1 gives 1.181, and "
        "the gap (0.113) is about 40 times what rounding 3-decimal inputs could cause"
    ),
    ("Output1", "Alex", "info-sichuan"): "printed 1.909, exact 1.918; not reproduced from A^1 and V^1",
    ("Output1", "Alex", "info-budget"): "printed 1.270, exact 1.299; not reproduced from A^1 and V^1",
    ("Output1", "Alex", "info-upscale"): "printed 0.533, exact 0.547; not reproduced from A^1 and V^1",
    ("Output1", "Daniel", "info-sichuan"): "printed 0.697, exact 0.686; not reproduced from A^1 and V^1",
    ("Output1", "Daniel", "info-budget"): "printed 1.310, exact 1.304; not reproduced from A^1 and V^1",
    ("Output2", "Alex", "price_info"): (
        "printed 2.614, exact 2.635; the article's own A^2 and V^2 give 2.636"
    ),
    ("Output2", "Alex", "experience_info"): (
        "printed 0.734, exact 0.718; the article's own A^2 and V^2 give 0.718"
    ),
    ("Output2", "Daniel", "experience_info"): (
        "printed 2.572, exact 2.580; the article's own A^2 and V^2 give 2.581"
    ),
    ("Output1", "Emma", "info-sichuan"): (
        "printed 1.142, exact 1.144; small (rounding could move it this far), but the printed A^1 "
        "with V^1 gives 1.144"
    ),
    ("Output1", "Daniel", "info-upscale"): (
        "printed 1.666, exact 1.670; small (rounding could move it this far), but the printed A^1 "
        "with V^1 gives 1.671"
    ),
    ("Output2", "Emma", "experience_info"): (
        "printed 1.633, exact 1.635; small (rounding could move it this far), but the article's own "
        "A^2 and V^2 give 1.637"
    ),
}


class WorkedExampleError(ValueError):
    """The worked-example file is missing a part, or a part has the wrong shape or labels."""


# -- data containers ------------------------------------------------------------------
@dataclass(frozen=True)
class Table:
    """A labelled matrix: ``values`` is ``(len(rows), len(cols))`` floats (float64), finite, with
    at least one row and one column; ``name`` a non-empty str. ``values`` is kept as a read-only
    copy: a write into it (or into the array given) cannot put a NaN past the check."""

    name: str
    values: np.ndarray
    rows: tuple[str, ...]
    cols: tuple[str, ...]

    def __post_init__(self) -> None:
        _check_table_fields(self)
        _keep_read_only_copies(self, "values")

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]

    def frame(self, decimals: int | None = 3) -> pd.DataFrame:
        """A pandas DataFrame with the labels, rounded to ``decimals`` (None: unrounded)."""
        decimals = _check_shown_decimals(decimals)
        df = pd.DataFrame(self.values, index=list(self.rows), columns=list(self.cols))
        return df if decimals is None else df.round(decimals)


@dataclass(frozen=True)
class Head:
    """One head's projections: ``w_q``, ``w_k`` ``(d_model, d_k)``, ``w_v`` ``(d_model, d_v)``."""

    name: str
    w_q: Table
    w_k: Table
    w_v: Table

    def __post_init__(self) -> None:
        check_record(self)
        _check_head_fields(self)

    @property
    def d_k(self) -> int:
        return self.w_q.shape[1]

    @property
    def d_v(self) -> int:
        return self.w_v.shape[1]


@dataclass(frozen=True)
class CheapExpansion:
    """The article's written-out sum for Alex's ``cheap`` entry of the final output."""

    head_outputs: np.ndarray  # (5,) Alex's row of the concatenation, as printed
    weights: np.ndarray  # (5,) the cheap column of W_O
    total: float  # printed result (4.001)
    positions: tuple[int, int]  # the two terms it singles out
    products: np.ndarray  # (2,) their printed products (1.194, 2.509)
    sum: float  # their printed sum (3.703)

    def __post_init__(self) -> None:
        check_record(self, signed=("total", "sum"))
        n = self.head_outputs.shape[0] if self.head_outputs.ndim == 1 else -1
        for name, want in (("head_outputs", (n,)), ("weights", (n,)), ("products", (2,))):
            value = getattr(self, name)
            if n < 0 or value.shape != want or not np.issubdtype(value.dtype, np.number) \
                    or not np.isfinite(value).all():
                shape = want if n >= 0 else "(n,)"
                raise ValueError(f"CheapExpansion.{name} must be finite numbers of shape {shape} (n: "
                                 f"head_outputs' length), got {value.dtype} {value.shape}: "
                                 f"{shown(value, 60)}")
        if not all(p < n for p in self.positions):
            raise ValueError(f"CheapExpansion.positions must be indices into the {n} head outputs, got "
                             f"{self.positions}")
        _check_cheap_sums(self)
        _keep_read_only_copies(self, "head_outputs", "weights", "products")


def _keep_read_only_copies(record: Table | CheapExpansion, *names: str) -> None:
    """Replace the checked array fields ``names`` of the frozen ``record`` by read-only copies, so
    that the record stays as checked: a later write raises NumPy's ``ValueError: assignment
    destination is read-only`` instead of changing a checked number."""
    for name in names:
        array = np.array(getattr(record, name), copy=True)
        array.setflags(write=False)
        object.__setattr__(record, name, array)


def _check_cheap_sums(cheap: CheapExpansion) -> None:
    """The printed results agree with the printed inputs: ``total`` = sum of head_outputs *
    weights, ``products`` = the terms at ``positions``, ``sum`` = their sum. The article prints
    rounded numbers (3 and 2 decimals), so each must agree within 1% of the terms' absolute sum
    (at least 0.01), not to the last bit; a sign or a digit off is refused, naming the field."""
    terms = cheap.head_outputs * cheap.weights
    tolerance = 0.01 * max(1.0, float(np.abs(terms).sum()))
    picked = terms[list(cheap.positions)]
    checks = (("total", cheap.total, terms.sum()), ("products[0]", cheap.products[0], picked[0]),
              ("products[1]", cheap.products[1], picked[1]), ("sum", cheap.sum, picked.sum()))
    for name, got, want in checks:
        if abs(float(got) - float(want)) > tolerance:
            raise ValueError(f"CheapExpansion.{name} must agree with head_outputs * weights (about "
                             f"{float(want):.4g}, within {tolerance:.3g} for the printed rounding), got "
                             f"{got}")


@dataclass(frozen=True)
class WorkedExample:
    """Inputs, weights and the article's printed results."""

    people: tuple[str, ...]
    features: tuple[str, ...]
    x: Table  # (T, d_model) = (3, 6)
    heads: tuple[Head, ...]
    w_o: Table  # (sum of d_v, d_model) = (5, 6)
    article: dict[str, Table]  # printed results, keyed by PRINTED_STEPS
    cheap: CheapExpansion

    def __post_init__(self) -> None:
        check_record(self, nonempty=("people", "features", "heads"))
        if set(self.article) != set(PRINTED_STEPS):
            raise ValueError(f"WorkedExample.article must hold the printed steps {PRINTED_STEPS}, got the "
                             f"keys {sorted(self.article)}")
        if self.x.rows != self.people or self.x.cols != self.features:
            raise ValueError(f"WorkedExample.x must be (people, features) = ({len(self.people)}, "
                             f"{len(self.features)}), labelled {shown(self.people, 60)} and "
                             f"{shown(self.features, 80)}, got shape {self.x.shape}, rows "
                             f"{shown(self.x.rows, 60)}, "
                             f"cols {shown(self.x.cols, 80)}")
        for i, head in enumerate(self.heads):
            if head.w_q.rows != self.features:
                raise ValueError(f"WorkedExample.heads[{i}] must read the {len(self.features)} features "
                                 f"{shown(self.features, 80)} (its rows), got {shown(head.w_q.rows, 80)}")
        d_concat = sum(head.d_v for head in self.heads)
        if self.w_o.shape[0] != d_concat or self.w_o.cols != self.features:
            raise ValueError(f"WorkedExample.w_o must be (sum of the heads' d_v, features) = ({d_concat}, "
                             f"{len(self.features)}) with the features as columns, got shape "
                             f"{self.w_o.shape}, cols {shown(self.w_o.cols, 80)}")


# -- validation helpers ---------------------------------------------------------------
def _check_matrix(x: object, name: str, layout: str) -> np.ndarray:
    """``x`` is a 2-D NumPy array of real numbers (``layout`` names its dims in the message)."""
    if not isinstance(x, np.ndarray):
        raise TypeError(f"{name} must be a 2-D NumPy array {layout}, got {type(x).__name__} {shown(x, 60)}"
                        + ("; wrap it in np.array(...)" if isinstance(x, (list, tuple)) else ""))
    if x.ndim != 2:
        raise ValueError(f"{name} must be 2-D {layout}, got shape {x.shape}")
    if x.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {x.dtype}")
    return x


def _check_finite_matrix(x: object, name: str, layout: str) -> np.ndarray:
    """:func:`_check_matrix`, and every entry finite (else a ValueError naming the first one)."""
    _check_matrix(x, name, layout)
    _check_all_finite(x, name)
    return x


def _check_all_finite(x: np.ndarray, name: str) -> None:
    """Every entry of the numeric array ``x`` (any shape, a 0-d one too) is finite; else a
    ValueError naming ``name``, the first bad index and its value."""
    if not np.isfinite(x).all():
        bad = tuple(int(i) for i in np.argwhere(~np.isfinite(np.atleast_1d(x)))[0])
        where = f" at index {bad}" if x.ndim else ""
        raise ValueError(f"{name} must hold finite numbers, got {np.atleast_1d(x)[bad]}{where}")


def _check_not_too_large(x: np.ndarray, name: str) -> None:
    """Every entry of the numeric array ``x`` (any shape, a 0-d one too) is at most
    :data:`LARGEST_VALUE` in size; else a ValueError naming ``name``, the first one too large and
    its index. For the example's inputs, not its results: a score may well be larger."""
    too_large = np.abs(np.atleast_1d(x)) > LARGEST_VALUE
    if too_large.any():
        bad = tuple(int(i) for i in np.argwhere(too_large)[0])
        where = f" at index {bad}" if x.ndim else ""
        what = "hold numbers" if x.ndim else "be a number"
        raise ValueError(f"{name} must {what} at most {LARGEST_VALUE:g} in size, got "
                         f"{np.atleast_1d(x)[bad]:g}{where}: {_TOO_LARGE}")


def _check_table_fields(table: Table) -> None:
    """A :class:`Table`'s name is a str, its labels non-empty tuples of distinct strs (a frame indexed by a
    repeated label gives several rows for one), and its values a 2-D array of finite numbers with
    one row per row label and one column per column label. Messages name ``Table(name).field``."""
    if not isinstance(table.name, str) or not table.name:  # the name labels every message below
        error = TypeError if not isinstance(table.name, str) else ValueError
        raise error(f"Table.name must be a non-empty str, got {type(table.name).__name__} "
                    f"{shown(table.name, 60)}")
    label = f"Table({shown(table.name)})"
    for field_name in ("rows", "cols"):
        labels = getattr(table, field_name)
        if not isinstance(labels, tuple) or not all(isinstance(item, str) for item in labels):
            raise TypeError(f"{label}.{field_name} must be a tuple of strs, got "
                            f"{type(labels).__name__} {shown(labels, 60)}")
        if not labels:  # a table of no rows (or columns) has no number to show or multiply
            raise ValueError(f"{label}.{field_name} must name at least one "
                             f"{'row' if field_name == 'rows' else 'column'}, got ()")
        repeated = sorted({item for item in labels if labels.count(item) > 1})
        if repeated:
            raise ValueError(f"{label}.{field_name} must be distinct labels, got {shown(labels, 80)}, which "
                             f"repeats {repeated}")
    values = _check_finite_matrix(table.values, f"{label}.values", "(len(rows), len(cols))")
    if values.dtype.kind != "f":  # bools or ints: no weights or products of the worked example
        raise TypeError(f"{label}.values must be a float array (float64, as the worked example's numbers "
                        f"are), got dtype {values.dtype}")
    if values.shape != (len(table.rows), len(table.cols)):
        raise ValueError(f"{label}.values must have one row per row label and one column "
                         f"per column label, {(len(table.rows), len(table.cols))}, got shape {values.shape} "
                         f"for rows {shown(table.rows, 60)} and cols {shown(table.cols, 60)}")


def _check_head_fields(head: Head) -> None:
    """A :class:`Head`'s three projections read the same inputs (the same row labels, d_model of
    them), and ``w_q``, ``w_k`` have the same column labels (d_k), as ``Q K^T`` needs."""
    for name in ("w_k", "w_v"):
        table = getattr(head, name)
        if table.rows != head.w_q.rows:
            raise ValueError(f"Head({shown(head.name)}).{name} must have the rows of Head.w_q (one per input "
                             f"feature, {len(head.w_q.rows)}), got {len(table.rows)} rows "
                             f"{shown(table.rows, 60)} "
                             f"against w_q's {shown(head.w_q.rows, 60)}")
    if head.w_k.shape[1] != head.w_q.shape[1]:
        raise ValueError(f"Head({shown(head.name)}).w_k must have as many columns as Head.w_q (d_k = "
                         f"{head.w_q.shape[1]}: Q K^T pairs them), got {head.w_k.shape[1]}")


def _key_texts(keys: Any) -> list[str]:
    """JSON object keys as sorted text for a message: a str key as the plain str it holds (a str
    subclass's own ``__str__`` may raise), any other key as :func:`shown` writes it (its ``str()``
    may raise too: battery 32), so keys of any types sort together."""
    return sorted(plain_str(key, "key") if isinstance(key, str) else shown(key) for key in keys)


def _require(obj: Any, key: str, where: str) -> Any:
    if not isinstance(obj, dict):
        raise WorkedExampleError(f"{where} must be a JSON object, got {type(obj).__name__}")
    if key not in obj:
        raise WorkedExampleError(f"{where} is missing the key {shown(key)} (has {_key_texts(obj)})")
    return obj[key]


def _refuse_unknown_keys(obj: Any, known: tuple[str, ...], where: str) -> None:
    """``obj`` is a JSON object holding only keys from ``known``: a misspelt key (``"W_o"``) would
    otherwise be ignored while the real one is reported missing, or silently left out if optional."""
    if not isinstance(obj, dict):
        raise WorkedExampleError(f"{where} must be a JSON object, got {type(obj).__name__}")
    unknown = _key_texts(key for key in obj if key not in known)
    if unknown:
        raise WorkedExampleError(f"{where} has unknown keys {unknown}; expected keys from {sorted(known)}")


def _labels(obj: Any, where: str) -> tuple[str, ...]:
    if not isinstance(obj, list) or not obj or not all(isinstance(s, str) and s for s in obj):
        raise WorkedExampleError(f"{where} must be a non-empty list of non-empty strings, got {shown(obj)}")
    if len(set(obj)) != len(obj):
        raise WorkedExampleError(f"{where} has duplicate labels: {shown(obj)}")
    return tuple(obj)


def _number(v: Any, where: str) -> float:
    """A number of the file: a finite real (no bool) :data:`LARGEST_VALUE` or less in size, else a
    :class:`WorkedExampleError` naming ``where`` (``W_O.values[0][0]``) and the value."""
    if not is_real(v):
        raise WorkedExampleError(f"{where} must be a number, got {type(v).__name__} {shown(v)}")
    if not finite(v):
        raise WorkedExampleError(f"{where} must be a finite number, got {shown(v)}")
    try:
        _check_not_too_large(np.asarray(float(v)), where)
    except ValueError as err:
        raise WorkedExampleError(str(err)) from None
    return float(v)


def _vector(obj: Any, length: int, where: str) -> np.ndarray:
    if not isinstance(obj, list) or len(obj) != length:
        raise WorkedExampleError(f"{where} must be a list of {length} numbers, got {shown(obj)}")
    return np.array([_number(v, f"{where}[{i}]") for i, v in enumerate(obj)])


def _table(
    obj: Any,
    name: str,
    *,
    rows: tuple[str, ...] | None = None,
    cols: tuple[str, ...] | None = None,
    shape: tuple[int | None, int | None] = (None, None),
) -> Table:
    """Parse ``{"rows", "cols", "values"}``; check labels against ``rows``/``cols`` and the
    shape against ``shape`` (None = any)."""
    row_labels = _labels(_require(obj, "rows", name), f"{name}.rows")
    col_labels = _labels(_require(obj, "cols", name), f"{name}.cols")
    values = _require(obj, "values", name)
    if not isinstance(values, list) or not all(isinstance(r, list) for r in values):
        raise WorkedExampleError(f"{name}.values must be a list of rows (lists of numbers)")
    labelled = (len(row_labels), len(col_labels))
    got = (len(values), sorted({len(r) for r in values}))
    if len(values) != labelled[0] or got[1] != [labelled[1]]:
        widths = ", ".join(str(w) for w in got[1]) or "none"
        raise WorkedExampleError(
            f"{name}.values has {got[0]} rows of length {widths}, but its labels say "
            f"{labelled[0]} x {labelled[1]} ({len(row_labels)} rows, {len(col_labels)} cols)"
        )
    want = tuple(w if w is not None else g for w, g in zip(shape, labelled, strict=True))
    if labelled != want:
        raise WorkedExampleError(f"{name} must have shape {want}, got {labelled}")
    if rows is not None and row_labels != rows:
        raise WorkedExampleError(f"{name} rows must be {list(rows)}, got {list(row_labels)}")
    if cols is not None and col_labels != cols:
        raise WorkedExampleError(f"{name} columns must be {list(cols)}, got {list(col_labels)}")
    array = np.array(
        [[_number(v, f"{name}.values[{i}][{j}]") for j, v in enumerate(r)] for i, r in enumerate(values)]
    )
    return Table(name, array, row_labels, col_labels)


# -- loading --------------------------------------------------------------------------
def parse_worked_example(data: Any) -> WorkedExample:
    """Validate the decoded JSON ``data`` and build a :class:`WorkedExample`. A top-level key
    outside :data:`TOP_LEVEL_KEYS` is refused by name, as :meth:`ModelConfig.from_dict` does.
    Every number must be finite and at most :data:`LARGEST_VALUE` in size (a larger one would
    overflow a step): a :class:`WorkedExampleError` names the table and the cell
    (``W_O.values[0][0]``). Errors name ``data`` (:func:`load_worked_example` adds the file's name)."""
    top = "data (the decoded JSON)"  # the argument: there may be no file
    _refuse_unknown_keys(data, TOP_LEVEL_KEYS, top)
    people = _labels(_require(data, "people", top), "people")
    features = _labels(_require(data, "features", top), "features")
    T, d_model = len(people), len(features)
    x = _table(_require(data, "X", top), "X", rows=people, cols=features)

    raw_heads = _require(data, "heads", top)
    if not isinstance(raw_heads, list) or not raw_heads:
        raise WorkedExampleError(f"heads must be a non-empty list of heads, got {shown(raw_heads)}")
    heads = []
    for i, raw in enumerate(raw_heads, start=1):
        name = _require(raw, "name", f"heads[{i - 1}]")
        if not isinstance(name, str):
            raise WorkedExampleError(f"heads[{i - 1}].name must be a string, got {shown(name)}")
        w_q = _table(_require(raw, "W_Q", f"head {i}"), f"W_Q^{i}", rows=features)
        w_k = _table(_require(raw, "W_K", f"head {i}"), f"W_K^{i}", rows=features,
                     shape=(d_model, w_q.shape[1]))
        w_v = _table(_require(raw, "W_V", f"head {i}"), f"W_V^{i}", rows=features)
        heads.append(Head(name, w_q, w_k, w_v))
    d_concat = sum(h.d_v for h in heads)
    w_o = _table(_require(data, "W_O", top), "W_O", cols=features, shape=(d_concat, d_model))

    printed = _require(data, "article_printed", top)
    if len(heads) < 2:
        raise WorkedExampleError(f"the article's tables need at least 2 heads, got {len(heads)}")
    h2 = heads[1]
    # (shape, column labels) each printed table must have; None = any labels
    expected: dict[str, tuple[tuple[int, int], tuple[str, ...] | None]] = {
        "Q2": ((T, h2.d_k), None),  # the article shortens these column names
        "K2": ((T, h2.d_k), h2.w_k.cols),
        "V2": ((T, h2.d_v), h2.w_v.cols),
        "S2": ((T, T), people),
        "Concat": ((T, d_concat), w_o.rows),
        "Final": ((T, d_model), features),
    }
    for i, head in enumerate(heads[:2], start=1):
        expected[f"A{i}"] = ((T, T), people)
        expected[f"Output{i}"] = ((T, head.d_v), head.w_v.cols)
    article = {
        step: _table(_require(printed, step, "article_printed"), f"article {step}", rows=people,
                     cols=expected[step][1], shape=expected[step][0])
        for step in PRINTED_STEPS
    }
    raw_cheap = _require(printed, "cheap_expansion", "article_printed")
    n = d_concat
    terms = _require(raw_cheap, "two_largest_terms", "cheap_expansion")
    positions = _require(terms, "positions", "cheap_expansion.two_largest_terms")
    if (not isinstance(positions, list) or len(positions) != 2
            or not all(isinstance(p, int) and not isinstance(p, bool) and 0 <= p < n for p in positions)):
        raise WorkedExampleError(
            f"cheap_expansion positions must be 2 indices in [0, {n}), got {shown(positions)}"
        )
    cheap = CheapExpansion(
        head_outputs=_vector(_require(raw_cheap, "head_outputs", "cheap_expansion"), n,
                             "cheap_expansion.head_outputs"),
        weights=_vector(_require(raw_cheap, "weights", "cheap_expansion"), n, "cheap_expansion.weights"),
        total=_number(_require(raw_cheap, "total", "cheap_expansion"), "cheap_expansion.total"),
        positions=(positions[0], positions[1]),
        products=_vector(_require(terms, "products", "two_largest_terms"), 2, "two_largest_terms.products"),
        sum=_number(_require(terms, "sum", "two_largest_terms"), "two_largest_terms.sum"),
    )
    return WorkedExample(people, features, x, tuple(heads), w_o, article, cheap)


def load_worked_example(path: str | Path = WORKED_EXAMPLE_PATH) -> WorkedExample:
    """Read and validate the worked example (default: ``data/worked_example_004.json``)."""
    check_path(path, "path", "a JSON file")
    path = Path(path)
    kind = path_kind(path)  # never opens it: a FIFO would block the read forever
    if kind == "missing":
        raise FileNotFoundError(f"worked-example file not found: {path}")
    if kind == "a directory":
        raise IsADirectoryError(f"path must name the worked-example JSON file, got {path}, which is a folder")
    if kind is not None:  # a broken link, a symlink loop, a FIFO, a socket, a device, unreadable
        raise WorkedExampleError(f"path must name a regular JSON file, got {path}, which is {kind}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise WorkedExampleError(f"{path.name} is not valid JSON: {exc}") from exc
    except RecursionError:  # arrays or objects nested thousands deep: no worked example is
        raise WorkedExampleError(f"{path.name} nests its JSON arrays or objects too deeply to read (the "
                                 f"worked example is a few levels deep)") from None
    except UnicodeDecodeError as exc:  # a binary file: not text at all
        raise WorkedExampleError(f"{path.name} is not a JSON text file (UTF-8), it holds bytes that are "
                                 f"not text: {exc.reason} at byte {exc.start}") from None
    try:
        return parse_worked_example(data)
    except WorkedExampleError as exc:
        raise WorkedExampleError(f"{path.name}: {exc}") from None


# -- computing ------------------------------------------------------------------------
def _check_example(example: object) -> None:
    """``example`` is a :class:`WorkedExample` (what :func:`load_worked_example` returns) whose
    numbers are still finite and at most :data:`LARGEST_VALUE` in size, as the file's must be:
    its arrays are mutable, so a value set to NaN after loading (or an example built by hand) is
    found here (a :class:`WorkedExampleError` naming the field and the entry), not as a failed
    comparison or an overflow deep inside the computation."""
    if not isinstance(example, WorkedExample):
        raise TypeError(f"example must be a WorkedExample (from load_worked_example()), got "
                        f"{type(example).__name__} {shown(example, 60)}")
    tables = {"x": example.x, "w_o": example.w_o,
              **{f"heads[{i}].{name}": getattr(head, name) for i, head in enumerate(example.heads)
                 for name in ("w_q", "w_k", "w_v")},
              **{f"article[{shown(step)}]": table for step, table in example.article.items()}}
    arrays = {**{f"{field}.values": table.values for field, table in tables.items()},
              **{f"cheap.{name}": getattr(example.cheap, name) for name in ("head_outputs", "weights")}}
    for field, values in arrays.items():
        try:
            _check_finite_matrix(np.atleast_2d(values), f"example.{field}", "")
            _check_not_too_large(values, f"example.{field}")
        except (TypeError, ValueError) as err:
            raise WorkedExampleError(f"{err} (changed after loading? load_worked_example() again)") from None


def compute_steps(example: WorkedExample) -> dict[str, Table]:
    """Every step, exactly (float64), with the course's ``scaled_dot_product_attention``.

    Keys: ``Q1 K1 V1 S1 A1 Output1``, the same for head 2 (and further heads),
    ``Concat`` and ``Final``. ``S`` are the scaled scores ``Q K^T / sqrt(d_k)``. A number of
    ``example`` that is not finite or is larger than :data:`LARGEST_VALUE` is refused before any
    step (:class:`WorkedExampleError` naming the field and the entry).
    """
    _check_example(example)
    people = example.people
    x = torch.tensor(example.x.values, dtype=torch.float64)  # (T, d_model)
    steps: dict[str, Table] = {}
    outputs = []
    for i, head in enumerate(example.heads, start=1):
        q = x @ torch.tensor(head.w_q.values)  # (T, d_k)
        k = x @ torch.tensor(head.w_k.values)  # (T, d_k)
        v = x @ torch.tensor(head.w_v.values)  # (T, d_v)
        out, weights = scaled_dot_product_attention(q, k, v)  # (T, d_v), (T, T)
        scores = q @ k.T / math.sqrt(head.d_k)  # (T, T), shown for teaching
        if not torch.allclose(torch.softmax(scores, dim=-1), weights, rtol=0, atol=1e-12):
            raise AssertionError("scores and weights disagree")  # pragma: no cover
        for key, value, cols in (
            ("Q", q, head.w_q.cols), ("K", k, head.w_k.cols), ("V", v, head.w_v.cols),
            ("S", scores, people), ("A", weights, people), ("Output", out, head.w_v.cols),
        ):
            steps[f"{key}{i}"] = Table(f"{key}{i}", value.numpy(), people, tuple(cols))
        outputs.append(out)
    concat = torch.cat(outputs, dim=-1)  # (T, sum of d_v)
    final = concat @ torch.tensor(example.w_o.values)  # (T, d_model)
    steps["Concat"] = Table("Concat", concat.numpy(), people, example.w_o.rows)
    steps["Final"] = Table("Final", final.numpy(), people, example.features)
    return steps


def _check_decimals(decimals: object, *, none_ok: bool = False) -> int:
    """The decimals a value is rounded to: an int in 0..``MAX_DECIMALS`` (15; float64 holds about
    15 significant digits; 10.0**decimals overflows beyond ~300). A negative count is refused: it
    rounds to tens, which turns every value of the worked example (all well below 10) into 0, and
    :meth:`Table.frame` refuses it too. A non-int gets a TypeError; an int below 0 or above 15 a
    ValueError quoting the range 0..15. ``none_ok``: the message says None would do too (the caller
    handles None)."""
    decimals = check_int(decimals, "decimals")
    wanted = f"decimals must be {'None or ' if none_ok else ''}an int"
    if decimals < 0:
        raise ValueError(f"{wanted} >= 0 (a negative count rounds to tens, which shows every value here "
                         f"as 0), got {decimals}")
    if decimals > MAX_DECIMALS:  # the one range the message quotes: 0..MAX_DECIMALS, never below 0
        raise ValueError(f"{wanted} in 0..{MAX_DECIMALS}, got {decimals}")
    return decimals


def _check_shown_decimals(decimals: object) -> int | None:
    """Decimals for a table shown to a reader: None (unrounded) or :func:`_check_decimals`."""
    return None if decimals is None else _check_decimals(decimals, none_ok=True)


def round_half_up(x: np.ndarray | float, decimals: int = 3) -> np.ndarray:
    """Round as people do on paper (0.0105 -> 0.011), not to the nearest even digit.
    ``x``: finite numbers; ``decimals``: an int >= 0, as :meth:`Table.frame` takes."""
    decimals = _check_decimals(decimals)
    if isinstance(x, torch.Tensor):
        check_holds_values(x, "x")  # a meta tensor has no numbers to round
    array = np.asarray(x)
    if array.dtype == object or array.dtype.kind not in "iuf":
        raise TypeError(f"x must be a number or an array of numbers, got {type(x).__name__} {shown(x, 60)} "
                        f"(dtype {array.dtype}); a str is not parsed, and a bool is not a number here")
    _check_all_finite(array, "x")  # NaN or infinity would round to itself without a word
    scale = 10.0**decimals
    x = array.astype(np.float64)
    return np.sign(x) * np.floor(np.abs(x) * scale + 0.5 + 1e-9) / scale


def article_matmul(a: np.ndarray, b: np.ndarray, decimals: int = 3) -> np.ndarray:
    """``a @ b`` the way the article does it by hand: every product ``a[i, j] * b[j, k]``
    rounded to ``decimals`` before the sum. ``(n, m) @ (m, p) -> (n, p)``, NumPy arrays."""
    _check_finite_matrix(a, "a", "(n, m)")
    _check_finite_matrix(b, "b", "(m, p)")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"article_matmul needs (n, m) @ (m, p), got {a.shape} @ {b.shape}")
    return round_half_up(a[:, :, None] * b[None, :, :], decimals).sum(axis=1)


def _softmax_rows(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def recompute_from_article(example: WorkedExample) -> dict[str, Table]:
    """Each printed step recomputed from the article's *own printed* inputs to that step,
    with the article's habit of rounding every product to 3 decimals (:func:`article_matmul`).

    ``Q2, K2, V2`` start from the exact ``X`` and weights. ``A1`` has no inputs printed in
    this article, so it is the exact value. ``Output1`` uses the printed ``A1`` and ``V1``
    computed the article's way (this article does not print ``V1``).
    """
    _check_example(example)
    a = {k: t.values for k, t in example.article.items()}
    x, (h1, h2) = example.x.values, example.heads[:2]
    values = {
        "Q2": article_matmul(x, h2.w_q.values),
        "K2": article_matmul(x, h2.w_k.values),
        "V2": article_matmul(x, h2.w_v.values),
        "S2": article_matmul(a["Q2"], a["K2"].T) / math.sqrt(h2.d_k),
        "A1": compute_steps(example)["A1"].values,
        "A2": _softmax_rows(a["S2"]),
        "Output1": article_matmul(a["A1"], article_matmul(x, h1.w_v.values)),
        "Output2": article_matmul(a["A2"], a["V2"]),
        "Concat": np.hstack([a["Output1"], a["Output2"]]),
        "Final": article_matmul(a["Concat"], example.w_o.values),
    }
    return {k: Table(k, v, example.article[k].rows, example.article[k].cols) for k, v in values.items()}


def compare_with_article(example: WorkedExample) -> pd.DataFrame:
    """One row per printed entry: ``step, row, col, article, exact, from_own_inputs``
    (:func:`recompute_from_article`), ``diff`` (article - exact) and ``verdict``:

    * ``rounding``: the exact value correctly rounded (``|diff| <= ROUNDING``), or reproduced
      (within ``INHERITED_TOL``) from the article's own rounded inputs, which carry no slip,
      with its habit of rounding every product;
    * ``inherited``: reproduced from the article's own inputs, but those carry a slip;
    * ``slip``: not reproduced from the article's own inputs, however small the gap.
    """
    exact = compute_steps(example)
    own = recompute_from_article(example)
    records, has_slip = [], {}
    for step in PRINTED_STEPS:
        printed = example.article[step]
        upstream_slip = any(has_slip[s] for s in STEP_INPUTS[step])
        for i, row in enumerate(printed.rows):
            for j, col in enumerate(printed.cols):
                value, truth, chain = printed.values[i, j], exact[step].values[i, j], own[step].values[i, j]
                if abs(value - truth) <= ROUNDING + 1e-9:
                    verdict = "rounding"
                elif abs(value - chain) <= INHERITED_TOL:
                    verdict = "inherited" if upstream_slip else "rounding"
                else:
                    verdict = "slip"
                records.append({
                    "step": step, "row": row, "col": col, "article": value, "exact": truth,
                    "from_own_inputs": chain, "diff": value - truth, "verdict": verdict,
                })
        has_slip[step] = upstream_slip or any(r["verdict"] == "slip" for r in records
                                              if r["step"] == step)
    return pd.DataFrame.from_records(records)


def output_rounding_budget(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The largest gap that rounding alone can open in ``Output = A V`` computed by hand,
    per entry, ``(T, T), (T, d_v) -> (T, d_v)``: every printed weight and value off by up
    to ``ROUNDING`` (first order), every product ``A_ij V_jc`` rounded to 3 decimals before
    the sum (``T`` more times ``ROUNDING``), and the result rounded once more. NumPy arrays."""
    for name, x, layout in (("weights", weights, "(T, T)"), ("values", values, "(T, d_v)")):
        _check_finite_matrix(x, name, layout)  # a NaN would make the whole budget NaN
    _check_attention_weights(weights)
    if weights.shape[0] != weights.shape[1] or weights.shape[0] < 1:
        raise ValueError(f"weights must be square attention weights (T, T) with T >= 1, got shape "
                         f"{weights.shape}")
    if weights.shape[1] != values.shape[0]:
        raise ValueError(f"weights (T, T) and values (T, d_v) must chain, got {weights.shape} "
                         f"and {values.shape}")
    T = weights.shape[1]
    from_inputs = ROUNDING * (np.abs(values).sum(axis=0)[None, :] + np.abs(weights).sum(axis=1)[:, None])
    return from_inputs + T * ROUNDING + ROUNDING  # (T, d_v)


def _check_attention_weights(weights: np.ndarray) -> None:
    """``weights`` are attention weights, each in [0, 1] (a softmax's outputs, as printed): the
    budget adds their absolute values, so a weight of 2 or -1 would give a budget for no
    attention at all. A ValueError names ``weights``, the first entry outside and its index."""
    outside = (weights < 0) | (weights > 1)
    if outside.any():
        bad = tuple(int(i) for i in np.argwhere(outside)[0])
        raise ValueError(f"weights must be attention weights in [0, 1] (T, T), got {weights[bad]} at "
                         f"index {bad}")


def side_by_side(example: WorkedExample, step: str, decimals: int | None = 3) -> pd.DataFrame:
    """The article's table, the exact one and their difference, next to each other,
    rounded to ``decimals`` (None: unrounded, e.g. to format with ``shapes.frame_to_text``)."""
    decimals = _check_shown_decimals(decimals)
    _check_example(example)
    if step not in example.article:
        raise KeyError(f"the article prints no table {shown(step)}; choose from {list(PRINTED_STEPS)}")
    printed = example.article[step]
    exact = compute_steps(example)[step]
    exact_frame = pd.DataFrame(exact.values, index=list(printed.rows), columns=list(printed.cols))
    article_frame = printed.frame(None)
    parts = {"article": article_frame, "exact": exact_frame, "article - exact": article_frame - exact_frame}
    frame = pd.concat(parts, axis=1)
    return frame if decimals is None else frame.round(decimals) + 0.0  # + 0.0 turns -0.0 into 0.0
