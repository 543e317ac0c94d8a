"""Scaled dot-product attention and multi-head attention, written to be read.

Shapes use: B batch, h heads, Tq query length, Tk key length, d = d_model,
dk = d_model // h (per-head width). Masks are boolean with ``True`` = may attend
(see :mod:`course_utils.masks`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .masks import causal_mask, check_bool_mask

__all__ = [
    "scaled_dot_product_attention",
    "check_head_dims",
    "MultiHeadAttention",
    "LoopMultiHeadAttention",
]


def _shape(x: Tensor) -> str:
    return "(" + ", ".join(str(s) for s in x.shape) + ")"


def _check_mask_fits(
    mask: Tensor, target: tuple[int, ...], target_names: str, shown: Tensor | None = None
) -> None:
    """``mask`` may have fewer leading dims than ``target`` and size 1 in leading dims,
    but its last two dims must be exactly (Tq, Tk). Nothing else broadcasts.
    ``shown`` is the mask as the caller passed it (for the error message)."""
    check_bool_mask(mask, "mask")
    shown = mask if shown is None else shown
    ok = mask.ndim >= 2 and mask.ndim <= len(target) and tuple(mask.shape[-2:]) == target[-2:]
    if ok:
        lead_mask = mask.shape[:-2]
        lead_target = target[len(target) - mask.ndim : -2]
        ok = all(m in (1, t) for m, t in zip(lead_mask, lead_target, strict=False))
    if not ok:
        raise ValueError(
            f"mask of shape {_shape(shown)} does not fit attention scores of shape "
            f"{tuple(target)} {target_names}: its last two dims must be exactly "
            f"(Tq, Tk) = {tuple(target[-2:])} and any leading dim must equal the scores' "
            "dim or be 1"
        )


def check_head_dims(d_model: int, num_heads: int) -> None:
    """Raise a clear error unless both are positive ints and ``num_heads`` divides ``d_model``."""
    for name, value in (("d_model", d_model), ("num_heads", num_heads)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value <= 0:
            raise ValueError(f"{name} must be a positive int, got {value}")
    if d_model % num_heads != 0:
        raise ValueError(
            f"d_model={d_model} is not divisible by num_heads={num_heads}: each head "
            f"needs an equal slice d_k = d_model / num_heads (= {d_model / num_heads:g}). "
            f"Try num_heads in {[h for h in range(1, d_model + 1) if d_model % h == 0][:8]}"
        )


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(dk)) v, computed step by step.

    Args:
        q: ``(..., Tq, dk)``; k: ``(..., Tk, dk)``; v: ``(..., Tk, dv)``. Leading dims
            must be equal (no silent broadcasting).
        mask: bool, ``True`` = may attend; last two dims ``(Tq, Tk)``; it may have fewer
            leading dims than q (a ``(Tq, Tk)`` mask serves a 4-D q), each equal to q's or 1.
        is_causal: also block keys after each query (top-left aligned, as in
            ``F.scaled_dot_product_attention``).
        dropout_p: dropout on the attention weights, applied whenever ``dropout_p > 0``
            (this function knows no train/eval mode); it affects only the output, and the
            returned weights are the pre-dropout probabilities.

    Returns:
        ``(output (..., Tq, dv), weights (..., Tq, Tk))``. A query row whose keys are all
        masked gets zero weights and a zero output.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.ndim < 2:
            raise ValueError(f"{name} must be at least 2-D (..., T, d), got shape {_shape(t)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(
            f"q and k need the same last dim dk to be compared: q {_shape(q)}, k {_shape(k)}"
        )
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"k and v must have the same length Tk (one value per key): k {_shape(k)}, "
            f"v {_shape(v)}"
        )
    if not (q.shape[:-2] == k.shape[:-2] == v.shape[:-2]):
        raise ValueError(
            "q, k and v must have identical leading (batch/head) dims, got "
            f"q {_shape(q)}, k {_shape(k)}, v {_shape(v)}"
        )
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., Tq, Tk)

    allowed = None
    if mask is not None:
        _check_mask_fits(mask, tuple(scores.shape), "(..., Tq, Tk)")
        allowed = mask
    if is_causal:
        causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)
        allowed = causal if allowed is None else allowed & causal
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))

    weights = torch.softmax(scores, dim=-1)  # (..., Tq, Tk), rows sum to 1
    if allowed is not None:
        # A row with every key blocked is all -inf -> NaN after softmax; make it zeros.
        weights = weights.masked_fill(~allowed, 0.0)
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return attended @ v, weights  # (..., Tq, dv), (..., Tq, Tk)


class MultiHeadAttention(nn.Module):
    """Batched multi-head attention, batch-first, masks with ``True`` = may attend.

    All heads are computed at once: one projection for Q, K and V, a ``view`` that
    splits d_model into ``h`` heads of width ``dk``, a ``transpose`` that moves heads
    next to the batch, attention, then the reverse and the output projection W_O.

    Args:
        d_model: width of every token vector; must be divisible by ``num_heads``.
        num_heads: number of heads h; each head has width ``d_k = d_model // num_heads``.
        bias: give the Q/K/V and output projections a bias (as ``nn.MultiheadAttention``).
        dropout: dropout on the attention weights, applied in training mode only.

    Parameters mirror ``nn.MultiheadAttention``: ``in_proj`` is one ``nn.Linear(d, 3d)``
    whose ``weight`` ``(3d, d)`` stacks W_Q, W_K, W_V in ``nn.Linear``'s layout (each block
    ``(d, d)`` is the transpose of the W in ``x @ W``; rows ``i*dk:(i+1)*dk`` of each block
    belong to head ``i``), and ``out_proj`` is W_O.
    """

    def __init__(
        self, d_model: int, num_heads: int, *, bias: bool = True, dropout: float = 0.0
    ) -> None:
        super().__init__()
        check_head_dims(d_model, num_heads)
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_k = d_model // num_heads
        self.dropout = dropout
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # W_Q | W_K | W_V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.in_proj.weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.in_proj.bias is not None:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    # -- input checks -------------------------------------------------------------
    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor) -> None:
        for name, t in (("query", query), ("key", key), ("value", value)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
            if t.ndim != 3:
                hint = " (add a batch dim with x.unsqueeze(0))" if t.ndim == 2 else ""
                raise ValueError(
                    f"{name} must be 3-D (B, T, d_model={self.d_model}), got {t.ndim}-D shape "
                    f"{_shape(t)}{hint}"
                )
            if t.shape[-1] != self.d_model:
                raise ValueError(
                    f"{name} last dim must be d_model={self.d_model}, got shape {_shape(t)}"
                )
        if not (query.shape[0] == key.shape[0] == value.shape[0]):
            raise ValueError(
                f"query, key and value must share the batch size B, got {_shape(query)}, "
                f"{_shape(key)}, {_shape(value)}"
            )
        if key.shape[1] != value.shape[1]:
            raise ValueError(
                f"key and value must have the same length Tk, got key {_shape(key)} and "
                f"value {_shape(value)}"
            )

    def _combined_mask(
        self, mask: Tensor | None, key_padding_mask: Tensor | None, B: int, Tq: int, Tk: int
    ) -> Tensor | None:
        """Merge ``mask`` and ``key_padding_mask`` into one 4-D bool mask
        ``(B|1, h|1, Tq, Tk)``; ``True`` = may attend."""
        target = (B, self.num_heads, Tq, Tk)
        combined = None
        if mask is not None:
            check_bool_mask(mask, "mask")
            lifted = mask
            if mask.ndim == 2:  # (Tq, Tk) -> (1, 1, Tq, Tk)
                lifted = mask[None, None]
            elif mask.ndim == 3:  # (B, Tq, Tk) -> (B, 1, Tq, Tk): never matched against h
                lifted = mask.unsqueeze(1)
            _check_mask_fits(lifted, target, "(B, h, Tq, Tk)", shown=mask)
            combined = lifted
        if key_padding_mask is not None:
            check_bool_mask(key_padding_mask, "key_padding_mask")
            if tuple(key_padding_mask.shape) != (B, Tk):
                raise ValueError(
                    f"key_padding_mask must have shape (B, Tk) = {(B, Tk)} with True = real "
                    f"token, got {_shape(key_padding_mask)}"
                )
            kpm = key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
            combined = kpm if combined is None else combined & kpm
        if combined is None:
            return None
        return combined.expand(combined.shape[0], combined.shape[1], Tq, Tk)  # a view

    # -- the computation ----------------------------------------------------------
    def project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """Project and split into heads: each output is ``(B, h, T, dk)``."""
        B, Tq, _ = query.shape
        Tk = key.shape[1]
        if query is key and key is value:  # self-attention: one fused matmul
            q, k, v = self.in_proj(query).split(self.d_model, dim=-1)  # 3 x (B, T, d)
        else:  # cross-attention: same weights, applied to different inputs
            w_q, w_k, w_v = self.in_proj.weight.split(self.d_model, dim=0)
            b_q = b_k = b_v = None
            if self.in_proj.bias is not None:
                b_q, b_k, b_v = self.in_proj.bias.split(self.d_model)
            q, k, v = F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)
        q = q.view(B, Tq, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, Tq, dk)
        k = k.view(B, Tk, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, Tk, dk)
        v = v.view(B, Tk, self.num_heads, self.d_k).transpose(1, 2)  # (B, h, Tk, dk)
        return q, k, v

    def merge_heads(self, heads: Tensor) -> Tensor:
        """``(B, h, T, dk)`` -> ``(B, T, d_model)``: heads concatenated in order 0..h-1."""
        B, _, T, _ = heads.shape
        return heads.transpose(1, 2).contiguous().view(B, T, self.d_model)

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``query`` ``(B, Tq, d)`` to ``key``/``value`` ``(B, Tk, d)``.

        ``key`` defaults to ``query`` (self-attention) and ``value`` to ``key``. ``mask``
        is bool, ``True`` = may attend, shaped ``(Tq, Tk)``, ``(B, Tq, Tk)`` or ``(B|1, h|1,
        Tq, Tk)``. ``key_padding_mask`` is bool ``(B, Tk)`` with ``True`` = real token (the
        opposite of ``nn.MultiheadAttention``'s argument of the same name). ``is_causal``
        also blocks every key after its query (top-left aligned, as in PyTorch).

        ``need_weights=False`` (the default) runs the fused
        ``F.scaled_dot_product_attention`` and returns ``None`` for the weights;
        ``need_weights=True`` runs the step-by-step softmax and returns every head's weights
        (not averaged over heads). The two agree up to floating-point rounding. A query whose
        keys are all masked gets a zero output (PyTorch's modules give NaN there).

        Returns ``(output (B, Tq, d), weights (B, h, Tq, Tk) or None)``.
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        B, Tq, _ = query.shape
        Tk = key.shape[1]
        allowed = self._combined_mask(mask, key_padding_mask, B, Tq, Tk)
        q, k, v = self.project_qkv(query, key, value)  # (B, h, T, dk) each
        p = self.dropout if self.training else 0.0

        if need_weights:
            heads, weights = scaled_dot_product_attention(
                q, k, v, mask=allowed, is_causal=is_causal, dropout_p=p
            )  # (B, h, Tq, dk), (B, h, Tq, Tk)
        else:  # the fused kernel; same maths, no weights kept
            if is_causal and allowed is not None:
                allowed = allowed & causal_mask(Tq, Tk, device=query.device)
                is_causal = False
            heads = F.scaled_dot_product_attention(
                q, k, v, attn_mask=allowed, dropout_p=p, is_causal=is_causal
            )
            if allowed is not None:  # rows with nothing to attend to: zeros, as above
                heads = heads.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
            weights = None
        return self.out_proj(self.merge_heads(heads)), weights  # (B, Tq, d)

    # -- conversion to and from PyTorch -------------------------------------------
    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy an ``nn.MultiheadAttention(batch_first=True)``'s weights into a new module."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(f"expected nn.MultiheadAttention, got {type(module).__name__}")
        if not module.batch_first:
            raise ValueError("from_torch expects nn.MultiheadAttention(batch_first=True)")
        if not module._qkv_same_embed_dim or module.in_proj_weight is None:
            raise ValueError("from_torch needs kdim == vdim == embed_dim (one in_proj_weight)")
        if module.bias_k is not None or module.bias_v is not None:
            raise ValueError("from_torch does not support add_bias_kv=True")
        bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, bias=bias, dropout=module.dropout)
        ours = ours.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        with torch.no_grad():
            ours.in_proj.weight.copy_(module.in_proj_weight)
            ours.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                ours.in_proj.bias.copy_(module.in_proj_bias)
                ours.out_proj.bias.copy_(module.out_proj.bias)
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """A new ``nn.MultiheadAttention(batch_first=True)`` with these weights."""
        bias = self.in_proj.bias is not None
        w = self.in_proj.weight
        theirs = nn.MultiheadAttention(
            self.d_model, self.num_heads, dropout=self.dropout, bias=bias, batch_first=True
        ).to(device=w.device, dtype=w.dtype)
        with torch.no_grad():
            theirs.in_proj_weight.copy_(self.in_proj.weight)
            theirs.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                theirs.in_proj_bias.copy_(self.in_proj.bias)
                theirs.out_proj.bias.copy_(self.out_proj.bias)
        return theirs

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}"


class LoopMultiHeadAttention(MultiHeadAttention):
    """The formula read literally: one head at a time, then concatenate and project.

    Same parameters and same results as :class:`MultiHeadAttention`; head ``i`` uses
    rows ``i*dk:(i+1)*dk`` of W_Q, W_K and W_V. Slow on purpose (lesson 4 measures it).
    """

    @classmethod
    def from_batched(cls, module: MultiHeadAttention) -> LoopMultiHeadAttention:
        """A loop version that *shares* ``module``'s parameter tensors."""
        loop = cls.__new__(cls)
        nn.Module.__init__(loop)
        loop.d_model, loop.num_heads, loop.d_k = module.d_model, module.num_heads, module.d_k
        loop.dropout = module.dropout
        loop.in_proj, loop.out_proj = module.in_proj, module.out_proj
        return loop

    def forward(
        self,
        query: Tensor,
        key: Tensor | None = None,
        value: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        is_causal: bool = False,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value)
        B, Tq, _ = query.shape
        Tk = key.shape[1]
        allowed = self._combined_mask(mask, key_padding_mask, B, Tq, Tk)  # (B|1, h|1, Tq, Tk)
        w_q, w_k, w_v = self.in_proj.weight.split(self.d_model, dim=0)  # (d, d) each
        biases = (None, None, None)
        if self.in_proj.bias is not None:
            biases = self.in_proj.bias.split(self.d_model)
        p = self.dropout if self.training else 0.0
        head_outputs, head_weights = [], []
        for i in range(self.num_heads):
            rows = slice(i * self.d_k, (i + 1) * self.d_k)
            q_i = F.linear(query, w_q[rows], None if biases[0] is None else biases[0][rows])
            k_i = F.linear(key, w_k[rows], None if biases[1] is None else biases[1][rows])
            v_i = F.linear(value, w_v[rows], None if biases[2] is None else biases[2][rows])
            mask_i = None if allowed is None else allowed[:, min(i, allowed.shape[1] - 1)]
            out_i, weights_i = scaled_dot_product_attention(
                q_i, k_i, v_i, mask=mask_i, is_causal=is_causal, dropout_p=p
            )  # (B, Tq, dk), (B, Tq, Tk)
            head_outputs.append(out_i)
            head_weights.append(weights_i)
        concat = torch.cat(head_outputs, dim=-1)  # (B, Tq, d): head 0 first
        weights = torch.stack(head_weights, dim=1) if need_weights else None  # (B, h, Tq, Tk)
        return self.out_proj(concat), weights
