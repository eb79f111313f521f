"""The superoptimizer's cost model: fusion, library epilogues, folded weights, the disk store."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ops.settings import SETTINGS
from optimizer.superopt.apply import SGraph
from optimizer.superopt.cost import CostModel, machine_tag

BIG = (512, 256)  # above the JIT's minimum size: elementwise chains fuse


def chain(shape: tuple[int, ...], n: int) -> SGraph:
    """n elementwise ops one after the other on one input."""
    sg = SGraph()
    y = sg.leaf("input", shape, np.float32)
    for k in range(n):
        y = sg.add("tanh" if k % 2 else "exp", [y])
    sg.outputs = [y]
    return sg


def test_a_fused_chain_costs_one_memory_pass() -> None:
    m = CostModel()
    one, three = m.graph_cost(chain(BIG, 1)), m.graph_cost(chain(BIG, 3))
    nbytes = np.prod(BIG) * 4
    assert three == pytest.approx(m.overhead + 2 * nbytes / m.bandwidth)
    assert three == pytest.approx(one)


def test_chains_below_the_jit_threshold_run_op_by_op() -> None:
    m = CostModel()
    with SETTINGS.override(jit_min_size=65536):  # below it, the engine runs regions on NumPy
        assert m.graph_cost(chain((8, 8), 3)) == pytest.approx(3 * m.graph_cost(chain((8, 8), 1)))
    with SETTINGS.override(jit_min_size=1):  # compiled at any size: one launch for the chain
        assert m.graph_cost(chain((8, 8), 3)) == pytest.approx(m.graph_cost(chain((8, 8), 1)))


def conv_relu(bias: bool) -> tuple[SGraph, int]:
    sg = SGraph()
    x = sg.leaf("input", (1, 8, 16, 16), np.float32)
    ins = [x, sg.leaf("weight", (8, 8, 3, 3), np.float32)] + (
        [sg.leaf("weight", (8,), np.float32)] if bias else []
    )
    c = sg.add("conv2d", ins, {"padding": 1})
    sg.outputs = [sg.add("maximum", [c, sg.leaf("scalar", (), np.float32, value=0)])]
    return sg, c


def test_conv_relu_is_one_library_step() -> None:
    m = CostModel()
    sg, c = conv_relu(bias=True)
    assert m.graph_cost(sg) == pytest.approx(m.op_time(sg, c))


def test_matmul_bias_relu_is_one_library_step() -> None:
    sg = SGraph()
    x = sg.leaf("input", (32, 64), np.float32)
    mm = sg.add("matmul", [x, sg.leaf("weight", (64, 16), np.float32)])
    y = sg.add("add", [mm, sg.leaf("weight", (16,), np.float32)])
    y = sg.add("maximum", [y, sg.leaf("scalar", (), np.float32, value=0)])
    sg.outputs = [y]
    m = CostModel()
    assert m.graph_cost(sg) == pytest.approx(m.op_time(sg, mm))


def test_weight_only_subgraphs_are_free() -> None:
    sg = SGraph()
    x = sg.leaf("input", (4, 8), np.float32)
    w = sg.add(
        "concat", [sg.leaf("weight", (8, 3), np.float32), sg.leaf("weight", (8, 5), np.float32)], {"axis": 1}
    )
    mm = sg.add("matmul", [x, w])
    sg.outputs = [mm]
    m = CostModel()
    assert m.graph_cost(sg) == pytest.approx(m.op_time(sg, mm))


def test_unit_costs_count_operator_steps() -> None:
    sg, _ = conv_relu(bias=False)
    assert CostModel("unit").graph_cost(sg) == 2


def test_measured_times_are_cached_on_disk(tmp_path) -> None:
    path = tmp_path / "costs.json"
    sg, c = conv_relu(bias=False)
    m = CostModel("measured", path=path)
    t = m.op_time(sg, c)
    assert t > 0 and m.measured == 1
    m.save()
    data = json.loads(path.read_text())
    assert data["tag"] == machine_tag() and len(data["times"]) == 1
    again = CostModel("measured", path=path)
    assert again.op_time(sg, c) == t and again.measured == 0  # read back, not re-timed


@pytest.mark.parametrize(
    "content", [b"{not json", b'{"tag": "another machine", "times": {"x": 1.0}}', b'{"tag": 3}', b"[]"]
)
def test_corrupt_or_foreign_cost_files_are_ignored(tmp_path, content) -> None:
    path = tmp_path / "costs.json"
    path.write_bytes(content)
    m = CostModel("measured", path=path)
    assert m.times == {}
    sg, c = conv_relu(bias=False)
    m.op_time(sg, c)
    m.save()  # replaced atomically by a good file
    assert json.loads(path.read_text())["tag"] == machine_tag()


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="analytic, measured or unit"):
        CostModel("guess")


def test_a_stored_calibration_is_what_the_analytic_model_uses(tmp_path) -> None:
    """Calibrated constants are measured, stored under the machine tag and read back by analytic
    models; without a store the built-in constants stand (the same costs on every machine)."""
    path = tmp_path / "costs.json"
    plain = CostModel(path=path)
    assert not plain.calibrated and (plain.flops, plain.bandwidth) == (2.0e10, 5.0e9)
    m = CostModel(path=path)
    m.calibrate(plan_step=7e-6)
    assert m.calibrated and m.flops > 0 and m.bandwidth > 0 and m.overhead > 7e-6
    m.save()
    again = CostModel(path=path)
    assert again.calibrated
    fields = ("flops", "bandwidth", "overhead", "conv_flops", "group_flops", "pool_scale")
    assert [getattr(again, f) for f in fields] == [getattr(m, f) for f in fields]
    assert m.group_flops > 0 and m.conv_flops > 0 and m.pool_scale >= 1.0
    sg, _ = conv_relu(bias=False)
    assert again.graph_cost(sg) == pytest.approx(m.graph_cost(sg))
    # a measured model saving its times keeps the stored calibration
    measured = CostModel("measured", path=path)
    measured.op_time(*conv_relu(bias=False))
    measured.save()
    assert CostModel(path=path).overhead == m.overhead
