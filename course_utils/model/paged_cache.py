"""A paged KV cache: fixed-size blocks in one shared pool, found through a block table.

A :class:`~course_utils.model.kv_cache.PreallocatedCache` reserves ``max_len`` positions for every
sequence, used or not. Paged attention (Kwon et al., 2023, the vLLM paper) cuts the cache into
blocks of ``block_size`` tokens taken from one pool shared by all sequences, as an operating
system pages memory: a sequence holds only the blocks it has filled, plus one partly filled
block, and its **block table** lists which physical block holds each of its logical blocks
(tokens ``0..block_size-1``, then the next ``block_size``, ...). Attention gathers the keys and
values through that table. Blocks can be shared: :meth:`PagedCache.fork` starts a sequence
that shares another's blocks (a common prompt), and a shared block is copied only when one of
its sequences writes into it (copy on write).

One layer is enough to show the bookkeeping: the pool is ``(num_blocks, g, block_size, dk)``
for K and the same for V; a model has one pool per layer, indexed by the same table.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention.validation import (
    check_dims_not_empty,
    check_fits_in_memory,
    check_float_dtype,
    check_holds_values,
    check_int,
    check_tensor,
    describe_shape,
    shown,
)

__all__ = ["PagedCache", "blocks_needed"]


def blocks_needed(length: int, block_size: int) -> int:
    """Blocks of ``block_size`` tokens that hold ``length`` tokens: ``ceil(length / block_size)``."""
    length = check_int(length, "length", minimum=0)
    block_size = check_int(block_size, "block_size", minimum=1)
    return -(-length // block_size)


def _check_hashable(seq: object, name: str) -> None:
    """A sequence's name: hashable, and not a float or a bool. A float name is refused (NaN is
    never equal to itself, so a sequence named ``float("nan")`` could never be found again, and
    ``0.1 + 0.2`` is not ``0.3``), and so is a bool (``True`` and ``1`` are one dict key)."""
    if isinstance(seq, (bool, float)):
        raise TypeError(f"{name} must be a hashable name for a sequence such as a str or an int (not a "
                        f"float or a bool, which are found again unreliably), got "
                        f"{type(seq).__name__} {shown(seq)}")
    try:
        hash(seq)
    except TypeError:
        raise TypeError(f"{name} must be a hashable name for a sequence (a str or an int, say), got "
                        f"{type(seq).__name__} {shown(seq, 60)}") from None


class PagedCache:
    """One layer's keys and values for many sequences, in blocks of a shared pool.

    ``tables[seq]`` lists the physical blocks of sequence ``seq`` in order; ``lengths[seq]`` is
    how many tokens it holds; ``refs[b]`` counts the sequences whose table names block ``b``."""

    def __init__(self, num_blocks: int, block_size: int, num_kv_heads: int, d_head: int, *,
                 dtype: torch.dtype = torch.float32) -> None:
        num_blocks, block_size, num_kv_heads, d_head = (check_int(value, name, minimum=1) for name, value in (
            ("num_blocks", num_blocks), ("block_size", block_size), ("num_kv_heads", num_kv_heads),
            ("d_head", d_head)))  # as plain ints: the shapes and messages below are built from them
        check_float_dtype(dtype, "dtype")  # as PreallocatedCache: integers would truncate the keys
        shape = (num_blocks, num_kv_heads, block_size, d_head)
        check_fits_in_memory(2 * math.prod(shape) * torch.empty((), dtype=dtype).element_size(), None,
                             f"key and value pools of shape {shape} in {dtype}",
                             sizes={"num_blocks": num_blocks, "block_size": block_size,
                                    "num_kv_heads": num_kv_heads, "d_head": d_head})
        self.k_pool, self.v_pool = torch.zeros(shape, dtype=dtype), torch.zeros(shape, dtype=dtype)
        self.block_size = block_size
        self.free = list(range(num_blocks - 1, -1, -1))  # pop() hands out block 0 first
        self.refs = [0] * num_blocks
        self.tables: dict[object, list[int]] = {}
        self.lengths: dict[object, int] = {}

    def _check_seq(self, seq: object, name: str = "seq") -> None:
        _check_hashable(seq, name)
        if seq not in self.tables:
            raise KeyError(f"no sequence {shown(seq)} in the cache; known: {shown(list(self.tables), 200)} "
                           "(start one with add_sequence)")

    def _take_block(self) -> int:
        if not self.free:
            raise RuntimeError(f"the pool's {len(self.refs)} blocks are all in use: free a finished "
                               "sequence (free) or make the pool larger")
        block = self.free.pop()
        self.refs[block] = 1
        return block

    def add_sequence(self, seq: object) -> None:
        """Start an empty sequence named ``seq`` (any hashable name)."""
        _check_hashable(seq, "seq")
        if seq in self.tables:
            raise ValueError(f"sequence {shown(seq)} is already in the cache")
        self.tables[seq], self.lengths[seq] = [], 0

    def append(self, seq: object, k: Tensor, v: Tensor) -> None:
        """Add keys and values ``(g, T_new, dk)`` to the end of ``seq``, taking new blocks as the
        last one fills; a shared last block is first copied (copy on write). All or nothing: when
        the pool has too few free blocks for the new tokens, nothing is written, and an append
        interrupted part way (KeyboardInterrupt) leaves the sequence as it was. NaN and infinity
        are stored as given, as the contiguous caches of :mod:`~course_utils.model.kv_cache` store
        them (they propagate, as in attention; checking every append would cost a pass over the
        new tokens)."""
        self._check_seq(seq)
        for name, t in (("k", k), ("v", v)):
            check_tensor(t, name, ndim=3, layout="(g, T_new, dk)")
            g, dk = self.k_pool.shape[1], self.k_pool.shape[3]
            if t.shape[0] != g or t.shape[2] != dk or t.shape != k.shape:
                raise ValueError(f"{name} must be (g={g}, T_new, dk={dk}) like the pool, k and v alike; "
                                 f"got k {describe_shape(k)}, v {describe_shape(v)}")
            if t.dtype != self.k_pool.dtype:
                raise TypeError(f"{name} has dtype {t.dtype} but the pool holds {self.k_pool.dtype}: "
                                f"convert with {name}.to({self.k_pool.dtype})")
            check_holds_values(t, name)  # before any block is taken: a refused append changes nothing
            if t.device != self.k_pool.device:
                raise ValueError(f"{name} is on {t.device} but the pool is on {self.k_pool.device}: "
                                 f"move it with {name}.to({str(self.k_pool.device)!r})")
        table, B = self.tables[seq], self.block_size
        length, new = self.lengths[seq], k.shape[1]
        wanted = blocks_needed(length + new, B) - len(table)  # fresh blocks for the new tokens
        if new and length % B and self.refs[table[-1]] > 1:
            wanted += 1  # the shared, partly filled last block is copied before the first write
        if wanted > len(self.free):
            raise RuntimeError(f"the pool's {len(self.refs)} blocks are all in use: sequence {shown(seq)} "
                               f"needs {wanted} more for {new} tokens, {len(self.free)} are free; nothing "
                               "was appended (free a finished sequence with free_sequence, or make the "
                               "pool larger)")
        saved = list(table), list(self.free), list(self.refs)
        try:
            self._write(seq, k, v)
        except BaseException:  # interrupted (KeyboardInterrupt) between tokens: undo the part written
            (table[:], self.free[:], self.refs[:]), self.lengths[seq] = saved, length
            raise

    def _write(self, seq: object, k: Tensor, v: Tensor) -> None:
        """The writes of :meth:`append`, one token at a time (checked there)."""
        table, B = self.tables[seq], self.block_size
        for i in range(k.shape[1]):
            pos = self.lengths[seq]
            if pos % B == 0:  # the last block is full (or there is none): take a new one
                table.append(self._take_block())
            elif self.refs[table[-1]] > 1:  # shared with another sequence: copy before writing
                shared, table[-1] = table[-1], self._take_block()
                self.refs[shared] -= 1
                self.k_pool[table[-1]] = self.k_pool[shared]
                self.v_pool[table[-1]] = self.v_pool[shared]
            self.k_pool[table[-1], :, pos % B] = k[:, i]
            self.v_pool[table[-1], :, pos % B] = v[:, i]
            self.lengths[seq] = pos + 1

    def fork(self, parent: object, child: object) -> None:
        """Start ``child`` as a copy of ``parent`` that shares all of its blocks (no data copied)."""
        self._check_seq(parent, "parent")
        self.add_sequence(child)
        self.tables[child] = list(self.tables[parent])
        self.lengths[child] = self.lengths[parent]
        for block in self.tables[child]:
            self.refs[block] += 1

    def free_sequence(self, seq: object) -> None:
        """Drop ``seq``; blocks no other sequence uses go back to the pool."""
        self._check_seq(seq)
        for block in self.tables.pop(seq):
            self.refs[block] -= 1
            if self.refs[block] == 0:
                self.free.append(block)
        del self.lengths[seq]

    def gather(self, seq: object) -> tuple[Tensor, Tensor]:
        """Keys and values of ``seq`` in order, ``(g, T, dk)`` each, read through its block table."""
        self._check_seq(seq)
        table = torch.tensor(self.tables[seq], dtype=torch.long)
        T = self.lengths[seq]
        g, dk = self.k_pool.shape[1], self.k_pool.shape[3]
        # (n_blocks, g, B, dk) -> (g, n_blocks * B, dk), then drop the unused end of the last block
        k = self.k_pool[table].transpose(0, 1).reshape(g, -1, dk)[:, :T]
        v = self.v_pool[table].transpose(0, 1).reshape(g, -1, dk)[:, :T]
        return k, v

    def attend(self, seq: object, q: Tensor) -> Tensor:
        """One new query per head, ``q`` ``(h, 1, dk)``, attending over all of ``seq``: ``(h, 1, dk)``.
        ``h >= 1``: no head would come back as an empty result without a word. Several queries
        (``(h, 3, dk)``) are refused: each would see every cached key, with no causal mask."""
        check_tensor(q, "q", ndim=3, layout="(h, 1, dk)")
        check_dims_not_empty(q, "q", ("h",))
        check_holds_values(q, "q")
        if q.device != self.k_pool.device:
            raise ValueError(f"q is on {q.device} but the pool is on {self.k_pool.device}: move it with "
                             f"q.to({str(self.k_pool.device)!r})")
        if q.dtype != self.k_pool.dtype:
            raise TypeError(f"q has dtype {q.dtype} but the pool holds {self.k_pool.dtype}: convert with "
                            f"q.to({self.k_pool.dtype})")
        k, v = self.gather(seq)
        if k.shape[1] == 0:
            raise ValueError(f"sequence {shown(seq)} is empty: append keys and values before attending")
        if q.shape[0] % k.shape[0] or q.shape[1] != 1 or q.shape[2] != k.shape[2]:
            raise ValueError(f"q must be (h, 1, dk={k.shape[2]}) with h a multiple of g={k.shape[0]}, "
                             f"got {describe_shape(q)}")
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=q.shape[0] != k.shape[0])

    def blocks_in_use(self) -> int:
        """Physical blocks held by at least one sequence (a shared block counts once)."""
        return sum(r > 0 for r in self.refs)
