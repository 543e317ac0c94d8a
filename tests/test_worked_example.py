"""The seed-004 worked example: loading and validation, the exact computation, and the
comparison with the article's printed numbers (rounding vs real slips)."""

import copy
import json
import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils.tasks.worked_example import (
    DOCUMENTED_SLIPS,
    INHERITED_TOL,
    PRINTED_STEPS,
    ROUNDING,
    VERDICTS,
    WORKED_EXAMPLE_PATH,
    WorkedExampleError,
    article_matmul,
    compare_with_article,
    compute_steps,
    load_worked_example,
    output_rounding_budget,
    parse_worked_example,
    recompute_from_article,
    round_half_up,
    side_by_side,
)

RAW = json.loads(WORKED_EXAMPLE_PATH.read_text())


@pytest.fixture(scope="module")
def example():
    return load_worked_example()


@pytest.fixture(scope="module")
def steps(example):
    return compute_steps(example)


@pytest.fixture(scope="module")
def table(example):
    return compare_with_article(example)


# -- loading --------------------------------------------------------------------------
def test_loads_with_the_documented_shapes(example):
    assert example.people == ("Alex", "Emma", "Daniel")
    assert example.x.shape == (3, 6)
    assert [(h.w_q.shape, h.w_k.shape, h.w_v.shape) for h in example.heads] == [
        ((6, 2), (6, 2), (6, 3)), ((6, 2), (6, 2), (6, 2))]
    assert example.w_o.shape == (5, 6)
    assert set(example.article) == set(PRINTED_STEPS)
    assert example.x.frame().loc["Emma", "cozy"] == 0.94


def _corrupt(edit):
    data = copy.deepcopy(RAW)
    edit(data)
    return data


def _drop_last_row(matrix):
    matrix["values"].pop()
    matrix["rows"].pop()


def _drop_last_column(matrix):
    for row in matrix["values"]:
        row.pop()
    matrix["cols"].pop()


def _add_column(matrix):
    for row in matrix["values"]:
        row.append(0.5)
    matrix["cols"].append("extra")


def _set_entry(matrix, value):
    matrix["values"][0][0] = value


CORRUPTIONS = {
    "missing W_O": (lambda d: d.pop("W_O"), "missing the key 'W_O'"),
    "dropped row of W_V^1": (lambda d: d["heads"][0]["W_V"]["values"].pop(), "W_V^1.values has 5 rows"),
    "ragged X": (lambda d: d["X"]["values"][1].pop(), "X.values has 3 rows of length 5, 6"),
    "text instead of a number": (lambda d: _set_entry(d["X"], "0.98"), "X.values[0][0] must be a number"),
    "bool instead of a number": (lambda d: _set_entry(d["W_O"], True), "must be a number, got bool"),
    "NaN": (lambda d: _set_entry(d["X"], float("nan")), "must be a finite number"),
    "people mismatch": (lambda d: d["X"].update(rows=["Alex", "Emma", "Dan"]), "X rows must be"),
    "W_K width differs from W_Q": (lambda d: _add_column(d["heads"][1]["W_K"]),
                                   "W_K^2 must have shape (6, 2), got (6, 3)"),
    "W_O rows vs concat width": (lambda d: _drop_last_row(d["W_O"]),
                                 "W_O must have shape (5, 6), got (4, 6)"),
    "article table of the wrong shape": (lambda d: _drop_last_column(d["article_printed"]["Output1"]),
                                         "article Output1 must have shape (3, 3), got (3, 2)"),
    "article columns renamed": (lambda d: d["article_printed"]["Output2"].update(cols=["price", "exp"]),
                                "article Output2 columns must be ['price_info', 'experience_info']"),
    "head name not a string": (lambda d: d["heads"][0].update(name=1), "heads[0].name must be a string"),
    "duplicate labels": (lambda d: d["X"].update(cols=["spicy"] * 6), "duplicate labels"),
    "bad expansion index": (
        lambda d: d["article_printed"]["cheap_expansion"]["two_largest_terms"].update(positions=[1, 9]),
        "positions must be 2 indices"),
}


@pytest.mark.parametrize("name", sorted(CORRUPTIONS))
def test_corrupted_data_raises_a_clear_error(name):
    edit, message = CORRUPTIONS[name]
    with pytest.raises(WorkedExampleError, match=re.escape(message)):
        parse_worked_example(_corrupt(edit))


def test_corrupted_file_names_the_file(tmp_path):
    bad = tmp_path / "broken.json"
    bad.write_text(json.dumps(_corrupt(lambda d: d["heads"][0].pop("W_Q"))))
    with pytest.raises(WorkedExampleError, match=r"broken.json: head 1 is missing the key 'W_Q'"):
        load_worked_example(bad)
    assert issubclass(WorkedExampleError, ValueError)


def test_invalid_json_and_missing_file(tmp_path):
    bad = tmp_path / "truncated.json"
    bad.write_text(WORKED_EXAMPLE_PATH.read_text()[:200])
    with pytest.raises(WorkedExampleError, match="not valid JSON"):
        load_worked_example(bad)
    with pytest.raises(FileNotFoundError, match="not found"):
        load_worked_example(tmp_path / "nowhere.json")


# -- the exact computation ------------------------------------------------------------
def test_steps_match_an_independent_computation(example, steps):
    x = torch.tensor(example.x.values)
    outs = []
    for i, head in enumerate(example.heads, start=1):
        q, k, v = (x @ torch.tensor(w.values) for w in (head.w_q, head.w_k, head.w_v))
        out = F.scaled_dot_product_attention(q[None], k[None], v[None])[0]
        weights = torch.softmax(q @ k.T / math.sqrt(head.d_k), dim=-1)
        np.testing.assert_allclose(steps[f"A{i}"].values, weights.numpy(), atol=1e-12)
        np.testing.assert_allclose(steps[f"Output{i}"].values, out.numpy(), atol=1e-12)
        outs.append(out)
    final = torch.cat(outs, -1) @ torch.tensor(example.w_o.values)
    np.testing.assert_allclose(steps["Final"].values, final.numpy(), atol=1e-12)
    assert steps["Concat"].shape == (3, 5) and steps["Final"].shape == (3, 6)


@pytest.mark.parametrize("step", ["A1", "A2"])
def test_attention_tables_agree_with_the_article(example, steps, step):
    diff = np.abs(steps[step].values - example.article[step].values)
    assert diff.max() <= 0.001, f"{step} differs from the article by up to {diff.max():.4f}"


# -- rounding vs slips ----------------------------------------------------------------
def test_article_rounding_habit_reproduces_projections_and_final(example):
    own = recompute_from_article(example)
    for step in ("Q2", "K2", "V2", "Final"):
        np.testing.assert_allclose(own[step].values, example.article[step].values, atol=1e-9, err_msg=step)
    assert round_half_up(0.0105, 3) == 0.011 and round_half_up(-0.0105, 3) == -0.011
    with pytest.raises(ValueError, match=r"needs \(n, m\) @ \(m, p\)"):
        article_matmul(np.ones((2, 3)), np.ones((2, 3)))


def test_documented_slips_are_exactly_the_slips(table):
    found = {(r.step, r.row, r.col) for r in table.itertuples() if r.verdict == "slip"}
    assert found == set(DOCUMENTED_SLIPS)


@pytest.mark.parametrize("key", sorted(DOCUMENTED_SLIPS))
def test_each_slip_is_more_than_a_rounded_last_digit(table, key):
    """More than a rounded last digit of the printed number (a loose bar: three of the slips still
    lie within the rounding budget of the computation the lesson derives, which another test holds)."""
    step, row, col = key
    r = table[(table.step == step) & (table.row == row) & (table.col == col)].iloc[0]
    assert abs(r.article - r.exact) > 2 * ROUNDING  # more than a rounded last digit
    assert abs(r.article - r.from_own_inputs) > INHERITED_TOL  # not reproduced from its own inputs
    printed, exact = re.search(r"printed (\d\.\d{3}), exact (\d\.\d{3})", DOCUMENTED_SLIPS[key]).groups()
    assert (printed, exact) == (f"{r.article:.3f}", f"{r.exact:.3f}")  # the explanation quotes true numbers


def test_the_clear_slip_is_emma_info_upscale(table):
    worst = table[table.step.str.startswith("Output")].assign(size=lambda t: t["diff"].abs())
    top = worst.sort_values("size").iloc[-1]
    assert (top.step, top.row, top.col) == ("Output1", "Emma", "info-upscale")
    assert top.article == 1.068 and round(top.exact, 3) == 1.180


def test_final_output_differences_are_inherited(example, steps, table):
    final = table[table.step == "Final"]
    assert set(final.verdict) <= {"rounding", "inherited"}
    # linear in the concatenation: the final error is the concat error times W_O, plus rounding
    concat_err = example.article["Concat"].values - steps["Concat"].values
    final_err = example.article["Final"].values - steps["Final"].values
    assert np.abs(concat_err @ example.w_o.values - final_err).max() < 0.002
    assert np.abs(final_err).max() > 0.1  # Emma's cozy and vibe carry the 0.113 slip


def test_cheap_expansion(example, steps):
    c = example.cheap
    alex = example.article["Concat"].values[0]
    np.testing.assert_array_equal(c.head_outputs, alex)
    np.testing.assert_array_equal(c.weights, example.w_o.values[:, 1])
    assert round_half_up(c.head_outputs * c.weights).sum() == pytest.approx(c.total, abs=1e-9)
    products = round_half_up(c.head_outputs[list(c.positions)] * c.weights[list(c.positions)])
    np.testing.assert_allclose(products, c.products, atol=1e-9)
    assert products.sum() == pytest.approx(c.sum, abs=1e-9)
    assert steps["Final"].values[0, 1] - c.total > 0.04  # the exact cheap is 4.050


def test_side_by_side(example):
    frame = side_by_side(example, "A2")
    assert list(frame.columns.get_level_values(0).unique()) == ["article", "exact", "article - exact"]
    assert not np.signbit(frame.to_numpy()[frame.to_numpy() == 0]).any()  # no -0.0 on display
    raw = side_by_side(example, "A2", decimals=None)
    assert raw.shape == frame.shape and (raw.round(3) + 0.0).equals(frame)
    with pytest.raises(KeyError, match="prints no table"):
        side_by_side(example, "S1")


def test_three_verdicts(table):
    assert set(table.verdict) == set(VERDICTS)


def test_output_rounding_budget(example, steps, table):
    """Nine slips are beyond anything rounding could do; three small ones are within it."""
    beyond, within = set(), set()
    for i in (1, 2):
        budget = output_rounding_budget(steps[f"A{i}"].values, steps[f"V{i}"].values)  # (3, d_v)
        entries = table[table.step == f"Output{i}"]
        for r, b in zip(entries.itertuples(), budget.ravel(), strict=True):
            if r.verdict == "slip":
                (beyond if abs(r.diff) > b else within).add((r.row, r.col))
    assert len(beyond) == 9
    assert within == {("Emma", "info-sichuan"), ("Daniel", "info-upscale"), ("Emma", "experience_info")}
    with pytest.raises(ValueError, match="must chain"):
        output_rounding_budget(np.ones((3, 3)), np.ones((2, 2)))
