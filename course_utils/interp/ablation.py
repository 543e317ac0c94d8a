"""Switching attention heads off: zero and mean ablation, head importance, pruning curves.

* **Zero ablation** multiplies a head's output by 0 through the model's ``head_mask`` gates.
* **Mean ablation** replaces a head's output by its mean over a *reference* batch
  (:func:`mean_head_outputs`), so the layers above still receive a typical value.
* **Importance** (Michel et al., 2019): with a gate ``xi_h`` on every head,
  ``I_h = E_x |dL(x)/dxi_h|`` at ``xi = 1``, one gradient per example ``x``
  (:func:`head_importance`).
* **Pruning curves**: switch heads off one after another in a given order and measure
  after each (:func:`pruning_curve`).

What is measured is up to the caller: an :class:`Evaluation` is a batch of tokens and a
function that turns the model's logits into named numbers (a loss, an accuracy).

Shapes: L layers, h heads per layer, B batch, T positions, dk = d_model // h, V vocabulary.
Heads are ``(layer, head)`` pairs, named ``L{layer}H{head}``.

Bad input: every list or dict the caller gives (heads, orders, cases, scores, ...) is read through
``items_of`` / ``dict_of``, so one whose ``len()``, iteration or lookup raises is a TypeError
naming the argument, its own error chained, before any tensor work.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention.hooks import HookFn
from ..attention.validation import (
    check_callable,
    check_choice,
    check_distinct,
    check_flag,
    check_holds_values,
    check_int,
    check_names_free,
    check_not_inference,
    check_stream,
    check_tensor,
    check_tensor_list,
    describe_shape,
    dict_of,
    items_of,
    shown,
)
from ..env import check_seed, gradients_on
from ..model.transformer import TinyTransformer

__all__ = [
    "Evaluation",
    "head_name",
    "all_heads",
    "gates_without",
    "head_outputs",
    "mean_head_outputs",
    "ablated_logits",
    "block_inputs",
    "average_loss",
    "sequence_losses",
    "loss_evaluation",
    "measure",
    "ablation_table",
    "head_importance",
    "importance_order",
    "random_orders",
    "pruning_curve",
]

Head = tuple[int, int]
#: How a head is switched off: ``method=`` of every ablation here. Anything else is refused
#: (validation.check_choice): a TypeError for a value that is no str, a ValueError for another str.
METHODS = ("zero", "mean")


@dataclass(frozen=True)
class Evaluation:
    """``tokens`` ``(B, T)`` and ``score(logits (B, T, V)) -> {name: value}``.

    Frozen, as every record here: checked once when made, it stays as checked (a changed copy is
    ``dataclasses.replace(evaluation, tokens=...)``, checked again). The checks are its own
    (``check_record`` reads no ``Callable`` annotation), so ``freeze_fields`` has nothing to do.

    ``tokens`` are checked here for what can be seen without a model (a non-empty long
    ``(B, T)`` tensor holding values, no id below 0); an id beyond the vocabulary is refused where
    the evaluation meets a model (:func:`measure`, ...). ``score`` is checked here for what can be
    seen without running it (a function of one argument); it runs when the evaluation does, where
    what it returns is checked and named (``{name: number}``, no NaN), and an error it raises is
    its own and reaches the caller as it is."""

    tokens: Tensor
    score: Callable[[Tensor], dict[str, float]]

    def __post_init__(self) -> None:
        _check_tokens(self.tokens, f"{type(self).__name__}.tokens")  # Evaluation or EvaluationAt
        check_callable(self.score, f"{type(self).__name__}.score",
                       "a function logits (B, T, V) -> {name: number}, such as lambda logits: "
                       "{'loss': average_loss(logits, targets)}", nargs=1)


# -- validation --------------------------------------------------------------------------
def _check_model(model: object) -> TinyTransformer:
    """A TinyTransformer whose weights hold values (a model on the meta device has shapes only:
    running it fails deep inside torch, or answers with a device mismatch)."""
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    check_holds_values(model.token_embedding.weight, "model's weights (token_embedding.weight)")
    return model


def _check_heads(heads: object, model: TinyTransformer, name: str = "heads") -> list[Head]:
    """A list of distinct ``(layer, head)`` pairs inside the model, or a clear error naming ``name``
    (the argument, or the entry of one such as ``cases['prev']``) and what arrived."""
    cfg = model.config
    if isinstance(heads, (str, Tensor)) or not isinstance(heads, Sequence):
        raise TypeError(f"{name} must be a list of (layer, head) pairs such as [(1, 2)], "
                        f"got {type(heads).__name__} {shown(heads, 60)}")
    of = "" if name == "heads" else f" of {name}"
    checked = []
    for pair in items_of(heads, name, "a list of (layer, head) pairs such as [(1, 2)]"):
        parts = items_of(pair, f"each head{of}", "a (layer, head) pair of ints such as (1, 2)") \
            if isinstance(pair, (tuple, list)) else None
        ok = parts is not None and len(parts) == 2 and all(
            isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in parts)
        if not ok:
            raise TypeError(f"each head{of} must be a (layer, head) pair of ints such as (1, 2), "
                            f"got {shown(pair)}")
        layer, head = int(parts[0]), int(parts[1])  # NumPy integers are ints too (check_int's rule)
        if not (0 <= layer < cfg.num_layers and 0 <= head < cfg.num_heads):
            raise ValueError(f"head {tuple(parts)}{of} is out of range: expected layer in "
                             f"0..{cfg.num_layers - 1} and head in 0..{cfg.num_heads - 1}")
        checked.append((layer, head))
    if len(set(checked)) < len(checked):  # a head switched off, patched or counted twice means nothing
        twice = sorted({h for h in checked if checked.count(h) > 1})
        raise ValueError(f"{name} lists a head twice: {', '.join(f'{head_name(*h)} {h}' for h in twice)} "
                         f"(in a list of {len(checked)} heads; each head may appear once)")
    return checked


def _check_tokens(tokens: object, name: str, model: TinyTransformer | None = None) -> Tensor:
    """A non-empty long ``(B, T)`` batch of ids ``>= 0`` holding values; with ``model``, also what
    the model's forward would check (:func:`_check_tokens_fit`), under the caller's ``name``."""
    if not isinstance(tokens, Tensor) or tokens.dtype != torch.long:
        raise TypeError(f"{name} must be a torch.long tensor (B, T) of token ids, got "
                        f"{type(tokens).__name__}" + (f" of dtype {tokens.dtype}"
                                                       if isinstance(tokens, Tensor) else ""))
    if tokens.ndim != 2 or tokens.shape[0] == 0 or tokens.shape[1] == 0:
        raise ValueError(f"{name} must be a non-empty (B, T) batch, got shape {tuple(tokens.shape)}")
    check_holds_values(tokens, name)
    if int(tokens.min()) < 0:  # the upper end needs the vocabulary: checked where a model meets them
        raise ValueError(f"{name} must be token ids >= 0, got {int(tokens.min())} at (batch, position) "
                         f"{tuple((tokens < 0).nonzero()[0].tolist())}")
    if model is not None:
        _check_tokens_fit(tokens, name, model)
    return tokens


def _check_tokens_fit(tokens: Tensor, name: str, model: TinyTransformer) -> None:
    """``tokens`` fit ``model`` (ids below its vocabulary, at most ``max_len`` positions, on its
    device), named as the caller's argument (``reference_tokens``, ``source_tokens``,
    ``evaluations[1].tokens``): the model's own check, which its forward would run under the
    name ``tokens``."""
    model._check_tokens(tokens, name=name)


def _described(x: object) -> str:
    """What arrived, for a message: a tensor's shape and dtype, else the type's name."""
    if isinstance(x, Tensor):
        return f"a {x.dtype} tensor of shape {describe_shape(x)}"
    return type(x).__name__


def _check_targets_like(targets: object, tokens: Tensor) -> None:
    """``targets`` is a tensor shaped like ``tokens`` ``(B, T)``, else a ValueError saying what arrived."""
    if not isinstance(targets, Tensor) or targets.shape != tokens.shape:
        raise ValueError(f"targets must be shaped like tokens {tuple(tokens.shape)}, got "
                         f"{_described(targets)}")


def _check_logits_and_targets(logits: object, targets: object) -> tuple[Tensor, Tensor]:
    """``logits`` ``(B, T, V)`` floating point and ``targets`` ``(B, T)`` long, each id in
    ``[0, V)`` or ``-100`` (not counted)."""
    check_tensor(logits, "logits", ndim=3, layout="(B, T, V)")
    if logits.shape[2] == 0:
        raise ValueError(f"logits must have at least one vocabulary entry (B, T, V >= 1), got "
                         f"{describe_shape(logits)}")
    if not isinstance(targets, Tensor) or targets.dtype != torch.long:
        raise TypeError(f"targets must be a torch.long tensor (B, T) of next-token ids (-100 = not "
                        f"counted), got {_described(targets)}")
    if logits.is_meta or targets.is_meta:
        raise ValueError(f"logits and targets must hold values, got logits on {logits.device} and "
                         f"targets on {targets.device} (the meta device holds none)")
    if logits.device != targets.device:
        raise ValueError(f"logits and targets must be on one device, got logits on {logits.device} "
                         f"and targets on {targets.device}: move the targets with "
                         f"targets.to(logits.device)")
    if logits.shape[:2] != targets.shape:
        raise ValueError(f"logits must be (B, T, V) with (B, T) = {tuple(targets.shape)} (the "
                         f"targets'), got {describe_shape(logits)}")
    check_not_inference(targets, "targets", tracked=logits.requires_grad)  # cross_entropy keeps them
    vocab = logits.shape[2]
    wrong = (targets != -100) & ((targets < 0) | (targets >= vocab))
    if wrong.any():
        bad = sorted(set(targets[wrong].tolist()))
        raise ValueError(f"targets must hold token ids in [0, V={vocab}) or -100 (not counted), got "
                         f"{bad[:5]}{' ...' if len(bad) > 5 else ''} at {int(wrong.sum())} position(s)")
    return logits, targets


def _check_method(method: object) -> str:
    """``method``, one of :data:`METHODS`, as a plain str (:func:`check_choice`: anything but a
    str is a TypeError, another str a ValueError, both naming ``method``)."""
    return check_choice(method, "method", METHODS)


# -- naming ------------------------------------------------------------------------------
def head_name(layer: int, head: int) -> str:
    """``(1, 2) -> "L1H2"``; both must be ints >= 0 (every problem is named, both at once)."""
    problems = []
    for name, value in (("layer", layer), ("head", head)):
        try:
            check_int(value, name, minimum=0)
        except (TypeError, ValueError) as err:
            problems.append(err)
    if problems:
        kind = TypeError if any(isinstance(p, TypeError) for p in problems) else ValueError
        raise kind(f"head_name(layer={shown(layer)}, head={shown(head)}): " + "; ".join(map(str, problems)))
    return f"L{int(layer)}H{int(head)}"


def all_heads(model: TinyTransformer) -> list[Head]:
    """Every ``(layer, head)`` of ``model``, layer by layer."""
    cfg = _check_model(model).config
    return [(layer, head) for layer in range(cfg.num_layers) for head in range(cfg.num_heads)]


# -- ablation ----------------------------------------------------------------------------
def gates_without(model: TinyTransformer, heads: Sequence[Head]) -> Tensor:
    """``head_mask`` ``(L, h)``: 1 everywhere, 0 on ``heads`` (zero ablation)."""
    cfg = _check_model(model).config
    gates = torch.ones(cfg.num_layers, cfg.num_heads, device=model.unembed.weight.device,
                       dtype=model.unembed.weight.dtype)
    for layer, head in _check_heads(heads, model):
        gates[layer, head] = 0.0
    return gates


@torch.no_grad()
def head_outputs(model: TinyTransformer, tokens: Tensor) -> Tensor:
    """Every head's output before the heads are merged: ``(L, B, h, T, dk)``."""
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    recorded: list[Tensor] = []

    def record(layer: int, heads: Tensor) -> Tensor:  # heads: (B, h, T, dk)
        recorded.append(heads.detach())
        return heads

    model(tokens, edit_heads=record)
    return torch.stack(recorded)  # (L, B, h, T, dk)


def mean_head_outputs(model: TinyTransformer, reference_tokens: Tensor, *, keep: Tensor | None = None,
                      per_position: bool = False) -> Tensor:
    """Each head's mean output over a reference batch.

    ``per_position=False``: the mean over every kept token of every sequence, ``(L, h, dk)``
    (``keep`` ``(B, T)`` bool, e.g. "not padding"; default every token). ``per_position=True``:
    one mean per position over the sequences, ``(L, h, T, dk)`` (for batches whose positions
    line up, such as the induction task's; ``keep`` is then not allowed).
    """
    _check_tokens(reference_tokens, "reference_tokens", _check_model(model))
    check_flag(per_position, "per_position")
    if keep is not None:
        _check_keep(keep, reference_tokens, per_position)
    outputs = head_outputs(model, reference_tokens)  # (L, B, h, T, dk)
    if per_position:
        return outputs.mean(dim=1)  # (L, h, T, dk)
    if keep is None:
        return outputs.mean(dim=(1, 3))  # (L, h, dk)
    weights = keep.to(outputs.dtype)[None, :, None, :, None]  # (1, B, 1, T, 1)
    return (outputs * weights).sum(dim=(1, 3)) / weights.sum(dim=(1, 3))  # (L, h, dk)


def _check_keep(keep: object, reference_tokens: Tensor, per_position: bool) -> None:
    """``keep``: a bool ``(B, T)`` tensor like ``reference_tokens``, with values (not on the meta
    device) and at least one kept token; only for one mean over the kept tokens."""
    if per_position:
        raise ValueError("keep= is for per_position=False (one mean over the kept tokens)")
    if not isinstance(keep, Tensor) or keep.dtype != torch.bool or keep.shape != reference_tokens.shape:
        raise TypeError(f"keep must be a bool tensor shaped like reference_tokens "
                        f"{tuple(reference_tokens.shape)}, got {type(keep).__name__}"
                        + (f" {keep.dtype} {tuple(keep.shape)}" if isinstance(keep, Tensor) else ""))
    check_holds_values(keep, "keep")
    if not keep.any():
        raise ValueError("keep marks no token: the reference batch is empty")


def _check_means(means: object, model: TinyTransformer, seq_len: int) -> Tensor:
    cfg = model.config
    if not isinstance(means, Tensor) or not means.is_floating_point():
        raise TypeError("method='mean' needs means=mean_head_outputs(model, reference_tokens), a "
                        f"floating-point tensor, got {_described(means)}")
    device = model.token_embedding.weight.device
    if means.dtype != model.token_embedding.weight.dtype:
        raise TypeError(f"means have dtype {means.dtype} but the model's parameters are "
                        f"{model.token_embedding.weight.dtype}: pass means=mean_head_outputs(model, "
                        f"reference_tokens)")
    if means.device != device:
        raise ValueError(f"means are on device {means.device} but the model is on {device}: pass "
                         f"means=mean_head_outputs(model, reference_tokens) (or means.to({str(device)!r}))")
    dk = cfg.d_model // cfg.num_heads
    per_token = (cfg.num_layers, cfg.num_heads, dk)
    if tuple(means.shape) != per_token and not (
            means.ndim == 4 and tuple(means.shape[:2]) == per_token[:2] and means.shape[3] == dk
            and means.shape[2] >= seq_len):
        raise ValueError(f"means must be (L, h, dk) = {per_token} or (L, h, T, dk) with T >= {seq_len}, "
                         f"got {tuple(means.shape)}")
    if not torch.isfinite(means).all():
        where = sorted({f"L{i[0]}H{i[1]}" for i in (~torch.isfinite(means)).nonzero().tolist()})
        raise ValueError(f"means hold NaN or infinity for {', '.join(where[:6])}")
    return means


def _check_unused_means(means: object, model: TinyTransformer, seq_lens: Sequence[int], *,
                        per_evaluation: bool = True) -> None:
    """``means`` given with ``method="zero"`` to :func:`measure`, :func:`ablation_table`,
    :func:`pruning_curve` or ``prunable_counts`` (each evaluation's sequences ``seq_lens[i]``
    long): the zero run leaves it unused, as documented, so that one call can loop over both
    methods; but it must be what ``method="mean"`` would take (one tensor, or ``{index: tensor}``
    per evaluation unless ``per_evaluation`` is False), or a mistyped means would pass unnoticed.
    A refusal names both."""
    if means is None:
        return
    if isinstance(means, dict) and per_evaluation:
        fills = list(means.items())
    else:
        fills = [(i, means) for i in range(len(seq_lens))]
    for i, fill in fills:
        label = f"means[{shown(i)}]" if isinstance(means, dict) and per_evaluation else "means"
        try:
            if isinstance(means, dict) and per_evaluation:
                _check_means_key(i, len(seq_lens))
            _check_means(fill, model, seq_lens[i])
        except (TypeError, ValueError) as error:
            raise type(error)(f"{label} is given with method='zero', which leaves it unused (only "
                              f"method='mean' reads it), but it is not means that method='mean' could "
                              f"use: {error}") from None


def _check_means_key(key: object, count: int) -> None:
    """A key of a dict ``means``: an evaluation index ``0..count - 1``."""
    if isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < count:
        raise ValueError(f"a dict means is keyed by evaluation index 0..{count - 1}, got key "
                         f"{type(key).__name__} {shown(key, 40)}, which names no evaluation")


def _check_means_given(means: object, model: TinyTransformer, seq_lens: Sequence[int], method: str) -> None:
    """``means`` as :func:`measure` and its kin take it, before any run: with ``method="zero"``
    :func:`_check_unused_means`; with ``method="mean"`` a dict ``{index: tensor}`` must key
    evaluation indices only and hold an entry for every evaluation (ValueError naming the
    evaluation without one and the keys given), each entry a tensor ``_check_means`` accepts
    (its message names ``means[i]``). One tensor (or None) is checked where it is used."""
    if method == "zero":
        _check_unused_means(means, model, seq_lens)
        return
    if not isinstance(means, dict):
        return
    for key in means:
        _check_means_key(key, len(seq_lens))
    missing = [i for i in range(len(seq_lens)) if i not in means]
    if missing:
        raise ValueError(f"means has no entry for evaluations[{missing[0]}] (keys given: "
                         f"{shown(sorted(means), 60)}): with method='mean' a dict means needs one "
                         f"tensor per evaluation, keys 0..{len(seq_lens) - 1}, or pass one tensor for all")
    for i, fill in means.items():
        try:
            _check_means(fill, model, seq_lens[i])
        except (TypeError, ValueError) as error:
            raise type(error)(f"means[{i}]: {error}") from None


def ablated_logits(model: TinyTransformer, tokens: Tensor, heads: Sequence[Head], *,
                   method: str = "zero", means: Tensor | None = None,
                   streams: Sequence[Tensor] | None = None) -> Tensor:
    """Logits ``(B, T, V)`` with ``heads`` switched off.

    ``method="zero"`` gates them to 0 (``head_mask``); ``method="mean"`` replaces each one's
    output by ``means`` (from :func:`mean_head_outputs`) before the heads are merged. ``means``
    given with ``method="zero"`` is refused: the zero run would ignore it, and a forgotten
    ``method="mean"`` would pass for a mean ablation. (:func:`measure`, :func:`ablation_table`
    and :func:`~course_utils.interp.patching.position_ablated_logits` take ``means`` with either
    method, so one call can loop over both; ``"zero"`` leaves it unused.)

    ``streams``: the intact run's input to every block on ``tokens`` (:func:`block_inputs`),
    for several runs on one batch: each run then enters at the lowest layer ``heads`` touch,
    since below it nothing changes. The same logits (the same sums), less compute. Streams of
    another shape, dtype or device are refused, and so are those of other tokens (a ValueError
    naming ``streams``: their first, the embedding, is compared with ``tokens``' own).
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    heads = _check_heads(heads, model)
    if streams is not None:
        streams = _check_streams(streams, model, tokens)
    method = _check_method(method)
    if method == "zero" and means is not None:
        raise ValueError("means is used only by method='mean', but method is 'zero' (the default): pass "
                         "method='mean' to replace the heads' outputs by means, or drop means")
    head_mask, edit_heads = _switched_off(model, heads, method, means, tokens.shape[1])
    if streams is not None:
        return _resumed_logits(model, streams, _lowest_layer(model, heads), head_mask, edit_heads)[0]
    with torch.no_grad():
        logits, _ = model(tokens, head_mask=head_mask, edit_heads=edit_heads)
    return logits


def _check_streams(streams: object, model: TinyTransformer, tokens: Tensor) -> list[Tensor]:
    """``streams`` as :func:`block_inputs` gives them for ``tokens`` ``(B, T)``: ``L + 1``
    tensors ``(B, T, d_model)`` of the model's dtype and device, the first of them ``tokens``'
    embedding (:func:`_check_of_this_run`): the streams of other tokens, of the same shape, were
    used silently, and the logits were those of a run entering its first changed layer with them."""
    streams = check_tensor_list(streams, "streams")
    cfg = model.config
    expected = (*tokens.shape, cfg.d_model)
    if len(streams) != cfg.num_layers + 1 or any(tuple(x.shape) != expected for x in streams):
        raise ValueError(f"streams must be block_inputs(model, tokens): {cfg.num_layers + 1} tensors "
                         f"{expected} (B, T, d_model), the input to each block and the final stream, got "
                         f"{len(streams)} of shapes {[tuple(x.shape) for x in streams][:4]}")
    weight = model.token_embedding.weight
    for i, stream in enumerate(streams):
        check_stream(stream, f"streams[{i}]", d_model=cfg.d_model, weight=weight)  # the model's dtype, device
    with torch.no_grad():
        embedding = model.embed(tokens)  # (B, T, d): what block_inputs(model, tokens)[0] is
    _check_of_this_run(streams[0], embedding, "streams must be block_inputs(model, tokens)",
                       "streams[0], the stream entering block 0,", "the streams of other tokens?",
                       "leave streams out to run from the tokens")
    return streams


def _check_of_this_run(given: Tensor, ours: Tensor, must: str, part: str, hint: str, fix: str) -> None:
    """``given``, a part (``part``) of what the caller passed in to save a run (``must`` says what:
    ``"streams must be block_inputs(model, tokens)"``), agrees with ``ours``, the same part as
    this run computes it, to within the square root of the dtype's resolution relative to their
    size: a different CPU path moves last bits, not this much. Else a ValueError: ``{must} of these
    tokens``, how far ``part`` is off, ``hint`` (what it may be instead) and ``fix``."""
    gap = float((given - ours).abs().max())
    scale = max(1.0, float(ours.abs().max()))
    if not gap <= torch.finfo(ours.dtype).eps ** 0.5 * scale:
        raise ValueError(f"{must} of these tokens: {part} differs from this run's by up to {gap:.3g} "
                         f"({hint}); {fix}")


def _switched_off(model: TinyTransformer, heads: list[Head], method: str, means: Tensor | None,
                  seq_len: int) -> tuple[Tensor | None, Callable[[int, Tensor], Tensor] | None]:
    """The ``head_mask`` (zero) or ``edit_heads`` (mean) that switches ``heads`` off, for
    sequences of ``seq_len`` tokens; the other of the two is None."""
    if method == "zero":
        return gates_without(model, heads), None
    means = _check_means(means, model, seq_len)
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def replace(layer: int, outputs: Tensor) -> Tensor:  # outputs: (B, h, T, dk)
        if layer not in by_layer:
            return outputs
        outputs = outputs.clone()
        for head in by_layer[layer]:
            fill = means[layer, head]  # (dk,) or (T_ref, dk)
            outputs[:, head] = fill if fill.ndim == 1 else fill[: outputs.shape[2]]
        return outputs

    return None, replace


def block_inputs(model: TinyTransformer, tokens: Tensor) -> list[Tensor]:
    """The intact run's input to each block and the final stream: ``L + 1`` tensors ``(B, T, d)``,
    read at the hook points ``blocks.{i}.hook_resid_pre`` and the last block's ``hook_resid_post``.
    Given to :func:`ablated_logits` as ``streams``, runs that change only later layers start there."""
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    L = model.config.num_layers
    names = [f"blocks.{i}.hook_resid_pre" for i in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names=names)
    return [cache[name] for name in names]


class _KeptFields(NamedTuple):
    inputs: list[Tensor]
    heads: list[Tensor]


class KeptRun(_KeptFields):
    """What a run leaves for the runs that extend it (one more head switched off), on one batch:
    ``inputs``, the stream entering each block ``(B, T, d)``, and ``heads``, each block's head
    outputs ``(B, h, T, dk)`` before its gates and edits (read at ``attn.hook_z``). A run that
    differs only from block ``k`` on enters there with both (``run_blocks(..., heads=)``): block
    ``k``'s q, k, v and attention would be these again.

    Internal (made and read by this module's and :mod:`.patching`'s private functions), but
    checked when built (:func:`_check_kept_fields`): ``inputs`` a non-empty list of ``(B, T, d)``
    tensors, ``heads`` a list of ``(B, h, T', dk)`` tensors of the same ``B``, one per block
    (``len(inputs) - 1`` or ``len(inputs)`` of them: with or without the stream leaving the last
    block), or empty for a run kept without its head outputs (:func:`_resumed_logits` with
    ``heads=None``)."""

    __slots__ = ()

    def __new__(cls, inputs: list[Tensor], heads: list[Tensor]) -> KeptRun:
        self = super().__new__(cls, inputs, heads)
        _check_kept_fields(self)
        return self


def _check_kept_fields(run: KeptRun) -> None:
    """:class:`KeptRun`'s fields: lists of tensors of the layouts and counts its docstring gives."""
    inputs = check_tensor_list(run.inputs, "KeptRun.inputs")
    heads = check_tensor_list(run.heads, "KeptRun.heads", allow_empty=True)
    if heads and not len(inputs) - 1 <= len(heads) <= len(inputs):
        raise ValueError(f"KeptRun.heads must hold one tensor per block, len(inputs) - 1 or len(inputs) = "
                         f"{len(inputs) - 1} or {len(inputs)} (or none), got {len(heads)}")
    batch = inputs[0].shape[0] if inputs[0].ndim else None
    layouts = (("inputs", inputs, 3, "(B, T, d)"), ("heads", heads, 4, "(B, h, T, dk)"))
    for name, parts, ndim, layout in layouts:
        for i, part in enumerate(parts):
            if part.ndim != ndim or part.shape[0] != batch:
                raise ValueError(f"KeptRun.{name}[{i}] must be {layout} with B = {batch} (inputs[0]'s), "
                                 f"got shape {describe_shape(part)}")


def _head_keepers(kept: list[Tensor], layers: range) -> list[tuple[str, HookFn]]:
    """Hooks that append to ``kept`` each block's head outputs in ``layers`` as they reach
    ``attn.hook_z`` ``(B, h, T, dk)``; installed before any gate or edit there, they see them
    unedited."""
    return [(f"blocks.{i}.attn.hook_z", lambda z, hook: kept.append(z)) for i in layers]


def _stream_keepers(kept: list[Tensor], layers: range) -> list[tuple[str, HookFn]]:
    """Hooks that append to ``kept`` the stream leaving each block of ``layers`` ``(B, T, d)``
    (``blocks.{i}.hook_resid_post``, the input to block ``i + 1``), in the order the blocks run."""
    return [(f"blocks.{i}.hook_resid_post", lambda x, hook: kept.append(x)) for i in layers]


def _resumed_logits(model: TinyTransformer, inputs: list[Tensor], first: int, head_mask: Tensor | None,
                    edit_heads: Callable[[int, Tensor], Tensor] | None, heads: list[Tensor] | None = None,
                    ) -> tuple[Tensor, KeptRun]:
    """``model(tokens, head_mask=..., edit_heads=...)``'s logits, its forward path entered at block
    ``first`` with ``inputs[first]``: ``inputs`` (as :func:`block_inputs` gives them) are the
    input to every block of a run whose blocks below ``first`` compute what this run's do, so the
    same sums give the same numbers. ``heads``, that run's head outputs per block (a
    :class:`KeptRun`'s), enter block ``first`` at them: its attention is skipped. Returns the
    logits and this run's ``L + 1`` inputs and (with ``heads``) its head outputs."""
    L = model.config.num_layers
    seen, seen_heads = list(inputs[:first + 1]), [] if heads is None else list(heads[:first + 1])
    keepers = _stream_keepers(seen, range(first, L))
    if heads is not None:
        keepers += _head_keepers(seen_heads, range(first + 1, L))
    with torch.no_grad(), model.hooks(keepers):
        logits, _ = model(resid=inputs[first], start_block=first, head_mask=head_mask, edit_heads=edit_heads,
                          heads=None if heads is None or first == L else heads[first])
    return logits, KeptRun(seen, seen_heads)


def _intact_kept(model: TinyTransformer, tokens: Tensor) -> KeptRun:
    """The intact run on ``tokens`` as a :class:`KeptRun`: :func:`block_inputs` (``L + 1``
    streams) and each block's head outputs."""
    L = model.config.num_layers
    names = [f"blocks.{i}.hook_resid_pre" for i in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    heads = [f"blocks.{i}.attn.hook_z" for i in range(L)]
    with torch.no_grad():
        _, cache = model.run_with_cache(tokens, names=names + heads)
    return KeptRun([cache[name] for name in names], [cache[name] for name in heads])


# -- what to measure ---------------------------------------------------------------------
def sequence_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """``(B,)`` mean next-token cross-entropy of each sequence over its counted targets
    (``targets`` ``(B, T)`` long, ids in ``[0, V)``, ``-100`` = not counted)."""
    _check_logits_and_targets(logits, targets)
    counted = targets != -100  # (B, T)
    if not counted.any(dim=1).all():
        raise ValueError("every sequence needs at least one counted target (targets != -100)")
    per_token = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none")  # (B*T,)
    per_token = torch.where(counted, per_token.view(targets.shape), 0.0)  # uncounted: 0, even if NaN
    losses = per_token.sum(1) / counted.sum(1)
    if not bool(torch.isfinite(losses).all()):  # one check of B numbers: a metric is never NaN
        _refuse_non_finite_logits(logits, counted, float(losses[~torch.isfinite(losses)][0]))
    return losses


def average_loss(logits: Tensor, targets: Tensor) -> float:
    """Mean next-token cross-entropy over every counted target of the batch (``logits``
    ``(B, T, V)``, ``targets`` ``(B, T)`` long, ids in ``[0, V)``, ``-100`` = not counted)."""
    _check_logits_and_targets(logits, targets)
    counted = targets != -100
    if not counted.any():
        raise ValueError("targets count nothing (all -100)")
    loss = float(F.cross_entropy(logits.flatten(0, 1), targets.flatten()))
    if not math.isfinite(loss):  # checked on the result: one number, no extra pass when all is well
        _refuse_non_finite_logits(logits, counted, loss)
    return loss


def _refuse_non_finite_logits(logits: Tensor, counted: Tensor, loss: float) -> None:
    """Say where the logits that made a NaN or infinite loss are (model weights gone NaN, a
    NaN input, float16 overflow): a metric that is NaN must not be reported as one."""
    bad = (~torch.isfinite(logits)).any(-1) & counted  # (B, T)
    if bad.any():
        b, t = bad.nonzero()[0].tolist()
        raise ValueError(f"logits must be finite at the counted positions, got NaN or infinity at "
                         f"{int(bad.sum())} of them (first: batch {b}, position {t}); the loss would be "
                         f"{loss}. Are the model's weights NaN?")
    raise ValueError(f"the loss is {loss}: the logits are finite but too large to combine")


def loss_evaluation(tokens: Tensor, targets: Tensor, name: str = "loss") -> Evaluation:
    """An :class:`Evaluation` that reports the average next-token loss as ``name`` (a non-empty
    str: the key of the score, and a column of :func:`ablation_table`). No model is given here,
    so ``tokens`` and ``targets`` are checked against a vocabulary where the evaluation meets one
    (:func:`measure`, :func:`ablation_table`, ...: an id ``>= vocab_size`` is refused there,
    naming the range); here a negative id is refused (but ``-100`` in ``targets``, not counted)."""
    _check_tokens(tokens, "tokens")
    _check_targets_like(targets, tokens)
    if targets.dtype != torch.long:
        raise TypeError(f"targets must be a torch.long tensor (B, T) of next-token ids (-100 = not counted), "
                        f"got {_described(targets)}")
    check_holds_values(targets, "targets")
    wrong = (targets < 0) & (targets != -100)
    if wrong.any():
        where = tuple(wrong.nonzero()[0].tolist())
        raise ValueError(f"targets must be next-token ids >= 0 or -100 (not counted), got "
                         f"{int(targets[where])} at (batch, position) {where}")
    from ..cli import check_label

    check_label(name, "name", "the score's name, such as 'loss'")
    return Evaluation(tokens, lambda logits: {name: average_loss(logits, targets)})


def _check_evaluations(evaluations: object, model: TinyTransformer) -> list[Evaluation]:
    """An Evaluation or a non-empty list of them, each one's tokens fitting ``model`` (named
    ``evaluations.tokens`` or ``evaluations[i].tokens``, before any forward pass)."""
    _check_model(model)
    if isinstance(evaluations, Evaluation):
        _check_tokens(evaluations.tokens, "evaluations.tokens", model)
        return [evaluations]
    if isinstance(evaluations, Sequence) and not isinstance(evaluations, (str, bytes)):
        evaluations = items_of(evaluations, "evaluations", "an Evaluation or a non-empty list of them")
    if not isinstance(evaluations, Sequence) or not evaluations or not all(
            isinstance(e, Evaluation) for e in evaluations):
        raise TypeError(f"evaluations must be an Evaluation or a non-empty list of them, got "
                        f"{type(evaluations).__name__} {shown(evaluations, 60)}")
    for i, evaluation in enumerate(evaluations):
        _check_tokens(evaluation.tokens, f"evaluations[{i}].tokens", model)
    return list(evaluations)


def measure(model: TinyTransformer, evaluations: Evaluation | Sequence[Evaluation],
            heads: Sequence[Head] = (), *, method: str = "zero",
            means: dict[int, Tensor] | Tensor | None = None) -> dict[str, float]:
    """Every evaluation's numbers with ``heads`` switched off, merged into one dict.

    ``means`` is one tensor for every evaluation, or ``{index: tensor}`` per evaluation
    (batches whose means differ, e.g. per-position means of different lengths), one entry per
    evaluation: a missing entry or a key that names no evaluation is a ValueError before any
    run. With ``method="zero"`` it is unused, but still checked (:func:`_check_means_given`).
    """
    evaluations = _check_evaluations(evaluations, model)
    method = _check_method(method)
    _check_means_given(means, model, [e.tokens.shape[1] for e in evaluations], method)
    result: dict[str, float] = {}
    for i, evaluation in enumerate(evaluations):
        fill = means.get(i) if isinstance(means, dict) else means
        logits = ablated_logits(model, evaluation.tokens, heads, method=method,
                                means=fill if method == "mean" else None)  # "zero" leaves means unused
        _add_scores(result, _check_scores(evaluation.score(logits), i), i)
    return result


def _add_scores(result: dict[str, float], scores: dict[str, float], i: int) -> None:
    """Add evaluation ``i``'s ``scores`` to ``result``; a name an earlier evaluation already gave
    is refused (merging would keep only the later evaluation's number)."""
    repeated = sorted(set(scores) & set(result))
    if repeated:
        raise ValueError(f"evaluations[{i}].score returned {repeated}, which an earlier evaluation "
                         "also returned: give each evaluation's numbers their own names "
                         "(e.g. 'loss_induction', 'loss_agreement')")
    result.update(scores)


def _measure_resumed(model: TinyTransformer, evaluations: list[Evaluation], heads: list[Head], method: str,
                     means: dict[int, Tensor] | Tensor | None, streams: list[KeptRun], first: int,
                     ) -> tuple[dict[str, float], list[KeptRun]]:
    """:func:`measure`'s numbers, each evaluation's run entered at block ``first`` from
    ``streams[i]``, a run that agrees with this one below ``first`` and in block ``first``'s
    attention (:func:`_resumed_logits`); also returns this run, per evaluation."""
    result: dict[str, float] = {}
    seen = []
    for i, evaluation in enumerate(evaluations):
        fill = means.get(i) if isinstance(means, dict) else means
        head_mask, edit_heads = _switched_off(model, heads, method, fill, evaluation.tokens.shape[1])
        source = streams[i]
        logits, kept = _resumed_logits(model, source.inputs, first, head_mask, edit_heads, source.heads)
        seen.append(kept)
        _add_scores(result, _check_scores(evaluation.score(logits), i), i)
    return result, seen


def _lowest_layer(model: TinyTransformer, heads: Sequence[Head]) -> int:
    """The first block ``heads`` change (``L`` for none): below it the run is the intact one."""
    return min((layer for layer, _ in heads), default=model.config.num_layers)


def _check_scores(scores: object, i: int) -> dict[str, float]:
    """What ``evaluations[i].score`` returned: a non-empty dict ``{name (str): number}``, no
    number NaN (an empty dict would measure nothing, and ``measure`` would answer ``{}``)."""
    scores = _check_numbers(scores, f"evaluations[{i}].score must return")
    if not scores:
        raise ValueError(f"evaluations[{i}].score must return at least one number, such as "
                         "{'loss': 2.3}, got {}: the evaluation would measure nothing")
    return scores


def _check_numbers(scores: object, must: str) -> dict[str, float]:
    """A dict ``{name (str): number}`` with no NaN (a NaN compares False with every bound, so it
    would read as a verdict); ``must`` starts the message (``"evaluations[0].score must return"``,
    ``"known[...] must be"``)."""
    if not isinstance(scores, dict) or not all(isinstance(k, str) for k in scores):
        raise TypeError(f"{must} a dict {{name: number}} such as {{'loss': 2.3}}, got "
                        f"{type(scores).__name__} {shown(scores, 200)}")
    for name, value in scores.items():
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            hint = " (turn a one-number tensor into a number with float(t))" \
                if isinstance(value, Tensor) else ""
            raise TypeError(f"{must} a dict {{name: number}} such as {{'loss': 2.3}}, got "
                            f"{shown(name)}: {_described(value)}{hint}")
        try:
            nan = math.isnan(value)
        except OverflowError:  # an int no float holds: Python's message named nothing (battery 27)
            raise ValueError(f"{must} a dict {{name: number}} of numbers a float holds, got {shown(name)}: "
                             f"{_described(value)}") from None
        if nan:
            raise ValueError(f"{must} a dict {{name: number}} with no NaN, got {shown(name)}: nan (a score "
                             f"reading logits an EvaluationAt does not compute gets NaN)")
    return scores


def ablation_table(model: TinyTransformer, evaluations: Evaluation | Sequence[Evaluation],
                   cases: dict[str, Sequence[Head]], *, method: str = "zero",
                   means: dict[int, Tensor] | Tensor | None = None) -> pd.DataFrame:
    """One row per case (name -> heads to switch off), one column per measured number; each name is
    a non-empty str (the row's label). ``means`` as in :func:`measure` (unused but checked with
    ``method="zero"``)."""
    cases = dict_of(cases, "cases", "a non-empty dict {name: [(layer, head), ...]}")
    if not isinstance(cases, dict) or not cases:
        raise TypeError(f"cases must be a non-empty dict {{name: [(layer, head), ...]}}, got "
                        f"{type(cases).__name__} {shown(cases, 60)}")
    from ..cli import check_label

    for name in cases:
        check_label(name, f"each name in cases (the key "
                          f"{shown(name, 40)})", "the row's label, such as 'prev'")
    evaluations = _check_evaluations(evaluations, model)
    method = _check_method(method)
    cases = {name: _check_heads(heads, model, f"cases[{shown(name)}]") for name, heads in cases.items()}
    _check_means_given(means, model, [e.tokens.shape[1] for e in evaluations], method)
    # Each case enters the first block its heads change at the intact run's stream and head
    # outputs there (one intact run per evaluation): the blocks below it, and that block's
    # attention, would compute the same numbers again.
    intact = [_intact_kept(model, e.tokens) for e in evaluations]
    rows = {name: _measure_resumed(model, evaluations, heads, method, means, intact,
                                   _lowest_layer(model, heads))[0]
            for name, heads in cases.items()}
    return pd.DataFrame.from_dict(rows, orient="index")


# -- importance and pruning --------------------------------------------------------------
def head_importance(model: TinyTransformer, tokens: Tensor, targets: Tensor, *,
                    chunk_size: int = 256) -> Tensor:
    """Michel et al.'s ``I_h = E_x |dL(x)/dxi_h|`` at ``xi = 1``: ``(L, h)``.

    ``L(x)`` is sequence ``x``'s mean next-token loss (:func:`sequence_losses`). Each
    sequence gets its own gates ``xi`` ``(B, L, h)``, so one backward pass of the summed
    losses gives every per-sequence gradient at once; their absolute values are averaged
    over the sequences. The model's weights are left untouched (no gradient kept on them).
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    _check_targets_like(targets, tokens)
    chunk_size = check_int(chunk_size, "chunk_size", minimum=1)
    cfg = model.config
    total = torch.zeros(cfg.num_layers, cfg.num_heads, device=tokens.device,
                        dtype=model.token_embedding.weight.dtype)
    weights = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        for start in range(0, tokens.shape[0], chunk_size):
            chunk, chunk_targets = tokens[start:start + chunk_size], targets[start:start + chunk_size]
            xi = torch.ones(chunk.shape[0], cfg.num_layers, cfg.num_heads, requires_grad=True,
                            device=tokens.device, dtype=model.token_embedding.weight.dtype)  # (B, L, h)

            def gate(layer: int, heads: Tensor, xi: Tensor = xi) -> Tensor:  # heads: (B, h, T, dk)
                return heads * xi[:, layer, :, None, None]

            with gradients_on("head_importance"):
                logits, _ = model(chunk, edit_heads=gate)
                sequence_losses(logits, chunk_targets).sum().backward()
            total += xi.grad.abs().sum(0)  # (L, h): sum over sequences of |dL(x)/dxi|
    finally:
        for p, flag in zip(model.parameters(), weights, strict=True):
            p.requires_grad_(flag)
    return total / tokens.shape[0]


def _check_importance(importance: object) -> None:
    """``importance`` is a non-empty ``(L, h)`` floating tensor with values (not on the meta
    device) and no NaN or infinity, which could not be ranked."""
    if not isinstance(importance, Tensor) or importance.ndim != 2 or importance.numel() == 0:
        raise ValueError(f"importance must be a non-empty (L, h) tensor (from head_importance), got "
                         f"{_described(importance)}")
    if not importance.is_floating_point():
        raise TypeError(f"importance must hold floating-point scores, got dtype {importance.dtype}; convert "
                        "with importance.float()")
    check_holds_values(importance, "importance")
    if not torch.isfinite(importance).all():
        where = [f"L{layer}H{head}" for layer, head in (~torch.isfinite(importance)).nonzero().tolist()]
        raise ValueError(f"importance holds NaN or infinity at {', '.join(where[:6])}: it cannot be ranked")


def importance_order(importance: Tensor) -> list[Head]:
    """Heads from least to most important (ties: lower layer, then lower head first)."""
    _check_importance(importance)
    flat = importance.flatten().tolist()
    order = sorted(range(len(flat)), key=lambda i: (flat[i], i))
    return [divmod(i, importance.shape[1]) for i in order]


def random_orders(model: TinyTransformer, seeds: Sequence[int]) -> list[list[Head]]:
    """One random pruning order of all heads per seed (``torch.randperm``, seeded)."""
    heads = all_heads(model)
    if isinstance(seeds, (str, int)) or not isinstance(seeds, Sequence) or not all(
            isinstance(s, int) and not isinstance(s, bool) for s in seeds):
        raise TypeError(f"seeds must be a list of ints such as [0, 1, 2], got "
                        f"{type(seeds).__name__} {shown(seeds)}")
    for s in seeds:
        check_seed(s, "each seed")
    return [[heads[i] for i in torch.randperm(len(heads), generator=torch.Generator().manual_seed(s))]
            for s in seeds]


def _check_counts(counts: object, most: int) -> list[int]:
    """``counts``: a list of ints (not bools) in ``0..most`` (``most``: the heads order lists)."""
    if isinstance(counts, (str, bytes, Tensor)) or not isinstance(counts, Iterable):
        raise TypeError(f"counts must be a list of ints in 0..{most} (how many heads to switch off), "
                        f"or None for every count; got {type(counts).__name__} {shown(counts)}")
    counts = items_of(counts, "counts", f"a list of ints in 0..{most}")
    if not counts:
        raise ValueError(f"counts must list at least one head count in 0..{most} (None: every count), got []")
    for k in counts:
        if isinstance(k, bool) or not isinstance(k, int):
            raise TypeError(f"counts must be ints in 0..{most}, got {type(k).__name__} {shown(k)} in "
                            f"{counts}")
    if any(not 0 <= k <= most for k in counts):
        raise ValueError(f"counts must be ints in 0..{most} (order lists {most} head{'s' * (most != 1)}), "
                         f"got {counts}")
    return check_distinct(counts, "counts", "head counts")  # a repeat would measure and tabulate twice


def pruning_curve(model: TinyTransformer, evaluations: Evaluation | Sequence[Evaluation],
                  order: Sequence[Head], *, counts: Sequence[int] | None = None, method: str = "zero",
                  means: dict[int, Tensor] | Tensor | None = None) -> pd.DataFrame:
    """Switch off the first ``k`` heads of ``order`` for each ``k`` in ``counts`` (default
    0..all) and measure; one row per ``k`` with ``pruned`` (k) and ``fraction`` columns.
    ``means`` as in :func:`measure` (unused but checked with ``method="zero"``). ``order`` lists
    each head at most once (an empty one gives the intact row alone), and every count is in
    ``0..len(order)``: a larger one is a ValueError naming ``counts`` and how many heads ``order``
    lists. A number the evaluations return named ``"pruned"`` or ``"fraction"`` is refused after
    the first run, a ValueError naming it: it would overwrite that column (or be overwritten)."""
    order = _check_heads(order, _check_model(model), "order")  # each head once
    counts = range(len(order) + 1) if counts is None else _check_counts(counts, len(order))
    evaluations = _check_evaluations(evaluations, model)
    method = _check_method(method)
    _check_means_given(means, model, [e.tokens.shape[1] for e in evaluations], method)
    total = len(all_heads(model))
    # k heads off is k' < k heads off plus order[k':k]: the run for k enters the first block
    # those change at the run for k' (the largest k' measured so far; 0: the intact run): its
    # stream and head outputs there.
    streams, done = [_intact_kept(model, e.tokens) for e in evaluations], 0
    rows = {}
    for k in sorted(set(counts)):
        numbers, streams = _measure_resumed(model, evaluations, order[:k], method, means, streams,
                                            _lowest_layer(model, order[done:k]))
        check_names_free(numbers, "evaluations (the names their score returns)", ("pruned", "fraction"),
                         "the number of heads switched off and its fraction (pruning_curve's own columns)")
        rows[k], done = {"pruned": k, "fraction": k / total} | numbers, k
    return pd.DataFrame([rows[k] for k in counts])
