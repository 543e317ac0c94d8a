"""The fused decode kernel: same result as PyTorch's attention, clear errors, honest fallbacks."""

from __future__ import annotations

import hashlib
import math
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention import fused_decode
from course_utils.attention.fused_decode import fused_decode_attention, fused_decode_status
from course_utils.bench.gqa_speed import bench_decode

# Skipped where the kernel cannot be built (no compiler, say); a kernel that builds but fails its
# self-test fails these tests instead, and so does any call that falls back to PyTorch unasked.
_WHY_NOT = fused_decode_status()
needs_kernel = pytest.mark.skipif(_WHY_NOT is not None and "self-test" not in _WHY_NOT,
                                  reason=f"fused kernel unavailable: {_WHY_NOT}")
pytestmark = pytest.mark.filterwarnings("error:the fused decode kernel is unavailable:RuntimeWarning")


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
def test_the_kernel_builds_and_passes_its_self_test():
    assert fused_decode_status() is None
    assert fused_decode._self_test(fused_decode._library()) is None


@needs_kernel
def test_large_scores_stay_finite_across_blocks_and_threads():
    """Scores of several hundred: the running maximum must rescale earlier blocks and the
    threads' partial sums, or exp overflows to inf and the output to NaN."""
    q, k, v = _inputs(1, 8, 2, 1000, key_scale=60.0)
    k[:, :, 900] *= 3  # the largest score sits in the last thread's last blocks
    out = fused_decode_attention(q, k, v, num_threads=2)
    assert torch.isfinite(out).all()
    # float32 rounds a score near 500 by about 500 * 6e-8 = 3e-5, and a weight exp(s - max) moves
    # by that fraction: two correct kernels summing in other orders (ATen's plain path against its
    # AVX-512 one) differ by up to that much here, so the tolerance is 1e-4, not 1e-5. A kernel
    # that lost the rescaling is off by far more, or NaN.
    torch.testing.assert_close(out, _reference(q, k, v), atol=1e-4, rtol=1e-4)


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
    target, error, _ = fused_decode._compile(cc, (*fused_decode._FLAGS, "-fopenmp", *extra), tmp_path,
                                             "kernel", 120.0)
    if target is None:
        pytest.skip(f"{cc[0]} does not build with {extra}: {error}")
    lib = fused_decode._load(target)
    assert fused_decode._self_test(lib) is None
    for B, h, g, T in [(1, 16, 4, 1000), (2, 10, 2, 129), (1, 6, 6, 1), (1, 16, 1, 77)]:
        q, k, v = _inputs(B, h, g, T, seed=T)
        torch.testing.assert_close(fused_decode._run(lib, q, k, v, 2), _reference(q, k, v),
                                   atol=2e-6, rtol=1e-5)


@needs_kernel
@pytest.mark.slow
def test_a_compiler_given_as_several_words_is_run_as_a_command(fresh_build, monkeypatch):
    real = fused_decode._compiler()
    monkeypatch.setenv("CC", f"env {real[0]}")  # like CC="ccache gcc"
    assert fused_decode._compiler()[1:] == [real[0]]
    assert fused_decode_status() is None


@needs_kernel
@pytest.mark.slow
def test_an_unwritable_cache_folder_falls_back_to_the_temp_folder(fresh_build, shared_builds, monkeypatch):
    blocker = fresh_build / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.setattr(tempfile, "tempdir", str(fresh_build / "tmp"))
    (fresh_build / "tmp").mkdir()
    with pytest.warns(RuntimeWarning, match=r"refused .*not-a-folder/course_utils: cannot create it"):
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
    (lambda: fused_decode_attention(q0, k0, v0, num_threads=2.0), TypeError, ["num_threads", "float 2.0"]),
    (lambda: fused_decode_attention(q0, k0, v0, num_threads=3000), ValueError,  # OpenMP ended Python
     ["num_threads must be at most", str(fused_decode.MAX_THREADS), "got 3000", "thread limit"]),
    (lambda: fused_decode_attention(q0, k0, v0, num_threads=2**31), ValueError,  # wrapped to 1 in C
     ["num_threads must be at most", "got 2147483648"]),
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


def test_without_a_compiler_the_kernel_says_why_and_pytorch_computes_the_result(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "no-such-compiler-anywhere")
    assert fused_decode_status() == "CC=no-such-compiler-anywhere: no program 'no-such-compiler-anywhere' " \
                                    "found on PATH"
    with pytest.warns(RuntimeWarning, match="unavailable .*no-such-compiler.*grouped_query_attention"):
        out = fused_decode_attention(q0, k0, v0)
    torch.testing.assert_close(out, _reference(q0, k0, v0), atol=2e-6, rtol=1e-5)
    result = bench_decode(8, 64, 64, 1, groups=(8, 2), repeats=1, warmup=0, copy_mib=1)
    assert "fused" not in result.mha.samples_s
    assert any(note.startswith("fused: not run (CC=no-such-compiler-anywhere") for note in result.notes)
    assert result.notes[0] in result.format()


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the `false` command")
def test_a_failed_build_is_reported_not_raised(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    why = fused_decode_status()
    assert "could not build fused_decode.c" in why and "[generic]" in why  # every option tried
    assert "exit status 1" in why and "reset_fused_decode()" in why
    assert fused_decode.fused_decode_build() == f"not built: {why}"
    fused_decode._library.cache_clear()  # a new process: the failures are remembered
    assert "remembered in" in fused_decode_status() and "reset_fused_decode()" in fused_decode_status()


@needs_kernel
@pytest.mark.slow
def test_a_compiler_without_openmp_still_builds_a_one_thread_kernel(fresh_build, monkeypatch):
    """Apple's clang has no -fopenmp: the build drops it and the kernel runs on one thread."""
    real = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc") or shutil.which("clang")
    wrapper = fresh_build / "cc-without-openmp"
    wrapper.write_text('#!/bin/sh\nfor a in "$@"; do [ "$a" = -fopenmp ] && exit 1; done\n'
                       f'exec {real} "$@"\n')
    wrapper.chmod(0o755)
    monkeypatch.setenv("CC", str(wrapper))
    assert fused_decode_status() is None
    # the threaded build was tried first, and the status says why it is not the one used
    assert fused_decode.fused_decode_build().startswith("built with -march=native; not used: "
                                                        "[-march=native -fopenmp] exit status 1")
    q, k, v = _inputs(1, 8, 2, 300)
    torch.testing.assert_close(fused_decode_attention(q, k, v, num_threads=2), _reference(q, k, v),
                               atol=2e-6, rtol=1e-5)


@needs_kernel
@pytest.mark.slow
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
    # against whichever method was fastest at g = h in each repeat
    fastest = [min(times) for times in zip(*result.mha.samples_s.values(), result.sdpa_mha_s, strict=True)]
    fused = result.row(2).samples_s["fused"]
    assert result.speedup_over_fastest_mha(2, "fused") == pytest.approx(
        statistics.median(a / b for a, b in zip(fastest, fused, strict=True)))
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


# --- the compiler: CC, its output, its time, a retry ------------------------------------------


def _script(folder, name, body):
    path = folder / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return path


def test_a_cc_that_is_not_a_command_line_gets_a_clear_message(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", 'gcc "')
    why = fused_decode_status()
    assert "CC='gcc \"'" in why and "No closing quotation" in why and "CC=gcc" in why


def test_a_cc_path_that_does_not_exist_is_named(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "/nonexistent/cc")
    assert fused_decode_status() == "CC=/nonexistent/cc: no such file"
    monkeypatch.setenv("CC", "/nonexistent/cc -O2")
    fused_decode._library.cache_clear()
    assert fused_decode_status() == "CC=/nonexistent/cc -O2: no such file (/nonexistent/cc)"


def test_a_cc_that_is_not_executable_is_named(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", str(fresh_build))
    assert fused_decode_status() == f"CC={fresh_build}: {fresh_build} is not an executable file"


def test_a_cc_that_cannot_be_run_is_reported_and_not_remembered(fresh_build, monkeypatch):
    cc = fresh_build / "not-a-program"
    cc.write_text("no #! line: the system cannot run this\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    assert f"could not run {cc}: Exec format error" in why
    assert not list((fresh_build / "course_utils").glob("*.failed"))  # tried again next time


def test_a_compiler_printing_non_utf8_is_reported_not_raised(fresh_build, monkeypatch):
    cc = _script(fresh_build, "latin1-cc", "printf 'erreur: fichier \\351crit\\377\\n' >&2; exit 1\n")
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    assert "erreur: fichier \ufffdcrit\ufffd" in why and "[generic]" in why


@pytest.mark.parametrize("timeout", ["1", "0.5"])
def test_a_compiler_that_hangs_is_stopped_after_the_timeout(fresh_build, monkeypatch, timeout):
    """`sleep` is a child of the script: it holds the output pipe open after the script is
    killed, so the whole process group must go, or the wait lasts the full 30 s."""
    monkeypatch.setenv("CC", str(_script(fresh_build, "slow-cc", "sleep 30\nexit 1\n")))
    monkeypatch.setenv(fused_decode.TIMEOUT_ENV, timeout)
    import time

    start = time.monotonic()
    why = fused_decode_status()
    elapsed = time.monotonic() - start
    assert elapsed < 10, elapsed
    assert f"did not finish within {timeout} s" in why and fused_decode.TIMEOUT_ENV in why
    assert "[-march=native]" not in why  # a compiler that hangs once is not run twice more


@pytest.fixture
def escaped(fresh_build):
    """A file where a compiler wrapper writes the pid of the child it leaves in a session of
    its own; that child is ended (by its pid) after the test."""
    pid_file = fresh_build / "escaped.pid"
    yield pid_file
    if pid_file.exists():
        for pid in pid_file.read_text().split():
            try:
                os.kill(int(pid), 9)
            except (OSError, ValueError):
                pass


@pytest.mark.slow
def test_a_child_that_leaves_the_compilers_session_does_not_outlast_the_timeout(fresh_build, monkeypatch,
                                                                                escaped):
    """`setsid sleep &` leaves the process group that is killed, holding the compiler's output
    open: waiting for that output to close lasted as long as the child (here 20 s, not 2)."""
    monkeypatch.setenv("CC", str(_script(fresh_build, "escaping-cc",
                                         f"setsid sleep 20 &\necho $! >> {escaped}\nsleep 300\n")))
    monkeypatch.setenv(fused_decode.TIMEOUT_ENV, "2")
    start = time.monotonic()
    why = fused_decode_status()
    assert time.monotonic() - start < 8
    assert "did not finish within 2 s" in why


@needs_kernel
@pytest.mark.slow
def test_a_compiler_that_leaves_a_server_running_is_not_waited_for(fresh_build, monkeypatch, escaped):
    """A compiler that builds, then leaves a child holding its output (a compile server)."""
    real = fused_decode._compiler()[0]
    monkeypatch.setenv("CC", str(_script(fresh_build, "server-cc",
                                         f'setsid sleep 30 &\necho $! >> {escaped}\nexec {real} "$@"\n')))
    start = time.monotonic()
    assert fused_decode_status() is None
    assert time.monotonic() - start < 28


def test_a_timeout_is_not_remembered(fresh_build, monkeypatch):
    """A compiler slow once (a loaded machine) must not disable the kernel for later processes."""
    monkeypatch.setenv("CC", str(_script(fresh_build, "slow-cc", "sleep 30\nexit 1\n")))
    monkeypatch.setenv(fused_decode.TIMEOUT_ENV, "0.5")
    assert "did not finish within 0.5 s" in fused_decode_status()
    assert not list((fresh_build / "course_utils").glob("*.failed"))
    fused_decode._library.cache_clear()  # a new process: the compiler is run again
    assert "remembered in" not in fused_decode_status()


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the `false` command")
def test_a_remembered_failure_expires_after_an_hour(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "false")
    fused_decode_status()
    failed = list((fresh_build / "course_utils").glob("*.failed"))
    assert len(failed) == 3
    fused_decode._library.cache_clear()
    assert "remembered in" in fused_decode_status()
    hour_ago = time.time() - 3700
    for path in failed:
        os.utime(path, (hour_ago, hour_ago))
    fused_decode._library.cache_clear()
    why = fused_decode_status()
    assert "remembered in" not in why and "exit status 1" in why  # run again


@pytest.mark.parametrize("value", ["soon", "0", "-5", "nan", "inf"])
def test_a_bad_timeout_setting_is_named(fresh_build, monkeypatch, value):
    monkeypatch.setenv(fused_decode.TIMEOUT_ENV, value)
    why = fused_decode_status()
    assert why == (f"{fused_decode.TIMEOUT_ENV}={value!r}: expected a number of seconds > 0 "
                   "(default 120)")


@needs_kernel
@pytest.mark.slow
def test_a_failed_build_can_be_retried_in_the_same_process(fresh_build, monkeypatch):
    """A compiler that fails once (a missing header, installed since): reset_fused_decode()
    forgets the remembered failure and builds."""
    broken = fresh_build / "broken"
    broken.write_text("")
    real = fused_decode._compiler()[0]
    script = (f'[ -e {broken} ] && {{ echo "missing.h: not found" >&2; exit 1; }}\n'
              f'exec {real} "$@"\n')
    monkeypatch.setenv("CC", str(_script(fresh_build, "flaky-cc", script)))
    assert "missing.h: not found" in fused_decode_status()
    broken.unlink()
    fused_decode._library.cache_clear()
    assert "remembered in" in fused_decode_status()  # not retried on its own
    fused_decode.reset_fused_decode()
    assert fused_decode_status() is None
    assert not list((fresh_build / "course_utils").glob("*.failed"))


# --- the self-test: a build that disagrees with PyTorch is never used -------------------------


_UNSAFE = ["-ffast-math", "-Ofast", "-ffinite-math-only", "-funsafe-math-optimizations",
           "-freciprocal-math", "-fassociative-math"]


@pytest.mark.parametrize("flag", _UNSAFE)
def test_unsafe_math_flags_in_cc_are_refused_before_any_build(fresh_build, monkeypatch, flag):
    """-ffinite-math-only passed the old self-test and was then used: a NaN in the cache gave a
    finite output. Such flags are refused by name, before the compiler runs."""
    if shutil.which("cc") is None:
        pytest.skip("needs cc")
    monkeypatch.setenv("CC", f"cc -O2 {flag}")
    why = fused_decode_status()
    assert why is not None and f"CC='cc -O2 {flag}' holds {flag}" in why, why
    assert "NaN or infinity" in why and "remove it from CC" in why
    assert not (fresh_build / "course_utils").exists() or not list((fresh_build / "course_utils").iterdir())
    q, k, v = _inputs(1, 8, 2, 100)
    k[0, 1, 50, 3] = float("nan")
    with pytest.warns(RuntimeWarning, match=f"unavailable .*holds {flag}"):
        out = fused_decode_attention(q, k, v)
    assert torch.equal(out.isnan(), _reference(q, k, v).isnan())


@pytest.mark.parametrize("flag", ["-fno-math-errno", "-fno-signed-zeros", "-fno-trapping-math", "-O2"])
def test_flags_that_change_nothing_the_kernel_relies_on_are_allowed(flag, monkeypatch):
    monkeypatch.setenv("CC", f"cc {flag}")
    assert fused_decode._unsafe_math(["/usr/bin/cc", flag]) is None


@needs_kernel
def test_the_self_test_checks_nan_and_infinities_where_pytorch_has_them(tmp_path):
    """-ffinite-math-only: a NaN in a key gives a finite output, a NaN in q or a score of +inf
    gives zeros. The old self-test (only -inf and large scores) let it through."""
    cc = fused_decode._compiler()
    lib_path, error, _ = fused_decode._compile([*cc, "-ffinite-math-only"],
                                               (*fused_decode._FLAGS, "-march=native"),
                                               tmp_path, "finite", 120.0)
    assert lib_path is not None, error
    why = fused_decode._self_test(fused_decode._load(lib_path))  # no crtfastmath: safe to load here
    assert why is not None and "NaN in 0 output numbers, expected NaN in 256" in why, why
    assert "a NaN in a cached key" in why and "-ffinite-math-only" in why


@needs_kernel
@pytest.mark.slow
def test_a_hidden_finite_math_flag_is_caught_by_the_self_test_and_remembered(fresh_build, monkeypatch):
    """A wrapper adding the flag where CC does not show it: the self-test, in a separate
    process, refuses the build; the verdict is remembered, nothing is kept as a library."""
    real = fused_decode._compiler()[0]  # a generic (SSE) build happens to keep NaN: not built here
    script = (f'for a; do [ "$a" = -march=native ] && exec {real} "$@" -ffinite-math-only; done\n'
              'echo "no generic build here" >&2; exit 1\n')
    monkeypatch.setenv("CC", str(_script(fresh_build, "cc-finite", script)))
    why = fused_decode_status()
    assert why.count("disagrees with F.scaled_dot_product_attention") == 2, why
    assert "a NaN in a cached key" in why and "no generic build here" in why, why
    folder = fresh_build / "course_utils"
    assert not list(folder.glob("*.so*")) and len(list(folder.glob("*.failed"))) == 3
    fused_decode._library.cache_clear()  # a new process: the self-test's verdict is remembered
    why = fused_decode_status()
    assert why.count("a NaN in a cached key") == 2 and why.count("(remembered in") == 3, why


_PROCESS_MODE = r"""
import os, sys, warnings
warnings.simplefilter("ignore")
import torch
from course_utils.attention import fused_decode
why = fused_decode.fused_decode_status()
print(why)
print(float("5e-324") * float("1") != 0.0, (torch.tensor(1e-40) * 1).item() != 0.0)
"""


@needs_kernel
@pytest.mark.parametrize("how", ["in CC", "hidden in a wrapper"])
@pytest.mark.slow
def test_a_fast_math_build_leaves_the_process_floating_point_mode_alone(fresh_build, how):
    """GCC links crtfastmath.o into a -ffast-math library: loading it turns on flush-to-zero
    for the whole process (5e-324 * 1.0 == 0.0 afterwards), even if the self-test then refuses
    it. A build is self-tested in a separate process and only loaded here once it passed.
    Run in a fresh process, as a learner's would be."""
    real = fused_decode._compiler()[0]
    cc = (f"{real} -ffast-math" if how == "in CC" else
          str(_script(fresh_build, "cc-fast", f'exec {real} "$@" -ffast-math\n')))
    env = {**os.environ, "XDG_CACHE_HOME": str(fresh_build), "CC": cc}
    run = subprocess.run([sys.executable, "-c", _PROCESS_MODE], capture_output=True, text=True, env=env,
                         cwd=Path(fused_decode.__file__).parent.parent, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    why, mode = run.stdout.splitlines()[-2:]
    assert "-ffast-math" in why if how == "in CC" else "disagrees" in why, why
    assert mode == "True True", f"flush-to-zero turned on in the learner's process: {mode}"


@needs_kernel
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="sets the x86 MXCSR register")
@pytest.mark.slow
def test_a_library_that_sets_flush_to_zero_is_refused_even_if_its_results_pass(fresh_build, monkeypatch):
    ftz = fresh_build / "ftz.c"
    ftz.write_text("__attribute__((constructor)) static void ftz(void) {\n"
                   "    __builtin_ia32_ldmxcsr(__builtin_ia32_stmxcsr() | 0x8040); }\n")
    real = fused_decode._compiler()[0]
    monkeypatch.setenv("CC", str(_script(fresh_build, "cc-ftz", f'exec {real} "$@" {ftz}\n')))
    why = fused_decode_status()
    assert why is not None and "turned on flush-to-zero for the whole process" in why, why
    assert float("5e-324") * float("1") != 0.0


@needs_kernel
@pytest.mark.slow
def test_a_cached_build_without_a_current_record_is_built_again_not_loaded(fresh_build, shared_builds,
                                                                           monkeypatch):
    """A cached library whose record holds its sha256 alone (an older version of this module)
    is not loaded, not even in a separate process to test it: it is built again, quietly (the
    build notes say why). Here the cached bytes are a -ffast-math build that would fail."""
    assert fused_decode_status() is None
    (library,) = (fresh_build / "course_utils").glob("fused_decode-*.so")
    cc = fused_decode._compiler()
    bad, error, _ = fused_decode._compile([*cc, "-ffast-math"], (*fused_decode._FLAGS, "-march=native",
                                                                "-fopenmp"), fresh_build, "bad", 120.0)
    assert bad is not None, error
    bad_bytes = bad.read_bytes()
    os.replace(bad, library)  # a new file: the loaded one stays intact
    fused_decode._record_path(library).write_text(hashlib.sha256(bad_bytes).hexdigest() + "\n")
    fused_decode._library.cache_clear()
    tested = []
    real = fused_decode._self_test_elsewhere
    monkeypatch.setattr(fused_decode, "_self_test_elsewhere",
                        lambda path, *a: tested.append(path.name) or real(path, *a))
    assert fused_decode_status() is None
    assert len(tested) == 1 and tested[0].endswith(".so.tmp"), tested  # only the new build was tested
    assert library.read_bytes() != bad_bytes
    build = fused_decode.fused_decode_build()
    assert build.startswith("built with -march=native -fopenmp") and "does not say it passed" in build, build
    assert hashlib.sha256(library.read_bytes()).hexdigest() == fused_decode._recorded_sha256(library)
    assert fused_decode._record(library)[1]


@needs_kernel
def test_the_most_threads_accepted_run_and_agree():
    """MAX_THREADS is accepted (the kernel uses no more threads than it has 32-key blocks)."""
    q, k, v = _inputs(1, 8, 2, 300)
    out = fused_decode_attention(q, k, v, num_threads=fused_decode.MAX_THREADS)
    torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)


# --- a build that miscompiles one path of the kernel ---------------------------------------

_BREAK_8_ROWS = ("default: attend8(q, Kg, Vg, n, ks", "default: attend8(q, Kg, Vg, n - 1, ks")
# The review's two wrappers (break_stride.sh, break_threads.sh): a build that reads every cache
# as if its time stride were 64 floats, and one whose merge of the threads' partial results
# skips the last output row when more than 8 threads ran. Both passed the v3 self-test.
_BREAK_STRIDE = ("const long ks = s->kt, vs = s->vt;", "const long ks = 64, vs = 64;")
_BREAK_THREADS = ("for (long row = 0; row < rows; row++) {",
                  "for (long row = 0; row < rows - (threads > 8); row++) {")


def _cc_breaking(folder: Path, change: tuple[str, str], *, native_only: bool) -> Path:
    """A compiler wrapper that builds a copy of fused_decode.c with ``change`` (old, new) made
    once: one path of the kernel broken, every other intact, as a miscompile would leave it."""
    real = fused_decode._compiler()[0]
    broken = folder / "fused_decode_broken.c"
    wrapper = folder / "cc-breaks-one-path"
    wrapper.write_text(f"""#!{sys.executable}
import subprocess, sys
args = sys.argv[1:]
if {native_only!r} and "-march=native" not in args:
    sys.exit("no generic build here")
for i, arg in enumerate(args):
    if arg.endswith("fused_decode.c"):
        text = open(arg).read()
        assert text.count({change[0]!r}) == 1, "the line to break is not where it was"
        open({str(broken)!r}, "w").write(text.replace({change[0]!r}, {change[1]!r}))
        args[i] = {str(broken)!r}
sys.exit(subprocess.call([{real!r}, *args]))
""")
    wrapper.chmod(0o755)
    return wrapper


def _cc_breaking_8_rows(folder: Path, *, native_only: bool) -> Path:
    """The 8-row path (8 query heads of a group in one pass) skips the last key of each
    thread's share, as in the miscompile an earlier review found."""
    return _cc_breaking(folder, _BREAK_8_ROWS, native_only=native_only)


@needs_kernel
def test_a_miscompiled_8_row_path_is_confined_to_it_and_caught_by_the_self_test(tmp_path):
    """The broken build agrees with PyTorch at 4 query heads per group (all the old self-test
    had, with 3) and not at 8: the self-test names the case that caught it."""
    cc = _cc_breaking_8_rows(tmp_path, native_only=False)
    target, error, _ = fused_decode._compile([str(cc)], (*fused_decode._FLAGS, "-march=native", "-fopenmp"),
                                             tmp_path, "broken", 120.0)
    assert target is not None, error
    lib = fused_decode._load(target)  # no constructor, no unsafe flag: safe to load here
    q, k, v = _inputs(3, 8, 2, 740)  # 4 query heads per group
    torch.testing.assert_close(fused_decode._run(lib, q, k, v, 3), _reference(q, k, v), atol=2e-6, rtol=1e-5)
    q, k, v = _inputs(3, 16, 2, 740)  # 8 per group
    assert (fused_decode._run(lib, q, k, v, 3) - _reference(q, k, v)).abs().max() > 1e-3
    why = fused_decode._self_test(lib)
    assert why is not None and "disagrees with F.scaled_dot_product_attention" in why, why
    assert "8 query heads per group" in why, why


@needs_kernel
@pytest.mark.slow
def test_a_build_that_miscompiles_the_8_row_path_is_not_used_and_the_course_falls_back(fresh_build,
                                                                                     monkeypatch):
    monkeypatch.setenv("CC", str(_cc_breaking_8_rows(fresh_build, native_only=True)))
    why = fused_decode_status()
    assert why is not None and why.count("8 query heads per group") == 2, why  # with and without OpenMP
    assert not list((fresh_build / "course_utils").glob("*.so"))  # nothing kept as good
    q, k, v = _inputs(3, 16, 1, 100)  # MQA, 16 heads: two passes of 8
    with pytest.warns(RuntimeWarning, match="fused decode kernel is unavailable .*8 query heads per group"):
        out = fused_decode_attention(q, k, v)
    torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)


def _transposed_inputs(seed=3):
    """q (3, 8, 1, 64); k from a (B, T, g, dk) buffer, v from a (B, T, g, 2 dk) one: time
    strides 128 and 256 floats."""
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(3, 8, 1, 64, generator=gen)
    k = torch.randn(3, 300, 2, 64, generator=gen).transpose(1, 2)
    v = torch.randn(3, 300, 2, 128, generator=gen)[..., :64].transpose(1, 2)
    return q, k, v


@needs_kernel
@pytest.mark.parametrize("broken", ["time stride", "more than 8 threads"])
def test_a_build_broken_only_at_other_strides_or_more_threads_is_caught_by_the_self_test(tmp_path, broken):
    """The review's two wrappers: the broken build agrees with PyTorch on a contiguous cache at
    up to 8 threads (all the v3 self-test had) and not on the path it broke; the self-test
    names the case that caught it."""
    change = _BREAK_STRIDE if broken == "time stride" else _BREAK_THREADS
    cc = _cc_breaking(tmp_path, change, native_only=False)
    target, error, _ = fused_decode._compile([str(cc)], (*fused_decode._FLAGS, "-march=native", "-fopenmp"),
                                             tmp_path, "broken", 120.0)
    assert target is not None, error
    lib = fused_decode._load(target)  # no constructor, no unsafe flag: safe to load here
    q, k, v = _inputs(3, 8, 2, 740)
    torch.testing.assert_close(fused_decode._run(lib, q, k, v, 8), _reference(q, k, v), atol=2e-6, rtol=1e-5)
    if broken == "time stride":
        q, k, v = _transposed_inputs()
        wrong = fused_decode._run(lib, q, k, v, 3)
    else:
        wrong = fused_decode._run(lib, q, k, v, 12, fill=math.nan)  # the row it skips stays NaN
    assert not ((wrong - _reference(q, k, v)).abs().max() <= 1e-3)  # off, or NaN
    why = fused_decode._self_test(lib)
    assert why is not None and "disagrees with F.scaled_dot_product_attention" in why, why
    if broken == "time stride":
        assert "cache transposed, values at another time stride" in why, why
    else:
        caught_at = re.search(r", (\d+) thread\(s\)\)", why)
        assert caught_at and int(caught_at[1]) > 8, why  # the thread count that caught it


@needs_kernel
@pytest.mark.parametrize("broken", ["time stride", "more than 8 threads"])
@pytest.mark.slow
def test_a_build_broken_at_other_strides_or_more_threads_is_not_used(fresh_build, monkeypatch, broken):
    """Through CC, as the review ran them: the self-test in its separate process refuses the
    library, nothing is kept as good, and the course computes the right result with PyTorch."""
    change = _BREAK_STRIDE if broken == "time stride" else _BREAK_THREADS
    monkeypatch.setenv("CC", str(_cc_breaking(fresh_build, change, native_only=True)))
    why = fused_decode_status()
    assert why is not None and why.count("disagrees with F.scaled_dot_product_attention") >= 1, why
    assert not list((fresh_build / "course_utils").glob("*.so"))
    q, k, v = _transposed_inputs()
    with pytest.warns(RuntimeWarning, match="fused decode kernel is unavailable"):
        out = fused_decode_attention(q, k, v, num_threads=12)
    torch.testing.assert_close(out, _reference(q, k, v), atol=2e-6, rtol=1e-5)


def test_the_self_test_covers_every_path_of_the_kernel():
    """1 to 8 query heads per group, a group of 16 (two passes), g = 1 and g > 1, B >= 3, and at
    the most threads several blocks per thread in every share, all of them used."""
    shapes = fused_decode._SELF_TEST_SHAPES
    assert {r for r, _ in shapes} >= {1, 2, 3, 4, 5, 6, 7, 8, 16}
    assert any(g == 1 for _, g in shapes) and any(g > 1 for _, g in shapes)
    assert {g for r, g in shapes if r == 8} >= {1, 2}
    assert fused_decode._SELF_TEST_B >= 3
    T, threads, block = fused_decode._SELF_TEST_T, fused_decode._SELF_TEST_THREADS, 32
    per = math.ceil(math.ceil(T / threads) / block) * block  # keys per thread, whole blocks (as in C)
    assert threads == 8 and math.ceil(T / per) == threads  # all 8 threads get a share
    assert per // block >= 2 and (T - (threads - 1) * per) > block  # several blocks each, the last too
    more = fused_decode._SELF_TEST_MORE_THREADS  # beyond 8, every thread with a share here too
    per = math.ceil(math.ceil(T / more) / block) * block
    assert more > 8 and math.ceil(T / per) == more
    long_t = fused_decode.MAX_THREADS * block - 2  # the self-test's case at MAX_THREADS
    per = math.ceil(math.ceil(long_t / fused_decode.MAX_THREADS) / block) * block
    assert math.ceil(long_t / per) == fused_decode.MAX_THREADS


# --- a full disk is not a compiler error -------------------------------------------------------


def test_a_compiler_that_fails_for_want_of_disk_is_not_remembered(fresh_build, monkeypatch):
    cc = _script(fresh_build, "full-cc",
                 "echo 'cc1: fatal error: error writing to /tmp/ccX.s: No space left on device' >&2\n"
                 "exit 1\n")
    monkeypatch.setenv("CC", str(cc))
    why = fused_decode_status()
    assert "a disk it writes to is full (it said 'No space left on device')" in why, why
    assert "not remembered as a compiler error" in why and why.count("[") == 1  # no other flags tried
    assert "remembered for an hour" not in why, why  # nothing was
    assert not list((fresh_build / "course_utils").glob("*.failed"))
    fused_decode._library.cache_clear()  # a new process tries again, remembering nothing
    assert "remembered in" not in fused_decode_status()


@pytest.mark.skipif(shutil.which("false") is None, reason="needs the `false` command")
def test_a_compiler_that_fails_silently_on_a_full_disk_is_not_remembered(fresh_build, monkeypatch):
    monkeypatch.setenv("CC", "false")
    monkeypatch.setattr(fused_decode, "_LOW_DISK_BYTES", 1 << 62)  # every disk reads as full
    why = fused_decode_status()
    assert f"the disk holding {fresh_build / 'course_utils'} is full (" in why and "MiB free" in why, why
    assert not list((fresh_build / "course_utils").glob("*.failed"))
