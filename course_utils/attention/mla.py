"""Multi-head latent attention (MLA), the next step after GQA, small enough to read.

DeepSeek-V2 (DeepSeek-AI, 2024, arXiv:2405.04434, section 2.1) caches neither keys nor values.
Each token's hidden state ``x`` is projected down to one **latent** ``c = x W_DKV`` of ``d_c``
numbers, shared by all heads; head ``i``'s key and value are projected back up from it,
``k_i = c W_UK_i`` and ``v_i = c W_UV_i`` (``d_h`` numbers each). Only ``c`` is cached.

Two facts make that pay at decoding time:

* **Absorption.** The score ``q_i . k_i = q_i . (c W_UK_i) = (q_i W_UK_i^T) . c``: fold ``W_UK_i``
  into the query once per step and compare it with the cached latents directly; likewise the
  output ``sum_t p_t v_i,t = (sum_t p_t c_t) W_UV_i``, whose ``W_UV_i`` can be folded into the
  output projection. No per-head key or value is ever built.
* **Decoupled RoPE.** A rotary position rotation between ``q_i`` and ``W_UK_i`` would depend on
  the key's position and block the absorption, so the position goes into extra dimensions:
  a query part ``q^R_i`` per head and **one** key part ``k^R = RoPE(x W_KR)`` of ``d_h^R``
  numbers shared by all heads, cached next to ``c``. The score adds ``q^R_i . k^R``.

Per token and layer the cache holds ``d_c + d_h^R`` numbers, against ``2 n_h d_h`` for MHA and
``2 g d_h`` for GQA. (DeepSeek-V2 also compresses the queries through a latent of its own,
which saves activations in training, not cache; it is left out here.)

Non-finite inputs: :func:`rope` and :class:`MultiHeadLatentAttention` check shapes, dtypes and
devices, not values (a check is one more pass over the data on every call): NaN or infinity
in ``x`` propagates to NaN in the output, as in :mod:`course_utils.attention.mha`.
"""

from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
from torch import Tensor

from .masks import causal_mask, masked_softmax
from .validation import (
    check_choice,
    check_config_fields,
    check_dims_not_empty,
    check_flag,
    check_int,
    check_linear_weights_fit,
    check_matches_module,
    check_positive_number,
    check_tensor,
    describe_shape,
    items_of,
    shown,
)

__all__ = ["MLAConfig", "DEEPSEEK_V2", "cache_elements_per_token", "rope",
           "MultiHeadLatentAttention"]


@dataclasses.dataclass(frozen=True)
class MLAConfig:
    """The attention shape of a released MLA model, with where it was read. Checked when built,
    as :class:`~course_utils.attention.gqa.PublishedConfig` is: ``name`` and ``source`` are non-empty strs,
    the counts positive ints (``d_rope`` an even int >= 0: a model may have no RoPE key, and
    :func:`rope` rotates pairs of numbers)."""

    name: str
    num_layers: int
    num_heads: int
    d_head: int
    d_latent: int
    d_rope: int
    source: str

    def __post_init__(self) -> None:
        check_config_fields(self, ("name", "source"), {"num_layers": 1, "num_heads": 1, "d_head": 1,
                                                        "d_latent": 1, "d_rope": 0})
        if self.d_rope % 2:
            raise ValueError(f"d_rope must be even (RoPE rotates pairs of numbers), got {self.d_rope}")


DEEPSEEK_V2 = MLAConfig(
    "DeepSeek-V2 (MLA)", 60, 128, 128, 512, 64,
    "DeepSeek-AI, DeepSeek-V2, arXiv:2405.04434, section 2.1 and 3.1.2 (d_c = 4 d_h = 512, "
    "d_h^R = d_h / 2 = 64, n_h = 128, d_h = 128, 60 layers); the same in huggingface.co/"
    "deepseek-ai/DeepSeek-V2, file config.json (kv_lora_rank, qk_rope_head_dim)",
)


def cache_elements_per_token(kind: str, *, num_heads: int = 0, d_head: int = 0, num_kv_heads: int = 0,
                             d_latent: int = 0, d_rope: int = 0) -> int:
    """Numbers cached per token and layer: MHA ``2 n_h d_h``, GQA ``2 g d_h``, MQA ``2 d_h``,
    MLA ``d_c + d_h^R``. An argument the kind does not use is refused (MQA has one key/value
    head whatever ``num_kv_heads`` says); so is a ``kind`` that is none of the four (a TypeError
    for a value that is no str, a ValueError for another str: validation.check_choice)."""
    kind = check_choice(kind, "kind", ("MHA", "GQA", "MQA", "MLA"))
    uses = {"MHA": ("num_heads", "d_head"), "GQA": ("num_kv_heads", "d_head"), "MQA": ("d_head",),
            "MLA": ("d_latent", "d_rope")}
    given = {"num_heads": num_heads, "d_head": d_head, "num_kv_heads": num_kv_heads,
             "d_latent": d_latent, "d_rope": d_rope}
    unused = {name: value for name, value in given.items() if name not in uses[kind] and value != 0}
    if unused:
        raise ValueError(f"kind={shown(kind)} uses only {', '.join(uses[kind])}; got also "
                         f"{', '.join(f'{n}={shown(v)}' for n, v in unused.items())}")
    if kind == "MHA":
        return 2 * check_int(num_heads, "num_heads", minimum=1) * check_int(d_head, "d_head", minimum=1)
    if kind == "GQA":
        return 2 * check_int(num_kv_heads, "num_kv_heads", minimum=1) * check_int(d_head, "d_head", minimum=1)
    if kind == "MQA":
        return 2 * check_int(d_head, "d_head", minimum=1)
    return check_int(d_latent, "d_latent", minimum=1) + check_int(d_rope, "d_rope", minimum=0)  # MLA


def rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding of ``x`` ``(..., T, d)`` (``d`` even) at ``positions`` ``(T,)``:
    the pair ``(x_j, x_{j + d/2})`` is rotated by the angle ``position * base^(-2j/d)``.

    ``x`` is a floating tensor of at least 2 dims; ``positions`` a 1-D integer tensor of ``T``
    positions >= 0 (or a list of ints); ``base`` a number > 0 (not NaN)."""
    check_tensor(x, "x", min_ndim=2, layout="(..., T, d)")
    d = x.shape[-1]
    if d % 2:
        raise ValueError(f"rope needs an even last dim, got shape {describe_shape(x)}")
    check_positive_number(base, "base")
    if isinstance(positions, (list, tuple, range)):
        listed = [check_int(p, f"positions[{i}]", minimum=0) for i, p in enumerate(positions)]
        positions = torch.tensor(listed, dtype=torch.long, device=x.device)
    if not isinstance(positions, Tensor):
        raise TypeError(f"positions must be a 1-D integer tensor (T,) = ({x.shape[-2]},), got "
                        f"{type(positions).__name__}")
    if positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool:
        raise TypeError(f"positions must hold integers (token positions), got dtype {positions.dtype}")
    if tuple(positions.shape) != (x.shape[-2],):
        raise ValueError(f"positions must be (T,) = ({x.shape[-2]},), one per token of x "
                         f"{describe_shape(x)}, got shape {describe_shape(positions)}")
    if positions.device != x.device:
        raise ValueError(f"positions must be on x's device {x.device}, got device {positions.device}: "
                         f"move it with positions.to(x.device)")
    if positions.numel() and int(positions.min()) < 0:
        raise ValueError(f"positions must be >= 0, got min {int(positions.min())}")
    freqs = base ** (-torch.arange(0, d // 2, dtype=x.dtype, device=x.device) * 2 / d)  # (d/2,)
    angles = positions.to(x.dtype)[:, None] * freqs  # (T, d/2)
    cos, sin = angles.cos(), angles.sin()
    first, second = x[..., :d // 2], x[..., d // 2:]
    return torch.cat([first * cos - second * sin, first * sin + second * cos], -1)


class MultiHeadLatentAttention(nn.Module):
    """Causal self-attention whose keys and values come from a shared latent of ``d_latent``
    numbers per token, with a decoupled RoPE key of ``d_rope`` numbers (see the module docstring).

    :meth:`forward` builds every head's keys and values (the training view); :meth:`decode`
    feeds one token against a cache of latents and RoPE keys, with the up-projections absorbed
    into the query and output when ``absorb=True``."""

    def __init__(self, d_model: int, num_heads: int, d_head: int, d_latent: int, d_rope: int) -> None:
        super().__init__()
        d_model, num_heads, d_head, d_latent, d_rope = (check_int(value, name, minimum=1) for name, value in (
            ("d_model", d_model), ("num_heads", num_heads), ("d_head", d_head), ("d_latent", d_latent),
            ("d_rope", d_rope)))
        if d_rope % 2:
            raise ValueError(f"d_rope must be even (RoPE rotates pairs), got {d_rope}")
        h = num_heads
        sizes = {"d_model": d_model, "num_heads": h, "d_head": d_head, "d_latent": d_latent, "d_rope": d_rope}
        check_linear_weights_fit(d_model, (d_latent, d_rope, h * d_head, h * d_rope, h * d_head),
                                 also=((d_latent, 2 * h * d_head),), sizes=sizes)  # before allocating
        self.num_heads, self.d_head, self.d_latent, self.d_rope = h, d_head, d_latent, d_rope
        self.w_dkv = nn.Linear(d_model, d_latent, bias=False)  # x -> c (the cached latent)
        self.w_uk = nn.Linear(d_latent, h * d_head, bias=False)  # c -> every head's key
        self.w_uv = nn.Linear(d_latent, h * d_head, bias=False)  # c -> every head's value
        self.w_kr = nn.Linear(d_model, d_rope, bias=False)  # x -> the shared RoPE key (cached)
        self.w_q = nn.Linear(d_model, h * d_head, bias=False)
        self.w_qr = nn.Linear(d_model, h * d_rope, bias=False)  # x -> each head's RoPE query
        self.w_o = nn.Linear(h * d_head, d_model, bias=False)
        self.scale = 1 / math.sqrt(d_head + d_rope)

    def _heads(self, x: Tensor, width: int) -> Tensor:
        """``(B, T, h * width)`` -> ``(B, h, T, width)``."""
        B, T, _ = x.shape
        return x.view(B, T, self.num_heads, width).transpose(1, 2)

    def _queries(self, x: Tensor, start: int) -> tuple[Tensor, Tensor]:
        positions = torch.arange(start, start + x.shape[1], device=x.device)
        q = self._heads(self.w_q(x), self.d_head)  # (B, h, T, d_h)
        q_rope = rope(self._heads(self.w_qr(x), self.d_rope), positions)  # (B, h, T, d_R)
        return q, q_rope

    def _check_x(self, x: object, name: str) -> None:
        check_tensor(x, name, ndim=3, layout=f"(B, T, d_model={self.w_q.in_features})")
        if x.shape[-1] != self.w_q.in_features:
            raise ValueError(f"{name} last dim must be d_model={self.w_q.in_features}, got shape "
                             f"{describe_shape(x)}")
        check_dims_not_empty(x, name, ("B", "T"))
        check_matches_module(x, name, self.w_q.weight)

    def _check_cache(self, cache: object, x_new: Tensor) -> None:
        """``cache`` is None or ``(latents (B, T, d_c), rope keys (B, T, d_R))`` fitting the module."""
        if cache is None:
            return
        if isinstance(cache, (tuple, list)):  # a list whose len() raises is named (battery 31)
            items_of(cache, "cache", "None or the (latents, rope keys) tuple decode returned")
        if not isinstance(cache, (tuple, list)) or len(cache) != 2:
            raise TypeError(f"cache must be None or the (latents, rope keys) tuple decode returned, got "
                            f"{type(cache).__name__}")
        B = x_new.shape[0]
        for name, t, width in (("cache[0] (latents)", cache[0], self.d_latent),
                               ("cache[1] (rope keys)", cache[1], self.d_rope)):
            layout = f"(B={B}, T, {width})"
            check_tensor(t, name, ndim=3, layout=layout)
            if t.shape[0] != B or t.shape[2] != width:
                raise ValueError(f"{name} must be {layout}, got {describe_shape(t)}")
            check_matches_module(t, name, self.w_q.weight)
        if cache[0].shape[1] != cache[1].shape[1]:
            raise ValueError(f"the cache's latents and rope keys must hold the same tokens, got "
                             f"{describe_shape(cache[0])} and {describe_shape(cache[1])}")

    def latents(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor]:
        """What the cache holds for ``x`` ``(B, T, d)`` at positions ``start..``: the latents
        ``(B, T, d_c)`` and the RoPE keys ``(B, T, d_R)``. ``x`` is checked as :meth:`forward`
        checks it, ``start`` is an int >= 0."""
        self._check_x(x, "x")
        # positions start..start+T-1 are int64 (a 10**400 overflowed bare: battery 29)
        start = check_int(start, "start", minimum=0, maximum=2**63 - 1 - x.shape[1])
        positions = torch.arange(start, start + x.shape[1], device=x.device)
        return self.w_dkv(x), rope(self.w_kr(x), positions)

    def forward(self, x: Tensor) -> Tensor:
        """Causal self-attention over ``x`` ``(B, T, d_model)``, every head's K and V built;
        returns ``(B, T, d_model)``."""
        self._check_x(x, "x")
        B, T, _ = x.shape
        c, k_rope = self.latents(x)
        q, q_rope = self._queries(x, 0)
        k, v = self._heads(self.w_uk(c), self.d_head), self._heads(self.w_uv(c), self.d_head)
        scores = (q @ k.transpose(-2, -1) + q_rope @ k_rope[:, None].transpose(-2, -1)) * self.scale
        causal = causal_mask(T, device=x.device)  # (T, T), True = may attend
        weights = masked_softmax(scores, causal)  # (B, h, T, T)
        return self.w_o((weights @ v).transpose(1, 2).reshape(B, T, -1))

    def decode(self, x_new: Tensor, cache: tuple[Tensor, Tensor] | None = None, *,
               absorb: bool = True) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """One new token ``x_new`` ``(B, 1, d_model)`` after the cached ones; ``cache`` is
        ``(latents (B, T, d_c), rope keys (B, T, d_R))`` or None. Returns the output ``(B, 1,
        d_model)`` and the cache with the new token appended. ``absorb=True`` scores the latents
        directly (``W_UK`` folded into the query, ``W_UV`` applied after the weighted sum);
        ``absorb=False`` rebuilds every head's keys and values from the cache first."""
        self._check_x(x_new, "x_new")
        if x_new.shape[1] != 1:
            raise ValueError("x_new must be one token per sequence (B, 1, d_model), got "
                             f"{describe_shape(x_new)}")
        check_flag(absorb, "absorb")
        self._check_cache(cache, x_new)
        start = 0 if cache is None else cache[0].shape[1]
        c_new, kr_new = self.latents(x_new, start)
        c, k_rope = (c_new, kr_new) if cache is None else (torch.cat([cache[0], c_new], 1),
                                                           torch.cat([cache[1], kr_new], 1))
        q, q_rope = self._queries(x_new, start)  # (B, h, 1, d_h), (B, h, 1, d_R)
        rope_scores = q_rope @ k_rope[:, None].transpose(-2, -1)  # (B, h, 1, T)
        B, h = x_new.shape[0], self.num_heads
        w_uk = self.w_uk.weight.view(h, self.d_head, self.d_latent)  # head i: k_i = c @ w_uk[i].T
        w_uv = self.w_uv.weight.view(h, self.d_head, self.d_latent)
        if absorb:
            q_latent = q @ w_uk  # (B, h, 1, d_c): the query moved into the latent space
            weights = ((q_latent @ c[:, None].transpose(-2, -1) + rope_scores) * self.scale).softmax(-1)
            heads = (weights @ c[:, None]) @ w_uv.transpose(-2, -1)  # (B, h, 1, d_c) -> (B, h, 1, d_h)
        else:
            k, v = self._heads(self.w_uk(c), self.d_head), self._heads(self.w_uv(c), self.d_head)
            weights = ((q @ k.transpose(-2, -1) + rope_scores) * self.scale).softmax(-1)
            heads = weights @ v
        return self.w_o(heads.transpose(1, 2).reshape(B, 1, -1)), (c, k_rope)
