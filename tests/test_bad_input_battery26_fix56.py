"""Battery 26, fix pass 56: each bad input it found refused by name (or documented)."""
from __future__ import annotations

import torch

from tests.bad_input_cases import raises_naming


def test_an_inference_tensor_is_named_when_the_module_tracks_gradients() -> None:
    from course_utils.attention.mha import MultiHeadAttention

    module = MultiHeadAttention(16, 4)
    with torch.inference_mode():
        x = torch.randn(2, 4, 16)
    raises_naming(ValueError, ["query", "torch.inference_mode()", "torch.no_grad()", "query.clone()"],
                  lambda: module(x))
    with torch.no_grad():
        assert module(x)[0].shape == (2, 4, 16)  # where it can run, it runs


def test_backend_rejection_reason_refuses_shapes_no_attention_takes() -> None:
    from course_utils.attention.sdpa_backends import backend_rejection_reason

    x = torch.randn(2, 2, 4, 8)
    raises_naming(ValueError, ["q and k", "same last dim", "(2, 2, 4, 0)"],
                  lambda: backend_rejection_reason("math", x[..., :0], x, x))
    raises_naming(ValueError, ["k and v", "same length Tk"],
                  lambda: backend_rejection_reason("math", x, x, x[:, :, :3]))


def test_a_quantized_record_of_no_numbers_is_refused() -> None:
    from course_utils.model.kv_cache import Quantized

    codes = torch.zeros(1, 2, 4, 8, dtype=torch.int8)[..., :0]
    raises_naming(ValueError, ["Quantized.codes", "at least one token and one channel", "(1, 2, 4, 0)"],
                  lambda: Quantized(codes, torch.ones(1, 2, 4, 1), None))


def test_bench_decode_reads_a_generator_of_groups_once() -> None:
    from course_utils.bench.gqa_speed import bench_decode

    result = bench_decode(4, 8, 16, 1, (g for g in [4, 2]), repeats=1, warmup=0, methods=("course",),
                          copy_mib=0, progress=False)
    assert [row.num_kv_heads for row in result.rows] == [4, 2]
