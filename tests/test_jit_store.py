"""The compiled-kernel store, the compilers, and the JIT's switches and messages."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import lazygraph as lg
from jit import backend, compile_c, kernel, nvrtc, store
from jit.compile_c import CompileError
from jit.fusion import find_regions
from jit.kernel import FusedKernel
from jit.runner import run_graph
from lazygraph.engine.evaluate import schedule

# the CPU backend's machinery: on the cpu device whatever LAZYGRAPH_DEVICE says (conftest.py)
pytestmark = pytest.mark.host_backend


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):  # noqa: ANN001, ANN201
    monkeypatch.setenv("LAZYGRAPH_CACHE_DIR", str(tmp_path))
    backend.get("cpu").drop_loaded()
    return tmp_path


def test_store_round_trip_lives_under_the_cache_dir(cache_dir) -> None:  # noqa: ANN001
    key = store.make_key("src", "cc 1", ["-O3"], "x86")
    path = store.put(key, "ptx", b"binary", {"what": "test"})
    assert str(path).startswith(str(cache_dir / "jit" / "v1"))
    assert store.read(key, "ptx") == b"binary"
    assert not [p for p in path.parent.iterdir() if p.name.startswith(".tmp-")]  # atomic: no leftovers


def test_store_keys_depend_on_source_compiler_options_and_arch() -> None:
    base = store.make_key("src", "cc 1", ["-O3"], "x86")
    assert base != store.make_key("src2", "cc 1", ["-O3"], "x86")
    assert base != store.make_key("src", "cc 2", ["-O3"], "x86")
    assert base != store.make_key("src", "cc 1", ["-O2"], "x86")
    assert base != store.make_key("src", "cc 1", ["-O3"], "arm")


def test_corrupt_entries_are_ignored(cache_dir) -> None:  # noqa: ANN001
    key = store.make_key("corrupt", "cc", [], "x")
    path = store.put(key, "so", b"0123456789", {})
    path.write_bytes(b"0123456780")  # same size, different bytes
    assert store.get(key, "so") is None
    store.put(key, "so", b"0123456789", {})
    (cache_dir / "jit" / "v1" / f"{key}.json").write_text("{not json")
    assert store.get(key, "so") is None
    record = {"version": 999, "key": key}
    (cache_dir / "jit" / "v1" / f"{key}.json").write_text(json.dumps(record))
    assert store.get(key, "so") is None


def _softmax_kernel(n: int = 8) -> tuple[FusedKernel, list]:
    x = lg.asarray(np.linspace(-3, 3, n * 5, dtype=np.float32).reshape(n, 5))
    roots = [lg.softmax(x, axis=1).node]
    (region,) = find_regions(schedule(roots), roots)
    return FusedKernel(region), [c.buffer for c in region.inputs]


def test_a_corrupt_compiled_library_is_rebuilt(cache_dir) -> None:  # noqa: ANN001
    k, vals = _softmax_kernel()
    expected = k.fallback(tuple(vals))[0]
    np.testing.assert_allclose(k(*vals)[0], expected, rtol=1e-6)
    (so,) = [p for p in (cache_dir / "jit" / "v1").iterdir() if p.suffix == ".so"]
    bad = so.with_name("bad.tmp")
    bad.write_bytes(b"garbage")
    os.replace(bad, so)  # a new file: the library loaded from the old one stays mapped
    assert store.get(so.stem, "so") is None
    backend.get("cpu").drop_loaded()
    k2, vals2 = _softmax_kernel()
    np.testing.assert_allclose(k2(*vals2)[0], expected, rtol=1e-6)
    assert so.read_bytes() != b"garbage"


def test_compile_errors_show_numbered_source() -> None:
    with pytest.raises(CompileError) as e:
        backend.get("cpu").compile("void lg_kernel(void) { this is not C; }\n")
    msg = str(e.value)
    assert "   1  void lg_kernel(void) { this is not C; }" in msg
    assert "error" in msg


@pytest.mark.skipif(not nvrtc.available(), reason="pynvrtc / libnvrtc not installed")
def test_nvrtc_compile_errors_show_numbered_source() -> None:
    with pytest.raises(CompileError) as e:
        nvrtc.compile_cuda('extern "C" __global__ void lg_kernel() { undefined_thing(); }\n')
    assert "   1  extern" in str(e.value)


@pytest.mark.skipif(not nvrtc.available(), reason="pynvrtc / libnvrtc not installed")
def test_nvrtc_comes_from_the_pip_wheel_and_targets_an_arch() -> None:
    assert nvrtc.version() >= (11, 0)
    arch, kind = nvrtc.choose_arch()
    assert arch.startswith("-arch=")
    assert kind in ("ptx", "cubin")


def test_debug_level_3_prints_kernel_source_and_search(monkeypatch, capsys) -> None:  # noqa: ANN001
    monkeypatch.setenv("LAZYGRAPH_DEBUG", "3")
    k, vals = _softmax_kernel(11)
    k(*vals)
    err = capsys.readouterr().err
    assert "A*: L0 s1.k0=Blocks" in err
    assert "lg_kernel" in err and "#pragma omp" in err


def test_without_a_compiler_regions_run_on_numpy_with_one_warning(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(compile_c, "available", lambda: False)
    monkeypatch.setattr(kernel, "_warned", False)
    x = lg.asarray(np.arange(12.0).reshape(3, 4))
    y = lg.exp(x) * 2 + 1
    roots = [y.node]
    with pytest.warns(RuntimeWarning, match="no C compiler") as rec:
        (a,) = run_graph(schedule(roots), roots)
        (b,) = run_graph(schedule(roots), roots)
    assert len(rec) == 1
    np.testing.assert_allclose(a, np.exp(np.arange(12.0).reshape(3, 4)) * 2 + 1)
    np.testing.assert_array_equal(a, b)


def test_lazygraph_jit_0_disables(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("LAZYGRAPH_JIT", "0")
    assert not kernel.enabled()
    monkeypatch.setenv("LAZYGRAPH_JIT", "1")
    assert kernel.enabled()


def test_kernels_are_shared_by_structure_not_sizes() -> None:
    def region(n: int):  # noqa: ANN202
        x = lg.asarray(np.ones((n, 3), np.float32))
        roots = [(lg.exp(x) + 1).node]
        (r,) = find_regions(schedule(roots), roots)
        return r

    a, b = kernel.compile_region(region(4)), kernel.compile_region(region(9))
    assert a is b
    assert os.environ.get("OMP_WAIT_POLICY") == "passive" or compile_c.toolchain() is None


def test_kernel_writes_into_a_given_buffer() -> None:
    """out= receives the first output, compiled or op by op; a buffer that does not fit is refused."""
    k, vals = _softmax_kernel()
    expected = k.fallback(tuple(vals))[0]
    out = np.full((8, 5), np.nan, np.float32)
    got = k(*vals, out=out)[0]
    assert got is out
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    out2 = np.full((8, 5), np.nan, np.float32)
    assert k.fallback(tuple(vals), out2)[0] is out2
    np.testing.assert_array_equal(out2, expected)
    with pytest.raises(ValueError, match="out= is"):
        k(*vals, out=np.empty((8, 5), np.float64))
    with pytest.raises(ValueError, match="out= is"):
        k(*vals, out=np.empty((5, 8), np.float32))
    with pytest.raises(ValueError, match="shares memory"):
        k(*vals, out=vals[0])  # the kernel would overwrite what it still reads


def test_the_toolchain_probe_is_stored_and_checked(cache_dir, monkeypatch) -> None:  # noqa: ANN001
    if compile_c.toolchain() is None:
        pytest.fail("this test needs the C compiler the suite compiles kernels with")
    real = compile_c._probe
    calls = []
    monkeypatch.setattr(compile_c, "_probe", lambda: calls.append(1) or real())
    compile_c.toolchain.cache_clear()
    try:
        first = compile_c.toolchain()  # probed, then stored
        compile_c.toolchain.cache_clear()
        assert compile_c.toolchain() == first and len(calls) == 1  # read back: no second probe
        # an entry naming a flag the probe never adds is not used (it would reach the compiler)
        key, cc = compile_c._probe_key()
        bad = dict(first, flags=first["flags"] + ["-fplugin=/tmp/x.so"])
        store.put(key, "tc", json.dumps(bad).encode(), {"probe": "toolchain"})
        compile_c.toolchain.cache_clear()
        assert compile_c.toolchain() == first and len(calls) == 2
    finally:
        compile_c.toolchain.cache_clear()
