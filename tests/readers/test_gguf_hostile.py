"""Hostile GGUF files: every count and length a file states is checked against the
bytes left in it before anything is read or built from it, so a file costs work and
memory bounded by its real size; every refusal is a RopeError naming the file (and
the key, tensor or header field); what is accepted reads as gguf's own reader reads it.

The count fields of valid files (written by gguf's writer, tests/support/gguf_files.py) are
found with gguf's GGUFReader, independently of pyrope's reader, and overwritten with
adversarial values; every prefix of a file is read; the fuzz target's corpus and
saved regressions are replayed through its own check (tests/fuzz/fuzz_gguf.py)."""
import glob
import os
import pathlib
import re
import struct
import sys
import time
import tracemalloc

import numpy as np
import pytest

import gguf_files
from bounded_call import measured
import pyrope
from pyrope import RopeError

gguf = pytest.importorskip("gguf")
import pyrope.gguf  # noqa: E402 - imported before any allocation is measured
ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "fuzz"))
import fuzz_gguf  # noqa: E402

SEEDS = gguf_files.seed_files()
CALLS = {"Rope.from_gguf": lambda p: pyrope.Rope.from_gguf(p),
         "rope_arguments_from_gguf(layer=2, seq_len)": lambda p: pyrope.gguf.rope_arguments_from_gguf(
             p, layer=2, seq_len=1 << 20)}


def bounded(call, path, size):
    """``call()``: its result or RopeError (which must name ``path``); refusals within a
    second, Python's allocations at most 1 MiB plus 64 bytes per byte of the file."""
    outcome, peak, seconds = measured(call)
    problems = []
    if peak > (1 << 20) + 64 * size:
        problems.append(f"{peak} bytes allocated")
    if isinstance(outcome, RopeError):
        if repr(str(path)) not in str(outcome):
            problems.append(f"a refusal not naming the file: {outcome}")
        if seconds > 1.0:
            problems.append(f"refused after {seconds:.2f} s")
    return outcome, problems


# ---- issue 22, items 2 and 6 -----------------------------------------------------------------

def header(n_tensors, n_kv, version=3, order="<"):
    return b"GGUF" + struct.pack(order + "IQQ", version, n_tensors, n_kv)


def kv(key, type_, payload, order="<"):
    return struct.pack(order + "Q", len(key)) + key + struct.pack(order + "I", type_) + payload


def test_an_array_claiming_more_entries_than_the_file_holds_is_refused_at_once(tmp_path):
    # one uint8 array of 2**62 entries: gguf's reader looped on, memory growing ~40 MB/s
    path = tmp_path / "hostile.gguf"
    path.write_bytes(header(0, 1) + kv(b"a", 9, struct.pack("<IQ", 0, 2**62)))
    assert path.stat().st_size == 49
    outcome, problems = bounded(lambda: pyrope.Rope.from_gguf(path), path, 49)
    assert not problems, problems
    assert isinstance(outcome, pyrope.errors.ValueError)
    assert "key 'a': the array claims 4611686018427387904 entries" in str(outcome)
    assert "the file has 0 bytes left" in str(outcome)


@pytest.mark.parametrize("count, least", [(2**62, 1), (2**61, 8), (10**6, 8)])
def test_string_arrays_are_bounded_by_their_smallest_entries(tmp_path, count, least):
    # an empty string still takes its 8-byte length: 2**61 strings cannot fit in a few bytes
    path = tmp_path / "strings.gguf"
    path.write_bytes(header(0, 1) + kv(b"tokenizer.ggml.tokens", 9, struct.pack("<IQ", 8, count)) + b"\0" * 64)
    outcome, problems = bounded(lambda: pyrope.Rope.from_gguf(path), path, 200)
    assert not problems and isinstance(outcome, RopeError)
    assert "key 'tokenizer.ggml.tokens': the array claims" in str(outcome)


def _file_with_string(tmp_path, key, raw, arch=b"llama"):
    """A GGUF file whose ``key`` holds the bytes ``raw`` as its string."""
    items = [(b"general.architecture", arch), (key, raw)] if key != b"general.architecture" else [(key, raw)]
    body = b"".join(kv(k, 8, struct.pack("<Q", len(v)) + v) for k, v in items)
    body += kv(b"llama.attention.key_length", 4, struct.pack("<I", 64))
    path = tmp_path / "strings.gguf"
    path.write_bytes(header(0, len(items) + 1) + body)
    return path


@pytest.mark.parametrize("key", [b"general.architecture", b"llama.rope.scaling.type"])
def test_a_string_that_is_not_utf8_names_its_key(tmp_path, key):
    path = _file_with_string(tmp_path, key, b"ll\xff\xfeama")
    with pytest.raises(pyrope.errors.ValueError,
                       match=rf"{os.path.basename(path)}.*key '{key.decode()}': the string is not UTF-8 "
                             r"\(invalid start byte at byte 2 of 7"):
        pyrope.Rope.from_gguf(path)


def test_a_key_or_tensor_name_that_is_not_utf8_is_refused(tmp_path):
    path = tmp_path / "key.gguf"
    path.write_bytes(header(0, 1) + kv(b"llama.\xc3", 4, struct.pack("<I", 1)))
    with pytest.raises(pyrope.errors.ValueError, match=r"key/value pair 0: the key b'llama.\\xc3' is not UTF-8"):
        pyrope.Rope.from_gguf(path)
    name = b"rope_freqs\xe2"
    info = struct.pack("<Q", len(name)) + name + struct.pack("<IQIQ", 1, 1, 0, 0)
    path.write_bytes(header(1, 0) + info + b"\0" * 64)
    with pytest.raises(pyrope.errors.ValueError, match=r"tensor info 0: the tensor name .* is not UTF-8"):
        pyrope.Rope.from_gguf(path)


def test_strings_pyrope_does_not_read_are_not_decoded(tmp_path):
    # a tokenizer's strings are walked for their lengths only: an odd byte there is no reason to refuse
    plain = _file_with_string(tmp_path, b"tokenizer.ggml.model", b"\xff")
    assert pyrope.Rope.from_gguf(plain).head_dim == 64


# ---- the count fields of valid files, found by gguf's own reader, overwritten ----------------

def count_fields(data):
    """``[(name, offset, width)]``: every count, length and type code of ``data`` (a GGUF
    file), located with gguf.GGUFReader (not pyrope's reader)."""
    path = pathlib.Path(os.environ.get("TMPDIR", "/tmp")) / f"pyrope-count-fields-{os.getpid()}.gguf"
    path.write_bytes(data)
    try:
        reader = gguf.GGUFReader(str(path))
        base = reader.data.ctypes.data
        at = lambda part: part.ctypes.data - base  # noqa: E731
        out = [("tensor count", 8, 8), ("kv count", 16, 8)]
        for name, field in reader.fields.items():
            if name.startswith("GGUF."):
                continue
            parts = field.parts
            out += [(f"{name}: key length", at(parts[0]), 8), (f"{name}: value type", at(parts[2]), 4)]
            if field.types[0] == gguf.GGUFValueType.STRING:
                out.append((f"{name}: string length", at(parts[3]), 8))
            if field.types[0] == gguf.GGUFValueType.ARRAY:
                out += [(f"{name}: item type", at(parts[3]), 4), (f"{name}: count", at(parts[4]), 8)]
                if field.types[-1] == gguf.GGUFValueType.STRING:
                    out += [(f"{name}: string {i} length", at(p), 8) for i, p in enumerate(parts[5::2])]
        for t in reader.tensors:
            name_len, _, n_dims, dims, dtype, offset = t.field.parts
            out += [(f"tensor {t.name}: name length", at(name_len), 8), (f"tensor {t.name}: n_dims", at(n_dims), 4),
                    (f"tensor {t.name}: ggml type", at(dtype), 4), (f"tensor {t.name}: offset", at(offset), 8)]
            out += [(f"tensor {t.name}: dim {i}", at(dims) + 8 * i, 8) for i in range(len(dims))]
        return out, reader.byte_order
    finally:
        del reader
        path.unlink()


def adversarial(width, offset, size):
    remaining = size - offset
    if width == 4:
        return [0, 1, 2, 5, 7, 8, 9, 13, 31, 2**31, 2**32 - 1]
    return [0, 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1, remaining, remaining + 1, remaining - 9]


MUTATED = ["llama_every_type", "llama_big_endian", "phi3_longrope", "gemma3_sliding", "llama_rope_freqs_f16"]


@pytest.mark.parametrize("seed", MUTATED)
@pytest.mark.parametrize("call", list(CALLS))
def test_every_count_in_a_file_is_checked_against_its_size(tmp_path, seed, call):
    data = SEEDS[seed]
    fields, byte_order = count_fields(data)
    order = ">" if (byte_order == "S") == (sys.byteorder == "little") else "<"
    assert len(fields) > 10
    path = tmp_path / f"{seed}.gguf"
    problems, refused = [], 0
    for name, offset, width in fields:
        for value in adversarial(width, offset, len(data)):
            mutated = bytearray(data)
            struct.pack_into(order + ("I" if width == 4 else "Q"), mutated, offset, value % (1 << 8 * width))
            path.write_bytes(bytes(mutated))
            outcome, found = bounded(lambda: CALLS[call](path), path, len(mutated))
            refused += isinstance(outcome, RopeError)
            problems += [f"{name} = {value}: {p}" for p in found]
    assert not problems, problems[:20]
    assert refused > len(fields)   # the mutations mostly break the file: the sweep reaches the checks


@pytest.mark.parametrize("seed", ["llama_every_type", "phi3_longrope", "llama_big_endian"])
def test_every_prefix_of_a_file_is_refused_naming_it(tmp_path, seed):
    data = SEEDS[seed]
    path = tmp_path / "prefix.gguf"
    problems = []
    for n in range(len(data)):
        path.write_bytes(data[:n])
        outcome, found = bounded(lambda: pyrope.Rope.from_gguf(path), path, n)
        problems += [f"{n} bytes: {p}" for p in found]
        tail_is_padding = data[n:].strip(b"\0") == b"" and n >= len(data) - 32
        if not isinstance(outcome, RopeError) and not tail_is_padding:
            problems.append(f"{n} bytes of {len(data)}: read as {outcome}")
    assert not problems, problems[:20]


# ---- structure: each refusal names the file and what is wrong ---------------------------------

def _tensor_info(name, dims, ggml_type=0, offset=0, order="<"):
    return (struct.pack(order + "Q", len(name)) + name + struct.pack(order + "I", len(dims))
            + struct.pack(order + f"{len(dims)}Q", *dims) + struct.pack(order + "IQ", ggml_type, offset))


ARCH = kv(b"general.architecture", 8, struct.pack("<Q", 5) + b"llama")
STRUCTURE = [
    ("empty", b"", r"the header: needs 24 bytes, the file has 0"),
    ("magic", b"GGML" + b"\0" * 20, r"the magic is b'GGML', not b'GGUF'"),
    ("version 1", header(0, 0, version=1), r"version 1; GGUF versions \(2, 3\) are read"),
    ("version 4", header(0, 0, version=4), r"version 4"),
    ("kv count", header(0, 2**40) + ARCH, r"the key/value count 1099511627776 needs at least 13 bytes each"),
    ("tensor count", header(2**40, 1) + ARCH, r"the tensor count 1099511627776 needs at least 24 bytes each"),
    ("key length", header(0, 1) + struct.pack("<Q", 2**63) + b"x" * 30, r"key/value pair 0: the key \(9223372036854775808 bytes\)"),
    ("duplicate key", header(0, 2) + ARCH + ARCH, r"key 'general.architecture': given twice"),
    ("value type", header(0, 1) + kv(b"k", 13, b"\0" * 8), r"key 'k': unknown value type 13"),
    ("nested array", header(0, 1) + kv(b"k", 9, struct.pack("<IQ", 9, 1) + struct.pack("<IQ", 0, 0)),
     r"key 'k': an array of arrays \(llama.cpp does not read nested arrays\)"),
    ("item type", header(0, 1) + kv(b"k", 9, struct.pack("<IQ", 99, 0)), r"key 'k': an array of unknown value type 99"),
    ("string length", header(0, 1) + kv(b"k", 8, struct.pack("<Q", 2**40) + b"abc"),
     r"key 'k': the string \(1099511627776 bytes\) needs 1099511627776 bytes"),
    ("truncated value", header(0, 1) + kv(b"k", 12, b"\0" * 3), r"key 'k': its FLOAT64 value needs 8 bytes"),
    ("alignment type", header(0, 1) + kv(b"general.alignment", 10, struct.pack("<Q", 32)),
     r"key 'general.alignment': must be a UINT32, got UINT64"),
    ("alignment 0", header(0, 1) + kv(b"general.alignment", 4, struct.pack("<I", 0)),
     r"key 'general.alignment': must be a power of two, got 0"),
    ("alignment 48", header(0, 1) + kv(b"general.alignment", 4, struct.pack("<I", 48)), r"got 48"),
    ("n_dims", header(1, 0) + _tensor_info(b"t", [1] * 5) + b"\0" * 40, r"tensor 't': 5 dimensions; ggml tensors"),
    ("dims", header(1, 0) + _tensor_info(b"t", [2**20, 2**20]) + b"\0" * 40,
     r"tensor 't': its data \(1099511627776 x F32\) needs 4398046511104 bytes"),
    ("dim past int64", header(1, 0) + _tensor_info(b"t", [2**63]) + b"\0" * 40, r"tensor 't': dimensions .* beyond int64"),
    ("ggml type", header(1, 0) + _tensor_info(b"t", [4], ggml_type=4) + b"\0" * 40, r"tensor 't': unknown ggml type 4"),
    ("block size", header(1, 0) + _tensor_info(b"t", [5], ggml_type=2) + b"\0" * 40,
     r"tensor 't': 5 elements per row of Q4_0, not a multiple of its block size 32"),
    ("no dims, block size", header(1, 0) + _tensor_info(b"t", [], ggml_type=2) + b"\0" * 40,
     r"tensor 't': 1 elements per row of Q4_0"),
    ("tensor offset", header(1, 0) + _tensor_info(b"t", [4], offset=2**40) + b"\0" * 40,
     r"tensor 't': its data \(4 x F32\) needs 16 bytes at byte 1099511627"),
    ("duplicate tensor", header(2, 0) + _tensor_info(b"t", [1]) * 2 + b"\0" * 40, r"tensor 't': given twice"),
]


@pytest.mark.parametrize("data, match", [s[1:] for s in STRUCTURE], ids=[s[0] for s in STRUCTURE])
def test_a_malformed_file_is_refused_naming_it_and_what_is_wrong(tmp_path, data, match):
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    outcome, problems = bounded(lambda: pyrope.Rope.from_gguf(path), path, len(data))
    assert not problems, problems
    assert isinstance(outcome, pyrope.errors.ValueError), outcome
    assert re.search(match, str(outcome)), str(outcome)
    assert f"{str(path)!r} is not a readable GGUF file" in str(outcome)


@pytest.mark.parametrize("value, match", [
    (kv(b"llama.attention.sliding_window_pattern", 7, b"\x02"), r"a BOOL is the byte 2, not 0 or 1"),
    (kv(b"llama.attention.sliding_window_pattern", 9, struct.pack("<IQ", 7, 3) + b"\x01\x00\x07"),
     r"entry 2 of the BOOL array is the byte 7, not 0 or 1"),
])
def test_a_bool_byte_other_than_0_or_1_is_refused_where_it_is_read(tmp_path, value, match):
    path = tmp_path / "bool.gguf"
    path.write_bytes(header(0, 4) + ARCH + kv(b"llama.block_count", 4, struct.pack("<I", 3))
                     + kv(b"llama.attention.key_length", 4, struct.pack("<I", 64)) + value)
    assert pyrope.Rope.from_gguf(path).head_dim == 64   # not read for the full-attention layers
    with pytest.raises(pyrope.errors.ValueError, match=r"key 'llama.attention.sliding_window_pattern': " + match):
        pyrope.Rope.from_gguf(path, layer=1)


def test_paths_that_are_not_files(tmp_path):
    with pytest.raises(pyrope.errors.ValueError, match="no such file"):
        pyrope.Rope.from_gguf(tmp_path)
    with pytest.raises(pyrope.errors.TypeError, match="path must be a str or os.PathLike"):
        pyrope.Rope.from_gguf(b"model.gguf")
    with pytest.raises(pyrope.errors.TypeError, match="path must be a str or os.PathLike"):
        pyrope.Rope.from_gguf(3)


# ---- what is accepted reads as gguf's own reader reads it --------------------------------------

@pytest.mark.parametrize("seed", list(SEEDS))
def test_every_value_and_tensor_reads_as_gguf_reads_it(tmp_path, seed):
    from pyrope._readers.gguf_file import GGUFFile
    path = tmp_path / f"{seed}.gguf"
    path.write_bytes(SEEDS[seed])
    theirs = gguf.GGUFReader(str(path))
    with GGUFFile(str(path), gguf) as ours:
        want = {name: f.contents() for name, f in theirs.fields.items() if not name.startswith("GGUF.")}
        got = {name: ours.value(name) for name in ours.fields}
        assert list(got) == list(want)
        for name in want:   # NaN-free files: plain equality, types too (bool vs int, float vs int)
            assert got[name] == want[name] and type(got[name]) is type(want[name]), name
            if isinstance(want[name], list):
                assert [type(v) for v in got[name]] == [type(v) for v in want[name]], name
            assert ours.is_array(name) == (theirs.fields[name].types[0] == gguf.GGUFValueType.ARRAY)
        assert ours.version == int(theirs.fields["GGUF.version"].parts[0][0])
        assert list(ours.tensors) == [t.name for t in theirs.tensors]
        for t in theirs.tensors:
            mine = ours.tensors[t.name]
            assert (mine.type_name, mine.n_elements, mine.n_bytes, mine.start) == \
                (t.tensor_type.name, t.n_elements, t.n_bytes, t.data_offset)
            assert list(mine.dims) == t.shape.tolist()
            assert np.array_equal(ours.floats(t.name), np.asarray(t.data, np.float64).reshape(-1))
    del theirs


def test_a_tokenizer_s_arrays_are_walked_never_decoded(tmp_path):
    # 100k strings and 100k ints: gguf's reader builds ~650 bytes of numpy objects per entry
    data = gguf_files._write("llama", {**gguf_files.LLAMA,
                                       "tokenizer.ggml.tokens": ("add_array", [f"t{i}" for i in range(100_000)]),
                                       "tokenizer.ggml.token_type": ("add_array", [1] * 100_000)})
    path = tmp_path / "vocab.gguf"
    path.write_bytes(data)
    tracemalloc.start()
    try:
        rope = pyrope.Rope.from_gguf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert rope.head_dim == 64 and peak < (1 << 20) < len(data)


# ---- the fuzz target's corpus and saved regressions, through its own check --------------------

REPLAYED = sorted(glob.glob(str(ROOT / "tests" / "fuzz" / "gguf_corpus" / "*"))
                  + glob.glob(str(ROOT / "tests" / "fuzz" / "gguf_regressions" / "*")))


def test_the_seed_corpus_is_the_writer_s_output():
    # tests/fuzz/gguf_corpus holds at least the seeds as gguf_files writes them today
    on_disk = {pathlib.Path(p).read_bytes() for p in REPLAYED}
    assert all(data in on_disk for data in SEEDS.values())


@pytest.mark.parametrize("name", [pathlib.Path(p).name for p in REPLAYED])
def test_fuzz_corpus_and_regressions_replay(tmp_path, name):
    source = next(p for p in REPLAYED if pathlib.Path(p).name == name)
    data = pathlib.Path(source).read_bytes()
    tracemalloc.start()
    try:
        outcomes = fuzz_gguf.check(data, str(tmp_path / "input.gguf"))
    finally:
        tracemalloc.stop()
    assert len(outcomes) == len(fuzz_gguf.CALLS)
    if name in {f"{seed}.gguf" for seed in SEEDS}:   # the seeds are read as the writer meant them
        assert isinstance(outcomes[0], pyrope.Rope) or "differs by layer" in str(outcomes[0]), outcomes[0]


def test_fuzz_check_fails_on_what_it_must_catch(tmp_path, monkeypatch):
    # the target's check is able to fail: a leak of a bare exception, a refusal not naming the file,
    # an allocation beyond the bound
    path = str(tmp_path / "input.gguf")
    tracemalloc.start()
    try:
        monkeypatch.setattr(pyrope.Rope, "from_gguf", classmethod(lambda cls, p, **kw: [][1]))
        with pytest.raises(IndexError):
            fuzz_gguf.check(b"GGUF", path)
        monkeypatch.setattr(pyrope.Rope, "from_gguf", classmethod(
            lambda cls, p, **kw: (_ for _ in ()).throw(pyrope.errors.ValueError("no file named"))))
        with pytest.raises(AssertionError, match="does not name the file"):
            fuzz_gguf.check(b"GGUF", path)
        monkeypatch.setattr(pyrope.Rope, "from_gguf", classmethod(lambda cls, p, **kw: bytearray(8 << 20)))
        with pytest.raises(AssertionError, match="bytes allocated for a 4-byte file"):
            fuzz_gguf.check(b"GGUF", path)
    finally:
        tracemalloc.stop()
