# seqlab: `make help` lists the targets.
SHELL := /bin/bash
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ARGS ?=
CKPT ?=
RESULTS ?= outputs/eval_results
SEEDS ?=
RUNS ?=
INPUT ?=
HF ?=
TEXT ?=
CKPTS ?=
OUT ?=
SWEEP ?= decoding
FORMAT ?= hf

# torch's CPU allocator on transparent huge pages: a large tensor's first write faults once per 2 MiB, not
# per 4 KiB (docs/performance.md: bf16 training +5-11% on a 2-core AMD EPYC, fp32 and decoding within noise).
# Read once when torch starts; `make train THP_MEM_ALLOC_ENABLE=0` turns it off.
export THP_MEM_ALLOC_ENABLE ?= 1

.DEFAULT_GOAL := help
.PHONY: experiments pipeline render check-docs help install install-browser train eval translate distill sweep-decoding sweep-arch study study-trained study-norm study-tying study-positions inspect export import average compare report bench gpu-check gpu-check-short gpu-study gpu-wheels comet-fixtures params test test-full lint clean

help: ## List the targets
	@grep -hE '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml constraints.txt
	test -d $(VENV) || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt torch
	$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,hf,ct2,lora,metrics]'
	touch $(STAMP)

install: $(STAMP) ## Create .venv and install seqlab with its dev tools (idempotent)

install-browser: ## Install Debian's chromium for the report's browser test (needs root or sudo; CI requires it)
	command -v chromium >/dev/null || { $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get update -q && \
	  $$( [ "$$(id -u)" = 0 ] || echo sudo ) apt-get install -y -q chromium; }
	chromium --version

train: $(STAMP) ## Train the default experiment (mt_bible_small, 25 CPU minutes); ARGS="key=value ..." to change it
	$(BIN)/seqlab train $(ARGS)

eval: $(STAMP) ## Evaluate a checkpoint on the test split: CKPT=run_dir_or_file [ARGS="decoding=beam"]
	@test -n "$(CKPT)" || { echo "usage: make eval CKPT=outputs/train/.../runs/<time> [ARGS=decoding=beam]"; exit 2; }
	$(BIN)/seqlab evaluate ckpt=$(CKPT) $(ARGS)

translate: $(STAMP) ## Translate/summarize stdin or INPUT=file to stdout: CKPT=... [ARGS="decoding=beam format=fairseq"]
	@test -n "$(CKPT)" || { echo "usage: make translate CKPT=run_dir_or_file [INPUT=in.txt] [ARGS=...] > out.txt" >&2; exit 2; }
	@$(BIN)/seqlab translate ckpt=$(CKPT) $(if $(INPUT),input=$(INPUT)) $(ARGS)

distill: $(STAMP) ## A teacher's beam-5 outputs on its training set as a corpus a student trains on: CKPT=... OUT=DIR [ARGS=...]
	@test -n "$(CKPT)" -a -n "$(OUT)" || { echo "usage: make distill CKPT=run_dir_or_file OUT=DIR [ARGS=...]" >&2; exit 2; }
	$(BIN)/seqlab distill ckpt=$(CKPT) out=$(OUT) $(ARGS)

sweep-decoding: $(STAMP) ## Decode CKPT with a grid of conf/sweep (SWEEP=decoding | mbr | beam_curse), then the report
	@test -n "$(CKPT)" || { echo "usage: make sweep-decoding CKPT=outputs/train/.../runs/<time> [SWEEP=mbr]"; exit 2; }
	$(BIN)/seqlab evaluate -m +sweep=$(SWEEP) ckpt=$(CKPT) $(ARGS); status=$$?; \
	$(BIN)/seqlab report --results $(RESULTS) && exit $$status

sweep-arch: $(STAMP) ## Train norm x positions x tying (12 runs x SEEDS seeds, 300 updates), evaluate greedy and beam 5; its dashboard
	$(BIN)/seqlab sweep-arch --seeds $(or $(SEEDS),1) $(ARGS)

study: $(STAMP) ## The architecture study: every question, SEEDS seeds per variant (default 3), tables -> results/arch_study
	$(BIN)/seqlab study all --seeds $(or $(SEEDS),3) $(ARGS)

# The experiments the docs report, the architecture study included, in turn, from their own worktree and
# virtualenv at a fixed commit (EXPERIMENTS_REV: the one in results/REVISION, so that every sitting runs the
# same code and editing this checkout cannot change the runs that follow), each record committed into
# results/ here as it lands. Long: run with nohup; rerun to carry on where it stopped (a cut training resumes
# from its checkpoint). Refuses a worktree left at another commit.
EXPERIMENTS ?= mt_bible_small sum_debian_small decoding_sweep truncation mbr beam_curse no_repeat constraints bench \
	arch_study arch_study_trained lm_workflow
EXPERIMENTS_WT ?= ../seqlab-experiments
EXPERIMENTS_REV ?= $(shell cat results/REVISION 2>/dev/null || echo HEAD)
experiments: ## Every experiment's pipeline in turn (EXPERIMENTS=..., ARGS="--rerun STAGE") from a worktree at EXPERIMENTS_REV, records committed as they land; long, run with nohup
	test -d $(EXPERIMENTS_WT) || git worktree add --detach $(EXPERIMENTS_WT) $(EXPERIMENTS_REV)
	@test "$$(git -C $(EXPERIMENTS_WT) rev-parse HEAD)" = "$$(git rev-parse $(EXPERIMENTS_REV))" || { echo "$(EXPERIMENTS_WT) is at $$(git -C $(EXPERIMENTS_WT) rev-parse --short HEAD), not $(EXPERIMENTS_REV): git -C $(EXPERIMENTS_WT) checkout --detach $(EXPERIMENTS_REV)"; exit 2; }
	$(MAKE) -C $(EXPERIMENTS_WT) install PY=$(PY)
	status=0; for n in $(EXPERIMENTS); do \
	  (cd $(EXPERIMENTS_WT) && .venv/bin/python -m pipelines $$n --results $(CURDIR)/results --commit $(ARGS)) || status=1; \
	done; exit $$status

study-trained: ## The architecture study at a trained budget: make experiments EXPERIMENTS=arch_study_trained; long, run with nohup
	$(MAKE) experiments EXPERIMENTS=arch_study_trained ARGS="$(ARGS)"

NAME ?=
pipeline: $(STAMP) ## Run an experiment's stages its archive lacks, then render its tables: NAME=... (make pipeline NAME=--list)
	@test -n "$(NAME)" || { echo "usage: make pipeline NAME=<experiment> [ARGS=--dry-run]   (NAME=--list lists them)"; exit 2; }
	$(BIN)/python -m pipelines $(NAME) $(ARGS)

render: $(STAMP) ## Write every generated table in README/docs from the archives in results/
	$(BIN)/python -m pipelines render

check-docs: $(STAMP) ## Fail if a generated table in README/docs differs from what its archive renders now (CI runs it)
	$(BIN)/python -m pipelines render --check

study-norm: $(STAMP) ## Study question: post-LN vs pre-LN x warm-up {0, default}
	$(BIN)/seqlab study norm_warmup --seeds $(or $(SEEDS),3) $(ARGS)

study-tying: $(STAMP) ## Study question: tied embeddings none / decoder / all
	$(BIN)/seqlab study tying --seeds $(or $(SEEDS),3) $(ARGS)

study-positions: $(STAMP) ## Study question: sinusoidal vs learned positions
	$(BIN)/seqlab study positions --seeds $(or $(SEEDS),3) $(ARGS)

inspect: $(STAMP) ## Attention maps and a step-by-step decoding trace of one sentence: CKPT=... TEXT="..." -> outputs/inspect.html
	@test -n "$(CKPT)" -a -n "$(TEXT)" || { echo "usage: make inspect CKPT=run_dir_or_file TEXT=\"a source sentence\" [ARGS=\"--max-length 40 --mbr chrf\"]"; exit 2; }
	$(BIN)/seqlab inspect --ckpt $(CKPT) --text "$(TEXT)" $(ARGS)

export: $(STAMP) ## A Hugging Face save_pretrained folder, or FORMAT=ctranslate2 a CTranslate2 model: CKPT=... OUT=DIR
	@test -n "$(CKPT)" -a -n "$(OUT)" || { echo "usage: make export CKPT=run_dir_or_file OUT=dir [FORMAT=ctranslate2] [ARGS=\"--num-beams 5\" | \"--quantization int8\"]"; exit 2; }
	$(BIN)/seqlab export --ckpt $(CKPT) --out $(OUT) --format $(FORMAT) $(ARGS)

import: $(STAMP) ## A Hugging Face encoder-decoder (folder or hub name in the local cache) as a seqlab checkpoint: HF=DIR OUT=FILE.ckpt
	@test -n "$(HF)" -a -n "$(OUT)" || { echo "usage: make import HF=path/to/opus-mt-es-en|facebook/bart-large-cnn OUT=model.ckpt [ARGS=\"--src-lang spa_Latn --tgt-lang eng_Latn\"]"; exit 2; }
	$(BIN)/seqlab import --hf $(HF) --out $(OUT) $(ARGS)

average: $(STAMP) ## Average checkpoints (fairseq's average_checkpoints): CKPTS="a.ckpt b.ckpt ..." OUT=avg.ckpt
	@test -n "$(CKPTS)" -a -n "$(OUT)" || { echo "usage: make average CKPTS=\"run/checkpoints/step-*.ckpt\" OUT=avg.ckpt"; exit 2; }
	$(BIN)/seqlab average --out $(OUT) $(CKPTS)

compare: $(STAMP) ## Paired significance: RUNS="base_result other_result ..." or ARGS="--refs R.txt --hyps A.txt B.txt"
	$(BIN)/seqlab compare $(RUNS) $(ARGS)

report: $(STAMP) ## Build outputs/report.html from every evaluation result on disk
	$(BIN)/seqlab report --results $(RESULTS)

bench: $(STAMP) ## Speed against Hugging Face transformers (same shapes, same batches) -> results/bench.json
	$(BIN)/seqlab bench $(ARGS)

# On a CUDA machine, with its own torch (no virtualenv needed: PY=python3, the default, src/ on PYTHONPATH; a copy
# of the tree without .git names its commit in SEQLAB_COMMIT, which the records then carry).
gpu-check: ## On a GPU: the GPU tests, then the bench_gpu pipeline (both shapes, profiled) -> results/bench_gpu/
	if [ -d .whl ]; then $(PY) -m pip install --quiet --no-index --no-deps .whl/*.whl; fi
	$(PY) -m pytest -q -m gpu tests/integration/test_gpu.py
	$(PY) -m pipelines bench_gpu $(ARGS)

gpu-check-short: ## On a GPU, a rerun's shorter list: Transformer-base at 32k tokens and its levers (new code's stages)
	if [ -d .whl ]; then $(PY) -m pip install --quiet --no-index --no-deps .whl/*.whl; fi
	$(PY) -m pipelines bench_gpu --rerun base_32k --rerun levers_32k --only base_32k --only levers_32k $(ARGS)

# The study's queued trainings on a lent GPU, a question's baseline trained there beside its variants, N trainings at a
# time on the one GPU, bf16-mixed, decoded there; records in results/<experiment>-gpu/, each naming its GPU (a cut
# queue carries on where it stopped: a run resumes from its checkpoint, a landed record is not run again).
GPU_PARALLEL ?= 9
GPU_STUDY := \
	"arch_study_trained --only baseline-seed?.* --only decoder_only-seed?.* --only prefix_lm-seed?.*" \
	"distillation" \
	"arch_study_trained --only swiglu-seed?.* --only swiglu_low_lr-seed?.*"
gpu-study: ## On a GPU: the queued trainings (architecture question, distillation, SwiGLU's rate) in parallel, decoded there -> results/<experiment>-gpu/
	set -f; status=0; for queued in $(GPU_STUDY); do \
	  $(PY) -m pipelines $$queued --device cuda --parallel $(GPU_PARALLEL) $(ARGS) || status=1; \
	done; exit $$status

gpu-wheels: ## Download into .whl/ what a GPU machine without network lacks for gpu-check (liger-kernel), to carry there
	python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 -d .whl 'liger-kernel==0.8.5'

comet-fixtures: ## Rewrite tests/fixtures/comet with unbabel-comet itself, in its own environment (.venv-comet; PyPI once)
	test -x .venv-comet/bin/python || python3 -m venv .venv-comet
	.venv-comet/bin/pip install --quiet -r tests/fixtures/comet/requirements.txt
	cd tests/fixtures/comet && ../../../.venv-comet/bin/python write_fixtures.py

params: $(STAMP) ## Parameter table (analytic vs counted) for a model shape; ARGS="--d_model 512 ..."
	$(BIN)/seqlab params $(ARGS)

test: $(STAMP) ## Default test suite (offline, a worker per core, about 7 minutes on 2); prints the 15 slowest tests
	$(BIN)/python -m pytest -q -n auto --durations=15

test-full: $(STAMP) ## Every test, slow ones included (DDP, kill -9 and resume, full pipelines)
	$(BIN)/python -m pytest -q -m "not gpu"

lint: $(STAMP) ## ruff
	$(BIN)/ruff check src benchmarks tests pipelines

clean: ## Remove outputs, caches and the virtual environment
	rm -rf outputs multirun cache results/bench.json wandb .ruff_cache $(VENV) src/*.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
