"""Every array argument of every public entry against the classes of input the
adversarial runs found (docs/RELIABILITY.md):

- ndarray subclasses (``numpy.memmap``, a user's subclass) are arrays: the
  call gives the values the plain array gives, prepared calls included
  (before the fix a prepared call refused a memmap slot it was prepared for);
- a DLPack producer that fails (its export raises, its device query raises,
  it returns no capsule) is a ``RopeError`` naming the argument, never the
  producer's bare exception;
- a torch view too large for numpy to address (2**61 float32 elements, its
  strides repeating one element) is a ``RopeError`` naming the argument,
  never numpy's bare "array is too big".
"""
import numpy as np
import pytest

import pyrope
from pyrope import PartialRotary, Rope, RopeError, layout

R = Rope(8, layout="split_half")
R2 = Rope(8, layout="split_half", base=500000.0)
PR = PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=2)
COS, SIN = pyrope.onnx_caches(R, 16)


def x():
    return np.linspace(-1, 1, 48, dtype=np.float32).reshape(2, 3, 8)   # [seq=2, heads=3, head_dim=8]


def k():
    return np.linspace(1, -2, 16, dtype=np.float32).reshape(2, 1, 8)


def pos():
    return np.array([3, 9])


def onnx_input():
    return np.linspace(-1, 1, 48, dtype=np.float32).reshape(1, 3, 2, 8)   # [batch, heads, seq, head]


def _prepared(make):
    a = make("x", x())
    return R.prepare(x(), out=x())(a, out=make("out", x()), positions=make("positions", pos()))


def _in_place(make):
    a = make("x", x())
    return R.prepare(a, out=a)(a, out=a, positions=make("positions", pos()))


def _prepared_qk(make):
    p = R.prepare_qk(x(), k(), out=(x(), k()))
    return p(make("q", x()), make("k", k()), out=(make("out[0]", x()), make("out[1]", k())), offset=7)


# label -> (the argument names the call takes arrays for, call(make)); make(name, array) is
# the value passed for argument ``name`` (the array itself, a subclass of it, a hostile object)
CALLS = {
    "apply": (("x", "positions", "out"), lambda m: R.apply(m("x", x()), m("positions", pos()),
                                                            out=m("out", x()))),
    "apply in place": (("x",), lambda m: (lambda a: R.apply(a, offset=4, out=a))(m("x", x()))),
    "apply_qk": (("q", "k", "positions", "out[0]", "out[1]"),
                 lambda m: R.apply_qk(m("q", x()), m("k", k()), m("positions", pos()),
                                      out=(m("out[0]", x()), m("out[1]", k())))),
    "cos_sin": (("positions",), lambda m: R.cos_sin(m("positions", pos()))),
    "rerotate": (("k", "from_positions", "to_positions"),
                 lambda m: R.rerotate(m("k", k()), m("from_positions", pos()), m("to_positions", pos() + 5))),
    "convert_keys": (("k", "positions", "out"),
                     lambda m: R.convert_keys(m("k", k()), m("positions", pos()), R2, out=m("out", k()))),
    "apply_varlen": (("x", "cu_seqlens", "offsets", "out"),
                     lambda m: pyrope.apply_varlen(R, m("x", x()), m("cu_seqlens", np.array([0, 1, 2])),
                                                   m("offsets", np.array([4, 0])), out=m("out", x()))),
    "varlen_positions": (("cu_seqlens", "offsets"),
                         lambda m: pyrope.varlen_positions(m("cu_seqlens", np.array([0, 2, 5])),
                                                           m("offsets", np.array([1, 7])))),
    "PartialRotary.apply": (("x", "positions", "out"),
                            lambda m: PR.apply(m("x", x()), m("positions", pos()), out=m("out", x()))),
    "prepare": (("x", "out"), lambda m: R.prepare(m("x", x()), out=m("out", x()))(x(), out=x(), offset=3)),
    "prepared": (("x", "positions", "out"), _prepared),
    "prepared in place": (("x", "positions"), _in_place),
    "prepared_qk": (("q", "k", "out[0]", "out[1]"), _prepared_qk),
    "onnx_rotary_embedding": (("input", "cos_cache", "sin_cache", "position_ids"),
                              lambda m: pyrope.onnx_rotary_embedding(
                                  m("input", onnx_input()), m("cos_cache", COS.copy()), m("sin_cache", SIN.copy()),
                                  m("position_ids", np.array([[2, 6]])))),
    "convert_heads": (("x",), lambda m: layout.convert_heads(m("x", x()), "interleaved", "split_half")),
    "permute_rows": (("w",), lambda m: layout.permute_rows(m("w", np.arange(48.0).reshape(24, 2)), 3, 8,
                                                           "interleaved", "split_half")),
}
ARGUMENTS = [(label, name) for label, (names, _) in CALLS.items() for name in names]


def plain(name, array):
    return array


def as_values(result):
    if isinstance(result, tuple):
        return [np.array(r) for r in result]
    return [np.array(result)]


# ---- ndarray subclasses ----------------------------------------------------------------------

class Tagged(np.ndarray):
    """A user's subclass: numpy keeps it through views and ufuncs."""


def memmap_of(tmp_path):
    count = iter(range(10**6))

    def make(array):
        mm = np.memmap(tmp_path / f"{next(count)}.bin", dtype=array.dtype, mode="w+", shape=array.shape)
        mm[...] = array
        return mm
    return make


@pytest.mark.parametrize("subclass", ["memmap", "Tagged"])
@pytest.mark.parametrize("label, name", ARGUMENTS, ids=[f"{c}-{n}" for c, n in ARGUMENTS])
def test_an_ndarray_subclass_gives_the_plain_arrays_values(label, name, subclass, tmp_path):
    to_subclass = memmap_of(tmp_path) if subclass == "memmap" else (lambda a: a.view(Tagged))
    call = CALLS[label][1]
    want = as_values(call(plain))
    got = as_values(call(lambda n, a: to_subclass(a) if n == name else a))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)


def test_a_prepared_call_writes_a_memmap_slot_it_was_prepared_for(tmp_path):
    """The case of the report: a KV-cache slot in a memory-mapped file."""
    slot = np.memmap(tmp_path / "k.bin", dtype=np.float32, mode="w+", shape=k().shape)
    prepared = R.prepare(k(), out=slot)
    assert prepared(k(), out=slot, offset=11) is slot
    assert np.array_equal(np.asarray(slot), R.apply(k(), offset=11))


# ---- DLPack producers that fail --------------------------------------------------------------

class ExportRaises:
    def __dlpack__(self, *args, **kwargs):
        raise RuntimeError("the producer's export failed")

    def __dlpack_device__(self):
        return (1, 0)


class DeviceRaises(ExportRaises):
    def __dlpack_device__(self):
        raise OSError("the producer's device query failed")


class NoCapsule(ExportRaises):
    def __dlpack__(self, *args, **kwargs):
        return 42


class ExportMemoryError(ExportRaises):
    def __dlpack__(self, *args, **kwargs):
        raise MemoryError("the producer ran out of memory")


PRODUCERS = [ExportRaises, DeviceRaises, NoCapsule, ExportMemoryError]


@pytest.mark.parametrize("producer", PRODUCERS, ids=lambda p: p.__name__)
@pytest.mark.parametrize("label, name", ARGUMENTS, ids=[f"{c}-{n}" for c, n in ARGUMENTS])
def test_a_failing_dlpack_producer_is_a_rope_error_naming_the_argument(label, name, producer):
    call = CALLS[label][1]
    with pytest.raises(RopeError) as info:
        call(lambda n, a: producer() if n == name else a)
    assert name in str(info.value), str(info.value)


def test_a_failing_export_names_what_the_producer_said():
    with pytest.raises(pyrope.errors.TypeError, match=r"^x.__dlpack__\(\) failed: RuntimeError: the producer's"):
        R.apply(ExportRaises())


# ---- views too large for numpy ---------------------------------------------------------------

def test_a_torch_view_numpy_cannot_address_is_a_rope_error_naming_the_argument():
    torch = pytest.importorskip("torch")   # in the test extras: make test installs it
    leaks = []
    for label, name in ARGUMENTS:
        kind = torch.int64 if "position" in name or name in ("cu_seqlens", "offsets") else torch.float32
        if name == "w":
            kind = torch.float64
        huge = torch.zeros(1, dtype=kind).expand(2**58, 8)   # 2**61 elements in one element of memory
        try:
            CALLS[label][1](lambda n, a: huge if n == name else a)
            leaks.append(f"{label}({name}): no error")
        except RopeError as exc:
            if name not in str(exc):
                leaks.append(f"{label}({name}): {exc}"[:200])
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            leaks.append(f"{label}({name}): {type(exc).__name__}: {exc}"[:200])
    assert not leaks, leaks
