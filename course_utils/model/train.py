"""Train the tiny transformer on the course's tasks, on CPU in seconds.

From a notebook::

    model, history = train_induction(steps=400, seed=0)
    plt.plot(history.steps, history.loss)

From a shell (``--out`` writes a checkpoint, see :mod:`course_utils.model.checkpoint`)::

    python -m course_utils.model.train induction --seed 0 --steps 600 --out data/checkpoints/induction
    python -m course_utils.model.train agreement --seed 0 --steps 500 --out data/checkpoints/agreement
    python -m course_utils.model.train mixture --seed 0 --steps 800 --out data/checkpoints/mixture

``python -m course_utils.bench train`` times both (:mod:`course_utils.bench.train_speed`).

:class:`History` is a record filled step by step by :func:`train_model`: it checks its fields when
built and again in each of its methods, as they may have been appended to (or changed) since.
"""

from __future__ import annotations

import argparse
import functools
import math
import numbers
import shlex
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F
from tqdm import tqdm  # the text bar: no widget state is stored in executed notebooks

from ..attention.validation import (
    check_callable,
    check_fits_in_memory,
    check_flag,
    check_increasing,
    check_int,
    check_model_holds_values,
    check_not_meta_device,
    check_record,
    check_weights_finite,
    finite,
    real_number,
    shown,
)
from ..env import check_seed, gradients_on, pick_device, torch_threads
from ..tasks.synthetic import (
    AgreementBatch,
    AgreementTask,
    InductionBatch,
    InductionTask,
    MixtureTask,
    agreement_accuracy,
    induction_accuracy,
)
from .transformer import ModelConfig, TinyTransformer

__all__ = [
    "TrainConfig",
    "History",
    "train_model",
    "induction_model_config",
    "agreement_model_config",
    "train_induction",
    "train_agreement",
    "mixture_model_config",
    "train_mixture",
    "evaluate_mixture",
    "evaluate_induction",
    "evaluate_agreement",
    "main",
]


DEFAULT_WARMUP_STEPS = 20
#: The most optimiser steps one run takes (the course's runs take 500-800): a mistyped 10**12
#: would train until killed, so it is refused before the model is built.
MAX_STEPS = 100_000


@dataclass(frozen=True)
class TrainConfig:
    """Optimiser settings: AdamW, linear warm-up, then constant or cosine decay to 10 %.
    Frozen, so the settings checked when it is built are the ones :func:`train_model` uses
    (``dataclasses.replace(config, steps=100)`` makes a changed copy, checked again).

    ``grad_clip`` is the largest gradient norm an update may use; ``0`` turns clipping off (the
    gradients are used as they are, not scaled to zero). ``warmup_steps`` defaults to 20, or to
    ``steps`` for a shorter run (the rate then reaches ``lr`` at the last step); a warm-up longer
    than the run, asked for by name, is refused: the rate would never reach ``lr``.

    ``lr`` (> 0), ``weight_decay`` and ``grad_clip`` (>= 0) are any finite real numbers (a NumPy
    float such as ``np.float32(0.5)`` too), kept as Python floats; a bool, str or None is a
    TypeError, NaN, infinity or a number out of range a ValueError, each naming the field."""

    steps: int = 600
    lr: float = 1e-2
    weight_decay: float = 0.01
    warmup_steps: int | None = None  # None: min(20, steps)
    decay: bool = True  # cosine decay after the warm-up
    grad_clip: float = 1.0

    def __post_init__(self) -> None:
        # stored back as Python ints: a NumPy int stayed and the config no longer went to JSON (battery 29)
        object.__setattr__(self, "steps", check_int(self.steps, "TrainConfig.steps", minimum=1,
                                                    maximum=MAX_STEPS))
        if self.warmup_steps is None:
            object.__setattr__(self, "warmup_steps", min(DEFAULT_WARMUP_STEPS, self.steps))
        object.__setattr__(self, "warmup_steps", check_int(self.warmup_steps, "TrainConfig.warmup_steps",
                                                           minimum=0))
        if self.warmup_steps > self.steps:
            raise ValueError(f"TrainConfig.warmup_steps must be at most steps={self.steps} (the learning "
                             f"rate climbs to "
                             f"lr over the warm-up, so a longer one never reaches it), got "
                             f"{self.warmup_steps}; leave it out for min(20, steps)")
        check_flag(self.decay, "TrainConfig.decay")
        for name, low in (("lr", "> 0"), ("weight_decay", ">= 0"), ("grad_clip", ">= 0")):
            # any real number (np.float32 too), stored as a Python float; 10**400 is named (battery 27)
            value = real_number(getattr(self, name), f"TrainConfig.{name}", "a number such as 0.01")
            if not math.isfinite(value) or value < 0 or (low == "> 0" and value == 0):
                raise ValueError(f"TrainConfig.{name} must be a finite number {low}, got {shown(value)}")
            object.__setattr__(self, name, value)

    def lr_at(self, step: int) -> float:
        """Learning rate for optimiser step ``step`` (0-based, an int below ``steps``): a linear
        climb to ``lr`` over the warm-up, then ``lr`` or a cosine decay to ``lr / 10``."""
        step = check_int(step, "step", minimum=0, maximum=self.steps - 1)
        warmup = self.warmup_steps
        if step < warmup:
            return self.lr * (step + 1) / warmup
        if not self.decay:
            return self.lr
        progress = (step - warmup) / max(1, self.steps - warmup)
        return self.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(progress * math.pi)))


@dataclass
class History:
    """What happened during training, ready for a loss curve (all plain Python, JSON-able).

    ``loss[i]`` is the training loss at step ``steps[i]`` (1-based). ``eval_steps`` and
    ``eval_metrics`` hold the held-out metrics measured every ``eval_every`` steps.
    ``train_seconds`` counts making batches and optimiser steps (not evaluations);
    ``steps_to_target``/``seconds_to_target`` are the first evaluation at which
    ``target_metric`` reached ``target`` (``None`` if never). ``task`` is a label, any str
    (:func:`train_model`'s ``task``, ``"custom"`` by default), not a choice from a list.

    A metric may be NaN (an accuracy over a subset the evaluation batch does not hold;
    :func:`train_model` warns) but not infinite. The record is filled step by step during
    training, so it stays mutable (its lists are appended to): instead of trusting fields that
    may have changed since it was built, every method (:attr:`final_metrics`, :meth:`metric`,
    :meth:`to_dict`) checks them all again first, and names a bad one (a NaN loss, which
    :func:`train_model` never records, a ``None`` in ``eval_metrics``, steps out of order)
    rather than answering from it.

    ``device`` is where the run trained: a device string torch parses (``"cpu"``, ``"cuda:0"``;
    not ``"meta"``, which trains nothing). It need not be present on this machine: a history
    saved on a GPU machine is read back on a CPU one.
    """

    task: str
    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_metrics: list[dict[str, float]] = field(default_factory=list)
    train_seconds: float = 0.0
    target_metric: str | None = None
    target: float | None = None
    steps_to_target: int | None = None
    seconds_to_target: float | None = None
    device: str = "cpu"

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Every field, and the fields against each other: run when built and by each method."""
        # an evaluation metric may be NaN (train warns) or negative
        # task is the label the history is printed and saved under: '' would print a blank name
        check_record(self, nan_ok=("eval_metrics",), signed=("eval_metrics", "target"), nonempty=("task",))
        _check_history_fields(self)

    @property
    def final_metrics(self) -> dict[str, float]:
        """A copy of the last evaluation's metrics (``{}`` when no evaluation ran), after checking
        the fields."""
        self._check()
        return dict(self.eval_metrics[-1]) if self.eval_metrics else {}  # a copy: the record stays as it is

    def metric(self, name: str) -> list[float]:
        """One evaluation metric over time (aligned with ``eval_steps``). A name no evaluation
        recorded (a typo, or a run without ``evaluate``) is a KeyError listing the recorded
        names, not an empty curve."""
        self._check()
        recorded = sorted({key for m in self.eval_metrics for key in m})
        if name not in recorded:
            raise KeyError(f"name {shown(name)} is not a metric this history recorded; recorded: "
                           f"{recorded or 'none (no evaluation ran: pass evaluate= to train_model)'}")
        missing = [step for step, m in zip(self.eval_steps, self.eval_metrics, strict=False) if name not in m]
        if missing:
            raise KeyError(f"metric {shown(name)} is missing from the evaluations at steps {missing[:5]}")
        return [m[name] for m in self.eval_metrics]

    def to_dict(self) -> dict:
        """The fields as plain Python (JSON-able), after checking them."""
        self._check()
        return asdict(self)


def _check_history_fields(history: History) -> None:
    """The per-step lists of a :class:`History` pair up (one loss per step, one set of metrics
    per evaluation step), their steps strictly increase (a curve goes forward in time, and
    :func:`train_model` records each step once), and a target is reached with both a step and a
    time, for a named ``target_metric``, at one of ``eval_steps``; a ``target`` has a
    ``target_metric``, which every entry of ``eval_metrics`` holds (a name none holds, or ``''``,
    could never reach its target); no evaluation comes after the last step in ``steps`` (a history that keeps
    only its evaluation curve, ``steps`` empty, is accepted: the tests build such a record to
    read a metric); ``device`` is one torch parses (present here or not)."""
    try:
        parsed = torch.device(history.device)
    except RuntimeError:
        raise ValueError(f"History.device must be the device the run trained on, as torch names it "
                         f"('cpu', 'cuda', 'cuda:0'), got {shown(history.device)}") from None
    check_not_meta_device(parsed, "History.device", asked=history.device)
    for steps, values in (("steps", "loss"), ("eval_steps", "eval_metrics")):
        n, m = len(getattr(history, steps)), len(getattr(history, values))
        if n != m:
            raise ValueError(f"History.{values} must hold one entry per step in History.{steps}: "
                             f"History.{steps} has {n}, History.{values} has {m}")
        check_increasing(getattr(history, steps), f"History.{steps}")
    for i, metrics in enumerate(history.eval_metrics):  # NaN is allowed (a mean over an empty subset)
        infinite = next((name for name, value in metrics.items() if math.isinf(value)), None)
        if infinite is not None:
            raise ValueError(f"History.eval_metrics[{i}][{shown(infinite)}] must be a finite number or "
                             f"NaN, got "
                             f"{shown(metrics[infinite])}")
    reached = {"steps_to_target": history.steps_to_target, "seconds_to_target": history.seconds_to_target}
    if (history.steps_to_target is None) != (history.seconds_to_target is None):
        raise ValueError(f"History.steps_to_target and History.seconds_to_target are both set (the target "
                         f"was reached) or both None, got {reached}")
    if history.steps_to_target is not None and (history.target_metric is None or history.target is None):
        raise ValueError(f"History.steps_to_target is set ({history.steps_to_target}) but "
                         f"History.target_metric is {shown(history.target_metric)} and History.target "
                         f"{shown(history.target)}: a target is reached by a named metric reaching a level")
    if history.target_metric is not None:  # train_model checks every evaluation returns it
        lacking = next((i for i, metrics in enumerate(history.eval_metrics)
                        if history.target_metric not in metrics), None)
        if lacking is not None:
            raise ValueError(f"History.target_metric must be one of the metrics History.eval_metrics "
                             f"holds (train_model checks every evaluation returns it), got "
                             f"{shown(history.target_metric)}; History.eval_metrics[{lacking}] holds "
                             f"{sorted(history.eval_metrics[lacking])}")
    if history.target is not None and history.target_metric is None:  # as train_model refuses it
        raise ValueError(f"History.target is {shown(history.target)} but History.target_metric is None: "
                         f"a target "
                         f"is the level a named metric must reach (train_model refuses target without "
                         f"target_metric)")
    if history.steps_to_target is not None and history.steps_to_target not in history.eval_steps:
        raise ValueError(f"History.steps_to_target must be one of History.eval_steps (the target is reached "
                         f"at an evaluation), got {shown(history.steps_to_target)}; History.eval_steps is "
                         f"{str(history.eval_steps):.80}")
    if history.steps and history.eval_steps and history.eval_steps[-1] > history.steps[-1]:
        raise ValueError(f"History.eval_steps must not go past the last training step in History.steps "
                         f"({history.steps[-1]}): an evaluation follows the step it measures; got "
                         f"History.eval_steps {str(history.eval_steps):.80}")


def _build_model(config: ModelConfig, seed: int, device: torch.device) -> TinyTransformer:
    """Initialise from ``seed`` without touching the global random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = TinyTransformer(config)
    return model.to(device)


def train_model(
    model: TinyTransformer,
    sample_batch: Callable[[torch.Generator], tuple[torch.Tensor, torch.Tensor]],
    train_config: TrainConfig,
    *,
    seed: int = 0,
    evaluate: Callable[[TinyTransformer], dict[str, float]] | None = None,
    eval_every: int = 25,
    target_metric: str | None = None,
    target: float | None = None,
    stop_at_target: bool = False,
    progress: bool = True,
    task: str = "custom",
    num_threads: int | None = 1,
) -> History:
    """Next-token training with AdamW.

    ``sample_batch(generator) -> (tokens (B, T), targets (B, T))`` with ``-100`` for
    targets to ignore; batches come from a CPU generator seeded with ``seed``, so a run
    is reproducible. ``evaluate(model) -> metrics`` runs every ``eval_every`` steps and
    at the end (in eval mode, without gradients). ``num_threads``: CPU threads torch may
    use meanwhile (restored afterwards); one is fastest for a model this small and stays
    fast on a busy machine, where several threads can be many times slower. ``None``
    keeps torch's setting.

    ``target`` is the level ``target_metric`` (a key of ``evaluate``'s dict) must reach: a
    ``target`` without ``target_metric``, or a ``target_metric`` without ``evaluate``, measures
    nothing and is refused, naming both. ``target_metric`` without ``target`` is allowed: that
    metric is then shown in the progress bar and checked to be returned, and no step to target
    is recorded.

    A metric that comes back NaN is recorded as NaN, with a RuntimeWarning naming it (once per
    run), not refused: an accuracy over a subset the evaluation batch does not hold is NaN by
    design (``agreement_accuracy``'s ``"attractor"`` for a task without attractor sentences,
    e.g. ``train_agreement(task=AgreementTask(templates=("simple",)))``, at every evaluation),
    and refusing it would make such a run impossible. A NaN ``target_metric`` is refused (it
    cannot be compared with ``target``), and so is an infinite metric (ValueError naming it).

    Training changes ``model`` in place, step by step: a run that stops early (Ctrl-C, an error in
    ``sample_batch`` or ``evaluate``) keeps the steps it took: the weights are those after the
    last finished optimizer step (AdamW's state, made inside the run, is dropped with it; no
    step is undone). Only the model's mode is put back: train or eval, as it was given, not
    left halfway. To start again from the weights you had, keep a copy first
    (``copy.deepcopy(model)``) or reload the checkpoint.
    """
    with torch_threads(num_threads), gradients_on("train_model"), _mode_put_back_if_stopped(model):
        return _train_model(model, sample_batch, train_config, seed, evaluate, eval_every,
                            target_metric, target, stop_at_target, progress, task)


@contextmanager
def _mode_put_back_if_stopped(model: object) -> Iterator[None]:
    """Training that stops early (Ctrl-C, an error) leaves ``model`` in the mode it was given in,
    not in train mode halfway (dropout on in the evaluation that follows); a run that finishes
    leaves it in eval mode, as documented. (Gradients and threads are put back by their own
    context managers; a ``model`` that is no module is refused by the training itself.)"""
    was_training = model.training if isinstance(model, torch.nn.Module) else None
    try:
        yield
    except BaseException:
        if was_training is not None:
            model.train(was_training)
        raise


def _check_batch(batch: object, step: int, model: TinyTransformer) -> tuple[torch.Tensor, torch.Tensor]:
    """``sample_batch``'s result must be a pair of integer tensors ``(tokens, targets)`` of one
    shape (B, T), with targets in ``0..vocab_size-1`` or ``-100`` (ignored); returned as long
    tensors on the model's device. The tokens are checked as the model's forward pass would
    check them (ids, length, at least one token), but named as ``sample_batch``'s output."""
    if not (isinstance(batch, tuple | list) and len(batch) == 2
            and all(isinstance(t, torch.Tensor) for t in batch)):
        found = (f"a Tensor of shape {tuple(batch.shape)}" if isinstance(batch, torch.Tensor)
                 else f"a {type(batch).__name__}")
        raise TypeError(f"sample_batch(generator) must return a pair (tokens (B, T), targets (B, T)); "
                        f"at step {step} it returned {found}")
    tokens, targets = batch
    for name, t in (("tokens", tokens), ("targets", targets)):
        if t.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"sample_batch(generator) must return integer {name}; at step {step} "
                            f"they are {t.dtype}")
    if tokens.ndim != 2 or tokens.shape != targets.shape:
        raise ValueError(f"sample_batch(generator) must return tokens and targets of one shape (B, T); "
                         f"at step {step} they are {tuple(tokens.shape)} and {tuple(targets.shape)}")
    vocab_size = model.config.vocab_size
    bad = (targets != -100) & ((targets < 0) | (targets >= vocab_size))
    if bool(bad.any()):
        value = int(targets[bad][0])
        raise ValueError(f"sample_batch(generator) returned targets outside the vocabulary at step {step}: "
                         f"{value} (expected 0..{vocab_size - 1}, or -100 for a position to ignore)")
    device = next(model.parameters()).device
    tokens, targets = tokens.to(device, torch.long), targets.to(device, torch.long)  # any int: lossless
    model._check_tokens(tokens, name=f"sample_batch(generator)'s tokens at step {step}")
    return tokens, targets


def _check_metrics(metrics: object, step: int, target_metric: str | None) -> None:
    """``evaluate``'s result must be a dict of metric name -> number, holding ``target_metric``."""
    if not (isinstance(metrics, dict) and all(isinstance(k, str) for k in metrics)
            and all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in metrics.values())):
        raise TypeError(f"evaluate(model) must return a dict of metric name -> number; at step {step} it "
                        f"returned {type(metrics).__name__} {str(metrics)[:80]}")
    infinite = next((name for name, value in metrics.items() if math.isinf(value)), None)
    if infinite is not None:  # NaN is warned about and kept (see train_model)
        raise ValueError(f"evaluate(model) returned {shown(metrics[infinite])} for metric {shown(infinite)} "
                         f"at step "
                         f"{step}; a metric must be a finite number (or NaN for a mean over an empty subset)")
    if target_metric is not None and target_metric not in metrics:
        raise KeyError(f"target_metric {shown(target_metric)} is not among the metrics evaluate(model) "
                       f"returned "
                       f"at step {step}: {sorted(metrics)}")
    if target_metric is not None and math.isnan(metrics[target_metric]):
        raise ValueError(f"evaluate(model) returned NaN for target_metric {shown(target_metric)} at "
                         f"step {step}; "
                         "it must be a number to compare with target (a mean over an empty set?)")


def _check_target_arguments(evaluate: object, target_metric: object, target: object) -> None:
    """``target`` needs ``target_metric`` (the metric that must reach it), which needs ``evaluate``
    (what returns it); ``target_metric`` is None or a str."""
    if target_metric is not None and not isinstance(target_metric, str):
        raise TypeError(f"target_metric must be None or the name (a str) of a metric evaluate(model) "
                        f"returns, got {type(target_metric).__name__} {shown(target_metric, 60)}")
    if target is not None and target_metric is None:
        raise ValueError(f"target={shown(target)} needs target_metric (the metric of evaluate(model) "
                         f"that must "
                         f"reach it), but target_metric is None; pass both, or neither")
    if target_metric is not None and evaluate is None:
        raise ValueError(f"target_metric={shown(target_metric)} names a metric of evaluate(model), but "
                         f"evaluate "
                         f"is None; pass evaluate=..., or leave target_metric (and target) None")


def _warn_nan_metrics(metrics: dict, step: int, warned: set[str]) -> None:
    """Name, once per run, each metric that came back NaN (e.g. an accuracy over a subset the
    evaluation batch does not hold): it is recorded, but a curve of it is empty, and
    save_checkpoint refuses it."""
    new = sorted(k for k, v in metrics.items() if math.isnan(v) and k not in warned)
    if new:
        import warnings

        warned.update(new)
        warnings.warn(f"evaluate(model) returned NaN for {new} at step {step} (a mean over an empty "
                      "subset?); recorded as NaN", RuntimeWarning, stacklevel=4)


def _train_model(model, sample_batch, train_config, seed, evaluate, eval_every, target_metric, target,
                 stop_at_target, progress, task) -> History:
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    check_callable(sample_batch, "sample_batch", "a function generator -> (tokens, targets)", nargs=1)
    check_model_holds_values(model)  # before the first batch and evaluation read from it
    inference = [name for name, p in model.named_parameters() if p.is_inference()]
    if inference:  # else the first step fails in torch: "abs(): functions with out=... (battery 32)
        raise ValueError(f"model must hold ordinary parameters to train, but {len(inference)} are inference "
                         f"tensors (the first: {shown(inference[0], 80)}): the model was built or loaded "
                         "under torch.inference_mode(), and autograd cannot train those; build or load it "
                         "outside inference_mode (torch.no_grad() is the mode for inference-only work)")
    # (a NaN weight made the first loss NaN, blamed on the learning rate and the data: battery 30)
    check_weights_finite(model, "training from a NaN or infinite weight gives a NaN loss: reload the "
                         "checkpoint")
    if not any(p.requires_grad for p in model.parameters()):  # else backward fails naming nothing
        raise ValueError("model must have parameters to train, but none requires grad (all frozen with "
                         "requires_grad_(False)?): unfreeze those to train with p.requires_grad_(True)")
    if not isinstance(train_config, TrainConfig):
        raise TypeError(f"train_config must be a TrainConfig, got {type(train_config).__name__}")
    seed = check_seed(seed)  # a Python int: torch.Generator.manual_seed takes no NumPy int
    eval_every = check_int(eval_every, "eval_every", minimum=1)
    check_flag(stop_at_target, "stop_at_target")
    check_flag(progress, "progress")
    if evaluate is not None:  # before the progress bar starts, not at the first evaluation
        check_callable(evaluate, "evaluate", "None or a function model -> {metric name: number}", nargs=1)
    if target is not None and (isinstance(target, bool) or not isinstance(target, numbers.Real)
                               or not finite(target)):
        raise ValueError(f"target must be a finite number (the level target_metric must reach) or None, "
                         f"got {type(target).__name__} {shown(target)}")
    if stop_at_target:
        lacking = [name for name, value in (("evaluate", evaluate), ("target_metric", target_metric),
                                            ("target", target)) if value is None]
        if lacking:
            raise ValueError(f"stop_at_target=True stops when evaluate(model)[target_metric] reaches "
                             f"target, but {' and '.join(lacking)} {'is' if len(lacking) == 1 else 'are'} "
                             f"None; pass {', '.join(lacking)} or leave stop_at_target False")
    _check_target_arguments(evaluate, target_metric, target)
    device = next(model.parameters()).device
    history = History(task=task, target_metric=target_metric, target=target, device=str(device))
    generator = torch.Generator().manual_seed(seed)
    decay, no_decay = [], []
    for name, p in model.named_parameters():  # no weight decay on biases, norms, embeddings
        (decay if p.ndim == 2 and "embedding" not in name else no_decay).append(p)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": train_config.weight_decay},
         {"params": no_decay, "weight_decay": 0.0}],
        lr=train_config.lr, betas=(0.9, 0.98),
    )
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warned: set[str] = set()  # metrics already reported as NaN

    def run_eval(step: int) -> None:
        if evaluate is None:
            return
        model.eval()
        with torch.no_grad():
            metrics = evaluate(model)
        model.train()
        _check_metrics(metrics, step, target_metric)
        _warn_nan_metrics(metrics, step, warned)
        history.eval_steps.append(step)
        history.eval_metrics.append(dict(metrics))  # a copy: evaluate may keep and change its dict
        reached = target_metric is not None and target is not None and metrics[target_metric] >= target
        if reached and history.steps_to_target is None:
            history.steps_to_target, history.seconds_to_target = step, history.train_seconds

    model.train()
    bar = tqdm(range(1, train_config.steps + 1), desc=task, disable=not progress, leave=False)
    for step in bar:
        sync()
        start = time.perf_counter()  # the clock covers making the batch and the update
        tokens, targets = _check_batch(sample_batch(generator), step, model)
        for group in optimizer.param_groups:
            group["lr"] = train_config.lr_at(step - 1)
        logits, _ = model(tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        loss_value = loss.item()  # also waits for the device
        if not math.isfinite(loss_value):
            bar.close()
            if not bool((targets != -100).any()):  # the mean over no token: NaN (battery 27)
                raise ValueError(f"sample_batch's targets at step {step} are all -100 (ignored), so the "
                                 f"batch has no token to learn from and its loss is {loss_value}: give "
                                 f"each batch at least one target in 0..vocab_size-1")
            last = (f"the last finite loss was {history.loss[-1]:.4g} at step {history.steps[-1]}"
                    if history.loss else "no step had a finite loss")
            raise FloatingPointError(
                f"training diverged: the loss is {loss_value} at step {step} ({last}); try a "
                f"smaller lr (now {train_config.lr:g}) or check the data")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if train_config.grad_clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip)
        optimizer.step()
        history.train_seconds += time.perf_counter() - start
        history.steps.append(step)
        history.loss.append(loss_value)
        if step % eval_every == 0 or step == train_config.steps:
            run_eval(step)
            if history.eval_metrics and target_metric:
                bar.set_postfix(loss=f"{loss_value:.3f}",
                                **{target_metric: f"{history.eval_metrics[-1][target_metric]:.3f}"})
            if stop_at_target and history.steps_to_target is not None:
                break
    bar.close()
    model.eval()
    return history


# -- induction ------------------------------------------------------------------------
INDUCTION_TASK = InductionTask()
AGREEMENT_TASK = AgreementTask()


@functools.lru_cache(maxsize=16)
def _cached_induction_eval(task: InductionTask, batch_size: int, seed: int, heldout: bool) -> InductionBatch:
    return task.eval_batch(batch_size, seed, heldout=heldout)


@functools.lru_cache(maxsize=16)
def _cached_agreement_eval(task: AgreementTask, batch_size: int, seed: int) -> AgreementBatch:
    return task.eval_batch(batch_size, seed)


def _task_model_config(function: str, task: object, needed_len: int, base: dict, overrides: dict
                       ) -> ModelConfig:
    """``ModelConfig(**base, **overrides)`` for one of the course's tasks, built by ``function``
    (``"induction_model_config"``, ...): an override of ``vocab_size`` below the task's
    vocabulary (its ids would not fit the embedding) or of ``max_len`` below its sequence length
    ``needed_len`` is a ValueError naming the override and what the task needs. A larger one is
    taken (a model may have room to spare); the task trainers ask for the task's exact
    vocabulary."""
    config = ModelConfig(**{**base, **overrides})
    need = {"vocab_size": (task.vocab_size, f"its token ids go up to {task.vocab_size - 1}"),
            "max_len": (needed_len, f"its sequences are {needed_len} tokens long")}
    for name, (needed, why) in need.items():
        if getattr(config, name) < needed:
            raise ValueError(f"{function}'s override {name}={getattr(config, name)} does not fit the task "
                             f"{type(task).__name__}: it needs {name} >= {needed} ({why}); leave {name} "
                             f"out for {needed}")
    return config


def induction_model_config(**overrides) -> ModelConfig:
    """The course's induction model: 2 layers, attention only, d=64, 4 heads. ``overrides`` are
    :class:`ModelConfig` fields; a ``vocab_size`` or ``max_len`` below the task's is refused."""
    base = dict(vocab_size=INDUCTION_TASK.vocab_size, max_len=INDUCTION_TASK.seq_len,
                d_model=64, num_heads=4, num_layers=2, mlp=False)
    return _task_model_config("induction_model_config", INDUCTION_TASK, INDUCTION_TASK.seq_len, base,
                              overrides)


def agreement_model_config(**overrides) -> ModelConfig:
    """The course's agreement model: 2 layers with an MLP, d=64, 4 heads. ``overrides`` are
    :class:`ModelConfig` fields; a ``vocab_size`` or ``max_len`` below the task's is refused."""
    base = dict(vocab_size=AGREEMENT_TASK.vocab_size, max_len=AGREEMENT_TASK.max_len,
                d_model=64, num_heads=4, num_layers=2, mlp=True)
    return _task_model_config("agreement_model_config", AGREEMENT_TASK, AGREEMENT_TASK.max_len, base,
                              overrides)


@torch.no_grad()
def evaluate_induction(
    model: TinyTransformer, task: InductionTask = INDUCTION_TASK, *, batch_size: int = 512, seed: int = 1234
) -> dict[str, float]:
    """Induction accuracy on a fixed batch of held-out periods (``heldout``) and of
    training periods (``train_periods``), plus one entry per held-out period: NaN for a period
    the batch holds no sequence of (a small ``batch_size`` can miss one), so that every
    evaluation has the same keys."""
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    seed = check_seed(seed)  # before the lru_cache: its key takes True as 1
    _check_task(task, InductionTask, "induction")
    _check_model_for_task(model, task, task.seq_len, "induction")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    result = {}
    for name, heldout in (("heldout", True), ("train_periods", False)):
        batch = _cached_induction_eval(task, batch_size, seed, heldout)
        logits, _ = model(batch.tokens.to(device))
        result[name] = induction_accuracy(logits, batch)
        if heldout:
            for p in task.heldout_periods:
                keep = batch.periods == p
                if not keep.any():
                    result[f"period_{p}"] = float("nan")
                    continue
                sub = InductionBatch(batch.tokens[keep], batch.periods[keep], batch.scored[keep])
                result[f"period_{p}"] = induction_accuracy(logits[keep.to(device)], sub)
    model.train(was_training)
    return result


def _check_fits_task(config: ModelConfig, task, needed_len: int, name: str, what: str) -> None:
    """``config`` (the ``what`` being checked: a config or a model's) has the task's vocabulary
    and room for its sequences."""
    if config.vocab_size != task.vocab_size or config.max_len < needed_len:
        raise ValueError(
            f"{what} (vocab_size={config.vocab_size}, max_len={config.max_len}) does not fit the "
            f"task ({name}: vocab_size={task.vocab_size}, sequence length {needed_len})"
        )


def _check_task(task: object, kind: type, name: str) -> None:
    """``task`` is a ``kind`` (InductionTask, ...); else a TypeError naming what arrived."""
    if not isinstance(task, kind):
        raise TypeError(f"task must be {'an' if kind.__name__[0] in 'AEIOU' else 'a'} {kind.__name__} (the "
                        f"{name} task, e.g. {kind.__name__}()), got {type(task).__name__} {shown(task, 60)}")


def _check_model_for_task(model: object, task, needed_len: int, name: str) -> None:
    """``model`` is a TinyTransformer whose config fits the task (checked before any forward pass)."""
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__} {shown(model, 60)}")
    _check_fits_task(model.config, task, needed_len, name, "the model's config")
    # a NaN weight was reported as "logits hold NaN" (battery 30): name the weight itself
    check_weights_finite(model, "every logit computed from it is NaN, so no accuracy can be read: "
                         "reload the checkpoint")


def _check_accuracy_target(target: object) -> None:
    """The task trainers' targets are accuracies: a number in 0..1 (above 1 is never reached,
    so ``steps_to_target`` would stay None and ``stop_at_target`` would never stop)."""
    if isinstance(target, bool) or not isinstance(target, numbers.Real) or not finite(target):
        raise TypeError(f"target must be an accuracy, a number in 0..1, got {type(target).__name__} "
                        f"{shown(target)}")
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target must be an accuracy in 0..1 (a fraction of answers right), got "
                         f"{shown(target)}")


def _train_on_task(config, task, needed_len, *, seed, device, steps, lr, batch_size, evaluate,
                   eval_every, target_metric, target, stop_at_target, progress, name, num_threads):
    """Shared body of the task trainers: check the config fits the task, build, train."""
    _check_accuracy_target(target)
    if not isinstance(config, ModelConfig):
        raise TypeError(f"config must be a ModelConfig or None (a dict converts with "
                        f"ModelConfig.from_dict(d)), got {type(config).__name__}")
    _check_fits_task(config, task, needed_len, name, "config")
    seed = check_seed(seed)  # a Python int, for torch and for train_model
    device = pick_device(device, "device")
    model = _build_model(config, seed, device)

    def sample(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        batch = task.sample(batch_size, generator)
        return batch.tokens, batch.targets

    history = train_model(
        model, sample, TrainConfig(steps=steps, lr=lr), seed=seed, evaluate=evaluate,
        eval_every=eval_every, target_metric=target_metric, target=target,
        stop_at_target=stop_at_target, progress=progress, task=name, num_threads=num_threads,
    )
    return model, history


def train_induction(
    config: ModelConfig | None = None,
    steps: int = 600,
    seed: int = 0,
    *,
    task: InductionTask = INDUCTION_TASK,
    lr: float = 1e-2,
    batch_size: int = 64,
    eval_every: int = 25,
    stop_at_target: bool = False,
    target: float = 0.9,
    progress: bool = True,
    device: str | torch.device | None = None,
    num_threads: int | None = 1,
) -> tuple[TinyTransformer, History]:
    """Train an attention-only model to copy repeated sequences (induction heads).

    Returns ``(model in eval mode, history)``; ``history.eval_metrics`` holds the
    held-out-period accuracy every ``eval_every`` steps.
    """
    _check_task(task, InductionTask, "induction")
    config = induction_model_config() if config is None else config
    model, history = _train_on_task(
        config, task, task.seq_len, seed=seed, device=device, steps=steps, lr=lr,
        batch_size=batch_size, evaluate=lambda m: evaluate_induction(m, task), eval_every=eval_every,
        target_metric="heldout", target=target, stop_at_target=stop_at_target, progress=progress,
        name="induction", num_threads=num_threads,
    )
    return model, history


# -- agreement ------------------------------------------------------------------------
@torch.no_grad()
def evaluate_agreement(
    model: TinyTransformer, task: AgreementTask = AGREEMENT_TASK, *, batch_size: int = 2000, seed: int = 4321
) -> dict[str, float]:
    """Agreement accuracy on a fixed evaluation set: overall, with/without attractors,
    per template."""
    batch_size = check_int(batch_size, "batch_size", minimum=1)
    seed = check_seed(seed)  # before the lru_cache: its key takes True as 1
    _check_task(task, AgreementTask, "agreement")
    _check_model_for_task(model, task, task.max_len, "agreement")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    batch = _cached_agreement_eval(task, batch_size, seed)
    logits, _ = model(batch.tokens.to(device))
    model.train(was_training)
    return agreement_accuracy(logits, batch)


def train_agreement(
    config: ModelConfig | None = None,
    steps: int = 500,
    seed: int = 0,
    *,
    task: AgreementTask = AGREEMENT_TASK,
    lr: float = 1e-2,
    batch_size: int = 64,
    eval_every: int = 50,
    stop_at_target: bool = False,
    target: float = 0.99,
    progress: bool = True,
    device: str | torch.device | None = None,
    num_threads: int | None = 1,
) -> tuple[TinyTransformer, History]:
    """Train a model with MLPs on the agreement grammar (language-model loss on every word).

    ``history.eval_metrics`` holds agreement accuracy (``all``, ``attractor``,
    ``no_attractor``, per template) every ``eval_every`` steps.
    """
    _check_task(task, AgreementTask, "agreement")
    config = agreement_model_config() if config is None else config
    model, history = _train_on_task(
        config, task, task.max_len, seed=seed, device=device, steps=steps, lr=lr,
        batch_size=batch_size, evaluate=lambda m: evaluate_agreement(m, task), eval_every=eval_every,
        target_metric="all", target=target, stop_at_target=stop_at_target, progress=progress,
        name="agreement", num_threads=num_threads,
    )
    return model, history


# -- mixture (lesson 6) ------------------------------------------------------------------
MIXTURE_TASK = MixtureTask()


def mixture_model_config(**overrides) -> ModelConfig:
    """Lesson 6's model: 3 layers x 8 heads (24 heads), MLPs of width 128, d=64 (dk=8), both tasks.
    ``overrides`` are :class:`ModelConfig` fields; a ``vocab_size`` or ``max_len`` below the task's
    is refused."""
    base = dict(vocab_size=MIXTURE_TASK.vocab_size, max_len=MIXTURE_TASK.seq_len,
                d_model=64, num_heads=8, num_layers=3, mlp=True, d_mlp=128)
    return _task_model_config("mixture_model_config", MIXTURE_TASK, MIXTURE_TASK.seq_len, base, overrides)


@functools.lru_cache(maxsize=4)
def _cached_mixture_eval(task: MixtureTask) -> tuple[InductionBatch, AgreementBatch]:
    return task.induction_eval(), task.agreement_eval()


@torch.no_grad()
def evaluate_mixture(model: TinyTransformer, task: MixtureTask = MIXTURE_TASK) -> dict[str, float]:
    """Both tasks on their fixed evaluation batches: ``induction`` (held-out periods),
    ``agreement`` (all sentences), ``attractor`` (sentences with an attractor) and
    ``both`` (the lower of ``induction`` and ``attractor``)."""
    _check_task(task, MixtureTask, "mixture")
    _check_model_for_task(model, task, task.seq_len, "mixture")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    induction, sentences = _cached_mixture_eval(task)
    induction_logits, _ = model(induction.tokens.to(device))
    sentence_logits, _ = model(sentences.tokens.to(device))
    model.train(was_training)
    agreement = agreement_accuracy(sentence_logits, sentences)
    result = {"induction": induction_accuracy(induction_logits, induction), "agreement": agreement["all"],
              "attractor": agreement["attractor"]}
    result["both"] = min(result["induction"], result["attractor"])
    return result


def train_mixture(
    config: ModelConfig | None = None,
    steps: int = 800,
    seed: int = 0,
    *,
    task: MixtureTask = MIXTURE_TASK,
    lr: float = 1e-2,
    batch_size: int = 64,
    eval_every: int = 400,
    stop_at_target: bool = False,
    target: float = 0.95,
    progress: bool = True,
    device: str | torch.device | None = None,
    num_threads: int | None = 1,
) -> tuple[TinyTransformer, History]:
    """Train one model on both tasks: each batch is half induction, half agreement.

    ``history.eval_metrics`` holds :func:`evaluate_mixture` every ``eval_every`` steps.
    """
    _check_task(task, MixtureTask, "mixture")
    config = mixture_model_config() if config is None else config
    return _train_on_task(
        config, task, task.seq_len, seed=seed, device=device, steps=steps, lr=lr,
        batch_size=batch_size, evaluate=lambda m: evaluate_mixture(m, task), eval_every=eval_every,
        target_metric="both", target=target, stop_at_target=stop_at_target, progress=progress,
        name="mixture", num_threads=num_threads,
    )


TRAINERS = {"induction": train_induction, "agreement": train_agreement, "mixture": train_mixture}
DEFAULT_STEPS = {"induction": 600, "agreement": 500, "mixture": 800}


def _headline(task: str, metrics: dict[str, float]) -> str:
    if task == "induction":
        return (f"held-out-period accuracy {metrics['heldout']:.4f}, "
                f"training periods {metrics['train_periods']:.4f}")
    if task == "mixture":
        return (f"induction accuracy {metrics['induction']:.4f} (held-out periods), agreement "
                f"{metrics['agreement']:.4f} (with attractors {metrics['attractor']:.4f})")
    return (f"agreement accuracy {metrics['all']:.4f} (with attractors {metrics['attractor']:.4f}, "
            f"without {metrics['no_attractor']:.4f})")


def _main_train(args: argparse.Namespace, argv: list[str]) -> None:
    from .checkpoint import save_checkpoint

    trainer = TRAINERS[args.task]
    steps = DEFAULT_STEPS[args.task] if args.steps is None else args.steps
    model, history = trainer(steps=steps, seed=args.seed, lr=args.lr, batch_size=args.batch_size,
                             progress=not args.no_progress, device=args.device)
    metrics = history.final_metrics
    reached = (f"{history.target_metric} >= {history.target} at step {history.steps_to_target} "
               f"({history.seconds_to_target:.2f} s)" if history.steps_to_target else
               f"{history.target_metric} never reached {history.target}")
    print(f"{args.task}: {steps} steps in {history.train_seconds:.2f} s on {history.device}; {reached}")
    print(_headline(args.task, metrics))
    if args.out:
        command = shlex.join(["python", "-m", "course_utils.model.train", *argv])
        training = {"seed": args.seed, "steps": steps, "lr": args.lr, "batch_size": args.batch_size,
                    "steps_to_target": history.steps_to_target, "target_metric": history.target_metric,
                    "target": history.target, "train_seconds": round(history.train_seconds, 2),
                    "device": history.device}
        path = save_checkpoint(model, args.out, task=args.task, metrics=metrics, command=command,
                               training=training, replace_task=args.replace_task)
        print(f"wrote {path.with_suffix('.safetensors').name} and {path.name} to {path.parent}")


def main(argv: list[str] | None = None) -> None:
    """``python -m course_utils.model.train induction|agreement|mixture --seed S --steps N --out PATH``."""
    from .. import cli

    argv = cli.words(argv)
    parser = cli.ArgumentParser(prog="python -m course_utils.model.train", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("task", choices=sorted(TRAINERS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None,
                        help="default: induction 600, agreement 500, mixture 800")
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--device", default=None, help="cpu or cuda (default: cuda when present)")
    parser.add_argument("--out", default=None, help="checkpoint path stem, e.g. data/checkpoints/induction")
    parser.add_argument("--replace-task", action="store_true",
                        help="let --out replace a checkpoint of another task (or take another task's name)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    try:  # every option is checked before a step is trained
        _check_cli_args(args)
    except (TypeError, ValueError, OSError) as err:
        parser.error(str(err))

    # interrupted (Ctrl-C, SIGTERM): one line, exit 130/143 (__main__ runs this under cli.run);
    # save_checkpoint is all or nothing, so until it returns no checkpoint file was changed
    cli.leaving(f"no checkpoint was written, {shown(args.out)} was left as it was" if args.out
                else cli.NOTHING_WRITTEN)
    try:
        _main_train(args, argv)
    except (FloatingPointError, ValueError, OSError) as err:  # diverged, or the save failed
        parser.exit(1, f"{parser.prog}: error: {err}\n")
    if args.out:
        cli.leaving(f"the checkpoint {shown(args.out)} was written")


def _check_cli_args(args: argparse.Namespace) -> None:
    """The command line's values, each refused under its option's name: ``--steps 0`` is not
    read as "the default", an ``--out`` that cannot be written is found before training, and
    ``--replace-task`` without ``--out`` (nothing to replace) is refused, not ignored."""
    check_seed(args.seed, "--seed")
    if args.steps is not None:
        check_int(args.steps, "--steps", minimum=1, maximum=MAX_STEPS)
    if not (math.isfinite(args.lr) and args.lr > 0):
        raise ValueError(f"--lr must be a finite number > 0, got {shown(args.lr)}")
    check_int(args.batch_size, "--batch-size", minimum=1)
    _check_batch_fits(args.task, args.batch_size, "--batch-size")
    try:
        pick_device(args.device, "device")
    except (TypeError, ValueError) as err:
        raise ValueError(f"--device {shown(args.device)}: {err}") from None
    if args.replace_task and args.out is None:  # it would be dropped without a word
        raise ValueError("--replace-task lets --out replace another task's checkpoint; without --out "
                         "no checkpoint is written, so it would do nothing: give --out PATH or drop "
                         "--replace-task")
    if args.out is not None:
        _check_out_writable(args.out, args.task, args.replace_task)


def _check_batch_fits(task: str, batch_size: int, name: str) -> None:
    """Refuse, before the model is built, a batch whose logits ``(B, T, vocab)`` would not fit in
    memory in float32 with their gradient and softmax (three such tensors), under ``name``."""
    task_object = {"induction": INDUCTION_TASK, "agreement": AGREEMENT_TASK, "mixture": MIXTURE_TASK}[task]
    T = getattr(task_object, "seq_len", None) or task_object.max_len
    per_sequence = 3 * 4 * T * task_object.vocab_size
    check_fits_in_memory(batch_size * per_sequence, name, f"{batch_size:,} sequences of {T} tokens: "
                         f"float32 logits over {task_object.vocab_size} tokens, their gradient and softmax")


def _check_out_writable(out: str, task: str, replace_task: bool = False) -> None:
    """``--out``'s two files can be made: the folder exists or can be created, a file can be
    written in it, and neither target is a folder or a FIFO; without ``--replace-task``, no
    checkpoint of another task is there and the name is not another course task's (checked
    before training, as save_checkpoint checks it after). Whatever the probe makes is removed."""
    import os
    import tempfile
    from pathlib import Path

    from .. import cli
    from .checkpoint import _check_save_targets, _check_task_of_target, checkpoint_paths

    for path in (out, f"{out}.safetensors"):  # a name too long: a traceback from stat (battery 33)
        problem = cli.path_problem(path, "--out", "a checkpoint path stem (it gets .safetensors and .json)")
        if problem:
            raise ValueError(problem)
    if out.endswith(("/", "\\")):  # a new folder meant: the files would land beside it
        raise ValueError(f"--out {shown(out)} ends in a slash, so it names a folder; give a path stem "
                         f"inside it, "
                         f"e.g. {out}{task} (writes {task}.safetensors and {task}.json there)")
    if Path(out).is_dir():  # a stem names two files; a folder would get them beside it, not in it
        raise ValueError(f"--out {shown(out)} is a folder; give a path stem inside it, e.g. "
                         f"{Path(out) / task} (writes {task}.safetensors and {task}.json there)")
    try:
        weights_path, meta_path = checkpoint_paths(out)
        _check_save_targets(weights_path, meta_path)
        if not replace_task:
            _check_task_of_target(meta_path, task)
    except (TypeError, ValueError, IsADirectoryError) as err:  # a bare name's data/checkpoints/NAME folder
        raise ValueError(f"--out {shown(out)}: {err}") from None
    folder = weights_path.parent
    made = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        raise OSError(err.errno, f"--out {shown(out)}: cannot write in {folder} "
                                 f"({err.strerror or err})") from None
    finally:
        for path in made:  # innermost first: leave the disk as it was
            try:
                path.rmdir()
            except OSError:
                break


if __name__ == "__main__":
    from .. import cli

    cli.stop_at_once("python -m course_utils.model.train")
    sys.exit(cli.run(main, sys.argv[1:], "python -m course_utils.model.train"))
