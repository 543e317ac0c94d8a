"""The induction and agreement tasks: determinism, structure, scoring, tokenizer errors."""

import dataclasses

import pytest
import torch

from course_utils.tasks.synthetic import (
    AGREEMENT_VOCAB,
    BOS,
    NOUNS,
    TARGET_VERBS,
    TEMPLATES,
    AgreementTask,
    InductionBatch,
    InductionTask,
    MixtureTask,
    agreement_accuracy,
    agreement_margins,
    detokenize,
    induction_accuracy,
    subject_position,
    tokenize,
)

SINGULAR_NOUNS = {s for s, _ in NOUNS}
PLURAL_NOUNS = {p for _, p in NOUNS}


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# -- induction ------------------------------------------------------------------------
def test_induction_batches_are_deterministic_per_seed():
    task = InductionTask()
    a, b, c = task.sample(8, gen(0)), task.sample(8, gen(0)), task.sample(8, gen(1))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.periods, b.periods)
    assert not torch.equal(a.tokens, c.tokens)


def test_induction_sequences_repeat_a_distinct_prefix_with_their_own_period():
    task = InductionTask()
    batch = task.sample(200, gen(3))
    assert batch.tokens.shape == (200, task.seq_len) and batch.tokens.dtype == torch.long
    assert (batch.tokens[:, 0] == BOS).all() and (batch.tokens[:, 1:] != BOS).all()
    assert int(batch.tokens.max()) < task.vocab_size
    assert set(batch.periods.tolist()) <= set(task.train_periods)
    assert len(set(batch.periods.tolist())) > 5, "periods should vary from sequence to sequence"
    for row, p in zip(batch.tokens, batch.periods.tolist(), strict=True):
        prefix = row[1:1 + p]
        assert len(set(prefix.tolist())) == p, "the repeated block has distinct tokens"
        assert torch.equal(row[1 + p:], row[1:len(row) - p]), "token t equals token t - p"


def test_scored_positions_are_exactly_those_answerable_by_an_earlier_occurrence():
    task = InductionTask()
    batch = task.sample(50, gen(4))
    T = task.seq_len
    for row, scored, p in zip(batch.tokens, batch.scored, batch.periods.tolist(), strict=True):
        for t in range(T):
            current = row[t].item()
            earlier = [s for s in range(1, t) if row[s].item() == current]
            answerable = t < T - 1 and bool(earlier) and row[earlier[-1] + 1].item() == row[t + 1].item()
            assert scored[t].item() == answerable, (p, t)


def test_heldout_periods_are_never_trained_on():
    task = InductionTask()
    assert not set(task.train_periods) & set(task.heldout_periods)
    assert set(task.eval_batch(300).periods.tolist()) == set(task.heldout_periods)
    assert set(task.eval_batch(300, heldout=False).periods.tolist()) == set(task.train_periods)
    assert torch.equal(task.eval_batch(64).tokens, task.eval_batch(64).tokens)


def _logits_copying(tokens: torch.Tensor, source: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Logits (B, T, V) that predict tokens[b, source[b, t]] at each position."""
    predicted = tokens.gather(1, source.expand_as(tokens).clamp(0, tokens.shape[1] - 1))
    return torch.nn.functional.one_hot(predicted, vocab_size).float()


def test_an_oracle_scores_one_and_a_fixed_lookback_shortcut_fails_on_heldout_periods():
    task = InductionTask()
    batch = task.eval_batch(256)
    T = task.seq_len
    positions = torch.arange(T).unsqueeze(0)
    oracle = _logits_copying(batch.tokens, positions + 1 - batch.periods.unsqueeze(1), task.vocab_size)
    assert induction_accuracy(oracle, batch) == 1.0
    # "copy what came after the token `d` positions back", for every training period d:
    for d in task.train_periods:
        shortcut = _logits_copying(batch.tokens, positions + 1 - d, task.vocab_size)
        assert induction_accuracy(shortcut, batch) == 0.0, d
    # whereas a look-back that is a multiple of the period does solve it, hence the rule
    assert induction_accuracy(_logits_copying(batch.tokens, positions + 1 - 10, task.vocab_size), batch) > 0.4


def test_induction_accuracy_checks_shapes():
    task = InductionTask()
    batch = task.sample(4, gen())
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        induction_accuracy(torch.zeros(4, task.seq_len), batch)
    with pytest.raises(TypeError, match="torch.Tensor"):
        induction_accuracy(None, batch)
    assert isinstance(batch, InductionBatch)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"train_periods": (3, 4), "heldout_periods": (4, 5)}, "disjoint"),
        ({"vocab_size": 8, "train_periods": (9,), "heldout_periods": (3,)}, "distinct tokens"),
        ({"seq_len": 10, "train_periods": (8,), "heldout_periods": (3,)}, "too long"),
        ({"train_periods": (0,), "heldout_periods": (3,)}, "positive int"),
        ({"train_periods": (3, 10), "heldout_periods": (5,)}, "10 is a multiple of held-out period 5"),
    ],
)
def test_bad_induction_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        InductionTask(**kwargs)


def test_induction_sample_argument_checks():
    task = InductionTask()
    with pytest.raises(TypeError, match="torch.Generator"):
        task.sample(4, 0)
    with pytest.raises(ValueError, match="batch_size"):
        task.sample(0, gen())
    with pytest.raises(ValueError, match="does not fit"):
        task.sample(4, gen(), periods=(40,))


# -- agreement ------------------------------------------------------------------------
def test_agreement_batches_are_deterministic_per_seed():
    task = AgreementTask()
    a, b, c = task.sample(32, gen(0)), task.sample(32, gen(0)), task.sample(32, gen(1))
    assert a.sentences == b.sentences and torch.equal(a.tokens, b.tokens)
    assert a.sentences != c.sentences


def test_every_sentence_agrees_and_its_annotations_are_right():
    task = AgreementTask()
    batch = task.eval_batch(600)
    assert set(batch.template) == set(TEMPLATES)
    assert 0.3 < batch.attractor.float().mean() < 0.7
    for i in range(len(batch)):
        n = batch.lengths[i].item()
        words = detokenize(batch.tokens[i])
        assert words[0] == "<bos>" and all(w == "<pad>" for w in words[n:])
        assert "<pad>" not in words[:n]
        subject, verb = words[batch.subject_pos[i]], words[batch.verb_pos[i]]
        plural = batch.plural[i].item()
        assert subject in (PLURAL_NOUNS if plural else SINGULAR_NOUNS)
        assert batch.verb_pos[i].item() == n - 1 and batch.predict_pos[i].item() == n - 2
        pair = next(p for p in TARGET_VERBS if verb in p)
        assert verb == pair[int(plural)], f"{' '.join(words[:n])}: verb does not agree"
        assert AGREEMENT_VOCAB[batch.correct_id[i]] == verb
        assert AGREEMENT_VOCAB[batch.wrong_id[i]] == pair[1 - int(plural)]
        between = words[batch.subject_pos[i] + 1:batch.verb_pos[i]]
        opposite = SINGULAR_NOUNS if plural else PLURAL_NOUNS
        assert batch.attractor[i].item() == any(w in opposite for w in between)
        assert subject_position(batch.tokens[i, :n]) == batch.subject_pos[i].item()


def test_agreement_accuracy_of_an_oracle_and_of_its_opposite():
    batch = AgreementTask().eval_batch(300)
    V = len(AGREEMENT_VOCAB)
    logits = torch.zeros(len(batch), batch.tokens.shape[1], V)
    rows = torch.arange(len(batch))
    logits[rows, batch.predict_pos, batch.correct_id] = 1.0
    scores = agreement_accuracy(logits, batch)
    assert scores["all"] == scores["attractor"] == scores["no_attractor"] == 1.0
    assert all(scores[name] == 1.0 for name in TEMPLATES)
    assert agreement_accuracy(-logits, batch)["all"] == 0.0
    assert (agreement_margins(logits, batch) == 1.0).all()


def test_an_attractor_following_model_fails_only_with_attractors():
    """A model that agrees with the *last* noun scores 1 without attractors, 0 with them."""
    batch = AgreementTask(templates=("prepositional",)).eval_batch(300)
    logits = torch.zeros(len(batch), batch.tokens.shape[1], len(AGREEMENT_VOCAB))
    rows = torch.arange(len(batch))
    follows_attractor = torch.where(batch.attractor, batch.wrong_id, batch.correct_id)
    logits[rows, batch.predict_pos, follows_attractor] = 1.0
    scores = agreement_accuracy(logits, batch)
    assert scores["no_attractor"] == 1.0 and scores["attractor"] == 0.0


def test_tokenize_round_trips_and_finds_the_subject():
    tokens = tokenize("The keys on the old table are.")
    assert tokens.dtype == torch.long and tokens.ndim == 1
    assert detokenize(tokens) == ["<bos>", "the", "keys", "on", "the", "old", "table", "are"]
    assert subject_position(tokens) == 2
    assert subject_position(tokenize("i think the cat that the dogs chase is")) == 4
    assert detokenize(tokenize("the cat is", add_bos=False)) == ["the", "cat", "is"]


def test_tokenize_ignores_punctuation():
    expected = tokenize("the keys on the table are")
    assert torch.equal(tokenize('"The keys; on: the table (are)!"'), expected)


def test_tokenize_suggests_close_words_without_dumping_the_vocabulary():
    with pytest.raises(ValueError, match=r"unknown word\(s\) \['tabel'\] .*Did you mean 'table'\?") as info:
        tokenize("the keys on the tabel are")
    assert "AGREEMENT_VOCAB" in str(info.value) and "chases" not in str(info.value)
    with pytest.raises(ValueError, match="Did you mean 'table' for 'tabel'?") as info:
        tokenize("the kitten on the tabel is")
    assert "kitten'?" not in str(info.value)  # nothing close to 'kitten': no guess for it
    with pytest.raises(ValueError) as info:
        tokenize("the zzz is")
    assert "Did you mean" not in str(info.value)


def test_public_names_are_exported():
    import course_utils.tasks.synthetic as tasks

    assert "agreement_margins" in tasks.__all__
    assert all(hasattr(tasks, name) for name in tasks.__all__)


def test_tokenize_names_unknown_words():
    with pytest.raises(ValueError, match=r"unknown word\(s\) \['kitten', 'tabel'\]"):
        tokenize("the kitten on the tabel is")
    with pytest.raises(ValueError, match="unknown word"):
        tokenize("the <pad> is")
    with pytest.raises(ValueError, match="empty"):
        tokenize("  .  ")
    with pytest.raises(TypeError, match="str"):
        tokenize(["the", "cat"])
    with pytest.raises(ValueError, match="tokens must hold a noun"):
        subject_position(tokenize("the old is"))
    with pytest.raises(ValueError, match="token ids"):
        detokenize([0, 999])


def test_bad_agreement_settings_are_refused():
    with pytest.raises(ValueError, match=r"templates\[0\] \(a template name\) must be one of .*'passive'"):
        AgreementTask(templates=("passive",))
    with pytest.raises(ValueError, match="attractor_p"):
        AgreementTask(attractor_p=1.5)
    with pytest.raises(TypeError, match="torch.Generator"):
        AgreementTask().sample(4, 0)
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        batch = AgreementTask().sample(4, gen())
        agreement_accuracy(torch.zeros(4, 3, len(AGREEMENT_VOCAB)), batch)


def test_agreement_batch_take_keeps_every_field_row_for_row():
    batch = AgreementTask().eval_batch(50)
    rows = batch.attractor.nonzero().squeeze(1)[:7]
    part = batch.take(rows)
    assert len(part.template) == part.tokens.shape[0] == 7 and bool(part.attractor.all())
    for f in dataclasses.fields(batch):
        whole, taken = getattr(batch, f.name), getattr(part, f.name)
        if f.name == "template":
            assert taken == tuple(whole[i] for i in rows.tolist())
        else:
            assert torch.equal(taken, whole[rows]), f.name
    assert torch.equal(part.predict_pos, batch.predict_pos[rows])


def test_a_mixture_batchs_task_parts_keep_every_counted_target_and_cut_the_padding():
    """task_parts: the induction rows whole, the sentence rows cut after the longest sentence;
    the parts' losses weighed by their counted targets are the whole batch's loss."""
    batch = MixtureTask().sample(40, gen(3))
    (ind_tokens, ind_targets), (sent_tokens, sent_targets) = batch.task_parts()
    n, T = batch.num_induction, batch.tokens.shape[1]
    assert torch.equal(ind_tokens, batch.tokens[:n]) and torch.equal(ind_targets, batch.targets[:n])
    cut = sent_tokens.shape[1]
    assert cut < T, "the sentences are padded to the induction length: some columns go"
    assert batch.real[n:, cut - 1].any() and not batch.real[n:, cut:].any()
    assert torch.equal(sent_tokens, batch.tokens[n:, :cut])
    assert torch.equal(sent_targets, batch.targets[n:, :cut])
    counted = sum(int((targets != -100).sum()) for _, targets in batch.task_parts())
    assert counted == int((batch.targets != -100).sum()), "no counted target is cut off"
    logits = torch.randn(*batch.tokens.shape, 200, generator=gen(4), dtype=torch.float64)

    def loss(logits, targets):
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())

    parts = [(loss(logits[:n], ind_targets), int((ind_targets != -100).sum())),
             (loss(logits[n:, :cut], sent_targets), int((sent_targets != -100).sum()))]
    torch.testing.assert_close(sum(value * k for value, k in parts) / counted, loss(logits, batch.targets))
