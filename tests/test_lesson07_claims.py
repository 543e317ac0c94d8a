"""The facts that notebooks/07_grouped_query_attention.ipynb states in words.

The notebook prints the numbers it discusses; these tests re-measure them with the same
public functions on the same inputs, so a change to the checkpoints, the training code
or the GQA code that would make a sentence of the lesson false fails here. Timings are
not tested (they belong to the benchmark, ``python -m course_utils.bench gqa``).

One exception: section 5's conversion table (12 conversions, each uptrained) is printed
under ``# NBVAL_CHECK_OUTPUT``, so nbval already recomputes it and requires the very same
text in every run of the README's test command. The sentences about it are checked here
against that stored table rather than by training the 12 conversions a second time; a
change that alters the table fails nbval first, and the sentences are checked again once
the notebook is re-run and its new table committed.
"""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import nbformat
import pytest
import torch

from course_utils.checkpoint import load_checkpoint
from course_utils.env import torch_threads
from course_utils.gqa import PUBLISHED_CONFIGS, convert_model, kv_cache_bytes
from course_utils.train import evaluate_agreement, evaluate_induction

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "07_grouped_query_attention.ipynb"
TASKS = {"induction": (evaluate_induction, "heldout"), "agreement": (evaluate_agreement, "all")}


@pytest.fixture(scope="module")
def conversion() -> dict[tuple[str, int, str], tuple[float, float]]:
    """(model, g, method) -> (accuracy after conversion, after 5% uptraining): section 5's
    table as the notebook prints it under ``# NBVAL_CHECK_OUTPUT`` (see the module docstring)."""
    cells = [c for c in nbformat.read(NOTEBOOK, as_version=4).cells
             if c.cell_type == "code" and "conversion = pd.DataFrame(" in c.source]
    assert len(cells) == 1, "section 5's conversion table: expected one cell that builds it"
    assert cells[0].source.startswith("# NBVAL_CHECK_OUTPUT"), "nbval must hold this table to a fresh run"
    text = "".join(o.get("text", "") for o in cells[0].outputs if o.get("output_type") == "stream")
    header, *rows = (line.split() for line in text.strip().splitlines())
    assert header == ["model", "g", "method", "before", "after", "5%"], header
    table = {(name, int(g), method): (float(before), float(after)) for name, g, method, before, after in rows}
    expected = {(name, g, method) for name in TASKS for g in (2, 1) for method in ("mean", "first", "random")}
    assert set(table) == expected | {(name, 4, "MHA") for name in TASKS} and len(rows) == len(table)
    return table


def test_the_stored_table_reads_as_a_fresh_conversion_does(conversion):
    """The parsed table is the right one, columns in place: every conversion's accuracy before
    uptraining (cheap: no training) and every original model's, measured again here."""
    with torch_threads(1):  # as the notebook measures them
        for (name, g, method), (before, _) in conversion.items():
            evaluate, metric = TASKS[name]
            model = load_checkpoint(name)[0]
            if method != "MHA":
                model = convert_model(model, g, method)
            assert round(evaluate(model)[metric], 3) == before, (name, g, method)


def test_cached_decoding_equals_full_recomputation():
    model, _ = load_checkpoint("induction")
    tokens = torch.randint(1, 64, (8, 32), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        full, _ = model(tokens)
        steps, cache = [], None
        for t in range(tokens.shape[1]):
            logits, cache = model.forward_with_cache(tokens[:, t:t + 1], cache)
            steps.append(logits)
    diff = (torch.cat(steps, 1) - full).abs().max().item()
    assert diff < 1e-4
    assert 10 <= full.abs().max().item() <= 50  # "logits of size ~10-50"


def test_decoding_with_the_position_offset_forgotten_breaks_copying():
    """'copying collapses from 0.88 to 0.04 (chance is 1 in 63)': the same decoding with every
    new token embedded at position 0, through a patched ``_embed`` as the lesson does."""
    model, _ = load_checkpoint("induction")
    first_half = torch.randint(1, 64, (8, 16), generator=torch.Generator().manual_seed(8))
    repeated = torch.cat([first_half, first_half], dim=1)

    def copy_accuracy(start_at_zero: bool) -> float:
        embed = model._embed
        with torch.no_grad(), mock.patch.object(
                model, "_embed", (lambda toks, start: embed(toks, 0)) if start_at_zero else embed):
            cache, logits = None, []
            for t in range(repeated.shape[1]):
                step, cache = model.forward_with_cache(repeated[:, t:t + 1], cache)
                logits.append(step)
        predicted = torch.cat(logits, 1)[:, 16:-1].argmax(-1)
        return (predicted == repeated[:, 17:]).float().mean().item()

    right, at_zero = copy_accuracy(False), copy_accuracy(True)
    assert round(right, 2) == 0.88 and round(at_zero, 2) == 0.04
    assert at_zero < 3 / 63 < 0.8 < right  # near chance against mostly right


def test_gqa_recovers_with_mean_or_first(conversion):
    """'After 5% uptraining, mean and first are back within 0.02 of the original on both tasks'
    (section 5 and the summary)."""
    for name in TASKS:
        original = conversion[(name, 4, "MHA")][0]
        for method in ("mean", "first"):
            assert round(original - conversion[(name, 2, method)][1], 3) <= 0.02, (name, method)


def test_mqa_on_induction_stays_near_half(conversion):
    """'mean and first reach only about 0.5 after 30 steps, and random stays near 0.'"""
    for method in ("mean", "first", "random"):
        assert conversion[("induction", 1, method)][1] <= 0.6, method
    assert all(0.4 <= conversion[("induction", 1, m)][1] for m in ("mean", "first"))


def test_mqa_on_agreement_recovers_with_mean_and_beats_first(conversion):
    """'The agreement model's MQA recovers with mean'; 'mean beats first clearly for MQA on agreement'."""
    mean_after = conversion[("agreement", 1, "mean")][1]
    assert mean_after >= 0.99
    assert mean_after - conversion[("agreement", 1, "first")][1] >= 0.1


def test_first_starts_higher_than_mean_for_gqa_on_induction(conversion):
    """'For g = 2 on induction first starts higher and ends as high.'"""
    mean, first = conversion[("induction", 2, "mean")], conversion[("induction", 2, "first")]
    assert first[0] > mean[0] + 0.1
    assert first[1] >= mean[1] - 0.005


def test_random_beats_first_for_mqa_on_agreement(conversion):
    """'Random beats first for MQA on agreement, both before and after uptraining.'"""
    random, first = conversion[("agreement", 1, "random")], conversion[("agreement", 1, "first")]
    assert random[0] > first[0] and random[1] > first[1]


def test_random_is_worst_for_induction_and_does_not_recover(conversion):
    """'Random is the worst starting point for induction and does not recover in 30 steps.'"""
    for g in (2, 1):
        random = conversion[("induction", g, "random")]
        assert random[0] < min(conversion[("induction", g, m)][0] for m in ("mean", "first"))
        assert random[1] < 0.1


def test_real_scale_sentences():
    """Section 4 and the summary: per-token sizes, the 80 GB figures, 70B's weights."""
    by_name = {c.name: c for c in PUBLISHED_CONFIGS}
    llama2, llama3 = by_name["Llama-2-7B (MHA)"], by_name["Llama-3-8B (GQA)"]
    per_token = {c.name: kv_cache_bytes(c.num_layers, 1, c.num_kv_heads, c.d_head, 1, 2)
                 for c in PUBLISHED_CONFIGS}
    assert per_token[llama2.name] == 2**19  # 0.5 MiB per token
    assert per_token[llama3.name] * 4 == per_token[llama2.name]  # "a quarter of that"
    # "At 32 sequences of 32k tokens, Llama-2-7B's cache alone would need 512 GiB"
    assert kv_cache_bytes(32, 32, 32, 128, 32768, 2) == 512 * 2**30
    tokens_2 = (80e9 - 2 * 7e9) // per_token[llama2.name]
    tokens_3 = (80e9 - 2 * 8e9) // per_token[llama3.name]
    assert 125_000 <= tokens_2 <= 127_000 and int(tokens_2 // 4096) == 30  # "about 126k: 30 of 4k"
    assert tokens_2 < 128 * 1024  # "not quite one of 128k"
    assert 3.8 <= tokens_3 / tokens_2 <= 4.0  # "about 4 times as many"
    assert 2 * 70e9 > 80e9  # 70B's 16-bit weights alone exceed one 80 GB GPU
