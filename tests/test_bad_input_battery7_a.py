"""Battery 7 (attention, shapes, worked example, timing, decode): each call that failed
obscurely (a torch or Python error from deep inside) or passed silently (a wrong result, no
error) now raises an error naming its argument, what was expected and what arrived."""

import numpy as np
import pytest
import torch

from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.attention.mha import MultiHeadAttention
from course_utils.env import pick_device

# a GPU index no machine here has: on a CPU-only torch "no usable CUDA GPU", else "only N GPU(s)"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"
MHA = MultiHeadAttention(8, 2)
GQA = GroupedQueryAttention(8, 2, 1)

CASES = [
    # row 1 and its neighbour padding_mask: an absent device is named before torch asserts
    (lambda: causal_mask(3, device=MISSING_GPU), ValueError, ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=MISSING_GPU), ValueError,
     ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=3), TypeError, ["device", "int 3"]),
    (lambda: causal_mask(3, device="xpu"), ValueError, ["device", "'cpu'", "'xpu'"]),
    # rows 2-6: the public project_qkv checks its inputs as forward does
    (lambda: MHA.project_qkv(*[torch.ones(8)] * 3), ValueError, ["query", "3-D", "d_model=8", "(8)"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.int64)] * 3), TypeError,
     ["query", "floating-point", "torch.int64"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 5)] * 3), ValueError, ["query", "d_model=8", "(1, 3, 5)"]),
    (lambda: MHA.project_qkv([[1.0]], [[1.0]], [[1.0]]), TypeError, ["query", "torch.Tensor", "list"]),
    (lambda: MHA.project_qkv(*[np.ones((1, 3, 8), np.float32)] * 3), TypeError,
     ["query", "torch.Tensor", "ndarray"]),
    (lambda: MHA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(2, 3, 8), torch.ones(2, 3, 8)), ValueError,
     ["batch size B", "(1, 3, 8)", "(2, 3, 8)"]),
    (lambda: MHA.project_qkv(torch.ones(1, 3, 8), torch.ones(1, 4, 8), torch.ones(1, 3, 8)), ValueError,
     ["key", "value", "Tk", "(1, 4, 8)"]),
    (lambda: GQA.project_qkv(*[torch.ones(1, 3, 8, dtype=torch.float64)] * 3), TypeError,
     ["query", "torch.float64", "torch.float32"]),
]


@pytest.mark.parametrize("call, error, words", CASES)
def test_battery7_call_is_named(call, error, words):
    with pytest.raises(error) as info:
        call()
    missing = [word for word in words if word not in str(info.value)]
    assert not missing, f"{missing} not in: {info.value}"


def test_a_missing_gpu_gets_pick_devices_sentence():
    """One sentence for one mistake: the masks say what pick_device says."""
    with pytest.raises(ValueError) as ours:
        causal_mask(3, device=MISSING_GPU)
    with pytest.raises(ValueError) as theirs:
        pick_device(MISSING_GPU)
    assert str(ours.value) == str(theirs.value)


def test_masks_still_go_where_asked():
    assert causal_mask(3, device="meta").shape == (3, 3)
    assert padding_mask([1, 2], device="meta").is_meta  # the lengths are read on their own device
    assert padding_mask([1, 2], 3, device="cpu").tolist() == [[True, False, False], [True, True, False]]


def test_project_qkv_still_projects():
    x, c = torch.randn(1, 3, 8), torch.randn(1, 5, 8)
    q, k, v = MHA.project_qkv(x, c, c)
    assert q.shape == (1, 2, 3, 4) and k.shape == v.shape == (1, 2, 5, 4)
    q, k, v = MHA.project_qkv(x, x, x)  # self-attention: the fused matmul, same numbers as forward's
    out = MHA.out_proj(MHA.merge_heads(torch.softmax(q @ k.transpose(-2, -1) / 2.0, -1) @ v))
    assert torch.allclose(out, MHA(x)[0], atol=1e-6)
