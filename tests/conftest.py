import os

import numpy as np
import pytest
import torch

# runs choose their thread count from the machine's load (threads: auto) unless this is set:
# the suite's numbers must not depend on what else the machine is doing
os.environ.setdefault("OMP_NUM_THREADS", "2")


@pytest.fixture(autouse=True)
def _deterministic_threads():
    torch.set_num_threads(2)
    yield


@pytest.fixture(scope="session")
def fmnist():
    """Real Fashion-MNIST (apt-get install dataset-fashion-mnist; .ci/run installs it)."""
    from wirelessfl.data import load_dataset

    return load_dataset("fashion_mnist")


@pytest.fixture(params=["AVX512", "AVX2"], ids=["columns", "rows"])
def stack_layout(request, monkeypatch):
    """The batched engine stacks wide linear weights as on a CPU of this kernel capability.

    Column-major on Intel's AVX-512, row-major on AVX2 (``wirelessfl.models.layers.column_major``),
    whatever the machine running the test: a test that asks for it runs both layouts.
    """
    import functools

    from wirelessfl.engine import batched
    from wirelessfl.models.layers import column_major

    monkeypatch.setattr(batched, "column_major",
                        functools.partial(column_major, capability=request.param,
                                          vendor="GenuineIntel"))
    return request.param


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


@pytest.fixture
def interrupt_after(monkeypatch):
    """``arm(exp, n)``: the experiment's algorithm raises KeyboardInterrupt after n rounds."""

    def arm(exp, rounds):
        real, calls = exp.algorithm.apply, []

        def apply(state):
            if len(calls) == rounds:
                raise KeyboardInterrupt
            calls.append(1)
            return real(state)

        monkeypatch.setattr(exp.algorithm, "apply", apply)
        return exp

    return arm
