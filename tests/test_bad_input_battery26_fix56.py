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
