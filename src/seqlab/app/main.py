"""The `seqlab` command: `seqlab <command> [arguments]`, `seqlab --help` lists the commands.

Commands that compose configs (train, evaluate, translate, bench) take Hydra overrides (`key=value`,
`-m` for a multirun, `--help` for the composed config); the others take `--options`, each with its own
`--help`. A command's module is imported only when it runs, so `seqlab --help` starts at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    module: str  # under seqlab.app; its main() reads sys.argv (Hydra) or takes argv (argparse)
    summary: str
    hydra: bool = False
    args: tuple[str, ...] = ()  # put before the user's arguments (a command that is another's mode)


COMMANDS: dict[str, Command] = {
    "train": Command("train", "train one model, or a grid with -m (Hydra: experiment=NAME key=value ...)", True),
    "evaluate": Command("evaluate", "decode a test set with one setting, or a sweep with -m; metrics with intervals",
                        True),
    "translate": Command("translate", "translate or summarize stdin or input=FILE to stdout", True),
    "distill": Command("distill", "sequence-level distillation: a teacher's outputs on its training set as a "
                                  "corpus a student trains on", True),
    "bench": Command("bench", "speed against Hugging Face (and CTranslate2) in one run -> results/bench.json", True),
    "study": Command("study", "the architecture study: train, evaluate and tabulate each question's variants"),
    "sweep-arch": Command("study", "norm x positions x tying, short runs, greedy and beam 5 (see study --grid)",
                          args=("--grid",)),
    "compare": Command("compare", "paired significance between evaluation results or plain-text files"),
    "report": Command("report", "the local HTML report of every evaluation result on disk"),
    "inspect": Command("inspect", "attention maps and a step-by-step decoding trace of one sentence"),
    "export": Command("export", "a checkpoint as a Hugging Face folder or a CTranslate2 model"),
    "import": Command("import_hf", "a Hugging Face folder (Marian, BART, mBART, PEGASUS, T5, M2M100, NLLB; "
                                   "GPT-2, Llama, Mistral, Qwen2) as a seqlab checkpoint"),
    "average": Command("average", "average checkpoints' parameters (fairseq's average_checkpoints)"),
    "params": Command("params", "parameter counts, analytic against counted, for a model shape"),
    "baselines": Command("baselines", "the lead baseline's ROUGE on a summarization corpus"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {c.summary}" for name, c in COMMANDS.items())
    return f"usage: seqlab <command> [arguments]   (seqlab <command> --help for its arguments)\n\ncommands:\n{rows}"


def relaunch_as(module: str) -> None:
    """Make a re-run of this process run `module` (a Hydra command's, runnable with `python -m`): Lightning
    starts each further DDP or FSDP rank as `python -m <__main__'s module> <sys.argv[1:]>`, and once the
    dispatcher has taken the command's name out of sys.argv, a re-run of `seqlab` itself would not know it."""
    main_module = sys.modules.get("__main__")
    if main_module is not None:
        main_module.__spec__ = importlib.util.find_spec(module)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"seqlab: unknown command '{name}'\n\n{usage()}", file=sys.stderr)
        return 2
    command = COMMANDS[name]
    module = importlib.import_module(f"seqlab.app.{command.module}")
    if command.hydra:
        sys.argv = [f"seqlab {name}", *command.args, *rest]  # Hydra reads its overrides from sys.argv
        relaunch_as(module.__name__)
        return int(module.run() or 0)
    return int(module.main([*command.args, *rest]) or 0)


if __name__ == "__main__":
    sys.exit(main())
