"""Corpus preparation at scale: time, pairs/s, peak resident memory and cache size per corpus size.

    python benchmarks/prepare_bench.py --pairs 100000 1000000 4500000 [--workdir /tmp/prep]

Each size is a local JSONL corpus made by repeating the embedded Bible pairs (unique ids), prepared
from an empty cache in a fresh process (tokenizer training on its default 2M-sentence sample, then
train and validation splits), so the peak memory is that process's own (its ru_maxrss, tokenizer
training included). A second run on the warm cache is timed too. Prints a Markdown table and the CPU's flags.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from seqlab.hardware import cpu_description

ROOT = Path(__file__).resolve().parents[1]  # its src/ is measured unless --src names another checkout's

CHILD = """
import json, sys, time, logging
logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
from seqlab.data import CorpusConfig, DataConfig, TokenizerConfig
from seqlab.data.datamodule import Seq2SeqDataModule
try:
    from seqlab.data.prepare import load_tokenizer
except ImportError:  # --src of a version before streaming preparation
    from seqlab.data.datamodule import load_tokenizer
files = json.loads(sys.argv[1])
corpus = CorpusConfig(name="bench", kind="files", task="translation", files=files, src_lang="es", tgt_lang="en")
tokenizer = TokenizerConfig(**json.loads(sys.argv[3]))
cfg = DataConfig(corpus=corpus, cache_dir=sys.argv[2], tokenizer=tokenizer)
start = time.perf_counter()
load_tokenizer(cfg)
tokenizer_seconds = time.perf_counter() - start
module = Seq2SeqDataModule(cfg)
module.prepare_data()
module.setup("fit")
import resource
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # bytes (Linux reports KiB)
print(json.dumps({"seconds": time.perf_counter() - start, "train": len(module.splits["train"]), "peak": peak,
                  "tokenizer": tokenizer_seconds}))
"""


def make_corpus(folder: Path, pairs: int) -> dict[str, str]:
    """train.jsonl with `pairs` pairs (the Bible's train pairs repeated), validation.jsonl as it is."""
    from seqlab.data import CorpusConfig, load_split

    bible = CorpusConfig(name="bible", kind="embedded", task="translation", path="bible_es_en",
                         src_lang="es", tgt_lang="en")
    folder.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, n in (("train", pairs), ("validation", None)):
        path = folder / f"{split}.jsonl"
        files[split] = str(path)
        if path.exists():
            continue
        examples = load_split(bible, split)
        n = n or len(examples)
        with open(path, "w", encoding="utf-8") as f:
            for i in range(n):
                e = examples[i % len(examples)]
                f.write(json.dumps({"id": str(i), "translation": {"es": e.source, "en": e.target}},
                                   ensure_ascii=False) + "\n")
    return files


def run(files: dict[str, str], cache: Path, src: Path, tokenizer: dict) -> dict:
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(files), str(cache), json.dumps(tokenizer)],
                          capture_output=True,
                          text=True, env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"})
    if proc.returncode:
        sys.exit(proc.stderr[-3000:])
    print("\n".join(line for line in proc.stderr.splitlines() if line.startswith(("prepared", "training"))),
          file=sys.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pairs", type=int, nargs="+", default=[100_000, 1_000_000, 4_500_000])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/seqlab-prepare-bench"))
    parser.add_argument("--keep", action="store_true", help="keep corpora and caches")
    parser.add_argument("--max-sentences", type=int, default=None,
                        help="the tokenizer's training sample (default: TokenizerConfig's, 2M sentences)")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="the seqlab sources to measure (e.g. an "
                        "older checkout's src/, for a before/after comparison)")
    args = parser.parse_args()
    print(cpu_description())
    print("| pairs | corpus (JSONL) | preparation | of which tokenizer training | tokenization pairs/s | "
          "peak RSS | cache on disk | warm start |")
    print("|---|---|---|---|---|---|---|---|")
    for pairs in args.pairs:
        folder = args.workdir / f"corpus-{pairs}"
        files = make_corpus(folder, pairs)
        cache = args.workdir / f"cache-{pairs}"
        shutil.rmtree(cache, ignore_errors=True)
        tokenizer = {} if args.max_sentences is None else {"max_sentences": args.max_sentences}
        cold = run(files, cache, args.src, tokenizer)
        warm = run(files, cache, args.src, tokenizer)
        size = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
        corpus_mb = sum(Path(f).stat().st_size for f in files.values()) / 1e6
        rate = pairs / max(cold["seconds"] - cold["tokenizer"], 1e-9)
        print(f"| {pairs:,} | {corpus_mb:,.0f} MB | {cold['seconds']:.0f} s | {cold['tokenizer']:.0f} s | "
              f"{rate:,.0f} | {cold['peak'] / 2**30:.2f} GiB | {size / 1e6:,.0f} MB | {warm['seconds']:.2f} s |",
              flush=True)
        if not args.keep:
            shutil.rmtree(cache, ignore_errors=True)
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
