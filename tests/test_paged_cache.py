"""The paged cache: block tables that give the contiguous cache's attention, sharing, refusals."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.model.paged_cache import PagedCache, blocks_needed


def _kv(g: int, T: int, dk: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(g, T, dk, generator=gen), torch.randn(g, T, dk, generator=gen)


@pytest.mark.parametrize("block_size", [1, 4, 16, 64])
def test_attention_through_interleaved_block_tables_equals_the_contiguous_cache(block_size):
    pool = PagedCache(num_blocks=64, block_size=block_size, num_kv_heads=2, d_head=8)
    lengths = {"a": 37, "b": 5, "c": 16}
    contiguous = {name: _kv(2, n, 8, seed) for seed, (name, n) in enumerate(lengths.items())}
    for name in contiguous:
        pool.add_sequence(name)
    for t in range(37):  # the sequences take turns: their blocks interleave in the pool
        for name, (k, v) in contiguous.items():
            if t < k.shape[1]:
                pool.append(name, k[:, t:t + 1], v[:, t:t + 1])
    q = torch.randn(6, 1, 8, generator=torch.Generator().manual_seed(9))  # h = 6 over g = 2
    for name, (k, v) in contiguous.items():
        got_k, got_v = pool.gather(name)
        assert torch.equal(got_k, k) and torch.equal(got_v, v)
        expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.testing.assert_close(pool.attend(name, q), expected)
        assert len(pool.tables[name]) == blocks_needed(k.shape[1], block_size)
    assert pool.blocks_in_use() == sum(blocks_needed(n, block_size) for n in (37, 5, 16))


def test_a_fork_shares_blocks_and_copies_the_partial_one_on_write():
    pool = PagedCache(num_blocks=8, block_size=4, num_kv_heads=1, d_head=2)
    prompt_k, prompt_v = _kv(1, 6, 2, 0)
    pool.add_sequence("p")
    pool.append("p", prompt_k, prompt_v)
    pool.fork("p", "c")
    assert pool.tables["c"] == pool.tables["p"] == [0, 1] and pool.blocks_in_use() == 2
    new_k, new_v = _kv(1, 3, 2, 1)
    pool.append("c", new_k, new_v)  # block 1 is shared and partly filled: c copies it first
    assert pool.tables["p"] == [0, 1] and pool.tables["c"][0] == 0 and 1 not in pool.tables["c"]
    assert torch.equal(pool.gather("p")[0], prompt_k)  # the parent's tokens are untouched
    assert torch.equal(pool.gather("c")[0], torch.cat([prompt_k, new_k], 1))
    pool.append("p", new_v, new_k)  # p now holds block 1 alone: written in place
    assert pool.tables["p"][:2] == [0, 1]
    pool.free_sequence("c")
    assert pool.refs[0] == 1 and pool.blocks_in_use() == 3  # p's blocks 0, 1 and its new one
    pool.free_sequence("p")
    assert pool.blocks_in_use() == 0 and len(pool.free) == 8


def test_full_shared_blocks_are_never_copied():
    pool = PagedCache(num_blocks=8, block_size=4, num_kv_heads=1, d_head=2)
    pool.add_sequence("p")
    pool.append("p", *_kv(1, 8, 2, 0))  # two full blocks
    pool.fork("p", "c")
    pool.append("c", *_kv(1, 1, 2, 1))
    assert pool.tables["c"][:2] == pool.tables["p"] and pool.blocks_in_use() == 3


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="block_size must be a positive int, got 0"):
        PagedCache(4, 0, 1, 2)
    with pytest.raises(TypeError, match="num_blocks must be an int"):
        PagedCache(4.0, 4, 1, 2)
    pool = PagedCache(num_blocks=1, block_size=2, num_kv_heads=1, d_head=2)
    with pytest.raises(KeyError, match="no sequence 'x'.*add_sequence"):
        pool.append("x", torch.ones(1, 1, 2), torch.ones(1, 1, 2))
    pool.add_sequence("x")
    with pytest.raises(ValueError, match="already in the cache"):
        pool.add_sequence("x")
    with pytest.raises(ValueError, match=r"k must be \(g=1, T_new, dk=2\)"):
        pool.append("x", torch.ones(2, 1, 2), torch.ones(2, 1, 2))
    with pytest.raises(ValueError, match="k must be 3-D"):
        pool.append("x", torch.ones(1, 2), torch.ones(1, 2))
    with pytest.raises(ValueError, match="is empty"):
        pool.attend("x", torch.ones(1, 1, 2))
    with pytest.raises(RuntimeError, match="blocks are all in use"):
        pool.append("x", torch.ones(1, 3, 2), torch.ones(1, 3, 2))
    pool.append("x", torch.ones(1, 2, 2), torch.ones(1, 2, 2))
    with pytest.raises(ValueError, match="h a multiple of g=1"):
        pool.attend("x", torch.ones(1, 1, 3))
    with pytest.raises(ValueError, match="block_size must be a positive int"):
        blocks_needed(3, 0)
    assert blocks_needed(0, 16) == 0 and blocks_needed(17, 16) == 2


def test_an_append_the_pool_cannot_hold_changes_nothing():
    """O3: with 16 free slots, 17 tokens used to leave 16 appended before the error. Now the
    free blocks are counted first; a refused append leaves tables, lengths, refs and pool alone."""
    pool = PagedCache(num_blocks=4, block_size=4, num_kv_heads=1, d_head=2)
    pool.add_sequence("a")
    k, v = _kv(1, 17, 2, 0)
    before = pool.k_pool.clone()
    with pytest.raises(RuntimeError, match="needs 5 more for 17 tokens, 4 are free; nothing was appended"):
        pool.append("a", k, v)
    assert pool.tables == {"a": []} and pool.lengths == {"a": 0} and pool.refs == [0] * 4
    assert len(pool.free) == 4 and torch.equal(pool.k_pool, before)
    pool.append("a", k[:, :16], v[:, :16])  # exactly what fits
    assert pool.lengths["a"] == 16 and not pool.free
    # a fork whose shared last block is partly filled needs one block for the copy on write
    shared = PagedCache(num_blocks=3, block_size=4, num_kv_heads=1, d_head=2)
    shared.add_sequence("p")
    shared.append("p", k[:, :6], v[:, :6])  # blocks 0 (full) and 1 (half)
    shared.fork("p", "c")
    tables, refs = {s: list(t) for s, t in shared.tables.items()}, list(shared.refs)
    with pytest.raises(RuntimeError, match="needs 2 more for 3 tokens, 1 are free"):
        shared.append("c", k[:, 6:9], v[:, 6:9])  # a copy of block 1, then a new block for token 8
    assert shared.tables == tables and shared.refs == refs and shared.lengths == {"p": 6, "c": 6}
    shared.append("c", k[:, 6:8], v[:, 6:8])  # the copy alone: fits
    assert torch.equal(shared.gather("c")[0], k[:, :8]) and torch.equal(shared.gather("p")[0], k[:, :6])


def test_the_pool_holds_floating_numbers_of_one_dtype():
    """S2: an int8 pool truncated float keys (0.7 -> 0, 300 -> 44); O2: a float64 query into a
    float32 pool failed inside PyTorch."""
    for dtype in (torch.int8, torch.int64, torch.bool, "float32"):
        with pytest.raises(TypeError, match="dtype must be a floating torch.dtype"):
            PagedCache(2, 4, 1, 2, dtype=dtype)
    assert PagedCache(2, 4, 1, 2, dtype=torch.float64).k_pool.dtype == torch.float64
    pool = PagedCache(2, 4, 1, 2)
    pool.add_sequence("a")
    with pytest.raises(TypeError, match="k has dtype torch.float64 but the pool holds torch.float32"):
        pool.append("a", torch.ones(1, 1, 2, dtype=torch.float64), torch.ones(1, 1, 2, dtype=torch.float64))
    pool.append("a", torch.ones(1, 1, 2), torch.ones(1, 1, 2))
    with pytest.raises(TypeError, match="q has dtype torch.float64 but the pool holds torch.float32"):
        pool.attend("a", torch.ones(2, 1, 2, dtype=torch.float64))


def test_attend_refuses_several_queries_per_head():
    """``attend`` takes one new query per head; three queries of one head were attended over every
    cached key with no causal mask and returned without a word (a cold battery's repro)."""
    pool = PagedCache(num_blocks=4, block_size=4, num_kv_heads=2, d_head=8)
    pool.add_sequence(0)
    k, v = _kv(2, 3, 8, seed=0)
    pool.append(0, k, v)
    with pytest.raises(ValueError, match=r"q must be \(h, 1, dk=8\) .* got \(4, 3, 8\)"):
        pool.attend(0, torch.zeros(4, 3, 8))
    assert pool.attend(0, torch.zeros(4, 1, 8)).shape == (4, 1, 8)
