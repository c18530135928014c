"""The ``pyrope`` command line (also ``python -m pyrope``).

Every subcommand prints to stdout; errors are one line on stderr with exit
code 2 (a failed ``check`` exits 1).
"""
import argparse
import json
import sys

from .errors import RopeError

EXAMPLES = {
    "demo": "example: pyrope demo --dim 64 --base 10000",
    "spectrum": ("examples:\n"
                 "  pyrope spectrum --dim 128 --base 500000 --window 8192\n"
                 "  pyrope spectrum --dim 128 --window 4096 --scaling linear --scaling ntk "
                 "--scaling yarn --factor 8 --plot spectrum.png\n"
                 "  pyrope spectrum --config config.json --json"),
    "bench": ("examples:\n"
              "  pyrope bench --quick\n"
              "  pyrope bench --dtype float32 --dtype bfloat16 --case prefill_q --isa avx2\n"
              "  pyrope bench --json run.json --plot run.png\n"
              "  pyrope bench --load run.json --plot run.png      (tables and picture of a saved run)\n"
              "the full suite with pytest-benchmark: make bench"),
    "contract": ("examples:\n"
                 "  pyrope contract config.json\n"
                 "  pyrope contract config.json --seq-len 100000\n"
                 "  pyrope contract old/config.json new/config.json"),
    "check": ("examples:\n"
              "  pyrope check --head-dim 128 --layout split_half --base 500000\n"
              "  pyrope check --config config.json --harness"),
}


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class UsageError(Exception):
    """A bad command line that argparse itself cannot see."""


def _sub(sub, name, help_text, description):
    return sub.add_parser(name, help=help_text, description=description + "\n\n" + EXAMPLES[name],
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def build_parser():
    """The argument parser with every subcommand."""
    parser = _Parser(prog="pyrope",
                     description="Rotary position embedding for the CPU: inspect, check, benchmark.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = _sub(sub, "demo", "the first seed's experiment: frequencies, rotary vs additive, turns",
                "Run the rotary-vs-additive experiment through the kernel: the frequency table,\n"
                "the score for a fixed gap at different starts, and the pairs within one turn.")
    demo.add_argument("--dim", type=int, default=64, help="head dimension (even), default 64")
    demo.add_argument("--base", type=float, default=10000.0, help="RoPE base, default 10000")
    demo.add_argument("--window", type=int, default=4096, help="window for the turns column, default 4096")

    spec = _sub(sub, "spectrum", "per-pair frequency, wavelength and turns, with scaling rules side by side",
                "Show each pair's angular frequency, wavelength and turns over the window, and\n"
                "with --scaling (repeatable) the scaled frequencies side by side, measured over\n"
                "the extended window; --config reads a model's config.json instead.")
    spec.add_argument("--dim", type=int, help="rotary dimension (even); default 128 without --config")
    spec.add_argument("--base", type=float, help="RoPE base; default 10000 without --config")
    spec.add_argument("--window", type=int, help="original context window; default 4096 without --config")
    spec.add_argument("--config", help="a model's config.json (its rule is shown against the plain one)")
    spec.add_argument("--seq-len", type=int, help="current length, for dynamic and longrope configs")
    spec.add_argument("--scaling", action="append", default=[], metavar="RULE",
                      help="linear, ntk, dynamic, yarn, llama3 ... (repeatable)")
    spec.add_argument("--factor", type=float, default=None, help="scaling factor s for --scaling rules")
    spec.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                      help="extra rule parameter, e.g. beta_fast=32 (repeatable, JSON values)")
    spec.add_argument("--plot", metavar="PNG", help="write a wavelength plot (needs matplotlib)")
    spec.add_argument("--json", action="store_true", help="print JSON instead of a table")

    con = _sub(sub, "contract", "the resolved position contract of a config.json, or the diff of two",
               "Print the resolved contract (layout, dims, inv_freq, attention factor, rule,\n"
               "windows) and its fingerprint; with two configs, say whether they define the same\n"
               "position function and which fields differ.")
    con.add_argument("configs", nargs="+", metavar="config.json", help="one or two config files")
    con.add_argument("--seq-len", type=int, help="current length, for dynamic and longrope configs")
    con.add_argument("--layout", choices=["split_half", "interleaved"],
                     help="pair layout of the checkpoint (default: read from the config: rope_interleave, "
                          "else the model family)")

    chk = _sub(sub, "check", "self-check a rope: rule, norm, relative positions, inverse; exit 1 on failure",
               "Rotate sample vectors and verify the rope against independent computations\n"
               "(stdlib reference, norms, shifted positions up to 2**30, inverse); with\n"
               "--harness also run prefill == decode == chunked == paged on a tiny model.")
    chk.add_argument("--head-dim", type=int, help="head dimension (even); required without --config")
    chk.add_argument("--layout", choices=["split_half", "interleaved"],
                     help="pair layout; required without --config (with it: read from the config)")
    chk.add_argument("--base", type=float, default=10000.0, help="RoPE base, default 10000")
    chk.add_argument("--rotary-dim", type=int, default=None, help="rotated prefix (default head dim)")
    chk.add_argument("--config", help="a model's config.json instead of --head-dim/--base")
    chk.add_argument("--seq-len", type=int, help="current length, for dynamic and longrope configs")
    chk.add_argument("--harness", action="store_true", help="also run the consistency harness")
    bench = _sub(sub, "bench", "rotation speed against the bandwidth yardstick and the peers, per ISA",
                 "Rotate q/k for the standard shapes under each instruction set and print median\n"
                 "times, GB/s, the fraction of a bandwidth yardstick (a C read+write pass over as\n"
                 "many bytes, the better of 1 and N threads), the speed-up over avx2, the other\n"
                 "layout and numpy, torch and onnxruntime (when installed), then the issue's\n"
                 "targets. Every contender is checked against the reference before it is timed,\n"
                 "warmed ~10 ms after each idle gap, and timed in rotating order; figures are\n"
                 "medians of per-round ratios.")
    bench.add_argument("--quick", action="store_true",
                       help="float32 decode, small and prefill-k shapes, 9 rounds (about 15 s)")
    bench.add_argument("--case", action="append", default=[],
                       help="prefill_q_8192, prefill_q, prefill_k, decode, decode_64, small "
                            "(repeatable; default all)")
    bench.add_argument("--dtype", action="append", default=[],
                       help="float32, float16, bfloat16 (repeatable; default all)")
    bench.add_argument("--layout", action="append", default=[], choices=["split_half", "interleaved"],
                       help="(repeatable; default both)")
    bench.add_argument("--isa", action="append", default=[],
                       help="instruction set to time pyrope under (repeatable; default every supported "
                            "one but scalar)")
    bench.add_argument("--rounds", type=int, default=None, help="timed rounds per case")
    bench.add_argument("--no-peers", action="store_true", help="skip numpy, torch and onnxruntime")
    bench.add_argument("--json", metavar="PATH", help="also write the run as JSON (machine, rows, targets)")
    bench.add_argument("--plot", metavar="PNG", help="draw the fraction of the yardstick (needs matplotlib)")
    bench.add_argument("--note", help="a line added to the picture's caption")
    bench.add_argument("--load", metavar="PATH", help="print (and --plot) a run saved with --json; time nothing")
    return parser


def _parse_params(items):
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--param must look like KEY=VALUE, got {item!r}")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def cmd_demo(args):
    """``pyrope demo``."""
    from .demo import render
    print(render(args.dim, args.base, args.window))
    return 0


def cmd_spectrum(args):
    """``pyrope spectrum``."""
    from . import spectrum
    from .rope import Rope
    scaled = []
    if args.config:
        if args.dim is not None or args.base is not None:
            raise UsageError("--config gives dim and base; do not pass --dim or --base with it")
        rope = Rope.from_hf_config(args.config, seq_len=args.seq_len)  # layout: the config's (no effect here)
        plain = Rope(rope.rotary_dim, layout=rope.layout, base=rope.base)
        window = args.window or rope._resolved.original_window or _config_window(args.config)
        if rope._resolved.rule != "default":
            scaled.append((rope._resolved.rule, rope))
    else:
        dim = 128 if args.dim is None else args.dim
        base = 10000.0 if args.base is None else args.base
        window = 4096 if args.window is None else args.window
        plain = Rope(dim, layout="interleaved", base=base)
    if window is None or window < 1:
        raise UsageError(f"--window must be a positive integer, got {window!r}")
    extra = _parse_params(args.param)
    for rule in args.scaling:
        if args.factor is None and rule not in ("default", "longrope", "freq_factors", "proportional"):
            raise UsageError(f"--scaling {rule} needs --factor")
        scaled.append((rule, spectrum.rope_for_rule(plain.rotary_dim, plain.base, rule, factor=args.factor,
                                                    window=window, extra=extra)))
    curves = spectrum.curves_for(plain, window, scaled)
    if args.json:
        print(json.dumps(spectrum.as_dict(curves), indent=1))
    else:
        print(spectrum.render(curves))
    if args.plot:
        spectrum.plot(curves, args.plot)
        if not args.json:
            print(f"\nwrote {args.plot}")
    return 0


def _config_window(path):
    from .config import load_hf_config
    value = load_hf_config(path).get("max_position_embeddings")
    return value if isinstance(value, int) else None


def cmd_contract(args):
    """``pyrope contract``."""
    from .rope import Rope
    if len(args.configs) > 2:
        raise UsageError(f"contract takes one or two config files, got {len(args.configs)}")
    ropes = [Rope.from_hf_config(p, layout=args.layout, seq_len=args.seq_len) for p in args.configs]
    if len(ropes) == 1:
        print(json.dumps({"contract": ropes[0].contract(), "fingerprint": ropes[0].fingerprint}, indent=1))
        return 0
    a, b = (r.contract() for r in ropes)
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    if not differing:
        print(f"same position function (fingerprint {ropes[0].fingerprint})")
        return 0
    print("different position functions:")
    print(f"  fingerprints: {ropes[0].fingerprint} vs {ropes[1].fingerprint}")
    for key in differing:
        va, vb = a.get(key), b.get(key)
        if isinstance(va, list) and isinstance(vb, list):
            if len(va) == len(vb):
                n = sum(x != y for x, y in zip(va, vb))
                print(f"  {key}: {n} of {len(va)} entries differ")
            else:
                print(f"  {key}: {len(va)} vs {len(vb)} entries")
        else:
            print(f"  {key}: {json.dumps(va)} vs {json.dumps(vb)}")
    return 0


def cmd_check(args):
    """``pyrope check``: the sanity report (and the harness); exit 1 when anything fails."""
    from .check import sanity
    from .rope import Rope
    if args.config:
        if args.head_dim is not None or args.rotary_dim is not None:
            raise UsageError("--config gives the dims; do not pass --head-dim or --rotary-dim with it")
        rope = Rope.from_hf_config(args.config, layout=args.layout, seq_len=args.seq_len)
    else:
        if args.head_dim is None or args.layout is None:
            raise UsageError("pass --head-dim and --layout (or --config)")
        rope = Rope(args.head_dim, layout=args.layout, base=args.base, rotary_dim=args.rotary_dim)
    bar = _ProgressBar()
    report = sanity(rope, progress=bar)
    bar.close()
    print(report)
    ok = report.ok
    if args.harness:
        from .testing import Harness
        print("consistency harness (tiny GQA model, float64 attention):")
        for result in Harness(rope).check():
            print(f"  {result}")
            ok = ok and result.ok
    return 0 if ok else 1


class _ProgressBar:
    """A progress bar on stderr, shown only once a run has taken a second."""

    def __init__(self, width=30, delay=1.0):
        import time
        self._clock = time.monotonic
        self._start = self._clock()
        self._width, self._delay, self._shown = width, delay, False

    def __call__(self, done, total, name):
        if self._clock() - self._start < self._delay:
            return
        filled = self._width * done // total
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (self._width - filled)}] {done}/{total} {name:10s}")
        sys.stderr.flush()
        self._shown = True

    def close(self):
        if self._shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def cmd_bench(args):
    """``pyrope bench``."""
    from . import _bench_report as report
    if args.load:
        if args.case or args.dtype or args.layout or args.isa or args.rounds is not None or args.quick \
                or args.no_peers or args.json:
            raise UsageError("--load prints a saved run: pass only --plot and --note with it")
        rows, machine = report.read_json(args.load)
    else:
        rows, machine = report.as_saved(*_bench_run(args))
    print(report.markdown(rows, machine))
    if args.json:
        report.write_json(args.json, rows, machine)
        print(f"\nwrote {args.json}")
    if args.plot:
        from ._bench_plot import plot
        plot(rows, machine, args.plot, note=args.note)
        print(f"\nwrote {args.plot}")
    return 0


def _bench_run(args):
    from . import _bench_report as report
    from . import _kernel, benchmark
    cases = args.case or (["decode", "small", "prefill_k"] if args.quick else list(benchmark.SHAPES))
    dtypes = args.dtype or (["float32"] if args.quick else list(benchmark.DTYPES))
    isas = args.isa or benchmark.default_isas()
    supported = _kernel.supported_isas()
    for name, value, known in (("--case", cases, benchmark.SHAPES), ("--dtype", dtypes, benchmark.DTYPES),
                               ("--isa", isas, supported)):
        unknown = [v for v in value if v not in known]
        if unknown:
            raise UsageError(f"{name} must be one of {', '.join(known)}; got {', '.join(unknown)}")
    rounds = args.rounds if args.rounds is not None else (9 if args.quick else None)
    if rounds is not None and rounds < 1:
        raise UsageError(f"--rounds must be at least 1, got {rounds}")
    machine = report.machine_info()
    machine["peer_notes"] = benchmark.Case.peer_notes(not args.no_peers)
    bar = _ProgressBar()
    rows = benchmark.run(cases, dtypes, layouts=args.layout or benchmark.LAYOUTS, isas=list(dict.fromkeys(isas)),
                         rounds=rounds, peers=not args.no_peers, progress=bar)
    bar.close()
    machine["load_average_end"] = report.machine_info()["load_average"]
    return rows, machine


COMMANDS = {"demo": cmd_demo, "spectrum": cmd_spectrum, "contract": cmd_contract, "check": cmd_check,
            "bench": cmd_bench}


def main(argv=None):
    """Entry point of the ``pyrope`` command; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RopeError, UsageError, OSError) as exc:
        print(f"pyrope {args.command}: error: {exc}", file=sys.stderr)
        return 2
