"""Battery 19 (b19a) fixes of helper fix49rm, in course_utils/model/kv_cache.py.

g24: QuantizedCache under autograd (the default mode) died in its dequantize with torch's
'out=... arguments don't support automatic differentiation' and was left mid-step; a value
too large for its float16 scale was refused after part of the step had been written.
g25: a decode_step that raised (e.g. a hook in the last layer) still advanced the cache, so a
retry read a duplicated position.
"""

from __future__ import annotations

import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    QuantizedCache,
    SlidingWindowCache,
    decode_step,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer

SMALL = ModelConfig(vocab_size=16, max_len=8, d_model=16, num_heads=2, num_layers=2)
TOKEN = torch.zeros(1, 1, dtype=torch.long)


def _model() -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(SMALL).eval()


_raises = raises_naming  # call() raises error naming every one of words

def _state(cache: QuantizedCache) -> list[torch.Tensor]:
    return [x.clone() for part in (cache.codes, cache.scales, cache.residual) for t in ("k", "v")
            for x in part[t]]


# -- g24: QuantizedCache under autograd ---------------------------------------------------------------
QUANTIZED = {
    "channel/token group 2": {"group": 2},
    "token/token group 1": {"keys": "token", "values": "token", "group": 1},
    "asymmetric group 4": {"symmetric": False, "group": 4},
}


@pytest.mark.parametrize("options", QUANTIZED.values(), ids=QUANTIZED.keys())
def test_decode_step_with_a_quantized_cache_runs_with_autograd_on(options):
    """Grad mode on (no torch.no_grad) gives the same logits as under no_grad, step after step."""
    model = _model()
    tracked, untracked = (QuantizedCache(2, 1, 2, 8, 8, **options) for _ in range(2))
    tokens = torch.tensor([[3, 1, 4, 1, 5]])
    for t in range(tokens.shape[1]):
        logits = decode_step(model, tokens[:, t:t + 1], tracked)
        with torch.no_grad():
            expected = decode_step(model, tokens[:, t:t + 1], untracked)
        torch.testing.assert_close(logits.detach(), expected)
    assert tracked.length == tokens.shape[1] and tracked._next_layer == 0


@pytest.mark.parametrize("options", QUANTIZED.values(), ids=QUANTIZED.keys())
def test_quantized_cache_append_takes_keys_that_require_grad(options):
    """The cache stores numbers, not a graph: nothing it holds or returns tracks k_new's gradient."""
    cache = QuantizedCache(1, 1, 2, 8, 8, **options)
    torch.manual_seed(0)
    for _ in range(3):
        k, v = (torch.randn(1, 2, 1, 8, requires_grad=True) for _ in range(2))
        keys, values = cache.append(0, k, v)
        torch.testing.assert_close(keys[:, :, -1:], k.detach(), atol=0.05, rtol=0)
    assert cache.length == 3
    assert not keys.requires_grad and not values.requires_grad
    assert not any(x.requires_grad for x in _state(cache))


@pytest.mark.parametrize("name", ["k_new", "v_new"])
@pytest.mark.parametrize("options", QUANTIZED.values(), ids=QUANTIZED.keys())
def test_a_quantized_append_refused_for_too_large_numbers_writes_nothing(options, name):
    """A number too large for the float16 scale is refused naming k_new / v_new, before anything
    of the step is written (the group that fills with it is checked first)."""
    cache = QuantizedCache(1, 1, 2, 8, 8, **options)
    ones = torch.ones(1, 2, 1, 8)
    cache.append(0, ones, ones)  # one token in, maybe still waiting in the residual
    before = _state(cache)
    big = ones.clone()
    big[0, 0, 0, 0] = 1e30
    bad = {"k_new": ones, "v_new": ones, name: big}
    # feed tokens up to a full group so the too-large number is quantized in this call
    count = max(1, cache.group - 1)
    args = {key: value.expand(1, 2, count, 8).clone() for key, value in bad.items()}
    _raises(ValueError, [name, "float16", "layer 0"], lambda: cache.append(0, args["k_new"], args["v_new"]))
    assert cache.length == 1 and cache._next_layer == 0
    assert all(torch.equal(a, b) for a, b in zip(before, _state(cache), strict=True))
    cache.append(0, ones, ones)  # still usable
    assert cache.length == 2


# -- g25: a decode_step that raises is rolled back ----------------------------------------------------
CACHES = {
    "preallocated": lambda: PreallocatedCache(2, 1, 2, 8, 8),
    "sliding window": lambda: SlidingWindowCache(2, 1, 2, 8, 3),
    "quantized": lambda: QuantizedCache(2, 1, 2, 8, 8, group=2),
    "cat": lambda: CatCache(2),
}


class _Boom(Exception):
    pass


def _boom(x, hook):
    raise _Boom("a hook failed")


@pytest.mark.parametrize("hook", ["blocks.1.attn.hook_z", "blocks.0.attn.hook_z"])
@pytest.mark.parametrize("make", CACHES.values(), ids=CACHES.keys())
def test_a_decode_step_that_raises_leaves_the_cache_where_it_was(make, hook):
    """A hook that raises in a layer: the cache keeps its length and step state, and a retry gives
    the logits of a cache that never saw the failed step."""
    model = _model()
    cache, clean = make(), make()
    tokens = torch.tensor([[3, 1, 4, 1]])
    with torch.no_grad():
        for t in range(tokens.shape[1]):  # past the sliding window of 3
            decode_step(model, tokens[:, t:t + 1], cache)
            decode_step(model, tokens[:, t:t + 1], clean)
        with model.hooks([(hook, _boom)]), pytest.raises(_Boom):
            decode_step(model, TOKEN, cache)
        assert cache.length == 4 and cache._next_layer == 0
        if isinstance(cache, CatCache):
            assert all(k.shape[2] == 4 for k, _ in cache.layers)
        torch.testing.assert_close(decode_step(model, TOKEN, cache), decode_step(model, TOKEN, clean))
    assert cache.length == 5
