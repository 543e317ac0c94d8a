"""Battery 7 (attention, shapes, worked example, timing, decode): each call that failed
obscurely (a torch or Python error from deep inside) or passed silently (a wrong result, no
error) now raises an error naming its argument, what was expected and what arrived."""

import pytest
import torch

from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.env import pick_device

# a GPU index no machine here has: on a CPU-only torch "no usable CUDA GPU", else "only N GPU(s)"
MISSING_GPU = f"cuda:{torch.cuda.device_count() + 7}"

CASES = [
    # row 1 and its neighbour padding_mask: an absent device is named before torch asserts
    (lambda: causal_mask(3, device=MISSING_GPU), ValueError, ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=MISSING_GPU), ValueError,
     ["device", repr(MISSING_GPU), "asked for"]),
    (lambda: padding_mask([1, 2], device=3), TypeError, ["device", "int 3"]),
    (lambda: causal_mask(3, device="xpu"), ValueError, ["device", "'cpu'", "'xpu'"]),
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
