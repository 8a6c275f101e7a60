"""Ada-Grouper: kFkB pipelines (k micro-batches grouped) that trade memory for tolerance to a slow or
varying network, and an adaptive choice of k.

- `network`: bandwidth traces and transfers over them.
- `adagrouper`: kFkB memory and iteration time, and the adaptive controller.
- `switching` (*torch*): switching k in a real run.
- `experiment`: ``layersched bench adagrouper``.
"""
