"""The fields every config class had when run keys were frozen (2026-11-25), with defaults.

Generated once from the classes of that day and never edited: :func:`~wirelessfl.run.configtypes.key_view`
keeps these fields in a run key always and any later field only when it differs from its
default, so a field added with a default re-keys no existing run. Settings that were added
after the first runs but before this record (``threads``, ``precision``, the link's
learning-shaping settings, ...) are not here: they too enter a key only when set. A frozen
field whose class no longer has it enters with the default recorded here.

The one kind of later entry: a field added with a default that *changes* what runs compute
is recorded here with the value runs made before it had, so that it enters every key of its
class and no run computed the old way is reused for the new default. Each such entry is
dated below, with its reason.
"""

from __future__ import annotations

from typing import Any

#: Marks a field that had no default.
REQUIRED: Any = object()

#: ``module.QualName`` → ``(base, {field: default}, dropped)``: the fields of another entry
#: (its base, None: none), with these added or their defaults changed, less ``dropped``.
#: REQUIRED marks a field without a default. Read through :data:`FROZEN`.
_RECORD: dict[str, tuple[str | None, dict[str, Any], tuple[str, ...]]] = {
    'wirelessfl.algorithms.fedast.centralized.CentralizedHParams': (
        None,
        {
            'epochs': 10,
        },
        (),
    ),
    'wirelessfl.algorithms.hist.hfedavg.HFedAvgHParams': (
        None,
        {
            'cells': 2,
            'edge_rounds': 5,
        },
        (),
    ),
    'wirelessfl.run.config.ModelConfig': (
        None,
        {
            'name': 'fcnn',
            'options': {},
        },
        (),
    ),
    'wirelessfl.run.configtypes.AlgorithmConfig': (
        None,
        {
            'name': REQUIRED,
            'hparams': REQUIRED,
        },
        (),
    ),
    'wirelessfl.server.population.PopulationConfig': (
        None,
        {
            'kind': 'static',
            'groups': 2,
            'rounds_per_session': None,
            'events': [],
            'order': [],
        },
        (),
    ),
    'wirelessfl.run.multitask.PoolConfig': (
        None,
        {
            'clients': 1000,
            'available': 300,
            'speed_shares': [0.25, 0.5, 0.25],
            'speed_multipliers': [1.3, 1.0, 0.7],
            'kappa': 0.5,
            'free_on_cancel': False,
        },
        (),
    ),
    'wirelessfl.run.tasks.TaskConfig': (
        None,
        {
            'name': REQUIRED,
            'data': REQUIRED,
            'model': REQUIRED,
            'local': REQUIRED,
            'target': REQUIRED,
            'latency_constant': REQUIRED,
        },
        (),
    ),
    'wirelessfl.algorithms.fedast.hparams.SyncSTHParams': (
        None,
        {
            'first_k': 30,
            'clients': 300,
            'split': None,
            'server_lr': 1.0,
            'assignment': 'random',
            'bayes_alpha': 0.25,
            'ucb_discount': 0.99,
        },
        (),
    ),
    'wirelessfl.algorithms.fedavg.FedAMSHParams': (
        None,
        {
            'clients_per_round': None,
            'server_lr': 0.001,
            'weighting': 'uniform',
            'server_optimizer': 'amsgrad',
            'server_momentum': 0.9,
            'server_betas': [0.9, 0.99],
            'server_eps': 1e-08,
        },
        (),
    ),
    'wirelessfl.algorithms.fedavg.FedAdagradHParams': (
        'wirelessfl.algorithms.fedavg.FedAMSHParams',
        {
            'server_optimizer': 'adagrad',
        },
        (),
    ),
    'wirelessfl.algorithms.fedavg.FedAdamHParams': (
        'wirelessfl.algorithms.fedavg.FedAMSHParams',
        {
            'server_optimizer': 'adam',
        },
        (),
    ),
    'wirelessfl.algorithms.fedavg.FedAvgHParams': (
        None,
        {
            'clients_per_round': None,
            'server_lr': 1.0,
            'weighting': 'samples',
            'server_optimizer': 'sgd',
            'server_momentum': 0.9,
            'server_betas': [0.9, 0.99],
            'server_eps': 1e-08,
        },
        (),
    ),
    'wirelessfl.algorithms.fedavg.FedYogiHParams': (
        'wirelessfl.algorithms.fedavg.FedAMSHParams',
        {
            'server_optimizer': 'yogi',
        },
        (),
    ),
    'wirelessfl.algorithms.dynamic.continuous.ContinuousHParams': (
        'wirelessfl.algorithms.fedavg.FedAvgHParams',
        {
            'kl_coefficient': 1.0,
        },
        (),
    ),
    'wirelessfl.algorithms.feddyn.FedDynHParams': (
        'wirelessfl.algorithms.fedavg.FedAvgHParams',
        {
            'weighting': 'uniform',
            'alpha': 0.01,
        },
        (),
    ),
    'wirelessfl.algorithms.fedprox.FedProxHParams': (
        'wirelessfl.algorithms.fedavg.FedAvgHParams',
        {
            'mu': 1.0,
        },
        (),
    ),
    'wirelessfl.net.links.NetworkConfig': (
        None,
        {
            'model': 'none',
            'rate_mbps': 100.0,
            'step_seconds': 0.0,
            'bits_per_param': 32,
            'snr_db': 30.0,
            'antennas': 10,
            'bandwidth_hz': 9000000.0,
            'params_per_vector': None,
        },
        (),
    ),
    'wirelessfl.algorithms.dynamic.initial_model.InitialModelConfig': (
        None,
        {
            'rule': 'none',
            'pilot_sessions': 1,
            'fingerprint_rounds': 1,
            'fingerprint_steps': 5,
            'fingerprint_batch': 128,
            'scale': 10.0,
            'similarity': 'two_norm',
            'literal_eq5': False,
            'history': None,
        },
        (),
    ),
    'wirelessfl.algorithms.fedacg.FedACGHParams': (
        'wirelessfl.algorithms.fedavg.FedAvgHParams',
        {
            'beta': 0.01,
            'lam': 0.85,
        },
        (),
    ),
    'wirelessfl.algorithms.fedast.hparams.FedASTHParams': (
        None,
        {
            'option': 'S',
            'requests': 384,
            'ratio': 32,
            'buffer': None,
            'server_lr': 0.1,
            'window': 8,
            'period': 0.75,
            'variance': 'paper',
            'max_batch': 64,
            'cap_initial_burst': True,
        },
        (),
    ),
    'wirelessfl.algorithms.moon.MOONHParams': (
        'wirelessfl.algorithms.fedprox.FedProxHParams',
        {
            'tau': 1.0,
            'state_dtype': 'float32',
        },
        (),
    ),
    'wirelessfl.algorithms.scaffold.FedAvgMHParams': (
        'wirelessfl.algorithms.feddyn.FedDynHParams',
        {
            'beta': 0.1,
            'control_variates': False,
            'c_update': 'population',
            'reference_quirks': False,
            'state_dtype': 'float32',
        },
        ('alpha',),
    ),
    'wirelessfl.algorithms.scaffold.SCAFFOLDHParams': (
        'wirelessfl.algorithms.scaffold.FedAvgMHParams',
        {
            'weighting': 'samples',
            'beta': 1.0,
            'control_variates': True,
        },
        (),
    ),
    'wirelessfl.algorithms.scaffold.SCAFFOLDMHParams': (
        'wirelessfl.algorithms.scaffold.FedAvgMHParams',
        {
            'control_variates': True,
        },
        (),
    ),
    'wirelessfl.algorithms.hist.hparams.HISTHParams': (
        None,
        {
            'cells': 2,
            'edge_rounds': 5,
            'mask_sizes': 'uniform',
            'aggregation': 'oma',
            'eps_th': 9.0,
            'snr_db': [30.0, 40.0],
            'antennas': 10,
            'beamforming': 'fast',
            'real_part_noise': False,
            'tight_power': False,
            'cpu_ghz': [[1.0, 2.0], [2.0, 4.0]],
            'cpu_redraw': False,
            'bias_mode': 'split_and_average',
            'split': True,
        },
        (),
    ),
    'wirelessfl.engine.client.LocalHParams': (
        None,
        {
            'lr': 0.01,
            'batch_size': 50,
            'steps': 20,
            'epochs': None,
            'drop_last': False,
            'optimizer': 'sgd',
            'momentum': 0.0,
            'weight_decay': 0.0,
            'betas': [0.9, 0.999],
            'eps': 1e-08,
            'schedule': 'constant',
            'schedule_power': 0.9,
            'schedule_rounds': None,
            'schedule_floor': 0.0,
        },
        (),
    ),
    'wirelessfl.run.multitask.MultiTaskConfig': (
        None,
        {
            'name': 'multitask',
            'description': '',
            'seed': 0,
            'device': 'auto',
            'engine': 'auto',
            'tasks': [],
            'pool': {'clients': 1000, 'available': 300, 'speed_shares': [0.25, 0.5, 0.25], 'speed_multipliers': [1.3, 1.0, 0.7], 'kappa': 0.5, 'free_on_cancel': False},
            'method': {'name': 'fedast', 'option': 'S', 'requests': 384, 'ratio': 32, 'buffer': None, 'server_lr': 0.1, 'window': 8, 'period': 0.75, 'variance': 'paper', 'max_batch': 64, 'cap_initial_burst': True},
            'max_time': 520000.0,
            'max_rounds': None,
            'eval_every': 1,
            'eval_interval': None,
            'test_samples': None,
            'stop_at_target': True,
        },
        (),
    ),
    'wirelessfl.algorithms.fadamgc.fadamgc.FANTHParams': (
        'wirelessfl.algorithms.scaffold.FedAvgMHParams',
        {
            'correction': 'post',
            'betas': [0.9, 0.99],
            'eps': 1e-08,
            'tracked': None,
            'warm_start': False,
            'normaliser': 'elementwise',
            'adam': 'algorithm1',
        },
        ('beta', 'control_variates', 'c_update', 'reference_quirks'),
    ),
    'wirelessfl.algorithms.fadamgc.fadamgc.FAdamGCHParams': (
        'wirelessfl.algorithms.fadamgc.fadamgc.FANTHParams',
        {
            'correction': 'pre',
        },
        (),
    ),
    'wirelessfl.algorithms.fadamgc.fadamgc.LocalAdamHParams': (
        'wirelessfl.algorithms.fadamgc.fadamgc.FANTHParams',
        {
            'correction': 'none',
        },
        (),
    ),
    'wirelessfl.run.config.DataConfig': (
        None,
        {
            'dataset': 'synthetic',
            'data_dir': None,
            'normalization': 'auto',
            'partition': 'natural',
            'num_clients': 30,
            'samples_per_client': None,
            'shards_per_client': 2,
            'alpha': 0.5,
            'min_size': 10,
            'reuse': False,
            'overlap': 0.0,
            'share_overlap': True,
            'unseen_labels': 0,
            'synthetic_alpha': 1.0,
            'synthetic_beta': 1.0,
        },
        (),
    ),
    'wirelessfl.run.config.RunConfig': (
        None,
        {
            'name': 'run',
            'description': '',
            'seed': 0,
            'rounds': 10,
            'eval_every': 1,
            'target_accuracy': None,
            'stop_at_target': False,
            'checkpoint_every': 1,
            'device': 'auto',
            'engine': 'auto',
            'max_batch': None,
            'deterministic': False,
            'network': {'model': 'none', 'rate_mbps': 100.0, 'step_seconds': 0.0, 'bits_per_param': 32, 'snr_db': 30.0, 'antennas': 10, 'bandwidth_hz': 9000000.0, 'params_per_vector': None, 'aggregation': 'exact', 'beamforming': 'fast', 'truncation_db': None, 'normalise': True, 'deadline_s': None, 'scheduler': 'uniform', 'compression': 'none', 'max_bits': 16, 'late': 'drop'},
            'population': {'kind': 'static', 'groups': 2, 'rounds_per_session': None, 'events': [], 'order': []},
            'initial_model': {'rule': 'none', 'pilot_sessions': 1, 'fingerprint_rounds': 1, 'fingerprint_steps': 5, 'fingerprint_batch': 128, 'scale': 10.0, 'similarity': 'two_norm', 'literal_eq5': False, 'history': None},
            'data': {'dataset': 'synthetic', 'data_dir': None, 'normalization': 'auto', 'partition': 'natural', 'num_clients': 30, 'samples_per_client': None, 'shards_per_client': 2, 'alpha': 0.5, 'min_size': 10, 'reuse': False, 'overlap': 0.0, 'share_overlap': True, 'unseen_labels': 0, 'synthetic_alpha': 1.0, 'synthetic_beta': 1.0, 'tokenizer': None, 'max_length': 128, 'placement': 'auto'},
            'model': {'name': 'fcnn', 'options': {}},
            'local': {'lr': 0.01, 'batch_size': 50, 'steps': 20, 'epochs': None, 'drop_last': False, 'optimizer': 'sgd', 'momentum': 0.0, 'weight_decay': 0.0, 'betas': [0.9, 0.999], 'eps': 1e-08, 'schedule': 'constant', 'schedule_power': 0.9, 'schedule_rounds': None, 'schedule_floor': 0.0, 'precision': 'fp32'},
            'algorithm': {'name': 'fedavg', 'clients_per_round': None, 'server_lr': 1.0, 'weighting': 'samples', 'server_optimizer': 'sgd', 'server_momentum': 0.9, 'server_betas': [0.9, 0.99], 'server_eps': 1e-08},
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.baselines.FedAvgSmallHParams': (
        None,
        {
            'ratios': [1.0],
            'fraction': None,
            'width': 'min',
            'policy': 'prefix',
            'gamma_min': 1,
            'memory': False,
            'memory_dtype': 'float32',
            'scaler': False,
            'step_widths': False,
            'compression': 'none',
            'bits': 8,
            'keep': 0.1,
            'training': 'extract',
            'weighting': 'uniform',
            'clients_per_round': None,
            'resources': 'fixed',
            'deadline_s': None,
            'deadline_quantile': 0.5,
            'timing': False,
            'antennas': 1,
            'snr_db': [10.0, 20.0],
            'bandwidth_mhz': 9.0,
            'cpu_ghz': [[1.0, 2.0], [2.0, 4.0]],
            'cycles_per_step': 10000000.0,
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.baselines.FedDropoutHParams': (
        'wirelessfl.algorithms.rafed.baselines.FedAvgSmallHParams',
        {
            'policy': 'random',
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.baselines.FedRolexHParams': (
        'wirelessfl.algorithms.rafed.baselines.FedAvgSmallHParams',
        {
            'width': 'own',
            'policy': 'rolling',
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.baselines.FjORDHParams': (
        'wirelessfl.algorithms.rafed.baselines.FedAvgSmallHParams',
        {
            'width': 'own',
            'step_widths': True,
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.baselines.HeteroFLHParams': (
        'wirelessfl.algorithms.rafed.baselines.FedAvgSmallHParams',
        {
            'width': 'own',
            'scaler': True,
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.hparams.RAFedHParams': (
        'wirelessfl.algorithms.rafed.baselines.FedDropoutHParams',
        {
            'width': 'own',
        },
        (),
    ),
    # 2026-11-25, later entry: over the air, the noise of the real part of (22) (MSE/2, was
    # MSE) and a round's second vector over the round's channel (was a fresh one). Re-keys
    # every run of network.model aircomp (the co-design figures' AirComp runs).
    'wirelessfl.net.aircomp.AirCompSettings': (
        None,
        {
            'real_part': False,
            'vector_channel': 'fresh',
            'subset_rows': False,
        },
        (),
    ),
    'wirelessfl.algorithms.rafed.hparams.RAMFedHParams': (
        'wirelessfl.algorithms.rafed.hparams.RAFedHParams',
        {
            'memory': True,
        },
        (),
    ),
}


#: The later entries' fields (class, field) whose default changed on purpose: recorded with
#: the value older runs had, not with the class's default.
CHANGED_DEFAULTS: frozenset[tuple[str, str]] = frozenset({
    ('wirelessfl.net.aircomp.AirCompSettings', 'real_part'),
    ('wirelessfl.net.aircomp.AirCompSettings', 'vector_channel'),
    # 2026-11-26 (issue 71): FedAdagrad's server rate 1e-3 -> 1e-2, its preset's and the reason
    # given there (Adagrad's accumulated v makes its steps ~10x Adam's smaller at one rate);
    # runs made before keep 1e-3 in their keys.
    ('wirelessfl.algorithms.fedavg.FedAdagradHParams', 'server_lr'),
    # 2026-11-26 (issue 71, D4): a second vector sent by a subset of the round's clients goes
    # over its senders' own channels of the round; runs made before drew a smaller channel.
    ('wirelessfl.net.aircomp.AirCompSettings', 'subset_rows'),
})

#: Fields added later whose default changes what new runs compute, keyed apart from the runs
#: made before without re-keying those: ``module.QualName`` → {field: the value the runs made
#: before computed with}. Such a field enters a run key only when it differs from that value,
#: so an old run keeps its key (and is found again when asked for with the old value), and a
#: run at the new default gets a new one. Dated, with the reason.
BEFORE: dict[str, dict[str, Any]] = {
    # 2026-11-26 (issue 68): each epoch's mini-batch order from a counter-based hash of the
    # client's seed, computed for every client at once (engine/schedule.py); runs made before
    # drew it from a NumPy PCG64 generator per client.
    'wirelessfl.engine.client.LocalHParams': {'batch_order': 'pcg64'},
    # 2026-11-26 (issue 71): a FedAST request's model download is timed over its link as a
    # unicast to that client (net/delays.py, LinkLatency); runs made before timed the upload
    # only on channel-drawn links.
    'wirelessfl.run.multitask.PoolConfig': {'download': 'free'},
    # 2026-11-28 (issue 90): the NR uplink shares each slot's PRBs among the round's uploads
    # (OFDMA), gives up on a block after harq_max HARQ transmissions (and RLC's arq_max
    # retransmissions), and serves no client below min_sinr_db; runs made before had one
    # client a slot on its open-loop PRBs and HARQ without limit, everyone served.
    'wirelessfl.net.nr.NRSettings': {'sharing': 'tdma', 'harq_max': 0, 'min_sinr_db': None},
}


#: What a run folder's stored config (``config.yaml``, which lists every field) lacks when it
#: was written before a field of :data:`BEFORE` existed: section name → {field:
#: the value such runs were made with}. :func:`as_made` fills them in, so an old folder
#: resumes, re-times and plots as it ran. Dated as above.
STORED_BEFORE: dict[str, dict[str, Any]] = {
    # 2026-11-26 (issue 68): mini-batch orders; also each task's ``local``/``sync_local``
    "local": {"batch_order": "pcg64"},
    "sync_local": {"batch_order": "pcg64"},
    # 2026-11-26 (issue 71): FedAST's downloads timed as unicasts
    "pool": {"download": "free"},
}

#: As :data:`STORED_BEFORE`, for the ``network`` section of one link model only (another
#: model's setting is refused there unless at its default): model → {field: value}.
STORED_BEFORE_LINK: dict[str, dict[str, Any]] = {
    # 2026-11-28 (issue 90): the NR uplink's sharing, HARQ limit and association rule
    "nr": {"sharing": "tdma", "harq_max": 0, "min_sinr_db": None},
}


#: 2026-11-28 (issue 92): the algorithms whose clients send a second vector (and the setting
#: that turns it off); before this date, under ``dp``, it reached the server unprivatised.
#: A stored config of theirs with ``dp`` and without ``dp_vectors`` is read with
#: ``dp_vectors: model``, which they refuse in one line (the run's ε did not cover it).
SECOND_VECTOR: dict[str, tuple[str, Any]] = {
    "scaffold": ("control_variates", False), "scaffold_m": ("control_variates", False),
    "fadamgc": ("correction", "none"),
}


def _sends_second(algo: dict[str, Any]) -> bool:
    """Whether a stored ``algorithm`` section is of :data:`SECOND_VECTOR` with it on."""
    off = SECOND_VECTOR.get(str(algo.get("name")))
    return off is not None and algo.get(off[0]) != off[1]


def as_made(stored: dict[str, Any]) -> dict[str, Any]:
    """A run folder's stored config with :data:`STORED_BEFORE`'s missing fields filled in.

    >>> as_made({"local": {"lr": 0.1}})["local"]
    {'lr': 0.1, 'batch_order': 'pcg64'}
    >>> as_made({"local": {"lr": 0.1, "batch_order": "counter"}})["local"]["batch_order"]
    'counter'
    >>> as_made({"network": {"model": "nr", "sharing": "tdma"}})["network"]["harq_max"]
    0
    """
    tasks = stored.get("tasks")
    for where in (stored, *(t for t in tasks if isinstance(t, dict))) if isinstance(tasks, list) \
            else (stored,):
        for section, fields in STORED_BEFORE.items():
            if isinstance(where.get(section), dict):
                where[section] = {**where[section],
                                  **{k: v for k, v in fields.items() if k not in where[section]}}
        algo = where.get("algorithm")
        if isinstance(algo, dict) and algo.get("dp", "none") != "none" \
                and "dp_vectors" not in algo and _sends_second(algo):
            where["algorithm"] = {**algo, "dp_vectors": "model"}
        net = where.get("network")
        if isinstance(net, dict) and net.get("model") in STORED_BEFORE_LINK:
            fields = STORED_BEFORE_LINK[net["model"]]
            where["network"] = {**net, **{k: v for k, v in fields.items() if k not in net}}
    return stored


def _expand(name: str) -> dict[str, Any]:
    """The full record of ``name``: its base's fields, changed, less the dropped ones."""
    base, changed, dropped = _RECORD[name]
    fields = {**(_expand(base) if base else {}), **changed}
    return {k: v for k, v in fields.items() if k not in dropped}


#: ``module.QualName`` → {field: default (plain) or REQUIRED}: every field the class had then.
FROZEN: dict[str, dict[str, Any]] = {name: _expand(name) for name in _RECORD}

#: A class that moved to another module since the record keeps its record under its old name:
#: new ``module.QualName`` → the name :data:`FROZEN` knows it by. Dated, with the reason.
MOVED: dict[str, str] = {
    # 2026-11-26: engine/client.py split by concept (issue 68); the class is unchanged.
    "wirelessfl.engine.hparams.LocalHParams": "wirelessfl.engine.client.LocalHParams",
}
