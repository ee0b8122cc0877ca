"""Optimisation: receive beamforming, mask sizes and latency problems.

Public names (imported on first use): :func:`solve_beamforming` (max-min AirComp receive
beamforming, HIST eq. (33); :mod:`solvers.beamforming`) with :class:`BeamformingResult`;
:func:`solve_mask_sizes` (the latency-optimal mask-size MILP, eqs. (20)/(36);
:mod:`solvers.mask_sizes`) with :class:`MaskSizeResult`; the latency helpers
:func:`size_cap`, :func:`uniform_sizes`, :func:`round_latency`,
:func:`full_model_latency_oma`, :func:`full_model_latency_aircomp` (:mod:`solvers.latency`);
channel-aware client scheduling :func:`schedule` with :class:`ScheduleResult`
(:mod:`solvers.scheduling`); and the scenario tools behind ``wirelessfl masks`` /
``wirelessfl beamform`` (:mod:`solvers.scenarios`).
"""

from channels._lazy import lazy_exports

_EXPORTS = {
    "solve_beamforming": ("solvers.beamforming", "solve"),
    "BeamformingResult": "solvers.beamforming",
    "solve_mask_sizes": ("solvers.mask_sizes", "solve"),
    "MaskSizeResult": "solvers.mask_sizes",
    "SolverUnavailableError": "solvers.mask_sizes",
    "size_cap": "solvers.latency", "uniform_sizes": "solvers.latency",
    "round_latency": "solvers.latency", "full_model_latency_oma": "solvers.latency",
    "full_model_latency_aircomp": "solvers.latency",
    "schedule": "solvers.scheduling", "ScheduleResult": "solvers.scheduling",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
