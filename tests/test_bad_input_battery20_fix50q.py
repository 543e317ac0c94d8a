"""Battery 20a's interp / tasks / model cases (issue 38): ov_copying_score on a grouped-query
model, an evaluation that measures nothing, TwoKeyTask's seed range, infinite logits scored as
predictions, and a History whose device torch cannot name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from course_utils.interp.ablation import Evaluation, measure
from course_utils.interp.circuits import ov_copying_score
from course_utils.model.train import History
from course_utils.model.transformer import ModelConfig, TinyTransformer
from course_utils.tasks.synthetic import (
    AgreementTask,
    InductionTask,
    agreement_accuracy,
    agreement_margins,
    induction_accuracy,
)
from course_utils.tasks.two_relations import TwoKeyTask
from tests.bad_input_cases import raises_naming


# -- O3: ov_copying_score on a GQA model: each query head reads its group's W_V ---------------
def _expanded_to_mha(gqa_model: TinyTransformer) -> TinyTransformer:
    """The same model with its K/V heads repeated to full multi-head attention (query head i
    gets K/V head i // (h / g), the blocked grouping)."""
    config = gqa_model.config
    h, g, dk = config.num_heads, config.num_kv_heads, config.d_head
    mha = TinyTransformer(ModelConfig(**{**config.to_dict(), "num_kv_heads": h}))
    state = {key: value for key, value in gqa_model.state_dict().items()
             if not any(f".attn.{name}_proj." in key for name in "qkv")}

    def expand(t: torch.Tensor) -> torch.Tensor:  # (g * dk, ...) -> (h * dk, ...): group i // (h/g)
        rest = t.shape[1:]
        return t.reshape(g, dk, *rest).repeat_interleave(h // g, dim=0).reshape(h * dk, *rest)

    for i, block in enumerate(gqa_model.blocks):
        attn = block.attn
        for part in ("weight", "bias"):
            state[f"blocks.{i}.attn.in_proj.{part}"] = torch.cat([
                getattr(attn.q_proj, part), expand(getattr(attn.k_proj, part)),
                expand(getattr(attn.v_proj, part))])
    mha.load_state_dict(state)
    return mha.eval()


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 2), (4, 1), (6, 3)],
                         ids=["h4 g2", "h4 g1 (MQA)", "h6 g3"])
def test_ov_copying_score_on_gqa_matches_the_expanded_mha_model(num_heads: int, num_kv_heads: int) -> None:
    torch.manual_seed(0)
    gqa = TinyTransformer(ModelConfig(vocab_size=24, max_len=8, d_model=24, num_heads=num_heads,
                                      num_layers=2, num_kv_heads=num_kv_heads, mlp=True)).eval()
    mha = _expanded_to_mha(gqa)
    tokens = torch.randint(0, 24, (2, 8))
    assert torch.allclose(gqa(tokens)[0], mha(tokens)[0], atol=1e-5)  # the expansion is the same model
    for layer in range(2):
        got = ov_copying_score(gqa, layer, range(24))
        assert got.shape == (num_heads,)
        assert torch.allclose(got, ov_copying_score(mha, layer, range(24)))


# -- S5: an evaluation whose score returns {} measured nothing ---------------------------------
def test_measure_refuses_a_score_that_returns_no_number() -> None:
    config = ModelConfig(vocab_size=16, max_len=8, d_model=16, num_heads=2, num_layers=2)
    model = TinyTransformer(config).eval()
    tokens = torch.randint(1, 16, (2, 6))
    good = Evaluation(tokens, lambda logits: {"m": 1.0})
    raises_naming(ValueError, ["evaluations[1].score", "at least one number", "{}"],
                  lambda: measure(model, [good, Evaluation(tokens, lambda logits: {})], [(0, 1)]))


# -- O4: TwoKeyTask.sample's seed range is named like InductionTask's ---------------------------
@pytest.mark.parametrize(("seed", "error", "words"), [
    (2**64, ValueError, ["seed", "2**64", str(2**64)]),
    (2**70, ValueError, ["seed", "2**64", str(2**70)]),
    (-1, ValueError, ["seed", ">= 0", "-1"]),
], ids=["2**64", "2**70", "-1"])
def test_twokey_sample_names_a_seed_out_of_range(seed: int, error: type[Exception], words: list[str]) -> None:
    raises_naming(error, words, lambda: TwoKeyTask().sample(4, seed=seed))


def test_twokey_sample_takes_a_numpy_seed_like_an_int() -> None:
    task = TwoKeyTask()
    assert torch.equal(task.sample(3, seed=np.int64(5)).item_keys, task.sample(3, seed=5).item_keys)


# -- S4: +inf / -inf logits are refused where a metric reads them, as NaN is ------------------
_INDUCTION = InductionTask(vocab_size=16, seq_len=8, train_periods=(2, 3), heldout_periods=(4,))
_AGREEMENT = AgreementTask()


def _induction_call(value: float):
    batch = _INDUCTION.eval_batch(4)
    logits = torch.zeros(4, 8, 16)
    logits[batch.scored] = value
    return lambda: induction_accuracy(logits, batch)


def _agreement_call(fn, value: float):
    batch = _AGREEMENT.sample(4, torch.Generator().manual_seed(0))
    logits = torch.zeros(4, batch.tokens.shape[1], _AGREEMENT.vocab_size)
    logits[torch.arange(4), batch.predict_pos, batch.wrong_id] = value
    return lambda: fn(logits, batch)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")], ids=["+inf", "-inf"])
@pytest.mark.parametrize("make", [
    _induction_call,
    lambda value: _agreement_call(agreement_margins, value),
    lambda value: _agreement_call(agreement_accuracy, value),
], ids=["induction_accuracy", "agreement_margins", "agreement_accuracy"])
def test_infinite_logits_are_refused_where_read(make, value: float) -> None:
    kind = "+inf" if value > 0 else "-inf"
    raises_naming(ValueError, ["logits", kind, "no prediction"], make(value))


def test_nan_logits_still_named_as_nan() -> None:
    raises_naming(ValueError, ["logits hold NaN at scored positions"], _induction_call(float("nan")))


# -- S2: History.device is a device torch names (present on this machine or not) --------------
@pytest.mark.parametrize("device", ["gpu9", "", "CPU", "cuda:-1", "meta"])
def test_history_refuses_a_device_torch_cannot_name(device: str) -> None:
    raises_naming(ValueError, ["History.device", repr(device)], lambda: History("t", device=device))


def test_history_keeps_a_device_of_another_machine() -> None:
    assert History("t", device="cuda:3").device == "cuda:3"  # a GPU run's history read on a CPU
