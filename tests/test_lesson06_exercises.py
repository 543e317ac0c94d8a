"""Lesson 06 checks against slips written the way a learner would write them (not copies of the
Mistake implementations, which tests/test_exercises.py feeds to every check)."""

import torch

from course_utils.exercises import lesson06


def _merge(edited):
    B, h, T, dk = edited.shape
    return edited.transpose(1, 2).reshape(B, T, h * dk)


def test_mean_ablation_names_a_merge_without_transpose_and_the_batch_axis():
    def no_transpose(heads, reference_heads, head, out_proj):
        edited = heads.clone()
        edited[:, head] = reference_heads[:, head].flatten(0, 1).mean(0)
        return out_proj(edited.reshape(edited.shape[0], edited.shape[2], -1))
    assert lesson06.check_mean_ablation(no_transpose).mistake == "merged_without_transpose"

    def batch_axis(heads, reference_heads, head, out_proj):
        edited = heads.clone()
        edited[head, :, :, :] = reference_heads[:, head].mean(dim=(0, 1))
        return out_proj(_merge(edited))
    assert lesson06.check_mean_ablation(batch_axis).mistake == "indexed_batch_axis"


def test_gate_importance_names_a_mean_before_backward_and_a_shared_summed_gate():
    def mean_first(per_sequence_loss, num_sequences, num_layers, num_heads):
        gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64).requires_grad_()
        (grad,) = torch.autograd.grad(per_sequence_loss(gates).mean(), gates)
        return grad.abs().sum(0) / num_sequences
    assert lesson06.check_gate_importance(mean_first).mistake == "mean_before_backward"

    def shared(per_sequence_loss, num_sequences, num_layers, num_heads):
        gate = torch.ones(1, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
        per_sequence_loss(gate.repeat(num_sequences, 1, 1)).sum().backward()
        return gate.grad[0].abs()
    assert lesson06.check_gate_importance(shared).mistake == "shared_gate_summed"


def test_narrow_head_names_pandas_objects_and_a_combined_score():
    def as_index(table):
        accuracy = table["task accuracy after"]
        return table[accuracy == accuracy.min()].index  # a one-element Index, equal to the name
    feedback = lesson06.check_narrow_head(as_index)
    assert feedback.mistake == "not_a_name" and "Index" in feedback.message

    def as_row(table):
        return table.loc[table["task accuracy after"].idxmin()]
    assert lesson06.check_narrow_head(as_row).mistake == "not_a_name"

    def combined(table):
        damage = table["loss change"] * (1.0 - table["task accuracy after"])
        return damage.sort_values().index[-1]
    assert lesson06.check_narrow_head(combined).mistake == "combined_loss_and_task"

    assert lesson06.check_narrow_head(lambda t: t.sort_values("task accuracy after").index[0]).passed
