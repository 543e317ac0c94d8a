"""The facts that the text of notebooks/02_single_head_attention.ipynb states in words,
and the slips its exercise checks promise to name.

The lesson prints its numbers; its prose reads them ("head 2 puts Alex and Daniel at
opposite ends of a budget axis", "nine of the twelve slips are beyond anything rounding
could do"). These tests re-measure with the same public functions, so that a change in
the data file or the code says which sentence needs re-checking.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.exercises import lesson02
from course_utils.tasks.worked_example import (
    compare_with_article,
    compute_steps,
    load_worked_example,
    output_rounding_budget,
)

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02_single_head_attention.ipynb"


@pytest.fixture(scope="module")
def example():
    return load_worked_example()


@pytest.fixture(scope="module")
def steps(example):
    return compute_steps(example)


# -- reading the example -------------------------------------------------------------
def test_head_2_is_a_budget_axis(example, steps):
    q2, a2, out2 = steps["Q2"].values, steps["A2"].values, steps["Output2"].values
    alex, emma, daniel = (example.people.index(p) for p in ("Alex", "Emma", "Daniel"))
    axis = q2[:, 0] - q2[:, 1]  # low minus high
    assert axis[alex] > 2 and axis[daniel] < -2 and abs(axis[emma]) < 0.1  # opposite ends, Emma between
    assert a2[alex, alex] > 0.9 and a2[daniel, daniel] > 0.89  # "each keeps about 0.9 for themselves"
    assert min(a2[emma, alex], a2[emma, daniel]) > 0.39 > 0.19 > a2[emma, emma]  # Emma splits between them
    assert out2[daniel, 0] < out2[emma, 0] < out2[alex, 0]  # her price_info lands between theirs


def test_w_o_rows_feed_cheap_from_both_heads(example, steps):
    w_o, rows, cheap = example.w_o.values, list(example.w_o.rows), example.features.index("cheap")
    flavor = example.features.index("flavor")
    assert w_o[rows.index("info-budget"), cheap] == 0.94 and w_o[rows.index("info-budget"), flavor] == 0.96
    assert w_o[rows.index("price_info"), cheap] == 0.96
    contributions = steps["Concat"].values * w_o[:, cheap]  # (3, 5)
    np.testing.assert_allclose(contributions.sum(axis=1), steps["Final"].values[:, cheap])
    budget_part = contributions[:, rows.index("info-budget")]
    assert np.all(np.abs(budget_part - 1.22) < 0.01)  # "lifts everyone's cheap by about 1.22"
    price_part = contributions[:, rows.index("price_info")]
    assert round(price_part[0], 2) == 2.53 and round(price_part[2], 2) == 0.74
    v_budget = steps["V1"].values[:, 1]
    assert v_budget.min() > 1.21 and v_budget.max() < 1.33  # "between 1.22 and 1.32"
    assert np.all(np.abs(steps["Output1"].values[:, 1] - 1.3) < 0.01)  # "about 1.3 for everyone"


def test_concatenation_is_a_sum_of_per_head_projections(example, steps):
    w_o = example.w_o.values
    per_head = steps["Output1"].values @ w_o[:3] + steps["Output2"].values @ w_o[3:]
    np.testing.assert_allclose(steps["Concat"].values @ w_o, per_head)
    assert steps["Output1"].shape[1] != steps["Output2"].shape[1]  # 3 and 2: nothing to average or add


def test_rounding_budget_and_slips(example, steps):
    table = compare_with_article(example)
    slips = table[table.verdict == "slip"]
    assert len(slips) == 12 and (slips.step == "Output1").sum() == 8 and (slips.step == "Output2").sum() == 4
    budgets = [output_rounding_budget(steps[f"A{i}"].values, steps[f"V{i}"].values) for i in (1, 2)]
    largest = max(b.max() for b in budgets)
    assert round(largest, 4) == 0.0048
    assert table["diff"].abs().max() / largest > 20  # "more than 20 times smaller than the largest gap"


# -- the exercise cells --------------------------------------------------------------
def _cells():
    return nbformat.read(NOTEBOOK, as_version=4).cells


def test_no_reference_printed_and_no_complete_answer_to_2_3():
    sources = "\n".join(c.source for c in _cells() if c.cell_type == "code")
    assert "getsource" not in sources and "zero_then_renormalise" not in sources
    assert ".reference" not in sources
    checks_2_3 = [c for c in _cells()
                  if c.cell_type == "code" and "check_causal_attention_weights" in c.source]
    assert len(checks_2_3) == 1  # only the learner's own function is checked


def test_zeroing_then_renormalising_passes_2_3():
    def renormalised(q, k):
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
        w = w * torch.ones(q.shape[-2], q.shape[-2]).tril()
        return w / w.sum(dim=-1, keepdim=True)

    assert lesson02.check_causal_attention_weights(renormalised).passed


# -- slips that are not plain Mistake objects, or variants of them ---------------------
def _named(feedback) -> str | None:
    assert not feedback.passed, feedback
    return feedback.mistake


def test_2_1_tensor_and_keepdims_variants():
    in_torch = lesson02.check_softmax_rows(lambda s: torch.softmax(torch.as_tensor(s), -1))
    assert _named(in_torch) == "called_reference", "torch.softmax: ruled out by the Library use line"
    assert "torch.softmax" in in_torch.message

    def by_hand_in_torch(s):
        t = torch.as_tensor(s)
        e = torch.exp(t - t.amax(dim=-1, keepdim=True))
        return e / e.sum(dim=-1, keepdim=True)

    assert _named(lesson02.check_softmax_rows(by_hand_in_torch)) == "returned_tensor"
    assert not lesson02.check_softmax_rows(lambda s: lesson02.SOFTMAX_ROWS.reference(s).tolist()).passed

    def keepdims_on_max_only(s):
        e = np.exp(s - s.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1)

    assert _named(lesson02.check_softmax_rows(keepdims_on_max_only)) == "no_keepdims"


def test_2_2_k_dot_T_and_dims():
    def k_dot_t(q, k):
        return torch.softmax(torch.matmul(q, k.T) / math.sqrt(q.shape[-1]), dim=-1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns about x.T on 3-D tensors
        assert _named(lesson02.check_attention_weights(k_dot_t)) == "k_dot_T"
        dim_1 = lesson02.check_attention_weights(
            lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=1))
        assert _named(dim_1) == "softmax_dim1"


def test_2_3_batch_dim_as_T_written_with_where():
    def with_where(q, k):
        T = q.shape[0]
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
        allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))
        return torch.softmax(torch.where(allowed, scores, torch.tensor(float("-inf"))), dim=-1)

    assert _named(lesson02.check_causal_attention_weights(with_where)) == "batch_dim_as_T"


def test_2_4_linear_layout_written_with_f_linear():
    def with_f_linear(x, w_q, w_k, w_v):
        q, k, v = F.linear(x, w_q), F.linear(x, w_k), F.linear(x, w_v)  # x @ w.T
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v

    fb = lesson02.check_single_head_attention(with_f_linear)
    assert _named(fb) == "linear_layout" and "lesson 01" in fb.message


def test_2_4_sqrt_tokens_is_named_honestly():
    def by_tokens(x, w_q, w_k, w_v):
        q, k, v = x @ w_q, x @ w_k, x @ w_v
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(x.shape[-2]), dim=-1) @ v

    fb = lesson02.check_single_head_attention(by_tokens)
    assert fb.mistake == "scaled_by_d_v" and "sqrt(T)" in fb.message
