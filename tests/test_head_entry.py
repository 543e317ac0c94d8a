"""Runs that extend a measured run by one head enter that head's block at the measured run's head
outputs (``run_blocks(..., heads=)``): the numbers are those of :func:`measure`, and the blocks
entered so compute no attention (counted at ``attn.hook_q``)."""

from __future__ import annotations

import pytest
import torch

from course_utils.interp.ablation import loss_evaluation, measure
from course_utils.interp.patching import EvaluationAt, losses_along_orders, prunable_counts
from course_utils.model.transformer import ModelConfig, TinyTransformer


def tiny_model() -> TinyTransformer:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=13, max_len=10, d_model=12, num_heads=3, num_layers=2, mlp=True)
    return TinyTransformer(config).double().eval()


def tokens_and_targets(batch: int = 5, length: int = 9):
    tokens = torch.randint(0, 13, (batch, length), generator=torch.Generator().manual_seed(1))
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100
    return tokens, targets


def attention_counter(model: TinyTransformer):
    """Hooks that count each block's attention computations, and the counts."""
    attended = dict.fromkeys(range(model.config.num_layers), 0)

    def count(q, hook):
        attended[int(hook.name.split(".")[1])] += 1

    return [(f"blocks.{i}.attn.hook_q", count) for i in attended], attended


def test_losses_along_orders_are_measure_and_enter_blocks_at_their_heads():
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    orders = [[(1, 0), (1, 1), (0, 0)], [(1, 1), (1, 0), (0, 2)]]
    watch, attended = attention_counter(model)
    with model.hooks(watch):
        losses = losses_along_orders(model, tokens, targets, orders, 3)
    # block 0: the intact runs only (k = 0's and the kept one); k = 3 enters it at its heads.
    # block 1: those two and k = 3 (after block 0 changed); k = 1, 2 enter it at its heads.
    assert attended == {0: 2, 1: 3}
    for i, order in enumerate(orders):
        expected = [measure(model, loss_evaluation(tokens, targets), order[:k])["loss"] for k in range(4)]
        assert losses[i].tolist() == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_prunable_counts_at_positions_enter_the_last_block_at_its_heads():
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    positions = torch.tensor([8, 3, 5, 8, 6])

    def score(logits):  # reads the logits at the positions only
        return {"picked": float(logits[torch.arange(5), positions].logsumexp(-1).sum())}

    at = EvaluationAt(tokens, score, positions)
    orders = [[(1, 0), (1, 1), (1, 2)], [(1, 2), (1, 0), (0, 1)]]
    watch, attended = attention_counter(model)
    with model.hooks(watch):
        counts, found = prunable_counts(model, at, orders, lambda numbers: True, incremental=True)
    assert counts == [3, 3]
    # the intact run attends in both blocks; the sets that add a last-block head enter it at its
    # heads; {L1H2, L1H0, L0H1} enters block 0 at its heads, then attends in block 1 (changed input).
    assert attended == {0: 1, 1: 2}
    for heads, numbers in found.items():
        assert numbers["picked"] == pytest.approx(measure(model, at, sorted(heads))["picked"], rel=1e-12)


def test_a_grouped_query_model_refuses_heads_by_name():
    """Grouped-query blocks have no ``attn.hook_z``: entering one at head outputs is refused with
    the reason, not an AttributeError from inside the block."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=13, max_len=10, d_model=12, num_heads=4, num_kv_heads=2,
                         num_layers=2, mlp=True)
    model = TinyTransformer(config).eval()
    resid = torch.zeros(2, 5, 12)
    with pytest.raises(ValueError, match=r"grouped-query \(num_kv_heads=2, num_heads=4\)"):
        model.run_blocks(resid, 1, heads=torch.zeros(2, 4, 5, 3))
