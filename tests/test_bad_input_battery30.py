"""Battery 30, fix pass 60d: the QA battery's findings, one test (or a few) per repro."""

from __future__ import annotations

import pytest
import torch


# -- lookup_evaluate_nan_model: evaluate over NaN logits reported accuracies ------------------------
def test_lookup_evaluate_refuses_a_model_with_nan_weights():
    from course_utils.tasks.two_relations import LookupModel, TwoKeyTask, evaluate

    torch.manual_seed(0)
    task = TwoKeyTask()
    model = LookupModel(task, 16, 2)
    batch = task.sample(8, seed=0)
    assert all(0.0 <= a <= 1.0 for a in evaluate(model, batch))  # a finite model is scored
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    model.train()
    with pytest.raises(ValueError, match="logits must hold finite numbers"):
        evaluate(model, batch)
    assert model.training  # the mode is put back before the error


# -- mixture_sample_huge_batch: a bare OverflowError naming no argument -----------------------------
def test_mixture_sample_refuses_a_huge_batch_size_by_name():
    from course_utils.tasks.synthetic import MixtureTask

    with pytest.raises(ValueError, match="batch_size must be an int in 2..9007199254740992"):
        MixtureTask().sample(10 ** 400, torch.Generator().manual_seed(0))


# -- save_checkpoint_names_path: the message named name_or_path, not save_checkpoint's path ----------
def test_save_checkpoint_names_its_path_argument(tmp_path):
    from course_utils.model.checkpoint import save_checkpoint
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with pytest.raises(TypeError, match=r"^path must be a str or Path, got int"):
        save_checkpoint(model, 5, task="induction", metrics={"a": 1.0}, command="x")


# -- run_blocks_names_resid: an inference-mode resid was called x -----------------------------------
def test_run_blocks_names_an_inference_mode_resid():
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with torch.inference_mode():
        resid = torch.randn(1, 3, 8)
    with pytest.raises(ValueError, match=r"^resid was made under torch.inference_mode\(\)"):
        model.run_blocks(resid)
    with torch.no_grad():
        assert model.run_blocks(resid)[0].shape == (1, 3, 8)


# -- str_subclass_eq_baseline: a str whose == says True passed, then a bare KeyError ----------------
def test_timings_refuse_a_baseline_equal_to_everything_by_name():
    from course_utils.bench.timing import timings_from_samples

    class EqAll(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    with pytest.raises(ValueError, match="baseline .* is not one of the names of samples"):
        timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, EqAll("zzz"))
    assert [t.name for t in timings_from_samples({"a": [1.0, 1.1], "b": [2.0, 2.1]}, "a")] == ["a", "b"]


# -- next_token_loss_inference_scored: torch's bare refusal of an inference-mode scored -------------
@pytest.mark.parametrize("metric", ["next_token_loss", "in_context_mass"])
def test_circuit_metrics_name_an_inference_mode_scored(metric):
    from course_utils.interp import circuits

    logits = torch.randn(2, 5, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 5))
    with torch.inference_mode():
        scored = torch.ones(2, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"^scored was made under torch.inference_mode\(\)"):
        getattr(circuits, metric)(logits, tokens, scored)
    with torch.no_grad():
        getattr(circuits, metric)(logits, tokens, scored)  # no gradients recorded: fine


# -- train_model_nan_weights: a NaN weight was blamed on the lr and the data ------------------------
def test_train_model_names_a_nan_weight():
    from course_utils.model.train import TrainConfig, train_model
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=1, max_len=4))
    with torch.no_grad():
        model.blocks[0].ln_attn.weight[0] = float("nan")
    tokens = torch.zeros(2, 4, dtype=torch.long)
    with pytest.raises(ValueError, match=r"model's weights \(blocks\.0\.ln_attn\.weight\) must hold finite"):
        train_model(model, lambda g: (tokens, tokens), TrainConfig(steps=1))


# -- notebook_memory_huge_timeout: timeout=10**400 came back as the notebook's error row -------------
def test_notebook_peak_memory_refuses_a_huge_timeout_by_name(tmp_path):
    from course_utils.bench.memory import notebook_peak_memory

    with pytest.raises(ValueError, match=r"^timeout must be an int in 1\.\.604800"):
        notebook_peak_memory(tmp_path / "never_run.ipynb", timeout=10 ** 400)


# -- path_patched_nan_model_blames_source: a NaN in the model's own run blamed source_outputs --------
def test_path_patched_logits_names_the_model_nan_weight_not_source_outputs():
    from course_utils.interp.ablation import head_outputs
    from course_utils.interp.patching import path_patched_logits
    from course_utils.model.transformer import ModelConfig, TinyTransformer

    torch.manual_seed(0)
    model = TinyTransformer(ModelConfig(vocab_size=8, d_model=8, num_heads=2, num_layers=2, max_len=4))
    tokens = torch.randint(0, 8, (2, 4))
    source = head_outputs(model, tokens)
    with torch.no_grad():
        model.token_embedding.weight[0, 0] = float("nan")
    tokens[:, 0] = 0
    with pytest.raises(ValueError, match=r"^model's weights \(token_embedding\.weight\) must hold finite"):
        path_patched_logits(model, tokens, source, [(0, 1)], [(1, 0)])
