"""The preallocated and sliding-window caches give the logits of the torch.cat cache."""

import re

import pytest
import torch

from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    SlidingWindowCache,
    decode_step,
    decode_tokens,
    repeatable_step,
)
from course_utils.model.transformer import ModelConfig, TinyTransformer


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


# -- the 8-bit cache ---------------------------------------------------------------------------

from course_utils.model.kv_cache import (  # noqa: E402
    QuantizedCache,
    dequantize_kv,
    quantize_kv,
    quantized_bytes_per_token,
)


@pytest.mark.parametrize("per", ["token", "channel"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_quantize_round_trip_is_within_half_a_step(per, symmetric):
    x = torch.randn(2, 3, 40, 16, generator=torch.Generator().manual_seed(0)) * 3 + 1
    q = quantize_kv(x, per, symmetric=symmetric)
    assert q.codes.shape == x.shape and q.codes.dtype == (torch.int8 if symmetric else torch.uint8)
    assert q.scale.dtype == torch.float16 and (q.zero is None) == symmetric
    assert q.scale.shape == ((2, 3, 40, 1) if per == "token" else (2, 3, 1, 16))
    error = (dequantize_kv(q) - x).abs()
    step = q.scale.float()  # one code step; rounding to the nearest code is off by half of it
    assert (error <= 0.5 * step + 1e-3 * step + 1e-6).all()
    if symmetric:
        assert q.codes.abs().max() <= 127
    # the scale follows the axis: one outlier channel spoils per-token scales, not per-channel ones
    spoiled = x.clone()
    spoiled[..., 0] *= 100
    per_channel = (dequantize_kv(quantize_kv(spoiled, "channel", symmetric=symmetric)) - spoiled)[..., 1:]
    per_token = (dequantize_kv(quantize_kv(spoiled, "token", symmetric=symmetric)) - spoiled)[..., 1:]
    assert per_channel.abs().mean() < per_token.abs().mean() / 10


def test_quantize_keeps_zeros_and_refuses_bad_input():
    q = quantize_kv(torch.zeros(1, 1, 4, 8))
    assert not q.codes.any() and (q.scale > 0).all() and not dequantize_kv(q).any()
    with pytest.raises(TypeError, match="x must be a torch.Tensor"):
        quantize_kv([[1.0]])
    with pytest.raises(TypeError, match="floating-point"):
        quantize_kv(torch.ones(2, 4, dtype=torch.int64))
    with pytest.raises(ValueError, match="at least 2-D"):
        quantize_kv(torch.ones(4))
    with pytest.raises(ValueError, match="per must be one of 'token'.*got 'head'"):
        quantize_kv(torch.ones(2, 4), "head")
    with pytest.raises(TypeError, match="symmetric must be True or False"):
        quantize_kv(torch.ones(2, 4), symmetric=1)
    with pytest.raises(ValueError, match="at least one token"):
        quantize_kv(torch.ones(0, 4))
    for bad in (float("nan"), float("inf"), -float("inf")):
        x = torch.ones(2, 4)
        x[1, 2] = bad
        for symmetric in (True, False):
            with pytest.raises(ValueError, match="x holds NaN or infinity"):
                quantize_kv(x, symmetric=symmetric)
    with pytest.raises(TypeError, match="q must be a Quantized"):
        dequantize_kv(torch.ones(2, 4))


def test_the_float16_limits_are_the_ones_the_messages_state():
    """Symmetric: the scale max|x| / 127 must fit float16, so |x| up to about 8.3e6 is fine (the
    old message said 65504 and accepted 1e6); asymmetric: the zero point min x must fit."""
    x = torch.tensor([[1e6, -3.0, 0.5, 2e5]])
    q = quantize_kv(x)
    assert ((dequantize_kv(q) - x).abs() <= 0.5 * q.scale.float() * (1 + 1e-3)).all()
    with pytest.raises(ValueError, match=r"max\|x\| / 127 must be at most 65504.*8.3e6.*1e\+07"):
        quantize_kv(torch.tensor([[1e7, 1.0]]))
    with pytest.raises(ValueError, match=r"zero point.*min x must be at least -65504.*-1e\+05"):
        quantize_kv(torch.tensor([[-1e5, 1.0]]), symmetric=False)
    # a minimum above +65504 is kept, as the docstring says (battery 33: it said |min x| was refused)
    high = torch.tensor([[7e4, 7.1e4]])
    q = quantize_kv(high, symmetric=False)
    assert q.zero.float().item() == 65504.0
    assert ((dequantize_kv(q) - high).abs() <= 0.5 * q.scale.float() * (1 + 1e-3)).all()
    assert "``min x < -65504``" in quantize_kv.__doc__ and "above ``65504`` is kept" in quantize_kv.__doc__
    doc = quantize_kv.__doc__
    assert "6.1e-5" in doc and "3.05e-5" in doc and "8.3e6" in doc


def test_an_asymmetric_row_far_from_zero_stays_within_half_a_step():
    """Finding A: the float16 zero point of [1000.1, 1000.2] moves by more than the row's range
    (float16 has steps of 0.5 near 1000), so codes computed against the exact minimum came back
    off by the whole range (0.09998). Against the stored zero point, half a step at most."""
    rows = torch.tensor([[1000.1, 1000.2, 1000.15, 1000.12], [-2000.3, -2000.25, -2000.31, -2000.27],
                         [60000.5, 60001.0, 60000.7, 60000.9], [0.5, 0.6, 0.55, 0.51]])
    gen = torch.Generator().manual_seed(3)
    offsets = torch.randn(64, 1, generator=gen) * 3000
    random_rows = offsets + torch.rand(64, 16, generator=gen) * 0.3
    for x in (rows, random_rows):
        for per in ("token", "channel"):
            q = quantize_kv(x, per, symmetric=False)
            assert (q.zero.float() <= x.amin(-1 if per == "token" else -2, keepdim=True)).all()
            error = (dequantize_kv(q) - x).abs()
            float32 = x.abs() * 2.0**-22  # the float32 result's own rounding, near |x| = 3000
            assert (error <= 0.5 * q.scale.float() * (1 + 1e-3) + float32 + 1e-6).all(), error.max()
    q = quantize_kv(rows[:1], symmetric=False)
    assert (dequantize_kv(q) - rows[:1]).abs().max() < 0.001  # was 0.09998


def test_dequantize_refuses_codes_and_dtypes_it_did_not_make():
    q = quantize_kv(torch.randn(3, 8))
    for dtype in (torch.int8, torch.int64, torch.bool, "float32"):
        with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
            dequantize_kv(q, dtype=dtype)
    assert dequantize_kv(q, dtype=torch.float64).dtype == torch.float64
    with pytest.raises(TypeError, match=r"q.codes must be torch.int8.*symmetric.*got torch.float32"):
        dequantize_kv(q._replace(codes=q.codes.float()))
    asym = quantize_kv(torch.randn(3, 8), symmetric=False)
    with pytest.raises(TypeError, match=r"q.codes must be torch.uint8.*asymmetric.*got torch.int8"):
        dequantize_kv(asym._replace(codes=asym.codes.to(torch.int8)))


def test_bytes_per_token_count_codes_scales_and_zero_points():
    g, dk = 8, 128
    assert quantized_bytes_per_token(g, dk, keys="token", values="token") == 2 * g * dk + 2 * g * 2
    asymmetric = quantized_bytes_per_token(g, dk, keys="token", values="token", symmetric=False)
    assert asymmetric == 2 * g * dk + 2 * g * 4
    kivi = quantized_bytes_per_token(g, dk, keys="channel", values="token", symmetric=False, group=32)
    assert kivi == 2 * g * dk + g * dk * 4 / 32 + g * 4
    with pytest.raises(ValueError, match="keys must be one of 'token'"):
        quantized_bytes_per_token(g, dk, keys="row")
    with pytest.raises(ValueError, match="group must be a positive int, got 0"):
        quantized_bytes_per_token(g, dk, group=0)
    with pytest.raises(TypeError, match="d_head must be an int"):
        quantized_bytes_per_token(g, 2.5)
    for keys, values in (("channel", "token"), ("token", "channel")):  # as QuantizedCache refuses it
        with pytest.raises(ValueError, match="group must be at least 2 for a per-channel scale"):
            quantized_bytes_per_token(g, dk, keys=keys, values=values, group=1)
        with pytest.raises(ValueError, match="group must be at least 2 for a per-channel scale"):
            QuantizedCache(1, 1, g, dk, 4, keys=keys, values=values, group=1)
    assert quantized_bytes_per_token(g, dk, keys="token", values="token", group=1) == 2080
    assert "residual" in quantized_bytes_per_token.__doc__


@pytest.mark.parametrize("options", [dict(keys="token", values="token", group=1),
                                     dict(keys="channel", values="token", symmetric=False, group=8),
                                     dict(keys="channel", values="channel", group=5)])
def test_quantized_cache_stays_close_to_the_float_cache_and_counts_its_bytes(options):
    model, tokens = _model(2), _tokens(T=23)
    c = model.config
    exact = decode_tokens(model, tokens, PreallocatedCache(c.num_layers, 3, 2, c.d_head, 23))
    cache = QuantizedCache(c.num_layers, 3, 2, c.d_head, 23, **options)
    rounded = decode_tokens(model, tokens, cache)
    assert cache.length == 23 and 0 < (rounded - exact).abs().max() < 0.05
    group = options["group"]
    groups = -(-23 // group)
    per_token = quantized_bytes_per_token(2, c.d_head, **options)
    residual = 2 * c.num_layers * 3 * 2 * group * c.d_head * 4
    assert cache.num_bytes() == pytest.approx(c.num_layers * 3 * groups * group * per_token + residual)


def test_quantized_cache_appends_in_chunks_as_token_by_token_and_keeps_the_residual_exact():
    x = torch.randn(2, 3, 40, 16, generator=torch.Generator().manual_seed(2))
    for options in (dict(group=8), dict(keys="token", group=1), dict(group=5, symmetric=False)):
        chunks = QuantizedCache(1, 2, 3, 16, 40, **options)
        tokens = QuantizedCache(1, 2, 3, 16, 40, **options)
        for lo, hi in ((0, 23), (23, 40)):
            k_chunk, _ = chunks.append(0, x[:, :, lo:hi], x[:, :, lo:hi])
            for t in range(lo, hi):
                k_token, _ = tokens.append(0, x[:, :, t:t + 1], x[:, :, t:t + 1])
            assert torch.equal(k_chunk, k_token) and k_chunk.shape == (2, 3, hi, 16)
    cache = QuantizedCache(1, 1, 1, 4, 20, group=8)
    k, _ = cache.append(0, x[:1, :1, :11, :4], x[:1, :1, :11, :4])
    assert torch.equal(k[:, :, 8:], x[:1, :1, 8:11, :4])  # the 3 newest tokens wait, exact
    assert not torch.equal(k[:, :, :8], x[:1, :1, :8, :4])  # the full group was rounded


def test_quantized_cache_refuses_bad_input():
    with pytest.raises(ValueError, match="group must be at least 2 for a per-channel scale"):
        QuantizedCache(1, 1, 1, 4, 8, keys="channel", group=1)
    with pytest.raises(ValueError, match="values must be one of 'token'"):
        QuantizedCache(1, 1, 1, 4, 8, values="tokens")
    with pytest.raises(ValueError, match="max_len must be a positive int, got 0"):
        QuantizedCache(1, 1, 1, 4, 0)
    with pytest.raises(TypeError, match="symmetric must be True or False"):
        QuantizedCache(1, 1, 1, 4, 8, symmetric="yes")
    cache = QuantizedCache(1, 1, 1, 4, 3, group=2)
    with pytest.raises(ValueError, match="holds 3 tokens"):
        cache.append(0, torch.ones(1, 1, 4, 4), torch.ones(1, 1, 4, 4))
    with pytest.raises(IndexError, match="layer"):
        cache.append(1, torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1, 4))


def test_a_repeatable_step_works_on_the_quantized_cache():
    model, tokens = _model(2), _tokens(T=9)
    with torch.no_grad():
        _, prefix = model.forward_with_cache(tokens[:, :8])
    cache = QuantizedCache.from_layers(list(prefix.layers), max_len=10, group=4)
    step = repeatable_step(model, cache, tokens[:, 8:])
    torch.testing.assert_close(step(), step())
    assert cache.length == 8


def _all_caches(B: int = 2, g: int = 2, dk: int = 4) -> dict[str, object]:
    return {"preallocated": PreallocatedCache(1, B, g, dk, 16), "window": SlidingWindowCache(1, B, g, dk, 4),
            "quantized": QuantizedCache(1, B, g, dk, 16, group=4),
            "quantized per token": QuantizedCache(1, B, g, dk, 16, keys="token", group=1)}


def test_no_cache_broadcasts_one_head_or_one_sequence_into_several():
    """S1: a (1, 1, 1, 4) token went into a (2, 2, ., 4) cache by broadcasting, every head and
    sequence a copy of the first. Now B, g and dk must equal the cache's."""
    for name, cache in _all_caches().items():
        for shape in ((2, 1, 1, 4), (1, 2, 1, 4), (1, 1, 1, 4), (2, 2, 1, 3), (2, 2, 1, 1)):
            with pytest.raises(ValueError, match=r"k_new must be \(B=2, g=2, T_new, dk=4\) like the cache, "
                                                 + "got " + re.escape(str(shape).replace(",)", ")"))):
                cache.append(0, torch.ones(shape), torch.ones(shape))
            assert cache.length == 0, name
        with pytest.raises(ValueError, match=r"v_new must be \(B=2, g=2, T_new, dk=4\)"):
            cache.append(0, torch.ones(2, 2, 1, 4), torch.ones(2, 1, 1, 4))
        with pytest.raises(TypeError, match="k_new must hold floating-point numbers"):
            cache.append(0, torch.ones(2, 2, 1, 4, dtype=torch.int64), torch.ones(2, 2, 1, 4))
        with pytest.raises(TypeError, match="layer must be an int"):
            cache.append(0.0, torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))
    cat = CatCache(1)
    cat.append(0, torch.ones(2, 2, 1, 4), torch.ones(2, 2, 1, 4))
    with pytest.raises(ValueError, match=r"k_new must be \(B=2, g=2, T_new, dk=4\) like the cache"):
        cat.append(0, torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))


def test_caches_from_no_layers_get_a_clear_error():
    for build in (lambda layers: CatCache.from_layers(layers),
                  lambda layers: PreallocatedCache.from_layers(layers, max_len=4),
                  lambda layers: SlidingWindowCache.from_layers(layers, window=4),
                  lambda layers: QuantizedCache.from_layers(layers, max_len=4)):
        with pytest.raises(ValueError, match="layers must be a non-empty list of \\(k, v\\) pairs"):
            build([])
        with pytest.raises(TypeError, match="layers\\[0\\] must be a \\(k, v\\) pair"):
            build([torch.ones(1, 1, 2, 4)])
    k = torch.ones(1, 2, 3, 4)
    with pytest.raises(ValueError, match="every layer must hold T=3 tokens, layer 1 holds 2"):
        SlidingWindowCache.from_layers([(k, k), (k[:, :, :2], k[:, :, :2])], window=4)
    with pytest.raises(ValueError, match=r"layers\[0\] k \(1, 2, 3, 4\); layers\[1\] holds k \(1, 1, 3, 4\)"):
        SlidingWindowCache.from_layers([(k, k), (k[:, :1], k[:, :1])], window=4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_quantized_cache_refuses_nan_when_it_arrives_not_when_its_group_fills(bad):
    """O1: the residual held the NaN silently and the error came up to group - 1 steps later,
    blaming a clean token. Now the append that brings it is refused, and changes nothing."""
    cache = QuantizedCache(1, 1, 1, 4, 16, group=8)
    cache.append(0, torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4))
    poisoned = torch.ones(1, 1, 1, 4)
    poisoned[..., 2] = bad
    with pytest.raises(ValueError, match=r"v_new holds NaN or infinity \(layer 0, positions 3..3\)"):
        cache.append(0, torch.ones(1, 1, 1, 4), poisoned)
    assert cache.length == 3 and torch.isfinite(cache.residual["v"][0]).all()
    for _ in range(5):  # the group fills with clean tokens: no error
        k, v = cache.append(0, torch.ones(1, 1, 1, 4), torch.ones(1, 1, 1, 4))
    assert cache.length == 8 and torch.isfinite(k).all() and torch.isfinite(v).all()


@pytest.mark.parametrize("options", [dict(keys="token", values="token", group=1),
                                     dict(keys="channel", values="token", symmetric=False, group=4),
                                     dict(keys="channel", values="channel", group=5)])
def test_the_quantized_cache_dequantizes_in_place_into_one_scratch_buffer(options):
    """Finding C: no torch.cat per step. What append returns is a view of a preallocated float32
    buffer, equal to dequantize_kv of each stored group followed by the exact residual."""
    x = torch.randn(2, 3, 23, 8, generator=torch.Generator().manual_seed(4)) * 2 + 0.5
    cache = QuantizedCache(2, 2, 3, 8, 23, **options)
    G = options["group"]
    for t in range(23):
        for layer in range(2):
            k, v = cache.append(layer, x[:, :, t:t + 1], x[:, :, t:t + 1] * -1)
            assert k.data_ptr() == cache.scratch["k"].data_ptr() and k.shape == (2, 3, t + 1, 8)
            assert v.data_ptr() == cache.scratch["v"].data_ptr()
        full, waiting = divmod(t + 1, G)
        for name, got, sign in (("k", k, 1), ("v", v, -1)):
            parts = []
            for i in range(full):
                q = quantize_kv(sign * x[:, :, i * G:(i + 1) * G], cache.per[name], symmetric=cache.symmetric)
                parts.append(dequantize_kv(q))
            parts.append(sign * x[:, :, full * G:t + 1])
            assert torch.equal(got, torch.cat(parts, 2)), (name, t)
