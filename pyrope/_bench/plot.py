"""The picture of a benchmark run: each case's fraction of the yardstick per
dtype, layout and instruction set, with the peers beside it.

:func:`panels` prepares the data (no matplotlib); :func:`plot` draws it as
a dot plot, one panel per case (and call), a row per dtype and layout, a
log axis of yardstick time / contender time, so pyrope (near 1) and the
peers (near 0.01) share one scale. matplotlib is imported on use only.
"""
import io

from .. import errors

PEER_STYLE = {"numpy": dict(marker="x", color="0.45"), "torch": dict(marker="+", color="0.15", s=70),
              "onnxruntime": dict(marker="^", facecolors="none", edgecolors="#7b3fa0")}
ISA_COLORS = {"avx2": "#1f77b4", "avx512": "#ff7f0e", "avx512bf16": "#2ca02c", "scalar": "#7f7f7f",
              "neon": "#d62728"}
EXTRA_COLORS = ("#8c564b", "#e377c2", "#17becf", "#bcbd22")
TARGET_COLOR = "#d62728"


def yard_target(case, dtype, call="in place"):
    """The issue's fraction of the yardstick for this case and dtype, or None."""
    if call != "in place":
        return None
    if case == "prefill_q_8192":
        return 0.9
    if case == "prefill_k" and dtype == "float32":
        return 0.6
    if case in ("prefill_k", "prefill_q") and dtype in ("float16", "bfloat16"):
        return 0.5
    return None


def panels(rows):
    """[{"title", "case", "call", "labels": ["float32 split_half", ...],
    "series": {name: [fraction or None per label]}, "targets": [target or
    None per label]}], one per case and call, in the rows' order; series
    names are ``pyrope <isa>`` and the peers' names."""
    rot = [r for r in rows if r.get("kind") == "rotate"]
    peers = [r for r in rows if r.get("kind") == "peer"]
    out = []
    for case, call in _ordered((r["case"], r["call"]) for r in rot):
        mine = [r for r in rot if (r["case"], r["call"]) == (case, call)]
        labels = _ordered((r["dtype"], r["layout"]) for r in mine)
        names = [f"pyrope {isa}" for isa in _ordered(r["isa"] for r in mine)]
        names += _ordered(r["contender"] for r in peers if r["case"] == case)
        series = {n: [None] * len(labels) for n in names}
        for r in mine:
            series[f"pyrope {r['isa']}"][labels.index((r["dtype"], r["layout"]))] = r["yard_ratio"]
        for r in peers:
            if r["case"] == case and (r["dtype"], r["layout"]) in labels:
                series[r["contender"]][labels.index((r["dtype"], r["layout"]))] = r["yard_ratio"]
        title = f"{case} {mine[0]['shape']}" + ("" if call == "in place" else f", {call}[:, pos]")
        out.append({"title": title, "case": case, "call": call, "labels": [f"{d} {lay}" for d, lay in labels],
                    "series": series, "targets": [yard_target(case, d, call) for d, _ in labels]})
    return out


def subtitle(machine, note=None):
    """CPU, threads, date (and a note) for the picture."""
    cpu = machine.get("cpu", {})
    text = (f"{cpu.get('model_name') or 'CPU'} (family {cpu.get('family')} model {cpu.get('model')}), "
            f"{machine.get('threads')} threads, default ISA {machine.get('isa')}, {machine.get('date')}")
    return text + (f" — {note}" if note else "")


def _ordered(values):
    seen = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen


def _style(name, k):
    if name in PEER_STYLE:
        return dict(PEER_STYLE[name])
    isa = name.split(" ", 1)[1]
    color = ISA_COLORS.get(isa, EXTRA_COLORS[k % len(EXTRA_COLORS)])
    return dict(marker="osDvP"[k % 5], color=color, s=42, edgecolors="white", linewidths=0.5)


def plot(rows, machine, path, note=None):
    """Write the dot plot of ``rows`` to ``path`` (PNG, palette colours to stay small)."""
    try:
        import matplotlib
    except ImportError:
        raise errors.ImportError(f"the benchmark plot needs matplotlib: {errors.install_hint('matplotlib', 'plot')}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    data = panels(rows)
    if not data:
        raise errors.ValueError("no pyrope rows to plot")
    ncols = 2
    nrows = (len(data) + 1 + ncols - 1) // ncols           # one cell more: the legend
    height = sum(1.0 + 0.28 * len(p["labels"]) for p in data[::ncols]) + 1.6
    fig, axes = plt.subplots(nrows, ncols, figsize=(12, max(4.0, height)), dpi=80, squeeze=False)
    lo = min([v for p in data for s in p["series"].values() for v in s if v] + [0.1])
    xmin, xmax = max(1e-3, lo / 1.6), 2.0      # below 1e-3 (torch stalls): drawn on the edge
    handles = {}
    for ax, panel in zip(axes.flat, data):
        n = len(panel["labels"])
        names = list(panel["series"])
        for k, name in enumerate(names):
            dy = (k - (len(names) - 1) / 2) * (0.6 / max(1, len(names) - 1))
            pts = [(max(v, xmin * 1.05), i + dy) for i, v in enumerate(panel["series"][name]) if v]
            if pts:
                style = _style(name, k)
                h = ax.scatter([p[0] for p in pts], [p[1] for p in pts], zorder=3, **style)
                handles.setdefault(name, h)
        for i, t in enumerate(panel["targets"]):
            if t:
                ax.plot([t, t], [i - 0.42, i + 0.42], color=TARGET_COLOR, linewidth=1.4, linestyle=(0, (2, 1.5)))
        ax.axvline(1.0, color="black", linewidth=0.9)
        ax.set_xscale("log")
        ax.set_xlim(xmin, xmax)
        ax.set_ylim(n - 0.5, -0.5)
        ax.set_yticks(range(n))
        ax.set_yticklabels(panel["labels"], fontsize=8)
        for i in range(1, n):
            ax.axhline(i - 0.5, color="0.9", linewidth=0.6)
        ticks = [v for v in (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0) if xmin <= v <= xmax]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(FixedFormatter([f"{v:g}" for v in ticks]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.grid(True, axis="x", which="major", alpha=0.35)
        ax.tick_params(axis="x", labelsize=8)
        ax.set_title(panel["title"], fontsize=10, loc="left")
    for ax in list(axes.flat)[len(data):]:
        ax.axis("off")
    legend_ax = list(axes.flat)[len(data)]
    legend = [handles[n] for n in handles] + [Line2D([], [], color=TARGET_COLOR, linestyle=(0, (2, 1.5))),
                                              Line2D([], [], color="black", linewidth=0.9)]
    labels = list(handles) + ["target of the issue", "the yardstick (1.0)"]
    legend_ax.legend(legend, labels, loc="center", fontsize=9, frameon=False, ncol=2)
    legend_ax.text(0.5, 0.08, "a peer missing from a row was not installed or has no kernel for that dtype;\n"
                   "torch and onnxruntime: the better of 1 and N threads per round, like the yardstick",
                   ha="center", fontsize=8, color="0.35", transform=legend_ax.transAxes)
    top = fig.get_figheight()
    fig.text(0.5, 1 - 0.3 / top, "Rotation speed as a fraction of the yardstick (an in-place read+write pass over "
             "the same bytes): yardstick time / time, log scale, higher is better", ha="center", fontsize=11)
    fig.text(0.5, 1 - 0.55 / top, subtitle(machine, note), ha="center", fontsize=9, color="0.3")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.75 / top))
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    _write_small_png(buf.getvalue(), path)


def _write_small_png(png, path):
    """A palette PNG (a few dozen colours suffice for a plot): a fraction of the size."""
    try:
        from PIL import Image   # matplotlib depends on Pillow
    except ImportError:  # pragma: no cover
        with open(path, "wb") as f:
            f.write(png)
        return
    img = Image.open(io.BytesIO(png)).convert("RGB")
    img.quantize(colors=96, method=Image.Quantize.FASTOCTREE).save(path, format="PNG", optimize=True)
