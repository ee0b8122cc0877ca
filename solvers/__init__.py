"""Optimisation: receive beamforming, mask sizes and latency problems."""
