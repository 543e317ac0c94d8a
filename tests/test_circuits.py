"""Inside the model: traces of every head, direct logit attribution, OV copying, loss scores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.interp.circuits import (
    direct_logit_attribution,
    head_output_norms,
    in_context_mass,
    next_token_loss,
    ov_copying_score,
    trace_heads,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer


def _tiny(num_layers: int = 2, mlp: bool = False, seed: int = 0) -> TinyTransformer:
    torch.manual_seed(seed)
    model = TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4,
                                        num_layers=num_layers, mlp=mlp))
    with torch.no_grad():  # non-trivial norms and biases
        for block in model.blocks:
            block.ln_attn.weight.uniform_(0.5, 1.5)
            block.attn.out_proj.bias.normal_()
        model.ln_final.bias.normal_()
    return model.eval()


TOKENS = torch.tensor([[1, 2, 3, 4, 1, 2, 3, 4], [5, 6, 7, 5, 6, 7, 5, 6]])


@pytest.mark.parametrize("mlp", [False, True])
def test_trace_heads_matches_the_model(mlp):
    model = _tiny(mlp=mlp)
    trace = trace_heads(model, TOKENS)
    with torch.no_grad():
        logits, attention = model(TOKENS, return_attention=True)
    assert torch.allclose(trace.logits, logits, atol=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(trace.attention, attention, strict=True))
    # the heads' outputs plus the shared bias are what the attention sublayer adds to the stream
    if not mlp:
        for layer in range(2):
            added = trace.head_outputs[layer].sum(1) + model.blocks[layer].attn.out_proj.bias
            assert torch.allclose(trace.residual[layer + 1] - trace.residual[layer], added, atol=1e-5)
    norms = head_output_norms(trace)
    assert norms.shape == (2, 2, 4, 8)
    assert torch.allclose(norms[1, :, 2], trace.head_outputs[1][:, 2].norm(dim=-1))
    fast = trace_heads(model, TOKENS, keep_attention=False)
    assert fast.attention == () and torch.allclose(fast.logits, logits, atol=1e-5)


def test_zero_replacement_is_head_mask_and_mean_replacement_keeps_the_mean():
    model = _tiny()
    gates = torch.ones(2, 4)
    gates[0, 1] = gates[1, 3] = 0.0
    with torch.no_grad():
        masked, _ = model(TOKENS, head_mask=gates)
    zeroed = trace_heads(model, TOKENS, replace={(0, 1): 0.0, (1, 3): 0.0})
    assert torch.allclose(zeroed.logits, masked, atol=1e-5)
    trace = trace_heads(model, TOKENS)
    # replacing a head by its own output changes nothing
    same = trace_heads(model, TOKENS, replace={(1, 2): trace.head_outputs[1][:, 2]})
    assert torch.allclose(same.logits, trace.logits, atol=1e-6)
    mean = trace.head_outputs[1][:, 2].mean(0)  # (T, d)
    averaged = trace_heads(model, TOKENS, replace={(1, 2): mean})
    assert torch.allclose(averaged.head_outputs[1][:, 2], mean.expand(2, -1, -1))
    assert not torch.allclose(averaged.logits, trace.logits, atol=1e-3)
    with pytest.raises(ValueError, match="outside"):
        trace_heads(model, TOKENS, replace={(2, 0): 0.0})
    with pytest.raises(TypeError, match="pairs"):
        trace_heads(model, TOKENS, replace={0: 0.0})


def test_key_and_query_patching():
    model = _tiny()
    trace = trace_heads(model, TOKENS)
    # removing no head changes nothing
    assert torch.allclose(trace_heads(model, TOKENS, keys_without={1: []}).logits, trace.logits, atol=1e-6)
    # removing layer 0 from layer 1's keys changes layer 1's attention but not layer 0's,
    # and leaves layer 1's queries and values alone: a value-only change is impossible to see here,
    # so check that keys-only and queries-only patches differ from each other and from the original
    layer0 = [(0, h) for h in range(4)]
    keys = trace_heads(model, TOKENS, keys_without={1: layer0})
    queries = trace_heads(model, TOKENS, queries_without={1: layer0})
    assert torch.allclose(keys.attention[0], trace.attention[0])
    assert not torch.allclose(keys.attention[1], trace.attention[1], atol=1e-4)
    assert not torch.allclose(keys.attention[1], queries.attention[1], atol=1e-4)
    # a layer-0 head that writes nothing cannot matter to the keys
    silent = _tiny()
    with torch.no_grad():
        silent.blocks[0].attn.out_proj.weight[:, 0:4] = 0.0  # head 0 of layer 0 (dk = 4) writes zero
    base = trace_heads(silent, TOKENS)
    patched = trace_heads(silent, TOKENS, keys_without={1: [(0, 0)]})
    assert torch.allclose(patched.attention[1], base.attention[1], atol=1e-6)
    with pytest.raises(ValueError, match="earlier layers"):
        trace_heads(model, TOKENS, keys_without={1: [(1, 0)]})
    with pytest.raises(ValueError, match="layer"):
        trace_heads(model, TOKENS, queries_without={5: [(0, 0)]})


def test_direct_logit_attribution_adds_up():
    """In an attention-only model, with the final LayerNorm's scale frozen, the logit lift of the
    target is the sum of the lifts of every part of the stream (embeddings, heads, biases) plus
    the LayerNorm's own bias."""
    from course_utils.interp.circuits import _final_direction

    model = _tiny()
    trace = trace_heads(model, TOKENS)
    targets = TOKENS.roll(-1, dims=1)
    per_head = direct_logit_attribution(model, trace, targets)  # (L, h, B, T)
    assert per_head.shape == (2, 4, 2, 8)

    def lift(vectors):
        logits = _final_direction(model, trace, vectors)
        return logits.gather(-1, targets[..., None])[..., 0] - logits.mean(-1)

    with torch.no_grad():
        parts = lift(trace.residual[0]) + sum(lift(block.attn.out_proj.bias.expand(2, 8, -1))
                                              for block in model.blocks)
        bias_logits = model.unembed(model.ln_final.bias)
        parts = parts + bias_logits[targets] - bias_logits.mean()
        total = trace.logits.gather(-1, targets[..., None])[..., 0] - trace.logits.mean(-1)
    assert torch.allclose(per_head.sum(dim=(0, 1)) + parts, total, atol=1e-4)
    with pytest.raises(ValueError, match="targets"):
        direct_logit_attribution(model, trace, targets[:, :3])


def _copying_model(sign: float) -> TinyTransformer:
    """One layer whose every head's OV circuit is +/- the identity on its block of dimensions and
    whose unembedding is the embedding: token t (t < 4) is one-hot in each head's block."""
    model = TinyTransformer(ModelConfig(vocab_size=5, max_len=4, d_model=16, num_heads=4, num_layers=1))
    with torch.no_grad():
        embedding = torch.zeros(5, 16)
        for t in range(4):
            embedding[t, [t, 4 + t, 8 + t, 12 + t]] = 1.0
        embedding[4, :] = 0.25  # a token with no block of its own
        model.token_embedding.weight.copy_(embedding)
        model.unembed.weight.copy_(embedding)
        w_q, w_k, w_v = model.blocks[0].attn.in_proj.weight.split(16)
        w_v.copy_(torch.eye(16))
        model.blocks[0].attn.out_proj.weight.copy_(sign * torch.eye(16))
    return model.eval()


def test_ov_copying_score_on_hand_built_circuits():
    assert ov_copying_score(_copying_model(+1.0), 0, range(4)).tolist() == [1.0] * 4
    assert ov_copying_score(_copying_model(-1.0), 0, range(4)).tolist() == [0.0] * 4
    with pytest.raises(ValueError, match="layer"):
        ov_copying_score(_copying_model(1.0), 1, range(4))
    with pytest.raises(ValueError, match="token_ids"):
        ov_copying_score(_copying_model(1.0), 0, [3])


def test_next_token_loss_and_in_context_mass():
    tokens = torch.tensor([[0, 1, 2, 1, 2, 1]])
    scored = torch.tensor([[False, False, True, True, True, False]])
    uniform = torch.zeros(1, 6, 4)
    assert next_token_loss(uniform, tokens, scored) == pytest.approx(np.log(4))
    perfect = torch.full((1, 6, 4), -30.0)
    perfect[0, torch.arange(5), tokens[0, 1:]] = 30.0
    assert next_token_loss(perfect, tokens, scored) == pytest.approx(0.0, abs=1e-6)
    model_mass, uniform_mass = in_context_mass(uniform, tokens, scored)
    assert model_mass == pytest.approx(uniform_mass) == pytest.approx(0.5)  # 2 seen tokens (BOS ignored) of 4
    assert in_context_mass(perfect, tokens, scored)[0] == pytest.approx(1.0)  # the next token was seen
    with pytest.raises(ValueError, match="logits must be 3-D"):
        next_token_loss(uniform[0], tokens, scored)
