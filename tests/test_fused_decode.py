"""The fused decode kernel: same result as PyTorch's attention, clear errors, honest fallbacks."""

from __future__ import annotations

import os
import platform
import shutil
import tempfile

import pytest
import torch
import torch.nn.functional as F

from course_utils import fused_decode
from course_utils.bench_gqa import bench_decode
from course_utils.fused_decode import fused_decode_attention, fused_decode_status

needs_kernel = pytest.mark.skipif(fused_decode_status() is not None,
                                  reason=f"fused kernel unavailable: {fused_decode_status()}")


def _inputs(B, h, g, T, *, seed=0, key_scale=1.0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, h, 1, 64, generator=gen)  # (B, h, 1, dk)
    k = torch.randn(B, g, T, 64, generator=gen) * key_scale  # (B, g, T, dk)
    v = torch.randn(B, g, T, 64, generator=gen)
    return q, k, v


def _reference(q, k, v):
    """float64 PyTorch attention with enable_gqa, back to float32."""
    return F.scaled_dot_product_attention(q.double(), k.double(), v.double(), enable_gqa=True).float()


@needs_kernel
@pytest.mark.parametrize("B,h,g,T", [
    (1, 16, 16, 4096),  # MHA, the benchmark's context
    (1, 16, 4, 300),  # GQA, a context that is not a whole number of 32-key blocks
    (2, 8, 2, 64),  # exactly two blocks
    (1, 6, 2, 1),  # one cached token: the weight is 1
    (3, 12, 4, 65),  # three query heads per group
    (1, 10, 2, 129),  # five per group, 129 keys: four blocks and one key
    (2, 7, 1, 700),  # MQA, seven query heads
    (1, 16, 1, 300),  # MQA, sixteen query heads: two passes of eight
    (1, 12, 1, 50),  # twelve: a pass of eight, then four
])
@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_matches_pytorch_enable_gqa(B, h, g, T, threads):
    q, k, v = _inputs(B, h, g, T)
    out = fused_decode_attention(q, k, v, num_threads=threads)
    assert out.shape == q.shape and out.dtype == torch.float32
    torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)


@needs_kernel
def test_large_scores_stay_finite_across_blocks_and_threads():
    """Scores of several hundred: the running maximum must rescale earlier blocks and the
    threads' partial sums, or exp overflows to inf and the output to NaN."""
    q, k, v = _inputs(1, 8, 2, 1000, key_scale=60.0)
    k[:, :, 900] *= 3  # the largest score sits in the last thread's last blocks
    out = fused_decode_attention(q, k, v, num_threads=2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, _reference(q, k, v), atol=1e-5, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("where", [0, 5, 63, 64, 150, 199])
def test_a_nan_in_the_cache_shows_in_the_output_as_in_pytorch(where):
    q, k, v = _inputs(1, 8, 2, 200)
    k[0, 1, where, 3] = float("nan")  # one corrupted number in group 1's keys
    out = fused_decode_attention(q, k, v)
    assert torch.isnan(out[:, 4:]).all() and torch.isfinite(out[:, :4]).all()  # group 1's heads only
    assert torch.isnan(F.scaled_dot_product_attention(q, k, v, enable_gqa=True)[:, 4:]).all()


@needs_kernel
def test_inputs_that_ask_for_no_gradient_are_fine_under_no_grad():
    q, k, v = _inputs(1, 8, 2, 50)
    with torch.no_grad():
        out = fused_decode_attention(q.requires_grad_(), k, v)
    torch.testing.assert_close(out, _reference(q.detach(), k, v), atol=2e-6, rtol=1e-5)


@needs_kernel
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 vector widths")
@pytest.mark.parametrize("extra", [("-march=native", "-mno-avx512f"), ("-march=native", "-mno-avx"), ()],
                         ids=["8-wide (AVX2)", "4-wide (SSE4)", "generic x86-64"])
def test_every_vector_width_of_the_kernel_agrees_with_pytorch(tmp_path, extra):
    """The machine running CI decides which width the cached build uses; build the others."""
    cc = fused_decode._compiler()
    target = tmp_path / "kernel.so"
    error = fused_decode._build(cc, (*fused_decode._FLAGS, "-fopenmp", *extra), target)
    if error is not None:
        pytest.skip(f"{cc[0]} does not build with {extra}: {error}")
    lib = fused_decode._load(target)
    for B, h, g, T in [(1, 16, 4, 1000), (2, 10, 2, 129), (1, 6, 6, 1), (1, 16, 1, 77)]:
        q, k, v = _inputs(B, h, g, T, seed=T)
        torch.testing.assert_close(fused_decode._run(lib, q, k, v, 2), _reference(q, k, v),
                                   atol=2e-6, rtol=1e-5)


@needs_kernel
def test_a_compiler_given_as_several_words_is_run_as_a_command(fresh_build, monkeypatch):
    real = fused_decode._compiler()
    monkeypatch.setenv("CC", f"env {real[0]}")  # like CC="ccache gcc"
    assert fused_decode._compiler()[1:] == [real[0]]
    assert fused_decode_status() is None


@needs_kernel
def test_an_unwritable_cache_folder_falls_back_to_the_temp_folder(fresh_build, monkeypatch):
    blocker = fresh_build / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(fresh_build / "tmp"))
    (fresh_build / "tmp").mkdir()
    assert fused_decode_status() is None
    assert list((fresh_build / "tmp").glob("course_utils-*/fused_decode-*.so"))


@needs_kernel
def test_query_head_i_reads_kv_head_i_over_group_size():
    q, k, v = _inputs(1, 8, 2, 50)
    out = fused_decode_attention(q, k, v)
    first_group = F.scaled_dot_product_attention(q[:, :4], k[:, :1].expand(-1, 4, -1, -1),
                                                 v[:, :1].expand(-1, 4, -1, -1))
    torch.testing.assert_close(out[:, :4], first_group, atol=2e-6, rtol=1e-5)


@needs_kernel
def test_a_non_contiguous_query_gives_the_same_result():
    q, k, v = _inputs(1, 8, 2, 100)
    q_strided = q.transpose(1, 3).contiguous().transpose(1, 3)  # same values, other strides
    assert not q_strided.is_contiguous()
    torch.testing.assert_close(fused_decode_attention(q_strided, k, v), fused_decode_attention(q, k, v))


@needs_kernel
def test_empty_batch_returns_empty():
    q, k, v = _inputs(1, 4, 2, 10)
    assert fused_decode_attention(q[:0], k[:0], v[:0]).shape == (0, 4, 1, 64)


q0, k0, v0 = _inputs(1, 8, 2, 10)


@pytest.mark.parametrize("call,error,words", [
    (lambda: fused_decode_attention(q0.double(), k0, v0), TypeError, ["q", "float32", "float64"]),
    (lambda: fused_decode_attention(q0, k0.half(), v0), TypeError, ["k", "float32", "float16"]),
    (lambda: fused_decode_attention(q0.numpy(), k0, v0), TypeError, ["q", "torch.Tensor", "ndarray"]),
    (lambda: fused_decode_attention(q0, k0.to("meta"), v0), ValueError, ["k", "CPU", "meta"]),
    (lambda: fused_decode_attention(q0[0], k0, v0), ValueError, ["q", "4-D", "(8, 1, 64)"]),
    (lambda: fused_decode_attention(q0, k0, v0[:, :, :5]), ValueError, ["same shape", "(1, 2, 10, 64)",
                                                                      "(1, 2, 5, 64)"]),
    (lambda: fused_decode_attention(q0.expand(1, 8, 3, 64), k0, v0), ValueError, ["one new token", "Tq = 3"]),
    (lambda: fused_decode_attention(q0[..., :32], k0[..., :32], v0[..., :32]), ValueError,
     ["head width 64", "got 32", "grouped_query_attention"]),
    (lambda: fused_decode_attention(q0, k0[..., :32], v0[..., :32]), ValueError,
     ["same head width dk", "(1, 8, 1, 64)", "(1, 2, 10, 32)"]),
    (lambda: fused_decode_attention(q0.expand(2, 8, 1, 64), k0, v0), ValueError, ["batch size", "2", "1"]),
    (lambda: fused_decode_attention(q0[:, :6], torch.randn(1, 4, 10, 64), torch.randn(1, 4, 10, 64)),
     ValueError, ["4 key/value heads", "6 query heads"]),
    (lambda: fused_decode_attention(q0, k0[:, :, :0], v0[:, :, :0]), ValueError, ["T = 0"]),
    (lambda: fused_decode_attention(q0, k0.transpose(2, 3).contiguous().transpose(2, 3), v0), ValueError,
     ["k must keep each row of 64 numbers together", "stride 1", "(1280, 640, 1, 10)", "k.contiguous()"]),
    (lambda: fused_decode_attention(q0, k0, torch.randn(1, 2, 64, 10).transpose(2, 3)), ValueError,
     ["v must keep each row", "(1280, 640, 1, 10)", "(1, 2, 10, 64)"]),
    (lambda: fused_decode_attention(q0, k0, v0, num_threads=0), ValueError, ["num_threads", "0"]),
    (lambda: fused_decode_attention(q0, k0, v0, num_threads=2.0), ValueError, ["num_threads", "2.0"]),
    (lambda: fused_decode_attention(q0.clone().requires_grad_(), k0, v0), ValueError,
     ["no gradients", "torch.no_grad()", "grouped_query_attention"]),
])
def test_bad_inputs_name_what_was_expected_and_what_came(call, error, words):
    with pytest.raises(error) as caught:
        call()
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """Build into an empty cache directory, and forget the build afterwards."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    fused_decode._library.cache_clear()
    yield tmp_path
    fused_decode._library.cache_clear()


def test_without_a_compiler_the_kernel_says_why_and_the_error_points_to_the_torch_function(
        fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    assert "no C compiler" in fused_decode_status()
    with pytest.raises(RuntimeError, match="grouped_query_attention computes the same result"):
        fused_decode_attention(q0, k0, v0)
    result = bench_decode(8, 64, 64, 1, groups=(8, 2), repeats=1, warmup=0, copy_mib=1)
    assert "fused" not in result.mha.samples_s
    assert any(note.startswith("fused: not run (no C compiler") for note in result.notes)
    assert result.notes[0] in result.format()


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the `false` command")
def test_a_failed_build_is_reported_not_raised(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    why = fused_decode_status()
    assert "could not build fused_decode.c" in why and "[generic]" in why  # every option tried
    assert fused_decode.fused_decode_build() == f"not built: {why}"
    fused_decode._library.cache_clear()  # a new process: the failures are remembered
    assert "delete it to try again" in fused_decode_status()


@needs_kernel
def test_a_compiler_without_openmp_still_builds_a_one_thread_kernel(fresh_build, monkeypatch):
    """Apple's clang has no -fopenmp: the build drops it and the kernel runs on one thread."""
    real = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")
    wrapper = fresh_build / "cc-without-openmp"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert fused_decode_status() is None
    assert fused_decode.fused_decode_build() == "built with -march=native"
    q, k, v = _inputs(1, 8, 2, 300)
    torch.testing.assert_close(fused_decode_attention(q, k, v, num_threads=2), _reference(q, k, v),
                               atol=2e-6, rtol=1e-5)


@needs_kernel
def test_the_build_is_cached_per_source_compiler_and_cpu(fresh_build):
    assert fused_decode_status() is None
    built = list((fresh_build / "course_utils").glob("fused_decode-*.so"))
    assert len(built) == 1
    fused_decode._library.cache_clear()
    assert fused_decode_status() is None  # loads the same file, builds nothing new
    assert list((fresh_build / "course_utils").glob("fused_decode-*.so")) == built


@needs_kernel
def test_bench_decode_times_the_fused_kernel_next_to_the_others():
    result = bench_decode(8, 64, 256, 2, groups=(8, 2), repeats=2, warmup=1, copy_mib=1)
    assert len(result.row(2).samples_s["fused"]) == 2
    assert result.speedup(8, "fused") == pytest.approx(1.0)
    assert result.speedup_over_fastest_mha(2, "fused") > 0
    text = result.format()
    assert "fused ms" in text and "fused vs fastest at g=8" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_bench_decode_leaves_the_kernel_out_where_it_does_not_apply():
    result = bench_decode(8, 16, 64, 2, groups=(8, 2), repeats=1, warmup=0, copy_mib=1)  # width 16
    assert "fused" not in result.mha.samples_s
    assert any("head width 64" in note and "width 16" in note for note in result.notes)


# --- -inf scores and NaN: the same answer as PyTorch at every thread count ---------------------


def _masked_inputs(T, masked, *, seed=0):
    """Queries > 0 and keys of -inf at ``masked``: those keys score exactly -inf (a mask)."""
    q, k, v = _inputs(1, 8, 2, T, seed=seed)
    q = q.abs() + 0.1
    k[:, :, masked] = float("-inf")
    return q, k, v


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


@needs_kernel
@pytest.mark.parametrize("masked", [slice(0, 32), slice(0, 40), slice(32, 64), slice(68, 100),
                                    slice(0, 99)], ids=["keys 0-31", "keys 0-39", "keys 32-63",
                                                        "keys 68-99", "all but the last"])
@pytest.mark.parametrize("threads", range(1, 9))
def test_keys_scoring_minus_inf_get_weight_zero_at_every_thread_count(masked, threads, restore_threads):
    """T = 100, keys 0-31 at -inf: a block whose every score is -inf while the running max is
    still -inf computed exp(-inf - -inf) = NaN at 1-3 threads (at 4 the block was a thread's
    whole share and was skipped)."""
    q, k, v = _masked_inputs(100, masked)
    expected = _reference(q, k, v)
    assert torch.isfinite(expected).all()
    torch.set_num_threads(threads)  # the default num_threads is torch's
    out = fused_decode_attention(q, k, v)
    assert torch.isfinite(out).all(), f"NaN at {threads} thread(s)"
    torch.testing.assert_close(out, expected, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(fused_decode_attention(q, k, v, num_threads=threads), expected,
                               atol=2e-6, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("threads", [1, 2, 3, 4, 8])
def test_a_query_whose_every_score_is_minus_inf_gets_zero_as_in_pytorch(threads):
    q, k, v = _masked_inputs(100, slice(0, 100))
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert (expected == 0).all()
    assert (fused_decode_attention(q, k, v, num_threads=threads) == 0).all()


@needs_kernel
@pytest.mark.parametrize("head", [0, 5])
@pytest.mark.parametrize("threads", [1, 3])
def test_a_nan_in_a_query_makes_that_head_nan_as_in_pytorch(head, threads):
    q, k, v = _inputs(2, 8, 2, 150)
    q[1, head, 0, 7] = float("nan")
    out = fused_decode_attention(q, k, v, num_threads=threads)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    nan_where = torch.zeros(2, 8, 1, 64, dtype=torch.bool)
    nan_where[1, head] = True
    assert torch.equal(torch.isnan(expected), nan_where)  # PyTorch: that head, and only it
    assert torch.equal(torch.isnan(out), nan_where)
    torch.testing.assert_close(out[~nan_where], expected[~nan_where], atol=2e-6, rtol=1e-5)


@needs_kernel
@pytest.mark.parametrize("where", [0, 40, 149])
def test_a_nan_in_a_value_makes_its_groups_heads_nan_as_in_pytorch(where):
    q, k, v = _inputs(1, 8, 2, 150)
    v[0, 0, where, 9] = float("nan")
    out = fused_decode_attention(q, k, v, num_threads=3)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    assert torch.isnan(out[:, :4, :, 9]).all() and torch.isfinite(out[:, 4:]).all()


@needs_kernel
def test_a_nan_key_among_minus_inf_keys_still_shows():
    """Every other key of the block at -inf: the NaN must not be lost with the masked block."""
    q, k, v = _masked_inputs(64, slice(0, 64))
    k[0, 1, 10] = float("nan")
    out = fused_decode_attention(q, k, v, num_threads=2)
    assert torch.isnan(out[:, 4:]).all() and (out[:, :4] == 0).all()
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert torch.isnan(expected[:, 4:]).all()


# --- a cache read in place: strides along B, g and T ----------------------------------------


class _Recording:
    """Stands in for the compiled library: records the pointers the kernel is given."""

    def __init__(self, lib):
        self.lib, self.calls = lib, []

    def fused_decode(self, *args):
        self.calls.append(args)
        return self.lib.fused_decode(*args)


@needs_kernel
@pytest.mark.parametrize("T", [1, 31, 100, 257])
@pytest.mark.parametrize("threads", [1, 3])
def test_a_slice_of_a_preallocated_cache_is_read_in_place(T, threads):
    """cache[:, :, :T] of a (B, g, Tmax, dk) buffer: K and V rows of a head are contiguous, the
    heads Tmax rows apart. The kernel gets the buffer's own memory, not a copy."""
    gen = torch.Generator().manual_seed(T)
    k_cache = torch.randn(2, 2, 300, 64, generator=gen)
    v_cache = torch.randn(2, 2, 300, 64, generator=gen)
    q = torch.randn(2, 8, 1, 64, generator=gen)
    k, v = k_cache[:, :, :T], v_cache[:, :, :T]
    assert T == 1 or not k.is_contiguous()
    lib = _Recording(fused_decode._library())
    out = fused_decode._run(lib, q, k, v, threads)
    (args,) = lib.calls
    assert args[1] == k_cache.data_ptr() and args[2] == v_cache.data_ptr()  # no copy
    torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(fused_decode_attention(q, k, v, num_threads=threads), out)


@needs_kernel
def test_other_cache_layouts_are_read_in_place():
    """A (B, T, g, dk) buffer seen as (B, g, T, dk); a cache shared by the batch (stride 0);
    a slice starting after the buffer's first token; k and v with different strides."""
    gen = torch.Generator().manual_seed(5)
    q = torch.randn(3, 8, 1, 64, generator=gen)
    btgd = torch.randn(3, 120, 2, 64, generator=gen)
    v = torch.randn(3, 2, 100, 64, generator=gen)
    shared = torch.randn(1, 2, 100, 64, generator=gen).expand(3, -1, -1, -1)
    offset = torch.randn(3, 2, 150, 64, generator=gen)[:, :, 50:]
    for k in (btgd.transpose(1, 2)[:, :, :100], shared, offset):
        lib = _Recording(fused_decode._library())
        out = fused_decode._run(lib, q, k, v, 2)
        assert lib.calls[0][1] == k.data_ptr() and lib.calls[0][2] == v.data_ptr()
        torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)

