"""Re-time a finished round-based run under another link model, without training again.

Training does not depend on the link (the clock does), so a run's accuracy at each round
stands and only its simulated time changes; ``wirelessfl retime RUN --set network.KEY=V``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from wirelessfl.errors import RunFolderError
from wirelessfl.net.links import NetworkConfig, RoundCost, learning_keys, link_class, make_link, retime
from wirelessfl.rng import Seeds
from wirelessfl.run.config import ConfigError, apply_overrides
from wirelessfl.run.kinds import kind_of, resolve_config
from wirelessfl.run.records import RunRecord


def retime_run(folder: str | Path, overrides: list[str]) -> list[dict[str, Any]]:
    """A finished (or running) round-based run's rows, timed under another link model.

    ``overrides`` set ``network.*`` keys only (e.g. ``network.model=tdma``,
    ``network.snr_db=10``); training does not depend on the link, so the run's accuracy at
    each round stands and only ``sim_time_s`` changes (:func:`wirelessfl.net.links.retime`).
    The payloads are those the run timed (its ``params_per_vector`` cannot change).
    """
    if not isinstance(overrides, (list, tuple)) or not all(isinstance(o, str) for o in overrides):
        raise ConfigError("overrides must be a list of 'network.KEY=VALUE' strings, e.g. "
                          "['network.model=tdma']")
    record = RunRecord(folder)
    if not (Path(folder) / "config.yaml").is_file():
        raise RunFolderError(f"{folder} holds no run (no config.yaml); pass a run folder")
    keys = [o.split("=", 1)[0].strip() for o in overrides]
    bad = [k for k in keys if not k.startswith("network.") and k != "network"]
    if bad:
        raise ConfigError(f"--set {bad[0]}: re-timing changes only network.* keys (the link), "
                          "not training; train a new run for other changes")
    shaping = learning_keys()  # derived from the registered link models' settings
    learning = [k for k in keys if k.split(".", 1)[-1] in shaping]
    if learning:
        raise ConfigError(f"--set {learning[0]}: this setting changes what the run learned, not "
                          "only its clock; train a new run for it")
    if any(k in ("network", "network.params_per_vector") for k in keys):
        raise ConfigError("--set network / network.params_per_vector: the payloads are the "
                          "run's; set network.<key> one at a time (model, rate_mbps, snr_db, ...)")
    raw = record.config()
    if not kind_of(raw).retimable or "algorithm" not in raw:
        raise ConfigError(f"{folder} is not a round-based run; only those can be re-timed")
    trained = make_link(resolve_config(raw).network)
    if trained.shaping():
        raise ConfigError(f"{folder} was trained with network.{trained.shaping()[0]}: its link "
                          "decided who was aggregated, so another link would change what it "
                          "learned; train a new run instead")
    cfg = resolve_config(_for_new_model(apply_overrides(raw, overrides), keys))
    rows = record.rows()
    if not rows:
        raise RunFolderError(f"{folder} has no metrics rows yet")
    bad = next((r for r in rows if not isinstance(r.get("round"), int)
                or "test_accuracy" not in r), None)
    if bad is not None:
        raise RunFolderError(f"{folder}: a metrics row lacks its round or test_accuracy (the "
                             "folder is damaged or not a round-based run's); train it again")
    link = make_link(cfg.network, seeds=Seeds(cfg.seed))
    try:  # a link whose rates round to 0 would clock every round as infinite
        link.check_reachable(0, 1, 1)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    times = retime(rows, link, Seeds(cfg.seed))
    out = [{"round": r["round"], "test_accuracy": r["test_accuracy"], "sim_time_s": t}
           for r, t in zip(rows, times)]
    lost = _outage(rows, link, Seeds(cfg.seed))
    if lost is not None:  # nr: the client-rounds in outage up to each row
        for row, n in zip(out, lost):
            row["outage_clients"] = n
    return out


def _outage(rows: list[dict[str, Any]], link: Any, seeds: Seeds) -> list[int] | None:
    """Client-rounds in outage up to each row under ``link`` (None: a link without outage).

    Each round's channels are drawn again from the stream the clock read (``("network",
    t)``), so the count is that of the times :func:`~wirelessfl.net.links.retime` gave;
    hierarchical rounds (their cells) and rows without client ids are not counted.
    """
    settings = getattr(link, "settings", None)
    if not getattr(settings, "outage", False) or not hasattr(link, "channels"):
        return None
    total, out, first = 0, [], 0
    for row in rows:
        costs = row.get("round_costs") or []
        first = row["round"] - len(costs)
        for i, values in enumerate(costs):
            cost = RoundCost.from_list(values)
            if cost.ids is None or cost.cells is not None:
                continue
            ids = np.asarray(cost.ids, int)
            up = link.channels(cost.population, seeds.generator("network", first + i + 1)).uplink(
                ids, np.full(len(ids), cost.uplink * link.cfg.bits_per_param), None,
                cost.max_steps * link.cfg.step_seconds)
            total += int(np.sum(up.outage)) if up.outage is not None else 0
        out.append(total)
    return out


def _for_new_model(raw: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    """``raw`` with the network settings the new link model lacks left out.

    Re-timing a TDMA run under ``network.model=fixed`` keeps the run's ``step_seconds`` and
    payloads; its ``snr_db`` and ``antennas`` belong to the old link, not the new one. A
    setting named on the command line stays, so one the new model lacks is refused.
    """
    net = raw.get("network")
    if not isinstance(net, dict):
        return raw
    try:
        own = link_class(net.get("model", "none")).Settings
    except ValueError:
        return raw  # the unknown model is refused, with the known ones, when resolved
    keep = ({f.name for f in dataclasses.fields(NetworkConfig)}
            | {f.name for f in dataclasses.fields(own)}
            | {k.split(".", 1)[1] for k in keys if k.startswith("network.")})
    return {**raw, "network": {k: v for k, v in net.items() if k in keep}}
