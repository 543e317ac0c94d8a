"""A tiny decoder-only transformer built on the course's :class:`MultiHeadAttention`.

Pre-LayerNorm blocks, learned positional embeddings, causal self-attention, an optional
MLP (``mlp=False`` gives an attention-only model, the kind in which induction heads are
easiest to read). What the later lessons use:

* hook points (:mod:`course_utils.attention.hooks`): the embeddings pass ``hook_embed``
  (tokens) and ``hook_pos_embed`` (positions, see :meth:`TinyTransformer.embed`), and every
  block's attention layer passes
  ``q``, ``k``, ``v``, the pattern and each head's output ``z`` through named identity modules
  (``blocks.0.attn.hook_z``), and the block its residual stream (``blocks.0.hook_resid_pre``,
  ``hook_attn_out``, ``hook_resid_mid``, ``hook_resid_post``). :meth:`TinyTransformer.hooks`
  adds hooks ``fn(tensor, hook) -> tensor or None`` for a ``with`` block, and
  :meth:`TinyTransformer.run_with_cache` records the tensors by name (lesson 5 reads them);
* ``head_mask`` ``(num_layers, num_heads)``: a float gate on each head's output, applied
  before the heads are merged (1 = keep, 0 = ablate; lesson 6 ablates heads with it), and
  ``edit_heads(layer, heads) -> heads``, which sees (and may replace) each layer's head
  outputs ``(B, h, T, dk)`` after the gates (lesson 6 records them and mean-ablates with it,
  see :mod:`course_utils.interp.ablation`): both are hooks at ``attn.hook_z``;
* :meth:`TinyTransformer.forward_with_cache`: incremental decoding with a key/value cache
  (lesson 7), equal to recomputing the whole prefix. With ``num_kv_heads = g < num_heads``
  the blocks use grouped-query attention and the cache holds only ``g`` K/V heads.

Shapes: B batch, T sequence length, d = d_model, h heads, dk = d // h, V vocabulary.

Non-finite values: token ids and ``head_mask`` (finite gates) are checked; the float streams
given to :meth:`TinyTransformer.run_blocks`, a :class:`Block` or an :class:`MLP` are checked
for shape, dtype and device only. NaN or infinity there, or a finite value so large (``1e38``,
also as a gate) that a projection overflows float32, is not refused (checking would cost a
pass over the data on every call) and spreads to NaN outputs, as in
:mod:`course_utils.attention.mha`.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..attention.gqa import CONVERSION_METHODS, GroupedQueryAttention
from ..attention.hooks import HookFn, HookPoint, Where, hooks, name_hook_points, run_with_cache
from ..attention.mha import MultiHeadAttention
from ..attention.shapes import count_parameters  # re-exported: one parameter counter for the course
from ..attention.validation import (
    check_callable,
    check_choice,
    check_dense,
    check_edited_heads,
    check_fits_in_memory,
    check_flag,
    check_head_dims,
    check_int,
    check_kv_heads,
    check_linear_weights_fit,
    check_matches_module,
    check_model_holds_values,
    check_not_inference,
    check_same_dtype_and_device,
    check_stream,
    check_tensor,
    describe_shape,
    items_of,
    shown,
)
from ..env import check_seed

__all__ = [
    "ModelConfig", "KVCache", "TinyTransformer", "count_parameters", "convert_model"]


@dataclass(frozen=True)
class ModelConfig:
    """Hyper-parameters of :class:`TinyTransformer` (JSON-serialisable via :meth:`to_dict`). Sizes
    beyond this machine's memory (``vocab_size=10**12``) are refused where they would be
    allocated, by :class:`TinyTransformer` before it builds a layer, not here: a config is also
    read from a checkpoint made on a larger machine. Frozen: a model checks its inputs against its
    config, so a config checked once stays as it was checked (``dataclasses.replace(config,
    num_layers=1)`` makes a changed copy, checked again)."""

    vocab_size: int
    max_len: int
    d_model: int = 64
    num_heads: int = 4
    num_layers: int = 2
    mlp: bool = False  # False = attention-only
    d_mlp: int | None = None  # hidden width of the MLP; None = 4 * d_model
    num_kv_heads: int | None = None  # key/value heads g (GQA); None = num_heads (plain MHA)

    def __post_init__(self) -> None:
        # check_int returns a Python int: a NumPy integer (np.int64(2)) is accepted and stored as
        # an int, so the config still goes into JSON (save_checkpoint) as itself
        for name in ("vocab_size", "max_len", "d_model", "num_heads", "num_layers"):
            object.__setattr__(self, name, check_int(getattr(self, name), f"ModelConfig.{name}", minimum=1))
        check_flag(self.mlp, "ModelConfig.mlp")
        if self.d_mlp is not None:
            object.__setattr__(self, "d_mlp", check_int(self.d_mlp, "ModelConfig.d_mlp", minimum=1))
            if not self.mlp:
                raise ValueError(f"ModelConfig.d_mlp={self.d_mlp} sets the MLP's width, but mlp=False builds "
                                 "no MLP; pass mlp=True to get one, or leave d_mlp as None")
        check_head_dims(self.d_model, self.num_heads)
        num_kv_heads = self.num_heads if self.num_kv_heads is None else self.num_kv_heads
        object.__setattr__(self, "num_kv_heads",
                           check_kv_heads(num_kv_heads, self.num_heads, "ModelConfig.num_kv_heads"))

    @property
    def d_head(self) -> int:
        return self.d_model // self.num_heads

    @property
    def mlp_width(self) -> int:
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp

    def to_dict(self) -> dict:
        """The fields as a dict; ``num_kv_heads`` only when it differs from ``num_heads``,
        so a plain MHA config (and so every checkpoint saved before GQA) keeps its bytes."""
        data = asdict(self)
        if data["num_kv_heads"] == self.num_heads:
            del data["num_kv_heads"]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ModelConfig:
        """Build a config from a dict, refusing unknown or missing keys by name (keys of any type:
        ``1`` or ``None`` among str keys are listed, not compared)."""
        if not isinstance(data, dict):
            raise TypeError(f"a model config must be a dict, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(shown(key) for key in data if not (isinstance(key, str) and key in known))
        if unknown:
            raise ValueError(f"unknown ModelConfig keys [{', '.join(unknown)}]; expected keys from "
                             f"{sorted(known)}")
        missing = sorted(k for k in ("vocab_size", "max_len") if k not in data)
        if missing:
            raise ValueError(f"ModelConfig is missing required keys {missing}")
        return cls(**data)


@dataclass(frozen=True)
class KVCache:
    """Keys and values of the tokens seen so far, one ``(k, v)`` pair per layer.

    Each ``k`` and ``v`` is ``(B, g, length, dk)``, ``g = num_kv_heads`` (``= h`` for plain
    multi-head attention). A cache is never modified in place:
    :meth:`TinyTransformer.forward_with_cache` returns a new, longer one.

    Building one checks that it holds at least one layer, each a ``(k, v)`` pair of
    floating-point 4-D tensors of one shape, and that every layer has the same batch size,
    length, dtype and device; :meth:`TinyTransformer.forward_with_cache` then checks that
    it fits the model (layers, K/V heads, head width, dtype, device).
    """

    layers: tuple[tuple[Tensor, Tensor], ...]

    def __post_init__(self) -> None:
        layers = self.layers
        if not isinstance(layers, (tuple, list)):
            raise TypeError(f"KVCache.layers must be a tuple of (k, v) pairs, one per layer, got "
                            f"{type(layers).__name__}")
        items_of(layers, "KVCache.layers", "a tuple of (k, v) pairs, one per layer")  # len() may raise
        if len(layers) == 0:
            raise ValueError("KVCache.layers is empty: a cache holds one (k, v) pair per layer "
                             "(start decoding with cache=None instead)")
        first = None
        for i, pair in enumerate(layers):
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                got = f"{type(pair).__name__} of length {len(pair)}" if isinstance(pair, (tuple, list)) \
                    else type(pair).__name__
                raise TypeError(f"KVCache.layers[{i}] must be a (k, v) pair of tensors "
                                f"(B, g, T, dk), got {got}")
            k, v = pair
            for name, t in ((f"KVCache.layers[{i}] k", k), (f"KVCache.layers[{i}] v", v)):
                check_tensor(t, name, ndim=4, layout="(B, g, T, dk)")
            if k.shape != v.shape:
                raise ValueError(f"KVCache.layers[{i}]: k and v must have one shape (B, g, T, dk), "
                                 f"one value per key; got k {describe_shape(k)}, v {describe_shape(v)}")
            check_same_dtype_and_device({f"KVCache.layers[{i}] k": k, f"KVCache.layers[{i}] v": v})
            if first is None:
                first = k
            elif (k.shape[0], k.shape[2], k.dtype, k.device) != (first.shape[0], first.shape[2],
                                                                  first.dtype, first.device):
                raise ValueError(f"KVCache.layers[{i}] k {describe_shape(k)} {k.dtype} on {k.device} "
                                 f"does not match layer 0's {describe_shape(first)} {first.dtype} on "
                                 f"{first.device}: every layer holds the same batch and tokens")
        object.__setattr__(self, "layers", tuple(tuple(pair) for pair in layers))

    @property
    def length(self) -> int:
        """Number of tokens already processed (the next token's position)."""
        return self.layers[0][0].shape[2]

    @property
    def batch_size(self) -> int:
        return self.layers[0][0].shape[0]

    def num_bytes(self) -> int:
        """Memory held by all cached keys and values."""
        return sum(t.numel() * t.element_size() for pair in self.layers for t in pair)

    def __deepcopy__(self, memo: dict) -> KVCache:
        """A copy holding copies of the keys and values. A cache filled with gradients on holds
        tensors computed from the weights, which torch refuses to deepcopy (only graph leaves):
        those are copied detached, numbers only, as a copy of a computed result is."""
        return KVCache(tuple(tuple(_copied(t, memo) for t in pair) for pair in self.layers))


def _copied(t: Tensor, memo: dict) -> Tensor:
    """``t`` deep-copied: a graph leaf by torch's own deepcopy, a computed tensor detached."""
    return copy.deepcopy(t, memo) if t.is_leaf else t.detach().clone()


class MLP(nn.Module):
    """Position-wise feed-forward layer: d -> d_mlp -> d with a GELU."""

    def __init__(self, d_model: int, d_mlp: int) -> None:
        super().__init__()
        d_model, d_mlp = check_int(d_model, "d_model", minimum=1), check_int(d_mlp, "d_mlp", minimum=1)
        check_linear_weights_fit(d_model, (d_mlp,), also=((d_mlp, d_model),),  # refused before allocating
                                 sizes={"d_model": d_model, "d_mlp": d_mlp})
        self.fc_in = nn.Linear(d_model, d_mlp)
        self.fc_out = nn.Linear(d_mlp, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """``x`` ``(B, T, d_model)`` -> ``(B, T, d_model)``, each position on its own."""
        check_stream(x, "x", d_model=self.fc_in.in_features, weight=self.fc_in.weight)
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    """One pre-LayerNorm block: ``x + attn(ln(x))`` then (optionally) ``x + mlp(ln(x))``.

    Hook points on the residual stream: ``hook_resid_pre`` (the block's input), ``hook_attn_out``
    (what attention adds), ``hook_resid_mid`` (after it) and ``hook_resid_post`` (the output);
    the attention layer has its own (``attn.hook_q`` ... ``attn.hook_z``)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__} {shown(config, 60)}")
        self.ln_attn = nn.LayerNorm(config.d_model)
        self.grouped = config.num_kv_heads != config.num_heads
        if self.grouped:
            self.attn = GroupedQueryAttention(config.d_model, config.num_heads, config.num_kv_heads)
        else:
            self.attn = MultiHeadAttention(config.d_model, config.num_heads)
        self.ln_mlp = nn.LayerNorm(config.d_model) if config.mlp else None
        self.mlp = MLP(config.d_model, config.mlp_width) if config.mlp else None
        self.hook_resid_pre, self.hook_attn_out = HookPoint(), HookPoint()
        self.hook_resid_mid, self.hook_resid_post = HookPoint(), HookPoint()

    def forward(
        self,
        x: Tensor,
        *,
        need_weights: bool = False,
        past: tuple[Tensor, Tensor] | Callable[[Tensor, Tensor], tuple[Tensor, Tensor]] | None = None,
        heads: Tensor | None = None,
    ) -> tuple[Tensor, Tensor | None, tuple[Tensor, Tensor] | None]:
        """``x`` ``(B, T, d)`` -> ``(x (B, T, d), weights (B, h, T, T_total) | None, (k, v))``;
        ``past`` is the attention layer's KV cache (a ``(k, v)`` pair or a cache's append).
        ``heads`` ``(B, h, T, dk)``: the head outputs a run with this same ``x`` computed (before
        ``attn.hook_z``); the attention then starts at ``hook_z`` (no weights, no ``(k, v)``).
        ``need_weights`` is checked to be a bool either way; ``heads`` is checked against ``x``
        (its ``B`` and ``T``), the layer's ``h`` and ``dk``, and the block's dtype and device."""
        check_stream(x, "x", d_model=self.ln_attn.normalized_shape[0], weight=self.ln_attn.weight)
        check_flag(need_weights, "need_weights")  # with heads= too, where no weights are made
        if heads is not None:
            self._check_heads(heads, x)
        x = self.hook_resid_pre(x)
        if heads is None:
            attended, weights, kv = self.attn(self.ln_attn(x), is_causal=True, need_weights=need_weights,
                                              past=past, return_kv=True)
        else:  # q, k, v and the weights would be that run's: only the end of attn.forward runs
            attn = self.attn  # hook_z, merge the heads, W_O: as attn.forward ends (lesson 04 prints it)
            attended, weights, kv = attn.out_proj(attn.merge_heads(attn.hook_z(heads))), None, None
        x = self.hook_resid_mid(x + self.hook_attn_out(attended))  # (B, T, d)
        if self.mlp is not None:
            x = x + self.mlp(self.ln_mlp(x))
        return self.hook_resid_post(x), weights, kv

    def _check_heads(self, heads: object, x: Tensor) -> None:
        """``heads`` fits :meth:`forward`'s ``x`` ``(B, T, d)``: a float ``(B, h, T, dk)`` tensor
        with this layer's ``h`` and ``dk``, of the block's dtype and on its device (another batch,
        dtype or device would fail inside ``out_proj`` or the residual sum with torch's words)."""
        wanted = (x.shape[0], self.attn.num_heads, x.shape[1], self.attn.d_k)
        layout = f"(B={wanted[0]}, h={wanted[1]}, T={wanted[2]}, dk={wanted[3]})"
        check_tensor(heads, "heads", ndim=4, layout=layout)
        if tuple(heads.shape) != wanted:
            raise ValueError(f"heads must be {layout}, the head outputs of a run with this x "
                             f"{describe_shape(x)}, got shape {describe_shape(heads)}")
        check_matches_module(heads, "heads", self.ln_attn.weight)


def _weight_bytes(config: ModelConfig) -> int:
    """Bytes of the float32 weights a config builds (the big matrices; biases and norms left
    out, so a slight underestimate), to refuse a model too large before torch allocates it."""
    d = config.d_model
    mlp = 2 * d * (config.d_mlp or 4 * d) if config.mlp else 0
    per_layer = 4 * d * d + mlp
    return 4 * (2 * config.vocab_size * d + config.max_len * d + config.num_layers * per_layer)


class TinyTransformer(nn.Module):
    """Decoder-only transformer: token + position embeddings, blocks, LayerNorm, unembedding.

    ``forward(tokens (B, T))`` returns ``(logits (B, T, V), attention)`` where
    ``attention`` is a list of ``(B, h, T, T)`` tensors, one per layer, when
    ``return_attention=True`` (else ``None``). Logits at position ``t`` predict token
    ``t + 1``.

    ``config`` is read-only: the weights were built for it, and every later check reads it (a
    config of another size set afterwards made those messages contradict the weights: battery 30).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        if not isinstance(config, ModelConfig):
            raise TypeError(f"config must be a ModelConfig, got {type(config).__name__}")
        check_fits_in_memory(_weight_bytes(config), "TinyTransformer(config)",
                             f"float32 weights for vocab_size={config.vocab_size}, max_len={config.max_len}, "
                             f"d_model={config.d_model}, num_layers={config.num_layers}")
        self._config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_len, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_final = nn.LayerNorm(config.d_model)
        self.unembed = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Embeddings keep PyTorch's N(0, 1) init: at this scale (rather than GPT-2's 0.02)
        # Adam's early steps cannot swamp them, and induction heads form several times
        # sooner. The unembedding starts small so the first predictions are near uniform.
        nn.init.normal_(self.unembed.weight, std=0.02)
        self.hook_embed, self.hook_pos_embed = HookPoint(), HookPoint()  # see embed()
        name_hook_points(self)  # "blocks.0.attn.hook_z", ...

    @property
    def config(self) -> ModelConfig:
        """The :class:`ModelConfig` the weights were built for (read-only)."""
        return self._config

    @config.setter
    def config(self, value: object) -> None:
        raise AttributeError(f"TinyTransformer.config is read-only: the weights were built for "
                             f"{self._config}, and a config of another size would make every check "
                             f"contradict them; build a new model with TinyTransformer(config) instead "
                             f"(got {type(value).__name__} {shown(value, 80)})")

    # -- hook points (course_utils.attention.hooks) ------------------------------------
    def hooks(self, fwd_hooks: Sequence[tuple[Where, HookFn]]) -> AbstractContextManager[None]:
        """``with model.hooks([("blocks.0.attn.hook_z", fn), ...]):`` runs every pass inside with
        those hooks, each called as ``fn(tensor, hook)`` (see :mod:`course_utils.attention.hooks`)."""
        return hooks(self, fwd_hooks)

    def run_with_cache(self, tokens: Tensor, *, names: Sequence[Where] | Where | None = None,
                       **kwargs: object) -> tuple[Tensor, dict[str, Tensor]]:
        """``(logits, {hook name: tensor})`` for ``model(tokens, **kwargs)``, recording every hook
        point or those ``names`` selects (``"blocks.0.attn.hook_pattern"``, or a test on names)."""
        (logits, _), cache = run_with_cache(self, tokens, names=names, **kwargs)
        return logits, cache

    def _head_hooks(self, gates: Tensor | None, edit_heads: Callable[[int, Tensor], Tensor] | None
                    ) -> list[tuple[str, HookFn]]:
        """``head_mask`` and ``edit_heads`` as hooks on each layer's ``attn.hook_z``: the gates
        scale each head's output ``(B, h, T, dk)`` (0 silences a head), then ``edit_heads`` maps it."""
        added: list[tuple[str, HookFn]] = []
        for i in range(self.config.num_layers):
            if gates is not None:
                added.append((f"blocks.{i}.attn.hook_z", lambda z, hook, g=gates[i]: z * g.view(1, -1, 1, 1)))
            if edit_heads is not None:
                added.append((f"blocks.{i}.attn.hook_z",
                              lambda z, hook, i=i: check_edited_heads(edit_heads(i, z), z)))
        return added

    # -- input checks -------------------------------------------------------------
    def _check_tokens(self, tokens: object, past_len: int = 0, *, name: str = "tokens") -> None:
        """``tokens`` fit this model: a 2-D long tensor ``(B, T)`` of at least one token, on the
        model's device, with ``past_len + T <= max_len`` and ids in ``0..vocab_size-1``. ``name``
        is how the messages name it: a caller whose own argument is read as the tokens (a
        ``sample_batch``'s output, ``reference_tokens``) checks it under that name before the
        forward pass, which would say ``tokens``."""
        cfg = self.config
        if len(self.blocks) != cfg.num_layers:  # (a hook name of a missing block was blamed: battery 27)
            raise ValueError(f"the model has {len(self.blocks)} blocks but its config says num_layers="
                             f"{cfg.num_layers}: was a block added or removed after construction? Build "
                             f"a new TinyTransformer with the config you want")
        if not isinstance(tokens, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of dtype torch.long, got {type(tokens).__name__}")
        check_dense(tokens, name)
        if tokens.dtype != torch.long:
            raise TypeError(f"{name} must have dtype torch.long (token ids), got {tokens.dtype}")
        if tokens.ndim != 2:
            hint = f" (add a batch dim with {name}.unsqueeze(0))" if tokens.ndim == 1 else ""
            raise ValueError(f"{name} must be 2-D (B, T), got shape {describe_shape(tokens)}{hint}")
        if tokens.shape[0] == 0 or tokens.shape[1] == 0:
            raise ValueError(f"{name} must hold at least one token, got shape {describe_shape(tokens)}")
        check_model_holds_values(self)
        device = self.token_embedding.weight.device
        if tokens.device != device:
            raise ValueError(f"{name} are on device {tokens.device} but the model's parameters are on "
                             f"{device}: move them with .to({str(device)!r})")
        check_not_inference(tokens, name, tracked=self.token_embedding.weight.requires_grad)
        if past_len + tokens.shape[1] > cfg.max_len:
            where = f" after {past_len} cached tokens" if past_len else ""
            raise ValueError(
                f"{name} is a sequence too long for the model: {tokens.shape[1]} tokens{where} exceed "
                f"max_len={cfg.max_len}"
            )
        low, high = int(tokens.min()), int(tokens.max())
        if low < 0 or high >= cfg.vocab_size:
            raise ValueError(
                f"{name} must hold ids in [0, vocab_size={cfg.vocab_size}), got min {low}, max {high}"
            )

    def _check_head_mask(self, head_mask: object) -> Tensor | None:
        if head_mask is None:
            return None
        cfg = self.config
        expected = (cfg.num_layers, cfg.num_heads)
        if not isinstance(head_mask, Tensor):
            raise TypeError(
                f"head_mask must be a float torch.Tensor {expected}, got {type(head_mask).__name__}"
            )
        if not head_mask.dtype.is_floating_point:
            raise TypeError(
                f"head_mask must be a float tensor of gates (1 = keep, 0 = ablate), got {head_mask.dtype}"
            )
        if tuple(head_mask.shape) != expected:
            raise ValueError(
                f"head_mask must have shape (num_layers, num_heads) = {expected}, got "
                f"{describe_shape(head_mask)}"
            )
        weight = self.token_embedding.weight
        if head_mask.device != weight.device and head_mask.device.type != "cpu":
            raise ValueError(f"head_mask is on device {head_mask.device} but the model's parameters "
                             f"are on {weight.device}: pass it on {weight.device}"
                             + ("" if weight.device.type == "cpu" else " (or on the CPU)"))
        if not torch.isfinite(head_mask).all():
            bad = [tuple(i) for i in (~torch.isfinite(head_mask)).nonzero().tolist()]
            raise ValueError(
                f"head_mask must hold finite gates (1 = keep, 0 = ablate), got NaN or infinity at "
                f"(layer, head) {bad}"
            )
        check_not_inference(head_mask, "head_mask", tracked=any(p.requires_grad for p in self.parameters()))
        # the gates take the model's dtype (0 and 1 are exact in every float dtype) and device
        return head_mask.to(device=weight.device, dtype=weight.dtype)

    def _check_cache(self, cache: KVCache) -> None:
        """``cache`` (already consistent in itself, see :class:`KVCache`) fits this model."""
        cfg = self.config
        if len(cache.layers) != cfg.num_layers:
            raise ValueError(f"cache has {len(cache.layers)} layers, the model has {cfg.num_layers}")
        expected = (cfg.num_kv_heads, cfg.d_head)
        weight = self.token_embedding.weight
        for i, (k, _) in enumerate(cache.layers):  # KVCache checked that v is shaped like k
            if (k.shape[1], k.shape[3]) != expected:
                kind = "multi-head attention" if cfg.num_kv_heads == cfg.num_heads else \
                    f"grouped-query attention (g = {cfg.num_kv_heads})"
                raise ValueError(
                    f"cache layer {i} holds k of shape {describe_shape(k)}: {k.shape[1]} key/value heads "
                    f"of width {k.shape[3]}, but this model ({kind}) expects (B, g={expected[0]}, T, "
                    f"dk={expected[1]}); the cache comes from another model"
                )
            if k.dtype != weight.dtype or k.device != weight.device:
                error = TypeError if k.dtype != weight.dtype else ValueError
                raise error(f"cache holds {k.dtype} keys and values on device {k.device}, but the "
                            f"model's parameters are {weight.dtype} on {weight.device}: pass the cache "
                            f"this model returned (or move the model with .to(...) before building "
                            f"the cache)")

    # -- forward passes -----------------------------------------------------------
    def embed(self, tokens: Tensor, start: int = 0) -> Tensor:
        """The residual stream entering block 0 for ``tokens`` ``(B, T)`` at positions
        ``start, start + 1, ...`` (``start`` = tokens already cached): the token embeddings pass
        the hook point ``hook_embed`` and the position embeddings ``hook_pos_embed``, each
        ``(B, T, d)``, and their sum is returned. A decoder that runs the blocks itself
        (:func:`course_utils.model.kv_cache.decode_step`) embeds through here, so hooks on
        these two points see every pass. ``start + T`` must not exceed ``max_len``."""
        start = check_int(start, "start", minimum=0, maximum=self.config.max_len - 1)
        self._check_tokens(tokens, past_len=start)
        positions = torch.arange(start, start + tokens.shape[1], device=tokens.device)  # (T,)
        tok = self.hook_embed(self.token_embedding(tokens))  # (B, T, d)
        pos = self.hook_pos_embed(self.position_embedding(positions).expand_as(tok))  # (B, T, d)
        return tok + pos  # (B, T, d)

    def run_blocks(self, resid: Tensor, start_block: int = 0, stop_block: int | None = None, *,
                   need_weights: bool = False, heads: Tensor | None = None,
                   ) -> tuple[Tensor, list[Tensor] | None]:
        """Blocks ``start_block .. stop_block - 1`` (``stop_block`` None: to the last) on ``resid``
        ``(B, T, d)``, the residual stream entering block ``start_block``.

        ``heads`` ``(B, h, T, dk)``, when given, are block ``start_block``'s head outputs as a run
        with the same ``resid`` computed them (read at ``blocks.{k}.attn.hook_z`` before any edit
        there): that block starts at its ``attn.hook_z``, whose hooks (gates, edits) apply, and
        skips its LayerNorm, q/k/v projections and attention, which would compute them again.

        Returns ``(the stream leaving the last block run (B, T, d), [weights (B, h, T, T)] per
        block run | None)``: ``need_weights`` asks for the attention weights. This is the one
        loop over the blocks that :meth:`forward` runs; every block's hook points fire as there,
        and hooks installed with :meth:`hooks` apply. ``start_block == stop_block`` runs no block
        and returns ``resid``.
        """
        L = self.config.num_layers
        start_block = check_int(start_block, "start_block", minimum=0, maximum=L)
        stop_block = L if stop_block is None else check_int(stop_block, "stop_block", minimum=start_block,
                                                            maximum=L)
        check_flag(need_weights, "need_weights")
        self._check_resid(resid, start_block)
        if heads is not None:
            self._check_heads(heads, resid, start_block, stop_block, need_weights)
        attention = [] if need_weights else None
        for block in self.blocks[start_block:stop_block]:
            resid, weights, _ = block(resid, need_weights=need_weights, heads=heads)
            heads = None  # the next blocks compute their own
            if attention is not None:
                attention.append(weights)
        return resid, attention

    def _check_resid(self, resid: object, start_block: int) -> None:
        """``resid`` is a residual stream ``(B, T, d_model)`` this model's blocks can take."""
        cfg = self.config
        layout = f"(B, T, d_model={cfg.d_model}): the residual stream entering block {start_block}"
        check_tensor(resid, "resid", ndim=3, layout=layout)
        if resid.shape[2] != cfg.d_model or resid.shape[0] == 0 or resid.shape[1] == 0:
            raise ValueError(f"resid must have shape {layout}, with B and T at least 1, got "
                             f"{describe_shape(resid)}")
        if resid.shape[1] > cfg.max_len:
            raise ValueError(f"resid holds {resid.shape[1]} positions, more than max_len={cfg.max_len}")
        weight = self.token_embedding.weight
        check_same_dtype_and_device({"resid": resid, "the model's parameters": weight})
        check_not_inference(resid, "resid", tracked=weight.requires_grad)  # else a block names it x

    def _check_heads(self, heads: object, resid: Tensor, start_block: int, stop_block: int,
                     need_weights: bool) -> None:
        """``heads`` fit block ``start_block``'s head outputs for ``resid`` ``(B, T, d)``."""
        cfg = self.config
        if self.blocks[start_block].grouped:  # grouped-query attention has no hook_z to enter at
            raise ValueError(f"heads enter a block at attn.hook_z, which only multi-head blocks have; "
                             f"this model's blocks are grouped-query (num_kv_heads={cfg.num_kv_heads}, "
                             f"num_heads={cfg.num_heads}): run block {start_block} from resid alone")
        B, T, _ = resid.shape
        layout = f"(B={B}, h={cfg.num_heads}, T={T}, dk={cfg.d_head}): block {start_block}'s head outputs"
        check_tensor(heads, "heads", ndim=4, layout=layout)
        if tuple(heads.shape) != (B, cfg.num_heads, T, cfg.d_head):
            raise ValueError(f"heads must have shape {layout}, got {describe_shape(heads)}")
        check_same_dtype_and_device({"heads": heads, "resid": resid})
        if start_block == stop_block:
            raise ValueError(f"heads enter block {start_block}, but no block runs "
                             f"(start_block == stop_block == {start_block})")
        if need_weights:
            raise ValueError("need_weights=True (forward's return_attention=True) needs every block's "
                             f"attention weights; heads skip block {start_block}'s attention: pass one or "
                             "the other")

    def forward(
        self,
        tokens: Tensor | None = None,
        *,
        return_attention: bool = False,
        head_mask: Tensor | None = None,
        edit_heads: Callable[[int, Tensor], Tensor] | None = None,
        start_block: int = 0,
        resid: Tensor | None = None,
        heads: Tensor | None = None,
    ) -> tuple[Tensor, list[Tensor] | None]:
        """``tokens`` ``(B, T)`` long -> ``(logits (B, T, V), [weights (B, h, T, T)] * L | None)``.

        ``edit_heads(layer, heads (B, h, T, dk)) -> (B, h, T, dk)``, when given, is called in
        every layer on the gated head outputs just before they are merged.

        Entering at a block: ``forward(resid=x, start_block=k)`` (no ``tokens``) runs blocks
        ``k .. L - 1`` on ``x`` ``(B, T, d)``, the residual stream entering block ``k`` (e.g.
        cached at ``blocks.{k}.hook_resid_pre``; ``k = L``: the stream entering ``ln_final``),
        then the final LayerNorm and the unembedding. Given the stream of a full run, the logits
        are that run's (up to float rounding) and the hook points of blocks ``k ..`` fire in the
        same order; the embedding's and those of blocks below ``k`` do not fire. The attention
        weights, when asked for, are those of the blocks run. ``heads``: block ``k``'s head
        outputs from such a run, entering it at ``attn.hook_z`` (see :meth:`run_blocks`).
        """
        check_flag(return_attention, "return_attention")
        if resid is None:
            if start_block != 0:
                raise ValueError(f"start_block={shown(start_block)} needs resid, the residual stream "
                                 f"entering "
                                 "that block (B, T, d_model); tokens always enter at block 0")
            self._check_tokens(tokens)
        elif tokens is not None:
            raise ValueError("pass tokens (to run from the embedding) or resid (to enter at start_block), "
                             "not both")
        if edit_heads is not None:  # the arity too: a one-argument function fails inside a hook
            check_callable(edit_heads, "edit_heads", "a function (layer, heads) -> heads or None", nargs=2)
        gates = self._check_head_mask(head_mask)
        x = self.embed(tokens) if resid is None else resid  # (B, T, d); run_blocks checks resid
        with self.hooks(self._head_hooks(gates, edit_heads)):
            x, attention = self.run_blocks(x, start_block, need_weights=return_attention, heads=heads)
        return self.unembed(self.ln_final(x)), attention  # (B, T, V)

    def forward_with_cache(
        self, tokens: Tensor, cache: KVCache | None = None, *, head_mask: Tensor | None = None
    ) -> tuple[Tensor, KVCache]:
        """Process ``tokens`` ``(B, T_new)`` after the ``cache.length`` tokens in ``cache``.

        Returns ``(logits (B, T_new, V), new_cache)``; feeding a sequence in pieces gives
        the same logits as one :meth:`forward` over the whole sequence.
        """
        past_len = 0
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
            self._check_cache(cache)
            past_len = cache.length
        self._check_tokens(tokens, past_len)
        if cache is not None and cache.batch_size != tokens.shape[0]:
            raise ValueError(
                f"cache holds batch size {cache.batch_size}, tokens have batch size {tokens.shape[0]}"
            )
        gates = self._check_head_mask(head_mask)
        x = self.embed(tokens, past_len)  # (B, T_new, d)
        new_layers = []
        with self.hooks(self._head_hooks(gates, None)):
            for i, block in enumerate(self.blocks):
                x, _, kv = block(x, past=None if cache is None else cache.layers[i])
                new_layers.append(kv)
        return self.unembed(self.ln_final(x)), KVCache(tuple(new_layers))

    @torch.no_grad()
    def generate(self, tokens: Tensor, num_new: int, *, use_cache: bool = True) -> Tensor:
        """Greedy decoding: append ``num_new`` argmax tokens to ``tokens`` ``(B, T)``."""
        num_new = check_int(num_new, "num_new", minimum=0)
        check_flag(use_cache, "use_cache")
        self._check_tokens(tokens)
        if tokens.shape[1] + num_new > self.config.max_len:
            raise ValueError(
                f"{tokens.shape[1]} prompt tokens + {num_new} new ones exceed max_len={self.config.max_len}"
            )
        out, cache = tokens, None
        step_input = tokens
        for _ in range(num_new):
            if use_cache:
                logits, cache = self.forward_with_cache(step_input, cache)
            else:
                logits, _ = self(out)
            step_input = _greedy_token(logits[:, -1], self, out.shape[1])  # (B, 1)
            out = torch.cat([out, step_input], dim=1)
        return out


def _greedy_token(logits: Tensor, model: nn.Module, position: int) -> Tensor:
    """The argmax of ``logits`` ``(B, V)`` as ``(B, 1)``; NaN logits are refused, since their
    argmax is a meaningless id (NaN weights, or an overflow, give a row of NaN whose argmax is
    token 0 or whichever NaN comes first)."""
    if torch.isnan(logits).any():
        poisoned = next((name for name, p in model.named_parameters()
                         if p.is_floating_point() and not bool(torch.isfinite(p).all())), None)
        cause = (f"the model's {poisoned} holds NaN or infinity" if poisoned is not None
                 else "the weights are finite, so an activation overflowed (float16?)")
        raise ValueError(f"generate: the logits for position {position} are NaN, so there is no next token "
                         f"to pick ({cause})")
    return logits.argmax(-1, keepdim=True)


def convert_model(model, num_kv_heads: int, method: str = "mean", *, seed: int = 0):
    """A copy of a trained MHA :class:`~course_utils.TinyTransformer` whose blocks share
    ``num_kv_heads`` K/V heads, each built by :meth:`GroupedQueryAttention.from_multi_head`.

    Embeddings, LayerNorms, MLPs, Q and output projections are copied unchanged; ``seed``
    drives ``method="random"``. The copy has the original's dtype and device. The original
    model is not modified.
    """
    if not isinstance(model, TinyTransformer):
        raise TypeError(f"model must be a TinyTransformer, got {type(model).__name__}")
    if model.config.num_kv_heads != model.config.num_heads:
        raise ValueError(f"model must use plain multi-head attention (num_kv_heads == num_heads = "
                         f"{model.config.num_heads}), got num_kv_heads={model.config.num_kv_heads}")
    method = check_choice(method, "method", CONVERSION_METHODS)
    check_kv_heads(num_kv_heads, model.config.num_heads)
    seed = check_seed(seed, "seed")  # a Python int: torch.Generator.manual_seed takes no NumPy int
    weight = model.token_embedding.weight
    if weight.is_meta:
        raise ValueError("model is on the meta device (its parameters hold no values, e.g. built "
                         "under torch.device('meta')): load or initialise its weights first, then "
                         "convert it")
    config = dataclasses.replace(model.config, num_kv_heads=num_kv_heads)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        converted = TinyTransformer(config).to(weight.dtype)  # the copied weights keep every bit
    generator = torch.Generator().manual_seed(seed)
    state = {k: v for k, v in model.state_dict().items() if ".attn." not in k}
    missing = converted.load_state_dict(state, strict=False).missing_keys
    assert all(".attn." in k for k in missing), missing  # only the attention is rebuilt
    for old, new in zip(model.blocks, converted.blocks, strict=True):
        new.attn = GroupedQueryAttention.from_multi_head(old.attn, num_kv_heads, method,
                                                         generator=generator)
    name_hook_points(converted)  # the new layers' hook points: "blocks.0.attn.hook_z", ...
    return converted.to(device=weight.device, dtype=weight.dtype).train(model.training)
