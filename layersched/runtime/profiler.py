"""Measure a model layer by layer and write it as a problem file.

Each layer is timed exactly as the runner runs it (on a detached input; ``I``: the input gradient
with the graph kept; ``W``: the weight gradients from it), repeated, the median kept. Memory:
the bytes of the tensors autograd saves in the forward (``torch.autograd.graph.saved_tensors_hooks``,
parameters left out), of them those that weight-gradient nodes hold (kept until ``W``), the
parameters and the output. The device's rates and the link between two local processes are
measured too, so the problem file describes this machine.

Example
-------
>>> prof = profile("examples/models.py:mlp", microbatch=4, repeat=3, link=None)
>>> [layer["name"] for layer in prof["layers"]][:2], prof["layers"][0]["param_bytes"]
(['fc0', 'fc1'], 8448)
>>> spec = problem_from_profile(prof, microbatches=4, pipeline=2)
>>> spec.model.layers[0].name, spec.training.pipeline
('fc0', 2)
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable

import torch

from layersched.config import ClusterSpec, DeviceSpec, LinkSpec, ModelSpec, ProblemSpec, TrainingSpec
from layersched.runtime.workload import load_workload

# autograd nodes that only reshape a parameter on its way to its gradient accumulator
_VIEWS = {
    "TBackward0",
    "ViewBackward0",
    "UnsafeViewBackward0",
    "ExpandBackward0",
    "PermuteBackward0",
    "TransposeBackward0",
    "ReshapeAliasBackward0",
    "SqueezeBackward0",
    "UnsqueezeBackward0",
}


class _Clock:
    """Wall time of a region, with the device synchronised at both ends on a GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if self.cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - t


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _weight_saved(root, params: list[torch.Tensor]) -> dict[int, int]:
    """Saved tensors (data pointer -> bytes) of the autograd nodes that compute a parameter's
    gradient: what the backward for weights still needs after the backward for inputs."""
    param_ids = {id(p) for p in params}
    param_ptrs = {p.data_ptr() for p in params}

    def feeds_param(fn, depth: int = 0) -> bool:
        if fn is None:
            return False
        if hasattr(fn, "variable"):
            return id(fn.variable) in param_ids
        return (
            depth < 4 and type(fn).__name__ in _VIEWS and any(feeds_param(f, depth + 1) for f, _ in fn.next_functions)
        )

    out: dict[int, int] = {}
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nexts = [f for f, _ in node.next_functions]
        if any(feeds_param(f) for f in nexts):
            for attr in dir(node):
                if attr.startswith("_saved_"):
                    value = getattr(node, attr)
                    if isinstance(value, torch.Tensor) and value.data_ptr() not in param_ptrs:
                        out[value.data_ptr()] = _nbytes(value)
        stack.extend(nexts)
    return out


def profile_layers(
    workload,
    x: torch.Tensor,
    target: torch.Tensor,
    repeat: int = 5,
    warmup: int = 2,
    device: torch.device | None = None,
    num_microbatches: int = 1,
) -> list[dict]:
    """Per layer: median forward, backward-input and backward-weight seconds, and its bytes. The
    last layer's figures include the loss (scaled by ``1 / num_microbatches`` as in a run)."""
    device = device or torch.device("cpu")
    clock = _Clock(device)
    x, target = x.to(device), target.to(device)
    out_layers = []
    for j, (name, layer) in enumerate(workload.layers):
        layer.to(device)
        params = [p for p in layer.parameters() if p.requires_grad]
        last = j == len(workload.layers) - 1

        def forward(inp: torch.Tensor, layer=layer, last=last) -> tuple[torch.Tensor, torch.Tensor]:
            y = layer(inp)
            return y, (workload.loss_fn(y, target) / num_microbatches if last else y)

        def fresh_input(x=x, j=j) -> torch.Tensor:
            return x.detach().requires_grad_(j > 0 and x.is_floating_point())

        # memory: one forward with the saved tensors recorded
        saved: dict[int, int] = {}
        param_ptrs = {p.data_ptr() for p in params}

        def pack(t: torch.Tensor, saved=saved, param_ptrs=param_ptrs) -> torch.Tensor:
            if t.data_ptr() not in param_ptrs:
                saved[t.data_ptr()] = _nbytes(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out, root = forward(fresh_input())
        kept = _weight_saved(root.grad_fn, params) if root.grad_fn is not None else {}
        grad = None if last else torch.randn_like(root)
        # time: forward, input gradient (graph kept), weight gradients, as the runner runs them
        times: dict[str, list[float]] = {"forward": [], "backward_input": [], "backward_weight": []}
        for k in range(warmup + repeat):
            t_f, t_i, t_w = _time_once(clock, forward, fresh_input(), grad, params)
            if k >= warmup:
                for key, value in zip(times, (t_f, t_i, t_w), strict=True):
                    times[key].append(value)
        for p in params:
            p.grad = None
        activation = sum(saved.values())
        out_layers.append(
            {
                "name": name,
                **{key: statistics.median(v) for key, v in times.items()},
                "activation_bytes": activation,
                "kept_for_weight_grad": min(sum(kept.values()), activation),
                "param_bytes": sum(_nbytes(p) for p in params),
                "output_bytes": _nbytes(out),
            }
        )
        x = out.detach()
    return out_layers


def _time_once(clock: _Clock, forward, inp: torch.Tensor, grad, params) -> tuple[float, float, float]:
    """Seconds of one forward, backward for inputs (graph kept) and backward for weights."""
    box: dict[str, torch.Tensor] = {}
    t_f = clock(lambda: box.update(root=forward(inp)[1]))
    root = box["root"]
    t_i = t_w = 0.0
    if inp.requires_grad and root.requires_grad:
        t_i = clock(lambda: torch.autograd.backward(root, grad, inputs=[inp], retain_graph=True))
    if params and root.requires_grad:
        t_w = clock(lambda: torch.autograd.backward(root, grad, inputs=params))
    return t_f, t_i, t_w


def measure_device(device: torch.device, dtype: torch.dtype = torch.float32) -> dict:
    """Achieved matrix-multiply rate, copy bandwidth and memory size of ``device``."""
    clock = _Clock(device)
    n = 512
    a, b = torch.randn(n, n, dtype=dtype, device=device), torch.randn(n, n, dtype=dtype, device=device)
    clock(lambda: a @ b)
    flops = 2 * n**3 / min(clock(lambda: a @ b) for _ in range(5))
    big = torch.empty(16 * 2**20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(big)
    dst.copy_(big)
    bandwidth = 2 * _nbytes(big) / min(clock(lambda: dst.copy_(big)) for _ in range(5))
    if device.type == "cuda":
        memory = torch.cuda.get_device_properties(device).total_memory
        name = torch.cuda.get_device_name(device)
    else:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        name = platform.processor() or platform.machine() or "cpu"
    return {
        "name": name,
        "peak_flops": flops,
        "memory_bandwidth": bandwidth,
        "memory_bytes": int(memory),
        "flops_efficiency": 1.0,
        "bandwidth_efficiency": 1.0,
    }


def _with_threads(threads: int, fn: Callable, *args):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        return fn(*args)
    finally:
        torch.set_num_threads(before)


def _pingpong(rank: int, device: torch.device, state: tuple) -> list[float]:
    import torch.distributed as dist

    sizes, repeat = state
    out = []
    for size in sizes:
        buf = torch.zeros(size // 4, dtype=torch.float32, device=device)
        rounds = []
        for _ in range(repeat + 2):
            dist.barrier()
            t = time.perf_counter()
            # as the runner transfers: isend / irecv and wait
            if rank == 0:
                dist.isend(buf, 1).wait()
                dist.irecv(buf, 1).wait()
            else:
                dist.irecv(buf, 0).wait()
                dist.isend(buf, 0).wait()
            rounds.append((time.perf_counter() - t) / 2)
        out.append(statistics.median(rounds[2:]))
    return out


def measure_link(
    device: str = "cpu", sizes: tuple[int, ...] = (256, 2**20, 4 * 2**20), repeat: int = 20, timeout: float = 120.0
) -> dict:
    """Latency and bandwidth between two local ranks (gloo on CPUs, NCCL on GPUs), transferring as
    the runner does: a ping-pong at several sizes (ascending); the latency is the smallest size's
    time, the bandwidth the slope from the smallest to the largest."""
    from layersched.runtime.launch import run_processes

    times = run_processes(_pingpong, 2, (sizes, repeat), timeout=timeout, device=device)[0]
    slope = max((times[-1] - times[0]) / (sizes[-1] - sizes[0]), 1e-15)
    return {"bandwidth": 1.0 / slope, "latency": max(times[0] - slope * sizes[0], 0.0)}


def profile(
    model: str | Callable,
    microbatch: int,
    *,
    repeat: int = 5,
    warmup: int = 2,
    device: str = "cpu",
    threads: int = 1,
    link: str | dict | None = "measure",
    num_microbatches: int = 1,
    model_options: dict | None = None,
) -> dict:
    """Profile ``model`` (a builder or its ``file.py:function`` name) at micro-batch size
    ``microbatch``: per-layer times and bytes, the device, and the link between two local ranks
    (``link``: ``"measure"``, given figures ``{"bandwidth", "latency"}``, or None to leave it out)."""
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
    w = load_workload(model, microbatch_size=microbatch, **(model_options or {}))
    x, y = w.batches(0, 1)[0]
    layers = _with_threads(
        threads,
        lambda: profile_layers(w, x, y, repeat=repeat, warmup=warmup, device=dev, num_microbatches=num_microbatches),
    )
    dtype = next((p.dtype for _, m in w.layers for p in m.parameters()), torch.float32)
    result = {
        "model": w.name,
        "builder": model if isinstance(model, str) else getattr(model, "__name__", "model"),
        "microbatch_size": microbatch,
        "num_microbatches": num_microbatches,
        "dtype": str(dtype).removeprefix("torch."),
        "dtype_bytes": torch.empty((), dtype=dtype).element_size(),
        "threads": threads,
        "repeat": repeat,
        "device": _with_threads(threads, measure_device, dev, dtype),
        "layers": layers,
    }
    if link == "measure":
        result["link"] = measure_link(device)
    elif link is not None:
        result["link"] = dict(link)
    return result


def problem_from_profile(
    prof: dict,
    *,
    microbatches: int,
    pipeline: int,
    data_parallel: int = 1,
    stages_per_rank: int = 1,
    schedule: str = "1f1b",
    name: str | None = None,
) -> ProblemSpec:
    """A model-level `ProblemSpec` from a `profile`: its layers, this machine as the cluster (one
    node with ``pipeline * data_parallel`` devices), and the training settings given."""
    link = prof.get("link") or {"bandwidth": prof["device"]["memory_bandwidth"], "latency": 0.0}
    dtype_bytes = 2 if prof["dtype_bytes"] <= 2 else 4  # the description knows 2- and 4-byte types only
    return ProblemSpec(
        name=name or f"{prof['model']}-profiled",
        description=(
            f"profiled from {prof['builder']} at micro-batch size {prof['microbatch_size']}, "
            f"{prof['dtype']}, {prof['threads']} thread(s), on {prof['device']['name']}"
        ),
        model=ModelSpec(name=prof["model"], layers=prof["layers"], dtype_bytes=dtype_bytes),
        cluster=ClusterSpec(
            name="localhost",
            device=DeviceSpec(**prof["device"]),
            nodes=1,
            devices_per_node=pipeline * data_parallel,
            intra_node=LinkSpec(**link),
        ),
        training=TrainingSpec(
            microbatches=microbatches,
            microbatch_size=prof["microbatch_size"],
            pipeline=pipeline,
            data_parallel=data_parallel,
            stages_per_rank=stages_per_rank,
            schedule=schedule,
            optimizer_bytes_per_param=float(prof["dtype_bytes"]),
        ),
    )


def write_problem(spec: ProblemSpec, path) -> None:
    """Write ``spec`` as YAML, atomically."""
    import yaml

    from layersched.export import write_text

    write_text(path, yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False))
