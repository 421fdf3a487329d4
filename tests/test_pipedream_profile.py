"""PipeDream profiles: the graph.txt loader (errors name file and line), linearisation of branching
graphs, coarsening, and the torch profiler's round trip through graph.txt."""

from __future__ import annotations

import pytest
from clustertwin.traces.pipedream_profile import (
    BUNDLED_BATCH_SIZES,
    bundled_profile,
    load_profile,
    parse_profile,
)

from clustertwin.errors import InputError

NODE = (
    "{id} -- {d} -- forward_compute_time={f}, backward_compute_time={b},"
    " activation_size={a}, parameter_size={p}"
)


def node(id_, f=1.0, b=2.0, a=100.0, p=8.0, d="Linear"):
    return NODE.format(id=id_, d=d, f=f, b=b, a=a, p=p)


@pytest.mark.parametrize("model", sorted(BUNDLED_BATCH_SIZES))
def test_bundled_profiles_load(model):
    profile = bundled_profile(model)
    assert profile.num_layers > 10
    assert all(lay.forward_s >= 0 and lay.backward_s >= 0 for lay in profile.layers)
    assert sum(profile.compute_s()) > 0.01  # tens of milliseconds per minibatch or more
    assert profile.layers[0].forward_s == 0.0  # the Input node's data loading is not compute


def test_units_and_multi_output_activations():
    text = "\n".join(
        [
            node("node1", f=5.0, b=0.0, a=40.0, p=0.0, d="Input0"),
            node("node2", f=1.5, b=3.0, a="[10.0; 20.0]", p=16.0, d="LSTM(4, 4)"),
            "\tnode1 -- node2",
        ]
    )
    profile = parse_profile(text, "x.txt", batch_size=4)
    assert profile.layers[0].forward_s == 0.0
    assert profile.layers[1].forward_s == pytest.approx(1.5e-3)
    assert profile.layers[1].activation_bytes == 30.0
    assert profile.cut_bytes == (40.0, 30.0)


def test_branches_cross_cuts():
    # a -> b -> c -> d and a -> d (a skip connection): cuts after b and c also carry a's output.
    text = "\n".join(
        [node("a", a=1.0), node("b", a=10.0), node("c", a=100.0), node("d", a=1000.0)]
        + ["\ta -- b", "\tb -- c", "\tc -- d", "\ta -- d"]
    )
    profile = parse_profile(text)
    assert [lay.name for lay in profile.layers] == ["a", "b", "c", "d"]
    assert profile.cut_bytes == (1.0, 11.0, 101.0, 1000.0)


def test_coarsening_keeps_cheapest_cuts_and_totals():
    profile = bundled_profile("resnet50")
    coarse = profile.coarsened(16)
    assert coarse.num_layers == 16
    assert sum(coarse.compute_s()) == pytest.approx(sum(profile.compute_s()))
    assert coarse.total_parameter_bytes() == pytest.approx(profile.total_parameter_bytes())
    assert set(coarse.cut_bytes[:-1]) <= set(profile.cut_bytes[:-1])
    # The kept inner cuts are among the cheapest of the original chain.
    worst_kept = max(coarse.cut_bytes[:-1])
    assert sum(c < worst_kept for c in profile.cut_bytes[:-1]) < 15


def test_scaling_to_a_microbatch():
    profile = bundled_profile("vgg16")
    half = profile.scaled(64)
    assert half.batch_size == 64
    assert sum(half.compute_s()) == pytest.approx(sum(profile.compute_s()) / 2)
    assert half.total_parameter_bytes() == profile.total_parameter_bytes()


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (node("n1") + "\nnode2 -- Conv -- forward_compute_time=1", 2, "expected 'nodeID"),
        (node("n1") + "\n" + node("n2", f="abc"), 2, "forward_compute_time is not a number"),
        (node("n1") + "\n" + node("n2", b=-1), 2, "must be >= 0"),
        (node("n1") + "\n" + node("n1"), 2, "defined twice"),
        (node("n1") + "\n\tn1 -- n9", 2, "unknown node n9"),
        (node("n1") + "\n\tn1 n2", 2, "expected an edge"),
        (node("n1") + "\n" + node("n2") + "\n\tn1 -- n2\n\tn2 -- n1", 1, "cycle"),
    ],
)
def test_malformed_input_names_file_and_line(text, line, message):
    with pytest.raises(InputError, match=message) as err:
        parse_profile(text, "bad/graph.txt")
    assert err.value.where == f"bad/graph.txt:{line}"


def test_missing_file_and_batch_size(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        load_profile(tmp_path / "nope" / "graph.txt", batch_size=1)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "graph.txt").write_text(node("n1"))
    with pytest.raises(InputError, match="batch size"):
        load_profile(tmp_path / "mine")
    assert load_profile(tmp_path / "mine", batch_size=8).batch_size == 8


def test_torch_profiler_round_trip(tmp_path):
    torch = pytest.importorskip("torch")
    from clustertwin.runtime.pipedream.profiler import profile_sequential, to_graph_txt
    from torch import nn

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    profile = profile_sequential(model, torch.randn(8, 32), iterations=3, warmup=1, name="mlp")
    assert profile.num_layers == 3 and profile.batch_size == 8
    assert profile.layers[0].parameter_bytes == (32 * 64 + 64) * 4
    assert profile.layers[0].activation_bytes == 8 * 64 * 4
    assert profile.layers[1].parameter_bytes == 0
    assert all(lay.forward_s > 0 and lay.backward_s > 0 for lay in profile.layers)
    path = tmp_path / "mlp" / "graph.txt"
    path.parent.mkdir()
    path.write_text(to_graph_txt(profile))
    loaded = load_profile(path, batch_size=8)
    assert [lay.parameter_bytes for lay in loaded.layers] == [lay.parameter_bytes for lay in profile.layers]
    assert loaded.cut_bytes == profile.cut_bytes
    assert loaded.layers[2].backward_s == pytest.approx(profile.layers[2].backward_s, abs=1e-6)


class _FakeEvent:
    """A timing mark on a fake clock that advances 1 ms per logged step; every call is logged."""

    def __init__(self, log: list, clock: list) -> None:
        self.log, self.clock, self.t = log, clock, None

    def record(self):
        self.t = self.clock[0]
        self.log.append("record")

    def synchronize(self):
        self.log.append("sync")

    def elapsed_time(self, end):
        return end.t - self.t


def _fake_events():
    log, clock = [], [0.0]
    return log, clock, lambda: _FakeEvent(log, clock)


def test_time_back_to_back_one_interval_over_k_calls():
    from clustertwin.runtime.pipedream.profiler import time_back_to_back

    log, clock, event = _fake_events()

    def step(i):
        log.append(i)
        clock[0] += 2.0 if i < 2 else 3.0  # warm-up calls are slower; they must not count

    seconds = time_back_to_back(step, iterations=5, warmup=2, event=event)
    # warm-up untimed, then one start mark, k calls with no wait between them, one end mark, one wait
    assert log == [0, 1, "record", 2, 3, 4, 5, 6, "record", "sync"]
    assert seconds == pytest.approx(3.0e-3)  # 15 ms over 5 calls, not over 7 and not in ms
    with pytest.raises(ValueError):
        time_back_to_back(step, iterations=0, event=event)


def test_time_passes_times_only_backwards_on_prebuilt_graphs():
    torch = pytest.importorskip("torch")
    from clustertwin.runtime.pipedream.profiler import time_passes

    log, clock, event = _fake_events()

    class Logged(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            log.append("F")
            clock[0] += 1.0
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            log.append("B")
            clock[0] += 4.0
            return grad * 2

    x = torch.randn(3, requires_grad=True)
    fwd, bwd = time_passes(lambda: Logged.apply(x), [x], torch.device("cpu"), 3, 1, event)
    timed_forwards = ["F", "record", "F", "F", "F", "record", "sync"]
    graphs = ["F"] * 4  # built before the backward's start mark, one per backward
    timed_backwards = ["B", "record", "B", "B", "B", "record", "sync"]
    assert log == timed_forwards + graphs + timed_backwards
    assert fwd == pytest.approx(1e-3) and bwd == pytest.approx(4e-3)


def test_profile_chunks_cross_check():
    torch = pytest.importorskip("torch")
    from clustertwin.runtime.pipedream.profiler import profile_chunks
    from torch import nn

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 16))
    target = torch.randn(8, 16)
    loss = (nn.functional.mse_loss, target)
    rows = profile_chunks(model, torch.randn(8, 32), [range(0, 2), [2]], iterations=2, loss=loss)
    assert [(r["first_layer"], r["last_layer"]) for r in rows] == [(0, 1), (2, 2)]
    assert all(r["forward_s"] > 0 and r["backward_s"] > 0 for r in rows)
    with pytest.raises(ValueError, match="consecutive"):
        profile_chunks(model, torch.randn(8, 32), [[0, 2]])
