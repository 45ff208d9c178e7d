"""The machine's limits beside a speed script's numbers: fp32 matmul peak, weight-file read rate, CPU time split.

Every speed script (``scripts/bench_scan.py``, ``scripts/bench_train.py``) measures these in the same run as
the work it times, so a number is read against what this machine gave at that moment:

* :func:`matmul_peak`: FLOP/s of ``torch.mm`` on large fp32 squares at a given intra-op thread count (the
  best of several timings: the machine's limit, not its average under load); with ``device="cuda"`` the GPU's,
  timed with CUDA events, TF32 off for float32 (as the scan runs; ``dtype=torch.bfloat16`` for the tensor cores'
  rate, for reference);
* :func:`read_rate`: bytes/s of plain 8 MiB reads of files, from the page cache (``cold=False``) or after
  ``posix_fadvise(DONTNEED)`` (``cold=True``);
* :func:`copy_rate`: bytes/s of a host-to-device copy (pinned or pageable host memory), the other limit of a
  load onto a GPU;
* :class:`Stages`: wall, user and system seconds and minor page faults (``getrusage``: the whole process,
  every thread and torch's pools included, or one thread), summed per named stage;
* :func:`forward_flops`: the FLOPs of a call, counted by ``torch.utils.flop_counter.FlopCounterMode``
  (matmuls and attention; element-wise work is not counted, so a share of the matmul peak is a lower bound).

and the memory a speed script watches: :func:`rss`, the kernel's peak (:func:`hwm`, :func:`reset_hwm`), bytes under
a folder (:func:`dir_bytes`) and a :class:`Sampler` thread of both.

``load`` in :func:`uptime` is the 1-minute load average: print it beside every number (2 shared cores here).
"""

from __future__ import annotations

import contextlib
import os
import resource
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

#: the agreement a reduced ``--precision`` must show with fp32 before the speed scripts call it agreeing: RankMe's
#: relative difference within this at every layer (0.1%) and the correct answers identical; fp32 stays the default
PRECISION_TOLERANCE = 1e-3

__all__ = ["PRECISION_TOLERANCE", "rss", "reset_hwm", "hwm", "dir_bytes", "Sampler", "Peak", "matmul_peak", "read_rate", "copy_rate",
           "Stages", "forward_flops", "uptime", "roofline_lines", "is_cuda", "sync", "pace_lines"]


def is_cuda(device) -> bool:
    """True for a CUDA device (``"cuda"``, ``"cuda:1"``, a ``torch.device``)."""
    return str(device).startswith("cuda")


def sync(device) -> None:
    """Wait for the work queued on ``device`` (a no-op on the CPU): before reading a host clock after GPU work."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize(device)


def rss() -> int:
    """Current resident set size of this process, in bytes."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_hwm() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not supported."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def hwm() -> int | None:
    """The kernel's peak RSS (VmHWM) since the last reset, in bytes; None where not available."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def dir_bytes(path: Path) -> int:
    """Bytes of the regular files under ``path`` (symlinks not followed, partial downloads counted)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:    # deleted while walking (eviction, temp file renamed)
                continue
            if not os.path.islink(os.path.join(root, name)):
                total += st.st_size
    return total


class Sampler(threading.Thread):
    """Samples this process's RSS and the bytes under ``cache`` every ``interval`` seconds."""

    def __init__(self, interval: float = 0.2):
        super().__init__(daemon=True)
        self.interval = interval
        self.cache: Path | None = None
        self.peak_rss = 0
        self.peak_cache = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def watch(self, cache: Path) -> None:
        with self._lock:
            self.cache, self.peak_rss, self.peak_cache = cache, rss(), 0

    def note_cache(self, nbytes: int) -> None:
        with self._lock:
            self.peak_cache = max(self.peak_cache, nbytes)

    def run(self) -> None:
        while not self._halt.wait(self.interval):
            with self._lock:
                cache = self.cache
            now = rss()
            nbytes = dir_bytes(cache) if cache is not None and cache.exists() else 0
            with self._lock:
                self.peak_rss = max(self.peak_rss, now)
                self.peak_cache = max(self.peak_cache, nbytes)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)



def uptime() -> str:
    """The 1, 5 and 15-minute load averages as ``uptime`` prints them."""
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


@dataclass(frozen=True)
class Peak:
    """The matmul peak: ``wall`` FLOP/s (best timing, all threads together) and ``cpu`` FLOPs per CPU second
    (the same timings over this process's CPU time: what a busy core does, whatever else the machine runs; NaN on
    a GPU, where CPU time says nothing of the work), measured on ``device`` in ``dtype`` with ``n`` x ``n``
    matrices."""

    wall: float
    cpu: float
    threads: int
    device: str = "cpu"
    dtype: str = "float32"
    n: int = 1024


def matmul_peak(threads: int, *, n: int | None = None, repeats: int = 7, min_seconds: float = 0.2,
                device: str = "cpu", dtype=None) -> Peak:
    """The best rate of ``torch.mm`` of two ``n`` x ``n`` matrices of ``dtype`` (default float32) on ``device``
    (``2 n^3`` FLOPs a product; each timing repeats the product for at least ``min_seconds``), per wall second
    and per CPU second.

    On the CPU: at ``threads`` intra-op threads (restored afterwards), ``n=1024`` by default (large enough for the
    BLAS kernel's rate, small enough to stay quick on a loaded machine), host clocks. On a CUDA device
    (``threads`` ignored): ``n=8192`` by default (fills the chip; 2 x 256 MiB in float32), random inputs, three
    warm-up products, each timing between two CUDA events; float32 with TF32 off (``allow_tf32`` and
    ``float32_matmul_precision("highest")``, restored afterwards): the IEEE float32 rate the scan runs at, not
    the TF32 tensor-core one."""
    import torch

    dtype = dtype or torch.float32
    if is_cuda(device):
        return _cuda_matmul_peak(torch.device(device), dtype, n or 8192, repeats, min_seconds)
    n = n or 1024
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        out = torch.empty(n, n, dtype=dtype)
        torch.mm(a, b, out=out)
        t = time.perf_counter()
        torch.mm(a, b, out=out)
        inner = max(1, int(min_seconds / max(time.perf_counter() - t, 1e-6)))
        wall = cpu = float("inf")
        for _ in range(repeats):
            t, c = time.perf_counter(), time.process_time()
            for _ in range(inner):
                torch.mm(a, b, out=out)
            wall = min(wall, (time.perf_counter() - t) / inner)
            cpu = min(cpu, (time.process_time() - c) / inner)
        return Peak(wall=2 * n ** 3 / wall, cpu=2 * n ** 3 / max(cpu, 1e-9), threads=threads, device="cpu",
                    dtype=str(dtype).removeprefix("torch."), n=n)
    finally:
        torch.set_num_threads(before)


def _cuda_matmul_peak(device, dtype, n: int, repeats: int, min_seconds: float) -> Peak:
    import torch

    tf32, precision = torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.cuda.device(device):
            a = torch.randn(n, n, device=device, dtype=dtype)
            b = torch.randn(n, n, device=device, dtype=dtype)
            out = torch.empty(n, n, device=device, dtype=dtype)
            for _ in range(3):
                torch.mm(a, b, out=out)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.mm(a, b, out=out)
            end.record()
            end.synchronize()
            inner = max(1, int(min_seconds / max(start.elapsed_time(end) / 1e3, 1e-6)))
            best = float("inf")
            for _ in range(repeats):
                start.record()
                for _ in range(inner):
                    torch.mm(a, b, out=out)
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3 / inner)
            if not torch.isfinite(out).all():
                raise RuntimeError("matmul peak: non-finite product")
            del a, b, out
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.set_float32_matmul_precision(precision)
    return Peak(wall=2 * n ** 3 / best, cpu=float("nan"), threads=0, device=str(device),
                dtype=str(dtype).removeprefix("torch."), n=n)


def copy_rate(device, nbytes: int = 1 << 30, *, pinned: bool = True, repeats: int = 5) -> float:
    """Bytes per second of one host-to-``device`` copy of ``nbytes`` (best of ``repeats``, CUDA events), from
    pinned (page-locked) or ordinary pageable host memory; NaN on the CPU."""
    if not is_cuda(device):
        return float("nan")
    import torch

    host = torch.randint(0, 255, (nbytes,), dtype=torch.uint8)
    if pinned:
        host = host.pin_memory()
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    dev.copy_(host, non_blocking=pinned)
    best = float("inf")
    for _ in range(repeats):
        sync(device)
        start.record()
        dev.copy_(host, non_blocking=pinned)
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / 1e3)
    del host, dev
    return nbytes / best


def read_rate(paths: list[Path], *, cold: bool) -> float:
    """Bytes per second of reading ``paths`` whole with plain 8 MiB reads: from the page cache (``cold=False``)
    or after asking the kernel to drop them from it (``cold=True``; best effort: mapped pages stay)."""
    total, seconds = 0, 0.0
    buf = memoryview(bytearray(8 << 20))
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            if cold and hasattr(os, "posix_fadvise"):
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            t0 = time.perf_counter()
            while n := f.readinto(buf):
                total += n
            seconds += time.perf_counter() - t0
    return total / seconds if seconds else float("inf")


@dataclass
class StageTime:
    """Sums over every entry into one stage: seconds of wall, user and system time, and minor page faults."""

    wall: float = 0.0
    user: float = 0.0
    system: float = 0.0
    faults: int = 0
    calls: int = 0

    @property
    def system_share(self) -> float:
        """System seconds / (user + system) seconds (NaN for no CPU time)."""
        cpu = self.user + self.system
        return self.system / cpu if cpu else float("nan")


@dataclass
class Stages:
    """Named stages of a run, timed with the whole process's CPU clocks (``os.times``: all threads).

    Stages must not nest; work running in other threads at the same time (a prefetch download) is
    counted in whichever stage is open."""

    times: dict[str, StageTime] = field(default_factory=dict)

    device: str = "cpu"   # a CUDA device: synchronized before each clock read (the GPU's queued work counted)

    @contextlib.contextmanager
    def stage(self, name: str, *, thread: bool = False):
        """Time the body as stage ``name``: the whole process's CPU clocks, or with ``thread=True`` the calling
        thread's alone (``RUSAGE_THREAD``, Linux; for work in a background thread beside other work)."""
        who = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF) if thread else resource.RUSAGE_SELF
        sync(self.device)
        r0, w0 = resource.getrusage(who), time.perf_counter()
        try:
            yield
        finally:
            sync(self.device)
            r1, w1 = resource.getrusage(who), time.perf_counter()
            s = self.times.setdefault(name, StageTime())
            s.wall += w1 - w0
            s.user += r1.ru_utime - r0.ru_utime
            s.system += r1.ru_stime - r0.ru_stime
            s.faults += r1.ru_minflt - r0.ru_minflt
            s.calls += 1

    def wrap(self, owner, attribute: str, name: str, *, thread: bool = False) -> None:
        """Time every call of ``owner.attribute`` (a function or method) as stage ``name`` (``thread``: see
        :meth:`stage`)."""
        inner = getattr(owner, attribute)
        stages = self

        def timed(*args, **kwargs):
            with stages.stage(name, thread=thread):
                return inner(*args, **kwargs)

        setattr(owner, attribute, timed)

    def lines(self, indent: str = "  ") -> list[str]:
        """One line per stage: wall, user, system seconds, system share of CPU, page faults."""
        out = [f"{indent}{'stage':<14} {'calls':>5} {'wall s':>8} {'user s':>8} {'sys s':>7} {'sys/CPU':>8} "
               f"{'faults':>10}"]
        for name, s in self.times.items():
            out.append(f"{indent}{name:<14} {s.calls:5d} {s.wall:8.2f} {s.user:8.2f} {s.system:7.2f} "
                       f"{s.system_share:8.1%} {s.faults:10d}")
        tot = StageTime(*(sum(getattr(s, k) for s in self.times.values()) for k in ("wall", "user", "system",
                                                                                    "faults", "calls")))
        out.append(f"{indent}{'all stages':<14} {tot.calls:5d} {tot.wall:8.2f} {tot.user:8.2f} {tot.system:7.2f} "
                   f"{tot.system_share:8.1%} {tot.faults:10d}")
        return out


def forward_flops(fn) -> int:
    """FLOPs of calling ``fn()`` once (``FlopCounterMode``: matmuls, convolutions, attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def _rate(x: float, unit: str) -> str:
    """``x`` per second with a prefix that keeps it readable (G or T)."""
    return f"{x / 1e12:7.2f} T{unit}/s" if x >= 1e12 else f"{x / 1e9:7.2f} G{unit}/s"


def roofline_lines(*, peak: Peak, work: dict[str, tuple[float, StageTime]] | None = None,
                   reads: dict[str, tuple[float, float]] | None = None, also: tuple[Peak, ...] = ()) -> list[str]:
    """The roofline table. ``work`` maps a stage to (FLOPs, its :class:`StageTime`), shown as FLOP/s of wall
    time against ``peak.wall`` and, on the CPU, as FLOPs per CPU second against ``peak.cpu`` (robust to a busy
    machine: time spent waiting for a core is not CPU time; spinning threads are). ``also``: further peaks (a GPU's
    bf16 rate) the work is shown against, for reference. ``reads`` maps a stage to (bytes, wall seconds),
    ``"read rate"`` to (bytes/s, 1) and optionally ``"copy rate"`` (host-to-device bytes/s, 1), shown as bytes/s
    and a share of the read rate (and of the copy rate)."""
    gpu = is_cuda(peak.device)
    if gpu:
        out = [f"  {peak.dtype} matmul peak on {peak.device}: {_rate(peak.wall, 'FLOP')} (best torch.mm "
               f"{peak.n}^2, CUDA events, TF32 off, this run)"]
        out += [f"  {p.dtype} matmul peak on {p.device}: {_rate(p.wall, 'FLOP')} (best torch.mm {p.n}^2, for "
                f"reference)" for p in also]
    else:
        out = [f"  {peak.dtype} matmul peak at {peak.threads} thread(s): {peak.wall / 1e9:.1f} GFLOP/s wall, "
               f"{peak.cpu / 1e9:.1f} GFLOP per CPU second (best torch.mm {peak.n}^2, this run)"]
    for name, (flops, t) in (work or {}).items():
        rate = flops / t.wall if t.wall else float("nan")
        line = (f"  {name:<24} {flops / 1e9:9.2f} GFLOP in {t.wall:7.2f} s = {_rate(rate, 'FLOP')} "
                f"= {rate / peak.wall:6.1%} of the {peak.dtype} peak")
        if gpu:
            line += "".join(f", {rate / p.wall:6.2%} of the {p.dtype} peak" for p in also)
        else:
            cpu = flops / (t.user + t.system) if t.user + t.system else float("nan")
            line += f"; per CPU second {cpu / 1e9:6.2f} = {cpu / peak.cpu:6.1%} of the peak's"
        out.append(line)
    if reads:
        rate = reads.get("read rate", (float("nan"), 1.0))[0]
        copy = reads.get("copy rate", (float("nan"), 1.0))[0]
        for name, (nbytes, seconds) in reads.items():
            if name == "read rate":
                out.append(f"  {'read rate (page cache)':<24} {rate / 1e9:9.2f} GB/s")
                continue
            if name == "copy rate":
                out.append(f"  {'host-to-device copy':<24} {copy / 1e9:9.2f} GB/s (pinned, 1 GiB)")
                continue
            r = nbytes / seconds if seconds else float("nan")
            out.append(f"  {name:<24} {nbytes / 1e9:9.3f} GB in {seconds:7.2f} s = {r / 1e9:6.2f} GB/s "
                       f"= {r / rate:6.1%} of the read rate" + (f", {r / copy:6.1%} of the copy rate"
                                                                if copy == copy else ""))
    return out


def pace_lines(seconds: dict[str, dict[str, float]], *, prefetch: int, per_revision: float | None = None,
               nbytes: float | None = None, limits: dict[str, float] | None = None) -> list[str]:
    """A scan's pace against its slowest stage, from ``ScanResult.seconds`` (the revisions after the first, which
    holds the batch-size trial; all of them when there is one).

    Each stage's mean seconds a revision: ``download`` and ``verify`` (sha256) run in the ``prefetch`` threads, so
    each costs the pipeline its seconds / K; ``load``, ``forward``, the other measures (``measure - forward``) and
    ``write`` run one after another on the main thread. The pipeline's floor is the larger of the main thread's
    work (load + measure + write) and a prefetch thread's (download + verify) / K; its slowest stage the largest
    single one. ``per_revision``: the measured seconds a revision (default: the main thread's wait + load +
    measure + write). ``nbytes`` (bytes of a revision's weight files) with ``limits`` (``{"read": bytes/s,
    ...}``) adds each byte-bound stage's rate against those limits."""
    revs = list(seconds)
    later = revs[1:] or revs
    mean = {k: sum(seconds[r].get(k, 0.0) for r in later) / len(later)
            for k in ("wait", "download", "verify", "load", "forward", "measure", "write")}
    k = max(prefetch, 1)
    stage = {"download (per K)": mean["download"] / k, "sha256 (per K)": mean["verify"] / k, "load": mean["load"],
             "forward": mean["forward"], "other measures": mean["measure"] - mean["forward"], "write": mean["write"]}
    main = mean["load"] + mean["measure"] + mean["write"]
    fetch = (mean["download"] + mean["verify"]) / k
    floor = max(main, fetch)
    measured = per_revision if per_revision is not None else mean["wait"] + main
    slow = max(stage, key=stage.get)
    out = [f"  pace over {len(later)} revision(s) after the first, K={k} prefetch thread(s): {measured:.2f} s a "
           f"revision = {1 / measured:.3f} revisions/s measured"]
    for name, s in stage.items():
        rate = ""
        if nbytes and s > 0 and name.split()[0] in ("download", "sha256", "load"):
            r = nbytes / (s * (k if "per K" in name else 1))
            rate = f"; {r / 1e9:.2f} GB/s of the files" + "".join(f", {r / v:.1%} of the {n} rate"
                                                                   for n, v in (limits or {}).items() if v == v)
        out.append(f"    {name:<17} {s:7.2f} s  {s / measured:6.1%} of a revision{rate}")
    out.append(f"    waited for files  {mean['wait']:7.2f} s  {mean['wait'] / measured:6.1%}")
    out.append(f"  slowest stage: {slow} {stage[slow]:.2f} s (measured / slowest {measured / stage[slow]:.2f}); "
               f"pipeline floor {floor:.2f} s = max(main thread {main:.2f} s, prefetch thread {fetch:.2f} s) "
               f"(measured / floor {measured / floor:.2f})")
    return out
