"""The analytic cost model against published parameter and FLOP counts and its own closed forms."""

from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layersched.describe import costmodel
from layersched.describe.config import CNNArch, DeviceSpec, LayerSpec, MLPArch, ModelSpec, TransformerArch
from layersched.describe.costmodel import build_layers, model_layers, parameter_count

GiB = 2**30
A100 = DeviceSpec(name="A100", peak_flops=312e12, memory_bandwidth=2.0e12, memory_bytes=80 * GiB)
V100 = DeviceSpec(name="V100", peak_flops=125e12, memory_bandwidth=900e9, memory_bytes=32 * GiB)


def gpt(
    num_layers: int = 24, hidden: int = 2048, heads: int = 16, seq_len: int = 2048, vocab: int = 50257, **kw
) -> TransformerArch:
    return TransformerArch(
        family="transformer", num_layers=num_layers, hidden=hidden, heads=heads, seq_len=seq_len, vocab=vocab, **kw
    )


def total(layers: list[LayerSpec], field: str) -> float:
    return sum(layer.total(field) for layer in layers)


def sub(layer: LayerSpec, short: str) -> LayerSpec:
    """The sub-layer of ``layer`` named ``layer.name + '.' + short``."""
    (found,) = [s for s in layer.sublayers if s.name == f"{layer.name}.{short}"]
    return found


def compute_time(flops: float, device: DeviceSpec) -> float:
    return flops / (device.peak_flops * device.flops_efficiency)


def memory_time(nbytes: float, device: DeviceSpec) -> float:
    return nbytes / (device.memory_bandwidth * device.bandwidth_efficiency)


# -- published counts --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("family", "published", "tolerance", "torchvision"),
    [
        ("resnet50", 25.6e6, 0.02, 25_557_032),
        ("resnet101", 44.5e6, 0.03, 44_549_160),
        ("vgg16", 138.4e6, 0.03, 138_357_544),
        ("mobilenetv2", 3.5e6, 0.03, 3_504_872),
        ("mobilenetv3", 5.5e6, 0.03, 5_483_032),
        ("densenet121", 8.0e6, 0.03, 7_978_856),
    ],
)
def test_cnn_parameter_counts(family, published, tolerance, torchvision):
    layers = build_layers(CNNArch(family=family), V100, microbatch_size=1)
    count = parameter_count(layers)
    assert count == pytest.approx(published, rel=tolerance)
    assert count == torchvision  # the reference implementation's exact count


@pytest.mark.parametrize(
    ("family", "gflops", "tolerance"),
    [
        ("resnet50", 8.2, 0.02),  # 4.1 GMAC
        ("vgg16", 31.0, 0.02),  # 15.5 GMAC
        ("mobilenetv2", 0.6, 0.10),  # 0.3 GMAC
        ("resnet101", 15.6, 0.02),  # torchvision: 7.80 GMAC
        ("mobilenetv3", 0.44, 0.03),  # torchvision: 0.22 GMAC
        ("densenet121", 5.66, 0.02),  # torchvision: 2.83 GMAC
    ],
)
def test_cnn_forward_flops(family, gflops, tolerance):
    layers = build_layers(CNNArch(family=family), V100, microbatch_size=1)
    assert total(layers, "flops_forward") == pytest.approx(gflops * 1e9, rel=tolerance)


def test_cnn_flops_grow_with_pixels_and_batch():
    small = total(build_layers(CNNArch(family="resnet50"), V100, 1), "flops_forward")
    large = total(build_layers(CNNArch(family="resnet50", image_size=448), V100, 1), "flops_forward")
    batch = total(build_layers(CNNArch(family="resnet50"), V100, 8), "flops_forward")
    # convolutions scale with the pixels; only the classifier (4 MFLOP of 8 GFLOP) does not
    assert large == pytest.approx(4 * small, rel=2e-3)
    assert batch == pytest.approx(8 * small, rel=1e-12)


@pytest.mark.parametrize(
    ("arch", "low", "high"),
    [
        (gpt(), 1.3e9 * 0.95, 1.3e9 * 1.05),  # GPT-3 XL
        (gpt(num_layers=32, hidden=2560, heads=32), 2.7e9 * 0.95, 2.7e9 * 1.05),
        (gpt(hidden=1024, heads=16, seq_len=512, vocab=30522, causal=False), 335e6, 340e6),  # BERT-large
    ],
)
def test_transformer_parameter_counts(arch, low, high):
    assert low <= parameter_count(build_layers(arch, A100, microbatch_size=1)) <= high


def test_transformer_parameter_count_closed_form():
    arch = gpt()
    h, vocab, s = arch.hidden, arch.vocab, arch.seq_len
    # blocks 12h^2 + 13h, token and position embeddings (tied to the output), final layer norm
    expected = arch.num_layers * (12 * h * h + 13 * h) + vocab * h + s * h + 2 * h
    assert parameter_count(build_layers(arch, A100, 1)) == expected


def test_transformer_forward_flops_match_megatron():
    """Narayanan et al. (2021): a forward costs 24 B s l h^2 (1 + s / 6h) + 2 B s h V FLOPs (their
    96 B s l h^2 (1 + s / 6h + V / 16 l h) is forward, backward and recomputation)."""
    arch = gpt()
    b, s, h, n, vocab = 2, arch.seq_len, arch.hidden, arch.num_layers, arch.vocab
    layers = build_layers(arch, A100, microbatch_size=b)
    expected = 24 * b * s * n * h * h * (1 + s / (6 * h)) + 2 * b * s * h * vocab
    assert total(layers, "flops_forward") == pytest.approx(expected, rel=1e-12)
    assert layers[1].flops_forward == pytest.approx(24 * b * s * h * h + 4 * b * s * s * h, rel=1e-12)


# -- memory --------------------------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(heads=st.integers(1, 16), head_dim=st.integers(1, 64), seq_len=st.integers(1, 512), b=st.integers(1, 8))
def test_block_activation_bytes_are_korthikanti(heads, head_dim, seq_len, b):
    h, s, a = heads * head_dim, seq_len, heads
    arch = gpt(num_layers=2, hidden=h, heads=a, seq_len=s, vocab=100)
    block = build_layers(arch, A100, microbatch_size=b)[1]
    assert block.total("activation_bytes") == 34 * s * b * h + 5 * a * s * s * b
    # inputs of the four weight-bearing matmuls: 2sbh (qkv) + 2sbh (proj) + 2sbh (up) + 8sbh (down)
    assert block.total("kept_for_weight_grad") == 14 * s * b * h
    assert block.total("output_bytes") == 2 * s * b * h
    assert block.total("param_bytes") == 2 * (12 * h * h + 13 * h)


def test_only_weight_gradients_keep_activations():
    for layer in build_layers(gpt(num_layers=2), A100, 1):
        for leaf in layer.leaves():
            if leaf.kept_for_weight_grad:
                assert leaf.backward_weight > 0, leaf.name
            if leaf.backward_weight == 0:
                assert leaf.kept_for_weight_grad == 0, leaf.name


def test_sublayer_outputs_carry_the_residual_stream():
    arch = gpt(num_layers=1)
    t, h, f = arch.seq_len, arch.hidden, 4 * arch.hidden
    block = build_layers(arch, A100, 1)[1]
    assert sub(block, "ffn_up").output_bytes == 2 * t * (f + h)
    assert sub(block, "qkv").output_bytes == 2 * t * 4 * h
    assert sub(block, "mlp_residual").output_bytes == 2 * t * h


# -- time ----------------------------------------------------------------------------------------------
MATMULS = {"qkv": (1, 3), "attn_proj": (1, 1), "ffn_up": (1, 4), "ffn_down": (4, 1)}


@pytest.mark.parametrize("name", sorted(MATMULS))
def test_matmuls_are_compute_bound_on_a100(name):
    arch = gpt()
    t, h = arch.seq_len, arch.hidden
    leaf = sub(build_layers(arch, A100, 1)[1], name)
    k, n = (x * h for x in MATMULS[name])
    flops = 2 * t * k * n
    assert leaf.flops_forward == flops
    for value in (leaf.forward, leaf.backward_input, leaf.backward_weight):
        assert value == pytest.approx(compute_time(flops, A100), rel=1e-12)
    assert memory_time(2 * (t * k + k * n + t * n + n), A100) < leaf.forward


def test_elementwise_sublayers_are_memory_bound_on_a100():
    arch = gpt()
    d, t, h, f = 2, arch.seq_len, arch.hidden, 4 * arch.hidden
    block = build_layers(arch, A100, 1)[1]
    expected = {
        "ln_attn": d * (2 * t * h + 2 * h),  # read x and the scale and shift, write y
        "gelu": d * 2 * t * f,
        "mlp_residual": (2 * d + 1) * t * h + 3 * d * t * h,  # dropout with its mask, then the addition
    }
    for name, nbytes in expected.items():
        leaf = sub(block, name)
        assert leaf.flops_forward == 0
        assert leaf.forward == pytest.approx(memory_time(nbytes, A100), rel=1e-12), name
        assert leaf.backward_weight == 0


def test_compute_bound_time_scales_linearly_with_microbatch():
    one, four = (build_layers(gpt(num_layers=1), A100, b)[1] for b in (1, 4))
    assert sub(four, "ffn_up").forward == pytest.approx(4 * sub(one, "ffn_up").forward, rel=1e-12)
    for field in ("forward", "backward_input", "backward_weight"):
        # only the layer norms' parameter reads do not scale
        assert four.total(field) == pytest.approx(4 * one.total(field), rel=1e-4)


def test_memory_bound_matmul_time_is_sublinear():
    """Few rows: reading the weight dominates, so doubling the batch costs less than double."""
    arch = MLPArch(family="mlp", widths=[4096, 4096])
    one, two = (build_layers(arch, A100, b)[0] for b in (1, 2))
    assert one.forward == pytest.approx(memory_time(2 * (4096 + 4096 * 4096 + 2 * 4096), A100))
    assert one.forward < two.forward < 1.01 * one.forward


def test_attention_backward_is_all_input_gradient():
    block = build_layers(gpt(num_layers=1), A100, 1)[1]
    attention = sub(block, "attention")
    assert attention.backward_weight == 0 and attention.param_bytes == 0
    assert attention.backward_input > attention.forward


def test_faster_device_is_faster_for_every_leaf():
    slow, fast = (build_layers(gpt(num_layers=1), dev, 1) for dev in (V100, A100))
    for s_layer, f_layer in zip(slow, fast, strict=True):
        for s_leaf, f_leaf in zip(s_layer.leaves(), f_layer.leaves(), strict=True):
            assert f_leaf.forward < s_leaf.forward, s_leaf.name


# -- structure -----------------------------------------------------------------------------------------
ARCHS = [
    gpt(num_layers=2),
    gpt(num_layers=2, causal=False),
    MLPArch(family="mlp", widths=[8, 16, 4]),
    *(CNNArch(family=f) for f in ("resnet50", "vgg16", "mobilenetv2", "mobilenetv3", "densenet121")),
]
FIELDS = (
    "forward",
    "backward_input",
    "backward_weight",
    "activation_bytes",
    "kept_for_weight_grad",
    "param_bytes",
    "flops_forward",
)


ARCH_IDS = ["gpt", "bert", "mlp", "resnet50", "vgg16", "mobilenetv2", "mobilenetv3", "densenet121"]


@pytest.mark.parametrize("arch", ARCHS, ids=ARCH_IDS)
def test_sublayer_sums_equal_layer_totals(arch):
    layers = build_layers(arch, V100, microbatch_size=2)
    names = [layer.name for layer in layers]
    assert len(set(names)) == len(names)
    for layer in layers:
        leaves = layer.leaves()
        for field in FIELDS:
            assert layer.total(field) == pytest.approx(sum(getattr(leaf, field) for leaf in leaves))
        assert layer.flops_forward == pytest.approx(layer.total("flops_forward"))
        assert layer.total("output_bytes") == leaves[-1].output_bytes
        assert all(leaf.forward > 0 for leaf in leaves), layer.name
    if not isinstance(arch, MLPArch):
        assert layers[-1].total("output_bytes") == 0  # the loss sends nothing on


def test_transformer_layout():
    layers = build_layers(gpt(num_layers=3), A100, 1)
    assert [layer.name for layer in layers] == ["embedding", "block0", "block1", "block2", "head"]
    short = [s.name.split(".", 1)[1] for s in layers[1].sublayers]
    for name in ("qkv", "attention", "attn_proj", "ln_attn", "ffn_up", "gelu", "ffn_down"):
        assert name in short
    # a partitioner can cut between a matmul and its nonlinearity
    assert short.index("gelu") == short.index("ffn_up") + 1
    # the embedding's weight gradient needs the token ids (int64), which have no gradient themselves
    assert layers[0].kept_for_weight_grad == 8 * 2048 and layers[0].backward_weight > 0


def test_mlp_layers():
    arch = MLPArch(family="mlp", widths=[784, 512, 256, 10])
    layers = build_layers(arch, A100, microbatch_size=32)
    assert [layer.name for layer in layers] == ["linear0", "linear1", "linear2"]
    assert [s.name for s in layers[0].sublayers] == ["linear0.matmul", "linear0.relu"]
    assert parameter_count(layers) == 784 * 512 + 512 + 512 * 256 + 256 + 256 * 10 + 10
    assert total(layers, "flops_forward") == 2 * 32 * (784 * 512 + 512 * 256 + 256 * 10)
    assert layers[-1].total("output_bytes") == 2 * 32 * 10


def test_model_layers_uses_given_layers_or_the_architecture():
    given_layers = [LayerSpec(name="a", forward=1.0), LayerSpec(name="b", forward=2.0)]
    assert model_layers(ModelSpec(name="m", layers=given_layers), A100, 4) == given_layers
    arch = {"family": "mlp", "widths": [64, 64]}
    half = model_layers(ModelSpec(name="m", architecture=arch), A100, 4)
    full = model_layers(ModelSpec(name="m", architecture=arch, dtype_bytes=4), A100, 4)
    assert full[0].param_bytes == 2 * half[0].param_bytes == 4 * (64 * 64 + 64)
    assert parameter_count(full, dtype_bytes=4) == parameter_count(half) == 64 * 64 + 64


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="multiple of heads"):
        build_layers(gpt(hidden=100, heads=3), A100, 1)
    with pytest.raises(ValueError, match="microbatch_size"):
        build_layers(gpt(), A100, 0)


def test_docstring_examples():
    assert doctest.testmod(costmodel).failed == 0
