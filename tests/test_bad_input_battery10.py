"""Battery 10's package findings (issue 38): inputs that reached torch's allocator, Python's
internals or a validator's own broken message. Each is now refused by name: the argument, what
was expected and what arrived."""

from __future__ import annotations

import argparse
import math

import pandas as pd
import pytest
import torch

from course_utils.attention import validation as va
from course_utils.attention.gqa import PublishedConfig
from course_utils.attention.kv_figure import plot_kv_sharing
from course_utils.attention.mha import MultiHeadAttention
from course_utils.attention.mla import DEEPSEEK_V2, MLAConfig, MultiHeadLatentAttention, rope
from course_utils.attention.naive_mha import AttentionHead, NaiveMultiHeadAttention
from course_utils.attention.shapes import trace_shapes
from course_utils.bench import cli, gqa_speed, memory, mha_speed, train_speed
from course_utils.interp.heatmaps import model_attention
from course_utils.tasks import two_relations as tr
from course_utils.tasks.synthetic import AgreementTask, MixtureTask, detokenize

HUGE = 10**12


def refused(call, error, words):
    """``call()`` raises ``error`` whose message holds every one of ``words``."""
    with pytest.raises(error) as caught:
        call()
    missing = [w for w in words if w not in str(caught.value)]
    assert not missing, f"{missing} not in {caught.value}"


# -- 1. sizes beyond memory are refused before allocating ---------------------------------------
TOO_BIG = [
    ("MLA d_model", lambda: MultiHeadLatentAttention(HUGE, 2, 4, 4, 2), ["d_model asks for", "GiB"]),
    ("MLA num_heads", lambda: MultiHeadLatentAttention(8, HUGE, 4, 4, 2), ["num_heads asks for", "GiB"]),
    ("MLA d_head", lambda: MultiHeadLatentAttention(8, 2, HUGE, 4, 2), ["d_head asks for", "GiB"]),
    ("MLA d_latent", lambda: MultiHeadLatentAttention(8, 2, 4, HUGE, 2), ["d_latent asks for", "GiB"]),
    ("MLA d_rope", lambda: MultiHeadLatentAttention(8, 2, 4, 4, HUGE), ["d_rope asks for", "GiB"]),
    ("AttentionHead d_model", lambda: AttentionHead(HUGE, 4), ["d_model asks for", "d_k=4"]),
    ("AttentionHead d_k", lambda: AttentionHead(4, HUGE), ["d_k asks for", "d_model=4"]),
    ("NaiveMultiHeadAttention d_model", lambda: NaiveMultiHeadAttention(HUGE, 2), ["d_model asks for"]),
    ("lesson_implementations d_model", lambda: mha_speed.lesson_implementations(HUGE, 2),
     ["d_model asks for", "more than this machine's"]),
]


@pytest.mark.parametrize("call, words", [c[1:] for c in TOO_BIG], ids=[c[0] for c in TOO_BIG])
def test_sizes_beyond_memory_are_refused_before_allocating(call, words):
    refused(call, ValueError, words)


def test_the_fit_check_counts_the_extra_layers():
    """A layer given in ``also`` counts: alone it fits, with a huge extra one it does not."""
    va.check_linear_weights_fit(4, (4,), also=((4, 4),))
    refused(lambda: va.check_linear_weights_fit(4, (4,), also=((HUGE, HUGE),), sizes={"a": 1}), ValueError,
            ["a asks for", "(a=1: weights of 2 linear layers"])


def test_small_modules_still_build():
    assert MultiHeadLatentAttention(16, 2, 4, 4, 2).w_uk.weight.shape == (8, 4)
    assert AttentionHead(8, 4).w_q.weight.shape == (4, 8)
    assert len(NaiveMultiHeadAttention(8, 2).heads) == 2


# -- 2. learner-facing helpers name the argument, what they expected and what arrived ------------
TASK = tr.TwoKeyTask()
MODEL = tr.LookupModel(TASK, 16, 2)
BATCH = TASK.sample(4, seed=0)
INT_TENSOR = torch.ones(2, 4, 8, dtype=torch.long)

LEARNER = [
    ("AgreementTask templates int", lambda: AgreementTask(templates=5), TypeError,
     ["templates", "tuple of template names", "int 5"]),
    ("AgreementTask templates None", lambda: AgreementTask(templates=None), TypeError,
     ["templates", "tuple of template names", "NoneType None"]),
    ("AgreementTask attractor_p str", lambda: AgreementTask(attractor_p="x"), TypeError,
     ["attractor_p", "probability in [0, 1]", "str 'x'"]),
    ("AgreementTask attractor_p None", lambda: AgreementTask(attractor_p=None), TypeError,
     ["attractor_p", "real number", "NoneType None"]),
    ("AgreementTask attractor_p True", lambda: AgreementTask(attractor_p=True), TypeError,
     ["attractor_p", "real number", "bool True"]),
    ("AgreementTask adjective_p str", lambda: AgreementTask(adjective_p="x"), TypeError,
     ["adjective_p", "probability", "str 'x'"]),
    ("MixtureTask induction_share str", lambda: MixtureTask(induction_share="x"), TypeError,
     ["induction_share", "strictly between 0 and 1", "str 'x'"]),
    ("MixtureTask induction_share None", lambda: MixtureTask(induction_share=None), TypeError,
     ["induction_share", "real number", "NoneType"]),
    ("detokenize None", lambda: detokenize(None), TypeError, ["tokens", "integer ids", "NoneType None"]),
    ("evaluate model None", lambda: tr.evaluate(None, BATCH), TypeError,
     ["model", "LookupModel", "NoneType"]),
    ("evaluate model str", lambda: tr.evaluate("x", BATCH), TypeError, ["model", "LookupModel", "str 'x'"]),
    ("evaluate batch int", lambda: tr.evaluate(MODEL, 5), TypeError, ["batch", "LookupBatch", "int 5"]),
    ("accuracy_table str", lambda: tr.accuracy_table("abc"), TypeError,
     ["results", "list of RunResult", "str"]),
    ("accuracy_table [None]", lambda: tr.accuracy_table([None]), TypeError,
     ["results[0]", "RunResult", "NoneType"]),
    ("accuracy_table int", lambda: tr.accuracy_table(5), TypeError, ["results", "list of RunResult", "int"]),
    ("example_table batch None", lambda: tr.example_table(None), TypeError,
     ["batch", "LookupBatch", "NoneType"]),
    ("example_table index str", lambda: tr.example_table(BATCH, "3"), TypeError, ["index", "int", "str '3'"]),
    ("example_table index 9", lambda: tr.example_table(BATCH, 9), IndexError, ["index", "0..3", "got 9"]),
    ("share_on_a model int", lambda: tr.share_on_a(5, BATCH), TypeError, ["model", "LookupModel", "int 5"]),
    ("accuracy_by_share model None", lambda: tr.accuracy_by_share(None, BATCH), TypeError,
     ["model", "LookupModel", "NoneType"]),
    ("plot_item_attention batch str", lambda: tr.plot_item_attention(MODEL, "x"), TypeError,
     ["batch", "LookupBatch", "str 'x'"]),
    ("model_attention of one layer",
     lambda: model_attention(MultiHeadAttention(8, 2), torch.zeros(1, 3).long()), TypeError,
     ["model", "return_attention=True", "TinyTransformer", "MultiHeadAttention", "need_weights=True"]),
    ("trace_shapes integer query", lambda: trace_shapes(MultiHeadAttention(8, 2), INT_TENSOR), TypeError,
     ["query", "floating-point", "torch.int64"]),
    ("trace_shapes integer key_value", lambda: trace_shapes(MultiHeadAttention(8, 2), torch.ones(2, 4, 8),
                                                            INT_TENSOR), TypeError,
     ["key_value", "floating-point", "torch.int64"]),
    ("trace_shapes float64 query", lambda: trace_shapes(MultiHeadAttention(8, 2), INT_TENSOR.double()),
     TypeError, ["query", "torch.float64", "module's parameters are torch.float32"]),
    ("rope positions on another device", lambda: rope(torch.ones(3, 4, device="meta"), torch.arange(3)),
     ValueError, ["positions", "x's device meta", "got device cpu"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in LEARNER], ids=[c[0] for c in LEARNER])
def test_learner_facing_helpers_name_a_wrong_argument(call, error, words):
    refused(call, error, words)


def test_learner_facing_helpers_still_accept_good_input():
    assert AgreementTask(attractor_p=1, adjective_p=0.0).attractor_p == 1
    assert MixtureTask(induction_share=0.25).induction_share == 0.25
    assert detokenize((0, 1)) == detokenize(torch.tensor([0, 1]))
    assert len(tr.evaluate(MODEL, BATCH)) == 3
    assert len(tr.example_table(BATCH, 3)) == TASK.num_items
    assert tr.share_on_a(MODEL, BATCH).shape == (4,)
    assert trace_shapes(MultiHeadAttention(8, 2), torch.ones(2, 4, 8)).steps


# -- 3. developer-facing helpers: the same, for calls by hand ----------------------------------
W = torch.ones(2, 2)
X = torch.ones(1, 2, 2)

DEVELOPER = [
    ("check_kv_heads num_heads str", lambda: va.check_kv_heads(1, "3"), TypeError,
     ["num_heads", "int", "str '3'"]),
    ("check_kv_heads num_heads nan", lambda: va.check_kv_heads(1, math.nan), TypeError,
     ["num_heads", "int", "float nan"]),
    ("check_index size str", lambda: va.check_index(1, "i", "3"), TypeError, ["size", "int", "str '3'"]),
    ("check_device_present bogus str", lambda: va.check_device_present("gpu9"), ValueError,
     ["device", "'cpu', 'cuda' or 'cuda:0'", "'gpu9'"]),
    ("check_device_present float", lambda: va.check_device_present(3.5), TypeError,
     ["device", "torch.device or a str", "float 3.5"]),
    ("check_matches_module x None", lambda: va.check_matches_module(None, "x", W), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("check_matches_module weight None", lambda: va.check_matches_module(W, "x", None), TypeError,
     ["weight", "torch.Tensor", "NoneType"]),
    ("check_mha_inputs key None",
     lambda: va.check_mha_inputs(X, None, X, d_model=2, weight=W, is_causal=False, need_weights=False),
     TypeError,
     ["key", "torch.Tensor", "NoneType"]),
    ("check_mha_tensors value None", lambda: va.check_mha_tensors(X, X, None, d_model=2, weight=W), TypeError,
     ["value", "torch.Tensor", "NoneType"]),
    ("check_table columns int", lambda: va.check_table(pd.DataFrame(), "t", 5), TypeError,
     ["columns", "tuple of column names", "int 5"]),
    ("check_linear_weights_fit widths str", lambda: va.check_linear_weights_fit(2, "abc"), TypeError,
     ["widths", "list of ints", "str 'abc'"]),
    ("check_linear_weights_fit widths [None]", lambda: va.check_linear_weights_fit(2, [None]), TypeError,
     ["widths[0]", "int", "NoneType"]),
    ("check_linear_weights_fit widths int", lambda: va.check_linear_weights_fit(2, 5), TypeError,
     ["widths", "list of ints", "int 5"]),
    ("positive_int int", lambda: cli.positive_int(5), TypeError, ["positive_int", "a str", "int 5"]),
    ("non_negative_int None", lambda: cli.non_negative_int(None), TypeError,
     ["non_negative_int", "a str", "NoneType"]),
    ("seed_number int", lambda: cli.seed_number(5), TypeError, ["seed_number", "a str", "int 5"]),
    ("device_name None", lambda: cli.device_name(None), TypeError, ["device_name", "a str", "NoneType"]),
    ("batch_by_context int", lambda: cli.batch_by_context(5), TypeError,
     ["batch_by_context", "a str", "int 5"]),
    ("Distinct key int", lambda: cli.Distinct(key=5), TypeError, ["Distinct's key", "function", "int 5"]),
    ("gqa add_bench_parser None", lambda: gqa_speed.add_bench_parser(None), TypeError,
     ["subparsers", "add_subparsers()", "'gqa'", "NoneType"]),
    ("memory add_bench_parser str", lambda: memory.add_bench_parser("x"), TypeError,
     ["subparsers", "'memory'", "str 'x'"]),
    ("mha add_bench_parser int", lambda: mha_speed.add_bench_parser(5), TypeError,
     ["subparsers", "'mha'", "int 5"]),
    ("train add_bench_parser None", lambda: train_speed.add_bench_parser(None), TypeError,
     ["subparsers", "'train'", "NoneType"]),
    ("forward_callables modules int", lambda: mha_speed.forward_callables(5, X), TypeError,
     ["modules", "dict {label: nn.Module}", "int 5"]),
    ("forward_callables x None", lambda: mha_speed.forward_callables({}, None), TypeError,
     ["x", "torch.Tensor", "NoneType"]),
    ("read_test_report int", lambda: memory.read_test_report(5), TypeError,
     ["path", "str or Path naming the per-test memory report", "int 5"]),
    ("notebook_file None", lambda: memory.notebook_file(None), TypeError,
     ["text", "str or Path naming a lesson notebook", "NoneType"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in DEVELOPER], ids=[c[0] for c in DEVELOPER])
def test_developer_facing_helpers_name_a_wrong_argument(call, error, words):
    refused(call, error, words)


def test_a_huge_head_count_lists_a_few_divisors_at_once():
    """The divisor list in the message scans at most a million candidates (10**12 + 1 looped for hours)."""
    refused(lambda: va.check_kv_heads(3, 10**12 + 1), ValueError, ["num_heads=1000000000001", "[1, 73, 137"])
    refused(lambda: va.check_head_dims(10**12 + 1, 2), ValueError, ["Heads that divide", "[1, 73, 137"])


def test_developer_facing_helpers_still_accept_good_input():
    assert va.check_kv_heads(2, 4) == 2
    assert va.check_device_present("cpu") == torch.device("cpu")
    assert cli.positive_int("4") == 4 and cli.batch_by_context("1x8") == (1, 8)
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", nargs="+", action=cli.Distinct, key=str)
    assert parser.parse_args(["--n", "1", "2"]).n == ["1", "2"]
    memory.add_bench_parser(argparse.ArgumentParser().add_subparsers())
    assert set(mha_speed.forward_callables({"a": MultiHeadAttention(2, 1)}, X)) == {"a"}


# -- 4. the shared validators check their own int arguments -----------------------------------
OWN_INTS = [
    ("check_keys_not_empty num_queries str", lambda: va.check_keys_not_empty("3", 0), TypeError,
     ["num_queries", "int", "str '3'"]),
    ("check_keys_not_empty num_queries bool", lambda: va.check_keys_not_empty(True, 0), TypeError,
     ["num_queries", "int", "bool True"]),
    ("check_keys_not_empty num_queries -1", lambda: va.check_keys_not_empty(-1, 0), ValueError,
     ["num_queries", ">= 0", "-1"]),
    ("check_keys_not_empty num_queries nan", lambda: va.check_keys_not_empty(math.nan, 0), TypeError,
     ["num_queries", "int", "nan"]),
    ("check_keys_not_empty num_keys -1", lambda: va.check_keys_not_empty(2, -1), ValueError,
     ["num_keys", ">= 0", "-1"]),
    ("check_kv_heads num_heads bool", lambda: va.check_kv_heads(1, True), TypeError,
     ["num_heads", "int", "bool True"]),
    ("check_kv_heads num_heads -1", lambda: va.check_kv_heads(1, -1), ValueError,
     ["num_heads", "positive int", "-1"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in OWN_INTS], ids=[c[0] for c in OWN_INTS])
def test_validators_check_their_own_int_arguments(call, error, words):
    refused(call, error, words)


def test_keys_not_empty_still_refuses_queries_without_keys():
    va.check_keys_not_empty(0, 0)
    va.check_keys_not_empty(torch.ones(2, 3).shape[1], 5)
    refused(lambda: va.check_keys_not_empty(3, 0), ValueError, ["Tk = 0", "3 queries"])


# -- 5. MLAConfig is checked as its twin PublishedConfig is -------------------------------------
CONFIGS = [
    ("MLAConfig name None", lambda: MLAConfig(None, 60, 128, 128, 512, 64, "s"), TypeError,
     ["MLAConfig.name", "str", "NoneType None"]),
    ("MLAConfig source int", lambda: MLAConfig("n", 60, 128, 128, 512, 64, 5), TypeError,
     ["MLAConfig.source", "str", "int 5"]),
    ("MLAConfig num_layers -1", lambda: MLAConfig("n", -1, 128, 128, 512, 64, "s"), ValueError,
     ["num_layers", "positive int", "-1"]),
    ("MLAConfig d_head str", lambda: MLAConfig("n", 60, 128, "3", 512, 64, "s"), TypeError,
     ["d_head", "int", "str '3'"]),
    ("MLAConfig d_rope -2", lambda: MLAConfig("n", 60, 128, 128, 512, -2, "s"), ValueError,
     ["d_rope", ">= 0", "-2"]),
    ("PublishedConfig name None", lambda: PublishedConfig(None, 32, 32, 8, 128, "s"), TypeError,
     ["PublishedConfig.name", "str", "NoneType None"]),
]


@pytest.mark.parametrize("call, error, words", [c[1:] for c in CONFIGS], ids=[c[0] for c in CONFIGS])
def test_published_configs_check_their_fields(call, error, words):
    refused(call, error, words)


def test_the_released_mla_config_still_builds():
    import numpy as np

    assert DEEPSEEK_V2.d_latent == 512
    config = MLAConfig("n", np.int64(2), 4, 8, 16, 0, "s")
    assert type(config.num_layers) is int and config.d_rope == 0


def test_plot_kv_sharing_refuses_a_repeated_design():
    """kv_heads=[1, 1] drew the same panel twice."""
    refused(lambda: plot_kv_sharing(8, [1, 1]), ValueError, ["kv_heads", "distinct", "repeats [1]"])


@pytest.mark.parametrize("task, words", [
    (tr.TwoKeyTask(num_keys=HUGE), ["task.num_keys asks for", "GiB"]),
    (tr.TwoKeyTask(num_symbols=10**7), ["task.num_symbols asks for", "GiB"]),
], ids=["num_keys", "num_symbols"])
def test_lookup_model_refuses_a_task_beyond_memory_before_allocating(task, words):
    refused(lambda: tr.LookupModel(task, 16, 2), ValueError, words)


def test_lookup_model_refuses_a_width_beyond_memory():
    refused(lambda: tr.LookupModel(TASK, HUGE, 2), ValueError, ["d_model asks for", "GiB"])


def test_two_key_task_refuses_more_symbols_than_an_int64_class_holds():
    """A class is a * V + b in torch.int64: V = 10**12 would wrap around silently."""
    from course_utils.tasks.two_relations import TwoKeyTask

    with pytest.raises(ValueError, match=r"num_symbols must be an int in 2\.\.3037000499, got 1000000000000"):
        TwoKeyTask(num_symbols=10**12)
    assert TwoKeyTask(num_symbols=3037000499).num_classes <= 2**63 - 1
