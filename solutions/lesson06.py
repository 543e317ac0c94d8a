"""Reference solutions and known mistakes of lesson06's exercises (not shipped with the package).

``scripts/exercise_answers.py build`` runs them on each check's test cases and stores the outputs in
``course_utils/exercises/answers/lesson06.pt``; the course's tests attach them to the checks.
"""

# ruff: noqa: F401, F403, F405, E501
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from course_utils.exercises.core import Case, Exercise, Feedback, Mistake, describe_value
from course_utils.exercises.lesson06 import *
from course_utils.interp.ablation import sequence_losses
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _merge(heads: torch.Tensor) -> torch.Tensor:
    B, h, T, dk = heads.shape
    return heads.transpose(1, 2).reshape(B, T, h * dk)  # (B, T, d)


def _mean_reference(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads[:, head].mean(dim=(0, 1))  # (dk,): every reference token
    return out_proj(_merge(edited))


def _mean_per_position(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads[:, head].mean(dim=0)  # (T, dk): positions kept apart
    return out_proj(_merge(edited))


def _mean_over_heads_axis(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads.mean(dim=(0, 1))  # dim 1 is the head axis, not positions
    return out_proj(_merge(edited))


def _mean_over_every_head(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads.mean(dim=(0, 1, 2))  # (dk,), but every head's tokens mixed in
    return out_proj(_merge(edited))


def _mean_after_projection(heads, reference_heads, head, out_proj):
    dk = heads.shape[-1]
    out = out_proj(_merge(heads)).clone()  # (B, T, d)
    reference_out = out_proj(_merge(reference_heads))
    columns = slice(head * dk, (head + 1) * dk)
    out[..., columns] = reference_out[..., columns].mean(dim=(0, 1))
    return out


def _mean_own_batch(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = heads[:, head].mean(dim=(0, 1))  # the evaluation batch as its own reference
    return out_proj(_merge(edited))


def _zero_instead(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = 0.0
    return out_proj(_merge(edited))


def _mean_no_projection(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads[:, head].mean(dim=(0, 1))
    return _merge(edited)


def _mean_merged_without_transpose(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads[:, head].mean(dim=(0, 1))
    B, h, T, dk = edited.shape
    return out_proj(edited.reshape(B, T, h * dk))  # no transpose(1, 2): heads and positions mixed


def _mean_indexed_batch_axis(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[head] = reference_heads[:, head].mean(dim=(0, 1))  # dim 0 is the batch: one sequence, all heads
    return out_proj(_merge(edited))


def _mean_indexed_batch_axis_both(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[head] = reference_heads[head].mean(dim=(0, 1))  # dim 0 of both: one sequence, every head
    return out_proj(_merge(edited))


def _gate_grads(loss_fn, num_sequences, num_layers, num_heads) -> torch.Tensor:
    gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates).sum().backward()
    return gates.grad  # (B, L, h): dL(x)/dxi for each sequence x


def _importance_reference(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).abs().mean(0)


def _importance_signed(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0)


def _importance_abs_of_mean(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0).abs()


def _importance_mean_before_backward(loss_fn, num_sequences, num_layers, num_heads):
    gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates).mean().backward()  # each sequence's gradient divided by the batch size
    return gates.grad.abs().mean(0)


def _importance_shared_gate_summed(loss_fn, num_sequences, num_layers, num_heads):
    gates = torch.ones(num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates.expand(num_sequences, -1, -1)).sum().backward()
    return gates.grad.abs()  # |sum of dL(x)/dxi| over the batch


def _importance_summed(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).abs().sum(0)


def _importance_squared(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).pow(2).mean(0)


def _mean_first_grads(loss_fn, num_sequences, num_layers, num_heads) -> torch.Tensor:
    gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates).mean().backward()  # each sequence's gradient divided by the batch size
    return gates.grad


def _importance_mean_first_signed(loss_fn, num_sequences, num_layers, num_heads):
    return _mean_first_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0)


def _importance_mean_first_negated(loss_fn, num_sequences, num_layers, num_heads):
    return -_mean_first_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0)


def _importance_mean_first_abs_of_mean(loss_fn, num_sequences, num_layers, num_heads):
    return _mean_first_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0).abs()


def _importance_mean_first_squared(loss_fn, num_sequences, num_layers, num_heads):
    return _mean_first_grads(loss_fn, num_sequences, num_layers, num_heads).pow(2).mean(0)


def _importance_mean_first_max(loss_fn, num_sequences, num_layers, num_heads):
    return _mean_first_grads(loss_fn, num_sequences, num_layers, num_heads).abs().max(0).values


def _narrow_reference(table: pd.DataFrame) -> str:
    return str(table["task accuracy after"].idxmin())


def _narrow_biggest_loss(table: pd.DataFrame) -> str:
    return str(table["loss change"].idxmax())


def _narrow_smallest_loss(table: pd.DataFrame) -> str:
    return str(table["loss change"].abs().idxmin())


def _narrow_highest_accuracy(table: pd.DataFrame) -> str:
    return str(table["task accuracy after"].idxmax())


def _narrow_loss_times_damage(table: pd.DataFrame) -> str:
    return str((table["loss change"] * (1 - table["task accuracy after"])).idxmax())


def _narrow_position(table: pd.DataFrame) -> int:
    return int(table["task accuracy after"].to_numpy().argmin())


def _mean_vector(reference_heads, head):
    return reference_heads[:, head].mean(dim=(0, 1))  # (dk,)


def _mean_subtracted(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = heads[:, head] - _mean_vector(reference_heads, head)
    return out_proj(_merge(edited))


def _mean_added(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = heads[:, head] + _mean_vector(reference_heads, head)
    return out_proj(_merge(edited))


def _mean_scalar(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = reference_heads[:, head].mean()  # one number: dk averaged too
    return out_proj(_merge(edited))


def _mean_position_axis(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, :, head] = reference_heads[:, :, head].mean(dim=(0, 1))  # dim 2 is the position
    return out_proj(_merge(edited))


def _mean_merged_features_first(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = _mean_vector(reference_heads, head)
    B, h, T, dk = edited.shape
    return out_proj(edited.permute(0, 2, 3, 1).reshape(B, T, h * dk))  # (B, T, dk, h)


def _mean_projection_without_bias(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    edited[:, head] = _mean_vector(reference_heads, head)
    return _merge(edited) @ out_proj.weight.T


def _importance_negated_signed(loss_fn, num_sequences, num_layers, num_heads):
    return -_gate_grads(loss_fn, num_sequences, num_layers, num_heads).mean(0)


def _importance_at_zero(loss_fn, num_sequences, num_layers, num_heads):
    gates = torch.zeros(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates).sum().backward()
    return gates.grad.abs().mean(0)


def _importance_layer_normalised(loss_fn, num_sequences, num_layers, num_heads):
    importance = _importance_reference(loss_fn, num_sequences, num_layers, num_heads)
    return importance / importance.norm(dim=1, keepdim=True)


def _importance_ablation_difference(loss_fn, num_sequences, num_layers, num_heads):
    with torch.no_grad():
        ones = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64)
        base = loss_fn(ones)
        change = torch.zeros(num_sequences, num_layers, num_heads, dtype=torch.float64)
        for layer in range(num_layers):
            for head in range(num_heads):
                gates = ones.clone()
                gates[:, layer, head] = 0.0
                change[:, layer, head] = loss_fn(gates) - base
    return change.abs().mean(0)


def _importance_max(loss_fn, num_sequences, num_layers, num_heads):
    return _gate_grads(loss_fn, num_sequences, num_layers, num_heads).abs().max(0).values


def _importance_no_requires_grad(loss_fn, num_sequences, num_layers, num_heads):
    gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64)
    loss_fn(gates).sum()
    return gates.grad.abs().mean(0)  # raises: gates.grad is None


def _narrow_ratio(table: pd.DataFrame) -> str:
    return str(((1 - table["task accuracy after"]) / table["loss change"].abs()).idxmax())


def _narrow_summed_ranks(table: pd.DataFrame) -> str:
    ranks = table["loss change"].rank(ascending=False) + table["task accuracy after"].rank()
    return ranks.idxmin()  # best on both columns together, not on the task alone


def _narrow_summed_ranks_small_loss(table: pd.DataFrame) -> str:
    ranks = table["loss change"].rank() + table["task accuracy after"].rank()  # both from the smallest
    return str(ranks.idxmin())


def _narrow_min_value(table: pd.DataFrame) -> float:
    return table["task accuracy after"].min()  # the lowest accuracy itself, not whose it is


def _mean_median(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    dk = heads.shape[-1]
    edited[:, head] = reference_heads[:, head].reshape(-1, dk).median(dim=0).values  # the lower middle
    return out_proj(_merge(edited))


def _mean_median_midpoint(heads, reference_heads, head, out_proj):
    edited = heads.clone()
    dk = heads.shape[-1]
    edited[:, head] = torch.quantile(reference_heads[:, head].reshape(-1, dk), 0.5, dim=0)  # as NumPy's
    return out_proj(_merge(edited))


def _narrow_second_lowest(table: pd.DataFrame) -> str:
    return str(table["task accuracy after"].nsmallest(2).index[1])


REFERENCES = {
    'MEAN_ABLATION': _mean_reference,
    'GATE_IMPORTANCE': _importance_reference,
    'NARROW_HEAD': _narrow_reference,
}

MISTAKES = {
    'MEAN_ABLATION': {
        'per_position_mean': _mean_per_position,
        'mean_over_head_axis': _mean_over_heads_axis,
        'mean_over_every_head': _mean_over_every_head,
        'after_output_projection': _mean_after_projection,
        'evaluation_batch_as_reference': _mean_own_batch,
        'zero_instead_of_mean': _zero_instead,
        'merged_without_transpose': _mean_merged_without_transpose,
        'indexed_batch_axis': _mean_indexed_batch_axis,
        'indexed_batch_axis_both': _mean_indexed_batch_axis_both,
        'forgot_output_projection': _mean_no_projection,
        'subtracted_mean': _mean_subtracted,
        'added_mean': _mean_added,
        'scalar_mean': _mean_scalar,
        'position_axis_as_head': _mean_position_axis,
        'merged_features_first': _mean_merged_features_first,
        'projection_without_bias': _mean_projection_without_bias,
        'median_not_mean': _mean_median,
        'median_midpoint': _mean_median_midpoint,
    },
    'GATE_IMPORTANCE': {
        'forgot_absolute_value': _importance_signed,
        'absolute_of_average': _importance_abs_of_mean,
        'mean_before_backward': _importance_mean_before_backward,
        'shared_gate_summed': _importance_shared_gate_summed,
        'summed_not_averaged': _importance_summed,
        'squared_gradient': _importance_squared,
        'negated_signed_gradient': _importance_negated_signed,
        'gates_at_zero': _importance_at_zero,
        'layer_normalised': _importance_layer_normalised,
        'ablation_difference': _importance_ablation_difference,
        'max_over_sequences': _importance_max,
        'gates_without_grad': _importance_no_requires_grad,
        'mean_before_backward_signed': _importance_mean_first_signed,
        'mean_before_backward_negated': _importance_mean_first_negated,
        'mean_before_backward_abs_of_average': _importance_mean_first_abs_of_mean,
        'mean_before_backward_squared': _importance_mean_first_squared,
        'mean_before_backward_max': _importance_mean_first_max,
    },
    'NARROW_HEAD': {
        'biggest_average_loss_change': _narrow_biggest_loss,
        'smallest_loss_change': _narrow_smallest_loss,
        'least_harmful_head': _narrow_highest_accuracy,
        'combined_loss_and_task': _narrow_loss_times_damage,
        'row_number_not_name': _narrow_position,
        'task_drop_per_loss_change': _narrow_ratio,
        'second_lowest_accuracy': _narrow_second_lowest,
        'summed_ranks': _narrow_summed_ranks,
        'summed_ranks_small_loss': _narrow_summed_ranks_small_loss,
        'value_not_name': _narrow_min_value,
    },
}
