"""lazygraph.distributed and nn.DataParallel: programs under `mpiexec -n 2` (tests/distributed_progs/).

Each launch costs about a second, so one launch runs many checks (collectives.py prints one
`ok` line per group of checks on each rank). Skipped only when mpi4py or mpiexec is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import lazygraph as lg

PROGS = Path(__file__).parent / "distributed_progs"


def _mpiexec() -> str | None:
    here = Path(sys.executable).parent / "mpiexec"
    return str(here) if here.exists() else shutil.which("mpiexec")


def _have_mpi4py() -> bool:
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return True


MPIEXEC = _mpiexec()
needs_mpi = pytest.mark.skipif(
    MPIEXEC is None or not _have_mpi4py(),
    reason="needs mpi4py and mpiexec (pip install 'lazygraph[distributed]')",
)


def launch(
    script: str, *args: str, timeout: float = 120, env: dict | None = None, flags: tuple = ()
) -> subprocess.CompletedProcess:
    """`mpiexec -n 2 python3 <script>` with this interpreter; output and status back."""
    cmd = [MPIEXEC, *flags, "-n", "2", sys.executable, str(PROGS / script), *args]
    full = {**os.environ, **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full)


@needs_mpi
def test_collectives_gradients_data_parallel_and_cache() -> None:
    p = launch("collectives.py")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    checks = [
        "all_reduce sum/mean/max/min/prod",
        "broadcast, all_gather (axes), reduce, 0-d/0-size, graph and executor buckets, overlap on/off",
        "gradient of all_reduce(sum) matches finite differences",
        "gradient of all_reduce(mean) matches finite differences",
        "gradient of all_gather(axis=1) matches finite differences",
        "gradient of broadcast(root=1) matches finite differences",
        "gradient of collective_shard(all_gather) matches finite differences",
        "the NCCL path on cuda-emulated (over the MPI transport): values and gradient",
        "the step program posts collectives early and waits late (overlap order)",
        "2 ranks x batch B == 1 process x batch 2B",
        "the training step is one graph, a cache hit from the third step",
    ]
    for rank in (0, 1):
        for c in checks:
            assert f"rank {rank}: ok {c}" in out, f"rank {rank} did not pass {c!r}:\n{out}"
        assert f"rank {rank}: done" in out


@needs_mpi
def test_disagreeing_ranks_fail_on_every_rank_naming_both_digests_and_shapes() -> None:
    p = launch("errors.py", "mismatch", env={"LAZYGRAPH_DIST_TIMEOUT": "20"})
    out = p.stdout + p.stderr
    # each rank names itself first (the two processes' lines may interleave in the pipe)
    pat = r"ranks disagree on the graph's structure at all_reduce \(collective #1\): rank (\d) runs structure (\w+), rank (\d) runs (\w+)"
    found = re.findall(pat, out)
    assert sorted(f[0] for f in found) == ["0", "1"], out
    digests = {f[0]: f[1] for f in found}
    assert all(digests[f[2]] == f[3] for f in found), out
    assert digests["0"] != digests["1"], out
    for me, other in (
        ("0 passes float32 (3,)", "1 passes float32 (4,)"),
        ("1 passes float32 (4,)", "0 passes float32 (3,)"),
    ):
        assert f"all_gather (collective #3): rank {me}, rank {other}" in out, out


@needs_mpi
@pytest.mark.parametrize("how", ["dead", "hung"])
def test_missing_rank_fails_within_the_timeout_naming_it(how: str) -> None:
    # MPICH's mpiexec ends the whole job when a process exits; keep the survivor running
    flags = ("-disable-auto-cleanup",) if how == "dead" else ()
    p = launch("errors.py", how, env={"LAZYGRAPH_DIST_TIMEOUT": "2"}, timeout=60, flags=flags)
    out = p.stdout + p.stderr
    assert "rank 0 waited 2 s at all_reduce (collective #1) for rank(s) 1, which did not arrive" in out, out
    took = float(re.search(r"rank 0: failed after ([\d.]+) s", out).group(1))
    assert 1.9 <= took < 10, out


def test_single_process_identities_and_torchrun_variables_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK")}
    p = subprocess.run(
        [sys.executable, str(PROGS / "single.py")], capture_output=True, text=True, timeout=120, env=env
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "RANK=0 WORLD_SIZE=2 are set but no MPI launcher" in out and "mpiexec -n N" in out, out
    assert "collectives are identities" in out


def test_missing_mpi4py_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    D = lg.distributed
    if D.is_initialized():
        pytest.skip("this process already joined a distributed run")
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # import mpi4py raises ImportError
    with pytest.raises(D.DistributedUnavailable, match=r'pip install "lazygraph\[distributed\]"'):
        D.init(backend="mpi")
    monkeypatch.setenv("PMI_RANK", "0")  # launched by mpiexec, but no mpi4py
    with pytest.raises(D.DistributedUnavailable, match="needs mpi4py"):
        D.init()
    assert not D.is_initialized()


def test_collectives_need_init_and_check_arguments() -> None:
    D = lg.distributed
    if D.is_initialized():
        pytest.skip("this process already joined a distributed run")
    with pytest.raises(RuntimeError, match=r"call lazygraph.distributed.init\(\) first"):
        D.all_reduce(lg.ones(3))
    with pytest.raises(ValueError, match="unknown backend"):
        D.init(backend="gloo")


@needs_mpi
def test_train_mnist_distributed_prints_once_and_exits_as_usual() -> None:
    example = Path(__file__).parent.parent / "examples" / "train_mnist.py"
    args = ["--distributed", "--epochs", "1", "--limit", "256", "--batch-size", "64", "--lr", "3e-3"]
    p = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, str(example), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "LAZYGRAPH_JIT": "0"},  # the C kernels are tested elsewhere; this is the plumbing
    )
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.rstrip().splitlines()
    assert p.stdout.count("epoch 1/1:") == 1 and p.stdout.count("test accuracy:") == 1, (
        p.stdout
    )  # rank 0 only
    assert "2 processes" in lines[0] and lines[-1].startswith("test accuracy: "), p.stdout
    acc = float(lines[-1].split()[-1].rstrip("%"))
    assert acc > 25, p.stdout  # 4 steps from scratch: well above chance (10%)
