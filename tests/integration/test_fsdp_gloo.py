"""Sharded training without a GPU: seqlab's FSDP wrapping units and one-file state through torch's own
FullyShardedDataParallel on two CPU processes over gloo (Lightning's FSDPStrategy refuses a CPU). Each rank takes
half of every batch; after a few SGD steps (Adam's first steps take the sign of near-zero gradients, where the
float sums of two halves differ) the gathered weights equal one process's on the whole batches within float
tolerance, and the file rank 0 writes is a checkpoint every seqlab command reads."""

from __future__ import annotations

import socket

import pytest
import torch
import torch.multiprocessing as mp

from seqlab.checkpoint import load_for_inference, read_checkpoint
from seqlab.io import atomic_write

STEPS = 3


def batches(vocab: int, seed: int = 0) -> list[tuple[torch.Tensor, ...]]:
    """STEPS batches of 4 pairs of equal lengths (each rank's half then holds as many target tokens)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(STEPS):
        src = torch.randint(4, vocab, (4, 7), generator=g)
        tgt = torch.randint(4, vocab, (4, 6), generator=g)
        out.append((src, torch.zeros_like(src, dtype=torch.bool), tgt))
    return out


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: tuple[torch.Tensor, ...]) -> None:
    from seqlab.train.losses import label_smoothed_nll

    src, pad, tgt = batch
    tgt_in = torch.cat([torch.full_like(tgt[:, :1], model_cfg(model).bos_id), tgt[:, :-1]], dim=1)
    loss, _, n = label_smoothed_nll(model(src, pad, tgt_in), tgt, 0.1, model_cfg(model).pad_id)
    optimizer.zero_grad()
    (loss / n).backward()
    optimizer.step()


def model_cfg(model: torch.nn.Module):
    return getattr(model, "module", model).cfg


def rank_main(rank: int, world: int, port: int, ckpt: str, out: str) -> None:
    import os

    import torch.distributed as dist

    from seqlab.train.fsdp import full_state, shard

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model, _, _ = load_for_inference(ckpt)
    sharded = shard(model.eval())  # eval: no dropout, whose masks differ by rank; gradients flow all the same
    optimizer = torch.optim.SGD(sharded.parameters(), lr=0.5)
    for src, pad, tgt in batches(model.cfg.target_vocab_size):
        half = slice(2 * rank, 2 * rank + 2)  # this rank's half; FSDP averages the two halves' gradients
        step(sharded, optimizer, (src[half], pad[half], tgt[half]))
    state = full_state(sharded)
    if rank == 0:
        checkpoint = read_checkpoint(ckpt)
        checkpoint["state_dict"] = {f"model.{k}": v for k, v in state.items()}
        atomic_write(out, lambda f: torch.save(checkpoint, f))
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_gloo_ranks_train_what_one_process_trains_and_save_one_checkpoint(smoke_checkpoint, tmp_path):
    out = tmp_path / "sharded.ckpt"
    mp.spawn(rank_main, args=(2, free_port(), str(smoke_checkpoint), str(out)), nprocs=2, join=True)
    model, _, _ = load_for_inference(smoke_checkpoint)  # one process, the whole batches (eval: no dropout)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for batch in batches(model.cfg.target_vocab_size):
        step(model, optimizer, batch)
    sharded, tokenizer, info = load_for_inference(out)  # the file rank 0 wrote, read as every command reads one
    ours = sharded.state_dict()
    worst = max(float((ours[k] - v).abs().max()) for k, v in model.state_dict().items())
    assert worst < 1e-5, worst
    start = read_checkpoint(smoke_checkpoint)["state_dict"]
    moved = max(float((ours[k] - start[f"model.{k}"]).abs().max()) for k in ours if f"model.{k}" in start)
    assert moved > 1e-3, moved  # the steps trained something
    assert info.step == read_checkpoint(smoke_checkpoint)["seqlab"]["step"]
    assert tokenizer.decode_target(tokenizer.encode_target(["a"])[0])  # its tokenizer travels with it
