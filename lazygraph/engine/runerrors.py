"""What a failed or inconsistent step raises: the error names the operator, its operands and
the step (`failed_step`), so the engine can undo what depends on it and name the user's line.
Shared by the host loops (program.py) and the device loop (device_run.py, handed these).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ops.node import Node

if TYPE_CHECKING:
    from lazygraph.engine.program import Step


class EvaluationError(RuntimeError):
    """An operator failed on data only known at run time (e.g. an index out of range)."""


def _further(v: Any, more: tuple, vals: list, nodes: list[Node], step: Step) -> np.ndarray:
    """Store a multi-output step's further values (checked) and return its first."""
    if not isinstance(v, tuple) or len(v) != 1 + len(more):
        raise _mismatch(nodes, step, v, (), None)
    for (slot, shape_of, dtype), x in zip(more, v[1:]):
        if type(x) is not np.ndarray:
            x = np.asarray(x)
        shape = tuple(shape_of(nodes))
        if x.shape != shape or x.dtype != dtype:
            raise _mismatch(nodes, step, x, shape, dtype)
        vals[slot] = x
    return v[0]


def _mismatch(nodes: list[Node], step: Step, v: Any, shape: tuple, dtype: np.dtype | None) -> EvaluationError:
    """A kernel returned something else than the graph recorded: an internal error, named."""
    name = nodes[step.src].op.name if step.src >= 0 else step.name
    if dtype is None:
        what = f"{type(v).__name__} instead of {1 + len(step.more or ())} values"
    else:
        what = f"{np.shape(v)} {getattr(v, 'dtype', type(v).__name__)}, recorded as {shape} {dtype}"
    err = EvaluationError(f"internal error: {name} produced {what}")
    err.failed_step = (step.src, step.outs)
    return err


def _kernel_error(e: Exception, nodes: list[Node], step: Step, vals: list) -> Exception:
    """Name the op and its operands, keeping the exception type for the common cases.

    `failed_step` = (P slot or -1, output slots) tells the caller which step failed, so it can
    undo the writes that depend on it and name the line that recorded it.
    """
    if step.src >= 0:
        node = nodes[step.src]
        name = node.op.name
        shapes = ", ".join(f"{tuple(n.shape)} {n.dtype}" for n in node.inputs)
    else:
        name = "new node"
        shapes = ", ".join(f"{np.shape(vals[i])}" for i in step.ins)
    if getattr(type(e), "keeps_type", False):
        # errors that are the user's to catch by type (a distributed rank that died): as they are
        err = type(e)(*e.args)
        err.failed_step = (step.src, step.outs)
        return err
    cls = (
        type(e) if type(e) in (IndexError, ValueError, TypeError, np.linalg.LinAlgError) else EvaluationError
    )
    err = cls(f"{name} failed at evaluation: {e} (operands: {shapes})")
    err.failed_step = (step.src, step.outs)
    return err
