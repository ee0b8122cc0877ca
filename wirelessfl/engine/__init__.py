"""The client engine: the local-training contract and the executors that run it.

:mod:`~wirelessfl.engine.client` holds the contract (``ClientTask`` in, ``ClientResult`` out,
local rules as ``client_init`` / ``client_step`` / ``client_final``), plain local SGD, the
loop executor and evaluation; :mod:`~wirelessfl.engine.batched` stacks clients of equal
shapes into one computation; :mod:`~wirelessfl.engine.client_store` keeps per-client state
off the device.
"""
