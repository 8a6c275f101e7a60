"""Checkpoints of a run with ``torch.distributed.checkpoint`` (DCP): save, and resume exactly.

Every rank saves its own stages, together, into one DCP checkpoint directory:

- ``stage{s}.model`` and ``stage{s}.optim``: the stage's parameters and optimizer state, by the
  layers' parameter names (torch's `get_model_state_dict` / `get_optimizer_state_dict` over the
  stage's layers);
- ``stage{s}.schedule``: the learning-rate schedule's state, where there is one;
- ``rng.rank{r}``: each process's random-number state (dropout draws the same numbers again), and
  ``cuda_rng.rank{r}`` its GPU's where it runs on one (dropout on a GPU draws from that);
- ``amp.scaler``: fp16's loss scale and its count of clean steps;
- ``run``: the step reached and what must match to resume (stage layers, ranks, replicas, the
  optimizer and schedule names).

Data-parallel replicas hold the same stages under the same names; DCP writes one copy. A run resumed
from a checkpoint starts at its step, with the batches of that step on (`Workload.batches` is a
function of the step), so it continues exactly as the uninterrupted run would have: the tests
compare the parameters bit for bit.

A checkpoint is written into ``DIR.partial`` and renamed to ``DIR`` once every rank has finished, so
an interrupted save never leaves a directory that looks complete (an older ``DIR`` is replaced only
then).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)


class CheckpointError(ValueError):
    """A checkpoint that cannot be resumed here; the message says what differs."""


def _module(stage) -> nn.Module:
    """The stage's layers as one module, so that torch names their parameters and optimizer state."""
    return nn.ModuleDict({name.replace(".", "_"): m for name, m in stage.layers})


def identity(cfg, stage_layers: list[list[str]]) -> dict:
    """What a checkpoint must share with a run that resumes it."""
    p = cfg.schedule.pipeline
    return {
        "stage_layers": [list(x) for x in stage_layers],
        "num_ranks": p.num_ranks,
        "data_parallel": p.data_parallel,
        "optimizer": cfg.optimizer.lower(),
        "lr_schedule": (cfg.lr_schedule or "").lower(),
        "precision": cfg.precision,
    }


def check_resume(cfg, stage_layers: list[list[str]]) -> int:
    """The step checkpoint ``cfg.resume`` was taken after, read in this process alone (before any
    process group); `CheckpointError` when it was saved by another split, rank count, optimizer or
    schedule."""
    path = Path(cfg.resume)
    if not (path / ".metadata").is_file():
        raise CheckpointError(f"{path}: not a checkpoint (no .metadata); give a directory written by --checkpoint")
    mine = identity(cfg, stage_layers)
    saved = {"run": {"step": 0, **{k: None for k in mine}}}
    with warnings.catch_warnings():  # "assuming the intent is to load in a single process": it is
        warnings.simplefilter("ignore", UserWarning)
        dcp.load(saved, checkpoint_id=str(path), no_dist=True)
    saved = saved["run"]
    differ = [k for k in mine if saved.get(k) != mine[k]]
    if differ:
        k = differ[0]
        raise CheckpointError(
            f"{path}: saved with {k} {saved.get(k)!r}, this run has {mine[k]!r}; resume with the same schedule, "
            "model, optimizer and learning-rate schedule"
        )
    return int(saved["step"])


def _state(ex, step: int) -> dict:
    state: dict = {
        "run": {"step": step, **identity(ex.cfg, ex.stage_layers)},
        f"rng.rank{ex.rank}": torch.get_rng_state(),
    }
    if ex.device.type == "cuda":
        state[f"cuda_rng.rank{ex.rank}"] = torch.cuda.get_rng_state(ex.device)
    if ex.scaler is not None:  # fp16's loss scale, the same on every rank
        state["amp.scaler"] = {"scale": ex.scaler.scale, "tracker": ex.scaler.tracker}
    for s, st in ex.stages.items():
        mod = _module(st)
        state[f"stage{s}.model"] = get_model_state_dict(mod)
        if s in ex.optimizers:
            state[f"stage{s}.optim"] = get_optimizer_state_dict(mod, ex.optimizers[s])
            if ex.schedules[s] is not None:
                state[f"stage{s}.schedule"] = ex.schedules[s].state_dict()
    return state


def save(ex, step: int, path: str | os.PathLike) -> None:
    """Every rank's stages after ``step`` steps into the DCP checkpoint ``path`` (a collective)."""
    final = Path(path)
    partial = final.with_name(final.name + ".partial")
    if ex.rank == 0 and partial.exists():
        shutil.rmtree(partial)
    dist.barrier()
    dcp.save(_state(ex, step), checkpoint_id=str(partial))
    dist.barrier()
    if ex.rank == 0:
        if final.exists():
            shutil.rmtree(final)
        partial.rename(final)
    dist.barrier()


def load(ex, path: str | os.PathLike) -> int:
    """Restore every rank's stages from the DCP checkpoint ``path``; the step it was taken after."""
    state = _state(ex, 0)
    gpu_rng = f"cuda_rng.rank{ex.rank}"
    if gpu_rng in state and gpu_rng not in dcp.FileSystemReader(str(path)).read_metadata().state_dict_metadata:
        del state[gpu_rng]  # saved on the CPU: the GPU's generator keeps the run's seed
    dcp.load(state, checkpoint_id=str(path))  # checked by `check_resume` before the processes started
    saved = state["run"]
    torch.set_rng_state(state[f"rng.rank{ex.rank}"])
    if gpu_rng in state:
        torch.cuda.set_rng_state(state[gpu_rng], ex.device)
    if ex.scaler is not None:
        ex.scaler.scale, ex.scaler.tracker = state["amp.scaler"]["scale"], state["amp.scaler"]["tracker"]
    for s, st in ex.stages.items():
        mod = _module(st)
        set_model_state_dict(mod, state[f"stage{s}.model"])
        if s in ex.optimizers:
            set_optimizer_state_dict(mod, ex.optimizers[s], state[f"stage{s}.optim"])
            if ex.schedules[s] is not None:
                ex.schedules[s].load_state_dict(state[f"stage{s}.schedule"])
    return int(saved["step"])
