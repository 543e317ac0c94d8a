"""Multi-head attention exactly as the formula reads: a list of independent heads.

``head_i = Attention(X W_Q^i, X W_K^i, X W_V^i)`` and
``MultiHead(X) = Concat(head_1, ..., head_h) W_O``. Each head owns three
``nn.Linear(d_model, d_k)`` layers. ``nn.Linear`` stores the *transpose* of the
formula's matrix: ``W_Q^i`` is ``(d_model, d_k)``, the layer's ``weight`` is
``(d_k, d_model)`` and it computes ``x @ weight.T``.

This module exists to be read and compared, not to be fast: lesson 4 shows that it
computes the same function as the batched :class:`~course_utils.attention.mha.MultiHeadAttention`
once the per-head weights are stacked (:func:`stack_head_weights`), and measures what
the loop over heads costs.

Non-finite inputs: as in :mod:`course_utils.attention.mha`, whose
:func:`~course_utils.attention.mha.scaled_dot_product_attention` every head calls, NaN or
infinity in ``x`` is not checked (only shapes, dtypes and devices are) and propagates to NaN
in the output.

Empty inputs: an empty batch (``x`` of shape ``(0, T, d_model)``) is refused, as by
:class:`~course_utils.attention.mha.MultiHeadAttention`; an empty sequence (``T = 0``) gives an
empty output.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .mha import MultiHeadAttention, scaled_dot_product_attention
from .validation import (
    check_flag,
    check_head_dims,
    check_int,
    check_linear_layer,
    check_linear_weights_fit,
    check_matches_module,
    check_same_dtype_and_device,
    check_stream,
    check_tensor,
    check_tensor_list,
)

__all__ = ["AttentionHead", "NaiveMultiHeadAttention", "stack_head_weights", "naive_from_batched"]


class AttentionHead(nn.Module):
    """One head with its own ``W_Q^i``, ``W_K^i``, ``W_V^i``: ``(B, T, d) -> (B, T, dk)``."""

    def __init__(self, d_model: int, d_k: int, *, bias: bool = True) -> None:
        super().__init__()
        check_int(d_model, "d_model", minimum=1)
        check_int(d_k, "d_k", minimum=1)
        check_flag(bias, "bias")
        check_linear_weights_fit(d_model, (d_k,) * 3, sizes={"d_model": d_model, "d_k": d_k})  # W_Q, W_K, W_V
        self.w_q = nn.Linear(d_model, d_k, bias=bias)  # weight (dk, d) = (W_Q^i)^T
        self.w_k = nn.Linear(d_model, d_k, bias=bias)  # weight (dk, d) = (W_K^i)^T
        self.w_v = nn.Linear(d_model, d_k, bias=bias)  # weight (dk, d) = (W_V^i)^T

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` ``(..., T, d_model)`` -> ``(..., T, dk)``; ``mask`` bool, ``True`` = may attend."""
        check_tensor(x, "x", min_ndim=2, layout="(B, T, d_model)")
        check_matches_module(x, "x", self.w_q.weight)
        if x.shape[-1] != self.w_q.in_features:
            raise ValueError(f"x must end in d_model={self.w_q.in_features} features, "
                             f"got shape {tuple(x.shape)}")
        if 0 in x.shape[:-2]:
            raise ValueError(f"x must hold at least one sequence (B >= 1), got shape {tuple(x.shape)}")
        q, k, v = self.w_q(x), self.w_k(x), self.w_v(x)  # (B, T, dk) each
        out, _ = scaled_dot_product_attention(q, k, v, mask=mask)  # (B, T, dk)
        return out


class NaiveMultiHeadAttention(nn.Module):
    """Self-attention with ``num_heads`` independent :class:`AttentionHead` s in an
    ``nn.ModuleList``, concatenated in order 0..h-1, then ``out_proj`` (W_O).

    ``heads`` and ``out_proj`` are plain attributes a student may change; calling the module
    (``module(x)``, which runs :meth:`forward`) and :meth:`to_batched` check them first (see
    :meth:`_check_heads`): a head deleted, appended or replaced since construction is a
    ValueError or TypeError naming it, not a size mismatch inside torch."""

    def __init__(self, d_model: int, num_heads: int, *, bias: bool = True) -> None:
        super().__init__()
        check_head_dims(d_model, num_heads)
        check_flag(bias, "bias")
        self.d_model, self.num_heads, self.d_k = d_model, num_heads, d_model // num_heads
        check_linear_weights_fit(d_model, (3 * d_model, d_model))  # every head's W_Q, W_K, W_V and W_O
        self.heads = nn.ModuleList(AttentionHead(d_model, self.d_k, bias=bias) for _ in range(num_heads))
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` ``(B, T, d_model)`` -> ``(B, T, d_model)``. ``mask``: bool ``(T, T)`` or
        ``(B, T, T)``, ``True`` = may attend, shared by every head."""
        check_stream(x, "x", d_model=self.d_model, weight=self.out_proj.weight)  # float (B>=1, T, d_model)
        head_outputs = [head(x, mask) for head in self.heads]  # h x (B, T, dk)
        concat = torch.cat(head_outputs, dim=-1)  # (B, T, d): head 0 in columns 0..dk-1
        return self.out_proj(concat)  # (B, T, d)

    def __call__(self, *args, **kwargs):
        """``module(x, mask)``: the heads are checked (:meth:`_check_setup`), then nn.Module's call
        runs :meth:`forward`. The check sits here, apart from the maths, so that :meth:`forward`
        reads as the formula (lesson 4 prints its code); a head deleted, appended or replaced
        since construction is named, not met as torch's "mat1 and mat2 shapes cannot be
        multiplied" at W_O."""
        self._check_setup()
        return super().__call__(*args, **kwargs)

    def _check_setup(self) -> None:
        """The forward pass's check of the heads: a few attribute reads, and :meth:`_check_heads`'s
        messages only when something differs from what the constructor built."""
        shape, d = (self.d_k, self.d_model), self.d_model
        if not (len(self.heads) == self.num_heads and isinstance(self.out_proj, nn.Linear)
                and self.out_proj.weight.shape == (d, d)
                and all(isinstance(head, AttentionHead) and all(
                    isinstance(layer, nn.Linear) and layer.weight.shape == shape
                    for layer in (head.w_q, head.w_k, head.w_v)) for head in self.heads)):
            self._check_heads("forward")

    def _check_heads(self, caller: str) -> None:
        """What ``caller`` (``"forward"`` or ``"to_batched"``) reads is what the constructor built:
        ``heads`` holds ``num_heads`` :class:`AttentionHead` s whose ``w_q``, ``w_k`` and ``w_v`` are
        ``nn.Linear(d_model, d_k)``, and ``out_proj`` is an ``nn.Linear(d_model, d_model)``. A head
        deleted, appended or replaced after construction would meet W_O as a size mismatch deep
        inside torch; here it is a ValueError (TypeError for a module of another kind) naming it."""
        why = f"{caller} {'reads' if caller == 'forward' else 'copies'} it"
        if len(self.heads) != self.num_heads:
            raise ValueError(f"heads must hold num_heads={self.num_heads} heads (W_O reads "
                             f"{self.num_heads} x d_k={self.d_k} columns), got {len(self.heads)}: was a "
                             f"head deleted or added after construction?")
        for i, head in enumerate(self.heads):
            if not isinstance(head, AttentionHead):
                raise TypeError(f"heads[{i}] must be an AttentionHead({self.d_model}, {self.d_k}) ({why}), "
                                f"got {type(head).__name__}: was it replaced after construction?")
            for name in ("w_q", "w_k", "w_v"):
                check_linear_layer(getattr(head, name), f"heads[{i}].{name}", self.d_model, self.d_k, why=why)
        check_linear_layer(self.out_proj, "out_proj", self.d_model, self.d_model, why=why)

    def _check_biases(self) -> None:
        """Every projection has a bias, or none has (:class:`MultiHeadAttention` has one ``bias``
        flag for all of them): a mix, e.g. a head's bias set to None after construction, would be
        copied wrong or dropped, so the error lists which have a bias and which do not."""
        layers = {f"heads[{i}].{name}": getattr(head, name)
                  for i, head in enumerate(self.heads) for name in ("w_q", "w_k", "w_v")}
        layers["out_proj"] = self.out_proj
        with_bias = [name for name, layer in layers.items() if layer.bias is not None]
        if 0 < len(with_bias) < len(layers):
            without = [name for name in layers if name not in with_bias]
            raise ValueError(f"every projection must have a bias or none may (MultiHeadAttention has one "
                             f"bias flag): {_listed(with_bias)} have a bias, {_listed(without)} do not")

    def to_batched(self) -> MultiHeadAttention:
        """A :class:`MultiHeadAttention` holding a *copy* of these weights, stacked. The heads are
        checked first (:meth:`_check_heads`, :meth:`_check_biases`): one changed since
        construction is named, not copied."""
        self._check_heads("to_batched")
        self._check_biases()
        bias = self.out_proj.bias is not None
        batched = MultiHeadAttention(self.d_model, self.num_heads, bias=bias)
        batched = batched.to(device=self.out_proj.weight.device, dtype=self.out_proj.weight.dtype)
        with torch.no_grad():
            batched.in_proj.weight.copy_(stack_head_weights(
                [h.w_q.weight for h in self.heads], [h.w_k.weight for h in self.heads],
                [h.w_v.weight for h in self.heads]))
            batched.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                batched.in_proj.bias.copy_(stack_head_weights(
                    [h.w_q.bias for h in self.heads], [h.w_k.bias for h in self.heads],
                    [h.w_v.bias for h in self.heads]))
                batched.out_proj.bias.copy_(self.out_proj.bias)
        return batched


def _listed(names: list[str], limit: int = 8) -> str:
    """``a, b, c`` for a message, the first ``limit`` names and how many more."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(names[:limit]) + more


def stack_head_weights(q_parts: list[Tensor], k_parts: list[Tensor], v_parts: list[Tensor]) -> Tensor:
    """Stack per-head ``nn.Linear`` weights ``(dk, d)`` (or biases ``(dk,)``) into one
    ``in_proj`` of shape ``(3*h*dk, d)`` (or ``(3*h*dk,)``): all query heads in order,
    then all key heads, then all value heads. Head ``i`` of Q lands in rows
    ``i*dk:(i+1)*dk``, which is where :class:`MultiHeadAttention`'s ``view`` looks for it.
    Each of the three may also be one tensor ``(h, dk, d)`` (the heads' weights stacked on dim 0;
    a 2-D tensor is refused: one head's weight ``(dk, d)`` and h stacked biases ``(h, dk)`` look
    alike). Every part must have the same shape, dtype and device.
    """
    q_parts = check_tensor_list(q_parts, "q_parts", stacked_ndim=3)
    k_parts = check_tensor_list(k_parts, "k_parts", stacked_ndim=3)
    v_parts = check_tensor_list(v_parts, "v_parts", stacked_ndim=3)
    parts = [*q_parts, *k_parts, *v_parts]
    if not (len(q_parts) == len(k_parts) == len(v_parts)) or not q_parts:
        raise ValueError(
            f"need the same non-zero number of Q, K and V heads, got {len(q_parts)}, "
            f"{len(k_parts)}, {len(v_parts)}"
        )
    expected = tuple(q_parts[0].shape)
    groups = (("q_parts", q_parts), ("k_parts", k_parts), ("v_parts", v_parts))
    odd = next(((n, i, tuple(p.shape)) for n, ps in groups for i, p in enumerate(ps)
                if tuple(p.shape) != expected), None)
    if odd is not None:
        raise ValueError(f"every per-head part must have the same shape as q_parts[0], {expected}; "
                         f"{odd[0]}[{odd[1]}] has {odd[2]}")
    firsts = {"q_parts[0]": q_parts[0], "k_parts[0]": k_parts[0], "v_parts[0]": v_parts[0]}
    check_same_dtype_and_device(firsts)  # Q against K against V, then every head
    check_same_dtype_and_device({f"{n}[{i}]": p for n, ps in groups for i, p in enumerate(ps)})
    return torch.cat(parts, dim=0)  # (3*h*dk, d) or (3*h*dk,)


def naive_from_batched(module: MultiHeadAttention) -> NaiveMultiHeadAttention:
    """The inverse of :meth:`NaiveMultiHeadAttention.to_batched`: cut ``module``'s stacked
    ``in_proj`` into per-head layers (copies), so both compute the same function."""
    if not isinstance(module, MultiHeadAttention):
        raise TypeError(f"module must be a course MultiHeadAttention, got {type(module).__name__}")
    module._check_projections("naive_from_batched")  # a layer replaced since module was built is named
    bias = module.in_proj.bias is not None
    w = module.in_proj.weight
    naive = NaiveMultiHeadAttention(module.d_model, module.num_heads, bias=bias).to(w.device, w.dtype)
    dk, d = module.d_k, module.d_model
    with torch.no_grad():
        for i, head in enumerate(naive.heads):
            for which, layer in enumerate((head.w_q, head.w_k, head.w_v)):
                rows = slice(which * d + i * dk, which * d + (i + 1) * dk)
                layer.weight.copy_(w[rows])
                if bias:
                    layer.bias.copy_(module.in_proj.bias[rows])
        naive.out_proj.load_state_dict(module.out_proj.state_dict())
    return naive
