"""The ``wirelessfl`` command.

Subcommands: ``run`` (train a preset or YAML config), ``list`` (presets), ``plot`` (PNG of
run folders). Bad input prints one line ``wirelessfl: error: ...`` on stderr and exits
with code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from wirelessfl.config import ConfigError, apply_overrides, list_presets, load_raw


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"wirelessfl: error: {message}\n")


def _cmd_run(args: argparse.Namespace) -> int:
    from wirelessfl.config import resolve
    from wirelessfl.plotting import plot_runs
    from wirelessfl.records import RunRecord
    from wirelessfl.runner import prepare, run

    if args.config is None and not (args.resume and args.out):
        raise ConfigError("name a preset or YAML file (`wirelessfl list` shows presets), or "
                          "pass --resume --out RUN_DIR")
    raw = load_raw(args.config) if args.config else RunRecord(args.out).config()
    overrides = list(args.set or [])
    if args.device:
        overrides.append(f"device={args.device}")
    if args.engine:
        overrides.append(f"engine={args.engine}")
    cfg = resolve(apply_overrides(raw, overrides))
    out = Path(args.out) if args.out else Path("runs") / f"{cfg.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    exp = prepare(cfg)
    try:
        summary = run(exp, out, resume=args.resume, quiet=args.quiet)
    except KeyboardInterrupt:
        print(f"\ninterrupted; completed rounds are kept in {out}. Continue with: "
              f"wirelessfl run --resume --out {out}", file=sys.stderr)
        return 130
    png = plot_runs([out], out / "accuracy.png")
    line = (f"{cfg.name}: {summary['rounds']} rounds, test accuracy "
            f"{summary['final_accuracy']:.4f} (best {summary['best_accuracy']:.4f}), "
            f"uplink {summary['uplink_mb_per_client']:.2f} MB/client")
    if summary.get("sim_time_s") is not None:
        line += f", simulated {summary['sim_time_s']:.1f} s"
    print(f"{line}, {summary['wall_s']:.1f} s wall; run folder {out}; plot {png}")
    return 0


def _cmd_list(args: argparse.Namespace) -> int:
    presets = list_presets()
    if not presets:
        print("no presets found (looked under experiments/)")
    for name, path in presets.items():
        desc = load_raw(str(path)).get("description", "")
        print(f"{name:28s} {desc}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from wirelessfl.plotting import plot_runs

    for f in args.runs:
        if not (Path(f) / "metrics.jsonl").is_file():
            raise ConfigError(f"{f} is not a run folder (no metrics.jsonl)")
    out = args.out or (Path(args.runs[0]) / "accuracy.png" if len(args.runs) == 1
                       else Path("comparison.png"))
    print(plot_runs(args.runs, out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``wirelessfl``."""
    p = _Parser(prog="wirelessfl", description="Federated learning over wireless networks.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="train a preset or YAML config")
    r.add_argument("config", nargs="?", help="preset name or path to a YAML file")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set local.lr=0.05 (repeatable)")
    r.add_argument("--out", help="run folder (default runs/<name>-<time>)")
    r.add_argument("--device", choices=["cpu", "cuda", "auto"])
    r.add_argument("--engine", choices=["loop", "auto"])
    r.add_argument("--resume", action="store_true", help="continue the run in --out")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_cmd_run)
    lst = sub.add_parser("list", help="list presets")
    lst.set_defaults(func=_cmd_list)
    pl = sub.add_parser("plot", help="plot run folders to a PNG")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--out", help="PNG path")
    pl.set_defaults(func=_cmd_plot)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ValueError as exc:  # bad input, detected before training (ConfigError, data errors)
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"wirelessfl: error: {msg}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
