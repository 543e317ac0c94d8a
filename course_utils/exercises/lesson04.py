"""Checks for lesson 4, "Multi-head attention in PyTorch".

* :data:`HEAD_WEIGHTS`: head i's ``(dk, d)`` slices of W_Q, W_K, W_V inside ``in_proj.weight``.
* :data:`STACK_HEAD_WEIGHTS`: per-head ``nn.Linear`` weights -> one stacked ``in_proj``.
* :data:`MHA_FORWARD`: a whole batched multi-head self-attention forward pass, plain or causal.
* :data:`MASKS_FOR_TORCH`: course masks -> ``nn.MultiheadAttention``'s convention.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from ..attention.masks import causal_mask, padding_mask
from .cases import seen_or_unseen
from .core import (
    _STUB_MESSAGES,
    Case,
    Exercise,
    Feedback,
    Mistake,
    WatchesGivenLists,
    _changes_its_input,
    _Deadline,
    _edited_input,
    _plain,
    _plain_exception,
    _safe_str,
)
from .raising import DiagnosesRaisingAnswers, failed_operation, requested_shape

__all__ = [
    "HEAD_WEIGHTS", "check_head_weights",
    "STACK_HEAD_WEIGHTS", "check_stack_head_weights",
    "MHA_FORWARD", "check_mha_forward",
    "MASKS_FOR_TORCH", "check_masks_for_torch",
]


def _randn(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- 4.1 one head's weights inside the stacked in_proj ----------------------------------

def _head_cases() -> list[Case]:
    def numbered(d: int) -> Tensor:  # entry (r, c) = r * d + c: each number says where it sits
        return torch.arange(3 * d * d, dtype=torch.float64).view(3 * d, d)

    cases = []
    for seen, *unseen in [((8, 2, 1), (10, 5, 3), (6, 2, 0), (16, 4, 2)),
                          ((12, 3, 2), (9, 3, 1), (20, 5, 4), (14, 2, 0)),
                          ((12, 4, 0), (8, 4, 3), (15, 3, 0), (18, 6, 5))]:
        d, h, i = seen_or_unseen(seen, *unseen)  # other sizes for the grader's unseen cases
        cases.append(Case((numbered(d), h, i), label=f"d_model={d}, {h} heads, head {i}"))
    d, h, i = seen_or_unseen((12, 3, 1), (10, 2, 1), (20, 4, 3), (9, 3, 0))
    cases.append(Case((_randn(3 * d, d, seed=41), h, i),
                      label=f"random weights, d_model={d}, {h} heads, head {i}"))
    return cases


class _TensorAnswers(Exercise):
    """4.1 and 4.2: the answer goes into a torch module, so numpy arrays holding the right numbers
    are named instead of passing (the values compare equal)."""

    def _numpy_advice(self) -> tuple[str, str]:
        return ("you returned numpy arrays: the weights go into a torch module (in_proj.weight), so "
                "return torch tensors.", "keep the torch operations (slicing, torch.cat) and skip .numpy().")


class _HeadWeightsExercise(DiagnosesRaisingAnswers, _TensorAnswers):
    """Exercise 4.1: a float slice bound (d_model / num_heads) and a split that gave one block
    instead of three are named from the error they raise."""

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        text = _safe_str(error)
        if isinstance(error, TypeError) and ("slice indices must be integers" in text or "float" in text):
            return "float_head_width"
        if isinstance(error, ValueError) and "expected 3, got 1" in text:
            return "one_block_from_split"
        return None

    # the head an answer took instead of head i, named by comparing it with that head's rows
    # where that head exists (for head 0 there is none before it, for head h-1 none after it),
    # and the clause that says what it gave where that head does not exist
    _OTHER_HEADS = (
        ("heads_counted_from_one", -1,
         " (For head 0 there is no head before: head - 1 = -1 gives empty slices, or rows of the "
         "wrong block.)"),
        ("one_head_too_far", +1,
         " (For the last head there is no head after: (head + 1) * d_k = d_model is past the end "
         "of each block.)"),
    )

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        """Head i - 1 (heads numbered from 1) or head i + 1 (one head too far), written in a way
        the stored slip does not reproduce where that head does not exist (l19: offsets into
        the whole w_in, where head - 1 = -1 reads rows of the block above; issue 35: head + 1
        past the last head reads the next block): the answer is compared with the slip on the
        cases where that head exists alone, and named when it matches them all."""
        for key, step, clause in self._OTHER_HEADS:
            mistake = next(m for m in self.mistakes if m.key == key)
            wrong = self._mistake_outputs(mistake, cases)
            if wrong is None:
                continue
            defined = [(got, slip) for case, got, slip in zip(cases, outputs, wrong, strict=True)
                       if 0 <= case.args[2] + step < case.args[1]]  # (w_in, num_heads, head)
            if defined and all(self._close(got, slip) for got, slip in defined):
                named = self._mistake_feedback(mistake.key)
                named.message += clause
                return named
        return None


HEAD_WEIGHTS = _HeadWeightsExercise(
    title="Exercise 4.1: one head's weights inside in_proj",
    make_cases=_head_cases,
    mistakes=[
        Mistake("columns_not_rows",
                "you took head i's COLUMNS of each block. Columns are right for the formula's "
                "W_Q (d_model x d_model, head i in columns i*d_k ...), but in_proj.weight is stored "
                "like nn.Linear.weight, (out_features, in_features): a head's outputs are ROWS.",
                "take rows i*d_k to (i+1)*d_k - 1 of each (d_model, d_model) block, all columns."),
        Mistake("columns_then_transposed",
                "you took head i's COLUMNS of each block and transposed them to get the (d_k, "
                "d_model) shape. The shape is right, but the columns are the formula's layout: "
                "in_proj.weight is stored like nn.Linear.weight, (out_features, in_features), so a "
                "head's outputs are its ROWS, and no transpose is needed.",
                "take rows i*d_k to (i+1)*d_k - 1 of each (d_model, d_model) block, all columns."),
        Mistake("transposed",
                "your slices hold the right numbers, transposed: you returned the formula's "
                "W_Q^i (d_model x d_k); the exercise asks for nn.Linear's layout (d_k x d_model), "
                "the rows as they sit in in_proj.weight.",
                "return the row slices as they are, without .T."),
        Mistake("query_block_only",
                "all three of your slices come from the first block, W_Q: the keys start d_model "
                "rows further down and the values 2 * d_model rows down.",
                "split w_in into its three (d_model, d_model) blocks first (w_in.split(d, dim=0)), "
                "then take the same rows of each."),
        Mistake("interleaved_rows",
                "you took rows i, i+h, i+2h, ... of each block: head i owns a consecutive run of "
                "d_k rows, which is what view(B, T, h, d_k) reads as head i.",
                "rows i*d_k to (i+1)*d_k - 1 of each block."),
        Mistake("per_head_qkv_layout",
                "you read in_proj as q_0, k_0, v_0, q_1, k_1, v_1, ...: some libraries store it that "
                "way, but this course and nn.MultiheadAttention store all of W_Q, then all of W_K, "
                "then all of W_V.",
                "split w_in into its three (d_model, d_model) blocks, then take head i's rows in each."),
        Mistake("q_and_k_blocks_swapped",
                "your query and key slices are swapped: you took the first block of in_proj for W_K "
                "and the second for W_Q (as in wk, wq, wv = w_in.split(...)). in_proj stores all of "
                "W_Q first, then W_K, then W_V, and the tuple is returned in that order too.",
                "unpack the split in the stored order, w_q, w_k, w_v = ..., and return (q, k, v)."),
        Mistake("whole_blocks",
                "you returned the whole W_Q, W_K and W_V blocks, (d_model, d_model) each: that is "
                "every head at once.",
                "keep only head i's d_k rows of each block."),
        Mistake("inclusive_end",
                "each of your slices has d_k - 1 rows: 'rows i*d_k to (i+1)*d_k - 1' includes the "
                "last row, but a Python slice stops BEFORE its end.",
                "w[i * dk:(i + 1) * dk] gives the d_k rows i*d_k ... (i+1)*d_k - 1."),
        Mistake("heads_counted_from_one",
                "you took the rows of the head before (head - 1): the formula numbers heads 1 ... h, "
                "but the code, and this exercise, count from 0, so head 0 owns the first d_k rows.",
                "rows head * d_k to (head + 1) * d_k, without subtracting 1 from head."),
        Mistake("one_head_too_far",
                "you took the rows of the head after (head + 1): head i's rows START at i * d_k "
                "(head 0 at row 0) and stop before (i + 1) * d_k, where the next head begins.",
                "rows head * d_k to (head + 1) * d_k: the start is head * d_k, not (head + 1) * d_k."),
        Mistake("d_model_from_rows",
                "you took d_model from w_in.shape[0], but w_in is (3 * d_model, d_model): its row "
                "count is all three blocks together. Every size built from it (d_k, the offsets of "
                "the K and V blocks) is three times too large, so your slices run past their block "
                "and the key and value slices come out empty.",
                "d_model is the number of columns, w_in.shape[1]; the rows are 3 * d_model."),
        Mistake("float_head_width",
                "a size or slice bound in your code is a float: d_model / num_heads gives 4.0, not 4, "
                "and slices, split and view take whole numbers (ints) only.",
                "divide with //: dk = d_model // num_heads stays an int."),
        Mistake("one_block_from_split",
                "your split gave one block where three were expected: the size you split by covers "
                "all of w_in along that axis. w_in is (3 * d_model, d_model), so W_Q, W_K and W_V "
                "lie one under the other along dim 0, d_model rows each (d_model = w_in.shape[1]).",
                "split the rows into blocks of d_model: w_in.split(w_in.shape[1], dim=0)."),
    ],
    hint="in_proj.weight is (3 d_model, d_model): the blocks W_Q, W_K, W_V one under the other, "
         "and in each block head i owns rows i*d_k to (i+1)*d_k - 1.",
)
check_head_weights = HEAD_WEIGHTS.check


# -- 4.2 stack per-head weights into one in_proj ----------------------------------------

def _stack_cases() -> list[Case]:
    cases = []
    sizes = [seen_or_unseen((6, 3), (10, 5), (9, 3), (4, 4)),
             seen_or_unseen((8, 2), (12, 4), (6, 1), (15, 5))]
    for seed, (d, h) in enumerate(sizes):
        dk = d // h
        parts = [[_randn(dk, d, seed=100 + 10 * seed + 3 * i + j) for i in range(h)] for j in range(3)]
        cases.append(Case(tuple(parts), label=f"d_model={d}, {h} heads of width {dk}"))
    return cases


def _same_tensor(a: Any, b: Any) -> bool:
    return isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape \
        and torch.equal(a.detach(), b.detach())


def _list_change(mine: list, theirs: Any, handed: list | None) -> str | None:
    """How the answer changed the list ``theirs`` it was given, whose items should equal ``mine``
    (``handed``: the very items it held when handed over): "grown", "shrunk", "reordered",
    "replaced" (other tensors in it), "edited" (its tensors changed in place), or None."""
    if not isinstance(theirs, list):
        return "replaced"
    if len(theirs) > len(mine):
        return "grown"
    if len(theirs) < len(mine):
        return "shrunk"
    if all(_same_tensor(t, m) for m, t in zip(mine, theirs, strict=True)):
        return None
    if isinstance(handed, list) and len(handed) == len(theirs):
        if all(t is h for t, h in zip(theirs, handed, strict=True)):
            return "edited"  # the same tensor objects, in the same places, holding other values
        if sorted(map(id, theirs)) == sorted(map(id, handed)):
            # the same objects in other places: reordered, unless some were also edited
            rest = list(mine)
            for t in theirs:
                match = next((i for i, m in enumerate(rest) if _same_tensor(t, m)), None)
                if match is None:
                    return "edited"
                rest.pop(match)
            return "reordered"
    rest = list(mine)
    for t in theirs:  # without the handed-over items, tell a reorder by the values alone
        match = next((i for i, m in enumerate(rest) if _same_tensor(t, m)), None)
        if match is None:
            return "replaced"
        rest.pop(match)
    return "reordered"


def _changed_list(original: tuple, given: tuple | None,
                  handed: tuple | None = None) -> tuple[str, str] | None:
    """The name of the first list argument the answer changed, and how (see :func:`_list_change`),
    or None."""
    handed = handed or ()
    for index, (name, mine, theirs) in enumerate(zip(("q_parts", "k_parts", "v_parts"), original, given or (),
                                                     strict=False)):
        if not isinstance(mine, list):
            continue
        change = _list_change(mine, theirs, handed[index] if index < len(handed) else None)
        if change is not None:
            return name, change
    return None


# what the answer did to the caller's list, and the fix, for each change _list_change names
_LIST_CHANGES = {
    "grown": ("grew the caller's list {list} (list.extend, append or +=, which all work in place): "
              "whoever called it now holds a list of more than its h weights, and a second call stacks "
              "them again.",
              "build a new list instead of growing a given one: q_parts + k_parts + v_parts makes a "
              "new list, or [*q_parts, *k_parts, *v_parts]."),
    "shrunk": ("shrank the caller's list {list} (pop, remove, del or clear, which all work in place): "
               "whoever called it now holds fewer than its h weights, and a second call stacks too few "
               "heads.",
               "read the lists without taking items out of them: index them (q_parts[i]) or unpack them "
               "([*q_parts, *k_parts, *v_parts])."),
    "reordered": ("reordered the caller's list {list} in place (list.reverse, sort, or items assigned to "
                  "other places): it holds the same h weights in another order, so whoever called it now has "
                  "its heads swapped, and a second call stacks them in the wrong order.",
                  "leave the given lists as they are: reversed(q_parts), sorted(...) or q_parts[::-1] make a "
                  "new sequence if you need another order."),
    "replaced": ("put other tensors into the caller's list {list} (q_parts[i] = ...): whoever called it now "
                 "holds weights that are not the heads it gave you.",
                 "keep your own values in a new list: parts = [*q_parts, *k_parts, *v_parts]."),
    "edited": ("edited the tensors in the caller's list {list} in place (zero_(), copy_, +=, *= or other "
               "in-place operations on its items): the list is as it was, but the weights in it are not, "
               "so whoever called it now holds changed heads.",
               "leave the given tensors as they are: out-of-place operations (w * 2, w.clone()) make new "
               "tensors."),
}


class _StackExercise(WatchesGivenLists, DiagnosesRaisingAnswers, _TensorAnswers):
    """Exercise 4.2: ``torch.cat`` given a list of lists raises; say why. An answer that adds to
    (or otherwise changes) the lists it was given is named even when its result is right."""

    def _list_edit(self, original: tuple, given: tuple | None,
                   handed: tuple | None = None) -> Feedback | None:
        changed = _changed_list(original, given, handed)
        if changed is None:
            return None
        name, change = changed
        what, fix = _LIST_CHANGES[change]
        m = self._mistake_feedback("changed_callers_list")
        m.message = ("the stacked weights are right, but your function "
                     + what).replace("{list}", f"`{name}`")
        m.hint = fix
        return m

    refusable = ("cat", "concat", "concatenate")

    @staticmethod
    def _key_for_refused(name: str, args: tuple, kwargs: dict) -> str | None:
        """torch.cat refused a list of lists, or lists as separate arguments (torch.cat(q, k, v),
        torch.cat(q, k): a list where dim goes), named from the arguments, not torch's message."""
        sequences = [a for a in args if isinstance(a, (list, tuple))]
        nested = bool(args) and isinstance(args[0], (list, tuple)) \
            and any(isinstance(t, (list, tuple)) for t in args[0])
        return "lists_not_unpacked" if nested or len(sequences) >= 2 else None


STACK_HEAD_WEIGHTS = _StackExercise(
    title="Exercise 4.2: stack per-head weights into one in_proj",
    make_cases=_stack_cases,
    mistakes=[
        Mistake("stacked_columns",
                "you concatenated the weights side by side (dim=1), giving (d_k, 3*h*d_model). Side "
                "by side is right for the formula's W_Q^i (d_model x d_k), but nn.Linear stores the "
                "transpose, (d_k x d_model): its heads go one under the other.",
                "torch.cat([...], dim=0) stacks rows: the result should be (3*d_model, d_model)."),
        Mistake("formula_layout",
                "you built the formula's (d x 3d) matrix [W_Q | W_K | W_V]; in_proj.weight is its "
                "transpose, (3d x d), because nn.Linear computes x @ weight.T.",
                "stack the nn.Linear weights as they are, along dim=0, without transposing them."),
        Mistake("reversed_heads",
                "your heads are in reverse order: view(B, T, h, dk) reads head 0 from the first dk "
                "rows of W_Q, so head 0 must come first.",
                "keep the list order: q_parts[0], q_parts[1], ..."),
        Mistake("per_head_qkv",
                "you stacked q_0, k_0, v_0, q_1, k_1, v_1, ...: some libraries use that layout, but "
                "this course (and nn.MultiheadAttention) stacks all of W_Q, then all of W_K, then "
                "all of W_V.",
                "put all query heads first (in order), then all key heads, then all value heads."),
        Mistake("qvk_order",
                "you stacked the query heads, then the VALUE heads, then the key heads: in_proj "
                "splits its output into Q, K, V in that order, so keys and values would swap roles.",
                "the order is all of W_Q, then all of W_K, then all of W_V."),
        Mistake("kqv_order",
                "you stacked the KEY heads first, then the query heads, then the value heads: in_proj "
                "splits its output into Q, K, V in that order, so queries and keys would swap roles.",
                "the order is all of W_Q, then all of W_K, then all of W_V."),
        Mistake("stack_not_cat",
                "torch.stack put the 3*h weights on a NEW axis and gave (3*h, d_k, d_model); "
                "in_proj.weight is one matrix, with the heads' rows one under the other.",
                "torch.cat([...], dim=0) joins along the existing row axis: (3*d_model, d_model)."),
        Mistake("lists_not_unpacked",
                "torch.cat refused its arguments because it did not get ONE flat sequence of tensors: "
                "it takes a single list (or tuple) of tensors, then optionally dim. A list of three "
                "LISTS, torch.cat([q_parts, k_parts, v_parts]), is refused, and so are the three lists "
                "as separate arguments, torch.cat(q_parts, k_parts, v_parts), where the second list "
                "lands where dim belongs.",
                "unpack the lists: torch.cat([*q_parts, *k_parts, *v_parts], dim=0) (or "
                "q_parts + k_parts + v_parts)."),
        Mistake("summed_heads",
                "you added each list's heads together (sum(q_parts)) and got (3 * d_k, d_model): "
                "one head's worth of rows per projection. in_proj keeps every head's rows, one "
                "head under the next, so the result is (3 * d_model, d_model).",
                "concatenate instead of adding: torch.cat joins the heads' rows along dim 0."),
        Mistake("changed_callers_list",
                # the message and fix say which change was seen: see _LIST_CHANGES
                "the stacked weights are right, but your function changed the caller's list {list}: "
                "whoever called it now holds other weights than the heads it gave you.",
                "build a new list instead of changing a given one: [*q_parts, *k_parts, *v_parts]."),
    ],
    hint="nn.Linear weights are (d_k, d): they stack along dim 0, all query heads first, then the key "
         "heads, then the value heads, giving (3d, d).",
)
check_stack_head_weights = STACK_HEAD_WEIGHTS.check


# -- 4.3 the whole batched forward pass -------------------------------------------------

def _forward_cases() -> list[Case]:
    cases = []
    # d_k = 4 in the first two cases, where sqrt(d_k) = d_k / 2 = log2(d_k) = 2: the third
    # (d_k = 9) tells a typed-in 2, dk**1/2 (= dk / 2) or log2 apart from sqrt(d_k)
    for seed, (B, T, d, h) in enumerate([(2, 5, 8, 2), (1, 4, 12, 3), (1, 3, 18, 2)]):
        s = 200 + 10 * seed
        args = (_randn(B, T, d, seed=s), _randn(3 * d, d, seed=s + 1) / math.sqrt(d),
                _randn(3 * d, seed=s + 2), _randn(d, d, seed=s + 3) / math.sqrt(d),
                _randn(d, seed=s + 4), h)
        cases.append(Case(args, label=f"B={B}, T={T}, d_model={d}, {h} heads"))
    # causal=True: token t attends to tokens 0..t. T >= 4, so a mask shifted by one, transposed
    # or applied after the softmax changes rows that a shorter sequence would leave alone
    for seed, (B, T, d, h) in enumerate([(2, 5, 8, 2), (1, 6, 12, 3), (2, 4, 18, 2)]):
        s = 300 + 10 * seed
        args = (_randn(B, T, d, seed=s), _randn(3 * d, d, seed=s + 1) / math.sqrt(d),
                _randn(3 * d, seed=s + 2), _randn(d, d, seed=s + 3) / math.sqrt(d),
                _randn(d, seed=s + 4), h)
        cases.append(Case(args, {"causal": True}, label=f"B={B}, T={T}, d_model={d}, {h} heads, causal=True"))
    return cases


def _takes_causal(fn) -> bool:
    """Whether ``fn`` can be called as exercise 4.3 asks, with ``causal=True`` after the six
    inputs (True when Python cannot read its signature: the call itself then says)."""
    import inspect

    try:
        inspect.signature(fn).bind(*([None] * 6), causal=True)
    except ValueError:  # no signature to read
        return True
    except TypeError:
        return False
    return True


_OLD_SIGNATURE = ("your mha_forward takes no `causal` argument: exercise 4.3 asks for "
                  "mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False), and with "
                  "causal=True token t attends to tokens 0..t only.")
_OLD_SIGNATURE_HINT = ("add `causal=False` after num_heads in the def line; when causal is True, set the "
                       "scores of the later tokens to -inf before the softmax (lesson 02, exercise 2.3).")


def _stub_it_calls(fn, case: Case) -> str | None:
    """The name of the stub that ``fn`` calls, when running ``fn`` on ``case`` ends in a stub's
    bare ``raise NotImplementedError`` one call or more below ``fn`` itself (the lesson's demo
    cells wrap the learner's ``mha_forward``); None otherwise."""
    args, kwargs = case.fresh()
    try:
        with _Deadline():
            fn(*args, **kwargs)
    except NotImplementedError as exc:
        error = exc
    except BaseException:  # noqa: BLE001 - another error: not a stub
        return None
    else:
        return None
    if not _plain_exception(error):  # a stub raises a plain NotImplementedError
        return None
    if len(error.args) > 1 or (error.args and str(error.args[0]).strip() not in _STUB_MESSAGES):
        return None
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code is getattr(fn, "__code__", None):
        return None  # the function itself: the plain "not attempted" of the check
    code = tb.tb_frame.f_code  # a stub names nothing but NotImplementedError
    return code.co_name if code.co_names == ("NotImplementedError",) else None


class _ForwardExercise(DiagnosesRaisingAnswers):
    """Exercise 4.3: an answer that *raises* is diagnosed too, when the error is one of the
    classic ones (``view`` on a non-contiguous tensor, ``x @ w_in`` without ``.T``). A function
    that calls the stub (the lesson's keys-and-values demo wraps ``mha_forward``) is told that
    the stub is still to be written."""

    def check(self, fn) -> Feedback:
        if callable(fn) and not _takes_causal(fn):
            return self._check_old_signature(fn)
        feedback = super().check(fn)
        if feedback.status != "error" or feedback.stopped:
            return feedback
        try:
            stub = _stub_it_calls(fn, self.cases()[0])
        except BaseException:  # noqa: BLE001 - the plain feedback is still right
            stub = None
        if stub is None:
            return feedback
        return Feedback(self.title, "not attempted",
                        f"your function `{stub}` is still the stub: write it (exercise 4.3), run its "
                        "cell, then run this cell again. (The stub is the placeholder the notebook gives "
                        "you: its body only raises NotImplementedError.)", "")  # no hint before an attempt

    def _check_old_signature(self, fn) -> Feedback:
        """An answer written for the signature without ``causal``: graded on the cases without it,
        so that a slip there is still named, and told what to add."""
        self.__dict__["_plain_only"] = True
        try:
            feedback = super().check(fn)
        finally:
            del self.__dict__["_plain_only"]
        if feedback.passed:
            return Feedback(self.title, "mistake", _OLD_SIGNATURE + " Without a mask your function is "
                            "right on the test cases that use none.", _OLD_SIGNATURE_HINT,
                            mistake="no_causal_parameter")
        if feedback.status in ("not attempted",) or feedback.stopped:
            return feedback
        feedback.message += " Also, " + _OLD_SIGNATURE
        return feedback

    def _plain(self, items: list, cases: list[Case]) -> list:
        """``items`` (one per case), kept only for the cases without ``causal`` while an answer
        written for the old signature is graded."""
        if not self.__dict__.get("_plain_only"):
            return items
        return [item for item, case in zip(items, cases, strict=True) if "causal" not in case.kwargs]

    def cases(self) -> list[Case]:
        cases = super().cases()
        return self._plain(cases, cases)

    def _expected_outputs(self, cases) -> list:
        if not self.__dict__.get("_plain_only"):
            return super()._expected_outputs(cases)
        every = self._every_case()
        return self._plain(super()._expected_outputs(every), every)

    def _mistake_outputs(self, mistake: Mistake, cases) -> list | None:
        if not self.__dict__.get("_plain_only"):
            return super()._mistake_outputs(mistake, cases)
        every = self._every_case()
        outputs = super()._mistake_outputs(mistake, every)
        return None if outputs is None else self._plain(outputs, every)

    def _every_case(self) -> list[Case]:
        return super().cases()  # the base class's: every case, whatever the flag

    @staticmethod
    def _key_for(failed: tuple[str, list] | None) -> str | None:
        if failed is None:
            return None
        name, args = failed
        if name == "view" and args and isinstance(args[0], tuple):
            source, target = args[0], requested_shape(args)
            if -1 not in target and math.prod(target) != math.prod(source):
                return None  # a size slip (d / h as a float, a wrong dim): not about memory layout
            if (len(source) == 3 and len(target) == 4 and target[0] == source[0]
                    and target[2] == source[1]):  # (B, T, d) -> (B, h, T, dk)
                return "split_view_as_b_h_t_raises"
            if (len(source) == 4 and len(target) == 3 and target[:2] == source[:2]
                    and target[2] in (source[2] * source[3], -1)):  # (B, T, h, dk) -> (B, T, d)
                return "merge_view_without_contiguous"
        return _ForwardExercise._key_for_matmul(name, args) or _ForwardExercise._key_for_mask(args)

    @staticmethod
    def _key_for_mask(args: list) -> str | None:
        """A (T, T) mask that does not fit scores of shape (B, T, h, h): the heads were split
        without the transpose, so the scores compare heads, not tokens."""
        shapes = [a for a in args if isinstance(a, tuple)]
        for scores in (s for s in shapes if len(s) == 4 and s[-1] == s[-2] != s[1]):
            if any(len(m) == 2 and m[0] == m[1] == scores[1] for m in shapes):
                return "split_no_transpose"
        return None

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        if isinstance(error, TypeError) and "got float" in _safe_str(error):
            return "float_head_width"  # torch rejects a float size while reading view's arguments
        return None

    @staticmethod
    def _key_for_matmul(name: str, args: list) -> str | None:
        if name in ("matmul", "matmul_", "mm", "linear") and len(args) >= 2 and isinstance(args[1], tuple):
            a, w = args[0], args[1]
            if len(w) == 2 and w[0] == 3 * w[1]:  # a (3d, d) weight multiplied as it is
                return "w_in_not_transposed"
            if isinstance(a, tuple) and len(a) == 4:
                if w == a[::-1]:  # k.T on (B, h, T, dk) reverses every axis
                    return "k_T_reverses_all_axes"
                if w == (a[0], a[2], a[1], a[3]):  # k.transpose(1, 2): (B, T, h, dk)
                    return "k_transposed_wrong_axes"
                if len(w) == 2 and w[0] == a[1] * a[3]:  # (B, h, T, dk) @ (d, d): never merged
                    return "heads_not_merged"
        return None


MHA_FORWARD = _ForwardExercise(
    title="Exercise 4.3: batched multi-head attention, forward pass",
    make_cases=_forward_cases,
    mistakes=[
        Mistake("split_no_transpose",
                "you split into (B, T, h, dk) and never transposed: each token's attention ran across "
                "its h heads instead of across the T tokens.",
                "after .view(B, T, h, dk) call .transpose(1, 2) to get (B, h, T, dk)."),
        Mistake("split_as_b_h_t",
                "you reshaped the projections to (B, h, T, dk) directly: the shapes work, but each "
                "'head' mixes pieces of different tokens.",
                "split the last axis instead, view(B, T, h, dk), then transpose(1, 2)."),
        Mistake("split_view_as_b_h_t_raises",
                "your .view(B, h, T, dk) raised an error. Viewing straight to (B, h, T, dk) would mix "
                "tokens and heads anyway; PyTorch refuses here because q is a column slice of the "
                "projection, and only a view that splits the LAST axis fits a slice's strides.",
                "split the last axis, .view(B, T, h, dk), then .transpose(1, 2)."),
        Mistake("keys_and_values_swapped",
                "you took the second d-wide block of the projection as the values and the third as "
                "the keys: in_proj stacks W_Q, W_K, W_V in that order.",
                "q, k, v = qkv.split(d_model, dim=-1), in that order."),
        Mistake("no_head_split",
                "you ran one attention of full width d_model (scores divided by sqrt(d_model)): the "
                "heads were never split, so there is one softmax where there should be num_heads.",
                "view each of q, k, v as (B, T, h, dk), transpose to (B, h, T, dk), and scale by "
                "sqrt(dk)."),
        Mistake("float_head_width",
                "view raised a TypeError: you computed the head width as d_model / num_heads, which "
                "is a float (64.0), and a shape must be made of ints.",
                "use integer division: dk = d_model // num_heads."),
        Mistake("merge_view_without_contiguous",
                "your merge raised an error: after .transpose(1, 2) the tensor is not contiguous in "
                "memory, and .view cannot copy. The order of your steps is right.",
                "use .transpose(1, 2).contiguous().view(B, T, d), or .transpose(1, 2).reshape(B, T, d)."),
        Mistake("merge_no_transpose",
                "the heads were split correctly but merged in the wrong order: reshaping (B, h, T, dk) "
                "straight to (B, T, d) scrambles tokens and heads.",
                "undo the split in reverse: .transpose(1, 2).reshape(B, T, d) (or .contiguous().view)."),
        Mistake("split_interleaved",
                "your heads are interleaved: view(B, T, d_k, h) gives head i the features i, i+h, "
                "i+2h, ... of each token, where in_proj gives head i a consecutive run of d_k "
                "features, i*d_k to (i+1)*d_k - 1. The shapes all work; the heads hold the wrong "
                "features.",
                "split the last axis as (h, d_k), heads first: .view(B, T, h, dk).transpose(1, 2)."),
        Mistake("merge_reversed_heads",
                "you merged the heads in reverse order, the last head first: W_O reads head 0's d_k "
                "features first, then head 1's, in the order the split made them.",
                "keep the heads in order: .transpose(1, 2).reshape(B, T, d), with no flip or "
                "reversed list."),
        Mistake("merge_interleaved",
                "you merged the heads interleaved: feature j of every head sits next to feature j of "
                "the others ((B, T, d_k, h) reshaped), where W_O reads each head's d_k features as "
                "one consecutive run, head 0's first.",
                "move the head axis next to the tokens, not last: .transpose(1, 2) gives "
                "(B, T, h, dk), then .reshape(B, T, d)."),
        Mistake("split_no_transpose_merge_transposed",
                "you split into (B, T, h, dk) without the transpose, yet transposed at the merge: "
                "each token's attention ran across its h heads instead of across the T tokens, and "
                "the transpose at the merge then mixed tokens and heads.",
                "transpose at both ends: .view(B, T, h, dk).transpose(1, 2) to split, "
                ".transpose(1, 2).reshape(B, T, d) to merge."),
        Mistake("no_scaling",
                "you forgot to divide the scores by sqrt(d_k).",
                "scores = q @ k.transpose(-2, -1) / math.sqrt(dk)"),
        Mistake("scaled_by_d_model",
                "you divided the scores by sqrt(d_model); each head's dot products have d_k terms, so "
                "the scale is 1/sqrt(d_k) with d_k = d_model / h.",
                "dk = d // num_heads; divide by math.sqrt(dk)."),
        Mistake("scaled_by_d_k",
                "you divided the scores by d_k (or by sqrt(d_k) twice, e.g. q and the scores, which is "
                "the same); the scale is 1/sqrt(d_k), which keeps the scores' spread about the same "
                "whatever the width of a head.",
                "divide by math.sqrt(dk), not dk."),
        Mistake("scaled_after_softmax",
                "you divided by sqrt(d_k) after the softmax (the weights, V or the heads' outputs: all "
                "three give the same numbers): the weights in effect sum to 1/sqrt(d_k), not 1, and the "
                "softmax saw unscaled scores, so it was too sharp as well.",
                "scale the scores first, then take the softmax: "
                "torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(dk), dim=-1)."),
        Mistake("scores_multiplied_by_sqrt_dk",
                "you multiplied the scores by sqrt(d_k) instead of dividing: the softmax is then sharper, "
                "not flatter, than it should be.",
                "scores = q @ k.transpose(-2, -1) / math.sqrt(dk)"),
        Mistake("softmax_over_heads",
                "your softmax normalised over dim=1, which is the HEAD axis of (B, h, T, T): each "
                "query's weights must sum to 1 over the keys, the last axis.",
                "torch.softmax(scores, dim=-1)"),
        Mistake("softmax_wrong_axis",
                "your softmax normalised over the queries (dim=-2): each query's weights over the keys "
                "must sum to 1.",
                "torch.softmax(scores, dim=-1)"),
        Mistake("no_output_projection",
                "you returned the concatenated heads without the output projection W_O.",
                "finish with concat @ w_out.T + b_out."),
        Mistake("w_in_not_transposed",
                "x @ w_in raised an error: w_in is (3d, d), stored like nn.Linear.weight as "
                "(out_features, in_features), so it has to be transposed.",
                "project with x @ w_in.T + b_in (that is what nn.Linear computes)."),
        Mistake("w_out_not_transposed",
                "you multiplied by w_out without transposing it: w_out is stored like nn.Linear.weight, "
                "(out_features, in_features), so the layer computes concat @ w_out.T.",
                "finish with concat @ w_out.T + b_out."),
        Mistake("no_biases",
                "you left out both biases, b_in and b_out.",
                "add b_in right after x @ w_in.T, and b_out after the output projection."),
        Mistake("no_in_bias",
                "you left out b_in, the bias of the stacked Q, K, V projection.",
                "qkv = x @ w_in.T + b_in, then split."),
        Mistake("no_out_bias",
                "you left out b_out, the bias of the output projection.",
                "finish with concat @ w_out.T + b_out."),
        Mistake("causal_mask_added",
                "you applied the causal mask with causal=False too: each token attended only to "
                "itself and earlier tokens even where every token should see every token. The mask "
                "belongs only to the calls that pass causal=True.",
                "build and apply the mask inside `if causal:`; with causal=False (the default) the "
                "softmax runs over all T keys."),
        Mistake("causal_ignored",
                "with causal=True your output is plain attention over all T tokens: the argument was "
                "taken but nothing changed, so each token still saw the tokens after it.",
                "when causal is True, set the scores of the keys after each query to -inf before the "
                "softmax (the lower triangle of a (T, T) table is what stays; lesson 02, exercise 2.3)."),
        Mistake("causal_diagonal_masked",
                "with causal=True you blocked the diagonal too: token t saw only tokens before it, not "
                "itself, so token 0 had nothing to attend to and its row came out NaN.",
                "keep the diagonal: the lower triangle including it (token t sees 0..t), as in "
                "lesson 02's exercise 2.3."),
        Mistake("causal_one_token_ahead",
                "with causal=True your mask is shifted by one: token t also saw token t + 1, one step "
                "into the future.",
                "the allowed keys of query t are 0..t: the lower triangle with the diagonal, and "
                "nothing above it."),
        Mistake("causal_mask_transposed",
                "with causal=True your mask is the upper triangle (transposed): token t saw itself and "
                "the tokens AFTER it, the future, instead of the ones before it.",
                "rows are queries, columns are keys: query t keeps the keys 0..t, the lower triangle."),
        Mistake("causal_mask_after_softmax",
                "with causal=True you removed the later tokens after the softmax: the weights that "
                "are left no longer sum to 1 in each row (each query's weights must still add up to 1).",
                "mask the scores before the softmax (-inf where a key is blocked), so that the softmax "
                "spreads each row's weight over the allowed keys only."),
        Mistake("causal_filled_with_zero",
                "with causal=True you set the blocked scores to 0, not -inf: exp(0) = 1, so every "
                "later token still got a share of the weight.",
                "fill the blocked scores with float('-inf'), whose exp is 0."),
        Mistake("qkv_interleaved_per_head",
                "you split the projection as if in_proj stored q_0, k_0, v_0, q_1, k_1, v_1, ... "
                "(view(B, T, h, 3 * d_k) then split): some libraries use that layout, but w_in "
                "here stacks all of W_Q, then all of W_K, then all of W_V.",
                "split the (B, T, 3d) projection into three (B, T, d) blocks first "
                "(.split(d, dim=-1)), then cut each into heads."),
        Mistake("k_T_reverses_all_axes",
                "q @ k.T raised an error: on a 4-D tensor .T reverses ALL the axes, turning "
                "(B, h, T, dk) into (dk, T, h, B). .T only means 'transpose' for a 2-D matrix.",
                "swap only the last two axes: k.transpose(-2, -1) (or k.mT)."),
        Mistake("k_transposed_wrong_axes",
                "q @ k.transpose(1, 2) raised an error: after the split, axes 1 and 2 are the head "
                "and token axes, so this gives (B, T, h, dk). The scores need keys as (B, h, dk, T).",
                "swap the last two axes: k.transpose(-2, -1)."),
        Mistake("heads_not_merged",
                "the output projection raised an error: you multiplied the heads, still (B, h, T, dk), "
                "by w_out, which expects each token's d_model features in one row.",
                "merge first: .transpose(1, 2).reshape(B, T, d), then @ w_out.T + b_out."),
    ],
    hint="project with w_in (x @ w_in.T + b_in), split q, k, v into heads, attend (with causal=True, "
         "the scores of later tokens set to -inf before the softmax), merge the heads, project with w_out.",
)
check_mha_forward = MHA_FORWARD.check


# -- 4.4 masks for nn.MultiheadAttention ------------------------------------------------

def _mask_cases() -> list[Case]:
    window = causal_mask(5) & ~causal_mask(5, query_offset=-3)  # the last 3 tokens only
    return [
        Case((causal_mask(4), padding_mask([4, 2], 4)), label="causal 4x4, lengths [4, 2]"),
        Case((window, padding_mask([5, 3, 1], 5)), label="sliding window 5x5, lengths [5, 3, 1]"),
    ]


_MASK_NAMES = ("attn_mask", "key_padding_mask")


def _edited_argument(exercise: Exercise, fn, names: tuple[str, ...]) -> str | None:
    """The name of the argument that ``fn`` changes in place, on the first case where it does;
    None when it changes none, or raises. Core's :func:`_changes_its_input` runs the cases and
    stops at that case; the copies it gave ``fn`` last are the ones that were changed."""
    given: list[tuple[tuple, dict]] = []

    def recorded(*args, **kwargs):
        given.append((args, kwargs))
        return fn(*args, **kwargs)

    cases = exercise.cases()
    if not _changes_its_input(recorded, cases):
        return None
    args, kwargs = given[-1]
    where = _edited_input(cases[len(given) - 1], args, kwargs)  # "(argument 2)" or "`name`"
    if where is None:
        return None
    number = where.removeprefix("(argument ").removesuffix(")")
    if number.isdigit() and int(number) <= len(names):
        return names[int(number) - 1]
    return where.strip("`")


class _BoolMaskExercise(Exercise):
    """Exercise 4.4: the answer must also be a pair of *boolean torch tensors*. A float mask
    means something else to nn.MultiheadAttention (it is added to the scores), and a NumPy
    array is rejected by it; a transposed padding mask gets its own message."""

    def _named(self, key: str) -> Feedback:
        m = next(m for m in self.mistakes if m.key == key)
        return Feedback(self.title, "mistake", m.message, m.hint, mistake=m.key)

    def check(self, fn) -> Feedback:
        feedback = self._check_masks(fn)
        if feedback.mistake != "edited_input_in_place":
            return feedback
        name = _edited_argument(self, fn, _MASK_NAMES)
        which = f"`{name}`" if name else "one of the masks it was given"
        return Feedback(self.title, "mistake",
                        f"the masks you returned are right, but your function changed {which} in place "
                        "(logical_not_ and the other methods whose names end in _ do that): the caller's "
                        "course mask is now inverted too, so any code that uses it afterwards reads "
                        "True as blocked.",
                        "use ~attn_mask or attn_mask.logical_not(), which return new tensors and leave "
                        "the masks you were given as they were.", mistake=feedback.mistake)

    def _check_masks(self, fn) -> Feedback:
        feedback = super().check(fn)
        if feedback.status == "error" and not feedback.stopped and callable(fn):  # (not a function: said)
            failed = failed_operation(fn, self.cases()[0])
            key = self._key_for_failure(failed[0] if failed else None, feedback.message)
            if key is not None:
                return self._named(key)
        if feedback.status in ("not attempted", "error"):
            return feedback
        cases = self.cases()
        try:
            with _Deadline():
                outputs = [fn(*c.fresh()[0], **c.fresh()[1]) for c in cases]
        except BaseException:  # already ran once in super().check; be safe anyway
            return feedback
        if not _plain(outputs, whole=True):  # the answer's own class: its methods run unlimited below
            return feedback
        if not all(isinstance(o, (tuple, list)) and len(o) == 2 for o in outputs):
            return feedback
        if any(isinstance(t, np.ndarray) for o in outputs for t in o):
            return self._named("numpy_masks")
        expected = self._expected_outputs(cases)
        for i, name in enumerate(_MASK_NAMES):
            got_i, exp_i = [o[i] for o in outputs], [e[i] for e in expected]
            if all(isinstance(g, Tensor) and g.shape == e.shape[::-1] and g.shape != e.shape
                   for g, e in zip(got_i, exp_i, strict=True)):
                return Feedback(self.title, "wrong",
                                f"your {name} has shape {tuple(got_i[0].shape)}, the transpose of the "
                                f"expected {tuple(exp_i[0].shape)}: nn.MultiheadAttention wants "
                                + ("(Tq, Tk), one row per query." if i == 0 else
                                   "(B, Tk), one row per sequence."),
                                "keep the shape of the mask you were given; only flip True and False.")
        if feedback.passed and any(isinstance(t, Tensor) and t.dtype != torch.bool
                                   for o in outputs for t in o):
            return self._named("float_masks")
        if not feedback.passed and feedback.mistake is None:
            # one mask additive, the other boolean: say so instead of "inf in your output"
            for i, name in enumerate(_MASK_NAMES):
                if all(self._is_additive_form(o[i], e[i]) for o, e in zip(outputs, expected, strict=True)):
                    m = next(m for m in self.mistakes if m.key == "additive_masks")
                    return Feedback(self.title, "mistake", f"your {name}: " + m.message, m.hint,
                                    mistake=m.key)
        return feedback

    @staticmethod
    def _key_for_failure(operation: str | None, message: str) -> str | None:
        """The slip shown by the tensor operation that raised or, where none was seen (the
        grader replays an answer's recorded error without running it), by the error's text."""
        if operation == "bool" or "Boolean value of Tensor with more than one value" in message:
            return "python_not"  # `not mask`, `if mask`, `and`, ...
        if operation in ("rsub", "sub") or ("Subtraction" in message and "bool tensor" in message):
            return "one_minus_mask"  # 1 - mask on a bool tensor
        return None

    @staticmethod
    def _is_additive_form(got, blocked: Tensor) -> bool:
        """``got`` is a float mask that adds -inf (or a large negative number such as the
        tutorials' -1e9) exactly where ``blocked`` is True, and 0 elsewhere."""
        if not (isinstance(got, Tensor) and got.is_floating_point() and got.shape == blocked.shape):
            return False
        return bool(torch.equal(got <= -1e4, blocked) and (got[~blocked] == 0).all())


MASKS_FOR_TORCH = _BoolMaskExercise(
    title="Exercise 4.4: course masks -> nn.MultiheadAttention masks",
    make_cases=_mask_cases,
    mistakes=[
        Mistake("not_inverted",
                "you passed the course masks through unchanged: nn.MultiheadAttention reads True as "
                "BLOCKED, so it would attend to exactly the keys you meant to hide.",
                "invert both with ~ (logical not)."),
        Mistake("only_padding_inverted",
                "you inverted the key padding mask but not attn_mask: nn.MultiheadAttention uses "
                "True = blocked for both.",
                "return ~attn_mask as well."),
        Mistake("only_attn_inverted",
                "you inverted attn_mask but not the key padding mask: nn.MultiheadAttention's "
                "key_padding_mask also uses True = ignore this key.",
                "return ~key_padding_mask as well."),
        Mistake("transposed_attn_mask",
                "your attn_mask is inverted but transposed: rows must stay queries and columns keys, "
                "(Tq, Tk), in nn.MultiheadAttention as in the course.",
                "drop the .T (or .transpose): ~attn_mask already has the right layout."),
        Mistake("additive_masks",
                "you built additive float masks (0 = keep, -inf or a large negative number such as "
                "-1e9 = block). That works in PyTorch: "
                "nn.MultiheadAttention adds a float mask to the scores. But this exercise asks for "
                "the boolean form, the one the rest of the lesson passes around.",
                "return boolean tensors: ~attn_mask and ~key_padding_mask."),
        Mistake("additive_mask_not_inverted",
                "your attn_mask is an additive float mask (0 = keep, -inf = block), and it puts -inf "
                "where the course mask is True, on the keys each query MAY attend to: it would block "
                "exactly those and keep the future. This exercise also asks for the boolean form, not "
                "a float one.",
                "return boolean tensors: ~attn_mask and ~key_padding_mask (True = blocked in "
                "nn.MultiheadAttention)."),
        Mistake("float_masks",
                "your masks have the right pattern but are not boolean (float or int): nn.MultiheadAttention "
                "ADDS a float mask to the scores (1.0 would nudge a score, not block it).",
                "keep them boolean: ~mask flips True and False without changing the dtype."),
        Mistake("numpy_masks",
                "you returned NumPy arrays: nn.MultiheadAttention accepts only torch tensors (it raises "
                "a TypeError for an array).",
                "stay in torch: ~attn_mask works on a bool tensor and returns a bool tensor."),
        Mistake("swapped_pair",
                "your two masks are right but in the wrong order: return (attn_mask, "
                "key_padding_mask), as nn.MultiheadAttention's keyword names them.",
                "give back the attention mask first and the padding mask second, each negated."),
        Mistake("python_not",
                "Python's `not` (like `if mask:`, `and`, `or`) raised an error: it asks a whole tensor "
                "for ONE True/False, which a mask with many entries cannot give. Element-wise "
                "negation is a tensor operation.",
                "use ~attn_mask (or attn_mask.logical_not()), likewise for key_padding_mask."),
        Mistake("one_minus_mask",
                "1 - mask raised an error: PyTorch does not subtract bool tensors. 1 - m flips 0 and "
                "1 in a number mask; a bool mask is flipped with logical not, which keeps it "
                "boolean, the form nn.MultiheadAttention reads as blocked / not blocked.",
                "~attn_mask (or attn_mask.logical_not()), likewise for key_padding_mask."),
    ],
    hint="both of nn.MultiheadAttention's masks use True = blocked; the course uses True = may attend. "
         "Return two boolean torch tensors of the same shapes as the inputs.",
)
check_masks_for_torch = MASKS_FOR_TORCH.check
