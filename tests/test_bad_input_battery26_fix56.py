"""Battery 26, fix pass 56: each bad input it found refused by name (or documented)."""
from __future__ import annotations

import torch

from tests.bad_input_cases import raises_naming


def test_an_inference_tensor_is_named_when_the_module_tracks_gradients() -> None:
    from course_utils.attention.mha import MultiHeadAttention

    module = MultiHeadAttention(16, 4)
    with torch.inference_mode():
        x = torch.randn(2, 4, 16)
    raises_naming(ValueError, ["query", "torch.inference_mode()", "torch.no_grad()", "query.clone()"],
                  lambda: module(x))
    with torch.no_grad():
        assert module(x)[0].shape == (2, 4, 16)  # where it can run, it runs


def test_backend_rejection_reason_refuses_shapes_no_attention_takes() -> None:
    from course_utils.attention.sdpa_backends import backend_rejection_reason

    x = torch.randn(2, 2, 4, 8)
    raises_naming(ValueError, ["q and k", "same last dim", "(2, 2, 4, 0)"],
                  lambda: backend_rejection_reason("math", x[..., :0], x, x))
    raises_naming(ValueError, ["k and v", "same length Tk"],
                  lambda: backend_rejection_reason("math", x, x, x[:, :, :3]))


def test_a_quantized_record_of_no_numbers_is_refused() -> None:
    from course_utils.model.kv_cache import Quantized

    codes = torch.zeros(1, 2, 4, 8, dtype=torch.int8)[..., :0]
    raises_naming(ValueError, ["Quantized.codes", "at least one token and one channel", "(1, 2, 4, 0)"],
                  lambda: Quantized(codes, torch.ones(1, 2, 4, 1), None))


def test_bench_decode_reads_a_generator_of_groups_once() -> None:
    from course_utils.bench.gqa_speed import bench_decode

    result = bench_decode(4, 8, 16, 1, (g for g in [4, 2]), repeats=1, warmup=0, methods=("course",),
                          copy_mib=0, progress=False)
    assert [row.num_kv_heads for row in result.rows] == [4, 2]


def test_check_clock_advanced_refuses_a_negative_time() -> None:
    from course_utils.bench.timing import check_clock_advanced

    raises_naming(ValueError, ["seconds", ">= 0", "-1.0", "runs backwards"],
                  lambda: check_clock_advanced([[1.0, -1.0]], "calls"))


def test_verdict_refuses_a_margin_that_leaves_no_score_present() -> None:
    from course_utils.interp.scores import verdict

    raises_naming(ValueError, ["margin", "threshold + margin <= 1", "threshold=0.99", "margin=0.5"],
                  lambda: verdict(0.7, threshold=0.99, margin=0.5))
    assert verdict(1.0, threshold=0.9, margin=0.1) == "present"  # at the edge, still reachable


def test_relations_config_documents_an_eval_every_above_steps() -> None:
    from course_utils.tasks.two_relations import RelationsConfig, TwoKeyTask, train_lookup

    assert "``eval_every`` above ``steps`` gives a learning curve of two points" in RelationsConfig.__doc__
    result = train_lookup(TwoKeyTask(), 1, 0, RelationsConfig(steps=3, eval_every=10, eval_size=64))
    assert result.steps == (0, 3)


def test_learning_curves_of_other_step_grids_are_refused_by_name() -> None:
    from course_utils.tasks.two_relations import LookupModel, RunResult, TwoKeyTask, plot_learning_curves

    model = LookupModel(TwoKeyTask(), 16, 2)
    results = [RunResult(2, 0, (0,), (0.5,), (0.5, 0.5), model),
               RunResult(2, 1, (0, 5), (0.5, 0.6), (0.5, 0.5), model)]
    raises_naming(ValueError, ["results of 2 heads", "one grid of steps", "(0,)", "(0, 5)"],
                  lambda: plot_learning_curves(results))


def test_training_inside_no_grad_still_trains_and_inference_mode_is_named() -> None:
    from course_utils.model.train import TrainConfig, train_model
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    def model() -> TinyTransformer:
        torch.manual_seed(0)
        return TinyTransformer(ModelConfig(vocab_size=8, max_len=6, d_model=8, num_heads=2, num_layers=1))

    tokens = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        history = train_model(model(), lambda g: (tokens, tokens), TrainConfig(steps=2), progress=False)
    assert len(history.loss) == 2 and history.loss[1] < history.loss[0]
    with torch.inference_mode():
        raises_naming(RuntimeError, ["train_model", "torch.inference_mode()", "outside"],
                      lambda: train_model(model(), lambda g: (tokens, tokens), TrainConfig(steps=2),
                                          progress=False))


# -- commands and grading ------------------------------------------------------------------------------
def test_check_path_names_a_path_like_whose_fspath_is_no_path() -> None:
    import os

    from course_utils import paths
    from course_utils.cli import check_path

    class BadFspath(os.PathLike):
        def __fspath__(self):
            return 7

    for check in (check_path, paths.check_path):
        raises_naming(TypeError, ["my_arg", "a notebook", "BadFspath", "__fspath__", "not int"],
                      lambda check=check: check(BadFspath(), "my_arg", "a notebook"))


def test_words_names_the_word_that_is_not_exactly_str() -> None:
    from course_utils.cli import words

    class StrSub(str):
        pass

    raises_naming(TypeError, ["my_argv[1]", "StrSub", "'b'", "not exactly str"],
                  lambda: words(["a", StrSub("b")], "my_argv"))


def test_a_check_puts_back_the_course_modules_an_answer_removed() -> None:
    import sys

    from course_utils.exercises import lesson03

    before = {name: module for name, module in sys.modules.items() if name.startswith("course_utils.")}

    def count(d_model, num_heads, bias=True):
        for name in [name for name in sys.modules if name.startswith("course_utils.exercises")]:
            del sys.modules[name]
        return 4 * d_model * d_model + (4 * d_model if bias else 0)

    feedback = lesson03.check_parameter_count(count)
    after = {name: sys.modules.get(name) for name in before}
    assert after == before
    assert feedback.passed, feedback  # a right answer; its change is undone without a word


def test_a_replaced_builtin_is_not_reported_as_a_signal_change() -> None:
    import builtins

    from course_utils.exercises import lesson03

    real = builtins.isinstance

    def count(d_model, num_heads, bias=True):
        builtins.isinstance = lambda *args: True
        return 0

    try:
        feedback = lesson03.check_parameter_count(count)
    finally:
        builtins.isinstance = real
    assert not feedback.passed and "builtins.isinstance" in feedback.message
    assert "SIGINT" not in feedback.message, feedback


# -- library, battery 26's final run ---------------------------------------------------------------------
def _tiny_transformer():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=8, max_len=6, d_model=8, num_heads=2, num_layers=1))


def test_inference_tensors_as_ids_gates_or_targets_are_named() -> None:
    from course_utils.interp.ablation import head_importance

    model = _tiny_transformer()
    with torch.inference_mode():
        tokens, gates = torch.randint(0, 8, (2, 6)), torch.ones(1, 2)
    raises_naming(ValueError, ["tokens", "torch.inference_mode()", "tokens.clone()"],
                  lambda: model(tokens))
    raises_naming(ValueError, ["head_mask", "torch.inference_mode()"],
                  lambda: model(tokens.clone(), head_mask=gates))
    raises_naming(ValueError, ["targets", "torch.inference_mode()"],
                  lambda: head_importance(model, tokens.clone(), tokens))
    with torch.no_grad():
        assert model(tokens, head_mask=gates)[0].shape == (2, 6, 8)  # where it can run, it runs


def test_train_model_names_a_model_with_every_parameter_frozen() -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = _tiny_transformer()
    for p in model.parameters():
        p.requires_grad_(False)
    tokens = torch.randint(0, 8, (4, 6), generator=torch.Generator().manual_seed(0))
    raises_naming(ValueError, ["model", "none requires grad", "requires_grad_(True)"],
                  lambda: train_model(model, lambda g: (tokens, tokens), TrainConfig(steps=2),
                                      progress=False))
