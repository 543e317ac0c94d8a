"""The preallocated and sliding-window caches give the logits of the torch.cat cache."""

import pytest
import torch

from course_utils.kv_cache import (
    CatCache,
    PreallocatedCache,
    SlidingWindowCache,
    decode_step,
    decode_tokens,
    repeatable_step,
)
from course_utils.model import ModelConfig, TinyTransformer


def _model(num_kv_heads: int = 2) -> TinyTransformer:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=32, max_len=64, d_model=32, num_heads=4, num_layers=2,
                         num_kv_heads=num_kv_heads)
    return TinyTransformer(config).eval()


def _tokens(B: int = 3, T: int = 20) -> torch.Tensor:
    return torch.randint(0, 32, (B, T), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("num_kv_heads", [4, 2, 1])
def test_preallocated_cache_gives_the_logits_of_the_cat_cache_and_of_forward(num_kv_heads):
    model, tokens = _model(num_kv_heads), _tokens()
    c = model.config
    with torch.no_grad():
        full, _ = model(tokens)
        cat_steps, cache = [], None
        for t in range(tokens.shape[1]):  # the lesson's way: forward_with_cache, torch.cat inside
            logits, cache = model.forward_with_cache(tokens[:, t:t + 1], cache)
            cat_steps.append(logits)
    cat_steps = torch.cat(cat_steps, 1)
    pre = PreallocatedCache(c.num_layers, 3, c.num_kv_heads, c.d_head, 32)
    logits = decode_tokens(model, tokens, pre)
    torch.testing.assert_close(logits, cat_steps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(logits, full, atol=1e-4, rtol=1e-4)
    assert pre.length == 20
    for layer, (k, v) in enumerate(cache.layers):  # the same keys and values, in place
        torch.testing.assert_close(pre.k[layer][:, :, :20], k)
        torch.testing.assert_close(pre.v[layer][:, :, :20], v)
    assert not pre.k[0][:, :, 20:].any()  # the rest of the buffer is untouched


def test_preallocated_cache_writes_in_place_and_refuses_overflow():
    pre = PreallocatedCache(1, 1, 2, 4, 3)
    pointer = pre.k[0].data_ptr()
    for _ in range(3):
        k, v = pre.append(0, torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
        assert k.data_ptr() == pointer  # a view of the buffer, not a new tensor
    assert k.shape == (1, 2, 3, 4) and pre.num_bytes() == 2 * 2 * 3 * 4 * 4
    with pytest.raises(ValueError, match="holds 3 tokens"):
        pre.append(0, torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))
    with pytest.raises(IndexError, match="layer"):
        pre.append(1, torch.ones(1, 2, 1, 4), torch.ones(1, 2, 1, 4))


@pytest.mark.parametrize("num_kv_heads", [4, 1])
def test_a_window_as_long_as_the_sequence_changes_nothing(num_kv_heads):
    model, tokens = _model(num_kv_heads), _tokens()
    c = model.config
    ring = decode_tokens(model, tokens, SlidingWindowCache(c.num_layers, 3, num_kv_heads, c.d_head, 20))
    pre = decode_tokens(model, tokens, PreallocatedCache(c.num_layers, 3, num_kv_heads, c.d_head, 20))
    torch.testing.assert_close(ring, pre, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("window", [1, 5, 8])
def test_the_ring_buffer_equals_keeping_the_latest_window_tokens_with_cat(window):
    """Once the ring wraps its slots are out of time order: one query's attention does not care."""
    model, tokens = _model(2), _tokens(T=23)
    c = model.config
    ring = SlidingWindowCache(c.num_layers, 3, 2, c.d_head, window)
    got = decode_tokens(model, tokens, ring)
    expected = decode_tokens(model, tokens, CatCache(c.num_layers, window=window))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert ring.length == 23 and ring.num_bytes() == 2 * c.num_layers * 3 * 2 * window * c.d_head * 4
    full = decode_tokens(model, tokens, CatCache(c.num_layers))
    assert (got[:, window:] - full[:, window:]).abs().max() > 1e-3  # the window does cut context
    torch.testing.assert_close(got[:, :window], full[:, :window], atol=1e-5, rtol=1e-5)


def test_sliding_window_takes_one_token_per_call_and_decode_step_checks_positions():
    ring = SlidingWindowCache(1, 1, 1, 4, 2)
    with pytest.raises(ValueError, match="one token per call"):
        ring.append(0, torch.ones(1, 1, 2, 4), torch.ones(1, 1, 2, 4))
    model = _model()
    with pytest.raises(ValueError, match=r"\(B, 1\)"):
        decode_step(model, _tokens(T=2), CatCache(2))
    cache = CatCache(2)
    cache.length = 64
    with pytest.raises(ValueError, match="learned positions"):
        decode_step(model, _tokens(T=1), cache)


def test_caches_built_from_existing_layers_continue_as_the_cat_cache_does():
    model, tokens = _model(2), _tokens(T=12)
    c = model.config
    with torch.no_grad():
        _, prefix = model.forward_with_cache(tokens[:, :9])
    layers = list(prefix.layers)
    expected = decode_tokens(model, tokens[:, 9:], CatCache.from_layers(layers))
    pre = PreallocatedCache.from_layers(layers, max_len=12)
    torch.testing.assert_close(decode_tokens(model, tokens[:, 9:], pre), expected, atol=1e-5, rtol=1e-5)
    for window in (4, 9, 16):
        ring = SlidingWindowCache.from_layers(layers, window=window)
        assert ring.length == 9
        got = decode_tokens(model, tokens[:, 9:], ring)
        windowed = decode_tokens(model, tokens[:, 9:], CatCache.from_layers(layers, window=window))
        torch.testing.assert_close(got, windowed, atol=1e-5, rtol=1e-5)
    assert c.num_layers == len(layers)


def test_a_repeatable_step_leaves_the_cache_as_it_found_it():
    model, tokens = _model(2), _tokens(T=6)
    with torch.no_grad():
        _, prefix = model.forward_with_cache(tokens[:, :5])
    for cache in (CatCache.from_layers(list(prefix.layers)),
                  PreallocatedCache.from_layers(list(prefix.layers), max_len=8),
                  SlidingWindowCache.from_layers(list(prefix.layers), window=3)):
        step = repeatable_step(model, cache, tokens[:, 5:])
        first, second = step(), step()
        torch.testing.assert_close(first, second)
        assert cache.length == 5
