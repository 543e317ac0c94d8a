"""Battery 22a (issue 38), fix pass S (bench): make_read_probe's probe keeps its buffer alive (1)."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from course_utils.bench import decode_step as DS


# -- 1: the compiled-sum probe kept only buffer.data_ptr(): called after the caller dropped the
# buffer, it read freed memory (garbage sums, SIGSEGV for a large buffer) --------------------
def _compiled_wins(monkeypatch) -> None:
    """The race always goes to the compiled sum (the probe that read through an address)."""
    monkeypatch.setattr(DS, "_race", lambda probes, clock, reads=DS.PROBE_RACE_READS:
                        {name: 1.0 if name == "torch.sum" else 0.5 for name in probes})


def test_make_read_probe_keeps_its_buffer_alive(monkeypatch) -> None:
    _compiled_wins(monkeypatch)
    buffer = torch.ones(1024)
    monkeypatch.setattr(DS, "_compiled_read_sum", lambda: (lambda address, n, threads: 1024.0, "-O2"))
    probe, what = DS.make_read_probe(buffer, 1)
    assert what.startswith("compiled sum")
    alive = weakref.ref(buffer)
    del buffer
    gc.collect()
    assert alive() is not None, "the probe must hold the buffer it reads"


@pytest.mark.parametrize("shape", [(1024,), ()], ids=["1024 ones", "0-d"])
def test_make_read_probe_reads_the_right_sum_after_the_caller_dropped_the_buffer(monkeypatch, shape) -> None:
    if DS._compiled_read_sum()[0] is None:
        pytest.skip(f"no compiled read_sum here: {DS._compiled_read_sum()[1]}")
    _compiled_wins(monkeypatch)
    buffer = torch.ones(shape)
    expected = buffer.sum().item()
    probe, what = DS.make_read_probe(buffer, 1)
    assert what.startswith("compiled sum")
    del buffer
    gc.collect()
    reuse = torch.full((1024,), 7.0)  # what would take the freed memory's place
    assert probe() == pytest.approx(expected)
    del reuse
