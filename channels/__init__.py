"""Physical layer: SIMO Rayleigh channels, rates, and the AirComp transceiver.

Public names (imported on first use): :func:`simo_rayleigh`, :func:`path_gain`
(:mod:`channels.rayleigh`); :func:`tdma_rate`, :func:`aircomp_upload_time`
(:mod:`channels.rates`); :class:`AirCompCell`, :func:`beam_gains`, :func:`complex_normal`
(:mod:`channels.aircomp`, eqs. (22)–(28) of HIST); :func:`db_to_lin`, :func:`lin_to_db`
(:mod:`channels.units`).
"""

from channels._lazy import lazy_exports

_EXPORTS = {
    "simo_rayleigh": "channels.rayleigh", "path_gain": "channels.rayleigh",
    "tdma_rate": "channels.rates", "aircomp_upload_time": "channels.rates",
    "AirCompCell": "channels.aircomp", "beam_gains": "channels.aircomp",
    "complex_normal": "channels.aircomp",
    "db_to_lin": "channels.units", "lin_to_db": "channels.units",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
