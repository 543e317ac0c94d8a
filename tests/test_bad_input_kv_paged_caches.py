"""Bad input to the decoding caches: course_utils.model.kv_cache (CatCache, PreallocatedCache,
QuantizedCache, Quantized, quantize_kv / dequantize_kv) and course_utils.model.paged_cache
(PagedCache, blocks_needed). Sizes beyond memory, appends of the wrong dtype or shape, interrupted
appends, deep copies with gradients on.

Moved here from the QA batteries' files (issue 38 and later batteries), grouped by the code under test;
a `# -- battery N` line marks where each battery's cases begin. Helpers shared with other bad-input
files live in tests/bad_input_cases.py."""

from __future__ import annotations

import re

import pytest
import torch
from bad_input_cases import (
    BEYOND_FLOAT,
    BadRepr,
    one_layer_config,
    raises_naming,
    refused,
    tiny_model,
    train_mode_tiny_model,
)

from course_utils.attention.masks import padding_mask
from course_utils.model import kv_cache
from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    QuantizedCache,
    SlidingWindowCache,
    decode_step,
)
from course_utils.model.paged_cache import PagedCache
from course_utils.model.train import AGREEMENT_TASK, INDUCTION_TASK
from course_utils.model.transformer import TinyTransformer
from course_utils.tasks.two_relations import TwoKeyTask

# -- battery 8 ---------------------------------------------------------------------------------------

HUGE = [
    ("padding_mask max_len", lambda: padding_mask(torch.tensor([3]), max_len=10**10), "max_len"),
    ("padding_mask lengths", lambda: padding_mask([10**10]), "max_len"),
    ("QuantizedCache max_len", lambda: QuantizedCache(2, 1, 2, 8, max_len=10**10), "max_len"),
    ("PagedCache num_blocks", lambda: PagedCache(10**9, 16, 2, 8), "num_blocks"),
    ("induction eval_batch", lambda: INDUCTION_TASK.eval_batch(10**9), "batch_size"),
    ("agreement eval_batch", lambda: AGREEMENT_TASK.eval_batch(10**9), "batch_size"),
    ("TwoKeyTask sample", lambda: TwoKeyTask(num_items=8, num_keys=16, num_symbols=8, max_repeats=3)
     .sample(10**10, seed=0), "n"),
]


@pytest.mark.parametrize("call, argument", [(c, a) for _, c, a in HUGE], ids=[i for i, _, _ in HUGE])
def test_a_size_beyond_memory_is_refused_by_name_before_any_allocation(call, argument):
    with pytest.raises(ValueError) as refused:
        call()
    message = str(refused.value)
    assert message.startswith(f"{argument} asks for ") and "GiB" in message, message
    assert "of memory" in message, message


def test_ordinary_sizes_still_work():
    assert padding_mask(torch.tensor([2, 3])).tolist() == [[True, True, False], [True, True, True]]
    assert INDUCTION_TASK.eval_batch(4).tokens.shape[0] == 4
    assert AGREEMENT_TASK.eval_batch(4).tokens.shape[0] == 4
    cache = QuantizedCache(1, 1, 2, 8, max_len=64)
    assert cache.max_len == 64 and PagedCache(4, 16, 2, 8).block_size == 16


def test_battery8_helpers_name_their_own_argument():
    """Battery 8: SlidingWindowCache(window=10**10) was refused as 'max_len';
    attention_by_copies(digits=-1) rounded every share to 0.0; RelationsConfig(lr=inf) trained
    to garbage; random_buffer(seed=-1) met torch's generator."""
    import math

    from course_utils.bench.decode_step import random_buffer
    from course_utils.model.kv_cache import SlidingWindowCache
    from course_utils.tasks.two_relations import RelationsConfig, attention_by_copies

    with pytest.raises(ValueError, match=r"^window asks for .* GiB"):
        SlidingWindowCache(2, 1, 2, 8, window=10**10)
    assert SlidingWindowCache(2, 1, 2, 8, window=16).window == 16
    with pytest.raises(ValueError, match="digits must be"):
        attention_by_copies(None, None, digits=-1)
    for lr, error, words in ((math.inf, ValueError, "lr must be a finite number, got inf"),
                             (math.nan, ValueError, "lr must be a finite number, got nan"),
                             (0.0, ValueError, "lr must be a finite number > 0, got 0.0"),
                             (True, TypeError, "lr must be a real number, got bool True"),
                             ("0.1", TypeError, "lr must be a real number, got str '0.1'")):
        with pytest.raises(error) as refused:
            RelationsConfig(lr=lr)
        assert str(refused.value) == f"RelationsConfig.{words}"  # Class.field (battery 14)
    with pytest.raises(ValueError, match="seed"):
        random_buffer(64, seed=-1)
    assert random_buffer(64, seed=0).numel() == 16


# -- battery 9 ---------------------------------------------------------------------------------------

def test_dequantize_kv_still_reads_what_quantize_kv_makes():
    x = torch.randn(1, 2, 8, 4)
    for per in ("token", "channel"):
        for symmetric in (True, False):
            back = kv_cache.dequantize_kv(kv_cache.quantize_kv(x, per=per, symmetric=symmetric))
            assert back.shape == x.shape and (back - x).abs().max() < 0.1


# -- battery 11 --------------------------------------------------------------------------------------

TRILLION = 10**12


# -- item 2: sizes are refused before anything is allocated, naming the argument -----------------
def _sizes_cases():
    from course_utils.attention.shapes import cost_table
    from course_utils.bench.mha_speed import compare_on_device
    from course_utils.model.kv_cache import CatCache
    from course_utils.tasks.synthetic import InductionTask
    from course_utils.tasks.two_relations import attention_by_copies
    from course_utils.tasks.worked_example import round_half_up

    def compare(**kwargs):
        return lambda: compare_on_device("cpu", **{"batch": 1, "seq_len": 4, "d_model": 8, "num_heads": 2,
                                                   "dtype": torch.float32, "repeats": 1, **kwargs})

    cases = [
        ("cost_table batch", lambda: cost_table(TRILLION, 16, 64, [1, 2, 4]), ValueError, ["batch", "GiB"]),
        ("cost_table seq_len", lambda: cost_table(2, TRILLION, 64, [1, 2, 4]), ValueError,
         ["seq_len", "GiB"]),
        ("cost_table d_model", lambda: cost_table(2, 16, 2**40, [1, 2, 4]), ValueError, ["d_model", "GiB"]),
        ("cost_table scores beyond memory", lambda: cost_table(2, 10**6, 64, [1, 2]), ValueError,
         ["seq_len", "GiB", "more than this machine"]),
        ("compare device 3", lambda: compare_on_device(3), TypeError,
         ["device", "int"]),
        ("compare device bogus", lambda: compare_on_device("bogus"), ValueError, ["device", "bogus"]),
        ("compare device empty", lambda: compare_on_device(""), ValueError, ["device"]),
        ("compare device None", lambda: compare_on_device(None), TypeError, ["device", "NoneType"]),
        ("compare device meta", lambda: compare_on_device("meta"), ValueError, ["device", "meta"]),
        ("CatCache num_layers", lambda: CatCache(TRILLION), ValueError, ["num_layers", "GiB"]),
        ("InductionTask vocab_size", lambda: InductionTask(vocab_size=TRILLION), ValueError,
         ["vocab_size", "GiB"]),
        ("InductionTask seq_len", lambda: InductionTask(seq_len=TRILLION), ValueError, ["seq_len", "GiB"]),
        ("round_half_up decimals", lambda: round_half_up(0.5, decimals=TRILLION), ValueError,
         ["decimals", "15", str(TRILLION)]),
        ("round_half_up decimals negative", lambda: round_half_up(0.5, decimals=-TRILLION), ValueError,
         ["decimals"]),
        ("attention_by_copies digits", lambda: attention_by_copies(None, None, digits=TRILLION), ValueError,
         ["digits", "15"]),
    ]
    for name in ("batch", "seq_len", "d_model"):
        cases += [(f"compare {name} {value!r}", compare(**{name: value}), error, [name])
                  for value, error in ((-1, ValueError), (0, ValueError), (2.5, TypeError), ("3", TypeError),
                                       (None, TypeError), (True, TypeError))]
        cases.append((f"compare {name} huge", compare(**{name: TRILLION}), ValueError, ["GiB"]))
    return cases


SIZES = _sizes_cases()


@pytest.mark.parametrize("label, call, error, words", SIZES, ids=[c[0] for c in SIZES])
def test_sizes_are_refused_before_allocating(label, call, error, words):
    refused(call, error, words)


# -- battery 14 (fix44a) -----------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "field"), [
    ({"codes": None}, "codes"), ({"scale": [1.0]}, "scale"), ({"zero": torch.zeros(0)}, "codes"),
])
def test_quantized_is_checked_when_built_and_by_dequantize_kv(fields: dict, field: str) -> None:
    """Quantized checks its fields when built (battery 16a); one made by _replace (tuple
    machinery, no check) is still refused by dequantize_kv, which names its bad field."""
    from course_utils.model.kv_cache import Quantized, dequantize_kv, quantize_kv

    good = quantize_kv(torch.randn(2, 4))
    with pytest.raises((TypeError, ValueError), match=re.escape(f"Quantized.{field}")):
        Quantized(**{**good._asdict(), **fields})
    with pytest.raises((TypeError, ValueError), match=re.escape(f"q.{field}")):
        dequantize_kv(good._replace(**fields))


# -- battery 14 (fix44c) -----------------------------------------------------------------------------

def test_paged_cache_stores_nan_as_documented():
    from course_utils.model.paged_cache import PagedCache

    cache = PagedCache(4, 2, 1, 4)
    cache.add_sequence("a")
    cache.append("a", torch.full((1, 1, 4), float("nan")), torch.randn(1, 1, 4))
    assert "NaN and infinity\n        are stored as given" in PagedCache.append.__doc__
    assert cache.lengths["a"] == 1


# -- battery 15 (fix45d) -----------------------------------------------------------------------------

# -- 7. dequantize_kv: a scale that quantize_kv never makes ----------------------------------------
@pytest.mark.parametrize(("bad", "words"), [(float("nan"), "nan"), (float("inf"), "inf"),
                                            (0.0, "above 0"), (-1.0, "above 0")])
def test_dequantize_kv_refuses_a_non_finite_or_non_positive_scale(bad, words):
    from course_utils.model.kv_cache import dequantize_kv, quantize_kv
    q = quantize_kv(torch.randn(2, 3, 4))
    scale = q.scale.clone()
    scale[0, 1, 0] = bad
    with pytest.raises(ValueError, match=rf"q\.scale.*{words}"):
        dequantize_kv(q._replace(scale=scale))  # _replace: no check when built


def test_dequantize_kv_refuses_a_nan_zero_point_and_meta_fields():
    from course_utils.model.kv_cache import dequantize_kv, quantize_kv
    q = quantize_kv(torch.randn(2, 3, 4), symmetric=False)
    zero = q.zero.clone()
    zero[1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"q\.zero.*nan"):
        dequantize_kv(q._replace(zero=zero))
    with pytest.raises(ValueError, match=r"q\.scale.*meta"):
        dequantize_kv(q._replace(scale=q.scale.to("meta")))


# -- battery 16 (fix46r) -----------------------------------------------------------------------------

# -- Quantized: a NamedTuple that checks its fields (silent) ----------------------------------------
def _codes(dtype=torch.int8, shape=(2, 3)):
    return torch.zeros(shape, dtype=dtype)


_SCALE = torch.ones(2, 1)


@pytest.mark.parametrize("codes, scale, zero, error, words", [
    (_codes().to("meta"), _SCALE, None, ValueError, ["Quantized.codes", "meta"]),
    (torch.zeros(2, 3), _SCALE, None, TypeError, ["Quantized.codes", "torch.int8", "float32"]),
    (_codes(torch.bool), _SCALE, None, TypeError, ["Quantized.codes", "torch.bool"]),
    (_codes(shape=(1, 2, 3)), _SCALE, None, ValueError, ["Quantized.scale", "fit the codes", "(1, 2, 3)"]),
    (_codes(shape=(3,)), _SCALE, None, ValueError, ["Quantized.codes", "2-D", "(3)"]),
    (None, _SCALE, None, TypeError, ["Quantized.codes", "NoneType"]),
    ("tensor", _SCALE, None, TypeError, ["Quantized.codes", "str"]),
    (torch.full((2, 3), -128, dtype=torch.int8), _SCALE, None, ValueError, ["Quantized.codes", "-128"]),
    (_codes(), torch.empty(2, 1, device="meta"), None, ValueError, ["Quantized.scale", "meta"]),
    (_codes(), torch.full((2, 1), float("nan")), None, ValueError, ["Quantized.scale", "nan"]),
    (_codes(), torch.tensor([[1.0], [float("inf")]]), None, ValueError, ["Quantized.scale", "inf"]),
    (_codes(), torch.ones(2, 1, dtype=torch.long), None, TypeError, ["Quantized.scale", "int64"]),
    (_codes(), _SCALE.numpy(), None, TypeError, ["Quantized.scale", "ndarray"]),
    (_codes(), torch.ones(1, 2, 1), None, ValueError, ["Quantized.scale", "(1, 2, 1)"]),
    (_codes(), torch.ones(1), None, ValueError, ["Quantized.scale", "(1)"]),
    (_codes(), None, None, TypeError, ["Quantized.scale", "NoneType"]),
    (_codes(), -_SCALE, None, ValueError, ["Quantized.scale", "above 0", "-1.0"]),
    (_codes(torch.uint8), _SCALE, object(), TypeError, ["Quantized.zero", "object"]),
    (_codes(torch.uint8), _SCALE, "x", TypeError, ["Quantized.zero", "'x'"]),
])
def test_quantized_checks_its_fields_when_built(codes, scale, zero, error, words):
    from course_utils.model.kv_cache import Quantized

    with pytest.raises(error) as info:
        Quantized(codes, scale, zero)
    assert all(w in str(info.value) for w in words), str(info.value)


def test_quantized_from_quantize_kv_still_round_trips():
    from course_utils.model.kv_cache import Quantized, dequantize_kv, quantize_kv

    x = torch.randn(2, 5, 4)
    for symmetric in (True, False):
        q = quantize_kv(x, "token", symmetric=symmetric)
        codes, scale, zero = q  # still a tuple
        assert isinstance(q, Quantized) and (zero is None) == symmetric
        assert torch.allclose(dequantize_kv(Quantized(codes, scale, zero)), x, atol=0.05)


# -- battery 17 (fix47r) -----------------------------------------------------------------------------

# -- O6: the caches' memory refusals name the argument that is too large -----------------------------
def _caches():
    from course_utils.model.kv_cache import PreallocatedCache, QuantizedCache
    from course_utils.model.paged_cache import PagedCache

    sizes = {"num_layers": 2, "batch": 1, "num_kv_heads": 2, "d_head": 32}
    return {
        "QuantizedCache": (lambda **kw: QuantizedCache(**{**sizes, "max_len": 8, **kw}),
                           ["batch", "num_kv_heads", "d_head", "group", "max_len"]),
        "PreallocatedCache": (lambda **kw: PreallocatedCache(**{**sizes, "max_len": 8, **kw}),
                              ["batch", "num_kv_heads", "d_head", "max_len"]),
        "PagedCache": (lambda **kw: PagedCache(**{"num_blocks": 4, "block_size": 16, "num_kv_heads": 2,
                                                  "d_head": 32, **kw}),
                       ["num_blocks", "block_size", "num_kv_heads", "d_head"]),
    }


@pytest.mark.parametrize("cache, argument", [(c, a) for c, (_, args) in _caches().items() for a in args])
def test_cache_memory_refusal_names_the_argument_too_large(cache, argument):
    make, _ = _caches()[cache]
    with pytest.raises(ValueError) as err:
        make(**{argument: TRILLION})
    message = str(err.value)
    assert message.startswith(f"{argument} asks for") and f"{argument}={TRILLION:,}" in message
    assert "GiB" in message


# -- battery 18 (fix48rm) ----------------------------------------------------------------------------

_raises = raises_naming  # call() raises error naming every one of words


# -- g24: QuantizedCache's group fits in max_len ------------------------------------------------------
@pytest.mark.parametrize("max_len, group", [(10, 32), (10, 11), (1, 2), (31, 32)])
def test_quantized_cache_refuses_a_group_longer_than_max_len(max_len, group):
    from course_utils.model.kv_cache import QuantizedCache

    options = {} if group == 32 else {"group": group}  # 32 is the default
    _raises(ValueError, ["group", f"max_len={max_len}", f"group={group}", "never fill"],
            lambda: QuantizedCache(1, 1, 2, 8, max_len, **options))


@pytest.mark.parametrize("max_len, group", [(10, 10), (32, 32), (10, 8)])
def test_quantized_cache_takes_a_group_up_to_max_len(max_len, group):
    from course_utils.model.kv_cache import QuantizedCache

    cache = QuantizedCache(1, 1, 2, 8, max_len, group=group)
    x = torch.randn(1, 2, max_len, 8, generator=torch.Generator().manual_seed(0))
    k, _ = cache.append(0, x, x)
    assert not torch.equal(k[:, :, :group], x[:, :, :group])  # the first group was quantized


# -- battery 19 (fix49rm) ----------------------------------------------------------------------------

TOKEN = torch.zeros(1, 1, dtype=torch.long)


def _model() -> TinyTransformer:
    return tiny_model(max_len=8)  # vocabulary 16, d_model 16, 2 heads, 2 layers; seed 0, eval


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


# -- battery 21 (fix51q) -----------------------------------------------------------------------------

# -- 6: QuantizedCache refuses keys and values of another dtype, as the other caches do ----------
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_quantized_cache_refuses_another_dtype(dtype: torch.dtype) -> None:
    cache = QuantizedCache(2, 2, 4, 4, 8, group=4)
    k = torch.randn(2, 4, 1, 4).to(dtype)
    raises_naming(TypeError, ["k_new", str(dtype), "torch.float32"], lambda: cache.append(0, k, k))
    assert cache.length == 0 and cache._next_layer == 0  # nothing written: the next append goes on
    assert cache.append(0, k.float(), k.float())[0].shape == (2, 4, 1, 4)
    raises_naming(TypeError, ["k_new", str(dtype)],
                  lambda: QuantizedCache.from_layers([(k, k), (k, k)], max_len=8, group=4))


# -- battery 22 (fix52q) -----------------------------------------------------------------------------

CFG = one_layer_config()


# -- 6: repeatable_step refuses to rewind a cache stepped elsewhere -------------------------------
@pytest.mark.parametrize("kind", ["cat", "preallocated", "window", "quantized"])
def test_repeatable_step_refuses_a_cache_stepped_elsewhere(kind: str) -> None:
    from course_utils.model import kv_cache as K

    torch.manual_seed(0)
    model = TinyTransformer(CFG).eval()
    token = torch.zeros(2, 1, dtype=torch.long)
    with torch.no_grad():
        _, prefix = model.forward_with_cache(torch.zeros(2, 3, dtype=torch.long))
    layers = list(prefix.layers)
    cache = {"cat": lambda: K.CatCache.from_layers(layers),
             "preallocated": lambda: K.PreallocatedCache.from_layers(layers, max_len=8),
             "window": lambda: K.SlidingWindowCache.from_layers(layers, window=4),
             "quantized": lambda: K.QuantizedCache.from_layers(layers, max_len=8, group=4)}[kind]()
    step = K.repeatable_step(model, cache, token)
    step()  # its own steps leave the cache as it was: no refusal
    with torch.no_grad():
        K.decode_step(model, token, cache)  # a step of someone else's
    raises_naming(ValueError, ["cache", "length 3 then, 4 now"], step)
    assert cache.length == 4  # the other step's token was kept, not rewound


# -- battery 24 (fix54a) -----------------------------------------------------------------------------

# -- S1: an empty batch (B = 0) or no head came back as an empty result without a word ----------------
def _mha():
    from course_utils.attention.mha import MultiHeadAttention

    torch.manual_seed(0)
    return MultiHeadAttention(16, 4)


def _paged_attend(q: torch.Tensor) -> torch.Tensor:
    from course_utils.model.paged_cache import PagedCache

    cache = PagedCache(num_blocks=4, block_size=2, num_kv_heads=1, d_head=4)
    cache.add_sequence("s")
    cache.append("s", torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    return cache.attend("s", q)


def _empty_cases():
    from course_utils.attention.gqa import GroupedQueryAttention
    from course_utils.attention.shapes import measured_macs
    from course_utils.bench.mha_speed import forward_callables, lesson_implementations
    from course_utils.model.kv_cache import quantize_kv
    from course_utils.model.transformer import Block, ModelConfig

    block = Block(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))
    return [
        ("MultiHeadAttention", lambda x: _mha()(x), (0, 5, 16), "query"),
        ("GroupedQueryAttention", lambda x: GroupedQueryAttention(16, 4, 2)(x), (0, 5, 16), "query"),
        ("merge_heads", lambda x: _mha().merge_heads(x), (0, 4, 5, 4), "heads"),
        ("measured_macs", lambda x: measured_macs(_mha(), x), (0, 5, 16), "x"),
        ("Block", lambda x: block(x), (0, 5, 16), "x"),
        ("forward_callables", lambda x: forward_callables(lesson_implementations(16, 4), x), (0, 5, 16), "x"),
        ("quantize_kv batch", quantize_kv, (0, 2, 6, 8), "x"),
        ("quantize_kv heads", quantize_kv, (2, 0, 6, 8), "x"),
        ("PagedCache.attend heads", _paged_attend, (0, 1, 4), "q"),
    ]


@pytest.mark.parametrize("index", range(9))
def test_an_empty_batch_or_no_head_is_refused_by_name(index: int) -> None:
    label, call, shape, name = _empty_cases()[index]
    empty = torch.randn(*shape)
    raises_naming(ValueError, [f"{name} must hold at least one", str(shape)], lambda: call(empty))
    assert call(torch.randn(*(size or 2 for size in shape))) is not None  # the control


def test_an_empty_sequence_is_still_an_empty_output() -> None:
    """T = 0 stays what MultiHeadAttention's docstring says (Tq = Tk = 0 gives an empty output)."""
    assert _mha()(torch.randn(2, 0, 16))[0].shape == (2, 0, 16)


# -- O3: Quantized(uint8 codes, scale, zero=None) never named zero, the field left out ---------------
@pytest.mark.parametrize("symmetric, words", [
    (False, ["Quantized.codes", "torch.uint8", "Quantized.zero is None", "zero="]),  # zero left out
    (True, ["Quantized.codes", "torch.int8", "Quantized.zero is a tensor", "zero=None"]),  # zero added
])
def test_quantized_names_zero_when_the_codes_are_the_other_kind(symmetric: bool, words: list[str]) -> None:
    from course_utils.model.kv_cache import Quantized, quantize_kv

    q = quantize_kv(torch.randn(1, 2, 3, 4), symmetric=symmetric)
    assert Quantized(*q) == q  # the control
    zero = torch.zeros_like(q.scale) if symmetric else None
    raises_naming(TypeError, words, lambda: Quantized(q.codes, q.scale, zero))


# -- battery 26 (fix56) ------------------------------------------------------------------------------

def test_a_quantized_record_of_no_numbers_is_refused() -> None:
    from course_utils.model.kv_cache import Quantized

    codes = torch.zeros(1, 2, 4, 8, dtype=torch.int8)[..., :0]
    raises_naming(ValueError, ["Quantized.codes", "at least one token and one channel", "(1, 2, 4, 0)"],
                  lambda: Quantized(codes, torch.ones(1, 2, 4, 1), None))


# -- battery 28 (fix58) ------------------------------------------------------------------------------

def test_a_value_whose_repr_raises_keeps_the_librarys_message() -> None:
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.attention.shapes import trace_shapes
    from course_utils.model.paged_cache import PagedCache

    trace = trace_shapes(MultiHeadAttention(8, 2), torch.randn(1, 3, 8))
    for call in (lambda: trace.shape(BadRepr()), lambda: PagedCache(4, 2, 1, 4).free_sequence(BadRepr())):
        with pytest.raises(Exception) as info:
            call()
        assert "BadRepr whose repr raised RuntimeError" in str(info.value), info.value


# -- battery 28 (library) ----------------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["cat", "cat window", "preallocated", "sliding"])
def test_the_decoding_caches_filled_with_gradients_on_can_be_deep_copied(kind: str) -> None:
    import copy

    from course_utils.model.kv_cache import CatCache, PreallocatedCache, SlidingWindowCache, decode_step

    model = train_mode_tiny_model().eval()
    cache = {"cat": lambda: CatCache(2), "cat window": lambda: CatCache(2, window=2),
             "preallocated": lambda: PreallocatedCache(2, 2, 4, 4, 8),
             "sliding": lambda: SlidingWindowCache(2, 2, 4, 4, 3)}[kind]()
    tokens = torch.randint(0, 12, (2, 3))
    for t in range(3):
        decode_step(model, tokens[:, t:t + 1], cache)
    copied = copy.deepcopy(cache)
    assert copied.length == 3
    with torch.no_grad():
        torch.testing.assert_close(decode_step(model, tokens[:, :1], copied),
                                   decode_step(model, tokens[:, :1], cache))


# -- battery 29 (library) ----------------------------------------------------------------------------

def test_quantized_bytes_huge_names_num_kv_heads():
    from course_utils.model.kv_cache import quantized_bytes_per_token

    with pytest.raises(ValueError, match="num_kv_heads"):
        quantized_bytes_per_token(BEYOND_FLOAT, 4)
    with pytest.raises(ValueError, match="d_head"):
        quantized_bytes_per_token(4, BEYOND_FLOAT)


def test_catcache_first_step_does_not_keep_the_callers_tensor():
    from course_utils.model.kv_cache import CatCache

    cache = CatCache(1)
    k, v = torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4)
    k_out, v_out = cache.append(0, k, v)
    assert k_out is not k and v_out is not v
    k.mul_(5)
    v.mul_(5)
    k2, v2 = cache.append(0, torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))
    assert float(k2.max()) == 1.0 and float(v2.max()) == 1.0


# -- battery 30 (dev) --------------------------------------------------------------------------------

class Int(int):
    def __repr__(self) -> str:
        raise RuntimeError("repr exploded")

    __str__ = __repr__


def _calls():
    from course_utils.attention.masks import causal_mask, padding_mask
    from course_utils.attention.shapes import dimension_report
    from course_utils.model.kv_cache import PreallocatedCache, SlidingWindowCache
    from course_utils.model.paged_cache import PagedCache
    from course_utils.tasks.synthetic import InductionTask

    return {
        "padding_mask": lambda: padding_mask([3, 5], Int(6)),
        "PreallocatedCache": lambda: PreallocatedCache(2, 1, 2, 8, Int(16)),
        "SlidingWindowCache": lambda: SlidingWindowCache(1, 1, 2, 8, Int(4)),
        "PagedCache": lambda: PagedCache(8, 4, 2, Int(8)),
        "InductionTask.sample": lambda: InductionTask().sample(Int(4), torch.Generator().manual_seed(0)),
        "causal_mask": lambda: causal_mask(Int(3), Int(4)),
        "dimension_report": lambda: dimension_report(Int(2), 8, 16, 4),
    }


@pytest.mark.parametrize("label", list(_calls()))
def test_a_valid_int_subclass_is_used_as_a_plain_int(label):
    result = _calls()[label]()
    if label == "dimension_report":
        assert isinstance(result, str) and "Invalid" not in result, result


# -- battery 30 (e) ----------------------------------------------------------------------------------

def test_paged_append_interrupted_leaves_sequence_as_it_was():
    import pytest

    from course_utils.model.paged_cache import PagedCache

    c = PagedCache(8, 4, 2, 8)
    c.add_sequence("s")
    g = torch.Generator().manual_seed(0)
    c.append("s", torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g))
    before = (list(c.tables["s"]), list(c.free), list(c.refs), c.lengths["s"])
    take = c._take_block

    def interrupted():
        raise KeyboardInterrupt

    c._take_block = interrupted  # the 4th new token needs a fresh block: interrupted there
    k, v = torch.randn(2, 3, 8, generator=g), torch.randn(2, 3, 8, generator=g)
    with pytest.raises(KeyboardInterrupt):
        c.append("s", k, v)
    assert (list(c.tables["s"]), list(c.free), list(c.refs), c.lengths["s"]) == before
    c._take_block = take
    c.append("s", k, v)
    assert c.lengths["s"] == 6
