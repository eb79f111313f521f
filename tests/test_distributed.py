"""lazygraph.distributed and nn.DataParallel: programs under `mpiexec -n 2`, and as plain processes
with torchrun-style variables over the TCP transport (tests/distributed_progs/).

Each launch costs about a second, so one launch runs many checks (collectives.py prints one
`ok` line per group of checks on each rank). The MPI ones are skipped only when mpi4py or
mpiexec is missing; the TCP ones need neither.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
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
    assert "rank 0: transport mpi" in out, out
    for rank in (0, 1):
        for c in CHECKS:
            assert f"rank {rank}: ok {c}" in out, f"rank {rank} did not pass {c!r}:\n{out}"
        assert f"rank {rank}: done" in out


CHECKS = [
    "all_reduce sum/mean/max/min/prod",
    "broadcast, all_gather (axes), reduce, 0-d/0-size, graph and executor buckets, overlap on/off",
    "gradient of all_reduce(sum) matches finite differences",
    "gradient of all_reduce(mean) matches finite differences",
    "gradient of all_gather(axis=1) matches finite differences",
    "gradient of broadcast(root=1) matches finite differences",
    "gradient of collective_shard(all_gather) matches finite differences",
    "the NCCL path on cuda-emulated (over the CPU transport): values and gradient",
    "the step program posts collectives early and waits late (overlap order)",
    "2 ranks x batch B == 1 process x batch 2B",
    "the training step is one graph, a cache hit from the third step",
]


@needs_mpi
def test_disagreeing_ranks_fail_on_every_rank_naming_both_digests_and_shapes() -> None:
    p = launch("errors.py", "mismatch", env={"LAZYGRAPH_DIST_TIMEOUT": "20"})
    check_mismatch(p.stdout + p.stderr)


def check_mismatch(out: str) -> None:
    """Both ranks name both digests, then both shapes, each with the error's own type."""
    assert out.count("StructureMismatchError: ") == 2 and "EvaluationError" not in out, out
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


def test_single_process_identities_and_incomplete_torchrun_variables_refused() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PMI_RANK", "PMI_SIZE", "PMIX_RANK")}
    p = subprocess.run(
        [sys.executable, str(PROGS / "single.py")], capture_output=True, text=True, timeout=120, env=env
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "the TCP rendezvous needs MASTER_ADDR, MASTER_PORT set" in out and "mpiexec -n N" in out, out
    assert "MASTER_PORT='http' must be a port number" in out, out
    assert "needs RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set" in out, out
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
    with pytest.raises(ValueError, match="unknown backend 'gloo'"):
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


# -- the TCP transport: plain processes with torchrun-style variables, no mpiexec --------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_tcp(
    script: str, *args: str, n: int = 2, env: dict | None = None, timeout: float = 120, hung: tuple = ()
) -> tuple[list[int | None], str]:
    """n plain `python3 <script>` processes with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free
    MASTER_PORT; the ranks in `hung` are killed once the others are done. Exit codes and output."""
    base = {k: v for k, v in os.environ.items() if k not in lg.distributed._MPI_VARS}
    port = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, str(PROGS / script), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**base, **(env or {}), "RANK": str(r), "WORLD_SIZE": str(n)}
            | {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port},
        )
        for r in range(n)
    ]
    outs = [""] * n
    try:
        for r in [r for r in range(n) if r not in hung] + list(hung):
            if r in hung:
                procs[r].kill()
            outs[r] = procs[r].communicate(timeout=timeout)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return [None if r in hung else p.returncode for r, p in enumerate(procs)], "".join(outs)


def test_tcp_collectives_gradients_data_parallel_and_cache() -> None:
    codes, out = launch_tcp("collectives.py")
    assert codes == [0, 0], out
    assert "rank 0: transport tcp" in out and "rank 1: transport tcp" in out, out
    for rank in (0, 1):
        for c in CHECKS:
            assert f"rank {rank}: ok {c}" in out, f"rank {rank} did not pass {c!r} over TCP:\n{out}"
        assert f"rank {rank}: done" in out


def test_tcp_disagreeing_ranks_fail_on_every_rank_naming_both_digests_and_shapes() -> None:
    codes, out = launch_tcp("errors.py", "mismatch", env={"LAZYGRAPH_DIST_TIMEOUT": "20"})
    assert codes == [0, 0], out
    check_mismatch(out)


def test_tcp_dead_rank_is_named_at_once_on_every_other_rank() -> None:
    # 3 ranks: rank 1 exits; rank 0 sees its socket close, and tells rank 2 (which talks to rank 0)
    codes, out = launch_tcp("errors.py", "dead", n=3, env={"LAZYGRAPH_DIST_TIMEOUT": "30"})
    assert codes == [0, 3, 0], out
    for r in (0, 2):
        assert (
            f"rank {r}: RankDiedError: lazygraph.distributed: rank {r} cannot complete all_reduce "
            "(collective #1): rank(s) 1 left the run" in out
        ), out
        took = float(re.search(rf"rank {r}: failed after ([\d.]+) s", out).group(1))
        assert took < 5, out  # the socket's close, not the 30 s deadline


def test_tcp_dead_root_is_named_at_once() -> None:
    codes, out = launch_tcp("errors.py", "dead-root", env={"LAZYGRAPH_DIST_TIMEOUT": "30"})
    assert codes == [3, 0], out
    assert re.search(r"rank 1: RankDiedError: lazygraph.distributed: rank 1 cannot .*rank 0", out), out
    assert float(re.search(r"rank 1: failed after ([\d.]+) s", out).group(1)) < 5, out


def test_tcp_hung_rank_is_named_at_the_deadline() -> None:
    codes, out = launch_tcp("errors.py", "hung", env={"LAZYGRAPH_DIST_TIMEOUT": "2"}, timeout=60, hung=(1,))
    assert codes[0] == 0, out
    assert (
        "rank 0: RankTimeoutError: lazygraph.distributed: rank 0 waited 2 s at all_reduce (collective #1) "
        "for rank(s) 1, which did not arrive" in out
    ), out
    took = float(re.search(r"rank 0: failed after ([\d.]+) s", out).group(1))
    assert 1.9 <= took < 10, out


# torchrun of this interpreter's own PyTorch: the ranks (this interpreter too) use torch's store
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch (torchrun) is not installed")
def test_torchrun_launch_joins_through_its_agent_store() -> None:
    # torchrun's agent serves a store on MASTER_PORT itself: rank 0 publishes its own port there
    env = {k: v for k, v in os.environ.items() if k not in lg.distributed._MPI_VARS}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc-per-node",
            "2",
            "--no-python",
            sys.executable,
            str(PROGS / "errors.py"),
            "mismatch",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    check_mismatch(out)


def test_tcp_frames_round_trip_without_pickle() -> None:
    from lazygraph.distributed.rendezvous import PART, Frame, recv_frame, send_frame

    a, b = socket.socketpair()
    with a, b:
        frames = [
            Frame(PART, 1, 7, 0xABC, 3, "float32", (2, 3), np.arange(6, dtype=np.float32).tobytes()),
            Frame(PART, 5, 8, 0, 0, "", (), b""),
            Frame(PART, 3, 2**40, -1, 0, "complex128", (0, 4), b""),
        ]
        for f in frames:
            send_frame(a, f)
        assert [recv_frame(b) for _ in frames] == frames
        a.close()
        assert recv_frame(b) is None  # the peer closed: None, not an exception


@pytest.mark.parametrize("where", ["start", "wait"])
@pytest.mark.parametrize("cls", ["RankTimeoutError", "StructureMismatchError", "RankDiedError"])
def test_distributed_errors_reach_the_user_as_their_own_type(where: str, cls: str) -> None:
    from lazygraph.array import constant, from_node, record
    from lazygraph.engine import EvaluationError
    from ops import collective

    err = getattr(lg.distributed, cls)
    message = "lazygraph.distributed: rank 0 waited 1 s at all_reduce (collective #1) for rank(s) 1"

    class Failing:
        rank, size = 0, 2

        def start(self, x: object, kind: str, attrs: dict, structure: str) -> object:
            if where == "start":
                raise err(message)
            return np.asarray(x).copy()

        def wait(self, s: object, kind: str) -> object:
            raise err(message)

    collective.set_transport("test-failing", Failing())
    try:
        token = from_node(constant(np.zeros((), np.int8)))
        s = record(
            "collective_start",
            lg.asarray(np.ones(3)),
            token,
            kind="all_reduce",
            world=2,
            transport="test-failing",
            reduction="sum",
        )
        y = record("collective_wait", s, **s.node.attrs)
        t0 = time.perf_counter()
        with pytest.raises(err) as info:
            y.numpy()
        assert time.perf_counter() - t0 < 5
        assert type(info.value) is err and not isinstance(info.value, EvaluationError)
        assert str(info.value).startswith(message), info.value
        assert isinstance(info.value, lg.distributed.DistributedError)
    finally:
        collective.set_transport("test-failing", None)
