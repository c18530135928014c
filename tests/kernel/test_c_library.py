"""The C library the package ships for C and C++ programs: libpyrope (the API of
csrc/pyrope.h and nothing else, soname with the ABI number), pyrope.h (standing
alone in C11 and C++) and pyrope.pc, where pyrope.get_include() and
pyrope.get_library_path() say. The examples in docs/examples are built with the
commands their documentation gives and run: decode_loop.c's output is compared
with pyrope.reference and, bit for bit, with the numpy API; paged_write.c's
(QK-norm, rotation and a paged-cache write in one rope_rotate_staged call per
step) bit for bit with Rope.apply and Rope.cache_write with pyrope.RMSNorm;
quant_shift.c's (a q8_0 key cache and an int8 value cache written by
rope_rotate_quantised, then a context shift moving the keys in place) bit for
bit with Rope.cache_write and Rope.shift_keys, and the shifted keys against
Rope.apply at their final positions within the quantisation bound.

Needs cc, c++, pkg-config, nm and readelf (binutils), as building the package does."""
import ctypes
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pyrope
from pyrope import reference
from pyrope._engine.binding import ffi, lib as cffi_lib
from pyrope.scaling import Resolved
import quant_formulas as qf
from tolerance import assert_rotation_close

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLES = os.path.join(ROOT, "docs", "examples")
HEADER_SOURCE = os.path.join(ROOT, "csrc", "pyrope.h")
SOURCES = ("decode_loop.c", "paged_write.c", "quant_shift.c")
# where each example's command is documented (the first is where it lives; the others must repeat it exactly)
COMMAND_DOCS = {source: [os.path.join(EXAMPLES, "README.md"), os.path.join(EXAMPLES, source),
                         os.path.join(ROOT, "README.md")] for source in SOURCES}


def header_defines():
    with open(HEADER_SOURCE, encoding="utf-8") as f:
        return {k: int(v) for k, v in re.findall(r"^#define\s+(ROPE_\w+)\s+(-?\d+)\s*$", f.read(), re.M)}


def header_functions():
    """Names of the functions pyrope.h declares (each marked ROPE_API)."""
    with open(HEADER_SOURCE, encoding="utf-8") as f:
        text = f.read()
    marked = re.findall(r"^ROPE_API\s+[^(;]*?\b(rope_\w+)\s*\(", text, re.M)
    # every declaration at the start of a line, marked or not: an unmarked one would not be exported
    declared = re.findall(r"^(?:ROPE_API\s+)?(?:const\s+)?\w+\s*\*?\s*(rope_\w+)\s*\(", text, re.M)
    assert sorted(marked) == sorted(declared), "a declaration in pyrope.h lacks ROPE_API"
    return set(marked)


ABI = header_defines()["ROPE_ABI_VERSION"]
SONAME = f"libpyrope.so.{ABI}"
# rope_version()'s encoding of pyrope.__version__
MAJOR, MINOR, PATCH = (int(p) for p in pyrope.__version__.split("."))
ENCODED = MAJOR * 10000 + MINOR * 100 + PATCH
POSITION_REFUSED = ffi.string(cffi_lib.rope_strerror(cffi_lib.ROPE_E_POSITION)).decode()
SLOT_REFUSED = ffi.string(cffi_lib.rope_strerror(cffi_lib.ROPE_E_SLOT)).decode()
STAGE_REFUSED = ffi.string(cffi_lib.rope_strerror(cffi_lib.ROPE_E_STAGE)).decode()


def shell_env():
    """The environment the documented command runs in: `python3` is this interpreter
    and imports this checkout's pyrope."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, env.get("PYTHONPATH")]))
    return env


def run(argv, **kw):
    proc = subprocess.run(argv, capture_output=True, text=True, **kw)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def commands_in(path, source):
    """The `cc` command lines building source (an example's file name) in a file (comment markers stripped)."""
    with open(path, encoding="utf-8") as f:
        lines = [re.sub(r"^\s*(\*|#|//)?\s*", "", line).rstrip() for line in f]
    return [line for line in lines if line.startswith("cc ") and re.search(rf"(^|\s){re.escape(source)}(\s|$)", line)]


def documented_command(source):
    found = commands_in(COMMAND_DOCS[source][0], source)
    assert len(found) == 1, f"{COMMAND_DOCS[source][0]} must give one command building {source}, found {found}"
    return found[0]


def build_and_run(tmp_path_factory, source):
    """An example built by its documented command in a fresh directory: (directory, stdout)."""
    name = source[:-len(".c")]
    where = tmp_path_factory.mktemp(name)
    shutil.copy(os.path.join(EXAMPLES, source), where)
    run(["sh", "-c", documented_command(source)], cwd=where, env=shell_env())
    return where, run([os.path.join(where, name)], cwd=where)


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """decode_loop built and run: (directory, stdout)."""
    return build_and_run(tmp_path_factory, "decode_loop.c")


@pytest.fixture(scope="module")
def paged_example(tmp_path_factory):
    """paged_write built and run: (directory, stdout)."""
    return build_and_run(tmp_path_factory, "paged_write.c")


@pytest.fixture(scope="module")
def quant_example(tmp_path_factory):
    """quant_shift built and run: (directory, stdout)."""
    return build_and_run(tmp_path_factory, "quant_shift.c")


def parse(stdout):
    """inv_freq and {(name, position, head): (in, out)} from the example's output."""
    inv_freq, vectors = None, {}
    for line in stdout.splitlines():
        words = line.split()
        if words and words[0] == "inv_freq":
            inv_freq = [float(w) for w in words[1:]]
        elif words and words[0] in ("k", "q"):
            key = (words[0], int(words[1]), int(words[2]))
            vectors.setdefault(key, {})[words[3]] = np.array(words[4:], dtype=np.float32)
    return inv_freq, vectors


# ---- where the files are -----------------------------------------------------

def test_paths_name_the_installed_files():
    package = os.path.dirname(os.path.abspath(pyrope.__file__))
    include, libdir = pyrope.get_include(), pyrope.get_library_path()
    assert os.path.isabs(include) and os.path.dirname(include) == package
    assert os.path.isabs(libdir) and os.path.dirname(libdir) == package
    # the header alone, as built from csrc/ (a stale copy would fail here)
    assert os.listdir(include) == ["pyrope.h"]
    with open(os.path.join(include, "pyrope.h"), "rb") as a, open(HEADER_SOURCE, "rb") as b:
        assert a.read() == b.read()
    for name in ("libpyrope.so", SONAME, os.path.join("pkgconfig", "pyrope.pc")):
        assert os.path.isfile(os.path.join(libdir, name)), name
    # -lpyrope finds libpyrope.so, programs load the soname: the same library
    with open(os.path.join(libdir, "libpyrope.so"), "rb") as a, open(os.path.join(libdir, SONAME), "rb") as b:
        assert a.read() == b.read()


def test_the_library_exports_the_api_and_nothing_else():
    out = run(["nm", "-D", "--defined-only", os.path.join(pyrope.get_library_path(), SONAME)])
    exported = {line.split()[-1] for line in out.splitlines() if line.strip()}
    api = header_functions()
    assert {"rope_rotate", "rope_version", "rope_strerror"} <= api
    assert exported == api, f"missing: {sorted(api - exported)}, not in the API: {sorted(exported - api)}"


def test_the_soname_carries_the_abi_number():
    dynamic = run(["readelf", "-d", os.path.join(pyrope.get_library_path(), "libpyrope.so")])
    assert re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", dynamic).group(1) == SONAME


def test_versions_agree_with_the_package():
    d = header_defines()
    assert (d["ROPE_VERSION_MAJOR"], d["ROPE_VERSION_MINOR"], d["ROPE_VERSION_PATCH"]) == (MAJOR, MINOR, PATCH)
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:   # (no tomllib before 3.11)
        assert re.search(r'^version = "(.*)"$', f.read(), re.M).group(1) == pyrope.__version__
    shared = ctypes.CDLL(os.path.join(pyrope.get_library_path(), SONAME))
    assert shared.rope_version() == ENCODED and cffi_lib.rope_version() == ENCODED
    assert shared.rope_abi_version() == ABI == cffi_lib.rope_abi_version()
    with open(os.path.join(pyrope.get_library_path(), "pkgconfig", "pyrope.pc"), encoding="utf-8") as f:
        assert re.search(r"^Version: (.*)$", f.read(), re.M).group(1) == pyrope.__version__


def test_pkg_config_file_is_relocatable(tmp_path):
    # ${pcfiledir}: a copy of the package's files elsewhere names the copy
    shutil.copytree(pyrope.get_library_path(), tmp_path / "lib")
    shutil.copytree(pyrope.get_include(), tmp_path / "include")
    env = dict(os.environ, PKG_CONFIG_PATH=str(tmp_path / "lib" / "pkgconfig"))
    for variable, want in (("libdir", "lib"), ("includedir", "include")):
        got = run(["pkg-config", f"--variable={variable}", "pyrope"], env=env).strip()
        assert os.path.realpath(got) == os.path.realpath(tmp_path / want)
    assert run(["pkg-config", "--modversion", "pyrope"], env=env).strip() == pyrope.__version__


# ---- the header on its own ---------------------------------------------------

USE_HEADER = """
#include <pyrope.h>
#include <pyrope.h>   /* twice: the include guard */
#include <stdio.h>
#include <string.h>
int main(void)
{
    rope_op op;
    rope_tensor t;
    rope_angles a;
    memset(&op, 0, sizeof op), memset(&t, 0, sizeof t), memset(&a, 0, sizeof a);
    op.dtype = ROPE_F32;
    op.layout = ROPE_SPLIT_HALF;
    int status = rope_rotate(&op, &t, 1, &a);   /* head_dim 0: refused */
    printf("%d %d %d %s|%s\\n", rope_version(), rope_abi_version(), ROPE_VERSION,
           rope_strerror(ROPE_E_POSITION), rope_dtype_name(ROPE_BF16));
    return status == ROPE_E_DIM ? 0 : 1;
}
"""


@pytest.mark.parametrize("compiler, std, suffix", [("cc", "-std=c11", ".c"), ("c++", "-std=c++11", ".cpp")])
def test_header_compiles_alone_and_links(tmp_path, compiler, std, suffix):
    # only pyrope.get_include() on the include path; warnings are errors; the C++
    # program links (unmangled names: extern "C") and runs
    src = tmp_path / f"use{suffix}"
    src.write_text(USE_HEADER)
    libdir = pyrope.get_library_path()
    run([compiler, std, "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", pyrope.get_include(), str(src),
         "-L", libdir, f"-Wl,-rpath,{libdir}", "-lpyrope", "-o", str(tmp_path / "use")])
    out = run([str(tmp_path / "use")])
    assert out.strip() == f"{ENCODED} {ABI} {ENCODED} {POSITION_REFUSED}|bfloat16"


# ---- the examples ------------------------------------------------------------

@pytest.mark.parametrize("source", SOURCES)
def test_the_command_is_the_same_wherever_documented(source):
    command = documented_command(source)
    assert "pkg-config" in command and "get_library_path" in command
    for path in COMMAND_DOCS[source][1:]:
        if path.endswith("README.md") and not commands_in(path, source):
            continue   # the top-level README may point to docs/examples instead of repeating it
        assert set(commands_in(path, source)) == {command}, (
            f"{path} gives another command for {source} than {COMMAND_DOCS[source][0]}")


@pytest.mark.parametrize("source", SOURCES)
def test_example_compiles_without_warnings(tmp_path, source):
    # the flags a C engine's build would use, warnings as errors (-O2: the warnings that need the optimiser)
    run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I", pyrope.get_include(), "-c",
         os.path.join(EXAMPLES, source), "-o", str(tmp_path / "example.o")])


@pytest.mark.parametrize("fixture, program", [("example", "decode_loop"), ("paged_example", "paged_write"),
                                              ("quant_example", "quant_shift")])
def test_example_links_this_package_library(request, fixture, program):
    where, _ = request.getfixturevalue(fixture)
    ldd = run(["ldd", os.path.join(where, program)])
    found = re.search(rf"^\s*{re.escape(SONAME)} => (\S+)", ldd, re.M)
    assert found, ldd
    assert os.path.realpath(found.group(1)) == os.path.realpath(os.path.join(pyrope.get_library_path(), SONAME))


def test_example_matches_the_reference(example):
    _, stdout = example
    lines = stdout.splitlines()
    assert lines[0].startswith(f"pyrope {pyrope.__version__} (ABI {ABI}), instruction set ")
    inv_freq, vectors = parse(stdout)
    want_freq = reference.pair_frequencies(64, 10000.0)
    assert len(inv_freq) == 32
    assert np.all(np.abs(np.array(inv_freq) - want_freq) <= np.spacing(np.array(want_freq)))
    # 8 decode steps from position 1000, 2 key and 4 query heads each, in and out
    assert sorted(vectors) == sorted((name, pos, h) for pos in range(1000, 1008)
                                     for name, heads in (("k", 2), ("q", 4)) for h in range(heads))
    for (name, pos, h), v in vectors.items():
        want = reference.rotate_with_inv_freq([float(x) for x in v["in"]], pos, inv_freq, layout="split_half")
        assert_rotation_close(v["out"], want, v["in"], 64, "split_half")
    assert lines[-2] == "on-the-fly angles give the table's bits: yes"
    assert lines[-1] == f"position 1024 with a 1024-row table: {POSITION_REFUSED}"


def test_example_matches_the_numpy_api_bit_for_bit(example):
    # the library is built from the same sources with the same flags as the extension
    _, stdout = example
    inv_freq, vectors = parse(stdout)
    rope = pyrope.Rope(64, layout="split_half",
                       scaling=Resolved(inv_freq=inv_freq, attention_factor=1.0, rule="default", params={}))
    for (name, pos, h), v in vectors.items():
        got = rope.apply(v["in"].reshape(1, 1, 64), offset=pos).reshape(64)
        assert got.tobytes() == v["out"].tobytes(), (name, pos, h)


# ---- paged_write.c: QK-norm, rotation and the paged cache ---------------------

def parse_paged(stdout):
    """paged_write's output: {"inv_freq", "q_norm", "k_norm": [floats], "eps", "unwritten": float,
    "steps": [(first position, tokens)], "slots": {position: slot},
    "vectors": {(name, position, head): {"in"|"out": float32 values}},
    "k_cache", "v_cache": float32 [blocks, block_size, heads, dim], "last": the last line}."""
    got = {"steps": [], "slots": {}, "vectors": {}}
    rows = {"k_cache": {}, "v_cache": {}}
    for line in stdout.splitlines():
        words = line.split()
        what = words[0]
        if what in ("inv_freq", "q_norm", "k_norm"):
            got[what] = [float.fromhex(w) for w in words[1:]]
        elif what in ("eps", "unwritten"):
            got[what] = float.fromhex(words[1])
        elif what == "step":
            got["steps"].append((int(words[1]), int(words[2])))
        elif what == "slot":
            got["slots"][int(words[1])] = int(words[2])
        elif what in ("q", "k", "v"):
            values = np.array([float.fromhex(w) for w in words[4:]], dtype=np.float32)   # exact: float32 values
            got["vectors"].setdefault((what, int(words[1]), int(words[2])), {})[words[3]] = values
        elif what in rows:
            rows[what][tuple(int(w) for w in words[1:4])] = np.array([float.fromhex(w) for w in words[4:]],
                                                                      dtype=np.float32)
        else:
            assert what == "refused:", f"a line this test does not know: {line!r}"
            got["last"] = line
    for name, found in rows.items():
        shape = tuple(max(index[i] for index in found) + 1 for i in range(3))
        assert len(found) == np.prod(shape), f"{name}: not every (block, row, head) printed"
        cache = np.empty(shape + (len(next(iter(found.values()))),), dtype=np.float32)
        for index, values in found.items():
            cache[index] = values
        got[name] = cache
    assert stdout.splitlines()[-1] == got.get("last"), "the refused call is the last line"
    return got


def assert_same_bits(got, want, what):
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.shape, want.shape)
    differ = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    if differ.size:
        first = differ[0]
        where = tuple(int(i) for i in np.unravel_index(first, got.shape))
        raise AssertionError(f"{what}: {differ.size} of {got.size} values differ, first at {where}: "
                             f"{got.flat[first]!r} != {want.flat[first]!r}")


def stacked(vectors, name, positions, heads, kind="in"):
    """The printed vectors ``name ... kind`` of these positions as [tokens, heads, dim] float32."""
    return np.stack([np.stack([vectors[(name, p, h)][kind] for h in range(heads)]) for p in positions])


def tokens_of(steps):
    """The examples' steps, checked: a prefill of several tokens, then decode steps of one, over
    positions 0, 1, ... in order. Returns how many tokens they wrote."""
    assert steps[0][1] > 1 and len(steps) > 2 and all(n == 1 for _, n in steps[1:])
    assert [first for first, _ in steps] == list(np.cumsum([0] + [n for _, n in steps[:-1]]))
    return steps[-1][0] + steps[-1][1]


def check_slots(slots, n_tokens, blocks, block_size):
    """One slot per token, within the cache, none twice; a token's row in its block is its position's;
    the sequence's blocks are the cache's out of order, and leave some of it to others."""
    assert sorted(slots) == list(range(n_tokens))
    assert len(set(slots.values())) == n_tokens and all(0 <= s < blocks * block_size for s in slots.values())
    assert all(s % block_size == p % block_size for p, s in slots.items())
    table = [slots[p] // block_size for p in range(0, n_tokens, block_size)]
    assert table != sorted(table) and len(table) < blocks


def test_paged_example_steps_and_slots(paged_example):
    _, stdout = paged_example
    out = parse_paged(stdout)
    n_tokens = tokens_of(out["steps"])
    blocks, block_size, heads, dim = out["k_cache"].shape
    assert (block_size, heads, dim) == (4, 2, 128) and out["v_cache"].shape == out["k_cache"].shape
    slots = out["slots"]
    check_slots(slots, n_tokens, blocks, block_size)
    # exact weights (multiples of 1/64), Qwen3's eps and rope_theta
    for name in ("q_norm", "k_norm"):
        weights = np.array(out[name])
        assert weights.shape == (dim,) and np.all(weights * 64 == np.round(weights * 64)), name
    assert out["eps"] == 1e-6
    assert np.all(np.abs(np.array(out["inv_freq"]) - reference.pair_frequencies(dim, 1e6))
                  <= np.spacing(reference.pair_frequencies(dim, 1e6)))
    # a slot just past the cache: refused before anything is written
    n_slots = blocks * block_size
    assert out["last"] == f"refused: slot {n_slots} of a {n_slots}-slot cache: {SLOT_REFUSED}; caches untouched: yes"


def test_paged_example_matches_the_numpy_api_bit_for_bit(paged_example):
    _, stdout = paged_example
    out = parse_paged(stdout)
    vectors, slots = out["vectors"], out["slots"]
    c_k_cache, c_v_cache = out["k_cache"], out["v_cache"]
    _, _, n_kv, dim = c_k_cache.shape
    n_q = 1 + max(h for name, _, h in vectors if name == "q")
    rope = pyrope.Rope(dim, layout="split_half",
                       scaling=Resolved(inv_freq=out["inv_freq"], attention_factor=1.0, rule="default", params={}))
    # the C side's weights, float64 as RMSNorm multiplies by them
    q_norm = pyrope.RMSNorm(np.array(out["q_norm"], dtype=np.float64), eps=out["eps"])
    k_norm = pyrope.RMSNorm(np.array(out["k_norm"], dtype=np.float64), eps=out["eps"])
    k_cache = np.full(c_k_cache.shape, out["unwritten"], dtype=np.float32)
    v_cache = np.full(c_v_cache.shape, out["unwritten"], dtype=np.float32)
    for first, n in out["steps"]:
        positions = range(first, first + n)
        q = stacked(vectors, "q", positions, n_q)
        want = stacked(vectors, "q", positions, n_q, "out")
        assert_same_bits(rope.apply(q, offset=first, norm=q_norm), want, f"q of the step at {first}")
        k, v = stacked(vectors, "k", positions, n_kv), stacked(vectors, "v", positions, n_kv)
        slot_mapping = np.array([slots[p] for p in positions], dtype=np.int64)
        rope.cache_write(k, v, k_cache, v_cache, slot_mapping, offset=first, norm=k_norm)
    assert_same_bits(c_k_cache, k_cache, "k_cache")
    assert_same_bits(c_v_cache, v_cache, "v_cache")
    # values are copied as they are; the slots no step wrote keep their initial value
    block_size = c_k_cache.shape[1]
    for p, s in slots.items():
        for h in range(n_kv):
            assert_same_bits(c_v_cache[s // block_size, s % block_size, h], vectors[("v", p, h)]["in"], f"v {p} {h}")
    unwritten = np.ones(c_k_cache.shape[:2], dtype=bool)
    for s in slots.values():
        unwritten[s // block_size, s % block_size] = False
    assert unwritten.any()
    for cache in (c_k_cache, c_v_cache):
        assert_same_bits(cache[unwritten], np.full(cache[unwritten].shape, out["unwritten"], np.float32), "unwritten")


# ---- quant_shift.c: quantised caches and the context shift -------------------

Q8_BYTES = cffi_lib.ROPE_Q8_0_BYTES


def parse_quant(stdout):
    """quant_shift's output: {"inv_freq": [floats], "unwritten": (byte, scale), "steps": [(first, tokens)],
    "slots": {position: slot}, "vectors": {(name, position, head): {"in": float32 values}}, "shift": (dropped, moved),
    "moves": [(slot, from, to)], "k_cache": uint8 [blocks, block_size, heads, bytes], "v_cache": int8
    [blocks, block_size, heads, dim], "v_scale": float32 [blocks, block_size, heads], "refused": [lines]}."""
    got = {"steps": [], "slots": {}, "vectors": {}, "moves": [], "refused": []}
    rows = {"k_cache": {}, "v_cache": {}, "v_scale": {}}
    for line in stdout.splitlines():
        words = line.split()
        what = words[0]
        if what == "inv_freq":
            got[what] = [float.fromhex(w) for w in words[1:]]
        elif what == "unwritten":
            got[what] = (int(words[1], 16), float.fromhex(words[2]))
        elif what == "step":
            got["steps"].append((int(words[1]), int(words[2])))
        elif what == "slot":
            got["slots"][int(words[1])] = int(words[2])
        elif what in ("k", "v"):
            values = np.array([float.fromhex(w) for w in words[4:]], dtype=np.float32)   # exact: float32 values
            got["vectors"].setdefault((what, int(words[1]), int(words[2])), {})[words[3]] = values
        elif what == "shift":
            got[what] = (int(words[1]), int(words[2]))
        elif what == "move":
            got["moves"].append(tuple(int(w) for w in words[1:]))
        elif what in ("k_cache", "v_cache"):
            rows[what][tuple(int(w) for w in words[1:4])] = np.frombuffer(bytes.fromhex(words[4]), np.uint8)
        elif what == "v_scale":
            rows[what][tuple(int(w) for w in words[1:4])] = float.fromhex(words[4])
        else:
            assert what == "refused:", f"a line this test does not know: {line!r}"
            got["refused"].append(line)
    for name, found in rows.items():
        shape = tuple(max(index[i] for index in found) + 1 for i in range(3))
        assert len(found) == np.prod(shape), f"{name}: not every (block, row, head) printed"
        if name == "v_scale":
            cache = np.empty(shape, dtype=np.float32)   # float32 values, exact
        else:
            cache = np.empty(shape + (len(next(iter(found.values()))),), dtype=np.uint8)
        for index, values in found.items():
            cache[index] = values
        got[name] = cache if name != "v_cache" else cache.view(np.int8)
    assert stdout.splitlines()[-len(got["refused"]):] == got["refused"], "the refused calls are the last lines"
    return got


def quant_rope(out, dim):
    return pyrope.Rope(dim, layout="interleaved",
                       scaling=Resolved(inv_freq=out["inv_freq"], attention_factor=1.0, rule="default", params={}))


def test_quant_example_steps_slots_and_shift(quant_example):
    _, stdout = quant_example
    out = parse_quant(stdout)
    n_tokens = tokens_of(out["steps"])
    blocks, block_size, heads, dim = out["v_cache"].shape
    assert (block_size, heads, dim) == (4, 2, 128)
    # keys: head_dim / 32 q8_0 blocks per head; a scale per (slot, head) for the values
    assert out["k_cache"].shape == (blocks, block_size, heads, dim // 32 * Q8_BYTES)
    assert out["v_scale"].shape == (blocks, block_size, heads)
    slots = out["slots"]
    check_slots(slots, n_tokens, blocks, block_size)
    # the shift: the first tokens dropped, every later key moved by -dropped in its own slot
    dropped, moved = out["shift"]
    assert 0 < dropped < n_tokens and moved == n_tokens - dropped
    assert out["moves"] == [(slots[p], p, p - dropped) for p in range(dropped, n_tokens)]
    assert np.all(np.abs(np.array(out["inv_freq"]) - reference.pair_frequencies(dim, 1e4))
                  <= np.spacing(reference.pair_frequencies(dim, 1e4)))
    # refused before anything is written: a slot just past the cache, in_place without slots
    n_slots = blocks * block_size
    assert out["refused"] == [
        f"refused: shift to slot {n_slots} of a {n_slots}-slot cache: {SLOT_REFUSED}; caches untouched: yes",
        f"refused: in_place without slots: {STAGE_REFUSED}; caches untouched: yes"]


def test_quant_example_matches_the_numpy_api_bit_for_bit(quant_example):
    # the same writes with Rope.cache_write, the same shift with Rope.shift_keys, on numpy caches
    # starting from the same bytes: the same bytes and scale bits everywhere
    _, stdout = quant_example
    out = parse_quant(stdout)
    vectors, slots = out["vectors"], out["slots"]
    blocks, block_size, n_kv, dim = out["v_cache"].shape
    rope = quant_rope(out, dim)
    byte, scale = out["unwritten"]
    k_cache = np.full(out["k_cache"].shape, byte, dtype=np.uint8)   # q8_0 blocks as their bytes
    v_cache = np.full(out["v_cache"].shape, byte, dtype=np.uint8).view(np.int8)
    v_scale = np.full(out["v_scale"].shape, scale, dtype=np.float32)
    for first, n in out["steps"]:
        positions = range(first, first + n)
        k, v = stacked(vectors, "k", positions, n_kv), stacked(vectors, "v", positions, n_kv)
        slot_mapping = np.array([slots[p] for p in positions], dtype=np.int64)
        rope.cache_write(k, v, k_cache, v_cache, slot_mapping, offset=first, v_scale=v_scale)
    written = k_cache.copy()
    moves = np.array(out["moves"], dtype=np.int64)
    rope.shift_keys(k_cache, moves[:, 0], moves[:, 1], moves[:, 2])
    assert np.array_equal(out["k_cache"], k_cache), "k_cache (q8_0 bytes)"
    assert np.array_equal(out["v_cache"], v_cache), "v_cache (int8)"
    assert_same_bits(out["v_scale"], v_scale, "v_scale")
    # the shift moved every key it lists (and only those): the dropped ones keep their written bytes
    moved = np.zeros((blocks, block_size), dtype=bool)
    for s in moves[:, 0]:
        moved[s // block_size, s % block_size] = True
    assert np.array_equal(out["k_cache"][~moved], written[~moved])
    assert all(not np.array_equal(out["k_cache"][s // block_size, s % block_size, h],
                                  written[s // block_size, s % block_size, h]) for s in moves[:, 0] for h in range(n_kv))
    # values by the int8 formula written again (tests/support/quant_formulas.py), independently of pyrope
    for p, s in slots.items():
        q, s_head = qf.int8(stacked(vectors, "v", [p], n_kv)[0])
        assert np.array_equal(out["v_cache"][s // block_size, s % block_size], q), f"v {p}"
        assert_same_bits(out["v_scale"][s // block_size, s % block_size], s_head, f"v_scale {p}")
    # the slots no step wrote keep their initial bytes and scales
    unwritten = np.ones((blocks, block_size), dtype=bool)
    for s in slots.values():
        unwritten[s // block_size, s % block_size] = False
    assert unwritten.any()
    assert np.all(out["k_cache"][unwritten] == byte) and np.all(out["v_cache"][unwritten].view(np.uint8) == byte)
    assert_same_bits(out["v_scale"][unwritten], np.full(out["v_scale"][unwritten].shape, scale, np.float32),
                     "unwritten v_scale")


def q8_0_error_bound(keys):
    """The most a coordinate of keys ``[..., dim]`` (adjacent pairs) may be off after a q8_0 write and one
    shift: a q8_0 value is ``qs * d16``, ``d = amax / 127`` over its 32 values and ``d16`` its float16
    rounding, so it is within ``d/2 + 127 |d - d16| < 0.563 d`` of the value; amax <= M, the head's largest
    pair norm, which rotations keep. Written: <= 0.563 M/127 per coordinate; rotated (a pair's error keeps its
    norm): <= sqrt(2) * 0.563 M/127; quantised again (amax <= 1.01 M): 0.563 * 1.01 M/127 more. In all
    < 1.37 M/127; float32's roundings of the rotation are far below."""
    pairs = keys.reshape(keys.shape[:-1] + (-1, 2)).astype(np.float64)
    return 1.4 * np.sqrt((pairs ** 2).sum(-1)).max(-1) / 127


def test_quant_example_shifted_keys_are_the_keys_at_their_new_positions(quant_example):
    # independently of shift_keys: each moved key, dequantised, is its input rotated at its final
    # position (Rope.apply) within the quantisation bound; not so at its old position nor one off
    # the new (a wrong shift fails here); a dropped key is still its input at its old position
    _, stdout = quant_example
    out = parse_quant(stdout)
    vectors, slots = out["vectors"], out["slots"]
    blocks, block_size, n_kv, dim = out["v_cache"].shape
    rope = quant_rope(out, dim)
    keys = pyrope.dequantize(out["k_cache"])
    assert keys.shape == (blocks, block_size, n_kv, dim)
    final = {p: to for _, p, to in out["moves"]}
    dropped, _ = out["shift"]
    for p, s in slots.items():
        k = stacked(vectors, "k", [p], n_kv)[0]
        got = keys[s // block_size, s % block_size]
        bound = q8_0_error_bound(k)

        def error(position):
            return np.abs(got - rope.apply(k[None], offset=position)[0]).max(-1)

        if p < dropped:
            assert p not in final
            assert np.all(error(p) <= bound), f"dropped key {p}: {error(p)} > {bound}"
            continue
        assert np.all(error(final[p]) <= bound), f"key {p} moved to {final[p]}: {error(final[p])} > {bound}"
        for wrong in (p, final[p] - 1, final[p] + 1):
            assert np.all(error(wrong) > bound), f"key {p} also passes at position {wrong}"
