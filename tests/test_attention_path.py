"""One attention path: the trained model, MultiHeadAttention and GroupedQueryAttention all run
MultiHeadAttentionBase.forward; the KV cache and the edit_heads hook are arguments of it."""

from __future__ import annotations

import inspect

import pytest
import torch

import course_utils.model.transformer as model_module
from course_utils import MultiHeadAttention
from course_utils.attention.gqa import GroupedQueryAttention
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


@pytest.mark.parametrize("make", [lambda: MultiHeadAttention(16, 2), lambda: GroupedQueryAttention(16, 2, 1)],
                         ids=["mha", "gqa"])
def test_edit_heads_is_a_hook_on_the_same_path(make):
    torch.manual_seed(1)
    layer = make().eval()
    x = torch.randn(1, 5, 16)
    seen = []

    def silence_head_1(heads):
        seen.append(tuple(heads.shape))
        return heads * torch.tensor([1.0, 0.0]).view(1, 2, 1, 1)

    out, _ = layer(x, edit_heads=silence_head_1)
    q, k, v = layer.project_qkv(x, x, x)
    heads, _ = layer.attend(q, k, v, None, False, False)
    heads[:, 1] = 0
    torch.testing.assert_close(out, layer.out_proj(layer.merge_heads(heads)))
    assert seen == [(1, 2, 5, 8)]


def test_every_layer_and_the_model_share_one_forward():
    assert MultiHeadAttention.forward is MultiHeadAttentionBase.forward
    assert GroupedQueryAttention.forward is MultiHeadAttentionBase.forward
    source = inspect.getsource(model_module.Block.forward)
    assert "self.attn(" in source and "scaled_dot_product_attention" not in source
    assert "project_qkv" not in source and "merge_heads" not in source
    model = TinyTransformer(ModelConfig(vocab_size=10, max_len=8, d_model=16, num_heads=4, num_kv_heads=2))
    calls = []
    model.blocks[0].attn.register_forward_hook(lambda module, args, kwargs_out: calls.append(module))
    model(torch.randint(0, 10, (1, 8)))
    assert calls == [model.blocks[0].attn]


def test_forward_reads_in_one_screen():
    """The maths a learner reads: the body of the shared forward, without its docstring."""
    body = inspect.getsource(MultiHeadAttentionBase.forward).split('"""')[-1]
    code = [line for line in body.splitlines() if line.strip()]
    assert len(code) <= 15, code


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


def test_a_bad_hook_is_named():
    with pytest.raises(TypeError, match="edit_heads must be a function"):
        MultiHeadAttention(8, 2)(torch.randn(1, 2, 8), edit_heads="zero")


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
