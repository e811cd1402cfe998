"""Follow one call's configuration through the code: the seqlab functions handed the raw (Hydra / OmegaConf)
config or a node of it, and those handed one of the typed settings built from it (`SETTINGS`), in call order.

A function's package is its module's second name (`seqlab.app.evaluate` -> `app`). The path is the packages in
call order with repeats collapsed; a return is an entry whose package appeared earlier in the path
(`ConfigTrace.returns`), and a call whose own traced callers had left its package is a return down a call chain
(`nested_returns`: A -> B -> A).

    python tests/config_trace.py CKPT [override ...]    # one `seqlab evaluate` call, traced (any tree on PYTHONPATH)
    TRACE_CALLS=1 python tests/config_trace.py ...     # and every traced call
    TRACE_CHECKPOINT=1 python tests/config_trace.py ... # the checkpoint's model and data configs followed too
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from omegaconf import Container

# The typed settings an evaluation builds from its own config; names, so that one list measures trees where some
# of them do not exist yet.
SETTINGS = frozenset({"EvalJob", "EvalSettings", "DecodingConfig", "InferenceRequest", "InferenceSettings", "TestSet",
                      "NeuralSettings", "BertScoreSettings", "MetricXSettings", "TrackingConfig", "PromptSettings",
                      "Rescoring", "ResultDir"})
# ... and with the checkpoint's model and data configs, which the evaluation reads too: the whole configuration.
WITH_CHECKPOINT = SETTINGS | {"ModelConfig", "DataConfig"}


@dataclass
class ConfigTrace:
    calls: list[str] = field(default_factory=list)  # "module.function", in call order
    raw: list[str] = field(default_factory=list)  # the calls handed the OmegaConf config itself
    chains: list[tuple[str, ...]] = field(default_factory=list)  # each call's traced callers' packages and its own
    files: set[str] = field(default_factory=set)

    @property
    def packages(self) -> list[str]:
        """The packages in call order, consecutive repeats collapsed."""
        return collapsed([call.split(".")[1] for call in self.calls])

    @property
    def nested_returns(self) -> int:
        """Calls whose package one of their traced callers had left: A -> B -> A down one call chain."""
        count = 0
        for chain in self.chains:
            *callers, own = chain
            left = collapsed(callers)
            count += own in left[:-1] and left[-1] != own
        return count

    @property
    def returns(self) -> int:
        """How often the path comes back to a package it had left."""
        seen: set[str] = set()
        count = 0
        for package in self.packages:
            count += package in seen
            seen.add(package)
        return count


def collapsed(packages: list[str]) -> list[str]:
    """`packages` with consecutive repeats kept once."""
    return [p for i, p in enumerate(packages) if i == 0 or packages[i - 1] != p]


def handed_config(frame, settings: frozenset[str]) -> str | None:
    """"raw" where an argument is the OmegaConf config or a node of it, "typed" where it is one of the typed
    settings named `settings`, else None."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    names = list(code.co_varnames[:count])
    for flag in (inspect.CO_VARARGS, inspect.CO_VARKEYWORDS):  # *args, **kwargs follow the named arguments
        if code.co_flags & flag:
            names.append(code.co_varnames[count])
            count += 1
    found = None
    for name in names:
        value = frame.f_locals.get(name)
        values = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else (value,)
        if any(isinstance(v, Container) for v in values):
            return "raw"
        if any(type(v).__name__ in settings for v in values):
            found = "typed"
    return found


def trace_config(call: Callable[[], Any], names: frozenset[str] = SETTINGS) -> tuple[Any, ConfigTrace]:
    """Run `call()` and record every seqlab function handed the raw config or one of the typed settings
    `names`."""
    trace = ConfigTrace()
    stack: list[tuple[object, str]] = []  # the traced frames now running, outermost first

    def profile(frame, event, _arg):
        if event == "return" and stack and stack[-1][0] is frame:
            stack.pop()
        if event != "call":
            return
        module = frame.f_globals.get("__name__", "")
        handed = handed_config(frame, names) if module.startswith("seqlab.") else None
        if handed:
            package = module.split(".")[1]
            trace.calls.append(f"{module}.{frame.f_code.co_name}")
            if handed == "raw":
                trace.raw.append(trace.calls[-1])
            trace.chains.append((*(p for _, p in stack), package))
            trace.files.add(frame.f_code.co_filename)
            stack.append((frame, package))

    sys.setprofile(profile)
    try:
        result = call()
    finally:
        sys.setprofile(None)
    return result, trace


def main(argv: list[str]) -> None:
    from pathlib import Path
    from tempfile import mkdtemp

    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    import seqlab
    import seqlab.app.store  # noqa: F401  (registers the dataclass defaults the YAML files extend)
    from seqlab.app.evaluate import run_evaluation

    root = Path(seqlab.__file__).resolve().parents[2]
    ckpt, *overrides = argv
    out = Path(mkdtemp())
    with initialize_config_dir(config_dir=str(root / "conf"), version_base="1.3"):
        cfg = compose(config_name="eval", overrides=[f"ckpt={ckpt}", "engine=seqlab", *overrides],
                      return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.root_dir, cfg.paths.data_dir = str(root), str(root / "data")
        cfg.paths.log_dir, cfg.paths.output_dir = str(out / "outputs"), str(out / "run")
        cfg.results_dir = str(out / "eval_results")
    HydraConfig.instance().set_config(cfg)
    names = WITH_CHECKPOINT if os.environ.get("TRACE_CHECKPOINT") else SETTINGS
    payload, trace = trace_config(lambda: run_evaluation(cfg), names)
    print(f"status {payload['status']}; the raw config: {len(trace.raw)} calls, "
          f"packages {sorted({c.split('.')[1] for c in trace.raw})}")
    print(f"with the typed settings: {len(trace.calls)} calls handed the config, {len(trace.files)} files, "
          f"{len(set(trace.packages))} packages, {trace.returns} returns to a package left "
          f"in call order, {trace.nested_returns} down a call chain")
    print(" -> ".join(trace.packages))
    if os.environ.get("TRACE_CALLS"):  # every traced call, in order
        print("\n".join(trace.calls))


if __name__ == "__main__":
    main(sys.argv[1:])
