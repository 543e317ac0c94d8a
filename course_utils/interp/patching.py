"""Interpretability tools beyond switching whole heads off (lesson 6).

Every intervention here goes through the hook points of
:class:`~course_utils.model.TinyTransformer`'s one forward pass: ``head_mask`` gates, the
``edit_heads(layer, heads)`` hook that sees each layer's head outputs ``(B, h, T, dk)`` just
before they are merged, and PyTorch's own module hooks (``register_forward_hook`` on the
embeddings and MLPs, a pre-hook on the final LayerNorm) to read the residual stream.
Nothing re-implements the model.

* **Position-restricted ablation** (:func:`position_ablated_logits`): switch heads off only at
  some query positions, zero or mean.
* **Activation patching** (:func:`patched_logits`, :func:`patching_table`): run the model on
  one input with some heads' outputs taken from a run on another input.
* **Path patching** (:func:`path_patched_logits`): the same, along one path only, from some
  heads into the inputs of heads in later layers.
* **Direct logit attribution** (:func:`direct_logit_attribution`): split a logit difference
  into one term per component of the residual stream (embeddings, each head, each attention
  bias, each MLP, the final LayerNorm's bias), holding the final LayerNorm's scale fixed; the
  terms add up to the model's own logit difference.
* **Per-sequence gate gradients** (:func:`sequence_gate_gradients`): the numbers Michel et
  al.'s importance averages, kept per sequence so that they can be resampled.
* **Pruning tolerance over many orders** (:func:`prunable_counts`): how many heads each order
  switches off before a check first fails, each distinct set of heads measured once.
* **Resample ablation** (:func:`resampled_logits`, :func:`resampled_outputs`): each sequence
  gets the heads' outputs from a random reference sequence of the same length, a definite but
  unrelated input; :func:`resampled_one_at_a_time` resamples many heads, one at a time, over
  many draws, several per forward pass.
* :class:`EvaluationAt`: an evaluation whose score reads one position per sequence; the batched
  zero ablation (:func:`measure_zeroed_sets`, :func:`prunable_counts`) then runs the last layer
  at those positions only.
* **Loss along many pruning orders** (:func:`losses_along_orders`): the average loss after
  every head of each order, several orders per forward pass.
* :func:`flip_subject_number`: the corrupted twin of each agreement sentence, for patching.
* :func:`trimmed_by_length`: an agreement batch in a few groups of similar length, each cut
  after its last verb-predicting position (fewer padded tokens to compute, same scores).
* :func:`layer_normalised_order`: Michel et al.'s ranking, scores divided by their layer's
  l2 norm before heads of different layers are compared.

Shapes: L layers, h heads, B batch, T positions, dk = d_model // h, d = d_model.

Bad input: every list or dict the caller gives (heads, orders, cases, scores, ...) is read through
``items_of`` / ``dict_of``, so one whose ``len()``, iteration or lookup raises is a TypeError
naming the argument, its own error chained, before any tensor work.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from ..attention.hooks import HookFn
from ..attention.validation import (
    check_callable,
    check_edited_heads,
    check_finite,
    check_fits_in_memory,
    check_holds_values,
    check_ids,
    check_int,
    check_not_inference,
    check_real,
    check_weights_finite,
    items_of,
    shown,
)
from ..env import gradients_on
from ..model.transformer import TinyTransformer
from ..tasks.synthetic import AGREEMENT_VOCAB, NOUNS, TRANSITIVE_VERBS, WORD_TO_ID, AgreementBatch
from .ablation import (
    Evaluation,
    KeptRun,
    _check_evaluations,
    _check_heads,
    _check_importance,
    _check_means,
    _check_means_given,
    _check_method,
    _check_model,
    _check_numbers,
    _check_of_this_run,
    _check_scores,
    _check_targets_like,
    _check_tokens,
    _check_unused_means,
    _described,
    _head_keepers,
    _intact_kept,
    _resumed_logits,
    _stream_keepers,
    block_inputs,
    head_name,
    head_outputs,
    importance_order,
    loss_evaluation,
    measure,
    sequence_losses,
)
from .circuits import frozen_final_norm

__all__ = [
    "position_ablated_logits",
    "patched_logits",
    "patching_table",
    "path_patched_logits",
    "resampled_logits",
    "resampled_outputs",
    "resampled_rows",
    "resampled_one_at_a_time",
    "losses_along_orders",
    "direct_logit_attribution",
    "final_scale",
    "sequence_gate_gradients",
    "layer_normalised_order",
    "prunable_counts",
    "EvaluationAt",
    "flip_subject_number",
    "trimmed_by_length",
]

Head = tuple[int, int]


def _check_where(where: object, tokens: Tensor) -> Tensor:
    """A bool mask ``(B, T)`` (``(T,)`` is broadcast over the batch)."""
    B, T = tokens.shape
    if not isinstance(where, Tensor) or where.dtype != torch.bool or where.shape not in ((T,), (B, T)):
        raise TypeError(f"where must be a bool tensor (T,) = ({T},) or (B, T) = ({B}, {T}) marking the "
                        f"query positions to change, got " + (f"{where.dtype} {tuple(where.shape)}"
                                                               if isinstance(where, Tensor)
                                                               else type(where).__name__))
    if where.device != tokens.device:
        raise ValueError(f"where is on {where.device} but tokens are on {tokens.device}: move it with "
                         f"where.to({str(tokens.device)!r})")
    return where.expand(B, T)


def _check_source_outputs(source_outputs: object, model: TinyTransformer, tokens: Tensor, *,
                          name: str = "source_outputs", of: str = "source_tokens") -> None:
    """What :func:`patched_logits` copies in: ``head_outputs(model, source_tokens)``, a finite
    tensor ``(L, B, h, T, dk)`` of the model's dtype, on its device (an integer tensor would be
    cast silently, a NaN one would make every logit downstream NaN); ``name`` and ``of`` are how
    the messages name the argument and the tokens it was computed on."""
    cfg = model.config
    expected = (cfg.num_layers, tokens.shape[0], cfg.num_heads, tokens.shape[1], cfg.d_model // cfg.num_heads)
    if not isinstance(source_outputs, Tensor) or tuple(source_outputs.shape) != expected:
        got = (tuple(source_outputs.shape) if isinstance(source_outputs, Tensor)
               else type(source_outputs).__name__)
        raise ValueError(f"{name} must be head_outputs(model, {of}), shaped "
                         f"(L, B, h, T, dk) = {expected}, got {got}")
    _check_head_output_values(source_outputs, name, of, model)
    weight = model.token_embedding.weight
    if tokens.device != weight.device:
        raise ValueError(f"tokens are on {tokens.device} but the model is on {weight.device}: move them with "
                         f"tokens.to({str(weight.device)!r})")


def _check_head_output_values(outputs: Tensor, name: str, of: str, model: TinyTransformer) -> None:
    """Head outputs copied into a run (``head_outputs(model, of)``, shape checked by the caller):
    of the model's dtype (an integer tensor would be cast silently), holding values (not the meta
    device), on the model's device and finite (a NaN or infinite head output makes every later
    logit NaN)."""
    weight = model.token_embedding.weight
    if outputs.dtype != weight.dtype:
        raise TypeError(f"{name} must be head_outputs(model, {of}), of the model's dtype "
                        f"{weight.dtype}, got dtype {outputs.dtype}")
    check_holds_values(outputs, name)
    if outputs.device != weight.device:
        raise ValueError(f"{name} is on {outputs.device} but the model is on {weight.device}: "
                         f"move it with {name}.to({str(weight.device)!r})")
    check_finite(outputs, name, "a NaN or infinite head output makes every later logit NaN")


def _check_outputs_of_this_run(outputs: Tensor, cache: dict[str, Tensor], senders: Sequence[Head]) -> None:
    """``outputs`` (``head_outputs(model, tokens)``, given to save a run) agrees with this run's
    own outputs of the senders (``cache``: their layers' ``attn.hook_z``, ``(B, h, T, dk)``) up to
    float rounding (:func:`_check_of_this_run`); outputs of other tokens are refused."""
    for layer, head in senders:
        _check_of_this_run(outputs[layer, :, head], cache[f"blocks.{layer}.attn.hook_z"][:, head],
                           "outputs must be head_outputs(model, tokens)",
                           f"sender {head_name(layer, head)}'s output in it", "head outputs of other tokens?",
                           "leave outputs out to compute them")


def _by_layer(heads: Sequence[Head]) -> dict[int, list[int]]:
    layers: dict[int, list[int]] = {}
    for layer, head in heads:
        layers.setdefault(layer, []).append(head)
    return layers


# -- position-restricted ablation --------------------------------------------------------
def position_ablated_logits(model: TinyTransformer, tokens: Tensor, heads: Sequence[Head], where: Tensor, *,
                            method: str = "zero", means: Tensor | None = None) -> Tensor:
    """Logits ``(B, T, V)`` with ``heads`` switched off only at the query positions ``where``
    marks (``(T,)`` or ``(B, T)`` bool); elsewhere they are untouched.

    ``method="zero"`` writes 0 there, ``method="mean"`` the head's mean output (``means``
    from :func:`~course_utils.interp.ablation.mean_head_outputs`, ``(L, h, dk)`` or ``(L, h, T, dk)``;
    ``"zero"`` leaves ``means`` unused, so one call can loop over both methods, but checks it: a
    means ``"mean"`` could not use is refused with either method). Switching a head
    off at every position gives :func:`~course_utils.interp.ablation.ablated_logits`.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    heads = _check_heads(heads, model)
    where = _check_where(where, tokens)  # (B, T)
    method = _check_method(method)
    if method == "mean":
        means = _check_means(means, model, tokens.shape[1])
    else:
        _check_unused_means(means, model, [tokens.shape[1]], per_evaluation=False)
    layers = _by_layer(heads)
    T = tokens.shape[1]

    def edit(layer: int, outputs: Tensor) -> Tensor:  # outputs: (B, h, T, dk)
        if layer not in layers:
            return outputs
        outputs = outputs.clone()
        for head in layers[layer]:
            if method == "zero":
                fill = torch.zeros_like(outputs[:, head])  # (B, T, dk)
            else:
                fill = means[layer, head]  # (dk,) or (T_ref, dk)
                fill = (fill if fill.ndim == 1 else fill[:T]).expand_as(outputs[:, head])
            outputs[:, head] = torch.where(where[..., None], fill, outputs[:, head])
        return outputs

    with torch.no_grad():
        logits, _ = model(tokens, edit_heads=edit)
    return logits


# -- activation patching -----------------------------------------------------------------
def patched_logits(model: TinyTransformer, tokens: Tensor, source_outputs: Tensor, heads: Sequence[Head], *,
                   where: Tensor | None = None) -> Tensor:
    """Logits ``(B, T, V)`` of a run on ``tokens`` in which ``heads`` output what they output
    in another run, ``source_outputs`` ``(L, B, h, T, dk)`` (from
    :func:`~course_utils.interp.ablation.head_outputs` on the other input, same shape), at the
    positions ``where`` marks (default: every position).

    Each patched head's output is replaced; everything downstream of it is recomputed.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    heads = _check_heads(heads, model)
    _check_source_outputs(source_outputs, model, tokens)
    where = None if where is None else _check_where(where, tokens)
    with torch.no_grad():
        logits, _ = model(tokens, edit_heads=_patching_edit(source_outputs, heads, where))
    return logits


def _patching_edit(source_outputs: Tensor, heads: list[Head], where: Tensor | None
                   ) -> Callable[[int, Tensor], Tensor]:
    """:func:`patched_logits`' ``edit_heads``: ``heads`` output ``source_outputs`` at ``where``."""
    layers = _by_layer(heads)

    def edit(layer: int, outputs: Tensor) -> Tensor:  # outputs: (B, h, T, dk)
        if layer not in layers:
            return outputs
        outputs = outputs.clone()
        for head in layers[layer]:
            source = source_outputs[layer, :, head]  # (B, T, dk)
            outputs[:, head] = source if where is None else torch.where(where[..., None], source,
                                                                        outputs[:, head])
        return outputs

    return edit


def patching_table(model: TinyTransformer, tokens: Tensor, source_tokens: Tensor,
                   metric: Callable[[Tensor], float], *, where: Tensor | None = None) -> Tensor:
    """``metric`` of the run on ``tokens`` with one head at a time patched from the run on
    ``source_tokens``: ``(L, h)``. ``metric(logits (B, T, V)) -> float`` (a finite number: a
    NaN cell could not be compared with the others)."""
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    _check_tokens(source_tokens, "source_tokens", model)
    check_callable(metric, "metric", "a function logits (B, T, V) -> float", nargs=1)
    if source_tokens.shape != tokens.shape:
        raise ValueError(f"source_tokens {tuple(source_tokens.shape)} must be shaped like tokens "
                         f"{tuple(tokens.shape)}: the two runs are compared position by position")
    where = None if where is None else _check_where(where, tokens)
    source = head_outputs(model, source_tokens)  # (L, B, h, T, dk)
    intact = _intact_kept(model, tokens)  # below a patched head's layer and in its attention: this run
    cfg = model.config
    table = torch.zeros(cfg.num_layers, cfg.num_heads)
    for layer in range(cfg.num_layers):
        for head in range(cfg.num_heads):
            edit = _patching_edit(source, [(layer, head)], where)
            value = metric(_resumed_logits(model, intact.inputs, layer, None, edit, intact.heads)[0])
            table[layer, head] = check_real(value, f"metric(logits) with {head_name(layer, head)} patched")
    return table


def _check_own_run_finite(outputs: Tensor, model: TinyTransformer) -> None:
    """The head outputs :func:`path_patched_logits` computed itself are finite; else a ValueError
    naming the first of ``model``'s parameters that holds NaN or infinity, or (the weights being
    finite) the run's outputs. One reduction over ``outputs`` when all is well."""
    if bool(torch.isfinite(outputs).all()):
        return
    check_weights_finite(model, "path patching runs the model on tokens, and a NaN weight makes every "
                         "patched logit NaN: did training diverge?")
    check_finite(outputs, "head_outputs(model, tokens)", "the model's weights are finite: an overflow?")


def path_patched_logits(model: TinyTransformer, tokens: Tensor, source_outputs: Tensor,
                        senders: Sequence[Head], receivers: Sequence[Head], *,
                        outputs: Tensor | None = None) -> Tensor:
    """Logits ``(B, T, V)`` of a run on ``tokens`` in which only the path from ``senders`` to
    ``receivers`` carries the other input (path patching).

    Each sender's change, its output in the other run (``source_outputs``, ``head_outputs`` on
    that input, ``(L, B, h, T, dk)``) minus its output in this one, is sent through its slice of
    ``W_O`` straight into the input of each receiver (queries, keys and values all read it); no
    other component sees it. The receivers' new outputs then replace theirs in the run on
    ``tokens``, and everything downstream of them is recomputed. Every receiver must lie in a
    later layer than every sender. ``outputs`` (``head_outputs(model, tokens)``) saves one run;
    the senders' outputs in it are compared with the first receivers' run, which computes them
    again, and outputs of other tokens are refused (battery 23: they were used silently).
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    senders, receivers = _check_heads(senders, model, "senders"), _check_heads(receivers, model, "receivers")
    if not senders or not receivers:
        raise ValueError("senders and receivers must each name at least one (layer, head) pair")
    if min(layer for layer, _ in receivers) <= max(layer for layer, _ in senders):
        raise ValueError(f"every receiver must lie in a later layer than every sender: senders "
                         f"{[head_name(*h) for h in senders]}, "
                         f"receivers {[head_name(*h) for h in receivers]}")
    _check_source_outputs(source_outputs, model, tokens)
    given = outputs is not None
    if outputs is None:
        outputs = head_outputs(model, tokens)
        _check_own_run_finite(outputs, model)  # else patched_logits blames the caller's source_outputs
    else:
        _check_source_outputs(outputs, model, tokens, name="outputs", of="tokens")
    cfg = model.config
    dk = cfg.d_model // cfg.num_heads
    change = sum((source_outputs[layer, :, head] - outputs[layer, :, head])
                 @ model.blocks[layer].attn.out_proj.weight[:, head * dk:(head + 1) * dk].T
                 for layer, head in senders)  # (B, T, d): the senders' direct change to the stream
    received: dict[int, Tensor] = {}
    with torch.no_grad():
        for layer in sorted(_by_layer(receivers)):  # the receivers' outputs, reading the changed stream
            names = [f"blocks.{layer}.attn.hook_z"]
            if given and not received:  # the senders' layers run before the change: this run's own
                names += [f"blocks.{s}.attn.hook_z" for s in sorted(_by_layer(senders))]
            with model.hooks([(f"blocks.{layer}.hook_resid_pre", lambda x, hook: x + change)]):
                _, cache = model.run_with_cache(tokens, names=names)
            if given and not received:
                _check_outputs_of_this_run(outputs, cache, senders)
            received[layer] = cache[f"blocks.{layer}.attn.hook_z"]  # (B, h, T, dk)
    source = outputs.clone()
    for layer, head in receivers:
        source[layer, :, head] = received[layer][:, head]
    return patched_logits(model, tokens, source, receivers)


# -- resample ablation ---------------------------------------------------------------------
def resampled_outputs(model: TinyTransformer, lengths: Tensor, reference: Tensor, reference_lengths: Tensor,
                      seq_len: int, *, generator: torch.Generator,
                      reference_outputs: Tensor | None = None) -> Tensor:
    """Every head's output on a random ``reference`` sequence of the same length as each of the
    ``B`` sequences that ``lengths`` ``(B,)`` describes: ``(L, B, h, seq_len, dk)``, one draw
    per sequence from ``generator`` (``reference_lengths`` ``(R,)`` count real tokens).

    The reference's positions beyond ``seq_len`` are dropped and missing ones are zero (they
    lie past the sequence's end, where causal attention cannot reach). Each length lies in
    ``0..seq_len`` (``lengths``) or ``0..T_ref`` (``reference_lengths``). ``reference_outputs``
    (``head_outputs(model, reference)``, ``(L, R, h, T_ref, dk)``) saves recomputing them
    when the same reference serves several calls; the draws are the same either way.
    """
    _check_model(model)
    _check_tokens(reference, "reference", model)
    seq_len = check_int(seq_len, "seq_len", minimum=1)
    _check_lengths(lengths, "lengths", "(B,)")
    if not (isinstance(reference_lengths, Tensor) and reference_lengths.shape == (reference.shape[0],)):
        raise ValueError(f"reference_lengths must be a (R,) = ({reference.shape[0]},) tensor of lengths, "
                         f"got {_described(reference_lengths)}")
    _check_lengths(reference_lengths, "reference_lengths", "(R,)")
    # a length counts real tokens of its batch: a reference longer than its T_ref positions would
    # be drawn for a sequence of that length and copied from positions it does not have
    for name, values, width, of in (("lengths", lengths, seq_len, "the sequences'"),
                                    ("reference_lengths", reference_lengths, reference.shape[1],
                                     "the reference's")):
        check_ids(values, name, width + 1, f"lengths (real tokens among {of} {width} positions)")
    cfg = model.config
    expected = (cfg.num_layers, reference.shape[0], cfg.num_heads, reference.shape[1],
                cfg.d_model // cfg.num_heads)
    itemsize = model.token_embedding.weight.element_size()
    check_fits_in_memory(cfg.num_layers * len(lengths) * cfg.d_model * seq_len * itemsize, "seq_len",
                         f"every head's output (L, B, h, seq_len, dk) = ({cfg.num_layers}, {len(lengths)}, "
                         f"{cfg.num_heads}, {seq_len:,}, {cfg.d_model // cfg.num_heads})")
    if reference_outputs is None:
        reference_outputs = head_outputs(model, reference)
    elif not isinstance(reference_outputs, Tensor) or tuple(reference_outputs.shape) != expected:
        raise ValueError(f"reference_outputs must be head_outputs(model, reference), shaped "
                         f"(L, R, h, T_ref, dk) = {expected}, got {_described(reference_outputs)}")
    else:
        _check_head_output_values(reference_outputs, "reference_outputs", "reference", model)
    rows = resampled_rows(lengths, reference_lengths, generator=generator)
    source = reference_outputs[:, rows, :, :seq_len]  # (L, B, h, min(T, T_ref), dk)
    if source.shape[3] < seq_len:
        source = torch.nn.functional.pad(source, (0, 0, 0, seq_len - source.shape[3]))
    return source.contiguous()


def _check_lengths(lengths: object, name: str, layout: str) -> None:
    """A 1-D integer tensor of lengths: not float, and not bool (True would read as length 1)."""
    if not (isinstance(lengths, Tensor) and lengths.ndim == 1) or lengths.is_floating_point() \
            or lengths.is_complex() or lengths.dtype == torch.bool:
        raise ValueError(f"{name} must be a {layout} integer tensor of sequence lengths, got "
                         f"{_described(lengths)}")
    check_holds_values(lengths, name)


def resampled_rows(lengths: Tensor, reference_lengths: Tensor, *, generator: torch.Generator) -> Tensor:
    """The reference row each sequence draws: ``(B,)``, one uniform draw from ``generator`` per
    sequence among the references of its length (what :func:`resampled_outputs` and
    :func:`resampled_logits` copy from, for the same generator state)."""
    _check_lengths(lengths, "lengths", "(B,)")
    _check_lengths(reference_lengths, "reference_lengths", "(R,)")
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if len(lengths) and not len(reference_lengths):
        raise ValueError("reference_lengths is empty: there is no reference sequence to draw from "
                         "(pass the lengths of the reference batch, shape (R,) with R >= 1)")
    rows = torch.empty(len(lengths), dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        candidates = (reference_lengths == n).nonzero().squeeze(1)
        if len(candidates) == 0:
            raise ValueError(f"no reference sequence has length {n} (sequence {i}); reference_lengths holds "
                         f"{sorted(set(reference_lengths.tolist()))}")
        rows[i] = candidates[torch.randint(len(candidates), (1,), generator=generator)]
    return rows


def resampled_logits(model: TinyTransformer, tokens: Tensor, lengths: Tensor, reference: Tensor,
                     reference_lengths: Tensor, heads: Sequence[Head], *,
                     generator: torch.Generator, reference_outputs: Tensor | None = None) -> Tensor:
    """Logits ``(B, T, V)`` of a run on ``tokens`` in which ``heads`` output what they output on
    a random ``reference`` sequence of the same length (one draw per sequence, from
    ``generator``; ``lengths`` ``(B,)`` and ``reference_lengths`` ``(R,)`` count real tokens).

    Unlike zero or mean ablation, the layers above get a real output of the head, just from an
    unrelated input. The reference runs through the same ``edit_heads`` hook
    (:func:`~course_utils.interp.ablation.head_outputs`; pass its result as ``reference_outputs`` to
    reuse it); see :func:`resampled_outputs` for how positions are matched.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    heads = _check_heads(heads, model)
    B, T = tokens.shape
    if not (isinstance(lengths, Tensor) and lengths.shape == (B,)):
        raise ValueError(f"lengths must be a (B,) = ({B},) tensor of sequence lengths, got "
                         f"{_described(lengths)}")
    source = resampled_outputs(model, lengths, reference, reference_lengths, T, generator=generator,
                               reference_outputs=reference_outputs)
    return patched_logits(model, tokens, source, heads)


def resampled_one_at_a_time(model: TinyTransformer, tokens: Tensor, reference_outputs: Tensor, rows: Tensor,
                            heads: Sequence[Head], *, positions: Tensor | None = None,
                            per_run: int = 25) -> Tensor:
    """Logits with each of ``heads`` resampled on its own, for each of ``S`` draws:
    ``(S, n, B, V)`` at ``positions`` ``(B,)`` (one per sequence), or ``(S, n, B, T, V)``.

    ``rows`` ``(S, B)`` names, for each draw, the reference sequence each of the ``B``
    sequences copies from (:func:`resampled_rows`, one generator per draw), and
    ``reference_outputs`` is ``head_outputs(model, reference)`` ``(L, R, h, T_ref, dk)``. Entry
    ``[s, i]`` equals ``resampled_logits(..., [heads[i]], generator=...)`` for draw ``s`` up to
    float rounding; up to ``per_run`` (draw, head) pairs share one forward pass, which starts
    at the head's layer from the intact run's stream (nothing below it changes) and, with
    ``positions``, runs the last layer at those positions only."""
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    heads = _check_heads(heads, model)
    per_run = check_int(per_run, "per_run", minimum=1)
    cfg = model.config
    B, T = tokens.shape
    dk = cfg.d_model // cfg.num_heads
    if not isinstance(reference_outputs, Tensor) or reference_outputs.ndim != 5 or \
            tuple(reference_outputs.shape[i] for i in (0, 2, 4)) != (cfg.num_layers, cfg.num_heads, dk):
        raise ValueError(f"reference_outputs must be head_outputs(model, reference), shaped "
                         f"(L, R, h, T_ref, dk) with L, h, dk = {cfg.num_layers}, {cfg.num_heads}, {dk}, "
                         f"got {_described(reference_outputs)}")
    _check_head_output_values(reference_outputs, "reference_outputs", "reference", model)
    R = reference_outputs.shape[1]
    if not isinstance(rows, Tensor) or rows.ndim != 2 or rows.shape[1] != B or rows.dtype != torch.long:
        raise ValueError(f"rows must be a long tensor (S, B) = (draws, {B}) of reference rows, got "
                         f"{_described(rows)}")
    check_holds_values(rows, "rows")
    if rows.numel() and (rows.min() < 0 or rows.max() >= R):
        raise ValueError(f"rows must lie in [0, {R}) (the reference has {R} sequences), got "
                         f"{int(rows.min())} to {int(rows.max())}")
    if positions is not None and (not isinstance(positions, Tensor) or positions.shape != (B,)
                                  or positions.dtype != torch.long):
        raise TypeError(f"positions must be a long tensor (B,) = ({B},), one position per sequence, got "
                        f"{_described(positions)}")
    if positions is not None:
        check_ids(positions, "positions", T, f"positions of the {T} tokens")
    source = reference_outputs[..., :T, :]  # (L, R, h, min(T, T_ref), dk)
    if source.shape[3] < T:
        source = torch.nn.functional.pad(source, (0, 0, 0, T - source.shape[3]))
    pairs = [(s, i) for i in range(len(heads)) for s in range(rows.shape[0])]  # grouped by head, then layer
    pairs.sort(key=lambda pair: heads[pair[1]][0])
    inputs = block_inputs(model, tokens)
    last = cfg.num_layers - 1
    out: Tensor | None = None
    with torch.no_grad():
        for start in range(0, len(pairs), per_run):
            chunk = pairs[start:start + per_run]
            first = min(heads[i][0] for _, i in chunk)
            n = len(chunk)
            fills = {}  # layer -> (copy index, head, fill (B, T, dk)) for the copies that change there
            for c, (s, i) in enumerate(chunk):
                layer, head = heads[i]
                fills.setdefault(layer, []).append((c, head, source[layer, rows[s], head]))

            def refill(z: Tensor, layer: int, at: Tensor | None = None, fills: dict = fills) -> Tensor:
                z = z.clone()  # (n*B, h, T or 1, dk)
                for c, head, fill in fills.get(layer, []):
                    rows_b = torch.arange(B, device=fill.device)
                    part = fill if at is None else fill[rows_b, at][:, None]  # (B, T or 1, dk)
                    z[c * B:(c + 1) * B, head] = part
                return z

            x = inputs[first].repeat(n, 1, 1)  # (n*B, T, d)
            stop = cfg.num_layers if positions is None else last  # the last layer: see _last_layer_at
            changes = [(f"blocks.{layer}.attn.hook_z", lambda z, hook, layer=layer, fn=refill: fn(z, layer))
                       for layer in range(first, stop)]
            with model.hooks(changes):
                if positions is None:
                    logits, _ = model(resid=x, start_block=first)  # (n*B, T, V)
                else:
                    x, _ = model.run_blocks(x, first, stop)
            if positions is not None:
                logits = _last_layer_at(model, x, None, positions.repeat(n),
                                        edit=lambda z, refill=refill: refill(z, last, positions))  # (n*B, V)
            if out is None:
                out = logits.new_empty((rows.shape[0], len(heads), B, *logits.shape[1:]))
            for c, (s, i) in enumerate(chunk):
                out[s, i] = logits[c * B:(c + 1) * B]
    if out is None:
        raise ValueError("heads and rows must each hold at least one entry")
    return out


# -- direct logit attribution ------------------------------------------------------------
def direct_logit_attribution(model: TinyTransformer, tokens: Tensor, positions: Tensor, directions: Tensor, *,
                             head_mask: Tensor | None = None,
                             edit_heads: Callable[[int, Tensor], Tensor] | None = None,
                             frozen_scale: Tensor | None = None) -> pd.DataFrame:
    """Each residual-stream component's direct contribution to ``directions`` at ``positions``.

    ``positions`` ``(B,)``: one position per sequence; ``directions`` ``(B, V)`` or ``(V,)``:
    the logit combination to explain, e.g. +1 on the agreeing verb and -1 on the other one
    (finite numbers: a NaN would make every column NaN).
    The final residual ``x`` is a sum of components (token + position embeddings; per layer,
    each head through its slice of ``W_O``, the attention bias and the MLP). The final
    LayerNorm is ``(x - mean(x)) / s * gamma + beta``; with its scale ``s`` held at this run's
    value, component ``c`` contributes ``(c - mean(c)) / s * gamma`` and ``beta`` one more
    term, so the columns add up exactly to the logit difference the model computes.

    Returns a DataFrame, one row per sequence, columns ``embeddings``, ``L{l}H{h}``,
    ``L{l} attn bias``, ``L{l} mlp``, ``final bias`` and ``total`` (the model's own value).
    ``head_mask`` / ``edit_heads`` are passed to the forward pass (to attribute an ablated run);
    ``edit_heads`` must return heads of the shape, dtype and device it got, as ``model(tokens,
    edit_heads=...)`` requires (anything else, None too, is the model's TypeError or ValueError
    naming ``edit_heads``).
    ``frozen_scale`` ``(B,)``, when given, is the scale ``s`` every term is read at instead of
    this run's (e.g. the intact run's, from :func:`final_scale`, so that an ablated run's terms
    are on the intact run's scale); the columns then add up to ``total`` less the change
    the rescaling makes, and ``total`` is still the model's own value.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    if edit_heads is not None:  # it is called inside this function's own hook, before the model's check
        check_callable(edit_heads, "edit_heads", "a function (layer, heads) -> heads or None", nargs=2)
    B, T = tokens.shape
    if not isinstance(positions, Tensor) or positions.shape != (B,) or positions.dtype != torch.long:
        raise TypeError(f"positions must be a long tensor (B,) = ({B},), one position per sequence, "
                        f"got {_described(positions)}")
    for name, t in (("positions", positions), ("directions", directions), ("frozen_scale", frozen_scale),
                    ("head_mask", head_mask)):
        if isinstance(t, Tensor):  # a meta tensor has no numbers to read (the checks below read them)
            check_holds_values(t, name)
    if int(positions.min()) < 0 or int(positions.max()) >= T:
        raise ValueError(f"positions must lie in 0..{T - 1} (tokens have {T} columns), "
                         f"got {int(positions.min())}..{int(positions.max())}")
    if frozen_scale is not None and not (isinstance(frozen_scale, Tensor) and frozen_scale.shape == (B,)
                                         and frozen_scale.is_floating_point()
                                         and bool((frozen_scale > 0).all())):
        raise ValueError(f"frozen_scale must be a positive float tensor (B,) = ({B},), one final-LayerNorm "
                         f"scale per sequence (final_scale gives it), got {_described(frozen_scale)}")
    V = model.config.vocab_size
    if (not isinstance(directions, Tensor) or directions.shape not in ((V,), (B, V))
            or not directions.is_floating_point()):
        raise TypeError(f"directions must be a float tensor (V,) = ({V},) or (B, V) = ({B}, {V}), "
                        f"got {_described(directions)}")
    check_finite(directions, "directions", "a NaN or infinite direction makes every column NaN")
    # the model's own NaN weight was reported as an internal "stream" holding NaN (battery 30)
    check_weights_finite(model, "a NaN or infinite weight makes every column NaN: reload the checkpoint")
    tracked = any(p.requires_grad for p in model.parameters())  # the columns multiply the weights
    for name, t in (("directions", directions), ("frozen_scale", frozen_scale)):
        if t is not None:
            check_not_inference(t, name, tracked=tracked)
    directions = directions.to(model.unembed.weight.dtype).expand(B, V)
    rows = torch.arange(B, device=tokens.device)
    recorded: dict[str, Tensor] = {}
    heads_seen: list[Tensor] = []

    def record_heads(layer: int, heads: Tensor) -> Tensor:  # heads: (B, h, T, dk)
        if edit_heads is not None:  # the model's own check of what it returned, before it is recorded
            heads = check_edited_heads(edit_heads(layer, heads), heads)
        heads_seen.append(heads.detach())
        return heads

    def save(name: str) -> Callable:
        def hook(module, inputs, output):  # noqa: ARG001 (PyTorch's hook signature)
            recorded[name] = output.detach()
        return hook

    handles = [model.token_embedding.register_forward_hook(save("token")),
               model.position_embedding.register_forward_hook(save("position")),
               model.ln_final.register_forward_pre_hook(
                   lambda module, inputs: recorded.__setitem__("final", inputs[0].detach()))]
    for i, block in enumerate(model.blocks):
        if block.mlp is not None:
            handles.append(block.mlp.register_forward_hook(save(f"L{i} mlp")))
    try:
        with torch.no_grad():
            logits, _ = model(tokens, head_mask=head_mask, edit_heads=record_heads)
    finally:
        for handle in handles:
            handle.remove()

    x = recorded["final"][rows, positions]  # (B, d): the stream entering the final LayerNorm
    readout = directions @ model.unembed.weight  # (B, d): W_U^T direction

    def contribution(c: Tensor) -> Tensor:  # c: (B, d) -> (B,)
        if frozen_scale is None:
            return (frozen_final_norm(model, x, c) * readout).sum(-1)
        centred = c - c.mean(dim=-1, keepdim=True)
        return (centred / frozen_scale[:, None] * model.ln_final.weight * readout).sum(-1)

    columns: dict[str, Tensor] = {}
    embeddings = recorded["token"][rows, positions] + recorded["position"][positions]
    columns["embeddings"] = contribution(embeddings)
    cfg = model.config
    dk = cfg.d_model // cfg.num_heads
    for layer, block in enumerate(model.blocks):
        W_O = block.attn.out_proj.weight  # (d, h*dk)
        at = heads_seen[layer][rows, :, positions]  # (B, h, dk)
        for head in range(cfg.num_heads):
            columns[head_name(layer, head)] = contribution(at[:, head] @ W_O[:, head * dk:(head + 1) * dk].T)
        if block.attn.out_proj.bias is not None:
            columns[f"L{layer} attn bias"] = contribution(block.attn.out_proj.bias.expand(B, -1))
        if block.mlp is not None:
            columns[f"L{layer} mlp"] = contribution(recorded[f"L{layer} mlp"][rows, positions])
    columns["final bias"] = (model.ln_final.bias * readout).sum(-1)
    columns["total"] = (logits[rows, positions] * directions).sum(-1)
    return pd.DataFrame({name: value.detach().cpu().numpy() for name, value in columns.items()})


def final_scale(model: TinyTransformer, tokens: Tensor, positions: Tensor, *, head_mask: Tensor | None = None,
                edit_heads: Callable[[int, Tensor], Tensor] | None = None) -> Tensor:
    """The final LayerNorm's scale ``s = sqrt(var(x) + eps)`` at ``positions`` ``(B,)``: ``(B,)``,
    for the run with ``head_mask`` / ``edit_heads`` (default: intact). The ``frozen_scale`` of
    :func:`direct_logit_attribution`."""
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    B = tokens.shape[0]
    if not isinstance(positions, Tensor) or positions.shape != (B,) or positions.dtype != torch.long:
        raise TypeError(f"positions must be a long tensor (B,) = ({B},), one position per sequence, "
                        f"got {_described(positions)}")
    check_ids(positions, "positions", tokens.shape[1], f"positions of the {tokens.shape[1]} tokens")
    seen: list[Tensor] = []
    handle = model.ln_final.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0].detach()))
    try:
        with torch.no_grad():
            model(tokens, head_mask=head_mask, edit_heads=edit_heads)
    finally:
        handle.remove()
    x = seen[0][torch.arange(tokens.shape[0], device=seen[0].device), positions]
    return (x.var(dim=-1, unbiased=False) + model.ln_final.eps).sqrt()


# -- importance, kept per sequence ---------------------------------------------------------
def sequence_gate_gradients(model: TinyTransformer, tokens: Tensor, targets: Tensor) -> Tensor:
    """``dL(x)/dxi_h`` at ``xi = 1`` for every sequence ``x``: ``(B, L, h)``, signed.

    ``L(x)`` is the sequence's mean next-token loss; ``.abs().mean(0)`` is Michel et al.'s
    importance (:func:`~course_utils.interp.ablation.head_importance`). Kept per sequence, the
    numbers can be resampled to see how stable the ranking is.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    _check_targets_like(targets, tokens)
    cfg = model.config
    flags = [p.requires_grad for p in model.parameters()]
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        xi = torch.ones(tokens.shape[0], cfg.num_layers, cfg.num_heads, requires_grad=True,
                        device=tokens.device, dtype=model.token_embedding.weight.dtype)  # (B, L, h)

        def gate(layer: int, heads: Tensor) -> Tensor:  # heads: (B, h, T, dk)
            return heads * xi[:, layer, :, None, None]

        with gradients_on("sequence_gate_gradients"):
            logits, _ = model(tokens, edit_heads=gate)
            sequence_losses(logits, targets).sum().backward()
    finally:
        for p, flag in zip(model.parameters(), flags, strict=True):
            p.requires_grad_(flag)
    return xi.grad.detach()


def layer_normalised_order(importance: Tensor) -> list[Head]:
    """Michel et al.'s pruning order: each layer's scores divided by their l2 norm, then
    least important first (ties as in :func:`~course_utils.interp.ablation.importance_order`)."""
    _check_importance(importance)
    norms = importance.norm(dim=1, keepdim=True)
    if not (norms > 0).all():
        zero = [layer for layer, n in enumerate(norms.flatten().tolist()) if not n > 0]
        raise ValueError(f"every layer needs a nonzero importance to normalise by; layer(s) {zero} are all 0")
    return importance_order(importance / norms)


# -- pruning tolerance over many orders -----------------------------------------------------
def prunable_counts(model: TinyTransformer, evaluations: Evaluation | Sequence[Evaluation],
                    orders: Sequence[Sequence[Head]], within: Callable[[dict[str, float]], bool], *,
                    method: str = "zero", means: dict[int, Tensor] | Tensor | None = None,
                    map_fn: Callable = map, chunks: int = 1, per_run: int = 25,
                    known: dict[frozenset, dict[str, float]] | None = None, incremental: bool = False,
                    ) -> tuple[list[int], dict[frozenset, dict[str, float]]]:
    """For each order, how many of its heads can be switched off, first to last, before
    ``within(numbers)`` (a bool) first fails (``numbers`` as :func:`~course_utils.interp.ablation.measure`
    returns them); ``len(order)`` if it never fails. ``orders`` may repeat an order (each heads
    once; :func:`~course_utils.interp.ablation.random_orders` over a few heads often draws one
    twice): each repeat gets its own count, the same as the first, and is measured once.

    The orders advance together one head at a time; each distinct set of switched-off heads
    is measured once, the sets of one step split into ``chunks`` lists handed to ``map_fn``
    (``map``; or :func:`~course_utils.parallel.parallel_map` with ``chunks`` = the number of
    cores, since it starts one process per item). Zeroed, up to ``per_run`` sets share one
    forward pass (:func:`measure_zeroed_sets`). ``known`` holds measurements already made with
    the same ``evaluations``, ``method`` and ``means`` (the second result of an earlier call):
    those sets are not measured again. Its keys must be sets of the model's heads and each
    measurement must hold exactly the numbers the evaluations return (found by one run of the
    intact model): ``within`` would read another evaluation's numbers as these. Returns the counts
    and every measurement made or reused, keyed by the frozen set of heads.

    ``incremental=True`` (zero ablation, measured in this process: ``map_fn`` and ``chunks``
    left at their defaults) keeps each measured set's residual stream at the input of every
    layer and its head outputs there until the next step, so a set one head larger enters that
    head's block at its parent's head outputs (the same input gives the same q, k, v and
    attention; only the gates differ) instead of starting at its lowest layer from the intact
    stream. Same numbers up to float rounding (on lesson 06's batches the same bits), about a
    third of the compute; it holds up to ``2 * B * T * d * L`` floats per set of a step. To use
    several cores, split the orders and call it once per part.
    """
    _check_model(model)
    chunks = check_int(chunks, "chunks", minimum=1)
    per_run = check_int(per_run, "per_run", minimum=1)
    check_callable(map_fn, "map_fn", "a function like map (fn, parts) -> results", nargs=2)
    evaluations = _check_evaluations(evaluations, model)
    method = _check_method(method)
    _check_means_given(means, model, [e.tokens.shape[1] for e in evaluations], method)  # as measure does
    check_callable(within, "within", "a function (numbers: dict) -> bool", nargs=1)
    orders = _check_orders(orders, model)
    if known is not None and not (isinstance(known, dict) and all(isinstance(k, frozenset) for k in known)):
        raise TypeError(f"known must be a dict keyed by frozensets of heads (prunable_counts' second "
                        f"result), got {type(known).__name__} {shown(known, 60)}")
    for heads, numbers in (known or {}).items():  # what measure returned for them, on this model's heads
        _check_heads(list(heads), model, f"known's key {set(heads)}")
        _check_numbers(numbers, f"known[{set(heads)}] must be")
    if not isinstance(incremental, bool):
        raise TypeError(f"incremental must be True or False, got {shown(incremental, 60)}")
    if incremental and (method != "zero" or map_fn is not map or chunks != 1):
        raise ValueError(f"incremental=True measures zero ablation in this process: it needs method='zero', "
                         f"map_fn=map and chunks=1, got method={shown(method)}, chunks={chunks}"
                         + ("" if map_fn is map else ", another map_fn"))
    if known:  # the evaluations' own names (one intact run): within reads known's measurements by them
        _check_known_names(known, measure(model, evaluations))
    measured: dict[frozenset, dict[str, float]] = dict(known or {})
    counts: list[int | None] = [None] * len(orders)
    if incremental:
        intact = [_intact_run(model, e) for e in evaluations]
        streams: dict[frozenset, list[KeptRun]] = {}  # a set -> per evaluation, its kept run
    for k in range(1, max((len(o) for o in orders), default=0) + 1):
        alive = [i for i, count in enumerate(counts) if count is None and k <= len(orders[i])]
        for i, count in enumerate(counts):
            if count is None and k > len(orders[i]):
                counts[i] = len(orders[i])
        if not alive:
            break
        wanted = list(dict.fromkeys(frozenset(orders[i][:k]) for i in alive if frozenset(orders[i][:k])
                                    not in measured))
        if incremental:  # each new set enters its new head's block at its parent's head outputs
            parent = {}
            for i in alive:
                parent.setdefault(frozenset(orders[i][:k]), (frozenset(orders[i][:k - 1]), orders[i][k - 1]))
            jobs = [(new, *parent[new]) for new in wanted]
            numbers, streams = _measure_extensions(model, evaluations, intact, jobs, streams, per_run)
            measured.update(zip(wanted, numbers, strict=True))
            wanted = []
        parts = [wanted[i::chunks] for i in range(min(chunks, len(wanted)))]
        if method == "zero":  # many sets per forward pass
            results = map_fn(lambda part: measure_zeroed_sets(model, evaluations, [sorted(s) for s in part],
                                                              per_run=per_run), parts)
        else:
            results = map_fn(lambda part: [measure(model, evaluations, sorted(heads), method=method,
                                                   means=means) for heads in part], parts)
        for part, numbers in _check_mapped(results, parts):
            measured.update(zip(part, numbers, strict=True))
        for i in alive:
            ok = within(measured[frozenset(orders[i][:k])])
            if not isinstance(ok, bool | np.bool_):
                raise TypeError(f"prunable_counts: within must return a bool (True: still within bounds), "
                                f"got {type(ok).__name__} {shown(ok)}")
            if not ok:
                counts[i] = k - 1
    counts = [len(o) if c is None else c for o, c in zip(orders, counts, strict=True)]
    return counts, measured


def _check_known_names(known: dict[frozenset, dict[str, float]], intact: dict[str, float]) -> None:
    """Each of ``known``'s measurements holds exactly the numbers of ``intact`` (the evaluations'
    own, measured on the intact model): one measured with other evaluations would be read by
    ``within`` as these."""
    wanted = set(intact)
    for heads, numbers in known.items():
        if set(numbers) != wanted:
            raise ValueError(f"known[{set(heads)}] must hold the numbers that the evaluations return, "
                             f"{sorted(wanted)} (known holds measurements of the same evaluations), "
                             f"got {sorted(numbers)}")


def _check_mapped(results: object, parts: list[list[frozenset]]) -> list[tuple[list[frozenset], object]]:
    """What ``map_fn`` returned for ``parts``: one list of numbers per part, one per set in it,
    paired with its part (a missing or extra result would pair numbers with the wrong sets)."""
    try:
        results = list(results)
    except TypeError:
        raise TypeError(f"map_fn must return an iterable of results like map, got "
                        f"{type(results).__name__} {shown(results, 60)}") from None
    if len(results) != len(parts):
        raise ValueError(f"map_fn must return one result per part, as map does: got {len(results)} "
                         f"results for {len(parts)} parts")
    for i, (part, numbers) in enumerate(zip(parts, results, strict=True)):
        if not isinstance(numbers, (list, tuple)) or len(numbers) != len(part):
            got = f"{len(numbers)} entries" if isinstance(numbers, (list, tuple)) else type(numbers).__name__
            raise ValueError(f"map_fn's result {i} must be a list of {len(part)} measurements (one per set "
                             f"of heads in its part), got {got}")
    return list(zip(parts, results, strict=True))


def _check_orders(orders: object, model: TinyTransformer) -> list[list[Head]]:
    """Each order a list of the model's heads, each head once: a repeated head would be counted
    as one more head switched off while the set stays the same."""
    if isinstance(orders, (str, bytes, dict)) or not hasattr(orders, "__iter__"):
        raise TypeError(f"orders must be a list of orders, each a list of (layer, head) pairs, got "
                        f"{type(orders).__name__} {shown(orders, 60)}")
    orders = items_of(orders, "orders", "a list of orders, each a list of (layer, head) pairs")
    return [_check_heads(order, model, f"orders[{i}]") for i, order in enumerate(orders)]


def _measure_extensions(model: TinyTransformer, evaluations: list[Evaluation],
                        intact: list[KeptRun], jobs: list[tuple[frozenset, frozenset, Head]],
                        streams: dict[frozenset, list[KeptRun]], per_run: int,
                        ) -> tuple[list[dict[str, float]], dict[frozenset, list[KeptRun]]]:
    """Zero ablation of each ``(heads, parent, new head)`` job, ``heads = parent | {new head}``:
    where the parent's run is kept (``streams``, or ``intact`` for the empty set, per evaluation
    as :func:`_intact_run` keeps it), the run enters the new head's block at its head outputs,
    the parent's there (same input, so the same q, k, v and attention; only the gates differ);
    otherwise it starts at the lowest layer of ``heads`` from the intact stream. Returns each
    job's numbers and the new sets' kept runs."""
    L = model.config.num_layers
    runs = {frozenset(): intact} | streams
    entered = [parent in runs for _, parent, _ in jobs]  # at the parent's head outputs, or from intact
    start = [new[0] if enter else min(layer for layer, _ in heads)
             for (heads, _, new), enter in zip(jobs, entered, strict=True)]
    results: list[dict[str, float]] = [{} for _ in jobs]
    new_streams: dict[frozenset, list[KeptRun]] = {heads: [] for heads, _, _ in jobs}
    for e, evaluation in enumerate(evaluations):
        batch = evaluation.tokens.shape[0]
        positions = evaluation.positions if isinstance(evaluation, EvaluationAt) else None
        full = L if positions is None else L - 1  # layers run at every position
        for layer0 in range(L):
            for enter in (True, False):
                group = [j for j in range(len(jobs)) if (start[j], entered[j]) == (layer0, enter)]
                for begin in range(0, len(group), per_run):
                    some = group[begin:begin + per_run]
                    sources = [runs[jobs[j][1]][e] if enter else intact[e] for j in some]
                    gates = torch.ones(len(some), L, model.config.num_heads, dtype=model.unembed.weight.dtype,
                                       device=model.unembed.weight.device)
                    for row, j in enumerate(some):
                        for layer, head in jobs[j][0]:
                            gates[row, layer, head] = 0.0
                    rows = gates.repeat_interleave(batch, 0)  # (n*B, L, h)
                    first = layer0 + 1 if enter else layer0  # the first block whose heads this run computes
                    kept: list[Tensor] = []  # this run's inputs to blocks layer0 + 1, layer0 + 2, ...
                    heads: list[Tensor] = []  # its head outputs in blocks first, first + 1, ...
                    with torch.no_grad(), model.hooks(_head_keepers(heads, range(first, L))
                                                      + _gate_hooks(rows, range(layer0, full))
                                                      + _stream_keepers(kept, range(layer0, full))):
                        x = torch.cat([source.inputs[layer0] for source in sources])  # (n*B, T, d)
                        given = torch.cat([source.heads[layer0] for source in sources]) if enter else None
                        if positions is None:
                            logits, _ = model(resid=x, start_block=layer0, heads=given)
                        else:
                            if layer0 < full:
                                x, _ = model.run_blocks(x, layer0, full, heads=given)
                                given = None
                            at = positions.repeat(len(some))
                            scored = _last_layer_at(model, x, rows[:, -1, :, None, None], at, heads=given)
                            logits = torch.full((*x.shape[:2], scored.shape[-1]), float("nan"),
                                                dtype=scored.dtype, device=scored.device)
                            logits[torch.arange(len(at), device=at.device), at] = scored
                    for row, (j, chunk) in enumerate(zip(some, logits.split(batch), strict=True)):
                        results[j].update(_check_scores(evaluation.score(chunk), e))
                        rows_of, source = slice(row * batch, (row + 1) * batch), sources[row]
                        new_streams[jobs[j][0]].append(KeptRun(
                            [source.inputs[layer] if layer <= layer0 else kept[layer - layer0 - 1][rows_of]
                             for layer in range(L)],
                            [source.heads[layer] if layer < first else heads[layer - first][rows_of]
                             for layer in range(L)]))
    return results, new_streams


def _intact_run(model: TinyTransformer, evaluation: Evaluation) -> KeptRun:
    """The intact run on ``evaluation``'s tokens, kept as :func:`_measure_extensions` keeps its
    runs: the input to every block and every block's head outputs (for an :class:`EvaluationAt`,
    the last block's at its positions only, ``(B, h, 1, dk)``, as :func:`_last_layer_at` runs it)."""
    if not isinstance(evaluation, EvaluationAt):
        return _intact_kept(model, evaluation.tokens)
    L = model.config.num_layers
    heads: list[Tensor] = []
    inputs: list[Tensor] = []  # the embedding, then what each block but the last passes on
    with torch.no_grad(), model.hooks(_head_keepers(heads, range(L)) + _stream_keepers(inputs, range(L - 1))):
        inputs.append(model.embed(evaluation.tokens))
        x, _ = model.run_blocks(inputs[0], 0, L - 1)
        _last_layer_at(model, x, None, evaluation.positions)
    return KeptRun(inputs, heads)


@dataclass(frozen=True)
class EvaluationAt(Evaluation):
    """An :class:`~course_utils.interp.ablation.Evaluation` whose ``score`` reads the logits only at
    ``positions`` ``(B,)``, one position per sequence (an agreement batch's ``predict_pos``).

    :func:`measure` treats it as any evaluation. The batched zero ablation
    (:func:`measure_zeroed_sets`, :func:`prunable_counts`) computes the last layer, the final
    LayerNorm and the unembedding at these positions only (the layers below still run at every
    position, since the last layer's keys need them), and hands ``score`` logits that are NaN
    everywhere else: a score that reads another position gets NaN, and a NaN it returns is
    refused, naming the evaluation and the score.

    Frozen as :class:`~course_utils.interp.ablation.Evaluation` is: the positions checked here
    against ``tokens`` are the ones the batched ablation indexes with.
    """

    positions: Tensor

    def __post_init__(self) -> None:
        super().__post_init__()
        B, T = self.tokens.shape
        if not (isinstance(self.positions, Tensor) and self.positions.dtype == torch.long
                and self.positions.shape == (B,)):
            raise ValueError(f"EvaluationAt.positions must be a long tensor ({B},), one position per "
                             f"sequence of tokens {tuple(self.tokens.shape)}, "
                             f"got {_described(self.positions)}")
        check_holds_values(self.positions, "EvaluationAt.positions")
        if B and not (0 <= int(self.positions.min()) and int(self.positions.max()) < T):
            raise ValueError(f"EvaluationAt.positions must lie in 0..{T - 1} (tokens have {T} columns), "
                             f"got {int(self.positions.min())}..{int(self.positions.max())}")


def _last_layer_at(model: TinyTransformer, x: Tensor, gate: Tensor | None, positions: Tensor,
                   edit: Callable[[Tensor], Tensor] | None = None, heads: Tensor | None = None) -> Tensor:
    """The last block, the final LayerNorm and the unembedding at one position per row:
    ``x`` ``(N, T, d)`` the last block's input, ``gate`` ``(N, h, 1, 1)`` or None, ``positions``
    ``(N,)`` -> logits ``(N, V)``. The block's own modules run in the block's order: its attention
    attends from the one query to the keys up to it (causal), each head scaled by ``gate``,
    or its outputs at the query, ``(N, h, 1, dk)``, mapped by ``edit`` instead. ``heads``
    ``(N, h, 1, dk)``: those outputs as a run with this ``x`` computed them; the block then
    starts at ``attn.hook_z`` (the block's ``heads`` entry)."""
    block, rows = model.blocks[-1], torch.arange(x.shape[0], device=x.device)
    change = [] if gate is None and edit is None else [
        (f"blocks.{len(model.blocks) - 1}.attn.hook_z", (lambda z, hook: z * gate) if edit is None
         else (lambda z, hook: edit(z)))]
    if heads is not None:
        with model.hooks(change):
            y, _, _ = block(x[rows, positions][:, None], heads=heads)  # (N, 1, d)
        return model.unembed(model.ln_final(y))[:, 0]  # (N, V)
    normed = block.ln_attn(x)  # (N, T, d): every position is a key
    allowed = (torch.arange(x.shape[1], device=x.device) <= positions[:, None])[:, None, :]  # (N, 1, T)
    with model.hooks(change):
        attended, _ = block.attn(normed[rows, positions][:, None], normed, normed, mask=allowed)  # (N, 1, d)
    y = x[rows, positions][:, None] + attended
    if block.mlp is not None:
        y = y + block.mlp(block.ln_mlp(y))
    return model.unembed(model.ln_final(y))[:, 0]  # (N, V)


def _gate_hooks(rows: Tensor, layers: range) -> list[tuple[str, HookFn]]:
    """Hooks that scale each head output by its row's gate in ``layers``: ``rows`` ``(N, L, h)``,
    one row of gates per sequence of the batch (``hook_z`` is ``(N, h, T, dk)``)."""
    return [(f"blocks.{layer}.attn.hook_z", lambda z, hook, gate=rows[:, layer, :, None, None]: z * gate)
            for layer in layers]


def _gated_batch(model: TinyTransformer, tokens: Tensor, head_sets: Sequence[Sequence[Head]],
                 inputs: Sequence[Tensor] | None = None, positions: Tensor | None = None) -> Tensor:
    """Logits ``(n*B, T, V)``: ``tokens`` ``(B, T)`` repeated once per set, each copy with its
    set's heads gated to 0 (through ``edit_heads``, as ``head_mask`` does for one set).

    ``inputs`` (:func:`block_inputs`), when given, holds the intact run's input to every block;
    the copies then start at the lowest layer any of the sets touches, since nothing below it
    changes. ``positions`` ``(B,)`` (with ``inputs``): the last layer runs at those positions
    only, and the logits elsewhere are NaN."""
    cfg, n = model.config, len(head_sets)
    gates = torch.ones(n, cfg.num_layers, cfg.num_heads, dtype=model.unembed.weight.dtype,
                       device=model.unembed.weight.device)
    for i, heads in enumerate(head_sets):
        for layer, head in heads:
            gates[i, layer, head] = 0.0
    rows = gates.repeat_interleave(tokens.shape[0], 0)  # (n*B, L, h): each copy its own gates
    if inputs is None:
        def gate(layer: int, heads: Tensor) -> Tensor:  # heads: (n*B, h, T, dk)
            return heads * rows[:, layer, :, None, None]

        with torch.no_grad():
            logits, _ = model(tokens.repeat(n, 1), edit_heads=gate)
        return logits
    first = min((layer for heads in head_sets for layer, _ in heads), default=cfg.num_layers)
    last = cfg.num_layers if positions is None else cfg.num_layers - 1  # layers run at every position
    with torch.no_grad(), model.hooks(_gate_hooks(rows, range(first, last))):
        x = inputs[min(first, last)].repeat(n, 1, 1)  # (n*B, T, d): the intact stream up to there
        if positions is None:
            return model(resid=x, start_block=first)[0]
        x, _ = model.run_blocks(x, min(first, last), last)
        at = positions.repeat(n)  # (n*B,)
        if first < cfg.num_layers:
            scored = _last_layer_at(model, x, rows[:, -1, :, None, None], at)
        else:  # no set touches any layer: the intact final stream
            scored = model.unembed(model.ln_final(
                inputs[-1].repeat(n, 1, 1)[torch.arange(len(at), device=at.device), at]))
        logits = torch.full((*x.shape[:2], scored.shape[-1]), float("nan"), dtype=scored.dtype,
                            device=scored.device)
        logits[torch.arange(len(at), device=at.device), at] = scored
        return logits


def measure_zeroed_sets(model: TinyTransformer, evaluations: Evaluation | Sequence[Evaluation],
                        head_sets: Sequence[Sequence[Head]], *, per_run: int = 25) -> list[dict[str, float]]:
    """``[measure(model, evaluations, heads) for heads in head_sets]`` (zero ablation), with up
    to ``per_run`` sets sharing one forward pass; equal up to float rounding.

    Sets are grouped by the lowest layer they touch, and each group's pass starts there from
    the intact run's stream (computed once per evaluation): below that layer nothing changes.
    An :class:`EvaluationAt` gets its last layer computed at its positions only."""
    evaluations = _check_evaluations(evaluations, model)
    if not isinstance(head_sets, (list, tuple)):  # a lone set of heads would be read set by set
        raise TypeError(f"head_sets must be a list of head sets, e.g. [[(0, 1)], [(0, 1), (1, 0)]], got "
                        f"{type(head_sets).__name__} {shown(head_sets, 60)}")
    head_sets = [_check_heads(heads, model, f"head_sets[{i}]") for i, heads in enumerate(head_sets)]
    per_run = check_int(per_run, "per_run", minimum=1)
    lowest = [min((layer for layer, _ in heads), default=model.config.num_layers) for heads in head_sets]
    groups = [[i for i in range(len(head_sets)) if lowest[i] == layer]
              for layer in range(model.config.num_layers + 1)]
    results: list[dict[str, float]] = [{} for _ in head_sets]
    for e, evaluation in enumerate(evaluations):
        batch = evaluation.tokens.shape[0]
        inputs = block_inputs(model, evaluation.tokens)
        positions = evaluation.positions if isinstance(evaluation, EvaluationAt) else None
        for group in groups:
            for start in range(0, len(group), per_run):
                some = group[start:start + per_run]
                sets = [head_sets[i] for i in some]
                logits = _gated_batch(model, evaluation.tokens, sets, inputs, positions)
                for i, chunk in zip(some, logits.split(batch), strict=True):
                    results[i].update(_check_scores(evaluation.score(chunk), e))
    return results


def losses_along_orders(model: TinyTransformer, tokens: Tensor, targets: Tensor,
                        orders: Sequence[Sequence[Head]], most: int, *, per_run: int = 25) -> Tensor:
    """The average loss with the first ``k`` heads of each order zeroed, for ``k`` = 0..``most``:
    ``(len(orders), most + 1)``.

    ``targets`` ``(B, T)`` as for :func:`~course_utils.interp.ablation.average_loss` (token-weighted,
    ``-100`` not counted). Each distinct set of switched-off heads is measured once, up to
    ``per_run`` sets sharing one forward pass, so orders with the same first ``k`` heads get the
    same number; each equals :func:`~course_utils.interp.ablation.measure` with that order's
    first ``k`` heads off, up to float rounding. As in :func:`prunable_counts` with
    ``incremental=True``, a set one head larger than its parent enters the new head's block at
    the parent's head outputs there; it holds up to ``2 * B * T * d * L`` floats per set of a step.
    """
    _check_model(model)
    _check_tokens(tokens, "tokens", model)
    _check_targets_like(targets, tokens)
    orders = _check_orders(orders, model)
    if not orders:
        raise ValueError("orders must hold at least one order of heads (a list of (layer, head) lists), "
                         "got an empty list")
    shortest = min(map(len, orders), default=0)
    if not check_int(most, "most", minimum=0) <= shortest:
        raise ValueError(f"most must be an int in 0..{shortest} (the shortest order), got {most}")
    per_run = check_int(per_run, "per_run", minimum=1)
    evaluation = loss_evaluation(tokens, targets)  # checks targets' dtype and values
    if not (targets != -100).any():
        raise ValueError("targets count nothing (all -100)")
    loss = {frozenset(): measure_zeroed_sets(model, evaluation, [[]])[0]["loss"]}
    intact, streams = [_intact_run(model, evaluation)], {}
    for k in range(1, most + 1):  # each new set enters its new head's block at its parent's head outputs
        parent: dict[frozenset, tuple[frozenset, Head]] = {}
        for order in orders:
            if frozenset(order[:k]) not in loss:
                parent.setdefault(frozenset(order[:k]), (frozenset(order[:k - 1]), order[k - 1]))
        jobs = [(heads, *rest) for heads, rest in parent.items()]
        numbers, streams = _measure_extensions(model, [evaluation], intact, jobs, streams, per_run)
        loss.update((heads, n["loss"]) for (heads, _, _), n in zip(jobs, numbers, strict=True))
    return torch.tensor([[loss[frozenset(order[:k])] for k in range(most + 1)] for order in orders],
                        dtype=model.unembed.weight.dtype).view(len(orders), most + 1)


# -- counterfactual sentences ----------------------------------------------------------------
_OTHER_NUMBER = {WORD_TO_ID[a]: WORD_TO_ID[b] for pair in NOUNS + TRANSITIVE_VERBS
                 for a, b in (pair, pair[::-1])}


def flip_subject_number(batch: AgreementBatch) -> Tensor:
    """``batch.tokens`` ``(B, T)`` with each subject noun in its other number ("cat" <-> "cats");
    in subject relative clauses ("the cat that sees the dogs is") the verb agreeing with the
    subject flips too, so every corrupted sentence is grammatical up to the final verb, whose
    agreeing form is now ``batch.wrong_id``. Same length, same positions: patching can compare
    the two runs position by position. A subject (or relative-clause verb) with no form in the
    other number (tokens that are not the batch's sentences) is refused, naming its row, position
    and word."""
    if not isinstance(batch, AgreementBatch):
        raise TypeError(f"batch must be an AgreementBatch, got {type(batch).__name__}")
    tokens = batch.tokens.clone()
    rows = torch.arange(len(batch))
    relative = torch.tensor([t == "subject_relative" for t in batch.template], dtype=torch.bool)
    for r, p, what in ((rows, batch.subject_pos, "subject noun"),
                       (rows[relative], batch.subject_pos[relative] + 2, "relative clause's verb")):
        _check_flippable(tokens[r, p], r, p, what)
        tokens[r, p] = torch.tensor([_OTHER_NUMBER[int(t)] for t in tokens[r, p]], dtype=torch.long)
    return tokens


def _check_flippable(ids: Tensor, rows: Tensor, positions: Tensor, what: str) -> None:
    """Each of ``ids`` (read at ``batch.tokens[rows, positions]``) is a noun or verb with a form in
    the other number; else a ValueError naming the first that is not, its word and where."""
    for i, token in enumerate(ids.tolist()):
        if token not in _OTHER_NUMBER:
            word = AGREEMENT_VOCAB[token] if 0 <= token < len(AGREEMENT_VOCAB) else "not a word"
            raise ValueError(f"batch.tokens[{int(rows[i])}, {int(positions[i])}] (the {what}) is id {token} "
                             f"({shown(word)}), which has no form in the other number to flip to: is "
                             f"batch.tokens "
                             f"the batch's own sentences?")


def trimmed_by_length(batch: AgreementBatch, groups: int) -> list[AgreementBatch]:
    """``batch`` sorted by length and split into ``groups`` batches, each with its columns cut
    after its last ``predict_pos``: together they hold every sentence once, and the model's
    logits at each sentence's ``predict_pos`` are the same as in the full batch (causal
    attention never looks at the columns cut off)."""
    if not isinstance(batch, AgreementBatch):
        raise TypeError(f"batch must be an AgreementBatch, got {type(batch).__name__}")
    if not check_int(groups, "groups", minimum=1) <= len(batch):
        raise ValueError(f"groups must be an int in 1..{len(batch)}, got {groups}")
    order = torch.argsort(batch.lengths, stable=True)
    out = []
    for rows in torch.tensor_split(order, groups):
        group = batch.take(rows)
        out.append(replace(group, tokens=group.tokens[:, : int(group.predict_pos.max()) + 1]))
    return out
