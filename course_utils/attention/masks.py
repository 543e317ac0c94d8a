"""Attention masks, with one convention everywhere in this course.

**Convention: ``True`` means "this query may attend to this key".**

That is the convention of ``torch.nn.functional.scaled_dot_product_attention``.
It is the *opposite* of ``torch.nn.MultiheadAttention``, whose ``attn_mask`` and
``key_padding_mask`` use ``True`` for "blocked / ignore". Wherever the two meet,
convert explicitly with :func:`to_torch_attn_mask` and
:func:`to_torch_key_padding_mask`; never pass a course mask to
``nn.MultiheadAttention`` directly.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch
from torch import Tensor

from .validation import (
    check_bool_mask,
    check_dense,
    check_device_present,
    check_fits_in_memory,
    check_int,
    check_tensor,
    describe_device,
    describe_shape,
    shown,
)

__all__ = [
    "masked_softmax",
    "causal_mask",
    "padding_mask",
    "to_torch_attn_mask",
    "to_torch_key_padding_mask",
    "check_bool_mask",
]


def masked_softmax(scores: Tensor, allowed: Tensor | None) -> Tensor:
    """The course's one masked softmax: ``softmax(scores)`` over the last dim (the keys), with
    blocked keys (``allowed`` False; ``None`` blocks nothing) given weight 0. ``allowed``
    broadcasts against ``scores`` ``(..., Tq, Tk)``.

    A row with nothing to attend to gets all zeros, where a plain softmax would give NaN:
    every key blocked, or every score of the row ``-inf`` (from the data itself, e.g. a key
    of ``-inf`` under a positive query), or both. That is what
    ``F.scaled_dot_product_attention`` returns for such a row. Otherwise NaN and ``+inf``
    spread: a NaN or ``+inf`` score among the allowed keys makes its whole row NaN (``inf -
    inf``); a blocked key's score, whatever it is, is never read. (torch 2.13's function
    differs with NaN and inf: it reads blocked keys' scores, and gives 0 for a row whose
    largest score is NaN.)

    ``scores`` must be a floating tensor of at least 1 dim and ``allowed`` ``None`` or a
    boolean tensor that broadcasts with it (checked, shapes and dtypes only)."""
    _check_softmax_inputs(scores, allowed)
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # rows sum to 1, or NaN where every score is -inf
    # Such a row is NaN from its first weight on. On the CPU that column is checked first (a
    # few microseconds), and the rows looked at again only if one is NaN; elsewhere the fill
    # always runs, so as not to wait for the device.
    if scores.shape[-1] and (scores.device.type != "cpu" or bool(weights[..., :1].isnan().any())):
        # amax is -inf only where every score is (NaN where one is NaN: that row stays NaN)
        empty = scores.detach().amax(dim=-1, keepdim=True) == float("-inf")  # (..., Tq, 1)
        weights = weights.masked_fill(empty, 0.0)  # no finite score: zeros, not NaN
    if allowed is not None:  # a blocked key's weight is 0 even in a row made NaN by a +inf score
        weights = weights.masked_fill(~allowed, 0.0)
    return weights


def _check_softmax_inputs(scores: object, allowed: object) -> None:
    """What :func:`masked_softmax` needs, named before torch fails deep inside."""
    if not isinstance(scores, Tensor) or not scores.is_floating_point() or scores.ndim < 1:
        check_tensor(scores, "scores", min_ndim=1, layout="(..., Tq, Tk)")
    if allowed is None:
        return
    check_bool_mask(allowed, "allowed")
    try:
        torch.broadcast_shapes(allowed.shape, scores.shape)
    except RuntimeError:
        raise ValueError(f"allowed must broadcast against scores (..., Tq, Tk), got allowed "
                         f"{describe_shape(allowed)} and scores {describe_shape(scores)}") from None
    # both on meta is a shape computation (a model built on meta); a 0-D mask may stay on the CPU
    if allowed.device != scores.device and (allowed.ndim or scores.is_meta or allowed.is_meta):
        raise ValueError(f"scores and allowed must be on one device, got scores on "
                         f"{describe_device(scores)} and allowed on {describe_device(allowed)}")


def _mask_device(device: object) -> torch.device | None:
    """``device`` parsed and present on this machine, or an error naming ``device``; ``None``
    stays ``None`` (the CPU). The meta device is allowed: a mask there is a shape to check
    against, e.g. for a model built on meta."""
    if device is None:
        return None
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f"device must be None, a torch.device or a name such as 'cpu' or 'cuda:0', "
                        f"got {type(device).__name__} {shown(device, 60)}")
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device must be a device name such as 'cpu', 'cuda' or 'cuda:0', got "
                         f"{shown(device)}") from None
    return parsed if parsed.type == "meta" else check_device_present(parsed, "device", asked=device)


def causal_mask(
    num_queries: int,
    num_keys: int | None = None,
    *,
    query_offset: int = 0,
    device: torch.device | str | None = None,
) -> Tensor:
    """Boolean causal mask of shape ``(num_queries, num_keys)``; ``True`` = may attend.

    Query ``i`` sits at absolute position ``i + query_offset`` and may attend to key
    ``j`` when ``j <= i + query_offset``. With ``query_offset=0`` this is the
    top-left-aligned mask that ``F.scaled_dot_product_attention(is_causal=True)``
    uses. When decoding with a KV cache of ``past`` tokens, pass ``query_offset=past``.

    A negative ``query_offset`` shifts the diagonal down: the first ``-query_offset``
    queries then see no key (as an attention mask, they get zero output). That is a
    building block, e.g. ``causal_mask(T) & ~causal_mask(T, query_offset=-w)`` keeps only
    the last ``w`` keys of each query; an offset that leaves *every* query without a key
    (``query_offset <= -num_queries``) is refused. An offset of ``num_keys`` or more lets
    every query see every key, so any larger offset (however large) gives that same mask.

    ``device`` is ``None`` (the CPU), a ``torch.device`` or a device name (parsed and named
    in the error if it is not one, e.g. ``"cpu"``, ``"cuda:0"``, or if this machine lacks it); a
    mask larger than this machine's memory (``num_queries * num_keys`` bytes) is refused before
    anything is allocated. ``device="meta"`` is allowed on purpose (unlike
    :func:`~course_utils.attention.validation.check_device`) and gives a meta mask, a shape
    without values: the attention layers build their causal mask on their input's device, so a
    layer built under ``torch.device("meta")`` (lesson 03's GPT-3-sized layer) can run on meta
    inputs to compute output shapes without memory. A meta mask given to a layer whose inputs
    hold values is refused by name (the mask and the inputs must share a device).
    """
    if num_keys is None:
        num_keys = num_queries
    num_queries, num_keys = (check_int(value, name, minimum=1)
                             for name, value in (("num_queries", num_queries), ("num_keys", num_keys)))
    query_offset = check_int(query_offset, "query_offset")
    if query_offset + num_queries <= 0:
        raise ValueError(
            f"query_offset={query_offset} with num_queries={num_queries} leaves every query "
            f"without a key (query i may attend to keys j <= i + query_offset, and the last "
            f"query sits at {num_queries - 1 + query_offset}): expected query_offset >= "
            f"{1 - num_queries}, usually the number of cached tokens (>= 0)"
        )
    # beyond num_keys every query already sees every key: clamping keeps the mask and keeps
    # the positions inside int64 (2**63 would wrap around to a negative offset)
    query_offset = min(query_offset, num_keys)
    device = _mask_device(device)
    if num_queries * num_keys > 2**24:  # one byte per entry; small masks skip the system call
        check_fits_in_memory(num_queries * num_keys, "num_queries x num_keys",
                             f"a bool mask of {num_queries} x {num_keys} = "
                             f"{num_queries * num_keys:,} bytes")
    query_pos = torch.arange(num_queries, device=device).unsqueeze(1) + query_offset  # (Tq, 1)
    key_pos = torch.arange(num_keys, device=device).unsqueeze(0)  # (1, Tk)
    return key_pos <= query_pos  # (Tq, Tk)


_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def _lengths_tensor(lengths: object) -> Tensor:
    """``lengths`` as a 1-D integer tensor, or a clear error naming what arrived."""
    if isinstance(lengths, Tensor):
        if lengths.dtype not in _INTEGER_DTYPES:
            raise TypeError(f"lengths must be integers (an int tensor or a list of ints), got dtype "
                            f"{lengths.dtype}")
        check_dense(lengths, "lengths")
        if lengths.is_meta:
            raise ValueError("lengths is on the meta device (a tensor without values): pass the "
                             "lengths on the CPU or the model's device")
        tensor = lengths
    elif isinstance(lengths, (list, tuple)):
        for value in lengths:
            if isinstance(value, (list, tuple)):
                raise ValueError(f"lengths must be 1-D (B,): one int per sequence, got {shown(lengths)}")
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise TypeError(f"lengths must be integers (one int per sequence), got "
                                f"{type(value).__name__} {shown(value)} in {shown(lengths)}")
            if not -(2**63) <= value < 2**63:
                raise ValueError(f"lengths must be ints that fit in int64, got {value}")
        tensor = torch.tensor([int(v) for v in lengths], dtype=torch.long)
    elif isinstance(lengths, np.ndarray):
        return _lengths_tensor(torch.as_tensor(lengths))
    else:
        raise TypeError(f"lengths must be a list of ints or an integer tensor (B,), got "
                        f"{type(lengths).__name__} {shown(lengths)}")
    if tensor.ndim != 1:
        raise ValueError(f"lengths must be 1-D (B,), got shape {tuple(tensor.shape)}")
    return tensor


def padding_mask(
    lengths: Tensor | list[int], max_len: int | None = None, *, device=None
) -> Tensor:
    """Boolean key-padding mask ``(B, max_len)`` from true lengths; ``True`` = real token.

    ``padding_mask([3, 1], 4)`` gives ``[[T, T, T, F], [T, F, F, F]]``. ``lengths`` is a list
    of ints or an integer tensor ``(B,)``, each ``>= 0``; ``max_len`` an int (not a bool) at
    least the longest length, or ``None`` for the longest. ``device`` (as in :func:`causal_mask`)
    is where the mask goes; ``None`` leaves it on ``lengths``' device. ``device="meta"`` is allowed
    on purpose, as in :func:`causal_mask`: the lengths are read on their own device and the mask
    becomes a meta shape, the ``key_padding_mask`` that a layer built on meta needs (a mask on
    another device than its inputs is refused).
    """
    lengths = _lengths_tensor(lengths)
    device = _mask_device(device)
    if max_len is not None:
        max_len = check_int(max_len, "max_len", minimum=0)
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got {lengths.tolist()}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if max_len is None:
        max_len = longest
    if max_len < longest:
        raise ValueError(f"max_len={max_len} is shorter than the longest length {longest}")
    check_fits_in_memory((8 + len(lengths)) * int(max_len), "max_len",  # int64 positions, then the mask
                         f"a padding mask of {len(lengths)} rows x {max_len} positions")
    mask = torch.arange(int(max_len), device=lengths.device).unsqueeze(0) < lengths.unsqueeze(1)
    return mask if device is None else mask.to(device)


def to_torch_attn_mask(mask: Tensor) -> Tensor:
    """Course mask (``True`` = may attend) -> ``nn.MultiheadAttention`` ``attn_mask``
    (``True`` = blocked). ``mask`` has one of the two shapes ``nn.MultiheadAttention`` takes,
    ``(Tq, Tk)`` or ``(B*h, Tq, Tk)``; any other rank is refused, naming the shape (the course's
    broadcastable ``(B, 1, Tq, Tk)`` or ``(B, h, Tq, Tk)`` masks must be expanded and reshaped to
    ``(B*h, Tq, Tk)`` first). The result stays on ``mask``'s device; a meta mask (allowed on purpose,
    as in :func:`causal_mask`) gives a meta one, for an ``nn.MultiheadAttention`` built on meta."""
    check_bool_mask(mask, "mask")
    if mask.ndim not in (2, 3):
        hint = (": a per-key mask (Tk,) is a key padding mask, see to_torch_key_padding_mask"
                if mask.ndim < 2 else ": reshape a (B, h, Tq, Tk) mask to (B*h, Tq, Tk) first")
        raise ValueError(f"mask must be 2-D (Tq, Tk) or 3-D (B*h, Tq, Tk), the shapes "
                         f"nn.MultiheadAttention's attn_mask takes, got {mask.ndim}-D shape "
                         f"{tuple(mask.shape)}{hint}")
    return ~mask


def to_torch_key_padding_mask(key_padding_mask: Tensor) -> Tensor:
    """Course padding mask ``(B, Tk)`` (``True`` = real token) -> ``nn.MultiheadAttention``
    ``key_padding_mask`` (``True`` = ignore this key). The result stays on the input's device; a
    meta mask (allowed on purpose, as in :func:`padding_mask`) gives a meta one."""
    check_bool_mask(key_padding_mask, "key_padding_mask")
    if key_padding_mask.ndim != 2:
        raise ValueError(f"key_padding_mask must be 2-D (B, Tk), True = real token, got "
                         f"{key_padding_mask.ndim}-D shape {tuple(key_padding_mask.shape)}")
    return ~key_padding_mask
