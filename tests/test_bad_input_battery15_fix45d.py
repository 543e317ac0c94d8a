"""Battery 15's findings for helper fix45d (issue 38), each failing before its fix: settings of
nn.MultiheadAttention that from_torch dropped, meta tensors met deep inside, an unbounded
``decimals``, unclear messages (mixed head biases, a metric that cannot take the logits), a
non-finite dequantization scale, and the NaN-key rule of the fused attention path."""


import pytest
import torch
from torch import nn

from course_utils import MultiHeadAttention


# -- 1. from_torch: every nn.MultiheadAttention setting is carried over or refused ----------------
def test_from_torch_refuses_add_zero_attn_naming_it():
    torch_module = nn.MultiheadAttention(16, 2, batch_first=True, add_zero_attn=True)
    with pytest.raises(ValueError, match="add_zero_attn=True"):
        MultiHeadAttention.from_torch(torch_module)


@pytest.mark.parametrize("training", [False, True])
def test_from_torch_and_to_torch_keep_the_train_eval_mode(training):
    torch_module = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).train(training)
    ours = MultiHeadAttention.from_torch(torch_module)
    assert ours.training is training
    assert ours.to_torch().training is training


def test_from_torch_of_an_eval_module_with_dropout_computes_what_it_computes():
    torch.manual_seed(0)
    torch_module = nn.MultiheadAttention(16, 2, dropout=0.5, batch_first=True).eval()
    x = torch.randn(2, 5, 16)
    ours = MultiHeadAttention.from_torch(torch_module)
    torch.testing.assert_close(ours(x)[0], torch_module(x, x, x, need_weights=False)[0])


def test_from_torch_names_kdim_and_vdim_it_got():
    with pytest.raises(ValueError, match=r"kdim=8, vdim=8, embed_dim=16"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(16, 2, kdim=8, vdim=8, batch_first=True))


# -- 4. frame_to_text: decimals within MAX_DECIMALS -------------------------------------------------
@pytest.mark.parametrize("decimals", [16, 10**6])
def test_frame_to_text_refuses_decimals_beyond_max_decimals(decimals):
    import pandas as pd

    from course_utils.attention.shapes import frame_to_text
    with pytest.raises(ValueError, match=rf"decimals.*{decimals}"):
        frame_to_text(pd.DataFrame({"a": [1.5]}), decimals=decimals)
    assert frame_to_text(pd.DataFrame({"a": [1.5]}), decimals=15).split()[-1] == "1.500000000000000"


# -- 5. NaiveMultiHeadAttention.to_batched: a mix of biased and unbiased projections --------------
def _naive_with_mixed_biases(bias: bool):
    from course_utils.attention.naive_mha import NaiveMultiHeadAttention
    naive = NaiveMultiHeadAttention(8, 2, bias=bias)
    if bias:
        naive.heads[1].w_q.bias = None
    else:
        naive.heads[0].w_k.bias = nn.Parameter(torch.ones(4))
    return naive


def test_to_batched_names_the_heads_with_and_without_bias():
    with pytest.raises(ValueError, match=r"heads\[0\]\.w_q.*have a bias.*heads\[1\]\.w_q do not"):
        _naive_with_mixed_biases(True).to_batched()


def test_to_batched_does_not_drop_one_heads_bias():
    with pytest.raises(ValueError, match=r"heads\[0\]\.w_k have a bias.*out_proj do not"):
        _naive_with_mixed_biases(False).to_batched()


# -- 7. dequantize_kv: a scale that quantize_kv never makes ----------------------------------------
@pytest.mark.parametrize(("bad", "words"), [(float("nan"), "nan"), (float("inf"), "inf"),
                                            (0.0, "above 0"), (-1.0, "above 0")])
def test_dequantize_kv_refuses_a_non_finite_or_non_positive_scale(bad, words):
    from course_utils.model.kv_cache import dequantize_kv, quantize_kv
    q = quantize_kv(torch.randn(2, 3, 4))
    scale = q.scale.clone()
    scale[0, 1, 0] = bad
    with pytest.raises(ValueError, match=rf"q\.scale.*{words}"):
        dequantize_kv(q._replace(scale=scale))  # _replace: no check when built


def test_dequantize_kv_refuses_a_nan_zero_point_and_meta_fields():
    from course_utils.model.kv_cache import dequantize_kv, quantize_kv
    q = quantize_kv(torch.randn(2, 3, 4), symmetric=False)
    zero = q.zero.clone()
    zero[1, 0, 0] = float("nan")
    with pytest.raises(ValueError, match=r"q\.zero.*nan"):
        dequantize_kv(q._replace(zero=zero))
    with pytest.raises(ValueError, match=r"q\.scale.*meta"):
        dequantize_kv(q._replace(scale=q.scale.to("meta")))


# -- 3. meta tensors: refused naming the argument and the device ----------------------------------
def test_check_finite_refuses_a_meta_tensor_naming_it():
    from course_utils.attention.validation import check_finite
    with pytest.raises(ValueError, match=r"scores is on the meta device"):
        check_finite(torch.ones(3, device="meta"), "scores")


def _tiny():
    from course_utils.model.transformer import ModelConfig, TinyTransformer
    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=12, max_len=10, d_model=16, num_heads=4, num_layers=1))
    return model.eval(), torch.randint(0, 12, (2, 5))


@pytest.mark.parametrize("meta", ["model", "tokens", "lengths", "reference", "reference_lengths"])
def test_resampled_logits_refuses_meta_naming_the_argument(meta):
    from course_utils.interp.patching import resampled_logits
    model, tokens = _tiny()
    args = {"model": model, "tokens": tokens, "lengths": torch.tensor([5, 5]), "reference": tokens,
            "reference_lengths": torch.tensor([5, 5])}
    args[meta] = args[meta].to("meta")
    with pytest.raises(ValueError, match=rf"{meta}.* is on the meta device"):
        resampled_logits(*args.values(), [(0, 0)], generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("meta", ["model", "tokens", "positions", "directions", "frozen_scale"])
def test_patching_direct_logit_attribution_refuses_meta_naming_the_argument(meta):
    from course_utils.interp.patching import direct_logit_attribution
    model, tokens = _tiny()
    args = {"model": model, "tokens": tokens, "positions": torch.tensor([4, 4]),
            "directions": torch.randn(12), "frozen_scale": torch.ones(2)}
    args[meta] = args[meta].to("meta")
    with pytest.raises(ValueError, match=rf"{meta}.* is on the meta device"):
        direct_logit_attribution(*list(args.values())[:4], frozen_scale=args["frozen_scale"])


@pytest.mark.parametrize("field", ["logits", "head_outputs", "residual"])
def test_a_head_trace_on_the_meta_device_is_refused_naming_the_field(field):
    import dataclasses

    from course_utils.interp.circuits import trace_heads
    model, tokens = _tiny()
    trace = trace_heads(model, tokens)
    value = getattr(trace, field)
    value = value.to("meta") if isinstance(value, torch.Tensor) else [t.to("meta") for t in value]
    with pytest.raises(ValueError, match=rf"HeadTrace\.{field}.* is on the meta device"):
        dataclasses.replace(trace, **{field: value})


# -- 6. functions passed in are checked against the arguments they will get -----------------------
def test_patching_table_refuses_a_metric_that_cannot_take_the_logits():
    from course_utils.interp.patching import patching_table
    model, tokens = _tiny()
    with pytest.raises(TypeError, match=r"metric must be a function logits .* cannot take 1"):
        patching_table(model, tokens, tokens, lambda: 1.0)


def test_prunable_counts_refuses_within_and_map_fn_of_the_wrong_arity():
    from course_utils.interp.ablation import loss_evaluation
    from course_utils.interp.patching import prunable_counts
    model, tokens = _tiny()
    evaluation = loss_evaluation(tokens[:, :-1], tokens[:, 1:])
    with pytest.raises(TypeError, match=r"within must be a function .* cannot take 1"):
        prunable_counts(model, evaluation, [[(0, 0)]], lambda: True)
    with pytest.raises(TypeError, match=r"map_fn must be a function like map .* cannot take 2"):
        prunable_counts(model, evaluation, [[(0, 0)]], lambda numbers: True, map_fn=lambda parts: parts)


def test_plot_all_heads_refuses_head_titles_of_the_wrong_arity():
    from course_utils.interp.heatmaps import plot_all_heads
    with pytest.raises(TypeError, match=r"head_titles must be a function \(layer, head\).* cannot take 2"):
        plot_all_heads(torch.full((1, 1, 2, 2), 0.5), ["a", "b"], head_titles=lambda head: "x")


# -- 2. a query whose every score is NaN: what each path gives, and what the docstrings say ------
@pytest.mark.parametrize("num_keys", [3, 40])
def test_every_key_nan_gives_nan_on_the_step_by_step_path_and_as_documented_on_the_fast_one(num_keys):
    import course_utils.attention.mha as mha
    assert "every key it may attend to NaN" in mha.__doc__  # the rule below, stated
    torch.manual_seed(0)
    module = MultiHeadAttention(32, 2, bias=False).eval()
    x, keys = torch.randn(1, 2, 32), torch.full((1, num_keys, 32), float("nan"))
    values = torch.randn(1, num_keys, 32)
    with torch.no_grad():
        slow = module(x, keys, values, need_weights=True)[0]
        fast = module(x, keys, values)[0]
    assert slow.isnan().all()
    # PyTorch's kernel: zero heads (output = 0 without bias) over few keys, NaN over more (torch
    # 2.13 on CPU switches at 16 keys; the module docstring says so): one or the other, never a mix
    assert bool(fast.isnan().all()) or not bool(fast.abs().max())


def test_every_key_masked_gives_zeros_on_both_paths():
    torch.manual_seed(0)
    module = MultiHeadAttention(32, 2, bias=False).eval()
    x, blocked = torch.randn(1, 3, 32), torch.zeros(3, 3, dtype=torch.bool)
    with torch.no_grad():
        for need_weights in (False, True):
            assert module(x, mask=blocked, need_weights=need_weights)[0].abs().max() == 0
