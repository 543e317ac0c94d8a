"""Grouped-query attention (GQA) and multi-query attention (MQA), without copying K/V.

``h`` query heads share ``g`` key/value heads: query head ``i`` reads key/value head
``i // (h // g)`` (PyTorch's ``enable_gqa`` convention, "blocked" grouping: heads
0..h/g-1 form group 0). ``g == h`` is ordinary multi-head attention, ``g == 1`` is MQA.

The no-copy trick: the ``h/g`` query heads of one group all meet the *same* keys, so
their query rows can be stacked into one taller matrix and multiplied by that group's
keys in a single matmul. With ``q`` ``(B, h, Tq, dk)`` viewed as ``(B, g, h/g * Tq, dk)``
the scores are ``q @ k^T`` with ``k`` ``(B, g, Tk, dk)``: each K/V head is read once,
never repeated ``h/g`` times.

Shapes: B batch, h query heads, g key/value heads, Tq/Tk query/key lengths, dk head width.

Inputs are checked as in :mod:`course_utils.attention.mha` (floating point, one dtype, one
device, a real bool for ``is_causal``), but NaN or infinity is not refused (checking would
cost a pass over the data), and it spreads: a NaN in ``q`` makes that query's weights and
output NaN in its own head only (zeros if all its keys are blocked); a NaN in a key makes
the weights and output NaN for every query, of every head in that key's group, that may
attend to that key; a NaN in a value reaches the output of every query of every head in
its group, masked or not (a blocked key gets weight 0, and 0 x NaN is NaN). One exception,
as in :mod:`course_utils.attention.mha`: where *every* score of a query's head is NaN (a NaN
or infinity in the query, or every key it may attend to NaN), the step-by-step path
(``need_weights=True``) gives NaN, but the default path (PyTorch's fused kernel,
``need_weights=False``) returns zeros for that head over a short key sequence (fewer than 16
keys in torch 2.13) and NaN over a longer one, so the output can look finite; run with
``need_weights=True`` or check the input with ``torch.isfinite`` to find such an input. A key scoring
``+inf`` makes NaN of the weights and outputs of every query that may attend to it
(``inf - inf``), as in PyTorch for keys the mask allows; a key scoring ``-inf`` gets
weight 0, and a query whose every score is ``-inf`` (all its keys blocked, or ``-inf`` in
the data, e.g. a whole group of cached keys at ``-inf``) gets zero weights and a zero
output, as ``F.scaled_dot_product_attention`` and the fused kernel give.
An infinite value (``-inf`` or ``+inf`` in ``v``) makes that channel of the output infinite
for every query that gives it a weight above 0, and NaN where the weight is exactly 0 (a
blocked key, a query with nothing to attend to, or a weight too small for float32: 0 x inf
is NaN); where a weight rounds to 0 differs between paths (PyTorch keeps weights down to
about e^-103, the fused kernel flushes below e^-87), so the same input can give -inf in one
path and NaN in another: treat an infinite cached value as spoiling its channel.
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import Tensor, nn

from .masks import causal_mask, masked_softmax
from .mha import MultiHeadAttention, MultiHeadAttentionBase
from .validation import (
    check_choice,
    check_config_fields,
    check_dropout,
    check_flag,
    check_generator,
    check_head_dims,
    check_int,
    check_keys_not_empty,
    check_kv_heads,
    check_linear_weights_fit,
    check_same_dtype_and_device,
    check_tensor,
    describe_shape,
)

__all__ = [
    "grouped_query_attention",
    "GroupedQueryAttention",
    "CONVERSION_METHODS",
    "kv_cache_bytes",
    "PublishedConfig",
    "PUBLISHED_CONFIGS",
]

#: How :meth:`GroupedQueryAttention.from_multi_head` builds a shared K/V head; any other ``method``
#: is refused by validation.check_choice (a TypeError for a value that is no str, a ValueError for
#: another str).
CONVERSION_METHODS = ("mean", "first", "random")


def kv_cache_bytes(num_layers: int, batch: int, num_kv_heads: int, d_head: int, seq_len: int,
                   bytes_per_element: int = 2) -> int:
    """Bytes a KV cache holds: ``2 (K and V) * layers * batch * g * dk * T * bytes``, as a Python
    ``int`` (exact however large: NumPy integers are converted first, so their product cannot
    wrap around). This function does not know the model's query heads, so it cannot tell
    whether ``num_kv_heads`` divides them: build a :class:`PublishedConfig` (which checks it)
    and pass its fields."""
    values = [check_int(value, name, minimum=1) for name, value in (
        ("num_layers", num_layers), ("batch", batch), ("num_kv_heads", num_kv_heads),
        ("d_head", d_head), ("seq_len", seq_len), ("bytes_per_element", bytes_per_element))]
    return 2 * math.prod(values)


@dataclasses.dataclass(frozen=True)
class PublishedConfig:
    """The attention shape of a released model, with where it was read. Checked when built:
    ``name`` and ``source`` are non-empty strs, the counts positive ints (stored as Python ints), and
    ``num_kv_heads`` divides ``num_heads`` (each K/V head serves ``h / g`` query heads)."""

    name: str
    num_layers: int
    num_heads: int
    num_kv_heads: int
    d_head: int
    source: str

    def __post_init__(self) -> None:
        check_config_fields(self, ("name", "source"), {"num_layers": 1, "num_heads": 1, "d_head": 1})
        object.__setattr__(self, "num_kv_heads", check_kv_heads(self.num_kv_heads, self.num_heads,
                                                                "PublishedConfig.num_kv_heads"))


# Read from each model's config.json (num_hidden_layers, num_attention_heads,
# num_key_value_heads, hidden_size / num_attention_heads); checked against copies of the
# same files, which carry "_name_or_path": "meta-llama/...".
PUBLISHED_CONFIGS = (
    PublishedConfig("Llama-2-7B (MHA)", 32, 32, 32, 128,
                    "huggingface.co/meta-llama/Llama-2-7b-hf, file config.json"),
    PublishedConfig("Llama-3-8B (GQA)", 32, 32, 8, 128,
                    "huggingface.co/meta-llama/Meta-Llama-3-8B, file config.json"),
    PublishedConfig("Llama-3-70B (GQA)", 80, 64, 8, 128,
                    "huggingface.co/meta-llama/Meta-Llama-3-70B, file config.json"),
)


def _check_gqa_inputs(q: object, k: object, v: object, mask: object) -> None:
    """The shape rules (shared with :mod:`course_utils.attention.fused_decode`): floating-point 4-D
    tensors, k and v alike, the same B and dk > 0, g dividing h; a mask that fits and sits
    on q's device. Dtypes and devices of q, k, v: :func:`_check_gqa_call`."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, name, ndim=4, layout="(B, heads, T, dk)")
    if k.shape != v.shape:
        raise ValueError(f"k and v must have the same shape (B, g, Tk, dk), got k {describe_shape(k)}, "
                         f"v {describe_shape(v)}")
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"q and k must share the batch size B, got q {describe_shape(q)}, "
                         f"k {describe_shape(k)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same head width dk, got q {describe_shape(q)}, "
                         f"k {describe_shape(k)}")
    if q.shape[-1] == 0:
        raise ValueError(f"q and k have head width dk = 0 (q {describe_shape(q)}): attention needs "
                         "dk >= 1 (the scores are divided by sqrt(dk))")
    h, g = q.shape[1], k.shape[1]
    if g == 0 or h % g != 0:
        raise ValueError(f"the {g} key/value heads of k must divide the {h} query heads of q "
                         f"(expected g in {[d for d in range(1, h + 1) if h % d == 0]}), "
                         f"got q {describe_shape(q)}, k {describe_shape(k)}")
    if mask is not None:
        if not isinstance(mask, Tensor) or mask.dtype != torch.bool:
            got = mask.dtype if isinstance(mask, Tensor) else type(mask).__name__
            raise TypeError(f"mask must be a bool tensor (True = may attend), got {got}")
        Tq, Tk = q.shape[2], k.shape[2]
        ok = 2 <= mask.ndim <= 4 and tuple(mask.shape[-2:]) == (Tq, Tk)
        if ok and mask.ndim >= 3:
            ok = mask.shape[-3] in (1, h) and (mask.ndim == 3 or mask.shape[0] in (1, q.shape[0]))
        if not ok:
            raise ValueError(f"mask must be (Tq, Tk) = {(Tq, Tk)}, (h|1, Tq, Tk) or "
                             f"(B|1, h|1, Tq, Tk) with B={q.shape[0]}, h={h}; got {describe_shape(mask)}")
        check_same_dtype_and_device({"q": q, "k": k, "v": v})  # so a mask is compared with one device
        if mask.device != q.device:
            raise ValueError(f"mask is on device {mask.device} but the attention inputs are on "
                             f"{q.device}: move it with mask.to({str(q.device)!r})")


def _check_gqa_call(q: Tensor, k: Tensor, v: Tensor, is_causal: object) -> None:
    """What :func:`grouped_query_attention` needs beyond the shapes: one dtype and one device
    (a meta tensor holds no numbers: mixed with real ones it would give uninitialised memory),
    a key for every query, a real bool."""
    check_same_dtype_and_device({"q": q, "k": k, "v": v})
    check_keys_not_empty(q.shape[2], k.shape[2], "k")
    check_flag(is_causal, "is_causal")


def grouped_query_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    is_causal: bool = False,
) -> tuple[Tensor, Tensor]:
    """Attention of ``h`` query heads over ``g`` shared key/value heads, no K/V copies.

    Args:
        q: ``(B, h, Tq, dk)``; k, v: ``(B, g, Tk, dk)`` with ``h % g == 0``. Query head
            ``i`` uses key/value head ``i // (h // g)``.
        mask: bool, ``True`` = may attend: ``(Tq, Tk)``, ``(h|1, Tq, Tk)`` or
            ``(B|1, h|1, Tq, Tk)``.
        is_causal: also block keys after each query (top-left aligned, as in PyTorch);
            must be a real bool.

    q, k and v must be floating point, of one dtype, on one device (the mask too).

    Returns:
        ``(output (B, h, Tq, dk), weights (B, h, Tq, Tk))``, equal to
        ``F.scaled_dot_product_attention(q, k, v, enable_gqa=True)`` up to rounding for
        finite inputs (with NaN or ``+inf`` the rules of the module docstring hold; torch
        2.13 differs there: it reads the scores of blocked keys, and returns 0 for a row whose
        largest score is NaN). A query
        whose keys are all blocked, or whose every score is ``-inf``, gets zero weights and
        a zero output (as PyTorch gives). NaN/inf in q, k or v are not refused: they spread
        (see the module docstring; NaN in q stays in its query).
    """
    _check_gqa_inputs(q, k, v, mask)
    _check_gqa_call(q, k, v, is_causal)
    B, h, Tq, dk = q.shape
    g, Tk = k.shape[1], k.shape[2]
    per_group = h // g
    # Heads of one group are adjacent (blocked grouping), so each group's h/g query heads
    # become h/g * Tq rows of one matrix; (B, g) fold into one batch dim. All views when
    # q, k and v are contiguous (a KV cache is): K and V are read in place, once.
    q_rows = q.reshape(B * g, per_group * Tq, dk) * (1.0 / math.sqrt(dk))  # (B*g, h/g*Tq, dk)
    keys = k.reshape(B * g, Tk, dk)  # (B*g, Tk, dk)
    values = v.reshape(B * g, Tk, dk)  # (B*g, Tk, dk)
    # One matmul per group, written K @ q_rows^T: with the long Tk side as the matmul's rows,
    # MKL streams K instead of repacking it for a few query rows (about 1.3x faster on K
    # in the decode benchmark). The transposed (B*g, h/g*Tq, Tk) result is small: made
    # contiguous so that the softmax runs along contiguous rows.
    scores = torch.bmm(keys, q_rows.transpose(1, 2)).transpose(1, 2).contiguous()  # (B*g, h/g*Tq, Tk)
    allowed = None
    if mask is not None:
        allowed = mask
    if is_causal:
        causal = causal_mask(Tq, Tk, device=q.device)  # (Tq, Tk)
        allowed = causal if allowed is None else allowed & causal
    if allowed is not None:
        while allowed.ndim < 4:
            allowed = allowed.unsqueeze(0)
        allowed = allowed.expand(B, h, Tq, Tk).reshape(B * g, per_group * Tq, Tk)
    weights = masked_softmax(scores, allowed)  # (B*g, h/g*Tq, Tk)
    out = torch.bmm(weights, values)  # (B*g, h/g*Tq, dk): each V head read once per group
    return out.view(B, h, Tq, dk), weights.view(B, h, Tq, Tk)


class GroupedQueryAttention(MultiHeadAttentionBase):
    """Multi-head attention whose ``num_heads`` query heads share ``num_kv_heads`` K/V heads.

    Batch-first, with the forward arguments of :class:`~course_utils.MultiHeadAttention`.
    ``num_kv_heads == num_heads`` is MHA, ``num_kv_heads == 1`` is MQA. Parameters:
    ``q_proj`` ``d -> d``, ``k_proj`` and ``v_proj`` ``d -> num_kv_heads * dk``,
    ``out_proj`` ``d -> d`` (rows ``j*dk:(j+1)*dk`` of ``k_proj.weight`` belong to K/V head j).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        num_kv_heads: int,
        *,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        check_head_dims(d_model, num_heads)
        check_kv_heads(num_kv_heads, num_heads)
        d_model, num_heads, num_kv_heads = int(d_model), int(num_heads), int(num_kv_heads)  # NumPy ints too
        dropout = check_dropout(dropout, "dropout")
        check_flag(bias, "bias")
        self.d_model, self.num_heads, self.num_kv_heads = d_model, num_heads, num_kv_heads
        self.d_k = d_model // num_heads
        self.dropout = dropout
        kv_width = num_kv_heads * self.d_k
        check_linear_weights_fit(d_model, (d_model, kv_width, kv_width, d_model))  # before allocating
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.v_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self._add_hook_points()

    # -- the computation: the forward itself is MultiHeadAttentionBase.forward --------
    def project_qkv(self, query: Tensor, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``q`` ``(B, h, Tq, dk)``, ``k`` and ``v`` ``(B, g, Tk, dk)`` from ``(B, T, d_model)``
        inputs (checked: a wrong width is named here, not by a matmul error)."""
        self._check_projection_inputs(query, key, value)
        B, Tq, _ = query.shape
        Tk = key.shape[1]
        q = self.q_proj(query).view(B, Tq, self.num_heads, self.d_k).transpose(1, 2)
        k = self.k_proj(key).view(B, Tk, self.num_kv_heads, self.d_k).transpose(1, 2)
        v = self.v_proj(value).view(B, Tk, self.num_kv_heads, self.d_k).transpose(1, 2)
        return q, k, v

    def _weight(self) -> Tensor:
        return self.q_proj.weight

    @classmethod
    def from_multi_head(
        cls,
        mha: MultiHeadAttention,
        num_kv_heads: int,
        method: str = "mean",
        *,
        generator: torch.Generator | None = None,
    ) -> GroupedQueryAttention:
        """Convert a trained :class:`~course_utils.MultiHeadAttention` (Ainslie et al., 2023).

        Q and output projections are copied. The K (and V) projection of group ``j``,
        which serves query heads ``j*h/g .. (j+1)*h/g - 1``, is built by ``method``:
        ``"mean"`` averages those heads' K (V) projection rows and biases, ``"first"``
        keeps the group's first head, ``"random"`` draws a fresh init (from ``generator``).
        With ``num_kv_heads == num_heads`` every method but ``"random"`` reproduces ``mha``.

        ``generator`` (None or a ``torch.Generator``) is read by ``"random"`` only; ``"mean"``
        and ``"first"`` draw nothing and leave it untouched. It is accepted with them rather
        than refused so that one call can serve every method:
        :func:`~course_utils.model.transformer.convert_model` passes its seeded generator
        whatever the method.
        """
        if not isinstance(mha, MultiHeadAttention):
            raise TypeError(f"mha must be a course_utils MultiHeadAttention, got {type(mha).__name__}")
        method = check_choice(method, "method", CONVERSION_METHODS)
        num_kv_heads = check_int(num_kv_heads, "num_kv_heads", minimum=1)
        check_generator(generator, "generator")
        mha._check_projections("from_multi_head")  # a layer replaced since mha was built is named
        bias = mha.in_proj.bias is not None
        gqa = cls(mha.d_model, mha.num_heads, num_kv_heads, bias=bias, dropout=mha.dropout)
        w = mha.in_proj.weight
        gqa = gqa.to(device=w.device, dtype=w.dtype)
        d, h, g, dk = mha.d_model, mha.num_heads, num_kv_heads, mha.d_k
        w_q, w_k, w_v = w.detach().split(d, dim=0)  # (d, d) each; rows i*dk:(i+1)*dk = head i
        b_q = b_k = b_v = None
        if bias:
            b_q, b_k, b_v = mha.in_proj.bias.detach().split(d)

        def group(weight: Tensor) -> Tensor:
            per_head = weight.reshape(g, h // g, dk, *weight.shape[1:])  # (g, h/g, dk[, d])
            return per_head.mean(1) if method == "mean" else per_head[:, 0]

        with torch.no_grad():
            gqa.q_proj.weight.copy_(w_q)
            gqa.out_proj.weight.copy_(mha.out_proj.weight)
            if bias:
                gqa.q_proj.bias.copy_(b_q)
                gqa.out_proj.bias.copy_(mha.out_proj.bias)
            for proj, weight, b in ((gqa.k_proj, w_k, b_k), (gqa.v_proj, w_v, b_v)):
                if method == "random":
                    bound = 1.0 / math.sqrt(d)  # nn.Linear's default init range
                    new_w = torch.rand(proj.weight.shape, generator=generator) * 2 - 1
                    proj.weight.copy_(new_w * bound)
                    if bias:
                        proj.bias.zero_()
                else:
                    proj.weight.copy_(group(weight).reshape(g * dk, d))
                    if bias:
                        proj.bias.copy_(group(b).reshape(g * dk))
        return gqa

    def extra_repr(self) -> str:
        return (f"d_model={self.d_model}, num_heads={self.num_heads}, "
                f"num_kv_heads={self.num_kv_heads}, d_k={self.d_k}")

