"""Issue 38, caches and decoding: bad input to the KV caches, the paged cache, decode_step
and decode_tokens, MLA's helpers and the one integer rule (ModelConfig). Each row is a call,
the exception it must raise, and words its message must hold: the argument and the value
that arrived (and, where it helps, what was expected)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from bad_input_cases import Case, assert_named  # noqa: E402

from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.mla import MultiHeadLatentAttention, rope
from course_utils.attention.naive_mha import AttentionHead, NaiveMultiHeadAttention
from course_utils.attention.validation import IndexOutOfRange, check_index, check_int
from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    QuantizedCache,
    SlidingWindowCache,
    decode_step,
    decode_tokens,
    quantize_kv,
)
from course_utils.model.paged_cache import PagedCache
from course_utils.model.transformer import ModelConfig, TinyTransformer

ONE = torch.ones(1, 2, 1, 4)  # (B, g, T_new, dk)


def _model(layers: int = 2) -> TinyTransformer:
    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=layers))


def _appended(cache, *layers):
    for layer in layers:
        cache.append(layer, ONE, ONE)
    return cache


def _mla() -> MultiHeadLatentAttention:
    torch.manual_seed(0)
    return MultiHeadLatentAttention(16, 2, 4, 8, 4)


CASES = [
    # pattern 4: the caches' invariants
    Case(
        "preallocated int dtype",
        lambda: PreallocatedCache(2, 1, 2, 4, 8, dtype=torch.int64),
        TypeError,
        ["dtype", "floating", "torch.int64"],
    ),
    Case(
        "sliding int dtype",
        lambda: SlidingWindowCache(2, 1, 2, 4, 4, dtype=torch.int32),
        TypeError,
        ["dtype", "torch.int32"],
    ),
    Case(
        "paged bool dtype",
        lambda: PagedCache(4, 2, 2, 4, dtype=torch.bool),
        TypeError,
        ["dtype", "torch.bool"],
    ),
    Case(
        "append layer 0 twice",
        lambda: _appended(PreallocatedCache(2, 1, 2, 4, 8), 0, 0),
        ValueError,
        ["layer 0", "already appended", "layer 1"],
    ),
    Case(
        "append layer 1 first",
        lambda: _appended(PreallocatedCache(2, 1, 2, 4, 8), 1),
        ValueError,
        ["layer 1", "before layer 0"],
    ),
    Case(
        "cat cache twice", lambda: _appended(CatCache(2), 0, 0), ValueError, ["layer 0", "already appended"]
    ),
    Case(
        "sliding twice",
        lambda: _appended(SlidingWindowCache(2, 1, 2, 4, 4), 0, 0),
        ValueError,
        ["layer 0", "already appended"],
    ),
    Case(
        "quantized layer 1 first",
        lambda: _appended(QuantizedCache(2, 1, 2, 4, 8, group=1, keys="token"), 1),
        ValueError,
        ["layer 1", "before layer 0"],
    ),
    Case(
        "tokens differ per layer",
        lambda: _two_token_layer_one(),
        ValueError,
        ["layer 1", "2 new token", "layer 0 got 1"],
    ),
    Case(
        "sliding window 0", lambda: SlidingWindowCache(2, 1, 2, 4, 0), ValueError, ["window", "positive", "0"]
    ),
    Case(
        "sliding from_layers window 0",
        lambda: SlidingWindowCache.from_layers([(ONE, ONE)], window=0),
        ValueError,
        ["window", "0"],
    ),
    Case("cat window 0", lambda: CatCache(2, window=0), ValueError, ["window", "0"]),
    Case("cat float layers", lambda: CatCache(2.0), TypeError, ["num_layers", "float", "2.0"]),
    Case(
        "cat layer out of range", lambda: CatCache(2).append(2, ONE, ONE), IndexError, ["layer", "0..1", "2"]
    ),
    Case("cat layer bool", lambda: CatCache(2).append(True, ONE, ONE), TypeError, ["layer", "bool", "True"]),
    Case(
        "cat dtype changes",
        lambda: _cat_then_double(),
        TypeError,
        ["k_new", "torch.float64", "torch.float32"],
    ),
    Case(
        "cat dtype differs across layers",  # the first step: layer 0 float32, layer 1 float64
        lambda: _appended(CatCache(2), 0).append(1, ONE.double(), ONE.double()),
        TypeError,
        ["k_new", "torch.float64", "torch.float32"],
    ),
    Case(
        "preallocated float16 append",
        lambda: PreallocatedCache(1, 1, 2, 4, 8, dtype=torch.float16).append(0, ONE, ONE),
        TypeError,
        ["k_new", "torch.float32", "torch.float16"],
    ),
    Case(
        "from_layers second layer not a pair",
        lambda: PreallocatedCache.from_layers([(ONE, ONE), ONE], 4),
        TypeError,
        ["layers[1]", "pair", "Tensor"],
    ),
    Case(
        "paged unhashable seq",
        lambda: PagedCache(4, 2, 2, 4).add_sequence(["a"]),
        TypeError,
        ["seq", "hashable", "list"],
    ),
    Case("paged fork unknown parent", lambda: PagedCache(4, 2, 2, 4).fork("p", "c"), KeyError, ["'p'"]),
    # issue 38, third pass: devices that hold no values, and names that cannot be found again
    Case(
        "paged meta append",
        lambda: _paged("a").append("a", META3, META3),
        ValueError,
        ["k", "meta device", "(2, 1, 4)"],
    ),
    Case(
        "paged meta query",
        lambda: _paged("a").attend("a", torch.ones(2, 1, 4, device="meta")),
        ValueError,
        ["q", "meta device"],
    ),
    Case(
        "paged add_sequence NaN",
        lambda: PagedCache(4, 2, 2, 4).add_sequence(float("nan")),
        TypeError,
        ["seq", "float", "nan"],
    ),
    Case(
        "paged add_sequence bool",
        lambda: PagedCache(4, 2, 2, 4).add_sequence(True),
        TypeError,
        ["seq", "bool", "True"],
    ),
    Case(
        "preallocated bogus device",
        lambda: PreallocatedCache(1, 1, 2, 4, 8, device="bogus"),
        ValueError,
        ["device", "'cpu'", "'bogus'"],
    ),
    Case(
        "preallocated device int",
        lambda: PreallocatedCache(1, 1, 2, 4, 8, device=0.5),
        TypeError,
        ["device", "float", "0.5"],
    ),
    Case(
        "preallocated meta device",
        lambda: PreallocatedCache(1, 1, 2, 4, 8, device="meta"),
        ValueError,
        ["device", "'meta'", "no numbers"],
    ),
    Case(
        "sliding meta device",
        lambda: SlidingWindowCache(1, 1, 2, 4, 4, device=torch.device("meta")),
        ValueError,
        ["device", "meta"],
    ),
    Case(
        "preallocated meta append",
        lambda: PreallocatedCache(1, 1, 2, 4, 8).append(0, ONE.to("meta"), ONE.to("meta")),
        ValueError,
        ["k_new", "meta", "cache is on cpu"],
    ),
    Case(
        "cat k and v on two devices",
        lambda: CatCache(1).append(0, ONE, ONE.to("meta")),
        ValueError,
        ["k_new", "v_new", "device", "cpu", "meta"],
    ),
    Case(
        "cat later append on another device",
        lambda: _appended(CatCache(1), 0).append(0, ONE.to("meta"), ONE.to("meta")),
        ValueError,
        ["k_new", "meta", "cache is on cpu"],
    ),
    Case(
        "preallocated v dtype differs from k",
        lambda: PreallocatedCache(1, 1, 2, 4, 8).append(0, ONE, ONE.double()),
        TypeError,
        ["k_new", "v_new", "torch.float32", "torch.float64"],
    ),
    Case(
        "from_layers meta",
        lambda: CatCache.from_layers([(ONE.to("meta"), ONE.to("meta"))]),
        ValueError,
        ["layers[0] k", "meta device"],
    ),
    Case(
        "from_layers layers on two devices",
        lambda: PreallocatedCache.from_layers([(ONE, ONE), (ONE.to("meta"), ONE.to("meta"))], 4),
        ValueError,
        ["layers[1] k", "device", "meta"],
    ),
    Case(
        "quantize_kv meta",
        lambda: quantize_kv(torch.ones(2, 4, device="meta")),
        ValueError,
        ["x", "meta device"],
    ),
    # decoding
    Case(
        "decode 1-layer cache, 2-layer model",
        lambda: decode_step(_model(), torch.tensor([[3]]), PreallocatedCache(1, 1, 2, 4, 8)),
        ValueError,
        ["cache has 1 layer", "model has 2", "num_layers=2"],
    ),
    Case(
        "decode token 99",
        lambda: decode_step(_model(), torch.tensor([[99]]), PreallocatedCache(2, 1, 2, 4, 8)),
        ValueError,
        ["token", "vocab_size=10", "99"],
    ),
    Case(
        "decode negative token",
        lambda: decode_step(_model(), torch.tensor([[-1]]), CatCache(2)),
        ValueError,
        ["token", "-1"],
    ),
    Case(
        "decode float token",
        lambda: decode_step(_model(), torch.tensor([[3.0]]), CatCache(2)),
        TypeError,
        ["token", "torch.long", "torch.float32"],
    ),
    Case(
        "decode list token", lambda: decode_step(_model(), [[3]], CatCache(2)), TypeError, ["token", "list"]
    ),
    Case(
        "decode not a cache",
        lambda: decode_step(_model(), torch.tensor([[3]]), {}),
        TypeError,
        ["cache", "dict"],
    ),
    Case(
        "decode not a model",
        lambda: decode_step("gpt", torch.tensor([[3]]), CatCache(2)),
        TypeError,
        ["model", "TinyTransformer", "str"],
    ),
    Case(
        "decode float16 cache",
        lambda: decode_step(
            _model(), torch.tensor([[3]]), PreallocatedCache(2, 1, 2, 4, 8, dtype=torch.float16)
        ),
        TypeError,
        ["cache", "torch.float16", "torch.float32"],
    ),
    Case(
        "decode batch mismatch",
        lambda: decode_tokens(_model(), torch.tensor([[3, 4]]), PreallocatedCache(2, 2, 2, 4, 8)),
        ValueError,
        ["B=2", "B=1", "batch=1"],
    ),
    Case(
        "decode_tokens late bad id",
        lambda: decode_tokens(_model(), torch.tensor([[3, 4, 10]]), CatCache(2)),
        ValueError,
        ["tokens", "vocab_size=10", "10"],
    ),
    Case(
        "decode past max_len",
        lambda: decode_tokens(_model(), torch.ones(1, 9, dtype=torch.long), CatCache(2)),
        ValueError,
        ["tokens", "position 8", "8 learned positions"],
    ),
    # MLA's helpers
    Case(
        "rope float positions",
        lambda: rope(torch.ones(3, 4), torch.tensor([0.0, 1.0, 2.0])),
        TypeError,
        ["positions", "torch.float32"],
    ),
    Case(
        "rope wrong length",
        lambda: rope(torch.ones(3, 4), torch.arange(2)),
        ValueError,
        ["positions", "(3,)", "(2)"],
    ),
    Case(
        "rope negative position", lambda: rope(torch.ones(2, 4), [0, -1]), ValueError, ["positions[1]", "-1"]
    ),
    Case(
        "rope base bool",
        lambda: rope(torch.ones(2, 4), torch.arange(2), base=True),
        TypeError,
        ["base", "bool"],
    ),
    Case(
        "rope int x",
        lambda: rope(torch.ones(2, 4, dtype=torch.long), torch.arange(2)),
        TypeError,
        ["x", "torch.int64"],
    ),
    Case("latents 2-D x", lambda: _mla().latents(torch.ones(3, 16)), ValueError, ["x", "3-D", "(3, 16)"]),
    Case(
        "latents float start",
        lambda: _mla().latents(torch.ones(1, 3, 16), 1.5),
        TypeError,
        ["start", "float", "1.5"],
    ),
    Case(
        "latents negative start",
        lambda: _mla().latents(torch.ones(1, 3, 16), -2),
        ValueError,
        ["start", "-2"],
    ),
    # one flag rule for every attention class and ModelConfig (check_flag)
    Case(
        "mha bias 'no'",
        lambda: MultiHeadAttention(8, 2, bias="no"),
        TypeError,
        ["bias", "True or False", "'no'"],
    ),
    Case(
        "naive mha bias 'no'",
        lambda: NaiveMultiHeadAttention(8, 2, bias="no"),
        TypeError,
        ["bias", "True or False", "'no'"],
    ),
    Case(
        "one naive head bias 0",
        lambda: AttentionHead(8, 4, bias=0),
        TypeError,
        ["bias", "True or False", "0"],
    ),
    Case(
        "config mlp 'no'",
        lambda: ModelConfig(vocab_size=10, max_len=8, mlp="no"),
        TypeError,
        ["ModelConfig.mlp", "True or False", "'no'"],
    ),
    # the integer rule
    Case(
        "config bool kv heads",
        lambda: ModelConfig(vocab_size=10, max_len=8, num_kv_heads=True),
        TypeError,
        ["num_kv_heads", "bool"],
    ),
    Case(
        "config float layers",
        lambda: ModelConfig(vocab_size=10, max_len=8, num_layers=2.0),
        TypeError,
        ["num_layers", "float", "2.0"],
    ),
    Case(
        "check_index negative",
        lambda: check_index(-1, "layer", 3, "layers"),
        IndexError,
        ["layer", "0..2", "-1", "3 layers"],
    ),
]


META3 = torch.ones(2, 1, 4, device="meta")  # (g, T_new, dk) without values


def _paged(*names) -> PagedCache:
    cache = PagedCache(4, 2, 2, 4)
    for name in names:
        cache.add_sequence(name)
    return cache


def _two_token_layer_one():
    cache = PreallocatedCache(2, 1, 2, 4, 8)
    cache.append(0, ONE, ONE)
    return cache.append(1, torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))


def _cat_then_double():
    cache = _appended(CatCache(1), 0)
    return cache.append(0, ONE.double(), ONE.double())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_is_named(case):
    assert_named(case)


def test_numpy_integers_are_ints_everywhere():
    """Pattern 1: a NumPy integer is accepted where an int is, and stored as a Python int."""
    config = ModelConfig(
        vocab_size=np.int64(10), max_len=np.int32(8), d_model=8, num_heads=2, num_kv_heads=np.int64(1)
    )
    assert all(type(getattr(config, f)) is int for f in ("vocab_size", "max_len", "num_kv_heads"))
    assert check_int(np.int16(3), "n", minimum=0, maximum=3) == 3
    cache = PreallocatedCache(np.int64(2), 1, 2, 4, 8)
    cache.append(np.int64(0), ONE, ONE)
    cache.append(np.int64(1), ONE, ONE)
    assert cache.length == 1


def test_an_index_out_of_range_is_both_index_and_value_error():
    with pytest.raises(IndexOutOfRange) as info:
        check_index(5, "head", 4)
    assert isinstance(info.value, IndexError) and isinstance(info.value, ValueError)


def test_a_refused_append_changes_nothing_and_the_next_step_works():
    """The order check runs before any write: after a refused append the cache is as it was."""
    cache = _appended(PreallocatedCache(2, 1, 2, 4, 8), 0)
    with pytest.raises(ValueError):
        cache.append(0, ONE * 7, ONE * 7)
    assert cache.length == 0 and torch.equal(cache.k[0][:, :, 0], ONE[:, :, 0])
    k, _ = cache.append(1, ONE, ONE)
    assert cache.length == 1 and k.shape == (1, 2, 1, 4)


def test_decode_checks_the_whole_sequence_before_the_first_step():
    """A bad id at the end of decode_tokens leaves the cache untouched."""
    cache = CatCache(2)
    with pytest.raises(ValueError):
        decode_tokens(_model(), torch.tensor([[3, 4, 10]]), cache)
    assert cache.length == 0 and cache.layers == [None, None]
    logits = decode_tokens(_model(), torch.tensor([[3, 4, 5]]), cache)
    full, _ = _model()(torch.tensor([[3, 4, 5]]))
    assert torch.allclose(logits, full, atol=1e-5)


def _paged_state(cache: PagedCache):
    return (
        list(cache.free),
        list(cache.refs),
        {k: list(v) for k, v in cache.tables.items()},
        dict(cache.lengths),
        cache.k_pool.clone(),
        cache.v_pool.clone(),
    )


def _same_state(a, b) -> bool:
    return all(
        torch.equal(x, y) if isinstance(x, torch.Tensor) else x == y for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize(
    "bad",
    [
        lambda c: c.append("a", META3, META3),
        lambda c: c.append("a", torch.ones(2, 1, 4), torch.ones(2, 1, 4, dtype=torch.float64)),
        lambda c: c.append("a", torch.ones(2, 9, 4), torch.ones(2, 9, 4)),  # 9 tokens, 3 free blocks
        lambda c: c.append("zz", torch.ones(2, 1, 4), torch.ones(2, 1, 4)),
        lambda c: c.add_sequence(float("nan")),
        lambda c: c.add_sequence("a"),
        lambda c: c.fork("a", ["list"]),
        lambda c: c.attend("a", torch.ones(2, 1, 4, device="meta")),
    ],
    ids=["meta", "v dtype", "pool full", "unknown seq", "NaN name", "name taken", "fork list", "meta q"],
)
def test_a_refused_paged_cache_call_changes_nothing(bad):
    """All or nothing: no block is taken, no table or length moves, no number is written."""
    cache = _paged("a")
    cache.append("a", torch.ones(2, 3, 4), torch.ones(2, 3, 4))  # one block of 2 filled, one half
    before = _paged_state(cache)
    with pytest.raises((TypeError, ValueError, KeyError, RuntimeError)):
        bad(cache)
    assert _same_state(before, _paged_state(cache))


@pytest.mark.parametrize(
    "make, bad",
    [
        (lambda: PreallocatedCache(2, 1, 2, 4, 8), lambda c: c.append(0, ONE.to("meta"), ONE.to("meta"))),
        (lambda: PreallocatedCache(2, 1, 2, 4, 8), lambda c: c.append(0, ONE, ONE.double())),
        (lambda: SlidingWindowCache(2, 1, 2, 4, 4), lambda c: c.append(0, ONE, ONE.to("meta"))),
        (lambda: QuantizedCache(2, 1, 2, 4, 8, group=2), lambda c: c.append(0, ONE, ONE * float("nan"))),
        (lambda: CatCache(2), lambda c: c.append(0, ONE.to("meta"), ONE.to("meta"))),
    ],
    ids=["preallocated meta", "preallocated v float64", "sliding meta v", "quantized NaN", "cat meta"],
)
def test_a_refused_append_leaves_every_cache_as_it_was(make, bad):
    cache = _appended(make(), 0, 1)  # one whole step
    keys = [t.clone() for t in _buffers(cache)]
    with pytest.raises((TypeError, ValueError)):
        bad(cache)
    assert cache.length == 1 and cache._next_layer == 0
    assert all(torch.equal(a, b) for a, b in zip(keys, _buffers(cache), strict=True))
    _appended(cache, 0, 1)  # the next step still works
    assert cache.length == 2


def _buffers(cache) -> list[torch.Tensor]:
    if isinstance(cache, CatCache):
        return [t for pair in cache.layers for t in pair]
    if isinstance(cache, SlidingWindowCache):
        return [*cache._ring.k, *cache._ring.v]
    if isinstance(cache, QuantizedCache):
        return [t for part in (cache.codes, cache.residual) for x in ("k", "v") for t in part[x]]
    return [*cache.k, *cache.v]


@pytest.mark.parametrize("symmetric, huge", [(True, 1e30), (True, -1e7), (False, -1e5), (False, 2e7)])
def test_quantized_cache_refuses_a_huge_number_in_the_append_that_brings_it(symmetric, huge):
    """A finite number too large for a float16 scale (1e30) was kept in the float32 residual while
    its group was not full; the append that filled the group was refused, blaming its own normal
    keys, and so was every later one: the cache was stuck. It is refused on arrival, naming k_new
    and its positions, and the cache goes on as if it had never come."""
    cache = QuantizedCache(1, 1, 2, 4, 8, group=4, symmetric=symmetric)
    normal = torch.randn(1, 2, 1, 4, generator=torch.Generator().manual_seed(0))
    cache.append(0, normal, normal)
    before = [t.clone() for t in _buffers(cache)]
    with pytest.raises(ValueError, match=r"^k_new \(layer 0, positions 1\.\.1\) holds numbers too large.*"
                                         r"caught here, not when its group fills"):
        cache.append(0, torch.full((1, 2, 1, 4), huge), normal)
    assert cache.length == 1
    assert all(torch.equal(a, b) for a, b in zip(before, _buffers(cache), strict=True))
    for _ in range(4):  # the group fills and the next one starts: nothing is stuck
        cache.append(0, normal, normal)
    assert cache.length == 5
