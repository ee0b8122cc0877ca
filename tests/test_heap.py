"""Training workers start with a C heap that reuses large tensors (wirelessfl.run.heap)."""

import os
import platform
import subprocess
import sys

import pytest

from wirelessfl.run.heap import REUSE, spawning_workers, worker_environment

GLIBC = platform.libc_ver()[0] == "glibc"

#: A child whose thread makes and frees 80 MB tensors (above glibc's mmap threshold and a
#: thread arena's heap), printing the minor page faults they cost.
_CHURN = """
import resource, threading, torch
torch.set_num_threads(1)
def work():
    for _ in range(40):
        a = torch.empty(20_000_000); a.fill_(1.0); del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
threads = [threading.Thread(target=work)]  # not the main thread: an arena of its own
[t.start() for t in threads]; [t.join() for t in threads]
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_workers_get_the_reuse_settings_unless_the_user_set_malloc_or_it_is_not_glibc():
    assert worker_environment({"PATH": "/bin"}, libc="glibc") == REUSE
    assert worker_environment({"MALLOC_ARENA_MAX": "4"}, libc="glibc") == {}
    assert worker_environment({}, libc="musl") == {} and worker_environment({}, libc="") == {}


def test_spawned_workers_see_the_settings_and_the_environment_is_restored_after():
    env = {"PATH": os.environ.get("PATH", "")}
    with spawning_workers(env) as added:
        inside = dict(env)
    assert env == {"PATH": os.environ.get("PATH", "")}
    assert (added == REUSE) == GLIBC and all(inside[k] == v for k, v in added.items())
    with pytest.raises(RuntimeError), spawning_workers(env):
        raise RuntimeError("a submit failed")
    assert env == {"PATH": os.environ.get("PATH", "")}  # restored on error too
    if GLIBC:  # a process started inside the block starts with them
        before = dict(os.environ)
        with spawning_workers():
            out = subprocess.run([sys.executable, "-c",
                                  "import os; print(os.environ.get('MALLOC_ARENA_MAX'))"],
                                 capture_output=True, text=True, check=True).stdout
        assert out.strip() == "1" and dict(os.environ) == before


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc settings")
def test_with_the_settings_freed_large_tensors_are_reused_not_faulted_in_again():
    """A thread's 40 tensors of 80 MB: each a fresh mapping by default (about 20,000 page
    faults apiece, 0.8 million); with REUSE the heap grows for the first few (a tensor's
    64-byte alignment asks a little more than the freed block holds) and then serves them
    from memory it holds (measured 0.16 million)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def faults(extra):
        out = subprocess.run([sys.executable, "-c", _CHURN], env={**base, **extra},
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[-1])

    plain, reused = faults({}), faults(REUSE)
    assert plain > 500_000 and reused < plain / 3, (plain, reused)
