"""Experiments run by ``layersched bench NAME``: one module per experiment, each with
``run(out_dir, *, quick=False, progress=None) -> layersched.formats.report.BenchResult`` that writes its plot
under ``out_dir`` and returns its rows (the CSV is written by the caller)."""
