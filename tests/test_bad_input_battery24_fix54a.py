"""Battery 24 (b24a), fix pass 54a: O1-O4, S1-S4 - each bad input refused by name (or documented)."""
from __future__ import annotations

import pytest
import torch

from tests.bad_input_cases import raises_naming


# -- S1: an empty batch (B = 0) or no head came back as an empty result without a word ----------------
def _mha():
    from course_utils.attention.mha import MultiHeadAttention

    torch.manual_seed(0)
    return MultiHeadAttention(16, 4)


def _paged_attend(q: torch.Tensor) -> torch.Tensor:
    from course_utils.model.paged_cache import PagedCache

    cache = PagedCache(num_blocks=4, block_size=2, num_kv_heads=1, d_head=4)
    cache.add_sequence("s")
    cache.append("s", torch.randn(1, 3, 4), torch.randn(1, 3, 4))
    return cache.attend("s", q)


def _empty_cases():
    from course_utils.attention.gqa import GroupedQueryAttention
    from course_utils.attention.shapes import measured_macs
    from course_utils.bench.mha_speed import forward_callables, lesson_implementations
    from course_utils.model.kv_cache import quantize_kv
    from course_utils.model.transformer import Block, ModelConfig

    block = Block(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))
    return [
        ("MultiHeadAttention", lambda x: _mha()(x), (0, 5, 16), "query"),
        ("GroupedQueryAttention", lambda x: GroupedQueryAttention(16, 4, 2)(x), (0, 5, 16), "query"),
        ("merge_heads", lambda x: _mha().merge_heads(x), (0, 4, 5, 4), "heads"),
        ("measured_macs", lambda x: measured_macs(_mha(), x), (0, 5, 16), "x"),
        ("Block", lambda x: block(x), (0, 5, 16), "x"),
        ("forward_callables", lambda x: forward_callables(lesson_implementations(16, 4), x), (0, 5, 16), "x"),
        ("quantize_kv batch", quantize_kv, (0, 2, 6, 8), "x"),
        ("quantize_kv heads", quantize_kv, (2, 0, 6, 8), "x"),
        ("PagedCache.attend heads", _paged_attend, (0, 1, 4), "q"),
    ]


@pytest.mark.parametrize("index", range(9))
def test_an_empty_batch_or_no_head_is_refused_by_name(index: int) -> None:
    label, call, shape, name = _empty_cases()[index]
    empty = torch.randn(*shape)
    raises_naming(ValueError, [f"{name} must hold at least one", str(shape)], lambda: call(empty))
    assert call(torch.randn(*(size or 2 for size in shape))) is not None  # the control


def test_an_empty_sequence_is_still_an_empty_output() -> None:
    """T = 0 stays what MultiHeadAttention's docstring says (Tq = Tk = 0 gives an empty output)."""
    assert _mha()(torch.randn(2, 0, 16))[0].shape == (2, 0, 16)


# -- O1 / S2: Block.forward(x, heads=...) checked neither heads against x nor need_weights ------------
def _block_and_heads():
    from course_utils.model.transformer import Block, ModelConfig

    torch.manual_seed(0)
    block = Block(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))
    return block, torch.randn(2, 5, 16), torch.randn(2, 4, 5, 4)


@pytest.mark.parametrize("heads, error, shown", [
    (torch.randn(3, 4, 5, 4), ValueError, "(3, 4, 5, 4)"),  # another batch
    (torch.randn(2, 4, 6, 4), ValueError, "(2, 4, 6, 4)"),  # another length
    (torch.randn(2, 4, 5, 4, dtype=torch.float64), TypeError, "torch.float64"),
    (torch.randn(2, 4, 5, 4, device="meta"), ValueError, "meta"),
    (torch.randn(2, 4, 5), ValueError, "3-D"),
])
def test_block_checks_heads_against_x(heads: torch.Tensor, error: type, shown: str) -> None:
    block, x, good = _block_and_heads()
    assert block(x, heads=good)[0].shape == x.shape  # the control
    raises_naming(error, ["heads", shown], lambda: block(x, heads=heads))


@pytest.mark.parametrize("bad", ["yes", None, 2, torch.tensor([True, False])])
def test_block_checks_need_weights_with_heads(bad: object) -> None:
    block, x, heads = _block_and_heads()
    raises_naming(TypeError, ["need_weights", type(bad).__name__],
                  lambda: block(x, heads=heads, need_weights=bad))


# -- O2: a module given as a names test was called with a str: torch's "linear(): argument 'input'" --
def _tiny_model():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    return TinyTransformer(ModelConfig(vocab_size=8, d_model=16, num_heads=4, num_layers=1, max_len=8))


@pytest.mark.parametrize("route", ["run_with_cache", "method", "list", "hooks"])
def test_a_module_is_no_test_on_hook_names(route: str) -> None:
    from course_utils.attention.hooks import hooks, run_with_cache

    model, tokens, module = _tiny_model(), torch.zeros(1, 4, dtype=torch.long), torch.nn.Linear(2, 2)
    calls = {
        "run_with_cache": (lambda: run_with_cache(model, tokens, names=module), "names"),
        "method": (lambda: model.run_with_cache(tokens, names=module), "names"),
        "list": (lambda: run_with_cache(model, tokens, names=[module]), "names[0]"),
        "hooks": (lambda: hooks(model, [(module, lambda z, hook: z)]).__enter__(), "fwd_hooks[0][0]"),
    }
    call, name = calls[route]
    raises_naming(TypeError, [f"{name} must be", "Linear", "a module is callable"], call)
    assert "blocks.0.attn.hook_z" in model.run_with_cache(tokens, names=lambda n: n.endswith("hook_z"))[1]


# -- O3: Quantized(uint8 codes, scale, zero=None) never named zero, the field left out ---------------
@pytest.mark.parametrize("symmetric, words", [
    (False, ["Quantized.codes", "torch.uint8", "Quantized.zero is None", "zero="]),  # zero left out
    (True, ["Quantized.codes", "torch.int8", "Quantized.zero is a tensor", "zero=None"]),  # zero added
])
def test_quantized_names_zero_when_the_codes_are_the_other_kind(symmetric: bool, words: list[str]) -> None:
    from course_utils.model.kv_cache import Quantized, quantize_kv

    q = quantize_kv(torch.randn(1, 2, 3, 4), symmetric=symmetric)
    assert Quantized(*q) == q  # the control
    zero = torch.zeros_like(q.scale) if symmetric else None
    raises_naming(TypeError, words, lambda: Quantized(q.codes, q.scale, zero))


# -- S3: SmallDecoder.step / weights_pass took NaN or inf in x and returned NaN ------------------------
@pytest.mark.parametrize("method", ["step", "weights_pass"])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_small_decoder_refuses_a_non_finite_x(method: str, bad: float) -> None:
    from course_utils.bench.decode_step import SmallDecoder

    decoder = SmallDecoder(d_model=16, num_heads=2, num_kv_heads=2, num_layers=1, context=4,
                           attention="course")
    run = getattr(decoder, method)
    x = torch.zeros(1, 16)
    assert torch.isfinite(run(x)).all()  # the control
    x[0, 3] = bad
    raises_naming(ValueError, ["x must hold finite numbers", str(bad), "(0, 3)"], lambda: run(x))
    assert torch.isfinite(run()).all()  # the default input is not checked again


# -- S4: History(target_metric=<a name no evaluation holds>) could never reach its target -------------
@pytest.mark.parametrize("target_metric", ["bogus_value", "", "ACC"])
@pytest.mark.parametrize("target", [0.9, None])
def test_history_target_metric_must_be_an_evaluated_metric(target_metric: str, target: float | None) -> None:
    from course_utils.model.train import History

    fields = {"task": "t", "steps": [1, 2], "loss": [1.0, 0.5], "eval_steps": [1, 2],
              "eval_metrics": [{"acc": 0.5}, {"acc": 0.7}], "target": target}
    assert History(**fields, target_metric="acc").metric("acc") == [0.5, 0.7]  # the control
    raises_naming(ValueError, ["History.target_metric", repr(target_metric), "['acc']"],
                  lambda: History(**fields, target_metric=target_metric))


def test_history_target_metric_missing_from_one_evaluation() -> None:
    from course_utils.model.train import History

    raises_naming(ValueError, ["History.target_metric", "'acc'", "History.eval_metrics[1]", "['loss']"],
                  lambda: History("t", eval_steps=[1, 2], eval_metrics=[{"acc": 0.5}, {"loss": 1.0}],
                                  target_metric="acc"))
    assert History("t", target_metric="acc").eval_metrics == []  # as train_model builds it


# -- O4: save_file onto an existing path gave a bare "[Errno 17] File exists" ----------------------------
@pytest.mark.parametrize("kind, shown", [("file", "a regular file"), ("dir", "a directory"),
                                         ("fifo", "a FIFO"), ("dangling", "a broken symlink")])
def test_save_file_names_filename_and_what_is_there(tmp_path, kind: str, shown: str) -> None:
    import os

    from course_utils.model.checkpoint import save_file

    target = tmp_path / "thing"
    {"file": lambda: target.write_text("keep"), "dir": target.mkdir, "fifo": lambda: os.mkfifo(target),
     "dangling": lambda: target.symlink_to(tmp_path / "nowhere")}[kind]()
    before = sorted(p.name for p in tmp_path.iterdir())
    tensors = {"w": torch.zeros(2)}
    save_file(tensors, tmp_path / "new.safetensors", {})  # the control
    raises_naming(FileExistsError, ["filename", str(target), shown, "never overwrites"],
                  lambda: save_file(tensors, target, {}))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "new.safetensors"])
    if kind == "file":
        assert target.read_text() == "keep"
