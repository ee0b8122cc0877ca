"""OpenMP's wait policy, chosen before the OpenMP runtime starts, and the usable CPUs.

PyTorch's OpenMP threads spin for a while at the end of every parallel region before they
sleep. On a machine where other processes hold the cores, a spinning thread burns the share
its siblings need: measured on 2 cores beside 4 busy processes, a 60-client FCNN FedAvg
round (batched) took 11.8-16.2 s on two threads by default, 1.68 s on two threads with
``OMP_WAIT_POLICY=PASSIVE`` (idle threads sleep at once) and 2.55 s on one thread. On a
quiet machine PASSIVE costs instead (the same round 0.46 → 0.56 s; the loop engine's small
steps 1.33 → 2.3 s). The runtime reads the policy once, when torch is first imported, so
``import wirelessfl`` calls :func:`choose_wait_policy`: PASSIVE when the machine is busy
then, unless ``OMP_WAIT_POLICY`` is set already or torch already loaded. The thread count
follows the policy (:func:`wirelessfl.run.threads.choose_threads`). The machine's CPU as
Linux names it is :func:`cpu_info`. This module loads no torch.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import MutableMapping


@functools.cache
def cpu_info(field: str) -> str:
    """A field of this machine's ``/proc/cpuinfo``, e.g. ``vendor_id`` or ``model name``.

    The first CPU's value; ``""`` where the file or the field is missing (not Linux).
    """
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.split(":", 1)[0].strip() == field:
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def usable_cpus() -> int:
    """CPUs this process may run on, capped by the container's CPU quota if it has one."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cpus = min(cpus, max(1, int(int(quota) / int(period) + 0.5)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)



def machine_busy(load: float | None = None) -> bool:
    """Whether other runnable tasks fill the usable CPUs now (or ``load`` of them do).

    The count of runnable tasks in ``/proc/loadavg`` (an instant reading, this process
    not counted); where that file is missing, the 1-minute load average.
    """
    if load is None:
        try:
            with open("/proc/loadavg") as fh:
                load = float(int(fh.read().split()[3].split("/")[0]) - 1)
        except (OSError, ValueError, IndexError):
            try:
                load = os.getloadavg()[0]
            except OSError:
                return False
    return load >= usable_cpus()


def choose_wait_policy(environ: MutableMapping[str, str] | None = None, *,
                       busy: bool | None = None, torch_loaded: bool | None = None) -> str | None:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` on a busy machine before torch loads; the policy set.

    Nothing (None) when ``OMP_WAIT_POLICY`` is set already (the user's choice), when torch
    is loaded (too late: the runtime has read its environment), or on a quiet machine.
    """
    environ = os.environ if environ is None else environ
    loaded = "torch" in sys.modules if torch_loaded is None else torch_loaded
    if "OMP_WAIT_POLICY" in environ or loaded or not (machine_busy() if busy is None else busy):
        return None
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return "PASSIVE"


def threads_sleep_when_idle(environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether OpenMP's idle threads sleep at once (``OMP_WAIT_POLICY=PASSIVE``)."""
    environ = os.environ if environ is None else environ
    return environ.get("OMP_WAIT_POLICY", "").strip().upper() == "PASSIVE"
