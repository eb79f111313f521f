"""Run by tests/test_distributed.py under `mpiexec -n 2` and as 2 processes over TCP (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT): collectives against NumPy, gradients against finite
differences, data-parallel training against one process with the whole batch, and the step
graph's cache hits. Prints `ok <check>` per check; any failure exits non-zero."""

from __future__ import annotations

import os
import sys

import numpy as np

import lazygraph as lg
from lazygraph import nn
from lazygraph.array import record

D = lg.distributed
D.init()
R, W = D.rank(), D.world_size()
assert W == 2, f"run with 2 processes (world size {W})"


def say(line: str) -> None:
    """One write per line, so the two ranks' lines never interleave in mpiexec's output."""
    os.write(1, (line + "\n").encode())


def ok(name: str) -> None:
    say(f"rank {R}: ok {name}")


def same(got: object, want: np.ndarray, name: str, tol: float = 0.0) -> None:
    got = np.asarray(got)
    if got.shape != want.shape or got.dtype != want.dtype:
        raise AssertionError(f"{name}: got {got.dtype}{got.shape}, want {want.dtype}{want.shape}")
    if tol:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=name)
    else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def per_rank(shape: tuple, dtype: str, r: int) -> np.ndarray:
    """Rank r's operand (every rank can build every rank's operand: the NumPy reference)."""
    rng = np.random.default_rng(100 + r)
    if np.dtype(dtype).kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if np.dtype(dtype).kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.integers(-5, 6, shape).astype(dtype)


REF = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


def check_reductions() -> None:
    cases = [
        ("float32", (3, 4), ("sum", "mean", "max", "min", "prod")),
        ("float64", (5,), ("sum", "mean", "max")),
        ("int32", (2, 3), ("sum", "max", "min", "prod")),
        ("int64", (4,), ("sum", "mean")),
        ("float16", (3,), ("sum", "mean", "max")),
        ("complex128", (2,), ("sum", "mean")),
        ("bool", (6,), ("max", "min")),
        ("float32", (), ("sum", "mean", "max")),  # 0-d
        ("float32", (0, 3), ("sum", "max")),  # 0-size
    ]
    for dtype, shape, ops in cases:
        xs = [per_rank(shape, dtype, r) for r in range(W)]
        for op in ops:
            want = REF[op](np.stack(xs), axis=0)
            if op != "mean":
                want = want.astype(dtype)
            got = D.all_reduce(lg.asarray(xs[R]), op=op)
            same(
                got.numpy(),
                np.asarray(want),
                f"all_reduce {op} {dtype}{shape}",
                1e-3 if dtype == "float16" else 1e-12 if op == "mean" else 0.0,
            )
    ok("all_reduce sum/mean/max/min/prod over float16/32/64, int32/64, complex, bool, 0-d, 0-size")


def check_movement() -> None:
    for dtype in ("float32", "int64", "bool", "float16"):
        xs = [per_rank((2, 3), dtype, r) for r in range(W)]
        for root in range(W):
            same(
                D.broadcast(lg.asarray(xs[R]), root=root).numpy(), xs[root], f"broadcast {dtype} root {root}"
            )
        for axis in (0, 1, -1):
            same(
                D.all_gather(lg.asarray(xs[R]), axis=axis).numpy(),
                np.concatenate(xs, axis=axis),
                f"all_gather {dtype} {axis}",
            )
        if dtype != "bool":
            red = D.reduce(lg.asarray(xs[R]), root=1).numpy()
            same(red, (sum(xs) if R == 1 else np.zeros_like(xs[0])).astype(dtype), f"reduce {dtype}")
    z = [np.zeros((0, 2), np.float32)] * W
    same(D.all_gather(lg.asarray(z[R])).numpy(), np.zeros((0, 2), np.float32), "all_gather 0-size")
    same(D.broadcast(lg.asarray(np.float64(R + 7))).numpy(), np.asarray(7.0), "broadcast 0-d")
    # several collectives in one graph, bucketed, with overlap on and off
    xs = [[per_rank(s, "float32", r) for s in ((3,), (2, 2), (5,))] for r in range(W)]
    for overlap in (True, False):
        D.set_overlap(overlap)
        for bucket, executor in ((0, 0), (16, 0), (1 << 20, 0), (0, 16), (0, 1 << 20)):
            D.set_bucket_bytes(executor)
            outs = D.all_reduce_coalesced([lg.asarray(a) for a in xs[R]], "sum", bucket_bytes=bucket)
            outs.append(D.all_reduce(lg.asarray(np.arange(3) + R), "mean"))  # another dtype: a new bucket
            outs.append(D.all_reduce(lg.asarray(np.array([True, R == 0])), "max"))
            vals = lg.eval(*outs)
            what = f"graph buckets {bucket}, executor buckets {executor}, overlap {overlap}"
            for k, v in enumerate(vals[:3]):
                same(v, xs[0][k] + xs[1][k], f"coalesced: {what} #{k}")
            same(vals[3], np.arange(3) + 0.5, f"mean of int64 with {what}")
            same(vals[4], np.array([True, True]), f"max of bool with {what}")
    D.set_overlap(True)
    D.set_bucket_bytes(1 << 20)
    ok("broadcast, all_gather (axes), reduce, 0-d/0-size, graph and executor buckets, overlap on/off")


def total(loss: lg.Array) -> float:
    return float(D.all_reduce(loss).numpy())


def fd_check(name: str, f, x0: list[np.ndarray], h: float = 1e-6) -> None:
    """The gradient of sum over ranks of f(x_rank) against central differences."""
    x = lg.asarray(x0[R].copy(), requires_grad=True)
    f(x).backward()
    grads = [np.asarray(g) for g in D.all_gather(lg.asarray(x.grad.numpy()[None])).numpy()]
    for q in range(W):
        for i in np.ndindex(x0[q].shape):
            vals = []
            for s in (h, -h):
                xq = x0[R].copy()
                if R == q:
                    xq[i] += s
                vals.append(total(f(lg.asarray(xq))))
            fd = (vals[0] - vals[1]) / (2 * h)
            if abs(fd - grads[q][i]) > 1e-5 * max(1.0, abs(fd)):
                raise AssertionError(f"{name}: d/dx[rank {q}]{i} = {grads[q][i]}, finite differences {fd}")
    ok(f"gradient of {name} matches finite differences")


def check_gradients() -> None:
    x0 = [np.random.default_rng(7 + r).standard_normal((2, 3)) for r in range(W)]
    c = lg.asarray(np.random.default_rng(50 + R).standard_normal((2, 3)))
    c2 = lg.asarray(np.random.default_rng(60 + R).standard_normal((2, 6)))
    fd_check("all_reduce(sum)", lambda x: (c * D.all_reduce(x * x)).sum(), x0)
    fd_check("all_reduce(mean)", lambda x: (c * lg.sin(D.all_reduce(x, op="mean"))).sum(), x0)
    fd_check("all_gather(axis=1)", lambda x: (c2 * D.all_gather(x * x, axis=1)).sum(), x0)
    fd_check("broadcast(root=1)", lambda x: (c * D.broadcast(x * x, root=1)).sum(), x0)

    def own_block(x: lg.Array) -> lg.Array:  # all_gather then this rank's block: x * x again
        y = D.all_gather(x * x, axis=1)
        return (c * record("collective_shard", y, axis=1, world=W, transport="mpi")).sum()

    fd_check("collective_shard(all_gather)", own_block, x0)


def check_overlap_order() -> None:
    """The last step graph's program posts every collective before the first wait, and runs the
    steps that read no collective's result (backward) before those that do (the updates)."""
    from lazygraph.engine.state import ENGINE

    programs = [(e.last_used, v.program) for e in ENGINE.memory.entries() for v in e.variants]
    with_collectives = [(t, p) for t, p in programs if any(s.name == "collective_start" for s in p.steps)]
    steps = max(with_collectives, key=lambda tp: tp[0])[1].steps  # the last step graph run
    names = [s.name for s in steps]
    first_wait = names.index("collective_wait")
    assert names.count("collective_start") >= 4, names
    assert "collective_start" not in names[first_wait:], names
    producer = {q: i for i, s in enumerate(steps) for q in s.outs}
    late = [False] * len(steps)
    for i, s in enumerate(steps):
        late[i] = s.name == "collective_wait" or any(late[producer[q]] for q in s.ins if q in producer)
    assert all(late[first_wait:]), names  # nothing independent of the collectives waits behind them
    ok("the step program posts collectives early and waits late (overlap order)")


def check_training() -> None:
    B, steps = 8, 5
    rng = np.random.default_rng(3)
    X = rng.standard_normal((steps, W * B, 6)).astype(np.float32)
    Y = rng.integers(0, 4, (steps, W * B))

    def model(seed: int) -> nn.Module:
        lg.manual_seed(seed)
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))

    for name, make_opt in (
        ("SGD", lambda ps: lg.optim.SGD(ps, lr=0.1, momentum=0.9)),
        ("Adam", lambda ps: lg.optim.Adam(ps, lr=1e-2)),
    ):
        for bucket, executor in ((0, 1 << 20), (1 << 20, 0)) if name == "SGD" else ((0, 0), (0, 64)):
            D.set_bucket_bytes(executor)
            dp = nn.DataParallel(model(10 + R), bucket_bytes=bucket)  # replicas start different
            opt = make_opt(dp.parameters())
            hits = []
            for i in range(steps):
                sent = D.stats()
                before = lg.cache.stats(per_entry=False)
                xb, yb = X[i, R * B : (R + 1) * B], Y[i, R * B : (R + 1) * B]
                loss = nn.functional.cross_entropy(dp(lg.asarray(xb)), lg.asarray(yb))
                opt.zero_grad()
                loss.backward()
                opt.step()
                after = lg.cache.stats(per_entry=False)
                hits.append((after["hits"] - before["hits"], after["evaluations"] - before["evaluations"]))
                calls, arrays = D.stats()["calls"] - sent["calls"], D.stats()["arrays"] - sent["arrays"]
                # 4 gradients: one call each, unless a bucket (graph or executor) takes them all
                want = 1 if max(bucket, executor) >= 1 << 20 else 4
                if (calls, arrays) != (want, 4 if bucket == 0 else want):
                    raise AssertionError(
                        f"{name} buckets {bucket}/{executor}: {calls} calls for {arrays} arrays"
                    )
            # one graph per step (forward, backward, all-reduce, update); a hit from the third on
            if any(h != (1, 1) for h in hits[2:]) or any(e != 1 for _, e in hits):
                raise AssertionError(f"{name}: (hits, evaluations) per step {hits}")
            mine = dp.module.state_dict()
            ref = model(10)  # rank 0's initial weights, trained on the whole batch
            ropt = make_opt(ref.parameters())
            for i in range(steps):
                loss = nn.functional.cross_entropy(ref(lg.asarray(X[i])), lg.asarray(Y[i]))
                ropt.zero_grad()
                loss.backward()
                ropt.step()
            for k, v in ref.state_dict().items():
                np.testing.assert_allclose(mine[k], v, rtol=2e-5, atol=2e-6, err_msg=f"{name} {k}")
    D.set_bucket_bytes(1 << 20)
    check_overlap_order()
    ok("2 ranks x batch B == 1 process x batch 2B (SGD momentum, Adam; graph, executor and no buckets)")
    ok("the training step is one graph, a cache hit from the third step on every rank")


def check_emulated_nccl() -> None:
    dev = "cuda-emulated"
    xs = [per_rank((2, 3), "float32", r) for r in range(W)]
    y = D.all_reduce(lg.asarray(xs[R], device=dev) * 2.0, op="mean")
    assert y.node.inputs[0].attrs["transport"] == "nccl", y.node.inputs[0].attrs
    assert y.device == dev
    same(y.numpy(), (xs[0] + xs[1]).astype(np.float32), "all_reduce mean on cuda-emulated", 1e-6)
    same(
        D.all_gather(lg.asarray(xs[R], device=dev)).numpy(), np.concatenate(xs), "all_gather on cuda-emulated"
    )
    w = lg.asarray(np.full(3, R + 1.0, np.float32), device=dev, requires_grad=True)
    (D.all_gather(w * w) * lg.asarray(np.arange(6, dtype=np.float32), device=dev)).sum().backward()
    # d/dw_r of sum over ranks of sum(c * gather(w*w)) = W * c[block r] * 2 w_r
    same(
        w.grad.numpy(),
        (W * np.arange(6)[R * 3 : R * 3 + 3] * 2 * (R + 1)).astype(np.float32),
        "grad on cuda-emulated",
    )
    ok("the NCCL path on cuda-emulated (over the CPU transport): values and gradient")


say(f"rank {R}: transport {D.backend()}")
check_reductions()
check_movement()
check_emulated_nccl()
check_gradients()
check_training()
D.barrier()
say(f"rank {R}: done")
sys.exit(0)
