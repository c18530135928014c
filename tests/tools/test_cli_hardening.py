"""The command line without surprises: one config argument form for every
command, conflicting or meaningless flags refused, per-rule parameters, exit
statuses a script can gate on, bounded work, and every refusal one line on
stderr with exit 2. Numbers are checked against the plain-Python oracles
(tests/support/reference_rules.py, pyrope.reference), not against the CLI's own code."""
import json
import math
import os
import subprocess
import sys
import time

import pytest

import reference_rules as R
from hf_configs import GEMMA3_4B, LLAMA2_7B, LLAMA31_8B, QWEN25_7B_YARN
from pyrope import cli, reference

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(argv, capsys):
    code = cli.main(argv)
    out, err = capsys.readouterr()
    return code, out, err


def help_of(command, capsys):
    """A subcommand's --help text, with the wrapping undone."""
    code, out, _ = run([command, "--help"], capsys)
    assert code == 0
    return " ".join(out.split())


def refused(argv, capsys, *needles):
    """Run argv; it must exit 2 with one line on stderr holding every needle, and print nothing."""
    code, out, err = run(argv, capsys)
    assert code == 2, (code, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, (needle, err)
    assert out == ""
    return err


@pytest.fixture
def write(tmp_path):
    def write(obj, name="config.json"):
        path = tmp_path / name
        path.write_text(obj if isinstance(obj, str) else json.dumps(obj))
        return str(path)
    return write


# --------------------------------------------------------------------------- one config argument form


def test_check_takes_the_config_as_readme_shows_and_as_config_option(write, capsys):
    path = write(LLAMA31_8B)
    code, positional, _ = run(["check", path], capsys)
    assert code == 0 and "llama3" in positional and "result: OK" in positional
    code, option, _ = run(["check", "--config", path], capsys)
    assert code == 0 and option == positional


def test_spectrum_and_contract_take_both_forms_too(write, capsys):
    a, b = write(LLAMA31_8B, "a.json"), write(QWEN25_7B_YARN, "b.json")
    spectra = [run(["spectrum", *form, "--json"], capsys) for form in ([a], ["--config", a])]
    assert spectra[0][0] == spectra[1][0] == 0 and spectra[0][1] == spectra[1][1]
    assert json.loads(spectra[0][1])["curves"][1]["label"] == "llama3"
    forms = ([a, b], ["--config", a, "--config", b], [a, "--config", b])
    for form in forms:
        code, out, _ = run(["contract", *form], capsys)
        assert code == 1 and out.startswith("different position functions")
    code, out, _ = run(["contract", "--config", a], capsys)
    assert code == 0 and json.loads(out)["contract"]["rule"] == "llama3"


@pytest.mark.parametrize("argv,needles", [
    (["check", "A", "--config", "A"], ["one config file", "got 2"]),
    (["spectrum", "A", "--config", "B"], ["one config file"]),
    (["contract", "A", "B", "--config", "C"], ["one or two config files", "got 3"]),
    (["contract"], ["one or two config files", "none"]),
])
def test_too_many_or_no_configs_are_refused(argv, needles, write, capsys):
    paths = {name: write(LLAMA2_7B, f"{name}.json") for name in "ABC"}
    refused([paths.get(a, a) for a in argv], capsys, *needles)


# --------------------------------------------------------------------------- conflicting flags


def test_check_refuses_base_with_a_config(write, capsys):
    path = write(LLAMA31_8B)
    refused(["check", path, "--base", "1e6"], capsys, "--base")
    refused(["check", "--config", path, "--base", "10000"], capsys, "--base")


def test_check_default_base_is_the_documented_10000(capsys):
    code, out, _ = run(["check", "--head-dim", "64", "--layout", "split_half"], capsys)
    assert code == 0 and "base=10000.0" in out.splitlines()[0]
    assert "RoPE base, default 10000" in help_of("check", capsys)


@pytest.mark.parametrize("argv,needle", [
    (["spectrum", "--seq-len", "10"], "--seq-len"),
    (["spectrum", "--layer-type", "full_attention"], "--layer-type"),
    (["check", "--head-dim", "64", "--layout", "split_half", "--seq-len", "10"], "--seq-len"),
])
def test_config_flags_without_a_config_are_refused(argv, needle, capsys):
    refused(argv, capsys, needle, "config")


# --------------------------------------------------------------------------- --layer-type


GEMMA3_FACTS = {  # layer type: (base, linear factor) from GEMMA3_4B's keys
    "sliding_attention": (10000.0, 1.0),
    "full_attention": (1000000.0, 8.0),
}

V5_NESTED = {  # a transformers 5 config with rope_parameters per layer type
    "model_type": "llama", "hidden_size": 1024, "num_attention_heads": 8, "head_dim": 128,
    "num_hidden_layers": 2, "max_position_embeddings": 8192,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                                           "original_max_position_embeddings": 8192}},
}


@pytest.mark.parametrize("layer_type", sorted(GEMMA3_FACTS))
def test_layer_type_selects_a_gemma3_rope(layer_type, write, capsys):
    path = write(GEMMA3_4B)
    code, out, _ = run(["contract", path, "--layer-type", layer_type], capsys)
    assert code == 0
    contract = json.loads(out)["contract"]
    base, factor = GEMMA3_FACTS[layer_type]
    want = [w / factor for w in reference.pair_frequencies(256, base)]
    got = [float.fromhex(h) for h in contract["inv_freq"]]
    assert got == pytest.approx(want, rel=1e-15, abs=0)
    code, out, _ = run(["check", path, "--layer-type", layer_type], capsys)
    assert code == 0 and "result: OK" in out


def test_layer_type_reads_transformers5_nested_parameters(write, capsys):
    path = write(V5_NESTED)
    code, out, _ = run(["spectrum", path, "--layer-type", "full_attention", "--json"], capsys)
    assert code == 0
    curves = json.loads(out)["curves"]
    want, attention = R.yarn(128, 1000000.0, 4.0, 8192)
    assert curves[1]["label"] == "yarn" and curves[1]["omega"] == pytest.approx(want, rel=1e-12)
    assert curves[1]["attention_factor"] == pytest.approx(attention, rel=1e-12)
    code, out, _ = run(["contract", path, "--layer-type", "sliding_attention"], capsys)
    assert code == 0 and json.loads(out)["contract"]["rule"] == "default"


def test_layer_type_missing_unknown_or_meaningless_is_refused(write, capsys):
    nested, plain = write(GEMMA3_4B, "g.json"), write(LLAMA2_7B, "l.json")
    refused(["contract", nested], capsys, "--layer-type", "full_attention or sliding_attention")
    refused(["check", nested, "--layer-type", "global"], capsys, "--layer-type", "'global'")
    refused(["spectrum", plain, "--layer-type", "full_attention"], capsys, "--layer-type", "one rope")


# --------------------------------------------------------------------------- --param per rule, defaults


def _curves(out):
    return {c["label"]: c for c in json.loads(out)["curves"]}


def test_param_for_one_rule_leaves_the_others_alone(capsys):
    argv = ["spectrum", "--dim", "64", "--base", "500000", "--window", "8192", "--scaling", "linear",
            "--scaling", "llama3", "--factor", "8", "--json"]
    for param in ("llama3.low_freq_factor=2", "low_freq_factor=2"):  # a rule's own, or every reader's
        code, out, _ = run(argv + ["--param", param], capsys)
        assert code == 0, param
        curves = _curves(out)
        assert curves["linear"]["omega"] == pytest.approx(R.linear(64, 500000.0, 8.0)[0], rel=1e-12)
        want = R.llama3(64, 500000.0, 8.0, 2.0, 4.0, 8192)[0]
        assert curves["llama3"]["omega"] == pytest.approx(want, rel=1e-12)


def test_a_rules_own_param_wins_over_the_shared_one(capsys):
    code, out, _ = run(["spectrum", "--dim", "64", "--scaling", "yarn", "--scaling", "llama3", "--factor", "4",
                        "--param", "yarn.original_max_position_embeddings=2048",
                        "--param", "original_max_position_embeddings=1024", "--json"], capsys)
    assert code == 0
    curves = _curves(out)
    assert curves["yarn"]["omega"] == pytest.approx(R.yarn(64, 10000.0, 4.0, 2048)[0], rel=1e-12)
    assert curves["llama3"]["omega"] == pytest.approx(R.llama3(64, 10000.0, 4.0, 1.0, 4.0, 1024)[0], rel=1e-12)


def test_llama3_with_only_a_factor_takes_the_documented_defaults(capsys):
    code, out, _ = run(["spectrum", "--scaling", "llama3", "--factor", "8", "--json"], capsys)
    assert code == 0
    llama3 = _curves(out)["llama3"]
    # the help's defaults: dim 128, base 10000, window 4096; low 1, high 4, original = window
    assert llama3["omega"] == pytest.approx(R.llama3(128, 10000.0, 8.0, 1.0, 4.0, 4096)[0], rel=1e-12)
    assert llama3["window"] == 4096 * 8
    helptext = help_of("spectrum", capsys)
    assert "low_freq_factor=1, high_freq_factor=4" in helptext and "default 128" in helptext


def test_spectrum_defaults_are_the_documented_ones(capsys):
    _, implicit, _ = run(["spectrum", "--json"], capsys)
    _, explicit, _ = run(["spectrum", "--dim", "128", "--base", "10000", "--window", "4096", "--json"], capsys)
    assert implicit == explicit
    curve = json.loads(implicit)["curves"][0]
    assert curve["window"] == 4096 and curve["omega"] == pytest.approx(reference.pair_frequencies(128), rel=1e-15)


@pytest.mark.parametrize("argv,needles", [
    (["--scaling", "linear", "--factor", "2", "--param", "llama3.low_freq_factor=1"], ["llama3", "not among"]),
    (["--scaling", "linear", "--factor", "2", "--param", "beta_fast=16"], ["beta_fast", "no --scaling rule"]),
    (["--param", "factor=2"], ["--param", "--scaling"]),
    (["--scaling", "yarn", "--scaling", "yarn", "--factor", "2"], ["twice"]),
    (["--scaling", "llama3"], ["needs --factor"]),
    (["--scaling", "linear", "--factor", "2", "--param", "=3"], ["KEY=VALUE"]),
])
def test_param_mistakes_are_refused(argv, needles, capsys):
    refused(["spectrum", *argv], capsys, *needles)


# --------------------------------------------------------------------------- contract's exit status


def test_contract_exit_status_says_same_or_different(write, capsys):
    llama2, qwen = write(LLAMA2_7B, "a.json"), write(QWEN25_7B_YARN, "b.json")
    renamed = dict(LLAMA2_7B, model_type="mistral", num_key_value_heads=8)  # same positions, other model
    other = write(renamed, "c.json")
    assert run(["contract", llama2, other], capsys)[0] == 0
    assert run(["contract", llama2, qwen], capsys)[0] == 1
    assert run(["contract", llama2, write("{", "bad.json")], capsys)[0] == 2
    assert "1 two that define different ones" in help_of("contract", capsys)


def test_contract_exit_status_in_a_shell(write):
    a, b = write(LLAMA2_7B, "a.json"), write(LLAMA31_8B, "b.json")
    codes = [subprocess.run([sys.executable, "-m", "pyrope", "contract", *pair], capture_output=True,
                            cwd=ROOT).returncode for pair in ((a, a), (a, b))]
    assert codes == [0, 1]


# --------------------------------------------------------------------------- default-rule windows


def test_default_rule_window_is_the_configs_in_every_command(write, capsys):
    path = write(LLAMA2_7B)  # no rope_scaling, max_position_embeddings 4096
    code, out, _ = run(["contract", path], capsys)
    contract = json.loads(out)["contract"]
    assert code == 0 and (contract["original_window"], contract["target_window"]) == (4096, 4096)
    code, out, _ = run(["spectrum", path, "--json"], capsys)
    assert code == 0 and json.loads(out)["curves"][0]["window"] == 4096
    code, out, _ = run(["check", path], capsys)
    assert code == 0
    assert {4095, 4096, 8192} <= _checked_positions(out)


def _checked_positions(report):
    """The positions the ``rule`` line of a check report says it tested."""
    line = next(line for line in report.splitlines() if line.split()[1:2] == ["rule"])
    return set(json.loads(line[line.index("at positions") + len("at positions"):]))


def test_a_window_past_the_kernels_positions_is_checked_up_to_its_edge(write, capsys):
    config = dict(QWEN25_7B_YARN, max_position_embeddings=2**40)
    code, out, err = run(["check", write(config)], capsys)
    assert code == 0, err
    assert {2**31 - 2, 2**31 - 1} <= _checked_positions(out) and str(2**40) not in out


# --------------------------------------------------------------------------- the environment


@pytest.mark.parametrize("name,value", [("PYROPE_ISA", "bogus"), ("PYROPE_NUM_THREADS", "abc"),
                                        ("PYROPE_NUM_THREADS", "0")])
def test_a_bad_environment_variable_is_one_line_and_help_still_works(name, value, monkeypatch, capsys):
    monkeypatch.setenv(name, value)
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "usage: pyrope" in out
    code, out, _ = run(["demo", "--help"], capsys)
    assert code == 0 and "example" in out
    refused(["demo"], capsys, name, repr(value))


def test_good_environment_variables_pass(monkeypatch, capsys):
    monkeypatch.setenv("PYROPE_ISA", "scalar")
    monkeypatch.setenv("PYROPE_NUM_THREADS", "2")
    assert run(["spectrum", "--dim", "8", "--json"], capsys)[0] == 0


# --------------------------------------------------------------------------- bounded work


def test_spectrum_renders_each_curve_once_not_once_per_row(monkeypatch, capsys):
    from pyrope import spectrum
    counts = {"wavelength": 0, "turns": 0}
    for name in counts:
        prop = getattr(spectrum.Curve, name)

        def counted(self, _get=prop.fget, _name=name):
            counts[_name] += 1
            return _get(self)
        monkeypatch.setattr(spectrum.Curve, name, property(counted))
    code, out, _ = run(["spectrum", "--dim", "512", "--scaling", "linear", "--factor", "4"], capsys)
    assert code == 0 and len(out.splitlines()) == 1 + 256 + 3
    assert counts["wavelength"] <= 2 * 2 and counts["turns"] <= 2 * 2  # per curve, not per pair


def test_the_widest_spectrum_is_quick(capsys):
    start = time.monotonic()
    code, out, _ = run(["spectrum", "--dim", "65536"], capsys)  # the widest head pyrope accepts
    elapsed = time.monotonic() - start
    assert code == 0 and len(out.splitlines()) == 1 + 32768 + 2
    assert elapsed < 10, elapsed  # 4.6 s here when each row recomputed the arrays (the exact guard is above)


def test_demo_of_a_wide_head_is_quick_and_still_right(capsys):
    start = time.monotonic()
    code, out, _ = run(["demo", "--dim", "8192"], capsys)
    elapsed = time.monotonic() - start
    assert code == 0 and elapsed < 10, elapsed  # 21 s when the reference recomputed exact powers
    section = {b.split(".", 1)[0]: b for b in out.split("\n\n")}
    rows = [ln.split() for ln in section["2"].splitlines()[2:] if len(ln.split()) == 4]
    kernel, ref = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert max(abs(a - b) for a, b in zip(kernel, ref)) < 1e-4 * max(1.0, abs(ref[0]))
    omega = R.default(8192, 10000.0)[0]
    for row in (ln.split() for ln in section["3"].splitlines()[2:]):
        gap = int(row[0])
        assert int(row[-1]) == sum(gap * w / (2 * math.pi) < 1 for w in omega)


@pytest.mark.parametrize("argv,needle", [
    (["spectrum", "--dim", "10000000"], "--dim"),
    (["spectrum", "--dim", "7"], "even"),
    (["spectrum", "--window", "0"], "--window"),
    (["spectrum", "--window", str(2**40)], "--window"),
    (["spectrum", "--factor", "nan", "--scaling", "linear"], "--factor"),
    (["spectrum", "--scaling", "linear", "--factor", "1e308"], "'factor'"),
    (["demo", "--window", "-5"], "--window"),
    (["demo", "--dim", "1000000"], "--dim"),
    (["demo", "--base", "inf"], "--base"),
    (["check", "--head-dim", str(2**40), "--layout", "split_half"], "--head-dim"),
    (["contract", "x.json", "--seq-len", str(10**400)], "--seq-len"),
])
def test_absurd_numbers_are_refused_at_once(argv, needle, capsys):
    start = time.monotonic()
    refused(argv, capsys, needle)
    assert time.monotonic() - start < 2


@pytest.mark.parametrize("head_dim", [100_000_000, 2**40])
def test_a_tiny_config_with_a_huge_head_is_refused_quickly(head_dim, write, capsys):
    path = write({"head_dim": head_dim, "num_attention_heads": 1})  # 46 bytes that asked for 900 MB of output
    start = time.monotonic()
    refused(["contract", path], capsys, "head_dim", str(head_dim))
    assert time.monotonic() - start < 2


# --------------------------------------------------------------------------- one line, exit 2


def _yarn(**keys):
    return {"head_dim": 64, "num_attention_heads": 1,
            "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4096, **keys}}


HOSTILE_CONFIGS = {
    "nested 5000 deep": ("[" * 5000 + "]" * 5000, "too deeply"),
    "a 5000-digit integer": ('{"head_dim": ' + "7" * 5000 + "}", "4300 digits"),
    "a key twice": ('{"head_dim": 64, "head_dim": 128}', "'head_dim' twice"),
    "yarn factor 1e308": (_yarn(factor=1e308), "'factor'"),
    "yarn window 10**400": (_yarn(original_max_position_embeddings=10**400), "'original_max_position_embeddings'"),
    "llama3 factor 1e308": ({"head_dim": 64, "rope_scaling": {
        "rope_type": "llama3", "factor": 1e308, "low_freq_factor": 1, "high_freq_factor": 4,
        "original_max_position_embeddings": 8192}}, "'factor'"),
    "longrope factor 1e308": ({"head_dim": 4, "rope_scaling": {
        "rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1], "factor": 1e308,
        "original_max_position_embeddings": 4096}}, "'factor'"),
    "longrope window 2**64": ({"head_dim": 4, "max_position_embeddings": 2**64, "rope_scaling": {
        "rope_type": "longrope", "short_factor": [1, 1], "long_factor": [1, 1],
        "original_max_position_embeddings": 4096}}, "'max_position_embeddings'"),
    "ntk factor 1e300": ({"head_dim": 128, "rope_scaling": {"rope_type": "ntk", "factor": 1e300}}, "'factor'"),
    "ntk factor 10**400": ({"head_dim": 128, "rope_scaling": {"rope_type": "ntk", "factor": 10**400}}, "'factor'"),
    "dynamic factor 1e308": ({"head_dim": 64, "max_position_embeddings": 4096,
                              "rope_scaling": {"rope_type": "dynamic", "factor": 1e308}}, "'factor'"),
    "rope_theta 10**400": ({"head_dim": 64, "rope_theta": 10**400}, "'rope_theta'"),
    "hidden_size 10**400": ({"hidden_size": 10**400, "num_attention_heads": 8}, "hidden_size"),
    "attention_factor 1e300": (_yarn(attention_factor=1e300), "'attention_factor'"),
}


@pytest.mark.parametrize("command", ["contract", "check", "spectrum"])
@pytest.mark.parametrize("name", sorted(HOSTILE_CONFIGS))
def test_hostile_configs_are_one_line_and_exit_2(name, command, write, capsys):
    text, needle = HOSTILE_CONFIGS[name]
    flag = [] if command == "contract" else ["--config"]  # the form every version took
    refused([command, *flag, write(text)], capsys, needle)


def test_spectrum_plot_without_matplotlib_fails_before_printing(tmp_path):
    png = tmp_path / "s.png"
    code = ("import sys; sys.modules['matplotlib'] = None\n"   # import matplotlib now raises ImportError
            "from pyrope.cli import main\n"
            f"sys.exit(main(['spectrum', '--dim', '64', '--plot', {str(png)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and not png.exists()
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "matplotlib" in lines[0] and "Traceback" not in proc.stderr


def test_the_overflow_messages_name_the_key_not_a_5000_digit_number(write, capsys):
    err = refused(["contract", write(_yarn(original_max_position_embeddings=10**1000))], capsys)
    assert len(err) < 300 and "digits" in err


@pytest.mark.parametrize("name,value", [("PYROPE_ISA", "bogus"), ("PYROPE_NUM_THREADS", "abc")])
def test_bad_environment_in_a_real_process(name, value):
    """`import pyrope` survives a bad variable, so --help runs; a command refuses it in one line."""
    env = dict(os.environ, **{name: value})
    help_ = subprocess.run([sys.executable, "-m", "pyrope", "--help"], env=env, capture_output=True,
                           text=True, cwd=ROOT)
    assert help_.returncode == 0 and "usage: pyrope" in help_.stdout and help_.stderr == ""
    proc = subprocess.run([sys.executable, "-m", "pyrope", "demo"], env=env, capture_output=True, text=True,
                          cwd=ROOT)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and proc.stdout == "" and len(lines) == 1 and name in lines[0], proc.stderr
