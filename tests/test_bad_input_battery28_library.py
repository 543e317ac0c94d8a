"""Battery 28, library findings: each non-clear case refused by name or handled."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")

    __str__ = __repr__


def _tiny():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=2))


@pytest.mark.parametrize("name", ["directions", "frozen_scale"])
def test_direct_logit_attribution_names_an_inference_tensor(name: str) -> None:
    from course_utils.interp.patching import direct_logit_attribution

    model = _tiny().eval()
    tokens, positions = torch.randint(0, 12, (2, 5)), torch.tensor([4, 3])
    with torch.inference_mode():
        made = {"directions": torch.randn(12), "frozen_scale": torch.ones(2)}[name]
    kwargs = {"directions": torch.randn(12), name: made}
    raises_naming(ValueError, [name, "torch.inference_mode()", f"{name}.clone()"],
                  lambda: direct_logit_attribution(model, tokens, positions, **kwargs))


def test_a_kv_cache_filled_with_gradients_on_can_be_deep_copied() -> None:
    import copy

    model = _tiny().eval()
    logits, cache = model.forward_with_cache(torch.randint(0, 12, (2, 3)))
    assert cache.layers[0][0].grad_fn is not None  # made outside torch.no_grad
    copied = copy.deepcopy(cache)
    assert copied.length == 3 and copied.layers[0][0] is not cache.layers[0][0]
    torch.testing.assert_close(copied.layers[1][1], cache.layers[1][1].detach())
    _, more = model.forward_with_cache(torch.randint(0, 12, (2, 1)), copied)  # still a cache of the model
    assert more.length == 4


@pytest.mark.parametrize("kind", ["cat", "cat window", "preallocated", "sliding"])
def test_the_decoding_caches_filled_with_gradients_on_can_be_deep_copied(kind: str) -> None:
    import copy

    from course_utils.model.kv_cache import CatCache, PreallocatedCache, SlidingWindowCache, decode_step

    model = _tiny().eval()
    cache = {"cat": lambda: CatCache(2), "cat window": lambda: CatCache(2, window=2),
             "preallocated": lambda: PreallocatedCache(2, 2, 4, 4, 8),
             "sliding": lambda: SlidingWindowCache(2, 2, 4, 4, 3)}[kind]()
    tokens = torch.randint(0, 12, (2, 3))
    for t in range(3):
        decode_step(model, tokens[:, t:t + 1], cache)
    copied = copy.deepcopy(cache)
    assert copied.length == 3
    with torch.no_grad():
        torch.testing.assert_close(decode_step(model, tokens[:, :1], copied),
                                   decode_step(model, tokens[:, :1], cache))


@pytest.mark.parametrize("second", ["same", "view"])
def test_save_file_names_tensors_that_share_memory(tmp_path, second: str) -> None:
    from course_utils.model.checkpoint import save_file

    t = torch.randn(4, 3)
    tensors = {"a": t, "b": t if second == "same" else t[:2]}
    raises_naming(ValueError, ["tensors['a']", "tensors['b']", "share memory", ".clone()"],
                  lambda: save_file(tensors, tmp_path / "x.safetensors", {}))
    assert not (tmp_path / "x.safetensors").exists()
    save_file({"a": t[:2], "b": t[2:]}, tmp_path / "y.safetensors", {})  # disjoint slices are fine


def test_save_checkpoint_of_a_model_with_tied_weights_writes_them_apart(tmp_path) -> None:
    from course_utils.model.checkpoint import load_checkpoint, save_checkpoint

    model = _tiny()
    model.unembed.weight = model.token_embedding.weight  # tied: one tensor under two names
    save_checkpoint(model, tmp_path / "tied", task="toy", metrics={}, command="tests")
    loaded = load_checkpoint(tmp_path / "tied", task="toy")[0]
    torch.testing.assert_close(loaded.unembed.weight, model.token_embedding.weight.detach())


@pytest.mark.parametrize("value, word", [(float("inf"), "inf"), (float("-inf"), "-inf")])
def test_best_head_refuses_an_infinite_score(value: float, word: str) -> None:
    from course_utils.interp.scores import best_head

    grid = torch.tensor([[0.1, 0.2], [0.3, 0.4]])
    grid[1, 0] = value
    raises_naming(ValueError, ["scores", f"holds {word} for L1H0", "finite"], lambda: best_head(grid))
    raises_naming(ValueError, ["scores", f"holds {word} for L0H1"], lambda: best_head(grid[1].flip(0)))


@pytest.mark.parametrize("name, item", [(("a", ["b"]), "item [1] is list ['b']"),
                                        ((1, ("c", {2: 3})), "item [1] is tuple ('c', {2: 3})")])
def test_timing_refuses_a_name_that_is_not_hashable(name: tuple, item: str) -> None:
    from course_utils.bench.timing import Timing

    raises_naming(TypeError, ["Timing.name", "hashable", item], lambda: Timing(name, 1.0, 1.0, [1.0]))


@pytest.mark.parametrize("stop", [KeyboardInterrupt, RuntimeError])
def test_train_model_stopped_early_puts_the_model_back_in_its_mode(stop: type) -> None:
    for was_training in (False, True):
        _stopped_at_step_3(stop, was_training)


def _stopped_at_step_3(stop: type, was_training: bool) -> None:
    from course_utils.model.train import TrainConfig, train_model

    model = _tiny().train(was_training)
    calls = []

    def sample_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        calls.append(1)
        if len(calls) == 3:
            raise stop("stopped")
        tokens = torch.randint(0, 12, (2, 5), generator=generator)
        return tokens, tokens

    with pytest.raises(stop):
        train_model(model, sample_batch, TrainConfig(steps=5), progress=False)
    assert len(calls) == 3 and model.training is was_training


def test_head_trace_keeps_copies_of_the_tensors_it_was_given() -> None:
    from course_utils.interp.circuits import HeadTrace, trace_heads

    model = _tiny().eval()
    tokens = torch.randint(0, 12, (2, 5))
    traced = trace_heads(model, tokens)
    given = [traced.logits.clone(), [t.clone() for t in traced.attention],
             [t.clone() for t in traced.head_outputs], [t.clone() for t in traced.residual]]
    trace = HeadTrace(*given)
    before = [trace.logits.clone(), *(t.clone() for t in trace.head_outputs)]
    given[0].fill_(float("nan"))  # after the check: the trace must not see it
    given[2][0].mul_(1000.0)
    given[3][-1].zero_()
    assert torch.isfinite(trace.logits).all()
    torch.testing.assert_close(trace.logits, before[0])
    torch.testing.assert_close(trace.head_outputs[0], before[1])
    torch.testing.assert_close(trace.residual[-1], traced.residual[-1])


def test_say_prints_a_fallback_for_a_value_whose_str_raises(capsys) -> None:
    from course_utils.interp.widgets import say

    say(BadRepr())
    assert capsys.readouterr().out == "<a BadRepr whose str() raised RuntimeError>\n"
    say(12)  # anything else as print shows it
    assert capsys.readouterr().out == "12\n"


def test_the_explorers_show_a_value_whose_repr_raises_as_validation_shown_does(capsys) -> None:
    from course_utils.attention.validation import shown
    from course_utils.interp import widgets

    assert not hasattr(widgets, "_safe_repr")  # one helper for this, validation.shown
    widgets.show(BadRepr())
    out = capsys.readouterr().out
    assert "explorer must be an Explorer" in out and shown(BadRepr()) in out
    assert "BadRepr whose repr raised RuntimeError" in out


def _repr_raising_cases() -> list:
    from course_utils import cli
    from course_utils.bench import cli as bench_cli
    from course_utils.bench.mha_speed import sweep_mha

    bad = BadRepr()
    return [
        ("Interrupted message", lambda: cli.Interrupted(2, bad), TypeError, ["message"]),
        ("check_path", lambda: cli.check_path(bad, "out"), TypeError, ["out"]),
        ("check_label value", lambda: cli.check_label(bad, "prog", "the tool"), TypeError, ["prog"]),
        ("check_label name", lambda: cli.check_label("x", bad, "the tool"), TypeError, ["name"]),
        ("words", lambda: cli.words(bad), TypeError, ["argv"]),
        ("words item", lambda: cli.words(["a", bad]), TypeError, ["argv[1]"]),
        ("words flag", lambda: cli.words([], none_reads_sys_argv=bad), TypeError, ["none_reads_sys_argv"]),
        ("run_in_group check", lambda: cli.run_in_group(["true"], check=bad), TypeError, ["check"]),
        ("run_in_group patience", lambda: cli.run_in_group(["true"], patience=bad), ValueError, ["patience"]),
        ("bench check_text", lambda: bench_cli.check_text(bad, "positive_int"), TypeError, ["positive_int"]),
        ("bench check_subparsers", lambda: bench_cli.check_subparsers(bad, "mha"), TypeError, ["subparsers"]),
        ("bench Distinct key", lambda: bench_cli.Distinct(["--x"], "x", key=bad), TypeError, ["key"]),
        ("sweep_mha varied size", lambda: sweep_mha("batch", [1, 2], batch=bad), ValueError, ["batch"]),
    ]


@pytest.mark.parametrize("case", range(13))
def test_a_value_whose_repr_raises_leaves_the_message_intact(case: int) -> None:
    label, call, error, words = _repr_raising_cases()[case]
    raises_naming(error, [*words, "BadRepr whose repr raised RuntimeError"], call)


@pytest.mark.parametrize("function, call", [
    ("check_int", lambda v, bad: v.check_int(3, bad)),
    ("check_flag", lambda v, bad: v.check_flag(True, bad)),
    ("check_tensor", lambda v, bad: v.check_tensor(torch.ones(2), bad, ndim=3)),
    ("check_finite", lambda v, bad: v.check_finite(torch.ones(2), bad)),
    ("check_real", lambda v, bad: v.check_real(float("nan"), bad)),
    ("check_device", lambda v, bad: v.check_device("cpu", bad)),
])
@pytest.mark.parametrize("bad", [BadRepr(), 3], ids=["str raises", "not a str"])
def test_a_validation_name_that_is_no_str_is_refused_naming_the_check(function: str, call, bad) -> None:
    from course_utils.attention import validation

    words = [f"{function}'s name must be a str", type(bad).__name__]
    if isinstance(bad, BadRepr):
        words.append("BadRepr whose repr raised RuntimeError")
    raises_naming(TypeError, words, lambda: call(validation, bad))


@pytest.mark.skipif(torch.cuda.is_available(), reason="names the device only where CUDA cannot run")
def test_compare_on_device_names_a_device_whose_repr_raises() -> None:
    from course_utils.bench.mha_speed import compare_on_device

    class BadStr(str):
        def __repr__(self) -> str:
            raise RuntimeError("repr raises")

    raises_naming(RuntimeError, ["compare_on_device(device=<a BadStr whose repr raised RuntimeError>)"],
                  lambda: compare_on_device(BadStr("cuda")))


def test_merge_heads_refuses_a_meta_tensor() -> None:
    from course_utils.attention.mha import MultiHeadAttention

    module = MultiHeadAttention(8, 2)
    raises_naming(ValueError, ["heads", "meta device", "(1, 2, 3, 4)"],
                  lambda: module.merge_heads(torch.ones(1, 2, 3, 4, device="meta")))
    assert module.merge_heads(torch.ones(1, 2, 3, 4)).shape == (1, 3, 8)
    with torch.device("meta"):  # a layer built on meta still merges meta heads: it computes shapes
        on_meta = MultiHeadAttention(8, 2)
    assert on_meta.merge_heads(torch.ones(1, 2, 3, 4, device="meta")).shape == (1, 3, 8)


def test_check_device_names_a_meta_device_whose_repr_raises() -> None:
    from course_utils.attention.validation import check_device

    class BadStr(str):
        def __repr__(self) -> str:
            raise RuntimeError("repr raises")

    raises_naming(ValueError, ["device must be a device that holds values",
                               "<a BadStr whose repr raised RuntimeError>"],
                  lambda: check_device(BadStr("meta")))
