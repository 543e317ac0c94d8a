"""Multi-head latent attention: the cached latents reproduce full attention, absorption changes nothing."""

import pytest
import torch

from course_utils.attention.mla import DEEPSEEK_V2, MultiHeadLatentAttention, cache_elements_per_token, rope


def _decode_all(mla: MultiHeadLatentAttention, x: torch.Tensor, absorb: bool):
    cache, outputs = None, []
    for t in range(x.shape[1]):
        out, cache = mla.decode(x[:, t:t + 1], cache, absorb=absorb)
        outputs.append(out)
    return torch.cat(outputs, 1), cache


@pytest.mark.parametrize("shape", [(32, 4, 8, 16, 4), (48, 3, 16, 8, 6), (16, 1, 16, 4, 2)])
def test_decoding_from_cached_latents_equals_full_attention(shape):
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(*shape).double()
    x = torch.randn(2, 9, shape[0], dtype=torch.float64)
    with torch.no_grad():
        full = mla(x)
        absorbed, cache = _decode_all(mla, x, absorb=True)
        rebuilt, _ = _decode_all(mla, x, absorb=False)
    torch.testing.assert_close(absorbed, full, atol=1e-12, rtol=0)
    torch.testing.assert_close(rebuilt, full, atol=1e-12, rtol=0)
    d_latent, d_rope = shape[3], shape[4]
    assert cache[0].shape == (2, 9, d_latent) and cache[1].shape == (2, 9, d_rope)


def test_absorbing_w_uk_into_the_query_gives_the_same_scores():
    torch.manual_seed(1)
    mla = MultiHeadLatentAttention(32, 4, 8, 16, 4).double()
    x = torch.randn(1, 5, 32, dtype=torch.float64)
    with torch.no_grad():
        c = mla.w_dkv(x)  # (1, 5, d_c)
        q = mla.w_q(x[:, -1:]).view(1, 1, 4, 8).transpose(1, 2)  # (1, h, 1, d_h)
        keys = mla.w_uk(c).view(1, 5, 4, 8).transpose(1, 2)  # (1, h, 5, d_h)
        w_uk = mla.w_uk.weight.view(4, 8, 16)
        torch.testing.assert_close((q @ w_uk) @ c[:, None].transpose(-2, -1), q @ keys.transpose(-2, -1))


def test_the_positions_enter_through_the_rope_key():
    """Without RoPE the latent scores would not see where a key sits: shifting every position
    by the same amount keeps all scores (RoPE is relative), moving one key does not."""
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(1, 8, generator=gen, dtype=torch.float64)
    k = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    scores = lambda qp, kp: rope(q, torch.tensor([qp])) @ rope(k, torch.tensor(kp)).T  # noqa: E731
    torch.testing.assert_close(scores(5, [0, 1, 2]), scores(12, [7, 8, 9]))
    assert not torch.allclose(scores(5, [0, 1, 2]), scores(5, [0, 1, 3]))


def test_cache_sizes_per_token_and_layer_at_deepseek_v2s_shape():
    ds = DEEPSEEK_V2
    assert (ds.num_heads, ds.d_head, ds.d_latent, ds.d_rope, ds.num_layers) == (128, 128, 512, 64, 60)
    assert ds.d_latent == 4 * ds.d_head and ds.d_rope == ds.d_head // 2  # the paper's choices
    assert cache_elements_per_token("MHA", num_heads=128, d_head=128) == 32768
    assert cache_elements_per_token("GQA", num_kv_heads=8, d_head=128) == 2048
    assert cache_elements_per_token("MQA", d_head=128) == 256
    mla = cache_elements_per_token("MLA", d_latent=512, d_rope=64)
    assert mla == 576 and mla / (2 * 128) == 2.25  # "as much as GQA with 2.25 groups"


def test_bad_input_gets_a_clear_error():
    with pytest.raises(ValueError, match="kind must be one of"):
        cache_elements_per_token("GQA-4")
    with pytest.raises(ValueError, match="num_kv_heads must be a positive int, got 0"):
        cache_elements_per_token("GQA", num_kv_heads=0, d_head=8)
    with pytest.raises(ValueError, match="d_rope must be even"):
        MultiHeadLatentAttention(32, 4, 8, 16, 3)
    with pytest.raises(TypeError, match="d_latent must be an int"):
        MultiHeadLatentAttention(32, 4, 8, 16.0, 4)
    mla = MultiHeadLatentAttention(32, 4, 8, 16, 4)
    with pytest.raises(ValueError, match=r"x must be 3-D \(B, T, d_model=32\)"):
        mla(torch.randn(5, 32))
    with pytest.raises(ValueError, match="last dim must be d_model=32"):
        mla(torch.randn(1, 5, 31))
    with pytest.raises(ValueError, match="one token per sequence"):
        mla.decode(torch.randn(1, 2, 32))
    with pytest.raises(ValueError, match="even last dim"):
        rope(torch.randn(3, 5), torch.arange(3))


def test_arguments_a_kind_does_not_use_are_refused():
    with pytest.raises(ValueError, match="kind='MQA' uses only d_head; got also num_kv_heads=8"):
        cache_elements_per_token("MQA", num_kv_heads=8, d_head=128)
    with pytest.raises(ValueError, match="kind='MLA' uses only d_latent, d_rope; got also d_head=128"):
        cache_elements_per_token("MLA", d_latent=512, d_rope=64, d_head=128)
    with pytest.raises(ValueError, match="kind='MHA' uses only num_heads, d_head; got also num_kv_heads=8"):
        cache_elements_per_token("MHA", num_heads=32, d_head=128, num_kv_heads=8)


def test_forward_and_decode_refuse_what_would_fail_inside_pytorch():
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(32, 4, 8, 16, 4)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the module.s parameters are"):
        mla(torch.randn(1, 3, 32, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"x must hold at least one token \(T >= 1\)"):
        mla(torch.randn(2, 0, 32))
    x = torch.randn(2, 1, 32)
    with pytest.raises(TypeError, match="absorb must be True or False, got str 'no'"):
        mla.decode(x, absorb="no")
    with torch.no_grad():
        _, cache = mla.decode(x)
    c, kr = cache
    bad_caches = {
        "cache must be None or the \\(latents, rope keys\\) tuple": c,
        r"cache\[0\] \(latents\) must be \(B=2, T, 16\), got \(2, 1, 15\)": (c[..., :15], kr),
        r"cache\[1\] \(rope keys\) must be \(B=2, T, 4\), got \(1, 1, 4\)": (c, kr[:1]),
        r"cache\[0\] \(latents\) must be 3-D": (c[0], kr),
        "cache\\[0\\] \\(latents\\) has dtype torch.float64": (c.double(), kr),
        "must hold the same tokens": (c, torch.cat([kr, kr], 1)),
    }
    for message, bad in bad_caches.items():
        with pytest.raises((TypeError, ValueError), match=message):
            mla.decode(x, bad)
    with torch.no_grad():  # a list of the two works as the tuple does
        torch.testing.assert_close(mla.decode(x, [c, kr])[0], mla.decode(x, cache)[0])
