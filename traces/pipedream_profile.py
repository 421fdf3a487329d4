"""PipeDream per-layer profiles (``graph.txt``): loading, linearising and coarsening.

Format (msr-fiddle/pipedream ``graph/graph.py``; see ``traces/data/pipedream/PROVENANCE.md``): one node per
line, ``nodeID -- description -- forward_compute_time=F, backward_compute_time=B, activation_size=A,
parameter_size=P``, and edges as tab-indented ``nodeX -- nodeY`` lines. Times are milliseconds per
minibatch of the profiling batch size; sizes are bytes; ``A`` may be a list ``[a1; a2]`` for layers with
several outputs (LSTMs). The input nodes' forward time is data loading, which PipeDream's optimizer
zeroes, and so do we.

The partitioner of [Narayanan] §2.4.1 works on a *chain* of layers. A branching graph (ResNet, GNMT) is
linearised by a deterministic topological order; the activation bytes that cross the cut after position
``i`` are the outputs of every node at or before ``i`` that feeds a node after ``i`` (for a chain, just
``a_i``). That is the traffic a stage boundary there would really carry, so the DP's ``2 a_s / B`` term
stays honest on branching models.
"""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass
from pathlib import Path

from clustertwin.traces.bundled import DATA_DIR

from clustertwin.errors import InputError

PIPEDREAM_DIR = DATA_DIR / "pipedream"

# Profiling minibatch sizes (samples per profiled minibatch) of the bundled profiles, inferred from the
# Input node's activation bytes (3x224x224 fp32 images) or, for GNMT, the profiler README's command line.
BUNDLED_BATCH_SIZES: dict[str, int] = {
    "alexnet": 256,
    "vgg16": 128,
    "resnet18": 256,
    "resnet50": 128,
    "resnet101": 64,
    "gnmt": 64,
    "gnmt_large": 64,
}

_NODE = re.compile(
    r"^(?P<id>\S+) -- (?P<desc>.*) -- forward_compute_time=(?P<f>[^,]+), backward_compute_time=(?P<b>[^,]+),"
    r" activation_size=(?P<a>\[[^\]]*\]|[^,]+), parameter_size=(?P<p>\S+)\s*$"
)
_EDGE = re.compile(r"^\t(?P<src>\S+) -- (?P<dst>\S+)\s*$")


@dataclass(frozen=True)
class Layer:
    """One layer (or a merged run of layers), with costs for one minibatch of the profiling batch size."""

    name: str
    description: str
    forward_s: float
    backward_s: float
    activation_bytes: float  # output bytes (sum over outputs)
    parameter_bytes: float


@dataclass(frozen=True)
class ModelProfile:
    """Layers in a topological order and the bytes crossing the cut after each position.

    ``cut_bytes[i]`` is what a stage boundary after layer ``i`` sends forward (and, as gradients,
    backward); ``cut_bytes[-1]`` is the model output.
    """

    name: str
    layers: tuple[Layer, ...]
    cut_bytes: tuple[float, ...]
    batch_size: int  # samples per profiled minibatch

    def __post_init__(self) -> None:
        if len(self.layers) != len(self.cut_bytes) or not self.layers:
            raise ValueError("a profile needs one cut size per layer and at least one layer")

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def compute_s(self) -> list[float]:
        """Forward + backward time per layer (the DP's T_l)."""
        return [layer.forward_s + layer.backward_s for layer in self.layers]

    def total_parameter_bytes(self) -> float:
        return sum(layer.parameter_bytes for layer in self.layers)

    def scaled(self, batch_size: int) -> ModelProfile:
        """The profile for another (micro)batch size, assuming time and activations linear in the batch
        and weights independent of it (a first-order model; real kernels are sublinear at small
        batches, so calibrate with ``runtime.pipedream.profiler`` when that matters)."""
        k = batch_size / self.batch_size
        layers = tuple(
            Layer(
                lay.name,
                lay.description,
                lay.forward_s * k,
                lay.backward_s * k,
                lay.activation_bytes * k,
                lay.parameter_bytes,
            )
            for lay in self.layers
        )
        return ModelProfile(self.name, layers, tuple(c * k for c in self.cut_bytes), batch_size)

    def coarsened(self, max_blocks: int) -> ModelProfile:
        """At most ``max_blocks`` blocks of consecutive layers, for a fast planner on big graphs.

        Cuts are kept where the fewest bytes cross (boundaries inside a ResNet block or an attention
        layer cross several tensors and would never be chosen by the planner anyway); among equal
        sizes the cut that best evens the block compute is kept. Every kept cut is a cut of the
        original chain, so a plan on the coarse profile is a valid plan on the original.
        """
        n = self.num_layers
        if n <= max_blocks:
            return self
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
        compute = self.compute_s()
        total = sum(compute) or 1.0
        prefix = [0.0]
        for c in compute:
            prefix.append(prefix[-1] + c)
        # Rank the n-1 inner cuts: fewest crossing bytes first, then closest to an even spread of compute.
        candidates = []
        for i in range(n - 1):
            frac = prefix[i + 1] / total * max_blocks
            evenness = abs(frac - round(frac))
            candidates.append((self.cut_bytes[i], evenness, i))
        keep = sorted(i for _, _, i in sorted(candidates)[: max_blocks - 1])
        layers, cuts, start = [], [], 0
        for end in [*keep, n - 1]:
            group = self.layers[start : end + 1]
            layers.append(
                Layer(
                    name=f"{group[0].name}..{group[-1].name}" if len(group) > 1 else group[0].name,
                    description="; ".join(g.description for g in group)[:200],
                    forward_s=sum(g.forward_s for g in group),
                    backward_s=sum(g.backward_s for g in group),
                    # The block's stashed activations are all of its layers' outputs.
                    activation_bytes=sum(g.activation_bytes for g in group),
                    parameter_bytes=sum(g.parameter_bytes for g in group),
                )
            )
            cuts.append(self.cut_bytes[end])
            start = end + 1
        return ModelProfile(self.name, tuple(layers), tuple(cuts), self.batch_size)


def _number(text: str, where: str, field: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(where, f"{field} is not a number: {text!r}") from None
    if not value >= 0:  # also rejects NaN
        raise InputError(where, f"{field} must be >= 0, got {text!r}")
    return value


def parse_profile(
    text: str, source: str = "<graph.txt>", name: str = "model", batch_size: int = 1
) -> ModelProfile:
    """Parse ``graph.txt`` text; every error names ``source`` and the line number."""
    nodes: dict[str, tuple[int, Layer]] = {}
    edges: list[tuple[str, str, int]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        where = f"{source}:{number}"
        if not raw.strip():
            continue
        if raw.startswith("\t"):
            edge = _EDGE.match(raw)
            if edge is None:
                raise InputError(where, f"expected an edge '\\tnodeX -- nodeY', got {raw.strip()!r}")
            edges.append((edge["src"], edge["dst"], number))
            continue
        node = _NODE.match(raw)
        if node is None:
            raise InputError(
                where,
                "expected 'nodeID -- description -- forward_compute_time=F, backward_compute_time=B,"
                f" activation_size=A, parameter_size=P', got {raw[:120]!r}",
            )
        if node["id"] in nodes:
            raise InputError(
                where, f"node {node['id']} is defined twice (first on line {nodes[node['id']][0]})"
            )
        act = node["a"]
        if act.startswith("["):
            parts = [p.strip() for p in act[1:-1].split(";") if p.strip()]
            if not parts:
                raise InputError(where, "activation_size list is empty")
            activation = sum(_number(p, where, "activation_size") for p in parts)
        else:
            activation = _number(act, where, "activation_size")
        desc = node["desc"].strip()
        forward = _number(node["f"], where, "forward_compute_time") / 1000.0
        if desc.startswith("Input"):
            forward = 0.0  # data-loading time, not compute (PipeDream's optimizer does the same)
        layer = Layer(
            name=node["id"],
            description=desc,
            forward_s=forward,
            backward_s=_number(node["b"], where, "backward_compute_time") / 1000.0,
            activation_bytes=activation,
            parameter_bytes=_number(node["p"], where, "parameter_size"),
        )
        nodes[node["id"]] = (number, layer)
    if not nodes:
        raise InputError(source, "no node lines found; is this a PipeDream graph.txt?")
    succ: dict[str, list[str]] = {n: [] for n in nodes}
    indegree = dict.fromkeys(nodes, 0)
    for src, dst, number in edges:
        for end in (src, dst):
            if end not in nodes:
                raise InputError(f"{source}:{number}", f"edge names unknown node {end}")
        succ[src].append(dst)
        indegree[dst] += 1
    # Kahn's algorithm, ties broken by file order, so the order (and hence the plan) is deterministic.
    line_of = {n: nodes[n][0] for n in nodes}
    ready = [(line_of[n], n) for n, d in indegree.items() if d == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        _, n = heapq.heappop(ready)
        order.append(n)
        for m in succ[n]:
            indegree[m] -= 1
            if indegree[m] == 0:
                heapq.heappush(ready, (line_of[m], m))
    if len(order) != len(nodes):
        stuck = sorted((line_of[n], n) for n, d in indegree.items() if d > 0)[0]
        raise InputError(f"{source}:{stuck[0]}", f"the graph has a cycle through node {stuck[1]}")
    position = {n: i for i, n in enumerate(order)}
    # A node's output crosses every cut from its own position up to its last consumer's position.
    last_use = [position[n] for n in order]
    for n in order:
        for m in succ[n]:
            last_use[position[n]] = max(last_use[position[n]], position[m])
    delta = [0.0] * (len(order) + 1)
    for i, n in enumerate(order):
        if last_use[i] > i:
            delta[i] += nodes[n][1].activation_bytes
            delta[last_use[i]] -= nodes[n][1].activation_bytes
    cuts, running = [], 0.0
    for i in range(len(order)):
        running += delta[i]
        cuts.append(max(running, 0.0))
    cuts[-1] = nodes[order[-1]][1].activation_bytes  # the model output
    return ModelProfile(name, tuple(nodes[n][1] for n in order), tuple(cuts), batch_size)


def load_profile(path: str | Path, batch_size: int | None = None, name: str | None = None) -> ModelProfile:
    """Load a ``graph.txt`` file (or a folder holding one); ``batch_size`` is the profiling batch size,
    required unless the folder's name is a bundled model."""
    path = Path(path)
    if path.is_dir():
        path = path / "graph.txt"
    model = name or path.parent.name
    if batch_size is None:
        if model not in BUNDLED_BATCH_SIZES:
            raise InputError(str(path), "give the profiling batch size (it is not recorded in graph.txt)")
        batch_size = BUNDLED_BATCH_SIZES[model]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(str(path), f"cannot read the profile: {err.strerror or err}") from None
    return parse_profile(text, str(path), model, batch_size)


def bundled_profile(model: str) -> ModelProfile:
    """A profile shipped in ``traces/data/pipedream`` (names: ``BUNDLED_BATCH_SIZES``)."""
    if model not in BUNDLED_BATCH_SIZES:
        raise InputError(
            "profile", f"unknown bundled model {model!r}; known: {', '.join(BUNDLED_BATCH_SIZES)}"
        )
    return load_profile(PIPEDREAM_DIR / model / "graph.txt")
