"""What `seqlab bench` measured, typed: training per precision, decoding per setting with every engine
beside seqlab's fp32 search, and the position schemes. The JSON it writes (`to_dict`) is what the
performance page renders from (`from_dict`), so ratios and MFUs are derived here, in one place.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DECODINGS = ("greedy", "beam", "beam8")  # the settings timed against Hugging Face
ENGINES = {  # a decoding variant beside seqlab's fp32 search -> what its outputs are compared with
    "bf16": "seqlab fp32", "int8": "seqlab fp32", "onednn": "HF", "ct2_fp32": "seqlab fp32", "ct2_int8": "seqlab fp32",
    "graphs": "HF", "graphs_bf16": "seqlab bf16"}


@dataclass(frozen=True)
class Throughput:
    """One training measurement: the fastest of its repeats."""

    tokens_per_s: float  # source + target tokens
    step_s: float
    peak_mem_mb: float


@dataclass(frozen=True)
class TrainComparison:
    """seqlab against Hugging Face in one precision, on the same batches."""

    seqlab: Throughput
    hf: Throughput
    seqlab_sdpa: Throughput | None  # seqlab with PyTorch's fused attention throughout (a CPU's choice only)
    matmul_peak_flops: float  # this device's measured matmul rate in the precision's dtype
    step_flops: float

    @property
    def ratio(self) -> float:
        """> 1: seqlab trains faster."""
        return self.seqlab.tokens_per_s / self.hf.tokens_per_s

    def mfu(self, side: Throughput) -> float:
        """Model FLOPs utilization against the measured matmul peak."""
        return self.step_flops / side.step_s / self.matmul_peak_flops


@dataclass(frozen=True)
class EngineRun:
    """Another engine (or precision) decoding the same sources with the same setting."""

    tokens_per_s: float
    seconds: float
    same: int  # outputs equal to the reference's (ENGINES names it)
    sources: int


@dataclass(frozen=True)
class DecodeComparison:
    """One decoding setting: seqlab fp32 against Hugging Face, and every other engine beside them."""

    beams: int
    seqlab_s: float
    hf_s: float
    seqlab_peak_mem_mb: float
    hf_peak_mem_mb: float
    generated_tokens: int  # by seqlab
    sources: int
    differing_sources: int  # seqlab's outputs against HF's
    engines: dict[str, EngineRun] = field(default_factory=dict)  # ENGINES' keys

    @property
    def ratio(self) -> float:
        """> 1: seqlab decodes faster."""
        return self.hf_s / self.seqlab_s

    def x_hf(self, engine: str) -> float:
        return self.hf_s / self.engines[engine].seconds


@dataclass(frozen=True)
class PositionTiming:
    """One position scheme against sinusoidal positions, same shape, same run."""

    train_step_s: float  # bf16-mixed
    beam_s: float  # fp32 beam search of the untrained model (so every scheme's outputs run to the length limit)
    beam_tokens: int  # the tokens it generated
    train_x_sinusoidal: float  # > 1: faster than sinusoidal (per step)
    beam_x_sinusoidal: float  # > 1: faster than sinusoidal (per generated token)


@dataclass(frozen=True)
class BenchResult:
    config: dict[str, Any]  # the BenchConfig
    ckpt: str | None
    torch: str
    device: str  # "cpu" or the GPU's name
    threads: int
    cpu: str  # hardware.cpu_description()
    huge_page_allocator: bool
    train: dict[str, TrainComparison]  # "fp32", "bf16"
    decode: dict[str, DecodeComparison] = field(default_factory=dict)  # DECODINGS; empty: not decoded
    scaling: dict[str, Any] | None = None
    positions: dict[str, PositionTiming] = field(default_factory=dict)
    engine_auto: str | None = None  # what engine=auto decodes with on this machine (fp32), and why
    engine_auto_reason: str = ""
    others_busy_cores: float | None = None  # other processes' load during the bench (None: not measured)
    profiles: dict[str, str] = field(default_factory=dict)  # profile=true: torch.profiler tables by what ran

    @property
    def outputs_identical(self) -> bool | None:
        """seqlab's and HF's outputs equal in every setting; None when nothing was decoded."""
        return all(d.differing_sources == 0 for d in self.decode.values()) if self.decode else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BenchResult:
        def train(v: dict[str, Any]) -> TrainComparison:
            sdpa = v.get("seqlab_sdpa")
            return TrainComparison(Throughput(**v["seqlab"]), Throughput(**v["hf"]),
                                   Throughput(**sdpa) if sdpa else None, v["matmul_peak_flops"], v["step_flops"])

        def decode(v: dict[str, Any]) -> DecodeComparison:
            return DecodeComparison(**{**v, "engines": {k: EngineRun(**e) for k, e in v["engines"].items()}})

        return cls(**{**values, "train": {k: train(v) for k, v in values["train"].items()},
                      "decode": {k: decode(v) for k, v in values.get("decode", {}).items()},
                      "positions": {k: PositionTiming(**v) for k, v in (values.get("positions") or {}).items()}})

    def table(self) -> str:
        """The result as the text table `seqlab bench` prints."""
        where = self.cpu if self.device == "cpu" else f"{self.device} (host: {self.cpu})"
        lines = [f"{where}; threads {self.threads}; torch {self.torch}; "
                 f"THP_MEM_ALLOC_ENABLE={int(self.huge_page_allocator)}",
                 f"{'measure':<28}{'seqlab':>14}{'HF':>14}{'ratio':>9}"]
        for tag, t in self.train.items():
            lines.append(f"{'train tok/s ' + tag:<28}{t.seqlab.tokens_per_s:>14,.0f}{t.hf.tokens_per_s:>14,.0f}"
                         f"{t.ratio:>9.2f}")
            lines.append(f"{'train peak MiB ' + tag:<28}{t.seqlab.peak_mem_mb:>14,.0f}{t.hf.peak_mem_mb:>14,.0f}")
            lines.append(f"{'MFU ' + tag:<28}{t.mfu(t.seqlab):>14.1%}{t.mfu(t.hf):>14.1%}")
            if t.seqlab_sdpa is not None:
                sdpa = t.seqlab_sdpa.tokens_per_s
                lines.append(f"{'  same, fused SDPA ' + tag:<28}{sdpa:>14,.0f}{'':>14}{sdpa / t.hf.tokens_per_s:>9.2f}")
        for name, d in self.decode.items():
            tokens = d.generated_tokens
            lines.append(f"{name + ' decode tok/s':<28}{tokens / d.seqlab_s:>14,.0f}{tokens / d.hf_s:>14,.0f}"
                         f"{d.ratio:>9.2f}")
            lines.append(f"{name + ' decode peak MiB':<28}{d.seqlab_peak_mem_mb:>14,.0f}{d.hf_peak_mem_mb:>14,.0f}")
            for engine, e in d.engines.items():
                lines.append(f"{'  ' + name + ' ' + engine + ' tok/s':<28}{e.tokens_per_s:>14,.0f}{'':>14}"
                             f"{d.x_hf(engine):>9.2f}  ({e.same} of {e.sources} outputs equal {ENGINES[engine]}'s)")
        fp32 = self.train["fp32"].matmul_peak_flops
        bf16 = self.train["bf16"].matmul_peak_flops
        identical = "not decoded" if self.outputs_identical is None else self.outputs_identical
        lines.append(f"outputs identical: {identical}; train GFLOP/step {self.train['fp32'].step_flops / 1e9:.1f}; "
                     f"matmul peak fp32 {fp32 / 1e9:.0f} GFLOP/s, bf16 {bf16 / 1e9:.0f} GFLOP/s")
        if self.engine_auto:
            lines.append(f"engine=auto: {self.engine_auto} ({self.engine_auto_reason})")
        if self.others_busy_cores is not None:
            lines.append(f"other processes kept {self.others_busy_cores:.2f} cores busy during the bench")
        for scheme, row in self.positions.items():
            lines.append(f"{'positions=' + scheme:<28}train {row.train_x_sinusoidal:.2f}x, "
                         f"beam {row.beam_x_sinusoidal:.2f}x sinusoidal's speed")
        for name, text in self.profiles.items():
            lines += [f"-- profile: {name}", text]
        return "\n".join(lines)
