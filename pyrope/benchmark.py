"""Rotation speed against the bandwidth yardstick and the peers, in one run.

The engine behind ``bench/bench_rotate.py`` (pytest-benchmark) and
``pyrope bench``. A :class:`Case` is one shape x dtype x layout: every
contender is first checked against ``pyrope.reference`` on sampled vectors
(a fast wrong result cannot win), then timed in round-robin rounds: in each
round every contender idles a moment (so the previous contender's thread
pool falls asleep), is called once untimed (data warm, threads awake) and
once timed, in an order that rotates from round to round. Ratios are formed
inside a round and their medians reported, so load from other processes on
a shared machine hits every contender of that round alike.

Contenders:
- pyrope: ``Rope.apply(x, offset=..., out=x)``, in place, default threads;
- yardstick: ``rope_bandwidth_pass`` over the very same bytes with the same
  thread count (read and write every byte once, C, widest vectors);
- pyrope in the other layout, so layouts are compared within the same rounds;
- numpy: the fastest plain numpy we know: cos/sin built once, in-place
  ufuncs with ``out=`` (16-bit dtypes through float32);
- torch (if installed): eager, the HF ``apply_rotary_pos_emb`` way;
- onnxruntime (if installed): ONNX ``RotaryEmbedding`` (opset 23, CPU).
"""
import time

import numpy as np

from . import _kernel, reference
from ._kernel import BFLOAT16
from .rope import Rope

try:
    import torch
except ImportError:  # optional peer
    torch = None
try:
    import onnxruntime as ort
    from onnx import TensorProto, helper
except ImportError:  # optional peer
    ort = None

SHAPES = {  # name: (shape [batch, seq, heads, head_dim], first position, rounds)
    "prefill_q": ((1, 2048, 32, 128), 0, 21),
    "prefill_k": ((1, 2048, 8, 128), 0, 41),
    "decode": ((16, 1, 32, 128), 1000, 101),
    "small": ((1, 128, 8, 64), 0, 101),
}
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16)}
if BFLOAT16 is not None:
    DTYPES["bfloat16"] = BFLOAT16
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
IDLE = 0.002  # seconds before each contender's calls: other pools fall asleep


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

class Case:
    """One shape x dtype x layout: contenders checked, then timed round-robin."""

    def __init__(self, case, dtype_name, layout, *, threads=None, peers=True, seed=7):
        shape, first, self.default_rounds = SHAPES[case]
        self.case, self.dtype_name, self.layout, self.shape = case, dtype_name, layout, shape
        threads = threads or _kernel.NUM_THREADS
        b, s, h, d = shape
        dtype = DTYPES[dtype_name]
        self.rng = np.random.default_rng(seed)
        x0 = self.rng.standard_normal(shape).astype(dtype)
        rope = Rope(d, layout=layout, base=10000.0)
        positions = np.broadcast_to(np.arange(first, first + s, dtype=np.int64), (b, s)).copy()
        cos_rows, sin_rows = rope.cos_sin(np.arange(first + s))   # the peers get pyrope's exact rows
        cos_tok = cos_rows[first:first + s][None, :, None, :]
        sin_tok = sin_rows[first:first + s][None, :, None, :]
        c = {}
        x = x0.copy()
        c["pyrope"] = (lambda: rope.apply(x, offset=first, out=x), lambda: x)
        c["yardstick"] = (lambda: _kernel.bandwidth_pass(x, 0, threads), None)
        other = Rope(d, layout="interleaved" if layout == "split_half" else "split_half", base=10000.0)
        xo = x0.copy()
        c["pyrope_other_layout"] = (lambda: other.apply(xo, offset=first, out=xo), None)
        xn = x0.copy()
        c["numpy"] = (lambda: numpy_rotation(xn, cos_tok, sin_tok, layout), lambda: xn)
        if peers and torch is not None:
            torch.set_num_threads(threads)
            c["torch"] = torch_peer(x0.copy(), cos_tok, sin_tok, layout)
        if peers and ort is not None:
            peer = onnx_peer(x0.copy(), cos_rows, sin_rows, positions, layout, threads)
            if peer is not None:
                c["onnxruntime"] = peer
        self.contenders, self.x0, self.rope, self.positions = c, x0, rope, positions
        self.inputs = {"pyrope": x, "numpy": xn}
        self.times = {n: [] for n in c}
        self._round = 0

    def check(self):
        """Every contender's output against the reference, from the original input."""
        for name, (call, output) in self.contenders.items():
            if output is None:
                continue
            if name in self.inputs:
                self.inputs[name][...] = self.x0
            call()
            got = np.asarray(output(), dtype=np.float64)
            check_against_reference(name, got, self.x0, self.rope, self.positions, self.dtype_name,
                                    self.rng, peer=name != "pyrope")

    def one_round(self):
        """Time every contender once, in a rotated order."""
        names = list(self.contenders)
        self._round += 1
        k = self._round % len(names)
        for n in names[k:] + names[:k]:
            call = self.contenders[n][0]
            time.sleep(IDLE)
            call()                       # untimed: data warm, threads awake
            t0 = time.perf_counter()
            call()
            self.times[n].append(time.perf_counter() - t0)

    def row(self):
        """Medians and in-round ratios of the rounds run so far."""
        n = min(len(v) for v in self.times.values())
        t = {name: np.array(v[-n:]) for name, v in self.times.items()}
        med = {name: float(np.median(v)) for name, v in t.items()}
        return {
            "kind": "rotate", "case": self.case, "shape": "x".join(map(str, self.shape)),
            "dtype": self.dtype_name, "layout": self.layout, "pyrope": med["pyrope"],
            "yardstick": med["yardstick"], "gbps": 2 * self.x0.nbytes / med["pyrope"] / 1e9,
            "yard_ratio": float(np.median(t["yardstick"] / t["pyrope"])),
            "other_layout_ratio": float(np.median(t["pyrope_other_layout"] / t["pyrope"])),
            "speedup": {p: float(np.median(t[p] / t["pyrope"])) if p in t else None
                        for p in ("numpy", "torch", "onnxruntime")},
        }


def run(cases, dtypes, layouts, *, rounds=None, peers=True, progress=None):
    """Check and time every combination; returns the rows for :func:`format_summary`."""
    rows = []
    combos = [(c, d, l) for c in cases for d in dtypes for l in layouts]
    for i, (c, d, l) in enumerate(combos):
        case = Case(c, d, l, peers=peers)
        case.check()
        case.one_round()  # warm-up round, not counted
        for key in case.times:
            case.times[key].clear()
        for _ in range(rounds or case.default_rounds):
            case.one_round()
        rows.append(case.row())
        if progress is not None:
            progress(i + 1, len(combos), f"{c} {d} {l}")
    return rows


# ---- the table --------------------------------------------------------------------------

def _speedup(row, peer):
    v = row["speedup"].get(peer)
    return "n/a" if v is None else f"{v:.1f}x"


def format_summary(rows):
    """The summary table (markdown) followed by the target checks."""
    out = ["| case | dtype | layout | pyrope | GB/s | yardstick | pyrope/yardstick | other layout / this | vs numpy | vs torch | vs ORT |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r.get("kind") != "rotate":
            continue
        out.append(f"| {r['case']} {r['shape']} | {r['dtype']} | {r['layout']} | {_t(r['pyrope'])} | "
                   f"{r['gbps']:.1f} | {_t(r['yardstick'])} | {r['yard_ratio']:.2f} | {r['other_layout_ratio']:.2f} | "
                   f"{_speedup(r, 'numpy')} | {_speedup(r, 'torch')} | {_speedup(r, 'onnxruntime')} |")
    for r in rows:
        if r.get("kind") == "overhead":
            out.append("")
            out.append(f"Python layer of a decode call {r['shape']} {r['dtype']}: apply {_t(r['apply'])}, "
                       f"the same C call alone {_t(r['c_call'])}: overhead {_t(r['overhead'])} "
                       f"(apply_qk in place: {_t(r['apply_qk'])})")
    out.append("")
    out.extend(check_targets(rows))
    return "\n".join(out)


def _t(seconds):
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def check_targets(rows):
    """One line per target of the issue: holds or not, with the worst case."""
    rot = [r for r in rows if r.get("kind") == "rotate"]
    lines = []

    def report(name, values, ok):
        if not values:
            lines.append(f"- {name}: not measured")
            return
        worst = min(values, key=lambda v: v[0])
        lines.append(f"- {name}: {'HOLDS' if ok(worst[0]) else 'MISSED'} (worst {worst[0]:.2f} at {worst[1]})")

    prefill = [r for r in rot if r["case"].startswith("prefill")]
    report("prefill in place >= 0.85 of the yardstick",
           [(r["yard_ratio"], _name(r)) for r in prefill], lambda v: v >= 0.85)
    report("prefill >= 1.8x faster than ONNX Runtime",
           [(r["speedup"]["onnxruntime"], _name(r)) for r in prefill
            if r["speedup"].get("onnxruntime") is not None], lambda v: v >= 1.8)
    f32 = [r for r in prefill if r["dtype"] == "float32"]
    report("prefill float32 >= 20x faster than torch eager",
           [(r["speedup"]["torch"], _name(r)) for r in f32 if r["speedup"].get("torch") is not None],
           lambda v: v >= 20)
    report("prefill float32 >= 10x faster than numpy",
           [(r["speedup"]["numpy"], _name(r)) for r in f32 if r["speedup"].get("numpy") is not None],
           lambda v: v >= 10)
    dec = [r for r in rot if r["case"] == "decode" and r["dtype"] == "float32"]
    report("decode float32 >= 2x faster per call than ONNX Runtime",
           [(r["speedup"]["onnxruntime"], _name(r)) for r in dec
            if r["speedup"].get("onnxruntime") is not None], lambda v: v >= 2)
    report("interleaved within 10% of split-half (split time / interleaved time, same rounds, >= 0.9)",
           [(r["other_layout_ratio"], _name(r)) for r in rot if r["layout"] == "interleaved"],
           lambda v: v >= 0.9)
    return lines


def _name(r):
    return f"{r['case']} {r['dtype']} {r['layout']}"


def median(values):
    """Median of a list (None if empty)."""
    return float(np.median(values)) if values else None
