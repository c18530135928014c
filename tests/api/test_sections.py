"""Multimodal RoPE sections (mrope_section): every pair turns by the position of
its component. Checked against the standard-library reference pair by pair, on
every ISA and storage type, against transformers' Qwen2-VL / Qwen3-VL rotary
code, and through the contract, the table cache and the cached-key tools."""
import numpy as np
import pytest

import ml_dtypes
import pyrope
from pyrope import Rope, RopeError, reference
from array_bits import bits
from tolerance import assert_rotation_close

LAYOUTS = ["interleaved", "split_half"]
SECTIONS = [((2, 3, 3), False), ((3, 3, 2), True), ((1, 2, 2, 3), False), ((2, 2, 2, 2), True),
            ((2, 3, 3), True)]    # interleaved counts that transformers' rule cannot honour: its map rules
DTYPES = [np.float32, np.float16, ml_dtypes.bfloat16, np.float64]


def reference_rotation(rope, x, pos, inverse=False):
    """float64 reference of x [B, S, H, D] at sectioned positions [k, B, S]."""
    x64 = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x64)
    inv = [float(w) for w in rope.inv_freq]
    for b in range(x.shape[0]):
        for s in range(x.shape[1]):
            p = [int(v) for v in pos[:, b, s]]
            for h in range(x.shape[2]):
                out[b, s, h] = reference.rotate_sections(
                    list(x64[b, s, h]), p, inv, rope.mrope_section, rope.mrope_interleaved,
                    layout=rope.layout, inverse=inverse, attention_factor=rope.attention_factor)
    return out


def make(layout, section, interleaved, head_dim=None, rotary_dim=None, **kw):
    half = sum(section)
    return Rope(head_dim or 2 * half + 4, layout=layout, rotary_dim=rotary_dim or 2 * half, base=500.0,
                mrope_section=section, mrope_interleaved=interleaved, **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("section,interleaved", SECTIONS, ids=lambda v: str(v))
def test_each_pair_turns_by_its_component(isa, layout, section, interleaved, rng):
    rope = make(layout, section, interleaved)          # partial rotary: 4 coordinates pass through
    k = len(section)
    x = rng.standard_normal((2, 5, 3, rope.head_dim)).astype(np.float32)
    pos = rng.integers(-3000, 3000, size=(k, 2, 5))
    got = rope.apply(x, pos)
    want = reference_rotation(rope, x, pos)
    assert_rotation_close(got, want, x, rope.rotary_dim, layout)
    assert np.array_equal(bits(got[..., rope.rotary_dim:]), bits(x[..., rope.rotary_dim:]))
    back = rope.apply(got, pos, inverse=True)
    assert np.allclose(back, x, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_simd_equals_scalar_and_every_angle_source_agrees(dtype, layout, rng):
    rope = make(layout, (4, 6, 6), False)
    x = rng.standard_normal((3, 7, 2, rope.head_dim)).astype(dtype)
    pos = rng.integers(0, 10**6, size=(3, 3, 7))
    runs = {}
    for isa in pyrope.supported_isas():
        with pyrope.forced_isa(isa):
            for angles in ("auto", "table", "on_the_fly"):
                runs[isa, angles] = bits(rope.apply(x, pos, angles=angles))
    first = next(iter(runs.values()))
    assert all(np.array_equal(r, first) for r in runs.values())


def test_position_forms(rng):
    rope = make("split_half", (2, 3, 3), False)
    x = rng.standard_normal((2, 4, 3, rope.head_dim)).astype(np.float32)
    pos = rng.integers(0, 100, size=(3, 4))
    want = rope.apply(x, np.broadcast_to(pos[:, None, :], (3, 2, 4)).copy())
    assert np.array_equal(rope.apply(x, pos), want)                      # [k, seq]: every batch row
    assert np.array_equal(rope.apply(x, pos[:, None, :]), want)          # [k, 1, seq]
    # seq_axis=-2 and apply_qk take the same positions
    xt = np.ascontiguousarray(np.swapaxes(x, 1, 2))
    assert np.array_equal(np.swapaxes(rope.apply(xt, pos, seq_axis=-2), 1, 2), want)
    q, kk = rope.apply_qk(x, x[:, :, :1].copy(), pos)
    assert np.array_equal(q, want) and np.array_equal(kk, want[:, :, :1])
    # unbatched x: [k, seq]
    assert np.array_equal(rope.apply(x[0], pos), want[0])


def test_plain_positions_mean_every_component_alike(rng):
    sectioned = make("interleaved", (3, 3, 2), True)
    plain = Rope(sectioned.head_dim, layout="interleaved", rotary_dim=sectioned.rotary_dim, base=500.0)
    x = rng.standard_normal((2, 5, 2, plain.head_dim)).astype(np.float32)
    pos = rng.integers(0, 50, size=(2, 5))
    assert np.array_equal(sectioned.apply(x, pos), plain.apply(x, pos))
    assert np.array_equal(sectioned.apply(x, offset=11), plain.apply(x, offset=11))
    same = np.broadcast_to(pos, (3, 2, 5))
    assert np.array_equal(sectioned.apply(x, same), plain.apply(x, pos))
    # a batch of k sequences with plain positions [k, seq] stays plain
    x3 = rng.standard_normal((3, 5, 2, plain.head_dim)).astype(np.float32)
    pos3 = rng.integers(0, 50, size=(3, 5))
    assert np.array_equal(sectioned.apply(x3, pos3), plain.apply(x3, pos3))


def test_cos_sin_rows_follow_the_components(rng):
    rope = make("split_half", (2, 3, 3), False)
    pos = rng.integers(0, 10**5, size=(3, 4, 6))
    cos, sin = rope.cos_sin(pos)
    assert cos.shape == (4, 6, 8)
    comp = reference.section_components((2, 3, 3), False, 8)
    for idx in np.ndindex(4, 6):
        for i in range(8):
            c, s = reference.angle_cos_sin(int(pos[(comp[i],) + idx]), float(rope.inv_freq[i]))
            assert abs(cos[idx + (i,)] - c) <= 2**-24 * 1.01 + 1e-45
            assert abs(sin[idx + (i,)] - s) <= 2**-24 * 1.01 + 1e-45


def test_contract_and_fingerprint_carry_the_sections():
    a = make("split_half", (3, 3, 2), False)
    b = make("split_half", (3, 3, 2), True)
    plain = Rope(a.head_dim, layout="split_half", rotary_dim=a.rotary_dim, base=500.0)
    ca = a.contract()
    assert ca["mrope_section"] == [3, 3, 2] and ca["mrope_interleaved"] is False
    assert "mrope_section" not in plain.contract()                      # other ropes: as before
    assert len({a.fingerprint, b.fingerprint, plain.fingerprint}) == 3
    again = Rope.from_contract(ca)
    assert again.fingerprint == a.fingerprint and again.mrope_section == (3, 3, 2)
    assert Rope.from_contract(b.contract()).mrope_interleaved is True
    bad = dict(ca, mrope_section=[2, 3, 4])
    with pytest.raises(ValueError, match="contract: 'mrope_section'"):
        Rope.from_contract(bad)
    with pytest.raises(ValueError, match="mrope_interleaved"):
        Rope.from_contract(dict(plain.contract(), mrope_interleaved=True))


BAD = [
    (dict(mrope_section=[2, 3]), ValueError, "3 or 4 entries"),
    (dict(mrope_section=[1, 1, 1, 1, 4]), ValueError, "3 or 4 entries"),
    (dict(mrope_section=[2, 3, 2]), ValueError, r"sum 7 != rotary_dim/2 = 8"),
    (dict(mrope_section=[-1, 5, 4]), ValueError, ">= 0"),
    (dict(mrope_section=[2, 3, 3.0]), TypeError, r"mrope_section\[2\] must be an integer"),
    (dict(mrope_section=[2, True, 5]), TypeError, r"mrope_section\[1\]"),
    (dict(mrope_section="233"), TypeError, "sequence"),
    (dict(mrope_interleaved=True), ValueError, "needs mrope_section"),
    (dict(mrope_section=[2, 3, 3], mrope_interleaved="yes"), TypeError, "mrope_interleaved must be True or False"),
]


@pytest.mark.parametrize("kw,exc,text", BAD, ids=[str(b[0]) for b in BAD])
def test_bad_sections(kw, exc, text):
    with pytest.raises(exc, match=text) as info:
        Rope(16, layout="split_half", **kw)
    assert isinstance(info.value, RopeError)


def test_bad_sectioned_positions(rng):
    rope = make("split_half", (2, 3, 3), False)
    x = np.zeros((2, 4, 1, rope.head_dim), np.float32)
    with pytest.raises(ValueError, match="positions"):
        rope.apply(x, np.zeros((3, 5, 4), int))          # batch 5 vs 2
    with pytest.raises(ValueError, match="positions"):
        rope.apply(x, np.zeros((3, 2, 5), int))          # seq 5 vs 4
    with pytest.raises(ValueError, match="positions must lie within"):
        rope.apply(x, np.full((3, 2, 4), 2**31))


def test_cached_keys_move_per_component(rng):
    rope = make("interleaved", (2, 3, 3), False)
    x = rng.standard_normal((2, 5, 2, rope.head_dim)).astype(np.float32)
    a = rng.integers(0, 1000, size=(3, 2, 5))
    b = a + rng.integers(-50, 50, size=a.shape)
    keys = rope.apply(x, a)
    rope.rerotate(keys, a, b)
    assert_rotation_close(keys, reference_rotation(rope, x, b), x, rope.rotary_dim, "interleaved", factor=2)
    other = Rope(rope.head_dim, layout="interleaved", rotary_dim=rope.rotary_dim, base=5e4,
                 mrope_section=(2, 3, 3))
    conv = rope.convert_keys(rope.apply(x, a), a, other)
    assert_rotation_close(conv, reference_rotation(other, x, a), x, rope.rotary_dim, "interleaved", factor=2)


# ---- transformers' own Qwen2-VL and Qwen3-VL rotary code ---------------------------

@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_matches_transformers_multimodal_rotary(family, rng):
    import torch
    if family == "qwen2_vl":
        from transformers.models.qwen2_vl import modeling_qwen2_vl as mod
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig as Config
        section, interleaved, theta, rotary = [16, 24, 24], False, 1e6, "Qwen2VLRotaryEmbedding"
    else:
        from transformers.models.qwen3_vl import modeling_qwen3_vl as mod
        from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig as Config
        section, interleaved, theta, rotary = [24, 20, 20], True, 5e6, "Qwen3VLTextRotaryEmbedding"
    config = Config(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                    rope_parameters={"rope_type": "default", "rope_theta": theta, "mrope_section": section})
    module = getattr(mod, rotary)(config)
    pos = rng.integers(0, 3000, size=(3, 2, 7))
    q = rng.standard_normal((2, 4, 7, 128))          # [batch, heads, seq, dim], float64
    k = rng.standard_normal((2, 1, 7, 128))
    cos, sin = module(torch.from_numpy(q), torch.from_numpy(pos))
    want_q, want_k = (t.numpy() for t in mod.apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(k),
                                                                  cos, sin))
    rope = Rope(128, layout="split_half", base=theta, mrope_section=section, mrope_interleaved=interleaved)
    got_q, got_k = rope.apply_qk(q, k, pos, seq_axis=-2)
    # transformers forms the angle in float32 (position * inv_freq), pyrope exactly:
    # the difference is float32 angle rounding, up to |m * w| * 2**-24 per angle.
    tol = 3000 * 2.0**-23 * 4
    assert np.max(np.abs(got_q - want_q)) < tol and np.max(np.abs(got_k - want_k)) < tol
    # and the sections matter: without them the result is far off
    plain = Rope(128, layout="split_half", base=theta).apply(q, pos[0], seq_axis=-2)
    assert np.max(np.abs(plain - want_q)) > 100 * tol


# ---- vision towers: axial 2-D ropes as explicit frequencies + sections ------------

def _axial(inv_freq, head_dim):
    """The README recipe: pair i < head_dim/4 turns with the row (h), the rest with
    the column (w); a third, empty component keeps the 3-component form."""
    quarter = head_dim // 4
    resolved = pyrope.Resolved(inv_freq=np.asarray(inv_freq, dtype=np.float64), attention_factor=1.0,
                               rule="explicit", params={})
    return Rope(head_dim, layout="split_half", scaling=resolved, mrope_section=[quarter, quarter, 0])


@pytest.mark.parametrize("tower", ["qwen2_vl", "pixtral"])
def test_vision_tower_axial_rope_recipes(tower, rng):
    import torch
    head_dim, theta = 64, 10000.0
    if tower == "qwen2_vl":
        from transformers.models.qwen2_vl import modeling_qwen2_vl as mod
        from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLVisionConfig
        module = mod.Qwen2VLVisionRotaryEmbedding(Qwen2VLVisionConfig(embed_dim=4 * head_dim, num_heads=4))
        inv = 1.0 / theta ** (np.arange(0, head_dim // 2, 2) / (head_dim // 2))    # over half the head
        rope = _axial(np.concatenate([inv, inv]), head_dim)                          # rows, then columns
    else:
        from transformers.models.pixtral import modeling_pixtral as mod
        from transformers.models.pixtral.configuration_pixtral import PixtralVisionConfig
        module = mod.PixtralVisionRotaryEmbedding(PixtralVisionConfig(hidden_size=4 * head_dim,
                                                                      num_attention_heads=4))
        inv = 1.0 / theta ** (np.arange(0, head_dim, 2) / head_dim)
        rope = _axial(np.concatenate([inv[0::2], inv[1::2]]), head_dim)            # even freqs: rows
    h, w = np.meshgrid(np.arange(9), np.arange(13), indexing="ij")
    hw = np.stack([h.ravel(), w.ravel()], -1)                                      # [patches, 2]
    x = rng.standard_normal((hw.shape[0], 3, head_dim))                           # [patches, heads, dim]
    cos, sin = module(torch.zeros(1), torch.from_numpy(hw))
    xt = torch.from_numpy(x)
    rot_half = torch.cat((-xt[..., head_dim // 2:], xt[..., :head_dim // 2]), dim=-1)
    want = (xt * cos[:, None].double() + rot_half * sin[:, None].double()).numpy()
    positions = np.stack([hw[:, 0], hw[:, 1], np.zeros(len(hw), np.int64)])    # [3, patches]
    got = rope.apply(x, positions)
    # transformers' frequencies and angles are float32: agreement to float32 rounding
    assert np.max(np.abs(got - want)) < 1e-5
    swapped = rope.apply(x, positions[[1, 0, 2]])
    assert np.max(np.abs(swapped - want)) > 1e-2                                # rows and columns matter


# ---- model configs: the sections transformers' rotary module would use ----------------

CONFIGS = [
    # (name, transformers modeling module, text config class, rotary class, pyrope config dict)
    ("qwen2_vl v4 legacy 'mrope'", "qwen2_vl", "Qwen2VLTextConfig", "Qwen2VLRotaryEmbedding",
     {"model_type": "qwen2_vl", "hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1,
      "rope_theta": 1e6, "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}),
    ("qwen2_5_vl default sections", "qwen2_5_vl", "Qwen2_5_VLTextConfig", "Qwen2_5_VLRotaryEmbedding",
     {"model_type": "qwen2_5_vl", "text_config": {"hidden_size": 256, "num_attention_heads": 2,
      "num_key_value_heads": 1, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}}}),
    ("qwen3_vl default sections", "qwen3_vl", "Qwen3VLTextConfig", "Qwen3VLTextRotaryEmbedding",
     {"model_type": "qwen3_vl", "text_config": {"hidden_size": 256, "num_attention_heads": 2,
      "num_key_value_heads": 1, "head_dim": 128, "rope_parameters": {"rope_type": "default", "rope_theta": 5e6}}}),
    ("qwen3_vl_moe, flag ignored as transformers does", "qwen3_vl_moe", "Qwen3VLMoeTextConfig",
     "Qwen3VLMoeTextRotaryEmbedding",
     {"model_type": "qwen3_vl_moe", "text_config": {"hidden_size": 256, "num_attention_heads": 2,
      "num_key_value_heads": 1, "head_dim": 128, "rope_parameters": {
          "rope_type": "default", "rope_theta": 5e6, "mrope_section": [24, 20, 20], "mrope_interleaved": False}}}),
]


@pytest.mark.parametrize("case", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_configs_give_transformers_multimodal_rope(case, rng):
    import importlib
    import torch
    _, family, config_class, rotary_class, cfg = case
    modeling = importlib.import_module(f"transformers.models.{family}.modeling_{family}")
    configuration = importlib.import_module(f"transformers.models.{family}.configuration_{family}")
    text = dict(cfg.get("text_config", cfg))
    text.pop("model_type", None)
    if "rope_scaling" in text:                       # transformers 5 reads the v4 spelling too
        text["rope_parameters"] = {**text.pop("rope_scaling"), "rope_theta": text.pop("rope_theta")}
    module = getattr(modeling, rotary_class)(getattr(configuration, config_class)(**text))
    rope = Rope.from_hf_config(cfg)
    assert list(rope.mrope_section) == list(module.mrope_section)
    pos = rng.integers(0, 2000, size=(3, 1, 9))
    q = rng.standard_normal((1, 2, 9, 128))
    cos, sin = module(torch.from_numpy(q), torch.from_numpy(pos))
    want, _ = modeling.apply_rotary_pos_emb(torch.from_numpy(q), torch.from_numpy(q), cos, sin)
    got = rope.apply(q, pos, seq_axis=-2)
    assert np.max(np.abs(got - want.numpy())) < 2000 * 2.0**-23 * 4


def test_unchecked_families_sections_are_refused():
    cfg = {"model_type": "glm4v", "text_config": {"hidden_size": 256, "num_attention_heads": 2,
                                                  "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                                      "mrope_section": [8, 12, 12]}}}
    with pytest.raises(ValueError, match="multimodal sections .* of model_type 'glm4v_text' are not read"):
        Rope.from_hf_config(cfg)
