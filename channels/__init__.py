"""Physical layer: SIMO Rayleigh channels, rates, and the AirComp transceiver."""
