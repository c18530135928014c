"""Aliasing of every input with every output, entry point by entry point.

Each case lays an input of one call (positions, cu_seqlens, offsets, caches,
tables, frequencies, descriptors) in the memory of an output of the same
call, and checks the result against the same call made on separate copies
(taken before it runs), or, at the C entry points, the status and that
nothing was written. Earlier builds crashed (SIGSEGV) on some of these, so
``tests/engine/test_aliasing.py`` runs them in a child process:

    python tests/support/alias_cases.py [NAME ...]

prints ``START name`` before each case and then ``OK name``, ``SKIP name
why`` or ``FAIL name why``; a case that kills the process leaves its START
last.
"""
import sys
import threading

import numpy as np

import pyrope
from pyrope import Rope
from pyrope._engine.binding import ffi, lib

CASES = {}


def case(name):
    def register(fn):
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return register


class Skip(Exception):
    pass


SEQ = 12
RNG_SEED = 20260522



def rope8(**kw):
    return Rope(8, layout="split_half", base=100.0, **kw)


def random_array(shape, dtype, seed=0):
    return np.random.default_rng(RNG_SEED + seed).standard_normal(shape).astype(dtype)


def plant(host, n, first=0, values=None):
    """int64 positions [n] in the memory of C-contiguous ``host`` from its flat
    element ``first``, set to ``values`` (default 100, 103, ...): a view."""
    per = 8 // host.itemsize
    view = host.reshape(-1)[first:first + n * per].view(np.int64)
    assert view.shape == (n,) and np.shares_memory(view, host)
    view[...] = 100 + 3 * np.arange(n) if values is None else values
    return view


def bits(a):
    return np.ascontiguousarray(a).view(np.uint8).copy()


def same(got, want, what="result"):
    if not np.array_equal(bits(got), bits(want)):
        raise AssertionError(f"{what} differs from the call on separate copies")


def dtypes():
    """Every storage type this process serves (bfloat16 where ml_dtypes is installed)."""
    return [np.dtype(d) for d in pyrope._engine.dtypes.storage_dtypes()]


# ---- Rope.apply ----------------------------------------------------------------------

def _apply_in_place(angles, dtype):
    def run():
        rope = rope8()
        x = random_array((2, SEQ, 2, 8), dtype)
        pos = plant(x, 2 * SEQ).reshape(2, SEQ)        # [batch, seq]: the direct path's form
        want = x.copy()
        rope.apply(want, pos.copy(), out=want, angles=angles)   # also caches the rows
        got = rope.apply(x, pos, out=x, angles=angles)
        assert got is x
        same(x, want)
    return run


for _angles in ("auto", "table", "on_the_fly"):
    for _dtype in dtypes():
        case(f"apply/in place/{_angles}/{_dtype.name}")(_apply_in_place(_angles, _dtype))


@case("apply/in place/positions [seq]")
def _():
    rope = rope8()
    x = random_array((SEQ, 3, 8), np.float32)
    pos = plant(x, SEQ, first=8)
    want = x.copy()
    rope.apply(want, pos.copy(), out=want)
    rope.apply(x, pos, out=x)
    same(x, want)


@case("apply/in place/inverse")
def _():
    rope = rope8()
    x = random_array((2, SEQ, 2, 8), np.float32)
    pos = plant(x, 2 * SEQ).reshape(2, SEQ)
    want = x.copy()
    rope.apply(want, pos.copy(), out=want, inverse=True)
    rope.apply(x, pos, out=x, inverse=True)
    same(x, want)


@case("apply/in place/seq_axis=-2")
def _():
    rope = rope8()
    x = random_array((2, 2, SEQ, 8), np.float32)     # [batch, heads, seq, dim]
    pos = plant(x, 2 * SEQ).reshape(2, SEQ)
    want = x.copy()
    rope.apply(want, pos.copy(), out=want, seq_axis=-2)
    rope.apply(x, pos, out=x, seq_axis=-2)
    same(x, want)


@case("apply/out a cache slot holding the positions")
def _():
    rope = rope8()
    x = random_array((1, SEQ, 2, 8), np.float32)
    cache = random_array((1, 3 * SEQ, 2, 8), np.float32, 1)
    slot = cache[:, SEQ:2 * SEQ]
    pos = plant(cache, SEQ, first=SEQ * 16)          # inside the slot's first tokens
    want = cache.copy()
    rope.apply(x, pos.copy(), out=want[:, SEQ:2 * SEQ])
    rope.apply(x, pos, out=slot)
    same(cache, want, "the cache")


@case("apply/positions in a gap of out (within its bounds)")
def _():
    rope = rope8()
    x = random_array((1, SEQ, 2, 8), np.float32)
    buf = random_array((1, SEQ, 4, 8), np.float32, 1)
    out = buf[:, :, ::2]                               # heads 0 and 2: heads 1 and 3 are gaps
    pos = plant(buf, 4, first=8)                       # token 0, head 1: a gap of out, never written
    x4 = x[:, :4]
    want = buf.copy()
    rope.apply(x4, pos.copy(), out=want[:, :4, ::2])
    rope.apply(x4, pos, out=out[:, :4])
    same(buf, want, "the buffer")


@case("apply/positions in x, out elsewhere (not aliasing an output)")
def _():
    rope = rope8()
    x = random_array((2, SEQ, 2, 8), np.float32)
    pos = plant(x, 2 * SEQ).reshape(2, SEQ)
    x_before = x.copy()
    want = rope.apply(x.copy(), pos.copy())
    got = rope.apply(x, pos)
    same(got, want)
    same(x, x_before, "x")


# ---- Rope.apply_qk -------------------------------------------------------------------

def _qk_in_place(where, angles):
    def run():
        rope = rope8()
        q = random_array((2, SEQ, 4, 8), np.float32)
        k = random_array((2, SEQ, 2, 8), np.float32, 1)
        pos = plant(q if where == "q" else k, 2 * SEQ).reshape(2, SEQ)
        wq, wk = q.copy(), k.copy()
        rope.apply_qk(wq, wk, pos.copy(), out=(wq, wk), angles=angles)
        rope.apply_qk(q, k, pos, out=(q, k), angles=angles)
        same(q, wq, "q")
        same(k, wk, "k")
    return run


for _where in ("q", "k"):
    for _angles in ("auto", "table", "on_the_fly"):
        case(f"apply_qk/in place/positions in {_where}/{_angles}")(_qk_in_place(_where, _angles))


@case("apply_qk/k into a cache holding the positions")
def _():
    rope = rope8()
    q = random_array((1, SEQ, 4, 8), np.float32)
    k = random_array((1, SEQ, 2, 8), np.float32, 1)
    cache = random_array((1, 2 * SEQ, 2, 8), np.float32, 2)
    pos = plant(cache, SEQ)
    wq, wcache = q.copy(), cache.copy()
    rope.apply_qk(wq, k, pos.copy(), out=(wq, wcache[:, :SEQ]))
    rope.apply_qk(q, k, pos, out=(q, cache[:, :SEQ]))
    same(q, wq, "q")
    same(cache, wcache, "the cache")


# ---- Rope.cos_sin: its outputs are new arrays, so nothing can alias them ------------------

@case("cos_sin/positions viewed from a float buffer")
def _():
    rope = rope8()
    host = random_array((4, SEQ), np.float32)
    pos = plant(host, SEQ)
    want = rope.cos_sin(pos.copy())
    got = rope.cos_sin(pos)
    for g, w in zip(got, want):
        same(g, w)


# ---- prepared calls ----------------------------------------------------------------------

@case("prepare/in place/positions in x")
def _():
    rope = rope8()
    x = random_array((2, SEQ, 2, 8), np.float32)
    prepared = rope.prepare(x, out=x)
    pos = plant(x, 2 * SEQ).reshape(2, SEQ)
    want = x.copy()
    rope.apply(want, pos.copy(), out=want)
    prepared(x, out=x, positions=pos)
    same(x, want)


@case("prepare/into a cache slot holding the positions")
def _():
    rope = rope8()
    x = random_array((1, 2, 2, 8), np.float32)
    cache = random_array((1, 6, 2, 8), np.float32, 1)
    prepared = rope.prepare(x, out=cache[:, 0:2])
    pos = plant(cache, 2, first=32)                   # inside slot 2:4, which this call writes
    want = cache.copy()
    rope.apply(x, pos.copy(), out=want[:, 2:4])
    prepared(x, out=cache[:, 2:4], positions=pos)
    same(cache, want, "the cache")


@case("prepare_qk/in place/positions in k")
def _():
    rope = rope8()
    q = random_array((2, SEQ, 4, 8), np.float32)
    k = random_array((2, SEQ, 2, 8), np.float32, 1)
    prepared = rope.prepare_qk(q, k, out=(q, k))
    pos = plant(k, 2 * SEQ).reshape(2, SEQ)
    wq, wk = q.copy(), k.copy()
    rope.apply_qk(wq, wk, pos.copy(), out=(wq, wk))
    prepared(q, k, out=(q, k), positions=pos)
    same(q, wq, "q")
    same(k, wk, "k")


# ---- pyrope.cache ----------------------------------------------------------------------------

@case("cache.rerotate/positions in k")
def _():
    rope = rope8()
    k = random_array((1, SEQ, 2, 8), np.float32)
    src = plant(k, SEQ)
    dst = plant(k, SEQ, first=2 * SEQ, values=200 + 5 * np.arange(SEQ))
    want = k.copy()
    pyrope.cache.rerotate(rope, want, src.copy(), dst.copy())
    pyrope.cache.rerotate(rope, k, src, dst)
    same(k, want, "k")


@case("cache.convert_keys/in place/positions in k")
def _():
    rope, to = rope8(), Rope(8, layout="split_half", base=400.0)
    k = random_array((1, SEQ, 2, 8), np.float32)
    pos = plant(k, SEQ)
    want = k.copy()
    pyrope.cache.convert_keys(rope, want, pos.copy(), to, out=want)
    pyrope.cache.convert_keys(rope, k, pos, to, out=k)
    same(k, want, "k")


@case("cache.convert_keys/out holding the positions")
def _():
    rope, to = rope8(), Rope(8, layout="split_half", base=400.0)
    k = random_array((1, SEQ, 2, 8), np.float32)
    out = random_array((1, SEQ, 2, 8), np.float32, 1)
    pos = plant(out, SEQ)
    want = pyrope.cache.convert_keys(rope, k, pos.copy(), to)
    pyrope.cache.convert_keys(rope, k, pos, to, out=out)
    same(out, want)


# ---- pyrope.positions.apply_varlen -----------------------------------------------------------

@case("apply_varlen/cu_seqlens in x, in place")
def _():
    rope = rope8()
    x = random_array((SEQ, 2, 8), np.float32)
    cu = plant(x, 4, values=[0, 5, 9, SEQ])
    want = x.copy()
    pyrope.positions.apply_varlen(rope, want, cu.copy(), out=want)
    pyrope.positions.apply_varlen(rope, x, cu, out=x)
    same(x, want)


@case("apply_varlen/offsets in x, in place")
def _():
    rope = rope8()
    x = random_array((SEQ, 2, 8), np.float32)
    offsets = plant(x, 3, first=2, values=[7, 40, 1000])
    cu = np.array([0, 5, 9, SEQ])
    want = x.copy()
    pyrope.positions.apply_varlen(rope, want, cu, offsets.copy(), out=want)
    pyrope.positions.apply_varlen(rope, x, cu, offsets, out=x)
    same(x, want)


# ---- sectioned (multimodal) positions --------------------------------------------------------

def _sections(form, angles):
    def run():
        rope = rope8(mrope_section=(2, 1, 1))
        x = random_array((2, SEQ, 2, 8), np.float32)
        if form == "[3, seq]":
            pos = plant(x, 3 * SEQ, values=100 + np.arange(3 * SEQ) % 17).reshape(3, SEQ)
        elif form == "[3, batch, seq]":
            pos = plant(x, 6 * SEQ, values=100 + np.arange(6 * SEQ) % 23).reshape(3, 2, SEQ)
        else:   # plain positions on a sectioned rope
            pos = plant(x, 2 * SEQ).reshape(2, SEQ)
        want = x.copy()
        rope.apply(want, pos.copy(), out=want, angles=angles)
        rope.apply(x, pos, out=x, angles=angles)
        same(x, want)
    return run


for _form in ("[3, seq]", "[3, batch, seq]", "plain [batch, seq]"):
    for _angles in ("auto", "table", "on_the_fly"):
        case(f"sections/{_form} in x/{_angles}")(_sections(_form, _angles))


# ---- the ONNX op: its output is a new array, so nothing can alias it -----------------------------

@case("onnx/position_ids and caches in the input")
def _():
    from pyrope.onnx_interop import onnx_rotary_embedding
    host = random_array((1, 2, SEQ, 12), np.float32)     # [batch, heads, seq, 8 + 4]
    x = host[..., :8]                                    # the input
    cos, sin = host[0, 0, :, 8:], host[0, 1, :, 8:]      # [max_pos=SEQ, 4] caches beside it
    ids = host.reshape(-1)[:2 * SEQ].view(np.int64).reshape(1, SEQ)
    ids[...] = np.arange(SEQ)[::-1]                      # position_ids inside the input too
    want = onnx_rotary_embedding(x.copy(), cos.copy(), sin.copy(), ids.copy())
    got = onnx_rotary_embedding(x, cos, sin, ids)
    same(got, want)


# ---- PartialRotary: the offset convention writes out through a copy --------------------------------

@case("PartialRotary/offset convention, positions in x, in place")
def _():
    partial = pyrope.positions.PartialRotary(8, 4, convention="offset", layout="split_half", dim_offset=2)
    x = random_array((2, SEQ, 2, 8), np.float32)
    pos = plant(x, 2 * SEQ).reshape(2, SEQ)
    want = x.copy()
    partial.apply(want, pos.copy(), out=want)
    partial.apply(x, pos, out=x)
    same(x, want)


# ---- torch tensors ------------------------------------------------------------------------------

def _torch():
    try:
        import torch
    except ImportError:
        raise Skip("torch is not installed") from None
    return torch


@case("torch/apply in place, positions a view of x's storage")
def _():
    torch = _torch()
    rope = rope8()
    x = torch.from_numpy(random_array((2, SEQ, 2, 8), np.float32))
    pos = x.reshape(-1)[:4 * SEQ].view(torch.int64).reshape(2, SEQ)
    pos.copy_(100 + 3 * torch.arange(2 * SEQ).reshape(2, SEQ))
    want = x.clone()
    rope.apply(want, pos.clone(), out=want)
    rope.apply(x, pos, out=x)
    same(x.numpy(), want.numpy())


@case("torch/apply_qk in place, positions a view of k's storage")
def _():
    torch = _torch()
    rope = rope8()
    q = torch.from_numpy(random_array((2, SEQ, 4, 8), np.float32))
    k = torch.from_numpy(random_array((2, SEQ, 2, 8), np.float32, 1))
    pos = k.reshape(-1)[:4 * SEQ].view(torch.int64).reshape(2, SEQ)
    pos.copy_(100 + 3 * torch.arange(2 * SEQ).reshape(2, SEQ))
    wq, wk = q.clone(), k.clone()
    rope.apply_qk(wq, wk, pos.clone(), out=(wq, wk))
    rope.apply_qk(q, k, pos, out=(q, k))
    same(q.numpy(), wq.numpy(), "q")
    same(k.numpy(), wk.numpy(), "k")


@case("torch/prepared in place, positions a view of x's storage")
def _():
    torch = _torch()
    rope = rope8()
    x = torch.from_numpy(random_array((2, SEQ, 2, 8), np.float32))
    prepared = rope.prepare(x, out=x)
    pos = x.reshape(-1)[:4 * SEQ].view(torch.int64).reshape(2, SEQ)
    pos.copy_(100 + 3 * torch.arange(2 * SEQ).reshape(2, SEQ))
    want = x.clone()
    rope.apply(want, pos.clone(), out=want)
    prepared(x, out=x, positions=pos)
    same(x.numpy(), want.numpy())


# ---- the C entry points -----------------------------------------------------------------------
#
# rope_rotate refuses (ROPE_E_OVERLAP, nothing written) positions, table rows,
# frequencies or tensor descriptors within the span of an output, and reads
# its op, its angles and the pair map once, before writing; the table
# functions refuse inputs within an output and outputs that meet.

def _address(a, ctype="char"):
    return ffi.cast(ctype + " *", a.__array_interface__["data"][0])


def _status_name(status):
    return ffi.string(lib.rope_strerror(status)).decode()


def _expect(status, want):
    if status != want:
        raise AssertionError(f"status {status} ({_status_name(status)}), expected {want} ({_status_name(want)})")


def _address(a, ctype="char"):
    return ffi.cast(ctype + " *", a.__array_interface__["data"][0])


def _status_name(status):
    return ffi.string(lib.rope_strerror(status)).decode()


def _expect(status, want):
    if status != want:
        raise AssertionError(f"status {status} ({_status_name(status)}), expected {want} ({_status_name(want)})")


def _tables(n):
    cos, sin = rope8().cos_sin(np.arange(n))
    return np.ascontiguousarray(cos), np.ascontiguousarray(sin)


def _unchanged(a, before, what):
    if not np.array_equal(bits(a), before):
        raise AssertionError(f"{what} was written by a refused call")


def _rotate_raw(buf, positions, offset, cos=None, sin=None, inv_freq=None, sections=None, n_threads=1,
                place=None):
    """rope_rotate of [1, seq, heads, 8] float32 ``buf`` in place at
    ``positions`` (int64 [1, seq] or sectioned [1, seq, k] with ``sections``
    ``(k, uint8 map)``) or ``offset + s``; rows from table ``cos``/``sin``
    (positions from 0) or on the fly from ``inv_freq``. ``place``: ``(host,
    op_at, angles_at)``, the byte offsets in array ``host`` where op and the
    angles are built (the tensor descriptor stays apart)."""
    _, n_seq, heads, dim = buf.shape
    fields = dict(dtype=lib.ROPE_F32, layout=lib.ROPE_SPLIT_HALF, inverse=0, n_batch=1, n_seq=n_seq,
                  head_dim=dim, rotary_dim=dim, n_threads=n_threads)
    if place is None:
        op, a = ffi.new("rope_op *", fields), ffi.new("rope_angles *")
    else:
        host, op_at, angles_at = place
        base = host.__array_interface__["data"][0]
        op, a = ffi.cast("rope_op *", base + op_at), ffi.cast("rope_angles *", base + angles_at)
        ffi.memmove(op, ffi.new("rope_op *", fields), ffi.sizeof("rope_op"))
        ffi.memmove(a, ffi.new("rope_angles *"), ffi.sizeof("rope_angles"))
    t = ffi.new("rope_tensor *")
    t.x = t.out = _address(buf)
    t.n_heads = heads
    t.x_strides = t.out_strides = tuple(s // 4 for s in buf.strides[:3])
    if positions is None:
        a.source, a.offset = lib.ROPE_POS_OFFSET, offset
    else:
        a.positions = _address(positions, "int64_t")
        a.strides = [s // 8 for s in positions.strides] + [0] * (3 - positions.ndim)
        a.source = lib.ROPE_POS_LIST
        if sections is not None:
            a.source = lib.ROPE_POS_SECTIONS
            a.n_components, pair_map = sections
            a.pair_component = _address(pair_map, "uint8_t")
    if cos is not None:
        a.cos_table, a.sin_table = _address(cos, "float"), _address(sin, "float")
        a.table_start, a.table_rows = 0, cos.shape[0]
    else:
        a.inv_freq = _address(inv_freq, "double")
    a.scale = 1.0
    return lib.rope_rotate(op, t, 1, a)


@case("C rope_rotate/positions inside out")
def _():
    cos, sin = _tables(200)
    for tabled in (True, False):
        x = random_array((1, SEQ, 2, 8), np.float32)
        pos = plant(x, SEQ).reshape(1, SEQ)
        before = bits(x)
        angles = (cos, sin) if tabled else (None, None, np.ascontiguousarray(rope8().inv_freq))
        _expect(_rotate_raw(x, pos, 0, *angles), lib.ROPE_E_OVERLAP)
        _unchanged(x, before, "x")


@case("C rope_rotate/positions in a gap of out")
def _():
    from kernel_api import c_rotate   # tests/support is on the child's path
    cos, sin = _tables(200)
    x = random_array((1, 4, 2, 8), np.float32)
    buf = random_array((1, 4, 4, 8), np.float32, 1)
    pos = plant(buf, 4, first=8).reshape(1, 4)          # token 0's head 1: a gap of out
    before = bits(buf)
    _expect(c_rotate([(x, buf[:, :, ::2])], "split_half", 8, positions=pos, table=(cos, sin, 0)),
            lib.ROPE_E_OVERLAP)
    _unchanged(buf, before, "out")


@case("C rope_rotate/positions inside x of an out-of-place call")
def _():
    from kernel_api import c_rotate
    cos, sin = _tables(200)
    x = random_array((1, SEQ, 2, 8), np.float32)
    pos = plant(x, SEQ).reshape(1, SEQ)
    out, want = np.zeros_like(x), np.zeros_like(x)
    _expect(c_rotate([(x.copy(), want)], "split_half", 8, positions=pos.copy(), table=(cos, sin, 0)),
            lib.ROPE_OK)
    _expect(c_rotate([(x, out)], "split_half", 8, positions=pos, table=(cos, sin, 0)), lib.ROPE_OK)
    same(out, want)


@case("C rope_rotate/table rows or frequencies inside out")
def _():
    half = 4
    for what in ("cos", "sin", "inv_freq"):
        buf = random_array((1, SEQ, 2, 8), np.float32)       # x and out, in place
        flat = buf.reshape(-1)
        cos, sin = _tables(SEQ)
        inv = None
        if what == "inv_freq":
            inv = flat[16:16 + 2 * half].view(np.float64)
            inv[...] = rope8().inv_freq
            cos = sin = None
        else:
            rows = flat[16:16 + SEQ * half].reshape(SEQ, half)
            rows[...] = cos if what == "cos" else sin
            cos, sin = (rows, sin) if what == "cos" else (cos, rows)
        before = bits(buf)
        _expect(_rotate_raw(buf, None, 0, cos, sin, inv), lib.ROPE_E_OVERLAP)
        _unchanged(buf, before, f"out ({what} inside it)")


@case("C rope_rotate/pair map inside out (read once)")
def _():
    cos, sin = _tables(64)
    inv = np.ascontiguousarray(rope8().inv_freq)
    pos = np.ascontiguousarray((7 + np.arange(3 * SEQ) % 50).reshape(3, 1, SEQ).transpose(1, 2, 0))  # [1, seq, 3]
    pair_map = np.array([0, 0, 1, 2], np.uint8)
    for tabled in (True, False):
        angles = (cos, sin, None) if tabled else (None, None, inv)
        buf = random_array((1, SEQ, 2, 8), np.float32)
        inside = buf.reshape(-1).view(np.uint8)[8:12]     # token 0's coordinate 2 holds the map
        inside[...] = pair_map
        want = buf.copy()
        _expect(_rotate_raw(want, pos, 0, *angles, sections=(3, pair_map)), lib.ROPE_OK)
        _expect(_rotate_raw(buf, pos, 0, *angles, sections=(3, inside)), lib.ROPE_OK)
        same(buf, want)


@case("C rope_rotate/tensor descriptors inside out")
def _():
    cos, sin = _tables(64)
    buf = random_array((1, SEQ, 8, 8), np.float32)
    op = ffi.new("rope_op *", dict(dtype=lib.ROPE_F32, layout=lib.ROPE_SPLIT_HALF, inverse=0, n_batch=1,
                                   n_seq=SEQ, head_dim=8, rotary_dim=8, n_threads=1))
    a = ffi.new("rope_angles *", dict(source=lib.ROPE_POS_OFFSET, offset=3, cos_table=_address(cos, "float"),
                                      sin_table=_address(sin, "float"), table_start=0, table_rows=64,
                                      scale=1.0))
    # the tensor descriptor in token 0's head 1 on: rows the call writes
    t = ffi.cast("rope_tensor *", buf.__array_interface__["data"][0] + 8 * 4)
    t.x = t.out = _address(buf)
    t.n_heads = 8
    t.x_strides = t.out_strides = (SEQ * 64, 64, 8)
    before = bits(buf)
    _expect(lib.rope_rotate(op, t, 1, a), lib.ROPE_E_OVERLAP)
    _unchanged(buf, before, "out")


@case("C rope_rotate/op and angles inside out (read once)")
def _():
    cos, sin = _tables(4200)
    for threads in (1, 2):
        for offset in (3, 5, 7):
            # 16 MiB of traffic: split over two threads, in parts that each
            # start after the first part has overwritten the descriptors
            got = random_array((1, 4096, 32, 8), np.float32, offset)
            host = got.reshape(-1).view(np.uint8)
            place = (host, 512, 1024)                          # in token 0's rows
            _place(got, place, offset, cos, sin, threads)
            want = got.copy()   # the bytes the call starts from: the descriptors are values there too
            _expect(_rotate_raw(got, None, offset, cos, sin, n_threads=threads, place=place), lib.ROPE_OK)
            _expect(_rotate_raw(want, None, offset, cos, sin, n_threads=threads), lib.ROPE_OK)
            same(got, want)


def _place(buf, place, offset, cos, sin, threads):
    """Write op and angles into ``place`` as :func:`_rotate_raw` will (so a
    copy of ``buf`` taken now holds the same bytes the call starts from)."""
    host, op_at, angles_at = place
    base = host.__array_interface__["data"][0]
    _, n_seq, heads, dim = buf.shape
    ffi.memmove(ffi.cast("rope_op *", base + op_at),
                ffi.new("rope_op *", dict(dtype=lib.ROPE_F32, layout=lib.ROPE_SPLIT_HALF, inverse=0, n_batch=1,
                                          n_seq=n_seq, head_dim=dim, rotary_dim=dim, n_threads=threads)),
                ffi.sizeof("rope_op"))
    a = ffi.new("rope_angles *", dict(source=lib.ROPE_POS_OFFSET, offset=offset, cos_table=_address(cos, "float"),
                                      sin_table=_address(sin, "float"), table_start=0, table_rows=cos.shape[0],
                                      scale=1.0))
    ffi.memmove(ffi.cast("rope_angles *", base + angles_at), a, ffi.sizeof("rope_angles"))


@case("C rope_cos_sin/inputs inside the outputs, outputs that meet")
def _():
    inv = np.ascontiguousarray(rope8().inv_freq)
    n_pos, n_freq = SEQ, inv.size
    for fn_name in ("rope_cos_sin_f32", "rope_cos_sin_f64", "rope_cos_sin_range_f32"):
        kind, ctype = (np.float64, "double") if fn_name.endswith("f64") else (np.float32, "float")
        ranged = fn_name == "rope_cos_sin_range_f32"
        for inside, host_name in (("positions", "cos"), ("positions", "sin"), ("inv_freq", "cos"),
                                  ("inv_freq", "sin"), ("sin", "cos")):
            if ranged and inside == "positions":
                continue
            cos = random_array((n_pos, n_freq), kind)
            sin = random_array((n_pos, n_freq), kind, 1)
            host = (cos if host_name == "cos" else sin).reshape(-1)
            positions = np.arange(100, 100 + n_pos, dtype=np.int64)
            freqs = inv
            if inside == "positions":
                positions = plant(host, n_pos)
            elif inside == "inv_freq":
                freqs = host[:n_freq * 8 // host.itemsize].view(np.float64)
                freqs[...] = inv
            else:
                sin = cos                                        # the two outputs are one array
            before = bits(cos), bits(sin)
            args = (n_pos, _address(freqs, "double"), n_freq, 1.0, _address(cos, ctype), _address(sin, ctype))
            fn = getattr(lib, fn_name)
            status = fn(100, *args) if ranged else fn(_address(positions, "int64_t"), *args)
            _expect(status, lib.ROPE_E_OVERLAP)
            _unchanged(cos, before[0], f"{fn_name}'s cos ({inside} inside {host_name})")
            _unchanged(sin, before[1], f"{fn_name}'s sin ({inside} inside {host_name})")


@case("C rope_rotate/positions changed by another thread during the call")
def _():
    # A data race the caller must not have; C must still never read outside
    # the table: the last position flips between a row and 2**40 while calls
    # run (cffi releases the GIL), so some are checked good and then read bad.
    n = 8192
    cos, sin = _tables(n)
    pos = np.arange(n, dtype=np.int64).reshape(1, n)
    buf = random_array((1, n, 32, 8), np.float32)
    stop = threading.Event()

    def writer():
        while not stop.is_set():
            pos[0, -1] = 1 << 40
            pos[0, -1] = n - 1

    thread = threading.Thread(target=writer)
    thread.start()
    statuses = set()
    try:
        for _ in range(200):
            statuses.add(_rotate_raw(buf, pos, 0, cos, sin))
    finally:
        stop.set()
        thread.join()
    if not statuses <= {lib.ROPE_OK, lib.ROPE_E_POSITION}:
        raise AssertionError(f"statuses {sorted(statuses)}")


# ---- the child ---------------------------------------------------------------------------------

def main(names):
    for name in names or list(CASES):
        print(f"START {name}", flush=True)
        try:
            CASES[name]()
        except Skip as why:
            print(f"SKIP {name} {why}", flush=True)
        except BaseException as exc:   # report it, run the rest
            print(f"FAIL {name} {type(exc).__name__}: {str(exc)[:300]!r}".replace("\n", " "), flush=True)
        else:
            print(f"OK {name}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
