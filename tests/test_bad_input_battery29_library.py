"""Battery 29's library findings: each input is refused with a message naming the argument, or
handled right (one test per standalone repro)."""
from __future__ import annotations

import pytest
import torch

HUGE = 10**400


class BadRepr:
    def __repr__(self) -> str:
        raise RuntimeError("repr raises")


class BadFloat:
    def __float__(self) -> float:
        raise RuntimeError("float raises")


def test_finite_never_raises():
    from course_utils.attention.validation import finite

    assert finite(torch.ones(2, device="meta").sum()) is False
    assert finite(BadFloat()) is False
    assert finite(1.0) is True


def test_causal_mask_huge_names_num_queries():
    from course_utils.attention.masks import causal_mask

    with pytest.raises(ValueError, match="num_queries"):
        causal_mask(HUGE)


def test_check_dense_non_tensor_names_argument():
    from course_utils.attention.validation import check_dense

    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        check_dense([1.0, 2.0], "x")


def test_check_seed_bad_repr_names_seed():
    from course_utils.env import check_seed

    with pytest.raises(TypeError, match=r"seed must be an int.*BadRepr"):
        check_seed(BadRepr())


def test_copy_module_bad_repr_names_module():
    from course_utils.exercises.cases import copy_module

    with pytest.raises(TypeError, match=r"module must be a torch.nn.Module.*BadRepr"):
        copy_module(BadRepr())


def test_mha_macs_names_num_heads_and_cuts_huge_value():
    from course_utils.attention.shapes import mha_macs

    with pytest.raises(ValueError, match="not divisible by num_heads = 3"):
        mha_macs(2, 4, 8, 3)
    with pytest.raises(ValueError, match="num_heads") as info:
        mha_macs(2, 4, 8, HUGE)
    assert len(str(info.value)) < 400


def test_mla_latents_huge_start_names_start():
    from course_utils.attention.mla import MultiHeadLatentAttention

    m = MultiHeadLatentAttention(8, 2, 4, 4, 2)
    with pytest.raises(ValueError, match="start"):
        m.latents(torch.randn(2, 3, 8), start=HUGE)


def test_next_token_targets_huge_pad_names_pad_id():
    from course_utils.tasks.synthetic import next_token_targets

    with pytest.raises(ValueError, match="pad_id"):
        next_token_targets(torch.randint(0, 16, (2, 8)), pad_id=HUGE)


def test_quantized_bytes_huge_names_num_kv_heads():
    from course_utils.model.kv_cache import quantized_bytes_per_token

    with pytest.raises(ValueError, match="num_kv_heads"):
        quantized_bytes_per_token(HUGE, 4)
    with pytest.raises(ValueError, match="d_head"):
        quantized_bytes_per_token(4, HUGE)


def test_clock_elapsed_huge_names_clock():
    from course_utils.bench.timing import clock_elapsed

    with pytest.raises(ValueError, match="clock"):
        clock_elapsed(HUGE, 2.0, "x")


def test_pair_class_huge_names_num_symbols():
    from course_utils.tasks.two_relations import pair_class, split_pair_class

    with pytest.raises(ValueError, match="num_symbols"):
        pair_class(torch.tensor([0, 1]), torch.tensor([1, 2]), HUGE)
    with pytest.raises(ValueError, match="num_symbols"):
        split_pair_class(torch.tensor([0, 1]), HUGE)


def test_say_never_raises_on_a_raising_stream(monkeypatch):
    import sys

    from course_utils.interp.widgets import say

    class BrokenStream:
        encoding = "utf-8"

        def write(self, s):
            raise RuntimeError("stream broken")

        def flush(self):
            pass

    monkeypatch.setattr(sys, "stdout", BrokenStream())
    say("x")  # nothing printed, nothing raised


def test_assert_passed_prints_on_an_ascii_stdout():
    import os
    import subprocess
    import sys

    code = ("from course_utils.exercises.core import Feedback\n"
            "Feedback('lesson01.attend', 'correct', 'all cases pass').assert_passed()\n"
            "Feedback('lesson01.attend', 'wrong', 'rows do not sum to 1').assert_passed()\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONIOENCODING="ascii", PYTHONPATH=root)
    env.pop("NBGRADER_EXECUTION", None)
    done = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, errors="replace", timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert "all cases pass" in done.stdout and "rows do not sum to 1" in done.stdout


def test_config_numpy_ints_stored_as_python_ints():
    import dataclasses
    import json

    import numpy as np

    from course_utils.model.train import TrainConfig
    from course_utils.tasks.two_relations import RelationsConfig

    config = TrainConfig(steps=np.int64(2), warmup_steps=np.int32(1))
    assert type(config.steps) is int and type(config.warmup_steps) is int
    json.dumps(dataclasses.asdict(config))
    relations = RelationsConfig(d_model=np.int64(16))
    assert type(relations.d_model) is int
    json.dumps(dataclasses.asdict(relations))


def test_catcache_first_step_does_not_keep_the_callers_tensor():
    from course_utils.model.kv_cache import CatCache

    cache = CatCache(1)
    k, v = torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4)
    k_out, v_out = cache.append(0, k, v)
    assert k_out is not k and v_out is not v
    k.mul_(5)
    v.mul_(5)
    k2, v2 = cache.append(0, torch.ones(2, 1, 1, 4), torch.ones(2, 1, 1, 4))
    assert float(k2.max()) == 1.0 and float(v2.max()) == 1.0


def test_load_checkpoint_under_default_float64():
    from course_utils.model.checkpoint import load_checkpoint

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        model, _ = load_checkpoint("induction")
        assert next(model.parameters()).dtype == torch.float32
        with torch.no_grad():
            model(torch.zeros(1, 4, dtype=torch.long))
    finally:
        torch.set_default_dtype(old)


def test_train_model_documents_an_interrupted_run():
    from course_utils.model.train import train_model

    doc = " ".join(train_model.__doc__.split())
    assert "keeps the steps it took" in doc
    assert "mode is put back" in doc


def test_ov_copying_score_0d_token_ids_named():
    from course_utils.interp.circuits import ov_copying_score
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=16, max_len=8, d_model=8, num_heads=2)).eval()
    with pytest.raises(ValueError, match="token_ids"):
        ov_copying_score(model, 0, torch.tensor(2))
    assert ov_copying_score(model, 0, torch.tensor([1, 2, 3])).shape == (2,)
