"""KV caches that do not copy themselves: preallocated, and a sliding window (ring buffer).

Lesson 07's cache (:class:`~course_utils.model.transformer.KVCache` through
:meth:`~course_utils.model.transformer.TinyTransformer.forward_with_cache`) appends with ``torch.cat``:
every step writes a new tensor holding the whole cache plus one token, so a step of a cache
of ``T`` tokens reads and writes ``T`` tokens' keys and values before attention reads them
again. The caches here write the new token into memory set aside in advance:

* :class:`CatCache`: the ``torch.cat`` append, as a reference (``window`` keeps only the
  latest tokens, by slicing the concatenated tensor: a second copy).
* :class:`PreallocatedCache`: one ``(B, g, max_len, dk)`` buffer per layer for K and one for V;
  a step writes its token at position ``length`` and attends over a view of the first
  ``length + 1`` positions. Nothing is copied; memory is taken for ``max_len`` at the start.
* :class:`SlidingWindowCache`: ``window`` slots per layer, used as a ring (Mistral 7B's
  "rolling buffer cache"): token ``t`` goes into slot ``t % window``, over the token
  ``window`` steps older. Memory stays at ``window`` tokens however long the generation; each
  token attends to the latest ``window`` tokens only. The slots are not in time order once the
  ring wraps, which does not matter for one new query: attention sums over its keys in any
  order, and each key already carries its position (added to the embedding in this course's
  model, rotated into the key by RoPE in Mistral's).

:func:`decode_step` runs one token of a :class:`~course_utils.model.transformer.TinyTransformer` through
any of them; :func:`decode_tokens` feeds a sequence one token at a time.

A second lever beside ``g``: store the numbers in fewer bits.

* :func:`quantize_kv` / :func:`dequantize_kv`: 8-bit codes with a float16 scale (and, when
  asymmetric, a float16 zero point) per token (one scale for the ``dk`` numbers of one head of
  one token) or per channel (over the tokens of a group). llama.cpp's ``q8_0`` cache type is
  finer than per token: one float16 scale for every 32 consecutive numbers, so a head of
  ``dk = 128`` has four. Keys per channel and values per token, asymmetric, is KIVI's choice
  (Liu et al., 2024), whose keys have a few channels much larger than the rest.
* :class:`QuantizedCache`: a preallocated cache holding those codes; the newest tokens wait in
  float32 until a group of ``group`` tokens is full (KIVI's full-precision residual), then the
  group is quantized. Attention dequantizes into a float32 scratch buffer and then attends:
  the bytes are saved in memory, but a step still writes and reads a float32 copy of the
  cache (a kernel that reads the codes directly would not).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from ..attention.validation import (
    check_choice,
    check_device,
    check_finite,
    check_fits_in_memory,
    check_flag,
    check_float_dtype,
    check_holds_values,
    check_index,
    check_int,
    check_same_dtype_and_device,
    check_tensor,
    describe_shape,
    items_of,
    shown,
)

__all__ = ["CatCache", "PreallocatedCache", "SlidingWindowCache", "QuantizedCache", "Quantized",
           "quantize_kv", "dequantize_kv", "quantized_bytes_per_token", "decode_step", "decode_tokens",
           "repeatable_step"]


def _check_new(k_new: Tensor, v_new: Tensor, layer: int, num_layers: int,
               like: tuple[int, int, int] | None = None, device: torch.device | None = None) -> int:
    """``k_new`` and ``v_new`` are ``(B, g, T_new, dk)`` floating tensors of one shape, dtype and
    device, holding values (not on the meta device); ``like`` is the cache's ``(B, g, dk)``, which
    they must match exactly (broadcasting one head or one sequence into a cache of several would
    copy it silently), and ``device`` the cache's device, when it has one yet. Returns ``layer`` as
    a plain int (an int subclass whose repr raises went into the messages: battery 30)."""
    layer = check_index(layer, "layer", num_layers, "layers in the cache")
    expected = "(B, g, T_new, dk)" if like is None else f"(B={like[0]}, g={like[1]}, T_new, dk={like[2]})"
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        check_tensor(t, name, ndim=4, layout=expected)
        if like is not None and (t.shape[0], t.shape[1], t.shape[3]) != like:
            raise ValueError(f"{name} must be {expected} like the cache, got {describe_shape(t)}")
    if k_new.shape != v_new.shape:
        raise ValueError(f"k_new and v_new must have one shape {expected}, got {describe_shape(k_new)} "
                         f"and {describe_shape(v_new)}")
    check_same_dtype_and_device({"k_new": k_new, "v_new": v_new})
    if device is not None and k_new.device != device:
        raise ValueError(f"k_new and v_new are on {k_new.device} but the cache is on {device}: move them "
                         f"with .to({str(device)!r})")
    check_holds_values(k_new, "k_new")
    return layer


def _check_layers(layers: object) -> tuple[int, int, int, int]:
    """``layers`` is a non-empty list of ``(k, v)`` pairs of tensors ``(B, g, T, dk)``, every layer
    holding the same ``T`` tokens; returns the first ``k``'s ``(B, g, T, dk)``."""
    if isinstance(layers, (list, tuple)):  # a list whose len() raises is named (battery 30)
        items_of(layers, "layers", "a non-empty list of (k, v) pairs, one per layer")
    if not isinstance(layers, (list, tuple)) or not layers:
        raise ValueError(f"layers must be a non-empty list of (k, v) pairs, one per layer, each "
                         f"(B, g, T, dk); got {shown(layers, 60)}")
    for i, pair in enumerate(layers):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"layers[{i}] must be a (k, v) pair of (B, g, T, dk) tensors, got "
                            f"{type(pair).__name__}")
        for name, t in ((f"layers[{i}] k", pair[0]), (f"layers[{i}] v", pair[1])):
            check_tensor(t, name, ndim=4, layout="(B, g, T, dk)")
            check_holds_values(t, name)
        check_same_dtype_and_device({"layers[0] k": layers[0][0], f"layers[{i}] k": pair[0],
                                     f"layers[{i}] v": pair[1]})
    first = layers[0][0]
    for i, (k, v) in enumerate(layers):
        if k.shape == v.shape and k.shape[2] != first.shape[2]:
            raise ValueError(f"every layer must hold T={first.shape[2]} tokens, layer {i} holds {k.shape[2]}")
        if k.shape != first.shape or v.shape != first.shape:
            raise ValueError(f"every layer must hold k and v of one shape, as layers[0] k "
                             f"{describe_shape(first)}; layers[{i}] holds k {describe_shape(k)}, "
                             f"v {describe_shape(v)}")
    return tuple(first.shape)


def _check_dtype(k_new: Tensor, dtype: torch.dtype, remedy: str | None = None) -> None:
    """New keys and values have the cache's dtype (a float16 cache would silently round float32
    keys; a float64 model reading float32 keys fails deep inside attention). ``remedy`` replaces
    the advice to build the cache in ``k_new``'s dtype, for a cache whose dtype is fixed."""
    if k_new.dtype != dtype:
        remedy = remedy or f"build the cache with dtype={k_new.dtype} (the model's), or"
        raise TypeError(f"k_new and v_new have dtype {k_new.dtype} but the cache holds {dtype}: {remedy} "
                        f"convert with .to({dtype})")


class _StepOrder:
    """The invariant every cache here keeps: a decoding step appends layer 0, 1, ..., L-1, each
    once and in that order, with the same number of new tokens; ``length`` (the next token's
    position) advances when the last layer has been appended. A second append to one layer in
    a step would overwrite (or, for :class:`CatCache`, duplicate) a token, and an append to
    layer 1 before layer 0 would leave layer 0 without the step's token: both are refused.

    Also refused before anything is written: keys and values of another dtype or device than the
    cache's, or on the meta device (no values to store). NaN and infinity are stored as given
    (they propagate, as in attention; checking every step would cost a pass over the new
    tokens): only :class:`QuantizedCache` refuses them, having no 8-bit code for them.

    A cache stores numbers, not a graph: keys and values that track gradients are stored (and
    returned) detached, so a cache filled with gradients on can still be ``copy.deepcopy``-ed."""

    _next_layer = 0  # the layer the next append must name
    _step_tokens = 0  # tokens appended by layer 0 in the current step

    def _check_order(self, layer: int, new_tokens: int) -> None:
        expected = self._next_layer
        if layer != expected:
            where = f"position {self.length}"
            if layer < expected:
                raise ValueError(f"layer {layer} was already appended in this step ({where}): each step "
                                 f"appends layers 0..{self.num_layers - 1} once, in order, so the next "
                                 f"append must be layer {expected}")
            raise ValueError(f"layer {layer} cannot be appended before layer {expected} in this step "
                             f"({where}): each step appends layers 0..{self.num_layers - 1} once, in "
                             f"order; layer {expected} would be left without this step's tokens")
        if layer > 0 and new_tokens != self._step_tokens:
            raise ValueError(f"layer {layer} got {new_tokens} new token(s) but layer 0 got "
                             f"{self._step_tokens} in this step: every layer appends the same tokens")

    def _advance(self, layer: int, new_tokens: int) -> None:
        if layer == 0:
            self._step_tokens = new_tokens
        self._next_layer = (layer + 1) % self.num_layers

    def _state(self) -> tuple:
        """What a step moves: ``length`` and the step order (a :class:`CatCache` adds its list of
        tensors). Slots a step writes past ``length`` need no saving: the next step writes them
        before reading them."""
        return self.length, self._next_layer, self._step_tokens

    def _restore(self, state: tuple) -> None:
        """Put back a :meth:`_state`: the cache is as it was when it was taken."""
        self.length, self._next_layer, self._step_tokens = state


class CatCache(_StepOrder):
    """The ``torch.cat`` append: each call returns new tensors holding every cached token.

    The keys and values take the dtype and device of the first ones appended, to any layer:
    later keys and values of another dtype (for this layer or another) are a TypeError, of
    another device a ValueError. Every step appends layers ``0..num_layers-1`` once each, in
    order (see :class:`_StepOrder`)."""

    def __init__(self, num_layers: int, *, window: int | None = None) -> None:
        num_layers = check_int(num_layers, "num_layers", minimum=1)
        check_fits_in_memory(8 * num_layers, "num_layers", "one list slot of 8 bytes per layer")
        if window is not None:
            window = check_int(window, "window", minimum=1)
        self.num_layers, self.window = num_layers, window
        self.layers: list[tuple[Tensor, Tensor] | None] = [None] * num_layers
        self.length = 0  # tokens seen (the next token's position)

    @classmethod
    def from_layers(cls, layers: list[tuple[Tensor, Tensor]], *, window: int | None = None) -> CatCache:
        """A cache already holding ``(k, v)`` ``(B, g, T, dk)`` per layer (kept, not copied)."""
        _check_layers(layers)
        cache = cls(len(layers), window=window)
        layers = [(k.detach(), v.detach()) for k, v in layers]  # numbers, not a graph (a view: no copy)
        cache.layers = [(k[:, :, -window:], v[:, :, -window:]) if window else (k, v) for k, v in layers]
        cache.length = layers[0][0].shape[2]
        return cache

    def _device(self) -> torch.device | None:
        """Where the first keys appended live (every later append must be there too)."""
        return next((pair[0].device for pair in self.layers if pair is not None), None)

    def _dtype(self) -> torch.dtype | None:
        """The dtype of the first keys appended, to any layer (every later append must have it:
        one cache, one dtype, as the preallocated caches); None while the cache is empty."""
        return next((pair[0].dtype for pair in self.layers if pair is not None), None)

    def _state(self) -> tuple:
        return (*super()._state(), list(self.layers))  # the tensors are replaced, not written into

    def _restore(self, state: tuple) -> None:
        super()._restore(state[:-1])
        self.layers = list(state[-1])

    def _like(self) -> tuple[int, int, int] | None:
        for pair in self.layers:
            if pair is not None:
                B, g, _, dk = pair[0].shape
                return B, g, dk
        return None

    def append(self, layer: int, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, g, T_new, dk)`` keys and values to ``layer``; return what attention reads.
        Keys and values of another ``(B, g, dk)``, dtype or device than those already in the cache
        (in any layer) are refused before anything is stored."""
        layer = _check_new(k_new, v_new, layer, self.num_layers, self._like(), self._device())
        if (dtype := self._dtype()) is not None:
            _check_dtype(k_new, dtype, "a CatCache keeps the dtype of the first keys appended (to any "
                                       "layer): start a new cache, or")
        self._check_order(layer, k_new.shape[2])
        k_new, v_new = k_new.detach(), v_new.detach()  # numbers, not a graph (see _StepOrder)
        past = self.layers[layer]
        k, v = (k_new, v_new) if past is None else (torch.cat([past[0], k_new], 2),
                                                    torch.cat([past[1], v_new], 2))
        if self.window is not None:
            k, v = k[:, :, -self.window:], v[:, :, -self.window:]
        if past is None:  # the first step only (cat copies after it): the caller's own tensor, which
            k, v = k.clone(), v.clone()  # it may change in place, was kept as the cache (battery 29)
        self.layers[layer] = (k, v)
        self._advance(layer, k_new.shape[2])
        if layer == self.num_layers - 1:
            self.length += k_new.shape[2]
        return k, v


class PreallocatedCache(_StepOrder):
    """Room for ``max_len`` tokens per layer, allocated once and filled in place.

    ``dtype`` is a floating dtype (an integer buffer would truncate the keys and values), and
    what is appended must have it; every step appends layers ``0..num_layers-1`` once each,
    in order (see :class:`_StepOrder`)."""

    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, d_head: int, max_len: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                 _length_name: str = "max_len") -> None:
        # _length_name: what the caller called max_len (SlidingWindowCache's ring: "window")
        # as plain ints: the shapes and messages below are built from them
        num_layers, batch, num_kv_heads, d_head, max_len = (
            check_int(value, name, minimum=1) for name, value in (
                ("num_layers", num_layers), ("batch", batch), ("num_kv_heads", num_kv_heads),
                ("d_head", d_head), (_length_name, max_len)))
        check_float_dtype(dtype, "dtype")
        device = check_device(device, "device")
        shape = (batch, num_kv_heads, max_len, d_head)
        if device.type == "cpu":  # both buffers of every layer, before the allocator fails inside torch
            num_bytes = 2 * num_layers * math.prod(shape) * torch.empty((), dtype=dtype).element_size()
            sizes = {"num_layers": num_layers, "batch": batch, "num_kv_heads": num_kv_heads, "d_head": d_head,
                     _length_name: max_len}
            check_fits_in_memory(num_bytes, None, f"{num_layers} layers x keys and values of shape {shape} "
                                                  f"in {dtype}", sizes=sizes)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.num_layers, self.max_len = num_layers, max_len
        self.length = 0  # tokens seen (the next token's position)

    @classmethod
    def from_layers(cls, layers: list[tuple[Tensor, Tensor]], max_len: int) -> PreallocatedCache:
        """A cache of ``max_len`` positions whose first ``T`` hold ``(k, v)`` ``(B, g, T, dk)``."""
        B, g, T, dk = _check_layers(layers)
        cache = cls(len(layers), B, g, dk, max_len, dtype=layers[0][0].dtype, device=layers[0][0].device)
        for i, (k, v) in enumerate(layers):
            cache.append(i, k, v)
        return cache

    def append(self, layer: int, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``(B, g, T_new, dk)`` at positions ``length..length + T_new - 1`` of ``layer``;
        return views ``(B, g, length + T_new, dk)`` of the buffers (no copy)."""
        layer = _check_new(k_new, v_new, layer, self.num_layers, self._like(), self.k[0].device)
        self._check_order(layer, k_new.shape[2])
        _check_dtype(k_new, self.k[0].dtype)
        start, end = self.length, self.length + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} tokens; {start} are in it and "
                             f"{k_new.shape[2]} more do not fit")
        self.k[layer][:, :, start:end] = k_new.detach()  # numbers, not a graph (see _StepOrder)
        self.v[layer][:, :, start:end] = v_new.detach()
        self._advance(layer, k_new.shape[2])
        if layer == self.num_layers - 1:
            self.length = end
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def _like(self) -> tuple[int, int, int]:
        B, g, _, dk = self.k[0].shape
        return B, g, dk

    def num_bytes(self) -> int:
        """Memory held (all ``max_len`` positions, used or not)."""
        return sum(t.numel() * t.element_size() for t in (*self.k, *self.v))


class SlidingWindowCache(_StepOrder):
    """The latest ``window`` tokens per layer in a ring of ``window`` slots, one token per call.

    Same invariants as :class:`PreallocatedCache` (floating ``dtype``, layers appended in order
    once per step), one token per step."""

    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, d_head: int, window: int, *,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        self._ring = PreallocatedCache(num_layers, batch, num_kv_heads, d_head, window, dtype=dtype,
                                       device=device, _length_name="window")  # refusals name "window"
        self.num_layers, self.window = num_layers, window
        self.length = 0  # tokens seen, including those that have left the window

    @classmethod
    def from_layers(cls, layers: list[tuple[Tensor, Tensor]], window: int) -> SlidingWindowCache:
        """A ring that has seen the ``T`` tokens of ``(k, v)`` ``(B, g, T, dk)`` per layer: it holds
        the latest ``window`` of them, each in slot ``position % window``."""
        window = check_int(window, "window", minimum=1)
        B, g, T, dk = _check_layers(layers)
        cache = cls(len(layers), B, g, dk, window, dtype=layers[0][0].dtype, device=layers[0][0].device)
        kept = min(T, window)
        slots = torch.arange(T - kept, T) % window
        for ring_k, ring_v, (k, v) in zip(cache._ring.k, cache._ring.v, layers, strict=True):
            ring_k[:, :, slots] = k[:, :, T - kept:].detach()  # numbers, not a graph (see _StepOrder)
            ring_v[:, :, slots] = v[:, :, T - kept:].detach()
        cache.length = T
        return cache

    def append(self, layer: int, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Write one token ``(B, g, 1, dk)`` into slot ``length % window`` of ``layer``; return
        the filled slots ``(B, g, min(length + 1, window), dk)`` (views, in ring order)."""
        layer = _check_new(k_new, v_new, layer, self.num_layers, self._ring._like(), self._ring.k[0].device)
        if k_new.shape[2] != 1:
            raise ValueError(f"a sliding-window cache takes one token per call (a decoding step), "
                             f"got {k_new.shape[2]}; feed a prompt with decode_tokens")
        self._check_order(layer, 1)
        _check_dtype(k_new, self._ring.k[0].dtype)
        slot = self.length % self.window
        k_ring, v_ring = self._ring.k[layer], self._ring.v[layer]
        k_ring[:, :, slot] = k_new[:, :, 0].detach()  # numbers, not a graph (see _StepOrder)
        v_ring[:, :, slot] = v_new[:, :, 0].detach()
        filled = min(self.length + 1, self.window)
        self._advance(layer, 1)
        if layer == self.num_layers - 1:
            self.length += 1
        return k_ring[:, :, :filled], v_ring[:, :, :filled]

    def num_bytes(self) -> int:
        return self._ring.num_bytes()

    def _like(self) -> tuple[int, int, int]:
        return self._ring._like()


# -- quantized cache -------------------------------------------------------------------------------

#: What a quantized tensor shares one scale over: ``per``, ``keys`` and ``values`` are one of these.
_AXES = {"token": "one scale per token, over the head dim",
         "channel": "one scale per head-dim channel, over the tokens"}


class _QuantizedFields(NamedTuple):
    codes: Tensor
    scale: Tensor
    zero: Tensor | None


class Quantized(_QuantizedFields):
    """8-bit codes and what turns them back into numbers: ``x ~ codes * scale (+ zero)``.

    ``codes``: int8 in [-127, 127] (symmetric) or uint8 in [0, 255] (asymmetric), shaped as the
    input ``(..., T, dk)``; ``scale`` and ``zero`` (``None`` when symmetric): floating (float16
    from :func:`quantize_kv`), ``(..., T, 1)`` per token or ``(..., 1, dk)`` per channel.

    A tuple (it unpacks as ``codes, scale, zero``) that checks its fields when it is built, as
    :func:`dequantize_kv` does when it reads one, and names the field (``Quantized.codes``, ...).
    Any shape the scale fits is a valid record: codes ``(2, 2)`` with a scale ``(2, 1)`` is two
    tokens of two channels, whatever tensor it was cut from. ``_make`` and ``_replace`` (tuple
    machinery) build without the check; :func:`dequantize_kv` checks again before reading."""

    __slots__ = ()

    def __new__(cls, codes: Tensor, scale: Tensor, zero: Tensor | None) -> Quantized:
        record = super().__new__(cls, codes, scale, zero)
        _check_quantized_fields(record, "Quantized")
        return record


def _check_axis(value: object, name: str) -> str:
    """``value`` (``per``, ``keys`` or ``values``), one of :data:`_AXES`, as a plain str
    (:func:`check_choice`: a TypeError for anything but a str, a ValueError for another str)."""
    return check_choice(value, name, _AXES)


def _half_down(value: Tensor) -> Tensor:
    """``value`` rounded down to float16: the stored number is never above ``value``."""
    stored = value.half()
    below = torch.nextafter(stored, stored.new_full((), -math.inf))
    return torch.where(stored.float() > value, below, stored)


def quantize_kv(x: Tensor, per: str = "token", *, symmetric: bool = True) -> Quantized:
    """Keys or values ``x`` ``(..., T, dk)`` as 8-bit codes, one float16 scale per token (the
    ``dk`` numbers of one head of one token share it) or per channel (the ``T`` numbers of one
    channel share it). Symmetric: ``scale = max|x| / 127``, codes in [-127, 127]. Asymmetric:
    ``zero = min x``, ``scale = (max x - zero) / 255``, codes in [0, 255]: finer steps when
    the numbers are not centred on 0.

    The codes are computed against the float16 numbers that are stored: the zero point is
    ``min x`` rounded down to float16, and the scale covers ``max x - zero`` from that stored
    zero point. Each number then comes back within half a step (half the stored scale), even
    for a row such as ``[1000.1, 1000.2]``, whose zero point moves by more than the range when
    rounded to float16. The scale is at least float16's smallest normal number, ``6.1e-5``: rows
    whose largest ``|x|`` is below about ``127 * 6.1e-5 = 7.8e-3`` (symmetric) get steps of
    ``6.1e-5`` rather than ``max|x| / 127``, an absolute error of at most ``3.05e-5``. An
    all-zero row gives codes 0. Refused: an empty ``x`` (no token, channel, sequence or head:
    it would come back as empty codes without a word), NaN and infinity in ``x``, and numbers
    too large for the float16 scale (symmetric: ``max|x| / 127 > 65504``, i.e. ``|x|`` above
    about ``8.3e6``) or zero point (asymmetric: ``min x < -65504``, or a range
    ``(max x - min x) / 255 > 65504``; a row whose ``min x`` lies above ``65504`` is kept: its
    zero point rounds down to ``65504``, float16's largest number, and the scale covers the
    rest). ``per`` is ``"token"`` or ``"channel"`` (:data:`_AXES`): a value that is no str is a
    TypeError, another str a ValueError, both naming ``per``."""
    check_tensor(x, "x", min_ndim=2, layout="(..., T, dk)")
    check_holds_values(x, "x")
    per = _check_axis(per, "per")
    check_flag(symmetric, "symmetric")
    if 0 in x.shape:  # an empty batch, head, token or channel: nothing to quantize
        raise ValueError(f"x must hold at least one token and one channel, in a batch and heads that "
                         f"are not empty, got shape {describe_shape(x)}")
    x = x.float()
    if not torch.isfinite(x).all():
        raise ValueError("x holds NaN or infinity: they have no 8-bit code")
    dim = -1 if per == "token" else -2  # the axis the scale is shared over
    tiny = torch.finfo(torch.float16).tiny  # a scale never 0: all-zero rows give codes 0
    if symmetric:
        top = x.abs().amax(dim, keepdim=True)
        scale, zero = (top / 127).clamp_min(tiny).half(), None
        if not torch.isfinite(scale).all():
            raise ValueError(f"x holds numbers too large for a float16 scale: max|x| / 127 must be at most "
                             f"65504 (|x| up to about 8.3e6), got max|x| = {top.max().item():.4g}")
        codes = torch.round(x / scale.float()).clamp(-127, 127).to(torch.int8)
    else:
        low, high = x.amin(dim, keepdim=True), x.amax(dim, keepdim=True)
        zero = _half_down(low)
        if not torch.isfinite(zero).all():
            raise ValueError(f"x holds numbers beyond float16's range for the zero point (min x): min x "
                             f"must be at least -65504, got min x = {low.min().item():.4g}")
        scale = ((high - zero.float()) / 255).clamp_min(tiny).half()  # from the stored zero point
        if not torch.isfinite(scale).all():
            raise ValueError("x's range is too wide for a float16 scale: (max x - min x) / 255 must be at "
                             "most 65504")
        codes = torch.round((x - zero.float()) / scale.float()).clamp(0, 255).to(torch.uint8)
    return Quantized(codes, scale, zero)


def _check_quantized(q: object, dtype: object) -> None:
    """What :func:`dequantize_kv` reads: a :class:`Quantized` with valid fields (see
    :func:`_check_quantized_fields`) and a floating ``dtype``."""
    if not isinstance(q, Quantized):
        raise TypeError(f"q must be a Quantized (from quantize_kv), got {type(q).__name__}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating torch.dtype (e.g. torch.float32), got {shown(dtype)}")
    _check_quantized_fields(q, "q")


def _check_quantized_fields(q: Quantized, label: str) -> None:
    """The fields of a :class:`Quantized` (``label`` names it in messages: ``q`` or ``Quantized``):
    codes int8 in [-127, 127] (symmetric) or uint8 (asymmetric), ``(..., T, dk)``; the scale (and
    zero) floating tensors of the codes' number of dims, each dim the codes' or 1 (per token
    ``(..., T, 1)``, per channel ``(..., 1, dk)``). Every field holds values (not the meta device),
    on the codes' device; the scale's numbers are finite and above 0 and the zero point's finite,
    as :func:`quantize_kv` makes them (a NaN, infinite, zero or negative scale would come back as
    NaN, infinite, all-zero or sign-flipped keys and values, with no error)."""
    if not (q.zero is None or isinstance(q.zero, Tensor)):  # it decides which codes are wanted
        raise TypeError(f"{label}.zero must be None (symmetric) or a tensor of zero points (asymmetric), "
                        f"got {type(q.zero).__name__} {shown(q.zero, 40)}")
    wanted = torch.int8 if q.zero is None else torch.uint8
    kind = "symmetric" if q.zero is None else "asymmetric"
    if not isinstance(q.codes, Tensor) or q.codes.dtype != wanted:
        got = (q.codes.dtype if isinstance(q.codes, Tensor)
               else f"{type(q.codes).__name__} {shown(q.codes, 40)}")
        other = {torch.uint8: f": uint8 codes are asymmetric and need their zero points, but {label}.zero "
                              f"is None (zero=None means symmetric int8 codes); pass zero=...",
                 torch.int8: f": int8 codes are symmetric and take zero=None, but {label}.zero is a "
                             f"tensor (zero points go with asymmetric uint8 codes)"}
        hint = other.get(got, "") if isinstance(q.codes, Tensor) else ""
        raise TypeError(f"{label}.codes must be {wanted} as quantize_kv makes them ({kind}), got {got}{hint}")
    if q.codes.ndim < 2:
        raise ValueError(f"{label}.codes must be at least 2-D (..., T, dk), got shape "
                         f"{describe_shape(q.codes)}")
    if 0 in q.codes.shape:  # quantize_kv's rule: an empty batch, head, token or channel is no record
        raise ValueError(f"{label}.codes must hold at least one token and one channel, in a batch and "
                         f"heads that are not empty (as quantize_kv makes them), got shape "
                         f"{describe_shape(q.codes)}")
    for name, t in ((f"{label}.scale", q.scale), (f"{label}.zero", q.zero)):
        if t is None and name.endswith(".zero"):
            continue
        check_tensor(t, name, layout="(..., T, 1) per token or (..., 1, dk) per channel")  # floating
        codes = q.codes.shape
        if t.ndim != len(codes) or any(s not in (1, c) for s, c in zip(t.shape, codes, strict=True)):
            raise ValueError(f"{name} must fit the codes {describe_shape(q.codes)}: as many dims, each the "
                             f"codes' or 1 (per token (..., T, 1), per channel (..., 1, dk)), got "
                             f"{describe_shape(t)}")
    _check_quantized_values(q, label)
    if q.zero is None and q.codes.numel() and int(q.codes.min()) < -127:
        raise ValueError(f"{label}.codes must lie in [-127, 127] ({kind}: quantize_kv never makes -128), "
                         f"got {int(q.codes.min())}")


def _check_quantized_values(q: Quantized, label: str) -> None:
    """The numbers of a :class:`Quantized` whose fields have the right types and shapes: values
    on one device, a finite scale above 0, a finite zero point (see :func:`_check_quantized_fields`)."""
    fields = {"codes": q.codes, "scale": q.scale, **({} if q.zero is None else {"zero": q.zero})}
    for name, t in fields.items():
        check_holds_values(t, f"{label}.{name}")
        if t.device != q.codes.device:
            raise ValueError(f"{label}.{name} must be on the codes' device {q.codes.device}, got device "
                             f"{t.device}")
    why = "quantize_kv never makes one; the keys or values would come back NaN or infinite"
    check_finite(q.scale, f"{label}.scale", why)
    if q.zero is not None:
        check_finite(q.zero, f"{label}.zero", why)
    if q.scale.numel() and not bool((q.scale > 0).all()):
        low = float(q.scale.min())
        raise ValueError(f"{label}.scale must be above 0 (quantize_kv's scales are at least float16's "
                         f"smallest normal number), got {low}: a zero scale turns every code into 0, a "
                         "negative one flips the signs")


def dequantize_kv(q: Quantized, dtype: torch.dtype = torch.float32) -> Tensor:
    """The numbers back from :func:`quantize_kv`: ``codes * scale (+ zero)``, shape of the codes,
    in the floating ``dtype``."""
    _check_quantized(q, dtype)
    x = q.codes.to(dtype) * q.scale.to(dtype)
    return x if q.zero is None else x + q.zero.to(dtype)


def _check_group(per: dict[str, str] | tuple[str, ...], group: int) -> None:
    if "channel" in tuple(per) and group < 2:
        raise ValueError(f"group must be at least 2 for a per-channel scale (it is shared by the "
                         f"group's tokens), got {group}")


def _check_group_fits(group: int, max_len: int) -> None:
    """A :class:`QuantizedCache`'s ``group`` is at most its ``max_len``: tokens are quantized a
    whole group at a time, so a longer group never fills and every token would stay in the float32
    tail (nothing quantized, and more bytes than a float32 cache). Checked after the memory check,
    so a huge ``group`` is named there first."""
    if group > max_len:
        raise ValueError(f"group must be at most max_len={max_len} (tokens are quantized a whole group "
                         f"at a time, so a group of {group} would never fill: nothing would be quantized "
                         f"and the cache would take more bytes than a float32 one), got group={group} "
                         f"(the default is 32); pass group={max_len} or less, e.g. group=1 with "
                         f"keys='token' to quantize each token as it arrives")


def quantized_bytes_per_token(num_kv_heads: int, d_head: int, *, keys: str = "channel",
                              values: str = "token", symmetric: bool = True, group: int = 32) -> float:
    """Bytes one token's keys and values take in one layer: ``2 g dk`` codes of one byte, plus
    the float16 scales (and zero points when asymmetric). A per-token scale belongs to one token
    (``g`` per tensor); a per-channel scale is shared by the ``group`` tokens of its group, so a
    token carries ``1 / group`` of each of the ``g dk`` channel scales. Not counted: the float32
    residual of a :class:`QuantizedCache` (up to ``group - 1`` tokens per layer waiting for their
    group to fill), which does not grow with the context."""
    # sizes whose byte count a float holds (a 10**400 overflowed bare: battery 29)
    num_kv_heads = check_int(num_kv_heads, "num_kv_heads", minimum=1, maximum=2**53)
    d_head = check_int(d_head, "d_head", minimum=1, maximum=2**53)
    group = check_int(group, "group", minimum=1)
    check_flag(symmetric, "symmetric")
    axes = (_check_axis(keys, "keys"), _check_axis(values, "values"))
    _check_group(axes, group)  # as QuantizedCache refuses it
    per_scale = 2 if symmetric else 4  # float16 scale (+ float16 zero point)
    total = 2.0 * num_kv_heads * d_head
    for per in axes:
        total += num_kv_heads * per_scale * (1 if per == "token" else d_head / group)
    return total


#: The numbers every group can quantize, whatever else it holds: symmetric, ``|x| <= 127 * 65504``
#: (``max|x| / 127``, the scale, fits float16); asymmetric, ``-65504 <= x <= 254 * 65504`` (the
#: zero point ``min x`` and the scale ``(max x - min x) / 255`` fit float16).
_CODABLE = {True: (-127 * 65504.0, 127 * 65504.0), False: (-65504.0, 254 * 65504.0)}


def _check_codable(new: Tensor, name: str, where: str, symmetric: bool) -> None:
    """Keys or values ``new`` (finite) appended to a :class:`QuantizedCache`: each number within
    :data:`_CODABLE`, checked per number as they arrive, so that a number too large is refused in
    the append that brings it (naming ``name`` and ``where``), not in the later one that fills its
    group, which would then blame other numbers and refuse every append after it."""
    if new.numel() == 0:  # an empty append brings no number
        return
    low, high = _CODABLE[symmetric]
    smallest, largest = new.min().item(), new.max().item()
    if smallest < low or largest > high:
        scheme = "symmetric: |x| / 127" if symmetric else "asymmetric: the zero point and (max - min) / 255"
        raise ValueError(f"{name} ({where}) holds numbers too large for 8-bit codes with a float16 scale "
                         f"({scheme} must fit float16): each must lie in {low:.4g}..{high:.4g}, got "
                         f"min {smallest:.4g}, max {largest:.4g}; caught here, not when its group fills")


class QuantizedCache(_StepOrder):
    """A preallocated cache of 8-bit keys and values, quantized a group of ``group`` tokens at a time.

    Per layer it holds codes ``(B, g, max_len, dk)`` for K and for V, their float16 scales
    (``(B, g, n_groups, group, 1)`` per token, ``(B, g, n_groups, 1, dk)`` per channel) and a
    float32 tail of ``group`` tokens: the newest tokens wait there until their group is full,
    since a per-channel scale needs all the group's tokens (so ``group`` is at most ``max_len``:
    a longer group would never fill, and nothing would be quantized). ``keys="channel", values="token"``
    with ``symmetric=False`` is KIVI's scheme; ``"token", "token"`` with ``group=1`` quantizes
    each token as it arrives, one scale per token and head (llama.cpp's ``q8_0`` has one per 32
    numbers). :meth:`append` dequantizes into a float32 scratch buffer ``(B, g, max_len, dk)``
    for K and one for V, shared by the layers, and returns views of it: they hold the keys and
    values until the next call to :meth:`append`."""

    def __init__(self, num_layers: int, batch: int, num_kv_heads: int, d_head: int, max_len: int, *,
                 keys: str = "channel", values: str = "token", symmetric: bool = True,
                 group: int = 32) -> None:
        num_layers, batch, num_kv_heads, d_head, max_len, group = (  # plain ints, as PreallocatedCache
            check_int(value, name, minimum=1) for name, value in (
                ("num_layers", num_layers), ("batch", batch), ("num_kv_heads", num_kv_heads),
                ("d_head", d_head), ("max_len", max_len), ("group", group)))
        self.per = {"k": _check_axis(keys, "keys"), "v": _check_axis(values, "values")}
        self.symmetric = check_flag(symmetric, "symmetric")
        _check_group(tuple(self.per.values()), group)
        n_groups = -(-max_len // group)  # room for max_len tokens, rounded up to whole groups
        slots = batch * num_kv_heads * n_groups * group * d_head
        # per layer and tensor: 1-byte codes and a float32 scratch row per slot, before any allocation
        check_fits_in_memory(2 * num_layers * slots + 2 * 4 * slots, None,
                             f"{num_layers} layers of 8-bit keys and values and a float32 scratch buffer",
                             sizes={"num_layers": num_layers, "batch": batch, "num_kv_heads": num_kv_heads,
                                    "d_head": d_head, "max_len": max_len, "group": group})
        _check_group_fits(group, max_len)
        code_dtype = torch.int8 if symmetric else torch.uint8
        self.codes, self.scales, self.zeros, self.residual, self.scratch = {}, {}, {}, {}, {}
        for t in ("k", "v"):
            scale_shape = ((batch, num_kv_heads, n_groups, group, 1) if self.per[t] == "token"
                           else (batch, num_kv_heads, n_groups, 1, d_head))
            self.codes[t] = [torch.zeros(batch, num_kv_heads, n_groups * group, d_head, dtype=code_dtype)
                             for _ in range(num_layers)]
            self.scales[t] = [torch.zeros(scale_shape, dtype=torch.float16) for _ in range(num_layers)]
            self.zeros[t] = [None if symmetric else torch.zeros(scale_shape, dtype=torch.float16)
                             for _ in range(num_layers)]
            # float32 whatever the default dtype is (its documented dtype: battery 27)
            self.residual[t] = [torch.zeros(batch, num_kv_heads, group, d_head, dtype=torch.float32)
                                for _ in range(num_layers)]
            self.scratch[t] = torch.empty(batch, num_kv_heads, n_groups * group, d_head,
                                          dtype=torch.float32)  # working space
        self.num_layers, self.max_len, self.group = num_layers, max_len, group
        self.length = 0  # tokens seen (the next token's position)

    @classmethod
    def from_layers(cls, layers: list[tuple[Tensor, Tensor]], max_len: int, **options) -> QuantizedCache:
        """A cache of ``max_len`` positions holding ``(k, v)`` ``(B, g, T, dk)`` per layer."""
        B, g, T, dk = _check_layers(layers)
        cache = cls(len(layers), B, g, dk, max_len, **options)
        for i, (k, v) in enumerate(layers):
            cache.append(i, k, v)
        return cache

    def _dequantize(self, t: str, layer: int, n_groups: int) -> None:
        """Groups ``0..n_groups-1`` of ``t`` ("k" or "v") into the scratch buffer, in one pass:
        ``codes * scale (+ zero)`` written straight into ``scratch[t]``."""
        G = self.group
        grouped = self.codes[t][layer][:, :, :n_groups * G].unflatten(2, (n_groups, G))
        out = self.scratch[t][:, :, :n_groups * G].unflatten(2, (n_groups, G))
        scale = self.scales[t][layer][:, :, :n_groups].float()  # small: one per token or channel
        zero = self.zeros[t][layer]
        if zero is None:
            torch.mul(grouped, scale, out=out)
        else:
            torch.addcmul(zero[:, :, :n_groups].float(), grouped, scale, out=out)

    def _quantize_groups(self, t: str, x: Tensor) -> Quantized:
        """Quantize ``x`` ``(B, g, n * group, dk)``, whole groups of ``t`` ("k" or "v")."""
        B, g, T, dk = x.shape
        groups = x.reshape(B, g, T // self.group, self.group, dk)
        return quantize_kv(groups, self.per[t], symmetric=self.symmetric)

    def _store_groups(self, t: str, layer: int, start: int, q: Quantized) -> None:
        """Write the groups ``q`` (from :meth:`_quantize_groups`) at position ``start`` of ``layer``."""
        B, g, n, G, dk = q.codes.shape
        first = start // G
        self.codes[t][layer][:, :, start:start + n * G] = q.codes.reshape(B, g, n * G, dk)
        self.scales[t][layer][:, :, first:first + n] = q.scale
        if q.zero is not None:
            self.zeros[t][layer][:, :, first:first + n] = q.zero

    def _plan(self, t: str, layer: int, new: Tensor, start: int) -> list[tuple[int, Tensor | Quantized]]:
        """The writes that ``new`` (positions ``start..``) makes into ``t``'s residual (a tensor of
        tokens) and codes (a :class:`Quantized` of whole groups), each with its position; every
        group is quantized here, before anything is written, so a refusal writes nothing."""
        G, end = self.group, start + new.shape[2]
        writes: list[tuple[int, Tensor | Quantized]] = []
        pos = start
        while pos < end:
            if pos % G == 0 and end - pos >= G:  # whole groups: quantize them straight away
                count = (end - pos) // G * G
                writes.append((pos, self._quantize_groups(t, new[:, :, pos - start:pos - start + count])))
            else:  # the newest tokens wait in the residual until their group is full
                slot = pos % G
                count = min(G - slot, end - pos)
                chunk = new[:, :, pos - start:pos - start + count]
                writes.append((pos, chunk))
                if slot + count == G:
                    group = torch.cat([self.residual[t][layer][:, :, :slot], chunk], 2)
                    writes.append((pos - slot, self._quantize_groups(t, group)))
            pos += count
        return writes

    def append(self, layer: int, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``(B, g, T_new, dk)`` keys and values to ``layer``; return float32 ``(B, g, length +
        T_new, dk)`` keys and values: the quantized groups dequantized, then the residual (views
        of the scratch buffer, overwritten by the next call).

        The cache stores numbers, not a graph: what it holds and returns does not track
        gradients (``k_new`` may require grad, as in a forward outside ``torch.no_grad``; the
        8-bit rounding has no gradient to give back). ``k_new`` and ``v_new`` are float32, what
        the cache returns (another dtype is a TypeError, as for the other caches, not a silent
        cast). NaN, infinity and numbers no group could quantize (outside :data:`_CODABLE`: ``|x|``
        above about ``8.3e6`` symmetric; below ``-65504`` or above about ``1.66e7`` asymmetric) are
        a ValueError naming ``k_new`` or ``v_new`` and the positions, in the append that brings them.
        Everything is checked, and every group quantized, before anything is written: a refused
        append leaves the cache as it was."""
        B, g, dk = self._like()
        layer = _check_new(k_new, v_new, layer, self.num_layers, (B, g, dk), self.codes["k"][0].device)
        _check_dtype(k_new, self.residual["k"][0].dtype,  # float32, fixed: no silent cast
                     "a QuantizedCache keeps its newest tokens and returns its keys and values in float32;")
        self._check_order(layer, k_new.shape[2])
        start, end = self.length, self.length + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(f"the cache holds {self.max_len} tokens; {start} are in it and "
                             f"{k_new.shape[2]} more do not fit")
        where = f"layer {layer}, positions {start}..{end - 1}"
        for name, new in (("k_new", k_new), ("v_new", v_new)):  # caught here, not when its group fills
            if not torch.isfinite(new).all():
                raise ValueError(f"{name} holds NaN or infinity ({where}): they have no 8-bit code")
            _check_codable(new, name, where, self.symmetric)
        G = self.group
        with torch.no_grad():  # a cache stores numbers, not a graph (torch.mul(out=...) refuses one)
            plans = {}
            for t, name, new in (("k", "k_new", k_new), ("v", "v_new", v_new)):
                try:
                    plans[t] = self._plan(t, layer, new, start)
                except ValueError as err:  # quantize_kv's "x": numbers too large for a float16 scale
                    raise ValueError(f"{name} ({where}): {err}") from None
            for t, writes in plans.items():
                for pos, write in writes:
                    if isinstance(write, Quantized):
                        self._store_groups(t, layer, pos, write)
                    else:
                        self.residual[t][layer][:, :, pos % G:pos % G + write.shape[2]] = write
            full, waiting = divmod(end, G)
            for t in ("k", "v"):  # the groups dequantized, then the residual behind them: no torch.cat
                self._dequantize(t, layer, full)
                self.scratch[t][:, :, full * G:end] = self.residual[t][layer][:, :, :waiting]
        self._advance(layer, k_new.shape[2])
        if layer == self.num_layers - 1:
            self.length = end
        return self.scratch["k"][:, :, :end], self.scratch["v"][:, :, :end]

    def _like(self) -> tuple[int, int, int]:
        B, g, _, dk = self.codes["k"][0].shape
        return B, g, dk

    def num_bytes(self) -> int:
        """Memory held: codes, scales and zero points for every position, and the residual (not
        the float32 scratch buffer, working space that a kernel reading the codes would not need)."""
        tensors = [x for part in (self.codes, self.scales, self.zeros, self.residual)
                   for t in ("k", "v") for x in part[t] if x is not None]
        return sum(x.numel() * x.element_size() for x in tensors)


Cache = CatCache | PreallocatedCache | SlidingWindowCache | QuantizedCache


_CACHES = (CatCache, PreallocatedCache, SlidingWindowCache, QuantizedCache)


def _check_decode(model: object, tokens: object, cache: object, name: str) -> None:
    """``model`` is a TinyTransformer, ``cache`` one of this module's caches built for it (its
    layers, batch, K/V heads, head width and dtype), between two steps; ``tokens`` ``(B, T)``
    are token ids that fit the model's vocabulary and its positions after the cached ones."""
    from .transformer import TinyTransformer  # local: the model module does not need the caches

    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if not isinstance(cache, _CACHES):
        raise TypeError(f"cache must be one of {', '.join(c.__name__ for c in _CACHES)} (the model's "
                        f"own KVCache goes through model.forward_with_cache), got {type(cache).__name__}")
    cfg = model.config
    if cache.num_layers != cfg.num_layers:
        raise ValueError(f"cache has {cache.num_layers} layer(s) but the model has {cfg.num_layers}: "
                         f"build the cache with num_layers={cfg.num_layers} (model.config.num_layers)")
    if cache._next_layer != 0:
        raise ValueError(f"cache is in the middle of a step (layer {cache._next_layer} is next, at position "
                         f"{cache.length}), probably after an error: start from a fresh cache")
    if isinstance(tokens, Tensor) and tokens.ndim == 2 and cache.length + tokens.shape[1] > cfg.max_len:
        last = cache.length + tokens.shape[1] - 1
        raise ValueError(f"{name}: position {last} is past the model's {cfg.max_len} learned positions "
                         f"(0..{cfg.max_len - 1}; the cache has seen {cache.length} tokens)")
    try:
        model._check_tokens(tokens, cache.length)
    except (TypeError, ValueError) as err:
        raise type(err)(f"{name}: {err}") from None
    like = cache._like()  # (B, g, dk), None for an empty CatCache
    expected = (tokens.shape[0], cfg.num_kv_heads, cfg.d_head)
    if like is not None and tuple(like) != expected:
        raise ValueError(f"cache holds (B={like[0]}, g={like[1]}, dk={like[2]}) but {name} and the model "
                         f"need (B={expected[0]}, g={expected[1]}, dk={expected[2]}): build the cache with "
                         f"batch={expected[0]}, num_kv_heads={expected[1]}, d_head={expected[2]}")
    weight = model.token_embedding.weight
    stored = {PreallocatedCache: lambda c: c.k[0].dtype, SlidingWindowCache: lambda c: c._ring.k[0].dtype,
              QuantizedCache: lambda c: torch.float32,
              CatCache: lambda c: c._dtype() or weight.dtype}
    dtype = stored[type(cache)](cache)
    if dtype != weight.dtype:
        raise TypeError(f"cache holds {dtype} keys and values but the model's parameters are {weight.dtype}: "
                        f"build the cache with dtype={weight.dtype} (a QuantizedCache returns float32)")


def decode_step(model, token: Tensor, cache: Cache) -> Tensor:
    """One token per sequence ``(B, 1)`` through ``model`` (a ``TinyTransformer``), its keys and
    values appended to ``cache``; returns the logits ``(B, 1, V)``. The token's position is the
    number of tokens ``cache`` has seen. One query attends to every key it is given, so no
    mask is needed.

    Checked before anything runs: ``token`` is a long tensor ``(B, 1)`` of ids in ``[0, V)`` on
    the model's device, its position is below ``max_len``, and ``cache`` was built for this
    model (layers, batch, K/V heads, head width, dtype) and is between two steps.

    A step that raises (a hook, an interrupt) is undone: ``cache`` gets back its length and step
    state (a :class:`CatCache` its tensors), so a retry does not see the failed token. What the
    step wrote lies past that length, and the next step writes it again before reading it (in a
    :class:`SlidingWindowCache` that slot held the token leaving the window, which the next step
    would drop anyway: saving it would copy a token every step)."""
    if isinstance(token, Tensor) and (token.ndim != 2 or token.shape[1] != 1):
        raise ValueError(f"token must be (B, 1), one new token per sequence; got {tuple(token.shape)}")
    _check_decode(model, token, cache, "token")
    state = cache._state()
    try:
        x = model.embed(token, cache.length)  # (B, 1, d), through the model's hook_embed and hook_pos_embed
        for i, block in enumerate(model.blocks):  # the model's own blocks; the cache stores k, v
            x, _, _ = block(x, past=functools.partial(cache.append, i))  # (B, g, 1, dk), returns all T
        return model.unembed(model.ln_final(x))
    except BaseException:
        cache._restore(state)
        raise


def decode_tokens(model, tokens: Tensor, cache: Cache) -> Tensor:
    """Feed ``tokens`` ``(B, T)`` one at a time through :func:`decode_step`: logits ``(B, T, V)``.
    The whole of ``tokens`` is checked first (ids, and the ``T`` positions after the cached ones
    against ``max_len``), so a bad token late in the sequence changes nothing in ``cache``. A step
    that raises is undone (see :func:`decode_step`); the steps before it stay in ``cache``."""
    _check_decode(model, tokens, cache, "tokens")
    with torch.no_grad():
        return torch.cat([decode_step(model, tokens[:, t:t + 1], cache) for t in range(tokens.shape[1])], 1)


def repeatable_step(model, cache: Cache, token: Tensor) -> Callable[[], Tensor]:
    """A function that runs one :func:`decode_step` of ``token`` ``(B, 1)`` and then puts
    ``cache`` back as it was (its length; a :class:`CatCache` also its tensors), so that every
    call times a step at the same cache length. The slot the step wrote is simply written again
    by the next call.

    The function puts back the state the cache had when it was made, so the cache must be left
    to it: a call after the cache was stepped elsewhere (a :func:`decode_step` of its own) is a
    ValueError naming ``cache``, not a silent rewind that would drop that step's token. A step
    that fails puts the cache back too."""
    _check_decode(model, token, cache, "token")  # the step would fail the same way, later
    if token.shape[1] != 1:
        raise ValueError(f"token must be (B, 1), one new token per sequence; got {tuple(token.shape)}")
    state = cache._state()

    def run() -> Tensor:
        if not _same_state(cache._state(), state):
            raise ValueError(f"cache was changed since repeatable_step was made (length {state[0]} then, "
                             f"{cache.length} now): running the step would rewind it and drop what was "
                             "added; make a new repeatable_step for the cache as it is now")
        try:
            with torch.no_grad():
                return decode_step(model, token, cache)
        finally:
            cache._restore(state)

    return run


def _same_state(now: tuple, then: tuple) -> bool:
    """Two :meth:`_StepOrder._state` tuples describe the same cache: equal numbers, and (for a
    :class:`CatCache`) the very same tensors in its list of layers."""
    return len(now) == len(then) and all(
        len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True)) if isinstance(a, list)
        else a == b for a, b in zip(now, then, strict=True))

