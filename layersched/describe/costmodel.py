"""Analytic cost model: the layers of a known architecture with times and memory on a device.

Every layer is built from kernels ("ops"). An op does work in three passes (forward, backward for
inputs, backward for weights); each pass has a FLOP count and the bytes it reads and writes, and
takes ``max(flops / (peak_flops * flops_efficiency), bytes / (memory_bandwidth *
bandwidth_efficiency))`` seconds on a device (the roofline). A (sub)layer's time is the sum over its
ops. Matmuls and convolutions cost ``2 m n k`` FLOPs in each pass that has work for them (backward
for inputs and for weights each cost about the forward); normalisation, softmax, activations,
dropout, pooling and lookups are memory bound and count no FLOPs, so ``flops_forward`` matches the
usual published counts.

Memory follows Korthikanti et al. (2022), "Reducing Activation Recomputation in Large Transformer
Models": each op keeps what its backward needs (a matmul its input, a nonlinearity its input, a
softmax its output, a dropout its one-byte mask), which gives ``34 s b h + 5 a s^2 b`` bytes per
transformer block at two bytes per value. ``kept_for_weight_grad`` is the input of each
weight-bearing matmul or convolution: only the backward for weights still needs it. Normalisation
layers compute their tiny weight gradients in the same kernel as their input gradients.

``output_bytes`` of a sub-layer is what a pipeline stage that ends there sends on: inside a
residual branch that includes the residual stream, inside a DenseNet block the features kept so far.

Example
-------
>>> from layersched.describe.config import DeviceSpec, TransformerArch
>>> a100 = DeviceSpec(name="A100", peak_flops=312e12, memory_bandwidth=2.0e12, memory_bytes=80 * 2**30)
>>> gpt = TransformerArch(family="transformer", num_layers=24, hidden=2048, heads=16, seq_len=2048,
...                       vocab=50257)
>>> layers = build_layers(gpt, a100, microbatch_size=1)
>>> [layer.name for layer in layers[:2]], len(layers)
(['embedding', 'block0'], 26)
>>> round(parameter_count(layers) / 1e9, 2)
1.32
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from pydantic import ValidationError

from layersched.describe.config import (
    CNNArch,
    DeviceSpec,
    LayerSpec,
    MLPArch,
    ModelSpec,
    TransformerArch,
)

__all__ = ["build_layers", "model_layers", "parameter_count"]

ID_BYTES = 8  # token ids are int64
MASK_BYTES = 1  # dropout masks are one byte per value

Work = tuple[float, float]  # (FLOPs, bytes moved)


# -- ops -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Op:
    """One kernel: work per pass, bytes kept from forward to backward, parameters (a count)."""

    forward: Work
    backward_input: Work = (0.0, 0.0)
    backward_weight: Work = (0.0, 0.0)
    activation: int = 0
    kept: int = 0
    params: int = 0


def weighted(x: int, w: int, y: int, flops: float, d: int, params: int | None = None, bias: int = 0) -> Op:
    """A matmul or convolution with ``x`` input, ``w`` weight and ``y`` output values.

    Each pass reads two of input, weight and output (gradient) and writes the third; the input is
    kept for the backward for weights. ``params`` defaults to ``w + bias`` (0 for a tied weight).
    """
    moved = d * (x + w + y + bias)
    params = w + bias if params is None else params
    return Op((flops, moved), (flops, moved), (flops, moved), activation=d * x, kept=d * x, params=params)


def matmul(m: int, k: int, n: int, d: int, bias: bool = True, tied: bool = False) -> Op:
    """``[m, k] @ [k, n]`` (+ bias): a linear layer over ``m`` rows."""
    bias_n = n if bias else 0
    return weighted(m * k, k * n, m * n, 2.0 * m * k * n, d, params=bias_n if tied else None, bias=bias_n)


def batched_matmul(batch: int, m: int, k: int, n: int, d: int) -> Op:
    """``batch`` products ``[m, k] @ [k, n]`` of two activations (attention): no weights, both
    operands kept, and the backward for inputs computes both operand gradients."""
    flops = 2.0 * batch * m * k * n
    a, b, y = batch * m * k, batch * k * n, batch * m * n
    return Op((flops, d * (a + b + y)), (2 * flops, d * (y + 2 * a + 2 * b)), activation=d * (a + b))


def conv(
    cin: int, cout: int, k: int, size: int, b: int, d: int, stride: int = 1, groups: int = 1, bias: bool = False
) -> tuple[Op, int]:
    """A square ``k x k`` convolution with padding ``k // 2`` on ``b`` images of ``size x size``;
    also returns the output size."""
    out = (size + 2 * (k // 2) - k) // stride + 1
    weights = cout * (cin // groups) * k * k
    flops = 2.0 * weights * out * out * b
    op = weighted(b * cin * size * size, weights, b * cout * out * out, flops, d, bias=cout if bias else 0)
    return op, out


def streaming(forward: float, backward: float, activation: int = 0, params: int = 0) -> Op:
    """A memory-bound op: bytes moved by its forward and its backward for inputs, nothing else."""
    return Op((0.0, forward), (0.0, backward), activation=activation, params=params)


def pointwise(n: int, d: int) -> Op:
    """An elementwise op on ``n`` values (an activation function, a softmax) that keeps its input or
    output: reads and writes ``n``; its backward reads the gradient and the kept tensor, writes one."""
    return streaming(2 * d * n, 3 * d * n, activation=d * n)


def norm(n: int, channels: int, d: int) -> Op:
    """Layer or batch normalisation over ``n`` values with ``channels`` scales and shifts; keeps its
    input and computes the scale and shift gradients with the input gradient."""
    return streaming(d * (2 * n + 2 * channels), d * (3 * n + 4 * channels), activation=d * n, params=2 * channels)


def dropout(n: int, d: int) -> Op:
    """Dropout over ``n`` values; keeps a one-byte mask."""
    moved = 2 * d * n + MASK_BYTES * n
    return streaming(moved, moved, activation=MASK_BYTES * n)


def add(n: int, d: int) -> Op:
    """A residual addition; the backward accumulates the two gradients of the shared input."""
    return streaming(3 * d * n, 3 * d * n)


def concat(n: int, d: int) -> Op:
    """Concatenation into a new tensor of ``n`` values; the backward slices the gradient."""
    return streaming(2 * d * n, 2 * d * n)


def pool(n_in: int, n_out: int, d: int, keep: bool) -> Op:
    """Max pooling (``keep``: the backward needs the input) or average pooling."""
    kept = n_in if keep else 0
    return streaming(d * (n_in + n_out), d * (n_out + n_in + kept), activation=d * kept)


def scale(n: int, c: int, d: int) -> Op:
    """Squeeze-and-excitation rescaling of ``n`` values by ``c`` per-channel factors; keeps both."""
    return streaming(d * (2 * n + c), d * (3 * n + 2 * c), activation=d * (n + c))


def embedding(rows: int, vocab: int, h: int, d: int, ids_kept: bool = True) -> Op:
    """Looking up ``rows`` rows of a ``[vocab, h]`` table; the backward for weights scatters into
    the table. Looked-up ids are kept (int64) for it unless they are positions."""
    ids = ID_BYTES * rows if ids_kept else 0
    moved = 2 * d * rows * h + ids
    return Op((0.0, moved), backward_weight=(0.0, moved), activation=ids, kept=ids, params=vocab * h)


def cross_entropy(n: int, d: int) -> Op:
    """Softmax cross-entropy over ``n`` logits; keeps the softmax."""
    return streaming(d * n, 2 * d * n, activation=d * n)


# -- units and layers --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """A leaf of the layer list: its ops and the bytes a stage ending here sends on."""

    name: str
    ops: tuple[Op, ...]
    output_bytes: int


def roofline(work: Work, device: DeviceSpec) -> float:
    """Seconds for ``(flops, bytes)`` on ``device``: compute or memory, whichever is slower."""
    flops, moved = work
    return max(
        flops / (device.peak_flops * device.flops_efficiency),
        moved / (device.memory_bandwidth * device.bandwidth_efficiency),
    )


def unit_spec(unit: Unit, device: DeviceSpec, d: int) -> LayerSpec:
    """The `LayerSpec` of a unit on ``device``."""
    ops = unit.ops
    return LayerSpec(
        name=unit.name,
        forward=sum(roofline(op.forward, device) for op in ops),
        backward_input=sum(roofline(op.backward_input, device) for op in ops),
        backward_weight=sum(roofline(op.backward_weight, device) for op in ops),
        activation_bytes=sum(op.activation for op in ops),
        kept_for_weight_grad=sum(op.kept for op in ops),
        param_bytes=d * sum(op.params for op in ops),
        output_bytes=unit.output_bytes,
        flops_forward=sum(op.forward[0] for op in ops),
    )


def layer_spec(name: str, units: list[Unit], device: DeviceSpec, d: int) -> LayerSpec:
    """A layer of one unit (a leaf, named ``name``) or several (sub-layers ``name.unit``)."""
    specs = [unit_spec(u, device, d) for u in units]
    if len(specs) == 1:
        return specs[0].model_copy(update={"name": name})
    subs = [s.model_copy(update={"name": f"{name}.{s.name}"}) for s in specs]
    return LayerSpec(name=name, sublayers=subs, flops_forward=sum(s.flops_forward for s in subs))


Layers = list[tuple[str, list[Unit]]]


# -- transformer -----------------------------------------------------------------------------------
def transformer_layers(arch: TransformerArch, b: int, d: int) -> Layers:
    """Embedding, ``num_layers`` pre-norm blocks and the output head.

    The logits reuse the token embedding's weights: their parameters are counted once, in the
    embedding. Attention is unfused (scores, softmax, dropout, context, as in Megatron-LM without
    flash attention) and causal masking does not change its cost. ``causal=False`` is a BERT-style
    encoder: token-type embeddings and a layer norm in the embedding, and the masked-LM transform
    (dense, GELU, layer norm) before the logits.
    """
    s, h, a, vocab = arch.seq_len, arch.hidden, arch.heads, arch.vocab
    f = arch.ffn_hidden or 4 * h
    t = s * b  # tokens
    x = d * t * h  # bytes of one hidden-state tensor
    scores = b * a * s * s
    bert = not arch.causal

    emb = [embedding(t, vocab, h, d), embedding(t, s, h, d, ids_kept=False)]
    if bert:
        emb += [embedding(t, 2, h, d), norm(t * h, h, d)]
    layers: Layers = [("embedding", [Unit("embedding", (*emb, dropout(t * h, d)), x)])]

    block = [
        Unit("ln_attn", (norm(t * h, h, d),), 2 * x),
        Unit("qkv", (matmul(t, h, 3 * h, d),), 4 * x),
        Unit(
            "attention",
            (
                batched_matmul(b * a, s, h // a, s, d),  # scores Q K^T
                pointwise(scores, d),  # scaled, masked softmax; keeps its output
                dropout(scores, d),
                batched_matmul(b * a, s, s, h // a, d),
            ),
            2 * x,
        ),  # context P V
        Unit("attn_proj", (matmul(t, h, h, d),), 2 * x),
        Unit("attn_residual", (dropout(t * h, d), add(t * h, d)), x),
        Unit("ln_mlp", (norm(t * h, h, d),), 2 * x),
        Unit("ffn_up", (matmul(t, h, f, d),), d * t * f + x),
        Unit("gelu", (pointwise(t * f, d),), d * t * f + x),
        Unit("ffn_down", (matmul(t, f, h, d),), 2 * x),
        Unit("mlp_residual", (dropout(t * h, d), add(t * h, d)), x),
    ]
    layers += [(f"block{i}", block) for i in range(arch.num_layers)]

    if bert:
        head = [
            Unit("mlm_dense", (matmul(t, h, h, d),), x),
            Unit("mlm_gelu", (pointwise(t * h, d),), x),
            Unit("mlm_norm", (norm(t * h, h, d),), x),
        ]
    else:
        head = [Unit("final_norm", (norm(t * h, h, d),), x)]
    head += [
        Unit("logits", (matmul(t, h, vocab, d, bias=bert, tied=True),), d * t * vocab),
        Unit("loss", (cross_entropy(t * vocab, d),), 0),
    ]
    layers.append(("head", head))
    return layers


# -- convolutional networks --------------------------------------------------------------------------
# ReLU, ReLU6, hard-swish and hard-sigmoid cost the same here: one memory-bound pass each way.
def conv_unit(
    name: str,
    cin: int,
    cout: int,
    k: int,
    size: int,
    b: int,
    d: int,
    stride: int = 1,
    groups: int = 1,
    act: bool = True,
    carry: int = 0,
) -> tuple[Unit, int]:
    """Convolution, batch norm and (``act``) an activation; ``carry`` extra output bytes (a residual
    input) travel on beside the output. Returns the unit and the output size."""
    op, out = conv(cin, cout, k, size, b, d, stride, groups)
    n = b * cout * out * out
    ops = (op, norm(n, cout, d), pointwise(n, d)) if act else (op, norm(n, cout, d))
    return Unit(name, ops, d * n + carry), out


def pooled_stem(size: int, b: int, d: int) -> tuple[Unit, int]:
    """ResNet's and DenseNet's stem: 7x7 stride-2 convolution to 64 channels, 3x3 stride-2 max pool."""
    conv7, size = conv_unit("stem", 3, 64, 7, size, b, d, stride=2)
    out = (size - 1) // 2 + 1
    ops = (*conv7.ops, pool(b * 64 * size * size, b * 64 * out * out, d, keep=True))
    return Unit("stem", ops, d * b * 64 * out * out), out


def head_unit(
    c: int,
    size: int,
    classes: int,
    b: int,
    d: int,
    hidden: tuple[int, ...] = (),
    drop: bool = False,
    extra: tuple[Op, ...] = (),
) -> Unit:
    """``extra`` ops, global average pooling, linear layers through ``hidden`` widths with
    activations, dropout when ``drop``, and the classifier with its loss."""
    ops = [*extra, pool(b * c * size * size, b * c, d, keep=False)]
    for width in hidden:
        ops += [matmul(b, c, width, d), pointwise(b * width, d)]
        c = width
    if drop:
        ops.append(dropout(b * c, d))
    ops += [matmul(b, c, classes, d), cross_entropy(b * classes, d)]
    return Unit("head", tuple(ops), 0)


def resnet_layers(arch: CNNArch, depths: tuple[int, ...], b: int, d: int) -> Layers:
    """ResNet v1.5 (stride in the 3x3 convolution): stem, one layer per bottleneck block, head.
    A stage ending inside a block also sends on the block's input for the residual addition."""
    stem, size = pooled_stem(arch.image_size, b, d)
    layers: Layers = [("stem", [stem])]
    c = 64
    for stage, depth in enumerate(depths):
        width = 64 * 2**stage
        for i in range(depth):
            stride = 2 if stage and not i else 1
            skip = d * b * c * size * size
            u1, _ = conv_unit("conv1", c, width, 1, size, b, d, carry=skip)
            u2, out = conv_unit("conv2", width, width, 3, size, b, d, stride=stride, carry=skip)
            u3, _ = conv_unit("conv3", width, 4 * width, 1, out, b, d, act=False, carry=skip)
            units = [u1, u2, u3]
            n = b * 4 * width * out * out
            if stride != 1 or c != 4 * width:
                ds, _ = conv_unit("downsample", c, 4 * width, 1, size, b, d, stride=stride, act=False, carry=d * n)
                units.append(ds)
            units.append(Unit("add_relu", (add(n, d), pointwise(n, d)), d * n))
            layers.append((f"layer{stage + 1}.{i}", units))
            c, size = 4 * width, out
    layers.append(("head", [head_unit(c, size, arch.num_classes, b, d)]))
    return layers


VGG16 = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def vgg16_layers(arch: CNNArch, b: int, d: int) -> Layers:
    """VGG-16: one layer per convolution (with its ReLU and the max pooling after it), three linear
    layers (ReLU and dropout after the first two)."""
    layers: Layers = []
    c, size = 3, arch.image_size
    for item in VGG16:
        if item == "M":
            name, (unit,) = layers[-1]
            out = size // 2
            ops = (*unit.ops, pool(b * c * size * size, b * c * out * out, d, keep=True))
            layers[-1] = (name, [Unit(name, ops, d * b * c * out * out)])
            size = out
            continue
        op, size = conv(c, item, 3, size, b, d, bias=True)
        n = b * item * size * size
        layers.append((f"conv{len(layers) + 1}", [Unit("conv", (op, pointwise(n, d)), d * n)]))
        c = item
    # adaptive average pooling to 7 x 7 is the identity at 224 x 224
    resize = (pool(b * c * size * size, b * c * 49, d, keep=False),) if size != 7 else ()
    c *= 49
    for i, width in enumerate((4096, 4096), start=6):
        ops = (*resize, matmul(b, c, width, d), pointwise(b * width, d), dropout(b * width, d))
        layers.append((f"fc{i}", [Unit("fc", ops, d * b * width)]))
        c, resize = width, ()
    ops = (matmul(b, c, arch.num_classes, d), cross_entropy(b * arch.num_classes, d))
    layers.append(("fc8", [Unit("fc", ops, 0)]))
    return layers


def make_divisible(v: float, divisor: int = 8) -> int:
    """Round a channel count as the MobileNet reference code does."""
    new = max(divisor, int(v + divisor / 2) // divisor * divisor)
    return new + divisor if new < 0.9 * v else new


def inverted_residual(
    cin: int, k: int, expanded: int, cout: int, se: bool, stride: int, size: int, b: int, d: int
) -> tuple[list[Unit], int]:
    """A MobileNet block: 1x1 expansion, depthwise ``k x k``, optional squeeze-and-excitation, 1x1
    projection, and the residual addition when shapes allow it."""
    residual = stride == 1 and cin == cout
    skip = d * b * cin * size * size if residual else 0
    units = []
    if expanded != cin:
        units.append(conv_unit("expand", cin, expanded, 1, size, b, d, carry=skip)[0])
    unit, out = conv_unit("depthwise", expanded, expanded, k, size, b, d, stride, groups=expanded, carry=skip)
    units.append(unit)
    n = b * expanded * out * out
    if se:
        sq = make_divisible(expanded // 4)
        ops = (
            pool(n, b * expanded, d, keep=False),
            matmul(b, expanded, sq, d),
            pointwise(b * sq, d),
            matmul(b, sq, expanded, d),
            pointwise(b * expanded, d),
            scale(n, b * expanded, d),
        )
        units.append(Unit("se", ops, d * n + skip))
    unit, _ = conv_unit("project", expanded, cout, 1, out, b, d, act=False)
    if residual:
        n_out = b * cout * out * out
        unit = Unit("project", (*unit.ops, add(n_out, d)), d * n_out)
    units.append(unit)
    return units, out


# input channels, kernel, expanded channels, output channels, squeeze-and-excitation, stride
MOBILENETV3_LARGE = (
    (16, 3, 16, 16, False, 1),
    (16, 3, 64, 24, False, 2),
    (24, 3, 72, 24, False, 1),
    (24, 5, 72, 40, True, 2),
    (40, 5, 120, 40, True, 1),
    (40, 5, 120, 40, True, 1),
    (40, 3, 240, 80, False, 2),
    (80, 3, 200, 80, False, 1),
    (80, 3, 184, 80, False, 1),
    (80, 3, 184, 80, False, 1),
    (80, 3, 480, 112, True, 1),
    (112, 3, 672, 112, True, 1),
    (112, 5, 672, 160, True, 2),
    (160, 5, 960, 160, True, 1),
    (160, 5, 960, 160, True, 1),
)
# expansion t, output channels c, repeats n, first stride s
MOBILENETV2 = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)


def mobilenetv2_blocks() -> list[tuple[int, int, int, int, bool, int]]:
    """MobileNetV2's blocks in the format of `MOBILENETV3_LARGE`."""
    blocks, c = [], 32
    for t, cout, n, s in MOBILENETV2:
        for i in range(n):
            blocks.append((c, 3, c * t, cout, False, s if not i else 1))
            c = cout
    return blocks


def mobilenet_layers(arch: CNNArch, b: int, d: int) -> Layers:
    """MobileNetV2 or MobileNetV3-large: stem, one layer per inverted-residual block, and the last
    1x1 convolution with the classifier."""
    v3 = arch.family == "mobilenetv3"
    stem, size = conv_unit("stem", 3, 16 if v3 else 32, 3, arch.image_size, b, d, stride=2)
    layers: Layers = [("stem", [stem])]
    blocks = MOBILENETV3_LARGE if v3 else mobilenetv2_blocks()
    for i, block in enumerate(blocks):
        units, size = inverted_residual(*block, size, b, d)
        layers.append((f"block{i + 1}", units))
    c_last, hidden = (960, (1280,)) if v3 else (1280, ())
    last, _ = conv_unit("last", blocks[-1][3], c_last, 1, size, b, d)
    layers.append(("head", [last, head_unit(c_last, size, arch.num_classes, b, d, hidden, drop=True)]))
    return layers


def preactivated(cin: int, cout: int, k: int, size: int, b: int, d: int) -> tuple[Op, ...]:
    """DenseNet's batch norm, ReLU and convolution (stride 1)."""
    n = b * cin * size * size
    return norm(n, cin, d), pointwise(n, d), conv(cin, cout, k, size, b, d)[0]


def densenet121_layers(arch: CNNArch, b: int, d: int) -> Layers:
    """DenseNet-121 (growth 32, bottleneck 128): stem, one layer per dense layer and transition, head.
    A dense layer keeps its concatenated input; a stage ending inside a block sends on all features."""
    growth, bottleneck = 32, 128
    stem, size = pooled_stem(arch.image_size, b, d)
    layers: Layers = [("stem", [stem])]
    c = 64
    for block, depth in enumerate((6, 12, 24, 16), start=1):
        hw = size * size
        for i in range(depth):
            u1 = Unit("bottleneck", preactivated(c, bottleneck, 1, size, b, d), d * b * (c + bottleneck) * hw)
            ops = (*preactivated(bottleneck, growth, 3, size, b, d), concat(b * (c + growth) * hw, d))
            layers.append((f"dense{block}.{i}", [u1, Unit("conv", ops, d * b * (c + growth) * hw)]))
            c += growth
        if block < 4:
            out = size // 2
            n_out = b * c // 2 * out * out
            ops = (*preactivated(c, c // 2, 1, size, b, d), pool(b * c // 2 * hw, n_out, d, keep=False))
            layers.append((f"transition{block}", [Unit("transition", ops, d * n_out)]))
            c, size = c // 2, out
    n = b * c * size * size
    head = head_unit(c, size, arch.num_classes, b, d, extra=(norm(n, c, d), pointwise(n, d)))
    layers.append(("head", [head]))
    return layers


def cnn_layers(arch: CNNArch, b: int, d: int) -> Layers:
    """Dispatch on the CNN family."""
    if arch.family in ("resnet50", "resnet101"):
        return resnet_layers(arch, (3, 4, 6, 3) if arch.family == "resnet50" else (3, 4, 23, 3), b, d)
    if arch.family == "vgg16":
        return vgg16_layers(arch, b, d)
    if arch.family == "densenet121":
        return densenet121_layers(arch, b, d)
    return mobilenet_layers(arch, b, d)


# -- MLP -------------------------------------------------------------------------------------------
def mlp_layers(arch: MLPArch, b: int, d: int) -> Layers:
    """One layer per width after the first: a matmul and a ReLU (the last layer has no ReLU)."""
    layers: Layers = []
    pairs = list(pairwise(arch.widths))
    for i, (cin, cout) in enumerate(pairs):
        units = [Unit("matmul", (matmul(b, cin, cout, d),), d * b * cout)]
        if i < len(pairs) - 1:
            units.append(Unit("relu", (pointwise(b * cout, d),), d * b * cout))
        layers.append((f"linear{i}", units))
    return layers


# -- public ----------------------------------------------------------------------------------------
def build_layers(
    arch: TransformerArch | CNNArch | MLPArch, device: DeviceSpec, microbatch_size: int, dtype_bytes: int = 2
) -> list[LayerSpec]:
    """The layers of ``arch`` for one micro-batch of ``microbatch_size`` samples on ``device``.

    Parameters
    ----------
    arch
        A transformer, CNN or MLP description.
    device
        Peak rates and efficiencies used by the roofline.
    microbatch_size
        Samples (sequences, images, vectors) per micro-batch.
    dtype_bytes
        Bytes per value of activations, weights and gradients.

    Returns
    -------
    list[LayerSpec]
        In execution order; times in seconds, memory in bytes. Transformer blocks, ResNet
        bottlenecks, MobileNet and DenseNet blocks, MLP layers and the heads have ``sublayers``.

    Example
    -------
    >>> from layersched.describe.config import CNNArch, DeviceSpec
    >>> v100 = DeviceSpec(name="V100", peak_flops=125e12, memory_bandwidth=900e9, memory_bytes=32 * 2**30)
    >>> layers = build_layers(CNNArch(family="resnet50"), v100, microbatch_size=1)
    >>> len(layers), parameter_count(layers)
    (18, 25557032)
    """
    if microbatch_size < 1:
        raise ValueError(f"microbatch_size must be at least 1, got {microbatch_size}")
    b, d = microbatch_size, dtype_bytes
    if isinstance(arch, TransformerArch):
        if arch.hidden % arch.heads:
            raise ValueError(f"hidden ({arch.hidden}) must be a multiple of heads ({arch.heads})")
        layers = transformer_layers(arch, b, d)
    elif isinstance(arch, CNNArch):
        layers = cnn_layers(arch, b, d)
    elif isinstance(arch, MLPArch):
        layers = mlp_layers(arch, b, d)
    else:
        raise TypeError(f"unknown architecture {type(arch).__name__}")
    specs = []
    for name, units in layers:
        try:
            specs.append(layer_spec(name, units, device, d))
        except ValidationError as exc:  # a size out of range: one line, not pydantic's report
            err = exc.errors()[0]
            where = ".".join(str(x) for x in err["loc"])
            value = err.get("input")
            shown = f"{value:.4g}" if isinstance(value, int | float) else repr(value)
            raise ValueError(
                f"the cost model gives layer {name!r} {where} = {shown}: {err['msg'].lower()}; the architecture's "
                "sizes (hidden, seq_len, microbatch_size, ...) are too large for it"
            ) from None
    return specs


def model_layers(model: ModelSpec, device: DeviceSpec, microbatch_size: int) -> list[LayerSpec]:
    """``model.layers`` when given, else the layers the cost model builds from its architecture.

    Example
    -------
    >>> from layersched.describe.config import DeviceSpec, ModelSpec
    >>> gpu = DeviceSpec(name="gpu", peak_flops=1e12, memory_bandwidth=1e11, memory_bytes=2**30)
    >>> model = ModelSpec(name="mlp", architecture={"family": "mlp", "widths": [16, 32, 4]})
    >>> [layer.name for layer in model_layers(model, gpu, microbatch_size=8)]
    ['linear0', 'linear1']
    """
    if model.layers is not None:
        return list(model.layers)
    return build_layers(model.architecture, device, microbatch_size, model.dtype_bytes)


def parameter_count(layers: list[LayerSpec], dtype_bytes: int = 2) -> int:
    """The number of parameters in ``layers``: their parameter bytes over ``dtype_bytes``.

    Example
    -------
    >>> parameter_count([LayerSpec(name="fc", param_bytes=2000)])
    1000
    """
    return int(sum(layer.total("param_bytes") for layer in layers)) // dtype_bytes
