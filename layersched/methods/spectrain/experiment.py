"""``layersched bench spectrain``: synchronous vs asynchronous 1F1B (stale, stashed, SpecTrain) on 4 stages.

A teacher-student classification task (`layersched.methods.spectrain.asyncpipe.teacher_student`, no download):
each mode trains the same 4-stage MLP from the same initial weights on the same mini-batches, with
SGD (lr 0.1, momentum 0.9), in the single-process emulation of `layersched.methods.spectrain.asyncpipe`. The
table gives, per mode, the final training loss and the test loss and accuracy (each the mean over the
last quarter of the run and over the seeds), and the extra weight memory per stage; the plot the
curves over steps.

Example
-------
>>> import pytest; _ = pytest.importorskip("torch")
>>> rows = table_rows(steps=20, seeds=[0], eval_every=10)
>>> [r["mode"] for r in rows]
['sync', 'stale', 'stash', 'spectrain']
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from layersched.formats.report import BenchResult, save_figure

LR, MOMENTUM = 0.1, 0.9
COLUMNS = (
    "mode",
    "train_loss",
    "test_loss",
    "test_accuracy",
    "accuracy_gap_closed",
    "loss_gap_closed",
    "extra_weight_bytes_per_stage",
)
LABELS = {
    "sync": "synchronous 1F1B",
    "stale": "async, stale weights",
    "stash": "async, weight stashing",
    "spectrain": "async, SpecTrain prediction",
}


def table_rows(steps: int, seeds: list[int], eval_every: int = 50) -> list[dict]:
    """One row per mode (curves under ``_curves``); ``accuracy_gap_closed`` (``loss_gap_closed``): the
    share of the test-accuracy (test-loss) gap between ``stale`` and ``sync`` that the mode closes."""
    import torch

    from layersched.methods.spectrain.asyncpipe import MODES, teacher_student, train, weight_memory

    torch.set_num_threads(1)
    rows = []
    mem = weight_memory(teacher_student(seed=seeds[0]))
    for mode in MODES:
        hists = [
            train(teacher_student(seed=s), mode, steps, lr=LR, momentum=MOMENTUM, eval_every=eval_every) for s in seeds
        ]
        tail = max(1, len(hists[0].test_accuracy) // 4)
        extra = [0] * len(mem) if mode == "sync" else [r[f"{mode}_extra"] for r in mem]
        rows.append(
            {
                "mode": mode,
                "train_loss": float(np.mean([h.loss[-steps // 4 :] for h in hists])),
                "test_loss": float(np.mean([h.test_loss[-tail:] for h in hists])),
                "test_accuracy": float(np.mean([h.test_accuracy[-tail:] for h in hists])),
                "extra_weight_bytes_per_stage": "/".join(map(str, extra)),
                "_curves": hists,
            }
        )
    for key, sign in (("test_accuracy", 1), ("test_loss", -1)):
        got = {r["mode"]: sign * r[key] for r in rows}
        span = got["sync"] - got["stale"]
        for r in rows:
            gap = f"{'accuracy' if sign > 0 else 'loss'}_gap_closed"
            r[gap] = round((sign * r[key] - got["stale"]) / span, 3) if span > 0 else None
    return rows


def run(out_dir: Path, *, quick: bool = False, progress=None) -> BenchResult:
    """Train every mode (``quick``: 300 steps, one seed; else 1200 steps, three seeds) and plot."""
    if progress:
        progress(0, 1, "training 4 modes")
    rows = table_rows(300 if quick else 1200, [0] if quick else [0, 1, 2])
    png = out_dir / "spectrain.png"
    _plot(rows, png)
    for r in rows:
        r.pop("_curves")
    if progress:
        progress(1, 1, "done")
    return BenchResult("SpecTrain: asynchronous 1F1B on 4 stages, spectrain", rows, COLUMNS, [png])


def _plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
    for r in rows:
        hs = r["_curves"]
        loss = np.mean([h.loss for h in hs], axis=0)
        w = max(1, len(loss) // 40)
        smooth = np.convolve(loss, np.ones(w) / w, mode="valid")
        a1.plot(np.arange(len(smooth)) + w, smooth, label=LABELS[r["mode"]])
        a2.plot(hs[0].steps_evaluated, np.mean([h.test_accuracy for h in hs], axis=0), label=LABELS[r["mode"]])
    a1.set_xlabel("step")
    a1.set_ylabel("training loss (moving average)")
    a2.set_xlabel("step")
    a2.set_ylabel("test accuracy")
    a1.legend(fontsize=8)
    a2.legend(fontsize=8)
    fig.suptitle(f"teacher-student, 4 stages, SGD lr {LR} momentum {MOMENTUM} (single-process emulation)")
    fig.tight_layout()
    save_figure(fig, path)
