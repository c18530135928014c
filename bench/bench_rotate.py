"""Rotation speed against a bandwidth yardstick and the peers, in one run.

Every case (shape x dtype x layout) runs round-robin repetitions: in each
round every contender is called once untimed (its data warm, as after the
projection that produced q/k) and once timed, in an order that rotates from
round to round. Before each contender's pair of calls the process idles for
a few milliseconds, so the previous contender's thread pool (torch's OpenMP
threads, ONNX Runtime's pool and pyrope's own workers all spin for a while
after a call) has gone to sleep and does not steal the 2 cores from the
next. Ratios are taken within a round and their median reported, so load
from other processes hits every contender alike.

Contenders:
- pyrope: ``Rope.apply(x, offset=..., out=x)``, in place, default threads;
- yardstick: ``rope_bandwidth_pass`` over the very same bytes with the same
  thread count (read and write every byte once, C, widest vectors);
- pyrope in the other layout, so layouts are compared within the same rounds;
- numpy: the fastest plain numpy I know: cos/sin tables built once, in-place
  ufuncs with ``out=`` into preallocated scratch (16-bit: via float32);
- torch: eager, the HF ``apply_rotary_pos_emb`` way (``rotate_half`` /
  ``rotate_every_two``, full-width cos/sin in x's dtype), 2 threads;
- onnxruntime: ONNX ``RotaryEmbedding`` (opset 23, CPU), ``session.run``,
  ``intra_op_num_threads`` = pyrope's thread count.
Before timing, every contender's output is checked against
``pyrope.reference`` on sampled vectors, so a fast wrong result cannot win.
"""
import time

import numpy as np
import pytest

import pyrope
from pyrope import Rope, _kernel, reference

import ml_dtypes  # noqa: E402 - the bench extra installs it
try:
    import torch
except ImportError:  # pragma: no cover - optional peer
    torch = None
try:
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
except ImportError:  # pragma: no cover - optional peer
    ort = None

SHAPES = {  # name: (shape [batch, seq, heads, head_dim], first position, rounds)
    "prefill_q": ((1, 2048, 32, 128), 0, 21),
    "prefill_k": ((1, 2048, 8, 128), 0, 41),
    "decode": ((16, 1, 32, 128), 1000, 101),
    "small": ((1, 128, 8, 64), 0, 101),
}
DTYPES = {"float32": np.dtype(np.float32), "float16": np.dtype(np.float16),
          "bfloat16": np.dtype(ml_dtypes.bfloat16)}
UNIT = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
THREADS = pyrope.get_num_threads()
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
    if x_np.dtype == DTYPES["bfloat16"]:
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


def onnx_peer(x_np, cos_rows, sin_rows, positions, layout):
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
    options.intra_op_num_threads = THREADS
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


# ---- the benchmark ------------------------------------------------------------------

def _cases():
    for case in SHAPES:
        for dtype in DTYPES:
            for layout in ("split_half", "interleaved"):
                yield pytest.param(case, dtype, layout, id=f"{case}-{dtype}-{layout}")


@pytest.mark.parametrize("case,dtype_name,layout", list(_cases()))
def test_rotate(benchmark, results, case, dtype_name, layout):
    shape, first, rounds = SHAPES[case]
    b, s, h, d = shape
    dtype = DTYPES[dtype_name]
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal(shape).astype(dtype)
    rope = Rope(d, layout=layout, base=10000.0)
    positions = np.broadcast_to(np.arange(first, first + s, dtype=np.int64), (b, s)).copy()
    # Tables for the peers: pyrope's exact float32 rows.
    n_rows = first + s
    cos_rows, sin_rows = rope.cos_sin(np.arange(n_rows))
    cos_tok, sin_tok = cos_rows[first:first + s][None, :, None, :], sin_rows[first:first + s][None, :, None, :]

    contenders = {}
    x = x0.copy()
    contenders["pyrope"] = (lambda: rope.apply(x, offset=first, out=x), None)
    contenders["yardstick"] = (lambda: _kernel.bandwidth_pass(x, 0, THREADS), None)
    # The other layout, timed in the same rounds: layouts compared like for like.
    other = Rope(d, layout="interleaved" if layout == "split_half" else "split_half", base=10000.0)
    xo = x0.copy()
    contenders["pyrope_other_layout"] = (lambda: other.apply(xo, offset=first, out=xo), None)
    xn = x0.copy()
    contenders["numpy"] = (lambda: numpy_rotation(xn, cos_tok, sin_tok, layout), None)
    if torch is not None:
        torch.set_num_threads(THREADS)
        contenders["torch"] = torch_peer(x0.copy(), cos_tok, sin_tok, layout)
    if ort is not None:
        peer = onnx_peer(x0.copy(), cos_rows, sin_rows, positions, layout)
        if peer is not None:
            contenders["onnxruntime"] = peer

    # Correctness first: one call each from the original input.
    for name, (call, output) in contenders.items():
        if name in ("yardstick", "pyrope_other_layout"):
            continue
        if name in ("pyrope", "numpy"):
            target = x if name == "pyrope" else xn
            target[...] = x0
            call()
            got = target.astype(np.float64)
        else:
            call()
            got = output()
        check_against_reference(name, got, x0, rope, positions, dtype_name, rng, peer=name != "pyrope")

    names = list(contenders)
    times = {n: [] for n in names}
    order = [0]

    def one_round():
        k = order[0] = order[0] + 1
        for n in names[k % len(names):] + names[:k % len(names)]:
            call = contenders[n][0]
            time.sleep(IDLE)
            call()                       # untimed: data warm, threads awake
            t0 = time.perf_counter()
            call()
            times[n].append(time.perf_counter() - t0)

    benchmark.pedantic(one_round, rounds=rounds, iterations=1, warmup_rounds=1)
    t = {n: np.array(v[-rounds:]) for n, v in times.items()}
    med = {n: float(np.median(v)) for n, v in t.items()}
    row = {
        "kind": "rotate", "case": case, "shape": "x".join(map(str, shape)), "dtype": dtype_name,
        "layout": layout, "pyrope": med["pyrope"], "yardstick": med["yardstick"],
        "gbps": 2 * x0.nbytes / med["pyrope"] / 1e9,
        "yard_ratio": float(np.median(t["yardstick"] / t["pyrope"])),
        "other_layout_ratio": float(np.median(t["pyrope_other_layout"] / t["pyrope"])),
        "speedup": {n: float(np.median(t[n] / t["pyrope"])) if n in t else None
                    for n in ("numpy", "torch", "onnxruntime")},
    }
    benchmark.extra_info.update({k: v for k, v in row.items() if k != "speedup"})
    benchmark.extra_info.update({f"speedup_{k}": v for k, v in row["speedup"].items()})
    results.append(row)


def test_call_overhead(benchmark, results):
    """The Python layer of a decode call: apply() minus the bare C call it makes."""
    from pyrope._kernel import ffi, lib
    shape = (16, 1, 32, 128)
    rope = Rope(128, layout="split_half")
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    k = x[:, :, :8].copy()
    rope.apply(x, offset=1000, out=x)
    w, tables = rope._tables.window, rope._tables
    px = ffi.from_buffer(x)

    def c_call():
        lib.rope_rotate(0, 1, 0, px, px, 16, 1, 32, 128, 128, 4096, 4096, 128, 4096, 4096, 128,
                        ffi.NULL, 0, 0, 1000, w[4], w[5], w[0], w[1] - w[0], tables.inv_freq_ptr, 1.0,
                        _kernel.NUM_THREADS)

    calls = {"apply": lambda: rope.apply(x, offset=1000, out=x), "c_call": c_call,
             "apply_qk": lambda: rope.apply_qk(x, k, offset=1000, out=(x, k))}
    times = {n: [] for n in calls}

    def one_round():
        for n, f in calls.items():
            t0 = time.perf_counter()
            for _ in range(20):
                f()
            times[n].append((time.perf_counter() - t0) / 20)

    benchmark.pedantic(one_round, rounds=300, iterations=1, warmup_rounds=5)
    med = {n: float(np.median(v)) for n, v in times.items()}
    over = float(np.median(np.array(times["apply"]) - np.array(times["c_call"])))
    results.append({"kind": "overhead", "shape": "16x1x32x128", "dtype": "float32",
                    "apply": med["apply"], "c_call": med["c_call"], "overhead": over,
                    "apply_qk": med["apply_qk"]})
    benchmark.extra_info.update(med)
