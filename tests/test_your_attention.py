"""Lesson 4's payoff: the trained model run with a learner's mha_forward
(course_utils.exercises.your_attention)."""

import math

import pytest
import torch

from course_utils.exercises.your_attention import (
    causal_attention_with,
    forward_with,
    plot_block,
    run_with_your_attention,
)
from course_utils.model.checkpoint import load_checkpoint


def mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    """A right answer to exercise 4.3, written here so that the test does not lean on solutions/."""
    B, T, d = x.shape
    dk = d // num_heads
    q, k, v = (x @ w_in.T + b_in).split(d, dim=-1)
    q, k, v = (t.reshape(B, T, num_heads, dk).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(dk)
    if causal:
        scores = scores.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return (weights @ v).transpose(1, 2).reshape(B, T, d) @ w_out.T + b_out


def keys_values_swapped(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
    q, k, v = w_in.chunk(3)
    bq, bk, bv = b_in.chunk(3)
    return mha_forward(x, torch.cat([q, v, k]), torch.cat([bq, bv, bk]), w_out, b_out, num_heads, causal)


@pytest.fixture(scope="module")
def model():
    return load_checkpoint("induction")[0]


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)  # many tiny calls: extra threads only wait on each other
    yield
    torch.set_num_threads(before)


def test_forward_written_out_equals_the_model(model):
    tokens = torch.randint(1, 64, (3, 20), generator=torch.Generator().manual_seed(0))
    tokens[:, 0] = 0
    assert torch.allclose(forward_with(model, tokens), model(tokens)[0], atol=1e-5)


def test_one_causal_call_gives_the_models_attention(model):
    x = torch.randn(2, 9, 64, generator=torch.Generator().manual_seed(1))
    attn = model.blocks[0].attn
    calls = []

    def recorded(*args, causal=False):
        calls.append(causal)
        return mha_forward(*args, causal=causal)

    with torch.no_grad():
        expected = attn(x, is_causal=True)[0]
        got = causal_attention_with(recorded, x, attn)
        unmasked = mha_forward(x, attn.in_proj.weight, attn.in_proj.bias, attn.out_proj.weight,
                               attn.out_proj.bias, attn.num_heads)
    assert calls == [True]  # one call for the whole sequence, with the mask asked for
    assert torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(unmasked, expected, atol=1e-3)  # the mask matters on this input


def test_an_answer_without_causal_is_told_what_to_add(model):
    def old_signature(x, w_in, b_in, w_out, b_out, num_heads):
        return mha_forward(x, w_in, b_in, w_out, b_out, num_heads)

    report = run_with_your_attention(old_signature, batch_size=2)
    assert report.yours is None and report.error.startswith("TypeError")
    assert "takes no `causal` argument" in report.error
    assert report.feedback.mistake == "no_causal_parameter"
    assert "causal=False" in report.feedback.hint
    with pytest.raises(TypeError, match="takes no `causal` argument"):
        causal_attention_with(old_signature, torch.ones(1, 3, 64), model.blocks[0].attn)


def test_a_causal_slip_is_named_and_changes_the_predictions():
    def mask_ignored(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return mha_forward(x, w_in, b_in, w_out, b_out, num_heads)

    report = run_with_your_attention(mask_ignored, batch_size=8)
    assert report.feedback.mistake == "causal_ignored"
    assert report.yours is not None and not report.matches


def test_a_right_answer_runs_the_trained_model():
    report = run_with_your_attention(mha_forward, batch_size=8)
    assert report.feedback.passed
    assert report.matches and report.same_predictions
    assert report.yours.accuracy == report.course.accuracy > 0.95
    assert abs(report.yours.loss - report.course.loss) < 1e-4
    assert "your function runs the trained model" in str(report)
    table = report.table(0, positions=5)
    assert len(table) == 5 and "your mha_forward predicts" in table.columns


def test_the_stub_is_reported_not_raised():
    def stub(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        raise NotImplementedError()

    report = run_with_your_attention(stub, batch_size=4)
    assert report.yours is None and not report.matches
    assert "stub" in report.error
    assert report.feedback.status == "not attempted"
    assert "your mha_forward predicts" not in report.table().columns


def test_a_slip_is_named_and_changes_the_predictions():
    report = run_with_your_attention(keys_values_swapped, batch_size=8)
    assert report.feedback.mistake == "keys_and_values_swapped"
    assert not report.matches
    assert report.yours.accuracy < report.course.accuracy - 0.5
    text = str(report)
    assert "scored predictions differ" in text and "in_proj stacks W_Q, W_K, W_V" in text


def test_errors_and_wrong_shapes_in_the_function_are_reported():
    def wrong_shape(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return x[:, :1]

    def fails(x, w_in, b_in, w_out, b_out, num_heads, causal=False):
        return x @ w_in  # (B, T, d) @ (3d, d): a shape error

    shape = run_with_your_attention(wrong_shape, batch_size=2)
    assert shape.yours is None and "returned shape" in shape.error
    error = run_with_your_attention(fails, batch_size=2)
    assert error.yours is None and error.error.startswith("RuntimeError")
    assert error.feedback.mistake == "w_in_not_transposed"
    not_a_function = run_with_your_attention(3, batch_size=2)
    assert not_a_function.feedback is None and "must be a function" in not_a_function.error


def test_bad_arguments_are_errors():
    with pytest.raises(ValueError, match="checkpoint must hold an induction model"):
        run_with_your_attention(mha_forward, "agreement")
    with pytest.raises(ValueError, match="batch_size"):
        run_with_your_attention(mha_forward, batch_size=0)
    report = run_with_your_attention(mha_forward, batch_size=2)
    with pytest.raises(ValueError, match="sequence must be below the batch size 2"):
        report.table(sequence=5)


def test_the_block_figure_names_its_parts():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = plot_block()
    texts = " ".join(t.get_text() for t in ax.texts)
    for part in ("LayerNorm", "attention", "MLP", "residual stream", "unembedding", "+"):
        assert part in texts
    plt.close(ax.figure)
    with pytest.raises(TypeError, match="attention_label must be a str"):
        plot_block(attention_label=3)
