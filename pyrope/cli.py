"""The ``pyrope`` command line (also ``python -m pyrope``).

Every subcommand prints to stdout. Exit status: 0 done; 1 a failed ``check``,
or ``contract`` of two configs that define different position functions (as
``diff`` and ``cmp``); 2 an error, said in one line on stderr. The numbers a
command takes are bounded (dims by the library's largest head, windows and
lengths by the kernel's positions), so no input runs for more than seconds.
"""
import argparse
import json
import math
import os
import sys

from .errors import RopeError
from ._engine.checks import MAX_HEAD_DIM

EXAMPLES = {
    "demo": "example: pyrope demo --dim 64 --base 10000",
    "spectrum": ("examples:\n"
                 "  pyrope spectrum --dim 128 --base 500000 --window 8192\n"
                 "  pyrope spectrum --dim 128 --window 4096 --scaling linear --scaling ntk "
                 "--scaling yarn --factor 8 --plot spectrum.png\n"
                 "  pyrope spectrum --scaling linear --scaling llama3 --factor 8 --param llama3.low_freq_factor=2\n"
                 "  pyrope spectrum config.json --json"),
    "bench": ("examples:\n"
              "  pyrope bench --quick\n"
              "  pyrope bench --dtype float32 --dtype bfloat16 --case prefill_q --isa avx2\n"
              "  pyrope bench --json run.json --plot run.png\n"
              "  pyrope bench --load run.json --plot run.png      (tables and picture of a saved run)\n"
              "the full suite with pytest-benchmark: make bench"),
    "contract": ("examples:\n"
                 "  pyrope contract config.json\n"
                 "  pyrope contract config.json --seq-len 100000\n"
                 "  pyrope contract old/config.json new/config.json && echo same\n"
                 "exit status: 0 one config read, or two that define the same position function;\n"
                 "1 two that define different ones (as diff and cmp); 2 an error."),
    "check": ("examples:\n"
              "  pyrope check --head-dim 128 --layout split_half --base 500000\n"
              "  pyrope check config.json --harness\n"
              "  pyrope check gemma3/config.json --layer-type sliding_attention"),
}

# Bounds of the numbers the commands take: a head no wider than the library
# accepts (65536), so the work and the output (a row
# or an entry per pair) stay a few MB and seconds; windows and lengths of
# tokens the kernel has positions for (0 .. ROPE_MAX_POSITION).
MAX_WINDOW = 2**31


def _rule_help():
    from .spectrum import RULE_DEFAULTS
    return "rule defaults (a --param overrides them): " + "; ".join(
        f"{rule}: {text}" for rule, text in RULE_DEFAULTS.items())


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (exit code 2, no usage dump)."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message}\n")


class UsageError(Exception):
    """A bad command line that argparse itself cannot see."""


def _sub(sub, name, help_text, description):
    return sub.add_parser(name, help=help_text, description=description + "\n\n" + EXAMPLES[name],
                          formatter_class=argparse.RawDescriptionHelpFormatter)


def _bounded_int(low, high):
    """An argparse type: an integer in [low, high], else one line naming the bounds."""
    def parse(text):
        try:
            value = int(text, 10)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be an integer in [{low}, {high}], got {value}")
        return value
    return parse


def _positive_float(text):
    """An argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def _dim(default_text):
    # the bound here, before any work; evenness is the library's (its message names the argument)
    return dict(type=_bounded_int(2, MAX_HEAD_DIM), metavar="D", help=default_text)


def _config_args(parser, many=False):
    """The config.json (positional, also as --config), --layer-type and --seq-len."""
    parser.add_argument("configs", nargs="*" if many else "?", metavar="config.json",
                        help="a model's config.json (or its folder)" + (" ; two to compare" if many else ""))
    parser.add_argument("--config", action="append", default=[], metavar="PATH", dest="config_options",
                        help="the same as the positional config.json")
    parser.add_argument("--layer-type", metavar="TYPE",
                        help="for a config whose rope_parameters are given per layer type (Gemma 3/4, "
                             "transformers 5): which one, e.g. full_attention or sliding_attention")
    parser.add_argument("--seq-len", type=_bounded_int(1, MAX_WINDOW), metavar="N",
                        help="the length the frequencies are for, for dynamic and longrope configs "
                             "(dynamic, as transformers: the longest length its module has kept, "
                             "pyrope.scaling.dynamic_seq_len)")


def version_text(c_version=None):
    """What ``pyrope --version`` prints, e.g. ``pyrope 0.2.0``. ``c_version``: the C
    library's ``rope_version()`` (default: the loaded one's); a build older or
    newer than the Python package (a stale in-place build) is named too."""
    from . import __version__
    from ._engine import binding as _binding
    code = _binding.lib.rope_version() if c_version is None else c_version
    built = f"{code // 10000}.{code // 100 % 100}.{code % 100}"
    if built == __version__:
        return f"pyrope {__version__}"
    return f"pyrope {__version__} (its C library is {built}: a stale build; rebuild it, make build)"


def build_parser():
    """The argument parser with every subcommand."""
    parser = _Parser(prog="pyrope",
                     description="Rotary position embedding for the CPU: inspect, check, benchmark.")
    parser.add_argument("--version", action="version", version=version_text(),
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    demo = _sub(sub, "demo", "the first seed's experiment: frequencies, rotary vs additive, turns",
                "Run the rotary-vs-additive experiment through the kernel: the frequency table,\n"
                "the score for a fixed gap at different starts, and the pairs within one turn.")
    demo.add_argument("--dim", default=64, **_dim(f"head dimension (even, at most {MAX_HEAD_DIM}), default 64"))
    demo.add_argument("--base", type=_positive_float, default=10000.0, help="RoPE base, default 10000")
    demo.add_argument("--window", type=_bounded_int(1, MAX_WINDOW), default=4096, metavar="L",
                      help="window for the turns column, default 4096")

    spec = _sub(sub, "spectrum", "per-pair frequency, wavelength and turns, with scaling rules side by side",
                "Show each pair's angular frequency, wavelength and turns over the window, and\n"
                "with --scaling (repeatable) the scaled frequencies side by side, measured over\n"
                "the extended window; a config.json instead shows that model's rule.")
    spec.add_argument("--dim", **_dim(f"rotary dimension (even, at most {MAX_HEAD_DIM}); "
                                      "default 128 without a config"))
    spec.add_argument("--base", type=_positive_float, help="RoPE base; default 10000 without a config")
    spec.add_argument("--window", type=_bounded_int(1, MAX_WINDOW), metavar="L",
                      help="original context window; default 4096, or the config's")
    _config_args(spec)
    spec.add_argument("--scaling", action="append", default=[], metavar="RULE",
                      help="linear, ntk, dynamic, yarn, llama3, longrope, proportional, freq_factors (repeatable)")
    spec.add_argument("--factor", type=_positive_float, default=None,
                      help="scaling factor s for the --scaling rules")
    spec.add_argument("--param", action="append", default=[], metavar="[RULE.]KEY=VALUE",
                      help="a rule parameter (JSON value, repeatable): RULE.KEY=VALUE for that rule only, "
                           "KEY=VALUE for every --scaling rule that reads KEY (e.g. beta_fast=32). " + _rule_help())
    spec.add_argument("--plot", metavar="PNG", help="write a wavelength plot (needs matplotlib)")
    spec.add_argument("--json", action="store_true", help="print JSON instead of a table")

    con = _sub(sub, "contract", "the resolved position contract of a config.json, or the diff of two",
               "Print the resolved contract (layout, dims, inv_freq, attention factor, rule,\n"
               "windows) and its fingerprint; with two configs, say whether they define the same\n"
               "position function and which fields differ (exit 0 same, 1 different).")
    _config_args(con, many=True)
    con.add_argument("--layout", choices=["split_half", "interleaved"],
                     help="pair layout of the checkpoint (default: read from the config: rope_interleave, "
                          "else the model family)")

    chk = _sub(sub, "check", "self-check a rope: rule, norm, relative positions, inverse; exit 1 on failure",
               "Rotate sample vectors and verify the rope against independent computations\n"
               "(stdlib reference, norms, shifted positions up to 2**30, inverse, the window's\n"
               "edges); with --harness also run prefill == decode == chunked == paged on a tiny model.")
    _config_args(chk)
    chk.add_argument("--head-dim", **_dim("head dimension (even); required without a config"))
    chk.add_argument("--layout", choices=["split_half", "interleaved"],
                     help="pair layout; required without a config (with one: read from it)")
    chk.add_argument("--base", type=_positive_float, help="RoPE base, default 10000 (not with a config)")
    chk.add_argument("--rotary-dim", **_dim("rotated prefix (default: the head dim; not with a config)"))
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


def _configs(args, most=1):
    """The config paths given as positionals or --config (at most ``most``)."""
    paths = list(args.configs if isinstance(args.configs, list) else [args.configs] if args.configs else [])
    paths += args.config_options
    if len(paths) > most:
        raise UsageError(f"{args.command} takes {'one or two config files' if most == 2 else 'one config file'}, "
                         f"got {len(paths)}: {' '.join(paths)}")
    return paths


def _rope_from_config(path, args, layout=None):
    """The Rope of a config.json for the command line: --layer-type checked against what it has."""
    from .config import rope_layer_types
    from .rope import Rope
    types = rope_layer_types(path)
    if types is not None and args.layer_type is None:
        raise UsageError(f"{path} gives its rope per layer type: pass --layer-type {' or '.join(types)}")
    if types is None and args.layer_type is not None:
        raise UsageError(f"--layer-type {args.layer_type}: {path} has one rope for every layer")
    if types is not None and args.layer_type not in types:
        raise UsageError(f"--layer-type must be {' or '.join(types)} for {path}, got {args.layer_type!r}")
    return Rope.from_hf_config(path, layout=layout, seq_len=args.seq_len, layer_type=args.layer_type)


def _without_config(args):
    """Refuse --seq-len / --layer-type given without a config."""
    given = [name for name in ("--seq-len", "--layer-type")
             if getattr(args, name[2:].replace("-", "_")) is not None]
    if given:
        raise UsageError(f"{' and '.join(given)} read{'s' if len(given) == 1 else ''} a config.json: "
                         f"pass one (or leave {' and '.join(given)} out)")


def _parse_params(items, rules):
    """``--param`` values as ``{rule: {key: value}}`` for the ``--scaling`` rules.

    ``RULE.KEY=VALUE`` sets KEY for RULE only; ``KEY=VALUE`` sets it for every
    rule that reads KEY (at least one must); a rule's own value wins over the
    shared one, whatever the order. Values are JSON (else a string)."""
    from .spectrum import rule_keys
    shared, own = {}, {rule: {} for rule in rules}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"--param must look like KEY=VALUE or RULE.KEY=VALUE, got {item!r}")
        try:
            value = json.loads(text)
        except ValueError:  # JSONDecodeError, or an integer past the 4300-digit limit
            value = text
        except RecursionError:
            raise UsageError(f"--param {name}: the value nests too deeply") from None
        rule, dot, key = name.rpartition(".")
        if not dot:
            shared[key] = value
        elif rule not in own:
            raise UsageError(f"--param {item!r} is for rule {rule!r}, which is not among the --scaling rules "
                             f"({', '.join(rules) or 'none'})")
        else:
            own[rule][key] = value
    for key in shared:
        readers = [rule for rule in rules if key in rule_keys(rule)]
        if not readers:
            raise UsageError(f"--param {key}: no --scaling rule reads {key!r} "
                             f"(rules: {', '.join(rules) or 'none'})")
        for rule in readers:
            own[rule].setdefault(key, shared[key])
    return own


def cmd_demo(args):
    """``pyrope demo``."""
    from .demo import render
    print(render(args.dim, args.base, args.window))
    return 0


def cmd_spectrum(args):
    """``pyrope spectrum``."""
    from . import spectrum
    from .rope import Rope
    if args.plot:  # before any work or output: a missing extra is known now
        spectrum.require_matplotlib()
    paths = _configs(args)
    for rule in args.scaling:
        spectrum.rule_keys(rule)  # an unknown rule, before anything else
    if len(set(args.scaling)) != len(args.scaling):
        raise UsageError(f"--scaling names a rule twice: {' '.join(args.scaling)}")
    if args.param and not args.scaling:
        raise UsageError("--param sets parameters of the --scaling rules: pass --scaling")
    params = _parse_params(args.param, args.scaling)
    scaled = []
    if paths:
        if args.dim is not None or args.base is not None:
            raise UsageError("a config gives dim and base; do not pass --dim or --base with it")
        rope = _rope_from_config(paths[0], args)  # layout: the config's (no effect here)
        plain = Rope(rope.rotary_dim, layout=rope.layout, base=rope.base)
        resolved = rope.resolved
        window = args.window or resolved.original_window or _config_window(paths[0])
        if window is None:
            raise UsageError(f"{paths[0]} names no window (max_position_embeddings): pass --window")
        if resolved.rule != "default":
            scaled.append((resolved.rule, rope))
    else:
        _without_config(args)
        dim = 128 if args.dim is None else args.dim
        base = 10000.0 if args.base is None else args.base
        window = 4096 if args.window is None else args.window
        plain = Rope(dim, layout="interleaved", base=base)
    for rule in args.scaling:
        own = params[rule]
        has_factor = args.factor is not None or "factor" in own or (rule == "dynamic" and "alpha" in own)
        if not has_factor and rule in ("linear", "ntk", "dynamic", "yarn", "llama3"):
            raise UsageError(f"--scaling {rule} needs --factor (or --param {rule}.factor=S)")
        scaled.append((rule, spectrum.rope_for_rule(plain.rotary_dim, plain.base, rule, factor=args.factor,
                                                    window=window, extra=own)))
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
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 1 else None


def cmd_contract(args):
    """``pyrope contract``: exit 0 for one config or two with the same position function, 1 when they differ."""
    paths = _configs(args, most=2)
    if not paths:
        raise UsageError("contract takes one or two config files, got none")
    ropes = [_rope_from_config(p, args, layout=args.layout) for p in paths]
    if len(ropes) == 1:
        print(json.dumps({"contract": ropes[0].contract(), "fingerprint": ropes[0].fingerprint}, indent=1))
        return 0
    if ropes[0].fingerprint == ropes[1].fingerprint:
        print(f"same position function (fingerprint {ropes[0].fingerprint})")
        return 0
    a, b = (r.contract() for r in ropes)
    differing = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
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
    return 1


def cmd_check(args):
    """``pyrope check``: the sanity report (and the harness); exit 1 when anything fails."""
    from .check import sanity
    from .rope import Rope
    paths = _configs(args)
    if paths:
        given = [flag for flag, value in (("--head-dim", args.head_dim), ("--rotary-dim", args.rotary_dim),
                                          ("--base", args.base)) if value is not None]
        if given:
            raise UsageError(f"a config gives the dims and base; do not pass {' or '.join(given)} with it")
        rope = _rope_from_config(paths[0], args, layout=args.layout)
    else:
        _without_config(args)
        if args.head_dim is None or args.layout is None:
            raise UsageError("pass --head-dim and --layout (or a config.json)")
        base = 10000.0 if args.base is None else args.base
        rope = Rope(args.head_dim, layout=args.layout, base=base, rotary_dim=args.rotary_dim)
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
    from ._bench import report
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
        from ._bench.plot import plot
        plot(rows, machine, args.plot, note=args.note)
        print(f"\nwrote {args.plot}")
    return 0


def _bench_run(args):
    from ._bench import report
    from ._engine import isa as _isa
    from . import benchmark
    cases = args.case or (["decode", "small", "prefill_k"] if args.quick else list(benchmark.SHAPES))
    dtypes = args.dtype or (["float32"] if args.quick else list(benchmark.DTYPES))
    isas = args.isa or benchmark.default_isas()
    supported = _isa.supported_isas()
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


def _environment_problem():
    """Why PYROPE_ISA or PYROPE_NUM_THREADS cannot be used (one line), or None."""
    from ._engine import binding as _binding, isa as _isa
    isa = os.environ.get("PYROPE_ISA", "").strip().lower()
    if isa and isa != "auto" and isa not in _isa.supported_isas():
        known = "auto, " + ", ".join(_isa.supported_isas())
        return f"environment variable PYROPE_ISA must be one of {known} on this machine, got {isa!r}"
    text = os.environ.get("PYROPE_NUM_THREADS", "").strip()
    if text:
        try:
            n = int(text, 10)
        except ValueError:
            n = 0
        if not 1 <= n <= _binding.MAX_THREADS:
            return (f"environment variable PYROPE_NUM_THREADS must be an integer 1..{_binding.MAX_THREADS}, "
                    f"got {text!r}")
    return None


def main(argv=None):
    """Entry point of the ``pyrope`` command; returns the exit code (0 done, 1 a
    failed check or, for ``contract``, different position functions, 2 an error)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as done:  # --help (0) or a usage error (2, already printed on one line)
        return done.code
    try:
        problem = _environment_problem()
        if problem is not None:
            raise UsageError(problem)
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # output piped into `head` and the like: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except (RopeError, UsageError, OSError) as exc:
        message = str(exc).replace("\n", " ")
        print(f"pyrope {args.command}: error: {message}", file=sys.stderr)
        return 2
    except MemoryError:
        print(f"pyrope {args.command}: error: out of memory (an input far larger than any model's?)", file=sys.stderr)
        return 2
