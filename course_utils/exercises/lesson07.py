"""Checks for lesson 7, "Grouped-query attention and the KV cache".

* :data:`REPEAT_KV`: expand ``g`` key/value heads to ``h`` (query head i reads K/V head
  ``i // (h // g)``), the copy that the no-copy function avoids.
* :data:`CACHE_BYTES`: the size of a KV cache from a model's shape.
* :data:`DECODE_STEP`: one decoding step with a grouped KV cache, attended by hand: the h query
  heads viewed as g groups, each group against its own cached K/V, without
  ``F.scaled_dot_product_attention`` (refused). A copy of K/V per head is not refused: the call
  watch cannot tell a Tensor method's call (``k.repeat_interleave``), an ``expand`` + ``reshape``
  or a notebook's own ``repeat_kv`` from their other uses, and the outputs are the same.
* :data:`MERGE_HALVES`: one query's attention over two key ranges, merged (flash decoding).

7.1, 7.3 and 7.5 return tensors that the next step stores or reuses (the copied heads feed
attention, the caches are appended to at every step, a merged output is merged again), so
a result cast from float64 down to float32 is a named mistake there, even though its
values are close; 7.2 returns a Python int.
"""

from __future__ import annotations

import re

import torch
import torch.nn.functional as F
from torch import Tensor

from .cases import seen_or_unseen
from .core import (
    Case,
    Exercise,
    Feedback,
    Mistake,
    _Deadline,
    _larger_than,
    _plain,
    _safe_str,
    as_scalar,
    describe_value,
    outputs_close,
)
from .raising import DiagnosesRaisingAnswers  # names answers that raise

__all__ = [
    "REPEAT_KV", "check_repeat_kv",
    "CACHE_BYTES", "check_cache_bytes",
    "DECODE_STEP", "check_decode_step",
    "MERGE_HALVES", "check_merge_halves",
]


def _randn(*shape: int, seed: int) -> Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- 7.1 repeat K/V heads ----------------------------------------------------------------

class _RepeatExercise(DiagnosesRaisingAnswers):
    """Exercise 7.1: a repeat count written as ``h / g`` (a float) raises a TypeError inside
    torch's argument parsing, before any tensor operation runs; name it from that error. The
    copies feed attention, so a float32 copy of float64 heads is named (changed_dtype)."""

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        parsing = re.match(r"(repeat_interleave|repeat|expand)\(\).*float", _safe_str(error))
        if isinstance(error, TypeError) and parsing:
            return "float_repeat_count"
        if isinstance(error, IndexError) and "out of bounds" in _safe_str(error):
            return "index_i_div_g"  # query head i -> K/V head i // g runs past the last K/V head
        if isinstance(error, RuntimeError) and "expanded size" in _safe_str(error):
            return "expanded_head_axis"  # expand only stretches axes of size 1
        return None

    def _grade(self, cases, outputs, expected) -> Feedback:
        feedback = super()._grade(cases, outputs, expected)
        if feedback.passed:  # the values compare equal to 1e-5; a copy must keep the dtype too
            for got, exp in zip(outputs, expected, strict=True):
                if got.dtype != exp.dtype:
                    return Feedback(
                        self.title, "mistake",
                        f"the values are right, but your output is {got.dtype} and the K/V heads came "
                        f"in as {exp.dtype}: a copy changed their dtype and dropped digits ({exp.dtype} "
                        "keeps about 16, float32 about 7), silently.",
                        "make the copies from kv itself (repeat_interleave, or expand + reshape): no "
                        ".float(), and no buffer from torch.zeros/torch.empty without dtype=kv.dtype.",
                        mistake="changed_dtype")
        return feedback

    def _hint_for(self, mistake: str, source: str) -> str | None:
        if mistake != "interleaved_groups":
            return None
        if "expand" in source:
            return ("your new axis stands before the head axis (kv[:, None] or unsqueeze(1)), so the "
                    "copies tile the g heads as a block. Put it after: kv[:, :, None].expand(B, g, h // g, "
                    "T, dk), then .reshape(B, h, T, dk).")
        if ".repeat(" in source or "torch.cat" in source or "torch.stack" in source:
            return ("repeat or cat copies the whole head axis after itself (0, 1, 0, 1, ...); "
                    "repeat_interleave(h // g, dim=1) copies each head in place (0, 0, 1, 1, ...).")
        return ("copy each K/V head next to itself (0, 0, 1, 1, ... for h // g = 2), "
                "not the whole head axis after itself (0, 1, 0, 1, ...).")


def _repeat_cases() -> list[Case]:
    # (B, g, T, d_k, h): other sizes for the grader's unseen cases (cases.seen_or_unseen)
    b, g, t, dk, h = seen_or_unseen((2, 2, 3, 4, 6), (3, 2, 4, 3, 8), (1, 3, 2, 5, 9), (2, 4, 3, 2, 12))
    first = Case((_randn(b, g, t, dk, seed=71), h), label=f"B={b}, g={g} K/V heads, h={h} query heads")
    b, g, t, dk, h = seen_or_unseen((1, 4, 5, 2, 8), (2, 3, 4, 3, 6), (1, 2, 6, 4, 8), (1, 5, 3, 2, 10))
    second = Case((_randn(b, g, t, dk, seed=72), h), label=f"B={b}, g={g}, h={h}")
    b, t, dk, h = seen_or_unseen((1, 2, 3, 3), (2, 3, 2, 4), (1, 4, 4, 2), (3, 2, 2, 5))
    third = Case((_randn(b, 1, t, dk, seed=73), h), label=f"B={b}, g=1 (MQA), h={h}")
    return [first, second, third]


REPEAT_KV = _RepeatExercise(
    title="Exercise 7.1: repeat K/V heads for their query heads",
    make_cases=_repeat_cases,
    mistakes=[
        Mistake("interleaved_groups",
                "query head i got K/V head i % g (interleaved), but the convention is blocked: "
                "query heads 0 .. h/g - 1 all read K/V head 0, the next h/g read head 1, ...",
                "kv.repeat(...) tiles the whole head axis; you want each head repeated in place."),
        Mistake("wrong_dim",
                "you repeated along the time axis (dim 2), so the sequence grew and the head count "
                "stayed g.",
                "Heads are dim 1 of (B, g, T, dk)."),
        Mistake("repeated_g_times",
                "you made g copies of each K/V head; each must serve h/g query heads.",
                "The repeat count is num_heads // g."),
        Mistake("repeated_h_times",
                "you made h copies of each K/V head, so there are g * h heads; together the g "
                "K/V heads must make exactly h.",
                "The repeat count is num_heads // g, not num_heads."),
        Mistake("flattened_no_dim",
                "your answer is a flat 1-D tensor, as repeat_interleave without dim= gives "
                "(it flattens its input first).", "Pass dim=1 (the head axis)."),
        Mistake("repeated_feature_axis",
                "you repeated along the last axis (dk), so each vector grew h/g times longer and "
                "the head count stayed g.",
                "Heads are dim 1 of (B, g, T, dk), not dim -1."),
        Mistake("expanded_not_reshaped",
                "your answer is 5-D, (B, g, h/g, T, dk): the copies sit on an axis of their own "
                "(as expand or unsqueeze make them), never merged into the head axis.",
                "Finish with .reshape(B, h, T, dk): group-major order keeps the grouping blocked."),
        Mistake("float_repeat_count",
                "your repeat count is a float: h / g is true division in Python (6 / 2 == 3.0), "
                "and a repeat count must be an int.",
                "Use integer division, num_heads // g."),
        Mistake("index_i_div_g",
                "indexing raised IndexError: you sent query head i to K/V head i // g, but g is the "
                "number of K/V heads, not the size of a group. With h = 6 and g = 2, i // 2 reaches "
                "K/V head 2, which does not exist.",
                "A group has h // g query heads, so query head i reads K/V head i // (h // g)."),
        Mistake("expanded_head_axis",
                "expand raised RuntimeError: it can only stretch an axis of size 1, and the head "
                "axis has g > 1 entries, so kv.expand(B, h, T, dk) cannot make h heads out of g.",
                "Add a new axis of size 1 for the copies, kv[:, :, None], expand that one to h // g, "
                "then reshape to (B, h, T, dk); or use repeat_interleave(h // g, dim=1)."),
        Mistake("repeated_batch_axis",
                "you repeated along dim 0, the batch: there are now B * h/g sequences of g heads each.",
                "Heads are dim 1 of (B, g, T, dk): repeat_interleave(h // g, dim=1)."),
    ],
    hint="Output (B, h, T, dk); query head i reads K/V head i // (h // g).",
)
check_repeat_kv = REPEAT_KV.check


# -- 7.2 cache size ----------------------------------------------------------------------

class _CacheBytesExercise(Exercise):
    """Exercise 7.2: a byte count is exact. Known slips are matched with the usual
    tolerance (a learner's float arithmetic may round differently), but only the exact
    count passes, a wrong count is told by how much, and a right float is named."""

    int_answer = "a number of bytes"

    def _grade(self, cases, outputs, expected) -> Feedback:
        tensor = self._returned_tensor(outputs, expected)  # (core's one rule for int answers)
        if tensor is not None:
            return tensor
        numbers = [as_scalar(g) for g in outputs]
        if all(type(n) in (int, float) and n == e for n, e in zip(numbers, expected, strict=True)):
            if any(isinstance(n, float) for n in numbers):
                return Feedback(self.title, "mistake",
                                "the value is right but it is a float: a number of bytes is a whole "
                                "number, and a float stops being exact beyond 2**53.",
                                "Divide with // (bits // 8, or the whole product // 8), not /.",
                                mistake="returned_float")
            return super()._grade(cases, outputs, expected)
        feedback = super()._grade(cases, outputs, expected)
        if feedback.status == "mistake":
            return feedback
        unit = _unit_slip(numbers, expected)
        if unit is not None:
            return self._mistake_feedback(unit)
        for case, n, e in zip(cases, numbers, expected, strict=True):
            if type(n) in (int, float) and n != e:  # a number, but not the count: say by how much
                if abs(n) < 10**24:
                    got = f"{n:,} (off by {n - e:+,})"
                else:  # a huge int, inf or NaN: its digits say nothing
                    got = describe_value(n)
                return Feedback(self.title, "wrong",
                                f"wrong count on {case.label}: expected {e:,} bytes, got {got}. "
                                "A byte count is exact: no rounding.", self.hint)
        return feedback


def _unit_slip(numbers: list, expected: list) -> str | None:
    """The Mistake key of a count given in KiB, MiB or GiB, however it was rounded (int(),
    round(), //): every number within 1 of the byte count divided by the unit, and at least one
    of them 1 or more (an answer of zeros is not in any unit)."""
    for key, unit in (("returned_kib", 2**10), ("returned_mib", 2**20), ("returned_gib", 2**30)):
        pairs = zip(numbers, expected, strict=True)
        if all(type(n) in (int, float) and abs(n * unit - e) < unit for n, e in pairs) \
                and any(e >= unit for e in expected):
            return key
    return None


def _random_cache_case(seed: int) -> Case:
    """One more model shape drawn from a seeded generator (autograde draws it anew)."""
    g = torch.Generator().manual_seed(seed)

    def draw(low: int, high: int) -> int:
        return int(torch.randint(low, high, (1,), generator=g))

    kv_heads = draw(1, 9)
    config = (draw(2, 60), draw(1, 9), kv_heads * draw(2, 9), kv_heads, 16 * draw(1, 9), draw(10, 5000),
              (4, 8, 16, 32)[draw(0, 4)])
    return Case(config, label="a model drawn at random: (layers, batch, h, g, d_head, tokens, bits) = "
                f"{config}")


def _cache_cases() -> list[Case]:
    return [
        Case((32, 1, 32, 8, 128, 8192, 16), label="Llama-3-8B shape, batch 1, 8k tokens, 16-bit"),
        Case((80, 4, 64, 8, 128, 4096, 8), label="Llama-3-70B shape, batch 4, 4k tokens, 8-bit"),
        Case((2, 3, 4, 2, 16, 32, 32), label="a tiny model in float32"),
        Case((3, 1, 4, 2, 5, 77, 4), label="an odd-sized toy with 4-bit numbers (a quantized cache)"),
        _random_cache_case(72),
    ]


CACHE_BYTES = _CacheBytesExercise(
    title="Exercise 7.2: KV cache size in bytes",
    make_cases=_cache_cases,
    mistakes=[
        Mistake("forgot_k_and_v", "your size is half the right one: the cache holds keys *and* "
                "values.", "Count two tensors per layer."),
        Mistake("used_query_heads", "you counted the h query heads; only the g key/value heads "
                "are cached (that is the whole saving of GQA).",
                "Use num_kv_heads (if you did, check your parameters' order: num_heads comes "
                "before num_kv_heads)."),
        Mistake("bits_not_bytes", "your answer is 8 times too large: it is in bits.",
                "Divide by 8 to get bytes."),
        Mistake("one_layer", "that is one layer's cache: every layer keeps its own.",
                "Multiply by num_layers."),
        Mistake("forgot_batch", "that is the cache of one sequence: every sequence in the batch "
                "keeps its own keys and values.", "Multiply by batch."),
        Mistake("used_group_size", "you used h // g, the number of query heads in a group, where "
                "the number of key/value heads g belongs.", "Use num_kv_heads itself."),
        Mistake("assumed_float32", "you used 4 bytes per number whatever bits_per_element says.",
                "Multiply by bits_per_element; divide the whole product by 8."),
        Mistake("assumed_16_bit", "you used 2 bytes per number whatever bits_per_element says.",
                "Multiply by bits_per_element; divide the whole product by 8."),
        Mistake("floored_bytes_per_element", "right for 8, 16 and 32 bits, but bits_per_element // 8 "
                "is 0 for 4-bit numbers, so a 4-bit cache came out empty.",
                "Multiply by bits_per_element first and divide by 8 last: 4-bit numbers take half a "
                "byte each."),
        Mistake("whole_byte_per_element", "right for 8, 16 and 32 bits, but you gave each 4-bit "
                "number a whole byte (bits_per_element // 8 is 0 for them, and you made it at least 1): "
                "two 4-bit numbers share one byte, so your 4-bit cache came out twice too large.",
                "Multiply by bits_per_element first and divide by 8 last: 4-bit numbers take half a "
                "byte each."),
        Mistake("forgot_d_head", "you counted one number per key/value head and token: each head's "
                "key (and value) is a vector of d_head numbers.", "Multiply by d_head."),
        Mistake("returned_gib", "your answer is in GiB (divided by 2**30); the exercise asks for bytes.",
                "Return the byte count itself; convert only to print."),
        Mistake("returned_mib", "your answer is in MiB (divided by 2**20); the exercise asks for bytes.",
                "Return the byte count itself; convert only to print."),
        Mistake("returned_kib", "your answer is in KiB (divided by 2**10 = 1024); the exercise asks for "
                "bytes.", "Return the byte count itself; convert only to print."),
        Mistake("counted_g_times_h", "you multiplied by both g and h: the cache holds g key/value "
                "heads, whatever the number of query heads h.",
                "Use num_kv_heads only; num_heads does not enter the cache size."),
        Mistake("times_four", "your count is 4 times too large: after using bits_per_element you "
                "multiplied by 4 bytes as well, as if every number were float32 on top.",
                "bits_per_element / 8 already gives the bytes per number; do not multiply by 4."),
    ],
    hint="count the numbers the cache holds: which tensors each layer keeps, for how many sequences, "
         "heads and tokens, and how many numbers each holds; multiply by the bits per number and turn "
         "bits into bytes only at the very end.",
)
check_cache_bytes = CACHE_BYTES.check


# -- 7.3 one decode step with a grouped cache ---------------------------------------------

_HALVES = (torch.float16, torch.bfloat16)
_DECODE_PARTS = ("output", "key cache", "value cache")


def _changed_dtypes(got: object, expected: tuple) -> tuple[list[str], torch.dtype] | None:
    """Which of a decode step's (out, k, v) came back in another float dtype than the answer's,
    and that dtype; None when none did (or ``got`` is not three tensors)."""
    if not isinstance(got, (tuple, list)) or len(got) != 3:
        return None
    changed = [(name, g.dtype) for name, g, e in zip(_DECODE_PARTS, got, expected, strict=True)
               if isinstance(g, Tensor) and isinstance(e, Tensor) and g.dtype != e.dtype]
    return ([name for name, _ in changed], changed[0][1]) if changed else None


def _listed(names: list[str]) -> str:
    """"output", "output and key cache", "output, key cache and value cache"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class _DecodeExercise(DiagnosesRaisingAnswers):
    """Exercise 7.3: the two classic ways a decode step raises are named too, and so are
    returned caches that a comparison of outputs cannot name: one cache left without the
    new token (torch's CPU attention does not check that keys and values have the same
    length, so the output is then undefined, not a fixed wrong value), caches of None, or
    caches that dropped their oldest token (a sliding window), whatever the output.

    The next step appends to the returned caches and attends over them, so a result whose
    dtype is not the inputs' is named: float64 cast down to float32 (values close, so it
    would pass) as ``changed_dtype``, half precision (values off in the third digit) as
    ``half_precision``."""

    def _grade(self, cases, outputs, expected) -> Feedback:
        feedback = super()._grade(cases, outputs, expected)
        if not feedback.passed:
            return feedback
        for got, exp in zip(outputs, expected, strict=True):
            changed = _changed_dtypes(got, exp)
            if changed:
                names, dtype = changed
                verb = "is" if len(names) == 1 else "are"
                return Feedback(
                    self.title, "mistake",
                    f"the values are right, but your {_listed(names)} {verb} {dtype} and the inputs are "
                    f"{exp[0].dtype}: the next step appends to the caches and passes the output on, so "
                    "the dropped digits (float64 keeps about 16, float32 about 7) would reach every "
                    "later token, silently.",
                    "keep the inputs' dtype: no .float() or .to(...), and no buffer from torch.zeros / "
                    "torch.empty without dtype=k_cache.dtype (torch.cat keeps it).",
                    mistake="changed_dtype")
        return feedback

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        for case, got, exp in zip(cases, outputs, expected, strict=True):
            key = self._cache_slip(case, got, exp)
            if key is not None:
                return self._mistake_feedback(key)
        if all(self._half_precision(case, got, exp) for case, got, exp in zip(cases, outputs, expected,
                                                                              strict=True)):
            return Feedback(
                self.title, "mistake",
                "you computed in half precision (float16 or bfloat16), which keeps only about three "
                "significant digits: your caches are right to that precision, and your output is off "
                "from the third or fourth digit on (more where the scores are large). The inputs are "
                "float64, and the next step appends to these caches, so every later token inherits "
                "the rounding.",
                "keep the inputs' dtype: drop the .half() / .to(torch.float16) / autocast.",
                mistake="half_precision")
        return None

    @staticmethod
    def _half_precision(case: Case, got: object, expected: tuple) -> bool:
        """``got`` is (out, k, v) with a half-precision tensor among them, every one of the right
        shape and close to the answer at half precision's tolerance (the output only on the
        ordinary cases: with scores near 1000 half precision moves the weights a lot)."""
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return False
        if not all(isinstance(g, Tensor) and g.is_floating_point() and g.shape == e.shape
                   for g, e in zip(got, expected, strict=True)):
            return False
        if not any(g.dtype in _HALVES for g in got):
            return False
        large = "scores up to" in case.label
        return all(torch.allclose(g.detach().to(e.dtype), e, rtol=1e-2, atol=1e-2)
                   for i, (g, e) in enumerate(zip(got, expected, strict=True)) if i > 0 or not large)

    @staticmethod
    def _cache_slip(case: Case, got: object, expected: tuple) -> str | None:
        """Name caches of None next to the right output, or one cache appended, not the other."""
        if not isinstance(got, (tuple, list)) or len(got) != 3:
            return None
        out, k, v = got
        if (k is None or v is None) and outputs_close(out, expected[0]):
            return "caches_not_returned"
        _, k_new, v_new, k_cache, v_cache = case.args
        k_all, v_all = torch.cat([k_cache, k_new], dim=2), torch.cat([v_cache, v_new], dim=2)
        if outputs_close(k, k_all[:, :, 1:]) and outputs_close(v, v_all[:, :, 1:]):
            return "dropped_oldest_token"  # a window of the newest T: the output may be either
        k_ok, v_ok = outputs_close(k, k_all), outputs_close(v, v_all)
        if k_ok and outputs_close(v, v_cache):
            return "value_not_appended"
        if v_ok and outputs_close(k, k_cache):
            return "key_not_appended"
        return None

    def _named(self, key: str) -> Feedback:
        message, hint = _CACHE_SLIPS[key]
        return Feedback(self.title, "mistake", message, hint, mistake=key)

    def _mistake_feedback(self, key: str) -> Feedback:
        """A slip of the caches (:data:`_CACHE_SLIPS`) or one of :attr:`mistakes`."""
        return self._named(key) if key in _CACHE_SLIPS else super()._mistake_feedback(key)

    def check(self, fn) -> Feedback:
        """Also name an answer that is random: two calls on the same inputs disagree."""
        feedback = super().check(fn)
        if feedback.status != "wrong":
            return feedback
        case = self.cases()[0]
        try:
            with _Deadline():
                first, second = fn(*case.fresh()[0]), fn(*case.fresh()[0])
        except BaseException:  # noqa: BLE001 - the plain feedback stands
            return feedback
        if not _plain([first, second], whole=True):  # the answer's own class: its methods would run
            return feedback  # without limit in the comparisons below
        if not all(isinstance(out, (tuple, list)) and len(out) == 3 and isinstance(out[0], Tensor)
                   for out in (first, second)):
            return feedback  # not (output, k, v): the plain feedback names what came back instead
        if _larger_than(first, self._expected_outputs([case])[0]):
            return feedback  # too large to compare twice: the wrong-shape feedback stands
        try:
            random = not outputs_close(first, second, rtol=0, atol=0)
        except BaseException:  # noqa: BLE001 - an answer that cannot be compared: the plain feedback
            return feedback
        return self._named("random_output") if random else feedback

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        if isinstance(error, IndexError) and "out of bounds" in _safe_str(error):
            return "kv_index_i_div_g"
        return None

    def _hint_for(self, mistake: str, source: str) -> str | None:
        if mistake in ("unscaled", "scaled_by_dk", "scaled_by_sqrt_length"):
            return ("divide the scores q @ k^T by dk ** 0.5, the square root of a head's width "
                    "(q_new.shape[-1]), before the softmax.")
        if mistake == "interleaved_groups":
            if ".repeat(" in source:
                return ("k.repeat(...) tiles the whole head axis (0, 1, 0, 1, ...); no copy is needed: "
                        "view the queries as q_new.reshape(B, g, h // g, dk), so that group j holds "
                        "query heads j * h/g .. (j + 1) * h/g - 1 and meets K/V head j.")
            if "transpose" in source or "permute" in source or ".mT" in source:
                return ("you grouped the heads as (h/g, g) and swapped the axes, so group j holds query "
                        "heads j, j + g, j + 2g, ... (interleaved). View them as (B, g, h // g, dk) "
                        "directly: the h heads are g blocks of h/g neighbours.")
            return ("query head i reads K/V head i // (h // g): view the queries as "
                    "q_new.reshape(B, g, h // g, dk), g blocks of h/g neighbouring heads.")
        return None

    @staticmethod
    def _key_for(failed: tuple[str, list] | None) -> str | None:
        if failed is None:
            return None
        name, args = failed
        if name == "cat" and args and isinstance(args[0], (list, tuple)):
            parts = [tuple(t.shape) for t in args[0] if isinstance(t, Tensor)]
            if (len(parts) == 2 and len(parts[0]) == len(parts[1]) == 4
                    and all(a == b for i, (a, b) in enumerate(zip(*parts, strict=True)) if i != 2)):
                return "appended_on_wrong_axis"  # they fit along time (dim 2) only
            return None
        shapes = [a for a in args if isinstance(a, tuple)]
        if name == "scaled_dot_product_attention" and len(shapes) >= 3 \
                and len(shapes[1]) == len(shapes[2]) == 4 and shapes[1][2] != shapes[2][2]:
            # keys and values of different lengths: one cache was left without the new token
            # (torch 2.5.1 raises here; 2.13's CPU attention returns, and the caches name it)
            return "key_not_appended" if shapes[1][2] < shapes[2][2] else "value_not_appended"
        if len(shapes) >= 2 and len(shapes[0]) == len(shapes[1]) == 4 and shapes[0][1] != shapes[1][1]:
            q, k = shapes[0], shapes[1]
            if q[2] > 1 and q[2] == k[1] and k[0] == q[0] and q[3] == k[2]:  # (B,h/g,g,dk) @ (B,g,dk,T+1)
                return "group_axes_swapped"  # the queries grouped as (h/g, g): g met the wrong axis
            if k[1] > q[1] and k[0] == q[0] and q[3] in (k[2], k[3]):  # more K/V heads than queries
                return "repeated_by_g"  # repeated g times, not h // g
            if name == "scaled_dot_product_attention":
                return "forgot_enable_gqa"
            if name in ("matmul", "matmul_", "bmm") and k[0] == q[0] and k[2] == q[3]:  # (B, g, dk, T)
                return "heads_not_matched"
        return None


_CACHE_SLIPS = {
    "value_not_appended": (
        "your key cache has the new token but your value cache does not: k_new was appended "
        "and v_new was not, so the new token attended over T+1 keys with only T values "
        "(torch's CPU attention does not stop you, but the result is not defined).",
        "Append v_new to v_cache along the time axis too, before attending."),
    "key_not_appended": (
        "your value cache has the new token but your key cache does not: v_new was appended "
        "and k_new was not, so the new token attended over T keys with T+1 values.",
        "Append k_new to k_cache along the time axis too, before attending."),
    "caches_not_returned": (
        "you returned None for a cache: the next step needs both caches with this token "
        "appended.", "Return (output, k, v) with k and v of shape (B, g, T+1, dk)."),
    "random_output": (
        "your function gives a different output each time it runs on the same inputs: "
        "something random is on, most likely dropout (dropout_p > 0 in "
        "F.scaled_dot_product_attention, or a Dropout module in training mode). Decoding "
        "is inference: no dropout.",
        "Leave dropout_p at its default 0.0 (and call model.eval() before generating)."),
}


def _decode_cases() -> list[Case]:
    """Three decode steps, then one whose scores reach about +-1000 (a query 400 times larger):
    exp(1000) overflows even float64, so a softmax that does not subtract each row's maximum
    gives NaN there. The grader's unseen cases draw other sizes of the same kinds
    (:func:`.cases.seen_or_unseen`): groups of 2 and 3, MQA (g = 1), large scores."""
    cases = []
    shapes = [seen_or_unseen((2, 4, 2, 5, 8, 3.0), (1, 6, 2, 4, 4, 3.0), (2, 8, 4, 3, 6, 3.0)),
              seen_or_unseen((1, 6, 3, 3, 4, 3.0), (2, 9, 3, 2, 4, 3.0), (1, 12, 4, 5, 2, 3.0)),
              seen_or_unseen((1, 2, 1, 4, 16, 3.0), (2, 3, 1, 3, 8, 3.0), (1, 4, 1, 6, 4, 3.0)),
              seen_or_unseen((1, 4, 2, 6, 4, 400.0), (1, 6, 3, 5, 4, 400.0), (2, 4, 1, 4, 4, 400.0))]
    for i, (B, h, g, T, dk, size) in enumerate(shapes):
        s = 730 + 10 * i
        tensors = (size * _randn(B, h, 1, dk, seed=s), _randn(B, g, 1, dk, seed=s + 1),
                   _randn(B, g, 1, dk, seed=s + 2), _randn(B, g, T, dk, seed=s + 3),
                   _randn(B, g, T, dk, seed=s + 4))
        label = f"B={B}, h={h}, g={g}, {T} cached tokens, dk={dk}"
        cases.append(Case(tensors, label=label if size < 100 else label + ", scores up to about 1000"))
    return cases


DECODE_STEP = _DecodeExercise(
    title="Exercise 7.3: one decoding step with a grouped KV cache",
    make_cases=_decode_cases,
    mistakes=[
        Mistake("prepended", "the output is right but the new key/value went to the *front* of "
                "the cache: the cache must stay in position order for the next steps.",
                "Concatenate [cache, new] along the time axis (dim 2)."),
        Mistake("skipped_new_token", "the new token did not attend to itself: you attended over "
                "the old cache only.", "Append first, then attend."),
        Mistake("is_causal_in_decode", "you applied a causal mask (is_causal=True, or a tril/triu "
                "mask) to one query and T+1 keys: it is aligned top-left, so the new token saw only "
                "the first key.",
                "A single newest query may see every cached key: no mask is needed."),
        Mistake("interleaved_groups", "query head i used K/V head i % g (interleaved); the "
                "convention is i // (h // g): group j is the h/g neighbouring query heads "
                "j * h/g .. (j + 1) * h/g - 1.",
                "View the queries as q_new.reshape(B, g, h // g, dk): blocks of neighbours."),
        Mistake("unscaled", "the scores were not divided by sqrt(dk).",
                "Divide the scores by dk ** 0.5 (dk = q_new.shape[-1]) before the softmax."),
        Mistake("returned_old_cache", "the output is right but you returned the caches you were "
                "given: the next step would never see this token.",
                "Return the caches with the new key/value appended (T+1 positions)."),
        Mistake("returned_repeated_cache", "the output is right but your returned caches have h "
                "heads: you stored the repeated copy, so the cache is h/g times larger, which is "
                "the memory GQA exists to save.",
                "Return the g-head caches you appended to; the grouped attention needs no h-head "
                "copy at all."),
        Mistake("softmax_over_queries", "your softmax ran over the query axis (dim=-2): with one "
                "query every weight is 1, so the output is the sum of all values.",
                "Normalise each query's scores over the keys: softmax(dim=-1)."),
        Mistake("scaled_by_dk", "you divided the scores by dk; the scale is 1 / sqrt(dk).",
                "Divide by dk ** 0.5."),
        Mistake("attended_new_token_only", "the new token attended only to itself: the cached "
                "keys and values were never used.", "Attend over the appended caches (T+1 keys)."),
        Mistake("returned_caches_swapped", "the output is right but you returned (out, v, k): the "
                "key cache came back as the value cache and the other way round.",
                "Return (output, k, v) in that order."),
        Mistake("appended_on_wrong_axis", "torch.cat raised: the cache (B, g, T, dk) and the new "
                "token (B, g, 1, dk) only fit together along the time axis.",
                "Concatenate along dim=2 (or dim=-2), the time axis."),
        Mistake("forgot_enable_gqa", "F.scaled_dot_product_attention raised: the query has h heads "
                "and the caches only g, and it pairs them only when told to.",
                "Pass enable_gqa=True (query head i then reads K/V head i // (h // g))."),
        Mistake("repeated_by_g", "attention raised: after your repeat the caches have more heads "
                "than the query (g * g instead of h), because each K/V head was repeated g times.",
                "Repeat each K/V head h // g times (the size of a group), not g times."),
        Mistake("kv_index_i_div_g", "indexing raised IndexError: you sent query head i to K/V head "
                "i // g, but g is the number of K/V heads, not the size of a group; with h = 2 and "
                "g = 1, i // 1 asks for K/V head 1 of 1.",
                "Query head i reads K/V head i // (h // g): view the queries as "
                "q_new.reshape(B, g, h // g, dk) and no index is needed."),
        Mistake("new_key_in_value_cache", "you appended k_new to the value cache: the new token's "
                "value is v_new, so its output blended the wrong vector.",
                "k_cache gets k_new and v_cache gets v_new."),
        Mistake("appends_swapped", "you appended each new vector to the other cache: k_new went "
                "into the value cache and v_new into the key cache, so the new token was scored "
                "against its own value vector and its output blended its key.",
                "k = torch.cat([k_cache, k_new], dim=2) and v = torch.cat([v_cache, v_new], dim=2): "
                "each new vector goes to the cache of its own kind."),
        Mistake("scaled_by_sqrt_length", "you scaled the scores by 1 / sqrt(T + 1), the number of "
                "keys: the scale is 1 / sqrt(dk), the width of a head.",
                "Divide by dk ** 0.5, with dk = q_new.shape[-1]."),
        Mistake("softmax_without_max_shift", "right on ordinary scores, NaN where the scores reach "
                "about 1000: your softmax computes exp(scores) directly, and exp(1000) overflows to "
                "inf even in float64, so inf / inf gives NaN.",
                "subtract each row's maximum before exp (scores - scores.amax(-1, keepdim=True)), or "
                "call torch.softmax, which does that for you."),
        Mistake("dropped_oldest_token", "your returned caches lost their oldest token: you kept only "
                "the newest T positions, as a sliding-window cache does. This exercise's cache keeps "
                "every token, so it grows to T+1 positions and the new token attends to all of them.",
                "append without cutting anything off: the caches you return are (B, g, T+1, dk)."),
        Mistake("group_axes_swapped", "q @ k.transpose(-2, -1) raised: your grouped queries are "
                "(B, h/g, g, dk), so their second axis, of h/g, met the g K/V heads of the key cache. "
                "(Where h/g happens to equal g the same view is right, which is why some cases pass.)",
                "View the queries as (B, g, h // g, dk): g groups, each of h/g neighbouring heads, so "
                "the group axis comes second and meets the K/V heads."),
        Mistake("softmax_over_group_heads", "your softmax ran over a group's query heads (dim=-2 of "
                "the (B, g, h/g, T+1) scores), not over the keys: each key's weights sum to 1 "
                "across the heads of a group instead of each head's weights across the keys.",
                "Normalise each query head's scores over the keys: softmax(dim=-1)."),
        Mistake("heads_not_matched", "q @ k.transpose(-2, -1) raised: the query has h heads and the "
                "key cache only g, so the head axes do not broadcast.",
                "View the queries as g groups, q_new.reshape(B, g, h // g, dk): the head axes then "
                "match (g and g), and each group's h/g rows meet their own K/V head, uncopied."),
    ],
    hint="Return (output (B, h, 1, dk), k (B, g, T+1, dk), v (B, g, T+1, dk)); append along "
         "the time axis (dim 2); view the queries as (B, g, h // g, dk), attend each group to its "
         "own K/V by hand (scores, / dk ** 0.5, softmax, @ v), then reshape to (B, h, 1, dk).",
    forbidden=[F.scaled_dot_product_attention],  # the exercise asks for the grouped step by hand
)
check_decode_step = DECODE_STEP.check


# -- 7.5 merging the attention of two key ranges ----------------------------------------------

def _halves(scores: Tensor, v: Tensor, cut: int) -> tuple[Tensor, ...]:
    """(out_a, lse_a, out_b, lse_b): each key range's attention output and logsumexp."""
    halves = []
    for keys in (slice(0, cut), slice(cut, scores.shape[-1])):
        part = scores[..., keys]  # (B, h, T_half)
        out = torch.einsum("bht,bhtd->bhd", torch.softmax(part, dim=-1), v[:, :, keys])  # (B, h, dk)
        halves += [out, torch.logsumexp(part, dim=-1)]  # (B, h, dk), (B, h)
    return tuple(halves)


def _merge_cases() -> list[Case]:
    """Attention of one query per head over T keys, split after ``cut`` keys. Cases 3 and 4
    have scores in the hundreds: near a thousand (mixed signs), then every score near 750, so
    that both lse are above 709, where exp(lse) overflows even float64. The last case's two
    halves hold the same keys' scores and values, so lse_a == lse_b exactly: an answer that
    divides by lse_a - lse_b, or otherwise gives NaN on a tie, fails there (battery 9)."""
    cases = []
    for i, (B, h, dk, T, cut, spread) in enumerate([(2, 3, 4, 9, 2, 1.0), (1, 2, 5, 6, 3, 2.0),
                                                   (2, 3, 4, 7, 4, 600.0)]):
        s = 760 + 10 * i
        q, v = _randn(B, h, dk, seed=s), _randn(B, h, T, dk, seed=s + 2)
        k = spread * _randn(B, h, T, dk, seed=s + 1)
        scores = torch.einsum("bhd,bhtd->bht", q, k) / dk**0.5  # (B, h, T)
        label = f"B={B}, h={h}, dk={dk}, keys split {cut} + {T - cut}"
        label += ", scores near 1000" if spread > 10 else ""
        cases.append(Case(_halves(scores, v, cut), label=label))
    scores = 750.0 + _randn(1, 2, 6, seed=795)  # (B, h, T): every score near 750
    halves = _halves(scores, _randn(1, 2, 6, 3, seed=796), 2)
    cases.append(Case(halves, label="B=1, h=2, dk=3, keys split 2 + 4, scores near 750 (both lse > 709)"))
    # the same scores and values in both halves (so out_a == out_b too: which half a slip keeps
    # on a tie, > or >=, gives the same output)
    half, values = _randn(2, 2, 3, seed=797), _randn(2, 2, 3, 4, seed=798)  # (B, h, T/2), (B, h, T/2, dk)
    halves = _halves(torch.cat([half, half], dim=-1), torch.cat([values, values], dim=2), 3)
    cases.append(Case(halves, label="B=2, h=2, dk=4, keys split 3 + 3, both halves with equal lse"))
    return cases


class _MergeExercise(DiagnosesRaisingAnswers):
    """Exercise 7.5: a weight of shape (B, h) times an output of shape (B, h, dk) raises; and
    any formula right on the small cases but wrong on a large one (scores in the hundreds) overflowed,
    however it was written (exp(lse) / total gives NaN, log(exp + exp) gives zeros). A float32
    result of float64 inputs is named, whether it passed (changed_dtype) or not."""

    def _grade(self, cases, outputs, expected) -> Feedback:
        feedback = super()._grade(cases, outputs, expected)
        if not feedback.passed:
            return feedback
        for got, exp in zip(outputs, expected, strict=True):
            if isinstance(got, Tensor) and isinstance(exp, Tensor) and got.dtype != exp.dtype:
                return Feedback(
                    self.title, "mistake",
                    f"the values are right, but your output is {got.dtype} and the inputs are "
                    f"{exp.dtype}: a merged output is merged again with the next range's (flash "
                    "decoding merges many), so the dropped digits would carry on, silently.",
                    "keep the inputs' dtype: no .float() or .to(...) on the result or on the inputs.",
                    mistake="changed_dtype")
        return feedback

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        right = [self._close(g, e) for g, e in zip(outputs, expected, strict=True)]
        large = ["scores near" in c.label for c in cases]
        small_right = all(r for r, big in zip(right, large, strict=True) if not big)
        if small_right and not all(right):
            if self._float32_rounding(outputs, expected):
                return Feedback(
                    self.title, "mistake",
                    "your formula is right, but you computed in float32, and the inputs are float64. "
                    "Near lse = 1000, float32 stores numbers 6e-5 apart, so lse_a - lse, and with it "
                    "each weight, is off by about 1e-4: nothing overflowed.",
                    "keep the inputs' dtype: no .float(), no float32 buffers.", mistake="float32_rounding")
            return self._mistake_feedback("exp_overflow")
        return None

    @staticmethod
    def _float32_rounding(outputs, expected) -> bool:
        """True when the answer came back float32 for float64 inputs and is finite and right to
        float32's precision at lse near 1000 (relative error well under 1e-2)."""
        for got, exp in zip(outputs, expected, strict=True):
            if not isinstance(got, Tensor) or got.dtype != torch.float32 or got.shape != exp.shape:
                return False
            if not torch.isfinite(got).all() or not torch.allclose(got.double(), exp, rtol=1e-2, atol=1e-3):
                return False
        return True

    @staticmethod
    def _key_for_error(error: BaseException) -> str | None:
        if isinstance(error, RuntimeError) and "must match the size of tensor" in _safe_str(error):
            return "weights_not_unsqueezed"
        return None


MERGE_HALVES = _MergeExercise(
    title="Exercise 7.5: merge the attention of two key ranges",
    make_cases=_merge_cases,
    mistakes=[
        Mistake("averaged", "you averaged the two outputs: each half must count in proportion to "
                "its share of the softmax's total, exp(lse_a) against exp(lse_b), not half each.",
                "weight out_a by exp(lse_a - lse) and out_b by exp(lse_b - lse), with "
                "lse = torch.logaddexp(lse_a, lse_b)."),
        Mistake("not_normalised", "you weighted each output by exp(lse) but never divided by the "
                "total: the weights must add up to 1.",
                "divide by exp(lse_a) + exp(lse_b), or, safer, use exp(lse_a - lse) with "
                "lse = torch.logaddexp(lse_a, lse_b)."),
        Mistake("max_not_logsumexp", "you shifted by the larger lse but did not normalise: the two "
                "weights exp(lse_a - max) and exp(lse_b - max) add up to more than 1.",
                "shift by the log of the whole sum, lse = torch.logaddexp(lse_a, lse_b), not by the "
                "max; then the weights add up to 1."),
        Mistake("exp_overflow", "right on the small cases, but your weights overflow when the scores "
                "are near 1000: exp(lse) is inf (even in float64, past about 709), and inf / inf is NaN.",
                "never take exp of lse itself: the weight of a half is exp(lse_a - lse), with "
                "lse = torch.logaddexp(lse_a, lse_b), whose exponent is never positive."),
        Mistake("lse_used_as_sum", "you used lse_a and lse_b as if they were the sums themselves: "
                "they are the *logs* of the sums of exp(scores).",
                "a half's share is exp(lse_a) / (exp(lse_a) + exp(lse_b)) = exp(lse_a - lse), with "
                "lse = torch.logaddexp(lse_a, lse_b)."),
        Mistake("weights_swapped", "the weights are right but swapped: out_a got the weight of "
                "half b and out_b that of half a.",
                "out_a goes with lse_a, out_b with lse_b."),
        Mistake("summed", "you added the two outputs: each is already an average over its own keys, "
                "so their plain sum counts the values twice over.",
                "blend them with weights that add up to 1: exp(lse_a - lse) and exp(lse_b - lse)."),
        Mistake("log_shares", "your weights are lse_a - lse and lse_b - lse: those are the *logs* of "
                "the two shares (negative numbers); the shares themselves are their exp.",
                "weight out_a by torch.exp(lse_a - lse), and out_b likewise."),
        Mistake("kept_one_half", "you kept the output of the half with the larger lse and dropped "
                "the other: the other half's keys still hold part of the weight.",
                "blend both: exp(lse_a - lse) * out_a + exp(lse_b - lse) * out_b."),
        Mistake("returned_out_a_only", "you returned out_a as it is: that is attention over the first "
                "range of keys alone, and the second range's keys, whose share of the softmax is "
                "exp(lse_b - lse), are dropped.",
                "blend both outputs, each weighted by its range's share of the whole softmax sum."),
        Mistake("returned_out_b_only", "you returned out_b as it is: that is attention over the second "
                "range of keys alone, and the first range's keys, whose share of the softmax is "
                "exp(lse_a - lse), are dropped.",
                "blend both outputs, each weighted by its range's share of the whole softmax sum."),
        Mistake("softmax_over_batch", "your softmax ran over the wrong axis, the batch: each query's "
                "two weights must be normalised against each other (over the axis that holds lse_a and "
                "lse_b), so that they add up to 1; yours add up to 1 across the sequences instead.",
                "stack lse_a and lse_b along a new axis and take the softmax over that axis."),
        Mistake("softmax_over_heads", "your softmax ran over the wrong axis, the heads: each query's "
                "two weights must be normalised against each other (over the axis that holds lse_a and "
                "lse_b), so that they add up to 1; yours add up to 1 across the heads instead.",
                "stack lse_a and lse_b along a new axis and take the softmax over that axis."),
        Mistake("weights_not_unsqueezed", "multiplying raised: the weights are (B, h) and the "
                "outputs (B, h, dk), and PyTorch lines up the *last* axes, h against dk.",
                "give the weights a last axis of size 1: w[..., None] (or w.unsqueeze(-1))."),
    ],
    hint="each half's output is already an average over its own keys; blend the two, each weighted "
         "by its share of the whole softmax sum. lse_a and lse_b are the logs of the two halves' sums, "
         "so work with them as logs and never take exp of a large positive number.",
)
check_merge_halves = MERGE_HALVES.check
