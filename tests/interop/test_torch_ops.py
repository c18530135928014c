"""pyrope's torch custom ops (``torch.ops.pyrope``), and pyrope under
``torch.compile`` and ``torch.export``.

``torch.library.opcheck`` checks every op's schema, fake kernel, autograd
registration and AOT dispatch on every dtype, both layouts and the three
kinds of positions. Compiled (``fullgraph=True``: a graph break fails the
test) and exported calls must give the bits of the same call on numpy
arrays, which the rest of the suite checks against the reference."""
import io
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
import torch
from torch.autograd import gradcheck, gradgradcheck

import pyrope
import pyrope.torch as pt
from pyrope import Rope

DTYPES = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: ml_dtypes.bfloat16,
          torch.float64: np.float64}
LAYOUTS = ("split_half", "interleaved")
POSITIONS = ("offset", "per_token", "sectioned")
SECTION = [8, 12, 12]   # pairs per component of a 64-wide head


def rope_for(layout, kind):
    return Rope(64, layout=layout, mrope_section=SECTION if kind == "sectioned" else None)


def tensor(*shape, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64).to(dtype)


def positions_for(kind, batch=2, seq=5):
    """(positions tensor or None, offset)."""
    if kind == "offset":
        return None, 11
    if kind == "per_token":
        return torch.tensor([[0, 1, 2, 3, 4], [7, 3, 9, 2, 40]])[:batch, :seq], 0
    return torch.tensor([[0, 1, 2, 2, 2], [0, 1, 3, 4, 4], [0, 1, 5, 6, 7]])[:, :seq], 0


def as_numpy(t):
    if t.dtype is torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def same_bits(a, b):
    a, b = (x.view(torch.int16) if x.dtype is torch.bfloat16 else x for x in (a, b))
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


# ---- registration -------------------------------------------------------------------------

def test_import_pyrope_registers_nothing_and_eager_tensor_calls_skip_the_ops():
    code = ("import sys, pyrope, torch\n"
            "assert not hasattr(torch.ops.pyrope, 'apply') or 'pyrope._interop.torch_ops' not in sys.modules\n"
            "r = pyrope.Rope(8, layout='split_half')\n"
            "r.apply(torch.ones(1, 2, 1, 8), offset=3)\n"
            "print('pyrope._interop.torch_ops' in sys.modules)\n"
            "import pyrope.torch\n"
            "print(torch.ops.pyrope.apply.default.name())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "pyrope::apply"]


def test_a_rope_key_rebuilds_the_same_rope_and_a_bad_key_is_named():
    rope = Rope(64, layout="interleaved", base=5e5, scaling={"rope_type": "yarn", "factor": 4.0,
                                                            "original_max_position_embeddings": 256})
    key = pt.rope_key(rope)
    from pyrope._interop import torch_ops
    torch_ops._ROPES.pop(key)
    again = pt.rope_of(key)
    assert again is not rope and again.fingerprint == rope.fingerprint
    with pytest.raises(pyrope.errors.ValueError, match="rope: not a pyrope contract"):
        pt.rope_of("{not json")
    norm = pyrope.RMSNorm(np.linspace(0.5, 1.5, 64), eps=1e-5, unit_offset=True)
    nk = pt.norm_key(norm)
    torch_ops._NORMS.pop(nk)
    back = pt.norm_of(nk)
    assert back.eps == norm.eps and back.unit_offset and np.array_equal(back.weight, norm.weight)


# ---- opcheck: every op, dtype, layout and kind of positions --------------------------------

@pytest.mark.parametrize("kind", POSITIONS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", list(DTYPES), ids=str)
def test_opcheck_every_op(dtype, layout, kind):
    rope = rope_for(layout, kind)
    key = pt.rope_key(rope)
    pos, offset = positions_for(kind)
    ops = pt.ops

    def x(heads=3, grad=False, seed=0):
        return tensor(2, 5, heads, 64, dtype=dtype, seed=seed).requires_grad_(grad)

    cases = [
        (ops.apply, (x(grad=True), pos, key, offset, -3, dtype is torch.float16, "")),
        (ops.apply_, (x(), pos, key, offset, -3, False, "")),
        (ops.apply_out, (x(), torch.empty(2, 5, 3, 64, dtype=dtype), pos, key, offset, -3, False, "")),
        (ops.apply_qk, (x(grad=True), x(1, grad=True, seed=1), pos, key, offset, -3, "", "")),
        (ops.apply_qk_, (x(), x(1, seed=1), pos, key, offset, -3, "", "")),
    ]
    if kind != "offset":
        cases.append((ops.rerotate_, (x(), pos, pos + 5, key, -3)))
        if dtype is torch.float32:   # tables do not depend on the data's dtype: once per layout and kind
            cases.append((ops.cos_sin, (pos, key, torch.float32)))
            cases.append((ops.cos_sin, (pos, key, torch.float64)))
    if kind == "per_token":   # the norm as an op argument, and the paged cache
        norm = pt.norm_key(pyrope.RMSNorm(np.linspace(0.5, 1.5, 64)))
        cases.append((ops.apply, (x(), pos, key, 0, -3, False, norm)))
        slots = torch.tensor([[3, 9, 0, 17, 5], [1, 2, 30, -1, 8]])
        cache = torch.zeros(4, 8, 3, 64, dtype=dtype)
        cases.append((ops.cache_write_, (x(), x(seed=2), cache, cache.clone(), slots, pos, 0, key, norm, "NHD",
                                         None, None, None, None)))
        filled = cache.clone()
        cases.append((ops.shift_keys_, (filled, slots, pos, pos + 3, key, "NHD", None, None)))
    for op, args in cases:
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


def test_opcheck_quantised_cache_writes():
    rope = Rope(64, layout="split_half")
    key = pt.rope_key(rope)
    k, v = tensor(6, 2, 64), tensor(6, 2, 64, seed=1)
    slots = torch.tensor([0, 5, 9, 2, 11, 7])
    pos = torch.arange(6) + 20
    int8 = torch.zeros(2, 8, 2, 64, dtype=torch.int8)
    scales = torch.zeros(2, 8, 2)
    fp8 = torch.zeros(2, 8, 2, 64, dtype=torch.float8_e4m3fn)
    every = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    for args, checks in [
            ((k, v, int8, int8.clone(), slots, pos, 0, key, "", "NHD", scales, scales.clone(), None, None), every),
            # opcheck's schema test multiplies the arguments, which torch cannot do in float8
            ((k, v, fp8, fp8.clone(), slots, pos, 0, key, "", "NHD", None, None, 0.05, 0.1), every[1:])]:
        result = torch.library.opcheck(pt.ops.cache_write_, args, test_utils=checks)
        assert set(result.values()) == {"SUCCESS"}, result
    result = torch.library.opcheck(pt.ops.shift_keys_, (int8, slots, pos, pos - 4, key, "NHD", scales, None))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_ops_are_differentiable_twice(layout):
    rope = Rope(16, layout=layout, scaling={"rope_type": "linear", "factor": 2.0})
    key = pt.rope_key(rope)
    pos = torch.tensor([[3, 0, 9]])
    x = tensor(1, 3, 2, 16, dtype=torch.float64).requires_grad_()
    k = tensor(1, 3, 1, 16, dtype=torch.float64, seed=1).requires_grad_()
    apply = lambda t: pt.ops.apply(t, pos, key, 0, -3, False, "")   # noqa: E731
    qk = lambda a, b: pt.ops.apply_qk(a, b, pos, key, 0, -3, "", "")   # noqa: E731
    assert gradcheck(apply, (x,)) and gradgradcheck(apply, (x,))
    assert gradcheck(qk, (x, k)) and gradgradcheck(qk, (x, k))


def test_a_norm_is_not_differentiated():
    rope = Rope(16, layout="split_half")
    x = tensor(1, 3, 2, 16).requires_grad_()
    y = pt.ops.apply(x, None, pt.rope_key(rope), 0, -3, False, pt.norm_key(pyrope.RMSNorm()))
    with pytest.raises(pyrope.errors.ValueError, match="norm= is not differentiable"):
        y.sum().backward()


# ---- torch.compile: no graph break, the eager bits ---------------------------------------------

def compiled(fn, backend="aot_eager"):
    """``fn`` compiled whole (a graph break is an error). aot_eager traces and
    functionalises as Inductor does, without its seconds of code generation;
    the first test below compiles with Inductor too."""
    return torch.compile(fn, fullgraph=True, backend=backend)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_compiled_calls_give_the_numpy_bits(dtype, layout):
    rope = Rope(64, layout=layout)
    q, k = tensor(2, 5, 4, 64, dtype=dtype), tensor(2, 5, 2, 64, dtype=dtype, seed=1)
    pos = torch.tensor([[0, 1, 2, 3, 4], [9, 8, 7, 100, 5000]])

    def step(q, k, pos):
        a = rope.apply(q, pos)
        b = rope.apply(q.transpose(1, 2), offset=17, seq_axis=-2, inverse=True)
        cq, ck = rope.apply_qk(q, k, pos)
        cos, sin = rope.cos_sin(pos)
        return a * 2, b, cq, ck, cos, sin

    got = compiled(step, "inductor" if dtype is torch.float32 else "aot_eager")(q, k, pos)
    qn, kn, pn = as_numpy(q), as_numpy(k), pos.numpy()
    want = (rope.apply(qn, pn) * 2, rope.apply(np.swapaxes(qn, 1, 2), offset=17, seq_axis=-2, inverse=True),
            *rope.apply_qk(qn, kn, pn), *rope.cos_sin(pn))
    for g, w in zip(got, want):
        w = torch.from_numpy(np.ascontiguousarray(w).view(np.int16)).view(torch.bfloat16) \
            if w.dtype == ml_dtypes.bfloat16 else torch.from_numpy(np.ascontiguousarray(w))
        assert same_bits(g.contiguous(), w)


def test_compiled_in_place_calls_and_a_cache_slot():
    rope = Rope(64, layout="interleaved")
    q = tensor(1, 1, 4, 64)
    cache = torch.zeros(1, 16, 4, 64)

    def step(q, cache, n):
        rope.apply(q, offset=n, out=q)
        rope.apply(q, offset=n, out=cache[:, n:n + 1])
        return q.sum()

    fn = compiled(step)
    want_q, want_cache = as_numpy(q).copy(), as_numpy(cache).copy()
    for n in (3, 4, 5):
        fn(q, cache, n)
        rope.apply(want_q, offset=n, out=want_q)
        rope.apply(want_q, offset=n, out=want_cache[:, n:n + 1])
    assert torch.equal(q, torch.from_numpy(want_q)) and torch.equal(cache, torch.from_numpy(want_cache))


def test_a_compiled_decode_loop_does_not_recompile_per_position():
    rope = Rope(128, layout="split_half")
    counts = torch._dynamo.utils.counters
    counts.clear()

    @compiled
    def step(q, k, n):
        return rope.apply_qk(q, k, offset=n)

    q, k = tensor(16, 1, 32, 128), tensor(16, 1, 8, 128, seed=1)
    for n in range(10, 30):
        rq, rk = step(q, k, n)
        wq, wk = rope.apply_qk(q.numpy(), k.numpy(), offset=n)
        assert torch.equal(rq, torch.from_numpy(wq)) and torch.equal(rk, torch.from_numpy(wk))
    assert not counts["graph_break"]
    assert counts["stats"]["unique_graphs"] <= 2   # the first offset, then offset as a symbol


def test_compiled_cache_write_rerotate_and_shift_keys():
    rope = Rope(64, layout="split_half")
    k, v = tensor(6, 2, 64), tensor(6, 2, 64, seed=1)
    slots = torch.tensor([0, 5, 9, 2, 11, 7])
    pos = torch.arange(6) + 20
    norm = pyrope.RMSNorm(np.linspace(0.5, 1.5, 64))

    def step(k, v, kc, vc, keys):
        rope.cache_write(k, v, kc, vc, slots, positions=pos, norm=norm)
        rope.shift_keys(kc, slots, pos, pos - 7)
        pyrope.cache.rerotate(rope, keys, pos, pos + 2)
        return kc, vc, keys

    kc, vc, keys = torch.zeros(2, 8, 2, 64), torch.zeros(2, 8, 2, 64), tensor(6, 2, 64, seed=2)[None]
    want = [as_numpy(t).copy() for t in (kc, vc, keys)]
    compiled(step)(k, v, kc, vc, keys)
    rope.cache_write(k.numpy(), v.numpy(), want[0], want[1], slots.numpy(), positions=pos.numpy(), norm=norm)
    rope.shift_keys(want[0], slots.numpy(), pos.numpy(), pos.numpy() - 7)
    pyrope.cache.rerotate(rope, want[2], pos.numpy(), pos.numpy() + 2)
    for got, w in zip((kc, vc, keys), want):
        assert torch.equal(got, torch.from_numpy(w))


def test_compiled_training_gives_the_eager_gradients():
    rope = Rope(32, layout="split_half", scaling={"rope_type": "yarn", "factor": 4.0,
                                                   "original_max_position_embeddings": 64})
    pos = torch.tensor([[5, 6, 7, 300]])
    w = tensor(32, 32, seed=3)

    def loss(x):
        y = rope.apply(x @ w, pos)
        q, k = rope.apply_qk(y, y[:, :, :1], pos)
        return (q * k).sum()

    x = tensor(1, 4, 2, 32).requires_grad_()
    (eager,) = torch.autograd.grad(loss(x), x)
    (traced,) = torch.autograd.grad(compiled(loss)(x), x)
    assert torch.equal(eager, traced)


def test_a_bad_call_under_compile_names_the_argument():
    rope = Rope(64, layout="split_half")
    with pytest.raises(Exception, match="head_dim=64"):
        compiled(lambda x: rope.apply(x, offset=1))(tensor(1, 2, 2, 32))


# ---- torch.export ----------------------------------------------------------------------------

class Attention(torch.nn.Module):
    """A tiny attention block rotating with pyrope."""

    def __init__(self, rope):
        super().__init__()
        self.rope = rope
        self.qkv = torch.nn.Linear(64, 3 * 64, bias=False)
        torch.nn.init.normal_(self.qkv.weight, generator=torch.Generator().manual_seed(0))

    def forward(self, x, positions):
        q, k, v = self.qkv(x).view(*x.shape[:2], 3, 2, 32).unbind(2)
        q, k = self.rope.apply_qk(q, k, positions)
        scores = torch.einsum("bshd,bthd->bhst", q, k)
        return torch.einsum("bhst,bthd->bshd", scores.softmax(-1), v)


def test_an_exported_program_runs_and_matches_eager_also_reloaded():
    model = Attention(Rope(32, layout="interleaved", base=5e5))
    x = tensor(2, 6, 64)
    pos = torch.tensor([[0, 0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 5]])
    with torch.no_grad():
        eager = model(x, pos)
        program = torch.export.export(model, (x, pos))
        assert "torch.ops.pyrope.apply_qk" in program.graph_module.code
        assert torch.equal(program.module()(x, pos), eager)
        buffer = io.BytesIO()
        torch.export.save(program, buffer)
        buffer.seek(0)
        assert torch.equal(torch.export.load(buffer).module()(x, pos), eager)
