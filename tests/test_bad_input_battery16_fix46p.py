"""Battery 16a's attention cases (helper fix46p), each failing before its fix: empty batches,
unchecked helper arguments (nargs, combine_masks' sizes, allow_empty, check_table's columns,
check_edited_heads' heads), a names test answering "yes", an odd MLAConfig.d_rope, and the
documented GQA behaviours (NaN keys on the fused path, a generator with method="mean")."""

import math

import pandas as pd
import pytest
import torch

from course_utils.attention import gqa as gqa_module
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.hooks import hooks, run_with_cache
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.mla import MLAConfig, MultiHeadLatentAttention
from course_utils.attention.shapes import trace_shapes
from course_utils.attention.validation import (
    check_callable,
    check_edited_heads,
    check_int_list,
    check_table,
    combine_masks,
)


# -- an empty batch is refused before a reshape or a reduction --------------------------------
def _mla():
    torch.manual_seed(0)
    return MultiHeadLatentAttention(16, 4, 4, 8, 4)


@pytest.mark.parametrize("call, name", [
    (lambda: _mla()(torch.randn(0, 5, 16)), "x"),
    (lambda: _mla().decode(torch.randn(0, 1, 16)), "x_new"),
    (lambda: trace_shapes(MultiHeadAttention(16, 4), torch.randn(0, 5, 16)), "query"),
    (lambda: trace_shapes(MultiHeadAttention(16, 4), torch.randn(2, 5, 16), torch.randn(2, 0, 16)),
     "key_value"),
])
def test_an_empty_batch_or_sequence_is_refused_by_name(call, name):
    with pytest.raises(ValueError, match=rf"^{name} must hold at least one .*got shape \("):
        call()


# -- check_callable's nargs ------------------------------------------------------------------
@pytest.mark.parametrize("nargs, error", [(-1, ValueError), (2.5, TypeError), ("2", TypeError),
                                          (math.nan, TypeError), (10**13, ValueError),
                                          (True, TypeError)])
def test_check_callable_checks_nargs_itself(nargs, error):
    with pytest.raises(error, match=rf"^nargs must be an int.*got .*{str(nargs)[:3]}"):
        check_callable(lambda a: a, "fn", nargs=nargs)


def test_check_callable_still_checks_the_arity_with_a_good_nargs():
    check_callable(lambda: 0, "fn", nargs=0)
    with pytest.raises(TypeError, match="fn must be"):
        check_callable(lambda a: a, "fn", nargs=0)


# -- combine_masks names its own size arguments ------------------------------------------------
SIZES = {"batch": 2, "num_heads": 4, "num_queries": 5, "num_keys": 5}


@pytest.mark.parametrize("name", list(SIZES))
@pytest.mark.parametrize("value, error", [(-1, ValueError), (True, TypeError), (2.5, TypeError),
                                          ("2", TypeError), (math.nan, TypeError), (None, TypeError)])
def test_combine_masks_names_the_size_argument(name, value, error):
    sizes = {**SIZES, name: value}
    with pytest.raises(error, match=rf"^{name} must be an int.*got .*{str(value)[:3]}"):
        combine_masks(torch.ones(5, 5, dtype=torch.bool), torch.ones(2, 5, dtype=torch.bool),
                      device=torch.device("cpu"), **sizes)


# -- check_edited_heads' heads -----------------------------------------------------------------
@pytest.mark.parametrize("heads", [[[1.0]], None, "tensor"])
def test_check_edited_heads_names_heads(heads):
    wanted = rf"heads must be the tensor the hook got, got {type(heads).__name__}"
    with pytest.raises(TypeError, match=wanted):
        check_edited_heads(torch.ones(2, 4, 5, 4), heads)


# -- check_table's columns ---------------------------------------------------------------------
def test_check_table_names_an_unhashable_column():
    with pytest.raises(TypeError, match=r"columns\[1\] must be a column name.*got list \['b'\]"):
        check_table(pd.DataFrame({"a": [1], "b": [2]}), "table", ("a", ["b"]))
    check_table(pd.DataFrame({"a": [1], 3: [2]}), "table", ("a", 3))  # an int name is still fine


# -- allow_empty is a real bool ----------------------------------------------------------------
@pytest.mark.parametrize("flag", [1, "yes", None, 1.0])
def test_check_int_list_allow_empty_must_be_a_bool(flag):
    with pytest.raises(TypeError, match=rf"^allow_empty must be True or False, got {type(flag).__name__}"):
        check_int_list([1, 2], "sizes", allow_empty=flag)


# -- a names test must answer True or False ---------------------------------------------------
@pytest.mark.parametrize("answer", ["yes", 1, None])
def test_a_names_test_answering_a_non_bool_is_refused(answer):
    mha = MultiHeadAttention(16, 4)
    with pytest.raises(TypeError, match=rf"^names \(a test on hook point names\).*'hook_q'.*"
                                        rf"must be True or False, got {type(answer).__name__}"):
        run_with_cache(mha, torch.randn(2, 5, 16), names=lambda name: answer)
    with pytest.raises(TypeError, match=r"^fwd_hooks\[0\]\[0\] \(a test"):
        with hooks(mha, [(lambda name: answer, lambda x, hook: None)]):
            pass
    assert not any(p.has_hooks for p in mha.modules() if hasattr(p, "has_hooks"))


def test_a_names_test_answering_a_bool_still_works():
    _, cache = run_with_cache(MultiHeadAttention(16, 4), torch.randn(2, 5, 16),
                              names=lambda name: name.endswith("hook_z"))
    assert list(cache) == ["hook_z"]


# -- MLAConfig.d_rope is even ------------------------------------------------------------------
def test_mla_config_refuses_an_odd_d_rope():
    with pytest.raises(ValueError, match=r"d_rope must be even.*got 63"):
        MLAConfig("x", 60, 128, 128, 512, 63, "src")
    MLAConfig("x", 60, 128, 128, 512, 0, "src")  # no RoPE key at all is still allowed


# -- documented instead of refused -------------------------------------------------------------
def test_gqa_docstring_states_the_fused_path_all_nan_exception():
    doc = " ".join(gqa_module.__doc__.split())
    assert "every* score of a query's head is NaN" in doc and "need_weights=False" in doc
    x, nan_keys = torch.randn(2, 5, 16), torch.full((2, 5, 16), float("nan"))
    out, _ = GroupedQueryAttention(16, 4, 2).eval()(x, nan_keys, x, need_weights=True)
    assert torch.isnan(out).all()  # the step-by-step path gives NaN, as the docstring says


def test_from_multi_head_documents_and_keeps_the_unused_generator():
    doc = " ".join(GroupedQueryAttention.from_multi_head.__doc__.split())
    assert '``generator`` (None or a ``torch.Generator``) is read by ``"random"`` only' in doc
    generator = torch.Generator().manual_seed(0)
    state = generator.get_state()
    GroupedQueryAttention.from_multi_head(MultiHeadAttention(16, 4), 2, "mean", generator=generator)
    assert torch.equal(generator.get_state(), state)  # untouched, as documented
