"""Battery 24 (b24a), fix pass 54a: O1-O4, S1-S4 - each bad input refused by name (or documented)."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


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


def test_the_naive_module_documents_its_empty_batch() -> None:
    from course_utils.attention import naive_mha

    assert "empty batch" in naive_mha.__doc__ and "lesson 04 prints" in naive_mha.__doc__
