"""The kernel's limits: stated once in csrc/pyrope.h, read by Python, enforced
where values are made.

A rule, a Resolved or a contract the kernel cannot serve is refused when it
is built, naming what the user passed (the rule's parameter, the contract's
key), the value and the limit; values exactly at a limit are served, one ulp
past is refused, and Python's limits are the header's.
"""
import io
import math
import pathlib
import re
import tokenize

import numpy as np
import pytest

import pyrope
from pyrope._engine import binding as _binding, tables as _tables
from pyrope import cache, scaling as S
from pyrope._ops.explicit import explicit_rope
from pyrope.contract import fingerprint, resolved_from_contract

ROOT = pathlib.Path(__file__).resolve().parents[2]
HEADER = ROOT / "csrc" / "pyrope.h"

MAX_INV_FREQ, MIN_SCALE, MAX_SCALE = _binding.MAX_INV_FREQ, _binding.MIN_SCALE, _binding.MAX_SCALE

FREQ = re.escape(f"exceeds the kernel's largest frequency {MAX_INV_FREQ!r} (ROPE_MAX_INV_FREQ)")
SCALE = re.escape("is outside the kernel's range [2**-32, 2**32] (ROPE_MIN_SCALE, ROPE_MAX_SCALE)")


def _rope(scaling, head_dim=64):
    return pyrope.Rope(head_dim, layout="split_half", scaling=scaling)


def _resolved(inv_freq=(1.0, 0.5), attention_factor=1.0, rule="linear"):
    return S.Resolved(np.asarray(inv_freq, dtype=np.float64), attention_factor, rule, {})


def _contract(**changes):
    """A valid contract (hex strings, as contracts store them) with keys replaced."""
    d = pyrope.Rope(16, layout="split_half", rotary_dim=8).contract()
    for key, value in changes.items():
        if key == "inv_freq3":
            d["inv_freq"][3] = value
        else:
            d[key] = value
    return d


def _ulp_above(x):
    return float(np.nextafter(x, math.inf))


def _ulp_below(x):
    return float(np.nextafter(x, 0.0))


# ---- the header is the one statement of the limits ---------------------------------

def _header_limits():
    """``{name: value}`` of every ``#define ROPE_MAX_*/ROPE_MIN_*`` in pyrope.h, parsed as C reads it."""
    limits = {}
    for name, literal in re.findall(r"^#define\s+(ROPE_(?:MAX|MIN)_\w+)\s+(\S+)", HEADER.read_text(), re.M):
        if re.fullmatch(r"-?\d+", literal):
            limits[name] = int(literal)
        elif literal.lower().startswith(("0x", "-0x")):
            limits[name] = float.fromhex(literal)
        else:
            limits[name] = float(literal)
    return limits


PYTHON_NAMES = {"ROPE_MAX_POSITION": "MAX_POSITION", "ROPE_MAX_INV_FREQ": "MAX_INV_FREQ",
                "ROPE_MIN_SCALE": "MIN_SCALE", "ROPE_MAX_SCALE": "MAX_SCALE",
                "ROPE_MAX_OTF_HALF": "MAX_OTF_HALF", "ROPE_MAX_THREADS": "MAX_THREADS",
                "ROPE_MAX_COMPONENTS": "MAX_COMPONENTS", "ROPE_MAX_STAGE_DIM": "MAX_STAGE_DIM"}


def test_every_header_limit_is_read_by_python():
    assert set(_header_limits()) == set(PYTHON_NAMES)


@pytest.mark.parametrize("c_name", sorted(PYTHON_NAMES))
def test_python_limit_is_the_header_value(c_name):
    value = _header_limits()[c_name]
    assert getattr(_binding, PYTHON_NAMES[c_name]) == value
    assert type(getattr(_binding, PYTHON_NAMES[c_name])) is type(value)


@pytest.mark.parametrize("module", ["_engine.checks", "_engine.table_cache", "_ops.rekey", "positions", "_engine.general",
                                    "check",
                                    "onnx_interop"])
def test_modules_use_the_kernel_position_limit(module):
    mod = __import__(f"pyrope.{module}", fromlist=["MAX_POSITION"])
    assert mod.MAX_POSITION == _header_limits()["ROPE_MAX_POSITION"]


def _code_without_strings(path):
    """The source of ``path`` with comments, strings and docstrings removed."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return " ".join(t.string for t in tokens if t.type not in (tokenize.COMMENT, tokenize.STRING))


@pytest.mark.parametrize("path", sorted((ROOT / "pyrope").rglob("*.py")),
                         ids=lambda p: p.relative_to(ROOT / "pyrope").as_posix())
def test_no_module_retypes_a_kernel_limit(path):
    code = re.sub(r"\s+", "", _code_without_strings(path))
    assert not re.search(r"2\*\*-?3[12]\b|2147483647|4294967296|0x1p-?32", code), path.name


# ---- what the kernel cannot serve, refused where it is made ------------------------

CASES = [
    # (id, call, exception, regex the message must match)
    ("linear factor 0.2", lambda: _rope(S.Linear(0.2)), ValueError,
     r"^linear: 'factor' = 0\.2 gives inv_freq\[0\] = 5\.0, which " + FREQ + r"; 'factor' must be at least 0\.25$"),
    ("linear factor 0.2, dict", lambda: _rope({"type": "linear", "factor": 0.2}), ValueError,
     r"^linear: 'factor' = 0\.2 gives inv_freq\[0\] = 5\.0, which " + FREQ),
    ("freq_factors tiny", lambda: _rope(S.FreqFactors([1e-3] * 32)), ValueError,
     r"^freq_factors: 'factors\[0\]' = 0\.001 gives inv_freq\[0\] = 1000\.0, which " + FREQ
     + r"; 'factors\[0\]' must be at least 0\.25$"),
    ("freq_factors one tiny", lambda: _rope(S.FreqFactors([1.0] * 31 + [1e-9])), ValueError,
     r"^freq_factors: 'factors\[31\]' = 1e-09 gives inv_freq\[31\] = [\d.]+, which " + FREQ
     + r"; 'factors\[31\]' must be at least 3\.33\d*e-05$"),
    ("longrope long_factor tiny",
     lambda: _rope(S.LongRope([1.0] * 32, [1e-5] * 32, 4096, 131072, seq_len=5000)), ValueError,
     r"^longrope: 'long_factor\[0\]' = 1e-05 gives inv_freq\[0\] = [\d.]+, which " + FREQ),
    ("proportional factor 0.1", lambda: _rope({"rope_type": "proportional", "factor": 0.1}), ValueError,
     r"^proportional: 'factor' = 0\.1 gives inv_freq\[0\] = 10\.0, which " + FREQ),
    ("yarn factor tiny", lambda: _rope(S.Yarn(factor=1e-3, original_max_position_embeddings=4096)), ValueError,
     r"^yarn: 'factor' = 0\.001 gives inv_freq\[\d+\] = [\d.]+, which " + FREQ + "$"),
    ("llama3 factor tiny", lambda: _rope(S.Llama3(1e-6, 1.0, 4.0, 8192)), ValueError,
     r"^llama3: 'factor' = 1e-06 gives inv_freq\[\d+\] = [\d.]+, which " + FREQ + "$"),
    ("ntk factor tiny", lambda: _rope(S.NTK(1e-9)), ValueError,
     r"^ntk: 'factor' = 1e-09 gives inv_freq\[\d+\] = [\d.]+, which " + FREQ + "$"),
    ("yarn mscale huge",
     lambda: _rope(S.Yarn(factor=4.0, original_max_position_embeddings=4096, mscale=1e300, mscale_all_dim=1.0)),
     ValueError, r"^yarn: 'mscale' = 1e\+300 over 'mscale_all_dim' = 1\.0 gives attention_factor = [\d.e+]+, which "
     + SCALE + "$"),
    ("Resolved inv_freq 5", lambda: _resolved([5.0, 1.0]), ValueError,
     r"^Resolved \(rule 'linear'\): inv_freq\[0\] = 5\.0 " + FREQ + "$"),
    ("Resolved inv_freq inf", lambda: _resolved([1.0, math.inf]), ValueError,
     r"^Resolved \(rule 'linear'\): inv_freq\[1\] = inf " + FREQ + "$"),
    ("Resolved inv_freq nan", lambda: _resolved([1.0, math.nan]), ValueError,
     r"^Resolved \(rule 'linear'\): inv_freq\[1\] = nan must be finite and >= 0$"),
    ("Resolved attention 1e39", lambda: _resolved(attention_factor=1e39), ValueError,
     r"^Resolved \(rule 'linear'\): attention_factor = 1e\+39 " + SCALE + "$"),
    ("Resolved attention 1e-40", lambda: _resolved(attention_factor=1e-40), ValueError,
     r"^Resolved \(rule 'linear'\): attention_factor = 1e-40 " + SCALE + "$"),
    ("Resolved attention inf", lambda: _resolved(attention_factor=math.inf), ValueError,
     r"^Resolved \(rule 'linear'\): attention_factor = inf " + SCALE + "$"),
    ("Resolved attention 0", lambda: _resolved(attention_factor=0.0), ValueError,
     r"^Resolved \(rule 'linear'\): attention_factor = 0\.0 " + SCALE + "$"),
    ("yarn attention 1e39",
     lambda: S.Yarn(factor=4.0, original_max_position_embeddings=4096, attention_factor=1e39), ValueError,
     r"^yarn: 'attention_factor' = 1e\+39 " + SCALE + "$"),
    ("yarn attention 1e-40, dict",
     lambda: _rope({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                    "attention_factor": 1e-40}), ValueError,
     r"^yarn: 'attention_factor' = 1e-40 " + SCALE + "$"),
    ("yarn attention inf",
     lambda: S.Yarn(factor=4.0, original_max_position_embeddings=4096, attention_factor=math.inf), ValueError,
     r"^yarn: 'attention_factor' = inf " + SCALE + "$"),
    ("longrope attention 1e39", lambda: S.LongRope([1.0] * 32, [2.0] * 32, 4096, attention_factor=1e39), ValueError,
     r"^longrope: 'attention_factor' = 1e\+39 " + SCALE + "$"),
    ("longrope attention 1e-40", lambda: S.LongRope([1.0] * 32, [2.0] * 32, 4096, attention_factor=1e-40),
     ValueError, r"^longrope: 'attention_factor' = 1e-40 " + SCALE + "$"),
    ("longrope attention inf", lambda: S.LongRope([1.0] * 32, [2.0] * 32, 4096, attention_factor=math.inf),
     ValueError, r"^longrope: 'attention_factor' = inf " + SCALE + "$"),
    ("freq_factors attention 1e39", lambda: S.FreqFactors([1.0] * 32, attention_factor=1e39), ValueError,
     r"^freq_factors: 'attention_factor' = 1e\+39 " + SCALE + "$"),
    ("longrope attention from original 1",
     lambda: _rope(S.LongRope([1.0] * 32, [2.0] * 32, 1, factor=4.0)), ValueError,
     r"^longrope: .*needs 'original_max_position_embeddings' > 1, got 1; pass 'attention_factor'$"),
    ("contract inv_freq 4.5", lambda: resolved_from_contract(_contract(inv_freq3="0x1.2p+2")), ValueError,
     r"^contract: 'inv_freq\[3\]' = '0x1\.2p\+2' \(4\.5\) " + FREQ + "$"),
    ("contract inv_freq 4.5, from_contract",
     lambda: pyrope.Rope.from_contract(_contract(inv_freq3=(4.5).hex())), ValueError,
     r"^contract: 'inv_freq\[3\]' = '0x1\.2000000000000p\+2' \(4\.5\) " + FREQ + "$"),
    ("contract inv_freq 4.5, fingerprint", lambda: fingerprint(_contract(inv_freq3="0x1.2p+2")), ValueError,
     r"^contract: 'inv_freq\[3\]'"),
    ("contract inv_freq inf", lambda: resolved_from_contract(_contract(inv_freq3="inf")), ValueError,
     r"^contract: 'inv_freq\[3\]' = 'inf' \(inf\) " + FREQ + "$"),
    ("contract attention 1e39", lambda: pyrope.Rope.from_contract(_contract(attention_factor=(1e39).hex())),
     ValueError, r"^contract: 'attention_factor' = '0x1\.78287f49c4a1dp\+129' \(1e\+39\) " + SCALE + "$"),
    ("contract attention 1e-40", lambda: resolved_from_contract(_contract(attention_factor=(1e-40).hex())),
     ValueError, r"^contract: 'attention_factor' = '[0-9a-fx.p+-]+' \(1e-40\) " + SCALE + "$"),
    ("contract attention inf", lambda: resolved_from_contract(_contract(attention_factor="inf")),
     ValueError, r"^contract: 'attention_factor' = 'inf' \(inf\) " + SCALE + "$"),
    ("contract params.base", lambda: pyrope.Rope.from_contract(_contract(params={"base": 0.5})), ValueError,
     r"^contract: 'params\.base': base must be finite and greater than 1, got 0\.5$"),
    ("contract layout", lambda: pyrope.Rope.from_contract(_contract(layout="neox")), ValueError,
     r"^contract: 'layout': layout must be"),
    ("convert_keys factor ratio",
     lambda: cache.convert_keys(explicit_rope(pyrope.Rope, 8, layout="split_half", inv_freq=[1.0] * 4, attention_factor=MIN_SCALE),
                                np.ones((3, 2, 8), np.float32), [0, 1, 2],
                                explicit_rope(pyrope.Rope, 8, layout="split_half", inv_freq=[1.0] * 4, attention_factor=MAX_SCALE)),
     ValueError, r"^to_rope\.attention_factor / rope\.attention_factor = .* = 1\.8446744073709552e\+19 "
     r"\(the factor the conversion applies\) " + SCALE + "$"),
    ("rerotate names k", lambda: cache.rerotate(pyrope.Rope(8, layout="split_half"), [[[0.0] * 8]], [0], [1]),
     TypeError, r"^k must be a numpy\.ndarray, got list$"),
    ("rerotate names its positions",
     lambda: cache.rerotate(pyrope.Rope(8, layout="split_half"), np.ones((3, 2, 8), np.float32), [0, 1], [1, 2]),
     ValueError, r"^from_positions and to_positions must have shape \[seq\] or \[\*batch, seq\] with seq=3"),
    ("convert_keys names k and out",
     lambda: pyrope.Rope(8, layout="split_half").convert_keys(
         np.ones((3, 2, 8), np.float32), [0, 1, 2], pyrope.Rope(8, layout="split_half", base=500.0),
         out=np.ones((3, 2, 6), np.float32)),
     ValueError, r"^out must have the shape of k \(3, 2, 8\), got \(3, 2, 6\)$"),
    ("positions past the limit", lambda: pyrope.Rope(8, layout="split_half").cos_sin([2**31]), ValueError,
     r"^positions must lie within \+-2147483647 \(ROPE_MAX_POSITION\), got 2147483648$"),
    ("onnx_caches max_pos past the limit", lambda: pyrope.onnx_caches(pyrope.Rope(8, layout="split_half"), 2**31 + 1),
     ValueError, r"^max_pos must be positive and at most 2147483648 .*ROPE_MAX_POSITION.*, got 2147483649$"),
    ("threads past the limit", lambda: pyrope.set_num_threads(_binding.MAX_THREADS + 1), ValueError,
     rf"^n must be between 1 and {_binding.MAX_THREADS}, got {_binding.MAX_THREADS + 1}$"),
    ("on-the-fly past the limit",
     lambda: pyrope.Rope(2 * _binding.MAX_OTF_HALF + 2, layout="split_half").apply(
         np.ones((1, 1, 2 * _binding.MAX_OTF_HALF + 2), np.float32), angles="on_the_fly"),
     ValueError, rf"^angles='on_the_fly' needs rotary_dim <= {2 * _binding.MAX_OTF_HALF}, "
                 rf"got rotary_dim={2 * _binding.MAX_OTF_HALF + 2}"),
]


@pytest.mark.parametrize("call, exc, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_refused_where_made_naming_what_was_passed(call, exc, pattern):
    with pytest.raises(exc) as info:
        call()
    assert isinstance(info.value, pyrope.RopeError)
    message = str(info.value)
    assert re.search(pattern, message), message
    # never an internal function the user did not call
    assert not re.match(r"(cos_sin|rope_\w+|_\w+)\b", message), message


# ---- exactly at a limit is served, one ulp past is refused ------------------------

X = np.ones((3, 2, 8), np.float32)


def _serves(rope):
    """The kernel takes the rope: tables and rotations at the extreme positions are finite."""
    pos = [0, 1, _binding.MAX_POSITION]
    cos, sin = rope.cos_sin(pos)
    assert np.all(np.isfinite(cos)) and np.all(np.isfinite(sin))
    y = rope.apply(X, pos)
    z = rope.apply(X, pos, angles="on_the_fly")
    assert np.all(np.isfinite(y)) and np.array_equal(y, z)


AT_LIMIT = [
    ("inv_freq = MAX_INV_FREQ", lambda f: _resolved([f(MAX_INV_FREQ), 1.0, 0.5, 0.25]), FREQ),
    ("attention = MIN_SCALE", lambda f: _resolved([1.0] * 4, attention_factor=f(MIN_SCALE)), SCALE),
    ("attention = MAX_SCALE", lambda f: _resolved([1.0] * 4, attention_factor=f(MAX_SCALE)), SCALE),
    ("linear factor 1/MAX_INV_FREQ", lambda f: S.resolve(S.Linear(1.0 / f(MAX_INV_FREQ)), head_dim=8,
                                                         rotary_dim=8, base=10000.0), FREQ),
    ("freq_factors attention = MIN_SCALE", lambda f: S.resolve(S.FreqFactors([1.0] * 4, attention_factor=f(MIN_SCALE)),
                                                               head_dim=8, rotary_dim=8, base=10000.0), SCALE),
    ("yarn attention = MAX_SCALE", lambda f: S.resolve(
        S.Yarn(factor=4.0, original_max_position_embeddings=4096, attention_factor=f(MAX_SCALE)),
        head_dim=8, rotary_dim=8, base=10000.0), SCALE),
    ("contract inv_freq = MAX_INV_FREQ",
     lambda f: resolved_from_contract(_contract(inv_freq3=f(MAX_INV_FREQ).hex()))[2], FREQ),
    ("contract attention = MIN_SCALE",
     lambda f: resolved_from_contract(_contract(attention_factor=f(MIN_SCALE).hex()))[2], SCALE),
]


def _exactly(x):
    return x


def _one_ulp_past(x):
    """One ulp outside the range [MIN_SCALE, MAX_SCALE] or above MAX_INV_FREQ."""
    return _ulp_below(x) if x == MIN_SCALE else _ulp_above(x)


@pytest.mark.parametrize("make, _", [c[1:] for c in AT_LIMIT], ids=[c[0] for c in AT_LIMIT])
def test_exactly_at_the_limit_is_served(make, _):
    resolved = make(_exactly)
    rope = pyrope.Rope(2 * resolved.inv_freq.size, layout="split_half", scaling=resolved)
    _serves(rope)


@pytest.mark.parametrize("make, pattern", [c[1:] for c in AT_LIMIT], ids=[c[0] for c in AT_LIMIT])
def test_one_ulp_past_the_limit_is_refused(make, pattern):
    with pytest.raises(ValueError, match=pattern):
        make(_one_ulp_past)


@pytest.mark.parametrize("inv_freq, scale", [
    ([_ulp_above(MAX_INV_FREQ)], 1.0), ([1.0], _ulp_below(MIN_SCALE)), ([1.0], _ulp_above(MAX_SCALE))])
def test_the_kernel_itself_refuses_one_ulp_past(inv_freq, scale):
    # what Python refuses is what C refuses: Python's bound is not stricter than the kernel's
    with pytest.raises(ValueError, match="not finite or out of range"):
        _tables.cos_sin_table(np.zeros(1, np.int64), np.array(inv_freq), scale, where="test")


def test_threads_at_the_limit_are_accepted():
    before = pyrope.get_num_threads()
    try:
        pyrope.set_num_threads(_binding.MAX_THREADS)
        assert pyrope.get_num_threads() == _binding.MAX_THREADS
    finally:
        pyrope.set_num_threads(before)


def test_on_the_fly_at_the_limit_is_served():
    d = 2 * _binding.MAX_OTF_HALF
    x = np.ones((2, 1, d), np.float32)
    rope = pyrope.Rope(d, layout="split_half")
    assert np.array_equal(rope.apply(x, angles="on_the_fly"), rope.apply(x, angles="table"))
