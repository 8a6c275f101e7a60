"""The command line: ``layersched COMMAND`` (`main`), ``python -m layersched.run`` (`run`) and
``python -m layersched.cli.asyncrun`` (SpecTrain with real processes).

- `main`: the parser and the schedule commands (solve, show, validate, export, schema, list).
- `bench`: ``bench NAME``, a suite or a method's experiment.
- `frontier`: ``frontier PROBLEM``, the memory-bubble frontier.
- `partition`: LayerPipe / PipeDream partitions.
- `measure`: ``profile`` (per-layer times into a problem file) and ``compare`` (predicted vs measured).
- `run`: train with a schedule on torch.distributed.
- `asyncrun`: SpecTrain's asynchronous pipeline with real processes.
- `options`: the options several commands share, declared once, checked when parsed.
"""
