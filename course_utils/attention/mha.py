"""Scaled dot-product attention and multi-head attention, written to be read.

Shapes use: B batch, h heads, Tq query length, Tk key length, d = d_model,
dk = d_model // h (per-head width). Masks are boolean with ``True`` = may attend
(see :mod:`course_utils.attention.masks`). The maths comes first; the input checks live in
:mod:`course_utils.attention.validation`, the conversions to and from ``nn.MultiheadAttention``
at the end of the class.

NaN or infinity in an input is not refused (checking would cost a pass over the data),
and it spreads: a NaN in a key makes the output NaN for every query that may attend to
that key; a NaN in a value reaches every query of the sequence, masked or not (a blocked
key gets weight 0, and 0 x NaN is NaN). One exception, where *every* score of a query's head
is NaN (a NaN or infinity in the query, or every key it may attend to NaN): the step-by-step
path (``need_weights=True``) and the fused C decode kernel
(:func:`~course_utils.attention.fused_decode.fused_decode_attention`) give NaN heads, but
PyTorch's fused CPU kernel, the default path, returns zeros for them over a short key sequence
(fewer than 16 keys in torch 2.13; ``nn.MultiheadAttention`` does the same) and NaN over a
longer one, so the output can look finite. To find such an input, run with
``need_weights=True`` or check it with ``torch.isfinite``. (Putting the NaN back would add
operations to every forward pass, which lesson 04 counts.) A query with nothing to attend to
(every key masked, or every score ``-inf``) is no such case: it gets zeros on every path. A
finite input far beyond the activations' range (``1e38``) can overflow float32 in a
projection and give NaN the same way, unchecked.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .hooks import HookPoint, name_hook_points
from .masks import causal_mask, masked_softmax
from .validation import (
    check_attention_extras,
    check_dropout,
    check_fast_attention_inputs,
    check_flag,
    check_head_dims,
    check_heads_to_merge,
    check_holds_values,
    check_int,
    check_kv_pair,
    check_linear_layer,
    check_linear_weights_fit,
    check_mha_inputs,
    check_mha_tensors,
    check_same_dtype_and_device,
    check_sdpa_inputs,
    combine_masks,
    shown,
)

__all__ = ["scaled_dot_product_attention", "check_head_dims", "MultiHeadAttentionBase", "MultiHeadAttention"]


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

    Named after ``torch.nn.functional.scaled_dot_product_attention``, which computes the
    same thing fused; two differences: the boolean mask is ``mask=`` (``True`` = may attend),
    and the attention weights come back too, as the second element.

    Args:
        q: ``(..., Tq, dk)``; k: ``(..., Tk, dk)``; v: ``(..., Tk, dv)``: floating point,
            one dtype, one device. Leading dims must be equal (no silent broadcasting).
            ``Tk = 0`` is refused when ``Tq > 0`` (a query needs a key); ``Tq = Tk = 0``
            gives empty outputs.
        mask: bool, ``True`` = may attend; last two dims ``(Tq, Tk)``; it may have fewer
            leading dims than q (a ``(Tq, Tk)`` mask serves a 4-D q), each equal to q's or 1.
        is_causal: ``True`` also blocks keys after each query (top-left aligned, as in
            ``F.scaled_dot_product_attention``); must be a real bool.
        dropout_p: a float in [0, 1): dropout on the attention weights, applied whenever
            ``dropout_p > 0`` (this function knows no train/eval mode); it affects only the
            output, and the returned weights are the pre-dropout probabilities.

    Returns:
        ``(output (..., Tq, dv), weights (..., Tq, Tk))``. A query row whose keys are all
        masked gets zero weights and a zero output. NaN/inf in q, k or v spread along the
        sequence (see the module docstring).
    """
    check_sdpa_inputs(q, k, v, mask, is_causal, dropout_p)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (..., Tq, Tk)

    allowed = mask  # (..., Tq, Tk) or None; True = may attend
    if is_causal and q.shape[-2] > 0:
        causal = causal_mask(q.shape[-2], k.shape[-2], device=q.device)  # (Tq, Tk)
        allowed = causal if allowed is None else allowed & causal
    weights = masked_softmax(scores, allowed)  # (..., Tq, Tk), rows sum to 1 (0 if all blocked)
    attended = F.dropout(weights, p=dropout_p) if dropout_p > 0 else weights
    return attended @ v, weights  # (..., Tq, dv), (..., Tq, Tk)


# What MultiHeadAttentionBase.forward reads that a subclass provides (checked by _check_setup).
_SETUP = ("d_model", "num_heads", "num_kv_heads", "d_k", "dropout", "out_proj", "project_qkv",
          "hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z")


class MultiHeadAttentionBase(nn.Module):
    """The one forward path of the course's attention layers (and of the trained models).

    :meth:`forward` is the whole computation, in nanoGPT's order. Subclasses only say how the
    heads are projected, :meth:`project_qkv` (``q`` ``(B, h, T, dk)``, ``k``/``v``
    ``(B, g, T, dk)``): :class:`MultiHeadAttention` has ``g = h``;
    :class:`~course_utils.attention.gqa.GroupedQueryAttention` shares ``g < h`` K/V heads.
    A subclass's ``__init__`` calls ``super().__init__()``, sets ``d_model``, ``num_heads``,
    ``num_kv_heads``, ``d_k``, ``dropout`` and ``out_proj``, then calls ``_add_hook_points()``;
    :meth:`forward` names whatever of these (or ``project_qkv``) is missing in a TypeError.

    Hook points (:mod:`course_utils.attention.hooks`) sit on the path: ``hook_q``, ``hook_k``,
    ``hook_v`` (the heads, before a cache is appended), ``hook_pattern`` (the attention weights
    ``(B, h, Tq, Tk)``) and ``hook_z`` (each head's output ``(B, h, Tq, dk)``, before the heads
    are merged: ablation and patching edit here).

    The meta device is kept on purpose on this path: a layer built under
    ``torch.device("meta")`` (lesson 03's GPT-3-sized layer) runs on meta inputs to compute output
    shapes without memory, so :meth:`merge_heads` of such a layer takes meta heads and gives a meta
    result, and the causal mask is built on the input's device (see
    :func:`~course_utils.attention.masks.causal_mask`). A layer whose weights hold values refuses
    meta heads in :meth:`merge_heads` (a meta result would come back without a word): that rule is
    added by :func:`_refusing_meta_heads`, outside the method, whose source lesson 04 prints (and
    whose own docstring stays short for it).
    """

    d_model: int
    num_heads: int
    num_kv_heads: int  # g: the heads that keys and values have (= num_heads without sharing)
    d_k: int
    dropout: float
    out_proj: nn.Linear
    # A function (q (B, h, 1, dk), k, v (B, g, T, dk)) -> heads (B, h, 1, dk) that the fast branch
    # hands every unmasked decoding step to (see fast_attention); None: F.sdpa does them too.
    decode_kernel: Callable[[Tensor, Tensor, Tensor], Tensor] | None = None

    def __init__(self) -> None:
        if type(self) is MultiHeadAttentionBase:  # it has no sizes, weights or project_qkv
            raise TypeError("MultiHeadAttentionBase is the shared forward path, not a layer: build "
                            "MultiHeadAttention(d_model, num_heads) or GroupedQueryAttention(...), which "
                            "set d_model, num_heads, the weights and project_qkv")
        super().__init__()

    def _add_hook_points(self) -> None:
        self.hook_q, self.hook_k, self.hook_v = HookPoint(), HookPoint(), HookPoint()
        self.hook_pattern, self.hook_z = HookPoint(), HookPoint()
        name_hook_points(self)  # "hook_q", ...; a model that holds the layer names them again

    # -- the computation ----------------------------------------------------------
    def merge_heads(self, heads: Tensor) -> Tensor:
        """``(B, h, T, dk)`` -> ``(B, T, d_model)``: heads concatenated in order 0..h-1."""
        check_heads_to_merge(heads, self.num_heads, self.d_k)  # 4-D, h * dk = d_model
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
        past: tuple[Tensor, Tensor] | Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
        return_kv: bool = False,
    ) -> tuple[Tensor, ...]:
        """Attend from ``query`` ``(B, Tq, d)`` to ``key``/``value`` ``(B, Tk, d)``.

        ``key`` defaults to ``query`` (self-attention) and ``value`` to ``key``; all three
        must have the module's dtype and device. ``mask`` is bool, ``True`` = may attend,
        shaped ``(Tq, Tk)``, ``(B, Tq, Tk)`` or ``(B|1, h|1, Tq, Tk)``. ``key_padding_mask``
        is bool ``(B, Tk)`` with ``True`` = real token (the opposite of
        ``nn.MultiheadAttention``'s argument of the same name). ``is_causal`` (a bool) also
        blocks every key after its query (top-left aligned, as in PyTorch; with ``past``,
        the queries are the last positions). A query whose keys are all masked gets zero
        weights and a zero output from every head (PyTorch's modules give NaN there), so the
        module's output for it is ``out_proj.bias``. ``Tk = 0`` with ``Tq > 0`` is refused;
        ``Tq = Tk = 0`` gives an empty output.

        ``past`` is a KV cache: a ``(k, v)`` pair, each ``(B, g, T_past, dk)``, of earlier
        positions (the masks then cover ``T_past + Tk`` keys), or a function
        ``(k_new, v_new) -> (k, v)`` that stores the new keys and values and returns every
        position's (the caches of :mod:`course_utils.model.kv_cache`). ``return_kv=True`` also
        returns the keys and values attended over.

        The weights are computed step by step when they are wanted (``need_weights=True``,
        or a hook at ``hook_pattern``); otherwise :meth:`fast_attention` gives the same heads
        from a fused kernel (PyTorch's, or :attr:`decode_kernel` for a decoding step), up to
        float rounding.

        NaN or infinity in ``query``, ``key`` or ``value`` is not refused: it spreads, and an
        all-NaN output is what it looks like; but a query whose every score is NaN (NaN in it,
        or in every key it may attend to) can come back as zero heads from the fast branch over
        fewer than 16 keys (see the module docstring). Checking costs one
        pass over the inputs on every call: ``check_finite(query)`` measured 10-11% of a forward
        at lesson 04's sizes ((2, 64, 128), 8 heads; (1, 5, 16), 2 heads) and 9.5% of a decoding
        step on one CPU thread, and on a GPU it would wait for the device each call. To find
        such an input, call :func:`~course_utils.attention.validation.check_finite` on it.

        Returns ``(output (B, Tq, d), weights (B, h, Tq, Tk) or None)``, then ``(k, v)``
        when ``return_kv``.
        """
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, is_causal, need_weights, past, return_kv)
        B, Tq, _ = query.shape
        h, g, dk = self.num_heads, self.num_kv_heads, self.d_k
        q, k, v = self.project_qkv(query, key, value)  # project, split: q (B, h, Tq, dk); k, v (B, g, Tk, dk)
        q, k, v = self.hook_q(q), self.hook_k(k), self.hook_v(v)
        if past is not None and callable(past):  # a cache's append: it returns every position's k, v
            k, v = check_kv_pair(past(k, v), "past(k, v)'s result", batch=B, num_kv_heads=g, d_k=dk,
                                 weight=self._weight(), length="T")
        elif past is not None:  # the earlier positions' keys and values come first
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        T = k.shape[2]  # every key, cached ones included
        allowed, causal_only = self._allowed(mask, key_padding_mask, is_causal, B, Tq, T, past is not None)
        if not (need_weights or self.hook_pattern.has_hooks):  # nobody reads the weights: fused kernel
            z, weights = self.fast_attention(q, k, v, allowed, causal_only), None
        else:  # step by step; the h/g query heads that share one K/V head meet it as one matrix
            rows = h // g * Tq  # g = h: each head's Tq queries
            scores = (q.reshape(B, g, rows, dk) @ k.transpose(-2, -1)).view(B, h, Tq, T) / math.sqrt(dk)
            weights = self.hook_pattern(masked_softmax(scores, allowed))  # (B, h, Tq, T), rows sum to 1
            dropped = F.dropout(weights, self.dropout) if self.training and self.dropout > 0 else weights
            z = (dropped.view(B, g, rows, T) @ v).view(B, h, Tq, dk)  # weights @ V: (B, h, Tq, dk)
        z = self.hook_z(z)  # each head's output
        out = self.out_proj(self.merge_heads(z))  # merge the heads, W_O: (B, Tq, d)
        return (out, weights if need_weights else None, *([(k, v)] if return_kv else []))

    def fast_attention(self, q: Tensor, k: Tensor, v: Tensor, allowed: Tensor | None,
                       causal_only: bool) -> Tensor:
        """The fast branch of :meth:`forward`: scores, mask, softmax and ``@ V`` in one fused
        kernel that never stores the ``(Tq, Tk)`` weights; returns the heads ``(B, h, Tq, dk)``,
        the step-by-step branch's numbers up to float rounding. Two kernels:

        * a decoding step (one query per sequence, no mask: it may read every cached key) goes
          to :attr:`decode_kernel` when one is set, e.g.
          :func:`~course_utils.attention.fused_decode.fused_decode_attention`, the C kernel of
          lesson 07 (float32 on the CPU, head width 64, no gradients: it says so if not);
        * everything else goes to ``F.scaled_dot_product_attention``; ``causal_only`` (no other
          mask, no cache) lets it skip the blocked keys itself.

        ``q`` ``(B, h, Tq, dk)`` and ``k``, ``v`` ``(B, g, Tk, dk)`` are the projected heads,
        ``allowed`` None or a bool mask fitting ``(B, h, Tq, Tk)`` (``True`` = may attend) and
        ``causal_only`` a bool: checked by shape (no tensor operation), as forward hands them."""
        check_fast_attention_inputs(q, k, v, allowed, causal_only, num_heads=self.num_heads,
                                    num_kv_heads=self.num_kv_heads, d_k=self.d_k)
        if self.decode_kernel is not None and q.shape[2] == 1 and allowed is None:
            if not callable(self.decode_kernel):
                raise TypeError(f"decode_kernel must be None or a function (q, k, v) -> heads, like "
                                f"fused_decode_attention, got {type(self.decode_kernel).__name__}")
            return self.decode_kernel(q, k, v)  # q (B, h, 1, dk); k, v (B, g, T, dk) -> (B, h, 1, dk)
        p = self.dropout if self.training else 0.0
        if causal_only:
            allowed = None  # the kernel applies the causal mask itself
        z = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, dropout_p=p, is_causal=causal_only,
                                           enable_gqa=self.num_kv_heads != self.num_heads)
        if allowed is not None:  # rows with nothing to attend to: zeros, as masked_softmax gives
            z = z.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
        return z

    def _allowed(self, mask: Tensor | None, key_padding_mask: Tensor | None, is_causal: bool,
                 B: int, Tq: int, T: int, cached: bool) -> tuple[Tensor | None, bool]:
        """The masks as one bool ``(B|1, h|1, Tq, T)`` (``True`` = may attend) or ``None``, and
        whether that is the plain causal mask alone (no other mask, no cache). With a cache of
        ``T - Tq`` earlier positions, query ``i`` sits at position ``T - Tq + i``."""
        allowed = None
        if mask is not None or key_padding_mask is not None:
            allowed = combine_masks(mask, key_padding_mask, batch=B, num_heads=self.num_heads,
                                    num_queries=Tq, num_keys=T, device=self._weight().device)
        causal_only = is_causal and allowed is None and not cached
        if is_causal and Tq > 0 and not (cached and Tq == 1):  # one query after the cache sees every key
            causal = causal_mask(Tq, T, query_offset=T - Tq if cached else 0, device=self._weight().device)
            allowed = causal[None, None] if allowed is None else allowed & causal
        return allowed, causal_only

    # -- input checks (the rules are in course_utils.attention.validation) ------------------
    def _check_inputs(self, query: Tensor, key: Tensor, value: Tensor, is_causal: object,
                      need_weights: object, past: object, return_kv: object) -> None:
        self._check_setup()
        check_mha_inputs(query, key, value, d_model=self.d_model, weight=self._weight(),
                         is_causal=is_causal, need_weights=need_weights)
        check_flag(return_kv, "return_kv")
        check_attention_extras(past, batch=query.shape[0], num_kv_heads=self.num_kv_heads,
                               d_k=self.d_k, weight=self._weight())

    def _check_setup(self) -> None:
        """What a subclass's ``__init__`` must set for :meth:`forward` (see the class docstring):
        a TypeError naming what is missing, not an AttributeError from inside torch. Cheap: each
        name is looked up in the instance's dicts first."""
        missing = [name for name in _SETUP if name not in self.__dict__ and name not in self._modules
                   and not hasattr(self, name)]
        if missing:
            raise TypeError(f"{type(self).__name__} is a MultiHeadAttentionBase without its setup: "
                            f"missing {', '.join(missing)}. A subclass's __init__ calls "
                            f"super().__init__(), sets d_model, num_heads, num_kv_heads, d_k, dropout "
                            f"and out_proj, then self._add_hook_points(); it defines project_qkv")

    def _check_projection_inputs(self, query: object, key: object, value: object) -> None:
        """What :meth:`project_qkv` needs, checked as :meth:`forward` checks it (called directly,
        it has not passed :meth:`forward`'s checks): ``(B, T, d_model)`` float tensors of the
        module's dtype and device, one B, key and value of one length."""
        check_mha_tensors(query, key, value, d_model=self.d_model, weight=self._weight())

    def _weight(self) -> Tensor:
        """A parameter whose dtype and device the inputs must match."""
        return self.out_proj.weight


def _refusing_meta_heads(merge_heads: Callable[[MultiHeadAttentionBase, Tensor], Tensor]):
    """``merge_heads`` that also refuses meta heads given to a layer whose weights hold values (a
    meta-built layer merges them: it computes shapes). Kept out of the method, whose source lesson
    04 prints: ``inspect.getsource`` follows ``__wrapped__`` to the method as written."""
    @functools.wraps(merge_heads)
    def merge_heads_checked(self: MultiHeadAttentionBase, heads: Tensor) -> Tensor:
        if isinstance(heads, Tensor) and heads.is_meta and not self._weight().is_meta:
            check_holds_values(heads, "heads")
        return merge_heads(self, heads)
    return merge_heads_checked


MultiHeadAttentionBase.merge_heads = _refusing_meta_heads(MultiHeadAttentionBase.merge_heads)


class MultiHeadAttention(MultiHeadAttentionBase):
    """Batched multi-head attention, batch-first, masks with ``True`` = may attend.

    All heads are computed at once: one projection for Q, K and V, a ``view`` that
    splits d_model into ``h`` heads of width ``dk``, a ``transpose`` that moves heads
    next to the batch, attention, then the reverse and the output projection W_O.

    Non-finite inputs: NaN or infinity in ``query``, ``key`` or ``value`` is not checked (a
    check is one more pass over the data on every call; shapes, dtypes and devices are
    checked) and propagates to NaN in the output as the module docstring describes. The
    scores and hooks of :mod:`course_utils.interp` refuse NaN where they read it.

    Args:
        d_model: width of every token vector; must be divisible by ``num_heads``.
        num_heads: number of heads h; each head has width ``d_k = d_model // num_heads``.
        bias: give the Q/K/V and output projections a bias (as ``nn.MultiheadAttention``).
        dropout: a float in [0, 1): dropout on the attention weights, in training mode only.

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
        d_model, num_heads = int(d_model), int(num_heads)  # NumPy ints too: torch's split needs ints
        check_flag(bias, "bias")
        check_linear_weights_fit(d_model, (3 * d_model, d_model))  # before nn.Linear allocates
        self.d_model = d_model
        self.num_heads = num_heads
        self.num_kv_heads = num_heads  # every query head has its own K/V head
        self.d_k = d_model // num_heads
        self.dropout = check_dropout(dropout, "dropout")
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # W_Q | W_K | W_V
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W_O
        self._add_hook_points()
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        nn.init.xavier_uniform_(self.in_proj.weight)
        nn.init.xavier_uniform_(self.out_proj.weight)
        if self.in_proj.bias is not None:
            nn.init.zeros_(self.in_proj.bias)
            nn.init.zeros_(self.out_proj.bias)

    # -- the computation ----------------------------------------------------------
    def project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, ...]:
        """Project and split into heads: each output is ``(B, h, T, dk)``."""
        self._check_projection_inputs(query, key, value)  # (B, T, d_model), the module's dtype
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

    def _weight(self) -> Tensor:
        """A parameter whose dtype and device the inputs must match."""
        return self.in_proj.weight

    def _check_setup(self) -> None:
        """The base's check, and the projections' sizes (a few attribute reads): a size or layer
        changed after construction is named by :meth:`_check_projections` before the forward pass,
        not met as torch's "shape '[1, 3, 4, 4]' is invalid" inside it (battery 27)."""
        super()._check_setup()
        d, in_proj, out_proj = self.d_model, self.in_proj, self.out_proj
        if not (isinstance(in_proj, nn.Linear) and isinstance(out_proj, nn.Linear)
                and in_proj.weight.shape == (3 * d, d) and out_proj.weight.shape == (d, d)
                and self.num_heads * self.d_k == d):
            self._check_projections("forward")

    def _check_projections(self, caller: str) -> None:
        """What ``caller`` (a method or function that copies this module's weights) reads is still
        what the constructor built: ``d_model``, ``num_heads`` and ``d_k`` agree, ``in_proj`` is an
        ``nn.Linear(d_model, 3*d_model)`` and ``out_proj`` an ``nn.Linear(d_model, d_model)``, both
        with a bias or neither, all on one dtype and device, and ``dropout`` is in [0, 1). An
        attribute replaced or changed since is named (``MultiHeadAttention.in_proj``) rather than
        failing inside torch's ``copy_`` as a size mismatch."""
        label = type(self).__name__
        d = check_int(self.d_model, f"{label}.d_model", minimum=1)
        check_int(self.num_heads, f"{label}.num_heads", minimum=1)
        dk = check_head_dims(d, self.num_heads, heads_name=f"{label}.num_heads")
        if self.d_k != dk:
            raise ValueError(f"{label}.d_model, .num_heads and .d_k must agree (d_k = d_model // num_heads), "
                             f"got d_model={d}, num_heads={self.num_heads}, d_k={shown(self.d_k)}: was one "
                             f"changed after construction?")
        check_dropout(self.dropout, f"{label}.dropout")
        why = f"{caller} {'reads' if caller == 'forward' else 'copies'} it"
        check_linear_layer(self.in_proj, f"{label}.in_proj", d, 3 * d, why=why)
        check_linear_layer(self.out_proj, f"{label}.out_proj", d, d, bias=self.in_proj.bias is not None,
                           why=why)
        check_same_dtype_and_device({f"{label}.{name}": p for name, p in self.named_parameters()
                                     if name.split(".")[0] in ("in_proj", "out_proj")})

    # -- conversion to and from PyTorch -------------------------------------------
    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy an ``nn.MultiheadAttention(batch_first=True)``'s weights into a new module.

        The copy computes what ``module`` computes: its weights, biases, ``dropout`` and its
        train/eval mode are carried over. A setting this class has no counterpart for is
        refused, naming it, rather than dropped: ``batch_first=False``, ``kdim``/``vdim`` other
        than ``embed_dim``, ``add_bias_kv=True`` and ``add_zero_attn=True`` (an extra key and
        value of zeros that every query may attend to)."""
        _check_torch_module(module)
        bias = module.in_proj_bias is not None
        ours = cls(module.embed_dim, module.num_heads, bias=bias, dropout=module.dropout)
        ours = ours.to(device=module.in_proj_weight.device, dtype=module.in_proj_weight.dtype)
        ours.train(module.training)  # dropout > 0 acts in training mode only: the same mode as module
        with torch.no_grad():
            ours.in_proj.weight.copy_(module.in_proj_weight)
            ours.out_proj.weight.copy_(module.out_proj.weight)
            if bias:
                ours.in_proj.bias.copy_(module.in_proj_bias)
                ours.out_proj.bias.copy_(module.out_proj.bias)
        return ours

    def to_torch(self) -> nn.MultiheadAttention:
        """A new ``nn.MultiheadAttention(batch_first=True)`` with these weights, ``dropout`` and
        train/eval mode. The module's sizes and projections are checked first (see
        :meth:`_check_projections`): one replaced after construction is named, not copied."""
        self._check_projections("to_torch")
        bias = self.in_proj.bias is not None
        w = self.in_proj.weight
        theirs = nn.MultiheadAttention(
            self.d_model, self.num_heads, dropout=self.dropout, bias=bias, batch_first=True
        ).to(device=w.device, dtype=w.dtype)
        theirs.train(self.training)  # dropout > 0 acts in training mode only: the same mode as self
        with torch.no_grad():
            theirs.in_proj_weight.copy_(self.in_proj.weight)
            theirs.out_proj.weight.copy_(self.out_proj.weight)
            if bias:
                theirs.in_proj_bias.copy_(self.in_proj.bias)
                theirs.out_proj.bias.copy_(self.out_proj.bias)
        return theirs

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, num_heads={self.num_heads}, d_k={self.d_k}"


def _check_torch_module(module: object) -> None:
    """``module`` is an ``nn.MultiheadAttention`` whose every setting :class:`MultiHeadAttention`
    can reproduce (what :meth:`MultiHeadAttention.from_torch` copies); otherwise an error naming
    the setting, what it has and what the course's module supports."""
    if not isinstance(module, nn.MultiheadAttention):
        raise TypeError(f"module must be an nn.MultiheadAttention, got {type(module).__name__}")
    if not module.batch_first:
        raise ValueError("from_torch expects nn.MultiheadAttention(batch_first=True), got batch_first=False "
                         "(the course's module is batch-first)")
    if not module._qkv_same_embed_dim or module.in_proj_weight is None:
        raise ValueError(f"from_torch needs kdim == vdim == embed_dim (one in_proj_weight), got "
                         f"kdim={module.kdim}, vdim={module.vdim}, embed_dim={module.embed_dim}")
    if module.bias_k is not None or module.bias_v is not None:
        raise ValueError("from_torch does not support add_bias_kv=True (a learned extra key and value: "
                         "the course's module has none), got add_bias_kv=True")
    if module.add_zero_attn:
        raise ValueError("from_torch does not support add_zero_attn=True (an extra key and value of zeros "
                         "every query attends to: the course's module has none, so its outputs would "
                         "differ), got add_zero_attn=True")
