"""Battery 10's package findings (issue 38): inputs that reached torch's allocator, Python's
internals or a validator's own broken message. Each is now refused by name: the argument, what
was expected and what arrived."""

from __future__ import annotations

import pytest

from course_utils.attention import validation as va
from course_utils.attention.mla import MultiHeadLatentAttention
from course_utils.attention.naive_mha import AttentionHead, NaiveMultiHeadAttention
from course_utils.bench import mha_speed

HUGE = 10**12


def refused(call, error, words):
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


# -- 1. sizes beyond memory are refused before allocating ---------------------------------------
TOO_BIG = [
    ("MLA d_model", lambda: MultiHeadLatentAttention(HUGE, 2, 4, 4, 2), ["d_model asks for", "GiB"]),
    ("MLA num_heads", lambda: MultiHeadLatentAttention(8, HUGE, 4, 4, 2), ["num_heads asks for", "GiB"]),
    ("MLA d_head", lambda: MultiHeadLatentAttention(8, 2, HUGE, 4, 2), ["d_head asks for", "GiB"]),
    ("MLA d_latent", lambda: MultiHeadLatentAttention(8, 2, 4, HUGE, 2), ["d_latent asks for", "GiB"]),
    ("MLA d_rope", lambda: MultiHeadLatentAttention(8, 2, 4, 4, HUGE), ["d_rope asks for", "GiB"]),
    ("AttentionHead d_model", lambda: AttentionHead(HUGE, 4), ["d_model asks for", "d_k=4"]),
    ("AttentionHead d_k", lambda: AttentionHead(4, HUGE), ["d_k asks for", "d_model=4"]),
    ("NaiveMultiHeadAttention d_model", lambda: NaiveMultiHeadAttention(HUGE, 2), ["d_model asks for"]),
    ("lesson_implementations d_model", lambda: mha_speed.lesson_implementations(HUGE, 2),
     ["d_model asks for", "more than this machine's"]),
]


@pytest.mark.parametrize("call, words", [c[1:] for c in TOO_BIG], ids=[c[0] for c in TOO_BIG])
def test_sizes_beyond_memory_are_refused_before_allocating(call, words):
    refused(call, ValueError, words)


def test_the_fit_check_counts_the_extra_layers():
    """A layer given in ``also`` counts: alone it fits, with a huge extra one it does not."""
    va.check_linear_weights_fit(4, (4,), also=((4, 4),))
    refused(lambda: va.check_linear_weights_fit(4, (4,), also=((HUGE, HUGE),), sizes={"a": 1}), ValueError,
            ["a asks for", "(a=1: weights of 2 linear layers"])


def test_small_modules_still_build():
    assert MultiHeadLatentAttention(16, 2, 4, 4, 2).w_uk.weight.shape == (8, 4)
    assert AttentionHead(8, 4).w_q.weight.shape == (4, 8)
    assert len(NaiveMultiHeadAttention(8, 2).heads) == 2
