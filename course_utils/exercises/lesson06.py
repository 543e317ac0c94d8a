"""Exercise checks for lesson 06: head ablation, importance scores, reading an ablation table.

6.1 builds an attention layer's output with one head mean-ablated, 6.2 computes Michel et
al.'s importance from per-example gate gradients on a tiny real model, 6.3 picks the head
whose removal breaks a narrow task from a table. Every case is built so each known mistake
gives a different answer from the reference and from the other mistakes.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd
import torch
from torch import nn

from ..interp.ablation import sequence_losses
from ..model.transformer import ModelConfig, TinyTransformer
from .core import Case, Exercise, Feedback, Mistake, describe_value

__all__ = [
    "MEAN_ABLATION",
    "GATE_IMPORTANCE",
    "NARROW_HEAD",
    "check_mean_ablation",
    "check_gate_importance",
    "check_narrow_head",
]


# ---------------------------------------------------------------- 6.1 mean ablation of one head
def _mean_cases() -> list[Case]:
    cases = []
    for seed, (B, B_ref, h, T, dk, head) in enumerate([(3, 5, 4, 6, 3, 2), (2, 7, 3, 5, 4, 0)]):
        gen = torch.Generator().manual_seed(600 + seed)
        heads = torch.randn(B, h, T, dk, generator=gen, dtype=torch.float64)
        reference = torch.randn(B_ref, h, T, dk, generator=gen, dtype=torch.float64) + 1.5
        out_proj = nn.Linear(h * dk, h * dk).double()
        with torch.no_grad():
            out_proj.weight.copy_(torch.randn(h * dk, h * dk, generator=gen, dtype=torch.float64))
            out_proj.bias.copy_(torch.randn(h * dk, generator=gen, dtype=torch.float64))
        label = f"B={B}, reference of {B_ref}, head {head}"
        cases.append(Case((heads, reference, head, out_proj), label=label))
    return cases


class _MeanAblationExercise(Exercise):
    """6.1: the ablated output feeds the rest of the model, so a result in another dtype than the
    layer's is named even when its values are close: float64 cast down to float32 is a mistake
    here (the next layer refuses it or carries the lost digits on)."""

    def _grade(self, cases, outputs, expected) -> Feedback:
        feedback = super()._grade(cases, outputs, expected)
        if not feedback.passed:
            return feedback
        for got, exp in zip(outputs, expected, strict=True):
            if isinstance(got, torch.Tensor) and isinstance(exp, torch.Tensor) and got.dtype != exp.dtype:
                return Feedback(
                    self.title, "mistake",
                    f"the values are right, but your output is {got.dtype} and the layer works in "
                    f"{exp.dtype} (heads, the reference and out_proj all are): this output feeds the "
                    "rest of the model, which would refuse it or carry the lost digits on.",
                    "keep the inputs' dtype: no .float() or .to(...), and no new buffer without "
                    "dtype=heads.dtype (heads.clone() keeps it).", mistake="changed_dtype")
        return feedback


MEAN_ABLATION = _MeanAblationExercise(
    title="Exercise 6.1: mean-ablate one head",
    make_cases=_mean_cases,
    mistakes=[
        Mistake("per_position_mean", "you averaged over the reference sequences only, keeping one mean per "
                "position. That is a valid variant (per_position=True in course_utils.interp.ablation), "
                "but this exercise asks for one vector: the mean over every token of every reference "
                "sequence.",
                "average reference_heads[:, head] over dims 0 and 1 of that (B_ref, T, dk) slice."),
        Mistake("mean_over_head_axis", "you averaged over the head axis: in (B, h, T, dk) dim 1 is the "
                "head, so every head's output was mixed into the mean.",
                "select the head first, reference_heads[:, head] (B_ref, T, dk), then average."),
        Mistake("mean_over_every_head", "your mean is one vector of dk numbers, as asked, but it averages "
                "every head's output over every reference token: the reference's head axis (dim 1 of "
                "(B_ref, h, T, dk)) was averaged too, so the other heads' outputs were mixed in.",
                "select the head first, reference_heads[:, head] (B_ref, T, dk), then average over "
                "dims 0 and 1 of that slice."),
        Mistake("after_output_projection", "you replaced columns of the layer's output, after W_O. W_O "
                "mixes every head into every column, so those columns are not the head's output: replace "
                "the head's slice of the (B, h, T, dk) tensor before the heads are merged.",
                "edit heads[:, head], then merge and apply out_proj."),
        Mistake("evaluation_batch_as_reference", "you took the mean over the evaluation batch itself "
                "(heads), not over the reference batch. The ablated output then depends on the very "
                "sequences being scored.", "average reference_heads, not heads."),
        Mistake("zero_instead_of_mean", "you set the head's output to zero: that is zero ablation.",
                "fill the head's slice with the reference mean instead of 0."),
        Mistake("merged_without_transpose", "the head is replaced correctly, but you merged the heads "
                "with reshape(B, T, h*dk) straight from (B, h, T, dk): without transpose(1, 2) the reshape "
                "runs through each head's positions first, so every row mixes positions and heads.",
                "merge your edited copy of heads (B, h, T, dk) with .transpose(1, 2)"
                ".reshape(B, T, h * dk), as the model does."),
        Mistake("indexed_batch_axis", "you indexed the first axis with the head number (x[head] = ...): "
                "in (B, h, T, dk) that axis is the batch, so you replaced every head of sequence number "
                "`head` instead of head `head` in every sequence.",
                "index the head axis, dim 1: x[:, head] = ..., on a copy x = heads.clone()."),
        Mistake("indexed_batch_axis_both", "you indexed the first axis of both tensors with the head "
                "number (x[head] = reference_heads[head].mean(...)): in (B, h, T, dk) that axis is the "
                "batch, so you averaged every head of reference sequence number `head` and wrote it over "
                "every head of sequence number `head`, instead of head `head` in every sequence.",
                "index the head axis, dim 1, in both: x[:, head] = "
                "reference_heads[:, head].mean(dim=(0, 1)), on a copy x = heads.clone()."),
        Mistake("forgot_output_projection", "the head is replaced correctly, but you returned the merged "
                "heads without the output projection W_O.", "finish with out_proj(merged)."),
        Mistake("subtracted_mean", "you subtracted the reference mean from the head's output (mean-"
                "centring it) instead of replacing the output with the mean: the head's own, "
                "input-dependent part is still there.",
                "on a copy x = heads.clone(), assign the mean to the head's slice: x[:, head] = mean."),
        Mistake("added_mean", "you added the reference mean to the head's output instead of replacing "
                "the output with it.", "on a copy x = heads.clone(), assign the mean to the head's slice: "
                "x[:, head] = mean."),
        Mistake("scalar_mean", "your mean is one number: you averaged over the head's dk features too. "
                "Mean ablation keeps a vector of dk numbers, one per feature.",
                "average over the sequences and positions only: .mean(dim=(0, 1)) of a "
                "(B_ref, T, dk) slice."),
        Mistake("position_axis_as_head", "you indexed dim 2 with the head number: in (B, h, T, dk) that "
                "axis is the position, so you replaced position `head` of every head.",
                "the head axis is dim 1: x[:, head] on your copy of heads, and reference_heads[:, head]."),
        Mistake("merged_features_first", "you merged with a permute that puts dk before h, "
                "(B, T, dk, h): each token's vector then interleaves the heads' features, where the model "
                "places the heads side by side.",
                "merge your edited copy of heads with .transpose(1, 2).reshape(B, T, h * dk)."),
        Mistake("projection_without_bias", "you multiplied by out_proj.weight but left out its bias: "
                "the layer's output projection adds the bias too.",
                "call the layer itself, out_proj(merged), which applies weight and bias."),
        Mistake("median_not_mean", "you filled the head's slice with the median of its reference "
                "outputs, not their mean: mean ablation replaces the head's output with its average over "
                "every reference token.", "average the head's reference outputs over sequences and "
                "positions instead of taking their median."),
        Mistake("median_midpoint", "you filled the head's slice with the median of its reference "
                "outputs (the midpoint of the two middle values), not their mean: mean ablation replaces "
                "the head's output with its average over every reference token.",
                "average the head's reference outputs over sequences and positions instead of taking "
                "their median."),
    ],
    hint="the mean is one vector of dk numbers, taken over every sequence and position of the head's "
         "reference outputs; write it into that head's slice of a copy of heads, merge the heads the "
         "way the model does (heads next to each other for every token), then project.",
)
check_mean_ablation = MEAN_ABLATION.check


# ---------------------------------------------------------------- 6.2 importance from gate gradients
def _tiny_loss_fn(seed: int) -> tuple[Callable[[torch.Tensor], torch.Tensor], int, int, int]:
    """A per-sequence loss ``(B, L, h) gates -> (B,)`` on a tiny random model and random tokens."""
    default_dtype = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        # drawn in float32 whatever the learner's default dtype (the stored answers were: under
        # float64 the same seed draws other weights, and the reference answer was marked wrong)
        torch.set_default_dtype(torch.float32)
        try:
            model = TinyTransformer(ModelConfig(vocab_size=11, max_len=8, d_model=12, num_heads=3,
                                                num_layers=2, mlp=True)).double().eval()
        finally:
            torch.set_default_dtype(default_dtype)
        with torch.no_grad():
            model.unembed.weight.mul_(50.0)  # sharper predictions: gradients of both signs
    gen = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, 11, (6, 8), generator=gen)
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100

    def per_sequence_loss(gates: torch.Tensor) -> torch.Tensor:
        def gate(layer: int, heads: torch.Tensor) -> torch.Tensor:  # heads: (B, h, T, dk)
            return heads * gates[:, layer, :, None, None].to(heads.dtype)

        logits, _ = model(tokens, edit_heads=gate)
        return sequence_losses(logits, targets)  # (B,)

    return per_sequence_loss, 6, 2, 3


def _importance_shared_gate(loss_fn, num_sequences, num_layers, num_heads):
    gates = torch.ones(num_layers, num_heads, dtype=torch.float64, requires_grad=True)
    loss_fn(gates.expand(num_sequences, -1, -1)).mean().backward()
    return gates.grad.abs()  # one gate for the whole batch: |E dL/dxi|, not E |dL/dxi|


def _importance_cases() -> list[Case]:
    cases = []
    for seed in (61, 62):
        loss_fn, B, L, h = _tiny_loss_fn(seed)
        cases.append(Case((loss_fn, B, L, h), label=f"a tiny model, seed {seed}"))
    return cases


# the first of two slips that the 6.2 mistakes below name together
_SUM_THEN_ABS = "backward() on the sum of the losses, then .abs() of each sequence's gradient before mean(0)"
_MEAN_FIRST = ("two slips: your gradients are those of the *mean* of the sequences' losses (backward() "
               "or autograd.grad on the mean), so each sequence's gradient came out divided by the number "
               "of sequences, and ")


class _GateExercise(Exercise):
    """6.2: gates made without ``requires_grad=True`` have no ``.grad`` (None) after backward;
    the AttributeError that follows is named instead of reported raw. The scores are read and
    ranked, not stored or fed on, so a float32 result of the float64 model passes."""

    def check(self, fn: Callable[..., object]) -> Feedback:
        feedback = super().check(fn)
        if feedback.status == "error" and "'NoneType' object has no attribute" in feedback.message:
            return self._mistake_feedback("gates_without_grad")
        return feedback


GATE_IMPORTANCE = _GateExercise(
    title="Exercise 6.2: head importance from gate gradients",
    make_cases=_importance_cases,
    mistakes=[
        Mistake("forgot_absolute_value", "you averaged the signed gradients. A head whose gate helps some "
                "sequences and hurts others then looks unimportant, and the scores can be negative.",
                "take .abs() of each sequence's gradient before averaging over sequences."),
        Mistake("absolute_of_average", "you computed |E dL/dxi| instead of E |dL/dxi|: either the "
                "absolute value came after averaging over sequences, or one gate per head served the whole "
                "batch (then backward gives the batch's average gradient). Gradients of opposite signs "
                "cancel before the absolute value sees them.",
                "give every sequence its own gates, shaped (num_sequences, L, h), sum the losses, then "
                "take abs before mean(0)."),
        Mistake("mean_before_backward", "your gradients are those of the *mean* of the sequences' losses "
                "(backward() or autograd.grad on the mean), averaged again: each sequence's gradient came "
                "out divided by the number of sequences, so your scores are that many times too small.",
                "backward() on the sum of the losses (sequence x's loss depends on its own gates only), "
                "then abs and mean(0)."),
        Mistake("shared_gate_summed", "one gate per head served the whole batch and you summed the losses: "
                "backward then gives the sum of the sequences' gradients, and gradients of opposite signs "
                "cancel before the absolute value sees them (|sum| instead of the mean of |.|).",
                "give every sequence its own gates, shaped (num_sequences, L, h), then abs before mean(0)."),
        Mistake("summed_not_averaged", "you summed |dL/dxi| over sequences instead of averaging: the "
                "ranking is right but the values grow with the batch size.", "use mean(0), not sum(0)."),
        Mistake("squared_gradient", "you averaged squared gradients (a Fisher-style score). Michel et al.'s "
                "importance averages absolute values.", "use .abs(), not .pow(2)."),
        Mistake("negated_signed_gradient", "your scores are the negated average of the signed gradients: "
                "a sign flip does not replace the absolute value, and gradients of opposite signs still "
                "cancel.", "take .abs() of each sequence's gradient, then mean(0); no minus sign."),
        Mistake("gates_at_zero", "you took the gradient with the gates at 0, every head switched off. "
                "Michel et al.'s score is the gradient at xi = 1, the model as it is.",
                "make the gates with torch.ones(..., requires_grad=True)."),
        Mistake("layer_normalised", "you divided each layer's scores by their l2 norm: that is Michel et "
                "al.'s normalisation for ranking heads across layers, a second step. The exercise asks for "
                "the raw E |dL/dxi|.", "return the mean of the absolute gradients as it is."),
        Mistake("ablation_difference", "you measured how much each sequence's loss changes when the head "
                "is switched off (gate 1 -> 0): a finite difference, which is ablation. The importance "
                "score is the gradient at xi = 1, a first-order estimate of that change.",
                "one backward pass with gates of ones that require gradients, then abs and mean(0)."),
        Mistake("max_over_sequences", "you took the largest absolute gradient over the sequences; the "
                "score is their mean.", "use .mean(0) after .abs(), not .max(0)."),
        Mistake("gates_without_grad", "the gates' .grad is None, so .abs() raised AttributeError: "
                "the gates were made without requires_grad=True, so backward() computed no gradient "
                "for them.",
                "torch.ones(num_sequences, L, h, dtype=torch.float64, requires_grad=True)."),
        # two slips at once, each named (learner trial l21: the mean and no abs got the general hint)
        Mistake("mean_before_backward_signed", _MEAN_FIRST + "you averaged the signed gradients, without "
                ".abs(): gradients of opposite signs cancel, and scores can be negative.",
                _SUM_THEN_ABS + "."),
        Mistake("mean_before_backward_negated", _MEAN_FIRST + "your scores are the negated average of the "
                "signed gradients: a sign flip does not replace the absolute value.",
                _SUM_THEN_ABS + "; no minus sign."),
        Mistake("mean_before_backward_abs_of_average", _MEAN_FIRST + "the absolute value came after "
                "averaging over the sequences (|E dL/dxi|, not E |dL/dxi|): gradients of opposite signs "
                "cancel before it sees them.",
                _SUM_THEN_ABS + "."),
        Mistake("mean_before_backward_squared", _MEAN_FIRST + "you averaged squared gradients (a "
                "Fisher-style score) where Michel et al.'s importance averages absolute values.",
                "backward() on the sum of the losses, then .abs() (not .pow(2)) and mean(0)."),
        Mistake("mean_before_backward_max", _MEAN_FIRST + "you took the largest absolute gradient over the "
                "sequences, where the score is their mean.",
                "backward() on the sum of the losses, then .abs() and .mean(0), not .max(0)."),
    ],
    # not a question about one step: a wrong answer the check cannot name may have any of them right
    hint="I_h averages, over the sequences, the size of each sequence's own gradient at gates of 1. Check "
         "each step: every sequence has its own gates, shaped (num_sequences, L, h), with "
         "requires_grad=True; backward() runs on the sum of the losses (not their mean); .abs() comes "
         "before mean(0).",
)
check_gate_importance = GATE_IMPORTANCE.check


# ---------------------------------------------------------------- 6.3 which head breaks the task?
def _narrow_cases() -> list[Case]:
    tables = [
        {"L0H0": (0.210, 0.96), "L0H1": (0.004, 0.97), "L1H0": (0.012, 0.55), "L1H1": (0.031, 0.995)},
        {"L0H0": (0.001, 1.00), "L0H1": (0.480, 0.90), "L0H2": (0.020, 0.94), "L1H0": (0.009, 0.31),
         "L1H1": (0.090, 0.96), "L1H2": (0.150, 0.99)},
        # the loss and the accuracy combined (e.g. loss change x accuracy lost) picks L0H2 here,
        # neither the largest loss change (L0H0) nor the lowest accuracy (L1H1)
        {"L0H0": (0.500, 0.97), "L0H1": (0.002, 0.99), "L0H2": (0.300, 0.60), "L1H1": (0.050, 0.40)},
        # accuracy lost per unit of loss change is largest for L0H1 (0.1 / 0.001), and the second-
        # lowest accuracy is L1H0: only the task column alone picks L0H0
        {"L0H0": (0.400, 0.20), "L0H1": (0.001, 0.90), "L1H0": (0.050, 0.35), "L1H1": (0.020, 0.97)},
        # ranking both columns and adding the ranks picks L0H1 (2 + 2); the largest loss change is
        # L0H0, and the task needs L1H0 most
        {"L0H0": (0.600, 0.95), "L0H1": (0.400, 0.60), "L1H0": (0.010, 0.30), "L1H1": (0.050, 0.80)},
        # both columns ranked from the smallest and the ranks added picks L0H2 (2 + 2); the ratio of
        # accuracy lost to loss change picks L0H1, and the task needs L0H0 most
        {"L0H0": (0.400, 0.30), "L0H1": (0.001, 0.90), "L0H2": (0.020, 0.45), "L1H0": (0.050, 0.80),
         "L1H1": (0.100, 0.95)},
    ]
    return [Case((pd.DataFrame.from_dict(t, orient="index", columns=["loss change", "task accuracy after"]),),
                 label=f"table {i + 1}") for i, t in enumerate(tables)]


class _HeadNameExercise(Exercise):
    """6.3: a pandas row, Index or other container is named before the values are compared
    (a one-element Index compares equal to the right name, and a Series cannot be compared)."""

    def _wrong_kind(self, outputs) -> Feedback | None:
        for got in outputs:
            pandas = isinstance(got, (pd.Series, pd.DataFrame, pd.Index))
            if pandas or isinstance(got, (np.ndarray, list, tuple)):
                # "pandas" only for a pandas object: a tuple or list is described as what it is
                what = (f"a pandas {type(got).__name__} of {len(got)} item(s)" if pandas
                        else describe_value(got))
                why = (" A selection such as table.loc[...], nsmallest(1) or table[...].index gives a "
                       "pandas object;" if pandas else "")
                return Feedback(self.title, "mistake",
                                f"you returned {what}, not the head's name.{why} The check wants "
                                "the label itself, a str such as 'L1H2'.",
                                "return the row's label itself: a str, not a selection of the "
                                "table (the first item of a one-element Index is one).",
                                mistake="not_a_name")
        return None

    def _unmatched_slip(self, cases, outputs, expected) -> Feedback | None:
        """Any number is named, not only the lowest accuracy: a value of the table, a position."""
        numbers = (int, float, np.integer, np.floating)
        if all(isinstance(got, numbers) and not isinstance(got, (bool, np.bool_)) for got in outputs):
            return self._mistake_feedback("value_not_name")
        return None


NARROW_HEAD = _HeadNameExercise(
    title="Exercise 6.3: which head does the task need?",
    make_cases=_narrow_cases,
    mistakes=[
        Mistake("biggest_average_loss_change", "you picked the head whose removal changes the average loss "
                "most. That head matters to many predictions a little; the task can still survive without "
                "it. The question is about the task's accuracy.",
                "look at the task column: which removal leaves the lowest accuracy?"),
        Mistake("smallest_loss_change", "you picked the head that moves the average loss least. A narrow "
                "head often does barely move it, but so do heads that do nothing: the loss alone cannot "
                "tell them apart.", "decide by the task accuracy after removal."),
        Mistake("least_harmful_head", "you picked the head whose removal leaves the highest task accuracy: "
                "the one the task needs least.", "take the minimum, not the maximum."),
        Mistake("combined_loss_and_task", "you combined the loss change with the task accuracy (for "
                "example their product). The question is only which removal breaks the task: a "
                "head can barely move the loss and still be the one the task needs.",
                "decide by the task accuracy after removal alone."),
        Mistake("row_number_not_name", "you returned the row's position, not the head's name.",
                "return the row's label (the table's index), such as 'L1H2', not its position."),
        Mistake("task_drop_per_loss_change", "you divided the accuracy the task loses by the loss change. "
                "That ratio is largest for a head that barely moves the loss, whatever it does to the "
                "task: the question is only which removal leaves the task worst off.",
                "decide by the task accuracy after removal alone: the lowest one."),
        Mistake("summed_ranks", "you ranked the heads on both columns and added the ranks, so a head "
                "that is middling on both beats the one that breaks the task. The question is only "
                "which removal leaves the task worst off; the loss column does not enter it.",
                "decide by the task accuracy after removal alone: the lowest one."),
        Mistake("summed_ranks_small_loss", "you ranked the heads on both columns, each from its smallest "
                "value, and added the ranks: that rewards a head for barely moving the average loss as much "
                "as for breaking the task, so a head that is low on both beats the one that breaks the task "
                "most. The loss column does not enter the question.",
                "decide by the task accuracy after removal alone: the lowest one."),
        Mistake("second_lowest_accuracy", "you picked the head with the second-lowest task accuracy (an "
                "off-by-one in a sort, or nsmallest(2) read from the wrong end).",
                "look for the single lowest task accuracy directly, without sorting and counting."),
        Mistake("value_not_name", "you returned a number (the lowest accuracy itself, say, which min() "
                "gives), not the head's name: the question asks which head, and the heads are the "
                "table's row labels.",
                "return the label of the row whose task accuracy is lowest, a str such as 'L1H2', "
                "not the value in it."),
    ],
    hint="the heads are the table's row labels: find the row whose removal leaves the lowest task "
         "accuracy, and return its label (a str such as 'L1H2').",
)
check_narrow_head = NARROW_HEAD.check
