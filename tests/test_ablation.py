"""course_utils.interp.ablation: zero and mean ablation, importance from gate gradients, pruning orders."""

from __future__ import annotations

import pytest
import torch

from course_utils.exercises import lesson06
from course_utils.interp.ablation import (
    Evaluation,
    ablated_logits,
    ablation_table,
    all_heads,
    block_inputs,
    gates_without,
    head_importance,
    head_outputs,
    importance_order,
    loss_evaluation,
    mean_head_outputs,
    measure,
    pruning_curve,
    random_orders,
    sequence_losses,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import BOS, BOS_ID, MixtureTask


def tiny_model(mlp: bool = True, seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=13, max_len=10, d_model=12, num_heads=3, num_layers=2, mlp=mlp)
    return TinyTransformer(config).double().eval()


def tokens_and_targets(batch: int = 5, length: int = 9, seed: int = 1):
    tokens = torch.randint(0, 13, (batch, length), generator=torch.Generator().manual_seed(seed))
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100
    return tokens, targets


def forward_by_hand(model: TinyTransformer, tokens: torch.Tensor, silenced: set) -> torch.Tensor:
    """The model's forward pass written out, with the silenced heads' outputs removed."""
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(tokens.shape[1]))
    for layer, block in enumerate(model.blocks):
        h = block.ln_attn(x)
        q, k, v = block.attn.project_qkv(h, h, h)  # (B, h, T, dk)
        heads = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        keep = torch.tensor([0.0 if (layer, i) in silenced else 1.0 for i in range(heads.shape[1])])
        heads = heads * keep.to(heads.dtype).view(1, -1, 1, 1)
        x = x + block.attn.out_proj(block.attn.merge_heads(heads))
        if block.mlp is not None:
            x = x + block.mlp(block.ln_mlp(x))
    return model.unembed(model.ln_final(x))


@pytest.mark.parametrize("mlp", [False, True])
def test_gating_every_head_equals_removing_the_attention_outputs(mlp):
    model = tiny_model(mlp)
    tokens, _ = tokens_and_targets()
    every = all_heads(model)
    with torch.no_grad():
        expected = forward_by_hand(model, tokens, set(every))
        some = forward_by_hand(model, tokens, {(0, 1), (1, 2)})
    torch.testing.assert_close(ablated_logits(model, tokens, every), expected)
    torch.testing.assert_close(ablated_logits(model, tokens, [(0, 1), (1, 2)]), some)
    assert not torch.allclose(expected, some)
    assert gates_without(model, [(1, 2)]).tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]


def test_mean_ablation_with_one_reference_sequence_substitutes_its_outputs():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=4)
    reference = tokens_and_targets(batch=1, seed=9)[0]  # (1, T)
    recorded = head_outputs(model, reference)  # (L, 1, h, T, dk)
    means = mean_head_outputs(model, reference, per_position=True)  # (L, h, T, dk)
    torch.testing.assert_close(means, recorded[:, 0])

    def substitute(layer, heads):
        if layer == 1:
            heads = heads.clone()
            heads[:, 0] = recorded[1, 0, 0]  # that sequence's output of head L1H0, (T, dk)
        return heads

    with torch.no_grad():
        expected, _ = model(tokens, edit_heads=substitute)
    torch.testing.assert_close(ablated_logits(model, tokens, [(1, 0)], method="mean", means=means), expected)
    # on that very sequence, replacing every head by its own output changes nothing
    with torch.no_grad():
        own, _ = model(reference)
    every = all_heads(model)
    torch.testing.assert_close(ablated_logits(model, reference, every, method="mean", means=means), own)


def test_the_token_mean_ignores_what_keep_leaves_out():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=3)
    keep = torch.zeros_like(tokens, dtype=torch.bool)
    keep[1, :4] = True
    outputs = head_outputs(model, tokens)  # (L, B, h, T, dk)
    torch.testing.assert_close(mean_head_outputs(model, tokens, keep=keep), outputs[:, 1, :, :4].mean(dim=2))
    torch.testing.assert_close(mean_head_outputs(model, tokens), outputs.mean(dim=(1, 3)))


def test_importance_equals_finite_differences():
    model = tiny_model()
    tokens, targets = tokens_and_targets(batch=6)
    importance = head_importance(model, tokens, targets, chunk_size=4)  # two chunks
    eps = 1e-5
    expected = torch.zeros_like(importance)
    for layer, head in all_heads(model):
        losses = []
        for sign in (1, -1):
            gates = torch.ones(2, 3, dtype=torch.float64)
            gates[layer, head] += sign * eps
            with torch.no_grad():
                logits, _ = model(tokens, head_mask=gates)
            losses.append(sequence_losses(logits, targets))  # (B,): each sequence's own derivative
        expected[layer, head] = ((losses[0] - losses[1]) / (2 * eps)).abs().mean()
    assert importance.dtype == torch.float64  # the model's dtype (float32 before battery 27)
    torch.testing.assert_close(importance, expected, rtol=1e-4, atol=1e-7)
    assert all(p.grad is None for p in model.parameters()), "no gradient is left on the weights"
    assert all(p.requires_grad for p in model.parameters())


def test_importance_is_not_the_absolute_average_gradient():
    model = tiny_model()
    tokens, targets = tokens_and_targets(batch=6)
    gates = torch.ones(2, 3, dtype=torch.float64, requires_grad=True)
    logits, _ = model(tokens, head_mask=gates)
    sequence_losses(logits, targets).mean().backward()
    importance = head_importance(model, tokens, targets).double()
    assert (importance >= gates.grad.abs() - 1e-9).all()  # E|g| >= |E g|
    assert (importance > gates.grad.abs() + 1e-6).any()


def test_the_greedy_order_is_a_permutation_from_least_to_most_important():
    importance = torch.tensor([[0.3, 0.1, 0.3], [0.05, 0.9, 0.2]])
    order = importance_order(importance)
    assert sorted(order) == [(layer, head) for layer in range(2) for head in range(3)]
    assert order == [(1, 0), (0, 1), (1, 2), (0, 0), (0, 2), (1, 1)]  # ties: lower index first


def test_random_orders_use_fixed_seeds():
    model = tiny_model()
    first, again = random_orders(model, [0, 1, 2]), random_orders(model, [0, 1, 2])
    assert first == again
    assert len({tuple(o) for o in first}) == 3
    assert all(sorted(o) == all_heads(model) for o in first)


def test_pruning_curve_measures_after_each_head():
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    evaluation = loss_evaluation(tokens, targets)
    order = importance_order(head_importance(model, tokens, targets))
    curve = pruning_curve(model, evaluation, order)
    assert curve["pruned"].tolist() == list(range(7))
    assert curve["fraction"].iloc[-1] == 1.0
    assert curve["loss"].iloc[3] == pytest.approx(measure(model, evaluation, order[:3])["loss"])
    with torch.no_grad():
        intact, _ = model(tokens)
    assert curve["loss"].iloc[0] == pytest.approx(float(torch.nn.functional.cross_entropy(
        intact.flatten(0, 1), targets.flatten())))


def test_ablation_table_has_one_row_per_case_and_both_methods_run():
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    evaluations = [loss_evaluation(tokens, targets),
                   Evaluation(tokens, lambda logits: {"top token": float(logits.argmax(-1).float().mean())})]
    means = mean_head_outputs(model, tokens_and_targets(seed=4)[0])
    cases = {"nothing": [], "L1H2": [(1, 2)]}
    zero = ablation_table(model, evaluations, cases)
    mean = ablation_table(model, evaluations, cases, method="mean", means=means)
    assert list(zero.index) == ["nothing", "L1H2"] and list(zero.columns) == ["loss", "top token"]
    assert zero.loc["nothing", "loss"] == mean.loc["nothing", "loss"]
    assert zero.loc["L1H2", "loss"] != mean.loc["L1H2", "loss"]


@pytest.mark.parametrize("method", ["zero", "mean"])
def test_table_and_curve_rows_equal_measure_of_each_case(method):
    # ablation_table and pruning_curve enter each run at the first block its heads change, from a
    # stream computed before; every row must still be what measure gives for its heads.
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    evaluations = [loss_evaluation(tokens, targets),
                   Evaluation(tokens[:3, :6], lambda logits: {"mean logit": float(logits.mean())})]
    means = {0: mean_head_outputs(model, tokens_and_targets(seed=4)[0], per_position=True),
             1: mean_head_outputs(model, tokens_and_targets(seed=5)[0])} if method == "mean" else None
    cases = {"none": [], "L1H0": [(1, 0)], "L0H2": [(0, 2)], "L1H2+L0H1": [(1, 2), (0, 1)]}
    table = ablation_table(model, evaluations, cases, method=method, means=means)
    order = [(1, 1), (0, 0), (1, 2), (0, 2), (1, 0), (0, 1)]
    counts = [4, 0, 2, 6, 1]  # out of order (a repeated count is refused: battery 9)
    curve = pruning_curve(model, evaluations, order, counts=counts, method=method, means=means)
    assert curve["pruned"].tolist() == counts
    for name, heads in cases.items():
        expected = measure(model, evaluations, heads, method=method, means=means)
        assert table.loc[name].to_dict() == pytest.approx(expected, rel=1e-12, abs=1e-12)
    for row, k in zip(curve.to_dict("records"), counts, strict=True):
        expected = measure(model, evaluations, order[:k], method=method, means=means)
        assert {name: row[name] for name in expected} == pytest.approx(expected, rel=1e-12, abs=1e-12)


def test_table_and_curve_enter_the_first_changed_block_at_its_head_outputs():
    # A run that changes block k first has the input the earlier run had there, so the same q, k, v
    # and attention: it enters block k at that run's head outputs, and only later blocks attend.
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    attended = {0: 0, 1: 0}

    def count(q, hook):  # the attention computations of each block
        attended[int(hook.name.split(".")[1])] += 1

    watch = [("blocks.0.attn.hook_q", count), ("blocks.1.attn.hook_q", count)]
    cases, means = {"none": [], "L1H0": [(1, 0)], "L0H1": [(0, 1)]}, mean_head_outputs(model, tokens)
    with model.hooks(watch):
        ablation_table(model, loss_evaluation(tokens, targets), cases, method="mean", means=means)
    assert attended == {0: 1, 1: 2}  # block 0: the intact run; block 1: it and the L0H1 case
    attended.update({0: 0, 1: 0})
    with model.hooks(watch):
        pruning_curve(model, loss_evaluation(tokens, targets), [(1, 0), (1, 1), (0, 0)])
    assert attended == {0: 1, 1: 2}  # block 0: intact; block 1: intact and k = 3 (block 0 changed)


def test_table_and_curve_run_the_blocks_below_the_changed_ones_once():
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    runs = {0: 0, 1: 0}

    def count(x, hook):  # a hook that only records: the forward passes entering each block
        runs[int(hook.name.split(".")[1])] += 1

    cases = {"none": [], "L1H0": [(1, 0)], "L1H1": [(1, 1)]}
    with model.hooks([("blocks.0.hook_resid_pre", count), ("blocks.1.hook_resid_pre", count)]):
        ablation_table(model, loss_evaluation(tokens, targets), cases)
    assert runs == {0: 1, 1: 3}  # block 0: the intact run only; block 1: it and the two cases
    runs.update({0: 0, 1: 0})
    with model.hooks([("blocks.0.hook_resid_pre", count), ("blocks.1.hook_resid_pre", count)]):
        pruning_curve(model, loss_evaluation(tokens, targets), [(1, 0), (1, 1), (0, 0)])
    assert runs == {0: 2, 1: 4}  # block 0: intact, then k = 3; block 1: intact, k = 1, 2, 3


def test_mixture_batches_hold_both_tasks():
    task = MixtureTask()
    batch = task.sample(8, torch.Generator().manual_seed(0))
    assert batch.num_induction == 4 and batch.tokens.shape == (8, task.seq_len)
    assert (batch.tokens[:4, 0] == BOS).all() and (batch.tokens[4:, 0] == BOS_ID).all()
    assert batch.real[:4].all() and not batch.real[4:].all()
    assert (batch.targets[4:][~batch.real[4:]] == -100).all()
    assert (batch.targets[:4, :-1] == batch.tokens[:4, 1:]).all()
    sentences = task.agreement_eval(50)
    assert sentences.tokens.shape == (50, task.seq_len)
    with pytest.raises(ValueError, match="induction_share"):
        MixtureTask(induction_share=1.0)


# -- bad input ---------------------------------------------------------------------------
def test_bad_inputs_are_named():
    model = tiny_model()
    tokens, targets = tokens_and_targets()
    with pytest.raises(ValueError, match=r"head \(2, 0\) is out of range: expected layer in 0..1"):
        ablated_logits(model, tokens, [(2, 0)])
    with pytest.raises(ValueError, match=r"head in 0..2"):
        gates_without(model, [(0, 3)])
    with pytest.raises(TypeError, match="list of \\(layer, head\\) pairs"):
        ablated_logits(model, tokens, "L1H2")
    with pytest.raises(TypeError, match="pair of ints"):
        ablated_logits(model, tokens, [1, 2])
    with pytest.raises(ValueError, match="non-empty"):
        mean_head_outputs(model, torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="reference batch is empty"):
        mean_head_outputs(model, tokens, keep=torch.zeros_like(tokens, dtype=torch.bool))
    with pytest.raises(TypeError, match="means=mean_head_outputs"):
        ablated_logits(model, tokens, [(0, 0)], method="mean")
    with pytest.raises(ValueError, match="method must be one of"):
        ablated_logits(model, tokens, [(0, 0)], method="average")
    with pytest.raises(ValueError, match="NaN"):
        model(tokens, head_mask=torch.tensor([[1.0, float("nan"), 1.0], [1.0, 1.0, 1.0]]))
    with pytest.raises(ValueError, match="NaN"):
        importance_order(torch.tensor([[0.1, float("nan")]]))
    with pytest.raises(TypeError, match="edit_heads must be a function"):
        model(tokens, edit_heads="zero")
    with pytest.raises(ValueError, match="lists a head twice"):
        pruning_curve(model, loss_evaluation(tokens, targets), [(0, 0), (0, 0)])
    with pytest.raises(TypeError, match="seeds must be a list of ints"):
        random_orders(model, 3)


# -- exercise slips that are not registered Mistake objects --------------------------------
def test_one_gate_for_the_whole_batch_is_named_as_the_absolute_of_the_average():
    feedback = lesson06.GATE_IMPORTANCE.check_trusted(lesson06._importance_shared_gate)
    assert feedback.mistake == "absolute_of_average"


@pytest.mark.parametrize("heads", [[(1, 2)], [(0, 1)], [(0, 0), (1, 1)], []])
@pytest.mark.parametrize("method", ["zero", "mean"])
def test_ablated_logits_from_the_intact_streams_match_the_full_run(heads, method):
    """Entered at the lowest layer the heads touch from block_inputs' streams: the full run's
    logits; a stream the run does not read (below that layer) changes nothing, one it reads does.
    The first stream, the embedding, is checked against the tokens' own: a changed one is refused
    (the streams of other tokens gave wrong logits silently)."""
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    means = mean_head_outputs(model, tokens) if method == "mean" else None
    streams = block_inputs(model, tokens)

    def run(streams=None):
        return ablated_logits(model, tokens, heads, method=method, means=means, streams=streams)

    full = run()
    torch.testing.assert_close(run(streams), full)
    first = min((layer for layer, _ in heads), default=2)
    shift = torch.linspace(-1.0, 1.0, 12, dtype=torch.float64)  # not constant: LayerNorm would remove that
    torch.testing.assert_close(run([x + shift if 0 < i < first else x for i, x in enumerate(streams)]), full)
    with pytest.raises(ValueError, match=r"^streams must be block_inputs\(model, tokens\) of these tokens: "
                                         r"streams\[0\]"):
        run([x + shift if i == 0 else x for i, x in enumerate(streams)])
    if first > 0:
        assert not torch.allclose(run([x + shift if i == first else x for i, x in enumerate(streams)]), full)


@pytest.mark.parametrize("streams, error, message", [
    (torch.zeros(3, 5, 9, 12), TypeError, "streams must be a list or tuple of tensors"),
    ([torch.zeros(5, 9, 12)] * 2, ValueError, r"3 tensors \(5, 9, 12\).*got 2"),
    ([torch.zeros(5, 8, 12)] * 3, ValueError, r"streams must be block_inputs.*\(5, 8, 12\)"),
    ([torch.zeros(5, 9, 12)] * 2 + ["x"], TypeError, r"streams\[2\] must be a torch.Tensor"),
])
def test_ablated_logits_refuses_streams_of_another_batch(streams, error, message):
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    with pytest.raises(error, match=message):
        ablated_logits(model, tokens, [(1, 0)], streams=streams)
