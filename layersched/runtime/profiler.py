"""Measure a model layer by layer and write it as a problem file.

Each layer is timed exactly as the runner runs it (on a detached input; ``I``: the input gradient
with the graph kept; ``W``: the weight gradients from it), in whole passes over the model in the
order a run takes them, repeated, the median kept; the fused backward (``B``: both gradients in one
pass, cheaper than ``I`` then ``W``, which walk the graph twice) in a pass of its own; the
optimizer step (the runner's SGD with momentum) over each layer's parameters after its ``W``. Memory:
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

from layersched.describe.config import ClusterSpec, DeviceSpec, LinkSpec, ModelSpec, ProblemSpec, TrainingSpec
from layersched.runtime.runner import SGD
from layersched.runtime.workload import Workload, check_layers, load_workload

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
    max_in_flight: int = 4,
    lr: float = 0.01,
    momentum: float = 0.9,
) -> list[dict]:
    """Per layer: median forward, backward-input, backward-weight and fused-backward seconds, the
    seconds of the runner's optimizer step (SGD, ``lr`` and ``momentum``) over its parameters,
    and its bytes. The last layer's figures include the loss (scaled by ``1 / num_microbatches`` as in a
    run).

    Layers are timed in the order a run visits them: each repetition is a forward through all
    layers for each of ``min(num_microbatches, max_in_flight)`` micro-batches, then their input
    gradients from the last layer to the first (graphs kept), then their weight gradients, so every
    pass finds the caches as a pipelined run leaves them (timing one layer over and over, with its
    weights and activations hot, reads up to a third low). The fused backward is timed the same way
    on fresh forwards."""
    device = device or torch.device("cpu")
    clock = _Clock(device)
    x, target = x.to(device), target.to(device)
    n = len(workload.layers)
    params = []
    for _, layer in workload.layers:
        layer.to(device)
        params.append([p for p in layer.parameters() if p.requires_grad])

    def forward(j: int, inp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        y = workload.layers[j][1](inp)
        return y, (workload.loss_fn(y, target) / num_microbatches if j == n - 1 else y)

    def fresh(h: torch.Tensor, j: int) -> torch.Tensor:
        return h.detach().requires_grad_(j > 0 and h.is_floating_point())

    # memory: one forward per layer with the saved tensors recorded
    out_layers, h = [], x
    for j, (name, _) in enumerate(workload.layers):
        saved: dict[int, int] = {}
        param_ptrs = {p.data_ptr() for p in params[j]}

        def pack(t: torch.Tensor, saved=saved, param_ptrs=param_ptrs) -> torch.Tensor:
            if t.data_ptr() not in param_ptrs:
                saved[t.data_ptr()] = _nbytes(t)
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out, root = forward(j, fresh(h, j))
        kept = _weight_saved(root.grad_fn, params[j]) if root.grad_fn is not None else {}
        activation = sum(saved.values())
        out_layers.append(
            {
                "name": name,
                "activation_bytes": activation,
                "kept_for_weight_grad": min(sum(kept.values()), activation),
                "param_bytes": sum(_nbytes(p) for p in params[j]),
                "output_bytes": _nbytes(out),
            }
        )
        h = out.detach()
    # time: whole passes, as the runner runs them (on a detached input per layer)
    keys = ("forward", "backward_input", "backward_weight", "backward", "optimizer")
    times = {key: [[] for _ in range(n)] for key in keys}
    # the runner's optimizer (SGD with momentum), one per layer, stepped on the accumulated gradients
    optimizers = [SGD(ps, lr=lr, momentum=momentum) for ps in params]

    def forward_pass(record: bool) -> list[tuple[torch.Tensor, torch.Tensor]]:
        cells, h = [], x
        for j in range(n):
            inp = fresh(h, j)
            box: dict[str, tuple] = {}
            t = clock(lambda j=j, inp=inp, box=box: box.update(r=forward(j, inp)))
            cells.append((inp, box["r"][1]))
            h = box["r"][0]
            if record:
                times["forward"][j].append(t)
        return cells

    def input_pass(cells, record: bool) -> list[torch.Tensor | None]:
        grads: list[torch.Tensor | None] = [None] * n
        g = None
        for j in range(n - 1, -1, -1):
            inp, root = cells[j]
            grads[j] = g
            t = 0.0
            if inp.requires_grad and root.requires_grad:
                t = clock(
                    lambda inp=inp, root=root, g=g: torch.autograd.backward(root, g, inputs=[inp], retain_graph=True)
                )
            g = inp.grad if inp.requires_grad else None
            if g is None and j > 0:  # a layer with no input gradient: later layers get a stand-in
                g = torch.ones_like(cells[j - 1][1]) if cells[j - 1][1].is_floating_point() else None
            if record:
                times["backward_input"][j].append(t)
        return grads

    def weight_pass(cells, grads, key: str, record: bool) -> None:
        """``key="backward_weight"``: the weight gradients from the graph ``I`` kept; ``"backward"``:
        both gradients in one pass (the fused backward) on a graph no ``I`` has walked."""
        for j in range(n - 1, -1, -1):
            inp, root = cells[j]
            wrt = params[j] + ([inp] if key == "backward" and inp.requires_grad else [])
            t = 0.0
            if wrt and root.requires_grad:
                t = clock(lambda root=root, g=grads[j], wrt=wrt: torch.autograd.backward(root, g, inputs=wrt))
            if record:
                times[key][j].append(t)

    # each repetition: the forwards of ``in_flight`` micro-batches, their input gradients, their
    # weight gradients (as a pipeline's warm-up and cool-down interleave them); then fused backwards
    in_flight = max(1, min(num_microbatches, max_in_flight))
    for k in range(warmup + repeat):
        record = k >= warmup
        cells = [forward_pass(record) for _ in range(in_flight)]
        grads = [input_pass(c, record) for c in cells]
        for c, g in zip(cells, grads, strict=True):
            weight_pass(c, g, "backward_weight", record)
        for j, opt in enumerate(optimizers):
            t = clock(opt.step)
            if record:
                times["optimizer"][j].append(t)
        cells = [forward_pass(False) for _ in range(in_flight)]
        for c, g in zip(cells, grads, strict=True):
            weight_pass(c, g, "backward", record)
        for ps in params:
            for p in ps:
                p.grad = None
    return [
        {"name": layer.pop("name"), **{key: statistics.median(t[j]) for key, t in times.items()}, **layer}
        for j, layer in enumerate(out_layers)
    ]


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


def measure_runtime(
    prof: dict,
    *,
    model_options: dict | None = None,
    steps: int = 16,
    device: str = "cpu",
    timeout: float = 300.0,
    fit: bool = True,
) -> dict:
    """The runner's own costs on this machine, from short runs of the profiled model (``prof``,
    with its link measured, and a builder named by a string): the model split over two ranks, the
    ``1f1b-split`` schedule (``F``, ``I``, ``W``) and the ``1f1b`` one (``F``, fused ``B``) of the
    profile's micro-batch count, ``steps`` steps each (the first left out).

    - ``action_overhead``: per kind of compute action, the mean of (measured - profiled time of
      its layers), plus the mean share per action of each rank's step time spent outside any
      action or wait (posting messages, bookkeeping), the same for every kind. Means, not
      medians: the occasional stall (a few per step, up to milliseconds each on a loaded CPU) is
      part of what a step costs. With ``fit``, one common amount is then added to (or taken
      from) every kind so that the two schedules' predicted iterations add up to their measured
      ones (the median step, slowest rank): what the per-action figures miss (messages slower
      under load than at idle, caches colder than in the profile) is counted once, where it
      shows, in the iteration time (see `fit_overhead`);
    - ``latency``: the median over the messages whose arrival was observed of (time in flight -
      bytes / the ping-pong bandwidth).

    Both go into the problem (device ``action_overhead``, link ``latency``), so that predictions
    count what a run of this runner costs beyond its layers; ``iterations`` holds the calibration
    runs' measured iteration per schedule."""
    from layersched.describe.stages import pipeline_from_spec
    from layersched.formats.export import schedule_file
    from layersched.runtime.launch import launch_jobs
    from layersched.runtime.runner import RunConfig
    from layersched.runtime.trace import flight_times, trace_document
    from layersched.schedule.graph import parse_action
    from layersched.schedule.solve import solve_pipeline

    m = max(prof["num_microbatches"], 2)
    bare = {**prof, "device": {**prof["device"], "action_overhead": 0.0}}  # the layers' own times
    pipe = pipeline_from_spec(problem_from_profile(bare, microbatches=m, pipeline=2))
    options = {"microbatch_size": prof["microbatch_size"], **(model_options or {})}
    docs = [schedule_file(solve_pipeline(pipe, schedule=name)) for name in CALIBRATION_SCHEDULES]
    jobs = [RunConfig(doc, prof["builder"], steps=steps, model_options=options) for doc in docs]
    runs = launch_jobs(jobs, timeout=timeout, device=device, threads=prof["threads"])
    extra: dict[str, list[float]] = {k: [] for k in "FIWB"}
    outside, flights, iterations = [], [], {}
    for cfg, results in zip(jobs, runs, strict=True):
        predicted = {t.name: t.duration * 1e-9 for t in cfg.schedule.tasks}
        for r in results:
            for k in range(1, steps):
                events = [e for e in r.events if e["step"] == k]
                for e in events:
                    if not e.get("wait") and e["action"] in predicted:
                        _, kind, mb = parse_action(e["action"])
                        if mb is not None:
                            extra[kind].append(e["duration"] - predicted[e["action"]])
                actions = sum(not e.get("wait") for e in events)
                outside.append((r.step_times[k] - sum(e["duration"] for e in events)) / max(actions, 1))
        flights += flight_times(trace_document(cfg.schedule, results), list(range(1, steps)))
        iterations[cfg.schedule.method] = statistics.median(
            max(r.step_times[k] for r in results) for k in range(1, steps)
        )
    bandwidth = prof["link"]["bandwidth"]
    latency = statistics.median(sec - b / bandwidth for b, sec in flights) if flights else prof["link"]["latency"]
    latency = max(latency, 0.0)
    between = statistics.fmean(outside)
    overhead = {k: max(statistics.fmean(v) + between, 0.0) for k, v in extra.items()}
    if fit:
        calibrated = {**bare, "link": {**prof["link"], "latency": latency}}
        overhead = fit_overhead(calibrated, overhead, iterations)
    return {"action_overhead": overhead, "latency": latency, "iterations": iterations}


CALIBRATION_SCHEDULES = ("1f1b-split", "1f1b")


def fit_overhead(prof: dict, overhead: dict[str, float], iterations: dict[str, float]) -> dict[str, float]:
    """``overhead`` (seconds per action kind) shifted by one common amount, so that the predicted
    iterations of the schedules in ``iterations`` (name: measured seconds) on two ranks of
    ``prof`` add up to the measured ones; no kind goes below 0. The shift is found by bisection:
    a longer action never shortens these schedules.

    >>> prof = {"model": "toy", "builder": "toy", "microbatch_size": 1, "num_microbatches": 4,
    ...     "dtype": "float32", "dtype_bytes": 4, "threads": 1,
    ...     "device": {"name": "cpu", "peak_flops": 1e10, "memory_bandwidth": 1e10, "memory_bytes": 2**30},
    ...     "link": {"bandwidth": 1e9, "latency": 1e-5},
    ...     "layers": [{"name": f"l{i}", "forward": 1e-4, "backward_input": 1e-4, "backward_weight": 1e-4,
    ...         "optimizer": 1e-5} for i in range(2)]}
    >>> fitted = fit_overhead(prof, {"F": 0.0, "I": 0.0, "W": 0.0, "B": 0.0}, {"1f1b": 0.0024})
    >>> # 1F1B's critical path holds (m + S - 1) = 5 F and 5 B: (2.4 ms - 1.51 ms) / 10 per action
    >>> round(fitted["F"] * 1e6, 1), round(fitted["B"] * 1e6, 1)
    (89.0, 89.0)
    """
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import solve_pipeline

    m = max(prof["num_microbatches"], 2)

    def predicted(shift: float) -> float:
        each = {k: max(v + shift, 0.0) for k, v in overhead.items()}
        p = {**prof, "device": {**prof["device"], "action_overhead": each}}
        pipe = pipeline_from_spec(problem_from_profile(p, microbatches=m, pipeline=2))
        total = 0.0
        for name in iterations:
            sol = solve_pipeline(pipe, schedule=name)
            total += sol.schedule.makespan(sol.tasks.problem) * 1e-9
        return total

    target = sum(iterations.values())
    lo, hi = -max(overhead.values()), 1e-4
    if predicted(lo) >= target:
        return {k: max(v + lo, 0.0) for k, v in overhead.items()}
    while predicted(hi) < target:
        hi *= 2
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if predicted(mid) < target else (lo, mid)
    return {k: max(v + hi, 0.0) for k, v in overhead.items()}


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
    (``link``: ``"measure"``, given figures ``{"bandwidth", "latency"}``, or None to leave it out).
    Measuring the link (with the builder named by a string) also runs the model for a few steps on
    two local ranks (`measure_runtime`): the runner's cost per action of each kind and the latency
    of its messages."""
    from layersched.runtime.launch import check_device

    check_device(device)
    dev = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
    w = load_workload(model, microbatch_size=microbatch, **(model_options or {}))
    x, y = w.batches(0, 1)[0]
    units = Workload(w.units(sublayers=True), w.loss_fn, w.batches, w.name)  # sub-layers timed one by one
    check_layers(units)
    flat = _with_threads(
        threads,
        lambda: profile_layers(
            units, x, y, repeat=repeat, warmup=warmup, device=dev, num_microbatches=num_microbatches
        ),
    )
    layers = _nest(w, flat)
    dtype = next((p.dtype for _, m in w.layers for p in m.parameters()), torch.float32)
    result = {
        "model": w.name,
        "builder": model if isinstance(model, str) else getattr(model, "__name__", "model"),
        "model_options": dict(model_options or {}),
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
        if isinstance(model, str) and len(w.layers) >= 2:
            runtime = measure_runtime(result, model_options=model_options, device=device)
            result["device"]["action_overhead"] = runtime["action_overhead"]
            result["link"]["latency"] = runtime["latency"]
    elif link is not None:
        result["link"] = dict(link)
    return result


def _nest(w: Workload, flat: list[dict]) -> list[dict]:
    """Per layer its figures, or for a layer with sub-layers ``{"name", "sublayers": [...]}`` with the
    sub-layers' figures (named ``layer.part``, as `Workload.units` and the cost model's leaves)."""
    out, k = [], 0
    for name, layer in w.layers:
        parts = getattr(layer, "sublayers", None)
        if parts:
            out.append({"name": name, "sublayers": flat[k : k + len(parts)]})
            k += len(parts)
        else:
            out.append(flat[k])
            k += 1
    return out


def _with_options(options: dict | None) -> str:
    """`` with depth=4, width=64`` for a profile's builder options (``--model-arg``), or nothing."""
    return " with " + ", ".join(f"{k}={v!r}" for k, v in options.items()) if options else ""


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
            f"profiled from {prof['builder']}{_with_options(prof.get('model_options'))} "
            f"at micro-batch size {prof['microbatch_size']}, "
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

    from layersched.formats.export import write_text

    write_text(path, yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False))
