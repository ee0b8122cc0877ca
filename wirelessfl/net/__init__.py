"""The network wing: every link and latency model, and what a link does to a payload.

:mod:`~wirelessfl.net.links` times a round from what it sent (TDMA, AirComp, fixed rate) and
re-times finished runs; :mod:`~wirelessfl.net.resources` draws clients' CPUs and Rayleigh
uplinks and gives HIST's per-unit latencies; :mod:`~wirelessfl.net.compression` is the
operator C (stochastic quantisation, top-k) that shrinks an upload.
"""
