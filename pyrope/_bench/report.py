"""What a benchmark run reports: the machine, markdown tables, the issue's
targets, and JSON.

Rows come from :meth:`pyrope.benchmark.Case.rows`. A pyrope row
(``kind == "rotate"``) holds: case, shape, dtype, layout, call (``"in
place"`` or ``"out=cache"``), isa, time (median seconds per call), gbps,
yardstick (median seconds of the better of the 1- and N-thread passes over
as many bytes), yard_ratio (median over rounds of yardstick time / this
time) and yard_iqr, vs_avx2 (avx2's time / this time, same layout and call),
other_layout_ratio (the other layout's time / this time), in_place_ratio
(for ``out=cache``: the in-place time / this time) and speedup (each peer's
time / this time, same layout). A peer row (``kind == "peer"``) has time,
gbps and yard_ratio. Every ratio is a median of per-round ratios.
"""
import datetime
import json
from importlib import metadata
import os
import platform

from . import method as _bench_method

FLAGS = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16", "avx512_fp16")
ISA_FAMILY = "avx512"   # the target "2x AVX2" is for the AVX-512 kernels


# ---- the machine ---------------------------------------------------------------------

def cpu_info(text=None):
    """The CPU as /proc/cpuinfo tells it: vendor, family, model, model name,
    the vector flags that matter here (x86) or the Features line (aarch64)."""
    if text is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())   # the first processor's
    info = {"arch": platform.machine(), "vendor": fields.get("vendor_id") or fields.get("CPU implementer"),
            "family": fields.get("cpu family") or fields.get("CPU architecture"),
            "model": fields.get("model") or fields.get("CPU part"),
            "model_name": fields.get("model name") or fields.get("Model name") or platform.processor() or None}
    if "flags" in fields:
        present = set(fields["flags"].split())
        info["flags"] = [f for f in FLAGS if f in present]
        info["flags_missing"] = [f for f in FLAGS if f not in present]
    elif "Features" in fields:
        info["features"] = fields["Features"].split()
    return info


def cpu_line(cpu):
    """One line naming the CPU: model name, vendor, family, model, flags."""
    head = f"{cpu.get('model_name') or 'unknown CPU'} ({cpu.get('vendor') or '?'} family {cpu.get('family')} " \
           f"model {cpu.get('model')}, {cpu.get('arch')})"
    if "flags" in cpu:
        missing = f"; not: {' '.join(cpu['flags_missing'])}" if cpu.get("flags_missing") else ""
        return f"{head}; flags: {' '.join(cpu['flags'])}{missing}"
    if "features" in cpu:
        return f"{head}; Features: {' '.join(cpu['features'])}"
    return head


def machine_info():
    """Everything a table needs to say where it was measured (JSON-serialisable)."""
    from .._engine import isa as _isa
    versions = {"python": platform.python_version()}
    for name in ("numpy", "torch", "onnxruntime", "ml_dtypes"):
        try:   # from the installed metadata: importing torch alone takes seconds
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"cpu": cpu_info(), "cpus": os.cpu_count(), "threads": _isa.get_num_threads(),
            "extension": extension_info(),
            "isa": _isa.get_isa(), "supported_isas": _isa.supported_isas(),
            "yardstick_isa": _bench_method.yardstick_isa(),
            "kernel": platform.release(), "versions": versions,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "load_average": _loadavg()}


def extension_info():
    """Which C build is measured: a digest of the loaded extension, and whether
    it sits beside the Python package imported (an editable install of another
    checkout can supply the extension when this one has none built)."""
    import hashlib
    from .. import _pyrope_cffi
    path = os.path.abspath(_pyrope_cffi.__file__)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()[:16]
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))   # pyrope/, above _bench/
    beside = os.path.dirname(path) == package
    return {"sha256": digest, "beside_package": beside}


def _loadavg():
    try:
        return [round(v, 2) for v in os.getloadavg()]
    except OSError:  # pragma: no cover - not on this platform
        return None


def machine_lines(machine):
    """The header printed above the tables."""
    v = machine.get("versions", {})
    peers = ", ".join(f"{k} {v[k]}" for k in ("numpy", "torch", "onnxruntime") if v.get(k))
    lines = [f"CPU: {cpu_line(machine['cpu'])}; {machine.get('cpus')} CPUs",
             f"pyrope ISA: {machine['isa']} (pyrope.get_isa(); supported: {', '.join(machine['supported_isas'])}); "
             f"yardstick pass under {machine.get('yardstick_isa', '?')}; "
             f"{machine.get('threads')} threads; Python {v.get('python')}, {peers}",
             f"Run {machine.get('date')}; load average (1, 5, 15 min) at start {load_text(machine.get('load_average'))}"
             + (f", at end {load_text(machine['load_average_end'])}" if machine.get("load_average_end") else "")]
    ext = machine.get("extension")
    if ext and not ext.get("beside_package"):
        lines.append("WARNING: the C extension measured was not built in this checkout (it was loaded from "
                     "another one): build it here first (python pyrope/_build.py)")
    return lines


def load_text(values):
    """Load averages as a run's report prints them ("n/a": not read)."""
    return "n/a" if not values else " ".join(f"{v:.2f}" for v in values)


# ---- tables -------------------------------------------------------------------------

def _t(seconds):
    if seconds is None:
        return "n/a"
    return f"{seconds * 1e3:.3f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.1f} us"


def short_time(seconds):
    """A time as the bench scripts' tables print it (2 decimals in ms, 1 in us)."""
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def ratio_text(value, iqr=False):
    """A (median, q1, q3) ratio as the bench scripts' tables print it ("n/a": none)."""
    if value is None:
        return "n/a"
    return f"{value[0]:.2f} ({value[1]:.2f}-{value[2]:.2f})" if iqr else f"{value[0]:.2f}"


def _x(v):
    return "—" if v is None else f"{v:.2f}"


def _mib(n):
    return f"{n / 2**20:g} MiB"


def case_heading(row):
    """``prefill_q_8192 1x8192x32x128 (128 MiB in float32)``."""
    n = 1
    for d in row["shape"].split("x"):
        n *= int(d)
    return f"{row['case']} {row['shape']} ({_mib(4 * n)} in float32)"


def markdown(rows, machine=None):
    """Every case as a markdown table (one row per dtype, layout, call and
    instruction set), then the targets; headed by the machine."""
    rot = [r for r in rows if r.get("kind") == "rotate"]
    out = []
    if machine:
        for line in machine_lines(machine):
            out += [line, ""]   # a paragraph each when pasted into markdown
    caption = ""
    if machine:
        cpu = machine["cpu"]
        caption = (f"{cpu.get('model_name')}, family {cpu.get('family')} model {cpu.get('model')}; "
                   f"default ISA {machine['isa']}; ")
    peer_names = [p for p in ("numpy", "torch", "onnxruntime")
                  if any(r["speedup"].get(p) is not None for r in rot)]
    for case in _ordered(r["case"] for r in rot):
        mine = [r for r in rot if r["case"] == case]
        first = mine[0]
        out.append(f"{case_heading(first)}: {caption}{first['threads']} threads, "
                   f"medians of {first['rounds']} rounds")
        out.append("")
        cols = ["dtype", "layout", "call", "isa", "time", "GB/s", "/yardstick", "IQR", "yardstick",
                "vs avx2", "other layout / this", "in place / this"] + [f"vs {_short(p)}" for p in peer_names]
        table = []
        for r in mine:
            lo, hi = r["yard_iqr"]
            table.append([r["dtype"], r["layout"], r["call"], r["isa"], _t(r["time"]), f"{r['gbps']:.1f}",
                          f"{r['yard_ratio']:.2f}", f"{lo:.2f}-{hi:.2f}", _t(r["yardstick"]), _x(r["vs_avx2"]),
                          _x(r["other_layout_ratio"]), _x(r["in_place_ratio"])]
                         + [_speed(r["speedup"].get(p)) for p in peer_names])
        keep = [j for j, c in enumerate(cols) if j < 9 or any(row[j] not in ("—", "n/a") for row in table)]
        out.append("| " + " | ".join(cols[j] for j in keep) + " |")
        out.append("|" + "|".join("---" if j < 4 else "---:" for j in keep) + "|")
        out += ["| " + " | ".join(row[j] for j in keep) + " |" for row in table]
        out.append("")
    peers = [r for r in rows if r.get("kind") == "peer"]
    if peers:
        out.append("Peers, fraction of the yardstick (yardstick time / peer time):")
        out.append("")
        out.append("| case | dtype | layout | " + " | ".join(_short(p) for p in peer_names) + " |")
        out.append("|---|---|---|" + "---:|" * len(peer_names))
        for case in _ordered(r["case"] for r in peers):
            for dtype in _ordered(r["dtype"] for r in peers if r["case"] == case):
                for layout in _ordered(r["layout"] for r in peers if r["case"] == case and r["dtype"] == dtype):
                    got = {r["contender"]: r["yard_ratio"] for r in peers
                           if (r["case"], r["dtype"], r["layout"]) == (case, dtype, layout)}
                    first = next(r for r in peers if r["case"] == case)
                    out.append(f"| {case} {first['shape']} | {dtype} | {layout} | "
                               + " | ".join(f"{got[p]:.3f}" if p in got else "n/a" for p in peer_names) + " |")
        out.append("")
    for r in rows:
        if r.get("kind") == "overhead":
            out.append(f"Python layer of a decode call {r['shape']} {r['dtype']}: apply {_t(r['apply'])}, "
                       f"the same C call alone {_t(r['c_call'])}: overhead {_t(r['overhead'])} "
                       f"(apply_qk in place: {_t(r['apply_qk'])})")
            out.append("")
    notes = (machine or {}).get("peer_notes") or {}
    for peer, why in notes.items():
        if why:
            out.append(f"{peer}: skipped ({why})")
    if any(notes.values()):
        out.append("")
    isa = target_isa(rows, machine)
    out.append(f"Targets (pyrope rows of ISA {isa}; worst case named):")
    out.append("")
    out += [t["line"] for t in check_targets(rows, isa)]
    return "\n".join(out)


def _short(peer):
    return "ORT" if peer == "onnxruntime" else peer


def _speed(v):
    return "n/a" if v is None else f"{v:.1f}x"


def _ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


# ---- targets ------------------------------------------------------------------------

def target_isa(rows, machine=None):
    """The instruction set the targets are judged on: pyrope's default
    (``get_isa()`` at the start of the run) if it was timed, else the last
    one timed."""
    timed = _ordered(r["isa"] for r in rows if r.get("kind") == "rotate")
    default = (machine or {}).get("isa")
    if default in timed:
        return default
    return timed[-1] if timed else default


def check_targets(rows, isa):
    """The issue's targets, each ``{"name", "holds", "worst", "where", "count",
    "held", "line"}`` (``holds`` None: not measured in this run)."""
    rot = [r for r in rows if r.get("kind") == "rotate" and r["isa"] == isa]
    in_place = [r for r in rot if r["call"] == "in place"]
    sixteen = ("float16", "bfloat16")
    results = []

    def target(name, values, threshold):
        values = [(v, where) for v, where in values if v is not None]
        if not values:
            results.append({"name": name, "holds": None, "count": 0, "held": 0, "worst": None, "where": None,
                            "line": f"- {name}: not measured"})
            return
        worst = min(values, key=lambda v: v[0])
        held = sum(v >= threshold for v, _ in values)
        holds = held == len(values)
        results.append({"name": name, "holds": holds, "count": len(values), "held": held, "worst": worst[0],
                        "where": worst[1], "line": f"- {name}: {'HOLDS' if holds else 'MISSED'} "
                        f"({held} of {len(values)}; worst {worst[0]:.2f} at {worst[1]})"})

    def where(r):
        return f"{r['case']} {r['dtype']} {r['layout']}" + ("" if r["call"] == "in place" else f" {r['call']}")

    in_cache = [r for r in in_place if r["case"] in ("prefill_k", "decode", "decode_64")
                or (r["case"] == "prefill_q" and r["dtype"] in sixteen)]
    if isa.startswith(ISA_FAMILY):
        target(f"in-cache cases >= 2x the avx2 ISA's speed ({isa} / avx2, same rounds)",
               [(r["vs_avx2"], where(r)) for r in in_cache], 2.0)
    else:
        results.append({"name": "in-cache cases >= 2x the avx2 ISA's speed", "holds": None, "count": 0,
                        "held": 0, "worst": None, "where": None,
                        "line": f"- in-cache cases >= 2x the avx2 ISA's speed: not measured ({isa} is not AVX-512)"})
    target("float32 prefill k >= 0.6 of the yardstick",
           [(r["yard_ratio"], where(r)) for r in in_place if r["case"] == "prefill_k" and r["dtype"] == "float32"],
           0.6)
    target("16-bit prefills (q 2048, k) >= 0.5 of the yardstick",
           [(r["yard_ratio"], where(r)) for r in in_place
            if r["case"] in ("prefill_q", "prefill_k") and r["dtype"] in sixteen], 0.5)
    target("memory-resident prefill q 1x8192x32x128 >= 0.9 of the yardstick",
           [(r["yard_ratio"], where(r)) for r in in_place if r["case"] == "prefill_q_8192"], 0.9)
    for dtype, factor in (("float32", 3.0), ("float16", 2.5)):
        target(f"decode 16x1x32x128 {dtype} >= {factor:g}x ONNX Runtime's session.run per call",
               [(r["speedup"].get("onnxruntime"), where(r)) for r in in_place
                if r["case"] == "decode" and r["dtype"] == dtype], factor)
    target("out= into a cache slice within 10% of in place (in-place time / out= time >= 0.9)",
           [(r["in_place_ratio"], where(r)) for r in rot if r["call"] == "out=cache"], 0.9)
    target("interleaved within 10% of split half (split-half time / interleaved time >= 0.9)",
           [(r["other_layout_ratio"], where(r)) for r in in_place if r["layout"] == "interleaved"], 0.9)
    # the previous issue's peer targets, still worth watching
    prefill = [r for r in in_place if r["case"].startswith("prefill")]
    target("(earlier) prefill >= 1.8x ONNX Runtime",
           [(r["speedup"].get("onnxruntime"), where(r)) for r in prefill], 1.8)
    target("(earlier) float32 prefill >= 20x torch eager",
           [(r["speedup"].get("torch"), where(r)) for r in prefill if r["dtype"] == "float32"], 20.0)
    target("(earlier) float32 prefill >= 10x numpy",
           [(r["speedup"].get("numpy"), where(r)) for r in prefill if r["dtype"] == "float32"], 10.0)
    return results


# ---- JSON ---------------------------------------------------------------------------

def to_json(rows, machine):
    """The run as one JSON-serialisable dict: machine, method, rows, targets."""
    isa = target_isa(rows, machine)
    targets = [{k: v for k, v in t.items() if k != "line"} for t in check_targets(rows, isa)]
    return {"format": "pyrope-bench/1", "machine": machine, "method": _bench_method.method(), "target_isa": isa,
            "rows": rows, "targets": targets}


def write_json(path, rows, machine):
    """Write :func:`to_json` to ``path``: one row per line (files of runs stay
    small and diff line by line), floats to 5 significant digits."""
    data = rounded(to_json(rows, machine))
    rows = data.pop("rows")
    write_lines(path, data, rows)


def write_lines(path, data, rows):
    """A saved run: the items of ``data``, then ``"rows"``, one row per line."""
    with open(path, "w", encoding="utf-8") as f:
        f.write("{\n")
        for key, value in data.items():
            f.write(f" {json.dumps(key)}: {json.dumps(value)},\n")
        f.write(' "rows": [\n')
        f.write(",\n".join("  " + json.dumps(r) for r in rows))
        f.write("\n ]\n}\n")


def read_saved(path, fmt):
    """(rows, machine) of a saved run of format ``fmt`` (a ValueError for another file)."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("format") != fmt:
        raise ValueError(f"{path}: not a {fmt} file (format {data.get('format')!r})")
    return data["rows"], data["machine"]


def as_saved(rows, machine):
    """(rows, machine) with floats to 5 significant digits, as write_json saves
    them: a fresh run prints from these, so ``--load`` of its file prints the
    same tables (an IQR bound on a rounding edge would otherwise differ)."""
    return rounded(rows), rounded(machine)


def rounded(value):
    """``value`` (floats, dicts and lists of them) with each float to 5 significant digits, as runs are saved."""
    if isinstance(value, float):
        return float(f"{value:.5g}")
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def read_json(path):
    """(rows, machine) of a file :func:`write_json` wrote."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if data.get("format") != "pyrope-bench/1":
        from ..errors import ValueError
        raise ValueError(f"{path}: not a pyrope bench JSON file (format {data.get('format')!r})")
    return data["rows"], data["machine"]
