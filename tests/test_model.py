"""The tiny transformer: shapes, causality, head gates, the KV cache, and input checks."""

import copy
import json

import pytest
import torch

from course_utils import MultiHeadAttention
from course_utils.model.transformer import KVCache, ModelConfig, TinyTransformer, count_parameters


def make_model(mlp: bool = False, seed: int = 0, **overrides) -> TinyTransformer:
    torch.manual_seed(seed)
    config = ModelConfig(**{"vocab_size": 20, "max_len": 16, "d_model": 32, "num_heads": 4, "mlp": mlp,
                            **overrides})
    return TinyTransformer(config).eval()


def random_tokens(B=3, T=12, V=20, seed=1):
    return torch.randint(0, V, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mlp", [False, True])
def test_forward_shapes_and_attention_rows(mlp):
    model = make_model(mlp)
    tokens = random_tokens()
    logits, attention = model(tokens, return_attention=True)
    assert logits.shape == (3, 12, 20)
    assert len(attention) == 2
    for weights in attention:
        assert weights.shape == (3, 4, 12, 12)  # (B, h, T, T)
        torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 12))
        assert (weights.triu(diagonal=1) == 0).all(), "a query attended to a later key"
    _, none = model(tokens)
    assert none is None


def test_fused_and_explicit_paths_agree():
    model = make_model(mlp=True)
    tokens = random_tokens()
    fused, _ = model(tokens)
    explicit, _ = model(tokens, return_attention=True)
    torch.testing.assert_close(fused, explicit, atol=1e-5, rtol=1e-5)


def test_logits_do_not_depend_on_later_tokens():
    model = make_model()
    tokens = random_tokens(B=1)
    changed = tokens.clone()
    changed[0, 8:] = (changed[0, 8:] + 1) % 20
    a, _ = model(tokens)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :8], b[:, :8])
    assert not torch.allclose(a[:, 8:], b[:, 8:])


def test_blocks_use_the_course_attention_module_and_its_weights():
    model = make_model()
    tokens = random_tokens()
    _, attention = model(tokens, return_attention=True)
    block = model.blocks[0]
    assert isinstance(block.attn, MultiHeadAttention)
    x = model.token_embedding(tokens) + model.position_embedding(torch.arange(12))
    _, expected = block.attn(block.ln_attn(x), is_causal=True, need_weights=True)
    torch.testing.assert_close(attention[0], expected)


def test_all_ones_head_mask_changes_nothing():
    model = make_model(mlp=True)
    tokens = random_tokens()
    torch.testing.assert_close(model(tokens, head_mask=torch.ones(2, 4))[0], model(tokens)[0])


@pytest.mark.parametrize("layer", [0, 1])
def test_gating_every_head_of_a_layer_equals_removing_its_output(layer):
    model = make_model()
    tokens = random_tokens()
    gates = torch.ones(2, 4)
    gates[layer] = 0.0
    gated, _ = model(tokens, head_mask=gates)
    silenced = copy.deepcopy(model)
    with torch.no_grad():
        silenced.blocks[layer].attn.out_proj.weight.zero_()  # only the bias of W_O remains
    torch.testing.assert_close(gated, silenced(tokens)[0], atol=1e-5, rtol=1e-5)


def test_gating_one_head_equals_zeroing_its_slice_of_w_o():
    model = make_model()
    tokens = random_tokens()
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    gated, _ = model(tokens, head_mask=gates)
    edited = copy.deepcopy(model)
    dk = 32 // 4
    with torch.no_grad():
        edited.blocks[1].attn.out_proj.weight[:, 2 * dk:3 * dk] = 0  # head 2's columns of W_O
    torch.testing.assert_close(gated, edited(tokens)[0], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(gated, model(tokens)[0])


def _recorded_run(model, *args, **kwargs):
    """``model(*args, **kwargs)``'s logits, the names of the hook points in the order they fired,
    and the stream entering each block (and ``ln_final``): ``L + 1`` tensors."""
    fired, streams = [], {}

    def record(x, hook):
        fired.append(hook.name)
        if hook.name.endswith("hook_resid_pre"):
            streams[int(hook.name.split(".")[1])] = x
        if hook.name == f"blocks.{model.config.num_layers - 1}.hook_resid_post":
            streams[model.config.num_layers] = x

    with torch.no_grad(), model.hooks([(lambda name: True, record)]):
        logits, _ = model(*args, **kwargs)
    return logits, fired, streams


@pytest.mark.parametrize("mlp", [False, True])
def test_entering_at_every_block_gives_the_full_forward(mlp):
    model = make_model(mlp, num_layers=3)
    tokens = random_tokens()
    gates = torch.ones(3, 4)
    gates[1, 2] = gates[2, 0] = 0.0
    for head_mask in (None, gates):
        full, fired, streams = _recorded_run(model, tokens, head_mask=head_mask)
        assert fired[0] == "hook_embed" and len(fired) > 3 * 4
        for k in range(4):  # k = 3: no block left, only ln_final and the unembedding
            resumed, fired_k, _ = _recorded_run(model, resid=streams[k], start_block=k, head_mask=head_mask)
            torch.testing.assert_close(resumed, full, atol=1e-5, rtol=1e-5)
            tail = [name for name in fired if name.startswith("blocks.") and int(name.split(".")[1]) >= k]
            assert fired_k == tail, f"entering at block {k}"
    assert not torch.allclose(model(tokens, head_mask=gates)[0], model(tokens)[0])


def test_entering_at_a_block_sees_a_changed_stream_and_edits():
    model = make_model(mlp=True)
    tokens = random_tokens()
    _, _, streams = _recorded_run(model, tokens)
    changed = streams[1] + 1.0
    resumed, _ = model(resid=changed, start_block=1)
    with model.hooks([("blocks.1.hook_resid_pre", lambda x, hook: x + 1.0)]):
        expected, _ = model(tokens)
    torch.testing.assert_close(resumed, expected, atol=1e-5, rtol=1e-5)

    def silence(layer, heads):
        return heads * 0 if layer == 1 else heads

    with torch.no_grad():
        edited, weights = model(resid=streams[1], start_block=1, edit_heads=silence, return_attention=True)
    torch.testing.assert_close(edited, model(tokens, head_mask=torch.tensor([[1.0] * 4, [0.0] * 4]))[0],
                               atol=1e-5, rtol=1e-5)
    assert len(weights) == 1 and weights[0].shape == (3, 4, 12, 12)  # only block 1 ran


def test_run_blocks_is_the_forward_loop_in_parts():
    model = make_model(mlp=True, num_layers=3)
    tokens = random_tokens()
    _, _, streams = _recorded_run(model, tokens)
    with torch.no_grad():
        middle, weights = model.run_blocks(streams[0], 0, 2, need_weights=True)
        torch.testing.assert_close(middle, streams[2], atol=1e-5, rtol=1e-5)
        assert len(weights) == 2
        same, none = model.run_blocks(streams[1], 1, 1)
    assert same is streams[1] and none is None


@pytest.mark.parametrize("mlp", [False, True])
def test_entering_a_block_at_its_head_outputs_gives_the_full_forward(mlp):
    """heads= (block k's head outputs, read at hook_z) enters block k after its attention: the
    logits are the full run's, with or without gates, and block k's q, k, v and pattern hook
    points do not fire, since nothing computes them."""
    model = make_model(mlp, num_layers=3)
    tokens = random_tokens()
    gates = torch.ones(3, 4)
    gates[1, 2] = gates[2, 0] = 0.0
    wanted = lambda name: name.endswith(("hook_z", "hook_resid_pre"))  # noqa: E731
    with torch.no_grad():
        for head_mask in (None, gates):  # the cache reads hook_z before the gates (added after it)
            _, cache = model.run_with_cache(tokens, names=wanted, head_mask=head_mask)
            full, fired, _ = _recorded_run(model, tokens, head_mask=head_mask)
            for k in range(3):
                resumed, fired_k, _ = _recorded_run(model, resid=cache[f"blocks.{k}.hook_resid_pre"],
                                                    start_block=k, heads=cache[f"blocks.{k}.attn.hook_z"],
                                                    head_mask=head_mask)
                torch.testing.assert_close(resumed, full, atol=1e-5, rtol=1e-5)
                skipped = {f"blocks.{k}.attn.hook_{p}" for p in ("q", "k", "v", "pattern")}
                tail = [name for name in fired if name.startswith("blocks.") and int(name.split(".")[1]) >= k
                        and name not in skipped]
                assert fired_k == tail, f"entering block {k} at its heads"
        gated, _ = model(resid=cache["blocks.1.hook_resid_pre"], start_block=1,
                         heads=cache["blocks.1.attn.hook_z"], head_mask=gates)
    assert not torch.allclose(gated, model(tokens)[0])


def test_bad_head_outputs_entering_a_block_are_refused():
    model = make_model(num_layers=2)
    resid, heads = torch.zeros(3, 12, 32), torch.zeros(3, 4, 12, 8)
    for kwargs, error, message in (
            ({"heads": torch.zeros(3, 4, 11, 8)}, ValueError,
             r"heads must have shape \(B=3, h=4, T=12, dk=8\).*block 1.*got \(3, 4, 11, 8\)"),
            ({"heads": torch.zeros(3, 12, 32)}, ValueError, "heads must be 4-D"),
            ({"heads": heads.double()}, TypeError, r"heads.*float64"),
            ({"heads": heads.tolist()}, TypeError, "heads must be a torch.Tensor"),
            ({"heads": heads, "stop_block": 1}, ValueError, "no block runs"),
            ({"heads": heads, "need_weights": True}, ValueError, "need_weights=True.*one or the other")):
        with pytest.raises(error, match=message):
            model.run_blocks(resid, 1, **kwargs)
    with pytest.raises(ValueError, match="heads must have shape"):
        model(resid=resid, start_block=1, heads=torch.zeros(2, 4, 12, 8))


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"start_block": 1}, ValueError, r"start_block=1 needs resid"),
        ({"resid": torch.zeros(3, 12, 32), "tokens": random_tokens()}, ValueError, "not both"),
        ({"resid": torch.zeros(3, 12, 32), "start_block": 3}, ValueError, r"start_block must be .*2"),
        ({"resid": torch.zeros(3, 12, 32), "start_block": -1}, ValueError, "start_block"),
        ({"resid": torch.zeros(3, 12, 32), "start_block": 1.0}, TypeError, "start_block must be an int"),
        ({"resid": torch.zeros(3, 12, 16), "start_block": 1}, ValueError,
         r"resid must have shape \(B, T, d_model=32\).*entering block 1.*got \(3, 12, 16\)"),
        ({"resid": torch.zeros(12, 32)}, ValueError, r"resid must be 3-D"),
        ({"resid": torch.zeros(3, 17, 32)}, ValueError, "17 positions, more than max_len=16"),
        ({"resid": torch.zeros(3, 0, 32)}, ValueError, "at least 1"),
        ({"resid": torch.zeros(3, 12, 32, dtype=torch.float64)}, TypeError, r"resid.*float64"),
        ({"resid": torch.zeros(3, 12, 32, dtype=torch.long)}, TypeError, "resid must hold floating-point"),
        ({"resid": [[0.0] * 32]}, TypeError, "resid must be a torch.Tensor"),
    ],
)
def test_bad_entries_at_a_block_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        make_model()(**kwargs)


def test_run_blocks_refuses_bad_bounds():
    model = make_model()
    with pytest.raises(ValueError, match="stop_block"):
        model.run_blocks(torch.zeros(1, 2, 32), 2, 1)
    with pytest.raises(TypeError, match="need_weights"):
        model.run_blocks(torch.zeros(1, 2, 32), need_weights="yes")


@pytest.mark.parametrize("mlp", [False, True])
def test_kv_cache_one_token_at_a_time_equals_full_forward(mlp):
    model = make_model(mlp)
    tokens = random_tokens(T=16)
    full, _ = model(tokens)
    cache, pieces = None, []
    for t in range(16):
        logits, cache = model.forward_with_cache(tokens[:, t:t + 1], cache)
        pieces.append(logits)
    assert isinstance(cache, KVCache) and cache.length == 16 and cache.batch_size == 3
    assert cache.num_bytes() == 2 * 2 * 3 * 16 * 32 * 4  # layers * (k, v) * B * T * d * fp32
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


def test_kv_cache_prompt_then_steps_with_head_mask():
    model = make_model(mlp=True)
    tokens = random_tokens(T=10)
    gates = torch.tensor([[1.0, 0.0, 1.0, 0.5], [0.0, 1.0, 1.0, 1.0]])
    full, _ = model(tokens, head_mask=gates)
    logits, cache = model.forward_with_cache(tokens[:, :6], head_mask=gates)
    rest = [logits]
    for t in range(6, 10):
        step, cache = model.forward_with_cache(tokens[:, t:t + 1], cache, head_mask=gates)
        rest.append(step)
    torch.testing.assert_close(torch.cat(rest, dim=1), full, atol=1e-5, rtol=1e-5)


def test_the_cache_is_not_modified_in_place():
    model = make_model()
    tokens = random_tokens(T=4)
    _, cache = model.forward_with_cache(tokens[:, :3])
    a, _ = model.forward_with_cache(tokens[:, 3:4], cache)
    b, _ = model.forward_with_cache(tokens[:, 3:4], cache)
    assert cache.length == 3
    torch.testing.assert_close(a, b)


def test_generate_with_and_without_cache_agree():
    model = make_model(mlp=True)
    prompt = random_tokens(B=2, T=5)
    with_cache = model.generate(prompt, 8)
    without = model.generate(prompt, 8, use_cache=False)
    assert with_cache.shape == (2, 13)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :5], prompt)


def test_cache_errors():
    model = make_model()
    tokens = random_tokens(T=10)
    _, cache = model.forward_with_cache(tokens)
    with pytest.raises(ValueError, match="exceed max_len=16"):
        model.forward_with_cache(random_tokens(T=7), cache)
    with pytest.raises(ValueError, match="batch size 3"):
        model.forward_with_cache(random_tokens(B=2, T=1), cache)
    with pytest.raises(TypeError, match="KVCache"):
        model.forward_with_cache(random_tokens(T=1), cache={"k": 1})
    with pytest.raises(ValueError, match="exceed max_len"):
        model.generate(tokens, 7)


@pytest.mark.parametrize("num_new", [2.0, "2", True, None])
def test_generate_wants_an_int_count(num_new):
    with pytest.raises(TypeError, match="num_new must be an int"):
        make_model().generate(random_tokens(T=3), num_new)


@pytest.mark.parametrize(
    "tokens, error, message",
    [
        (torch.zeros(2, 5), TypeError, "dtype torch.long"),
        ([[1, 2, 3]], TypeError, "torch.Tensor"),
        (torch.zeros(5, dtype=torch.long), ValueError, r"2-D \(B, T\).*unsqueeze"),
        (torch.zeros(2, 3, 4, dtype=torch.long), ValueError, "2-D"),
        (torch.full((2, 5), 20), ValueError, r"\[0, vocab_size=20\).*max 20"),
        (torch.full((2, 5), -1), ValueError, "min -1"),
        (torch.zeros(2, 17, dtype=torch.long), ValueError, "17 tokens exceed max_len=16"),
        (torch.zeros(2, 0, dtype=torch.long), ValueError, "at least one token"),
    ],
)
def test_bad_tokens_are_refused(tokens, error, message):
    with pytest.raises(error, match=message):
        make_model()(tokens)


@pytest.mark.parametrize(
    "head_mask, error, message",
    [
        (torch.ones(4, 2), ValueError, r"\(num_layers, num_heads\) = \(2, 4\), got \(4, 2\)"),
        (torch.ones(4), ValueError, r"\(2, 4\), got \(4\)"),
        (torch.ones(1, 2, 4), ValueError, r"got \(1, 2, 4\)"),
        (torch.ones(2, 4, dtype=torch.long), TypeError, "float tensor of gates"),
        (torch.ones(2, 4, dtype=torch.bool), TypeError, "float tensor of gates"),
        ([[1, 1, 1, 1]] * 2, TypeError, "torch.Tensor"),
        (torch.tensor([[1.0, float("nan"), 1, 1], [1.0] * 4]), ValueError, r"NaN or infinity at .*\(0, 1\)"),
        (torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, float("inf")]]), ValueError, r"finite gates.*\(1, 3\)"),
    ],
)
def test_bad_head_masks_are_refused(head_mask, error, message):
    with pytest.raises(error, match=message):
        make_model()(random_tokens(), head_mask=head_mask)


def test_config_round_trips_through_json():
    config = ModelConfig(vocab_size=10, max_len=8, mlp=True, d_mlp=48)
    again = ModelConfig.from_dict(json.loads(json.dumps(config.to_dict())))
    assert again == config
    assert config.mlp_width == 48 and ModelConfig(vocab_size=10, max_len=8).mlp_width == 256
    with pytest.raises(ValueError, match="unknown ModelConfig keys"):
        ModelConfig.from_dict({**config.to_dict(), "dropout": 0.1})
    with pytest.raises(ValueError, match="missing required keys"):
        ModelConfig.from_dict({"d_model": 64})


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"d_model": 30, "num_heads": 4}, ValueError, "not divisible"),
        ({"vocab_size": 0}, ValueError, "vocab_size must be a positive int"),
        ({"max_len": 8.0}, TypeError, "max_len must be an int"),
        ({"num_layers": True}, TypeError, "num_layers must be an int"),
        ({"mlp": 1}, TypeError, "ModelConfig.mlp must be True or False"),
        ({"d_mlp": 0}, ValueError, "d_mlp"),
    ],
)
def test_bad_configs_are_refused(kwargs, error, message):
    with pytest.raises(error, match=message):
        ModelConfig(**{"vocab_size": 10, "max_len": 8, **kwargs})
    with pytest.raises(TypeError, match="ModelConfig"):
        TinyTransformer({"vocab_size": 10, "max_len": 8})


def test_parameter_count_matches_the_formula():
    d, V, T, L = 32, 20, 16, 2
    attention_only = make_model()
    per_block = 2 * d + (3 * d * d + 3 * d) + (d * d + d)  # LayerNorm, W_QKV, W_O (with biases)
    expected = V * d + T * d + L * per_block + 2 * d + d * V
    assert count_parameters(attention_only) == expected
    with_mlp = make_model(mlp=True)
    mlp = 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert count_parameters(with_mlp) == expected + L * mlp


def test_convert_model_keeps_the_original_dtype_and_every_copied_bit():
    from course_utils.model.transformer import convert_model

    model = make_model().double()
    converted = convert_model(model, 2)
    assert {p.dtype for p in converted.parameters()} == {torch.float64}
    assert torch.equal(converted.token_embedding.weight, model.token_embedding.weight)
    tokens = random_tokens()
    assert converted(tokens)[0].dtype == torch.float64


def test_a_float64_head_mask_gates_a_float32_model():
    model, tokens = make_model(), random_tokens()
    gates = torch.ones(2, 4)
    gates[1, 2] = 0.0
    expected = model(tokens, head_mask=gates)[0]
    assert torch.equal(model(tokens, head_mask=gates.double())[0], expected)
    logits, _ = model.forward_with_cache(tokens, head_mask=gates.double())
    assert logits.dtype == torch.float32
