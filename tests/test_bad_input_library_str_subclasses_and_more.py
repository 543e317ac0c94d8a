"""Battery 32, library side: a str argument (a test id, a checkpoint name, a label) that is a str
subclass whose own ``__str__``/``__repr__`` raises is taken as the plain str it holds, and a value
that is not a str is refused naming the argument, never a bare error from the value itself."""

from __future__ import annotations

from bad_input_cases import BadRepr, LyingLen, LyingStr, raises_naming

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
