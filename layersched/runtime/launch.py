"""Start a run on this machine: one process per rank, a private rendezvous on a free localhost port,
and a timeout.

Ranks are forked from a fork server that has imported torch once, with what each rank's layer check
imports (``forkserver`` start method, where the platform has it; ``spawn`` elsewhere). A spawned rank
imports torch itself, which takes seconds per rank, paid again by every run from the same process (a
test suite, a benchmark of many runs).
The server is a clean process started for this purpose: it imports but never runs torch, so no
thread pool or CUDA context is forked. It starts with the first run and keeps the environment of
that moment, so each rank is handed the launcher's environment as it is at its own launch (as a
spawned process would have it): a variable set between two runs (``NCCL_DEBUG``,
``CUDA_VISIBLE_DEVICES``, ...) reaches the second. Variables that a library reads when torch is
imported (OpenMP's) are the server's.

The schedule, the model and the world size are checked in the launcher before any process starts.
Every process group has a timeout, and the launcher watches its children: when one dies, the
others are stopped and a `RunFailed` names the rank and its error; when the run outlives
``timeout``, all are stopped and a `RunFailed` says so. A run never hangs. A rank that succeeds
leaves only when every rank has finished its work (a barrier), so no rank closes its connections
while a peer is still opening them.

Example
-------
>>> from layersched.describe.config import ProblemSpec
>>> from layersched.formats.export import schedule_file
>>> from layersched.schedule.solve import solve_pipeline
>>> from layersched.describe.stages import pipeline_from_spec
>>> spec = ProblemSpec.model_validate({"name": "t", "pipeline": {"stages": 2, "microbatches": 2,
...     "forward": 1, "backward_input": 1, "backward_weight": 1}})
>>> doc = schedule_file(solve_pipeline(pipeline_from_spec(spec), schedule="1f1b"))
>>> results = launch_local(doc, "examples/models.py:mlp", steps=1)  # doctest: +SKIP
>>> results[1].losses  # doctest: +SKIP
[1.07...]
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from layersched.runtime.runner import Executor, Prepared, RankResult, RunConfig, prepare

# what the fork server imports once; every rank forked from it starts with these loaded. torch._dynamo
# (with sympy): the meta-device check of the layers (`check_layers`, each rank's first step) imports it
# through torch's decompositions, 2-3 s in every rank of every run on the 2-core VM when not preloaded
_PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "layersched.runtime.launch"]


def start_method() -> str:
    """``forkserver`` where this platform has it (its server preloads torch and the runner), else
    ``spawn``."""
    if "forkserver" not in mp.get_all_start_methods():
        return "spawn"
    mp.set_forkserver_preload(_PRELOAD)  # takes effect when the server starts; later calls change nothing
    return "forkserver"


class RunFailed(RuntimeError):
    """A rank failed or the run timed out; the message names the rank and the cause."""


RANK_BYTES = 128 * 2**20
"""Host memory a local rank takes before its model's: torch, the process group and the runner. Measured
on the 2-core VM (torch 2.13, CPU): 60 ranks of examples' mlp lowered the machine's available memory
by 7,617 MiB at their peak, 127 MiB a rank."""


def check_device(device: str | None, processes: int = 1, rank_bytes: int = RANK_BYTES) -> None:
    """`SpecError` (a `ValueError`: the command asks what this machine cannot give) with one line,
    before any process starts, when ``device`` cannot serve ``processes`` ranks here: more ranks than
    the memory available holds (``rank_bytes`` each; a schedule file asking for 1,000 replicas started
    2,000 processes and the machine stalled), CUDA asked for on a build or machine without it, or
    fewer GPUs than ranks (NCCL gives each rank a GPU of its own)."""
    from layersched.describe.config import SpecError

    if device not in (None, "cpu", "cuda"):
        raise SpecError(f"--device {device!r}: use 'cpu' or 'cuda'")
    from layersched.formats.units import fmt_mem
    from layersched.schedule.budget import short_of

    if (have := short_of(processes * rank_bytes)) is not None:
        raise SpecError(
            f"{processes:,} processes need about {fmt_mem(processes * rank_bytes)} of memory before their model's "
            f"({fmt_mem(rank_bytes)} each), more than the {fmt_mem(have)} this machine has available; use fewer "
            "here (torchrun can spread ranks across machines)"
        )
    if device != "cuda":
        return
    if not torch.cuda.is_available():
        why = "this torch build has no CUDA" if torch.version.cuda is None else "no CUDA device is visible"
        raise SpecError(f"--device cuda: {why} (torch {torch.__version__}); use --device cpu")
    if torch.cuda.device_count() < processes:
        raise SpecError(
            f"--device cuda: {processes} ranks need {processes} GPUs (one each for NCCL), this machine has "
            f"{torch.cuda.device_count()}; use fewer ranks or --device cpu"
        )


def pick_device(device: str | None, local_rank: int) -> tuple[torch.device, str]:
    """The device of a rank and its backend: ``cuda:<local_rank>`` with NCCL, or the CPU with gloo
    (``device=None``: CUDA when available)."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank), "nccl"
    if device != "cpu":
        raise ValueError(f"device {device!r}: use 'cpu' or 'cuda'")
    return torch.device("cpu"), "gloo"


def init_group(
    rank: int, world_size: int, device: torch.device, backend: str, timeout: float, store: dist.Store | None = None
) -> None:
    """Start the default process group with a timeout (from the environment when ``store`` is
    None, as under torchrun)."""
    kwargs = {"device_id": device} if device.type == "cuda" else {}
    dist.init_process_group(
        backend, store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout), **kwargs
    )


def _worker(
    rank: int,
    fn: Callable,
    args: tuple,
    before: Callable | None,
    world_size: int,
    port: int,
    out: str,
    timeout: float,
    device: str,
    threads: int,
    environ: dict[str, str],
) -> None:
    os.environ.clear()  # the launcher's environment now, not the fork server's from its start
    os.environ.update(environ)
    torch.set_num_threads(threads)
    state = before(world_size, *args) if before is not None else args
    dev, backend = pick_device(device, rank)
    store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False, timeout=timedelta(seconds=timeout))
    init_group(rank, world_size, dev, backend, timeout, store)
    result = fn(rank, dev, state)
    # only after success: on an error the connections close when this process has exited, so the
    # launcher sees this rank fail before its peers fail for want of it. The barrier first: a rank
    # whose work is quick (or none) must not close its connections while a peer may still be
    # completing its side of them in init_group (gloo's connectFullMesh then fails with "Connection
    # closed by peer": 1 run of an empty function in 1,400, of two and four ranks, on the 2-core VM)
    dist.barrier()
    dist.destroy_process_group()
    torch.save(result, Path(out) / f"rank{rank}.pt")


def run_processes(
    fn: Callable,
    world_size: int,
    args: tuple = (),
    *,
    before: Callable | None = None,
    timeout: float = 120.0,
    device: str = "cpu",
    threads: int = 1,
) -> list:
    """Call ``fn(rank, device, state)`` in ``world_size`` new processes joined in a process group,
    where ``state = before(world_size, *args)`` (run before the group starts; ``args`` without
    ``before``); the results in rank order. `RunFailed` when a rank fails or ``timeout`` passes."""
    store = dist.TCPStore(
        "127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout)
    )
    with tempfile.TemporaryDirectory(prefix="layersched-run-") as out:
        worker_args = (fn, args, before, world_size, store.port, out, timeout, device, threads, dict(os.environ))
        ctx = mp.start_processes(_worker, nprocs=world_size, join=False, start_method=start_method(), args=worker_args)
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=0.1):
                if time.monotonic() > deadline:
                    _stop(ctx)
                    raise RunFailed(
                        f"the run did not finish within {timeout:g} s; all {world_size} ranks "
                        "were stopped (a rank waits for a message that never comes, or the run "
                        "is slower than the timeout)"
                    )
        except mp.ProcessRaisedException as exc:
            last = str(exc).strip().splitlines()[-1]
            raise RunFailed(f"rank {exc.error_index} failed: {last}") from exc
        except mp.ProcessExitedException as exc:
            raise RunFailed(
                f"rank {exc.error_index} died (exit code {exc.exit_code}"
                f"{', signal ' + exc.signal_name if exc.signal_name else ''}); "
                "the other ranks were stopped"
            ) from exc
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


def _prepare_jobs(world_size: int, jobs: list[RunConfig]) -> list[tuple[RunConfig, Prepared]]:
    return [(job, prepare(job, world_size)) for job in jobs]


def _run_jobs(rank: int, device: torch.device, prepared: list[tuple[RunConfig, Prepared]]) -> list[RankResult]:
    return [run_rank(job, prep, rank, device) for job, prep in prepared]


def launch_jobs(
    jobs: list[RunConfig], *, timeout: float = 120.0, device: str = "cpu", threads: int = 1
) -> list[list[RankResult]]:
    """Run several jobs one after another in one set of processes (they must need the same world
    size); per job, the result of every rank in rank order."""
    world = jobs[0].world_size
    for job in jobs:
        if job.world_size != world:
            raise ValueError(f"jobs need {world} and {job.world_size} processes; launch them separately")
        prepare(job, world)  # every static check, before any process starts
    check_device(device, world)
    results = run_processes(
        _run_jobs, world, (jobs,), before=_prepare_jobs, timeout=timeout, device=device, threads=threads
    )
    return [[results[r][j] for r in range(world)] for j in range(len(jobs))]


def _stop(ctx) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(2)
        if p.is_alive():
            p.kill()
            p.join()


def launch_local(
    schedule,
    model: str,
    world_size: int | None = None,
    *,
    steps: int = 1,
    lr: float = 0.01,
    momentum: float = 0.9,
    model_options: dict | None = None,
    runtime: str = "layersched",
    trace: str | Path | None = None,
    stage_factory: type | None = None,
    timeout: float = 120.0,
    device: str = "cpu",
    threads: int = 1,
) -> list[RankResult]:
    """Run ``schedule`` (a `ScheduleFile` or its path) on ``model`` in local processes; the result
    of every rank. With ``trace``, write the trace files there (see `layersched.runtime.trace`);
    ``stage_factory``: see `RunConfig`."""
    if not hasattr(schedule, "pipeline"):
        from layersched.formats.export import load_schedule

        schedule = load_schedule(schedule)
    cfg = RunConfig(
        schedule,
        model,
        steps=steps,
        lr=lr,
        momentum=momentum,
        model_options=model_options or {},
        runtime=runtime,  # type: ignore[arg-type]
        stage_factory=stage_factory,
    )
    if world_size is not None and world_size != cfg.world_size:
        prepare(cfg, world_size)  # raises the one-line mismatch error
    results = launch_jobs([cfg], timeout=timeout, device=device, threads=threads)[0]
    if trace is not None:
        from layersched.runtime.trace import trace_document, write_trace

        write_trace(trace, trace_document(schedule, results, runtime), schedule)
    return results


def run_rank(cfg: RunConfig, prep: Prepared, rank: int, device: torch.device) -> RankResult:
    """Run ``cfg`` as global ``rank`` in an initialised default process group, with the executor
    that ``cfg.runtime`` names: ours (`layersched.runtime.runner.Executor`) or torch's."""
    if cfg.runtime == "torch":
        from layersched.runtime.torch_runtime import run_torch_rank

        return run_torch_rank(cfg, prep, rank, device)
    return Executor(cfg, prep, rank, device).run()


def run_under_torchrun(
    cfg: RunConfig, *, device: str | None = None, timeout: float = 300.0, threads: int = 1, params: bool = False
) -> list[RankResult] | None:
    """Run ``cfg`` as this process's rank under torchrun (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` in
    the environment). Rank 0 returns every rank's result, the others None. A result's parameters are
    sent to rank 0 only with ``params`` (for ``--check``): every rank's whole model may not fit there."""
    torch.set_num_threads(threads)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    prep = prepare(cfg, world)
    check_device(device, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))  # this machine's ranks
    dev, backend = pick_device(device, int(os.environ.get("LOCAL_RANK", "0")))
    init_group(rank, world, dev, backend, timeout)
    try:
        result = run_rank(cfg, prep, rank, dev)
        if not params:
            result = replace(result, params={})
        gathered = [None] * world if rank == 0 else None
        dist.gather_object(result, gathered, dst=0)
    finally:
        dist.destroy_process_group()
    return gathered
