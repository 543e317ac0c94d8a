"""Battery 15, fix pass fix45a (issue 38): records that refuse cross-field inconsistencies,
check_record's field-name lists, check_tensor_list([]), the task helpers' ids and periods, the
worked example's NaN and deep JSON, and train_model's target without target_metric."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from dataclasses import replace

import numpy as np
import pytest
import torch
from bad_input_cases import raises_naming

from course_utils.attention import validation as V
from course_utils.attention.gqa import PublishedConfig
from course_utils.attention.mla import MLAConfig
from course_utils.tasks import worked_example as we

_raises = raises_naming


# -- 2. empty config names and sources -------------------------------------------------------------
@pytest.mark.parametrize(("make", "label"), [
    (lambda: PublishedConfig("", 32, 32, 8, 128, "s"), "PublishedConfig.name"),
    (lambda: PublishedConfig("n", 32, 32, 8, 128, "  "), "PublishedConfig.source"),
    (lambda: MLAConfig("", 60, 128, 128, 512, 64, "s"), "MLAConfig.name"),
    (lambda: MLAConfig("n", 60, 128, 128, 512, 64, ""), "MLAConfig.source"),
])
def test_configs_refuse_an_empty_name_or_source(make, label: str) -> None:
    _raises(ValueError, [label, "non-empty"], make)


def test_published_config_names_num_kv_heads_as_its_field() -> None:
    _raises(ValueError, ["PublishedConfig.num_kv_heads", "3"], lambda: PublishedConfig("n", 2, 32, 3, 8, "s"))


# -- 3. check_record refuses a name that is not a field ----------------------------------------------
@pytest.mark.parametrize("option", ["nan_ok", "signed", "positive", "nonempty", "fractions"])
def test_check_record_refuses_an_option_naming_no_field(option: str) -> None:
    @dataclasses.dataclass
    class Rec:
        value: float

        def __post_init__(self) -> None:
            V.check_record(self, **{option: ("valeu",)})

    _raises(ValueError, [option, "'valeu'", "Rec", "value"], lambda: Rec(1.0))


def test_check_record_refuses_a_bare_str_as_a_list_of_names() -> None:
    @dataclasses.dataclass
    class Rec2:
        loss: float

        def __post_init__(self) -> None:
            V.check_record(self, nan_ok="loss")

    _raises(TypeError, ["nan_ok", "Rec2", "tuple of field names", "'loss'"], lambda: Rec2(1.0))


def test_check_record_fractions_lie_in_zero_one() -> None:
    @dataclasses.dataclass
    class Share:
        accuracy: list[float]

        def __post_init__(self) -> None:
            V.check_record(self, fractions=("accuracy",))

    assert Share([0.0, 1.0]).accuracy == [0.0, 1.0]
    _raises(ValueError, ["Share.accuracy[1]", "[0, 1]", "1.5"], lambda: Share([0.5, 1.5]))


# -- 4. check_tensor_list([]) -----------------------------------------------------------------------
def test_check_tensor_list_refuses_an_empty_list_as_its_docstring_says() -> None:
    _raises(ValueError, ["parts", "at least one tensor", "empty list"],
            lambda: V.check_tensor_list([], "parts"))
    _raises(ValueError, ["parts", "at least one tensor"],
            lambda: V.check_tensor_list(torch.ones(0, 2, 2), "parts", stacked_ndim=3))
    assert V.check_tensor_list((), "parts", allow_empty=True) == []


# -- 1. worked example: Table and Head ----------------------------------------------------------------
@pytest.mark.parametrize(("field", "rows", "cols"), [("rows", ("a", "a"), ("b", "c")),
                                                       ("cols", ("a", "b"), ("c", "c"))])
def test_table_refuses_repeated_labels(field: str, rows, cols) -> None:
    _raises(ValueError, [f"Table('t').{field}", "distinct", "repeats"],
            lambda: we.Table("t", np.zeros((2, 2)), rows, cols))


def test_table_refuses_nan_values_naming_the_entry() -> None:
    values = np.zeros((2, 2))
    values[1, 0] = math.nan
    _raises(ValueError, ["Table('t').values", "finite", "(1, 0)"],
            lambda: we.Table("t", values, ("a", "b"), ("c", "d")))


def test_head_refuses_projections_that_disagree() -> None:
    head = we.load_worked_example().heads[0]
    renamed = tuple(f"r{i}" for i in range(len(head.w_k.rows)))
    other_rows = we.Table("k", head.w_k.values, renamed, head.w_k.cols)
    _raises(ValueError, ["Head(", ").w_k", "rows of Head.w_q"], lambda: replace(head, w_k=other_rows))
    narrow = we.Table("k", head.w_k.values[:, :1], head.w_k.rows, head.w_k.cols[:1])
    _raises(ValueError, [").w_k", "d_k", str(head.w_q.shape[1]), "got 1"], lambda: replace(head, w_k=narrow))


def test_worked_example_refuses_heads_and_w_o_that_disagree_with_features() -> None:
    example = we.load_worked_example()
    w_o = example.w_o
    short = we.Table("W_O", w_o.values[:-1], w_o.rows[:-1], w_o.cols)
    _raises(ValueError, ["WorkedExample.w_o", "sum of the heads' d_v", str(w_o.shape[0])],
            lambda: replace(example, w_o=short))


# -- 8. worked example: NaN after loading, deep JSON ----------------------------------------------------
@pytest.mark.parametrize("call", [we.compute_steps, we.recompute_from_article, we.compare_with_article])
def test_a_worked_example_changed_to_nan_is_named(call) -> None:
    example = we.load_worked_example()
    values = example.heads[1].w_v.values
    with pytest.raises(ValueError, match="read-only"):  # since battery 21 a Table keeps a read-only copy
        values[2, 1] = math.nan
    values.setflags(write=True)  # forced past that: the calls still name it
    values[2, 1] = math.nan
    _raises(we.WorkedExampleError, ["heads[1].w_v", "finite", "nan", "(2, 1)"], lambda: call(example))


def test_load_worked_example_refuses_json_nested_too_deep(tmp_path) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    _raises(we.WorkedExampleError, ["deep.json", "too deeply"], lambda: we.load_worked_example(path))


def test_the_real_worked_example_still_loads() -> None:
    example = we.load_worked_example()
    assert json.loads(we.WORKED_EXAMPLE_PATH.read_text())["people"] == list(example.people)
    assert set(we.compute_steps(example)) >= set(we.PRINTED_STEPS)
    assert re.search(r"slip", " ".join(we.compare_with_article(example)["verdict"]))


# -- 1, 5, 6, 7. synthetic tasks ------------------------------------------------------------------------
def _agreement_batch():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(4, torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("change", "words"), [
    (lambda b: {"lengths": b.lengths + 50}, ["AgreementBatch.lengths", "row 0"]),
    (lambda b: {"verb_pos": b.lengths + 3}, ["AgreementBatch.verb_pos", "AgreementBatch.lengths", "row 0"]),
    (lambda b: {"verb_pos": torch.zeros_like(b.verb_pos), "lengths": torch.ones_like(b.lengths)},
     ["AgreementBatch.verb_pos", "1..T", "got 0"]),
    (lambda b: {"tokens": b.tokens[:, :2]}, ["AgreementBatch.verb_pos", "1..T = 1..2", "predict_pos"]),
    (lambda b: {"subject_pos": b.subject_pos - 50}, ["AgreementBatch.subject_pos", "AgreementBatch.lengths"]),
    (lambda b: {"correct_id": b.correct_id + 1000}, ["AgreementBatch.correct_id", "0..69"]),
    (lambda b: {"wrong_id": -b.wrong_id}, ["AgreementBatch.wrong_id", "0..69"]),
    (lambda b: {"tokens": b.tokens + 1000}, ["AgreementBatch.tokens", "0..69"]),
])
def test_agreement_batch_refuses_fields_that_do_not_fit_each_other(change, words: list[str]) -> None:
    batch = _agreement_batch()
    _raises(ValueError, words, lambda: replace(batch, **change(batch)))


def test_agreement_batch_still_takes_and_pads() -> None:
    from course_utils.tasks.synthetic import MixtureTask

    batch = _agreement_batch()
    assert len(batch.take([0, 2])) == 2
    cut = replace(batch, tokens=batch.tokens[:, : int(batch.predict_pos.max()) + 1])  # as trimmed_by_length
    assert cut.lengths.tolist() == batch.lengths.tolist()
    assert MixtureTask().pad(batch).tokens.shape[1] == MixtureTask().seq_len


def test_induction_and_mixture_batches_refuse_negative_token_ids() -> None:
    from course_utils.tasks.synthetic import InductionTask, MixtureTask

    generator = torch.Generator().manual_seed(0)
    induction = InductionTask().sample(2, generator)
    _raises(ValueError, ["InductionBatch.tokens", ">= 0", "-3"],
            lambda: replace(induction, tokens=induction.tokens - 3))
    mixture = MixtureTask().sample(4, generator)
    _raises(ValueError, ["MixtureBatch.tokens", ">= 0"], lambda: replace(mixture, tokens=-mixture.tokens - 1))


@pytest.mark.parametrize("bad", [-100, -5])
def test_next_token_targets_refuses_negative_ids(bad: int) -> None:
    from course_utils.tasks.synthetic import next_token_targets

    _raises(ValueError, ["tokens", ">= 0", str(bad), "position 1"],
            lambda: next_token_targets(torch.tensor([[1, bad, 2]])))


def test_induction_sample_refuses_an_int_as_periods() -> None:
    from course_utils.tasks.synthetic import InductionTask

    _raises(TypeError, ["periods", "list of ints", "int 5"],
            lambda: InductionTask().sample(2, torch.Generator(), periods=5))
    assert InductionTask().sample(2, torch.Generator(), periods=[5]).periods.tolist() == [5, 5]


def test_agreement_accuracy_names_verb_ids_beyond_the_logits() -> None:
    from course_utils.tasks.synthetic import AGREEMENT_VOCAB, agreement_accuracy

    batch = _agreement_batch()
    batch.correct_id[1] = 500  # changed in place, after the batch checked itself
    logits = torch.zeros(4, batch.tokens.shape[1], len(AGREEMENT_VOCAB))
    _raises(ValueError, ["batch.correct_id", "logits", f"V = {len(AGREEMENT_VOCAB)}", "500"],
            lambda: agreement_accuracy(logits, batch))


# -- 1. two_relations: LookupBatch, RunResult -----------------------------------------------------------
def _lookup_batch():
    from course_utils.tasks.two_relations import TwoKeyTask

    return TwoKeyTask().sample(4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize(("field", "cut"), [("item_symbols", lambda t: t[:2]),
                                            ("relation", lambda t: t[:, :3]),
                                            ("target", lambda t: t[:3]), ("query_keys", lambda t: t[:, :1])])
def test_lookup_batch_refuses_fields_of_other_sizes(field: str, cut) -> None:
    from course_utils.tasks.two_relations import LookupBatch

    batch = _lookup_batch()
    parts = batch._asdict()
    parts[field] = cut(parts[field])
    _raises(ValueError, [f"LookupBatch.{field}", "item_keys", str(tuple(parts[field].shape))],
            lambda: LookupBatch(**parts))


def test_lookup_batch_refuses_a_float_field_and_still_takes() -> None:
    from course_utils.tasks.two_relations import LookupBatch

    batch = _lookup_batch()
    _raises(TypeError, ["LookupBatch.target", "int64", "float32"],
            lambda: LookupBatch(*batch[:5], batch.target.float()))
    assert batch.take([1, 3]).num_examples == 2


@pytest.mark.parametrize(("accuracy", "relation", "label", "value"), [
    ([0.5, 1.5], (0.5, 0.5), "RunResult.accuracy[1]", "1.5"),
    ([-0.25], (0.5, 0.5), "RunResult.accuracy[0]", "-0.25"),
    ([0.5], (0.5, 2.0), "RunResult.relation_accuracy", "2.0"),
])
def test_run_result_accuracies_are_fractions(accuracy, relation, label: str, value: str) -> None:
    from course_utils.tasks.two_relations import RunResult

    steps = list(range(len(accuracy)))
    _raises(ValueError, [label, value],
            lambda: RunResult(2, 0, steps, accuracy, relation, torch.nn.Linear(1, 1)))


# -- 1, 9. train: History and train_model's target ----------------------------------------------------
@pytest.mark.parametrize(("fields", "words"), [
    ({"steps": [1, 2], "loss": [1.0]}, ["History.loss", "History.steps has 2", "History.loss has 1"]),
    ({"eval_steps": [25], "eval_metrics": []}, ["History.eval_metrics", "History.eval_steps has 1"]),
    ({"target_metric": "acc", "target": 0.9, "steps_to_target": 25},
     ["History.steps_to_target", "History.seconds_to_target", "None"]),
    ({"steps_to_target": 25, "seconds_to_target": 1.0}, ["History.steps_to_target", "History.target_metric"]),
])
def test_history_refuses_fields_that_do_not_pair_up(fields: dict, words: list[str]) -> None:
    from course_utils.model.train import History

    _raises(ValueError, words, lambda: History("t", **fields))


def test_history_to_dict_rechecks_lists_appended_out_of_step() -> None:
    from course_utils.model.train import History

    history = History("t")
    history.steps.append(1)
    _raises(ValueError, ["History.loss", "History.steps has 1"], history.to_dict)


def _tiny_model():
    from course_utils.model.train import induction_model_config
    from course_utils.model.transformer import TinyTransformer

    return TinyTransformer(induction_model_config(d_model=8, num_heads=2, num_layers=1))


def _never_called(generator):  # the arguments are refused before the first batch
    raise AssertionError("sample_batch was called")


@pytest.mark.parametrize(("arguments", "error", "words"), [
    ({"evaluate": lambda m: {"acc": 1.0}, "target": 0.9}, ValueError,
     ["target=0.9", "target_metric", "None"]),
    ({"target_metric": "acc"}, ValueError, ["target_metric='acc'", "evaluate", "None"]),
    ({"evaluate": lambda m: {"acc": 1.0}, "target_metric": 5, "target": 0.9}, TypeError,
     ["target_metric", "int 5"]),
])
def test_train_model_refuses_a_target_it_could_not_measure(arguments: dict, error: type,
                                                           words: list[str]) -> None:
    from course_utils.model.train import TrainConfig, train_model

    _raises(error, words, lambda: train_model(_tiny_model(), _never_called, TrainConfig(steps=1),
                                              progress=False, **arguments))
