"""Every bundled problem and cluster file loads, builds and says what its sources say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from layersched.describe.config import ClusterSpec, load_problem, load_spec
from layersched.describe.costmodel import model_layers, parameter_count
from tests.paths import PROBLEMS

CLUSTERS = PROBLEMS / "clusters"
SUITES = PROBLEMS / "suites"
ALL_FILES = sorted(p for p in PROBLEMS.rglob("*") if p.suffix in (".yaml", ".yml", ".json"))
CLUSTER_FILES = [p for p in ALL_FILES if CLUSTERS in p.parents]
SUITE_FILES = [p for p in ALL_FILES if SUITES in p.parents]
PROBLEM_FILES = [p for p in ALL_FILES if CLUSTERS not in p.parents and SUITES not in p.parents]
GiB = 2**30


def rel(path: Path) -> str:
    return str(path.relative_to(PROBLEMS))


def test_the_bundled_files_are_there():
    names = {rel(p) for p in ALL_FILES}
    expected = {
        "gpt3-1.3b-a100.yaml",
        "gpt3-2.7b-a100.yaml",
        "bert-large-v100.yaml",
        "resnet50-v100.yaml",
        "mobilenetv2-v100.yaml",
        "vgg16-v100.yaml",
        "gpt3-1.3b-h100.yaml",
        "mlp-tiny.yaml",
        "zb-1.5b.yaml",
        "zb-6.2b.yaml",
        "zb-14.6b.yaml",
        "clusters/v100-8.yaml",
        "clusters/a100-8.yaml",
        "clusters/h100-8.yaml",
        "clusters/a100-2x8.yaml",
    }
    assert expected <= names


def walk(data):
    if isinstance(data, dict):
        for value in data.values():
            yield from walk(value)
    elif isinstance(data, list):
        for value in data:
            yield from walk(value)
    else:
        yield data


@pytest.mark.parametrize("path", ALL_FILES, ids=rel)
def test_numbers_are_numbers(path):
    """YAML 1.1 reads ``312.0e12`` (no exponent sign) as a string; pydantic would quietly coerce it."""
    for value in walk(yaml.safe_load(path.read_text())):
        if isinstance(value, str):
            with pytest.raises(ValueError):
                float(value)


# -- clusters ------------------------------------------------------------------------------------------
PUBLISHED = {  # peak dense fp16 FLOP/s, HBM bytes/s, memory, NVLink bytes/s per direction
    "v100-8": (125e12, 900e9, 32 * GiB, 150e9),
    "a100-8": (312e12, 2.0e12, 80 * GiB, 300e9),
    "h100-8": (989e12, 3.35e12, 80 * GiB, 450e9),
    "v100-4x12-10gbps": (125e12, 900e9, 16 * GiB, 150e9),
    "v100-4x12-25gbps": (125e12, 900e9, 16 * GiB, 150e9),
    "a100-2x8": (312e12, 2.0e12, 80 * GiB, 300e9),
}


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=rel)
def test_cluster_files(path):
    cluster = load_spec(path, ClusterSpec)
    assert cluster.name == path.stem
    device = cluster.device
    figures = (device.peak_flops, device.memory_bandwidth, device.memory_bytes, cluster.intra_node.bandwidth)
    assert figures == PUBLISHED[path.stem]
    assert 0 < cluster.intra_node.latency < 1e-4
    if cluster.nodes > 1:
        across = cluster.link(0, cluster.devices_per_node)
        assert across == cluster.inter_node
        assert across.bandwidth < cluster.intra_node.bandwidth and across.latency > cluster.intra_node.latency
    assert cluster.link(0, 1) == cluster.intra_node


def test_multi_node_cluster():
    cluster = load_spec(CLUSTERS / "a100-2x8.yaml", ClusterSpec)
    assert cluster.num_devices == 16
    assert cluster.inter_node.bandwidth == 25e9 and cluster.inter_node.latency == 1e-5


# -- problems ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("path", PROBLEM_FILES, ids=rel)
def test_problem_files_load(path):
    spec = load_problem(path)
    assert spec.name == path.stem
    assert (spec.pipeline is None) == (spec.model is not None)
    if spec.pipeline is not None:
        assert spec.pipeline.microbatches >= spec.pipeline.stages  # 1F1B reaches its steady state
        return
    raw = yaml.safe_load(path.read_text())
    assert isinstance(raw["cluster"], str) and (path.parent / raw["cluster"]).is_file()
    training, device = spec.training, spec.cluster.device
    assert training.pipeline * training.stages_per_rank * training.data_parallel <= spec.cluster.num_devices
    layers = model_layers(spec.model, device, training.microbatch_size)
    assert len(layers) >= training.pipeline * training.stages_per_rank
    assert all(layer.total("forward") > 0 for layer in layers)
    # a balanced split fits: weights, gradients and optimizer state per stage, plus the activations
    # a 1F1B first stage holds (pipeline micro-batches of 1/pipeline of the model)
    params = parameter_count(layers, spec.model.dtype_bytes)
    state = params * (2 * spec.model.dtype_bytes + training.optimizer_bytes_per_param) / training.pipeline
    activations = sum(layer.total("activation_bytes") for layer in layers)
    assert state + activations < device.memory_bytes


STAGE_FILES = [p for p in PROBLEM_FILES if yaml.safe_load(p.read_text()).get("pipeline") is not None]


@pytest.mark.parametrize("path", STAGE_FILES, ids=rel)
def test_stage_level_problems_solve_with_their_own_schedule(path):
    """`layersched solve FILE` with no option runs the file's own schedule: it must keep the file's
    memory limit. (The interleaved 1.5B row once named Megatron's interleaved 1F1B, whose warm-up needs
    more than 1F1B's memory with three stages per rank, so its plain `solve` stopped with an error.)"""
    from layersched.describe.stages import pipeline_from_spec
    from layersched.schedule.solve import solve_pipeline

    pipe = pipeline_from_spec(load_problem(path))
    sol = solve_pipeline(pipe)  # validated, the memory limit included
    assert sol.method == pipe.default_schedule
    if pipe.capacity is not None:
        assert max(sol.metrics["peak_memory"]) <= pipe.capacity


MODEL_SIZES = {  # parameters of the bundled models, from their papers
    "gpt3-1.3b-a100": 1.3e9,
    "gpt3-1.3b-h100": 1.3e9,
    "gpt3-2.7b-a100": 2.7e9,
    "gpt3-2.7b-a100-2x8": 2.7e9,
    "bert-large-v100": 340e6,
    "resnet50-v100": 25.6e6,
    "vgg16-v100": 138e6,
    "mobilenetv2-v100": 3.5e6,
}


@pytest.mark.parametrize("name", sorted(MODEL_SIZES))
def test_model_sizes(name):
    spec = load_problem(PROBLEMS / f"{name}.yaml")
    layers = model_layers(spec.model, spec.cluster.device, spec.training.microbatch_size)
    assert parameter_count(layers) == pytest.approx(MODEL_SIZES[name], rel=0.05)


def test_tiny_mlp_is_hand_written():
    spec = load_problem(PROBLEMS / "mlp-tiny.yaml")
    assert spec.model.architecture is None and len(spec.model.layers) == 4
    assert (spec.training.pipeline, spec.training.microbatches) == (2, 4)


# -- Zero Bubble stage-level settings ------------------------------------------------------------------
# Qi et al. (ICLR 2024), table of profiled times: stages, micro-batches, F, B, W, communication, h, a
ZERO_BUBBLE = {
    "zb-1.5b": (8, 24, 18522, 18086, 9337, 601, 2304, 24),
    "zb-6.2b": (8, 24, 29718, 29444, 19927, 527, 4096, 32),
    "zb-14.6b": (16, 48, 11347, 11248, 8132, 377, 5120, 40),
}


@pytest.mark.parametrize("name", sorted(ZERO_BUBBLE))
def test_zero_bubble_settings(name):
    p, m, f, b, w, comm, h, a = ZERO_BUBBLE[name]
    s = 1024
    path = PROBLEMS / f"{name}.yaml"
    pipe = load_problem(path).pipeline
    assert (pipe.stages, pipe.microbatches) == (p, m)
    assert (pipe.forward, pipe.backward_input, pipe.backward_weight, pipe.transfer) == (f, b, w, comm)
    assert pipe.memory_forward == 34 * h + 5 * a * s
    assert pipe.memory_freed_by_weight == 32 * h
    assert pipe.memory_limit == p * (34 * h + 5 * a * s)
    assert (pipe.schedule, pipe.objective) == ("1f1b", "span")
    # the comment names the model the numbers come from
    comment = re.search(r"hidden h = (\d+), heads a = (\d+), sequence length s = (\d+)", path.read_text())
    assert comment and tuple(map(int, comment.groups())) == (h, a, s)


@pytest.mark.parametrize("path", SUITE_FILES, ids=rel)
def test_suite_files_name_existing_problems_and_methods(path):
    from layersched.schedule.suite import SuiteSpec, check_methods

    suite = load_spec(path, SuiteSpec)
    for prob in suite.problems:
        load_problem(path.parent / prob.path)
    check_methods(path, suite.methods)
