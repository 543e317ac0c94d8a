"""Lesson 4's payoff: run a trained :class:`TinyTransformer` with the learner's attention.

Exercise 4.3 asks for ``mha_forward(x, w_in, b_in, w_out, b_out, num_heads, causal=False)``,
multi-head self-attention, causal when ``causal=True``. :func:`run_with_your_attention` loads a
shipped checkpoint, runs it once with the course's :class:`MultiHeadAttention` and once with
that function in every block (same weights), and reports both runs side by side: next-token
predictions, accuracy and loss.

The trained model is a decoder, so its attention is causal: :func:`causal_attention_with`
calls the learner's function once per layer with ``causal=True``.

Nothing here raises because of the learner's function: a stub, an error inside it or a
wrong shape becomes a line of the report, together with the feedback of exercise 4.3's
check, which names the mistake.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from ..attention.mha import MultiHeadAttention
from ..attention.validation import (
    check_axes,
    check_callable,
    check_finite,
    check_holds_values,
    check_int,
    check_record,
    check_tensor,
    shown,
)
from ..env import torch_threads
from ..model.checkpoint import checkpoint_paths, load_checkpoint
from ..model.transformer import TinyTransformer
from ..tasks.synthetic import InductionTask
from .lesson04 import _OLD_SIGNATURE, _takes_causal, check_mha_forward

__all__ = ["causal_attention_with", "forward_with", "ModelRun", "SwapReport", "run_with_your_attention",
           "plot_block"]

AttentionFn = Callable[..., Tensor]  # (x, w_in, b_in, w_out, b_out, num_heads, causal=False) -> (B, T, d)
MAX_BATCH = 1024  # held-out sequences per run: 32 shows the point; more only costs memory and time


_FN = ("a function (x, w_in, b_in, w_out, b_out, num_heads, causal=False) -> (B, T, d_model), such as "
       "your mha_forward")


def causal_attention_with(fn: AttentionFn, x: Tensor, attn: MultiHeadAttention) -> Tensor:
    """Causal self-attention ``(B, T, d) -> (B, T, d)``: ``fn`` with ``attn``'s weights, called
    once with ``causal=True``. ``x`` must hold finite values (not on the meta device)."""
    check_callable(fn, "fn", _FN, nargs=6)
    if type(attn) is not MultiHeadAttention:
        raise TypeError(f"attn must be a MultiHeadAttention (whose weights fn uses), got "
                        f"{type(attn).__name__}")
    check_tensor(x, "x", ndim=3, layout=f"(B, T, d_model={attn.d_model})")
    if x.shape[-1] != attn.d_model:
        raise ValueError(f"x must be (B, T, d_model={attn.d_model}) for this attn, got last dimension "
                         f"{x.shape[-1]} (shape {tuple(x.shape)})")
    check_finite(x, "x", "attention of NaN or inf has no meaningful output")
    return _attend(fn, x, attn)


def _attend(fn: AttentionFn, x: Tensor, attn: MultiHeadAttention) -> Tensor:
    """:func:`causal_attention_with` on checked arguments; :func:`forward_with` calls it on the
    model's own stream, where a NaN comes from fn's earlier output and is reported as such."""
    if not _takes_causal(fn):
        raise TypeError(_OLD_SIGNATURE)
    if x.shape[1] == 0:  # no position: the empty result, without asking fn about no tokens
        return x.new_empty(x.shape)
    out = fn(x, attn.in_proj.weight, attn.in_proj.bias, attn.out_proj.weight, attn.out_proj.bias,
             attn.num_heads, causal=True)
    if type(out) is not Tensor:  # a subclass may answer ==, argmax, isfinite with anything
        raise TypeError(f"your function returned {type(out).__name__}, not a torch.Tensor (a plain "
                        "tensor, not a subclass of it)")
    if out.shape != x.shape:
        raise ValueError(f"on x of shape {tuple(x.shape)} your function returned shape "
                         f"{tuple(out.shape)}; attention keeps the input's shape")
    if out.dtype != x.dtype or out.device != x.device:
        raise TypeError(f"on x of dtype {x.dtype} on {x.device} your function returned dtype "
                        f"{out.dtype} on {out.device}; attention keeps the input's dtype and device "
                        "(a float64 constant or .double() somewhere changes it)")
    return out


def _check_model(model: object) -> TinyTransformer:
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if any(type(block.attn) is not MultiHeadAttention for block in model.blocks):
        raise ValueError("model must use multi-head attention in every block (num_kv_heads == "
                         "num_heads): a grouped-query model does not fit exercise 4.3's weights")
    return model


@torch.no_grad()
def forward_with(model: TinyTransformer, tokens: Tensor, fn: AttentionFn | None = None) -> Tensor:
    """Logits ``(B, T, V)`` of ``model`` on ``tokens`` ``(B, T)``.

    Each block adds attention, then (if it has one) its MLP, to the residual stream, each
    reading a LayerNorm of it. ``fn=None`` uses the course's module (causal); otherwise, in
    each block, ``fn`` with ``causal=True`` (:func:`causal_attention_with`) on the LayerNorm of
    the block's input (read at ``hook_resid_pre``) replaces what attention adds (at ``hook_attn_out``).
    """
    _check_model(model)
    model._check_tokens(tokens)
    if fn is not None:
        check_callable(fn, "fn", "None or " + _FN, nargs=6)
    if fn is None:
        return model(tokens)[0]
    streams = []  # each block's input (B, T, d), recorded on the way

    def yours(attended: Tensor, hook: object) -> Tensor:  # (B, T, d)
        block = model.blocks[len(streams) - 1]
        return _attend(fn, block.ln_attn(streams[-1]), block.attn)

    with model.hooks([(lambda name: name.endswith("hook_resid_pre"), lambda x, hook: streams.append(x)),
                      (lambda name: name.endswith("hook_attn_out"), yours)]):
        return model(tokens)[0]  # (B, T, V)


@dataclass
class ModelRun:
    """One run over the batch: logits ``(B, T, V)``, accuracy and mean loss on the scored
    positions (those whose next token the task fixes). ``loss`` may be NaN (NaN logits give a
    NaN mean loss): the record keeps a run as measured rather than refusing it; the swap
    report names non-finite logits in its ``error`` instead of scoring them."""

    logits: Tensor
    accuracy: float
    loss: float

    def __post_init__(self) -> None:
        check_record(self, nan_ok=("loss",))  # NaN logits (a learner's NaN output) give a NaN loss
        check_tensor(self.logits, "ModelRun.logits", ndim=3, layout="(B, T, V)")
        check_holds_values(self.logits, "ModelRun.logits")


def _score(logits: Tensor, tokens: Tensor, scored: Tensor) -> ModelRun:
    targets = tokens[:, 1:]  # (B, T-1): position t predicts token t + 1
    picked = scored[:, :-1]
    step_logits = logits[:, :-1]  # (B, T-1, V)
    correct = (step_logits.argmax(-1) == targets)[picked]
    loss = F.cross_entropy(step_logits[picked], targets[picked])
    return ModelRun(logits=logits, accuracy=float(correct.float().mean()), loss=float(loss))


@dataclass
class SwapReport:
    """The course's run and the learner's run of one model on one batch."""

    feedback: object | None  # exercise 4.3's Feedback (None when there was no function)
    tokens: Tensor  # (B, T)
    scored: Tensor  # (B, T) bool
    course: ModelRun
    yours: ModelRun | None  # None when the function could not run the model
    error: str = ""  # why it could not, in words

    def __post_init__(self) -> None:
        check_record(self)

    @property
    def same_predictions(self) -> bool:
        """Every scored position's argmax agrees between the two runs."""
        if self.yours is None:
            return False
        picked = self.scored[:, :-1]
        ours = self.course.logits[:, :-1].argmax(-1)[picked]
        theirs = self.yours.logits[:, :-1].argmax(-1)[picked]
        return bool(torch.equal(ours, theirs))

    @property
    def max_logit_difference(self) -> float:
        if self.yours is None:
            return float("nan")
        return float((self.course.logits - self.yours.logits).abs().max())

    @property
    def matches(self) -> bool:
        """Same predictions, and logits equal up to float32 rounding (1e-4)."""
        return self.same_predictions and self.max_logit_difference < 1e-4

    def table(self, sequence: int = 0, positions: int = 12) -> pd.DataFrame:
        """Sequence ``sequence``'s last ``positions`` positions: the token, the true next token
        and each run's prediction (a ``*`` marks a position the task scores)."""
        sequence = check_int(sequence, "sequence", minimum=0)
        positions = check_int(positions, "positions", minimum=1)
        if sequence >= self.tokens.shape[0]:
            raise ValueError(f"sequence must be below the batch size {self.tokens.shape[0]}, "
                             f"got {sequence}")
        T = self.tokens.shape[1]
        rows = []
        for t in range(max(0, T - 1 - positions), T - 1):
            row = {"position": t, "token": int(self.tokens[sequence, t]),
                   "next token": int(self.tokens[sequence, t + 1]),
                   "scored": "*" if bool(self.scored[sequence, t]) else "",
                   "course module predicts": int(self.course.logits[sequence, t].argmax())}
            if self.yours is not None:
                row["your mha_forward predicts"] = int(self.yours.logits[sequence, t].argmax())
            rows.append(row)
        return pd.DataFrame(rows).set_index("position")

    def summary(self) -> str:
        """A few lines: both runs' accuracy and loss, and the verdict."""
        lines = [f"course module:     accuracy {self.course.accuracy:.3f}, loss {self.course.loss:.4f}"]
        if self.yours is None:
            lines.append(f"your mha_forward: could not run the model: {self.error}")
        else:
            lines.append(f"your mha_forward:  accuracy {self.yours.accuracy:.3f}, loss {self.yours.loss:.4f}")
            if self.matches:
                lines.append("same next-token predictions at every scored position, logits equal up "
                             "to float32 rounding: your function runs the trained model.")
            else:
                changed = self._changed_positions()
                lines.append(f"your function changes the model: {changed} of "
                             f"{int(self.scored[:, :-1].sum())} scored predictions differ, largest "
                             f"logit difference {self.max_logit_difference:.3g}.")
        if self.feedback is not None:  # a Feedback is falsy unless correct
            lines.append(f"the check of exercise 4.3 says:\n{self.feedback}")
        return "\n".join(lines)

    def _changed_positions(self) -> int:
        picked = self.scored[:, :-1]
        ours = self.course.logits[:, :-1].argmax(-1)[picked]
        theirs = self.yours.logits[:, :-1].argmax(-1)[picked]
        return int((ours != theirs).sum())

    __str__ = summary


def run_with_your_attention(
    fn: AttentionFn,
    checkpoint: str = "induction",
    *,
    batch_size: int = 32,
    seed: int = 1234,
) -> SwapReport:
    """Run the ``induction`` checkpoint (held-out periods) with the course's attention and
    with ``fn`` (exercise 4.3's ``mha_forward``), and report both. Never raises because of
    ``fn``; a bad ``checkpoint``, ``batch_size`` (1 to :data:`MAX_BATCH`) or ``seed`` is an error."""
    batch_size = check_int(batch_size, "batch_size", minimum=1, maximum=MAX_BATCH)
    seed = check_int(seed, "seed", minimum=0)
    checkpoint_paths(checkpoint, "checkpoint")  # a wrong one named as this argument
    model, meta = load_checkpoint(checkpoint)
    if meta.get("task") != "induction":
        raise ValueError(f"checkpoint must hold an induction model, got task {shown(meta.get('task'))} "
                         f"from {shown(checkpoint)}")
    _check_model(model)
    cfg = model.config
    batch = InductionTask(vocab_size=cfg.vocab_size, seq_len=cfg.max_len).eval_batch(batch_size, seed)
    with torch_threads(1):  # many tiny products: on a busy machine extra threads only wait
        course = _score(forward_with(model, batch.tokens), batch.tokens, batch.scored)
        feedback = check_mha_forward(fn) if callable(fn) else None
    report = SwapReport(feedback=feedback, tokens=batch.tokens,
                        scored=batch.scored, course=course, yours=None)
    if not callable(fn):
        report.error = f"mha_forward must be a function, got {type(fn).__name__}"
        return report
    if getattr(feedback, "stopped", False):
        report.error = "the check stopped your function (interrupted or too slow), so it was not run again"
        return report
    try:
        with torch_threads(1):
            logits = forward_with(model, batch.tokens, fn)
            # scored inside the guard too: whatever fn returned must not make this raise
            yours = _score(logits, batch.tokens, batch.scored) if torch.isfinite(logits).all() else None
    except NotImplementedError:
        report.error = "it is still the stub (NotImplementedError): write exercise 4.3 first"
        return report
    except SystemExit as error:  # sys.exit()/exit() in the learner's code must not end the kernel
        report.error = (f"your function called exit() (SystemExit: {shown(error.code)}); return the "
                        "attention output instead")
        return report
    except (KeyboardInterrupt, GeneratorExit):
        raise  # the learner pressed stop: stop
    except BaseException as error:  # noqa: BLE001 - any failure of the learner's code is reported
        report.error = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        return report
    if yours is None:
        report.error = "the logits came out NaN or infinite"
        return report
    report.yours = yours
    return report


def plot_block(ax=None, *, attention_label: str = "attention\n(your mha_forward)"):
    """Draw where attention sits in the model: the residual stream from the embeddings up to the
    unembedding, one block's two branches (LayerNorm -> attention, LayerNorm -> MLP) each added
    back to it. Returns the matplotlib Axes."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    if type(attention_label) is not str:  # a str subclass whose str() raises broke the drawing (battery 29)
        raise TypeError(f"attention_label must be a str, got {type(attention_label).__name__} "
                        f"{shown(attention_label, 60)}")
    check_axes(ax)
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 5.2))
    ax.set(xlim=(0, 10), ylim=(0, 13))
    ax.axis("off")
    stream_x = 2.0

    def box(x, y, text, colour, width=2.6):
        ax.add_patch(FancyBboxPatch((x - width / 2, y - 0.45), width, 0.9, boxstyle="round,pad=0.05",
                                    facecolor=colour, edgecolor="black", linewidth=0.8))
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5)

    def arrow(start, end, **style):
        ax.add_patch(FancyArrowPatch(start, end, arrowstyle="-|>", mutation_scale=10, linewidth=1,
                                     color="black", **style))

    box(stream_x, 0.7, "tokens -> token + position\nembeddings", "#eeeeee", width=3.0)
    box(stream_x, 12.2, "LayerNorm -> unembedding\n-> next-token scores", "#eeeeee", width=3.0)
    adds = {"attention": 4.6, "mlp": 8.6}
    arrow((stream_x, 1.15), (stream_x, 11.75), shrinkA=0, shrinkB=0)
    for name, y in adds.items():
        ax.add_patch(plt.Circle((stream_x, y), 0.28, facecolor="white", edgecolor="black", zorder=3))
        ax.text(stream_x, y, "+", ha="center", va="center", fontsize=11, zorder=4)
        colour = "#ffd59e" if name == "attention" else "#c9e4ff"
        label = attention_label if name == "attention" else "MLP\n(induction has none)"
        branch_y = y - 1.7
        box(4.6, branch_y, "LayerNorm", "#e6e6e6", width=1.8)
        box(7.9, branch_y, label, colour, width=3.6)
        arrow((stream_x, branch_y), (4.6 - 0.95, branch_y))  # the stream is read ...
        arrow((4.6 + 0.95, branch_y), (7.9 - 1.85, branch_y))
        arrow((7.9, branch_y + 0.5), (stream_x + 0.3, y), connectionstyle="arc3,rad=0.2")  # ... and added to
    ax.text(stream_x - 0.4, 6.6, "residual stream x\n(B, T, d_model)", ha="right", va="center", fontsize=8.5,
            rotation=90)
    ax.text(9.9, 1.6, "one block: x = x + attention(LayerNorm(x))\n"
            "           x = x + MLP(LayerNorm(x))\nthe model stacks num_layers blocks",
            ha="right", va="top", fontsize=7.5, family="monospace")
    ax.set_title("Where multi-head attention sits in a transformer block", fontsize=10)
    return ax
