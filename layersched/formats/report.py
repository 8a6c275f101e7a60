"""Benchmark reports: the rows of a suite or an experiment as a terminal table, a CSV and plots.

Example
-------
>>> print(rows_to_csv([{"method": "1f1b", "value": 12}], ("method", "value")), end="")
method,value
1f1b,12
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class BenchResult:
    """Rows of a benchmark, the columns to show (in order) and the files written."""

    title: str
    rows: list[dict]
    columns: tuple[str, ...]
    files: list[Path] = field(default_factory=list)
    sections: list[BenchResult] = field(default_factory=list)  # further tables, each with its own CSV


def rows_table(result: BenchResult):
    """A rich table of the rows: rates with 4 decimals, gaps as percentages, long text cut."""
    from rich.table import Table

    table = Table(title=result.title)
    for c in result.columns:
        text = c in ("problem", "method", "status", "model", "schedule")
        table.add_column(
            c.replace("_", " "),
            justify="left" if text else "right",
            no_wrap=True,
            max_width=48 if c == "status" else None,
            overflow="ellipsis",
        )
    for r in result.rows:
        table.add_row(*(_cell(c, r.get(c)) for c in result.columns))
    return table


def _cell(column: str, v) -> str:
    if v is None:
        return ""
    if isinstance(v, float) and ("rate" in column or column == "published"):
        return f"{v:.4f}"
    if isinstance(v, float) and column == "gap":
        return f"{v:.2%}"
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def rows_to_csv(rows: list[dict], columns: tuple[str, ...]) -> str:
    """The rows as CSV text, one column per name in ``columns`` (missing values empty)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({c: r.get(c) for c in columns})
    return buf.getvalue()


def plot_rows(rows: list[dict], path: Path, title: str) -> None:
    """Bubble rate per method, grouped by problem and memory limit (published values as markers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    groups = list(dict.fromkeys((r["problem"], r["memory"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / max(len(methods), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) * max(1, len(methods)) * 0.35 + 3), 4))
    for j, method in enumerate(methods):
        vals = [
            next(
                (r.get("bubble_rate") for r in rows if (r["problem"], r["memory"]) == g and r["method"] == method), None
            )
            for g in groups
        ]
        x = np.arange(len(groups)) + j * width
        ax.bar(x, [v if v is not None else 0 for v in vals], width, label=method)
    pub = [
        next(
            (r["published"] for r in rows if (r["problem"], r["memory"]) == g and r.get("published") is not None), None
        )
        for g in groups
    ]
    if any(p is not None for p in pub):
        xs = [i + 0.4 - width / 2 for i, p in enumerate(pub) if p is not None]
        ax.scatter(xs, [p for p in pub if p is not None], marker="_", s=600, color="black", label="published", zorder=3)
    ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, [f"{p}\n{m}" for p, m in groups], fontsize=8)
    ax.set_ylabel("bubble rate")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    save_figure(fig, path)


FIGURE_FORMATS = ("png", "svg", "pdf")


def figure_format(path: str | Path) -> str:
    """The picture format a path's suffix names (``.png``, ``.svg`` or ``.pdf``); `SpecError` for any
    other, so a file never holds another format than its name says.

    >>> figure_format("a.PNG"), figure_format("b.svg")
    ('png', 'svg')
    """
    from layersched.describe.config import SpecError

    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FIGURE_FORMATS:
        raise SpecError(f"{path}: cannot draw a {fmt or 'suffix-less'} file; name it .png, .svg or .pdf")
    return fmt


def save_figure(fig, path: str | Path) -> Path:
    """Render a matplotlib figure in the format its suffix names and write it atomically
    (`layersched.formats.export.write_bytes`); the figure is closed either way."""
    import io

    import matplotlib.pyplot as plt

    from layersched.formats.export import write_bytes

    try:
        fmt = figure_format(path)
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=150 if fmt == "png" else None)
    finally:
        plt.close(fig)
    return write_bytes(path, buf.getvalue())
