"""Head scores on hand-built attention patterns whose answers are known in advance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.interp.scores import (
    agreement_score,
    attention_mass,
    best_head,
    chance_level,
    first_token_score,
    head_score_table,
    ideal_pattern,
    induction_key_mask,
    induction_positions,
    induction_score,
    mean_by_group,
    previous_token_score,
    role_verdicts,
    verdict,
)

T, PERIOD = 9, 4  # positions 0..3, then a copy 4..7, then position 8 repeats position 4


def heads(*roles: str, seq_len: int = T, period: int = PERIOD) -> torch.Tensor:
    """(h, T, T): one ideal head per role."""
    return torch.stack([ideal_pattern(r, seq_len, period=period) for r in roles])


def uniform_prev_value(seq_len: int) -> float:
    # uniform causal head: row i spreads 1/(i+1) over keys 0..i
    return float(np.mean([1 / (i + 1) for i in range(1, seq_len)]))


def test_ideal_patterns_are_causal_and_normalised():
    for role in ("previous token", "first token", "induction", "uniform", "self"):
        p = ideal_pattern(role, T, period=PERIOD)
        assert p.shape == (T, T)
        assert torch.allclose(p.sum(-1), torch.ones(T, dtype=p.dtype))
        assert torch.equal(p.triu(1), torch.zeros_like(p)), role


def test_perfect_previous_token_head():
    w = heads("previous token")
    assert previous_token_score(w).tolist() == [1.0]
    assert induction_score(w, PERIOD, start=0).tolist() == [0.0]
    assert first_token_score(w).item() == pytest.approx(1 / (T - 1))  # only query 1 -> key 0


def test_perfect_induction_head():
    w = heads("induction")
    assert induction_score(w, PERIOD, start=0).tolist() == [1.0]
    assert previous_token_score(w).item() == pytest.approx(1 / (T - 1))  # query 1 -> key 0 only
    # the first copy (queries 1..3) parks on position 0: 3 of 8 scored queries
    assert first_token_score(w).item() == pytest.approx(3 / (T - 1))


def test_perfect_sink_and_self_heads():
    w = heads("first token", "self")
    assert first_token_score(w).tolist() == [1.0, 0.0]
    # query 1's previous token is position 0, so the sink head gets 1 of 8 positions
    assert previous_token_score(w).tolist() == [pytest.approx(1 / (T - 1)), 0.0]
    assert induction_score(w, PERIOD, start=0).tolist() == [0.0, 0.0]


def test_uniform_heads_known_values():
    w = heads("uniform")
    expected = uniform_prev_value(T)
    assert previous_token_score(w).item() == pytest.approx(expected)
    assert first_token_score(w).item() == pytest.approx(expected)  # 1/(i+1) to key 0 as well
    # queries 4..7 have one earlier copy (1 key each), query 8 has two (keys 5 and 1)
    q = torch.arange(PERIOD, T)
    keys_per_query = torch.tensor([1, 1, 1, 1, 2])
    expected = float((keys_per_query / (q + 1.0)).mean())
    assert induction_score(w, PERIOD, start=0).item() == pytest.approx(expected)
    # a non-causal uniform head: every weight is 1/T
    flat = torch.full((2, T, T), 1 / T)
    assert torch.allclose(previous_token_score(flat), torch.full((2,), 1 / T, dtype=torch.float64))
    assert torch.allclose(induction_score(flat, PERIOD, start=0),
                          torch.full((2,), 6 / 5 / T, dtype=torch.float64))  # 6 keys over 5 queries


def test_shapes_batch_and_layers():
    one = heads("previous token", "induction", "first token")  # (3, T, T)
    batch = one.unsqueeze(0).expand(5, -1, -1, -1)  # (5, 3, T, T)
    assert previous_token_score(batch).shape == (3,)
    assert torch.allclose(previous_token_score(batch), previous_token_score(one))
    layers = [batch, batch.flip(1)]
    grid = induction_score(layers, PERIOD, start=0)
    assert grid.shape == (2, 3)
    assert grid.tolist() == [[0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    assert best_head(grid) == (0, 1)
    assert best_head(previous_token_score(layers)) == (0, 0)
    assert best_head(first_token_score(layers)) == (0, 2)


def test_batch_mean_mixes_sequences():
    w = torch.stack([heads("previous token"), heads("self")])  # (2, 1, T, T)
    assert previous_token_score(w).item() == pytest.approx(0.5)


def test_numpy_input_is_accepted():
    w = heads("previous token").numpy()
    assert previous_token_score(w).tolist() == [1.0]


def test_start_skips_a_bos_token():
    # BOS at 0, then a copy of length 3 at 1..3, repeated at 4..6
    queries, keys = induction_positions(7, 3, start=1)
    assert queries.tolist() == [4, 5, 6] and keys.tolist() == [2, 3, 4]
    with pytest.raises(TypeError):
        induction_score(torch.eye(7)[None], 3)  # start is required: BOS or not must be said
    w = torch.zeros(1, 7, 7, dtype=torch.float64)
    w[0, :, 0] = 1.0
    w[0, queries, 0] = 0.0
    w[0, queries, keys] = 1.0
    assert induction_score(w, 3, start=1).item() == 1.0
    # start=0 also scores query 3, which is still in the first copy and looks at BOS
    assert induction_score(w, 3, start=0).item() == pytest.approx(3 / 4)
    assert induction_score(w, 2, start=1).item() == 0.0  # the wrong period scores nothing


def test_induction_key_mask_marks_every_earlier_copy():
    # BOS, then a block of 3 at 1..3, repeated at 4..6 and 7..9, and one more token at 10
    mask = induction_key_mask(11, 3, start=1)
    assert mask[:4].sum() == 0  # BOS and the first copy: nothing to copy yet
    assert {q: torch.nonzero(mask[q]).flatten().tolist() for q in (4, 6, 7, 10)} == {
        4: [2], 6: [4], 7: [2, 5], 10: [2, 5, 8]}  # q - p + 1, q - 2p + 1, ... but never BOS's successor
    assert mask.triu(1).sum() == 0  # always a key the causal query may see
    with pytest.raises(TypeError, match="start must be an int"):
        induction_key_mask(11, 3, start=None)


def test_induction_score_counts_every_earlier_copy():
    """On three copies a head that reads the OLDEST copy is as much an induction head as one
    reading the newest: the score is 1 for both, whereas one period back would give 3/7."""
    seq_len, period = 11, 3
    mask = induction_key_mask(seq_len, period, start=1)
    queries, _ = induction_positions(seq_len, period, start=1)
    oldest = torch.zeros(seq_len, seq_len, dtype=torch.float64)
    oldest[:, 0] = 1.0
    for q in queries.tolist():
        oldest[q] = 0.0
        oldest[q, int(torch.nonzero(mask[q]).min())] = 1.0  # the key after the first occurrence
    newest = ideal_pattern("induction", seq_len, period=period, start=1)
    w = torch.stack([oldest, newest])  # (2, T, T)
    assert induction_score(w, period, start=1).tolist() == [1.0, 1.0]
    one_back = w[:, queries, queries - period + 1].mean(-1)
    assert one_back.tolist() == [pytest.approx(3 / 7), 1.0]  # queries 4..6 only, of 4..10
    # a head that splits its weight between two copies still scores 1
    split = newest.clone()
    split[7:, :] = 0.0
    for q in range(7, seq_len):
        split[q, q - 2] = split[q, q - 5] = 0.5
    assert induction_score(split[None], period, start=1).item() == pytest.approx(1.0)


def test_agreement_score_reads_verb_to_subject():
    w = torch.zeros(2, 2, 6, 6, dtype=torch.float64)  # (B, h, T, T)
    w[..., 0] = 1.0  # everyone on position 0 ...
    w[0, 0, 4] = torch.tensor([0, 1.0, 0, 0, 0, 0])  # ... but sequence 0, head 0: verb 4 -> subject 1
    w[1, 0, 5] = torch.tensor([0, 0, 1.0, 0, 0, 0])  # sequence 1, head 0: verb 5 -> subject 2
    scores = agreement_score(w, [4, 5], [1, 2])
    assert scores.tolist() == [1.0, 0.0]
    assert agreement_score(w, [4, 5], [2, 1]).tolist() == [0.0, 0.0]
    assert agreement_score(w, torch.tensor([4, 5]), 0).tolist() == [0.0, 1.0]
    assert agreement_score([w, w], [4, 5], [1, 2]).shape == (2, 2)
    assert agreement_score(w[0], 4, 1).tolist() == [1.0, 0.0]  # (h, T, T) with ints
    assert agreement_score(w, query_positions=[4, 5], subject_positions=[1, 2]).tolist() == [1.0, 0.0]


def test_head_score_table_ranks_and_rounds():
    layers = [heads("previous token", "uniform"), heads("induction", "first token")]
    table = head_score_table({"previous token": previous_token_score(layers),
                              "induction": induction_score(layers, PERIOD, start=0),
                              "first token": first_token_score(layers)})
    assert list(table.index[:3]) == ["L0H0", "L1H0", "L1H1"]
    assert table.loc["L0H0", "top role"] == "previous token"
    assert table.loc["L1H0", "top role"] == "induction"
    assert table.loc["L1H1", "top role"] == "first token"
    assert table.loc["L0H1", "top score"] == round(uniform_prev_value(T), 3)


# ----- bad input gets a clear error -----

@pytest.mark.parametrize("bad,error,words", [
    ([[0.5, 0.5]], TypeError, "torch.Tensor or numpy"),
    (torch.ones(3, 3, dtype=torch.long), TypeError, "floating-point"),
    (torch.ones(4, 4) / 4, ValueError, "(B, h, T, T) or (h, T, T)"),
    (torch.ones(1, 1, 2, 3, 4) / 4, ValueError, "(B, h, T, T) or (h, T, T)"),
    (torch.ones(2, 3, 4) / 4, ValueError, "square"),
    (torch.ones(1, 1, 1), ValueError, "at least 2 positions"),
    (torch.ones(1, 3, 3), ValueError, "sum to 1"),
    (torch.full((1, 2, 2), float("nan")), ValueError, "NaN"),
    (torch.tensor([[[1.5, -0.5], [0.0, 1.0]]]), ValueError, "non-negative"),
    ([], ValueError, "empty list"),
    ([torch.ones(1, 2, 2) / 2, torch.ones(1, 3, 3) / 3], ValueError, "same shape"),
])
def test_bad_weights(bad, error, words):
    with pytest.raises(error, match=None) as info:
        previous_token_score(bad)
    assert words in str(info.value)


def test_check_rows_can_be_switched_off():
    raw = torch.ones(1, 3, 3)  # rows sum to 3: rejected unless asked not to check
    assert previous_token_score(raw, check_rows=False).tolist() == [1.0]


@pytest.mark.parametrize("period,start,error,words", [
    (1, 0, ValueError, "at least 2"),
    (5, 4, ValueError, "no repeated copy"),
    (9, 0, ValueError, "no repeated copy"),
    (3, -1, ValueError, ">= 0"),
    (2.0, 0, TypeError, "period must be an int"),
])
def test_bad_induction_arguments(period, start, error, words):
    with pytest.raises(error) as info:
        induction_score(heads("uniform"), period, start=start)
    assert words in str(info.value)


@pytest.mark.parametrize("verbs,subjects,error,words", [
    ([4], [1, 2], ValueError, "query_positions must hold one position per sequence"),
    ([4, 6], [1, 2], ValueError, "0..5"),
    ([4, 5], [-1, 2], ValueError, "0..5"),
    ([4.0, 5.0], [1, 2], TypeError, "query_positions[0] must be an int, got float 4.0"),
    (True, [1, 2], TypeError, "bool"),
])
def test_bad_agreement_positions(verbs, subjects, error, words):
    w = torch.ones(2, 1, 6, 6) / 6
    with pytest.raises(error) as info:
        agreement_score(w, verbs, subjects)
    assert words in str(info.value)


def test_bad_tables_and_grids():
    with pytest.raises(ValueError, match="non-empty dict"):
        head_score_table({})
    with pytest.raises(ValueError, match="same"):
        head_score_table({"a": torch.zeros(2, 2), "b": torch.zeros(2, 3)})
    with pytest.raises(ValueError, match="role must be one of"):
        ideal_pattern("next token", 5)
    with pytest.raises(ValueError, match="period="):
        ideal_pattern("induction", 5)
    with pytest.raises(ValueError, match="grid"):
        best_head(torch.zeros(2, 2, 2))


def test_role_verdicts_follow_the_numbers():
    scores = {"previous token": torch.tensor([[0.9, 0.2], [0.1, 0.0]]),
              "induction": torch.tensor([[0.0, 0.1], [0.3, 0.05]])}
    prev, ind = role_verdicts(scores, threshold=0.5)
    assert prev == ("previous token: best L0H0 scores 0.900, 0.400 above the 0.5 line; "
                    "next best L0H1 at 0.200 -> present.")
    assert ind.startswith("induction: best L1H0 scores 0.300, 0.200 below the 0.5 line")
    assert ind.endswith("-> absent.")
    with pytest.raises(ValueError, match="threshold"):
        role_verdicts(scores, threshold=0)


def test_role_verdicts_near_the_line_are_borderline_and_quote_chance():
    near = {"previous token": torch.tensor([[0.492, 0.3]]), "first token": torch.tensor([[0.504, 0.1]])}
    prev, first = role_verdicts(near, chance={"previous token": 0.246, "first token": 0.2})
    assert prev.startswith("previous token: best L0H0 scores 0.492 = 2.0x chance (0.246), "
                           "0.008 below the 0.5 line")
    assert prev.endswith("-> borderline (within 0.05 of the line: too close to call).")
    assert "= 2.5x chance (0.200), 0.004 above" in first and "borderline" in first
    assert role_verdicts(near, margin=0.0)[0].endswith("-> absent.")


def test_verdict_words_and_margins():
    assert [verdict(x) for x in (0.56, 0.55, 0.5, 0.451, 0.45, 0.449)] == [
        "present", "present", "borderline", "borderline", "borderline", "absent"]
    assert verdict(0.5, margin=0.0) == "present" and verdict(0.499, margin=0.0) == "absent"
    with pytest.raises(ValueError, match="margin"):
        verdict(0.5, margin=0.6)
    with pytest.raises(ValueError, match="threshold"):
        verdict(0.5, threshold=1.5)


def test_chance_level_is_the_uniform_head_score():
    assert chance_level("previous token", T) == pytest.approx(uniform_prev_value(T))
    assert chance_level("first token", T) == pytest.approx(uniform_prev_value(T))
    uniform = heads("uniform")
    assert chance_level("induction", T, period=PERIOD, start=0) == pytest.approx(
        induction_score(uniform, PERIOD, start=0).item())
    with pytest.raises(ValueError, match="period="):
        chance_level("induction", T)
    with pytest.raises(ValueError, match="role must be one of"):
        chance_level("subject", T)


def test_mean_by_group_counts_and_averages():
    table = mean_by_group({"a": torch.tensor([1.0, 0.0, 1.0, 1.0]), "b": [0.5, 0.5, 0.0, 1.0]},
                          {"template": ["x", "x", "y", "y"], "number": ["s", "p", "s", "s"]})
    assert list(table.columns) == ["sentences", "a", "b"]
    assert table.loc[("x", "p")].tolist() == [1, 0.0, 0.5]
    assert table.loc[("y", "s")].tolist() == [2, 1.0, 0.5]
    with pytest.raises(ValueError, match="one entry per sequence"):
        mean_by_group({"a": torch.ones(3)}, {"template": ["x", "y"]})
    with pytest.raises(ValueError, match="at least one"):
        mean_by_group({}, {"template": []})
    with pytest.raises(ValueError, match="1-D"):
        mean_by_group({"a": torch.ones(2, 2)}, {"template": ["x", "y"]})


def test_attention_mass_sums_regions():
    w = torch.stack([heads("uniform", "previous token")] * 2)  # (2, 2, T, T)
    everything = torch.ones(2, T, dtype=torch.bool)
    assert torch.allclose(attention_mass(w, [5, 8], everything), torch.ones(2, dtype=torch.float64))
    first_two = torch.zeros(T, dtype=torch.bool)
    first_two[:2] = True
    # uniform head at query 5 gives 2/6, at query 8 gives 2/9; previous-token head gives 0 at both
    expected = torch.tensor([(2 / 6 + 2 / 9) / 2, 0.0], dtype=torch.float64)
    assert torch.allclose(attention_mass(w, [5, 8], first_two), expected)
    one_key = torch.zeros(2, T, dtype=torch.bool)
    one_key[0, 4], one_key[1, 7] = True, True
    assert torch.allclose(attention_mass(w, [5, 8], one_key), agreement_score(w, [5, 8], [4, 7]))
    assert attention_mass([w, w], 3, first_two).shape == (2, 2)
    each = attention_mass(w, [5, 8], first_two, per_sequence=True)  # (B, h): no average
    assert each.shape == (2, 2) and torch.allclose(each.mean(0), expected)
    assert attention_mass([w, w, w], 3, first_two, per_sequence=True).shape == (2, 3, 2)  # (B, L, h)
    with pytest.raises(TypeError, match="bool tensor"):
        attention_mass(w, 3, first_two.int())
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        attention_mass(w, 3, torch.ones(3, T, dtype=torch.bool))


# ----------------------------------------------------------------------------- new scores (lesson 05)
from course_utils.interp.scores import previous_token_by_position  # noqa: E402


def test_previous_token_by_position_on_hand_built_heads():
    pattern = heads("previous token", "first token", "uniform")  # (3, T, T)
    by_position = previous_token_by_position(pattern)  # (3, T-1)
    assert by_position.shape == (3, T - 1)
    assert torch.allclose(by_position[0], torch.ones(T - 1, dtype=torch.float64))
    assert torch.allclose(by_position[1], torch.tensor([1.0] + [0.0] * (T - 2), dtype=torch.float64))
    expected = torch.tensor([1 / (i + 1) for i in range(1, T)], dtype=torch.float64)
    assert torch.allclose(by_position[2], expected)
    assert torch.allclose(by_position.mean(-1), previous_token_score(pattern))
    # a head that looks back only on the first 3 queries: its position profile says so
    early_only = ideal_pattern("first token", T)
    early_only[1:4] = ideal_pattern("previous token", T)[1:4]
    profile = previous_token_by_position([early_only[None], early_only[None]])  # list: (L, h, T-1)
    assert profile.shape == (2, 1, T - 1)
    assert profile[0, 0, :3].tolist() == [1.0, 1.0, 1.0] and float(profile[0, 0, 3:].sum()) == 0.0


def test_induction_score_all_rows_normalisation():
    pattern = heads("induction")  # a perfect induction head, start=0 layout
    repeated = induction_score(pattern, PERIOD, start=0)
    all_rows = induction_score(pattern, PERIOD, start=0, average_over="all rows")
    assert float(repeated) == pytest.approx(1.0)
    assert float(all_rows) == pytest.approx((T - 0 - PERIOD) / T)  # only T - start - period rows count
    with pytest.raises(ValueError, match="average_over"):
        induction_score(pattern, PERIOD, start=0, average_over="rows")


def test_empty_inputs_are_named_by_argument():
    """An empty list of layers, an empty dict of values or groups, and a sentence with no noun each
    said what was missing without naming the argument (a cold battery's repros)."""
    from course_utils.interp.scores import mean_by_group, previous_token_score
    from course_utils.tasks.synthetic import subject_position

    with pytest.raises(ValueError, match=r"^weights must be one attention tensor per layer, got an empty"):
        previous_token_score([])
    with pytest.raises(ValueError, match=r"^values must hold at least one value column .*got an empty dict$"):
        mean_by_group({}, {"g": ["x"]})
    with pytest.raises(ValueError, match=r"^groups must hold at least one grouping .*got an empty dict$"):
        mean_by_group({"v": [1.0]}, {})
    with pytest.raises(ValueError, match=r"^tokens must hold a noun \(the subject\), got '' \(an empty"):
        subject_position(torch.zeros(0, dtype=torch.long))
