"""Inside the model: what each head writes, and what that does to the logits (lesson 05).

Role scores (:mod:`course_utils.interp.scores`) read attention weights only. These tools open
the residual stream of a TinyTransformer: :func:`trace_heads` records every head's output
(through its slice of ``W_O``) and the stream after each layer; :func:`direct_logit_attribution`
pushes each head's output through the final LayerNorm (scale frozen) and the unembedding;
:func:`ov_copying_score` asks whether a head's OV circuit copies tokens; :func:`next_token_loss`
and :func:`in_context_mass` score the predictions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..attention.masks import causal_mask

__all__ = ["HeadTrace", "trace_heads", "head_output_norms", "frozen_final_norm", "direct_logit_attribution",
           "ov_copying_score", "next_token_loss", "in_context_mass"]

HeadKey = tuple[int, int]


@dataclass
class HeadTrace:
    """One forward pass, opened up (B batch, T positions, h heads, d = d_model, V vocabulary).

    ``logits`` ``(B, T, V)``; ``attention[l]`` ``(B, h, T, T)`` (empty if not kept); ``head_outputs[l]``
    ``(B, h, T, d)``: what head ``h`` of layer ``l`` adds to the residual stream (its slice of
    W_O applied to its output; the shared W_O bias is left out); ``residual[l]`` ``(B, T, d)``:
    the stream entering layer ``l``, and ``residual[L]`` the one entering the final LayerNorm.
    """

    logits: torch.Tensor
    attention: list[torch.Tensor]
    head_outputs: list[torch.Tensor]
    residual: list[torch.Tensor]


def _check_head_keys(keys: object, num_layers: int, num_heads: int, what: str) -> list[HeadKey]:
    if not isinstance(keys, (list, tuple, set, dict)):
        raise TypeError(f"{what} must be a collection of (layer, head) pairs, got {type(keys).__name__}")
    checked = []
    for key in keys:
        if (not isinstance(key, tuple) or len(key) != 2
                or not all(isinstance(i, int) and not isinstance(i, bool) for i in key)):
            raise TypeError(f"{what} must hold (layer, head) pairs of ints, got {key!r}")
        if not (0 <= key[0] < num_layers and 0 <= key[1] < num_heads):
            raise ValueError(f"{what}: (layer, head) {key} is outside the model's "
                             f"{num_layers} layers x {num_heads} heads")
        checked.append(key)
    return checked


@torch.no_grad()
def trace_heads(model: torch.nn.Module, tokens: torch.Tensor, *,
                replace: dict[HeadKey, torch.Tensor | float] | None = None,
                keys_without: dict[int, Sequence[HeadKey]] | None = None,
                queries_without: dict[int, Sequence[HeadKey]] | None = None,
                keep_attention: bool = True) -> HeadTrace:
    """Run a :class:`~course_utils.model.TinyTransformer` step by step and keep each head's output.

    ``replace`` maps ``(layer, head)`` to what that head writes instead of its output: ``0.0``
    (zero ablation), or a tensor broadcastable to ``(B, T, d)``, such as the head's mean output
    over a batch (mean ablation). ``keys_without`` maps a layer to earlier heads whose outputs
    are taken out of the stream *used for that layer's keys only* (queries and values still see
    them): the test of K-composition. ``queries_without`` does the same for the queries.
    With no options the logits equal ``model(tokens)[0]``. ``keep_attention=False`` uses the
    fused attention kernel and leaves ``attention`` empty (faster, less memory).
    """
    from ..attention.mha import scaled_dot_product_attention  # local: scores imports no model code

    config = model.config
    L, h, d = config.num_layers, config.num_heads, config.d_model
    replace = dict(replace or {})
    _check_head_keys(list(replace), L, h, "replace")
    edits = {}
    for name, edit in (("keys", keys_without), ("queries", queries_without)):
        for layer, heads in (edit or {}).items():
            if not isinstance(layer, int) or not 0 <= layer < L:
                raise ValueError(f"{name}_without: layer must be an int in 0..{L - 1}, got {layer!r}")
            heads = _check_head_keys(list(heads), L, h, f"{name}_without[{layer}]")
            if any(source >= layer for source, _ in heads):
                raise ValueError(f"{name}_without[{layer}] may only name heads of earlier layers, "
                                 f"got {heads}")
            edits[name, layer] = heads
    model._check_tokens(tokens)
    x = model._embed(tokens, 0)  # (B, T, d)
    T = tokens.shape[1]
    allowed = causal_mask(T, T, device=tokens.device)  # (T, T)
    attention, head_outputs, residual = [], [], []
    for layer, block in enumerate(model.blocks):
        residual.append(x)
        attn = block.attn
        stream = {"queries": x, "keys": x}
        for name in stream:
            for source, head in edits.get((name, layer), []):
                stream[name] = stream[name] - head_outputs[source][:, head]
        normed = {name: block.ln_attn(s) for name, s in stream.items()}
        q, _, v = attn.project_qkv(normed["queries"], normed["queries"], block.ln_attn(x))
        _, k, _ = attn.project_qkv(normed["keys"], normed["keys"], normed["keys"])  # (B, h, T, dk)
        if keep_attention:
            heads, weights = scaled_dot_product_attention(q, k, v, mask=allowed)  # (B, h, T, dk)
            attention.append(weights)
        else:
            heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        w_o = attn.out_proj.weight.view(d, h, attn.d_k)  # (d, h, dk): head j's columns of W_O
        per_head = torch.einsum("bhtk,dhk->bhtd", heads, w_o)  # (B, h, T, d)
        for (source, head), value in replace.items():
            if source == layer:
                per_head[:, head] = torch.as_tensor(value, dtype=per_head.dtype).expand_as(per_head[:, head])
        bias = attn.out_proj.bias if attn.out_proj.bias is not None else 0.0
        x = x + per_head.sum(dim=1) + bias  # (B, T, d)
        if block.mlp is not None:
            x = x + block.mlp(block.ln_mlp(x))
        head_outputs.append(per_head)
    residual.append(x)
    logits = model.unembed(model.ln_final(x))  # (B, T, V)
    return HeadTrace(logits, attention, head_outputs, residual)


def head_output_norms(trace: HeadTrace) -> torch.Tensor:
    """``(L, B, h, T)``: the length of what each head writes at each position."""
    return torch.stack([out.norm(dim=-1) for out in trace.head_outputs])


def frozen_final_norm(model: torch.nn.Module, stream: torch.Tensor, component: torch.Tensor) -> torch.Tensor:
    """A part ``component`` ``(..., d)`` of the residual stream through the final LayerNorm with
    its scale frozen at the whole ``stream``'s (broadcast against ``component``):
    ``(c - mean(c)) / s * gamma``. Linear in ``c``, so the parts of a stream add up; ``beta`` is
    left out (a term of its own). Both lessons' direct logit attributions rest on this."""
    ln = model.ln_final
    scale = (stream.var(dim=-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
    return (component - component.mean(dim=-1, keepdim=True)) / scale * ln.weight


def _final_direction(model: torch.nn.Module, trace: HeadTrace, vectors: torch.Tensor) -> torch.Tensor:
    """Residual-stream vectors ``(..., B, T, d)`` through :func:`frozen_final_norm` (the real
    stream's scale) and the unembedding: ``(..., B, T, V)``."""
    return model.unembed(frozen_final_norm(model, trace.residual[-1], vectors))


@torch.no_grad()
def direct_logit_attribution(model: torch.nn.Module, trace: HeadTrace,
                             targets: torch.Tensor) -> torch.Tensor:
    """``(L, h, B, T)``: how much each head's output, on its own, raises the logit of
    ``targets`` ``(B, T)`` above the mean logit over the vocabulary.

    Direct path only (head -> final LayerNorm -> unembedding, the LayerNorm's scale frozen
    at its value on the real stream); a head acting through later layers is not counted.
    """
    if not isinstance(targets, torch.Tensor) or targets.shape != trace.logits.shape[:2]:
        raise ValueError(f"targets must be a (B, T) tensor of token ids = {tuple(trace.logits.shape[:2])}, "
                         f"got {getattr(targets, 'shape', type(targets).__name__)}")
    rows = []
    for per_head in trace.head_outputs:  # (B, h, T, d)
        logits = _final_direction(model, trace, per_head.transpose(0, 1))  # (h, B, T, V)
        target = logits.gather(-1, targets.clamp(min=0).expand_as(logits[..., 0])[..., None])[..., 0]
        rows.append(target - logits.mean(dim=-1))  # (h, B, T)
    return torch.stack(rows)


@torch.no_grad()
def ov_copying_score(model: torch.nn.Module, layer: int, token_ids: Sequence[int]) -> torch.Tensor:
    """``(h,)``: for each head of ``layer``, the share of tokens t (from ``token_ids``) that its
    OV circuit maps back to t: attending to a position holding only t's embedding, the head's
    output raises t's logit above every other token's.

    Weights only: embedding -> that layer's LayerNorm -> W_V, W_O of the head -> final
    LayerNorm's gain (centred, scale left out: it does not change a row's argmax) ->
    unembedding. Chance is ``1 / len(token_ids)``.
    """
    config = model.config
    if not isinstance(layer, int) or not 0 <= layer < config.num_layers:
        raise ValueError(f"layer must be an int in 0..{config.num_layers - 1}, got {layer!r}")
    ids = torch.as_tensor(list(token_ids), dtype=torch.long)
    if ids.ndim != 1 or ids.numel() < 2:
        raise ValueError(f"token_ids must list at least 2 token ids, got {list(token_ids)!r}")
    block = model.blocks[layer]
    attn, h, d = block.attn, config.num_heads, config.d_model
    embedded = block.ln_attn(model.token_embedding.weight[ids])[None]  # (1, n, d)
    _, _, v = attn.project_qkv(embedded, embedded, embedded)  # (1, h, n, dk)
    w_o = attn.out_proj.weight.view(d, h, attn.d_k)  # (d, h, dk)
    written = torch.einsum("hnk,dhk->hnd", v[0], w_o)  # (h, n, d)
    written = written - written.mean(dim=-1, keepdim=True)
    logits = model.unembed(written * model.ln_final.weight)[..., ids]  # (h, n, n): among token_ids
    return (logits.argmax(dim=-1) == torch.arange(len(ids))).double().mean(dim=-1)  # (h,)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, scored: torch.Tensor) -> float:
    """Mean cross-entropy of predicting ``tokens[:, t+1]`` from ``logits[:, t]`` over the
    positions t where ``scored`` ``(B, T)`` is True (the last position is never scored)."""
    if logits.ndim != 3 or logits.shape[:2] != tokens.shape or scored.shape != tokens.shape:
        raise ValueError(f"expected logits (B, T, V) and tokens, scored (B, T); got "
                         f"{tuple(logits.shape)}, {tuple(tokens.shape)}, {tuple(scored.shape)}")
    picked = scored[:, :-1]  # (B, T-1)
    per_position = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2).double(), tokens[:, 1:], reduction="none")  # (B, T-1)
    return float(per_position[picked].mean())


def in_context_mass(logits: torch.Tensor, tokens: torch.Tensor, scored: torch.Tensor, *,
                    ignore: int | None = 0) -> tuple[float, float]:
    """Probability the model puts on tokens already seen in the context (``ignore``, e.g. BOS,
    left out), averaged over ``scored`` positions; and what a uniform prediction over the
    vocabulary would put there (seen tokens / vocabulary size). Returns ``(model, uniform)``."""
    if logits.ndim != 3 or logits.shape[:2] != tokens.shape or scored.shape != tokens.shape:
        raise ValueError(f"expected logits (B, T, V) and tokens, scored (B, T); got "
                         f"{tuple(logits.shape)}, {tuple(tokens.shape)}, {tuple(scored.shape)}")
    V = logits.shape[-1]
    seen = torch.nn.functional.one_hot(tokens, V).cumsum(dim=1).clamp(max=1).bool()  # (B, T, V)
    if ignore is not None:
        seen[..., ignore] = False
    probs = logits.double().softmax(dim=-1)  # (B, T, V)
    mass = (probs * seen).sum(-1)[scored]  # (n,)
    uniform = seen.sum(-1)[scored].double() / V
    return float(mass.mean()), float(uniform.mean())
