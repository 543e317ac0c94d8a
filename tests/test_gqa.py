"""Grouped-query attention: equal to PyTorch's enable_gqa, no K/V copies, conversion from
MHA, the GQA tiny model and its KV cache, the decode benchmark's bookkeeping."""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

import course_utils
from course_utils import GroupedQueryAttention, MultiHeadAttention, grouped_query_attention
from course_utils.attention.gqa import PUBLISHED_CONFIGS, kv_cache_bytes
from course_utils.bench import main as bench_main
from course_utils.bench.gqa_speed import bench_decode, make_kv_caches, stage_bandwidth, stage_times
from course_utils.model.checkpoint import load_checkpoint, save_checkpoint
from course_utils.model.transformer import KVCache, ModelConfig, TinyTransformer, convert_model


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


SHAPES = [(2, 8, 2, 5, 7, 4), (1, 16, 4, 1, 33, 8), (2, 4, 4, 3, 3, 4), (1, 6, 1, 6, 6, 8),
          (3, 6, 3, 4, 9, 2)]


@pytest.mark.parametrize("B,h,g,Tq,Tk,dk", SHAPES)
def test_matches_torch_enable_gqa(B, h, g, Tq, Tk, dk):
    q, k, v = _randn(B, h, Tq, dk, seed=1), _randn(B, g, Tk, dk, seed=2), _randn(B, g, Tk, dk, seed=3)
    out, weights = grouped_query_attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    assert weights.shape == (B, h, Tq, Tk)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, h, Tq, dtype=torch.float64))


@pytest.mark.parametrize("B,h,g,Tq,Tk,dk", [s for s in SHAPES if s[3] <= s[4]])
def test_masks_follow_the_course_convention(B, h, g, Tq, Tk, dk):
    q, k, v = _randn(B, h, Tq, dk, seed=4), _randn(B, g, Tk, dk, seed=5), _randn(B, g, Tk, dk, seed=6)
    allowed = torch.rand(B, h, Tq, Tk, generator=torch.Generator().manual_seed(7)) > 0.3
    allowed[..., 0] = True  # every query keeps a key
    out, weights = grouped_query_attention(q, k, v, mask=allowed)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, enable_gqa=True)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    assert (weights[~allowed] == 0).all()
    causal_out, _ = grouped_query_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(
        causal_out, F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))


def test_a_fully_blocked_query_gets_zeros():
    q, k, v = _randn(1, 4, 2, 3, seed=8), _randn(1, 2, 3, 3, seed=9), _randn(1, 2, 3, 3, seed=10)
    allowed = torch.ones(2, 3, dtype=torch.bool)
    allowed[1] = False
    out, weights = grouped_query_attention(q, k, v, mask=allowed)
    assert torch.isfinite(out).all() and (out[:, :, 1] == 0).all() and (weights[:, :, 1] == 0).all()


def test_query_head_i_reads_kv_head_i_over_group_size():
    h, g = 6, 2
    q, k, v = _randn(1, h, 2, 4, seed=11), _randn(1, g, 5, 4, seed=12), _randn(1, g, 5, 4, seed=13)
    out, _ = grouped_query_attention(q, k, v)
    for i in range(h):
        j = i // (h // g)
        alone = F.scaled_dot_product_attention(q[:, i:i + 1], k[:, j:j + 1], v[:, j:j + 1])
        torch.testing.assert_close(out[:, i:i + 1], alone)


class _OpRecorder(TorchFunctionMode):
    """Records every torch call, and the calls that received a tensor on a watched storage."""

    def __init__(self, *watched):
        super().__init__()
        self.names, self.on_watched = [], []
        self.watched = {t.untyped_storage().data_ptr() for t in watched}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", str(func))
        self.names.append(name)
        tensors = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        if any(t.untyped_storage().data_ptr() in self.watched for t in tensors):
            self.on_watched.append(name)
        return func(*args, **(kwargs or {}))


def test_kv_is_never_copied_in_the_decode_path():
    q, k, v = torch.randn(1, 16, 1, 8), torch.randn(1, 4, 64, 8), torch.randn(1, 4, 64, 8)
    with _OpRecorder(k, v) as rec:
        out, _ = grouped_query_attention(q, k, v)
    banned = {"repeat_interleave", "repeat", "expand", "contiguous", "clone", "cat", "copy_", "to"}
    assert not banned & set(rec.on_watched), rec.on_watched  # K and V: only views and matmuls
    assert not {"repeat_interleave", "repeat", "expand", "cat"} & set(rec.names), rec.names
    assert "bmm" in rec.on_watched  # the matmuls read the cache's own storage
    # the matmuls read the cache itself: K^T and V are views of the caller's storage
    keys = k.reshape(4, 64, 8)
    assert keys.data_ptr() == k.data_ptr() and keys._base is k
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, enable_gqa=True))


@pytest.mark.parametrize(
    "args,error,words",
    [
        ((torch.randn(1, 6, 2, 4), torch.randn(1, 4, 3, 4), torch.randn(1, 4, 3, 4)), ValueError,
         ["4 key/value heads", "6 query heads", "[1, 2, 3, 6]"]),
        ((torch.randn(1, 4, 2, 4), torch.randn(1, 0, 3, 4), torch.randn(1, 0, 3, 4)), ValueError,
         ["0 key/value heads"]),
        ((torch.randn(1, 4, 2, 4), torch.randn(1, 2, 3, 5), torch.randn(1, 2, 3, 5)), ValueError,
         ["same head width dk", "(1, 4, 2, 4)", "(1, 2, 3, 5)"]),
        ((torch.randn(1, 4, 2, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 4, 4)), ValueError,
         ["same shape"]),
        ((torch.randn(4, 2, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)), ValueError,
         ["4-D", "(4, 2, 4)"]),
        (("q", torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)), TypeError, ["q must be a torch.Tensor"]),
    ],
)
def test_bad_inputs_name_what_was_expected_and_what_came(args, error, words):
    with pytest.raises(error) as info:
        grouped_query_attention(*args)
    for word in words:
        assert word in str(info.value)


def test_bad_masks_are_refused():
    q, k = torch.randn(1, 4, 2, 4), torch.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match="bool"):
        grouped_query_attention(q, k, k, mask=torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"\(Tq, Tk\) = \(2, 3\)"):
        grouped_query_attention(q, k, k, mask=torch.ones(3, 2, dtype=torch.bool))


# -- the module ----------------------------------------------------------------------------
@pytest.mark.parametrize("g", [4, 2, 1])
def test_module_shapes_and_parameters(g):
    gqa = GroupedQueryAttention(32, 4, g)
    assert gqa.k_proj.weight.shape == (g * 8, 32) and gqa.v_proj.weight.shape == (g * 8, 32)
    x = torch.randn(2, 5, 32)
    out, weights = gqa(x, is_causal=True, need_weights=True)
    assert out.shape == (2, 5, 32) and weights.shape == (2, 4, 5, 5)
    assert gqa(x)[1] is None


@pytest.mark.parametrize("method", ["mean", "first"])
def test_from_multi_head_with_all_heads_reproduces_mha(method):
    torch.manual_seed(0)
    mha = MultiHeadAttention(16, 4).double().eval()
    x = _randn(2, 6, 16, seed=14)
    gqa = GroupedQueryAttention.from_multi_head(mha, 4, method)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    for kwargs in ({}, {"is_causal": True}, {"key_padding_mask": padding}):
        torch.testing.assert_close(gqa(x, **kwargs)[0], mha(x, **kwargs)[0], rtol=1e-12, atol=1e-12)


def test_conversion_methods_build_the_group_projection_as_described():
    torch.manual_seed(1)
    mha = MultiHeadAttention(16, 4)
    d, dk = 16, 4
    w_k = mha.in_proj.weight[d:2 * d].detach()  # rows i*dk:(i+1)*dk = head i
    mean = GroupedQueryAttention.from_multi_head(mha, 2, "mean")
    first = GroupedQueryAttention.from_multi_head(mha, 2, "first")
    torch.testing.assert_close(mean.k_proj.weight[:dk], (w_k[:dk] + w_k[dk:2 * dk]) / 2)
    torch.testing.assert_close(mean.k_proj.weight[dk:], (w_k[2 * dk:3 * dk] + w_k[3 * dk:]) / 2)
    torch.testing.assert_close(first.k_proj.weight, torch.cat([w_k[:dk], w_k[2 * dk:3 * dk]]))
    gen = torch.Generator().manual_seed(0)
    random = GroupedQueryAttention.from_multi_head(mha, 2, "random", generator=gen)
    assert not torch.allclose(random.k_proj.weight, mean.k_proj.weight)
    torch.testing.assert_close(random.q_proj.weight, mha.in_proj.weight[:d])
    torch.testing.assert_close(random.out_proj.weight, mha.out_proj.weight)


@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: GroupedQueryAttention(16, 4, 3), ValueError, ["num_kv_heads", "[1, 2, 4]", "3"]),
        (lambda: GroupedQueryAttention(16, 4, 0), ValueError, ["num_kv_heads", "positive", "0"]),
        (lambda: GroupedQueryAttention(16, 4, 2.0), TypeError, ["num_kv_heads", "int", "float"]),
        (lambda: GroupedQueryAttention(15, 4, 2), ValueError, ["d_model = 15", "num_heads = 4"]),
        (lambda: GroupedQueryAttention.from_multi_head(MultiHeadAttention(16, 4), 2, "average"),
         ValueError, ["method", "'mean', 'first' or 'random'", "'average'"]),
        (lambda: GroupedQueryAttention.from_multi_head(torch.nn.Linear(2, 2), 2), TypeError,
         ["MultiHeadAttention", "Linear"]),
        (lambda: GroupedQueryAttention(16, 4, 2)(torch.randn(5, 16)), ValueError, ["3-D", "(5, 16)"]),
        (lambda: GroupedQueryAttention(16, 4, 2)(torch.randn(2, 5, 16, dtype=torch.float64)), TypeError,
         ["query", "float64", "float32"]),
        (lambda: GroupedQueryAttention(16, 4, 2)(torch.randn(2, 5, 16), torch.randn(3, 5, 16)), ValueError,
         ["batch size", "(2, 5, 16)", "(3, 5, 16)"]),
        (lambda: GroupedQueryAttention(16, 4, 2)(torch.randn(2, 5, 16), is_causal="yes"), TypeError,
         ["is_causal", "str"]),
    ],
)
def test_module_bad_inputs(call, error, words):
    with pytest.raises(error) as info:
        call()
    for word in words:
        assert word in str(info.value)


def test_exported_from_the_package():
    assert course_utils.grouped_query_attention is grouped_query_attention
    assert course_utils.GroupedQueryAttention is GroupedQueryAttention
    assert {"grouped_query_attention", "GroupedQueryAttention"} <= set(course_utils.__all__)


# -- the tiny model with g K/V heads ------------------------------------------------------
def test_config_keeps_old_dicts_and_refuses_bad_kv_heads():
    old = {"vocab_size": 10, "max_len": 8, "d_model": 16, "num_heads": 4}
    config = ModelConfig.from_dict(old)
    assert config.num_kv_heads == 4 and "num_kv_heads" not in config.to_dict()
    grouped = ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4, num_kv_heads=2)
    assert grouped.to_dict()["num_kv_heads"] == 2
    assert ModelConfig.from_dict(json.loads(json.dumps(grouped.to_dict()))) == grouped
    with pytest.raises(ValueError, match=r"num_kv_heads .* dividing num_heads=4 .* got 3"):
        ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4, num_kv_heads=3)


@pytest.mark.parametrize("name", ["induction", "agreement"])
def test_shipped_checkpoints_load_and_save_byte_for_byte(name, tmp_path):
    from course_utils.model.checkpoint import checkpoint_paths

    model, meta = load_checkpoint(name)
    assert model.config.num_kv_heads == model.config.num_heads
    save_checkpoint(model, tmp_path / name, task=meta["task"], metrics=meta["metrics"],
                    command=meta["command"], training=meta["training"])
    assert (tmp_path / f"{name}.safetensors").read_bytes() == checkpoint_paths(name)[0].read_bytes()


@pytest.mark.parametrize("g", [1, 2])
def test_gqa_model_cache_holds_g_heads_and_matches_full_forward(g, tmp_path):
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=12, max_len=16, d_model=32, num_heads=4, num_kv_heads=g,
                         num_layers=2, mlp=True)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(0, 12, (3, 10))
    full, _ = model(tokens)
    logits, cache = model.forward_with_cache(tokens[:, :4])
    steps = [logits]
    for t in range(4, 10):
        logits, cache = model.forward_with_cache(tokens[:, t:t + 1], cache)
        steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-5, atol=1e-5)
    assert isinstance(cache, KVCache) and cache.layers[0][0].shape == (3, g, 10, 8)
    assert cache.num_bytes() == kv_cache_bytes(2, 3, g, 8, 10, 4)
    save_checkpoint(model, tmp_path / "gqa", task="toy", metrics={}, command="test")
    loaded, _ = load_checkpoint(tmp_path / "gqa")
    torch.testing.assert_close(loaded(tokens)[0], full, rtol=0, atol=0)


def test_convert_model_keeps_everything_but_the_kv_projections():
    model, _ = load_checkpoint("induction")
    same = convert_model(model, 4, "mean")
    tokens = torch.randint(1, 64, (2, 12), generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(same(tokens)[0], model(tokens)[0], rtol=1e-5, atol=1e-5)
    mqa = convert_model(model, 1, "first")
    assert mqa.config.num_kv_heads == 1 and mqa.blocks[0].attn.k_proj.weight.shape == (16, 64)
    torch.testing.assert_close(mqa.token_embedding.weight, model.token_embedding.weight)
    assert model.config.num_kv_heads == 4  # the original is untouched
    with pytest.raises(ValueError, match="method"):
        convert_model(model, 2, "median")


# -- memory formula and the benchmark -----------------------------------------------------
def test_kv_cache_formula_and_published_configs():
    assert kv_cache_bytes(32, 1, 32, 128, 4096, 2) == 2 * 2**30  # Llama-2-7B: 2 GiB at 4k
    assert kv_cache_bytes(32, 1, 8, 128, 4096, 2) == 2**29  # Llama-3-8B: a quarter
    names = {c.name.split(" ")[0]: c for c in PUBLISHED_CONFIGS}
    assert (names["Llama-3-70B"].num_layers, names["Llama-3-70B"].num_kv_heads) == (80, 8)
    assert all(c.source.startswith("huggingface.co/meta-llama/") for c in PUBLISHED_CONFIGS)
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(1, 1, 1, 1, 0)


def test_bench_decode_bookkeeping_on_a_small_case():
    result = bench_decode(8, 16, 64, 2, groups=(8, 2, 1), repeats=2, warmup=1, copy_mib=1)
    assert [r.num_kv_heads for r in result.rows] == [8, 2, 1]
    assert result.row(2).cache_bytes == 2 * 2 * 1 * 2 * 64 * 16 * 4
    assert all(len(s) == 2 for r in result.rows for s in r.samples_s.values())
    assert result.speedup(8) == pytest.approx(1.0)
    text = result.format()
    assert "speed-up" in text and "copy bandwidth" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert result.allocator.startswith("allocator: ") and result.allocator in text
    with pytest.raises(ValueError, match="groups"):
        bench_decode(8, 16, 64, 2, groups=(2, 1))


def test_bench_decode_flags_a_noisy_run():
    result = bench_decode(8, 16, 64, 2, groups=(8, 2), repeats=3, warmup=0, copy_mib=1)
    changed = {8: [1.0, 3.0, 3.0],  # two slow repeats: median 3x the best
               2: [0.1, 0.1, 0.1]}  # speed-ups 10-30x, the ideal is 4x
    result = dataclasses.replace(result, rows=[  # a frozen record: a changed copy, checked again
        dataclasses.replace(r, samples_s={**r.samples_s, "course": changed[r.num_kv_heads]})
        for r in result.rows])
    warnings = result.noise_warnings()
    assert any(w.startswith("check: course beats the ideal h/g at g=[2]") for w in warnings)
    assert any("median course step took 3.0x the best" in w for w in warnings)
    assert all(w in result.format().replace("\n    ", " ") for w in warnings)


def test_bench_decode_table_shows_only_the_methods_measured():
    result = bench_decode(8, 16, 64, 2, groups=(8, 2), repeats=1, warmup=0, copy_mib=1,
                          methods=("course", "enable_gqa"))
    header = result.format().splitlines()[1]
    assert "course ms" in header and "enable_gqa ms" in header and "repeat" not in header
    assert result.format().splitlines()[3].count("/") == 2  # g = 8: best / median, twice


_REUSED_MEMORY_SCRIPT = textwrap.dedent("""
    import ctypes, ctypes.util, resource, sys, torch
    from course_utils.bench.gqa_speed import steady_allocator
    if sys.argv[1] == "steady":
        print(steady_allocator())
    class MallInfo2(ctypes.Structure):  # glibc >= 2.33, malloc.h
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks",
                    "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]
    mallinfo2 = ctypes.CDLL(ctypes.util.find_library("c")).mallinfo2
    mallinfo2.restype = MallInfo2
    MiB = 2**20
    start = mallinfo2()
    block = torch.ones(4 * MiB)  # 16 MiB: one layer's K copy in the repeat method
    mapped = (mallinfo2().hblkhd - start.hblkhd) / MiB  # mapped from the OS for this block alone
    del block
    kept = (mallinfo2().fordblks - start.fordblks) / MiB  # free in the heap, ready for reuse
    faults = []
    for _ in range(4):  # the same size again and again, as layer after layer
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        block = torch.ones(4 * MiB); del block
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    print(mapped, kept, faults[-1])
""")


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc"
                    or tuple(map(int, platform.libc_ver()[1].split(".")[:2])) < (2, 33),
                    reason="steady_allocator tunes glibc's malloc (Linux); mallinfo2 needs glibc 2.33")
@pytest.mark.parametrize("mode", ["default", "steady"])
def test_steady_allocator_keeps_a_freed_block_for_reuse(mode):
    """In a fresh process glibc maps a 16 MiB block from the operating system and unmaps it
    at free (so a call that makes repeat's copies pays for fresh pages); with steady_allocator
    it comes from the heap and stays there when freed, and the next blocks of that size reuse
    it without page faults (4096 pages of 4 KiB each if they did not)."""
    def measure() -> tuple[list[str], float, float, float]:
        done = subprocess.run([sys.executable, "-c", _REUSED_MEMORY_SCRIPT, mode], capture_output=True,
                              text=True, timeout=120, check=True)
        *said, numbers = done.stdout.split("\n")[:-1]
        mapped, kept, faults = (float(x) for x in numbers.split())
        return said, mapped, kept, faults

    def holds(mapped: float, kept: float, faults: float) -> bool:
        return mapped == 0 and kept > 15 and faults < 64 if mode == "steady" else mapped >= 16 and kept < 1

    said, mapped, kept, faults = measure()
    if not holds(mapped, kept, faults):  # once, in the full suite, the process's memory layout
        said, mapped, kept, faults = measure()  # was unlucky: a second fresh process decides
    if mode == "steady":
        assert said == ["allocator: glibc malloc keeps freed memory for reuse, as a caching allocator does"]
    assert holds(mapped, kept, faults), f"{mode}: mapped {mapped} MiB, kept {kept} MiB, faults {faults}"


def test_grouped_caches_are_views_of_one_mha_cache():
    queries, caches = make_kv_caches(4, 8, 16, 2, (4, 2, 1))
    assert caches[2][1][0].data_ptr() == caches[4][1][0].data_ptr()
    torch.testing.assert_close(caches[1][0][1], caches[4][0][1][:, :1])
    assert queries[0].shape == (1, 4, 1, 8)


def test_stage_times_reports_each_stage():
    best = stage_times((4, 1), num_heads=4, d_head=8, context=32, num_layers=2, repeats=2, flush_mib=1)
    assert set(best) == {"scores", "softmax", "weights @ V"}
    assert all(set(stage) == {4, 1} for stage in best.values())  # both g, every stage
    assert all(isinstance(t, float) and 0 < t < 60 for stage in best.values() for t in stage.values())


def test_stage_bandwidth_counts_the_bytes_each_stage_moves():
    rows, copy_gb_per_s = stage_bandwidth((4, 1), num_heads=4, d_head=8, context=32, num_layers=2,
                                          repeats=2, flush_mib=1)
    by = {(r.stage, r.num_kv_heads): r for r in rows}
    assert set(by) == {(s, g) for s in ("scores", "softmax", "weights @ V", "read K and V")
                       for g in (4, 1)}
    k_bytes, weight_bytes = 2 * 1 * 32 * 8 * 4, 2 * 4 * 32 * 4  # g = 1: K of 2 layers; h x T scores
    assert by[("scores", 1)].bytes_moved == k_bytes + weight_bytes
    assert by[("read K and V", 4)].bytes_moved == 2 * 4 * k_bytes
    assert by[("softmax", 4)].bytes_moved == 2 * weight_bytes
    assert all(r.gb_per_s == pytest.approx(r.bytes_moved / r.seconds / 1e9) for r in rows)
    assert math.isfinite(copy_gb_per_s) and copy_gb_per_s > 0


@pytest.fixture(scope="module")
def gqa_cli_output() -> str:
    """What `python -m course_utils.bench gqa --stages` prints, run once for the two tests below:
    --stages only appends its table to the plain command's output (_main_gqa)."""
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        bench_main(["gqa", "--repeats", "1", "--context", "64", "--layers", "1", "--stages"])
    return out.getvalue()


def test_cli_gqa_stages(gqa_cli_output):
    out = gqa_cli_output
    assert "read K and V" in out and "GB/s" in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_cli_runs_gqa(gqa_cli_output):
    out = gqa_cli_output.split("\nstages, one thread")[0]  # the plain command's output
    assert "one decode step" in out and "enable_gqa" in out
    # numbers from different machines are compared by the kernels torch chose, not a guess
    assert f"CPU kernels: {torch.backends.cpu.get_cpu_capability()}" in out.splitlines()[0]


def test_nan_is_not_refused_and_spreads_as_the_docstring_says():
    """q: its own query of its own head; k: the queries of the key's group that may see it;
    v: every query of the group's heads, masked or not; other groups stay finite."""
    q, k, v = _randn(1, 4, 3, 2, seed=20), _randn(1, 2, 3, 2, seed=21), _randn(1, 2, 3, 2, seed=22)
    bad_q = q.clone()
    bad_q[0, 1, 2, 0] = float("nan")  # head 1, query 2
    out, weights = grouped_query_attention(bad_q, k, v, is_causal=True)
    nan_at = out.isnan().any(-1)[0]  # (h, Tq)
    assert nan_at.nonzero().tolist() == [[1, 2]] and weights.isnan().any(-1)[0].equal(nan_at)
    blocked = torch.ones(3, 3, dtype=torch.bool)
    blocked[2] = False  # query 2 may attend to nothing: zeros, NaN or not
    out, _ = grouped_query_attention(bad_q, k, v, mask=blocked)
    assert (out[0, 1, 2] == 0).all() and not out.isnan().any()

    bad_k = k.clone()
    bad_k[0, 0, 1, 0] = float("nan")  # group 0 (heads 0 and 1), key 1
    out, _ = grouped_query_attention(q, bad_k, v, is_causal=True)
    assert out.isnan().any(-1)[0].nonzero().tolist() == [[0, 1], [0, 2], [1, 1], [1, 2]]

    bad_v = v.clone()
    bad_v[0, 1, 2, 0] = float("nan")  # group 1 (heads 2 and 3), key 2: blocked for queries 0, 1
    out, _ = grouped_query_attention(q, k, bad_v, is_causal=True)
    nan_heads = out.isnan().any(-1)[0]
    assert nan_heads[2:].all() and not nan_heads[:2].any()
    assert "NaN" in grouped_query_attention.__doc__ and "NaN in a value" in course_utils.attention.gqa.__doc__


def test_the_good_inputs_next_to_the_bad_still_work():
    """All on the meta device (shapes only), an empty query sequence, bias as a real bool."""
    out, weights = grouped_query_attention(torch.randn(1, 4, 3, 4, device="meta"),
                                           torch.randn(1, 2, 5, 4, device="meta"),
                                           torch.randn(1, 2, 5, 4, device="meta"))
    assert out.shape == (1, 4, 3, 4) and weights.shape == (1, 4, 3, 5) and out.device.type == "meta"
    empty = torch.randn(1, 2, 0, 4)
    out, _ = grouped_query_attention(torch.randn(1, 4, 0, 4), empty, empty)
    assert out.shape == (1, 4, 0, 4)
    assert GroupedQueryAttention(16, 4, 2, bias=False).k_proj.bias is None


def _every_path(q, k, v):
    """grouped_query_attention, F.scaled_dot_product_attention(enable_gqa=True), and the fused
    kernel where it is built (None otherwise), each in float32."""
    from course_utils.attention.fused_decode import fused_decode_attention, fused_decode_status

    outs = {"course": grouped_query_attention(q, k, v)[0],
            "torch": F.scaled_dot_product_attention(q, k, v, enable_gqa=True)}
    if fused_decode_status() is None and q.shape[2] == 1 and q.shape[3] == 64:
        outs["fused"] = fused_decode_attention(q, k, v, num_threads=2)
    return outs


@pytest.mark.parametrize("case", ["review's minimal", "one group of three", "every group",
                                  "one sequence of three", "one key left"])
def test_a_query_whose_every_score_is_minus_inf_from_the_data_gets_zero_on_every_path(case):
    """The review's case: keys of -inf under a positive query, no mask. The course gave NaN,
    PyTorch and the fused kernel 0; the fused kernel's fallback is the course's function, so
    the result depended on whether the compiler worked. Now every path gives 0 there."""
    gen = torch.Generator().manual_seed(7)
    if case == "review's minimal":
        q, k = torch.ones(1, 2, 1, 64), torch.full((1, 1, 5, 64), -math.inf)
        v = torch.randn(1, 1, 5, 64, generator=gen)
        zero = torch.ones(1, 2, 1, 64, dtype=torch.bool)
    else:
        q = torch.rand(3, 6, 1, 64, generator=gen) + 0.1  # > 0: a key of -inf scores -inf
        k, v = torch.randn(3, 3, 40, 64, generator=gen), torch.randn(3, 3, 40, 64, generator=gen)
        zero = torch.zeros(3, 6, 1, 64, dtype=torch.bool)
        if case == "one group of three":
            k[:, 1] = -math.inf
            zero[:, 2:4] = True  # heads 2 and 3 read group 1
        elif case == "every group":
            k[:] = -math.inf
            zero[:] = True
        elif case == "one sequence of three":
            k[1] = -math.inf
            zero[1] = True
        else:
            k[:, :, :39] = -math.inf  # one finite key left: its value, weight 1
    outs = _every_path(q, k, v)
    for name, out in outs.items():
        assert not out.isnan().any(), name
        assert (out[zero] == 0).all(), name
        torch.testing.assert_close(out, outs["torch"], atol=2e-6, rtol=1e-5, msg=name)
    if case == "one key left":
        torch.testing.assert_close(outs["course"], v[:, :, 39:].repeat_interleave(2, dim=1))
    weights = grouped_query_attention(q, k, v)[1]
    assert (weights[zero[..., :1].expand_as(weights)] == 0).all()


def test_an_infinite_cached_value_gives_an_infinite_channel_where_it_weighs_and_nan_where_not():
    """-inf in one value with finite scores: -inf in that channel of its group's heads, on
    every path; a query with nothing to attend to gets 0 x -inf = NaN there (as PyTorch)."""
    gen = torch.Generator().manual_seed(8)
    q = torch.rand(2, 4, 1, 64, generator=gen) + 0.1  # > 0: a key of -inf scores -inf, not NaN
    k, v = torch.randn(2, 2, 50, 64, generator=gen), torch.randn(2, 2, 50, 64, generator=gen)
    v[0, 1, 20, 5] = -math.inf  # group 1 = heads 2, 3 of sequence 0, channel 5
    for name, out in _every_path(q, k, v).items():
        assert (out[0, 2:, 0, 5] == -math.inf).all(), name
        finite = torch.ones_like(out, dtype=torch.bool)
        finite[0, 2:, 0, 5] = False
        assert out[finite].isfinite().all(), name
    k[0, 1] = -math.inf  # now group 1 of sequence 0 has nothing to attend to
    for name, out in _every_path(q, k, v).items():
        assert out[0, 2:, 0, 5].isnan().all() and (out[0, 2:, 0, :5] == 0).all(), name
    assert "infinite value" in course_utils.attention.gqa.__doc__
