"""Battery 17a (issue 38), fix47p: the attention package's meta-device cases (S1), and two
validation helpers that failed with a bare Python error on their own arguments (O5, O8)."""

import pytest
import torch

from course_utils.attention import masks as M
from course_utils.attention import sdpa_backends as SB
from course_utils.attention import validation as V
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.mha import MultiHeadAttention, MultiHeadAttentionBase


def refused(call, error, words):
    with pytest.raises(error) as caught:
        call()
    for word in words:
        assert word in str(caught.value), (word, str(caught.value))


# -- S1: meta q/k/v and a meta device are refused where nothing computes on them ------------------
QKV = torch.randn(2, 4, 5, 4)


@pytest.mark.parametrize("label", ["math", "flash"])
@pytest.mark.parametrize("which", ["q", "k", "v"])
def test_backend_rejection_reason_refuses_meta_tensors(label, which):
    tensors = {"q": QKV, "k": QKV, "v": QKV, which: QKV.to("meta")}
    refused(lambda: SB.backend_rejection_reason(label, **tensors), ValueError,
            [f"{which} is on the meta device", "(2, 4, 5, 4)"])


@pytest.mark.parametrize("device", ["meta", torch.device("meta")], ids=["str", "torch.device"])
def test_precision_notes_refuses_meta(device):
    refused(lambda: SB.precision_notes(device, torch.float32), ValueError, ["device", "'meta'"])


def test_precision_notes_still_only_parses_other_devices(monkeypatch):
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    assert SB.precision_notes("cuda:9", torch.float32)  # a note about a GPU needs no GPU here
    assert SB.precision_notes("cpu", torch.float32) == []


def test_check_device_keeps_its_meta_message():
    refused(lambda: V.check_device("meta", "where"), ValueError, ["where must be a device that holds values",
                                                                  "'meta'"])


# -- S1 documented: the masks and merge_heads keep meta, the shape computation of a meta layer -----
@pytest.mark.parametrize("function", [M.causal_mask, M.padding_mask, M.to_torch_attn_mask,
                                      M.to_torch_key_padding_mask, MultiHeadAttentionBase],
                         ids=lambda f: f.__name__)
def test_meta_kept_on_purpose_is_documented(function):
    """merge_heads is documented in its class: lesson 04 prints merge_heads' own source."""
    doc = " ".join(function.__doc__.split())
    assert "meta" in doc and "on purpose" in doc, doc
    if function is MultiHeadAttentionBase:
        assert "merge_heads" in doc


@pytest.mark.parametrize("layer", ["mha", "gqa"])
def test_a_layer_built_on_meta_still_computes_shapes(layer):
    with torch.device("meta"):
        module = MultiHeadAttention(16, 4) if layer == "mha" else GroupedQueryAttention(16, 4, 2)
    x = torch.empty(2, 5, 16, device="meta")
    assert module(x, is_causal=True)[0].shape == (2, 5, 16)
    out = module(x, key_padding_mask=M.padding_mask([5, 3], device="meta"))[0]
    assert out.shape == (2, 5, 16) and out.is_meta
    with torch.device("meta"):
        theirs = torch.nn.MultiheadAttention(16, 4, batch_first=True)
    out = theirs(x, x, x, attn_mask=M.to_torch_attn_mask(M.causal_mask(5, device="meta")),
                 key_padding_mask=M.to_torch_key_padding_mask(M.padding_mask([5, 3], device="meta")))[0]
    assert out.shape == (2, 5, 16)


def test_a_meta_mask_for_inputs_with_values_is_still_refused():
    refused(lambda: MultiHeadAttention(16, 4)(torch.randn(1, 3, 16), mask=M.causal_mask(3, device="meta")),
            ValueError, ["mask", "meta"])


# -- O5: check_dims_not_empty's own arguments ------------------------------------------------------
@pytest.mark.parametrize("x, dims, error, words", [
    (None, ("B", "T"), TypeError, ["x must be a torch.Tensor", "NoneType"]),
    ([[[0.5]]], ("B", "T"), TypeError, ["x must be a torch.Tensor", "list"]),
    (torch.ones(160), ("B", "T"), ValueError, ["x must be at least 2-D", "(160)"]),
    (torch.ones(2, 3), None, TypeError, ["dims", "NoneType None"]),
    (torch.ones(2, 3), True, TypeError, ["dims", "bool True"]),
    (torch.ones(2, 3), ("B", 1), TypeError, ["dims", "('B', 1)"]),
], ids=["x None", "x list", "x 1-D", "dims None", "dims True", "dims bad entry"])
def test_check_dims_not_empty_checks_its_arguments(x, dims, error, words):
    refused(lambda: V.check_dims_not_empty(x, "x", dims), error, words)


def test_check_dims_not_empty_still_refuses_an_empty_batch():
    V.check_dims_not_empty(torch.ones(2, 3), "x")
    refused(lambda: V.check_dims_not_empty(torch.ones(0, 3), "x"), ValueError, ["x must hold at least one",
                                                                               "B >= 1"])


# -- O8: check_model_holds_values refuses a non-Module ---------------------------------------------
@pytest.mark.parametrize("model", [None, "abc", True, []], ids=["None", "str", "bool", "list"])
def test_check_model_holds_values_refuses_a_non_module(model):
    refused(lambda: V.check_model_holds_values(model, "my_model"), TypeError,
            ["my_model must be a torch.nn.Module", type(model).__name__])
