"""What this machine is and how fast it multiplies: CPU model and flags, usable cores, timing helpers, and the
precision `trainer.precision=auto` picks from them."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")


def _cpuinfo(field: str) -> str:
    """The first `field` line of /proc/cpuinfo, its value ("" where there is none)."""
    try:
        text = open("/proc/cpuinfo", encoding="utf-8").read()  # noqa: SIM115
    except OSError:
        return ""
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(field)), "")


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (empty where there is none)."""
    return set(_cpuinfo("flags").split())


def usable_cores() -> set[int] | None:
    """The cores this process may run on (a container's or taskset's limit, not the machine's); None where
    the platform cannot say."""
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None


def available_cores() -> int:
    """How many cores this process may run on."""
    cores = usable_cores()
    return len(cores) if cores is not None else os.cpu_count() or 1


# the flags that decide matmul speed (VNNI: int8's activation range too)
SPEED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni", "amx_bf16", "amx_int8", "amx_tile")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # the two kinds of bf16 matrix kernels a CPU may have


def bf16_flags(flags: list[str] | tuple[str, ...]) -> list[str]:
    """Of a CPU's flags, those that decide how fast it multiplies bf16 matrices (how tables name a CPU)."""
    return [f for f in BF16_FLAGS if f in flags]


def cpu_model() -> str:
    """The CPU's model name ("?" where /proc/cpuinfo has none)."""
    return _cpuinfo("model name") or "?"


def cpu_description() -> str:
    """Model, usable cores and the flags that decide matmul speed, for benchmark headers."""
    flags = [f for f in SPEED_FLAGS if f in cpu_flags()]
    return f"{cpu_model()}; cores: {available_cores()}; flags: {' '.join(flags)}"


QUIET_CORES = 0.25  # other processes' load a timing tolerates: more, and two busy processes slow each other


def busy_warning(others_busy_cores: float | None, tolerance: float = QUIET_CORES) -> str | None:
    """Why a timing cannot be trusted: other processes kept more than `tolerance` cores busy while it ran
    (None: quiet enough, or not measured)."""
    if others_busy_cores is None or others_busy_cores <= tolerance:
        return None
    return f"other processes kept {others_busy_cores:.2f} cores busy (more than {tolerance:g})"


def gpu_host_tolerance(cores: int | None = None) -> float:
    """Other processes' load a GPU timing tolerates on its host: QUIET_CORES per two of the host's cores.

    Why more than a CPU timing: a GPU bench keeps one host core busy (Python and kernel launches), and a
    data-centre host's driver and system threads alone use a quarter of a core across its 16 or more;
    what would disturb the bench is load on the core it runs on, which a few cores' worth spread over
    the others does not reach."""
    return QUIET_CORES * max(1.0, (cores or os.cpu_count() or 2) / 2)


@dataclass(frozen=True)
class CpuClock:
    """CPU seconds used on the cores this process may run on, by everything and by this process (with its
    children), and the wall clock: two readings give the cores other processes kept busy in between."""

    busy_s: float | None  # None where there is no /proc/stat
    own_s: float
    wall_s: float

    @classmethod
    def now(cls) -> CpuClock:
        own = sum(getattr(resource.getrusage(who), f) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                  for f in ("ru_utime", "ru_stime"))
        return cls(cores_busy_s(), own, time.perf_counter())

    def others_busy_cores(self, later: CpuClock) -> float | None:
        """Cores kept busy by every other process from this reading to `later`, on average."""
        if self.busy_s is None or later.busy_s is None or later.wall_s <= self.wall_s:
            return None
        others = (later.busy_s - self.busy_s) - (later.own_s - self.own_s)
        return max(0.0, others / (later.wall_s - self.wall_s))


def cores_busy_s(stat: str = "/proc/stat", cores: set[int] | None = None) -> float | None:
    """Busy CPU seconds since boot of `cores` (default: those this process may run on, so that a container's
    neighbours on other cores do not count): their /proc/stat lines less idle and iowait (guest time is
    counted in user time already); None where there is no such file."""
    cores = usable_cores() if cores is None else cores
    try:
        with open(stat, encoding="ascii") as f:
            lines = [line.split() for line in f if line.startswith("cpu") and line[3:4].isdigit()]
    except OSError:
        return None
    ticks = [sum(int(x) for x in (f[1], f[2], f[3], f[6], f[7], f[8])) for f in lines  # user nice system irq ...
             if cores is None or int(f[0][3:]) in cores]
    return sum(ticks) / os.sysconf("SC_CLK_TCK") if ticks else None


BF16_MARGIN = 1.5  # bf16 GEMMs must be this much faster than fp32 to pay for autocast's casts


def best_of(runs: dict[str, Callable[[], tuple[T, float]]], repeats: int) -> dict[str, tuple[T, float]]:
    """Each run's fastest of `repeats` (its output and seconds); each run returns (output, seconds).

    The minimum, because a shared machine only ever adds time; the runs alternate within each repeat, so
    that a slow spell hits every side alike. Every timing in seqlab's bench and scripts goes through here."""
    best: dict[str, tuple[T, float]] = {}
    for _ in range(repeats):
        for name, run in runs.items():
            out, seconds = run()
            if name not in best or seconds < best[name][1]:
                best[name] = (out, seconds)
    return best


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """fn()'s result and the seconds it took (fn syncs a GPU itself)."""
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def best_ms(fn: Any, repeats: int, warmup: int = 3) -> float:
    """The fastest of `repeats` calls of fn(), in milliseconds, after `warmup` calls (`best_of`)."""
    for _ in range(warmup):
        fn()
    return best_of({"fn": lambda: timed(fn)}, repeats)["fn"][1] * 1e3


def gemm_rate(dtype: Any, n: int = 1024, repeats: int = 3, device: str = "cpu") -> float:
    """Best FLOP/s of an n x n matmul in `dtype` on `device` over `repeats` runs (the first, cold run
    rarely wins the minimum); the bench's matmul peak and the start-up precision check both use it. bf16
    products run as training runs them (seqlab.bf16_gemm: in fp32 on a CPU without bf16 kernels)."""
    import torch

    from seqlab.bf16_gemm import bf16_gemms

    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    sync(device)  # each timed product then ends with its own sync, so the next one starts on an idle device
    with bf16_gemms(torch.device(device).type, dtype == torch.bfloat16):
        return 2.0 * n**3 / (best_ms(lambda: (a @ b, sync(device)), repeats, warmup=0) / 1e3)


def sync(device: Any) -> None:
    """Wait for a GPU's queued work, so that the clock reads finished work; nothing on a CPU."""
    import torch

    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def auto_precision(accelerator: str, flags: set[str] | None = None,
                   rate: Callable[[Any], float] | None = None) -> tuple[str, str]:
    """trainer.precision=auto: (Lightning precision, why).

    GPUs get bf16-mixed (every GPU seqlab targets has bf16 tensor cores). CPUs with AMX (`amx_bf16`)
    multiply bf16 matrices several times faster than fp32: bf16-mixed. Other CPUs differ (AVX512-BF16
    is slower than fp32 on some, faster on others), so a start-up check times one bf16 and one fp32
    GEMM and picks bf16-mixed only if it is BF16_MARGIN times faster; the log gives both rates.
    """
    import torch

    if accelerator == "auto":
        accelerator = "gpu" if torch.cuda.is_available() else "cpu"
    if accelerator != "cpu":
        return "bf16-mixed", f"accelerator={accelerator}"
    flags = cpu_flags() if flags is None else flags
    if "amx_bf16" in flags:
        return "bf16-mixed", "the CPU has AMX (amx_bf16): bf16 matrix products are the fast ones"
    rate = rate or gemm_rate
    fp32, bf16 = rate(torch.float32), rate(torch.bfloat16)
    measured = f"no AMX; a 1024^3 GEMM ran at {bf16 / 1e9:.0f} GFLOP/s in bf16, {fp32 / 1e9:.0f} in fp32"
    if bf16 >= BF16_MARGIN * fp32:
        return "bf16-mixed", measured
    return "32-true", measured
