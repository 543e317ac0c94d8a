"""course_utils.interp.patching: position-restricted ablation, activation patching, direct logit
attribution, per-sequence gate gradients, pruning counts over many orders, the subject flip."""

from __future__ import annotations

import pytest
import torch

from course_utils.interp.ablation import (
    Evaluation,
    ablated_logits,
    all_heads,
    gates_without,
    head_importance,
    head_outputs,
    importance_order,
    loss_evaluation,
    mean_head_outputs,
    measure,
    pruning_curve,
)
from course_utils.interp.patching import (
    EvaluationAt,
    direct_logit_attribution,
    flip_subject_number,
    layer_normalised_order,
    losses_along_orders,
    measure_zeroed_sets,
    patched_logits,
    patching_table,
    position_ablated_logits,
    prunable_counts,
    resampled_logits,
    resampled_one_at_a_time,
    resampled_outputs,
    resampled_rows,
    sequence_gate_gradients,
    trimmed_by_length,
)
from course_utils.model.checkpoint import load_checkpoint
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import AGREEMENT_VOCAB, AgreementTask, agreement_margins, detokenize


def tiny_model(mlp: bool = True, seed: int = 0, vocab: int = 13, max_len: int = 10) -> TinyTransformer:
    torch.manual_seed(seed)
    config = ModelConfig(vocab_size=vocab, max_len=max_len, d_model=12, num_heads=3, num_layers=2, mlp=mlp)
    return TinyTransformer(config).double().eval()


def tokens_and_targets(batch: int = 5, length: int = 9, seed: int = 1):
    tokens = torch.randint(0, 13, (batch, length), generator=torch.Generator().manual_seed(seed))
    targets = torch.roll(tokens, -1, dims=1)
    targets[:, -1] = -100
    return tokens, targets


def forward_replacing(model: TinyTransformer, tokens: torch.Tensor, replace) -> torch.Tensor:
    """The forward pass written out; ``replace(layer, heads)`` edits the head outputs."""
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(tokens.shape[1]))
    for layer, block in enumerate(model.blocks):
        h = block.ln_attn(x)
        q, k, v = block.attn.project_qkv(h, h, h)
        heads = replace(layer, torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        x = x + block.attn.out_proj(block.attn.merge_heads(heads))
        if block.mlp is not None:
            x = x + block.mlp(block.ln_mlp(x))
    return model.unembed(model.ln_final(x))


# ---------------------------------------------------------------- position-restricted ablation
@pytest.mark.parametrize("method", ["zero", "mean"])
def test_ablating_at_every_position_is_plain_ablation_and_at_none_changes_nothing(method):
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    means = mean_head_outputs(model, tokens_and_targets(seed=5)[0]) if method == "mean" else None
    heads = [(0, 1), (1, 2)]
    everywhere = torch.ones(tokens.shape[1], dtype=torch.bool)
    got = position_ablated_logits(model, tokens, heads, everywhere, method=method, means=means)
    torch.testing.assert_close(got, ablated_logits(model, tokens, heads, method=method, means=means))
    with torch.no_grad():
        intact, _ = model(tokens)
    torch.testing.assert_close(position_ablated_logits(model, tokens, heads, ~everywhere, method=method,
                                                       means=means), intact)


def test_ablating_late_positions_leaves_earlier_logits_alone_and_matches_a_hand_edit():
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    means = mean_head_outputs(model, tokens_and_targets(seed=5)[0], per_position=True)  # (L, h, T, dk)
    where = torch.arange(tokens.shape[1]) >= 5
    got = position_ablated_logits(model, tokens, [(0, 2)], where, method="mean", means=means)

    def replace(layer, heads):
        if layer == 0:
            heads = heads.clone()
            heads[:, 2, 5:] = means[0, 2, 5:]
        return heads

    with torch.no_grad():
        intact, _ = model(tokens)
        expected = forward_replacing(model, tokens, replace)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got[:, :5], intact[:, :5])  # causal: earlier positions never see it
    assert not torch.allclose(got[:, 5:], intact[:, 5:])


def test_a_per_sequence_mask_ablates_only_where_it_says():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=3)
    where = torch.zeros(tokens.shape, dtype=torch.bool)
    where[1] = True  # sequence 1 only, every position
    got = position_ablated_logits(model, tokens, [(1, 0)], where)
    with torch.no_grad():
        intact, _ = model(tokens)
    torch.testing.assert_close(got[[0, 2]], intact[[0, 2]])
    torch.testing.assert_close(got[1:2], ablated_logits(model, tokens[1:2], [(1, 0)]))


def test_position_ablation_names_bad_inputs():
    model = tiny_model()
    tokens, _ = tokens_and_targets()
    with pytest.raises(TypeError, match="where must be a bool tensor"):
        position_ablated_logits(model, tokens, [(0, 0)], torch.ones(4, dtype=torch.bool))
    with pytest.raises(TypeError, match="where must be a bool tensor"):
        position_ablated_logits(model, tokens, [(0, 0)], torch.ones(tokens.shape[1]))
    with pytest.raises(TypeError, match="means="):
        position_ablated_logits(model, tokens, [(0, 0)], torch.ones(tokens.shape[1], dtype=torch.bool),
                                method="mean")
    with pytest.raises(ValueError, match="out of range"):
        position_ablated_logits(model, tokens, [(2, 0)], torch.ones(tokens.shape[1], dtype=torch.bool))


# ---------------------------------------------------------------- activation patching
def test_patching_a_head_from_another_run_matches_a_hand_edit():
    model = tiny_model()
    tokens, _ = tokens_and_targets(seed=1)
    source_tokens, _ = tokens_and_targets(seed=2)
    source = head_outputs(model, source_tokens)  # (L, B, h, T, dk)

    def replace(layer, heads):
        if layer == 0:
            heads = heads.clone()
            heads[:, 1] = source[0, :, 1]
        return heads

    with torch.no_grad():
        expected = forward_replacing(model, tokens, replace)
    torch.testing.assert_close(patched_logits(model, tokens, source, [(0, 1)]), expected)
    # patching from a run on the same tokens changes nothing
    with torch.no_grad():
        intact, _ = model(tokens)
    own = head_outputs(model, tokens)
    torch.testing.assert_close(patched_logits(model, tokens, own, all_heads(model)), intact)


def test_patching_only_some_positions_keeps_the_rest():
    model = tiny_model()
    tokens, _ = tokens_and_targets(seed=1)
    source = head_outputs(model, tokens_and_targets(seed=2)[0])
    where = torch.arange(tokens.shape[1]) >= 6
    got = patched_logits(model, tokens, source, [(1, 1)], where=where)
    with torch.no_grad():
        intact, _ = model(tokens)
    torch.testing.assert_close(got[:, :6], intact[:, :6])
    assert not torch.allclose(got[:, 6:], intact[:, 6:])


# ---------------------------------------------------------------- resample ablation
def test_resampling_takes_each_head_output_from_a_reference_of_the_same_length():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=4, length=7, seed=1)
    lengths = torch.tensor([7, 5, 7, 5])
    reference, _ = tokens_and_targets(batch=6, length=9, seed=3)  # longer than tokens: cut to 7
    reference_lengths = torch.tensor([5, 7, 3, 5, 7, 3])
    got = resampled_logits(model, tokens, lengths, reference, reference_lengths, [(1, 2)],
                           generator=torch.Generator().manual_seed(0))
    # the same draws by hand: one randint per sequence among the references of its length
    generator, rows = torch.Generator().manual_seed(0), []
    for n in lengths.tolist():
        candidates = (reference_lengths == n).nonzero().squeeze(1)
        rows.append(int(candidates[torch.randint(len(candidates), (1,), generator=generator)]))
    assert all(int(reference_lengths[r]) == n for r, n in zip(rows, lengths.tolist(), strict=True))
    source = head_outputs(model, reference)[:, rows, :, :7]

    def replace(layer, heads):
        if layer == 1:
            heads = heads.clone()
            heads[:, 2] = source[1, :, 2]
        return heads

    with torch.no_grad():
        expected = forward_replacing(model, tokens, replace)
    torch.testing.assert_close(got, expected)
    # the same seed gives the same draws; a reference shorter than tokens is padded past its end
    again = resampled_logits(model, tokens, lengths, reference, reference_lengths, [(1, 2)],
                             generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(got, again)
    short = resampled_logits(model, tokens, lengths, reference[:, :7], reference_lengths, [(1, 2)],
                             generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(short, got)
    wider = torch.cat([tokens, tokens[:, :2]], dim=1)  # (4, 9): reference of 7 is padded to 9
    padded = resampled_logits(model, wider, lengths, reference[:, :7], reference_lengths, [(1, 2)],
                              generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(padded[:, :7], got)


def test_many_heads_resampled_one_at_a_time_equal_one_call_each():
    """Every (draw, head) pair of the batched call equals resampled_logits for that head and
    draw: full logits, and the last layer at one position per sequence; heads in every layer."""
    model, _ = load_checkpoint("mixture")
    tokens = torch.randint(3, model.config.vocab_size, (5, 9), generator=torch.Generator().manual_seed(5))
    lengths = torch.tensor([9, 6, 9, 7, 6])
    reference = torch.randint(3, model.config.vocab_size, (8, 11), generator=torch.Generator().manual_seed(6))
    reference_lengths = torch.tensor([6, 9, 7, 9, 6, 7, 9, 6])
    outputs = head_outputs(model, reference)
    heads = [(2, 5), (0, 1), (1, 7), (0, 6), (2, 0)]  # out of layer order: the result keeps this order
    seeds = [0, 4, 9]
    rows = torch.stack([resampled_rows(lengths, reference_lengths, generator=torch.Generator().manual_seed(s))
                        for s in seeds])
    positions = torch.tensor([8, 2, 5, 6, 0])
    full = resampled_one_at_a_time(model, tokens, outputs, rows, heads, per_run=4)
    at = resampled_one_at_a_time(model, tokens, outputs, rows, heads, positions=positions, per_run=2)
    V = model.config.vocab_size
    assert full.shape == (3, 5, 5, 9, V) and at.shape == (3, 5, 5, V)
    for s, seed in enumerate(seeds):
        for i, head in enumerate(heads):
            draw = torch.Generator().manual_seed(seed)
            expected = resampled_logits(model, tokens, lengths, reference, reference_lengths, [head],
                                        generator=draw, reference_outputs=outputs)
            torch.testing.assert_close(full[s, i], expected, atol=1e-4, rtol=1e-4)
            torch.testing.assert_close(at[s, i], expected[torch.arange(5), positions], atol=1e-4, rtol=1e-4)
    assert not torch.allclose(full[0, 0], full[0, 1]), "different heads give different runs"


def test_resampled_one_at_a_time_names_bad_inputs():
    model, _ = load_checkpoint("mixture")
    tokens = torch.randint(3, model.config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(5))
    outputs = head_outputs(model, tokens)
    rows = torch.tensor([[0, 1]])
    with pytest.raises(ValueError, match="rows must be a long tensor"):
        resampled_one_at_a_time(model, tokens, outputs, torch.tensor([0, 1]), [(0, 0)])
    with pytest.raises(ValueError, match=r"rows must lie in \[0, 2\)"):
        resampled_one_at_a_time(model, tokens, outputs, torch.tensor([[0, 2]]), [(0, 0)])
    with pytest.raises(ValueError, match="reference_outputs must be head_outputs"):
        resampled_one_at_a_time(model, tokens, outputs[:, :, :4], rows, [(0, 0)])
    with pytest.raises(TypeError, match="positions must be a long tensor"):
        resampled_one_at_a_time(model, tokens, outputs, rows, [(0, 0)], positions=torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="at least one"):
        resampled_one_at_a_time(model, tokens, outputs, rows, [])


def test_resampling_names_bad_inputs():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=2, length=5, seed=1)
    reference, _ = tokens_and_targets(batch=3, length=5, seed=2)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="no reference sequence has length 4"):
        resampled_logits(model, tokens, torch.tensor([5, 4]), reference, torch.tensor([5, 5, 3]), [(0, 0)],
                         generator=generator)
    with pytest.raises(ValueError, match="lengths must be"):
        resampled_logits(model, tokens, torch.tensor([5]), reference, torch.tensor([5, 5, 3]), [(0, 0)],
                         generator=generator)


def test_resampled_outputs_can_reuse_the_reference_run():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=4, length=7, seed=1)
    lengths = torch.tensor([7, 5, 7, 5])
    reference, _ = tokens_and_targets(batch=6, length=9, seed=3)
    reference_lengths = torch.tensor([5, 7, 3, 5, 7, 3])
    outputs = head_outputs(model, reference)
    def draw():
        return torch.Generator().manual_seed(0)

    fresh = resampled_outputs(model, lengths, reference, reference_lengths, 7, generator=draw())
    reused = resampled_outputs(model, lengths, reference, reference_lengths, 7, generator=draw(),
                               reference_outputs=outputs)
    assert fresh.shape == (2, 4, 3, 7, 4)
    torch.testing.assert_close(fresh, reused)
    expected = resampled_logits(model, tokens, lengths, reference, reference_lengths, [(0, 1), (1, 2)],
                                generator=torch.Generator().manual_seed(0))
    got = resampled_logits(model, tokens, lengths, reference, reference_lengths, [(0, 1), (1, 2)],
                           generator=torch.Generator().manual_seed(0), reference_outputs=outputs)
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(got, patched_logits(model, tokens, fresh, [(0, 1), (1, 2)]))
    with pytest.raises(ValueError, match="reference_outputs must be head_outputs"):
        resampled_outputs(model, lengths, reference, reference_lengths, 7, generator=draw(),
                          reference_outputs=outputs[:, :5])
    with pytest.raises(ValueError, match="seq_len"):
        resampled_outputs(model, lengths, reference, reference_lengths, 0, generator=draw())


def test_the_patching_table_at_some_positions_enters_each_run_at_its_head():
    # patching_table starts each patched run at the patched head's block, from the intact run
    model = tiny_model()
    tokens, _ = tokens_and_targets(seed=1)
    source_tokens, _ = tokens_and_targets(seed=2)
    where = torch.arange(tokens.shape[1]) >= 4

    def metric(logits):
        return float(logits[:, -1, 3].mean())

    runs = {0: 0, 1: 0}

    def count(x, hook):  # a hook that only records: the passes entering each block
        runs[int(hook.name.split(".")[1])] += 1

    with model.hooks([("blocks.0.hook_resid_pre", count), ("blocks.1.hook_resid_pre", count)]):
        table = patching_table(model, tokens, source_tokens, metric, where=where)
    assert runs == {0: 5, 1: 8}  # the source run, the intact run, then block 0 only for layer-0 heads
    source = head_outputs(model, source_tokens)
    for layer, head in all_heads(model):  # the same run in float32, only entered later: its last
        # bits may differ (2e-8 relative measured); one head's value is 1e-3 from the next head's
        patched = patched_logits(model, tokens, source, [(layer, head)], where=where)
        assert float(table[layer, head]) == pytest.approx(metric(patched), rel=1e-6, abs=0)


def test_the_patching_table_patches_one_head_at_a_time():
    model = tiny_model()
    tokens, _ = tokens_and_targets(seed=1)
    source_tokens, _ = tokens_and_targets(seed=2)

    def metric(logits):
        return float(logits[:, -1, 3].mean())

    table = patching_table(model, tokens, source_tokens, metric)
    assert table.shape == (2, 3)
    source = head_outputs(model, source_tokens)
    for layer, head in all_heads(model):
        patched = patched_logits(model, tokens, source, [(layer, head)])
        assert table[layer, head] == pytest.approx(metric(patched))
    with torch.no_grad():
        intact = metric(model(tokens)[0])
    assert torch.allclose(patching_table(model, tokens, tokens, metric), torch.full((2, 3), intact))
    with pytest.raises(ValueError, match="shaped like tokens"):
        patching_table(model, tokens, source_tokens[:, :5], metric)
    with pytest.raises(ValueError, match="source_outputs must be head_outputs"):
        patched_logits(model, tokens, source[:, :2], [(0, 0)])


# ---------------------------------------------------------------- direct logit attribution
@pytest.mark.parametrize("mlp", [False, True])
def test_the_direct_terms_add_up_to_the_logit_difference(mlp):
    model = tiny_model(mlp)
    tokens, _ = tokens_and_targets()
    positions = torch.tensor([8, 3, 5, 0, 7])
    directions = torch.zeros(5, 13, dtype=torch.float64)
    directions[:, 2], directions[:, 7] = 1.0, -1.0
    terms = direct_logit_attribution(model, tokens, positions, directions)
    with torch.no_grad():
        logits, _ = model(tokens)
    expected = (logits[torch.arange(5), positions, 2] - logits[torch.arange(5), positions, 7]).numpy()
    assert terms["total"].to_numpy() == pytest.approx(expected, abs=1e-10)
    assert terms.drop(columns="total").sum(axis=1).to_numpy() == pytest.approx(expected, abs=1e-10)
    expected_columns = {"embeddings", "final bias", "total"} | {f"L{i}H{h}" for i, h in all_heads(model)}
    expected_columns |= {f"L{i} attn bias" for i in range(2)}
    expected_columns |= {f"L{i} mlp" for i in range(2)} if mlp else set()
    assert set(terms.columns) == expected_columns


def test_a_head_term_is_its_output_through_its_slice_of_w_o_read_through_the_frozen_layernorm():
    model = tiny_model(mlp=False)
    tokens, _ = tokens_and_targets(batch=2)
    positions = torch.tensor([4, 6])
    direction = torch.zeros(13, dtype=torch.float64)
    direction[5] = 1.0
    terms = direct_logit_attribution(model, tokens, positions, direction)
    heads = head_outputs(model, tokens)  # (L, B, h, T, dk)
    with torch.no_grad():
        x = forward_residual(model, tokens)[torch.arange(2), positions]  # (B, d)
        scale = torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + model.ln_final.eps)
        W_O = model.blocks[1].attn.out_proj.weight[:, 4:8]  # head 1 of layer 1, dk = 4
        c = heads[1, torch.arange(2), 1, positions] @ W_O.T
        normed = ((c - c.mean(-1, keepdim=True)) / scale) * model.ln_final.weight
        expected = normed @ model.unembed.weight[5]
    assert terms["L1H1"].to_numpy() == pytest.approx(expected.numpy(), abs=1e-10)
    gates = gates_without(model, [(1, 1)])
    zeroed = direct_logit_attribution(model, tokens, positions, direction, head_mask=gates)
    assert zeroed["L1H1"].abs().max() == 0.0


def forward_residual(model, tokens):
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(tokens.shape[1]))
    for block in model.blocks:
        h = block.ln_attn(x)
        q, k, v = block.attn.project_qkv(h, h, h)
        x = x + block.attn.out_proj(block.attn.merge_heads(
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)))
        if block.mlp is not None:
            x = x + block.mlp(block.ln_mlp(x))
    return x


def test_attribution_removes_its_hooks_and_names_bad_inputs():
    model = tiny_model()
    tokens, _ = tokens_and_targets(batch=2)
    direction = torch.zeros(13, dtype=torch.float64)
    direct_logit_attribution(model, tokens, torch.tensor([1, 2]), direction)
    modules = [model.token_embedding, model.position_embedding, model.ln_final,
               *(b.mlp for b in model.blocks)]
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in modules)
    with pytest.raises(TypeError, match="positions must be a long tensor"):
        direct_logit_attribution(model, tokens, torch.tensor([1]), direction)
    with pytest.raises(ValueError, match="positions must lie in"):
        direct_logit_attribution(model, tokens, torch.tensor([1, 9]), direction)
    with pytest.raises(TypeError, match="directions must be"):
        direct_logit_attribution(model, tokens, torch.tensor([1, 2]), torch.zeros(12))


# ---------------------------------------------------------------- importance, per sequence
def test_per_sequence_gate_gradients_average_to_the_importance():
    model = tiny_model()
    tokens, targets = tokens_and_targets(batch=6)
    gradients = sequence_gate_gradients(model, tokens, targets)
    assert gradients.shape == (6, 2, 3)
    torch.testing.assert_close(gradients.abs().mean(0), head_importance(model, tokens, targets))
    one = sequence_gate_gradients(model, tokens[2:3], targets[2:3])
    torch.testing.assert_close(one[0], gradients[2])  # each sequence's own gradient
    assert all(p.grad is None and p.requires_grad for p in model.parameters())


def test_the_layer_normalised_order_divides_each_layer_by_its_norm():
    importance = torch.tensor([[3.0, 4.0, 0.0], [0.1, 0.2, 0.2]])  # norms 5 and 0.3
    normalised = torch.tensor([[0.6, 0.8, 0.0], [1 / 3, 2 / 3, 2 / 3]])
    assert layer_normalised_order(importance) == importance_order(normalised)
    assert layer_normalised_order(importance) != importance_order(importance)
    with pytest.raises(ValueError, match="nonzero"):
        layer_normalised_order(torch.tensor([[0.0, 0.0], [1.0, 2.0]]))


# ---------------------------------------------------------------- pruning counts
def test_prunable_counts_agree_with_full_pruning_curves_and_measure_each_set_once():
    model = tiny_model()
    tokens, targets = tokens_and_targets(batch=8)
    def top(logits):
        return {"top": float((logits[:, :-1].argmax(-1) == targets[:, :-1]).float().mean())}

    evaluation = Evaluation(tokens, top)
    intact = measure(model, evaluation)["top"]

    def within(numbers):
        return intact - numbers["top"] <= 0.1

    heads = all_heads(model)
    orders = [heads, heads[::-1], [heads[i] for i in (3, 1, 5, 0, 2, 4)], heads[:0]]
    expected = []
    for order in orders:
        curve = pruning_curve(model, evaluation, order)
        ok = [within({"top": v}) for v in curve["top"]]
        expected.append(ok.index(False) - 1 if False in ok else len(order))
    calls = []

    def counting_map(fn, parts):
        calls.append(len(parts))
        return list(map(fn, parts))

    counts, measured = prunable_counts(model, evaluation, orders, within, map_fn=counting_map, chunks=2)
    assert counts == expected
    assert len(measured) == len({frozenset(o[:k]) for o, c in zip(orders, counts, strict=True)
                                 for k in range(1, min(c + 1, len(o)) + 1)})
    assert all(n <= 2 for n in calls)
    assert prunable_counts(model, evaluation, orders, within)[0] == expected
    with pytest.raises(ValueError, match="chunks"):
        prunable_counts(model, evaluation, orders, within, chunks=0)
    # known: measurements of an earlier call are reused, not repeated, and give the same counts
    calls.clear()
    again, reused = prunable_counts(model, evaluation, orders, within, map_fn=counting_map, known=measured)
    assert again == expected and reused == measured and set(calls) <= {0}, "nothing measured again"
    first_two, partial = prunable_counts(model, evaluation, orders[:2], within)
    rest, _ = prunable_counts(model, evaluation, orders, within, known=partial)
    assert first_two == expected[:2] and rest == expected
    with pytest.raises(TypeError, match="known"):
        prunable_counts(model, evaluation, orders, within, known={(0, 1): {}})


def test_losses_along_orders_match_measuring_each_prefix():
    model = tiny_model()
    tokens, targets = tokens_and_targets(batch=6)
    targets[0, :4] = -100  # uneven counts: the average is over tokens, not sequences
    heads = all_heads(model)
    orders = [heads, heads[::-1], [heads[i] for i in (3, 1, 5, 0, 2, 4)],
              [heads[i] for i in (1, 0, 2, 5, 4, 3)]]  # the first order's first 2 and 3 heads, reordered
    got = losses_along_orders(model, tokens, targets, orders, 4)  # each set from its parent's stream
    assert got.shape == (4, 5)
    for i, order in enumerate(orders):
        for k in range(5):
            expected = measure(model, loss_evaluation(tokens, targets), order[:k])["loss"]
            assert abs(float(got[i, k]) - expected) < 1e-9
    torch.testing.assert_close(losses_along_orders(model, tokens, targets, orders, 4, per_run=2), got)
    with pytest.raises(ValueError, match="most must be"):
        losses_along_orders(model, tokens, targets, orders, 7)
    with pytest.raises(ValueError, match="per_run"):
        losses_along_orders(model, tokens, targets, orders, 2, per_run=0)


# ---------------------------------------------------------------- agreement helpers
def test_the_twin_flips_the_subject_and_the_verb_that_agrees_with_it():
    batch = AgreementTask().eval_batch(300)
    twin = flip_subject_number(batch)
    rows = torch.arange(len(batch))
    changed = (twin != batch.tokens).sum(1)
    relative = torch.tensor([t == "subject_relative" for t in batch.template])
    assert bool((changed[~relative] == 1).all()) and bool((changed[relative] == 2).all())
    assert bool((twin[rows, batch.subject_pos] != batch.tokens[rows, batch.subject_pos]).all())
    undone = flip_subject_number(type(batch)(**{**batch.__dict__, "tokens": twin}))
    assert torch.equal(undone, batch.tokens), "flipping twice gives the sentences back"
    i = int(relative.nonzero()[0])
    words, flipped = detokenize(batch.tokens[i]), detokenize(twin[i])
    s = int(batch.subject_pos[i])
    assert words[s + 1] == flipped[s + 1] == "that" and words[s + 2] != flipped[s + 2]
    with pytest.raises(TypeError, match="AgreementBatch"):
        flip_subject_number(batch.tokens)


def test_trimmed_groups_hold_every_sentence_once_and_score_it_the_same():
    model = tiny_model(vocab=len(AGREEMENT_VOCAB), max_len=16, seed=3)
    batch = AgreementTask().eval_batch(120)
    with torch.no_grad():
        full = agreement_margins(model(batch.tokens)[0], batch)
    groups = trimmed_by_length(batch, 3)
    assert sum(len(g) for g in groups) == len(batch)
    assert sum(g.tokens.numel() for g in groups) < batch.tokens.numel()
    order = torch.argsort(batch.lengths, stable=True)
    with torch.no_grad():
        trimmed = torch.cat([agreement_margins(model(g.tokens)[0], g) for g in groups])
    torch.testing.assert_close(trimmed, full[order])
    with pytest.raises(ValueError, match="groups"):
        trimmed_by_length(batch, 0)


def test_zeroed_sets_in_one_pass_equal_measure_one_set_at_a_time():
    model, _ = load_checkpoint("mixture")
    tokens = torch.randint(3, model.config.vocab_size, (5, 12), generator=torch.Generator().manual_seed(3))
    evaluations = [Evaluation(tokens, lambda logits: {"mean logit": float(logits.mean())}),
                   Evaluation(tokens[:2], lambda logits: {"top": float(logits[:, -1].max())})]
    sets = [[], [(0, 1)], [(0, 1), (1, 3)], [(1, 0), (0, 2), (1, 2)], [(2, 5)], [(2, 0), (1, 7)], [(1, 4)],
            [(2, 3), (2, 6)], [(0, 7), (2, 1)]]  # passes start at layer 0, 1, 2, or none (the empty set)
    together = measure_zeroed_sets(model, evaluations, sets, per_run=2)  # up to 2 sets a pass
    for heads, numbers in zip(sets, together, strict=True):
        alone = measure(model, evaluations, heads)
        assert numbers.keys() == alone.keys()
        for name in alone:
            assert abs(numbers[name] - alone[name]) < 1e-5, (heads, name)
    with pytest.raises(ValueError, match="per_run must be a positive int"):
        measure_zeroed_sets(model, evaluations, sets, per_run=0)


def test_an_evaluation_at_one_position_per_sequence_scores_as_the_full_pass():
    """EvaluationAt: the batched passes run the last layer at the scored positions only; the
    numbers equal the full forward pass's, and every other position reads NaN."""
    model, _ = load_checkpoint("mixture")
    tokens = torch.randint(3, model.config.vocab_size, (6, 12), generator=torch.Generator().manual_seed(4))
    positions = torch.tensor([0, 3, 11, 7, 7, 2])
    rows = torch.arange(6)
    seen = []

    def at_positions(logits):
        seen.append(logits)
        at = logits[rows, positions]
        return {"logit sum": float(at.sum()), "top": int(at.argmax(-1).sum())}

    full = Evaluation(tokens, at_positions)
    scored = EvaluationAt(tokens, at_positions, positions)
    # sets that start at layer 0, 1, 2 and none
    sets = [[], [(0, 1)], [(0, 1), (1, 3)], [(2, 5)], [(2, 0), (1, 7)], [(1, 4)]]
    seen.clear()
    together = measure_zeroed_sets(model, scored, sets, per_run=2)
    assert all(torch.isnan(logits[~torch.nn.functional.one_hot(positions, 12).bool().repeat(
        len(logits) // 6, 1)]).all() for logits in seen), "positions not scored are NaN"
    for heads, numbers in zip(sets, together, strict=True):
        alone = measure(model, full, heads)
        assert numbers["top"] == alone["top"] and abs(numbers["logit sum"] - alone["logit sum"]) < 1e-4, heads
    assert measure(model, scored, [(1, 2)]) == measure(model, full, [(1, 2)]), "measure ignores positions"
    for bad, match in ((positions.float(), "long tensor"), (positions[:3], r"\(6,\)"),
                       (torch.tensor([0, 1, 2, 3, 4, 12]), "0..11"),
                       (torch.tensor([-1, 1, 2, 3, 4, 5]), "0..11")):
        with pytest.raises(ValueError, match=match):
            EvaluationAt(tokens, at_positions, bad)


def test_incremental_prunable_counts_match_the_plain_count():
    """incremental=True (each set from its parent's stream) gives the same counts and numbers
    as the plain count, with or without positions, and refuses what it cannot do."""
    model, _ = load_checkpoint("mixture")
    batch = AgreementTask().eval_batch(90)
    groups = trimmed_by_length(batch, 2)

    def right(g, i):
        return lambda logits: {f"right {i}": int((agreement_margins(logits, g) > 0).sum()),
                               f"margin {i}": float(agreement_margins(logits, g).sum())}

    plain = [Evaluation(g.tokens, right(g, i)) for i, g in enumerate(groups)]
    at_verb = [EvaluationAt(g.tokens, right(g, i), g.predict_pos) for i, g in enumerate(groups)]
    intact = sum(v for k, v in measure(model, plain).items() if k.startswith("right"))

    def within(numbers):
        return intact - sum(v for k, v in numbers.items() if k.startswith("right")) <= 3

    orders = [importance_order(torch.rand(3, 8, generator=torch.Generator().manual_seed(s)))
              for s in range(12)]
    counts, measured = prunable_counts(model, plain, orders, within)
    assert len(set(counts)) > 2, "the orders should stop at different steps"
    for evaluations in (plain, at_verb):
        again, found = prunable_counts(model, evaluations, orders, within, incremental=True, per_run=5)
        assert again == counts and found.keys() == measured.keys()
        assert all(abs(found[s][k] - measured[s][k]) < 1e-3 for s in found for k in found[s])
    half, partial = prunable_counts(model, at_verb, orders[:6], within, incremental=True)
    assert prunable_counts(model, at_verb, orders, within, incremental=True, known=partial)[0] == counts
    with pytest.raises(ValueError, match="incremental=True .* method='zero'"):
        prunable_counts(model, plain, orders, within, incremental=True, method="mean",
                        means=torch.zeros(3, 8, 8))
    with pytest.raises(ValueError, match="chunks=1"):
        prunable_counts(model, plain, orders, within, incremental=True, chunks=2)
    with pytest.raises(TypeError, match="incremental must be True or False"):
        prunable_counts(model, plain, orders, within, incremental=1)


def test_block_inputs_are_read_at_the_hook_points():
    """The intact stream the batched zero ablation starts from is read through the model's hook
    points (issue 36): a hook that edits blocks.1.hook_resid_pre is seen, and without hooks the
    streams are each block's input and the final stream."""
    from course_utils.interp.ablation import block_inputs

    model = tiny_model()
    tokens, _ = tokens_and_targets()
    inputs = block_inputs(model, tokens)
    assert len(inputs) == model.config.num_layers + 1
    with torch.no_grad():
        x = model.token_embedding(tokens) + model.position_embedding(torch.arange(tokens.shape[1]))
        for i, block in enumerate(model.blocks):
            torch.testing.assert_close(inputs[i], x)
            x, _, _ = block(x)
    torch.testing.assert_close(inputs[-1], x)
    with model.hooks([("blocks.1.hook_resid_pre", lambda x, hook: x * 0)]):
        edited = block_inputs(model, tokens)
    assert float(edited[1].abs().max()) == 0.0, "the hook point's edit reaches the recorded stream"


def test_path_patching_changes_only_the_receivers_and_checks_its_heads():
    from course_utils.interp.ablation import head_outputs
    from course_utils.interp.patching import path_patched_logits

    model = tiny_model(mlp=True)
    tokens, _ = tokens_and_targets()
    other, _ = tokens_and_targets(seed=7)
    outputs, source = head_outputs(model, tokens), head_outputs(model, other)
    with torch.no_grad():
        intact = model(tokens)[0]
    torch.testing.assert_close(path_patched_logits(model, tokens, outputs, [(0, 1)], [(1, 0)]), intact)
    from course_utils.interp import patching as P
    original, final_runs = P.patched_logits, []

    def spy(model_, tokens_, source_, heads, **kw):  # the final run: which head outputs it is given
        final_runs.append((source_, heads))
        return original(model_, tokens_, source_, heads, **kw)

    P.patched_logits = spy
    try:
        changed = path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)])
    finally:
        P.patched_logits = original
    assert not torch.allclose(changed, intact), "the sender's change reaches the logits through the receiver"
    (given, heads), = final_runs
    assert heads == [(1, 0)], "only the receiver is replaced in the final run"
    assert not torch.allclose(given[1, :, 0], outputs[1, :, 0]), "the receiver read the changed stream"
    torch.testing.assert_close(given[1, :, 1:], outputs[1, :, 1:])  # the rest as in the run on tokens
    torch.testing.assert_close(given[0], outputs[0])  # the sender itself is not patched
    with pytest.raises(ValueError, match="later layer than every sender"):
        path_patched_logits(model, tokens, source, [(1, 0)], [(1, 2)])
    with pytest.raises(ValueError, match="at least one"):
        path_patched_logits(model, tokens, source, [], [(1, 0)])
    with pytest.raises(ValueError, match="source_outputs must be head_outputs"):
        path_patched_logits(model, tokens, source[:, :2], [(0, 1)], [(1, 0)])
