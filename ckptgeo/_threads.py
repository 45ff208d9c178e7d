"""How many CPU threads torch uses for the work, and what a run records about it.

One rule for every command that runs a model (scan, probe, train, demo, reproduce): a model below
:data:`SMALL_MODEL_PARAMETERS` parameters runs on one intra-op thread, a larger one on its share of the
machine's physical cores: the cores divided by the processes a launcher started on this node (torchrun's
``LOCAL_WORLD_SIZE``), at least one. ``threads=N`` (``--threads N``) overrides the rule.

Why: torch's default is one thread per core. A small model's kernels are too short to split, so on
a machine where another process holds a core the extra thread mostly waits for its time slice.
``scripts/bench_threads.py`` on 2 cores with one other CPU-bound process running: one thread
against torch's default two trains the 0.4M-parameter demo model 2.6x faster and scans it 3.1x
faster; 3.2M parameters 1.9x / 2.8x, 10.8M 1.8x / 2.3x, 25M 1.0x / 1.2x. Without the extra
process, two threads are 1.3-1.9x faster at every size. Below 10M parameters the loss on an idle
machine is the smaller risk; above it the cores pay off. Under ``torchrun --nproc_per_node 2`` on 2 cores
each process already holds a core: two threads each put four busy threads on two cores, and a 10.8M
model's training step took 3-7 s instead of 0.6-0.8 s in the cpu study, hence the division.

The same commands also keep the memory they free for reuse (:func:`tune_allocator`): glibc's malloc serves
each block over its (adaptive, at most 32 MiB) threshold with a fresh ``mmap`` and gives it back at ``free``,
so every forward batch's logits, attention scores and hidden-state stacks were new pages the kernel had to
zero on first touch. A 14m-shaped scan's forward sweep (200 items, batch 16, 2 threads) took 1.16 million
minor page faults and 16% of its CPU time in the kernel; with the settings below, 0.10 million and 2%.

The thread count changes the order of floating-point reductions, so the same seed can give slightly
different numbers (and, over a long training run, different acquisition steps) with different
counts: :func:`thread_record` is written into the trainer's manifest and the scan's
``runs/<hash>.json``.
"""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

__all__ = ["SMALL_MODEL_PARAMETERS", "physical_cores", "local_processes", "default_threads", "torch_threads", "thread_record",
           "tune_allocator", "MALLOC_SETTINGS"]

#: models with fewer parameters run on one thread by default (measured: scripts/bench_threads.py).
SMALL_MODEL_PARAMETERS = 10_000_000


#: glibc ``mallopt`` settings of :func:`tune_allocator`: blocks below 256 MiB come from the heap (not a fresh
#: ``mmap``), up to 512 MiB of freed memory at the heap's top stays with the process, and the heap grows
#: 64 MiB at a time. Values: bytes. A block over the threshold is still mapped, and faulted in, afresh every
#: time: the forward keeps its per-batch blocks below it (:data:`ckptgeo.engine.forward.CPU_LOGITS_BYTES`).
MALLOC_SETTINGS = {"M_MMAP_THRESHOLD": 256 << 20, "M_TRIM_THRESHOLD": 512 << 20, "M_TOP_PAD": 64 << 20}
_MALLOPT_PARAM = {"M_TRIM_THRESHOLD": -1, "M_TOP_PAD": -2, "M_MMAP_THRESHOLD": -3}
_allocator_tuned: bool | None = None


def tune_allocator() -> bool:
    """Apply :data:`MALLOC_SETTINGS` to glibc's malloc in this process (once; later calls return the first
    answer). Memory a forward batch or a training step frees is then reused by the next instead of being
    unmapped and faulted in again; the process keeps up to 512 MiB more than it uses at its peak. Values never
    change, only where the bytes come from.

    Returns
    -------
    bool
        True when glibc accepted every setting; False elsewhere (another C library, or no ``mallopt``), where
        nothing changes.
    """
    global _allocator_tuned
    if _allocator_tuned is None:
        try:
            import ctypes

            mallopt = ctypes.CDLL("libc.so.6").mallopt
            _allocator_tuned = all(mallopt(_MALLOPT_PARAM[k], v) == 1 for k, v in MALLOC_SETTINGS.items())
        except (OSError, AttributeError):
            _allocator_tuned = False
    return _allocator_tuned


def physical_cores() -> int:
    """Physical cores this process may run on (hyper-threads counted once; at least 1).

    Reads ``/proc/cpuinfo`` (Linux) for the (physical id, core id) pairs of the CPUs in this
    process's affinity mask; elsewhere falls back to ``os.cpu_count()``.

    >>> physical_cores() >= 1
    True
    """
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    try:
        cores, cpu, phys = set(), None, "0"
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                key, value = key.strip(), value.strip()
                if key == "processor":
                    cpu, phys = int(value), "0"
                elif key == "physical id":
                    phys = value
                elif key == "core id" and (allowed is None or cpu in allowed):
                    cores.add((phys, value))
        if cores:
            return len(cores)
    except (OSError, ValueError):
        pass
    return max(1, len(allowed) if allowed else (os.cpu_count() or 1))


def local_processes() -> int:
    """Processes a launcher started on this node: torchrun's ``LOCAL_WORLD_SIZE`` (1 without one, or
    when it is not a positive int).

    >>> local_processes() >= 1
    True
    """
    try:
        return max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        return 1


def default_threads(n_parameters: int | None) -> int:
    """The thread count the rule gives a model of ``n_parameters`` parameters.

    Parameters
    ----------
    n_parameters : int or None
        The model's parameter count; None (not known yet) counts as large.

    Returns
    -------
    int
        1 below :data:`SMALL_MODEL_PARAMETERS`, else :func:`physical_cores` // :func:`local_processes`
        (at least 1).

    Examples
    --------
    >>> default_threads(434_176)
    1
    """
    if n_parameters is not None and n_parameters < SMALL_MODEL_PARAMETERS:
        return 1
    return max(1, physical_cores() // local_processes())


@contextlib.contextmanager
def torch_threads(n_parameters: int | None = None, threads: int | None = None) -> Iterator[int]:
    """Run the body with torch's intra-op thread count set by the rule (or to ``threads``), then restore it;
    the process's allocator is tuned first (:func:`tune_allocator`).

    Parameters
    ----------
    n_parameters : int or None
        The model's parameter count, for :func:`default_threads`.
    threads : int or None
        An explicit count (``--threads``); None applies the rule.

    Yields
    ------
    int
        The thread count in force.

    Raises
    ------
    InvalidParameterError
        ``threads`` is not a positive int.
    """
    import torch

    from ckptgeo.errors import InvalidParameterError

    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise InvalidParameterError(f"The 'threads' parameter must be an int in [1, inf) or None. Got {threads!r}.",
                                    name="threads", value=threads)
    n = threads if threads is not None else default_threads(n_parameters)
    tune_allocator()
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield n
    finally:
        torch.set_num_threads(before)


def thread_record(rule: str | None = None) -> dict:
    """What a manifest records about threads and determinism, as torch reports it now.

    Parameters
    ----------
    rule : str, optional
        How the count was chosen (``"--threads"``, ``"default rule"``), stored as ``threads_from``.

    Returns
    -------
    dict
        ``threads`` (intra-op), ``interop_threads``, ``deterministic_algorithms``
        (``torch.use_deterministic_algorithms``), ``deterministic_warn_only``, ``cudnn_deterministic``,
        ``cudnn_benchmark``, ``physical_cores``, and ``threads_from`` when given.
    """
    import torch

    record = {"threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
              "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
              "deterministic_warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
              "cudnn_deterministic": bool(torch.backends.cudnn.deterministic),
              "cudnn_benchmark": bool(torch.backends.cudnn.benchmark), "physical_cores": physical_cores()}
    if rule is not None:
        record["threads_from"] = rule
    return record
