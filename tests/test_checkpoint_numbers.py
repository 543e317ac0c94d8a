"""The shipped checkpoints compute what a transformer written out by hand from their weights computes.

The reference below reads only the state dict and plain torch operations (no course_utils
attention code), so a change to the model's forward path, its hook points, its caches or its
gates that moved the numbers beyond float rounding fails here, for every model in data/.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils.model.checkpoint import load_checkpoint
from course_utils.model.kv_cache import CatCache, PreallocatedCache, decode_tokens
from course_utils.model.transformer import convert_model

CHECKPOINTS = ("induction", "agreement", "mixture")


def reference_forward(state: dict, cfg, tokens: torch.Tensor, gates: torch.Tensor | None = None):
    """Logits ``(B, T, V)`` and each layer's weights ``(B, h, T, T)``, by hand."""
    B, T = tokens.shape
    d, h = cfg.d_model, cfg.num_heads
    dk = d // h

    def ln(x, name):
        return F.layer_norm(x, (d,), state[f"{name}.weight"], state[f"{name}.bias"])

    x = state["token_embedding.weight"][tokens] + state["position_embedding.weight"][:T]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()
    weights = []
    for i in range(cfg.num_layers):
        p = f"blocks.{i}."
        a = ln(x, p + "ln_attn")
        qkv = a @ state[p + "attn.in_proj.weight"].T + state[p + "attn.in_proj.bias"]
        q, k, v = (t.reshape(B, T, h, dk).transpose(1, 2) for t in qkv.split(d, dim=-1))
        scores = (q @ k.transpose(-2, -1) / math.sqrt(dk)).masked_fill(~allowed, -math.inf)
        w = scores.softmax(-1)
        weights.append(w)
        z = w @ v  # (B, h, T, dk)
        if gates is not None:
            z = z * gates[i].view(1, h, 1, 1)
        merged = z.transpose(1, 2).reshape(B, T, d)
        x = x + merged @ state[p + "attn.out_proj.weight"].T + state[p + "attn.out_proj.bias"]
        if cfg.mlp:
            m = ln(x, p + "ln_mlp") @ state[p + "mlp.fc_in.weight"].T + state[p + "mlp.fc_in.bias"]
            x = x + F.gelu(m) @ state[p + "mlp.fc_out.weight"].T + state[p + "mlp.fc_out.bias"]
    return ln(x, "ln_final") @ state["unembed.weight"].T, torch.stack(weights)


@pytest.mark.parametrize("name", CHECKPOINTS)
def test_a_shipped_model_computes_what_its_weights_say(name):
    model, _ = load_checkpoint(name)
    cfg = model.config
    state = model.state_dict()
    T = min(cfg.max_len, 24)
    tokens = torch.randint(0, cfg.vocab_size, (3, T), generator=torch.Generator().manual_seed(1))
    gates = torch.ones(cfg.num_layers, cfg.num_heads)
    gates[0, 1], gates[-1, 0] = 0.0, 0.5
    with torch.no_grad():
        expected, expected_weights = reference_forward(state, cfg, tokens)
        expected_gated, _ = reference_forward(state, cfg, tokens, gates)
        logits, weights = model(tokens, return_attention=True)
        close = dict(rtol=1e-5, atol=4e-6 * float(expected.abs().max()))  # float32 rounding at this scale
        torch.testing.assert_close(logits, expected, **close)
        torch.testing.assert_close(torch.stack(weights), expected_weights, **close)
        torch.testing.assert_close(model(tokens)[0], expected, **close)  # the fused branch
        torch.testing.assert_close(model(tokens, head_mask=gates)[0], expected_gated, **close)
        gated_cached, _ = model.forward_with_cache(tokens, head_mask=gates)
        torch.testing.assert_close(gated_cached, expected_gated, **close)
        first, cache = model.forward_with_cache(tokens[:, :T // 2])
        rest, _ = model.forward_with_cache(tokens[:, T // 2:], cache)
        torch.testing.assert_close(torch.cat([first, rest], 1), expected, **close)
        for cache in (CatCache(cfg.num_layers),
                      PreallocatedCache(cfg.num_layers, 3, cfg.num_kv_heads, cfg.d_head, cfg.max_len)):
            torch.testing.assert_close(decode_tokens(model, tokens, cache), expected, **close)
        # a GQA copy with g = h shares nothing: it is the same model, through the same forward
        same = convert_model(model, cfg.num_heads).eval()
        torch.testing.assert_close(same(tokens, return_attention=True)[0], expected, **close)
        torch.testing.assert_close(same(tokens)[0], expected, **close)
