"""onnx_rotary_embedding in float16 and bfloat16: ONNX ``RotaryEmbedding``
(opset 23) has one type T in {float, float16, bfloat16} for the input and both
caches. Checked against three references, each with a bound derived here.

Per output coordinate, with the input and caches as stored in T (widened to
float64 exactly): ``a``, ``b`` the two products (``x0*c`` and ``x1*s``, or
``x0*s`` and ``x1*c``), ``y = a -+ b`` (computed in float64: within 2**-53 |y|),
``M = |a| + |b|``, ``u`` T's unit roundoff (2**-11 float16, 2**-8 bfloat16) and
``tau`` half T's smallest subnormal (2**-25, 2**-134).

- pyrope widens exactly, computes ``fma(x0, c, -(x1*s))`` in float32 (two
  roundings of at most 2**-24 of M or of the result: ``E32 = 2**-22 M`` covers
  them) and rounds once to T on store, so ``|out - y| <= u|y| + E32 + tau``.
  Sharper: ``out`` is ``y`` rounded to T, except where ``y`` lies within E32 of
  the midpoint of two neighbouring T values (the float32 result may fall on
  the other side); the tests check both.
- (a) the ONNX reference op (``onnx.reference``) computes in T itself: numpy's
  float16 and ml_dtypes' bfloat16 round each product and the sum to T, three
  roundings: ``|ref - y| <= u M + u|y| + u**2 M + 3 tau`` (ml_dtypes adds in
  float32 before rounding: within E32). Hence
  ``|out - ref| <= 2u|y| + (u + u**2) M + 2 E32 + 4 tau``.
- (b) ONNX Runtime's CPU kernels (``ai.onnx`` RotaryEmbedding-23 and
  ``com.microsoft`` RotaryEmbedding) serve float16 by computing in float32 and
  rounding once (MLAS), so ``|out - ort| <= 2 (u|y| + E32 + tau)``, and the
  two differ only near midpoints as above. ORT 1.32 has no bfloat16 kernel on
  CPU (both ops: NOT_IMPLEMENTED), so bfloat16 is checked against ORT's float32
  kernel on the exactly widened input and caches, rounded once to bfloat16 by
  ml_dtypes: the same computation, the same bound.
- (c) float64: the op's definition evaluated in float64 on caches made by
  ``pyrope.reference.cos_sin`` (exact angles) rounded to T: the bound of
  pyrope's line above.
"""
import functools
import tracemalloc

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import pyrope
from pyrope import errors
from test_onnx_interop import CASES as FLOAT32_CASES   # the float32 tests' calls, and four more
from pyrope import onnx_rotary_embedding, reference

F16, BF16, F32 = np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16), np.dtype(np.float32)
TYPES = [F16, BF16]
UNIT = {F16: 2.0**-11, BF16: 2.0**-8}
TAU = {F16: 2.0**-25, BF16: 2.0**-134}
ELEM = {F16: TensorProto.FLOAT16, BF16: TensorProto.BFLOAT16, F32: TensorProto.FLOAT}
E32 = 2.0**-22

CASES = FLOAT32_CASES + [  # (input shape, interleaved, rotary_embedding_dim, num_heads, with position_ids)
    ((2, 4, 7, 128), 0, 0, 0, True),      # a model's head: the SIMD kernels' full steps
    ((2, 4, 7, 128), 1, 96, 4, True),
    ((1, 9, 4 * 96), 0, 0, 4, False),
    ((1, 9, 4 * 96), 1, 70, 4, False),    # partial rotary with tails
]
IDS = [f"{len(s)}d-{s[-1]}-i{i}-r{r}-h{h}-{'pos' if p else 'rows'}" for s, i, r, h, p in CASES]


class Case:
    """One call: T arrays (read-only, so the call must not write them), its
    keyword arguments, the ONNX attributes, and the float64 ``y`` and ``M``."""

    def __init__(self, x, cos, sin, pos, inter, rot, heads):
        self.x, self.cos, self.sin, self.pos = x, cos, sin, pos
        self.inter, self.rot, self.heads = inter, rot, heads
        self.kwargs = dict(interleaved=inter, rotary_embedding_dim=rot, num_heads=heads)
        self.attrs = dict(interleaved=inter, rotary_embedding_dim=rot)
        if heads:
            self.attrs["num_heads"] = heads
        self.y, self.mag, self.rotated = spec64(x, cos, sin, pos, inter, rot, heads or x.shape[1])

    def with_arrays(self, **arrays):
        """The same call on other arrays (views of these, or reshaped caches)."""
        a = {**dict(x=self.x, cos=self.cos, sin=self.sin, pos=self.pos), **arrays}
        return Case(a["x"], a["cos"], a["sin"], a["pos"], self.inter, self.rot, self.heads)

    def run(self):
        return onnx_rotary_embedding(self.x, self.cos, self.sin, self.pos, **self.kwargs)


def spec64(x, cos, sin, pos, inter, rot, num_heads):
    """The opset-23 definition in float64 from the stored values: (y, M,
    rotated) per coordinate (past the rotated prefix y is x and M is 0)."""
    x = x.astype(np.float64)
    t = x.reshape(x.shape[0], x.shape[1], num_heads, -1) if x.ndim == 3 else x.transpose(0, 2, 1, 3)
    rot = rot or t.shape[-1]
    c = (cos[pos] if pos is not None else cos).astype(np.float64)[:, :, None, :]
    s = (sin[pos] if pos is not None else sin).astype(np.float64)[:, :, None, :]
    y, mag, rotated = t.copy(), np.zeros_like(t), np.zeros(t.shape, bool)
    first, second = (slice(0, rot, 2), slice(1, rot, 2)) if inter else (slice(0, rot // 2), slice(rot // 2, rot))
    x0, x1 = t[..., first], t[..., second]
    y[..., first], y[..., second] = x0 * c - x1 * s, x0 * s + x1 * c
    mag[..., first], mag[..., second] = np.abs(x0 * c) + np.abs(x1 * s), np.abs(x0 * s) + np.abs(x1 * c)
    rotated[..., :rot] = True
    back = (lambda a: a.reshape(x.shape)) if x.ndim == 3 else (lambda a: a.transpose(0, 2, 1, 3))
    return back(y), back(mag), back(rotated)


@functools.lru_cache(maxsize=None)
def make_case(dtype, index):
    """Input N(0, 1) in T (a tenth of it scaled by 2**-14: float16 subnormal
    results), caches of exact angles from pyrope.reference rounded to T."""
    shape, inter, rot, heads, with_pos = CASES[index]
    rng = np.random.default_rng(1000 + index)
    x = rng.standard_normal(shape)
    x[rng.random(shape) < 0.1] *= 2.0**-14
    batch, seq = shape[0], shape[2] if len(shape) == 4 else shape[1]
    head = shape[3] if len(shape) == 4 else shape[2] // heads
    inv_freq = reference.pair_frequencies(rot or head, float(rng.choice([1e4, 5e5])))
    if with_pos:
        # full caches widened when the call reads as many rows as they hold, else gathered
        max_pos = 64 if inter == 0 else batch * seq
        pos = rng.integers(0, max_pos, (batch, seq))
        pos[0, 0], pos[-1, -1] = 0, max_pos - 1
        cos, sin = reference.cos_sin(range(max_pos), inv_freq)
        cos, sin = np.array(cos), np.array(sin)
    else:
        pos = None
        cos, sin = reference.cos_sin(rng.integers(0, 100_000, batch * seq).tolist(), inv_freq)
        cos, sin = (np.array(t).reshape(batch, seq, -1) for t in (cos, sin))
    arrays = [x.astype(dtype), cos.astype(dtype), sin.astype(dtype)]
    for a in arrays:
        a.flags.writeable = False
    return Case(*arrays, pos, inter, rot, heads)


def assert_one_rounding(got, case, dtype, slack=1.0):
    """``|got - y| <= slack * (u|y| + E32 M + tau)``, and ``got`` is ``y``
    rounded to T except where ``y`` is within E32 M of the midpoint between
    them; coordinates past the rotated prefix copied bit for bit."""
    assert got.dtype == dtype and got.shape == case.x.shape
    g, y, mag = got.astype(np.float64), case.y, case.mag
    bound = slack * (UNIT[dtype] * np.abs(y) + E32 * mag + TAU[dtype])
    err = np.abs(g - y)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (worst, g[worst], y[worst], bound[worst])
    nearest = y.astype(dtype).astype(np.float64)
    off = g != nearest
    midpoint = (g + nearest) / 2
    assert np.all(np.abs(y - midpoint)[off] <= E32 * mag[off] + 2.0**-52 * np.abs(y[off])), \
        (np.argwhere(off)[:5], g[off][:5], y[off][:5])
    copied = ~case.rotated
    np.testing.assert_array_equal(got[copied].view(np.uint16), case.x[copied].view(np.uint16))


# ---- (c) the definition in float64, every instruction set -----------------------------------

@pytest.mark.parametrize("dtype", TYPES, ids=str)
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_against_float64_definition(isa, dtype, index):
    case = make_case(dtype, index)
    assert_one_rounding(case.run(), case, dtype)


# ---- (a) the ONNX reference op, computing in T --------------------------------------------------

def onnx_model(dtype, case, domain=""):
    """A one-node RotaryEmbedding model of element type T: ai.onnx (opset 23:
    input, cos, sin[, position_ids]) or com.microsoft (input, position_ids, cos, sin)."""
    elem = ELEM[dtype]
    vi = helper.make_tensor_value_info
    x = vi("X", elem, list(case.x.shape))
    caches = [vi("cos", elem, list(case.cos.shape)), vi("sin", elem, list(case.sin.shape))]
    pos = [vi("pos", TensorProto.INT64, list(case.pos.shape))] if case.pos is not None else []
    inputs = [x, *pos, *caches] if domain else [x, *caches, *pos]
    attrs = dict(case.attrs)
    if domain and case.rot and "num_heads" not in attrs:
        attrs["num_heads"] = case.x.shape[1]  # com.microsoft wants it with a partial rotary dim
    node = helper.make_node("RotaryEmbedding", [i.name for i in inputs], ["Y"], domain=domain, **attrs)
    graph = helper.make_graph([node], "rope", inputs, [vi("Y", elem, list(case.x.shape))])
    opsets = [helper.make_opsetid("", 23)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    onnx.checker.check_model(model)
    return model


def feeds(case, dtype):
    f = {"X": case.x.astype(dtype), "cos": case.cos.astype(dtype), "sin": case.sin.astype(dtype)}
    if case.pos is not None:
        f["pos"] = case.pos.astype(np.int64)
    return f


@pytest.mark.parametrize("dtype", TYPES, ids=str)
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_against_onnx_reference(dtype, index):
    case = make_case(dtype, index)
    want = ReferenceEvaluator(onnx_model(dtype, case)).run(None, feeds(case, dtype))[0]
    assert want.dtype == dtype
    got = case.run()
    u = UNIT[dtype]
    bound = 2 * u * np.abs(case.y) + (u + u * u + 2 * E32) * case.mag + 4 * TAU[dtype]
    err = np.abs(got.astype(np.float64) - want.astype(np.float64))
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (worst, got[worst], want[worst], bound[worst])


# ---- (b) ONNX Runtime's CPU kernels --------------------------------------------------------------

def ort_run(model, f):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, f)[0]


@pytest.mark.parametrize("domain", ["", "com.microsoft"], ids=["ai.onnx-23", "com.microsoft"])
@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_float16_against_onnxruntime(domain, index):
    case = make_case(F16, index)
    if domain and case.pos is None:
        # com.microsoft's op requires position ids: run it on the rows as a
        # [batch*seq, r/2] cache indexed by b*seq + s
        b, s, h = case.cos.shape
        case = case.with_arrays(cos=case.cos.reshape(b * s, h), sin=case.sin.reshape(b * s, h),
                                pos=np.arange(b * s).reshape(b, s))
    want = ort_run(onnx_model(F16, case, domain), feeds(case, F16))
    assert want.dtype == F16
    assert_one_rounding(want, case, F16)      # ORT itself rounds once from float32
    assert_one_rounding(case.run(), case, F16)
    got = case.run().astype(np.float64)
    assert np.all(np.abs(got - want) <= 2 * (UNIT[F16] * np.abs(case.y) + E32 * case.mag + TAU[F16]))


@pytest.mark.parametrize("index", range(len(CASES)), ids=IDS)
def test_bfloat16_against_onnxruntime_float32_rounded_once(index):
    case = make_case(BF16, index)
    want = ort_run(onnx_model(F32, case), feeds(case, F32)).astype(BF16)
    assert_one_rounding(want, case, BF16)
    got = case.run().astype(np.float64)
    assert np.all(np.abs(got - want.astype(np.float64))
                  <= 2 * (UNIT[BF16] * np.abs(case.y) + E32 * case.mag + TAU[BF16]))


# ---- layouts the kernel cannot address, memory, bad input ---------------------------------------

def misaligned(a):
    """A copy of ``a`` one byte past an aligned address."""
    buf = np.empty(a.nbytes + 1, dtype=np.uint8)
    out = np.ndarray(a.shape, dtype=a.dtype, buffer=buf, offset=1)
    out[...] = a
    assert not out.flags.aligned
    return out


@pytest.mark.parametrize("dtype", TYPES, ids=str)
@pytest.mark.parametrize("view", ["transposed", "reversed", "broadcast", "misaligned"])
def test_strided_and_misaligned(dtype, view):
    case = make_case(dtype, 0)                                       # [2, 3, 5, 16], position ids
    x, cos, sin = case.x, case.cos, case.sin
    if view == "transposed":
        x = np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    elif view == "reversed":
        x = np.ascontiguousarray(x[::-1, ::-1, ::-1])[::-1, ::-1, ::-1]
    elif view == "broadcast":
        x = np.broadcast_to(x[:1], x.shape)
    else:
        x, cos, sin = misaligned(x), misaligned(cos), misaligned(sin)
    view_case = case.with_arrays(x=x, cos=cos, sin=sin)
    assert_one_rounding(view_case.run(), view_case, dtype)


@pytest.mark.parametrize("dtype", TYPES + [F32], ids=str)
def test_repeated_shapes_read_each_calls_own_arrays(dtype):
    """Calls of one shape share a memoised plan: each must still read its own
    input, caches and positions (decode steps against a growing cache)."""
    base = make_case(dtype if dtype != F32 else F16, 7)                # [2, 4, 7, 128], position ids
    rng = np.random.default_rng(3)
    for step in range(4):
        x = rng.standard_normal(base.x.shape).astype(dtype)
        cos, sin = (np.roll(t.astype(dtype), step, axis=0) for t in (base.cos, base.sin))
        if step % 2:
            cos, sin = -sin, cos                                           # another table, same shape
        pos = rng.integers(0, cos.shape[0], base.pos.shape)
        case = base.with_arrays(x=x, cos=cos, sin=sin, pos=pos)
        if dtype == F32:
            assert np.all(np.abs(case.run() - case.y) <= 2.0**-22 * case.mag + 1e-45)
        else:
            assert_one_rounding(case.run(), case, dtype)


@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_no_float32_copy_of_input_and_only_used_cache_rows(dtype):
    """The kernel reads T directly: a call allocates its output and the
    float32 rows it reads, not a float32 copy of the input or of a large cache."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 32, 256, 128)).astype(dtype)              # 2 MiB in T
    cos = np.ones((65536, 64), dtype)                                     # 8 MiB in T each
    sin = np.zeros((65536, 64), dtype)
    pos = np.arange(256)[None]
    onnx_rotary_embedding(x, cos, sin, pos)                               # plan and imports made
    tracemalloc.start()
    try:
        y = onnx_rotary_embedding(x, cos, sin, pos)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    rows = 2 * 256 * 64 * 4                                               # float32 cos and sin rows read
    assert peak <= x.nbytes + 2 * rows + 64 * 1024, peak
    np.testing.assert_array_equal(y.view(np.uint16), x.view(np.uint16))  # angle 0: exact copy


def _args(dtype, **kw):
    base = dict(input=np.zeros((1, 2, 3, 8), dtype), cos_cache=np.ones((10, 4), dtype),
                sin_cache=np.zeros((10, 4), dtype), position_ids=np.zeros((1, 3), np.int64))
    base.update(kw)
    return base


@pytest.mark.parametrize("dtype, kw, match", [
    (F16, dict(cos_cache=np.ones((10, 4), F32)),
     r"cos_cache must have dtype float16 \(native byte order\) like input .*one type T.*got <f4 \(float32\)"),
    (F16, dict(sin_cache=np.ones((10, 4), BF16)), r"sin_cache must have dtype float16 .*got <V2 \(bfloat16\)"),
    (BF16, dict(cos_cache=np.ones((10, 4), F16)), r"cos_cache must have dtype bfloat16 .*got <f2 \(float16\)"),
    (F32, dict(sin_cache=np.ones((10, 4), F16)), r"sin_cache must have dtype float32 .*got <f2 \(float16\)"),
    (F16, dict(cos_cache=np.ones((10, 4), ">f2")), r"cos_cache must have dtype float16 \(native byte order\)"),
    (F16, dict(cos_cache=[[1.0] * 4] * 10), "cos_cache must be a numpy.ndarray"),
    (F16, dict(input=np.zeros((1, 2, 3, 8), ">f2")), "input must have dtype float32, float16, bfloat16"),
    (F16, dict(input=np.zeros((1, 2, 3, 8))),
     r"input must have dtype .*ONNX RotaryEmbedding's types T.*got float64: cast it to float32"),
    (F16, dict(input=np.zeros((1, 2, 3, 8), np.int16)), "input must have dtype"),
    (F16, dict(input=np.zeros((1, 2, 3, 8), ml_dtypes.float8_e4m3fn)), "input must have dtype"),
])
def test_bad_types(dtype, kw, match):
    with pytest.raises(pyrope.errors.TypeError, match=match):
        onnx_rotary_embedding(**_args(dtype, **kw))


@pytest.mark.parametrize("dtype", TYPES, ids=str)
def test_bad_positions_and_shapes_in_16_bits(dtype):
    with pytest.raises(pyrope.errors.ValueError, match=r"position_ids must lie in \[0, max_pos=10\)"):
        onnx_rotary_embedding(**_args(dtype, position_ids=np.array([[0, 1, 10]])))
    with pytest.raises(pyrope.errors.ValueError, match="rotary_dim/2=4"):
        onnx_rotary_embedding(**_args(dtype, cos_cache=np.ones((10, 3), dtype), sin_cache=np.ones((10, 3), dtype)))
    empty = onnx_rotary_embedding(np.zeros((0, 2, 3, 8), dtype), np.ones((10, 4), dtype),
                                  np.zeros((10, 4), dtype), np.zeros((0, 3), np.int64))
    assert empty.shape == (0, 2, 3, 8) and empty.dtype == dtype


@pytest.mark.parametrize("position_ids, error, words", [
    (np.ma.masked_array([[0, 1, 2]], mask=[[0, 1, 0]]), errors.TypeError, "masked"),
    ([[2**63, 0, 0]], errors.OverflowError, "int64"),
    ([[0.0, 1.0, 2.0]], errors.TypeError, "integer"),
], ids=["masked", "beyond-int64", "floats"])
def test_position_ids_are_checked_like_every_positions_argument(position_ids, error, words):
    """position_ids go through the same checks as Rope.apply's positions: a masked array's
    mask is never ignored, integers beyond int64 overflow by name, floats are refused."""
    x = np.ones((1, 2, 3, 8), np.float32)
    cache = np.ones((8, 4), np.float32)
    with pytest.raises(error, match=f"position_ids.*{words}|{words}.*position_ids"):
        pyrope.onnx_rotary_embedding(x, cache, cache, position_ids)
