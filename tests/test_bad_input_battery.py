"""Issue 38's closing check: a fresh battery of bad inputs, written after the fixes by someone
working from the package rather than from the issue's list (none of these rows is in it).
Each row must raise the given type with a message naming the argument and what arrived."""

from __future__ import annotations

import warnings

import pytest
import torch
from bad_input_cases import Case  # noqa: E402

from course_utils.attention.masks import causal_mask, padding_mask
from course_utils.attention.mla import MultiHeadLatentAttention, cache_elements_per_token
from course_utils.interp import ablation, patching
from course_utils.interp.circuits import in_context_mass, trace_heads
from course_utils.interp.heatmaps import AttentionExplorer, model_attention, plot_head
from course_utils.interp.scores import (
    agreement_score,
    attention_mass,
    best_head,
    chance_level,
    head_score_table,
    ideal_pattern,
    induction_score,
    mean_by_group,
    role_verdicts,
    verdict,
)
from course_utils.model.checkpoint import load_checkpoint, save_checkpoint
from course_utils.model.kv_cache import (
    CatCache,
    PreallocatedCache,
    QuantizedCache,
    dequantize_kv,
    quantize_kv,
    quantized_bytes_per_token,
    repeatable_step,
)
from course_utils.model.paged_cache import PagedCache, blocks_needed
from course_utils.model.transformer import ModelConfig, TinyTransformer, convert_model
from course_utils.parallel import parallel_map

torch.manual_seed(0)
M = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=8, num_heads=2, num_layers=2)).eval()
TOK = torch.tensor([[1, 2, 3, 4]])
W = torch.softmax(torch.randn(1, 2, 4, 4, generator=torch.Generator().manual_seed(0)), -1)
EV = ablation.loss_evaluation(TOK, TOK.roll(-1, 1))
one = torch.ones(1, 2, 1, 4)
torch.manual_seed(0)
mla = MultiHeadLatentAttention(16, 2, 4, 8, 4)
TMP = "/nonexistent-dir-for-bad-input"  # never written: each save below is refused first

CASES = [
    Case(
        "QuantizedCache keys='row'",
        lambda: QuantizedCache(1, 1, 2, 4, 8, keys="row"),
        ValueError,
        ["keys", "'row'"],
    ),
    Case("quantize_kv per=1", lambda: quantize_kv(torch.ones(2, 4), per=1), ValueError, ["per", "1"]),
    Case(
        "dequantize_kv int dtype",
        lambda: dequantize_kv(quantize_kv(torch.ones(2, 4)), dtype=torch.int8),
        TypeError,
        ["dtype", "int8"],
    ),
    Case(
        "quantized_bytes group 0",
        lambda: quantized_bytes_per_token(2, 8, group=0),
        ValueError,
        ["group", "0"],
    ),
    Case(
        "PagedCache attend float64 q",
        lambda: (
            lambda c: (
                c.add_sequence("a"),
                c.append("a", torch.ones(2, 1, 4), torch.ones(2, 1, 4)),
                c.attend("a", torch.ones(2, 1, 4, dtype=torch.float64)),
            )
        )(PagedCache(4, 2, 2, 4)),
        TypeError,
        ["q", "float64"],
    ),
    Case("blocks_needed -1", lambda: blocks_needed(-1, 4), ValueError, ["length", "-1"]),
    Case("PagedCache 0 blocks", lambda: PagedCache(0, 4, 2, 8), ValueError, ["num_blocks", "0"]),
    Case(
        "CatCache.from_layers window -2",
        lambda: CatCache.from_layers([(one, one)], window=-2),
        ValueError,
        ["window", "-2"],
    ),
    Case(
        "Preallocated.from_layers too long",
        lambda: PreallocatedCache.from_layers([(torch.ones(1, 2, 3, 4),) * 2], max_len=2),
        ValueError,
        ["2", "3"],
    ),
    Case(
        "repeatable_step str cache",
        lambda: repeatable_step(M, "cache", torch.tensor([[1]]))(),
        TypeError,
        ["cache", "str"],
    ),
    Case("MLA odd d_rope", lambda: MultiHeadLatentAttention(16, 2, 4, 8, 3), ValueError, ["d_rope", "3"]),
    Case(
        "MLA decode 2 tokens", lambda: mla.decode(torch.ones(1, 2, 16)), ValueError, ["x_new", "(1, 2, 16)"]
    ),
    Case(
        "MLA decode cache 1-tuple",
        lambda: mla.decode(torch.ones(1, 1, 16), cache=(torch.ones(1, 1, 8),)),
        TypeError,
        ["cache", "tuple"],
    ),
    Case(
        "cache_elements kind 'mha'",
        lambda: cache_elements_per_token("mha", num_heads=2, d_head=4),
        ValueError,
        ["kind", "'mha'"],
    ),
    Case(
        "causal_mask offset 1.5", lambda: causal_mask(3, query_offset=1.5), TypeError, ["query_offset", "1.5"]
    ),
    Case(
        "padding_mask float lengths",
        lambda: padding_mask(torch.tensor([1.5])),
        TypeError,
        ["lengths", "float"],
    ),
    Case(
        "ModelConfig mlp='yes'",
        lambda: ModelConfig(vocab_size=10, max_len=8, mlp="yes"),
        TypeError,
        ["mlp", "str"],
    ),
    Case(
        "ModelConfig.from_dict missing",
        lambda: ModelConfig.from_dict({"vocab_size": 10}),
        ValueError,
        ["max_len"],
    ),
    Case("generate num_new -1", lambda: M.generate(TOK, -1), ValueError, ["num_new", "-1"]),
    Case("convert_model 3 kv heads", lambda: convert_model(M, 3), ValueError, ["num_kv_heads", "3"]),
    Case("load_checkpoint 123", lambda: load_checkpoint(123), TypeError, ["name_or_path", "int"]),
    Case("load_checkpoint ''", lambda: load_checkpoint(""), ValueError, ["name_or_path", "''"]),
    Case(
        "save_checkpoint task=3",
        lambda: save_checkpoint(M, TMP + "/x", task=3, metrics={}, command="c"),
        TypeError,
        ["task", "int"],
    ),
    Case(
        "save_checkpoint NaN metric",
        lambda: save_checkpoint(M, TMP + "/y", task="t", metrics={"loss": float("nan")}, command="c"),
        ValueError,
        ["metrics", "loss", "nan"],
    ),
    Case("parallel_map items=5", lambda: parallel_map(abs, 5), TypeError, ["items", "int"]),
    Case(
        "parallel_map timeout '10'",
        lambda: parallel_map(abs, [1], timeout="10"),
        TypeError,
        ["timeout", "'10'"],
    ),
    Case(
        "agreement_score float positions",
        lambda: agreement_score(W, [1.0], 0),
        TypeError,
        ["query_positions", "float"],
    ),
    Case(
        "attention_mass int key_mask",
        lambda: attention_mass(W, 1, torch.ones(4, dtype=torch.long)),
        TypeError,
        ["key_mask", "int64"],
    ),
    Case(
        "mean_by_group lengths differ",
        lambda: mean_by_group({"a": [1.0, 2.0]}, {"g": [1]}),
        ValueError,
        ["a=2", "g=1"],
    ),
    Case(
        "ideal_pattern period 1", lambda: ideal_pattern("induction", 8, period=1), ValueError, ["period", "1"]
    ),
    Case("chance_level no period", lambda: chance_level("induction", 8), ValueError, ["period"]),
    Case("induction_score start -1", lambda: induction_score(W, 2, start=-1), ValueError, ["start", "-1"]),
    Case("verdict margin 0.6", lambda: verdict(0.5, margin=0.6), ValueError, ["margin", "0.6"]),
    Case(
        "role_verdicts chance str",
        lambda: role_verdicts({"a": torch.ones(2)}, chance={"a": "x"}),
        TypeError,
        ["chance['a']", "x"],
    ),
    Case("best_head empty", lambda: best_head(torch.tensor([])), ValueError, ["shape", "(0,)"]),
    Case(
        "head_score_table decimals -1",
        lambda: head_score_table({"a": torch.ones(2)}, decimals=-1),
        ValueError,
        ["decimals", "-1"],
    ),
    Case(
        "plot_head 3 labels for 4", lambda: plot_head(torch.eye(4), ["a", "b", "c"]), ValueError, ["3", "4"]
    ),
    Case(
        "model_attention float tokens",
        lambda: model_attention(M, TOK.float()),
        TypeError,
        ["tokens", "float32"],
    ),
    Case("trace_heads 1-D tokens", lambda: trace_heads(M, TOK[0]), ValueError, ["tokens", "(4)"]),
    Case(
        "in_context_mass ignore True",
        lambda: in_context_mass(torch.randn(1, 4, 10), TOK, torch.ones(1, 4, dtype=torch.bool), ignore=True),
        TypeError,
        ["ignore", "bool"],
    ),
    Case(
        "head_importance chunk 0",
        lambda: ablation.head_importance(M, TOK, TOK, chunk_size=0),
        ValueError,
        ["chunk_size", "0"],
    ),
    Case("random_orders [1.5]", lambda: ablation.random_orders(M, [1.5]), TypeError, ["seeds", "1.5"]),
    Case(
        "pruning_curve counts [True]",
        lambda: ablation.pruning_curve(M, EV, [(0, 0)], counts=[True]),
        TypeError,
        ["counts", "True"],
    ),
    Case("ablation_table cases []", lambda: ablation.ablation_table(M, EV, []), TypeError, ["cases", "list"]),
    Case(
        "trimmed_by_length groups 0",
        lambda: patching.trimmed_by_length(_agreement(), 0),
        ValueError,
        ["groups", "0"],
    ),
    Case(
        "position_ablated where int",
        lambda: patching.position_ablated_logits(M, TOK, [(0, 0)], torch.ones(4, dtype=torch.long)),
        TypeError,
        ["where", "int64"],
    ),
    Case(
        "losses_along_orders most -1",
        lambda: patching.losses_along_orders(M, TOK, TOK, [[(0, 0)]], -1),
        ValueError,
        ["most", "-1"],
    ),
    Case(
        "AttentionExplorer no sentences",
        lambda: AttentionExplorer(lambda t: None, [], 1, 1),
        ValueError,
        ["sentences"],
    ),
]


def _agreement():
    from course_utils.tasks.synthetic import AgreementTask

    return AgreementTask().sample(4, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_fresh_bad_input_is_named(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(case.error) as info:
            case.call()
    message = str(info.value)
    missing = [w for w in case.words if w not in message]
    assert not missing, f"{case.name}: {missing} not in {message!r}"
