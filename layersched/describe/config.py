"""Descriptions read from YAML or JSON: model, cluster, training, and the stage-level shortcut.

Pydantic models at the boundary only: strict (unknown keys are errors), frozen. `load_problem`
reads a problem file and turns any error into one `SpecError` line that names the file, the field
and the fix.

Times in a model description are seconds, memory is bytes. The stage-level shortcut takes integer
times in whatever unit the source reports (Zero Bubble's tables use their own units).

Example
-------
>>> spec = ProblemSpec.model_validate({"name": "tiny", "pipeline": {
...     "stages": 2, "microbatches": 4, "forward": 1, "backward_input": 1, "backward_weight": 1}})
>>> spec.pipeline.stages
2
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Literal

import yaml
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError, model_validator


def _not_bool(value):
    """A number field refuses true and false, which pydantic would read as 1 and 0 (YAML reads ``yes``,
    ``no``, ``on`` and ``off`` as those too, so ``forward: yes`` would be a forward of 1)."""
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


NoBool = BeforeValidator(_not_bool)
NonNeg = Annotated[float, Field(ge=0), NoBool]
MAX_INT = 10**15
"""The largest whole number a file may hold (times in the file's unit, bytes, counts). A schedule file's
times are held to it too, so one iteration's passes and transfers may add up to at most this
(`layersched.schedule.graph.to_problem` checks); then every start and end fits a 64-bit integer, and
CP-SAT's domains, with room to spare."""
MAX_SECONDS = MAX_INT / 1e9
"""The most seconds a layer's pass, a link's latency or an action's overhead may take: `MAX_INT` in
nanoseconds, the unit a model-level problem is timed in (a million seconds, eleven days)."""
Seconds = Annotated[float, Field(ge=0, le=MAX_SECONDS), NoBool]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT), NoBool]
PosInt = Annotated[int, Field(ge=1, le=MAX_INT), NoBool]
Stages = Annotated[int, Field(ge=1, le=4096), NoBool]
"""Pipeline stages, ranks and replicas: 1 to 4096."""
Microbatches = Annotated[int, Field(ge=1, le=1_000_000), NoBool]
"""Micro-batches per iteration: 1 to a million."""
Placement = Literal["loop", "v"] | list[NonNegInt]
"""Which rank holds each stage: ``loop`` (stage s on rank s mod R), ``v`` (down then back up, as in
ZB-V), or an explicit list with one rank per stage."""


class SpecError(ValueError):
    """A description that cannot be used; its message is one line naming file, field and fix."""


class Strict(BaseModel):
    """Every model of a file: unknown keys refused, infinite and NaN numbers refused."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# -- model ---------------------------------------------------------------------------------------
class LayerSpec(Strict):
    """One layer (or sub-layer). Times in seconds per micro-batch, memory in bytes.

    ``activation_bytes`` are kept from the forward until the backward; the backward for inputs frees
    all of it except ``kept_for_weight_grad``, which the backward for weights frees. With
    ``sublayers`` (say a matmul and its nonlinearity) the layer's own figures may be left out: they
    are the sums of its sub-layers, and a partitioner may cut between the sub-layers.
    """

    name: str
    forward: Seconds = 0.0
    backward_input: Seconds = 0.0
    backward_weight: Seconds = 0.0
    backward: Annotated[
        Seconds | None,
        Field(
            description="seconds of a fused backward (input and weight gradients in one pass); when "
            "left out, backward_input + backward_weight"
        ),
    ] = None
    optimizer: Annotated[
        Seconds | None,
        Field(
            description="seconds of the optimizer step over the layer's parameters; when left out, "
            "estimated from its parameter bytes and the device's memory bandwidth"
        ),
    ] = None
    activation_bytes: NonNegInt = 0
    kept_for_weight_grad: NonNegInt = 0
    param_bytes: NonNegInt = 0
    output_bytes: NonNegInt = 0
    flops_forward: NonNeg | None = None
    sublayers: list[LayerSpec] | None = None

    @model_validator(mode="after")
    def _check(self) -> LayerSpec:
        if self.sublayers:
            own = (self.forward, self.backward_input, self.backward_weight, self.activation_bytes, self.param_bytes)
            if any(own) or self.backward is not None or self.optimizer is not None:
                raise ValueError("give either the layer's own figures or its sublayers, not both")
        elif self.kept_for_weight_grad > self.activation_bytes:
            raise ValueError("kept_for_weight_grad cannot exceed activation_bytes")
        return self

    def leaves(self) -> list[LayerSpec]:
        """The sub-layers, flattened; the layer itself when it has none."""
        if not self.sublayers:
            return [self]
        return [leaf for sub in self.sublayers for leaf in sub.leaves()]

    def total(self, field: str) -> float:
        """A figure of the layer: its own, or the sum over its sub-layers (``output_bytes``: the
        last sub-layer's)."""
        if not self.sublayers:
            if field == "backward" and self.backward is None:
                return self.backward_input + self.backward_weight
            return getattr(self, field)
        if field == "output_bytes":
            return self.output_bytes or self.sublayers[-1].total(field)
        return sum(sub.total(field) for sub in self.sublayers)


class TransformerArch(Strict):
    """A GPT/BERT-style stack: embedding, ``num_layers`` blocks, output head."""

    family: Literal["transformer"]
    num_layers: PosInt
    hidden: PosInt
    heads: PosInt
    seq_len: PosInt
    vocab: PosInt
    ffn_hidden: PosInt | None = None
    causal: bool = True


class CNNArch(Strict):
    """A known convolutional network, built layer by layer by the cost model."""

    family: Literal["resnet50", "resnet101", "vgg16", "mobilenetv2", "mobilenetv3", "densenet121"]
    image_size: PosInt = 224
    num_classes: PosInt = 1000


class MLPArch(Strict):
    """A plain multi-layer perceptron: ``widths[0]`` inputs, then one linear layer per width."""

    family: Literal["mlp"]
    widths: list[PosInt] = Field(min_length=2)


Architecture = Annotated[TransformerArch | CNNArch | MLPArch, Field(discriminator="family")]


class ModelSpec(Strict):
    """An ordered list of layers, given directly or built from an architecture by the cost model."""

    name: str
    layers: list[LayerSpec] | None = None
    architecture: Architecture | None = None
    dtype_bytes: Literal[2, 4] = 2

    @model_validator(mode="after")
    def _one_source(self) -> ModelSpec:
        if (self.layers is None) == (self.architecture is None):
            raise ValueError("give exactly one of 'layers' or 'architecture'")
        if self.layers is not None and not self.layers:
            raise ValueError("'layers' is empty; a model needs at least one layer")
        seen: set[str] = set()
        for layer in self.layers or []:  # a schedule names its stages' layers; the runner finds them by name
            if layer.name in seen:
                raise ValueError(f"two layers are named {layer.name!r}; give each its own name")
            seen.add(layer.name)
        return self


# -- cluster -------------------------------------------------------------------------------------
class DeviceSpec(Strict):
    """A processor: peak rates, memory and the fraction of peak a real kernel achieves."""

    name: str
    peak_flops: Annotated[float, Field(gt=0), NoBool]
    memory_bandwidth: Annotated[float, Field(gt=0), NoBool]
    memory_bytes: PosInt
    flops_efficiency: Annotated[float, Field(gt=0, le=1), NoBool] = 0.5
    bandwidth_efficiency: Annotated[float, Field(gt=0, le=1), NoBool] = 0.7
    action_overhead: Annotated[
        Seconds | dict[Literal["F", "I", "W", "B"], Seconds],
        Field(
            description="seconds every compute action costs beyond its layers' time: the runtime's "
            "dispatch and bookkeeping (the profiler measures it). One figure for every kind, or one "
            "per kind ({F: ..., I: ..., W: ..., B: ...}; a kind left out costs 0); 0 by default",
        ),
    ] = 0.0


class LinkSpec(Strict):
    """A link: bandwidth in bytes per second and latency in seconds."""

    bandwidth: Annotated[float, Field(gt=0), NoBool]
    latency: Seconds = 0.0

    def time(self, nbytes: float) -> float:
        return self.latency + nbytes / self.bandwidth if nbytes else 0.0


class ClusterSpec(Strict):
    """Identical devices in nodes; one link kind inside a node, one across nodes."""

    name: str = "cluster"
    device: DeviceSpec
    nodes: PosInt = 1
    devices_per_node: PosInt = 8
    intra_node: LinkSpec
    inter_node: LinkSpec | None = None

    @property
    def num_devices(self) -> int:
        return self.nodes * self.devices_per_node

    def link(self, a: int, b: int) -> LinkSpec:
        """The link between devices ``a`` and ``b``."""
        same = a // self.devices_per_node == b // self.devices_per_node
        return self.intra_node if same or self.inter_node is None else self.inter_node


# -- training ------------------------------------------------------------------------------------
class TrainingSpec(Strict):
    """How the model is trained: micro-batches, parallel degrees, schedule and objective."""

    microbatches: Microbatches
    microbatch_size: PosInt = 1
    pipeline: Stages = 1
    data_parallel: Stages = 1
    stages_per_rank: Stages = 1
    placement: Placement | None = None
    """Which rank holds each stage (with ``stages_per_rank`` > 1): ``loop``, ``v`` or a list; default:
    the template's own, loop for the generic solvers."""
    schedule: str = "1f1b"
    solver: str | None = None
    """A generic solver (``list``, ``cpsat``, ``best``, ...) to use instead of the template."""
    objective: Literal["makespan", "span"] = "span"
    memory_limit: PosInt | None = None
    optimizer_bytes_per_param: NonNeg = 12.0
    cuts: Literal["layer", "sublayer", "best"] = "best"
    """Where ``solve`` cuts the model into stages: between whole layers, also inside them, or best:
    both scheduled and the faster kept (`layersched.schedule.cuts`)."""
    """Optimizer state and master weights per parameter byte's parameter (Adam, mixed precision)."""


_STAGE_COSTS = ("forward", "backward_input", "backward_weight", "memory_forward", "memory_freed_by_weight")
"""The stage-level pipeline's per-stage amounts: one number for all stages, or one per stage."""


class StagePipelineSpec(Strict):
    """Stage-level shortcut (Zero Bubble's and PipeDream's settings): each cost is one number for
    every stage, or a list with one per stage (``transfer``: one per stage boundary).

    ``memory_forward`` is added by each forward; the backward for weights frees
    ``memory_freed_by_weight`` and the backward for inputs the rest. ``memory_limit`` is per rank.
    ``placement`` says which rank holds each stage (``loop``, ``v`` or a list); default: the
    template's own, loop for the generic solvers.
    """

    stages: Stages
    microbatches: Microbatches
    forward: NonNegInt | list[NonNegInt]
    backward_input: NonNegInt | list[NonNegInt]
    backward_weight: NonNegInt | list[NonNegInt]
    transfer: NonNegInt | list[NonNegInt] = 0
    memory_forward: NonNegInt | list[NonNegInt] = 0
    memory_freed_by_weight: NonNegInt | list[NonNegInt] = 0
    memory_limit: PosInt | None = None
    stages_per_rank: Stages = 1
    placement: Placement | None = None
    schedule: str = "1f1b"
    solver: str | None = None
    objective: Literal["makespan", "span"] = "span"
    time_unit: str = "unit"
    memory_unit: str = "unit"

    def per_stage(self, field: str) -> list[int]:
        """The field as one value per stage (per boundary for ``transfer``)."""
        n = self.stages - 1 if field == "transfer" else self.stages
        value = getattr(self, field)
        return list(value) if isinstance(value, list) else [value] * n

    @model_validator(mode="after")
    def _check(self) -> StagePipelineSpec:
        for name in (*_STAGE_COSTS, "transfer"):
            value, want = getattr(self, name), self.stages - 1 if name == "transfer" else self.stages
            if isinstance(value, list) and len(value) != want:
                what = "stage boundary" if name == "transfer" else "stage"
                raise ValueError(f"{name}: {len(value)} values for {want}; give one per {what}, or one number")
        freed, added = self.per_stage("memory_freed_by_weight"), self.per_stage("memory_forward")
        if any(w > f for w, f in zip(freed, added, strict=True)):
            raise ValueError("memory_freed_by_weight cannot exceed memory_forward")
        if self.stages % self.stages_per_rank:
            raise ValueError(f"stages ({self.stages}) must be a multiple of stages_per_rank ({self.stages_per_rank})")
        if self.placement is not None:
            from layersched.describe.placement import placement

            placement(self.stages, self.stages // self.stages_per_rank, self.placement)  # ValueError names the fault
        return self


class ProblemSpec(Strict):
    """A problem file: either a stage-level ``pipeline``, or ``model`` + ``cluster`` + ``training``.
    ``cluster`` may be a path to a cluster file, relative to the problem file."""

    name: str
    description: str = ""
    pipeline: StagePipelineSpec | None = None
    model: ModelSpec | None = None
    cluster: ClusterSpec | None = None
    training: TrainingSpec | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ProblemSpec:
        full = (self.model, self.cluster, self.training)
        if self.pipeline is not None and any(x is not None for x in full):
            raise ValueError("give either 'pipeline' or 'model'+'cluster'+'training', not both")
        if self.pipeline is None and any(x is None for x in full):
            missing = [k for k, v in zip(("model", "cluster", "training"), full, strict=False) if v is None]
            raise ValueError(
                f"missing {', '.join(missing)}: a model-level problem needs model, "
                "cluster and training (or use the stage-level 'pipeline' form)"
            )
        return self


# -- loading -------------------------------------------------------------------------------------
MAX_VALUES = 1_000_000
"""The most values (mappings, lists and scalars, aliases expanded) a YAML file may describe; JSON has no
aliases, so its size is its file's."""

MAX_FILE_BYTES = 2**30
"""The largest file `read_data` reads (1 GiB). The largest schedule file the tool writes, ZB-V at
p=32, m=256 (49,152 tasks), is about 10 MB; a trace grows with the steps it records. A device or a pipe
that never ends (``/dev/zero``) is read up to this and refused: before, it filled the memory."""

_CHUNK = 2**24


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping (the last would win silently)."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool | None):
                continue  # an unhashable key: the base loader says so
            if key in seen:
                why = f"key {key!r} appears twice (first on line {seen[key] + 1}); keep one"
                raise yaml.constructor.ConstructorError(None, None, why, key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


def _count_values(data, memo: dict[int, int]) -> int:
    """How many values ``data`` holds once its shared parts (YAML aliases) are expanded."""
    if not isinstance(data, dict | list):
        return 1
    if id(data) not in memo:
        memo[id(data)] = 0  # a cycle counts once
        items = data.values() if isinstance(data, dict) else data
        memo[id(data)] = 1 + sum(_count_values(x, memo) for x in items)
    return memo[id(data)]


def read_data(path: str | Path, fmt: str | None = None) -> dict:
    """Parse a YAML or JSON file (by suffix, or ``fmt``) into a dict; `SpecError` naming the file on
    a missing, unreadable or non-UTF-8 file, unparsable text, a key given twice, aliases that expand
    to more than `MAX_VALUES` values, or a top level that is not a mapping."""
    path = Path(path)
    try:
        raw = _read_capped(path)
    except OSError as exc:
        raise SpecError(f"{path}: cannot read ({exc.strerror or exc})") from None
    if raw is None:
        raise SpecError(
            f"{path}: more than {MAX_FILE_BYTES:,} bytes, larger than any problem, schedule or trace file this "
            "tool reads; check the path"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SpecError(
            f"{path}: not UTF-8 text (byte 0x{raw[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None
    is_json = (fmt or path.suffix.lstrip(".")) == "json"
    try:
        if is_json:
            data = json.loads(text, object_pairs_hook=_unique_keys)
        else:
            data = yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader)
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a problem or schedule file") from None
    except (yaml.YAMLError, json.JSONDecodeError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
            first = f"{exc.problem} (line {exc.problem_mark.line + 1})"
        raise SpecError(f"{path}: not valid {'JSON' if is_json else 'YAML'}: {first}") from None
    try:
        too_many = not is_json and isinstance(data, dict | list) and _count_values(data, {}) > MAX_VALUES
    except RecursionError:
        raise SpecError(f"{path}: nested too deeply to be a problem or schedule file") from None
    if too_many:
        raise SpecError(f"{path}: holds more than {MAX_VALUES} values once its aliases are expanded; cut it down")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return data


def _read_capped(path: Path) -> bytes | None:
    """The bytes of ``path``, or None when there are more than `MAX_FILE_BYTES`: a regular file by its
    size, anything else (a pipe, a device) by reading in chunks until it ends or passes the cap."""
    with path.open("rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISREG(st.st_mode) and st.st_size > MAX_FILE_BYTES:
            return None
        chunks, size = [], 0
        while chunk := f.read(_CHUNK):
            size += len(chunk)
            if size > MAX_FILE_BYTES:
                return None
            chunks.append(chunk)
    return b"".join(chunks)


def _unique_keys(pairs: list[tuple]) -> dict:
    """The object as a dict; `ValueError` naming the first of its keys that appears twice (in one pass:
    a hostile object may have very many keys)."""
    seen: set = set()
    twice = {key for key, _ in pairs if key in seen or seen.add(key)}
    if twice:
        first = next(key for key, _ in pairs if key in twice)
        raise ValueError(f"key {first!r} appears twice in one object; keep one")
    return dict(pairs)


_UNION_TAG = re.compile(
    r"^(function-after|function-before|constrained-|list\[|literal\[|dict\[|int$|float$|str$|bool$)"
)


_WHOLE_AMOUNTS = frozenset((*_STAGE_COSTS, "transfer", "memory_limit"))
"""The stage-level pipeline's amounts of time or memory: whole numbers of its ``time_unit`` or ``memory_unit``."""

_YAML_TEXT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
"""A number YAML 1.1 (PyYAML) reads as text where its exponent lacks a sign or its mantissa a dot (``1e6``,
``1e+6``, ``1.5e3``); ``1.0e+6`` is a number."""


def format_validation_error(path: str | Path, exc: ValidationError) -> str:
    """One line: file, field, what is wrong and how to fix it. An unknown key comes first (it is
    usually a typo, and then also the cause of a "missing" error), with the likely intended name."""
    import difflib

    errors = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    for e in errors:  # the field's path, without pydantic's tags for a union's members and validators
        e["loc"] = tuple(x for x in e["loc"] if not _UNION_TAG.match(str(x)))
    # where one member of a union failed on the field and another inside it (``forward: [1e30, 2]`` is not
    # a number, and its item 0 is too large), the input had the inner one's shape: its error says what is wrong
    deeper = {e["loc"][:k] for e in errors for k in range(len(e["loc"]))}
    errors = [e for e in errors if e["loc"] not in deeper] or errors
    errors = list({e["loc"]: e for e in reversed(errors)}.values())[::-1]  # one error per field
    err = errors[0]
    loc = [str(x) for x in err["loc"]]
    where = ".".join(loc) or "(top level)"
    kind, msg = err["type"], err["msg"]
    if kind == "extra_forbidden":
        parent = loc[:-1]
        missing = [
            str(e["loc"][-1]) for e in errors if e["type"] == "missing" and [str(x) for x in e["loc"][:-1]] == parent
        ]
        close = difflib.get_close_matches(loc[-1], missing, n=1) if loc else []
        msg = "unknown key"
        fix = f"did you mean '{close[0]}'?" if close else "remove it or check its spelling"
    elif kind == "missing":
        fix = "add it"
        msg = "required field is missing"
    elif kind == "int_from_float" and loc[:1] == ["pipeline"] and len(loc) > 1 and loc[1] in _WHOLE_AMOUNTS:
        unit = "memory_unit" if loc[1].startswith("memory") else "time_unit"
        example = (
            "1.5 GiB as 1536 with memory_unit: MiB" if unit == "memory_unit" else "1.5 ms as 1500 with time_unit: us"
        )
        fix = f"the stage-level costs are whole numbers: give them all in a smaller unit and name it (e.g. {example})"
    elif kind == "int_parsing" and isinstance(err.get("input"), str) and _YAML_TEXT_NUMBER.match(err["input"].strip()):
        msg = f"{err['input']!r} is text to YAML, not a number"
        fix = "write it out in full, or with a dot and a signed exponent (1.0e+6)"
    else:
        msg = msg.removeprefix("Value error, ")
        fix = "correct the value"
    n = len(errors) - 1
    more = f" (and {n} more error{'s' if n > 1 else ''})" if n else ""
    return f"{path}: {where}: {msg}; {fix}{more}"


def load_spec(path: str | Path, model: type[BaseModel], data: dict | None = None):
    """Validate ``data`` (read from ``path`` when not given) as ``model``; `SpecError` on failure."""
    if data is None:
        data = read_data(path)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise SpecError(format_validation_error(path, exc)) from None


def load_problem(path: str | Path) -> ProblemSpec:
    """Read a problem file. A string ``cluster`` is read as a path relative to the file."""
    path = Path(path)
    data = read_data(path)
    cluster = data.get("cluster")
    if isinstance(cluster, str):
        cpath = path.parent / cluster
        if not cpath.exists():
            raise SpecError(
                f"{path}: cluster: file {cluster!r} not found next to the problem file; "
                "give a path relative to it or an inline cluster"
            )
        data = {**data, "cluster": load_spec(cpath, ClusterSpec).model_dump()}
    return load_spec(path, ProblemSpec, data)


def bundled_problems() -> Path:
    """The folder of the problem files that ship with layersched (models, clusters, benchmark suites).

    In an installed wheel they sit inside the package (``layersched/problems``); in a checkout they
    are the repository's ``problems/`` folder. Found from any working directory either way.

    >>> (bundled_problems() / "suites" / "zero-bubble.yaml").is_file()
    True
    """
    package = Path(__file__).resolve().parents[1]
    for candidate in (package / "problems", package.parent / "problems"):
        if (candidate / "suites").is_dir():
            return candidate
    raise SpecError(f"the bundled problem files are missing (looked in {package / 'problems'}); reinstall layersched")
