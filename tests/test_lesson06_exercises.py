"""Lesson 06 checks against slips written the way a learner would write them (not copies of the
Mistake implementations, which tests/test_exercises.py feeds to every check)."""

import pytest
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


def test_mean_ablation_names_a_mean_over_every_head_and_token():
    """A reading trial's slip: reference_heads.mean(1).mean((0, 1)), one dk vector, but every
    head's outputs averaged in."""
    def every_head(heads, reference_heads, head, out_proj):
        edited = heads.clone()
        edited[:, head] = reference_heads.mean(1).mean((0, 1))
        return out_proj(_merge(edited))
    feedback = lesson06.check_mean_ablation(every_head)
    assert feedback.mistake == "mean_over_every_head" and "reference_heads[:, head]" in feedback.hint


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


def test_gate_importance_names_both_slips_of_a_mean_backward_without_abs():
    # learner trial l21: backward on the mean AND no abs, with gates of the right shape, got
    # the general hint asking what shape the gates must have
    def mean_and_signed(per_sequence_loss, num_sequences, num_layers, num_heads):
        gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
        per_sequence_loss(gates).mean().backward()
        return gates.grad.mean(0)
    feedback = lesson06.check_gate_importance(mean_and_signed)
    assert feedback.mistake == "mean_before_backward_signed"
    assert "two slips" in feedback.message and "mean" in feedback.message and "abs" in feedback.hint
    assert "shape" not in feedback.hint

    def mean_and_squared(per_sequence_loss, num_sequences, num_layers, num_heads):
        gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
        (grad,) = torch.autograd.grad(per_sequence_loss(gates).mean(), gates)
        return (grad ** 2).mean(0)
    assert lesson06.check_gate_importance(mean_and_squared).mistake == "mean_before_backward_squared"


def test_gate_importance_general_hint_does_not_presume_the_gates_shape():
    def halved(per_sequence_loss, num_sequences, num_layers, num_heads):  # no slip it can name
        gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
        per_sequence_loss(gates).sum().backward()
        return gates.grad.abs().mean(0) / 2
    feedback = lesson06.check_gate_importance(halved)
    assert feedback.status == "wrong" and feedback.mistake is None
    assert "what shape must" not in feedback.hint and ".abs()" in feedback.hint


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


# -- slips named since the interpretability review (issue 26) -------------------------------
def _merge_heads(heads):
    B, h, T, dk = heads.shape
    return heads.transpose(1, 2).reshape(B, T, h * dk)


def test_mean_ablation_names_centring_adding_scalar_axes_permute_and_bias():
    def edit(how):
        def answer(heads, reference_heads, head, out_proj):
            edited, mean = heads.clone(), reference_heads[:, head].mean(dim=(0, 1))
            if how == "subtracted":
                edited[:, head] -= mean
            elif how == "added":
                edited[:, head] += mean
            elif how == "scalar":
                edited[:, head] = reference_heads[:, head].mean()
            elif how == "position":
                edited[:, :, head] = reference_heads[:, :, head].mean(dim=(0, 1))
            else:
                edited[:, head] = mean
            if how == "permute":
                B, h, T, dk = edited.shape
                return out_proj(edited.permute(0, 2, 3, 1).reshape(B, T, h * dk))
            if how == "no bias":
                return _merge_heads(edited) @ out_proj.weight.T
            return out_proj(_merge_heads(edited))
        return answer

    for how, key in (("subtracted", "subtracted_mean"), ("added", "added_mean"), ("scalar", "scalar_mean"),
                     ("position", "position_axis_as_head"), ("permute", "merged_features_first"),
                     ("no bias", "projection_without_bias")):
        assert lesson06.check_mean_ablation(edit(how)).mistake == key, how


def test_mean_ablation_that_edits_heads_in_place_is_named():
    def in_place(heads, reference_heads, head, out_proj):
        heads[:, head] = reference_heads[:, head].mean(dim=(0, 1))  # the caller's tensor changes
        return out_proj(_merge_heads(heads))

    feedback = lesson06.check_mean_ablation(in_place)
    assert feedback.mistake == "edited_input_in_place" and "clone" in feedback.hint


def _gate_grads(loss_fn, B, L, h, value=1.0, grad=True):
    gates = torch.full((B, L, h), value, dtype=torch.float64, requires_grad=grad)
    loss_fn(gates).sum().backward() if grad else loss_fn(gates).sum()
    return gates.grad


def test_gate_importance_names_sign_zero_gates_normalisation_ablation_max_and_no_grad():
    def negated(loss_fn, B, L, h):
        return -_gate_grads(loss_fn, B, L, h).mean(0)

    def at_zero(loss_fn, B, L, h):
        return _gate_grads(loss_fn, B, L, h, value=0.0).abs().mean(0)

    def normalised(loss_fn, B, L, h):
        importance = _gate_grads(loss_fn, B, L, h).abs().mean(0)
        return importance / importance.norm(dim=1, keepdim=True)

    def ablation(loss_fn, B, L, h):
        ones = torch.ones(B, L, h, dtype=torch.float64)
        with torch.no_grad():
            base, out = loss_fn(ones), torch.zeros(L, h, dtype=torch.float64)
            for layer in range(L):
                for head in range(h):
                    gates = ones.clone()
                    gates[:, layer, head] = 0
                    out[layer, head] = (loss_fn(gates) - base).abs().mean()
        return out

    def largest(loss_fn, B, L, h):
        return _gate_grads(loss_fn, B, L, h).abs().max(dim=0).values

    def no_grad(loss_fn, B, L, h):
        return _gate_grads(loss_fn, B, L, h, grad=False).abs().mean(0)

    for answer, key in ((negated, "negated_signed_gradient"), (at_zero, "gates_at_zero"),
                        (normalised, "layer_normalised"), (ablation, "ablation_difference"),
                        (largest, "max_over_sequences"), (no_grad, "gates_without_grad")):
        feedback = lesson06.check_gate_importance(answer)
        assert feedback.mistake == key, (key, feedback)
    assert "NoneType" not in lesson06.check_gate_importance(no_grad).message.split("(")[0]


def test_gate_importance_through_the_library_is_turned_back():
    """The model sits in the loss function's closure; head_importance would do the work."""
    from course_utils.interp.ablation import head_importance

    def library(loss_fn, B, L, h):
        cells = {name: cell.cell_contents for name, cell in
                 zip(loss_fn.__code__.co_freevars, loss_fn.__closure__, strict=True)}
        return head_importance(cells["model"], cells["tokens"], cells["targets"]).double()

    feedback = lesson06.check_gate_importance(library)
    assert not feedback.passed and feedback.mistake == "called_reference", feedback


def test_narrow_head_names_the_ratio_and_the_second_lowest():
    def ratio(table):
        return str(((1 - table["task accuracy after"]) / table["loss change"].abs()).idxmax())

    def second_lowest(table):
        return table["task accuracy after"].sort_values().index[1]

    assert lesson06.check_narrow_head(ratio).mistake == "task_drop_per_loss_change"
    assert lesson06.check_narrow_head(second_lowest).mistake == "second_lowest_accuracy"


def test_6_3_summed_ranks_are_named_not_called_the_largest_loss_change():
    def ranks_added(table):
        return (table["loss change"].rank(ascending=False) + table["task accuracy after"].rank()).idxmin()

    fb = lesson06.check_narrow_head(ranks_added)
    assert fb.mistake == "summed_ranks" and "loss change most" not in fb.message


def test_6_3_ranks_summed_either_way_are_named_as_summed_ranks():
    """Ranking both columns and adding the ranks is named as that, whichever way each column is
    ranked, never as the largest loss change or the ratio of accuracy lost to loss change."""
    from_smallest = [lambda t: t.rank().sum(axis=1).idxmin(),
                     lambda t: (t["loss change"].rank() + t["task accuracy after"].rank()).idxmin(),
                     lambda t: (t["loss change"].rank(ascending=False)
                                + t["task accuracy after"].rank(ascending=False)).idxmax()]
    for answer in from_smallest:
        fb = lesson06.check_narrow_head(answer)
        assert fb.mistake == "summed_ranks_small_loss", fb.mistake
        assert "added the ranks" in fb.message and "loss change most" not in fb.message
    loss_first = lambda t: (t["loss change"].rank() + t["task accuracy after"].rank(ascending=False)).idxmax()  # noqa: E731
    assert lesson06.check_narrow_head(loss_first).mistake == "summed_ranks"
    ratio = lambda t: ((1 - t["task accuracy after"]) / t["loss change"].abs()).idxmax()  # noqa: E731
    assert lesson06.check_narrow_head(ratio).mistake == "task_drop_per_loss_change"


AUTOGRAD_GRAD = '''import torch


def gate_importance(per_sequence_loss, num_sequences, num_layers, num_heads):
    gates = torch.ones(num_sequences, num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(per_sequence_loss(gates).sum(), gates)
    return grad.abs().mean(dim=0)
'''


@pytest.mark.slow  # grades outside, in a fresh process
def test_6_2_with_torch_autograd_grad_scores_at_grading_as_in_the_notebook():
    """6.2's Library use line says "torch autograd yes": `torch.autograd.grad` is as good an
    answer as `.backward()`, so neither the notebook's preview nor the outside grader refuses
    it (a learner trial was told it would score 0). The module alone is allowed there: its
    submodules stay refused, and other exercises keep torch.autograd out."""
    from pathlib import Path

    from course_utils.exercises import autograde, sandbox

    assert sandbox.rules_broken(AUTOGRAD_GRAD, "lesson06.check_gate_importance") == []
    assert sandbox.grading_preview([AUTOGRAD_GRAD], "gate_importance", "lesson06.check_gate_importance") == []
    profiler = AUTOGRAD_GRAD.replace("return grad", "torch.autograd.profiler.profile()\n    return grad")
    key = "lesson06.check_gate_importance"
    assert any("torch.autograd.profiler" in r for r in sandbox.rules_broken(profiler, key))
    elsewhere = sandbox.rules_broken(AUTOGRAD_GRAD, "lesson04.check_mha_forward")
    assert any("torch.autograd" in r for r in elsewhere)
    solutions = str(Path(__file__).resolve().parent.parent / "solutions")
    graded = autograde.grade_answer("lesson06", "check_gate_importance", AUTOGRAD_GRAD, "gate_importance",
                                    salt=5, solutions_dir=solutions)
    assert graded.passed, graded
