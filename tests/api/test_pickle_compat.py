"""Ropes pickled by pyrope 0.2.0 still unpickle, to the same position
function; new pickles name no private module, so reorganising pyrope's
internals cannot break them.

``tests/data/ropes_0.2.0.pickle`` was made by pyrope 0.2.0 (which pickled
every slot, private module paths included) from ``pickled_ropes.used(
pickled_ropes.build())``; each rope is compared with the same construction
run now: fingerprint, every public property, and rotations bit for bit."""
import copy
import pathlib
import pickle
import pickletools

import numpy as np
import pytest

from pickled_ropes import build, used

PICKLE = pathlib.Path(__file__).resolve().parents[1] / "data" / "ropes_0.2.0.pickle"
NOW = build()
PROPERTIES = ("head_dim", "rotary_dim", "layout", "layout_source", "softmax_scale_factor", "base",
              "attention_factor", "mrope_section", "mrope_interleaved", "fingerprint")


def same_rope(got, want):
    for name in PROPERTIES:
        assert getattr(got, name) == getattr(want, name), name
    assert np.array_equal(got.inv_freq.view(np.uint64), want.inv_freq.view(np.uint64))
    assert got.contract() == want.contract()
    x = np.linspace(-2, 2, 6 * want.head_dim, dtype=np.float32).reshape(1, 3, 2, want.head_dim)
    for dtype in (np.float32, np.float64):
        a, b = got.apply(x.astype(dtype), offset=7), want.apply(x.astype(dtype), offset=7)
        assert np.array_equal(a, b)


@pytest.mark.parametrize("name", list(NOW))
def test_a_rope_pickled_by_0_2_0_unpickles_to_the_same_rope(name):
    old = pickle.loads(PICKLE.read_bytes())
    assert set(old) == set(NOW)
    same_rope(old[name], NOW[name])


def globals_named(blob):
    """The ``module.name`` globals a pickle refers to."""
    names, strings = set(), []
    for op, arg, _ in pickletools.genops(blob):
        if op.name in ("SHORT_BINUNICODE", "BINUNICODE", "UNICODE"):
            strings.append(arg)
        elif op.name == "STACK_GLOBAL":
            names.add(".".join(strings[-2:]))
        elif op.name == "GLOBAL":
            names.add(arg.replace(" ", "."))
    return names


def test_the_old_pickle_names_private_modules_and_new_ones_do_not():
    """The test above can fail: 0.2.0's pickle reaches into pyrope's internals."""
    assert any(n.startswith("pyrope._") for n in globals_named(PICKLE.read_bytes()))
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        names = globals_named(pickle.dumps(used(build()), protocol=protocol))
        assert {n for n in names if n.startswith("pyrope")} == {"pyrope.rope.Rope"}, names
        assert not any("_table_cache" in n or n.startswith("numpy") for n in names), names


@pytest.mark.parametrize("name", list(NOW))
def test_pickles_and_copies_are_the_same_rope(name):
    rope = used(build())[name]
    for clone in (pickle.loads(pickle.dumps(rope)), copy.copy(rope), copy.deepcopy(rope)):
        same_rope(clone, NOW[name])
