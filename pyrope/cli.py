"""The ``pyrope`` command line (``python -m pyrope``)."""
import argparse
import sys


def build_parser():
    """The argument parser with every subcommand."""
    parser = argparse.ArgumentParser(
        prog="pyrope", description="Rotary position embedding for the CPU: inspect and check.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="the first seed's experiment: frequencies, rotary vs additive, turns",
        description="Run the rotary-vs-additive experiment through the kernel.\n\n"
                    "example: pyrope demo --dim 64 --base 10000",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    demo.add_argument("--dim", type=int, default=64, help="head dimension (even), default 64")
    demo.add_argument("--base", type=float, default=10000.0, help="RoPE base, default 10000")
    demo.add_argument("--window", type=int, default=4096, help="window for the turns column")
    return parser


def main(argv=None):
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    from .errors import RopeError
    try:
        if args.command == "demo":
            from .demo import render
            print(render(args.dim, args.base, args.window))
    except RopeError as exc:
        print(f"pyrope {args.command}: {exc}", file=sys.stderr)
        return 2
    return 0
