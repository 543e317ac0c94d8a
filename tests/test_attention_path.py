"""One attention path: the trained model, MultiHeadAttention and GroupedQueryAttention all run
MultiHeadAttentionBase.forward, and every tensor an analysis reads passes a named hook point on it:
editing it there changes the output as predicted."""

from __future__ import annotations

import pytest
import torch

import course_utils.model.transformer as model_module
from course_utils import MultiHeadAttention
from course_utils.attention.gqa import GroupedQueryAttention
from course_utils.attention.hooks import hook_points, hooks, run_with_cache
from course_utils.attention.mha import MultiHeadAttentionBase
from course_utils.model.transformer import ModelConfig, TinyTransformer


@pytest.mark.parametrize("make", [lambda: MultiHeadAttention(32, 4), lambda: GroupedQueryAttention(32, 4, 2)],
                         ids=["mha", "gqa"])
def test_a_cache_gives_the_rows_of_the_full_causal_pass(make):
    torch.manual_seed(0)
    layer = make().eval()
    x = torch.randn(2, 9, 32)
    full, _ = layer(x, is_causal=True)
    first, _, past = layer(x[:, :6], is_causal=True, return_kv=True)
    rest, weights, (k, v) = layer(x[:, 6:], is_causal=True, past=past, need_weights=True, return_kv=True)
    torch.testing.assert_close(torch.cat([first, rest], 1), full, rtol=1e-5, atol=1e-6)
    assert k.shape[2] == 9 and weights.shape == (2, 4, 3, 9)
    assert torch.all(weights[:, :, 0, 7:] == 0) and torch.all(weights[:, :, 1, 8:] == 0)  # causal, offset


LAYERS = [lambda: MultiHeadAttention(16, 4), lambda: GroupedQueryAttention(16, 4, 2),
          lambda: GroupedQueryAttention(16, 4, 1)]
LAYER_IDS = ["mha", "gqa", "mqa"]


def _heads_to_output(layer, z):
    """What the layer does with the heads ``z`` ``(B, h, T, dk)``: merge them, then W_O."""
    B, h, T, dk = z.shape
    return layer.out_proj(z.transpose(1, 2).reshape(B, T, h * dk))


@pytest.mark.parametrize("make", LAYERS, ids=LAYER_IDS)
def test_the_output_is_computed_from_what_hook_z_sees(make):
    torch.manual_seed(1)
    layer = make().eval()
    x = torch.randn(2, 5, 16)
    (out, _), cache = run_with_cache(layer, x, is_causal=True)
    torch.testing.assert_close(out, _heads_to_output(layer, cache["hook_z"]))
    # silencing head 1 at the hook takes away exactly head 1's slice of W_O times its output
    z = cache["hook_z"]
    with hooks(layer, [("hook_z", lambda z, hook: z * torch.tensor([1.0, 0.0, 1.0, 1.0]).view(1, 4, 1, 1))]):
        edited, _ = layer(x, is_causal=True)
    w_o_1 = layer.out_proj.weight[:, 4:8]  # (d, dk): head 1's columns
    torch.testing.assert_close(edited, out - z[:, 1] @ w_o_1.T, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", LAYERS, ids=LAYER_IDS)
def test_the_heads_are_the_pattern_times_the_values_hooks_see(make):
    torch.manual_seed(2)
    layer = make().eval()
    x = torch.randn(2, 6, 16)
    (out, weights), cache = run_with_cache(layer, x, is_causal=True, need_weights=True)
    pattern, v = cache["hook_pattern"], cache["hook_v"]  # (B, h, T, T), (B, g, T, dk)
    assert torch.equal(pattern, weights)
    shared = v.repeat_interleave(layer.num_heads // layer.num_kv_heads, dim=1)  # head i reads i // (h/g)
    torch.testing.assert_close(cache["hook_z"], pattern @ shared, rtol=1e-5, atol=1e-6)
    # a pattern edited at the hook (every head looks at the first token only) gives the output predicted
    first_only = torch.zeros_like(pattern)
    first_only[..., 0] = 1.0
    with hooks(layer, [("hook_pattern", lambda p, hook: first_only)]):
        edited, _ = layer(x, is_causal=True)
    torch.testing.assert_close(edited, _heads_to_output(layer, first_only @ shared), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("make", LAYERS, ids=LAYER_IDS)
def test_zero_queries_at_hook_q_give_a_uniform_causal_pattern(make):
    torch.manual_seed(3)
    layer = make().eval()
    with hooks(layer, [("hook_q", lambda q, hook: torch.zeros_like(q))]):
        _, weights = layer(torch.randn(1, 4, 16), is_causal=True, need_weights=True)
    expected = torch.tril(torch.ones(4, 4)) / torch.arange(1, 5)[:, None]  # query i: i + 1 equal keys
    torch.testing.assert_close(weights, expected.expand(1, 4, 4, 4))


@pytest.mark.parametrize("make", LAYERS, ids=LAYER_IDS)
def test_the_fast_branch_gives_the_step_by_step_numbers(make):
    torch.manual_seed(4)
    layer = make().eval()
    x = torch.randn(3, 7, 16)
    padding = torch.ones(3, 7, dtype=torch.bool)
    padding[1, 4:] = False
    for kwargs in ({}, {"is_causal": True}, {"is_causal": True, "key_padding_mask": padding}):
        fast, none = layer(x, **kwargs)
        slow, weights = layer(x, need_weights=True, **kwargs)
        assert none is None and weights is not None
        torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
        with hooks(layer, [("hook_pattern", lambda p, hook: None)]):  # a reader: the weights are needed
            read, _ = layer(x, **kwargs)
        assert torch.equal(read, slow)


def test_the_model_runs_one_forward_and_names_every_tensor_on_it():
    assert MultiHeadAttention.forward is MultiHeadAttentionBase.forward
    assert GroupedQueryAttention.forward is MultiHeadAttentionBase.forward
    torch.manual_seed(5)
    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4, num_kv_heads=2,
                                        num_layers=2, mlp=True)).eval()
    tokens = torch.randint(0, 10, (2, 8))
    logits, cache = model.run_with_cache(tokens)
    for i in range(2):
        for name in ("hook_q", "hook_k", "hook_v", "hook_pattern", "hook_z"):
            assert f"blocks.{i}.attn.{name}" in cache
        block = model.blocks[i]
        resid_pre = cache[f"blocks.{i}.hook_resid_pre"]
        attn_out = _heads_to_output(block.attn, cache[f"blocks.{i}.attn.hook_z"])
        torch.testing.assert_close(cache[f"blocks.{i}.hook_attn_out"], attn_out)
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_mid"], resid_pre + attn_out)
        mid = cache[f"blocks.{i}.hook_resid_mid"]
        torch.testing.assert_close(cache[f"blocks.{i}.hook_resid_post"], mid + block.mlp(block.ln_mlp(mid)))
    assert torch.equal(cache["blocks.1.hook_resid_pre"], cache["blocks.0.hook_resid_post"])
    torch.testing.assert_close(logits, model.unembed(model.ln_final(cache["blocks.1.hook_resid_post"])))
    torch.testing.assert_close(logits, model(tokens)[0])  # recording changed nothing
    assert not any(p.has_hooks for p in hook_points(model).values())  # and left nothing behind


def test_head_mask_and_edit_heads_are_hooks_at_hook_z():
    torch.manual_seed(6)
    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4)).eval()
    tokens = torch.randint(0, 10, (2, 8))
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    gated, _ = model(tokens, head_mask=gates)
    silence = torch.tensor([1.0, 1.0, 0.0, 1.0]).view(1, 4, 1, 1)
    with model.hooks([("blocks.1.attn.hook_z", lambda z, hook: z * silence)]):
        hooked, _ = model(tokens)
    assert torch.equal(gated, hooked)
    edited, _ = model(tokens, edit_heads=lambda layer, z: z * silence if layer == 1 else z)
    assert torch.equal(gated, edited)
    assert not torch.allclose(gated, model(tokens)[0])  # the gate did something


@pytest.mark.parametrize("past,message", [
    ((torch.zeros(2, 4, 3, 8),), "past must be a \\(k, v\\) pair"),
    ((torch.zeros(2, 4, 3, 8), torch.zeros(2, 4, 3, 8)), "past k must be \\(B=1, g=4, T_past, dk=8\\)"),
    ((torch.zeros(1, 4, 3, 8), torch.zeros(1, 4, 2, 8)), "past k and v must have one shape"),
    ((torch.zeros(1, 4, 3, 8, dtype=torch.float64), torch.zeros(1, 4, 3, 8, dtype=torch.float64)), "past k"),
    ("kv", "past must be a \\(k, v\\) pair"),
])
def test_a_bad_cache_is_named(past, message):
    layer = MultiHeadAttention(32, 4)
    with pytest.raises((TypeError, ValueError), match=message):
        layer(torch.randn(1, 2, 32), past=past)


def test_hooks_run_in_order_and_are_gone_after_the_block_even_after_an_error():
    torch.manual_seed(7)
    layer = MultiHeadAttention(8, 2).eval()
    x = torch.randn(1, 3, 8)
    plain, _ = layer(x)
    # two hooks at one point: the second sees the first one's result, (z + 1) * 2
    with hooks(layer, [("hook_z", lambda z, hook: z + 1), ("hook_z", lambda z, hook: z * 2)]):
        (both, _), seen = run_with_cache(layer, x, names="hook_z")
    heads = run_with_cache(layer, x, names="hook_z")[1]["hook_z"]
    torch.testing.assert_close(seen["hook_z"], (heads + 1) * 2)  # a recorder added last sees the edits
    torch.testing.assert_close(both, _heads_to_output(layer, (heads + 1) * 2))
    with pytest.raises(RuntimeError, match="stop"), hooks(layer, [("hook_v", lambda v, hook: v * 0)]):
        raise RuntimeError("stop")
    assert torch.equal(layer(x)[0], plain)
    assert not any(p.has_hooks for p in hook_points(layer).values())
    with pytest.raises(ValueError, match="no hook point whose name passes"):
        run_with_cache(layer, x, names=lambda name: name.endswith("hook_resid_pre"))


def test_a_converted_model_names_its_new_hook_points():
    from course_utils.model.transformer import convert_model

    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4, num_layers=2))
    names = []
    converted = convert_model(model, 2)
    record = lambda k, hook: names.append((hook.name, k.shape[1]))  # noqa: E731
    with converted.hooks([(lambda n: n.endswith("hook_k"), record)]):
        converted(torch.randint(0, 10, (1, 8)))
    assert names == [("blocks.0.attn.hook_k", 2), ("blocks.1.attn.hook_k", 2)]


def test_a_bad_hook_is_named():
    layer = MultiHeadAttention(8, 2)
    with pytest.raises(TypeError, match="a hook must be a function"), hooks(layer, [("hook_z", "zero")]):
        pass
    with pytest.raises(ValueError, match="the hook at hook_v must return heads of the shape"):
        with hooks(layer, [("hook_v", lambda v, hook: v[:, :1])]):
            layer(torch.randn(1, 2, 8))


def _import_graph(level: int) -> dict[str, set[str]]:
    """course_utils' own imports (deferred ones included), between modules (``level=0``) or
    between top-level folders and modules of the package (``level=1``: ``model``, ``bench``, ...)."""
    import ast
    from pathlib import Path

    root = Path(model_module.__file__).parent.parent
    paths = {".".join(p.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__"): p
             for p in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                target = f"{base}.{node.module}" if node.module else base
                submodules = {f"{target}.{a.name}" for a in node.names} & paths.keys()
                # "from . import answers" reads the submodule, not the package's __init__
                edges.update(submodules if submodules and not node.module else {target, *submodules})
    graph = {k: {e for e in v if e in graph and e != k} for k, v in graph.items()}
    if level == 1:  # course_utils.model.kv_cache -> model; course_utils/__init__ imports all: left out
        folder = lambda name: name.split(".")[1] if "." in name else None  # noqa: E731
        folders: dict[str, set[str]] = {}
        for src, targets in graph.items():
            if folder(src) is not None:
                folders.setdefault(folder(src), set()).update(
                    folder(t) for t in targets if folder(t) not in (None, folder(src)))
        return folders
    return {k: v for k, v in graph.items() if k != "course_utils"}


def _a_cycle(graph: dict[str, set[str]]) -> tuple[str, ...] | None:
    def cycle_from(start: str, seen: tuple[str, ...]) -> tuple[str, ...] | None:
        for nxt in sorted(graph.get(start, ())):
            if nxt in seen:
                return (*seen, nxt)
            found = cycle_from(nxt, (*seen, nxt))
            if found:
                return found
        return None

    return next((c for c in (cycle_from(m, (m,)) for m in sorted(graph)) if c), None)


@pytest.mark.parametrize("level", [0, 1], ids=["modules", "folders"])
def test_the_package_has_no_import_cycle(level):
    """No module imports itself through others, deferred imports included, and no folder does
    either (model used bench through kv_cache.time_cold, and tasks through two_relations)."""
    graph = _import_graph(level)
    # the one loop left, inside the exercise checker: answers.decode_case builds a core.Case on use
    graph.get("course_utils.exercises.answers", set()).discard("course_utils.exercises.core")
    assert len(graph) > (20 if level == 0 else 5)  # the graph was read
    assert _a_cycle(graph) is None, _a_cycle(graph)


def test_the_cycle_finder_finds_a_cycle():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ("a", "b", "c", "a")
    assert _a_cycle({"a": {"b"}, "b": set()}) is None
