"""Formats: what a schedule becomes outside the process.

- `export`: the versioned schedule file (JSON, with its JSON Schema in ``schema/``) and
  torch.distributed.pipelining's compute-only CSV; atomic writes.
- `plot`: the Gantt chart with memory per rank under it (SVG or PNG).
- `report`: benchmark rows as a terminal table, a CSV and a plot.
- `units`: ms and GiB for figures held in ns and bytes, the same in every table and plot.
"""
