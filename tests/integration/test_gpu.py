"""The CUDA paths, run where torch sees a GPU (`pytest -m gpu`): the bench on the device, training in
bf16-mixed with `trainer=gpu` (pinned batches, loader workers, fused AdamW), PyTorch's fused attention
kernels, checkpoints moving between a GPU and a CPU, the relative position schemes (RoPE, ALiBi, T5's
bias) exact on the device, the decoder step replayed as a CUDA graph (engines.graphs), and the whole training
update replayed as one (train.graphs). Deselected by default and skipped without CUDA."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

SOURCES = "En el principio creó Dios los cielos y la tierra.\nY la tierra estaba desordenada.\n"


def smoke_training(make_cfg, tmp_path, trainer: str, precision: str, *extra: str) -> dict:
    from seqlab.app.train import train

    return train(make_cfg("train", ["experiment=smoke", "logger=none", f"trainer={trainer}",
                                     "train.quick_eval_size=0", "trainer.max_steps=2",
                                     f"trainer.precision={precision}", *extra], out=tmp_path / trainer))


def test_bench_runs_both_toolkits_on_the_gpu():
    from seqlab.bench.run import run_bench

    from .test_bench import TINY

    r = run_bench(replace(TINY, device="cuda"), ckpt=None, scaling=False, profile=True)
    assert r.outputs_identical is True
    for t in r.train.values():
        assert t.seqlab.peak_mem_mb > 0  # CUDA's counter, not the host's RSS
        assert t.seqlab_sdpa is None  # attention_kernel=auto is SDPA on a GPU: nothing to compare
    # int8 and oneDNN are CPU engines, CUDA graphs a GPU's; CTranslate2 runs on the GPU where its build sees one
    engines = set(r.decode["greedy"].engines)
    assert engines - {"ct2_fp32", "ct2_int8"} == {"bf16", "graphs", "graphs_bf16"}
    if "ct2_fp32" in engines:  # its outputs are counted against seqlab's, not required equal (its GPU kernels)
        assert r.decode["greedy"].engines["ct2_fp32"].sources == r.decode["greedy"].sources
    assert set(r.profiles) == {"train_bf16_seqlab", "train_bf16_hf", f"beam{TINY.num_beams}_bf16_seqlab"}
    assert all("Self CUDA" in table for table in r.profiles.values())  # the device's times, not only the host's


def test_smoke_training_on_the_gpu_in_bf16_with_workers_then_translation_there(make_cfg, tmp_path):
    from seqlab.app.translate import run_translate

    result = smoke_training(make_cfg, tmp_path, "gpu", "bf16-mixed", "data.num_workers=2")  # pinned, 2 workers
    assert result["step"] == 2
    source = tmp_path / "in.txt"
    source.write_text(SOURCES)
    out = tmp_path / "out.txt"
    with out.open("w") as stdout:
        n = run_translate(make_cfg("translate", [f"ckpt={result['last']}", f"input={source}", "device=cuda",
                                                 "decoding.max_length=8"]), stdout=stdout)
    assert n == 2 and len(out.read_text().splitlines()) == 2


def test_a_gpu_checkpoint_decodes_on_the_cpu_and_a_cpu_checkpoint_on_the_gpu(make_cfg, tmp_path):
    """The same checkpoint on either device: both decode, and give the same log-probabilities (fp32, TF32
    off). Greedy outputs are not compared: a 2-update model's near-uniform scores tie within rounding."""
    from seqlab.checkpoint import load_for_inference
    from seqlab.data.sequences import pad_right
    from seqlab.decoding import DecodingConfig, generate

    torch.backends.cuda.matmul.allow_tf32 = False
    for trainer in ("gpu", "cpu"):
        ckpt = smoke_training(make_cfg, tmp_path, trainer, "32")["last"]
        scores = {}
        for device in ("cpu", "cuda"):
            model, tokenizer, _ = load_for_inference(ckpt, device=device)
            assert next(model.parameters()).device.type == device
            src, pad = pad_right(tokenizer.encode_source(SOURCES.splitlines()), 0)
            src, pad = src.to(device), pad.to(device)
            tgt = torch.randint(4, model.cfg.target_vocab_size, (2, 6), generator=torch.Generator().manual_seed(0))
            with torch.no_grad():
                out = generate(model, src, pad, DecodingConfig(max_length=8))
                scores[device] = model(src, pad, tgt.to(device)).float().log_softmax(-1).cpu()
            assert out.sequences.shape[0] == 2
        torch.testing.assert_close(scores["cuda"], scores["cpu"], atol=1e-4, rtol=1e-4, msg=f"{trainer} checkpoint")


def test_adamw_is_fused_on_cuda_and_makes_the_loops_update():
    from seqlab.train.optim import adamw, use_fused

    torch.manual_seed(0)
    weights = [torch.randn(64, 32, device="cuda", requires_grad=True) for _ in range(3)]
    assert use_fused(None, weights, "bf16-mixed") is True
    copies = [w.detach().clone().requires_grad_() for w in weights]
    fused = adamw([{"params": weights}], lr=1e-3, betas=(0.9, 0.98))
    loop = torch.optim.AdamW([{"params": copies}], lr=1e-3, betas=(0.9, 0.98), foreach=False)
    assert fused.defaults["fused"] is True
    for _ in range(5):
        for ws, opt in ((weights, fused), (copies, loop)):
            opt.zero_grad()
            sum((w.sin() * (i + 1)).sum() for i, w in enumerate(ws)).backward()
            opt.step()
    for a, b in zip(weights, copies, strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


RELATIVE = ["rope", "alibi", "t5"]


def position_model(positions: str, **kw):
    from seqlab.model import ModelConfig, Seq2SeqTransformer

    torch.manual_seed(0)
    return Seq2SeqTransformer(ModelConfig(src_vocab_size=500, d_model=128, n_heads=4, encoder_layers=2,
                                          decoder_layers=2, d_ff=256, dropout=0.0, max_positions=128,
                                          positions=positions, **kw))


def padded_batch(device: str, batch: int = 6, src_len: int = 40, tgt_len: int = 30):
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 500, (batch, src_len), generator=g)
    pad = torch.arange(src_len)[None, :] >= torch.randint(src_len // 2, src_len + 1, (batch, 1), generator=g)
    src = src.masked_fill(pad, 0)
    tgt = torch.randint(4, 500, (batch, tgt_len), generator=g)
    return src.to(device), pad.to(device), tgt.to(device)


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", RELATIVE)
def test_relative_schemes_on_the_gpu_cached_equal_full_and_padding_changes_nothing(norm, positions):
    """The CPU suite's exactness checks for RoPE, ALiBi and T5's bias, on CUDA in fp32 (TF32 off): one
    decoder step at a time over the cache equals the full pass, and a sentence alone gives its row of the
    padded batch."""
    torch.backends.cuda.matmul.allow_tf32 = False
    model = position_model(positions, norm_position=norm).cuda().eval()
    src, pad, tgt = padded_batch("cuda")
    with torch.no_grad():
        memory = model.encode(src, pad)
        full, _ = model.decode(tgt, memory, pad)
        cache = model.start_cache(memory, pad)
        _, cache = model.decode(tgt[:, :3], None, None, cache)
        steps = [model.decode(tgt[:, t : t + 1], None, None, cache)[0] for t in range(3, tgt.shape[1])]
        assert (torch.cat(steps, 1) - full[:, 3:]).abs().max() <= 1e-4
        for i in range(src.shape[0]):
            n = int((~pad[i]).sum())
            alone = model(src[i : i + 1, :n], pad[i : i + 1, :n], tgt[i : i + 1])
            assert (alone[0] - full[i]).abs().max() <= 1e-4


@pytest.mark.parametrize("positions", ["sinusoidal", *RELATIVE])
def test_padded_bf16_training_runs_on_fused_attention_kernels_never_the_math_fallback(positions):
    """SDPA on a GPU, forward and backward in bf16-mixed: flash attention where there is no mask (causal
    self-attention), memory-efficient attention with a padding mask or a position bias (ALiBi's and T5's go
    in as a float mask, which that kernel takes and, for T5's learned table, differentiates; RoPE rotates q
    and k before the kernel); the unfused math path is not allowed here, and the result equals the
    written-out attention's."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fused = position_model(positions, attention_kernel="sdpa").cuda()
    written = position_model(positions, attention_kernel="math").cuda()
    written.load_state_dict(fused.state_dict())
    src, pad, tgt = padded_batch("cuda")
    outs = []
    for model, kernels in ((fused, [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]),
                           (written, [SDPBackend.MATH])):
        with sdpa_kernel(kernels), torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(src, pad, tgt).float()
        logits.logsumexp(-1).mean().backward()
        grads = torch.cat([p.grad.float().flatten() for p in model.parameters() if p.grad is not None])
        outs.append((logits, grads))
    for a, b in zip(*outs, strict=True):  # bf16: the kernels round apart
        assert ((a - b).norm() / b.norm()).item() < 2e-2


@pytest.mark.parametrize("positions", RELATIVE)
def test_relative_schemes_beam_search_on_the_gpu_equals_the_cpus(positions):
    """The same weights searched on either device (fp32, TF32 off) give the same hypotheses and scores."""
    from seqlab.decoding import DecodingConfig, generate

    torch.backends.cuda.matmul.allow_tf32 = False
    model = position_model(positions).eval()
    src, pad, _ = padded_batch("cpu", batch=4, src_len=20)
    decoding = DecodingConfig(method="beam", num_beams=5, max_length=16)
    with torch.no_grad():
        cpu = generate(model, src, pad, decoding)
        gpu = generate(model.cuda(), src.cuda(), pad.cuda(), decoding)
    assert torch.equal(gpu.sequences.cpu(), cpu.sequences)
    torch.testing.assert_close(gpu.scores.cpu(), cpu.scores, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_fused_loss_on_the_gpu_equals_the_unfused_path(dtype):
    """train.fused_loss on CUDA: the loss and every gradient as the unfused step's (fp32 up to summation order,
    bf16 autocast within bf16 rounding), in the GPU's large row blocks."""
    from tests.unit.test_output_loss import fused, grads, model_and_batch, unfused

    model, *batch = model_and_batch("untied_with_bias")
    model, batch = model.cuda(), [t.cuda() for t in batch]
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        ref_loss, _, n = unfused(model, *batch, 0.1)
    ref = grads(model, ref_loss / n)
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=dtype == "bf16"):
        loss, _, _ = fused(model, *batch, 0.1)
    ours = grads(model, loss / n)
    tol = 1e-5 if dtype == "fp32" else 2e-2
    assert loss.item() == pytest.approx(ref_loss.item(), rel=1e-5 if dtype == "fp32" else 1e-3)
    for name, g in ref.items():
        assert (ours[name] - g).abs().max() <= tol * g.abs().max().clamp(min=1e-6), name


def test_compiled_layers_on_the_gpu_give_the_eager_loss_and_gradients():
    """train.compile=layers on CUDA (Triton kernels), dropout off: the eager step's loss and gradients."""
    import copy

    from seqlab.train.levers import compile_layers, step_loss
    from tests.unit.test_output_loss import grads, model_and_batch

    model, *batch = model_and_batch("tied")
    model, batch = model.cuda(), [t.cuda() for t in batch]
    compiled = copy.deepcopy(model)
    compile_layers(compiled)
    losses, found = [], []
    for m in (model, compiled):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _, n = step_loss(m, *batch, 0.1, fused=True)
        losses.append(loss.item())
        found.append(grads(m, loss / n))
    assert losses[1] == pytest.approx(losses[0], rel=1e-3)
    for name, g in found[0].items():
        assert (found[1][name] - g).abs().max() <= 3e-2 * g.abs().max().clamp(min=1e-6), name


def test_the_compiled_fused_loss_on_the_gpu_gives_the_eager_loss_and_gradients():
    """train.compile=loss on CUDA (each block's arithmetic as Triton kernels) under bf16 autocast: the eager fused
    loss's values and gradients."""
    import copy

    from seqlab.train.levers import step_loss
    from tests.unit.test_output_loss import grads, model_and_batch

    model, *batch = model_and_batch("untied_with_bias")
    model, batch = model.cuda(), [t.cuda() for t in batch]
    twin = copy.deepcopy(model)
    losses, found = [], []
    for m, compiled in ((model, False), (twin, True)):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss, _, n = step_loss(m, *batch, 0.1, fused=True, compiled=compiled)
        losses.append(loss.item())
        found.append(grads(m, loss / n))
    assert losses[1] == pytest.approx(losses[0], rel=1e-4)
    for name, g in found[0].items():
        assert (found[1][name] - g).abs().max() <= 1e-2 * g.abs().max().clamp(min=1e-6), name


GRAPH_SETTINGS = {"greedy": dict(max_length=12), "beam4": dict(method="beam", num_beams=4, max_length=12),
                  "beam4_nbest": dict(method="beam", num_beams=4, n_best=4, max_length=12),
                  "diverse": dict(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=12),
                  "sample": dict(method="sample", n_best=3, max_length=12, seed=3)}


@pytest.mark.parametrize("name", list(GRAPH_SETTINGS))
def test_step_graphs_decode_what_the_eager_step_decodes(name):
    """Every search with its step captured once and replayed: the eager step's sequences and scores (fp32, TF32
    off), rows finishing and beams moving within the captured buffers."""
    from seqlab.decoding import DecodingConfig, generate
    from seqlab.engines.graphs import GraphedStep

    from ..helpers import toy_batch, trained_toy_model

    torch.backends.cuda.matmul.allow_tf32 = False
    model = trained_toy_model().cuda()
    src, pad, *_ = (t.cuda() for t in toy_batch(torch.Generator().manual_seed(1), 16, 40))
    cfg = DecodingConfig(**GRAPH_SETTINGS[name])
    made = []

    def graphed_step(m):
        made.append(GraphedStep(m))
        return made[-1]

    with torch.no_grad():
        eager = generate(model, src, pad, cfg)
        graphed = generate(model, src, pad, cfg, step=graphed_step)
    assert isinstance(made[-1], GraphedStep) and made[-1].captures == 1
    assert torch.equal(eager.sequences, graphed.sequences)
    torch.testing.assert_close(eager.scores, graphed.scores, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(eager.token_logprobs, graphed.token_logprobs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["greedy", "beam4", "sample"])
def test_a_one_stack_models_step_graph_decodes_what_its_eager_step_decodes(name):
    """A decoder-only LM (RoPE, grouped-query attention) over right-padded prompts: one graph a search, captured
    at its first step after the prompt, the eager step's sequences and log-probs."""
    from seqlab.decoding import DecodingConfig, generate
    from seqlab.engines.graphs import GraphedStep

    from ..unit.test_causal import batch, model_of

    torch.backends.cuda.matmul.allow_tf32 = False
    model = model_of("decoder_only", norm_position="pre", norm="rmsnorm", gated_ffn=True, activation="silu",
                     bias=False, positions="rope", kv_heads=2).cuda()
    src, pad, _ = (t.cuda() for t in batch(3))
    made = []

    def graphed_step(m):
        made.append(GraphedStep(m))
        return made[-1]

    with torch.no_grad():
        eager = generate(model, src, pad, DecodingConfig(**GRAPH_SETTINGS[name]))
        graphed = generate(model, src, pad, DecodingConfig(**GRAPH_SETTINGS[name]), step=graphed_step)
    assert made[-1].captures == 1
    assert torch.equal(eager.sequences, graphed.sequences)
    torch.testing.assert_close(eager.token_logprobs, graphed.token_logprobs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bf16", [False, True])
def test_a_replayed_step_computes_what_the_step_it_captured_computes(bf16):
    """The graph against the same static step run without one, step by step: bitwise (the same kernels), in fp32
    and under bf16 autocast (the capture's autocast keeps no cache of cast weights)."""
    from seqlab.engines.graphs import GraphedStep

    from ..helpers import toy_batch, trained_toy_model

    model = trained_toy_model().cuda()
    src, pad, *_ = (t.cuda() for t in toy_batch(torch.Generator().manual_seed(2), 8, 40))
    tokens = torch.randint(4, 40, (8, 6), generator=torch.Generator().manual_seed(3)).cuda()
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
        memory = model.encode(src, pad)
        caches = [model.start_cache(memory, pad, capacity=8) for _ in range(2)]
        steps = [GraphedStep(model), GraphedStep(model, capture=False)]
        for t in range(tokens.shape[1]):
            logits = [step(tokens[:, t], cache)[0].clone() for step, cache in zip(steps, caches, strict=True)]
            assert torch.equal(logits[0], logits[1])
    assert steps[0].captures == 1
    for a, b in zip(caches[0].layers, caches[1].layers, strict=True):
        assert torch.equal(a.k, b.k) and torch.equal(a.v, b.v)


def test_the_graphs_engine_decodes_like_generate_and_refuses_a_cpu_model():
    from seqlab.config import ConfigError
    from seqlab.decoding import DecodingConfig, generate
    from seqlab.engines.choice import GraphEngine
    from seqlab.engines.graphs import GraphedStep

    from ..helpers import toy_batch, trained_toy_model

    model = trained_toy_model()
    with pytest.raises(ConfigError, match="engine=seqlab_graphs replays CUDA graphs: use device=cuda"):
        GraphEngine(model, "fp32")
    model = model.cuda()
    src, pad, *_ = (t.cuda() for t in toy_batch(torch.Generator().manual_seed(1), 8, 40))
    cfg = DecodingConfig(method="beam", num_beams=3, max_length=10)
    with torch.no_grad():
        ours = GraphEngine(model, "fp32").generate(model, src, pad, cfg)
        expected = generate(model, src, pad, cfg, step=GraphedStep)
    assert torch.equal(ours.sequences, expected.sequences)


METHODS = {
    "greedy_no_repeat": dict(max_length=12, no_repeat_ngram_size=2, repetition_penalty=1.2),
    "beam_wu_coverage": dict(method="beam", num_beams=4, max_length=12, length_rule="wu", coverage_penalty="wu",
                             coverage_beta=0.2),
    "diverse": dict(method="beam", num_beams=4, num_beam_groups=2, diversity_penalty=0.5, max_length=12),
    "sample_top_p": dict(method="sample", n_best=3, top_p=0.9, temperature=0.8, max_length=12, seed=3),
    "sample_min_p": dict(method="sample", n_best=2, min_p=0.1, max_length=12, seed=4),
    "contrastive": dict(method="contrastive", penalty_alpha=0.5, top_k=3, max_length=12),
    "constrained": dict(method="beam", num_beams=4, max_length=12, constraints="ordered"),
    "banned": dict(method="beam", num_beams=3, max_length=12, bad_words_ids=[[7], [8, 9]],
                   sequence_bias=[[[5], 1.5]]),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_every_method_decodes_on_the_gpu_and_reports_what_the_model_assigns(name):
    """Each search and sampler on CUDA (a tensor left on the CPU fails here): its reported token log-probs are
    what the same model, teacher-forced on the CPU, gives the tokens it chose (the unwarped scores)."""
    from seqlab.decoding import DecodingConfig, generate, score

    from ..helpers import toy_batch, trained_toy_model

    torch.backends.cuda.matmul.allow_tf32 = False
    model = trained_toy_model()
    src, pad, *_ = toy_batch(torch.Generator().manual_seed(5), 6, 40)
    cfg = DecodingConfig(**METHODS[name])
    constraints = [[[7 + i % 5]] for i in range(6)] if cfg.constraints else None
    with torch.no_grad():
        out = generate(model.cuda(), src.cuda(), pad.cuda(), cfg, constraints=constraints)
    model.cpu()
    b, n, t = out.sequences.shape
    rows = torch.arange(b).repeat_interleave(n)
    seqs = out.sequences.cpu().reshape(b * n, t)
    expected = score(model, src[rows], pad[rows], seqs)
    torch.testing.assert_close(out.token_logprobs.cpu().reshape(b * n, t), expected, rtol=1e-4, atol=1e-4)
    if constraints is not None:
        for i in range(b):
            assert constraints[i][0][0] in out.sequences[i, 0, : out.lengths[i, 0]].tolist()


@pytest.mark.parametrize("bf16", [False, True])
def test_the_graphed_training_update_follows_the_eager_one(bf16):
    """Eight updates over batches of two bucket shapes, each bucket captured once: the losses and the weights
    of the eager loop (zero, forward, backward, clip, update), within rounding (TF32 off in fp32)."""
    from seqlab.train.graphs import Buckets, GraphedTrainStep

    from ..helpers import mean_loss, mixed_batch, tiny_model

    torch.backends.cuda.matmul.allow_tf32 = False
    eager, graphed = tiny_model().cuda(), tiny_model().cuda()
    shapes = [(5, 11, 7), (6, 9, 8), (3, 20, 12), (8, 16, 8), (2, 19, 10), (7, 13, 6), (4, 17, 9), (8, 10, 8)]
    batches = [{k: v.cuda() for k, v in mixed_batch(*shape, seed).items()} for seed, shape in enumerate(shapes)]
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.5, momentum=0.9)
    step = GraphedTrainStep(list(graphed.parameters()), mean_loss(graphed),
                            torch.optim.SGD(graphed.parameters(), lr=0.5, momentum=0.9), clip_norm=0.5, bf16=bf16,
                            buckets=Buckets(length=8, rows=4))
    for b in batches:
        opt_eager.zero_grad()
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = mean_loss(eager)(b)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(eager.parameters(), 0.5)
        opt_eager.step()
        assert float(step(b)) == pytest.approx(float(loss), rel=2e-2 if bf16 else 1e-5)
    assert step.captured == 2
    for p, q in zip(eager.parameters(), graphed.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=5e-2 if bf16 else 1e-4, atol=5e-3 if bf16 else 1e-5)


def test_the_graphed_update_runs_fused_capturable_adamw():
    """AdamW as the bench builds it for the graphed lever: fused, its state on the device; a replay updates."""
    from seqlab.bench.speed import bench_optimizer
    from seqlab.config import ConfigError
    from seqlab.train.graphs import GraphedTrainStep

    from ..helpers import mean_loss, mixed_batch, tiny_model

    model = tiny_model().cuda()
    with pytest.raises(ConfigError, match="capturable"):
        GraphedTrainStep(list(model.parameters()), mean_loss(model), bench_optimizer(model))
    step = GraphedTrainStep(list(model.parameters()), mean_loss(model), bench_optimizer(model, capturable=True))
    b = {k: v.cuda() for k, v in mixed_batch(8, 16, 8, 0).items()}
    first = float(step(b))
    before = [p.detach().clone() for p in model.parameters()]
    losses = [float(step(b)) for _ in range(5)]
    assert losses[-1] < first and step.captured == 1
    assert any(not torch.equal(p, q) for p, q in zip(before, model.parameters(), strict=True))
