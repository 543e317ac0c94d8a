"""Battery 32, library side: a str argument (a test id, a checkpoint name, a label) that is a str
subclass whose own ``__str__``/``__repr__`` raises is taken as the plain str it holds, and a value
that is not a str is refused naming the argument, never a bare error from the value itself."""

from __future__ import annotations

import pytest
from bad_input_cases import BadRepr, EqRaises, LyingLen, LyingStr, raises_naming

from course_utils.bench.memory import format_test_report


def test_format_test_report_refuses_a_test_id_that_is_not_a_str():
    raises_naming(TypeError, ["test id", "tests", "str", "BadRepr"],
                  lambda: format_test_report({BadRepr(): {"peak_mb": 1.0}}))
    raises_naming(TypeError, ["test id", "tests", "int", "5"],
                  lambda: format_test_report({5: {"peak_mb": 1.0}}))


def test_format_test_report_takes_a_str_subclass_test_id_as_its_plain_str():
    text = format_test_report({LyingStr("tests/test_x.py::test_y"): {"peak_mb": 100.0, "start_mb": 90.0}})
    assert "tests/test_x.py::test_y" in text
    raises_naming(ValueError, ["'tests/bad'", "peak_mb"],
                  lambda: format_test_report({LyingStr("tests/bad"): {"peak_mb": "x"}}))


def test_timing_labels_are_taken_as_plain_str():
    from course_utils.bench import timing

    raises_naming(ValueError, ["clock", "around the step"],
                  lambda: timing.clock_elapsed(1.0, 0.0, LyingStr("the step")))
    raises_naming(TypeError, ["around", "BadRepr"], lambda: timing.clock_elapsed(0.0, 1.0, BadRepr()))
    raises_naming(ValueError, ["clock", "1 samples read 0 s"],
                  lambda: timing.check_clock_advanced([[0.0]], LyingStr("samples")))
    raises_naming(TypeError, ["what", "int"], lambda: timing.check_clock_advanced([[1.0]], 5))
    raises_naming(ValueError, ["baseline 'zz'", "not one of the fns"],
                  lambda: timing.check_function_name("zz", LyingStr("baseline"), among=["a"],
                                                     what=LyingStr("the fns")))
    # a function named by a str subclass (its repr raises) is timed and named as its plain str
    runs = timing.time_interleaved({LyingStr("a"): lambda: None, "b": lambda: None}, baseline="a",
                                   repeats=2, warmup=0)
    assert [type(t.name) for t in runs] == [str, str]
    text = timing.format_table(LyingStr("my title"), runs, "a", label=LyingStr("the base"))
    assert text.startswith("my title") and "ratio to the base" in text
    text = timing.format_spread_table(LyingStr("my title"), runs, "a", label=LyingStr("the base"))
    assert text.startswith("my title") and "ratio to the base" in text


class _LenSaysMany(list):
    """A list whose len() lies: 1000, whatever it holds."""

    def __len__(self) -> int:
        return 1000


def test_detokenize_names_tokens_whose_len_raises():
    from course_utils.tasks.synthetic import detokenize

    raises_naming(TypeError, ["tokens", "LyingLen", "len() or iteration raised"],
                  lambda: detokenize(LyingLen([1, 2])))
    assert detokenize(_LenSaysMany([0])) == detokenize([0])


def test_format_training_table_judges_rows_by_what_they_hold():
    from course_utils.bench.train_speed import format_training_table

    raises_naming(ValueError, ["rows", "non-empty list", "_LenSaysMany"],
                  lambda: format_training_table(_LenSaysMany([])))
    raises_naming(TypeError, ["rows", "LyingLen"], lambda: format_training_table(LyingLen([])))
    row = {"seed": 0, "seconds": 1.5}
    assert "1.50" in format_training_table(_LenSaysMany([row]))


def test_parse_worked_example_names_a_key_whose_str_raises():
    from course_utils.tasks.worked_example import WorkedExampleError, parse_worked_example

    refused = WorkedExampleError
    raises_naming(refused, ["unknown keys", "BadRepr"], lambda: parse_worked_example({BadRepr(): 1}))
    raises_naming(refused, ["unknown keys", "'zz'"], lambda: parse_worked_example({LyingStr("zz"): 1}))
    raises_naming(refused, ["unknown keys", "'5'"], lambda: parse_worked_example({5: 1, "zz": 2}))


def test_checkpoint_names_and_task_are_taken_as_plain_str():
    from course_utils.model.checkpoint import CheckpointError, checkpoint_paths, load_checkpoint

    raises_naming(ValueError, ["checkpoint must name a checkpoint", "''"],
                  lambda: checkpoint_paths(LyingStr(""), name=LyingStr("checkpoint")))
    raises_naming(TypeError, ["name", "int"], lambda: checkpoint_paths("induction", name=5))
    raises_naming(CheckpointError, ["task 'induction'", "expected 'zz_task'"],
                  lambda: load_checkpoint("induction", task=LyingStr("zz_task")))


def test_train_model_names_a_model_built_under_inference_mode():
    import torch

    from course_utils.model.train import TrainConfig, train_model
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    with torch.inference_mode():
        model = TinyTransformer(ModelConfig(vocab_size=12, max_len=8, d_model=8, num_heads=2, num_layers=1))

    def sample(generator):
        tokens = torch.randint(0, 12, (2, 8), generator=generator)
        return tokens, tokens

    raises_naming(ValueError, ["model", "inference tensors", "inference_mode"],
                  lambda: train_model(model, sample, TrainConfig(steps=1)))




def _option_sites():
    """(label, the argument's name, a valid choice, call(value)): every string option of the library,
    each read through validation.check_choice."""
    import torch
    from bad_input_cases import small_model

    from course_utils.attention.gqa import GroupedQueryAttention
    from course_utils.attention.mha import MultiHeadAttention
    from course_utils.attention.mla import cache_elements_per_token
    from course_utils.attention.sdpa_backends import backend_rejection_reason
    from course_utils.bench.decode_step import SmallDecoder
    from course_utils.bench.mha_speed import sweep_mha
    from course_utils.interp import ablation, patching, scores
    from course_utils.model import kv_cache
    from course_utils.model.transformer import convert_model
    from course_utils.tasks import two_relations as tr

    model = small_model()
    tokens = torch.randint(0, 10, (2, 6), generator=torch.Generator().manual_seed(0))
    evaluation = ablation.loss_evaluation(tokens, tokens)
    where = torch.zeros(2, 6, dtype=torch.bool)
    where[:, -1] = True
    qkv = [torch.zeros(1, 1, 2, 4)] * 3
    task = tr.TwoKeyTask(num_items=4, num_keys=8, num_symbols=4, max_repeats=2)
    sweep = {"batch": 1, "d_model": 8, "num_heads": 2, "repeats": 1, "target_sample_s": 0.0}
    return [
        ("ablated_logits", "method", "zero",
         lambda v: ablation.ablated_logits(model, tokens, [(0, 1)], method=v)),
        ("measure", "method", "zero", lambda v: ablation.measure(model, evaluation, [(0, 1)], method=v)),
        ("ablation_table", "method", "zero",
         lambda v: ablation.ablation_table(model, evaluation, {"a": [(0, 1)]}, method=v)),
        ("pruning_curve", "method", "zero",
         lambda v: ablation.pruning_curve(model, evaluation, ablation.all_heads(model), counts=[0, 1],
                                          method=v)),
        ("position_ablated_logits", "method", "zero",
         lambda v: patching.position_ablated_logits(model, tokens, [(0, 1)], where, method=v)),
        ("prunable_counts", "method", "zero",
         lambda v: patching.prunable_counts(model, evaluation, [[(0, 1)]], lambda n: True, method=v)),
        ("cache_elements_per_token", "kind", "MHA",
         lambda v: cache_elements_per_token(v, num_heads=4, d_head=8)),
        ("ideal_pattern", "role", "uniform", lambda v: scores.ideal_pattern(v, 8)),
        ("chance_level", "role", "first token", lambda v: scores.chance_level(v, 8)),
        ("induction_score", "average_over", "all rows",
         lambda v: scores.induction_score(torch.full((1, 1, 8, 8), 1 / 8), 3, start=1, average_over=v)),
        ("LookupModel", "values", "tagged", lambda v: tr.LookupModel(task, 16, 2, values=v)),
        ("RelationsConfig", "values", "tagged", lambda v: tr.RelationsConfig(values=v)),
        ("quantize_kv", "per", "channel", lambda v: kv_cache.quantize_kv(torch.randn(1, 1, 4, 4), per=v)),
        ("quantized_bytes_per_token keys", "keys", "token",
         lambda v: kv_cache.quantized_bytes_per_token(2, 4, keys=v)),
        ("quantized_bytes_per_token values", "values", "channel",
         lambda v: kv_cache.quantized_bytes_per_token(2, 4, values=v)),
        ("QuantizedCache keys", "keys", "token",
         lambda v: kv_cache.QuantizedCache(1, 1, 1, 4, 8, keys=v, group=2)),
        ("QuantizedCache values", "values", "channel",
         lambda v: kv_cache.QuantizedCache(1, 1, 1, 4, 8, values=v, group=2)),
        ("SmallDecoder", "attention", "course",
         lambda v: SmallDecoder(d_model=64, num_heads=4, num_kv_heads=2, num_layers=1, context=16,
                                attention=v)),
        ("sweep_mha vary", "vary", "seq_len", lambda v: sweep_mha(v, [4], **sweep)),
        ("sweep_mha statistic", "statistic", "median",
         lambda v: sweep_mha("seq_len", [4], **sweep, statistic=v)),
        ("from_multi_head", "method", "first",
         lambda v: GroupedQueryAttention.from_multi_head(MultiHeadAttention(16, 4), 2, v)),
        ("convert_model", "method", "first", lambda v: convert_model(model, 1, v)),
        ("backend_rejection_reason", "label", "math", lambda v: backend_rejection_reason(v, *qkv)),
    ]


_SITES = _option_sites()


@pytest.mark.parametrize(("label", "name", "valid", "call"), _SITES, ids=[s[0] for s in _SITES])
def test_a_string_option_that_is_no_str_is_refused_by_type(label, name, valid, call):
    """An option whose ``==`` raises escaped as its own RuntimeError ("eq boom"), naming nothing."""
    message = raises_naming(TypeError, [f"{name} must be one of", repr(valid), "(a str)", "got EqRaises"],
                            lambda: call(EqRaises()))
    assert "eq boom" not in message


@pytest.mark.parametrize(("label", "name", "valid", "call"), _SITES, ids=[s[0] for s in _SITES])
def test_a_string_option_given_as_a_str_subclass_is_taken_by_its_value(label, name, valid, call):
    """A str subclass holding a valid choice is taken as that choice (``which=Name('final')`` was
    refused with "which must be 'final', 'a' or 'b', got 'final'"); its own repr is never called."""
    call(LyingStr(valid))  # no error: LyingStr's str and repr raise, so any use of them would show


def test_accuracy_table_takes_a_str_subclass_which_by_its_value():
    import torch

    from course_utils.tasks import two_relations as tr

    torch.manual_seed(0)
    lookup = tr.LookupModel(tr.TwoKeyTask(), 16, 2)
    result = tr.RunResult(2, 0, (0, 2), (0.1, 0.2), (0.3, 0.4), lookup)
    for which, expected in (("final", 0.2), ("a", 0.3), ("b", 0.4)):
        table = tr.accuracy_table([result], which=LyingStr(which))
        assert float(table.iloc[0, 0]) == pytest.approx(expected)
    raises_naming(TypeError, ["which must be one of 'final', 'a' or 'b' (a str)", "got EqRaises"],
                  lambda: tr.accuracy_table([result], which=EqRaises()))
