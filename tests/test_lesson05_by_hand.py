"""Lesson 05 computes its OV copying score, direct logit attribution and key patch by hand, in a
few lines on the tensors ``run_with_cache`` records. These tests run those cells' own code (read
from notebooks/05_attention_heatmaps.ipynb) and check that it gives what the library functions
give (``ov_copying_score``, ``direct_logit_attribution``, ``trace_heads(keys_without=...)``), and
that it prints what the notebook stores."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
import torch

from course_utils.interp.circuits import direct_logit_attribution, ov_copying_score, trace_heads
from course_utils.interp.scores import induction_score
from course_utils.model.checkpoint import load_checkpoint
from course_utils.model.train import INDUCTION_TASK

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "05_attention_heatmaps.ipynb"
PERIOD = 10
PROBE_LEN = 1 + 2 * PERIOD


def _by_hand_cells() -> list[tuple[str, str]]:
    """``(source, stored text output)`` of each code cell whose code opens with ``# By hand``."""
    cells = json.loads(NOTEBOOK.read_text())["cells"]
    found = []
    for cell in cells:
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if not line.startswith("# NBVAL")]
        if cell["cell_type"] == "code" and lines and lines[0].startswith("# By hand"):
            stored = "".join("".join(o.get("text", "")) for o in cell.get("outputs", [])
                             if o.get("name") == "stdout")
            found.append((source, stored))
    return found


@pytest.fixture(scope="module")
def ran() -> tuple[dict, list[tuple[str, str, str]]]:
    """The by-hand cells run in order, in one namespace holding what the lesson defined before
    them; returns the namespace and, per cell, (source, what it printed, what the notebook stores)."""
    model, _ = load_checkpoint("induction")
    generator = torch.Generator().manual_seed(5)  # the lesson's probe batch
    probe = INDUCTION_TASK.sample(64, generator, periods=(PERIOD,)).tokens[:, :PROBE_LEN]
    namespace = {"torch": torch, "induction_model": model, "probe": probe, "PERIOD": PERIOD,
                 "PROBE_LEN": PROBE_LEN, "ov_copying_score": ov_copying_score, "trace_heads": trace_heads,
                 "direct_logit_attribution": direct_logit_attribution, "induction_score": induction_score}
    runs = []
    for source, stored in _by_hand_cells():
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(source, "lesson 05 cell", "exec"), namespace)  # the lesson's own lines
        runs.append((source, printed.getvalue(), stored))
    return namespace, runs


def test_the_lesson_has_the_three_by_hand_cells(ran):
    _, runs = ran
    assert len(runs) == 3
    assert "run_with_cache" in runs[1][0] and 'model.hooks([("blocks.1.attn.hook_k"' in runs[2][0]


def test_the_by_hand_ov_copying_score_is_the_library_s(ran):
    ns, _ = ran
    assert torch.equal(ns["copying"], ov_copying_score(ns["induction_model"], 1, range(1, 64)))


def test_the_by_hand_direct_logit_attribution_is_the_library_s(ran):
    ns, _ = ran
    model, probe = ns["induction_model"], ns["probe"]
    library = direct_logit_attribution(model, trace_heads(model, probe), probe.roll(-1, dims=1))
    assert ns["direct"].shape == library.shape == (2, 4, 64, PROBE_LEN)
    torch.testing.assert_close(ns["direct"], library, rtol=1e-5, atol=1e-5)
    assert library[1].abs().max() > 1  # a real signal, not two arrays of zeros


def test_the_by_hand_key_patch_is_trace_heads_keys_without(ran):
    ns, _ = ran
    model, probe = ns["induction_model"], ns["probe"]
    patched = trace_heads(model, probe, keys_without={1: [(0, head) for head in range(4)]})
    expected = induction_score(patched.attention, PERIOD, start=1)[1]
    torch.testing.assert_close(ns["key_patched"], expected, rtol=1e-5, atol=1e-5)
    unpatched = induction_score(trace_heads(model, probe).attention, PERIOD, start=1)[1]
    assert (ns["key_patched"] < 0.2).all() and (unpatched > 0.9).all()  # the patch did something


def test_the_by_hand_cells_print_what_the_notebook_stores(ran):
    _, runs = ran
    for source, printed, stored in runs:
        assert printed == stored, source.splitlines()[1]
