"""Training: short schedules reach the course's targets; runs are reproducible; the CLIs work.

No test asserts a timing.
"""

import json
import math

import pytest
import torch

from course_utils import bench
from course_utils.bench.train_speed import format_training_table
from course_utils.model.checkpoint import load_checkpoint
from course_utils.model.train import (
    INDUCTION_TASK,
    TrainConfig,
    agreement_model_config,
    evaluate_agreement,
    evaluate_induction,
    induction_model_config,
    main,
    train_agreement,
    train_induction,
)
from course_utils.model.transformer import ModelConfig


def test_induction_heads_form_within_a_short_schedule():
    model, history = train_induction(steps=250, seed=0, eval_every=10, stop_at_target=True, progress=False)
    assert history.steps_to_target is not None and history.steps_to_target <= 200
    assert history.final_metrics["heldout"] >= 0.9  # periods the model never saw
    assert history.eval_steps[-1] == history.steps_to_target  # stopped there
    assert len(history.loss) == len(history.steps) == history.steps_to_target
    assert all(math.isfinite(x) for x in history.loss)
    assert sum(history.loss[-10:]) < sum(history.loss[:10]) / 2
    assert not model.training
    assert evaluate_induction(model)["heldout"] == history.final_metrics["heldout"]


@pytest.mark.slow  # two training runs
def test_agreement_is_learned_with_and_without_attractors():
    model, history = train_agreement(steps=300, seed=0, eval_every=100, progress=False)
    final = history.final_metrics
    assert final["all"] >= 0.99
    assert final["attractor"] >= 0.98 and final["no_attractor"] >= 0.98
    assert history.eval_steps == [100, 200, 300]
    assert evaluate_agreement(model) == final


def test_training_is_reproducible_and_seed_dependent():
    _, a = train_induction(steps=15, seed=3, eval_every=15, progress=False)
    _, b = train_induction(steps=15, seed=3, eval_every=15, progress=False)
    _, c = train_induction(steps=15, seed=4, eval_every=15, progress=False)
    assert a.loss == b.loss
    assert a.loss != c.loss


def test_training_restores_the_thread_count_and_global_rng():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    train_agreement(steps=2, seed=0, eval_every=2, progress=False)
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(3), expected), "training must not consume the global random stream"


def test_history_is_json_serialisable():
    _, history = train_induction(steps=4, seed=0, eval_every=2, progress=False)
    data = json.loads(json.dumps(history.to_dict()))
    assert data["steps"] == [1, 2, 3, 4] and data["eval_steps"] == [2, 4]
    assert history.metric("heldout") == [m["heldout"] for m in history.eval_metrics]


def test_models_that_do_not_fit_the_task_are_refused():
    with pytest.raises(ValueError, match="does not fit the task"):
        train_induction(ModelConfig(vocab_size=10, max_len=32), steps=1, progress=False)
    with pytest.raises(ValueError, match="does not fit the task"):
        train_agreement(agreement_model_config(max_len=8), steps=1, progress=False)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [({"steps": 0}, ValueError, "steps must be an int in 1..100000, got 0"),
     ({"steps": 2.5}, TypeError, "steps must be an int, got float 2.5"),
     ({"lr": 0.0}, ValueError, "lr"), ({"warmup_steps": -1}, ValueError, "warmup_steps must be an int >= 0")],
)
def test_bad_train_configs_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        TrainConfig(**kwargs)


def test_learning_rate_warms_up_then_decays_to_a_tenth():
    config = TrainConfig(steps=100, lr=1e-2, warmup_steps=10)
    rates = [config.lr_at(s) for s in range(100)]
    assert rates[0] == pytest.approx(1e-3) and rates[9] == pytest.approx(1e-2)
    assert all(a >= b for a, b in zip(rates[9:], rates[10:], strict=False))
    assert rates[-1] == pytest.approx(1e-3, rel=0.05)


def test_the_default_configs_are_the_documented_ones():
    ind, agr = induction_model_config(), agreement_model_config()
    assert (ind.num_layers, ind.d_model, ind.num_heads, ind.mlp) == (2, 64, 4, False)
    assert (agr.num_layers, agr.d_model, agr.num_heads, agr.mlp) == (2, 64, 4, True)
    assert ind.max_len == INDUCTION_TASK.seq_len


def test_cli_trains_and_writes_a_loadable_checkpoint(tmp_path, capsys):
    out = tmp_path / "tiny"
    main(["induction", "--steps", "5", "--seed", "1", "--out", str(out), "--no-progress"])
    printed = capsys.readouterr().out
    assert "induction: 5 steps" in printed and "held-out-period accuracy" in printed
    model, meta = load_checkpoint(out)
    expected = f"python -m course_utils.model.train induction --steps 5 --seed 1 --out {out} --no-progress"
    assert meta["command"] == expected
    assert meta["task"] == "induction" and meta["training"]["steps"] == 5
    assert evaluate_induction(model) == meta["metrics"]


def test_cli_rejects_unknown_tasks():
    with pytest.raises(SystemExit):
        main(["translation"])


def test_bench_registers_train_and_formats_a_table():
    parser_help = []
    try:
        bench.main(["train", "--help"])
    except SystemExit:
        parser_help.append(True)
    assert parser_help
    rows = [
        {"seed": s, "steps_to_0.9": st, "seconds": sec, "acc": acc}
        for s, st, sec, acc in [(0, 90, 1.5, 0.99), (1, None, 2.5, 0.5), (2, 100, 1.0, 0.98)]
    ]
    table = format_training_table(rows)
    lines = table.splitlines()
    assert len(lines) == 5 and lines[-1].split()[0] == "median"
    assert "never" in lines[2] and "never" in lines[-1]  # a median over a missing value is not made up
    assert lines[-1].split()[2:] == ["1.50", "0.9800"]


def test_evaluate_mixture_reproduces_the_shipped_checkpoints_metrics():
    """The mixture checkpoint's sidecar records what evaluate_mixture measured after training;
    the shipped weights give the same four numbers."""
    import json

    from course_utils.model.checkpoint import CHECKPOINT_DIR, load_checkpoint
    from course_utils.model.train import evaluate_mixture

    model, _ = load_checkpoint("mixture")
    recorded = json.loads((CHECKPOINT_DIR / "mixture.json").read_text())["metrics"]
    measured = evaluate_mixture(model)
    assert set(measured) == set(recorded)
    for name, value in recorded.items():
        assert abs(measured[name] - value) < 1e-6, (name, measured[name], value)


def test_train_mixture_runs_and_is_deterministic():
    from course_utils.model.train import mixture_model_config, train_mixture

    config = mixture_model_config(d_model=16, num_heads=2, num_layers=1, d_mlp=32)
    runs = [train_mixture(config, steps=3, seed=5, eval_every=3, progress=False) for _ in range(2)]
    (first, history), (second, _) = runs
    assert {"induction", "agreement", "attractor", "both"} <= set(history.eval_metrics[-1])
    for (name, a), b in zip(first.state_dict().items(), second.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
