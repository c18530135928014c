"""Rotation speed against the bandwidth yardstick and the peers, in one run.

The engine behind ``pyrope bench`` and ``bench/bench_rotate.py``
(pytest-benchmark); ``pyrope._bench.report`` turns its rows into tables,
target checks and JSON, ``pyrope._bench.plot`` into the picture.

A :class:`Case` is one shape x dtype. Its contenders are pyrope under each
instruction set asked for (``pyrope.forced_isa``) in both layouts (and, for
the decode case, also writing into a KV-cache slice with ``out=``), the
yardstick on one and on all threads, and the peers in both layouts. Every
contender is first checked against ``pyrope.reference`` on sampled vectors
(a fast wrong result cannot win), then timed in rounds. In a round every
contender, in an order that rotates from round to round, idles a moment (so
the previous contender's thread pool falls asleep), is warmed with ~10 ms
of calls (this VM's second core and caches come back slowly after an idle
gap), then timed over a block of calls. Ratios are formed inside a round and
their medians reported, so load from other processes hits the contenders of
one round alike.

Contenders:
- pyrope: ``Rope.apply(x, offset=..., out=x)``, in place, default threads;
  for the decode case also ``out=cache[:, pos:pos + 1]``;
- yardstick: ``rope_bandwidth_pass`` (read and write every byte once, C,
  widest vectors of the best instruction set) over as many bytes, on one
  thread and on the default threads; each round keeps the faster;
- numpy: the fastest plain numpy we know: cos/sin built once, in-place
  ufuncs with ``out=`` (16-bit dtypes through float32);
- torch (if installed): eager, the HF ``apply_rotary_pos_emb`` way;
- onnxruntime (if installed): ONNX ``RotaryEmbedding`` (opset 23, CPU),
  ``session.run`` per call.
torch and onnxruntime, like the yardstick, run on one thread and on the
default threads, and each round keeps the faster: their thread pools can
lose a time slice to another process on a small shared machine (torch's
two-thread calls then take milliseconds), which says nothing of the code.
"""
import contextlib
import functools
from collections import namedtuple

import numpy as np

from ._bench import method as timing
from ._engine import dtypes as _dtypes, isa as _isa, launcher as _launcher
from . import reference
from ._bench.method import yardstick_isa
from .rope import Rope

# the optional peers, imported by _load_peers() when a run times them (torch
# alone takes seconds to import)
torch = ort = TensorProto = helper = None
_PEERS_LOADED = False


def _load_peers():
    global torch, ort, TensorProto, helper, _PEERS_LOADED
    if _PEERS_LOADED:
        return
    try:
        import torch
    except ImportError:
        torch = None
    try:
        import onnxruntime as ort
        from onnx import TensorProto, helper
    except ImportError:
        ort = None
    _PEERS_LOADED = True

SHAPES = {  # name: (shape [batch, seq, heads, head_dim], first position, rounds)
    "prefill_q_8192": ((1, 8192, 32, 128), 0, 9),   # 128 MiB float32: memory-resident
    "prefill_q": ((1, 2048, 32, 128), 0, 15),
    "prefill_k": ((1, 2048, 8, 128), 0, 31),
    "decode": ((16, 1, 32, 128), 1000, 41),
    "decode_64": ((64, 1, 32, 128), 1000, 41),
    "small": ((1, 128, 8, 64), 0, 41),
}
# cases also timed writing into a KV-cache slice: name -> cache shape [batch, max_seq, heads, head_dim]
CACHE_OUT = {"decode": (16, 4096, 32, 128)}
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16)}
_BFLOAT16 = _dtypes.bfloat16()   # a benchmark tool: ml_dtypes is imported with it, if installed
if _BFLOAT16 is not None:
    DTYPES["bfloat16"] = _BFLOAT16
LAYOUTS = ("split_half", "interleaved")
PEERS = ("numpy", "torch", "onnxruntime")
IN_PLACE, OUT_CACHE = "in place", "out=cache"
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

# One contender: kind "pyrope", "yardstick" or a peer's name; variant: pyrope's
# instruction set, or the thread count of the yardstick and the threaded peers.
Key = namedtuple("Key", "kind variant layout call")


def default_isas():
    """The instruction sets timed by default: every supported one but scalar
    (scalar where it is the only one)."""
    return [name for name in _isa.supported_isas() if name != "scalar"] or ["scalar"]


def placed(x0, phase=16):
    """A copy of x0 starting ``phase`` bytes past a 4 KiB boundary (where numpy
    puts large arrays): the kernels' speed depends on alignment, so every
    pyrope contender and the yardstick get the same."""
    raw = np.empty(x0.nbytes + 4096, dtype=np.uint8)
    skip = (phase - raw.ctypes.data) % 4096
    x = raw[skip:skip + x0.nbytes].view(x0.dtype).reshape(x0.shape)
    x[...] = x0
    return x


# ---- peers ----------------------------------------------------------------------

def numpy_rotation(x, cos, sin, layout):
    """In-place rotation of x with numpy; cos/sin float32 broadcastable to x's pair halves."""
    work = x if x.dtype == np.float32 else x.astype(np.float32)
    half = cos.shape[-1]
    if layout == "split_half":
        x0, x1 = work[..., :half], work[..., half:2 * half]
    else:
        x0, x1 = work[..., 0:2 * half:2], work[..., 1:2 * half:2]
    a = x0 * sin                     # x0*s (scratch)
    b = x1 * sin                     # x1*s (scratch)
    np.multiply(x0, cos, out=x0)
    np.subtract(x0, b, out=x0)       # x0*c - x1*s
    np.multiply(x1, cos, out=x1)
    np.add(x1, a, out=x1)            # x1*c + x0*s
    if work is not x:
        x[...] = work
    return x


def torch_peer(x_np, cos, sin, layout):
    """HF-style eager torch: returns (call, output getter)."""
    if x_np.dtype.name == "bfloat16":
        xt = torch.from_numpy(x_np.view(np.uint16)).view(torch.bfloat16)
        tdtype = torch.bfloat16
    else:
        xt = torch.from_numpy(x_np)
        tdtype = xt.dtype
    if layout == "split_half":
        c = torch.from_numpy(np.concatenate([cos, cos], -1)).to(tdtype)
        s = torch.from_numpy(np.concatenate([sin, sin], -1)).to(tdtype)

        def rot(q):
            q1, q2 = q[..., : q.shape[-1] // 2], q[..., q.shape[-1] // 2:]
            return torch.cat((-q2, q1), dim=-1)
    else:
        c = torch.from_numpy(np.repeat(cos, 2, -1)).to(tdtype)
        s = torch.from_numpy(np.repeat(sin, 2, -1)).to(tdtype)

        def rot(q):
            q1, q2 = q[..., ::2], q[..., 1::2]
            return torch.stack((-q2, q1), dim=-1).flatten(-2)
    box = {}

    def call():
        box["y"] = (xt * c) + (rot(xt) * s)

    def output():
        y = box["y"]
        if y.dtype == torch.bfloat16:
            return y.float().numpy()
        return y.numpy()
    return call, output


def onnx_peer(x_np, cos_rows, sin_rows, positions, layout, threads):
    """ONNX Runtime RotaryEmbedding session: returns (call, output getter) or None."""
    b, s, h, d = x_np.shape
    ttype = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16,
             "bfloat16": TensorProto.BFLOAT16}[x_np.dtype.name]
    store = x_np.dtype
    inits = [helper.make_tensor(name, ttype, rows.shape, rows.astype(store).view(
        np.uint16 if store.itemsize == 2 else np.uint32).tobytes(), raw=True)
        for name, rows in (("cos_cache", cos_rows), ("sin_cache", sin_rows))]
    node = helper.make_node("RotaryEmbedding", ["X", "cos_cache", "sin_cache", "position_ids"], ["Y"],
                            interleaved=int(layout == "interleaved"), num_heads=h)
    graph = helper.make_graph(
        [node], "rope",
        [helper.make_tensor_value_info("X", ttype, [b, s, h * d]),
         helper.make_tensor_value_info("position_ids", TensorProto.INT64, [b, s])],
        [helper.make_tensor_value_info("Y", ttype, [b, s, h * d])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    try:
        sess = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        feeds = {"X": x_np.reshape(b, s, h * d), "position_ids": positions}
        sess.run(None, feeds)
    except Exception:  # this dtype is not implemented by ORT's CPU provider
        return None
    box = {}

    def call():
        box["y"] = sess.run(None, feeds)[0]

    def output():
        return np.asarray(box["y"]).reshape(b, s, h, d)
    return call, output


def peers_available():
    """{peer: None if it runs, else why it is skipped} (imports the peers)."""
    _load_peers()
    return {"numpy": None,
            "torch": None if torch is not None else "torch is not installed",
            "onnxruntime": None if ort is not None else "onnxruntime (or onnx) is not installed"}


# ---- checks ---------------------------------------------------------------------

def check_against_reference(name, got, x0, rope, positions, dtype_name, rng, peer):
    """Sampled vectors of ``got`` against the exact reference rotation of ``x0``."""
    b, s, h, d = x0.shape
    bound_unit = (8 * UNIT[dtype_name] + 8 * 2.0**-23) if peer else (UNIT[dtype_name] + 4 * 2.0**-23)
    inv_freq = [float(w) for w in rope.inv_freq]
    for _ in range(12):
        i, j, k = (int(rng.integers(0, n)) for n in (b, s, h))
        vec = [float(v) for v in x0[i, j, k].astype(np.float64)]
        want = np.array(reference.rotate_with_inv_freq(vec, int(positions[i, j]), inv_freq,
                                                        layout=rope.layout))
        mag = np.abs(np.array(vec))
        half = d // 2
        pair = (mag[:half] + mag[half:]) if rope.layout == "split_half" else (mag[0::2] + mag[1::2])
        m = np.concatenate([pair, pair]) if rope.layout == "split_half" else np.repeat(pair, 2)
        err = np.abs(np.asarray(got[i, j, k], dtype=np.float64) - want)
        assert np.all(err <= 2 * bound_unit * m + 2.0**-24), (
            f"{name} is wrong at {(i, j, k)}: error {err.max():.3g}")


# ---- one case -----------------------------------------------------------------------

class _Contender:
    """A call to time, how to read its output (None: not checked), what it
    runs under (a context manager factory: an instruction set, torch's
    threads), the data it overwrites (refilled before the check) and the
    calls per timed block."""

    __slots__ = ("call", "output", "context", "data", "reps")

    def __init__(self, call, output=None, context=contextlib.nullcontext, data=None):
        self.call, self.output, self.context, self.data, self.reps = call, output, context, data, 1


class Case(timing.Rounds):
    """One shape x dtype: every contender checked, then timed round-robin."""

    def __init__(self, case, dtype_name, *, layouts=LAYOUTS, isas=None, threads=None, peers=True, seed=7):
        shape, first, self.default_rounds = SHAPES[case]
        self.case, self.dtype_name, self.shape, self.layouts = case, dtype_name, shape, tuple(layouts)
        self.isas = list(default_isas() if isas is None else isas)
        self.threads = threads or _isa.NUM_THREADS
        b, s, h, d = shape
        self.rng = np.random.default_rng(seed)
        self.x0 = self.rng.standard_normal(shape).astype(DTYPES[dtype_name])
        self.positions = np.broadcast_to(np.arange(first, first + s, dtype=np.int64), (b, s)).copy()
        self.ropes = {lay: Rope(d, layout=lay, base=10000.0) for lay in self.layouts}
        self.contenders = {}
        self._add_pyrope(first)
        self._add_yardstick()
        self._add_peers(first, self.peer_notes(peers))
        self.times = {k: [] for k in self.contenders}
        self._round = 0

    def _add_pyrope(self, first):
        """pyrope under each ISA, per layout, in place (and into a cache slice)."""
        c, x0, d = self.contenders, self.x0, self.shape[-1]
        for layout in self.layouts:
            for isa in self.isas:
                rope = Rope(d, layout=layout, base=10000.0)  # its own rows, like a second model
                x = placed(x0)
                under = functools.partial(_isa.forced_isa, isa)
                c[Key("pyrope", isa, layout, IN_PLACE)] = _Contender(
                    lambda r=rope, x=x: r.apply(x, offset=first, out=x), lambda x=x: x, under, x)
                if self.case in CACHE_OUT:
                    xc = placed(x0)
                    # untouched pages of np.empty cost nothing: only the slice written is ever mapped
                    cache = np.empty(CACHE_OUT[self.case], dtype=x0.dtype)
                    c[Key("pyrope", isa, layout, OUT_CACHE)] = _Contender(
                        lambda r=rope, x=xc, k=cache: r.apply(x, offset=first, out=k[:, first:first + 1]),
                        lambda k=cache: k[:, first:first + 1], under)

    def _thread_counts(self):
        # the yardstick and the threaded peers run on both; each round keeps the faster
        return sorted({1, self.threads})

    def _add_yardstick(self):
        y = placed(self.x0)
        for n in self._thread_counts():
            self.contenders[Key("yardstick", n, None, IN_PLACE)] = _Contender(
                lambda n=n: _launcher.bandwidth_pass(y, 0, n), None,
                functools.partial(_isa.forced_isa, yardstick_isa()))

    def _add_peers(self, first, notes):
        """numpy, torch and ONNX Runtime per layout, those ``notes`` do not skip."""
        if notes["numpy"] is not None:
            return
        c, x0, s = self.contenders, self.x0, self.shape[1]
        cos_rows, sin_rows = self.ropes[self.layouts[0]].cos_sin(np.arange(first + s))
        cos_tok = cos_rows[first:first + s][None, :, None, :]   # the peers get pyrope's exact rows
        sin_tok = sin_rows[first:first + s][None, :, None, :]
        for layout in self.layouts:
            xn = x0.copy()
            c[Key("numpy", 1, layout, IN_PLACE)] = _Contender(
                lambda x=xn, lay=layout: numpy_rotation(x, cos_tok, sin_tok, lay), lambda x=xn: x, data=xn)
            for n in self._thread_counts():
                if notes["torch"] is None:
                    call, output = torch_peer(x0.copy(), cos_tok, sin_tok, layout)
                    c[Key("torch", n, layout, IN_PLACE)] = _Contender(
                        call, output, functools.partial(_torch_threads, n))
                if notes["onnxruntime"] is None:
                    peer = onnx_peer(x0.copy(), cos_rows, sin_rows, self.positions, layout, n)
                    if peer is not None:
                        c[Key("onnxruntime", n, layout, IN_PLACE)] = _Contender(*peer)

    @staticmethod
    def peer_notes(peers=True):
        """{peer: None if timed, else why not}."""
        if not peers:
            return {"numpy": "peers off", "torch": "peers off", "onnxruntime": "peers off"}
        return peers_available()

    def check(self):
        """Every contender's output against the reference, from the original input."""
        for key, con in self.contenders.items():
            if con.output is None:
                continue
            if con.data is not None:
                con.data[...] = self.x0
            with con.context():
                con.call()
            got = np.asarray(con.output(), dtype=np.float64)
            check_against_reference(_label(key), got, self.x0, self.ropes[key.layout], self.positions,
                                    self.dtype_name, self.rng, peer=key.kind != "pyrope")

    def rows(self):
        """One row per pyrope contender and per peer and layout, from the
        rounds run so far (``pyrope._bench.report`` describes the fields).
        The yardstick and a threaded peer count, in each round, with their
        faster thread count."""
        n = min(len(v) for v in self.times.values())
        t = {key: np.array(v[-n:]) for key, v in self.times.items()}
        best, by_threads = {}, {}
        for key, times in t.items():
            if key.kind != "pyrope":   # merge the thread variants
                merged = key._replace(variant=None)
                best[merged] = np.minimum(best[merged], times) if merged in best else times
                by_threads.setdefault(merged, {})[str(key.variant)] = float(np.median(times))
            else:
                best[key] = times
        yard_key = Key("yardstick", None, None, IN_PLACE)
        yard = best[yard_key]
        common = {"case": self.case, "shape": "x".join(map(str, self.shape)), "dtype": self.dtype_name,
                  "rounds": n, "threads": self.threads, "bytes": int(self.x0.nbytes),
                  "yardstick": float(np.median(yard)), "yardstick_by_threads": by_threads[yard_key]}
        out = []
        for key, times in best.items():
            if key.kind == "yardstick":
                continue
            med = float(np.median(times))
            r = dict(common, kind="rotate" if key.kind == "pyrope" else "peer", contender=key.kind,
                     isa=key.variant if key.kind == "pyrope" else None, layout=key.layout, call=key.call,
                     time=med, gbps=2 * self.x0.nbytes / med / 1e9)
            r["yard_ratio"], r["yard_iqr"] = _ratio(yard, times)
            if key.kind == "pyrope":
                other = "interleaved" if key.layout == "split_half" else "split_half"
                r["vs_avx2"] = (None if key.variant == "avx2" else
                                _ratio(best.get(key._replace(variant="avx2")), times)[0])
                r["other_layout_ratio"] = _ratio(best.get(key._replace(layout=other)), times)[0]
                r["in_place_ratio"] = (_ratio(best.get(key._replace(call=IN_PLACE)), times)[0]
                                       if key.call == OUT_CACHE else None)
                r["speedup"] = {p: _ratio(best.get(Key(p, None, key.layout, IN_PLACE)), times)[0] for p in PEERS}
            else:
                r["time_by_threads"] = by_threads[key]
            out.append(r)
        return out


_torch_threads = timing.torch_threads


def _ratio(num, den):
    """Median and interquartile range of the per-round ratios num/den (None without num)."""
    if num is None:
        return None, None
    q = num / den
    q1, med, q3 = np.percentile(q, [25, 50, 75])
    return float(med), [float(q1), float(q3)]


def _label(key):
    if key.kind == "pyrope":
        return f"pyrope[{key.variant}, {key.layout}, {key.call}]"
    return f"{key.kind}[{key.layout}, {key.variant} threads]"


def run(cases, dtypes, *, layouts=LAYOUTS, isas=None, rounds=None, peers=True, progress=None):
    """Check and time every case x dtype; returns the rows (``pyrope._bench.report``)."""
    rows = []
    combos = [(c, d) for c in cases for d in dtypes]
    for i, (c, d) in enumerate(combos):
        case = Case(c, d, layouts=layouts, isas=isas, peers=peers)
        case.check()
        case.measure(rounds)
        rows.extend(case.rows())
        del case   # the 128 MiB case's arrays go before the next are made
        if progress is not None:
            progress(i + 1, len(combos), f"{c} {d}")
    return rows


def format_summary(rows, machine=None):
    """The markdown tables and the target checks (``pyrope._bench.report.markdown``)."""
    from ._bench.report import markdown
    return markdown(rows, machine)
