"""onnx_rotary_embedding against the ONNX reference op (opset 23) and an
independent float64 numpy computation of the spec; table format converters."""
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pyrope
from pyrope import from_hf, from_vllm, onnx_caches, onnx_rotary_embedding, to_hf, to_vllm

EPS32 = 2.0**-23


def onnx_reference(x, cos, sin, pos, **attrs):
    """Run the ONNX reference evaluator on a one-node RotaryEmbedding model."""
    inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x.shape)),
              helper.make_tensor_value_info("cos", TensorProto.FLOAT, list(cos.shape)),
              helper.make_tensor_value_info("sin", TensorProto.FLOAT, list(sin.shape))]
    names = ["X", "cos", "sin"]
    feeds = {"X": x, "cos": cos, "sin": sin}
    if pos is not None:
        inputs.append(helper.make_tensor_value_info("pos", TensorProto.INT64, list(pos.shape)))
        names.append("pos")
        feeds["pos"] = pos.astype(np.int64)
    node = helper.make_node("RotaryEmbedding", names, ["Y"], **attrs)
    graph = helper.make_graph([node], "rope", inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, list(x.shape))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    return ReferenceEvaluator(model).run(None, feeds)[0]


def numpy_spec(x, cos, sin, pos, interleaved, rot, num_heads):
    """The opset-23 definition in float64, written from the spec text."""
    x = x.astype(np.float64)
    shape3 = x.ndim == 3
    t = x.reshape(x.shape[0], x.shape[1], num_heads, -1) if shape3 else x.transpose(0, 2, 1, 3)
    rot = rot or t.shape[-1]
    c = (cos[pos] if pos is not None else cos).astype(np.float64)[:, :, None, :]
    s = (sin[pos] if pos is not None else sin).astype(np.float64)[:, :, None, :]
    y = t.copy()
    if interleaved:
        a, b = t[..., 0:rot:2], t[..., 1:rot:2]
        y[..., 0:rot:2], y[..., 1:rot:2] = a * c - b * s, a * s + b * c
    else:
        a, b = t[..., :rot // 2], t[..., rot // 2:rot]
        y[..., :rot // 2], y[..., rot // 2:rot] = a * c - b * s, a * s + b * c
    return y.reshape(x.shape) if shape3 else y.transpose(0, 2, 1, 3)


def bound(x, tables):
    """fma-vs-two-roundings and float32 rounding: a few eps of |x| * |table|."""
    return 4 * EPS32 * 2 * float(np.max(np.abs(x))) * float(np.max(np.abs(tables))) + 1e-30


CASES = [  # (input shape, interleaved, rotary_embedding_dim, num_heads, with position_ids)
    ((2, 3, 5, 16), 0, 0, 0, True),
    ((2, 3, 5, 16), 1, 0, 0, True),
    ((2, 3, 5, 16), 0, 10, 0, True),
    ((2, 3, 5, 16), 1, 6, 3, False),
    ((2, 5, 48), 0, 0, 3, True),
    ((2, 5, 48), 1, 8, 3, True),
    ((1, 4, 24), 0, 4, 2, False),
]


@pytest.mark.parametrize("shape, inter, rot, heads, with_pos", CASES)
def test_against_onnx_reference_and_numpy(rng, isa, shape, inter, rot, heads, with_pos):
    x = rng.standard_normal(shape).astype(np.float32)
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // heads
    half = (rot or head) // 2
    if with_pos:
        max_pos = 64
        ang = np.arange(max_pos)[:, None] * rng.uniform(0.01, 1.0, half)[None, :]
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        pos = rng.integers(0, max_pos, (batch, seq))
        pos[0, 0], pos[-1, -1] = 0, max_pos - 1
    else:
        ang = rng.uniform(-40, 40, (batch, seq, half))
        cos, sin = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
        pos = None
    before = x.copy()
    got = onnx_rotary_embedding(x, cos, sin, pos, interleaved=inter, rotary_embedding_dim=rot, num_heads=heads)
    np.testing.assert_array_equal(x, before)
    assert got.shape == x.shape and got.dtype == np.float32
    attrs = dict(interleaved=inter, rotary_embedding_dim=rot)
    if heads:
        attrs["num_heads"] = heads
    want_onnx = onnx_reference(x, cos, sin, pos, **attrs)
    want_np = numpy_spec(x, cos, sin, pos, inter, rot, heads or shape[1])
    b = bound(x, cos)
    np.testing.assert_allclose(got, want_onnx, rtol=0, atol=b)
    np.testing.assert_allclose(got, want_np, rtol=0, atol=b)
    # coordinates past rotary_embedding_dim are copied bit for bit
    if rot:
        t = got.reshape(batch, seq, heads, head) if len(shape) == 3 else got
        xt = x.reshape(batch, seq, heads, head) if len(shape) == 3 else x
        np.testing.assert_array_equal(t[..., rot:], xt[..., rot:])


@pytest.mark.parametrize("view", ["transposed", "reversed", "broadcast"])
def test_strided_input(rng, view):
    base = rng.standard_normal((2, 8, 3, 16)).astype(np.float32)
    x = {"transposed": base.transpose(0, 2, 1, 3)[:, :, ::2],         # [2, 3, 4, 16] views
         "reversed": base.transpose(0, 2, 1, 3)[::-1, ::-1, 7:3:-1],
         "broadcast": np.broadcast_to(base[:1, :4].transpose(0, 2, 1, 3), (2, 3, 4, 16))}[view]
    before = x.copy()
    cos, sin = onnx_caches(pyrope.Rope(16, layout="interleaved"), 10)
    pos = np.array([[0, 3, 6, 9], [1, 2, 3, 4]])
    got = onnx_rotary_embedding(x, cos, sin, pos, interleaved=1)
    np.testing.assert_allclose(got, numpy_spec(x, cos, sin, pos, 1, 0, 3), rtol=0, atol=bound(x, cos))
    np.testing.assert_array_equal(x, before)


def misaligned(a):
    """A copy of float32 ``a`` one byte past an aligned address (valid, but C refuses the pointer)."""
    buf = np.empty(a.nbytes + 1, dtype=np.uint8)
    out = np.ndarray(a.shape, dtype=a.dtype, buffer=buf, offset=1)
    out[...] = a
    assert not out.flags.aligned
    return out


@pytest.mark.parametrize("shape, heads", [((2, 3, 4, 16), 0), ((2, 4, 48), 3)])
def test_misaligned_input_and_caches(rng, shape, heads):
    x = misaligned(rng.standard_normal(shape).astype(np.float32))
    cos, sin = (misaligned(t) for t in onnx_caches(pyrope.Rope(16, layout="interleaved"), 10))
    pos = np.array([[0, 3, 6, 9], [1, 2, 3, 4]])
    got = onnx_rotary_embedding(x, cos, sin, pos, interleaved=1, num_heads=heads)
    want = numpy_spec(x, cos, sin, pos, 1, 0, heads or shape[1])
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(x, cos))


@pytest.mark.parametrize("layout, inter", [("split_half", 0), ("interleaved", 1)])
def test_rope_caches_give_rope_apply_bit_for_bit(rng, layout, inter):
    rope = pyrope.Rope(32, layout=layout, rotary_dim=24)
    cos, sin = onnx_caches(rope, 300)
    x = rng.standard_normal((2, 4, 6, 32)).astype(np.float32)     # [batch, heads, seq, head]
    pos = np.array([[0, 1, 2, 3, 4, 5], [299, 7, 100, 8, 9, 11]])
    got = onnx_rotary_embedding(x, cos, sin, pos, interleaved=inter, rotary_embedding_dim=24)
    want = rope.apply(x, positions=pos, seq_axis=-2)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


def _args(**kw):
    x = np.zeros((1, 2, 3, 8), np.float32)
    cos = np.ones((10, 4), np.float32)
    base = dict(input=x, cos_cache=cos, sin_cache=cos.copy(), position_ids=np.zeros((1, 3), np.int64))
    base.update(kw)
    return base


@pytest.mark.parametrize("kw, exc, match", [
    (dict(position_ids=np.array([[0, 1, 10]])), ValueError, "position_ids must lie in \\[0, max_pos=10\\)"),
    (dict(position_ids=np.array([[0, -1, 2]])), ValueError, "got -1"),
    (dict(position_ids=np.zeros((1, 2), np.int64)), ValueError, "position_ids must have shape"),
    (dict(position_ids=np.zeros((1, 3))), TypeError, "position_ids must be an integer"),
    (dict(cos_cache=np.ones((10, 3), np.float32), sin_cache=np.ones((10, 3), np.float32)), ValueError,
     "rotary_dim/2=4"),
    (dict(sin_cache=np.ones((10, 5), np.float32)), ValueError, "same shape"),
    (dict(cos_cache=np.ones((10, 4))), TypeError, "cos_cache must have dtype float32"),
    (dict(input=np.zeros((1, 2, 3, 8))), TypeError, "input must have dtype float32"),
    (dict(input=np.zeros((1, 3, 8), np.float32)), ValueError, "num_heads must be positive"),
    (dict(input=np.zeros((1, 3, 8), np.float32), num_heads=3), ValueError, "divisible by num_heads=3"),
    (dict(input=np.zeros((3, 8), np.float32)), ValueError, "input must be 4-D"),
    (dict(rotary_embedding_dim=7), ValueError, "rotary_embedding_dim must be"),
    (dict(rotary_embedding_dim=10), ValueError, "rotary_embedding_dim must be"),
    (dict(interleaved=2), ValueError, "interleaved must be one of"),
    (dict(position_ids=None), ValueError, "cos_cache must be \\[batch, seq, rotary_dim/2\\]"),
])
def test_bad_input(kw, exc, match):
    with pytest.raises(exc, match=match):
        onnx_rotary_embedding(**_args(**kw))


def test_table_converters(rng):
    rope = pyrope.Rope(16, layout="split_half")
    cos, sin = onnx_caches(rope, 50)
    # HF's own table construction, written out independently: cat(freqs, freqs)
    inv = 1.0 / 10000.0 ** (np.arange(0, 16, 2) / 16)
    emb = np.concatenate([np.outer(np.arange(50), inv)] * 2, axis=-1)
    hf_cos, hf_sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    c2, s2 = from_hf(hf_cos, hf_sin)
    np.testing.assert_allclose(c2, cos, rtol=0, atol=4e-7)
    np.testing.assert_allclose(s2, sin, rtol=0, atol=4e-7)
    for style in ("halves", "repeat"):
        back = from_hf(*to_hf(cos, sin, style=style), style=style)
        np.testing.assert_array_equal(back[0], cos)
        np.testing.assert_array_equal(back[1], sin)
    vc, vs = from_vllm(to_vllm(cos, sin))
    np.testing.assert_array_equal(vc, cos)
    np.testing.assert_array_equal(vs, sin)
    assert to_vllm(cos, sin).shape == (50, 16)
    with pytest.raises(ValueError, match="two copies differ"):
        from_hf(hf_cos, hf_sin, style="repeat")
    with pytest.raises(ValueError, match="style must be"):
        to_hf(cos, sin, style="neox")
    with pytest.raises(ValueError, match="cos_sin_cache must be"):
        from_vllm(np.zeros((4, 5)))


def test_hf_rotation_with_converted_tables(rng):
    """An HF-style rotate_half rotation with HF tables equals the ONNX entry point fed the converted tables."""
    inv = 1.0 / 500000.0 ** (np.arange(0, 32, 2) / 32)
    emb = np.concatenate([np.outer(np.arange(40), inv)] * 2, axis=-1)
    hf_cos, hf_sin = np.cos(emb).astype(np.float32), np.sin(emb).astype(np.float32)
    x = rng.standard_normal((1, 2, 40, 32)).astype(np.float32)
    rotate_half = np.concatenate([-x[..., 16:], x[..., :16]], axis=-1)
    want = x.astype(np.float64) * hf_cos + rotate_half.astype(np.float64) * hf_sin
    got = onnx_rotary_embedding(x, *from_hf(hf_cos, hf_sin), np.arange(40)[None])
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(x, hf_cos))
