"""One table of bad inputs to the public API, as an adversarial learner would try them.

Each row is a call and what must come of it: an exception of the given type whose message
contains every listed word (the argument, what was expected, what arrived), or, for the
explorers, a returned or printed message containing them (``MESSAGE``: no exception). To
cover a new case, add a row.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import pytest
import torch

from course_utils import (
    GroupedQueryAttention,
    MultiHeadAttention,
    causal_mask,
    grouped_query_attention,
    padding_mask,
    scaled_dot_product_attention,
)
from course_utils.attention.naive_mha import AttentionHead, NaiveMultiHeadAttention
from course_utils.env import pick_device, seed_everything
from course_utils.interp import ablation
from course_utils.interp.heatmaps import AttentionExplorer
from course_utils.interp.scores import best_head, previous_token_score
from course_utils.interp.widgets import dimension_explorer
from course_utils.model.checkpoint import CHECKPOINT_DIR, CheckpointError, load_checkpoint, save_checkpoint
from course_utils.model.train import TrainConfig, train_induction, train_model
from course_utils.model.transformer import KVCache, ModelConfig, TinyTransformer, convert_model
from course_utils.tasks.synthetic import AgreementTask, InductionTask

matplotlib.use("Agg")

MESSAGE = "message"  # the call must not raise, and must answer with a message


@dataclass
class Case:
    name: str
    call: Callable[[], object]
    expect: type[BaseException] | str
    words: list[str] = field(default_factory=list)


# -- inputs ------------------------------------------------------------------------------
x = torch.randn(2, 3, 8)  # (B, T, d)
q = torch.randn(2, 4, 3, 4)  # (B, h, T, dk)
mha = MultiHeadAttention(8, 2).eval()
naive = NaiveMultiHeadAttention(8, 2).eval()
head = AttentionHead(8, 4)
no_keys = torch.randn(2, 0, 8)


def sdpa(**kwargs) -> Callable[[], object]:
    """A call of the course's SDPA on ``q`` with some arguments replaced."""
    t = {name: kwargs.pop(name, q) for name in ("q", "k", "v")}
    return lambda: scaled_dot_product_attention(t["q"], t["k"], t["v"], **kwargs)


def printed(call: Callable[[], object]) -> Callable[[], str]:
    """Run ``call`` and return what it printed (for explorers that answer by printing)."""
    def run() -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            call()
        return out.getvalue()
    return run


# -- training ----------------------------------------------------------------------------
TASK = InductionTask()
TINY = ModelConfig(vocab_size=TASK.vocab_size, max_len=TASK.seq_len, d_model=16, num_heads=2,
                   num_layers=1, mlp=False)


def tiny_batch(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    batch = TASK.sample(4, generator)
    return batch.tokens, batch.targets


def train_tiny(sample=tiny_batch, **config) -> Callable[[], object]:
    settings = {"steps": 3, **config}
    return lambda: train_model(TinyTransformer(TINY), sample, TrainConfig(**settings), progress=False)


# -- grouped-query attention and the KV cache ---------------------------------------------
gq, gk = torch.randn(1, 4, 3, 4), torch.randn(1, 2, 3, 4)  # q (B, h, T, dk), k and v (B, g, T, dk)


def gqa(**kwargs) -> Callable[[], object]:
    """A call of grouped_query_attention on ``gq, gk, gk`` with some arguments replaced."""
    t = {"q": kwargs.pop("q", gq), "k": kwargs.pop("k", gk), "v": kwargs.pop("v", gk)}
    return lambda: grouped_query_attention(t["q"], t["k"], t["v"], **kwargs)


def cached_model(num_kv_heads: int) -> TinyTransformer:
    config = ModelConfig(vocab_size=10, max_len=16, d_model=16, num_heads=4, num_kv_heads=num_kv_heads,
                         num_layers=2)
    torch.manual_seed(0)
    return TinyTransformer(config).eval()


GQA_MODEL, MHA_MODEL = cached_model(2), cached_model(4)
PROMPT = torch.randint(0, 10, (2, 3), generator=torch.Generator().manual_seed(0))
NEXT = torch.ones(2, 1, dtype=torch.long)
GQA_CACHE, MHA_CACHE = GQA_MODEL.forward_with_cache(PROMPT)[1], MHA_MODEL.forward_with_cache(PROMPT)[1]


def edited_cache(edit: Callable[[torch.Tensor], torch.Tensor], which: str = "kv") -> KVCache:
    """GQA_CACHE with ``edit`` applied to k and/or v of every layer."""
    return KVCache(tuple((edit(k) if "k" in which else k, edit(v) if "v" in which else v)
                         for k, v in GQA_CACHE.layers))


def decode_with(cache: object) -> Callable[[], object]:
    return lambda: GQA_MODEL.forward_with_cache(NEXT, cache)


# -- ablation ----------------------------------------------------------------------------
LOGITS = torch.randn(2, 5, 7)  # (B, T, V)
TARGETS = torch.randint(0, 7, (2, 5), generator=torch.Generator().manual_seed(0))
TINY_MODEL = TinyTransformer(TINY).eval()
TINY_TOKENS = TASK.sample(2, torch.Generator().manual_seed(0)).tokens


def float_score(logits: torch.Tensor) -> float:
    return 0.5  # an Evaluation's score must return {name: number}


def edited(edit: Callable[[torch.Tensor], object]) -> Callable[[], object]:
    """The model's pass whose ``edit_heads`` returns ``edit(heads)`` (heads ``(2, 4, 3, 4)``)."""
    return lambda: MHA_MODEL(PROMPT, edit_heads=lambda layer, heads: edit(heads))


def _hooked(fn: object, where: str = "blocks.0.attn.hook_z") -> object:
    """The model's pass with ``fn`` at ``where``."""
    with MHA_MODEL.hooks([(where, fn)]):
        return MHA_MODEL(PROMPT)


def meta_model() -> TinyTransformer:
    with torch.device("meta"):
        return TinyTransformer(MHA_MODEL.config)


# -- checkpoints -------------------------------------------------------------------------
def load_with_sidecar(field_name: str, value: object) -> Callable[[], object]:
    """Load a copy of the shipped induction checkpoint whose sidecar has ``field_name = value``."""
    def run() -> object:
        with tempfile.TemporaryDirectory() as folder:
            for suffix in (".safetensors", ".json"):
                shutil.copy(CHECKPOINT_DIR / f"induction{suffix}", Path(folder) / f"induction{suffix}")
            sidecar = Path(folder) / "induction.json"
            meta = json.loads(sidecar.read_text())
            meta[field_name] = value
            sidecar.write_text(json.dumps(meta))
            return load_checkpoint(Path(folder) / "induction")
    return run


# -- explorers ---------------------------------------------------------------------------
def fake_attention(num_layers: int = 2, num_heads: int = 2, labels: int = 0):
    """``text -> (labels, per-layer weights (1, h, T, T))``; ``labels`` adds wrong labels."""
    def attention_for(text: str) -> tuple[list[str], list[torch.Tensor]]:
        tokens = ["<bos>", *text.split()]
        T = len(tokens)
        weights = torch.tril(torch.ones(T, T))
        weights = weights / weights.sum(-1, keepdim=True)  # (T, T), causal, rows sum to 1
        layer = weights.expand(1, num_heads, T, T)
        return tokens + ["extra"] * labels, [layer] * num_layers
    return attention_for


def explorer_render(attention_for, text: str = "the cat sat", layer: int = 1, head_index: int = 1):
    def run() -> object:
        explorer = AttentionExplorer(fake_attention(), ["the cat"], num_layers=2, num_heads=2)
        explorer.attention_for = attention_for  # the attention changes after construction
        return explorer.render(text, layer, head_index)
    return run


def broken_attention(text: str):
    raise RuntimeError("the model crashed")


def sidecar_cases() -> list[Case]:
    bad = [("size_bytes", "12345", ["size_bytes", "an integer", "str"]),
           ("sha256", 7, ["sha256", "a string", "int"]),
           ("metrics", [0.9], ["metrics", "an object", "list"]),
           ("metrics", {"heldout": "high"}, ["metric", "number", "high"]),
           ("config", "d_model=64", ["config", "an object", "str"]),
           ("command", None, ["command", "a string", "NoneType"]),
           ("task", 3, ["task", "a string", "int"]),
           ("training", [], ["training", "an object", "list"]),
           ("size_bytes", True, ["size_bytes", "an integer", "bool"])]
    return [Case(f"sidecar {name}={value!r}", load_with_sidecar(name, value), CheckpointError, words)
            for name, value, words in bad]


CASES: list[Case] = [
    # 1. dtype and device in attention
    Case("sdpa int q", sdpa(q=q.long()), TypeError, ["q", "floating-point", "torch.int64"]),
    Case("sdpa float64 k among float32", sdpa(k=q.double()), TypeError,
         ["q, k, v", "one dtype", "k torch.float64"]),
    Case("sdpa k, v on another device", sdpa(k=q.to("meta"), v=q.to("meta")), ValueError,
         ["q, k, v", "one device", "k meta"]),
    Case("sdpa mask on another device", sdpa(mask=causal_mask(3).to("meta")), ValueError,
         ["mask", "device meta", "cpu"]),
    Case("mha float64 input, float32 module", lambda: mha(x.double()), TypeError,
         ["query", "torch.float64", "torch.float32", "numpy"]),
    Case("mha int input", lambda: mha(x.long()), TypeError, ["query", "floating-point", "int64"]),
    Case("mha input on another device", lambda: mha(x.to("meta")), ValueError,
         ["query", "device meta", "cpu"]),
    Case("mha key on another device", lambda: mha(x, x.to("meta")), ValueError, ["key", "meta"]),
    Case("mha float64 value only", lambda: mha(x, x, x.double()), TypeError, ["value", "float64"]),
    Case("mha key_padding_mask on another device",
         lambda: mha(x, key_padding_mask=torch.ones(2, 3, dtype=torch.bool, device="meta")),
         ValueError, ["key_padding_mask", "meta"]),
    Case("naive float64 input", lambda: naive(x.double()), TypeError, ["x", "float64", "float32"]),
    Case("naive int input", lambda: naive(x.long()), TypeError, ["x", "floating-point", "int64"]),
    Case("naive input on another device", lambda: naive(x.to("meta")), ValueError, ["x", "meta"]),
    Case("one head, float64 input", lambda: head(x.double()), TypeError, ["x", "float64"]),
    Case("one head, not a tensor", lambda: head([[1.0] * 8]), TypeError, ["x", "torch.Tensor", "list"]),
    # 2. empty keys
    Case("sdpa Tk = 0", sdpa(k=q[:, :, :0], v=q[:, :, :0]), ValueError, ["k", "Tk = 0", "3 queries"]),
    Case("mha cross-attention to no keys", lambda: mha(x, no_keys), ValueError, ["key", "Tk = 0"]),
    # 3. dropout_p and is_causal
    Case("sdpa dropout_p negative", sdpa(dropout_p=-0.1), ValueError, ["dropout_p", "[0, 1)", "-0.1"]),
    Case("sdpa dropout_p NaN", sdpa(dropout_p=math.nan), ValueError, ["dropout_p", "[0, 1)", "nan"]),
    Case("sdpa dropout_p 1", sdpa(dropout_p=1.0), ValueError, ["dropout_p", "1.0"]),
    Case("sdpa dropout_p str", sdpa(dropout_p="0.1"), TypeError, ["dropout_p", "float", "str"]),
    Case("sdpa dropout_p bool", sdpa(dropout_p=True), TypeError, ["dropout_p", "bool"]),
    Case("sdpa is_causal str", sdpa(is_causal="no"), TypeError, ["is_causal", "True or False", "'no'"]),
    Case("sdpa is_causal int", sdpa(is_causal=1), TypeError, ["is_causal", "int"]),
    Case("mha is_causal str", lambda: mha(x, is_causal="no"), TypeError, ["is_causal", "'no'"]),
    Case("mha need_weights str", lambda: mha(x, need_weights="yes"), TypeError, ["need_weights"]),
    Case("mha dropout str", lambda: MultiHeadAttention(8, 2, dropout="0.1"), TypeError,
         ["dropout", "float", "str"]),
    Case("mha dropout NaN", lambda: MultiHeadAttention(8, 2, dropout=math.nan), ValueError,
         ["dropout", "nan"]),
    Case("mha return_kv str", lambda: mha(x, return_kv="no"), TypeError,
         ["return_kv", "True or False", "'no'"]),
    # the edit_heads hook must give back heads like the ones it got
    *[Case(f"edit_heads returns {what}", edited(edit), error, ["edit_heads", "(2, 4, 3, 4)", *words])
      for what, edit, error, words in (
          ("one head", lambda h: h[:1], ValueError, ["shape (1, 4, 3, 4)"]),
          ("None", lambda h: None, TypeError, ["NoneType", "forget to return"]),
          ("a list", lambda h: h.tolist(), TypeError, ["list"]),
          ("transposed heads", lambda h: h.transpose(2, 3), ValueError, ["shape (2, 4, 4, 3)"]),
          ("float64", lambda h: h.double(), TypeError, ["torch.float32", "dtype torch.float64"]),
          ("int", lambda h: h.long(), TypeError, ["dtype torch.int64"]),
          ("meta", lambda h: h.to("meta"), ValueError, ["device cpu", "device meta"]))],
    Case("a hook returns one head", lambda: _hooked(lambda z, hook: z[:1]), ValueError,
         ["blocks.0.attn.hook_z", "(2, 4, 3, 4)", "shape (1, 4, 3, 4)"]),
    Case("a hook that is a str", lambda: _hooked("zero"), TypeError, ["hook must be a function", "str"]),
    Case("a hook point that does not exist", lambda: _hooked(print, "blocks.0.hook_z"),
         ValueError, ["no hook point named 'blocks.0.hook_z'", "blocks.0.attn.hook_q"]),
    # masks
    Case("causal_mask(True)", lambda: causal_mask(True), TypeError, ["num_queries", "bool True"]),
    Case("causal_mask float offset", lambda: causal_mask(3, query_offset=1.5), TypeError,
         ["query_offset", "float"]),
    Case("causal_mask offset leaving every query without a key",
         lambda: causal_mask(2, 5, query_offset=-3), ValueError,
         ["query_offset=-3", "num_queries=2", "without a key", ">= -1"]),
    Case("padding_mask max_len float", lambda: padding_mask([1, 2], 2.5), TypeError,
         ["max_len", "int", "float 2.5"]),
    Case("padding_mask max_len bool", lambda: padding_mask([1, 1], True), TypeError,
         ["max_len", "int", "bool True"]),
    Case("padding_mask max_len str", lambda: padding_mask([1, 2], "4"), TypeError, ["max_len", "str '4'"]),
    Case("padding_mask lengths None", lambda: padding_mask(None), TypeError,
         ["lengths", "list of ints", "NoneType"]),
    Case("padding_mask lengths str", lambda: padding_mask("12"), TypeError, ["lengths", "str '12'"]),
    Case("padding_mask lengths complex", lambda: padding_mask([1 + 2j]), TypeError,
         ["lengths", "integers", "complex"]),
    Case("padding_mask complex tensor", lambda: padding_mask(torch.tensor([1 + 0j])), TypeError,
         ["lengths", "integers", "complex64"]),
    Case("padding_mask lengths on meta", lambda: padding_mask(torch.tensor([1, 2], device="meta")),
         ValueError, ["lengths", "meta"]),
    Case("padding_mask length beyond int64", lambda: padding_mask([2**70]), ValueError,
         ["lengths", "int64", str(2**70)]),
    # grouped-query attention
    Case("gqa is_causal str", gqa(is_causal="no"), TypeError, ["is_causal", "True or False", "'no'"]),
    Case("gqa is_causal int", gqa(is_causal=1), TypeError, ["is_causal", "int"]),
    Case("gqa q on the meta device", gqa(q=gq.to("meta")), ValueError, ["q, k, v", "one device", "q meta"]),
    Case("gqa float64 q, float32 k and v", gqa(q=gq.double()), TypeError,
         ["q, k, v", "one dtype", "q torch.float64", "k torch.float32"]),
    Case("gqa int64 inputs", gqa(q=gq.long(), k=gk.long(), v=gk.long()), TypeError,
         ["q", "floating-point", "torch.int64"]),
    Case("gqa dk = 0", gqa(q=gq[..., :0], k=gk[..., :0], v=gk[..., :0]), ValueError,
         ["dk = 0", "(1, 4, 3, 0)", "dk >= 1"]),
    Case("gqa no keys", gqa(k=gk[:, :, :0], v=gk[:, :, :0]), ValueError, ["k", "Tk = 0", "3 queries"]),
    Case("gqa mask on another device", gqa(mask=causal_mask(3, device="meta")), ValueError,
         ["mask", "device meta", "cpu"]),
    Case("GroupedQueryAttention bias str", lambda: GroupedQueryAttention(16, 4, 2, bias="no"), TypeError,
         ["bias", "True or False", "'no'"]),
    Case("GroupedQueryAttention dropout str", lambda: GroupedQueryAttention(16, 4, 2, dropout="0.1"),
         TypeError, ["dropout", "float", "str"]),
    Case("from_multi_head generator str",
         lambda: GroupedQueryAttention.from_multi_head(MultiHeadAttention(16, 4), 2, "random",
                                                       generator="seed"),
         TypeError, ["generator", "torch.Generator", "str 'seed'"]),
    Case("convert_model seed str", lambda: convert_model(MHA_MODEL, 2, seed="x"), TypeError,
         ["seed", "int", "str 'x'"]),
    Case("convert_model seed beyond 2**64", lambda: convert_model(MHA_MODEL, 2, seed=2**70), ValueError,
         ["seed", "2**64", str(2**70)]),
    Case("convert_model of a meta model", lambda: convert_model(meta_model(), 2), ValueError,
         ["model", "meta device"]),
    # the model's tokens and gates
    *[Case(f"{what} with tokens on meta", call, ValueError, ["tokens", "device meta", "cpu"])
      for what, call in (
          ("forward", lambda: MHA_MODEL(PROMPT.to("meta"))),
          ("forward_with_cache", lambda: MHA_MODEL.forward_with_cache(PROMPT.to("meta"))),
          ("generate", lambda: MHA_MODEL.generate(PROMPT.to("meta"), 2)))],
    # the interp functions refuse meta tokens before the model sees them, naming the argument
    *[Case(f"{what} with tokens on meta", call, ValueError, ["tokens", "meta device", "'cpu'"])
      for what, call in (
          ("ablated_logits", lambda: ablation.ablated_logits(MHA_MODEL, PROMPT.to("meta"), [(0, 0)])),
          ("head_importance", lambda: ablation.head_importance(MHA_MODEL, PROMPT.to("meta"),
                                                               PROMPT.to("meta"))))],
    Case("generate use_cache str", lambda: MHA_MODEL.generate(PROMPT, 2, use_cache="no"), TypeError,
         ["use_cache", "True or False", "'no'"]),
    Case("head_mask on meta",
         lambda: MHA_MODEL.forward_with_cache(PROMPT, head_mask=torch.ones(2, 4, device="meta")), ValueError,
         ["head_mask", "device meta", "cpu"]),
    # the KV cache
    Case("cache whose layer 1 has g = 2", decode_with(KVCache((GQA_CACHE.layers[0], MHA_CACHE.layers[1]))),
         ValueError, ["cache layer 1", "4 key/value heads", "g=2"]),
    Case("cache whose layer 1 has dk = 3",
         decode_with(KVCache((GQA_CACHE.layers[0], tuple(t[..., :3] for t in GQA_CACHE.layers[1])))),
         ValueError, ["cache layer 1", "width 3", "dk=4"]),
    Case("cache in float64", decode_with(edited_cache(torch.Tensor.double)), TypeError,
         ["cache", "torch.float64", "torch.float32"]),
    Case("cache with dk = 3", decode_with(edited_cache(lambda t: t[..., :3])), ValueError,
         ["cache", "width 3", "dk=4", "(2, 2, 3, 3)"]),
    Case("MHA cache given to a g = 2 model", decode_with(MHA_CACHE), ValueError,
         ["cache", "4 key/value heads", "g=2", "(2, 4, 3, 4)"]),
    Case("cache on another device", decode_with(edited_cache(lambda t: t.to("meta"))), ValueError,
         ["cache", "device meta", "cpu"]),
    Case("cache k and v of different lengths", lambda: edited_cache(lambda t: t[:, :, :2], which="v"),
         ValueError, ["KVCache.layers[0]", "k (2, 2, 3, 4)", "v (2, 2, 2, 4)"]),
    Case("cache layers of None", lambda: KVCache((None, None)), TypeError,
         ["KVCache.layers[0]", "(k, v) pair", "NoneType"]),
    Case("cache layer pair of None", lambda: KVCache(((None, None),)), TypeError,
         ["KVCache.layers[0] k", "torch.Tensor", "NoneType"]),
    Case("cache layers None", lambda: KVCache(None), TypeError, ["KVCache.layers", "tuple", "NoneType"]),
    Case("empty cache", lambda: KVCache(()).length, ValueError, ["KVCache.layers", "empty", "cache=None"]),
    # ablation
    Case("sequence_losses targets list", lambda: ablation.sequence_losses(LOGITS, TARGETS.tolist()),
         TypeError, ["targets", "torch.long", "list"]),
    Case("average_loss targets list", lambda: ablation.average_loss(LOGITS, TARGETS.tolist()), TypeError,
         ["targets", "torch.long", "list"]),
    Case("target id out of range", lambda: ablation.average_loss(LOGITS, torch.full((2, 5), 99)),
         ValueError, ["targets", "[0, V=7)", "-100", "[99]"]),
    Case("sequence_losses target id negative",
         lambda: ablation.sequence_losses(LOGITS, torch.full((2, 5), -5)), ValueError, ["targets", "[-5]"]),
    Case("sequence_losses logits list", lambda: ablation.sequence_losses(LOGITS.tolist(), TARGETS),
         TypeError, ["logits", "torch.Tensor", "list"]),
    *[Case(f"head_importance chunk_size={size!r}",
           lambda size=size: ablation.head_importance(TINY_MODEL, TINY_TOKENS, TINY_TOKENS, chunk_size=size),
           error, ["chunk_size", words])
      for size, error, words in ((0, ValueError, "positive int, got 0"), (-1, ValueError, "got -1"),
                                 (2.5, TypeError, "float 2.5"))],
    Case("random_orders seeds None", lambda: ablation.random_orders(TINY_MODEL, None), TypeError,
         ["seeds", "list of ints", "NoneType"]),
    Case("random_orders seed beyond 2**64", lambda: ablation.random_orders(TINY_MODEL, [2**70]), ValueError,
         ["seed", "< 2**64", str(2**70)]),
    Case("pruning_curve counts [True]",
         lambda: ablation.pruning_curve(TINY_MODEL, ablation.loss_evaluation(TINY_TOKENS, TINY_TOKENS),
                                        [(0, 0)], counts=[True]), TypeError, ["counts", "ints", "bool True"]),
    Case("pruning_curve counts 5",
         lambda: ablation.pruning_curve(TINY_MODEL, ablation.loss_evaluation(TINY_TOKENS, TINY_TOKENS),
                                        [(0, 0)], counts=5), TypeError, ["counts", "list of ints", "int 5"]),
    Case("a score that returns a str value",
         lambda: ablation.measure(TINY_MODEL, ablation.Evaluation(TINY_TOKENS, lambda logits: {"a": "x"})),
         TypeError, ["evaluations[0].score", "{name: number}", "'a': str"]),
    Case("a score that returns a tensor value",
         lambda: ablation.measure(TINY_MODEL, ablation.Evaluation(TINY_TOKENS, lambda logits: {"a": logits})),
         TypeError, ["evaluations[0].score", "'a'", "tensor of shape", "float(t)"]),
    Case("Evaluation score not callable", lambda: ablation.Evaluation(TINY_TOKENS, 5), TypeError,
         ["Evaluation.score", "function", "int 5"]),
    Case("Evaluation tokens float", lambda: ablation.Evaluation(TINY_TOKENS.float(), float_score), TypeError,
         ["Evaluation.tokens", "torch.long", "float32"]),
    Case("sequence_losses logits on meta", lambda: ablation.sequence_losses(LOGITS.to("meta"), TARGETS),
         ValueError, ["logits", "meta"]),
    Case("average_loss targets on meta", lambda: ablation.average_loss(LOGITS, TARGETS.to("meta")),
         ValueError, ["targets", "meta"]),
    Case("ablated_logits means long",
         lambda: ablation.ablated_logits(TINY_MODEL, TINY_TOKENS, [(0, 0)], method="mean",
                                         means=torch.zeros(1, 2, 8, dtype=torch.long)),
         TypeError, ["means", "floating-point", "torch.int64"]),
    Case("ablated_logits means on meta",
         lambda: ablation.ablated_logits(TINY_MODEL, TINY_TOKENS, [(0, 0)], method="mean",
                                         means=torch.zeros(1, 2, 8, device="meta")),
         ValueError, ["means", "device meta", "cpu"]),
    Case("random_orders negative seed", lambda: ablation.random_orders(TINY_MODEL, [-1]), ValueError,
         ["seed", ">= 0", "-1"]),
    Case("pruning_curve of a Linear", lambda: ablation.pruning_curve(torch.nn.Linear(2, 2), [], [(0, 0)]),
         TypeError, ["model", "TinyTransformer", "Linear"]),
    Case("a score that returns a float",
         lambda: ablation.measure(TINY_MODEL, ablation.Evaluation(TINY_TOKENS, float_score)), TypeError,
         ["evaluations[0].score", "dict", "float 0.5"]),
    Case("importance not 2-D", lambda: ablation.importance_order(torch.zeros(4)), ValueError,
         ["importance", "(L, h)", "shape (4)"]),
    Case("order lists a head twice",
         lambda: ablation.pruning_curve(TINY_MODEL, [], [(0, 1), (0, 0), (0, 1)]), ValueError,
         ["order", "twice", "L0H1"]),
    Case("targets not shaped like tokens", lambda: ablation.loss_evaluation(TINY_TOKENS, TARGETS),
         ValueError, ["targets", "shaped like tokens", "shape (2, 5)"]),
    Case("head_name negative layer", lambda: ablation.head_name(-1, 2), ValueError, ["layer", ">= 0", "-1"]),
    Case("head_name float head", lambda: ablation.head_name(1, 2.5), TypeError, ["head", "int", "float 2.5"]),
    # 5. training
    Case("lr inf", lambda: TrainConfig(lr=math.inf), ValueError, ["lr", "finite", "inf"]),
    Case("lr NaN", lambda: TrainConfig(lr=math.nan), ValueError, ["lr", "finite", "nan"]),
    Case("lr str", lambda: TrainConfig(lr="0.01"), TypeError, ["lr", "number", "str"]),
    Case("lr zero", lambda: TrainConfig(lr=0), ValueError, ["lr", "> 0", "0"]),
    Case("weight_decay negative", lambda: TrainConfig(weight_decay=-1.0), ValueError,
         ["weight_decay", ">= 0"]),
    Case("grad_clip str", lambda: TrainConfig(grad_clip="1"), TypeError, ["grad_clip", "str"]),
    Case("train_induction lr inf", lambda: train_induction(steps=2, lr=math.inf, progress=False),
         ValueError, ["lr", "inf"]),
    Case("sample_batch returns a tensor", train_tiny(sample=lambda g: tiny_batch(g)[0]), TypeError,
         ["sample_batch", "(tokens (B, T), targets (B, T))", "Tensor of shape (4, "]),
    Case("sample_batch returns a triple", train_tiny(sample=lambda g: (*tiny_batch(g), None)), TypeError,
         ["sample_batch", "pair", "tuple"]),
    Case("loss becomes NaN", train_tiny(steps=6, lr=1e9, warmup_steps=0, grad_clip=0.0),
         FloatingPointError, ["diverged", "at step", "last finite loss", "lr"]),
    # 6. devices and seeds
    Case("pick_device tpu", lambda: pick_device("tpu"), ValueError, ["prefer must be", "'cpu'", "'tpu'"]),
    Case("pick_device int", lambda: pick_device(0), TypeError, ["prefer must be", "int"]),
    Case("train_induction device tpu", lambda: train_induction(steps=1, device="tpu", progress=False),
         ValueError, ["device", "'tpu'"]),
    Case("load_checkpoint device tpu", lambda: load_checkpoint("induction", device="tpu"), ValueError,
         ["device", "'tpu'"]),
    Case("seed_everything str", lambda: seed_everything("0"), TypeError, ["seed", "int", "str"]),
    Case("seed_everything 2**64", lambda: seed_everything(2**64), ValueError, ["seed", "< 2**64"]),
    Case("seed_everything negative", lambda: seed_everything(-1), ValueError, ["seed", ">= 0", "-1"]),
    Case("train_induction seed str", lambda: train_induction(steps=1, seed="0", progress=False),
         TypeError, ["seed", "int", "str"]),
    Case("train_induction seed float", lambda: train_induction(steps=1, seed=1.5, progress=False),
         TypeError, ["seed", "float"]),
    Case("train_model seed str", lambda: train_model(TinyTransformer(TINY), tiny_batch, TrainConfig(steps=1),
                                                     seed="1", progress=False), TypeError, ["seed", "str"]),
    Case("induction eval_batch seed str", lambda: TASK.eval_batch(8, "1"), TypeError, ["seed", "str"]),
    Case("train_model targets outside the vocabulary",
         train_tiny(lambda g: (tiny_batch(g)[0], tiny_batch(g)[1] + TASK.vocab_size)), ValueError,
         ["targets outside the vocabulary", f"0..{TASK.vocab_size - 1}", "-100"]),
    Case("train_model float targets", train_tiny(lambda g: (tiny_batch(g)[0], tiny_batch(g)[1].float())),
         TypeError, ["integer targets", "float32"]),
    Case("train_model targets of another shape",
         train_tiny(lambda g: (tiny_batch(g)[0], tiny_batch(g)[1][:, :3])), ValueError,
         ["one shape (B, T)", "(4, 3)"]),
    Case("train_model evaluate returns a float",
         lambda: train_model(TinyTransformer(TINY), tiny_batch, TrainConfig(steps=1), evaluate=lambda m: 0.5,
                             progress=False), TypeError, ["evaluate(model)", "dict", "float"]),
    Case("train_model target_metric missing from evaluate",
         lambda: train_model(TinyTransformer(TINY), tiny_batch, TrainConfig(steps=1),
                             evaluate=lambda m: {"a": 1.0}, target_metric="acc", target=0.9, progress=False),
         KeyError,
         ["target_metric 'acc'", "['a']"]),
    Case("agreement eval_batch seed float", lambda: AgreementTask().eval_batch(8, 2.0), TypeError,
         ["seed", "float"]),
    # 7. checkpoints
    *sidecar_cases(),
    Case("checkpoint empty name", lambda: load_checkpoint(""), ValueError, ["name_or_path", "''"]),
    Case("checkpoint expected_config as dict",
         lambda: load_checkpoint("induction", expected_config=TINY.to_dict()), TypeError,
         ["expected_config", "ModelConfig", "dict"]),
    Case("save_checkpoint metrics as list",
         lambda: save_checkpoint(TinyTransformer(TINY), "./never", task="t", metrics=[1.0], command="c"),
         TypeError, ["metrics", "dict", "list"]),
    # 4. explorers answer with a message
    Case("explorer built with too many layers",
         lambda: AttentionExplorer(fake_attention(), ["the cat"], num_layers=3, num_heads=2), ValueError,
         ["num_layers=3", "2 layer(s) of 2 head(s)"]),
    Case("explorer built with too few heads",
         lambda: AttentionExplorer(fake_attention(), ["the cat"], num_layers=2, num_heads=1), ValueError,
         ["num_heads=1", "2 head(s)"]),
    Case("explorer: labels do not fit the attention", explorer_render(fake_attention(labels=1)), MESSAGE,
         ["Cannot draw", "token labels"]),
    Case("explorer: this text has fewer layers", explorer_render(fake_attention(num_layers=1)), MESSAGE,
         ["1 layer(s)", "layer 1, head 1 is not among them"]),
    Case("explorer: attention function crashes", explorer_render(broken_attention), MESSAGE,
         ["Cannot draw", "the model crashed"]),
    Case("dimension explorer: d_model off the slider", printed(lambda: dimension_explorer(d_model=7)),
         MESSAGE, ["d_model=7", "steps of 8", "starting from 512"]),
    Case("dimension explorer: heads as str", printed(lambda: dimension_explorer(num_heads="8")),
         MESSAGE, ["num_heads='8'", "starting from 8"]),
    # 9. messages that tell the truth
    Case("best_head of nothing", lambda: best_head(torch.zeros(0)), ValueError, ["(0,)"]),
    Case("rows that do not sum to 1", lambda: previous_token_score(torch.full((1, 2, 3, 3), 0.5)),
         ValueError, ["one row sums to 1.5"]),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_a_clear_answer(case: Case) -> None:
    if case.expect == MESSAGE:
        result = case.call()
        assert isinstance(result, str), f"expected a message, got {type(result).__name__}"
        text = result
    else:
        with pytest.raises(case.expect) as info:
            case.call()
        text = str(info.value)
    missing = [word for word in case.words if word not in text]
    assert not missing, f"{missing} not in: {text}"


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the answer on a machine without CUDA")
def test_cuda_asked_for_without_a_gpu():
    with pytest.raises(ValueError, match="no usable CUDA GPU"):
        pick_device("cuda")


def test_the_good_inputs_next_to_the_bad_still_work():
    """The edge cases the table leaves alone: an empty sequence, int 0 as dropout_p."""
    assert mha(torch.randn(2, 0, 8))[0].shape == (2, 0, 8)
    out, weights = scaled_dot_product_attention(q, q, q, dropout_p=0, is_causal=True)
    assert out.shape == q.shape and torch.allclose(weights.sum(-1), torch.ones(2, 4, 3))
    assert pick_device("cpu") == torch.device("cpu")


@pytest.mark.parametrize("values, refused", [
    ([math.inf], True),  # the sum is infinite
    ([math.inf, -math.inf], True),  # the sum is NaN
    ([math.nan, 1.0], True),
    ([3e38, 3e38], False),  # finite numbers whose float32 sum overflows: checked one by one, accepted
    ([1.0, -2.0], False),
])
def test_check_edited_heads_finds_every_non_finite_result(values, refused):
    """check_edited_heads tests a result for NaN and infinity by its sum first: a sum that is
    not finite must still end in a number-by-number check, which refuses only real NaN or inf."""
    from course_utils.attention.validation import check_edited_heads

    heads = torch.ones(1, 2, 3, 4)
    result = heads.clone()
    result.view(-1)[:len(values)] = torch.tensor(values)
    if refused:
        with pytest.raises(ValueError, match="edit_heads's result must hold finite numbers"):
            check_edited_heads(result, heads)
    else:
        assert check_edited_heads(result, heads) is result
    assert check_edited_heads(result, result.clone()) is result  # non-finite heads in: not the edit's doing


def test_check_edited_heads_leaves_no_warning_or_graph_behind_with_gradients():
    """Heads that carry gradients (head_importance's gates): the finiteness check reads a number
    from them without a 'requires_grad to a scalar' warning, and the result is the edit's own."""
    import warnings

    from course_utils.attention.validation import check_edited_heads

    heads = torch.ones(1, 2, 3, 4, requires_grad=True)
    result = heads * 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_edited_heads(result, heads) is result


def test_plain_str_reads_a_str_subclass_without_calling_its_own_methods() -> None:
    """``plain_str`` returns the plain str a subclass holds (its raising or lying ``__str__``,
    ``__repr__`` and ``__eq__`` are never used afterwards) and names a non-str by argument."""
    from course_utils.attention.validation import plain_str

    class Hostile(str):
        def __str__(self) -> str:
            raise RuntimeError("str boom")

        def __repr__(self) -> str:
            raise RuntimeError("repr boom")

        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = str.__hash__

    value = plain_str(Hostile("lesson02"), "lesson")
    assert type(value) is str and value == "lesson02" and value != "lesson03"
    assert plain_str("x", "lesson") == "x"
    with pytest.raises(TypeError, match=r"^lesson must be a lesson's name, got int 3$"):
        plain_str(3, "lesson", "a lesson's name")


def test_check_same_dtype_and_device_names_a_key_that_is_not_a_str() -> None:
    """A key whose ``__format__``/``__str__`` raises was formatted into the message and its error
    replaced it; keys are now read as plain str, and a non-str key is named."""
    from course_utils.attention.validation import check_same_dtype_and_device

    class Hostile:
        def __repr__(self) -> str:
            raise RuntimeError("repr boom")

        __str__ = __repr__

        def __format__(self, spec: str) -> str:
            raise RuntimeError("format boom")

    with pytest.raises(TypeError, match=r"tensors keys must be a str .*got Hostile"):
        check_same_dtype_and_device({Hostile(): torch.zeros(2), "b": torch.zeros(2, dtype=torch.float64)})

    class Label(str):
        def __format__(self, spec: str) -> str:
            raise RuntimeError("format boom")

    with pytest.raises(TypeError, match=r"^q, k must share one dtype, got q torch.float32, k torch.float64$"):
        check_same_dtype_and_device({Label("q"): torch.zeros(2), "k": torch.zeros(2, dtype=torch.float64)})


def test_check_weights_finite_reads_weights_made_under_inference_mode() -> None:
    """Parameters created under ``torch.inference_mode()`` are inference tensors that require grad:
    ``torch.isfinite`` on them raised torch's bare "abs(): functions with out=..." error. The check
    reads a detached view: finite weights pass, a NaN weight is named."""
    from course_utils.attention.validation import check_weights_finite

    with torch.inference_mode():
        layer = torch.nn.Linear(2, 2)
    check_weights_finite(layer, "the weights feed every result")
    with torch.inference_mode():
        layer.weight[0, 1] = float("nan")
    with pytest.raises(ValueError, match=r"model's weights \(weight\) must hold finite numbers, got nan"):
        check_weights_finite(layer, "the weights feed every result")
