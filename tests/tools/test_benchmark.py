"""The benchmark harness's method, without timing anything that matters:
warm-up and rotating order, medians of per-round ratios, the better thread
count of the yardstick, the correctness gate, the target checks, the CPU
description and the plot's data. (No wall-clock speed is asserted.)"""
import numpy as np
import pytest

import pyrope
from pyrope._bench import plot as _bench_plot, report as _bench_report
from pyrope import benchmark
from pyrope.benchmark import IN_PLACE, OUT_CACHE, Key

ISA = pyrope.supported_isas()[-1]


def small_case(**kw):
    kw.setdefault("isas", [ISA])
    return benchmark.Case("small", "float32", peers=False, **kw)


def test_every_contender_is_warmed_then_timed_in_a_rotating_order(monkeypatch):
    monkeypatch.setattr(benchmark.timing, "IDLE", 0.0)
    monkeypatch.setattr(benchmark.timing, "WARM", 0.002)
    case = small_case()
    log = []
    for key, con in case.contenders.items():
        con.call = (lambda key=key: log.append(key))
    case.one_round(calibrate=True)
    keys = list(case.contenders)
    firsts = []
    for _ in range(len(keys)):
        log.clear()
        case.one_round()
        firsts.append(log[0])
        # each contender: a run of warm-up calls, then its timed block, before the next starts
        runs = [k for i, k in enumerate(log) if i == 0 or log[i - 1] != k]
        assert sorted(runs) == sorted(keys)
        for k in keys:
            assert log.count(k) >= 1 + case.contenders[k].reps
    assert sorted(firsts) == sorted(keys)            # every contender leads once in len(keys) rounds
    assert all(len(v) == len(keys) for v in case.times.values())


def test_calibration_sizes_the_timed_block(monkeypatch):
    monkeypatch.setattr(benchmark.timing, "IDLE", 0.0)
    monkeypatch.setattr(benchmark.timing, "WARM", 0.003)
    case = small_case()
    for con in case.contenders.values():
        con.call = lambda: None                    # as fast as a call gets: the block is capped
    case.one_round(calibrate=True)
    assert all(con.reps == benchmark.timing.MAX_REPS for con in case.contenders.values())
    assert all(v == [] for v in case.times.values())   # the calibrating round is not counted


def test_rows_are_medians_of_per_round_ratios():
    case = small_case()
    py = Key("pyrope", ISA, "split_half", IN_PLACE)
    other = Key("pyrope", ISA, "interleaved", IN_PLACE)
    yards = [k for k in case.contenders if k.kind == "yardstick"]   # 1 thread, and N if N > 1
    y1, yn = yards[0], yards[-1]
    # a noisy round slows everything alike: the per-round ratios stay put, the ratio of medians would not
    case.times = {k: [] for k in case.contenders}
    case.times[py] = [1.0, 2.0, 10.0]
    case.times[other] = [2.0, 4.0, 20.0]
    case.times[y1] = [0.8, 1.6, 8.0]
    if yn != y1:
        case.times[yn] = [0.9, 1.5, 9.0]           # round 2: N threads faster than 1
    rows = {(r["layout"], r["call"]): r for r in case.rows()}
    r = rows[("split_half", IN_PLACE)]
    assert r["time"] == 2.0
    yard = [0.8, 1.5 if yn != y1 else 1.6, 8.0]
    assert r["yard_ratio"] == pytest.approx(float(np.median(np.array(yard) / [1.0, 2.0, 10.0])))
    assert r["yardstick"] == pytest.approx(float(np.median(yard)))
    assert r["other_layout_ratio"] == pytest.approx(2.0)
    assert rows[("interleaved", IN_PLACE)]["other_layout_ratio"] == pytest.approx(0.5)
    assert r["gbps"] == pytest.approx(2 * case.x0.nbytes / 2.0 / 1e9)


def test_out_into_a_cache_slice_is_a_contender_of_the_decode_case():
    case = benchmark.Case("decode", "float32", isas=[ISA], layouts=["split_half"], peers=False)
    calls = sorted(k.call for k in case.contenders if k.kind == "pyrope")
    assert calls == [IN_PLACE, OUT_CACHE]
    case.check()   # the cache slice holds the reference rotation


def test_a_wrong_contender_fails_the_run():
    case = small_case(layouts=["interleaved"])
    key = Key("pyrope", ISA, "interleaved", IN_PLACE)
    case.contenders[key].call = lambda: None        # leaves x as it was: not rotated
    with pytest.raises(AssertionError, match="is wrong"):
        case.check()


def test_contenders_run_under_their_isa():
    seen = []
    case = small_case(isas=pyrope.supported_isas())
    for key, con in case.contenders.items():
        if key.kind == "pyrope":
            con.call = lambda key=key, call=con.call: (seen.append((key.variant, pyrope.get_isa())), call())
    before = pyrope.get_isa()
    case.check()
    assert seen and all(want == got for want, got in seen)
    assert pyrope.get_isa() == before


# ---- targets ------------------------------------------------------------------------------

def row(case, dtype, layout="split_half", call=IN_PLACE, isa="avx512", **values):
    base = {"kind": "rotate", "case": case, "dtype": dtype, "layout": layout, "call": call, "isa": isa,
            "yard_ratio": 1.0, "vs_avx2": 3.0, "other_layout_ratio": 1.0, "in_place_ratio": None,
            "speedup": {"numpy": 50.0, "torch": 50.0, "onnxruntime": 5.0}}
    base.update(values)
    return base


def targets(rows, isa="avx512"):
    return {t["name"].split(" (")[0] if not t["name"].startswith("(") else t["name"]: t
            for t in _bench_report.check_targets(rows, isa)}


def test_targets_hold_at_their_thresholds_and_miss_below():
    rows = [row("prefill_k", "float32", yard_ratio=0.6), row("prefill_k", "float16", yard_ratio=0.5),
            row("prefill_q", "bfloat16", yard_ratio=0.5, vs_avx2=2.0),
            row("prefill_q_8192", "float16", "interleaved", yard_ratio=0.9),
            row("decode", "float32", speedup={"onnxruntime": 3.0}),
            row("decode", "float16", speedup={"onnxruntime": 2.5}),
            row("decode", "float32", call=OUT_CACHE, in_place_ratio=0.9),
            row("small", "float32", "interleaved", other_layout_ratio=0.9),
            row("decode_64", "float32", isa="avx2", vs_avx2=None, yard_ratio=0.01)]   # another ISA: ignored
    got = targets(rows)
    for name in ("in-cache cases >= 2x the avx2 ISA's speed", "float32 prefill k >= 0.6 of the yardstick",
                 "16-bit prefills", "memory-resident prefill q 1x8192x32x128 >= 0.9 of the yardstick",
                 "decode 16x1x32x128 float32 >= 3x ONNX Runtime's session.run per call",
                 "decode 16x1x32x128 float16 >= 2.5x ONNX Runtime's session.run per call",
                 "out= into a cache slice within 10% of in place",
                 "interleaved within 10% of split half"):
        assert got[name]["holds"] is True, (name, got[name])
    assert got["in-cache cases >= 2x the avx2 ISA's speed"]["count"] == 5   # prefill k x2, bf16 q, decode x2
    # a hair below each threshold
    rows[0]["yard_ratio"] = 0.599
    rows[2]["vs_avx2"] = 1.99
    rows[4]["speedup"]["onnxruntime"] = 2.99
    rows[6]["in_place_ratio"] = 0.89
    got = targets(rows)
    assert got["float32 prefill k >= 0.6 of the yardstick"]["holds"] is False
    miss = got["in-cache cases >= 2x the avx2 ISA's speed"]
    assert miss["holds"] is False and miss["worst"] == 1.99 and miss["where"] == "prefill_q bfloat16 split_half"
    assert "MISSED (4 of 5; worst 1.99 at prefill_q bfloat16 split_half)" in miss["line"]
    assert got["decode 16x1x32x128 float32 >= 3x ONNX Runtime's session.run per call"]["holds"] is False
    assert got["out= into a cache slice within 10% of in place"]["holds"] is False


def test_targets_not_measured_are_said_so():
    got = targets([row("small", "float32", isa="avx2", vs_avx2=None)], isa="avx2")
    assert got["in-cache cases >= 2x the avx2 ISA's speed"]["holds"] is None
    assert "not AVX-512" in got["in-cache cases >= 2x the avx2 ISA's speed"]["line"]
    assert got["memory-resident prefill q 1x8192x32x128 >= 0.9 of the yardstick"]["line"].endswith("not measured")


def test_targets_are_judged_on_the_default_isa_when_it_was_timed():
    rows = [row("small", "float32", isa="avx2"), row("small", "float32", isa="avx512")]
    assert _bench_report.target_isa(rows, {"isa": "avx2"}) == "avx2"
    assert _bench_report.target_isa(rows, {"isa": "neon"}) == "avx512"


# ---- the machine ------------------------------------------------------------------------

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx fma f16c avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16 avx512vbmi

processor\t: 1
vendor_id\t: AuthenticAMD
"""
ARM = """processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp bf16 sve
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
"""


def test_cpu_info_from_cpuinfo_text():
    x86 = _bench_report.cpu_info(X86)
    assert (x86["vendor"], x86["family"], x86["model"], x86["model_name"]) == ("AuthenticAMD", "25", "17", "AMD EPYC")
    assert x86["flags"] == ["avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512_bf16"]
    assert x86["flags_missing"] == ["avx512_fp16"]
    line = _bench_report.cpu_line(x86)
    assert "family 25 model 17" in line and "not: avx512_fp16" in line
    # Linux spells it avx512_fp16 (a Sapphire Rapids guest): found, not reported missing
    intel = _bench_report.cpu_info(X86.replace(" avx512_bf16", " avx512_bf16 avx512_fp16"))
    assert "avx512_fp16" in intel["flags"] and intel["flags_missing"] == []
    arm = _bench_report.cpu_info(ARM)
    assert arm["vendor"] == "0x41" and arm["model"] == "0xd40" and "asimd" in arm["features"]
    assert "Features: fp asimd" in _bench_report.cpu_line(arm)


def test_machine_info_names_the_isa_and_is_json():
    import json
    info = _bench_report.machine_info()
    assert info["isa"] == pyrope.get_isa() and info["supported_isas"] == pyrope.supported_isas()
    json.dumps(info)
    lines = _bench_report.machine_lines(info)
    assert lines[0].startswith("CPU: ") and f"pyrope ISA: {pyrope.get_isa()}" in lines[1]
    assert len(info["extension"]["sha256"]) == 16 and isinstance(info["extension"]["beside_package"], bool)
    # this package's own build sits beside it (an installed wheel's too): no warning
    import os
    import pyrope._pyrope_cffi as extension
    assert os.path.dirname(extension.__file__) == os.path.dirname(pyrope.__file__)
    assert info["extension"]["beside_package"] is True
    assert not any(line.startswith("WARNING") for line in lines)
    # a run that measured another checkout's build says so
    info["extension"]["beside_package"] = False
    assert _bench_report.machine_lines(info)[-1].startswith("WARNING: the C extension measured")


# ---- the picture's data -------------------------------------------------------------------

def test_plot_panels_hold_every_isa_and_peer_per_dtype_and_layout():
    rows = [row("decode", d, lay, c, isa, yard_ratio=0.1 * k, shape="16x1x32x128")
            for k, (d, lay, c, isa) in enumerate(
                (d, lay, c, isa) for d in ("float32", "float16") for lay in ("split_half", "interleaved")
                for c in (IN_PLACE, OUT_CACHE) for isa in ("avx2", "avx512"))]
    rows += [{"kind": "peer", "contender": "numpy", "case": "decode", "dtype": "float16", "layout": "interleaved",
              "call": IN_PLACE, "yard_ratio": 0.02}]
    panels = _bench_plot.panels(rows)
    assert [p["title"] for p in panels] == ["decode 16x1x32x128", "decode 16x1x32x128, out=cache[:, pos]"]
    first = panels[0]
    assert first["labels"] == ["float32 split_half", "float32 interleaved", "float16 split_half",
                               "float16 interleaved"]
    assert list(first["series"]) == ["pyrope avx2", "pyrope avx512", "numpy"]
    assert first["series"]["pyrope avx512"][1] == pytest.approx(0.1 * 5)   # float32 interleaved in place avx512
    assert first["series"]["numpy"] == [None, None, None, 0.02]
    assert _bench_plot.yard_target("prefill_q_8192", "bfloat16") == 0.9
    assert _bench_plot.yard_target("prefill_k", "float32") == 0.6
    assert _bench_plot.yard_target("prefill_q", "float32") is None


def test_default_isas_leave_scalar_out_unless_it_is_all(monkeypatch):
    monkeypatch.setattr(benchmark._isa, "supported_isas", lambda: ["scalar", "neon"])
    assert benchmark.default_isas() == ["neon"] and benchmark.yardstick_isa() == "neon"
    monkeypatch.setattr(benchmark._isa, "supported_isas", lambda: ["scalar"])
    assert benchmark.default_isas() == ["scalar"]
