"""One package per method from the papers behind layersched. Each holds its model, its runtime parts
where it has any, and ``experiment.py``: the experiment that ``layersched bench NAME`` runs, with
``run(out_dir, *, quick=False, progress=None) -> layersched.formats.report.BenchResult``.

- `layerpipe`: LayerPipe's sub-layer cuts and I/W split, against PipeDream.
- `ooo`: out-of-order backprop (data parallel, multi-stream, pipeline; the weight-gradient stream).
- `adagrouper`: Ada-Grouper's kFkB under changing bandwidth, adaptive k, real-run switching.
- `spectrain`: SpecTrain's weight prediction in asynchronous 1F1B, emulated and with real processes.

A method may use the runtime and everything below it; nothing below imports a method.
"""
