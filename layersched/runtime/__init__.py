"""Run a schedule file with torch.distributed: build each rank's stages, execute its action list,
time every action, and compare the measured timeline with the predicted one.

Modules (only those marked *torch* import torch; none is imported by the rest of layersched at
import time, so ``import layersched`` works without torch):

- `plan`: static checks and the communication plan of a schedule (pure Python).
- `trace`: trace files (Chrome/Perfetto and our own JSON) and `compare` (pure Python).
- `workload` (*torch*): loading ``file.py:function`` model builders.
- `runner` (*torch*): one rank's executor and the single-process reference.
- `launch` (*torch*): local multi-process launch with a timeout.
- `torch_runtime` (*torch*): the same schedule through torch.distributed.pipelining.
- `profiler` (*torch*): per-layer times and memory, written as a problem file.
- `commands`: the ``layersched profile`` and ``layersched compare`` commands.
"""
