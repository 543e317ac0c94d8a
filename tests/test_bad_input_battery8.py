"""Battery 8 (a cold bad-input pass, protocol 4): sizes that cannot fit are refused by name
before anything is allocated, as their neighbours (causal_mask, PreallocatedCache) already were.
Before, each one met PyTorch's allocator ("DefaultCPUAllocator: can't allocate memory") or, on
a machine with more swap than sense, started to swap."""

from __future__ import annotations

import pytest
import torch

from course_utils.attention.masks import padding_mask
from course_utils.model.kv_cache import QuantizedCache
from course_utils.model.paged_cache import PagedCache
from course_utils.model.train import AGREEMENT_TASK, INDUCTION_TASK
from course_utils.tasks.two_relations import TwoKeyTask

HUGE = [
    ("padding_mask max_len", lambda: padding_mask(torch.tensor([3]), max_len=10**10), "max_len"),
    ("padding_mask lengths", lambda: padding_mask([10**10]), "max_len"),
    ("QuantizedCache max_len", lambda: QuantizedCache(2, 1, 2, 8, max_len=10**10), "max_len"),
    ("PagedCache num_blocks", lambda: PagedCache(10**9, 16, 2, 8), "num_blocks"),
    ("induction eval_batch", lambda: INDUCTION_TASK.eval_batch(10**9), "batch_size"),
    ("agreement eval_batch", lambda: AGREEMENT_TASK.eval_batch(10**9), "batch_size"),
    ("TwoKeyTask sample", lambda: TwoKeyTask(num_items=8, num_keys=16, num_symbols=8, max_repeats=3)
     .sample(10**10, seed=0), "n"),
]


@pytest.mark.parametrize("call, argument", [(c, a) for _, c, a in HUGE], ids=[i for i, _, _ in HUGE])
def test_a_size_beyond_memory_is_refused_by_name_before_any_allocation(call, argument):
    with pytest.raises(ValueError) as refused:
        call()
    message = str(refused.value)
    assert message.startswith(f"{argument} asks for ") and "GiB" in message, message
    assert "of memory" in message, message


def test_ordinary_sizes_still_work():
    assert padding_mask(torch.tensor([2, 3])).tolist() == [[True, True, False], [True, True, True]]
    assert INDUCTION_TASK.eval_batch(4).tokens.shape[0] == 4
    assert AGREEMENT_TASK.eval_batch(4).tokens.shape[0] == 4
    cache = QuantizedCache(1, 1, 2, 8, max_len=64)
    assert cache.max_len == 64 and PagedCache(4, 16, 2, 8).block_size == 16


def test_an_answer_that_changes_process_settings_leaves_the_next_check_as_it_was():
    """Battery 8: an answer calling np.seterr(all='raise') made the next check fail the
    reference answer ('your function raised FloatingPointError'), and one calling
    torch.set_default_dtype(torch.float64) was told it 'replaced torch.Storage'. The check now
    puts NumPy's error state, torch's default dtype and grad mode back after every answer."""
    import numpy as np

    from course_utils.exercises import lesson02

    def softmax_rows(scores):
        shifted = np.exp(scores - scores.max(axis=-1, keepdims=True))
        return shifted / shifted.sum(axis=-1, keepdims=True)

    before = (np.geterr(), torch.get_default_dtype(), torch.is_grad_enabled())

    def meddles(scores):  # right, and leaves the settings changed behind it
        weights = softmax_rows(scores)
        np.seterr(all="raise")
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        return weights

    first = lesson02.check_softmax_rows(meddles)
    assert first.passed and "torch.Storage" not in first.message, first.message
    assert (np.geterr(), torch.get_default_dtype(), torch.is_grad_enabled()) == before
    assert lesson02.check_softmax_rows(softmax_rows).passed  # the next check: no FloatingPointError


def test_train_out_at_a_folder_is_refused_before_training(tmp_path, capsys):
    """Battery 8: `train --out data/checkpoints` (a folder) exited 0 and wrote
    data/checkpoints.json and .safetensors beside the folder, not in it."""
    from course_utils.model import train

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    with pytest.raises(SystemExit) as info:
        train.main(["induction", "--steps", "1", "--no-progress", "--out", str(folder)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "is a folder" in err and f"{folder / 'induction'}" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoints"] and not any(folder.iterdir())


@pytest.mark.parametrize("command", [["mha", "--repeats", str(10**30)], ["gqa", "--repeats", "10001"]])
def test_bench_repeats_have_a_ceiling(command, capsys):
    """Battery 8: `bench mha --repeats 10**30` was accepted and ran until killed."""
    from course_utils.bench.cli import main

    with pytest.raises(SystemExit) as info:
        main(command)
    assert info.value.code == 2 and "expected at most 10,000 repeats" in capsys.readouterr().err


def test_battery8_helpers_name_their_own_argument():
    """Battery 8: SlidingWindowCache(window=10**10) was refused as 'max_len';
    attention_by_copies(digits=-1) rounded every share to 0.0; RelationsConfig(lr=inf) trained
    to garbage; random_buffer(seed=-1) met torch's generator."""
    import math

    from course_utils.bench.decode_step import random_buffer
    from course_utils.model.kv_cache import SlidingWindowCache
    from course_utils.tasks.two_relations import RelationsConfig, attention_by_copies

    with pytest.raises(ValueError, match=r"^window asks for .* GiB"):
        SlidingWindowCache(2, 1, 2, 8, window=10**10)
    assert SlidingWindowCache(2, 1, 2, 8, window=16).window == 16
    with pytest.raises(ValueError, match="digits must be"):
        attention_by_copies(None, None, digits=-1)
    for lr, error, words in ((math.inf, ValueError, "lr must be a finite number, got inf"),
                             (math.nan, ValueError, "lr must be a finite number, got nan"),
                             (0.0, ValueError, "lr must be a finite number > 0, got 0.0"),
                             (True, TypeError, "lr must be a real number, got bool True"),
                             ("0.1", TypeError, "lr must be a real number, got str '0.1'")):
        with pytest.raises(error) as refused:
            RelationsConfig(lr=lr)
        assert str(refused.value) == f"RelationsConfig.{words}"  # Class.field (battery 14)
    with pytest.raises(ValueError, match="seed"):
        random_buffer(64, seed=-1)
    assert random_buffer(64, seed=0).numel() == 16


def test_attention_modules_built_from_numpy_ints_run():
    """Battery 8: MultiHeadAttention(np.int64(8), np.int64(2)) and GroupedQueryAttention(8, 4,
    np.int64(2)) were built, then failed inside torch's split in forward."""
    import numpy as np

    from course_utils.attention.gqa import GroupedQueryAttention
    from course_utils.attention.mha import MultiHeadAttention

    x = torch.randn(1, 3, 8)
    mha = MultiHeadAttention(np.int64(8), np.int64(2))
    gqa = GroupedQueryAttention(8, 4, np.int64(2))
    assert type(mha.d_model) is int and type(gqa.num_kv_heads) is int
    outputs = [m(x) for m in (mha, gqa)]
    assert all((out[0] if isinstance(out, tuple) else out).shape == (1, 3, 8) for out in outputs)


def test_the_time_limit_lets_an_import_the_answer_started_finish(tmp_path, monkeypatch):
    """Battery 8: an answer calling torch.use_deterministic_algorithms(True) set off torch's lazy
    sympy import (7 s on a busy machine); the time limit struck inside it, and the half-imported
    package broke torch for the rest of the kernel. The limit now waits for an import to finish
    (up to IMPORT_GRACE seconds in all) before it stops the answer: the module is whole, and an
    answer that runs on after the import is still stopped."""
    import sys

    from course_utils.exercises import lesson02

    (tmp_path / "slow_import_b8.py").write_text("import time\ntime.sleep(1.5)\nDONE = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("COURSE_CHECK_TIMEOUT", "0.5")
    monkeypatch.delitem(sys.modules, "slow_import_b8", raising=False)

    def imports_then_loops(scores):
        import slow_import_b8  # noqa: F401 - the slow import is the point

        while True:
            pass

    feedback = lesson02.check_softmax_rows(imports_then_loops)
    assert sys.modules["slow_import_b8"].DONE is True  # imported whole, not cut off half-way
    assert not feedback.passed and "more than 0.5 s" in feedback.message, feedback.message
