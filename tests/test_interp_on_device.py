"""The analysis helpers take a model and tokens on any one device.

Each test runs the lessons' calls on the induction checkpoint moved to ``device`` and, on a
GPU, compares with the same call on the CPU. On a machine without CUDA only the CPU case runs
(it checks the calls themselves); the GPU machine a session may be lent runs both. Before the
device sweep, head_importance, ov_copying_score and the patching helpers built their index
and gate tensors on the CPU and failed on a CUDA model with PyTorch's "Expected all tensors to
be on the same device".
"""

from __future__ import annotations

import pytest
import torch

from course_utils.interp import ablation, circuits, patching, scores
from course_utils.model.checkpoint import load_checkpoint

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(),
                                                                 reason="needs a CUDA GPU"))]


@pytest.fixture(scope="module")
def cpu_setup():
    model, _ = load_checkpoint("induction")
    g = torch.Generator().manual_seed(0)
    block = torch.randint(1, model.config.vocab_size, (6, 8), generator=g)
    tokens = torch.cat([torch.zeros(6, 1, dtype=torch.long), block, block], dim=1)  # (6, 17)
    return model.eval(), tokens


def _on(device, cpu_setup):
    model, tokens = cpu_setup
    moved, _ = load_checkpoint("induction", device=device)
    return moved.eval(), tokens.to(device)


def _close(got, expected):
    if isinstance(got, torch.Tensor):
        assert got.device.type in ("cpu", "cuda")
        torch.testing.assert_close(got.detach().cpu().double(), expected.detach().cpu().double(),
                                   rtol=1e-3, atol=1e-4, equal_nan=True)
    elif isinstance(got, dict):
        assert got.keys() == expected.keys()
        for key in got:
            _close(torch.as_tensor(got[key]), torch.as_tensor(expected[key]))
    else:  # a DataFrame
        _close(torch.tensor(got.to_numpy(dtype=float)), torch.tensor(expected.to_numpy(dtype=float)))


def _only_position(tokens, position):
    where = torch.zeros_like(tokens, dtype=torch.bool)
    where[:, position] = True
    return where


CALLS = {
    "ablated_logits zero": lambda m, t: ablation.ablated_logits(m, t, [(1, 0), (0, 2)]),
    "ablated_logits mean": lambda m, t: ablation.ablated_logits(
        m, t, [(1, 0)], method="mean", means=ablation.mean_head_outputs(m, t)),
    "head_importance": lambda m, t: ablation.head_importance(m, t[:, :-1], t[:, 1:]),
    "measure": lambda m, t: ablation.measure(m, ablation.loss_evaluation(t[:, :-1], t[:, 1:]), [(1, 1)]),
    "pruning_curve": lambda m, t: ablation.pruning_curve(
        m, ablation.loss_evaluation(t[:, :-1], t[:, 1:]), [(1, 1), (0, 0)]),
    "patched_logits": lambda m, t: patching.patched_logits(
        m, t, ablation.head_outputs(m, t.flip(0)), [(1, 0)]),
    "patching_table": lambda m, t: patching.patching_table(
        m, t, t.flip(0), lambda logits: float(logits[:, -1].logsumexp(-1).mean())),
    "direct_logit_attribution": lambda m, t: patching.direct_logit_attribution(
        m, t, torch.full((t.shape[0],), 12, device=t.device),
        torch.nn.functional.one_hot(t[:, 5], m.config.vocab_size).float()),
    "position_ablated_logits": lambda m, t: patching.position_ablated_logits(
        m, t, [(1, 0)], _only_position(t, 12)),
    "sequence_gate_gradients": lambda m, t: patching.sequence_gate_gradients(m, t[:, :-1], t[:, 1:]),
    "final_scale": lambda m, t: patching.final_scale(m, t, torch.full((t.shape[0],), 12, device=t.device)),
    "measure_zeroed_sets": lambda m, t: patching.measure_zeroed_sets(
        m, ablation.loss_evaluation(t[:, :-1], t[:, 1:]), [[(1, 0)], [(0, 1), (1, 2)]])[1],
    "losses_along_orders": lambda m, t: patching.losses_along_orders(
        m, t[:, :-1], t[:, 1:], [[(1, 0), (0, 1)], [(0, 1), (1, 0)]], 2),
    "path_patched_logits": lambda m, t: patching.path_patched_logits(
        m, t, ablation.head_outputs(m, t.flip(0)), [(0, 1)], [(1, 0)]),
    "ov_copying_score": lambda m, t: circuits.ov_copying_score(m, 1, list(range(1, 9))),
    "trace + circuits.direct_logit_attribution": lambda m, t: circuits.direct_logit_attribution(
        m, circuits.trace_heads(m, t[:, :-1]), t[:, 1:]),
    "head_output_norms": lambda m, t: circuits.head_output_norms(circuits.trace_heads(m, t)),
    "induction_score": lambda m, t: scores.induction_score(
        [w for w in circuits.trace_heads(m, t).attention], 8, start=1),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", list(CALLS))
def test_analysis_runs_on_the_models_device(name, device, cpu_setup):
    model, tokens = cpu_setup
    expected = CALLS[name](model, tokens)
    got = CALLS[name](*_on(device, cpu_setup))
    _close(got, expected)
