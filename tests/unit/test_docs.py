"""The docs stay true: every `make` target and `seqlab` command they show exists, and the Hydra overrides
they show compose and pass seqlab's own checks (nothing is trained or loaded)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import open_dict

from seqlab.app.configs import train_spec
from seqlab.app.infer import InferenceRequest, TranslateSettings
from seqlab.app.main import COMMANDS
from seqlab.app.store import CONF_DIR

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TARGETS = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), re.M))
HYDRA = {"train": "train", "eval": "eval", "translate": "translate", "sweep-decoding": "eval", "bench": "bench",
         "evaluate": "eval"}  # make target or seqlab command -> the config it composes
OVERRIDE = re.compile(r"^\+?[a-z_][a-z0-9_.]*=")  # key=value, a Hydra override; a placeholder has '...'


def shown_commands() -> list[tuple[str, str]]:
    """(doc, command line) for every `make ...` / `seqlab ...` in a shell block or an inline code span."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = [b.replace("\\\n", " ") for b in re.findall(r"```bash\n(.*?)```", text, re.S)]  # continuations
        lines = [ln for block in blocks for ln in block.splitlines()]
        lines += re.findall(r"`((?:make|seqlab) [^`]+)`", text)
        for line in lines:
            line = line.split(" #")[0].strip()
            line = re.sub(r"^.*\| ", "", line)  # echo ... | make translate
            if re.match(r"(make|seqlab) [a-z]", line):
                found.append((doc.relative_to(ROOT).as_posix(), line))
    return found


SHOWN = shown_commands()


def overrides(words: list[str], multirun: bool) -> list[str]:
    """The Hydra overrides among a command's words; of a sweep's values, the first."""
    out = []
    for w in words:
        if not OVERRIDE.match(w) or "..." in w or "<" in w or w.split("=")[0] in ("ckpt", "input", "out", "key"):
            continue
        key, value = w.split("=", 1)
        if multirun and not value.startswith(("[", "{")):
            value = value.split(",")[0]
        out.append(f"{key}={value}")
    return out


def composed(config: str, over: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONF_DIR, version_base="1.3"):
        cfg = compose(config_name=config, overrides=over, return_hydra_config=True)
    GlobalHydra.instance().clear()
    return cfg


def check(config: str, over: list[str]) -> None:
    cfg = composed(config, [*over, "ckpt=somewhere"] if config in ("eval", "translate") else over)
    if config == "train":
        train_spec(cfg)
    elif config == "eval":
        InferenceRequest.from_cfg(cfg, "eval")
    elif config == "translate":
        with open_dict(cfg):
            InferenceRequest.from_cfg(cfg, "translate", TranslateSettings)


def test_the_docs_show_commands():
    assert len(SHOWN) > 40 and {d for d, _ in SHOWN} >= {"README.md", "docs/training.md", "docs/decoding.md"}


@pytest.mark.parametrize("doc,line", SHOWN, ids=[f"{d}:{line[:60]}" for d, line in SHOWN])
def test_every_command_shown_exists_and_its_overrides_compose(doc, line):
    words = shlex.split(line)
    tool, name = words[0], words[1]
    if tool == "make":
        assert name in TARGETS, f"{doc}: `{line}`: no make target {name!r}"
        args = next((w.split("=", 1)[1] for w in words if w.startswith("ARGS=")), "")
        if name in HYDRA and args:
            sweep = next((w.split("=", 1)[1] for w in words if w.startswith("SWEEP=")), None)
            check(HYDRA[name], [*overrides(shlex.split(args), False), *([f"+sweep={sweep}"] if sweep else [])])
        return
    assert name in COMMANDS, f"{doc}: `{line}`: no seqlab command {name!r}"
    if name in HYDRA:
        check(HYDRA[name], overrides(words[2:], "-m" in words))


def test_a_wrong_key_in_a_shown_command_would_fail():
    with pytest.raises(Exception, match="model.norm_positon"):
        check("train", ["model.norm_positon=pre"])
    with pytest.raises(Exception, match="decoding"):
        check("eval", ["decoding=beam", "decoding.num_beams=0"])


def test_every_relative_link_in_the_docs_resolves():
    broken = [(doc.relative_to(ROOT).as_posix(), link) for doc in DOCS
              for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text())
              if not link.startswith(("http://", "https://")) and not (doc.parent / link).exists()]
    assert broken == []
