"""Formats the benchmark rows as a table and checks the issue's targets."""
import numpy as np


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
