"""Run a concurrency plan on CPU threads with torch, each operation on its own number of threads.

The model is an MLP of linear layers with tanh between them (float64 by default), written as
explicit operations so that each pass is a task of the `opgraph`: ``F`` (``z = x W^T + b``, the
activation, and after the last layer the gradient of the mean squared error), ``I`` (the gradient
for the layer's input), ``W`` (the weight and bias gradients, added into one buffer per layer) and
``U`` (an SGD step).

`execute` dispatches the tasks in the plan's start order, each once its predecessors have finished
and its cores are free, to a pool of worker threads; a worker sets its own intra-op thread count
before the task (``torch.get_num_threads()`` first: two new threads that only set it race and both
end with the last value). Per-thread counts need torch's OpenMP backend; `check_openmp` refuses
others in one line. The measured timeline is written as a Chrome trace (chrome://tracing, Perfetto)
and compared with the plan. `reference_step` is the serial autograd reference the tests compare with.
On a GPU the same plan co-runs through CUDA streams (``execute(..., device="cuda")``).

Set ``OMP_WAIT_POLICY=PASSIVE`` before torch is imported (`benchmarks/concurrency_real.py` does):
with OpenMP's default policy each worker's idle team of OpenMP threads spins and takes cores from
the tasks running beside it. On a 16-core machine every strategy ran 1.6x or more faster with it
(medians), and the default strategy's spread over 5 runs fell from 35-250 ms to 20-25 ms
(``benchmarks/results/concurrency_real-h100host-16core-profile-and-wait-policy.txt``).
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import torch

from layersched.methods.concurrency.opgraph import LayerOps, OpGraph, op_graph
from layersched.methods.concurrency.perfmodel import ThreadModel, fit
from solvers import Schedule, validate


def check_openmp() -> None:
    """``RuntimeError`` in one line unless torch runs intra-op work on OpenMP (per-thread counts)."""
    info = torch.__config__.parallel_info()
    if "ATen parallel backend: OpenMP" not in info:
        backend = next((line for line in info.splitlines() if "parallel backend" in line), "unknown backend")
        why = "concurrency control needs torch's OpenMP backend for per-thread counts"
        raise RuntimeError(f"{why}; this torch has {backend}")


@dataclass
class ExplicitMLP:
    """Weights ``W[l]`` (out x in) and biases ``b[l]``; tanh after every layer but the last."""

    weights: list[torch.Tensor]
    biases: list[torch.Tensor]

    @classmethod
    def random(cls, widths: list[int], seed: int = 0, dtype: torch.dtype = torch.float64) -> ExplicitMLP:
        g = torch.Generator().manual_seed(seed)
        ws = [torch.randn(o, i, generator=g, dtype=dtype) / i**0.5 for i, o in zip(widths, widths[1:], strict=False)]
        return cls(ws, [torch.zeros(o, dtype=dtype) for o in widths[1:]])

    @property
    def num_layers(self) -> int:
        return len(self.weights)

    def copy(self) -> ExplicitMLP:
        return ExplicitMLP([w.clone() for w in self.weights], [b.clone() for b in self.biases])


def batches(widths: list[int], microbatches: int, size: int, seed: int = 1, dtype=torch.float64):
    """``microbatches`` pairs (input, target) of ``size`` samples."""
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(microbatches):
        x = torch.randn(size, widths[0], generator=g, dtype=dtype)
        pairs.append((x, torch.randn(size, widths[-1], generator=g, dtype=dtype)))
    return pairs


class _Step:
    """The tensors of one iteration, and one function per task kind."""

    def __init__(self, net: ExplicitMLP, data, lr: float):
        L, m = net.num_layers, len(data)
        self.net, self.data, self.lr = net, data, lr
        self.acts = [[None] * m for _ in range(L + 1)]  # acts[l][b]: input of layer l (l = L: the output)
        self.grad_out = [[None] * m for _ in range(L)]  # gradient of the loss for layer l's output
        for b, (x, _) in enumerate(data):
            self.acts[0][b] = x
        self.grad_w = [torch.zeros_like(w) for w in net.weights]
        self.grad_b = [torch.zeros_like(b) for b in net.biases]

    def forward(self, l: int, b: int) -> None:
        z = torch.addmm(self.net.biases[l], self.acts[l][b], self.net.weights[l].t())
        last = l == self.net.num_layers - 1
        self.acts[l + 1][b] = z if last else torch.tanh(z)
        if last:  # mean squared error of this micro-batch; the iteration's loss is the sum
            y = self.data[b][1]
            self.grad_out[l][b] = 2.0 * (z - y) / y.numel()

    def _grad_z(self, l: int, b: int) -> torch.Tensor:
        g = self.grad_out[l][b]
        if l == self.net.num_layers - 1:
            return g
        a = self.acts[l + 1][b]
        return g * (1 - a * a)

    def backward_input(self, l: int, b: int) -> None:
        self.grad_out[l - 1][b] = self._grad_z(l, b) @ self.net.weights[l]

    def backward_weight(self, l: int, b: int) -> None:
        gz = self._grad_z(l, b)
        self.grad_w[l].addmm_(gz.t(), self.acts[l][b])
        self.grad_b[l].add_(gz.sum(0))

    def update(self, l: int) -> None:
        self.net.weights[l].sub_(self.lr * self.grad_w[l])
        self.net.biases[l].sub_(self.lr * self.grad_b[l])

    def run(self, kind: str, l: int, b: int) -> None:
        if kind == "F":
            self.forward(l, b)
        elif kind == "I":
            self.backward_input(l, b)
        elif kind == "W":
            self.backward_weight(l, b)
        else:
            self.update(l)


def mlp_graph(net: ExplicitMLP, models: dict[tuple[str, int], object], microbatches: int, cores: int, threads=None):
    """The operation graph of ``net``: ``models[(kind, layer)]`` gives each pass's time on k threads."""
    layers = [
        LayerOps(f"fc{l}", models[("F", l)], models[("I", l)] if l else None, models[("W", l)], models[("U", l)])
        for l in range(net.num_layers)
    ]
    return op_graph(layers, microbatches=microbatches, cores=cores, threads=threads)


def _set_threads(k: int) -> None:
    if torch.get_num_threads() != k:  # reading first initialises this thread's count (see the module docstring)
        torch.set_num_threads(k)


def profile(
    net: ExplicitMLP, data, threads: tuple[int, ...], repeats: int = 11, *, cores: int | None = None
) -> dict[tuple[str, int], ThreadModel]:
    """Each pass of each layer timed at every thread count (median of ``repeats``, on a fresh worker
    thread), fitted with `perfmodel.fit` (leave-one-out errors included).

    Without ``cores`` each pass runs alone. With ``cores`` it runs while the machine is full of like
    work: beside the timed thread, ``cores // k - 1`` other threads run the same pass on ``k``
    threads each, as `execute` runs up to ``cores // k`` tasks of ``k`` threads at once. The times
    then include what co-running tasks cost each other (memory bandwidth, caches), which a pass
    alone does not show; at ``k = cores`` both ways are the same."""
    check_openmp()
    L = net.num_layers

    def prepared() -> _Step:
        step = _Step(net.copy(), data[:1], lr=0.0)
        for l in range(L):  # the activations and gradients every pass reads
            step.forward(l, 0)
        for l in reversed(range(1, L)):
            step.backward_input(l, 0)
        return step

    step = prepared()
    jobs = [(kind, l) for kind in ("F", "I", "W", "U") for l in range(L) if not (kind == "I" and l == 0)]
    samples: dict[tuple[str, int], dict[int, float]] = {}
    current: list[tuple[str, int] | None] = [None]  # the pass being timed, which the other threads run too

    def measure(k: int) -> None:
        try:
            _set_threads(k)
            for kind, l in jobs:
                current[0] = (kind, l)
                step.run(kind, l, 0)  # warm up (allocations, the thread team)
                times = []
                for _ in range(repeats):
                    t0 = time.perf_counter()
                    step.run(kind, l, 0)
                    times.append(time.perf_counter() - t0)
                samples.setdefault((kind, l), {})[k] = statistics.median(times)
        finally:
            current[0] = None  # the other threads stop

    def load(k: int, own: _Step, ready: threading.Barrier) -> None:
        _set_threads(k)
        ready.wait()
        while (job := current[0]) is not None:
            own.run(job[0], job[1], 0)

    for k in threads:
        current[0] = jobs[0]
        others = max(0, (cores or 0) // k - 1)
        ready = threading.Barrier(others + 1)
        helpers = [threading.Thread(target=load, args=(k, prepared(), ready)) for _ in range(others)]
        for h in helpers:
            h.start()
        ready.wait()
        worker = threading.Thread(target=measure, args=(k,))
        worker.start()
        worker.join()
        for h in helpers:
            h.join()
    return {key: fit(s) for key, s in samples.items()}


@dataclass
class Execution:
    """A run of a plan: the parameters after the step, the gradients, and per task its worker, thread
    count and measured start and end (seconds from the first dispatch)."""

    net: ExplicitMLP
    grad_w: list[torch.Tensor]
    grad_b: list[torch.Tensor]
    records: list[tuple[int, int, int, float, float]]  # (task, worker, threads, start, end)
    wall: float


def execute(
    g: OpGraph, schedule: Schedule, net: ExplicitMLP, data, *, lr: float = 0.1, device: str = "cpu"
) -> Execution:
    """Run ``schedule`` (validated against ``g`` first) on a copy of ``net`` with one micro-batch per
    entry of ``data``.

    ``device="cuda"`` co-runs the plan through CUDA streams instead: each worker thread enqueues its
    tasks on its own stream (after its predecessors' events) and waits for its own task only, so
    the tasks that the plan runs at once overlap on the GPU; a task's "cores" bound how many run at
    once, and threads per task do not apply. The result is returned on the CPU."""
    if device == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("execute: device cuda requested, but torch sees no CUDA device")
        net = ExplicitMLP([w.cuda() for w in net.weights], [b.cuda() for b in net.biases])
        data = [(x.cuda(), y.cuda()) for x, y in data]
    elif device == "cpu":
        check_openmp()
    else:
        raise ValueError(f"execute: device must be cpu or cuda, got {device!r}")
    validate(g.problem, schedule)
    if len(data) != g.microbatches or net.num_layers != len(g.layers):
        raise ValueError(f"execute: the graph has {g.microbatches} micro-batches and {len(g.layers)} layers, "
                         f"the data {len(data)} and the model {net.num_layers}")  # fmt: skip
    p = g.problem
    n = p.num_tasks
    step = _Step(net.copy(), data, lr)
    cores = schedule.cores(p).tolist()
    preds: list[list[int]] = [[] for _ in range(n)]
    for u, v in p.edges.tolist():
        preds[v].append(u)
    order = sorted(range(n), key=lambda t: (int(schedule.start[t]), t))
    done = [False] * n
    free = [g.cores]
    cond = threading.Condition()
    errors: list[BaseException] = []
    records: list[tuple[int, int, int, float, float]] = []
    names: dict[int, int] = {}
    t0 = time.perf_counter()

    cuda = device == "cuda"
    events = [torch.cuda.Event() for _ in range(n)] if cuda else []
    local = threading.local()

    def work(t: int) -> None:
        k = cores[t]
        try:
            start = time.perf_counter() - t0
            if cuda:
                if not hasattr(local, "stream"):
                    local.stream = torch.cuda.Stream()
                with torch.cuda.stream(local.stream):
                    for u in preds[t]:
                        local.stream.wait_event(events[u])
                    step.run(g.kind[t], g.layer[t], g.microbatch[t])
                    events[t].record(local.stream)
                events[t].synchronize()
            else:
                _set_threads(k)
                start = time.perf_counter() - t0
                step.run(g.kind[t], g.layer[t], g.microbatch[t])
            end = time.perf_counter() - t0
            worker = names.setdefault(threading.get_ident(), len(names))
            records.append((t, worker, k, start, end))
        except BaseException as exc:  # handed to the dispatcher
            errors.append(exc)
        finally:
            with cond:
                done[t] = True
                free[0] += k
                cond.notify_all()

    with ThreadPoolExecutor(max_workers=g.cores, thread_name_prefix="op") as pool:
        for t in order:
            with cond:
                cond.wait_for(lambda t=t: errors or (all(done[u] for u in preds[t]) and free[0] >= cores[t]))
                if errors:
                    break
                free[0] -= cores[t]
            pool.submit(work, t)
    if errors:
        raise errors[0]
    wall = max(r[4] for r in records)
    out = step.net if not cuda else ExplicitMLP([w.cpu() for w in step.net.weights], [b.cpu() for b in step.net.biases])
    grad_w, grad_b = (
        ([x.cpu() for x in step.grad_w], [x.cpu() for x in step.grad_b]) if cuda else (step.grad_w, step.grad_b)
    )
    return Execution(out, grad_w, grad_b, sorted(records, key=lambda r: r[3]), wall)


def reference_step(net: ExplicitMLP, data, lr: float = 0.1) -> tuple[ExplicitMLP, list, list]:
    """The serial reference with torch autograd: the same loss (sum over micro-batches of each one's
    mean squared error), its gradients and one SGD step; returns the new model and the gradients."""
    ws = [w.clone().requires_grad_(True) for w in net.weights]
    bs = [b.clone().requires_grad_(True) for b in net.biases]
    loss = 0.0
    for x, y in data:
        a = x
        for l, (w, b) in enumerate(zip(ws, bs, strict=True)):
            a = torch.nn.functional.linear(a, w, b)
            if l < len(ws) - 1:
                a = torch.tanh(a)
        loss = loss + torch.mean((a - y) ** 2)
    loss.backward()
    with torch.no_grad():
        new = ExplicitMLP([w - lr * w.grad for w in ws], [b - lr * b.grad for b in bs])
    return new, [w.grad for w in ws], [b.grad for b in bs]


def write_trace(path: str | Path, g: OpGraph, schedule: Schedule, run: Execution) -> dict:
    """The measured timeline as a Chrome trace (one row per worker; the plan's start and duration in
    each event's args) with a comparison: measured and planned makespan, and per kind the median
    ratio of measured to planned duration. Returns the comparison."""
    from layersched.formats.export import write_text

    planned_end = schedule.end(g.problem)
    events, ratios = [], {}
    for t, worker, k, start, end in run.records:
        plan_dur = (int(planned_end[t]) - int(schedule.start[t])) / 1e9
        events.append({"name": g.names[t], "ph": "X", "pid": 0, "tid": worker, "ts": start * 1e6,
                       "dur": (end - start) * 1e6,
                       "args": {"threads": k, "planned_start_us": int(schedule.start[t]) / 1e3,
                                "planned_dur_us": plan_dur * 1e6}})  # fmt: skip
        if plan_dur > 0:
            ratios.setdefault(g.kind[t], []).append((end - start) / plan_dur)
    summary = {
        "measured_makespan_s": run.wall,
        "planned_makespan_s": schedule.makespan(g.problem) / 1e9,
        "measured_over_planned": {kind: statistics.median(r) for kind, r in sorted(ratios.items())},
    }
    write_text(path, json.dumps({"traceEvents": events, "otherData": summary}, indent=1))
    return summary
