"""Units as people read them: times in ms and memory in GiB where the file holds ns and bytes.

The summary, the tables and the plots all print through these, so one figure reads the same
everywhere.

>>> fmt_time(768_603_000, "ns"), fmt_mem(10 * 2**30), fmt_mem(3, "unit"), fmt_mem(None)
('768.603 ms', '10.00 GiB', '3 unit', '-')
"""

from __future__ import annotations


def fmt_time(x: int, unit: str) -> str:
    """A time in the file's ``unit``: ns are shown in ms, any other unit as it is."""
    return f"{x / 1e6:.3f} ms" if unit == "ns" else f"{x} {unit}"


def fmt_mem(x: int | None, unit: str = "bytes") -> str:
    """A memory figure in the file's ``unit``: bytes in GiB, MiB or KiB; None (no limit) as '-'."""
    if x is None:
        return "-"
    if unit != "bytes":
        return f"{x} {unit}"
    for name, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if x >= div:
            return f"{x / div:.2f} {name}"
    return str(x)


def axis_unit(unit: str) -> tuple[str, float]:
    """The unit the summary prints for a file's raw unit, and the divisor to get there: nanoseconds
    are drawn in ms and bytes in GiB, as `layersched show` prints them; other units stay as they are.

    >>> axis_unit("ns"), axis_unit("bytes"), axis_unit("units")
    (('ms', 1000000.0), ('GiB', 1073741824), ('units', 1))
    """
    return {"ns": ("ms", 1e6), "bytes": ("GiB", 2**30)}.get(unit, (unit, 1))
