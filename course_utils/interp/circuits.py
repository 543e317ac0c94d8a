"""Inside the model: what each head writes, and what that does to the logits (lesson 05).

Role scores (:mod:`course_utils.interp.scores`) read attention weights only. These tools open
the residual stream of a TinyTransformer: :func:`trace_heads` records every head's output
(through its slice of ``W_O``) and the stream after each layer; :func:`direct_logit_attribution`
pushes each head's output through the final LayerNorm (scale frozen) and the unembedding;
:func:`ov_copying_score` asks whether a head's OV circuit copies tokens; :func:`next_token_loss`
and :func:`in_context_mass` score the predictions.

:class:`HeadTrace` is the record :func:`trace_heads` fills; it checks its fields when built
(shapes against the logits', every number finite), so one built by hand is checked too.

Bad input: every list or dict the caller gives (heads, orders, cases, scores, ...) is read through
``items_of`` / ``dict_of``, so one whose ``len()``, iteration or lookup raises is a TypeError
naming the argument, its own error chained, before any tensor work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch

from ..attention.validation import (
    check_finite,
    check_flag,
    check_holds_values,
    check_index,
    check_int,
    check_not_inference,
    check_real,
    check_record,
    check_tensor,
    describe_shape,
    dict_of,
    freeze_fields,
    items_of,
    shown,
)
from ..model.transformer import ModelConfig, TinyTransformer

__all__ = ["HeadTrace", "trace_heads", "head_output_norms", "frozen_final_norm", "direct_logit_attribution",
           "ov_copying_score", "next_token_loss", "in_context_mass"]

HeadKey = tuple[int, int]


_TRACED = "a trace records a forward pass: NaN or infinity there means broken weights or an overflow"


@dataclass(frozen=True)
class HeadTrace:
    """One forward pass, opened up (B batch, T positions, h heads, d = d_model, V vocabulary).

    ``logits`` ``(B, T, V)``; ``attention[l]`` ``(B, h, T, T)`` (empty if not kept:
    ``trace_heads(keep_attention=False)``, so an empty sequence is accepted); ``head_outputs[l]``
    ``(B, h, T, d)``: what head ``h`` of layer ``l`` adds to the residual stream (its slice of
    W_O applied to its output; the shared W_O bias is left out), one per layer, at least one;
    ``residual[l]`` ``(B, T, d)``: the stream entering layer ``l``, and ``residual[L]`` the one
    entering the final LayerNorm. Every layer has the same ``h`` and ``d``. Every tensor must hold
    finite numbers (a NaN or infinite trace reads as a measurement).

    Frozen, and the three per-layer fields are stored as tuples (lists given are converted) of
    copies of the tensors given (so is ``logits``), so a trace checked once stays consistent: the
    functions that read it trust its shapes and numbers, and editing the tensors given in place
    afterwards changes nothing here.

    ``config`` is the :class:`~course_utils.model.ModelConfig` of the model traced
    (:func:`trace_heads` fills it; ``None`` for a trace built by hand), checked against the
    shapes here, so that :func:`direct_logit_attribution` can refuse a trace of another model by
    name: one of the same sizes but, say, with MLPs. What a config cannot tell apart is not
    detected: a trace of another model with the same config (other weights, e.g. before and after
    training) is read as this model's, and a hand-built trace (``config=None``) is checked by its
    shapes only.
    """

    logits: torch.Tensor
    attention: tuple[torch.Tensor, ...]
    head_outputs: tuple[torch.Tensor, ...]
    residual: tuple[torch.Tensor, ...]
    config: ModelConfig | None = None

    def __post_init__(self) -> None:
        freeze_fields(self)  # lists kept as tuples: what is checked stays
        _keep_copies(self)  # and the tensors its own: a caller's in-place edit cannot change them
        check_record(self)
        if not self.head_outputs:
            raise ValueError("HeadTrace.head_outputs must hold one tensor per layer of the model (at least "
                             "one), got none")
        check_tensor(self.logits, "HeadTrace.logits", ndim=3, layout="(B, T, V)")
        check_finite(self.logits, "HeadTrace.logits", _TRACED)  # numbers: not the meta device, no NaN
        B, T, _ = self.logits.shape
        layers = len(self.head_outputs)
        if len(self.residual) != layers + 1:
            raise ValueError(f"HeadTrace.residual must hold {layers + 1} streams (one entering each of the "
                             f"{layers} layers of head_outputs, one entering the final LayerNorm), got "
                             f"{len(self.residual)}")
        if self.attention and len(self.attention) != layers:
            raise ValueError(f"HeadTrace.attention must be empty (not kept) or hold one tensor per layer "
                             f"({layers}), got {len(self.attention)}")
        shapes = (("head_outputs", 4, 2, "(B, h, T, d)"), ("residual", 3, 1, "(B, T, d)"),
                  ("attention", 4, 2, "(B, h, T, T)"))  # name, dims, the dim that is T, layout
        for name, ndim, time_dim, layout in shapes:
            for layer, t in enumerate(getattr(self, name)):
                check_tensor(t, f"HeadTrace.{name}[{layer}]", ndim=ndim, layout=layout)
                check_finite(t, f"HeadTrace.{name}[{layer}]", _TRACED)
                if t.shape[0] != B or t.shape[time_dim] != T:
                    raise ValueError(f"HeadTrace.{name}[{layer}] must be {layout} with B={B}, T={T} (the "
                                     f"logits'), got shape {tuple(t.shape)}")
        self._check_widths()
        if self.config is not None:  # the model traced: its sizes are the trace's
            _check_sizes(self, self.config, "HeadTrace.config must be the config of the model traced, but "
                         "the trace's sizes differ: ", "config")

    def _check_widths(self) -> None:
        """Every layer's ``h`` and ``d`` are head_outputs[0]'s (a trace of one model)."""
        _, h, T, d = self.head_outputs[0].shape
        wanted = (("head_outputs", (None, h, T, d), "(B, h, T, d)"), ("residual", (None, T, d), "(B, T, d)"),
                  ("attention", (None, h, T, T), "(B, h, T, T)"))
        for name, sizes, layout in wanted:
            for layer, t in enumerate(getattr(self, name)):
                if any(want is not None and got != want for got, want in zip(t.shape, sizes, strict=True)):
                    raise ValueError(f"HeadTrace.{name}[{layer}] must be {layout} with h={h}, d={d} (those "
                                     f"of head_outputs[0]: one model's trace), got shape {tuple(t.shape)}")


def _check_sizes(trace: HeadTrace, config: ModelConfig, start: str, source: str) -> None:
    """``trace``'s layer and head counts, width and vocabulary are ``config``'s: else a ValueError,
    ``start`` then each size that differs, next to ``source``'s (``"config"``, ``"model"``)."""
    _, h, _, d = trace.head_outputs[0].shape
    found = {"num_layers": len(trace.head_outputs), "num_heads": h, "d_model": d,
             "vocab_size": trace.logits.shape[-1]}
    wrong = {k: v for k, v in found.items() if v != getattr(config, k)}
    if wrong:
        raise ValueError(start + ", ".join(f"{k}={v} ({source}: {getattr(config, k)})"
                                           for k, v in wrong.items()))


def _check_model(model: object) -> None:
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    check_holds_values(model.token_embedding.weight, "model's weights")  # a meta model has none


def _check_from_weights(result: torch.Tensor, name: str, model: TinyTransformer) -> None:
    """``result``, what the function ``name`` computed from ``model``'s weights, holds finite
    numbers; else a ValueError naming the first of the model's parameters that holds NaN or
    infinity (a diverged or broken model: its NaN would otherwise turn into a finite-looking
    score, as an argmax over NaN does), or, the weights being finite, ``name``'s result (an
    overflow). One reduction over ``result`` when all is well; the parameters are only read once
    something is wrong."""
    if bool(torch.isfinite(result).all()):
        return
    for param_name, param in model.named_parameters():
        check_finite(param, f"model's weights ({param_name})",
                     f"{name} reads them, and a NaN weight makes its result meaningless: did "
                     "training diverge?")
    check_finite(result, f"{name}'s result", "the model's weights are finite: an overflow?")


def _check_head_keys(keys: object, num_layers: int, num_heads: int, what: str) -> list[HeadKey]:
    if isinstance(keys, (str, bytes, torch.Tensor)) or not isinstance(keys, (list, tuple, set, dict)):
        raise TypeError(f"{what} must be a collection of (layer, head) pairs, got {type(keys).__name__}")
    checked = []
    for key in items_of(keys, what, "a collection of (layer, head) pairs"):
        if not isinstance(key, tuple) or len(key) != 2:
            raise TypeError(f"{what} must hold (layer, head) pairs of ints, got {shown(key)}")
        try:
            layer = check_int(key[0], f"{what}: the layer of {shown(key)}")
            head = check_int(key[1], f"{what}: the head of {shown(key)}")
        except TypeError as err:
            raise TypeError(f"{what} must hold (layer, head) pairs of ints; {err}") from None
        if not (0 <= layer < num_layers and 0 <= head < num_heads):
            raise ValueError(f"{what}: (layer, head) {key} is outside the model's "
                             f"{num_layers} layers x {num_heads} heads")
        checked.append((layer, head))
    return checked


def _check_head_keys_dict(mapping: dict, num_layers: int, num_heads: int, what: str) -> dict:
    keys = _check_head_keys(list(mapping), num_layers, num_heads, what)
    return dict(zip(keys, mapping.values(), strict=True))


def _check_trace(trace: object, model: torch.nn.Module | None = None) -> HeadTrace:
    """A :class:`HeadTrace`; with ``model``, one of that model: its config (when the trace records
    one: every field, ``mlp`` too), else its layer and head counts, widths and vocabulary; its
    dtype and device (a trace of another model reads as an answer). Another model with the same
    config (other weights) cannot be told apart (see :class:`HeadTrace`)."""
    if not isinstance(trace, HeadTrace):
        raise TypeError(f"trace must be a HeadTrace (from trace_heads), got {type(trace).__name__}")
    if model is not None:
        cfg = model.config
        if trace.config is not None and trace.config != cfg:
            traced = trace.config
            wrong = [f.name for f in fields(ModelConfig) if getattr(traced, f.name) != getattr(cfg, f.name)]
            differ = ", ".join(f"{k}={shown(getattr(traced, k), 40)} (model: {shown(getattr(cfg, k), 40)})"
                               for k in wrong)
            raise ValueError(f"trace must be a trace of model (trace_heads(model, tokens)), got one of a "
                             f"model with {differ}")
        _check_sizes(trace, cfg, "trace must be a trace of model (trace_heads(model, tokens)), got one with ",
                     "model")
        _check_on_model_device(trace.residual[-1], "trace.residual[-1]", model)
    return trace


def _check_token_ids(tokens: object, name: str, shape: tuple[int, ...] | None, vocab: int | None, *,
                     allow: int | None = None) -> torch.Tensor:
    """``tokens`` is a long tensor (of ``shape`` when given) of ids in ``[0, vocab)`` (``allow``,
    e.g. -100, named as not accepted here)."""
    if not isinstance(tokens, torch.Tensor) or tokens.dtype != torch.long:
        got = f"{tokens.dtype} tensor" if isinstance(tokens, torch.Tensor) else type(tokens).__name__
        raise TypeError(f"{name} must be a torch.long tensor of token ids, got {got}")
    check_holds_values(tokens, name)
    if shape is not None and tuple(tokens.shape) != tuple(shape):
        raise ValueError(f"{name} must be (B, T) = {tuple(shape)}, got {describe_shape(tokens)}")
    if vocab is not None and tokens.numel():
        bad = (tokens < 0) | (tokens >= vocab)
        if bad.any():
            values = sorted(set(tokens[bad].tolist()))
            hint = (f"; {allow} (not counted) has no logit to read: pick the positions you want, or "
                    f"replace it with a real id and ignore those positions"
                    if allow is not None and allow in values else "")
            raise ValueError(f"{name} must hold token ids in [0, V={vocab}), got {values[:5]}"
                             f"{' ...' if len(values) > 5 else ''} at {int(bad.sum())} position(s){hint}")
    return tokens


def _check_scored(logits: object, tokens: object, scored: object) -> None:
    """``logits`` ``(B, T, V)`` floating, ``tokens`` ``(B, T)`` long ids in ``[0, V)``, ``scored``
    ``(B, T)`` bool (an integer 0/1 mask would index rows, not select positions)."""
    _check_logits_values(logits)
    _check_token_ids(tokens, "tokens", tuple(logits.shape[:2]), logits.shape[2])
    if not isinstance(scored, torch.Tensor) or scored.dtype != torch.bool:
        got = f"a {scored.dtype} tensor" if isinstance(scored, torch.Tensor) else type(scored).__name__
        raise TypeError(f"scored must be a bool tensor (B, T), True = score this position, got {got}"
                        + ("; convert a 0/1 mask with scored.bool()" if isinstance(scored, torch.Tensor)
                           else ""))
    if tuple(scored.shape) != tuple(tokens.shape):
        raise ValueError(f"scored must be (B, T) = {tuple(tokens.shape)} like tokens, got "
                         f"{describe_shape(scored)}")
    check_holds_values(scored, "scored")
    if not logits.device == tokens.device == scored.device:
        raise ValueError(f"logits, tokens and scored must be on one device, got logits on {logits.device}, "
                         f"tokens on {tokens.device}, scored on {scored.device}")
    check_not_inference(scored, "scored", tracked=logits.requires_grad)  # torch's refusal names none


def _check_logits_values(logits: object) -> None:
    """``logits`` ``(B, T, V)``: floating, ``V >= 1``, with values (not on the meta device) and
    finite, since the metrics that read them would otherwise be NaN."""
    check_tensor(logits, "logits", ndim=3, layout="(B, T, V)")
    if logits.shape[2] == 0:
        raise ValueError(f"logits must have at least one vocabulary entry (B, T, V >= 1), got "
                         f"{describe_shape(logits)}")
    check_holds_values(logits, "logits")
    check_finite(logits, "logits", "a metric over NaN or infinite logits is NaN: are the model's "
                 "weights NaN?")


def _check_on_model_device(t: torch.Tensor, name: str, model: torch.nn.Module) -> None:
    """``t`` has the model's dtype, sits on its device and holds values (not the meta device)."""
    device, dtype = model.ln_final.weight.device, model.ln_final.weight.dtype
    if t.dtype != dtype:
        raise TypeError(f"{name} has dtype {t.dtype} but the model's parameters are {dtype}: convert with "
                        f".to({dtype})")
    if t.device != device:
        raise ValueError(f"{name} is on {t.device} but the model is on {device}: move it with "
                         f".to({str(device)!r})")
    check_holds_values(t, name)


def _check_replace_value(key: HeadKey, value: torch.Tensor | float, model: torch.nn.Module) -> None:
    """What ``trace_heads`` writes for a head: a finite number, or a finite floating tensor on
    the model's device (NaN would turn every later logit into NaN; an integer tensor would be
    cast silently)."""
    if not isinstance(value, torch.Tensor):
        check_real(value, f"replace[{key}]")  # NaN and infinity refused, named
        return
    weight = model.token_embedding.weight
    if not value.is_floating_point():
        raise TypeError(f"replace[{key}] must be a floating tensor (the head's mean output, say), got "
                        f"dtype {value.dtype}; convert with .to({weight.dtype})")
    if value.device != weight.device:
        raise ValueError(f"replace[{key}] is on {value.device} but the model is on {weight.device}: move it "
                         f"with .to({str(weight.device)!r})")
    check_holds_values(value, f"replace[{key}]")
    check_finite(value, f"replace[{key}]", "a NaN head output makes every later logit NaN")


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

    It is the model's own forward pass, read and edited through its hook points: each layer's
    ``hook_resid_pre`` and ``attn.hook_z`` are recorded, ``replace`` edits ``hook_attn_out``, and
    ``keys_without`` / ``queries_without`` recompute ``attn.hook_k`` / ``attn.hook_q``. Lesson 05
    writes the direct logit attribution and the key patch out by hand on ``run_with_cache``'s
    tensors; ``tests/test_lesson05_by_hand.py`` keeps those lines equal to these functions.
    ``tokens`` are checked by the model's forward, before any hook runs. A model whose weights
    hold NaN or infinity is refused, naming the first such parameter (as every function here
    that reads the weights does).
    """
    _check_model(model)
    config = model.config
    L, h, d = config.num_layers, config.num_heads, config.d_model
    replace = dict_of(replace, "replace", "a dict {(layer, head): 0.0 or a tensor} or None")
    if replace is not None and not isinstance(replace, dict):
        raise TypeError(f"replace must be a dict {{(layer, head): 0.0 or a tensor}} or None, got "
                        f"{type(replace).__name__}")
    replace = dict(_check_head_keys_dict(replace or {}, L, h, "replace"))
    for key, value in replace.items():
        if isinstance(value, bool) or not isinstance(value, (torch.Tensor, int, float)):
            raise TypeError(f"replace[{key}] must be a number (0.0: zero ablation) or a tensor "
                            f"broadcastable to (B, T, d={d}), got {type(value).__name__} {shown(value, 60)}")
        if isinstance(value, torch.Tensor):
            try:
                torch.broadcast_shapes(value.shape, (*tokens.shape, d))
            except (RuntimeError, AttributeError):
                raise ValueError(f"replace[{key}] must broadcast to (B, T, d) = "
                                 f"{(*getattr(tokens, 'shape', ('B', 'T')), d)}, got shape "
                                 f"{describe_shape(value)}") from None
        _check_replace_value(key, value, model)
    check_flag(keep_attention, "keep_attention")
    edits = {}
    for name, edit in (("keys", keys_without), ("queries", queries_without)):
        edit = dict_of(edit, f"{name}_without", "a dict {layer: [(layer, head), ...]} or None")
        if edit is not None and not isinstance(edit, dict):
            raise TypeError(f"{name}_without must be a dict {{layer: [(layer, head), ...]}} or None, got "
                            f"{type(edit).__name__}")
        for layer, heads in (edit or {}).items():
            layer = check_index(layer, f"{name}_without: the layer {shown(layer)}", L, "layers in the model")
            heads = _check_head_keys(heads, L, h, f"{name}_without[{layer}]")
            if any(source >= layer for source, _ in heads):
                raise ValueError(f"{name}_without[{layer}] may only name heads of earlier layers, "
                                 f"got {heads}")
            edits[name, layer] = heads
    residual, head_outputs = [], []  # filled by the hooks, layer by layer, as the model runs
    attn_change: list[torch.Tensor] = []  # per layer: what replace adds to the attention output

    def keep_stream(x: torch.Tensor, hook: object) -> None:  # hook_resid_pre (B, T, d)
        residual.append(x)

    def keep_heads(z: torch.Tensor, hook: object) -> None:  # hook_z (B, h, T, dk)
        attn = model.blocks[len(head_outputs)].attn
        w_o = attn.out_proj.weight.view(d, h, attn.d_k)  # (d, h, dk): head j's columns of W_O
        per_head = torch.einsum("bhtk,dhk->bhtd", z, w_o)  # (B, h, T, d)
        written = per_head.clone()
        for (source, head), value in replace.items():
            if source == len(head_outputs):
                written[:, head] = torch.as_tensor(value, dtype=written.dtype).expand_as(written[:, head])
        head_outputs.append(written)
        attn_change.append((written - per_head).sum(dim=1))  # (B, T, d)

    def changed_output(out: torch.Tensor, hook: object) -> torch.Tensor:  # hook_attn_out (B, T, d)
        return out + attn_change[-1]

    def without(name: str, layer: int, heads: list[HeadKey]) -> object:
        def recomputed(t: torch.Tensor, hook: object) -> torch.Tensor:  # hook_q or hook_k
            block = model.blocks[layer]
            stream = residual[layer] - sum(head_outputs[source][:, head] for source, head in heads)
            normed = block.ln_attn(stream)
            q, k, _ = block.attn.project_qkv(normed, normed, normed)  # (B, h, T, dk)
            return q if name == "queries" else k
        return recomputed

    fwd_hooks = [(lambda n: n.endswith(".hook_resid_pre"), keep_stream),
                 (lambda n: n.endswith(".attn.hook_z"), keep_heads)]
    if replace:
        fwd_hooks.append((lambda n: n.endswith(".hook_attn_out"), changed_output))
    for (name, layer), heads in edits.items():
        fwd_hooks.append((f"blocks.{layer}.attn.hook_{name[0]}", without(name, layer, heads)))
    fwd_hooks.append((f"blocks.{L - 1}.hook_resid_post", keep_stream))  # the stream entering ln_final
    with model.hooks(fwd_hooks):
        logits, attention = model(tokens, return_attention=keep_attention)  # (B, T, V)
    _check_from_weights(logits, "trace_heads", model)  # names the weight HeadTrace cannot
    return HeadTrace(logits, attention or [], head_outputs, residual, config)


def head_output_norms(trace: HeadTrace) -> torch.Tensor:
    """``(L, B, h, T)``: the length of what each head writes at each position."""
    _check_trace(trace)
    return torch.stack([out.norm(dim=-1) for out in trace.head_outputs])


def frozen_final_norm(model: torch.nn.Module, stream: torch.Tensor, component: torch.Tensor) -> torch.Tensor:
    """A part ``component`` ``(..., d)`` of the residual stream through the final LayerNorm with
    its scale frozen at the whole ``stream``'s (broadcast against ``component``):
    ``(c - mean(c)) / s * gamma``. Linear in ``c``, so the parts of a stream add up; ``beta`` is
    left out (a term of its own). Both lessons' direct logit attributions rest on this.
    ``component`` may carry leading dims ``stream`` lacks (one part per head, ``(h, B, T, d)``
    against a ``(B, T, d)`` stream; a ``(1, B, T, d)`` one gives a ``(1, B, T, d)`` result): each
    slice is scaled by the stream at its position. Shapes that do not broadcast are refused, and so
    is a model whose final LayerNorm gain holds NaN or infinity (named)."""
    _check_model(model)
    d = model.config.d_model
    for name, t in (("stream", stream), ("component", component)):
        check_tensor(t, name, min_ndim=1, layout=f"(..., d={d})")
        if t.shape[-1] != d:
            raise ValueError(f"{name} must end in d_model={d}, got shape {describe_shape(t)}")
        _check_on_model_device(t, name, model)
        check_finite(t, name, "an infinite entry makes the LayerNorm's scale or mean infinite, and the "
                              "output NaN")
    try:
        torch.broadcast_shapes(stream.shape[:-1], component.shape[:-1])
    except RuntimeError:
        raise ValueError(f"component {describe_shape(component)} must broadcast against stream "
                         f"{describe_shape(stream)} (the same positions, e.g. both (B, T, d), or a "
                         "component with leading dims stream lacks)") from None
    ln = model.ln_final
    scale = (stream.var(dim=-1, unbiased=False, keepdim=True) + ln.eps).sqrt()
    normed = (component - component.mean(dim=-1, keepdim=True)) / scale * ln.weight
    _check_from_weights(normed, "frozen_final_norm", model)
    return normed


def _keep_copies(trace: HeadTrace) -> None:
    """``trace``'s tensors replaced by clones of them (anything else is left for the check to
    refuse): the trace holds numbers of its own, not the caller's tensors."""
    def copied(t: object) -> object:
        return t.clone() if isinstance(t, torch.Tensor) else t

    object.__setattr__(trace, "logits", copied(trace.logits))
    for name in ("attention", "head_outputs", "residual"):
        value = getattr(trace, name)
        if isinstance(value, tuple):
            object.__setattr__(trace, name, tuple(copied(t) for t in value))


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
    ``trace`` must be ``model``'s: its config (which :func:`trace_heads` records; every field,
    ``mlp`` too), or for a hand-built trace its layers, heads, widths and vocabulary; its dtype
    and device. A trace of another model with the same config (other weights, say before
    training) cannot be detected and is read as this model's: trace the model you attribute.
    A model whose weights hold NaN or infinity is refused, naming the first such parameter.
    """
    _check_model(model)
    _check_trace(trace, model)
    if isinstance(targets, torch.Tensor) and targets.shape != trace.logits.shape[:2]:
        raise ValueError(f"targets must be a (B, T) tensor of token ids = {tuple(trace.logits.shape[:2])}, "
                         f"got {describe_shape(targets)}")
    _check_token_ids(targets, "targets", tuple(trace.logits.shape[:2]), model.config.vocab_size, allow=-100)
    rows = []
    for per_head in trace.head_outputs:  # (B, h, T, d)
        logits = _final_direction(model, trace, per_head.transpose(0, 1))  # (h, B, T, V)
        target = logits.gather(-1, targets.expand_as(logits[..., 0])[..., None])[..., 0]
        rows.append(target - logits.mean(dim=-1))  # (h, B, T)
    attribution = torch.stack(rows)
    _check_from_weights(attribution, "direct_logit_attribution", model)
    return attribution


@torch.no_grad()
def ov_copying_score(model: torch.nn.Module, layer: int, token_ids: Sequence[int]) -> torch.Tensor:
    """``(h,)``: for each head of ``layer``, the share of tokens t (from ``token_ids``) that its
    OV circuit maps back to t: attending to a position holding only t's embedding, the head's
    output raises t's logit above every other token's.

    Weights only: embedding -> that layer's LayerNorm -> W_V, W_O of the head -> final
    LayerNorm's gain (centred, scale left out: it does not change a row's argmax) ->
    unembedding. Chance is ``1 / len(token_ids)``.

    A grouped-query model (``num_kv_heads = g < h``) is scored head by head too: query head i
    reads the W_V of its key/value group ``i // (h / g)`` (the blocked grouping of
    :mod:`course_utils.attention.gqa`), so it scores as the same model with its K/V heads
    repeated to full multi-head attention.

    A model whose weights hold NaN or infinity is refused, naming the first such parameter: an
    argmax over NaN logits would otherwise read as a finite score.
    """
    _check_model(model)
    config = model.config
    layer = check_index(layer, "layer", config.num_layers, "layers in the model")
    if isinstance(token_ids, (str, bytes)) or not hasattr(token_ids, "__iter__"):
        raise TypeError(f"token_ids must be a list (or range) of token ids, got {type(token_ids).__name__}")
    if isinstance(token_ids, torch.Tensor) and token_ids.ndim != 1:  # a 0-d one listed an int (battery 29)
        raise ValueError(f"token_ids must be a 1-D tensor (or a list) of token ids, got a tensor of shape "
                         f"{tuple(token_ids.shape)}")
    listed = token_ids.tolist() if isinstance(token_ids, torch.Tensor) else \
        items_of(token_ids, "token_ids", "a list (or range) of token ids")
    if len(listed) < 2:
        raise ValueError(f"token_ids must list at least 2 token ids, got {shown(listed, 80)}")
    checked = [check_index(t, f"token_ids[{i}]", config.vocab_size, "token ids in the vocabulary")
               for i, t in enumerate(listed)]
    if len(set(checked)) != len(checked):
        twice = sorted({t for t in checked if checked.count(t) > 1})
        raise ValueError(f"token_ids lists {twice[:5]} more than once: each token is one row of the score")
    ids = torch.tensor(checked, dtype=torch.long)
    block = model.blocks[layer]
    attn, h, d = block.attn, config.num_heads, config.d_model
    embedded = block.ln_attn(model.token_embedding.weight[ids])[None]  # (1, n, d)
    _, _, v = attn.project_qkv(embedded, embedded, embedded)  # (1, g, n, dk), g = num_kv_heads
    v = v.repeat_interleave(h // v.shape[1], dim=1)  # (1, h, n, dk): head i reads group i // (h/g)
    w_o = attn.out_proj.weight.view(d, h, attn.d_k)  # (d, h, dk)
    written = torch.einsum("hnk,dhk->hnd", v[0], w_o)  # (h, n, d)
    written = written - written.mean(dim=-1, keepdim=True)
    logits = model.unembed(written * model.ln_final.weight)[..., ids]  # (h, n, n): among token_ids
    _check_from_weights(logits, "ov_copying_score", model)  # an argmax over NaN looks fine
    diagonal = torch.arange(len(ids), device=logits.device)  # token i's own column
    return (logits.argmax(dim=-1) == diagonal).double().mean(dim=-1)  # (h,)


def next_token_loss(logits: torch.Tensor, tokens: torch.Tensor, scored: torch.Tensor) -> float:
    """Mean cross-entropy of predicting ``tokens[:, t+1]`` from ``logits[:, t]`` over the
    positions t where ``scored`` ``(B, T)`` is True (the last position is never scored).

    ``scored`` must be a bool tensor (a 0/1 integer mask would pick rows by index), and must
    mark at least one position before the last: a mean over nothing is refused, not NaN."""
    _check_scored(logits, tokens, scored)
    picked = scored[:, :-1]  # (B, T-1)
    if not picked.any():
        raise ValueError("scored marks no position before the last (the last position predicts "
                         "nothing): the mean loss over no position is undefined")
    per_position = torch.nn.functional.cross_entropy(
        logits[:, :-1].transpose(1, 2).double(), tokens[:, 1:], reduction="none")  # (B, T-1)
    return float(per_position[picked].mean())


def in_context_mass(logits: torch.Tensor, tokens: torch.Tensor, scored: torch.Tensor, *,
                    ignore: int | None = 0) -> tuple[float, float]:
    """Probability the model puts on tokens already seen in the context (``ignore``, e.g. BOS,
    left out), averaged over ``scored`` positions; and what a uniform prediction over the
    vocabulary would put there (seen tokens / vocabulary size). Returns ``(model, uniform)``.
    ``scored`` is a bool tensor ``(B, T)`` marking at least one position."""
    _check_scored(logits, tokens, scored)
    V = logits.shape[-1]
    if ignore is not None:
        ignore = check_index(ignore, "ignore", V, "token ids in the vocabulary")
    if not scored.any():
        raise ValueError("scored marks no position: the mean over no position is undefined")
    seen = torch.nn.functional.one_hot(tokens, V).cumsum(dim=1).clamp(max=1).bool()  # (B, T, V)
    if ignore is not None:
        seen[..., ignore] = False
    probs = logits.double().softmax(dim=-1)  # (B, T, V)
    mass = (probs * seen).sum(-1)[scored]  # (n,)
    uniform = seen.sum(-1)[scored].double() / V
    return float(mass.mean()), float(uniform.mean())
