"""What a machine with a CUDA GPU changes, held here so that both kinds of machine check it.

The first tests run everywhere: they pretend PyTorch sees a GPU. The ones marked ``needs_cuda``
run only where one is present (the GPU machine a session may be lent; CI has none) and
repeat, on the GPU, what failed there before a fix: parallel_map after a backward pass, and
MLA's rotary embedding on CUDA inputs.
"""

from __future__ import annotations

import os

import pytest
import torch

from course_utils import parallel
from course_utils.parallel import default_workers, parallel_map

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _pid(_: object) -> int:
    return os.getpid()


@pytest.fixture
def gpu_visible(monkeypatch):
    """PyTorch answers that a CUDA GPU is present (no CUDA call is made)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def test_parallel_map_runs_in_this_process_where_a_gpu_is_visible(gpu_visible):
    # fork would break autograd and CUDA in the workers: the jobs run as the plain loop
    assert parallel_map(_pid, range(3), workers=3) == [os.getpid()] * 3
    assert default_workers(4) == 1


def test_parallel_map_timeout_without_fork_uses_the_alarm(gpu_visible):
    import time

    with pytest.raises(TimeoutError, match=r"fn\(items\[0\]\).*timeout=0.5"):
        parallel_map(lambda _: time.sleep(5), [0], timeout=0.5)


@pytest.mark.skipif(not parallel._fork_available(), reason="needs Linux fork and no visible GPU")
def test_parallel_map_forks_where_no_gpu_is_visible():
    assert os.getpid() not in parallel_map(_pid, range(2), workers=2)


def _train_tiny(seed: int) -> float:
    torch.manual_seed(seed)
    layer = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(layer.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        layer(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
    return float(layer.weight.sum())


@needs_cuda
def test_training_jobs_after_a_backward_on_a_gpu_machine():
    # a backward pass in this process starts autograd's GPU threads; fork then breaks the next one
    torch.nn.Linear(2, 1).cuda()(torch.randn(3, 2, device="cuda")).sum().backward()
    assert parallel_map(_train_tiny, [0, 1], workers=2) == [_train_tiny(0), _train_tiny(1)]


@needs_cuda
def test_mla_runs_on_cuda_as_on_cpu():
    from course_utils.attention.mla import MultiHeadLatentAttention

    torch.manual_seed(0)
    module = MultiHeadLatentAttention(64, 4, 16, 32, 8)
    x = torch.randn(2, 9, 64)
    expected = module(x)
    on_gpu = module.cuda()(x.cuda())
    torch.testing.assert_close(on_gpu.cpu(), expected, rtol=1e-4, atol=1e-5)
    out, (latents, rope_keys) = module.decode(x.cuda()[:, :1])
    assert out.device.type == latents.device.type == rope_keys.device.type == "cuda"


def test_printed_cxx_warnings_become_the_reason():
    from course_utils.attention.sdpa_backends import _printed_warnings

    text = ("[W1130 01:32:38.403618741 sdp_utils_cpp.h:91] Warning: Expected query, key and value to all "
            "be of dtype: {Half, BFloat16}. Got Query dtype: float. (function check_tensor_dtype)\n"
            "unrelated line\n")
    assert _printed_warnings(text) == [
        "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float."]


@needs_cuda
def test_backend_rejection_reason_names_the_cause_and_prints_nothing(capfd):
    from course_utils.attention.sdpa_backends import backend_rejection_reason

    q = torch.randn(1, 2, 8, 64, device="cuda")  # float32: FlashAttention takes half precision only
    reason = backend_rejection_reason("flash", q, q, q)
    printed = capfd.readouterr().err
    assert reason and "returned False" not in reason and "dtype" in reason, reason
    assert "sdp_utils" not in printed and "Warning:" not in printed, printed


def test_native_stderr_is_captured_and_restored(capfd):
    from course_utils.attention.native_output import native_stderr_captured

    with native_stderr_captured() as printed:
        os.write(2, b"[W1130 sdp_utils_cpp.h:91] Warning: from C++\n")
    os.write(2, b"after\n")
    assert "from C++" in printed.text
    err = capfd.readouterr().err
    assert "from C++" not in err and "after" in err


def test_peak_allocated_bytes_prints_nothing(capfd):
    # torch 2.11's profiler printed a UserWarning into lesson 04's output on the GPU machine
    import warnings

    from course_utils.attention.shapes import peak_allocated_bytes

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert peak_allocated_bytes(lambda: torch.zeros(1000)) >= 4000
    assert not [w for w in caught if "Profiler" in str(w.message)]
    assert capfd.readouterr().err == ""
