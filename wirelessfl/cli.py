"""The ``wirelessfl`` command.

Subcommands: ``run`` (train a preset or YAML config), ``list`` (presets, or algorithms),
``plot`` (PNG of run folders), ``retime`` (a finished run's simulated time under another
link), ``masks`` (latency-optimal HIST mask sizes), ``beamform`` (AirComp receive beams),
``figures`` (regenerate a paper's figures and tables) and ``sweep`` (a config over a grid of
settings and seeds). Bad input prints one line ``wirelessfl: error: ...`` on stderr and exits
with code 2, before anything is written.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from wirelessfl.errors import ConfigError, TrainingDiverged

# The parser, --help and argument errors import nothing heavy (no torch, no algorithm): each
# command imports what it uses when it runs.


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"wirelessfl: error: {message}\n")


def _cmd_run(args: argparse.Namespace) -> int:
    from wirelessfl.report.plotting import plot_runs
    from wirelessfl.run.kinds import kind_of, open_run, run_job
    from wirelessfl.run.records import RunRecord
    from wirelessfl.run.trackers import make_trackers

    if args.config == "":
        raise ConfigError("name a preset or YAML file (`wirelessfl list` shows presets)")
    if args.config is None and not (args.resume and args.out):
        raise ConfigError("name a preset or YAML file (`wirelessfl list` shows presets), or "
                          "pass --resume --out RUN_DIR")
    from wirelessfl.run.config import apply_overrides, load_raw

    raw = load_raw(args.config) if args.config else None
    if args.resume and args.out:
        _need_plugins(RunRecord(args.out).plugins(), f"--resume {args.out}",
                      raw if raw is not None else RunRecord(args.out).config())
    raw = raw if raw is not None else RunRecord(args.out).config()
    overrides = list(args.set or [])
    if args.device:
        overrides.append(f"device={args.device}")
    if args.engine:
        overrides.append(f"engine={args.engine}")
    if args.workers is not None:
        overrides.append(f"workers={args.workers}")
    if args.deterministic:
        if not kind_of(raw).deterministic:
            raise ConfigError("--deterministic is for round-based runs, not multi-task ones")
        overrides.append("deterministic=true")
    raw = apply_overrides(raw, overrides)
    if args.checkpoint_every is not None and kind_of(raw).name == "rounds":
        raise ConfigError("--checkpoint-every (seconds) is for multi-task runs; a round-based run "
                          "checkpoints every `checkpoint_every` rounds: --set checkpoint_every=N")
    job = open_run(raw, checkpoint_every_s=60.0 if args.checkpoint_every is None
                   else args.checkpoint_every)
    if args.workers is not None and getattr(getattr(job, "cfg", None), "engine", None) \
            != "distributed":
        raise ConfigError("--workers is the process count of the distributed engine: add "
                          "--engine distributed, or remove --workers")
    make_trackers(args.tracker)  # a missing library is refused before the run folder is made
    out = Path(args.out) if args.out else _fresh_run_folder(job.name)
    try:
        summary = run_job(job, out, resume=args.resume, quiet=args.quiet, trackers=args.tracker)
    except KeyboardInterrupt as exc:
        print(f"\n{_stopped(exc)}; {job.kept} are kept in {out}. Continue with: "
              f"wirelessfl run --resume --out {out}", file=sys.stderr)
        return _stop_code(exc)
    png = plot_runs([out], out / "accuracy.png") if job.plottable else None
    line = job.describe(summary, out, png)
    spent = process_seconds()
    if spent is not None:  # the wall above is training's; the process also started, loaded data
        line = line.replace(" s wall;", f" s wall training, {spent:.1f} s in all with start-up;", 1)
    print(line)
    return 0


def _fresh_run_folder(name: str) -> Path:
    """``runs/<name>-<date>-<time>``, with ``-2``, ``-3``, … where a run of the same second has it."""
    stem = Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    out, n = stem, 1
    while out.exists() or out.is_symlink():
        n += 1
        out = stem.with_name(f"{stem.name}-{n}")
    return out


def process_seconds() -> float | None:
    """Seconds since this process started (Linux's /proc; psutil elsewhere; None if neither)."""
    try:
        with open("/proc/self/stat") as fh:
            start_ticks = int(fh.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as fh:
            uptime = float(fh.read().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        try:
            import psutil

            return max(0.0, time.time() - psutil.Process().create_time())
        except Exception:  # noqa: BLE001 - no way to tell: say nothing
            return None


def _need_plugins(recorded: list[str], what: str, raw: dict[str, Any] | None = None) -> None:
    """Refuse in one line a run folder made with plug-ins this command did not load.

    Unless installed plug-ins are loaded and the run's config ``raw`` resolves with them (the
    same plug-in installed as a package since): then one line says which provide its names,
    and the run goes on.
    """
    from wirelessfl.run import plugins
    from wirelessfl.run.kinds import resolve_config

    lacking = plugins.missing(recorded)
    if not lacking:
        return
    if raw is not None and plugins.entry_points_loaded():
        try:
            resolve_config(raw)
        except (ConfigError, ValueError, TypeError):
            pass
        else:
            print(f"{what}: the run's plug-in(s) {', '.join(lacking)} are not loaded; its "
                  "names resolve through the installed plug-in(s) "
                  f"{plugins.describe_entry_points()}", file=sys.stderr)
            return
    gone = [s for s in lacking if s.endswith(".py") and not Path(s).exists()]
    flags = " ".join(f"--plugin {'NEW/PATH/' + Path(s).name if s in gone else s}" for s in lacking)
    moved = (f" ({', '.join(gone)} is no longer there: pass the file where it is now, by the "
             "same name)") if gone else ""
    raise ConfigError(f"{what}: the run was made with plug-in(s) {', '.join(lacking)} "
                      f"(meta.json); pass {flags}{moved}")


def _cmd_list(args: argparse.Namespace) -> int:
    if args.algorithms:
        return _list_algorithms()
    from wirelessfl.run.config import list_presets, load_raw

    presets = list_presets()
    if not presets:
        print("no presets found (looked under experiments/)")
    from wirelessfl.run.config import experiment_dirs

    roots = {d.resolve() for d in experiment_dirs()}
    groups: dict[str, list[tuple[str, Path]]] = {}  # by paper: experiments/<paper>/*.yaml
    for name, path in presets.items():
        paper = "general" if Path(path).resolve().parent in roots else Path(path).parent.name
        groups.setdefault(paper, []).append((name, Path(path)))
    for paper in sorted(groups, key=lambda p: (p != "general", p)):
        print(f"{paper}:")
        for name, path in groups[paper]:
            try:
                desc = str(load_raw(str(path)).get("description", ""))
            except ValueError as exc:  # one broken preset does not hide the others
                desc = f"(unreadable: {str(exc).splitlines()[0][:80]})"
            print(f"  {name:26s} {desc}")
    return 0


def _list_algorithms() -> int:
    """Every registered algorithm: kind, one line, hyperparameters with defaults, presets."""
    from wirelessfl.run.config import algorithm_table

    print("units: a name's suffix (_s seconds, _db dB, _mhz MHz, _ghz GHz), else [as marked]; "
          "simulated time in seconds\n")
    for entry in algorithm_table():
        print(f"{entry.name:14s} {entry.kind:10s} {entry.summary}")
        shown = [f"{k}={v!r}" + (f" [{entry.units[k]}]" if k in entry.units else "")
                 + (f" {{{'|'.join(entry.choices[k])}}}" if k in entry.choices else "")
                 for k, v in entry.defaults.items()]
        print(f"{'':25s} {', '.join(shown) or '-'}")
        print(f"{'':25s} presets: {', '.join(entry.presets) or '(none)'}")
    return 0


def _cmd_plot(args: argparse.Namespace) -> int:
    from wirelessfl.report.plotting import plot_runs

    for f in args.runs:
        if not (Path(f) / "metrics.jsonl").is_file():
            raise ConfigError(f"{f} is not a run folder (no metrics.jsonl)")
    if args.out is not None and (Path(args.out).is_dir() or Path(args.out).suffix.lower() != ".png"):
        raise ConfigError(f"--out {args.out}: give a file name ending in .png")
    own = Path(args.runs[0]) / "accuracy.png" if len(args.runs) == 1 else None
    out = Path(args.out) if args.out else (own or Path("comparison.png"))
    if (out.exists() or out.is_symlink()) and out != own:  # a run's own plot is redrawn
        raise ConfigError(f"{out} exists; give a new file name with --out (nothing is "
                          "overwritten)")
    print(plot_runs(args.runs, out))
    return 0


def _cmd_retime(args: argparse.Namespace) -> int:
    import csv
    import io

    from wirelessfl.run.retime import retime_run

    if not args.set:
        raise ConfigError("give the link to re-time under, e.g. --set network.model=tdma")
    out = Path(args.out) if args.out else None
    if out is not None and (out.exists() or out.is_symlink()):
        raise ConfigError(f"--out {out} exists; give a new file name (nothing is overwritten)")
    if out is not None and not out.parent.is_dir():
        raise ConfigError(f"--out {out}: folder {out.parent} does not exist")
    rows = retime_run(args.run, args.set)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=["round", "test_accuracy", "sim_time_s",
                                        *(["outage_clients"] if "outage_clients" in rows[0]
                                          else [])])
    w.writeheader()
    w.writerows(rows)
    if out is None:
        sys.stdout.write(buf.getvalue())
    else:
        with open(out, "x") as fh:  # exclusive: never replaces a file
            fh.write(buf.getvalue())
        print(out)
    last = rows[-1]
    told = ("no simulated time" if last["sim_time_s"] is None else
            f"{last['sim_time_s']:.1f} s simulated at round {last['round']}")
    if "outage_clients" in last:
        told += f", {last['outage_clients']} client-rounds in outage"
    print(f"re-timed {len(rows)} rows ({', '.join(args.set)}): {told}", file=sys.stderr)
    return 0


def _cmd_radio(args: argparse.Namespace) -> int:
    import csv

    from wirelessfl.report.radio import FIELDS, format_summary, plot_radio, radio_records, radio_summary

    if not (Path(args.run) / "metrics.jsonl").is_file():
        raise ConfigError(f"{args.run} is not a run folder (no metrics.jsonl)")
    for given, suffix in ((args.out, ".png"), (args.csv, ".csv")):
        if given is None:
            continue
        path = Path(given)
        if path.suffix.lower() != suffix:
            raise ConfigError(f"{given}: give a file name ending in {suffix}")
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{given} exists; give a new file name (nothing is overwritten)")
        if not path.parent.is_dir():
            raise ConfigError(f"{given}: folder {path.parent} does not exist")
    print(format_summary(args.run, radio_summary(args.run)))
    if args.csv is not None:
        with open(args.csv, "x", newline="") as fh:  # exclusive: never replaces a file
            w = csv.DictWriter(fh, fieldnames=["round", "client", *FIELDS, "capped", "outage"])
            w.writeheader()
            w.writerows(radio_records(args.run))
        print(args.csv)
    if args.out is not None:
        print(plot_radio(args.run, args.out))
    return 0


def _cmd_masks(args: argparse.Namespace) -> int:
    import json

    import numpy as np

    from channels.validation import check_memory
    from solvers.scenarios import load_arrays, mask_size_study
    from wirelessfl.net.resources import Resources, draw_resources, unit_latency

    if args.scenario is not None:
        if not args.scenario.strip():
            raise ConfigError("--scenario needs the path of an .npz with cpu_hz and rate_bps "
                              "(leave the option out to draw a scenario)")
        f = load_arrays(args.scenario, ("cpu_hz", "rate_bps", "snr"),
                        "cpu_hz and rate_bps arrays of shape (cells, clients)")
        if "rate_bps" not in f:
            raise ConfigError(f"--scenario {args.scenario}: need an .npz with cpu_hz and "
                              "rate_bps arrays of shape (cells, clients) (no array 'rate_bps')")
        res = Resources(f["cpu_hz"], f["rate_bps"], f.get("snr", np.full(len(f["cpu_hz"]), np.nan)))
    else:
        check_memory(64.0 * args.cells * args.clients_per_cell, f"masks --cells {args.cells} "
                     f"--clients-per-cell {args.clients_per_cell}", "draw fewer cells or clients")
        res = draw_resources(args.cells, args.clients_per_cell, np.random.default_rng(args.seed))
    c = unit_latency(res, scheme=args.scheme, units=args.total, num_params=args.params,
                     local_steps=args.local_steps)
    s = mask_size_study(c, args.total, eps_th=args.eps_th, edge_rounds=args.edge_rounds,
                        backend=args.backend)
    out = {"scheme": args.scheme, "cells": len(s.sizes), "total": args.total, "cap": s.cap,
           "backend": s.backend, "sizes": s.sizes.tolist(), "round_latency_s": s.round_latency_s,
           "uniform_sizes": s.uniform.tolist(), "uniform_round_latency_s": s.uniform_round_latency_s,
           "solve_seconds": s.seconds, "saving": s.saving}
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.scheme} mask sizes ({s.backend}, cap {s.cap}): {out['sizes']}")
        print(f"round latency {s.round_latency_s:.4f} s vs uniform {out['uniform_sizes']} "
              f"{s.uniform_round_latency_s:.4f} s: saving {100 * s.saving:.1f}%")
    return 0


#: Beamformers that solve cell by cell (a convex program or an iteration per cell): their
#: time grows with the cells, and ``beamform`` times a few before taking on many.
PER_CELL_BEAMFORMERS = ("sca", "sdr", "certified")
#: Cells of the pilot ``beamform`` times to estimate a per-cell solver's work.
PILOT_CELLS = 8


def _check_beamform_work(h: Any, args: argparse.Namespace) -> None:
    """Refuse (ConfigError, one line) per-cell work estimated beyond ``--max-minutes``.

    The estimate is measured, not guessed: the same solver on :data:`PILOT_CELLS` cells on
    this machine, scaled to all of them (vectorised methods are bounded by the memory check).
    """
    import math

    import numpy as np

    from solvers import beamforming

    slow = [m for m in {args.method, "sdr" if args.bound and args.method != "certified" else ""}
            if m in PER_CELL_BEAMFORMERS]
    cells = int(np.prod(h.shape[:-2])) if h.ndim > 2 else 1
    if not slow or cells <= 4 * PILOT_CELLS:
        return
    pilot = np.asarray(h).reshape(-1, *h.shape[-2:])[:PILOT_CELLS]
    for method in sorted(slow):  # warm: imports and a solver's first-call set-up are not work
        beamforming.solve(pilot[:1], method, seed=args.seed)
    start = time.perf_counter()
    for method in sorted(slow):
        beamforming.solve(pilot, method, seed=args.seed)
    per_cell = (time.perf_counter() - start) / len(pilot)
    estimate = per_cell * cells
    if estimate > args.max_minutes * 60:
        raise ConfigError(f"beamform --method {args.method}{' --bound' if args.bound else ''} on "
                          f"{cells} cells would take about {estimate / 60:.0f} min here "
                          f"({per_cell * 1e3:.0f} ms a cell, timed on {len(pilot)}); lower "
                          f"--cells, use --method fast, or pass --max-minutes "
                          f"{math.ceil(estimate / 60 * 1.2)}")


def _cmd_beamform(args: argparse.Namespace) -> int:
    import json

    import numpy as np

    from channels.rayleigh import simo_rayleigh
    from channels.validation import check_memory
    from solvers import beamforming
    from solvers.scenarios import beamforming_study, load_arrays

    if args.instances:
        h = load_arrays(args.instances, ("h",), "a complex array 'h' of shape (..., clients, "
                        "antennas)")["h"]
    else:
        check_memory(beamforming.working_bytes((args.cells, args.clients, args.antennas),
                                               args.method),
                     f"beamform --cells {args.cells} --clients {args.clients} --antennas "
                     f"{args.antennas}", "solve fewer or smaller instances")
        h = simo_rayleigh((args.cells,), args.clients, args.antennas,
                          np.random.default_rng(args.seed))
    _check_beamform_work(h, args)
    s = beamforming_study(h, args.method, snr_db=args.snr_db, bound=args.bound, seed=args.seed)
    r = s.result
    out = {"method": r.method, "instances": int(np.prod(r.min_gain.shape)),
           "clients": h.shape[-2], "antennas": h.shape[-1], "snr_db": args.snr_db,
           "min_gain_mean": float(r.min_gain.mean()), "min_gain_min": float(r.min_gain.min()),
           "mse_db_mean": float(s.mse_db.mean()), "seconds": r.seconds,
           "instances_per_second": float(r.min_gain.size / r.seconds)}
    if r.upper_bound is not None and r.method == "certified":
        out["gap_mean"] = float(r.gap.mean())
        out["gap_max_relative"] = float((r.gap / r.upper_bound).max())
    if s.ratio_to_bound is not None:
        out["ratio_to_sdr_bound_mean"] = float(s.ratio_to_bound.mean())
        out["ratio_to_sdr_bound_min"] = float(s.ratio_to_bound.min())
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{r.method}: {out['instances']} instances (n={out['clients']}, "
              f"M={out['antennas']}) in {r.seconds:.3f} s")
        print(f"min gain mean {out['min_gain_mean']:.4f}, min {out['min_gain_min']:.4f}; "
              f"MSE (25) at {args.snr_db:g} dB SNR: {out['mse_db_mean']:.2f} dB")
        if args.bound:
            print(f"ratio to the SDR bound: mean {out['ratio_to_sdr_bound_mean']:.4f}, "
                  f"min {out['ratio_to_sdr_bound_min']:.4f}")
        if "gap_mean" in out:
            print(f"certified: gap to the SDR upper bound mean {out['gap_mean']:.4g}, "
                  f"largest {100 * out['gap_max_relative']:.2f}% of the bound")
    return 0


def _cmd_figures(args: argparse.Namespace) -> int:
    from wirelessfl.report.archive import reusable
    from wirelessfl.report.figures import regenerate
    from wirelessfl.report.spec import load_figures, missing_runs, parse_seeds

    out = Path(args.out or Path("reports") / args.paper / args.scale)
    extra = _report_args(args, out)
    seeds = None if args.seeds is None else parse_seeds(args.seeds)
    reuse = None if args.reuse is None else _archive(args.reuse)
    if args.dry_run or args.estimate:
        figures = load_figures(args.paper, args.scale, args.only, extra, seeds)
        todo = {r.key for r in missing_runs(figures, out)}
        archived = set() if reuse is None else reusable(
            reuse, [r for f in figures for r in f.runs if r.key in todo])
    if args.dry_run:
        _dry_run(figures, todo, archived, args.quiet)
        return 0
    if args.estimate:
        from wirelessfl.report.estimate import describe_device, estimate, estimate_table

        started = process_seconds() or 0.0  # torch and the report's modules are loaded now
        device = describe_device(figures[0].runs[0].raw)
        figures = [dataclasses.replace(f, runs=tuple(r for r in f.runs if r.key not in archived))
                   for f in figures]  # what --reuse gives costs nothing
        print(f"timing a sample of each setting ({args.paper}, {args.scale} scale) ...", flush=True)
        rows = estimate(figures, out, log=lambda m: print(m, flush=True), isolate=True)
        # the command's own start (interpreter, imports, PyTorch) is paid again by the real
        # command: for a figure of a minute it was a third of the wall time (ratio 0.66)
        print(estimate_table(rows, device, startup=started))
        return 0
    ray = _ray_options(args)
    if args.publish is not None:  # refused before anything trains
        from wirelessfl.report.figures import check_publish_folder

        check_publish_folder(Path(args.publish))
        if Path(args.publish).resolve() == out.resolve():
            raise ConfigError(f"--publish {args.publish} is the report folder itself (--out); "
                              "publish to another folder, e.g. docs/papers/results/"
                              f"{args.paper}-{args.scale}")
    code = _report(out, "figures", lambda: regenerate(
        args.paper, args.scale, out, only=args.only, extra=extra, quiet=args.quiet,
        log=lambda m: print(m, flush=True), jobs=args.jobs, ray=ray, seeds=seeds,
        batch_runs=args.batch_runs, style=args.style, title=False if args.no_title else None,
        reuse=reuse, render_only=args.render_only))
    if args.publish is not None and code == 0:
        from wirelessfl.report.figures import publish

        print(f"published {len(publish(out, Path(args.publish)))} files to {args.publish}")
    return code


def _dry_run(figures: list[Any], todo: set[str], archived: set[str], quiet: bool) -> None:
    """``figures --dry-run``: each figure's runs to do (and those ``--reuse`` gives).

    Unless ``quiet``, every run follows with where it goes.
    """
    for fig in figures:
        left = {r.key for r in fig.runs} & todo
        print(f"{fig.name:10s} {fig.spec['kind']:7s} {len(fig.runs):3d} runs, "
              f"{len(left - archived)} to do"
              + (f" ({len(left & archived)} more in --reuse)" if left & archived else "")
              + f"  {fig.title}")
        if not quiet:  # every run: where it goes, what it is
            for r in fig.runs:
                state = "reuse" if r.key in archived else "to do" if r.key in todo else "done"
                print(f"    {state:5s}  runs/{r.key}  {r.label}")


def _archive(given: str) -> Path:
    """``--reuse``: the run archive given, or the one a published report folder holds."""
    from wirelessfl.report.archive import ARCHIVE

    path = Path(given)
    if path.is_dir() and not (path / ARCHIVE).is_file():
        raise ConfigError(f"--reuse {given}: the folder holds no {ARCHIVE}; give a report folder "
                          "published with --publish, or the archive file itself")
    if not path.is_dir() and not path.is_file():
        raise ConfigError(f"--reuse {given}: no such file or folder; give a folder published "
                          f"with --publish or its {ARCHIVE}")
    return path / ARCHIVE if path.is_dir() else path


def _report_args(args: argparse.Namespace, out: Path) -> list[str]:
    """Check the options figures and sweep share; the ``--data-dir`` override they imply."""
    if args.data_dir is not None and not Path(args.data_dir).is_dir():
        raise ConfigError(f"--data-dir {args.data_dir} is not a folder; pass the folder that "
                          "holds the dataset files")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out {out} is a file; give a folder for the report")
    cores = os.cpu_count() or 1
    if args.jobs > cores:
        raise ConfigError(f"--jobs {args.jobs}: this machine has {cores} cores; each job is a "
                          f"process with its own data and model, use at most {cores}")
    return [f"data.data_dir={args.data_dir}"] if args.data_dir else []


def _report(out: Path, command: str, produce: Callable[[], list[Path]]) -> int:
    """Train and render with ``produce``, print what it wrote; Ctrl-C keeps finished runs."""
    try:
        written = produce()
    except KeyboardInterrupt as exc:
        print(f"\n{_stopped(exc)}; finished runs are kept in {out}/runs and the next "
              f"`wirelessfl {command}` call resumes", file=sys.stderr)
        return _stop_code(exc)
    print("\n".join(str(p) for p in written))
    return 0


#: Most runs one lockstep group may hold (``--batch-runs``).
MAX_BATCH_RUNS = 10_000


def _ray_options(args: argparse.Namespace):
    """The Ray options of ``--executor ray`` (None for the local executor); checks the flags."""
    from wirelessfl.report.ray_executor import RayOptions

    ray_flags = [f for f in ("address", "gpus_per_run", "cpus_per_run", "retries")
                 if getattr(args, f) is not None]
    if args.batch_runs is not None and args.batch_runs > MAX_BATCH_RUNS:  # before any folder
        raise ConfigError(f"--batch-runs {args.batch_runs}: at most {MAX_BATCH_RUNS} runs share "
                          "one computation; lower it")
    if args.executor == "ray" and args.batch_runs is not None:
        raise ConfigError("--batch-runs groups runs in local processes; with --executor ray "
                          "each run is its own task: drop --batch-runs")
    if args.executor != "ray":
        if ray_flags:
            raise ConfigError(f"--{ray_flags[0].replace('_', '-')} is a Ray option: add "
                              "--executor ray")
        return None
    if args.jobs != 1:
        raise ConfigError("--jobs is the local executor's; with --executor ray each run is a "
                          "task sized by --cpus-per-run / --gpus-per-run")
    return RayOptions(address=args.address,
                      cpus_per_run=1.0 if args.cpus_per_run is None else args.cpus_per_run,
                      gpus_per_run=0.0 if args.gpus_per_run is None else args.gpus_per_run,
                      retries=3 if args.retries is None else args.retries)


def _add_executor_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--jobs", type=_positive, default=1, metavar="N",
                   help="train N runs (or lockstep groups) at a time, each in its own process "
                        "(default 1)")
    p.add_argument("--batch-runs", type=_positive, default=None, metavar="N",
                   help="train at most N runs that can share the client engine as one "
                        "computation (default: on a GPU as its memory allows, on a CPU 1: "
                        "every run alone)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local processes (default) or one Ray task per run")
    p.add_argument("--address", help="Ray: 'auto' or HOST:PORT of a running cluster "
                                     "(default: start a local instance)")
    p.add_argument("--cpus-per-run", type=_finite(positive=True), help="Ray: CPUs per run (1)")
    p.add_argument("--gpus-per-run", type=_finite(0.0), help="Ray: GPUs per run (0)")
    p.add_argument("--retries", type=_natural, help="Ray: retries of a failed run (3)")


def _cmd_sweep(args: argparse.Namespace) -> int:
    from wirelessfl.report.figures import sweep
    from wirelessfl.report.spec import parse_seeds

    out = Path(args.out or Path("reports") / "sweeps" / Path(args.config).stem)
    extra = _report_args(args, out)
    ray = _ray_options(args)
    seeds = parse_seeds(args.seeds)
    return _report(out, "sweep", lambda: sweep(
        args.config, args.grid or [], seeds, out, extra=extra + (args.set or []),
        quiet=args.quiet, log=lambda m: print(m, flush=True), jobs=args.jobs, ray=ray,
        batch_runs=args.batch_runs))


def _positive(text: str) -> int:
    value = int(text) if text.strip().isdigit() and len(text.strip()) < 19 else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text[:40]!r}")
    return value


def _natural(text: str) -> int:
    """A non-negative integer (a seed)."""
    if not (text.strip().isdigit() and len(text.strip()) < 19):
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text[:40]!r}")
    return int(text)


def _finite(lo: float | None = None, *, positive: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite float (> 0 with ``positive``, >= ``lo`` with ``lo``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        ok = value == value and abs(value) != float("inf")
        ok = ok and (not positive or value > 0) and (lo is None or value >= lo)
        if not ok:
            want = "a finite number" + (" > 0" if positive else f" >= {lo:g}" if lo is not None else "")
            raise argparse.ArgumentTypeError(f"expected {want}, got {text[:40]!r}")
        return value
    return parse


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``wirelessfl``."""
    from solvers.beamforming import METHODS as beam_methods

    p = _Parser(prog="wirelessfl", description="Federated learning over wireless networks.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    r = sub.add_parser("run", help="train a preset or YAML config")
    r.add_argument("config", nargs="?", help="preset name or path to a YAML file")
    r.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override a config value, e.g. --set local.lr=0.05 (repeatable)")
    r.add_argument("--out", help="run folder (default runs/<name>-<time>)")
    r.add_argument("--device", choices=["cpu", "cuda", "auto"])
    r.add_argument("--engine", choices=["loop", "batched", "auto", "distributed"],
                   help="client engine (distributed: over --workers processes)")
    r.add_argument("--workers", type=int, help="engine distributed: processes (2-256)")
    r.add_argument("--deterministic", action="store_true",
                   help="PyTorch deterministic algorithms (an op without one stops the run)")
    r.add_argument("--resume", action="store_true", help="continue the run in --out")
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.add_argument("--tracker", action="append", choices=["tensorboard", "mlflow", "wandb"],
                   help="also send the rows to this run tracker (repeatable; the run folder "
                        "stays the record)")
    r.add_argument("--checkpoint-every", type=_finite(0.0), default=None, metavar="SECONDS",
                   help="multi-task runs: snapshot after a round once this many wall seconds "
                        "have passed (0: every round; default 60)")
    _add_plugin_arg(r)
    r.set_defaults(func=_cmd_run)
    lst = sub.add_parser("list", help="list presets (or, with --algorithms, the algorithms)")
    lst.add_argument("--algorithms", action="store_true",
                     help="every registered algorithm with its hyperparameters, their "
                          "choices and presets")
    _add_plugin_arg(lst)
    lst.set_defaults(func=_cmd_list)
    pl = sub.add_parser("plot", help="plot run folders to a PNG")
    pl.add_argument("runs", nargs="+", metavar="RUN_DIR")
    pl.add_argument("--out", help="PNG path")
    _add_plugin_arg(pl)
    pl.set_defaults(func=_cmd_plot)
    rt = sub.add_parser("retime", help="a run's simulated time under another link model")
    rt.add_argument("run", metavar="RUN_DIR", help="a round-based run folder")
    rt.add_argument("--set", action="append", default=[], metavar="network.KEY=VALUE",
                    help="the new link, e.g. --set network.model=tdma --set network.snr_db=10")
    rt.add_argument("--out", help="CSV file to create (default: print the CSV)")
    _add_plugin_arg(rt)
    rt.set_defaults(func=_cmd_retime)
    ra = sub.add_parser("radio", help="an nr run's per-client radio: SINR, MCS, PRBs, "
                        "TBLER, rates, upload times, outage")
    ra.add_argument("run", metavar="RUN_DIR", help="a run folder trained over network.model nr")
    ra.add_argument("--out", help="PNG of the distributions to create")
    ra.add_argument("--csv", help="CSV to create: one row per client and logged round")
    ra.set_defaults(func=_cmd_radio)
    m = sub.add_parser("masks", help="latency-optimal HIST mask sizes for a drawn scenario")
    m.add_argument("--cells", type=_positive, default=4, help="N (default 4)")
    m.add_argument("--clients-per-cell", type=_positive, default=15, help="n (default 15)")
    m.add_argument("--total", type=_positive, default=300, help="units to split K (default 300)")
    m.add_argument("--params", type=_positive, default=238_510, help="model size d (default FCNN)")
    m.add_argument("--scheme", choices=["oma", "aircomp"], default="oma")
    m.add_argument("--eps-th", type=_finite(positive=True), default=9.0,
                   help="eps_th / delta_1^2 (kappa); cap = floor(kappa K / 6N) (default 9)")
    m.add_argument("--local-steps", type=_positive, default=40, help="H (default 40)")
    m.add_argument("--edge-rounds", type=_positive, default=5, help="E (default 5)")
    m.add_argument("--backend", choices=["exact", "highs", "gurobi"], default="exact")
    m.add_argument("--seed", type=_natural, default=0)
    m.add_argument("--scenario", help=".npz with cpu_hz and rate_bps (cells x clients)")
    m.add_argument("--json", action="store_true")
    m.set_defaults(func=_cmd_masks)
    bfp = sub.add_parser("beamform", help="max-min AirComp receive beamforming (33)")
    bfp.add_argument("--cells", type=_positive, default=100, help="instances C (default 100)")
    bfp.add_argument("--clients", type=_positive, default=15, help="n per cell (default 15)")
    bfp.add_argument("--antennas", type=_positive, default=10, help="M (default 10)")
    bfp.add_argument("--snr-db", type=_finite(), default=30.0, help="P/sigma0^2 in dB (default 30)")
    bfp.add_argument("--method", choices=list(beam_methods),
                     default="fast")
    bfp.add_argument("--seed", type=_natural, default=0)
    bfp.add_argument("--instances", help=".npz with complex 'h' (..., clients, antennas)")
    bfp.add_argument("--bound", action="store_true", help="also solve the SDR bound (slow)")
    bfp.add_argument("--max-minutes", type=_finite(positive=True), default=10.0,
                     help="refuse work estimated longer than this (per-cell solvers: sca, sdr, "
                          "certified and --bound are timed on a few cells first; default 10)")
    bfp.add_argument("--json", action="store_true")
    bfp.set_defaults(func=_cmd_beamform)
    fg = sub.add_parser("figures", help="regenerate a paper's figures and tables")
    fg.add_argument("paper", help="paper with experiments/<paper>/figures.yaml, e.g. hist")
    fg.add_argument("--scale", choices=["quick", "paper"], default="quick")
    fg.add_argument("--only", action="append", metavar="NAME", help="figure/table (repeatable)")
    fg.add_argument("--out", help="report folder (default reports/<paper>/<scale>)")
    fg.add_argument("--data-dir", help="folder with dataset files (CIFAR-10/100, MNIST, Tiny ImageNet)")
    fg.add_argument("--dry-run", action="store_true",
                    help="list every run (with --quiet: a line per figure), train nothing")
    fg.add_argument("--quiet", action="store_true", help="no per-run progress bars")
    fg.add_argument("--estimate", action="store_true",
                    help="time a few rounds of each setting on random data of its shapes and "
                         "print the hours the runs still to do need here; train nothing")
    fg.add_argument("--seeds", metavar="SEEDS",
                    help="every figure's seeds, e.g. 0-9 or 0,1,2 (replaces the scale's; the "
                         "runs of seeds already done are reused)")
    fg.add_argument("--reuse", metavar="DIR_OR_FILE",
                    help="take the finished runs a published report folder (or its "
                         "runs.jsonl.gz) holds instead of training them")
    fg.add_argument("--render-only", action="store_true",
                    help="train nothing: draw the figures whose runs are all there (with "
                         "--reuse, restored ones too)")
    fg.add_argument("--publish", metavar="DIR",
                    help="then copy the report's README, PNG, CSV and markdown (not the PDF "
                         "and SVG) to DIR, e.g. docs/papers/results/hist-quick for the paper's "
                         "page, and its finished runs (no checkpoints) into DIR/runs.jsonl.gz; "
                         "adds to what was published there (figures this report did not draw "
                         "keep their earlier outputs)")
    fg.add_argument("--style", choices=("report", "paper"), default="report",
                    help="figures as for a report (wide, titled; default) or for a paper "
                         "(3.5 in panels, 8-pt text, colour-blind-safe colours, the title only "
                         "as the README's caption); every figure is written as PNG, PDF and SVG")
    fg.add_argument("--no-title", action="store_true",
                    help="leave the title out of the images in the report style too (the "
                         "README's caption carries it)")
    _add_executor_args(fg)
    _add_plugin_arg(fg)
    fg.set_defaults(func=_cmd_figures)
    sw = sub.add_parser("sweep", help="train a config over a grid of settings and seeds")
    sw.add_argument("config", help="preset name or path to a YAML file")
    sw.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                    help="a swept key and its values (repeatable: the product)")
    sw.add_argument("--seeds", default="0", help="seeds, e.g. 0-4 or 0,1,2 (default 0)")
    sw.add_argument("--set", action="append", metavar="KEY=VALUE", help="a fixed override")
    sw.add_argument("--out", help="sweep folder (default reports/sweeps/<config>)")
    sw.add_argument("--data-dir", help="folder with dataset files")
    sw.add_argument("--quiet", action="store_true", help="no per-run progress bars")
    _add_executor_args(sw)
    _add_plugin_arg(sw)
    sw.set_defaults(func=_cmd_sweep)
    return p


def _add_plugin_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plugin", action="append", metavar="MODULE_OR_FILE",
                        help="import your own code first (a module name or a .py file that "
                             "registers algorithms, models, datasets, link models; repeatable)")


def _load_plugins(args: argparse.Namespace) -> None:
    """Installed plug-ins (entry points), then the command's ``--plugin`` ones."""
    from wirelessfl.run import plugins

    os.environ.pop(plugins.ENV, None)  # workers load what this command loads, nothing else
    plugins.load_entry_points()
    if getattr(args, "plugin", None):
        plugins.load_plugins(args.plugin)


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch scheduler's stop): handled as Ctrl-C, the run kept resumable."""


#: SIGTERMs this command received: native code that catches the handler's
#: :class:`Terminated` (Ray's ``wait``) raises a plain KeyboardInterrupt in its place.
_SIGTERM_SEEN: list[int] = []


def _on_sigterm() -> Any:
    """Make SIGTERM stop a command as Ctrl-C does; the previous handler (None off the main thread)."""
    import signal
    import threading

    _SIGTERM_SEEN.clear()
    if threading.current_thread() is not threading.main_thread():
        return None

    def stop(signum: int, frame: Any) -> None:
        _SIGTERM_SEEN.append(signum)  # native code (Ray's wait) re-raises a plain Ctrl-C
        raise Terminated()

    return signal.signal(signal.SIGTERM, stop)


def _by_sigterm(exc: BaseException) -> bool:
    return isinstance(exc, Terminated) or bool(_SIGTERM_SEEN)


def _stopped(exc: BaseException) -> str:
    return "terminated (SIGTERM)" if _by_sigterm(exc) else "interrupted"


def _stop_code(exc: BaseException) -> int:
    return 143 if _by_sigterm(exc) else 130  # 128 + the signal's number


def _one_line_errors() -> tuple[type[BaseException], ...]:
    """What :func:`main` prints as one line (imported only once an error is being handled)."""
    from solvers.mask_sizes import SolverUnavailableError
    from wirelessfl.engine.client import ClientError

    return (ValueError, OSError, TrainingDiverged, SolverUnavailableError, MemoryError,
            ClientError)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit code.

    Bad input (:class:`ValueError`, e.g. :class:`~wirelessfl.errors.ConfigError`), a file
    that cannot be read or written (:class:`OSError`), a diverged run
    (:class:`~wirelessfl.errors.TrainingDiverged`) or a missing solver print one line and
    return 2; Ctrl-C returns 130 with one line.
    """
    args = build_parser().parse_args(argv)  # --help and argument errors: no heavy import
    previous = _on_sigterm()
    try:
        _load_plugins(args)
        return args.func(args)
    except KeyboardInterrupt as exc:
        print(f"\nwirelessfl: {_stopped(exc)}", file=sys.stderr)
        return _stop_code(exc)
    except BrokenPipeError:  # output piped into e.g. `head`, which has closed: not an error
        sys.stdout = None  # nothing more to flush at exit
        return 0
    except _one_line_errors() as exc:
        text = str(exc).strip()
        msg = text.splitlines()[0] if text else type(exc).__name__
        if isinstance(exc, OSError) and not isinstance(exc, FileNotFoundError) or isinstance(
                exc, MemoryError):
            msg = f"{type(exc).__name__}: {msg}"
        print(f"wirelessfl: error: {msg[:400]}", file=sys.stderr)
        return 2
    finally:
        if previous is not None:  # main() called in-process (tests, notebooks) leaves no handler
            import signal

            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    from wirelessfl.errors import end_process

    end_process(main())
