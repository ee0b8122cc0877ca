"""Hostile-input probes: the CLI, the public API and damaged files (issue 32).

Each probe feeds one bad input and classifies what happens:

``clean``
    a ``ValueError``/``TypeError`` (or a project error built on them) whose message names
    the argument, or for the CLI: exit code 2 with one line on stderr;
``unnamed``
    the right error type, but the message does not name the argument;
``internal``
    any other exception (what a user sees as a traceback);
``silent``
    the bad input was accepted (a result came back, or the CLI exited 0);
``outside``
    a file outside the folders the command was given was created or changed;
``ok``
    a valid edge input gave the right answer (probes of that kind only).

Code execution is probed with pickles, YAML tags and object arrays that create a marker
file when loaded; the marker must never appear. Prints JSON: counts per verdict and per
area, and every probe that is not ``clean``/``ok``.

    python benchmarks/probes.py --json
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import io
import json
import os
import pickle
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import yaml

from wirelessfl.errors import TrainingDiverged

GOOD = ("clean", "ok")


@dataclass
class Probe:
    area: str
    name: str
    verdict: str
    detail: str = ""


@dataclass
class Probes:
    results: list[Probe] = field(default_factory=list)

    # -- the Python API ---------------------------------------------------------------
    def bad(self, area: str, name: str, fn: Callable[[], object], *names: str) -> None:
        """A bad input: must raise ValueError/TypeError naming one of ``names``."""
        try:
            out = fn()
        except (ValueError, TypeError, TrainingDiverged) as exc:
            msg = str(exc).lower()
            named = not names or any(n.lower() in msg for n in names)
            self._add(area, name, "clean" if named else "unnamed", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - the point is to catch what escapes
            self._add(area, name, "internal", f"{type(exc).__name__}: {exc}")
        else:
            self._add(area, name, "silent", f"returned {_short(out)}")

    def good(self, area: str, name: str, fn: Callable[[], object],
             check: Callable[[object], bool]) -> None:
        """A valid edge input: must return something ``check`` accepts."""
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001
            self._add(area, name, "internal", f"{type(exc).__name__}: {exc}")
            return
        try:
            right = bool(check(out))
        except Exception as exc:  # noqa: BLE001 - a probe that cannot read the answer
            self._add(area, name, "probe_error", f"{type(exc).__name__}: {exc}")
            return
        self._add(area, name, "ok" if right else "silent", _short(out))

    # -- the command line ---------------------------------------------------------------
    def cli(self, area: str, name: str, argv: list[str], sandbox: Path, *,
            allowed: tuple[str, ...] = (), expect: int = 2) -> tuple[int | None, str]:
        """Run ``wirelessfl ARGV`` in ``sandbox``; only paths under ``allowed`` may change."""
        from wirelessfl.cli import main

        before = _tree(sandbox)
        err, out = io.StringIO(), io.StringIO()
        old = os.getcwd()
        os.chdir(sandbox)
        code: int | None
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                try:
                    code = main(argv)
                except SystemExit as exc:
                    code = exc.code if isinstance(exc.code, int) else 1
        except Exception as exc:  # noqa: BLE001
            os.chdir(old)
            self._add(area, name, "internal", f"{type(exc).__name__}: {exc}")
            return None, ""
        os.chdir(old)
        text = err.getvalue()
        changed = [p for p in _changed(before, _tree(sandbox))
                   if not any(p == a or p.startswith(a.rstrip("/") + "/") for a in allowed)]
        if changed:
            self._add(area, name, "outside", f"changed {changed[:3]}")
        elif code != expect:
            self._add(area, name, "silent", f"exit {code}: {text.strip()[:200]}")
        elif expect == 2 and (text.count("\n") != 1 or "Traceback" in text
                              or not text.startswith("wirelessfl: error:")):
            self._add(area, name, "internal", f"not one line: {text[:300]!r}")
        else:
            self._add(area, name, "clean" if expect == 2 else "ok", text.strip()[:200])
        return code, text

    def _add(self, area, name, verdict, detail):
        self.results.append(Probe(area, name, verdict, detail[:300]))

    def report(self) -> dict:
        by_area: dict[str, Counter] = {}
        for r in self.results:
            by_area.setdefault(r.area, Counter())[r.verdict] += 1
        return {"cases": len(self.results),
                "verdicts": dict(Counter(r.verdict for r in self.results)),
                "areas": {a: dict(c) for a, c in sorted(by_area.items())},
                "not_clean": [vars(r) for r in self.results if r.verdict not in GOOD]}


def _short(x: object) -> str:
    s = repr(x)
    return s if len(s) < 120 else s[:117] + "..."


def _tree(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns, st.st_mode)
    return out


def _changed(before: dict, after: dict) -> list[str]:
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


class Payload:
    """A pickle that creates ``marker`` when loaded (stands in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


NAN, INF = float("nan"), float("inf")


# ---------------------------------------------------------------------------------------
# The Python API of the modules added since last round, and the channel/solver leftovers
# ---------------------------------------------------------------------------------------
def _trees():
    g = torch.Generator().manual_seed(0)
    a = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(3, generator=g)}
    b = {"w": torch.randn(3, 4, generator=g), "b": torch.randn(3, generator=g)}
    return a, b


def _variants(tree):
    """Damaged copies of a tree: (name, tree)."""
    w, b = tree["w"], tree["b"]
    return [("missing key", {"w": w}),
            ("extra key", {"w": w, "b": b, "z": b}),
            ("wrong shape", {"w": w.T.contiguous(), "b": b}),
            ("broadcastable shape", {"w": w[:1], "b": b}),
            ("nan", {"w": w.clone().fill_(NAN), "b": b}),
            ("inf", {"w": w, "b": b.clone().fill_(INF)}),
            ("not a tensor", {"w": w.tolist(), "b": b}),
            ("integer dtype", {"w": w.long(), "b": b}),
            ("not a dict", [w, b])]


def api_initial_model(p: Probes) -> None:
    from wirelessfl.algorithms.dynamic import initial_model as im

    A = "initial_model"
    a, b = _trees()
    for n, t in _variants(a):
        p.bad(A, f"pilot_model {n}", lambda t=t: im.pilot_model([a, t]), "final", "model", "tree")
        p.bad(A, f"fingerprint pilot {n}", lambda t=t: im.fingerprint(a, t, ["w", "b"]), "pilot")
        p.bad(A, f"distances stored {n}", lambda t=t: im.distances(a, [b, t]), "stored")
        p.bad(A, f"blend models {n}", lambda t=t: im.blend([a, t], torch.tensor([0.5, 0.5])),
              "models")
        p.bad(A, f"SessionStore.add {n}", lambda t=t: _store_add(im, a, t), "final", "model")
    p.bad(A, "pilot_model empty", lambda: im.pilot_model([]), "finals")
    p.bad(A, "pilot_model None", lambda: im.pilot_model(None), "finals")
    p.bad(A, "fingerprint trainable str", lambda: im.fingerprint(a, b, "w"), "trainable")
    p.bad(A, "fingerprint trainable unknown", lambda: im.fingerprint(a, b, ["q"]), "trainable")
    p.bad(A, "distances empty stored", lambda: im.distances(a, []), "stored")
    p.bad(A, "distances similarity", lambda: im.distances(a, [b], similarity="l7"), "similarity")
    for s in (NAN, INF, -1.0, "x", None):
        p.bad(A, f"similarity_weights scale={s}", lambda s=s: im.similarity_weights(a, [b], s),
              "scale")
    for w in ([0.5], [0.5, NAN], [[0.5, 0.5]], [-1.0, 2.0], [0.0, 0.0], "ab"):
        p.bad(A, f"blend weights {w}", lambda w=w: im.blend(
            [a, b], torch.tensor(w) if not isinstance(w, str) else w), "weights")
    p.bad(A, "blend empty", lambda: im.blend([], torch.tensor([])), "models")
    for h in (0, -1, 1.5, "3", True):
        p.bad(A, f"SessionStore history={h!r}", lambda h=h: im.SessionStore(history=h), "history")
    p.bad(A, "SessionStore.average empty", lambda: im.SessionStore().average(), "no session",
          "empty", "store")
    p.bad(A, "SessionStore.initial_model empty",
          lambda: im.SessionStore().initial_model(a, 10.0), "no session", "empty", "store")
    for k, v in (("rule", "magic"), ("pilot_sessions", 0), ("pilot_sessions", 1.5),
                 ("fingerprint_rounds", -1), ("fingerprint_steps", 0), ("fingerprint_batch", 0),
                 ("scale", NAN), ("scale", -2.0), ("similarity", "l7"), ("history", 0),
                 ("literal_eq5", "yes")):
        p.bad(A, f"InitialModelConfig {k}={v!r}", lambda k=k, v=v: im.InitialModelConfig(
            rule="proposed", **{k: v}), k)
    p.good(A, "blend one model weight 1", lambda: im.blend([a], torch.tensor([1.0])),
           lambda out: all(torch.equal(out[k], a[k]) for k in a))


def _store_add(im, a, t):
    s = im.SessionStore()
    s.add(a)
    s.add(t)
    return s


def _mlp():
    from wirelessfl.models import build_model

    m = build_model("mlp", (1, 28, 28), 10, seed=0)
    return m, m.params()


def api_submodel(p: Probes) -> None:
    from wirelessfl.server.submodel import Submodel, random_disjoint_selections

    A = "submodel"
    m, like = _mlp()
    groups = m.unit_groups
    ok = {"fc1": torch.arange(50), "fc2": torch.arange(100)}
    bad_sel = [("extra group", {**ok, "fc9": torch.arange(3)}),
               ("out of range", {**ok, "fc1": torch.tensor([0, 200])}),
               ("negative", {**ok, "fc1": torch.tensor([-1, 3])}),
               ("repeated", {**ok, "fc1": torch.tensor([3, 3])}),
               ("float", {**ok, "fc1": torch.tensor([1.0, 2.0])}),
               ("2-d", {**ok, "fc1": torch.tensor([[1, 2]])}),
               ("not a dict", [ok["fc1"]])]
    for n, sel in bad_sel:
        p.bad(A, f"Submodel selection {n}", lambda sel=sel: Submodel(groups, sel, like),
              "selection", "fc1", "unit")
    for n, sel, want in (("missing group keeps it whole", {"fc1": torch.arange(5)}, 200),
                         ("empty keeps none", {**ok, "fc2": torch.tensor([], dtype=torch.long)}, 0),
                         ("list of ints", {**ok, "fc2": [1, 2]}, 2)):
        p.good(A, f"Submodel selection {n}", lambda sel=sel: Submodel(groups, sel, like).slice(
            like)["fc2.bias"].numel(), lambda got, want=want: got == want)
    bad_like = {"missing": {k: v for k, v in like.items() if k != "fc2.weight"},
                "fewer units": {**like, "fc1.weight": like["fc1.weight"][:100]}}
    for n, lk in bad_like.items():
        p.bad(A, f"Submodel like {n}", lambda lk=lk: Submodel(groups, ok, lk), "like", "fc")
    sub = Submodel(groups, ok, like)
    small = sub.slice(like)
    for n, t in (("missing", {k: v for k, v in like.items() if k != "fc3.bias"}),
                 ("wrong shape", {**like, "fc1.bias": like["fc1.bias"][:7]}),
                 ("nan", {**like, "fc1.bias": like["fc1.bias"] * NAN})):
        p.bad(A, f"slice params {n}", lambda t=t: sub.slice(t), "params")
        p.bad(A, f"mask like {n}", lambda t=t: sub.mask(t), "like")
    for n, t in (("missing", {k: v for k, v in small.items() if k != "fc3.bias"}),
                 ("full-size part", {**small, "fc1.bias": like["fc1.bias"]}),
                 ("nan", {**small, "fc1.bias": small["fc1.bias"] * NAN})):
        p.bad(A, f"scatter sub {n}", lambda t=t: sub.scatter(like, t), "sub")
    p.bad(A, "scatter full wrong", lambda: sub.scatter(small, small), "full")
    rng = np.random.default_rng(0)
    for n, sizes in (("too many", [[150, 100]]), ("negative", [[-1, 5]]), ("float", [[1.5, 2]]),
                     ("wrong length", [[5]]), ("not nested", [5, 5])):
        p.bad(A, f"random_disjoint_selections sizes {n}",
              lambda sizes=sizes: random_disjoint_selections(groups, sizes, rng), "sizes")
    p.bad(A, "random_disjoint_selections rng None",
          lambda: random_disjoint_selections(groups, [[5, 5]], None), "rng")
    p.good(A, "full selection = identity", lambda: Submodel(
        groups, {"fc1": torch.arange(200), "fc2": torch.arange(200)}, like).slice(like),
        lambda out: all(torch.equal(out[k], like[k]) for k in like))


def api_compression(p: Probes) -> None:
    from wirelessfl.net.compression import compress, quantize_bound, relative_error

    A = "compression"
    a, b = _trees()
    for op in ("quantize", "topk"):
        for n, t in _variants(a)[4:]:
            p.bad(A, f"compress {op} params {n}", lambda t=t, op=op: compress(
                t, op, gen=torch.Generator().manual_seed(0)), "params")
    for k, v in (("bits", 0), ("bits", 33), ("bits", 1.5), ("bits", "8"), ("keep", 0.0),
                 ("keep", 1.5), ("keep", NAN), ("gen", 3)):
        p.bad(A, f"compress {k}={v!r}", lambda k=k, v=v: compress(
            a, "topk" if k == "keep" else "quantize", **{"gen": None, k: v}), k)
    p.bad(A, "compress operator", lambda: compress(a, "zip", gen=None), "operator")
    p.bad(A, "quantize_bound bits=0", lambda: quantize_bound(a, 0), "bits")
    p.bad(A, "quantize_bound nan", lambda: quantize_bound({"w": a["w"] * NAN}, 8), "params")
    for n, t in _variants(b)[:6]:
        p.bad(A, f"relative_error compressed {n}", lambda t=t: relative_error(a, t), "compressed")
    p.good(A, "quantize ±3e38 stays finite", lambda: compress(
        {"w": torch.tensor([3e38, -3e38, 1.0])}, "quantize", bits=8, gen=None),
        lambda out: bool(torch.isfinite(out["w"]).all()))
    p.good(A, "relative_error of zeros", lambda: relative_error(
        {"w": torch.zeros(3)}, {"w": torch.zeros(3)}), lambda e: e == 0.0)


def api_server_opt(p: Probes) -> None:
    from wirelessfl.server.optimizers import ServerOptimizer

    A = "server_opt"
    a, b = _trees()
    for k, v in (("name", "sgdx"), ("lr", NAN), ("lr", -1.0), ("lr", 0.0), ("lr", "1"),
                 ("momentum", 1.5), ("momentum", -0.1), ("betas", (1.0, 0.9)),
                 ("betas", (0.9,)), ("betas", (NAN, 0.9)), ("eps", 0.0), ("eps", -1.0),
                 ("eps", INF)):
        kw = {"name": "adam"} if k != "name" else {}
        p.bad(A, f"ServerOptimizer {k}={v!r}", lambda k=k, v=v, kw=kw: ServerOptimizer(
            **{**kw, k: v}), k)
    for name in ("sgd", "momentum", "adam", "yogi", "adagrad", "ams"):
        try:
            opt = ServerOptimizer(name)
        except ValueError:
            continue
        for n, t in _variants(b):
            p.bad(A, f"{name}.step g {n}", lambda t=t, opt=opt: opt.step(a, t, None), "g",
                  "update", "diverged")
        p.bad(A, f"{name}.step params nan", lambda opt=opt: opt.step(
            {**a, "w": a["w"] * NAN}, b, None), "params")
        p.bad(A, f"{name}.step state wrong", lambda opt=opt: opt.step(a, b, {"m": 1}), "state")
    from wirelessfl.server import aggregation

    for n, call, names in (
            ("weighted_mean a tree, not a list", lambda: aggregation.weighted_mean(a, [1.0]),
             ("trees",)),
            ("weighted_mean a number among trees", lambda: aggregation.weighted_mean(
                [a, 3], [1.0, 1.0]), ("trees[1]",)),
            ("weighted_mean other keys", lambda: aggregation.weighted_mean(
                [a, {"w": a["w"]}], [1.0, 1.0]), ("keys",)),
            ("apply_update params None", lambda: aggregation.apply_update(None, b), ("params",)),
            ("apply_update update list", lambda: aggregation.apply_update(a, {**b, "w": [1.0]}),
             ("update",))):
        p.bad(A, n, call, *names)


def api_masks(p: Probes) -> None:
    from wirelessfl.algorithms.rafed import masks

    A = "masks"
    m, like = _mlp()
    groups = m.unit_groups
    shapes = {k: v.shape for k, v in like.items()}
    rng = np.random.default_rng(0)
    for r in (0.0, 1.5, NAN, -0.1, "0.5", None):
        p.bad(A, f"kept_units ratio={r!r}", lambda r=r: masks.kept_units(groups[0], r), "ratio")
        p.bad(A, f"parameter_fraction ratio={r!r}",
              lambda r=r: masks.parameter_fraction(groups, shapes, r), "ratio")
        p.bad(A, f"ratio_for_fraction fraction={r!r}",
              lambda r=r: masks.ratio_for_fraction(groups, shapes, r), "fraction")
    p.bad(A, "parameter_fraction shapes missing", lambda: masks.parameter_fraction(
        groups, {"fc1.weight": shapes["fc1.weight"]}, 0.5), "shapes", "fc")
    for n, kw in (("policy", {"policy": "psychic"}),
                  ("ratios > 1", {"ratios": [1.5]}), ("ratios nan", {"ratios": [NAN]}),
                  ("ratios str", {"ratios": "0.5"}), ("round_ -1", {"round_": -1}),
                  ("ratios None", {"ratios": None}),
                  ("round_ 1.5", {"round_": 1.5}), ("rng None", {"rng": None}),
                  ("gamma_min 0", {"gamma_min": 0}),
                  ("gamma_min huge", {"gamma_min": 10**6, "policy": "coverage_aware"})):
        base = {"policy": "random", "groups": groups, "ratios": [1.0, 0.5], "round_": 0,
                "rng": rng}
        p.bad(A, f"draw {n}", lambda kw=kw, base=base: masks.draw(**{**base, **kw}),
              n.split()[0])
    p.good(A, "draw no clients", lambda: masks.draw("random", groups, [], 0, rng),
           lambda sel: sel == [])
    p.good(A, "draw ratio 1 keeps all", lambda: masks.draw("random", groups, [1.0], 0, rng),
           lambda sel: all(len(sel[0][g.name]) == g.size for g in groups))


def api_population(p: Probes) -> None:
    from wirelessfl.server import population as pop

    A = "population"
    for k, v in (("kind", "tidal"), ("groups", 0), ("groups", 1.5), ("rounds_per_session", 0),
                 ("rounds_per_session", -3), ("rounds_per_session", 2.5),
                 ("events", ({"round": -1, "join": [0]},)), ("events", ({"rnd": 3},)),
                 ("events", "abc"), ("order", (5, 5)), ("order", ("a",))):
        kw = {"kind": "alternating", "rounds_per_session": 3}
        p.bad(A, f"PopulationConfig {k}={v!r}", lambda k=k, v=v, kw=kw: pop.make_population(
            pop.PopulationConfig(**{**kw, k: v}), 10), k, "event", "session", "population")
    for n in (0, -1, 1.5, "10", True):
        p.bad(A, f"make_population num_clients={n!r}", lambda n=n: pop.make_population(
            pop.PopulationConfig(), n), "num_clients", "clients")
    for t in (-1, 1.5, "1", NAN, None, True):
        p.bad(A, f"check_round {t!r}", lambda t=t: pop.check_round(t), "round", "`t`")
    alt = pop.make_population(pop.PopulationConfig(kind="alternating", rounds_per_session=3), 10)
    for t in (-1, 2.5):
        p.bad(A, f"alternating.active({t})", lambda t=t: alt.active(t), "round", "`t`")
        p.bad(A, f"alternating.session({t})", lambda t=t: alt.session(t), "round", "`t`")
    from wirelessfl.data.partition import deal_labels
    from wirelessfl.net.delays import speed_classes
    from wirelessfl.net.resources import by_half

    rng = np.random.default_rng(0)
    for n, call, names in (
            ("speed_classes num_clients=-1", lambda: speed_classes(-1, rng), ("num_clients",)),
            ("speed_classes rng=3", lambda: speed_classes(10, 3), ("rng",)),
            ("speed_classes shares over 1", lambda: speed_classes(10, rng, (0.5, 0.7, 0.1)),
             ("shares",)),
            ("by_half num_cells=0", lambda: by_half(0, 1.0, 2.0), ("num_cells",)),
            ("deal_labels float labels", lambda: deal_labels(np.arange(5.0), [[1]], rng),
             ("labels",)),
            ("deal_labels no sets", lambda: deal_labels(np.arange(5), [], rng), ("sets",)),
            ("deal_labels rng=0", lambda: deal_labels(np.arange(5), [[1]], 0), ("rng",))):
        p.bad(A, n, call, *names)
    p.good(A, "alternating groups swap", lambda: (alt.active(0), alt.active(3)),
           lambda o: not (set(o[0].tolist()) & set(o[1].tolist())))


def _arr_bad(good: np.ndarray) -> list[tuple[str, object]]:
    """Damaged copies of a real array argument."""
    nan = good.astype(float).copy()
    nan.flat[0] = NAN
    inf = good.astype(float).copy()
    inf.flat[-1] = INF
    neg = good.astype(float).copy()
    neg.flat[0] = -1.0
    return [("nan", nan), ("inf", inf), ("negative", neg), ("wrong shape", good.ravel()[:-1]),
            ("empty", np.zeros((0,))), ("string", "fast"), ("None", None),
            ("complex", good + 1j), ("object", np.array([object()] * good.size, dtype=object))]


def api_uplink(p: Probes) -> None:
    from solvers import uplink

    A = "uplink"
    rate = np.array([[2e6, 1e6, 5e5, 3e6]])
    payload = np.full((1, 4), 1e6)
    for n, v in _arr_bad(rate):
        if n not in ("wrong shape",):
            p.bad(A, f"deadline_outage rate_bps {n}", lambda v=v: uplink.deadline_outage(
                v, payload, 1.0), "rate_bps")
    for n, v in _arr_bad(payload):
        if n not in ("wrong shape",):
            p.bad(A, f"deadline_outage payload_bits {n}", lambda v=v: uplink.deadline_outage(
                rate, v, 1.0), "payload_bits")
    p.bad(A, "deadline_outage shapes", lambda: uplink.deadline_outage(
        rate, np.ones((3, 2)), 1.0), "payload_bits", "rate_bps", "shape")
    for d in (0.0, -1.0, NAN, "1"):
        p.bad(A, f"deadline_outage deadline_s={d!r}", lambda d=d: uplink.deadline_outage(
            rate, payload, d), "deadline_s")
    p.bad(A, "deadline_outage access", lambda: uplink.deadline_outage(
        rate, payload, 1.0, access="cdma"), "access")
    p.bad(A, "deadline_outage compute_s negative", lambda: uplink.deadline_outage(
        rate, payload, 1.0, compute_s=-1.0), "compute_s")
    p.good(A, "deadline_outage zero rate drops", lambda: uplink.deadline_outage(
        np.array([[0.0, 1e9]]), np.full((1, 2), 1e3), 1.0, access="fdma"),
        lambda r: bool(np.asarray(r.arrived).tolist() == [[False, True]]))
    for k, v in (("num_params", 0), ("num_params", 1.5), ("deadline_s", 0.0),
                 ("deadline_s", NAN), ("operator", "gzip"), ("full_bits", 0),
                 ("max_bits", 0), ("max_bits", 64), ("other_bits", -1.0), ("num_tensors", 0),
                 ("compute_s", NAN), ("access", "x")):
        base = {"rate_bps": rate, "num_params": 1000, "deadline_s": 0.1}
        p.bad(A, f"fit_bit_widths {k}={v!r}", lambda k=k, v=v, base=base: uplink.fit_bit_widths(
            **{**base, k: v}), k)
    h = (np.random.default_rng(0).standard_normal((2, 4, 3))
         + 1j * np.random.default_rng(1).standard_normal((2, 4, 3)))
    hn = h.copy()
    hn[0, 0, 0] = NAN
    for n, kw in (("h nan", {"h": hn}), ("h 1-d", {"h": h[0, 0]}), ("h str", {"h": "h"}),
                  ("snr_db nan", {"snr_db": NAN}), ("snr_db str", {"snr_db": "30"}),
                  ("selection shape", {"selection": np.ones((2, 3), bool)}),
                  ("selection float", {"selection": np.full((2, 4), 0.5)}),
                  ("weights negative", {"weights": -np.ones((2, 4))}),
                  ("weights shape", {"weights": np.ones(3)}),
                  ("beam shape", {"beam": np.ones((2, 5))}), ("beam zero", {"beam": np.zeros((2, 3))}),
                  ("method", {"method": "oracle"}), ("seed str", {"seed": "x"})):
        base = {"h": h, "snr_db": 20.0}
        p.bad(A, f"aircomp_mse {n}", lambda kw=kw, base=base: uplink.aircomp_mse(
            **{**base, **kw}), n.split()[0])
    p.good(A, "aircomp_mse nobody selected is inf", lambda: uplink.aircomp_mse(
        h, snr_db=20.0, selection=np.array([[True] * 4, [False] * 4])).mse,
        lambda m: np.isfinite(m[0]) and np.isinf(m[1]))


def api_scheduling(p: Probes) -> None:
    from solvers import scheduling as sc

    A = "scheduling"
    rate = np.array([[3.0, 1.0, 2.0, 5.0]])
    for n, v in _arr_bad(rate):
        if n != "wrong shape":  # a 1-d rate is one instance
            p.bad(A, f"schedule rate_bps {n}", lambda v=v: sc.schedule(v, 2), "rate_bps")
    for k in (0, -1, 5, 1.5, "2", None):
        p.bad(A, f"schedule k={k!r}", lambda k=k: sc.schedule(rate, k), "k")
    p.bad(A, "schedule policy", lambda: sc.schedule(rate, 2, "lottery"), "policy")
    p.bad(A, "schedule pf without average", lambda: sc.schedule(
        rate, 2, "proportional_fair"), "average_bps")
    p.bad(A, "schedule pf average shape", lambda: sc.schedule(
        rate, 2, "proportional_fair", average_bps=np.ones(3)), "average_bps")
    p.bad(A, "schedule age negative", lambda: sc.schedule(rate, 2, "age", age=-np.ones((1, 4))),
          "age")
    p.bad(A, "schedule uniform rng None", lambda: sc.schedule(rate, 2, "uniform"), "rng")
    for k, v in (("window", 0.0), ("window", NAN), ("window", -3.0)):
        p.bad(A, f"update_average {k}={v}", lambda v=v: sc.update_average(
            np.ones((1, 4)), rate, np.ones((1, 4), bool), window=v), "window")
    p.bad(A, "update_average mask shape", lambda: sc.update_average(
        np.ones((1, 4)), rate, np.ones(3, bool)), "mask")
    p.bad(A, "update_average mask float", lambda: sc.update_average(
        np.ones((1, 4)), rate, np.full((1, 4), 0.5)), "mask")
    p.bad(A, "update_age negative", lambda: sc.update_age(-np.ones(4), np.ones(4, bool)), "age")
    p.bad(A, "update_age mask shape", lambda: sc.update_age(np.ones(4), np.ones(3, bool)), "mask")
    p.good(A, "best_channel picks the k best", lambda: sc.schedule(rate, 2),
           lambda r: sorted(np.flatnonzero(np.asarray(r.mask)[0]).tolist()) == [0, 3])


def api_channels(p: Probes) -> None:
    from channels import aircomp
    from channels.rayleigh import path_gain, simo_rayleigh

    A = "channels"
    rng = np.random.default_rng(0)
    for k, v in (("batch_shape", (-1,)), ("batch_shape", "3"), ("n_clients", 0),
                 ("n_clients", 1.5), ("n_antennas", 0), ("rng", None), ("rng", 3),
                 ("gain", -np.ones(4)), ("gain", np.full(4, NAN)), ("gain", np.ones(3))):
        base = {"batch_shape": (2,), "n_clients": 4, "n_antennas": 3, "rng": rng}
        p.bad(A, f"simo_rayleigh {k}={_short(v)[:20]}", lambda k=k, v=v, base=base:
              simo_rayleigh(**{**base, k: v}), k)
    for k, v in (("distance_m", 0.0), ("distance_m", -5.0), ("distance_m", NAN),
                 ("exponent", NAN), ("exponent", -1.0), ("ref_distance_m", 0.0),
                 ("shadowing_db", -2.0), ("rng", None)):
        base = {"distance_m": np.array([10.0, 50.0]), "shadowing_db": 4.0 if k == "rng" else 0.0,
                "rng": rng}
        p.bad(A, f"path_gain {k}={v}", lambda k=k, v=v, base=base: path_gain(**{**base, k: v}),
              k)
    h = simo_rayleigh((2,), 4, 3, np.random.default_rng(1))
    a = h[:, 0, :] / np.linalg.norm(h[:, 0, :], axis=-1, keepdims=True)
    p.bad(A, "beam_gains shapes", lambda: aircomp.beam_gains(a[:, :2], h), "a", "h", "shape")
    p.bad(A, "beam_gains nan", lambda: aircomp.beam_gains(a * NAN, h), "a")
    for k, v in (("power", -1.0), ("power", NAN), ("noise_power", -1.0), ("noise_power", INF),
                 ("weights", -np.ones(4)), ("weights", np.ones(3)), ("a", np.zeros((2, 3))),
                 ("h", np.zeros((2, 4, 3), complex)), ("h", h * NAN), ("weights", np.zeros(4))):
        base = {"h": h, "a": a}
        p.bad(A, f"AirCompCell {k}={_short(v)[:20]}", lambda k=k, v=v, base=base:
              aircomp.AirCompCell(**{**base, k: v}).mse, k, "channel", "beam")
    p.good(A, "AirCompCell noiseless", lambda: aircomp.AirCompCell(h, a, noise_power=0.0).mse,
           lambda m: bool(np.all(m == 0)))
    cell = aircomp.AirCompCell(h, a)
    for n, d in (("nan", np.full((2, 4, 5), NAN)), ("shape", np.ones((2, 3, 5))),
                 ("str", "delta")):
        p.bad(A, f"AirCompCell.receive delta {n}", lambda d=d: cell.receive(d, rng), "delta")
    p.bad(A, "AirCompCell.receive rng None", lambda: cell.receive(np.ones((2, 4, 5)), None), "rng")
    for v in (None, 3, np.zeros(3)):
        p.bad(A, f"complex_normal rng={_short(v)[:20]}", lambda v=v: aircomp.complex_normal(
            (2, 3), v), "rng")
    p.bad(A, "path_gain shadowing rng=3", lambda: path_gain([10.0], shadowing_db=4.0, rng=3),
          "rng")


def api_solvers(p: Probes) -> None:
    from solvers import beamforming, latency, mask_sizes

    A = "solvers"
    h = (np.random.default_rng(0).standard_normal((2, 4, 3))
         + 1j * np.random.default_rng(1).standard_normal((2, 4, 3)))
    hn = h.copy()
    hn[1, 2, 0] = NAN
    for n, kw in (("h nan", {"h": hn}), ("h 1-d", {"h": h[0, 0]}), ("h empty", {"h": h[:, :0]}),
                  ("h str", {"h": "h"}), ("h zero", {"h": np.zeros_like(h)}),
                  ("method", {"method": "magic"}), ("seed str", {"seed": "x"}),
                  ("seed negative", {"seed": -1}), ("unknown option", {"tolerance": 3}),
                  ("random_starts negative", {"random_starts": -1})):
        p.bad(A, f"beamforming.solve {n}", lambda kw=kw: beamforming.solve(**{"h": h, **kw}),
              n.split()[0], "option")
    p.bad(A, "beamforming.solve tiny channel", lambda: beamforming.solve(h * 1e-170), "h")
    p.bad(A, "eigen_beam nan", lambda: beamforming.eigen_beam(hn), "h")
    for k, v in (("shape", (-1, 4, 3)), ("shape", "x"), ("method", "magic"),
                 ("random_starts", -1)):
        p.bad(A, f"working_bytes {k}={v!r}", lambda k=k, v=v: beamforming.working_bytes(
            **{"shape": (2, 4, 3), k: v}), k)
    p.bad(A, "sdr_bound solver", lambda: beamforming.sdr_bound(h[0], solver="NOPE"), "solver")
    lat = np.array([[1.0, 2.0, 0.5], [0.7, 0.9, 1.2]])
    for n, v in _arr_bad(lat):
        if n != "wrong shape":
            p.bad(A, f"mask_sizes.solve unit_latency {n}", lambda v=v: mask_sizes.solve(v, 30),
                  "unit_latency")
    p.good(A, "mask_sizes.solve total 0", lambda: mask_sizes.solve(lat, 0).sizes,
           lambda s: not s.any())
    for n, kw in (("total -3", {"total": -3}),
                  ("total 1.5", {"total": 1.5}), ("cap too small", {"cap": 5}),
                  ("cap negative", {"cap": -1}), ("backend", {"backend": "cplex"}),
                  ("offset nan", {"offset": NAN}), ("offset shape", {"offset": np.ones(7)})):
        p.bad(A, f"mask_sizes.solve {n}", lambda kw=kw: mask_sizes.solve(
            **{"unit_latency": lat, "total": 30, **kw}), n.split()[0])
    cpu = np.full((2, 3), 1e9)
    rate = np.full((2, 3), 1e6)
    base = {"cpu_hz": cpu, "rate_bps": rate, "local_steps": 5, "cycles_per_step": 1e6,
            "model_bits": 1e6}
    for k, v in (("cpu_hz", np.zeros((2, 3))), ("cpu_hz", -cpu), ("cpu_hz", cpu * NAN),
                 ("rate_bps", -rate), ("rate_bps", np.ones((3, 2))), ("local_steps", 0),
                 ("local_steps", 1.5), ("cycles_per_step", -1.0), ("model_bits", NAN),
                 ("client_mask", np.ones(5, bool)), ("tdma", "fair")):
        p.bad(A, f"full_model_latency_oma {k}={_short(v)[:20]}", lambda k=k, v=v:
              latency.full_model_latency_oma(**{**base, k: v}), k)
    base2 = {"cpu_hz": cpu, "local_steps": 5, "cycles_per_step": 1e6, "num_params": 1000}
    for k, v in (("num_params", 0), ("bandwidth_hz", 0.0), ("subcarrier_hz", 1e8),
                 ("symbol_s", -1.0), ("client_mask", np.zeros((2, 3), bool))):
        p.bad(A, f"full_model_latency_aircomp {k}={v!r}", lambda k=k, v=v:
              latency.full_model_latency_aircomp(**{**base2, k: v}), k)
    full = np.array([[1.0, 2.0], [3.0, 4.0]])
    for n, kw in (("sizes shape", {"sizes": np.array([1, 2, 3])}),
                  ("sizes above total", {"sizes": np.array([5, 50])}),
                  ("sizes negative", {"sizes": np.array([-1, 11])}),
                  ("total 0", {"total": 0}), ("full nan", {"full_latency": full * NAN})):
        p.bad(A, f"edge_round_latency {n}", lambda kw=kw: latency.edge_round_latency(
            **{"full_latency": full, "sizes": np.array([4, 6]), "total": 10, **kw}),
            n.split()[0])
    p.bad(A, "round_latency edge_rounds 0", lambda: latency.round_latency(
        full, np.array([4, 6]), 10, edge_rounds=0), "edge_rounds")
    for k, v in (("total", -1), ("num_cells", 0), ("kappa", NAN), ("kappa", -2.0)):
        p.bad(A, f"size_cap {k}={v}", lambda k=k, v=v: latency.size_cap(
            **{"total": 100, "num_cells": 4, k: v}), k)
    for k, v in (("total", -1), ("num_cells", 0), ("num_cells", 1.5)):
        p.bad(A, f"uniform_sizes {k}={v}", lambda k=k, v=v: latency.uniform_sizes(
            **{"total": 10, "num_cells": 4, k: v}), k)
    p.good(A, "uniform_sizes sums to total", lambda: latency.uniform_sizes(10, 4),
           lambda s: int(np.sum(s)) == 10)


# ---------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------
TINY = {"name": "tiny", "seed": 5, "rounds": 3,
        "data": {"dataset": "synthetic", "num_clients": 6, "samples_per_client": 40},
        "model": {"name": "fcnn", "options": {"hidden": 8}},
        "local": {"lr": 0.05, "batch_size": 10, "steps": 2}}


def _deep(n: int = 5000) -> str:
    return "a: " + "[" * n + "]" * n + "\n"


def cli_args(p: Probes, box: Path) -> None:
    A = "cli"
    (box / "t.yaml").write_text(yaml.safe_dump(TINY))
    (box / "deep.yaml").write_text(_deep())
    (box / "list.yaml").write_text("- 1\n- 2\n")
    (box / "empty.yaml").write_text("")
    (box / "bin.yaml").write_bytes(os.urandom(2048))
    (box / "huge.yaml").write_bytes(b"# " + b"x" * (17 << 20) + b"\n")
    (box / "dir.yaml").mkdir()
    (box / "twice.yaml").write_text(yaml.safe_dump(TINY) + "rounds: 50\n")
    (box / "file").write_text("not a folder\n")
    for n, argv in (("missing config", ["run", "nope.yaml"]),
                    ("config is a folder", ["run", "dir.yaml"]),
                    ("binary config", ["run", "bin.yaml"]),
                    ("empty config", ["run", "empty.yaml"]),
                    ("list config", ["run", "list.yaml"]),
                    ("a key given twice", ["run", "twice.yaml"]),
                    ("deep config", ["run", "deep.yaml"]),
                    ("17 MiB config", ["run", "huge.yaml"]),
                    ("unknown preset", ["run", "no_such_preset"]),
                    ("no config", ["run"]),
                    ("--set no =", ["run", "t.yaml", "--set", "rounds"]),
                    ("--set deep", ["run", "t.yaml", "--set", "data=" + "[" * 3000 + "]" * 3000]),
                    ("--out is a file", ["run", "t.yaml", "--out", "file"]),
                    ("--out under a file", ["run", "t.yaml", "--out", "file/r"]),
                    ("--resume no --out", ["run", "t.yaml", "--resume"]),
                    ("--resume missing", ["run", "t.yaml", "--resume", "--out", "nowhere"]),
                    ("--resume not a run", ["run", "t.yaml", "--resume", "--out", "dir.yaml"]),
                    ("--device cuda", ["run", "t.yaml", "--device", "cuda", "--out", "gpu"]),
                    ("--device tpu", ["run", "t.yaml", "--device", "tpu"]),
                    ("--checkpoint-every -1", ["run", "t.yaml", "--checkpoint-every", "-1"]),
                    ("--checkpoint-every nan", ["run", "t.yaml", "--checkpoint-every", "nan"]),
                    ("--workers 1", ["run", "t.yaml", "--engine", "distributed", "--workers", "1"]),
                    ("--workers huge", ["run", "t.yaml", "--engine", "distributed",
                                        "--workers", "100000"]),
                    ("--workers text", ["run", "t.yaml", "--workers", "two"]),
                    ("--engine gpu", ["run", "t.yaml", "--engine", "gpu"]),
                    # issue 57: inert settings and YAML booleans
                    ("--workers 3 without distributed", ["run", "t.yaml", "--workers", "3"]),
                    ("max_bits without quantize", ["run", "t.yaml", "--set", "network.model=tdma",
                                                   "--set", "network.deadline_s=1",
                                                   "--set", "network.max_bits=8"]),
                    ("rate_mbps with fdma", ["run", "t.yaml", "--set", "network.model=fdma",
                                             "--set", "network.rate_mbps=50"]),
                    ("compile=on", ["run", "t.yaml", "--set", "compile=on"]),
                    ("engine=off", ["run", "t.yaml", "--set", "engine=off"]),
                    ("masks --scenario ''", ["masks", "--scenario", ""]),
                    ("unknown command", ["frobnicate"])):
        p.cli(A, f"run {n}" if argv[:1] == ["run"] else n, argv, box,
              allowed=("gpu", "runs") if "cuda" in argv else ())
    sets = ["threads=0", "threads=-3", "threads=1.5", "threads=many", "threads=100000",
            "local.precision=fp8", "local.precision=1", "workers=1", "workers=2.5",
            "rounds=-1", "rounds=nan", "rounds=1e30", "rounds=abc", "rounds=2.5", "seed=-1",
            f"seed={2**70}", "data.num_clients=0", "data.num_clients=1000000",
            "data.dataset=imagenet22k", "data.partition=two_shard", "local.lr=nan",
            "local.lr=inf", "local.lr=-1", "local.batch_size=0", "local.steps=0",
            "model.name=resnet999", "model.options.hidden=-3", "algorithm.name=zzz",
            "network.model=xyz", "network.snr_db=nan", "network.deadline_s=-1",
            "network.scheduler=psychic", "network.compression=quantize",
            "network.compression=zip", "network.bits=0", "network.max_bits=99",
            "network.late=never", "population.kind=alternating",
            "population.kind=alternating,population.rounds_per_session=0",
            "population.kind=events", "initial_model.rule=proposed", "initial_model.scale=nan",
            "target_accuracy=1.5", "target_accuracy=nan", "data.samples_per_client=0",
            "data.data_dir=/nonexistent", "bogus=1", "data.bogus=1", "local.momentum=2",
            "algorithm.name=fedprox,algorithm.mu=-1", "algorithm.name=rafed,algorithm.ratios=[2]",
            "algorithm.name=rafed,algorithm.fraction=0.5,algorithm.ratios=[1,0.5]",
            "algorithm.name=rafed,algorithm.gamma_min=3",
            "algorithm.name=hist,algorithm.cells=0", "algorithm.name=hfedavg,algorithm.cells=7",
            "server_opt.name=adam,server_opt.lr=-1", "clients_per_round=99",
            "network.model=aircomp,network.antennas=0", "network.model=tdma,network.deadline_s=nan",
            "network.model=fdma,network.scheduler=proportional_fair,network.clients_per_slot=0",
            # issue 71 (twelfth session): this round's new settings, hostile values
            "network.model=nr,network.bandwidth_mhz=7", "network.model=nr,network.alpha=1.5",
            "network.model=nr,network.scenario=moon", "network.model=nr,network.cells=0",
            "network.model=nr,network.cells=22", "network.model=nr,network.interference=maybe",
            "network.model=nr,network.bler_target=0", "network.model=nr,network.scs_khz=17",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_noise=-1",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_noise=nan",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_noise=0",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_delta=1",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_target_epsilon=0",
            "algorithm.dp=central,algorithm.weighting=uniform,algorithm.dp_clip_quantile=1",
            "algorithm.dp=local,algorithm.weighting=uniform,algorithm.dp_clip_quantile=0.5",
            "algorithm.dp=shuffle", "algorithm.dp=over_the_air,algorithm.weighting=uniform",
            "algorithm.dp_noise=2",
            "algorithm.name=hist,algorithm.dp=central,algorithm.dp_clip=-1",
            "algorithm.name=hist,algorithm.dp=over_the_air",
            "algorithm.name=hist,algorithm.dp=over_the_air,algorithm.dp_noise=0",
            "algorithm.name=hist,algorithm.clock=wallclock", "algorithm.name=hist,algorithm.clock=link",
            "algorithm.robust=bulyan,algorithm.byzantine=5", "algorithm.robust=bulyan,algorithm.byzantine=-1",
            "algorithm.robust=krum,algorithm.krum_select=0",
            "algorithm.robust=trimmed_mean,algorithm.trim=0.7",
            "algorithm.attack=label_flip", "algorithm.attack=label_flip,algorithm.attackers=1.5",
            "algorithm.robust=bulyan,network.model=aircomp,network.aggregation=over_the_air"]
    for i, s in enumerate(sets):
        argv = ["run", "t.yaml", "--quiet", "--out", f"o{i}"]
        for item in _split_sets(s):
            argv += ["--set", item]
        p.cli(A, f"run --set {s}", argv, box, allowed=(f"o{i}",))
    for n, argv in (("masks --cells 0", ["masks", "--cells", "0"]),
                    ("masks --cells abc", ["masks", "--cells", "abc"]),
                    ("masks --cells huge", ["masks", "--cells", str(10**9)]),
                    ("masks --eps-th nan", ["masks", "--eps-th", "nan"]),
                    ("masks --eps-th inf", ["masks", "--eps-th", "inf"]),
                    ("masks --eps-th 0.5", ["masks", "--eps-th", "0.5"]),
                    ("masks --seed -1", ["masks", "--seed", "-1"]),
                    ("masks --scenario missing", ["masks", "--scenario", "none.npz"]),
                    ("masks --scenario garbage", ["masks", "--scenario", "bin.yaml"]),
                    ("masks --total < cells", ["masks", "--total", "2", "--cells", "4"]),
                    ("beamform --cells huge", ["beamform", "--cells", str(10**9)]),
                    ("beamform --antennas 0", ["beamform", "--antennas", "0"]),
                    ("beamform --snr-db nan", ["beamform", "--snr-db", "nan"]),
                    ("beamform --snr-db inf", ["beamform", "--snr-db", "inf"]),
                    ("beamform --snr-db 1e308", ["beamform", "--snr-db", "1e308"]),
                    ("beamform --instances garbage", ["beamform", "--instances", "bin.yaml"]),
                    ("beamform --method bad", ["beamform", "--method", "oracle"]),
                    ("beamform sca on 100000 cells (work estimate)",
                     ["beamform", "--cells", "100000", "--method", "sca"]),
                    ("beamform --max-minutes 0", ["beamform", "--max-minutes", "0"]),
                    ("figures --style poster", ["figures", "codesign", "--style", "poster"]),
                    ("figures --seeds 3-1", ["figures", "codesign", "--seeds", "3-1"]),
                    ("figures --only nope", ["figures", "codesign", "--only", "nope"]),
                    ("figures --no-title=1", ["figures", "codesign", "--no-title=1"]),
                    ("plot missing", ["plot", "nowhere"]),
                    ("plot a file", ["plot", "file"]),
                    ("plot a non-run folder", ["plot", "dir.yaml"]),
                    ("retime non-run", ["retime", "dir.yaml"]),
                    ("figures unknown paper", ["figures", "nopaper", "--dry-run"]),
                    ("figures path paper", ["figures", "../../etc", "--dry-run"]),
                    ("figures absolute paper", ["figures", "/etc", "--dry-run"]),
                    ("figures --only unknown", ["figures", "hist", "--only", "fig99", "--dry-run"]),
                    ("figures --jobs 0", ["figures", "hist", "--jobs", "0"]),
                    ("figures --cpus-per-run 0", ["figures", "hist", "--cpus-per-run", "0"]),
                    ("figures --gpus-per-run -1", ["figures", "hist", "--gpus-per-run", "-1"]),
                    ("figures --retries -1", ["figures", "hist", "--retries", "-1"]),
                    ("figures --data-dir missing", ["figures", "hist", "--data-dir", "nowhere",
                                                    "--dry-run"]),
                    ("figures --out a file", ["figures", "hist", "--out", "file", "--dry-run"]),
                    ("figures ray unreachable", ["figures", "hist", "--only", "fig3", "--executor",
                                                 "ray", "--address", "127.0.0.1:1", "--out", "rep"]),
                    ("sweep --grid no =", ["sweep", "t.yaml", "--grid", "rounds"]),
                    ("sweep --grid empty", ["sweep", "t.yaml", "--grid", "rounds="]),
                    ("sweep --grid duplicate", ["sweep", "t.yaml", "--grid", "rounds=1,1.0"]),
                    ("sweep --grid unknown key", ["sweep", "t.yaml", "--grid", "bogus=1,2"]),
                    ("sweep --grid huge", ["sweep", "t.yaml", "--grid",
                                           "seed=" + ",".join(map(str, range(3000))), "--grid",
                                           "rounds=" + ",".join(map(str, range(1, 3000)))]),
                    ("sweep --seeds a", ["sweep", "t.yaml", "--seeds", "a"]),
                    ("sweep --seeds -1", ["sweep", "t.yaml", "--seeds", "-1"]),
                    ("sweep --seeds dup", ["sweep", "t.yaml", "--seeds", "1,1"]),
                    ("sweep --out a file", ["sweep", "t.yaml", "--out", "file"])):
        p.cli(A, n, argv, box, allowed=("rep",))
    p.cli(A, "masks --total 1e12 is solved", ["masks", "--total", str(10**12)], box, expect=0)


def _split_sets(s: str) -> list[str]:
    """``a=1,b=2`` -> two --set items (values here hold no ``,key=``)."""
    out: list[str] = []
    for part in s.split(","):
        if "=" in part.split("[")[0] or not out:
            out.append(part)
        else:
            out[-1] += "," + part
    return out


# ---------------------------------------------------------------------------------------
# Damaged run folders, planted links, payloads
# ---------------------------------------------------------------------------------------
RUN_FILES = ("config.yaml", "meta.json", "metrics.jsonl", "metrics.csv", "summary.json",
             "checkpoint.pt")


def _finished_run(box: Path) -> Path:
    from wirelessfl.cli import main

    (box / "t.yaml").write_text(yaml.safe_dump(TINY))
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["run", str(box / "t.yaml"), "--out", str(box / "base"), "--quiet"])
    return box / "base"


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "empty":
        path.write_bytes(b"")
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "garbage":
        path.write_bytes(os.urandom(max(64, len(data))))
    elif how == "deep":
        path.write_text(("[" * 5000 + "]" * 5000 + "\n") if path.suffix != ".yaml" else _deep())
    elif how == "nan":
        path.write_bytes(data.replace(b"0.", b"NaN0.", 1).replace(b"0.", b"Infinity", 1))
    elif how == "folder":
        path.unlink()
        path.mkdir()
    elif how == "array":
        path.write_text("[1, 2, 3]\n" * 3)


def files_run_folders(p: Probes, box: Path, marker: Path) -> None:
    """Damage one file of a finished run; resume, plot and retime it.

    The run's own records (config, meta, rows, checkpoint) damaged must be refused; the
    derived files (metrics.csv, summary.json) are rewritten from the rows by a resume, and
    plot/retime do not read them (nor plot the config): those must succeed, healed.
    """
    A = "damaged run folder"
    base = _finished_run(box)
    reads = {"resume": set(RUN_FILES) - {"metrics.csv", "summary.json"},
             "plot": {"metrics.jsonl"}, "retime": {"config.yaml", "metrics.jsonl"}}
    i = 0
    for f in RUN_FILES:
        for how in ("empty", "truncated", "garbage", "deep", "nan", "folder", "array"):
            if how in ("deep", "nan", "array") and f == "checkpoint.pt" or (
                    how == "nan" and f == "meta.json"):  # meta.json has no number to spoil
                continue
            for cmd in ("resume", "plot", "retime"):
                if cmd != "resume" and f in ("checkpoint.pt", "meta.json"):
                    continue
                if how == "folder" and f not in reads[cmd]:
                    continue  # a folder in place of a file nobody reads: nothing to say
                i += 1
                run = box / f"d{i}"
                shutil.copytree(base, run, symlinks=True)
                _damage(run / f, how)
                argv = {"resume": ["run", "t.yaml", "--resume", "--out", run.name, "--quiet"],
                        "plot": ["plot", run.name, "--out", f"d{i}.png"],
                        "retime": ["retime", run.name, "--set", "network.model=tdma"]}[cmd]
                expect = 2 if f in reads[cmd] else 0
                code, _ = p.cli(A, f"{cmd}: {f} {how}", argv, box,
                                allowed=(run.name, f"d{i}.png"), expect=expect)
                if expect == 0 and cmd == "resume" and code == 0 and \
                        (run / f).read_bytes() != (base / f).read_bytes() and f == "metrics.csv":
                    p._add(A, f"{cmd}: {f} {how} healed", "silent", "not rewritten")
    # rows without test_accuracy, non-object rows
    for cmd in ("plot", "retime"):
        i += 1
        run = box / f"d{i}"
        shutil.copytree(base, run, symlinks=True)
        rows = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines()]
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({k: v for k, v in r.items() if k != "test_accuracy"}) + "\n" for r in rows))
        argv = ["plot", run.name, "--out", f"d{i}.png"] if cmd == "plot" else [
            "retime", run.name]
        p.cli(A, f"{cmd}: rows without test_accuracy", argv, box, allowed=(run.name, f"d{i}.png"))
    # a checkpoint that runs code when unpickled
    run = box / "payload"
    shutil.copytree(base, run, symlinks=True)
    with open(run / "checkpoint.pt", "wb") as fh:
        pickle.dump({"state": Payload(marker)}, fh)
    p.cli("payload", "resume: pickled checkpoint", ["run", "t.yaml", "--resume", "--out",
                                                    "payload", "--quiet"], box,
          allowed=("payload",))
    run = box / "payload2"
    shutil.copytree(base, run, symlinks=True)
    torch.save({"state": Payload(marker)}, run / "checkpoint.pt")
    p.cli("payload", "resume: torch.save payload", ["run", "t.yaml", "--resume", "--out",
                                                    "payload2", "--quiet"], box,
          allowed=("payload2",))
    run = box / "payload3"
    shutil.copytree(base, run, symlinks=True)
    (run / "config.yaml").write_text(f"!!python/object/apply:os.system ['touch {marker}']\n")
    p.cli("payload", "resume: YAML python tag", ["run", "t.yaml", "--resume", "--out",
                                                 "payload3", "--quiet"], box, allowed=("payload3",))
    (box / "tag.yaml").write_text(f"name: !!python/object/apply:os.system ['touch {marker}']\n")
    p.cli("payload", "run: YAML python tag", ["run", "tag.yaml", "--out", "ptag"], box,
          allowed=("ptag",))
    np.savez(box / "obj.npz", h=np.array([Payload(marker)], dtype=object),
             cpu_hz=np.array([Payload(marker)], dtype=object))
    p.cli("payload", "beamform: object npz", ["beamform", "--instances", "obj.npz"], box)
    p.cli("payload", "masks: object npz", ["masks", "--scenario", "obj.npz"], box)
    np.savez(box / "real.npz", h=np.ones((2, 4, 3)))
    p.cli("cli", "beamform: real h", ["beamform", "--instances", "real.npz"], box)
    hn = np.ones((2, 4, 3), complex)
    hn[0, 0, 0] = NAN
    np.savez(box / "nan.npz", h=hn, cpu_hz=np.full((2, 3), NAN), rate_bps=np.ones((2, 3)))
    p.cli("cli", "beamform: NaN h", ["beamform", "--instances", "nan.npz"], box)
    p.cli("cli", "masks: NaN scenario", ["masks", "--scenario", "nan.npz"], box)
    np.savez(box / "shape.npz", cpu_hz=np.ones((2, 3)), rate_bps=np.ones((3, 2)))
    p.cli("cli", "masks: mismatched scenario", ["masks", "--scenario", "shape.npz"], box)


def files_links(p: Probes, box: Path) -> None:
    A = "planted link"
    base = box / "base"
    victim = box / "victim.txt"
    victim.write_text("precious\n")
    for f in (*RUN_FILES, "accuracy.png", ".lock"):
        run = box / f"l-{f.strip('.')}"
        shutil.copytree(base, run, symlinks=True)
        (run / f).unlink(missing_ok=True)  # a finished run leaves no .lock
        (run / f).symlink_to(victim)
        p.cli(A, f"resume with {f} a link", ["run", "t.yaml", "--resume", "--out", run.name,
                                             "--quiet"], box, allowed=(run.name,))
        if victim.read_text() != "precious\n":
            p._add(A, f"victim after {f}", "outside", "victim changed")
            victim.write_text("precious\n")
    (box / "linkrun").symlink_to(base)
    p.cli(A, "run folder is a link", ["run", "t.yaml", "--resume", "--out", "linkrun", "--quiet"],
          box)
    (box / "vplot.png").symlink_to(victim)
    p.cli(A, "plot --out a link", ["plot", "base", "--out", "vplot.png"], box)
    (box / "vre.csv").symlink_to(victim)
    p.cli(A, "retime --out a link", ["retime", "base", "--out", "vre.csv"], box)
    (box / "vdir").mkdir()
    (box / "vdir" / "secret.txt").write_text("x\n")
    (box / "newrun").symlink_to(box / "vdir")
    p.cli(A, "run --out a link to a folder", ["run", "t.yaml", "--out", "newrun", "--quiet"], box)
    proj = box / "proj"
    (proj / "runs").mkdir(parents=True)
    (proj / "README.md").write_text("my project\n")
    p.cli(A, "sweep --out a project with runs/", ["sweep", "t.yaml", "--out", "proj",
                                                  "--quiet"], box)
    p.cli(A, "figures --out a project with runs/", ["figures", "hist", "--out", "proj",
                                                    "--only", "fig3", "--quiet"], box)
    rep = box / "rep2"
    rep.mkdir()
    (rep / "README.md").symlink_to(victim)
    p.cli(A, "sweep --out with README a link", ["sweep", "t.yaml", "--out", "rep2", "--quiet"],
          box)
    if victim.read_text() != "precious\n" or (proj / "README.md").read_text() != "my project\n":
        p._add(A, "victims intact", "outside", "a victim changed")
    # trackers: their folder and database planted as links out of the run folder (issue 57)
    import importlib.util

    outside = box / "tracker-outside"
    outside.mkdir()
    for tracker, name, target in (("tensorboard", "tensorboard", outside),
                                  ("mlflow", "mlflow.db", outside / "new.db")):
        if importlib.util.find_spec(tracker) is None:
            continue
        run = box / f"t-{tracker}"
        shutil.copytree(base, run, symlinks=True)
        (run / name).symlink_to(target, target_is_directory=target.is_dir())
        os.environ.pop("MLFLOW_TRACKING_URI", None)
        p.cli(A, f"--tracker {tracker} with RUN/{name} a link",
              ["run", "t.yaml", "--resume", "--out", run.name, "--quiet", "--tracker", tracker],
              box, allowed=(run.name,), expect=0)
        if any(outside.iterdir()):
            p._add(A, f"{tracker} wrote through the link", "outside", str(list(outside.iterdir())))


def files_data(p: Probes, box: Path, marker: Path) -> None:
    from wirelessfl.data import load_dataset
    from wirelessfl.data.text import read_split

    A = "damaged data"
    real = Path("/usr/share/datasets/fashion-mnist")
    stems = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte"]

    def mnist(name: str, damage: Callable[[dict[str, bytes]], None]) -> Path:
        d = box / "data" / name
        d.mkdir(parents=True)
        raw = {s: gzip.decompress((real / f"{s}.gz").read_bytes()) for s in stems}
        raw = {s: (b[: 16 + 28 * 28 * 50] if "images" in s else b[:8 + 50]) for s, b in raw.items()}
        raw = {s: b[:4] + (50).to_bytes(4, "big") + b[8:] for s, b in raw.items()}
        damage(raw)
        for s, b in raw.items():
            (d / s).write_bytes(b)
        return d

    def setb(key, fn):
        return lambda raw: raw.__setitem__(key, fn(raw[key]))

    for n, dmg in (("labels count", setb(stems[1], lambda b: b[:-5])),
                   ("bad magic", setb(stems[0], lambda b: b"\x01" + b[1:])),
                   ("label 200", setb(stems[3], lambda b: b[:-1] + bytes([200]))),
                   ("header too big", setb(stems[0], lambda b: b[:4] + (10**9).to_bytes(4, "big")
                                           + b[8:])),
                   ("ndim 0", setb(stems[0], lambda b: b[:3] + b"\x00")),
                   ("float type", setb(stems[1], lambda b: b[:2] + b"\x0d" + b[3:])),
                   ("images 2-d", setb(stems[0], lambda b: b[:3] + b"\x02" + b[4:12] + b[16:]))):
        d = mnist(n.replace(" ", "_"), dmg)
        p.bad(A, f"mnist {n}", lambda d=d: load_dataset("mnist", data_dir=d), "mnist", "idx",
              str(d))
    ok = mnist("ok", lambda raw: None)
    p.good(A, "mnist 50 images", lambda: load_dataset("mnist", data_dir=ok),
           lambda s: len(s.train) == 50)
    cdir = box / "data" / "cifar" / "cifar-10-batches-py"
    cdir.mkdir(parents=True)
    for f in ["test_batch", *[f"data_batch_{k}" for k in range(1, 6)]]:
        with open(cdir / f, "wb") as fh:
            pickle.dump({b"data": Payload(marker), b"labels": [0]}, fh)
    p.bad("payload", "cifar10 pickled payload", lambda: load_dataset(
        "cifar10", data_dir=cdir.parent), "cifar")
    for f in ["test_batch", *[f"data_batch_{k}" for k in range(1, 6)]]:
        with open(cdir / f, "wb") as fh:
            pickle.dump({b"data": np.zeros((3, 100), np.uint8), b"labels": [0, 1, 2]}, fh)
    p.bad(A, "cifar10 wrong width", lambda: load_dataset("cifar10", data_dir=cdir.parent),
          "cifar", "3072")
    sdir = box / "data" / "svhn"
    sdir.mkdir(parents=True)
    for f in ("train_32x32.mat", "test_32x32.mat"):
        (sdir / f).write_bytes(os.urandom(500))
    p.bad(A, "svhn garbage", lambda: load_dataset("svhn", data_dir=sdir), "svhn", ".mat")
    # text rows
    t = box / "data" / "SST-2"
    cases = {"arrays": "[1, 2]\n", "float label": '{"sentence": "a", "label": 1.5}\n',
             "null sentence": '{"sentence": null, "label": 1}\n',
             "label 7": '{"sentence": "a", "label": 7}\n',
             "bool label": '{"sentence": "a", "label": true}\n',
             "string label": '{"sentence": "a", "label": "yes"}\n',
             "deep": "[" * 5000 + "]" * 5000 + "\n", "not json": "{sentence: a\n",
             "missing label": '{"sentence": "a"}\n'}
    for n, line in cases.items():
        shutil.rmtree(t, ignore_errors=True)
        t.mkdir(parents=True)
        (t / "train.jsonl").write_text('{"sentence": "good", "label": 1}\n' + line)
        p.bad(A, f"sst2 jsonl {n}", lambda: read_split("sst2", t.parent, ("train",)), "train",
              "sst", "line", "row")
    for n, body, want in (
            ("number sentence read as its digits", '{"sentence": 3, "label": 0}\n', "3"),
            ("field of 200 KB", None, "a" * 200_000)):
        shutil.rmtree(t, ignore_errors=True)
        t.mkdir(parents=True)
        if body is None:
            (t / "train.tsv").write_text("sentence\tlabel\n" + "a" * 200_000 + "\t1\n")
        else:
            (t / "train.jsonl").write_text(body)
        p.good(A, f"sst2 {n}", lambda: read_split("sst2", t.parent, ("train",)),
               lambda r, want=want: r[0][0][0] == want)
    tsv = {"float label": "sentence\tlabel\nhello\t0.7\n", "missing column": "sentence\nhello\n",
           "empty": "", "binary": "\x00\x01\x02\n"}
    for n, body in tsv.items():
        shutil.rmtree(t, ignore_errors=True)
        t.mkdir(parents=True)
        (t / "train.tsv").write_text(body)
        p.bad(A, f"sst2 tsv {n}", lambda: read_split("sst2", t.parent, ("train",)), "train",
              "sst", "line", "row", "label", "column")
    g = box / "data" / "gpt2"
    g.mkdir(parents=True)
    (g / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_layer": 1, "n_head": 2,
                                               "n_embd": 8, "vocab_size": 50, "n_positions": 16,
                                               "bos_token_id": 0, "eos_token_id": 0}))
    (g / "model.safetensors").write_bytes(os.urandom(300))
    from wirelessfl.models import build_model
    p.bad(A, "gpt2 garbage safetensors", lambda: build_model(
        "gpt2_lora", (16,), 2, seed=0, model_dir=str(g)), "safetensors", "gpt2", str(g))
    from safetensors.torch import save_file
    save_file({"wte.weight": torch.zeros(7, 3)}, str(g / "model.safetensors"))
    p.bad(A, "gpt2 safetensors disagrees with config", lambda: build_model(
        "gpt2_lora", (16,), 2, seed=0, model_dir=str(g)), "safetensors", "config", "shape")


def api_edges(p: Probes) -> None:
    """Issue 57, item 9: the API edges of the third review, each with the bad argument named."""
    from channels.aircomp import AirCompCell
    from channels.rates import tdma_rate
    from channels.rayleigh import simo_rayleigh
    from channels.validation import check_memory
    from solvers import latency, scheduling, uplink
    from wirelessfl.net.compression import compress, quantize_bound
    from wirelessfl.server.population import AlternatingGroups

    A = "api edges"
    h = simo_rayleigh((2,), 4, 3, np.random.default_rng(1))
    beam = h[:, 0, :]
    p.bad(A, "aircomp_mse selecting nobody", lambda: uplink.aircomp_mse(
        h, snr_db=20.0, selection=np.zeros((2, 4), bool)), "selection")
    p.bad(A, "aircomp_mse all-zero weights", lambda: uplink.aircomp_mse(
        h, snr_db=20.0, weights=np.zeros((2, 4))), "weights")
    p.bad(A, "proportional fair, denormal averages", lambda: scheduling.schedule(
        np.ones((1, 4)), 2, "proportional_fair", average_bps=np.full((1, 4), 1e-320)),
        "average_bps")
    p.bad(A, "update_variance(-5, 0.1)", lambda: AirCompCell(h, beam).update_variance(-5, 0.1),
          "num_entries")
    p.bad(A, "update_variance(5, nan)", lambda: AirCompCell(h, beam).update_variance(5, np.nan),
          "lr")
    p.good(A, "compress an empty tensor", lambda: compress(
        {"w": torch.ones(0)}, "quantize", gen=torch.Generator()), lambda o: o["w"].numel() == 0)
    p.good(A, "quantize_bound of an empty tensor", lambda: quantize_bound(
        {"w": torch.ones(0)}, 4), lambda o: o == 0.0)
    p.bad(A, "alternating order past the groups", lambda: AlternatingGroups(
        groups=[[0], [1]], rounds_per_session=5, order=[0, 5]), "order")
    p.bad(A, "alternating empty group", lambda: AlternatingGroups(
        groups=[[], [1]], rounds_per_session=5), "groups")
    p.bad(A, "tdma_rate snr of another shape", lambda: tdma_rate(h, snr=np.ones(7)), "snr")
    p.bad(A, "check_memory(nan)", lambda: check_memory(np.nan, "x", "y"), "estimate")
    p.bad(A, "oma latency with no cell", lambda: latency.full_model_latency_oma(
        np.ones((0, 3)), np.ones((0, 3)), local_steps=1, cycles_per_step=1.0, model_bits=1.0),
        "cpu_hz")


def api_runs_and_plugins(p: Probes) -> None:
    """Issue 57, items 6 and 8: a multi-task run that learns nothing, a rule's bad corrections."""
    import wirelessfl
    from wirelessfl import registry
    from wirelessfl.engine.client import LocalSGD
    from wirelessfl.run.kinds import open_run, run_job

    A = "runs and plug-ins"
    with tempfile.TemporaryDirectory() as tmp:
        def nothing() -> dict:
            job = open_run({"tasks": ["synthetic_linear"], "pool": {"clients": 20},
                            "max_time": 1e-6, "method": {"name": "fedast", "requests": 4,
                                                         "ratio": 4}})
            return run_job(job, Path(tmp) / "m", quiet=True)
        p.good(A, "multi-task run ending before any round says so", nothing,
               lambda s: s["learned_nothing"] is True)

        class Shrunk(LocalSGD):
            elementwise = True

            def __init__(self, model, hp, **_):
                super().__init__(model, hp)

            def correct(self, grads, params, start, ctx):
                return {k: g.sum().reshape(1) for k, g in grads.items()}

        wirelessfl.register_local_rule("probe_shrunk", Shrunk)
        try:
            def train() -> str:
                raw = {"rounds": 1, "data": {"dataset": "synthetic", "num_clients": 3,
                                             "samples_per_client": 20},
                       "model": {"name": "linear"}, "algorithm": {"name": "probe_shrunk"}}
                try:
                    run_job(open_run(raw), Path(tmp) / "r", quiet=True)
                except RuntimeError as exc:  # the engine's ClientError, one line in the CLI
                    return str(exc)
                return "trained"
            p.good(A, "rule whose correct() returns (1,) tensors", train,
                   lambda msg: "correct() returned (1,)" in msg)
        finally:
            registry.unregister("probe_shrunk")


def fifth_pass(p: Probes, box: Path) -> None:
    """Issue 93's classes: a plug-in hook that raises or answers badly (before any folder is
    claimed), a folder planted where a run writes a file, --publish into --out, a moved
    plug-in on --resume, list with a plug-in, two runs to default folders in one second."""
    from wirelessfl import registry
    from wirelessfl.algorithms.fedavg import FedAvg, FedAvgHParams

    A = "fifth pass"
    (box / "t.yaml").write_text(yaml.safe_dump(TINY))
    for name, work in (("probe_raises", "raise"), ("probe_nan", float("nan")),
                       ("probe_text", "2")):
        def round_work(cls, settings, work=work):
            if work == "raise":
                raise KeyError("cells")
            return work
        registry.register(name, FedAvgHParams, type(name, (FedAvg,), {
            "round_work": classmethod(round_work)}))
        try:
            (box / f"{name}.yaml").write_text(yaml.safe_dump({**TINY, "algorithm": {"name": name}}))
            p.cli(A, f"sweep: round_work {work!r}", ["sweep", f"{name}.yaml", "--grid",
                                                      "local.lr=0.01,0.02", "--out",
                                                      f"sw-{name}", "--quiet"], box)
        finally:
            registry.unregister(name)
    run = box / "planted"
    shutil.copytree(_finished_run(box), run)
    (run / "summary.json").unlink(missing_ok=True)
    (run / "diverged.json").mkdir()
    p.cli(A, "a folder planted at diverged.json", ["run", "t.yaml", "--resume", "--out",
                                                   "planted", "--quiet"], box)
    p.cli(A, "--publish into --out", ["figures", "hist", "--only", "fig3", "--out", "same",
                                      "--publish", "same", "--quiet"], box)
    (box / "plug").mkdir()
    (box / "plug" / "probe_listed.py").write_text(
        "from wirelessfl.server.robust import Mean, register_aggregator\n"
        "class Plain(Mean):\n    def __init__(self, uplink=None):\n        pass\n"
        "register_aggregator('probe_listed', Plain)\n")
    p.cli(A, "list --algorithms --plugin", ["list", "--algorithms", "--plugin",
                                            "plug/probe_listed.py"], box, expect=0)
    # fourth session: two runs of one config without --out in one second (pasted commands)
    for i in (1, 2):
        p.cli(A, f"run without --out, twice in a second ({i})",
              ["run", "t.yaml", "--set", "rounds=1", "--quiet"], box, allowed=("runs",), expect=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="one line of JSON")
    args = ap.parse_args()
    os.environ.setdefault("WIRELESSFL_MAX_BYTES", str(4 << 30))
    p = Probes()
    with tempfile.TemporaryDirectory() as tmp:
        box = Path(tmp)
        marker = box / "PWNED"
        os.environ["HOME"] = str(box / "home")
        (box / "home").mkdir()
        for part in (api_initial_model, api_submodel, api_compression, api_server_opt, api_masks,
                     api_population, api_uplink, api_scheduling, api_channels, api_solvers,
                     api_edges, api_runs_and_plugins):
            part(p)
        (box / "c").mkdir()
        cli_args(p, box / "c")
        (box / "f").mkdir()
        files_run_folders(p, box / "f", marker)
        files_links(p, box / "f")
        files_data(p, box, marker)
        (box / "g").mkdir()
        fifth_pass(p, box / "g")
        executed = marker.exists()
    rep = p.report()
    rep["code_execution"] = int(executed)
    print(json.dumps(rep, indent=None if args.json else 1))


if __name__ == "__main__":
    main()
