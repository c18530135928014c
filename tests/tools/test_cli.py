"""The pyrope command: each subcommand through its entry point, numbers
checked against the reference, and the error paths."""
import json
import math
import os
import re
import subprocess
import sys

import pytest

import pyrope
from pyrope import cli, reference
from hf_configs import LLAMA31_8B, QWEN25_7B_YARN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def test_demo_prints_the_seed_experiment(capsys):
    code, out, err = run(["demo"], capsys)
    assert code == 0 and not err
    sections = {block.split(".", 1)[0]: block for block in out.split("\n\n")}
    # 2: the rotary column is one number, the additive column wanders
    rows = [ln.split() for ln in sections["2"].splitlines()[2:] if len(ln.split()) == 4]
    assert [int(r[0]) for r in rows] == [3, 10, 100, 4000]
    rotary = [float(r[1]) for r in rows]
    additive = [float(r[3]) for r in rows]
    assert max(rotary) - min(rotary) < 1e-5 * max(1.0, abs(rotary[0]))
    assert max(additive) - min(additive) > 1e-2
    # 3: pairs within one turn for growing gaps, against the reference
    rows = [ln.split() for ln in sections["3"].splitlines()[2:]]
    assert [int(r[0]) for r in rows] == [1, 2, 10, 100, 1000, 10000]
    for r in rows:
        assert int(r[-1]) == reference.pairs_within_one_turn(int(r[0]), 64)
        assert float(r[1]) == pytest.approx(reference.turns(int(r[0]), 64)[0], rel=1e-3)


def test_spectrum_json_matches_reference(capsys):
    code, out, _ = run(["spectrum", "--dim", "64", "--base", "10000", "--window", "4096", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    curve = data["curves"][0]
    want = reference.pair_frequencies(64, 10000.0)
    for got, w in zip(curve["omega"], want):
        assert got == pytest.approx(w, rel=1e-14)
    turns = reference.turns(4096, 64, 10000.0)
    assert curve["turns"] == pytest.approx(turns, rel=1e-12)
    assert curve["within_one_turn"] == reference.pairs_within_one_turn(4096, 64, 10000.0)


def test_spectrum_scaling_side_by_side(capsys):
    code, out, _ = run(["spectrum", "--dim", "8", "--window", "4096", "--scaling", "linear",
                        "--scaling", "ntk", "--scaling", "yarn", "--factor", "8", "--json"], capsys)
    assert code == 0
    curves = {c["label"]: c for c in json.loads(out)["curves"]}
    # the second seed's table: PI and static base change for d=8, b=10000, s=8
    assert curves["linear"]["omega"] == pytest.approx([0.125, 0.0125, 0.00125, 0.000125], rel=1e-12)
    assert curves["ntk"]["omega"] == pytest.approx([1, 0.05, 0.0025, 0.000125], rel=1e-12)
    assert curves["yarn"]["attention_factor"] == pytest.approx(1 + 0.1 * math.log(8), rel=1e-12)
    assert curves["linear"]["window"] == 32768


def test_spectrum_from_config_and_plot(tmp_path, capsys):
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(LLAMA31_8B))
    png = tmp_path / "spectrum.png"
    code, out, _ = run(["spectrum", "--config", str(cfg), "--plot", str(png)], capsys)
    assert code == 0 and "llama3" in out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    import matplotlib.image
    img = matplotlib.image.imread(str(png))
    assert img.ndim == 3 and img.shape[0] > 200 and img.shape[1] > 300


def test_contract_single_and_diff(tmp_path, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(LLAMA31_8B))
    b.write_text(json.dumps(QWEN25_7B_YARN))
    code, out, _ = run(["contract", str(a)], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["contract"]["rule"] == "llama3" and len(data["fingerprint"]) == 64
    code, out, _ = run(["contract", str(a), str(a)], capsys)
    assert code == 0 and out.startswith("same position function")
    code, out, _ = run(["contract", str(a), str(b)], capsys)
    assert code == 1 and "different position functions" in out and "rule" in out


@pytest.mark.parametrize("argv,needle", [
    (["contract", "no/such/config.json"], "no such file"),
    (["spectrum", "--dim", "7"], "dim"),
    (["spectrum", "--scaling", "yarn"], "needs --factor"),
    (["spectrum", "--scaling", "warp", "--factor", "2"], "warp"),
    (["spectrum", "--window", "0"], "window"),
    (["spectrum", "--param", "oops", "--scaling", "linear", "--factor", "2"], "KEY=VALUE"),
])
def test_errors_are_one_line_exit_2(argv, needle, capsys):
    code, out, err = run(argv, capsys)
    assert code == 2
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_malformed_json_and_unknown_rule_via_subprocess(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    unknown = tmp_path / "unknown.json"
    unknown.write_text(json.dumps({"hidden_size": 64, "num_attention_heads": 1,
                                   "rope_scaling": {"rope_type": "warp", "factor": 2}}))
    for path, needle in ((bad, "JSON"), (unknown, "warp")):
        proc = subprocess.run([sys.executable, "-m", "pyrope", "contract", str(path)],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_bad_argument_type_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pyrope", "spectrum", "--dim", "abc"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1


def pyproject_version():
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        return re.search(r'^version = "(.*)"$', f.read(), re.M).group(1)


@pytest.mark.parametrize("argv", [["-m", "pyrope", "--version"], ["-c", "import sys, pyrope.cli; "
                                  "sys.argv[0] = 'pyrope'; sys.exit(pyrope.cli.main())", "--version"]],
                         ids=["python -m pyrope", "pyrope"])
def test_version_prints_the_package_version(argv):
    # `pyrope` is the console script's entry point (pyrope.cli:main), run as it runs it
    proc = subprocess.run([sys.executable, *argv], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout == f"pyrope {pyrope.__version__}\n"
    assert pyrope.__version__ == pyproject_version()


def test_version_agrees_with_the_c_library(capsys):
    code = pyrope._engine.binding.lib.rope_version()
    assert f"{code // 10000}.{code // 100 % 100}.{code % 100}" == pyrope.__version__
    assert run(["--version"], capsys) == (0, f"pyrope {pyrope.__version__}\n", "")
    # a stale build (an extension older than the Python code) is said, not hidden
    newer = code + 1
    assert cli.version_text(c_version=newer) == (
        f"pyrope {pyrope.__version__} (its C library is {newer // 10000}.{newer // 100 % 100}.{newer % 100}: "
        f"a stale build; rebuild it, make build)")


def test_help_has_examples():
    for name in ("demo", "spectrum", "contract"):
        proc = subprocess.run([sys.executable, "-m", "pyrope", name, "--help"],
                              capture_output=True, text=True, cwd=ROOT)
        assert proc.returncode == 0 and "example" in proc.stdout


def _bench_tables(out):
    """{case heading: [{column: cell}]} of the markdown tables ``pyrope bench`` prints."""
    tables, heading, header = {}, None, None
    for line in out.splitlines():
        if line.startswith("|") and header is None:
            header = [c.strip() for c in line.strip("|").split("|")]
            tables[heading] = []
        elif line.startswith("|---"):
            continue
        elif line.startswith("|"):
            tables[heading].append(dict(zip(header, (c.strip() for c in line.strip("|").split("|")))))
        else:
            header = None
            if line.strip():
                heading = line.split(":")[0]
    return tables


def test_bench_prints_a_table_per_case_with_a_row_per_isa(capsys):
    from pyrope.benchmark import default_isas
    code, out, err = run(["bench", "--case", "small", "--dtype", "float32", "--rounds", "2", "--no-peers"], capsys)
    assert code == 0
    assert out.startswith("CPU: ") and "family" in out.splitlines()[0]
    assert f"pyrope ISA: {pyrope.get_isa()}" in out
    table = _bench_tables(out)["small 1x128x8x64 (0.25 MiB in float32)"]
    assert [(r["isa"], r["layout"]) for r in table] == [
        (isa, layout) for layout in ("split_half", "interleaved") for isa in default_isas()]
    for row in table:
        assert row["dtype"] == "float32" and row["call"] == "in place"
        assert float(row["GB/s"]) > 0
        assert 0 < float(row["/yardstick"]) < 10
        lo, hi = (float(v) for v in row["IQR"].split("-"))
        assert lo <= float(row["/yardstick"]) <= hi
        assert 0 < float(row["other layout / this"]) < 10
        assert "vs numpy" not in row                     # peers off
    assert "numpy: skipped (peers off)" in out
    assert "- interleaved within 10% of split half" in out


def test_bench_peers_run_or_say_why_not(capsys):
    isa = pyrope.supported_isas()[-1]
    code, out, _ = run(["bench", "--case", "small", "--dtype", "float32", "--rounds", "2", "--isa", isa,
                        "--layout", "interleaved"], capsys)
    assert code == 0
    (row,) = _bench_tables(out)["small 1x128x8x64 (0.25 MiB in float32)"]
    assert row["isa"] == isa and row["layout"] == "interleaved"
    assert float(row["vs numpy"][:-1]) > 0              # numpy is always there
    for peer, column in (("torch", "vs torch"), ("onnxruntime", "vs ORT")):
        assert (column in row and float(row[column][:-1]) > 0) or f"{peer}: skipped" in out


def test_bench_json_plot_and_load(tmp_path, capsys):
    isa = pyrope.supported_isas()[-1]
    js, png = tmp_path / "run.json", tmp_path / "run.png"
    code, out, _ = run(["bench", "--case", "decode", "--dtype", "float32", "--rounds", "2", "--no-peers",
                        "--isa", isa, "--json", str(js), "--plot", str(png), "--note", "a test"], capsys)
    assert code == 0
    data = json.loads(js.read_text())
    assert data["format"] == "pyrope-bench/1" and data["target_isa"] == isa
    assert data["machine"]["isa"] == pyrope.get_isa() and "family" in data["machine"]["cpu"]
    rows = [r for r in data["rows"] if r["kind"] == "rotate"]
    assert sorted((r["layout"], r["call"]) for r in rows) == [
        ("interleaved", "in place"), ("interleaved", "out=cache"),
        ("split_half", "in place"), ("split_half", "out=cache")]
    for r in rows:
        assert r["isa"] == isa and r["shape"] == "16x1x32x128" and r["rounds"] == 2
        assert (r["in_place_ratio"] is None) == (r["call"] == "in place")
        assert r["yardstick"] <= max(r["yardstick_by_threads"].values())
    names = [t["name"] for t in data["targets"]]
    assert any(n.startswith("out= into a cache slice") for n in names)
    out_target = next(t for t in data["targets"] if t["name"].startswith("out= into a cache slice"))
    assert out_target["count"] == 2 and out_target["holds"] in (True, False)
    picture = png.read_bytes()
    assert picture[:8] == b"\x89PNG\r\n\x1a\n" and 5_000 < len(picture) < 400_000
    import matplotlib.image
    img = matplotlib.image.imread(str(png))
    assert img.shape[0] > 200 and img.shape[1] > 600
    # a saved run prints the same tables again, timing nothing
    code, again, _ = run(["bench", "--load", str(js)], capsys)
    assert code == 0
    assert again.split("wrote")[0].strip() == out.split("wrote")[0].strip()


def test_bench_plot_without_matplotlib_names_the_extra(tmp_path, capsys, monkeypatch):
    isa = pyrope.supported_isas()[-1]
    js = tmp_path / "run.json"
    assert run(["bench", "--case", "small", "--dtype", "float32", "--rounds", "1", "--no-peers", "--isa", isa,
                "--layout", "split_half", "--json", str(js)], capsys)[0] == 0
    monkeypatch.setitem(sys.modules, "matplotlib", None)   # import matplotlib now raises ImportError
    code, _, err = run(["bench", "--load", str(js), "--plot", str(tmp_path / "x.png")], capsys)
    assert code == 2 and "matplotlib" in err and "pip install matplotlib" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x.png").exists()


def test_bench_rejects_unknown_case_isa_and_mixed_load(tmp_path, capsys):
    code, _, err = run(["bench", "--case", "huge"], capsys)
    assert code == 2 and "--case must be one of" in err
    code, _, err = run(["bench", "--isa", "sse9"], capsys)
    assert code == 2 and "--isa must be one of" in err
    code, _, err = run(["bench", "--load", "x.json", "--case", "small"], capsys)
    assert code == 2 and "--load" in err
    bad = tmp_path / "other.json"
    bad.write_text('{"format": "something else"}')
    code, _, err = run(["bench", "--load", str(bad)], capsys)
    assert code == 2 and "not a pyrope bench JSON file" in err


def test_config_commands_take_the_layout_from_the_config(tmp_path, capsys):
    # DeepSeek-V3's config.json names neither rope_interleave nor a layout: its family is interleaved
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_attention_heads": 128,
           "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "kv_lora_rank": 512,
           "rope_theta": 10000, "max_position_embeddings": 163840,
           "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                            "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    code, out, _ = run(["contract", str(path)], capsys)
    assert code == 0 and json.loads(out)["contract"]["layout"] == "interleaved"
    code, out, _ = run(["contract", "--layout", "split_half", str(path)], capsys)
    assert code == 0 and json.loads(out)["contract"]["layout"] == "split_half"
