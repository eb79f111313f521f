"""Random-program fuzzer: lazygraph against the same program run eagerly on NumPy.

A hypothesis state machine keeps a pool of variables. Each variable is held twice: as a
lazygraph `Array` and as the NumPy array produced by running the same operations eagerly
(its "twin"). Views are kept AS VIEWS on both sides (`vn = xn[1:, ::2]`), so in-place
writes through them alias exactly as they do in NumPy. Steps create arrays, apply
elementwise / reduction / matmul / shape / indexing operations, write in place (`v += x`,
`a[idx] = value`, `out=`), copy, and hit evaluation points at random moments; after
every evaluation point the evaluated values, dtypes and shapes are compared with NumPy,
and at the end every variable is compared.

Floating point. lazygraph may legitimately run a reduction or a BLAS product in another
memory layout (so another summation order) than NumPy, and SIMD transcendental functions
may differ in the last ulp. To keep comparisons meaningful every float variable carries
`err`, a bound on |lazygraph - numpy|: 0 for values that are bit-identical by
construction (data are multiples of 1/4; sums, products and matmuls of such "nice"
values are exact), and a propagated bound once a rounding step (exp, divide, mean, ...)
was involved. Discontinuous operations (comparisons, floor, casts to int, masks, argmax)
are only applied to err == 0 inputs, and integer programs stay overflow-free.
"""

from __future__ import annotations

import contextlib
import io
import math
import operator
import os
import warnings
from collections.abc import Callable

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
from _support import evaluations
from hypothesis import HealthCheck, note, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

import lazygraph as lg
from lazygraph.array import Scalar

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

DTYPES = [np.dtype(t) for t in (np.bool_, np.int32, np.int64, np.float32, np.float64)]
MAX_POOL = 16
EPS = {np.dtype(np.float16): 2.0**-10, np.dtype(np.float32): 2.0**-23, np.dtype(np.float64): 2.0**-52}
INT_LIMIT = 2**30  # bound on any intermediate integer: no overflow in int32
INT_KEEP = 2**16  # integer results larger than this are not kept (they would grow)
ERRORS = (TypeError, ValueError, IndexError, OverflowError)
DEPRECATED = DeprecationWarning  # NumPy still accepts it, with a warning: no expectation either way


# ---------------------------------------------------------------------------------------
# value analysis of NumPy twins


def mag(a) -> float:
    """Largest finite |value| (0 for empty arrays)."""
    a = np.asarray(a)
    if a.size == 0:
        return 0.0
    f = a.astype(np.float64)
    f = f[np.isfinite(f)]
    return float(np.abs(f).max()) if f.size else 0.0


def all_finite(a) -> bool:
    a = np.asarray(a)
    return a.dtype.kind != "f" or bool(np.isfinite(a).all())


def nice(a) -> bool:
    """Finite values are multiples of 1/16 with |v| <= 64: + - * and small sums are exact."""
    a = np.asarray(a)
    if a.dtype.kind == "b":
        return True
    if a.dtype == np.float16:
        return False
    f = a.astype(np.float64)
    f = f[np.isfinite(f)]
    return bool(np.all(np.abs(f) <= 64) and np.all(f * 16 == np.floor(f * 16)))


def min_abs(a) -> float:
    a = np.abs(np.asarray(a, dtype=np.float64))
    return float(a.min()) if a.size else math.inf


def eps_of(dtype) -> float:
    return EPS.get(np.dtype(dtype), 0.0)


# Operator kinds for the error model.
SELECT, ADD, MUL, DIV, DISC, SMOOTH, EXP, SING, SQUARE = (
    "select",
    "add",
    "mul",
    "div",
    "disc",
    "smooth",
    "exp",
    "sing",
    "square",
)


def op_err(kind: str, ins: list, out, count: int = 1, power: int = 0) -> float | None:
    """Bound on |lazygraph - numpy| of `out`, or None when the step should not be kept.

    `ins` are (numpy value, err) pairs; `count` is the number of terms per output element
    of a reduction or contraction.
    """
    out = np.asarray(out)
    errs = [e for _, e in ins]
    tainted = max(errs, default=0.0) > 0
    if tainted and (not all(all_finite(x) for x, _ in ins) or not all_finite(out)):
        return None
    if out.dtype.kind in "biu":
        # Exact results of discontinuous functions: only of bit-identical inputs.
        return None if tainted else 0.0
    allnice = all(nice(x) for x, _ in ins) and out.dtype != np.float16
    exact = not tainted and allnice
    eps = eps_of(out.dtype)
    mo = mag(out)
    ms = [mag(x) for x, _ in ins]
    if kind == SELECT:
        return max(errs, default=0.0)
    if kind == DISC:
        return None if tainted else 0.0
    if kind == ADD:
        return 0.0 if exact else sum(errs) + 2 * eps * mo
    if kind in (MUL, SQUARE):
        (ma, ea), (mb, eb) = (ms[0], errs[0]), (ms[-1], errs[-1])
        return 0.0 if exact else ea * mb + eb * ma + ea * eb + 2 * eps * mo
    if kind == "pow":
        (ma, ea) = ms[0], errs[0]
        if power == 0:
            return 0.0
        if power == 1:
            return ea
        if exact and (power == 2 or out.dtype == np.float64):
            return 0.0
        return power * ea * (ma + ea) ** (power - 1) + 4 * eps * mo
    if kind == DIV:
        ea, eb = errs
        if eb > 0:
            return None
        if ea > 0:
            m = min_abs(ins[1][0])
            return None if m == 0 else ea / m + 2 * eps * mo
        return 2 * eps * mo
    if kind == EXP:
        if ms[0] > 20:
            return None
        return 1.1 * errs[0] * mo + 4 * eps * max(mo, 1.0)
    if kind == SMOOTH:
        if ms[0] > 1e4:
            return None
        return errs[0] + 4 * eps * max(mo, 1.0)
    if kind == SING:
        return None if tainted else 4 * eps * max(mo, 1.0)
    if kind == "cast":
        return 0.0 if exact else errs[0] + 2 * eps * mo
    if kind == "sum":
        return 0.0 if exact else count * errs[0] + 2 * count * count * eps * ms[0] + 2 * eps * mo
    if kind == "mean":
        base = 0.0 if exact else count * errs[0] + 2 * count * count * eps * ms[0]
        return base / max(count, 1) + 2 * eps * mo
    if kind in ("var", "std"):
        ea, ma = errs[0], ms[0]
        v = 4 * ma * ea + 2 * ea * ea + 8 * (count + 2) * eps * (2 * ma + 1) ** 2 + eps
        return v if kind == "var" else math.sqrt(v) + 4 * eps * max(mo, 1.0)
    if kind == "prod":
        if tainted:
            return None
        return 0.0 if allnice and count <= 2 else 4 * max(count, 1) * eps * mo
    if kind == "matmul":
        if not all(all_finite(x) for x, _ in ins):
            return None  # BLAS and NumPy's loops may treat inf * 0 differently
        (ma, ea), (mb, eb) = (ms[0], errs[0]), (ms[1], errs[1])
        if exact:
            return 0.0
        return count * (ea * mb + eb * ma + ea * eb) + 2 * count * count * eps * ma * mb + 2 * eps * mo
    raise AssertionError(f"unknown kind {kind}")


def int_bound(kind: str, ins: list, count: int = 1, power: int = 0) -> float:
    """A bound on every intermediate integer of an operation (overflow check)."""
    ms = [mag(x) for x, _ in ins]
    if kind == ADD:
        return sum(ms)
    if kind in (MUL, SQUARE, "matmul"):
        return ms[0] * ms[-1] * max(count, 1)
    if kind == "pow":
        return ms[0] ** max(power, 1)
    if kind == "shift":
        return ms[0] * 2**8
    if kind in ("sum", "mean", "var", "std"):
        return max(count, 1) * ms[0] * (ms[0] + 1)
    if kind == "prod":
        return max(ms[0], 1.0) ** max(count, 1)
    return 2 * max(ms, default=0.0) + 1


# ---------------------------------------------------------------------------------------
# operator tables: name -> (numpy function, Python operator or None, error kind)

BINARY = {
    "add": (np.add, operator.add, ADD),
    "subtract": (np.subtract, operator.sub, ADD),
    "multiply": (np.multiply, operator.mul, MUL),
    "divide": (np.divide, operator.truediv, DIV),
    "floor_divide": (np.floor_divide, operator.floordiv, DISC),
    "remainder": (np.remainder, operator.mod, DISC),
    "maximum": (np.maximum, None, SELECT),
    "minimum": (np.minimum, None, SELECT),
    "equal": (np.equal, operator.eq, DISC),
    "not_equal": (np.not_equal, operator.ne, DISC),
    "less": (np.less, operator.lt, DISC),
    "less_equal": (np.less_equal, operator.le, DISC),
    "greater": (np.greater, operator.gt, DISC),
    "greater_equal": (np.greater_equal, operator.ge, DISC),
    "logical_and": (np.logical_and, None, DISC),
    "logical_or": (np.logical_or, None, DISC),
    "logical_xor": (np.logical_xor, None, DISC),
    "bitwise_and": (np.bitwise_and, operator.and_, DISC),
    "bitwise_or": (np.bitwise_or, operator.or_, DISC),
    "bitwise_xor": (np.bitwise_xor, operator.xor, DISC),
    "bitwise_left_shift": (np.left_shift, operator.lshift, "shift"),
    "bitwise_right_shift": (np.right_shift, operator.rshift, "shift"),
    "atan2": (np.arctan2, None, SING),
}

INPLACE = {
    "add": operator.iadd,
    "subtract": operator.isub,
    "multiply": operator.imul,
    "divide": operator.itruediv,
    "floor_divide": operator.ifloordiv,
    "remainder": operator.imod,
    "bitwise_and": operator.iand,
    "bitwise_or": operator.ior,
    "bitwise_xor": operator.ixor,
    "bitwise_left_shift": operator.ilshift,
    "bitwise_right_shift": operator.irshift,
}


def _float_dtype_of(x):
    return np.exp(np.zeros((), dtype=np.asarray(x).dtype)).dtype


def _np_sigmoid(x):
    t = _float_dtype_of(x)
    xf = np.asarray(x).astype(t)
    return np.asarray(1 / (1 + np.exp(-xf))).astype(t)


_erf = np.vectorize(math.erf, otypes=[np.float64])


def _np_erf(x):
    t = _float_dtype_of(x)
    return np.asarray(_erf(np.asarray(x, dtype=np.float64))).astype(t)


UNARY = {
    "negative": (np.negative, operator.neg, SELECT),
    "positive": (np.positive, operator.pos, SELECT),
    "abs": (np.abs, abs, SELECT),
    "square": (np.square, None, SQUARE),
    "exp": (np.exp, None, EXP),
    "tanh": (np.tanh, None, SMOOTH),
    "sin": (np.sin, None, SMOOTH),
    "cos": (np.cos, None, SMOOTH),
    "atan": (np.arctan, None, SMOOTH),
    "sigmoid": (_np_sigmoid, None, SMOOTH),
    "erf": (_np_erf, None, SMOOTH),
    "sqrt": (np.sqrt, None, SING),
    "log": (np.log, None, SING),
    "log1p": (np.log1p, None, SING),
    "reciprocal": (np.reciprocal, None, SING),
    "floor": (np.floor, None, DISC),
    "ceil": (np.ceil, None, DISC),
    "trunc": (np.trunc, None, DISC),
    "sign": (np.sign, None, DISC),
    "isnan": (np.isnan, None, DISC),
    "isfinite": (np.isfinite, None, DISC),
    "isinf": (np.isinf, None, DISC),
    "logical_not": (np.logical_not, None, DISC),
    "bitwise_invert": (np.invert, operator.invert, DISC),
}
NO_UFUNC = {"sigmoid", "erf"}

REDUCTIONS = {
    "sum": "sum",
    "prod": "prod",
    "mean": "mean",
    "var": "var",
    "std": "std",
    "max": SELECT,
    "min": SELECT,
    "any": DISC,
    "all": DISC,
}


# ---------------------------------------------------------------------------------------
# strategies


def float_elements():
    return st.integers(-40, 40).map(lambda k: k / 4)


def elements_for(dtype):
    if dtype.kind == "b":
        return st.booleans()
    if dtype.kind == "i":
        return st.integers(-10, 10)
    return float_elements()


shapes = st.lists(st.sampled_from([1, 2, 3, 4, 0, 2, 3, 1]), max_size=3).map(tuple)


def py_scalars(kind: str | None = None):
    options = {
        "b": st.booleans(),
        "i": st.integers(-5, 5),
        "f": st.integers(-20, 20).map(lambda k: k / 4),
    }
    if kind is not None:
        return options[kind]
    return st.one_of(options["b"], options["i"], options["f"])


def draw_array(data, dtype, shape):
    arr = data.draw(hnp.arrays(dtype, shape, elements=elements_for(dtype)), label="data")
    if dtype.kind == "f" and arr.size and data.draw(st.integers(0, 9), label="special") == 0:
        special = data.draw(st.sampled_from([np.nan, np.inf, -np.inf, -0.0]), label="value")
        arr.reshape(-1)[data.draw(st.integers(0, arr.size - 1), label="at")] = special
    return arr


def fits_into(shape, target) -> bool:
    """`shape` broadcasts to exactly `target`."""
    try:
        return tuple(np.broadcast_shapes(shape, target)) == tuple(target)
    except ValueError:
        return False


def fits_value(vshape, target) -> bool:
    """NumPy's rule for assigned values: leading unit dimensions may be dropped."""
    vshape = tuple(vshape)
    while len(vshape) > len(target) and vshape[0] == 1:
        vshape = vshape[1:]
    return fits_into(vshape, target)


def broadcasts(a, b) -> bool:
    try:
        np.broadcast_shapes(a, b)
        return True
    except ValueError:
        return False


def draw_compatible_shape(data, target, grow: bool = False):
    """A shape that broadcasts into `target` (or, with grow, together with it)."""
    n = data.draw(st.integers(0, len(target)), label="suffix")
    shape = [d if data.draw(st.booleans(), label="keep") else 1 for d in target[len(target) - n :]]
    if grow and data.draw(st.integers(0, 3), label="grow") == 0:
        shape = [data.draw(st.integers(1, 3), label="lead")] + ([1] * (len(target) - n)) + shape
    return tuple(shape)


def draw_basic_key(data, shape, oob_ok=True):
    """A basic index: ints, slices (negative steps, out-of-range bounds), None, Ellipsis."""
    ndim = len(shape)
    n = data.draw(st.integers(0, ndim), label="n_items")
    ell = data.draw(st.one_of(st.none(), st.integers(0, n)), label="ellipsis_at")
    split = n if ell is None else ell
    dims = list(range(split)) + list(range(ndim - (n - split), ndim))
    items = []
    for d in dims:
        size = shape[d]
        kind = data.draw(st.sampled_from(["int", "slice", "slice", "all"]), label="item")
        if kind == "int" and size > 0:
            lo, hi = (
                (-size - 1, size) if (oob_ok and data.draw(st.integers(0, 19)) == 0) else (-size, size - 1)
            )
            items.append(data.draw(st.integers(lo, hi), label="int"))
        elif kind == "all":
            items.append(slice(None))
        else:
            bound = st.one_of(st.none(), st.integers(-size - 2, size + 2))
            step = st.one_of(st.none(), st.sampled_from([1, 2, 3, -1, -2, -3]))
            items.append(slice(data.draw(bound), data.draw(bound), data.draw(step)))
    if ell is not None:
        items.insert(ell, Ellipsis)
    for _ in range(data.draw(st.integers(0, 2), label="n_none")):
        items.insert(data.draw(st.integers(0, len(items)), label="none_at"), None)
    if len(items) == 1 and data.draw(st.booleans(), label="bare"):
        return items[0]
    return tuple(items)


def draw_int_index(data, size, unique, shape=None):
    """An integer index array for an axis of `size` (negative indices included)."""
    if size == 0:
        return np.zeros((0,), dtype=np.intp)
    if unique:
        k = data.draw(st.integers(0, size), label="k")
        perm = data.draw(st.permutations(range(size)), label="perm")[:k]
        return np.array([i - size if data.draw(st.booleans()) else i for i in perm], dtype=np.intp)
    if shape is None:
        shape = data.draw(st.sampled_from([(0,), (1,), (2,), (3,), (2, 2), (1, 3)]), label="ishape")
    dtype = data.draw(st.sampled_from([np.int64, np.int32, np.intp]), label="idtype")
    return data.draw(hnp.arrays(dtype, shape, elements=st.integers(-size, size - 1)), label="index")


def draw_adv_key(data, shape, for_write):
    """An advanced index: integer arrays (with slices and ints) or a boolean mask."""
    ndim = len(shape)
    if ndim == 0:
        return None
    forms = ["int1", "int_axis", "int_mixed", "bool_full", "bool_prefix"]
    if not for_write:
        forms += ["int_pair", "int_split"]
    form = data.draw(st.sampled_from(forms), label="adv_form")
    if form == "int1":
        return draw_int_index(data, shape[0], for_write)
    if form == "int_axis":
        d = data.draw(st.integers(0, ndim - 1), label="axis")
        return (slice(None),) * d + (draw_int_index(data, shape[d], for_write),)
    if form == "int_mixed" and ndim >= 2 and shape[0] > 0:
        i = data.draw(st.integers(-shape[0], shape[0] - 1), label="int")
        return (i, draw_int_index(data, shape[1], for_write))
    if form == "int_pair" and ndim >= 2:
        ishape = data.draw(st.sampled_from([(1,), (2,), (2, 2), (0,)]), label="ishape")
        return (draw_int_index(data, shape[0], False, ishape), draw_int_index(data, shape[1], False, ishape))
    if form == "int_split" and ndim >= 3:
        a = draw_int_index(data, shape[0], False, (2,))
        return (a, slice(None, None, -1), draw_int_index(data, shape[2], False, (2,)))
    if form == "bool_prefix" and ndim >= 2:
        k = data.draw(st.integers(1, ndim - 1), label="k")
        mask = data.draw(hnp.arrays(np.bool_, shape[:k]), label="mask")
        return (mask, Ellipsis) if data.draw(st.booleans()) else mask
    mask = data.draw(hnp.arrays(np.bool_, shape), label="mask")
    if data.draw(st.integers(0, 9), label="bad_mask") == 0 and shape[-1] > 0:
        mask = mask[..., :-1]  # shape mismatch: IndexError on both sides
    return mask


def reshape_targets(size):
    """Candidate shapes with this size (and a few invalid ones)."""
    out = [(size,), (-1,), (1, size), (size, 1), (1, -1)]
    for a in range(2, size + 1):
        if size % a == 0:
            b = size // a
            out += [(a, b), (b, a), (a, -1), (a, 1, b)]
            for c in range(2, b + 1):
                if b % c == 0:
                    out.append((a, c, b // c))
    if size == 1:
        out += [(), (1, 1, 1)]
    if size == 0:
        out += [(0, 3), (2, 0), (0, 1, 2)]
    out.append((size + 1,))  # invalid: ValueError on both sides
    return out


# ---------------------------------------------------------------------------------------
# the machine


class Var:
    """One program variable: the lazy array, its NumPy twin and its error bound."""

    __slots__ = ("name", "a", "n", "err")

    def __init__(self, name, a, n, err):
        self.name, self.a, self.n, self.err = name, a, n, err

    @property
    def shape(self):
        return self.n.shape

    def __repr__(self):
        return self.name


def _family_ok(np_exc, lg_exc) -> bool:
    if isinstance(np_exc, np.exceptions.AxisError):
        return isinstance(lg_exc, (IndexError, ValueError))
    for fam in (OverflowError, TypeError, IndexError, ValueError):
        if isinstance(np_exc, fam):
            return isinstance(lg_exc, fam)
    return isinstance(lg_exc, type(np_exc))


@contextlib.contextmanager
def quiet():
    """NumPy without floating-point warnings; its deprecations raise (and skip the step)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        warnings.simplefilter("error", DeprecationWarning)
        yield


def numpy_write(
    v: Var, apply: Callable[[np.ndarray], object]
) -> tuple[np.ndarray | None, BaseException | None] | None:
    """NumPy's answer to a write into v: (v's values after it, None) or (None, NumPy's error),
    tried on a copy (a read-only v on itself: it must refuse); None where NumPy deprecates it."""
    with quiet():
        try:
            if v.n.flags.writeable:
                trial = v.n.copy()
                apply(trial)
                return trial, None
            apply(v.n)
            raise AssertionError("NumPy wrote into a read-only array")
        except ERRORS as e:
            return None, e
        except DEPRECATED:
            return None


def refused_alike(code: str, n_exc: BaseException, v: Var, lg_apply: Callable[[], object]) -> None:
    """NumPy refused a write: lazygraph refuses it with the same family of error, while recording;
    a NaN/inf stored into an integer-indexed element is the documented exception."""
    before = evaluations()
    try:
        lg_apply()
    except Exception as e:
        assert _family_ok(n_exc, e), (
            f"{code}: NumPy raises {type(n_exc).__name__} ({n_exc}) but lazygraph {type(e).__name__} ({e})"
        )
        assert evaluations() == before, f"{code}: the error was not raised at record time"
        note(f"# {code} -> {type(e).__name__} (as NumPy)")
        return
    if isinstance(n_exc, (ValueError, OverflowError)) and "cannot convert float" in str(n_exc):
        # NumPy's `a[i]` is a scalar whose NaN/inf setitem refuses; lazygraph's is a lazy
        # 0-d value known only at evaluation (docs/numpy.md, "Values decided while recording")
        note(f"# {code} -> stored (NumPy: {n_exc}; a documented difference)")
        with quiet():  # NumPy's side takes what lazygraph stored (its array cast), views too
            v.n[...] = v.a.numpy()
        return
    raise AssertionError(f"{code}: NumPy raises {type(n_exc).__name__} ({n_exc}) but lazygraph accepted it")


def kernels() -> int:
    return lg.debug.evaluation_stats()["kernels"]


def fmt(x) -> str:
    if isinstance(x, Var):
        return x.name
    if isinstance(x, np.ndarray):
        return f"np.{x!r}".replace("\n", "")
    if isinstance(x, lg.Array):
        return "lg.asarray(...)"
    return repr(x)


class LazyProgram(RuleBasedStateMachine):
    """Pool of (lazygraph, NumPy) twins driven through random programs."""

    def __init__(self):
        super().__init__()
        self.pool: list[Var] = []
        self.counter = 0

    # -- bookkeeping ---------------------------------------------------------------------

    def adopt(self, a, n, err, code) -> Var | None:
        """Check record-time metadata; keep the pair as a new variable unless err is None."""
        n = np.asarray(n)
        assert isinstance(a, lg.Array), f"{code}: returned {type(a).__name__}, not a lazygraph Array"
        assert a.shape == n.shape, f"{code}: lazygraph shape {a.shape} != numpy {n.shape}"
        assert a.dtype == n.dtype, f"{code}: lazygraph dtype {a.dtype} != numpy {n.dtype}"
        if err is None:
            note(f"# {code}  (recorded, not kept)")
            return None
        self.counter += 1
        v = Var(f"v{self.counter}", a, n, err)
        note(f"{v.name} = {code}" + (f"    # err<={err:.3g}" if err else ""))
        self.pool.append(v)
        if len(self.pool) > MAX_POOL:
            old = self.pool.pop(0)
            note(f"del {old.name}")
        return v

    def check(self, v: Var, got, how: str = "numpy()"):
        """Compare an evaluated value with the twin."""
        got = np.asarray(got)
        ctx = f"{v.name}.{how}"
        assert got.shape == v.n.shape, f"{ctx}: shape {got.shape} != numpy {v.n.shape}"
        assert got.dtype == v.n.dtype, f"{ctx}: dtype {got.dtype} != numpy {v.n.dtype}"
        if got.dtype.kind in "fc":
            np.testing.assert_allclose(
                got, v.n, rtol=1e-5, atol=1e-6 + 2 * v.err, equal_nan=True, err_msg=ctx
            )
        else:
            np.testing.assert_array_equal(got, v.n, err_msg=ctx)

    def pick(self, data, pred=None, label="var") -> Var | None:
        cands = [v for v in self.pool if pred is None or pred(v)]
        if not cands:
            return None
        return data.draw(st.sampled_from(cands), label=label)

    def fresh(self, data, shape, dtype=None) -> Var:
        if dtype is None:
            dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        arr = draw_array(data, np.dtype(dtype), shape)
        return self.adopt(lg.asarray(arr), arr.copy(), 0.0, f"lg.asarray({fmt(arr)})")

    def operand(self, data, target, grow=True, exact=False, into=None):
        """(lazy operand, numpy operand, err, text): pool var, scalar, constant or fresh.

        With `into` (an in-place target dtype) the operand's dtype usually casts to it.
        """
        choice = data.draw(
            st.sampled_from(["compat", "compat", "scalar", "fresh", "const", "any"]), label="operand"
        )
        castable = into is not None and data.draw(st.integers(0, 4), label="castable") > 0
        dtypes = [d for d in DTYPES if np.can_cast(d, into, "same_kind")] if castable else DTYPES
        kinds = list({"b": "b", "i": "bi", "u": "bi"}.get(into.kind, "bif")) if castable else None

        def ok(w):
            return (not exact or w.err == 0) and (not castable or w.n.dtype in dtypes)

        def scalar():
            kind = data.draw(st.sampled_from(kinds), label="kind") if kinds else None
            s = data.draw(py_scalars(kind), label="scalar")
            return s, s, 0.0, repr(s)

        if choice == "scalar":
            return scalar()
        if choice in ("fresh", "const"):
            shape = draw_compatible_shape(data, target, grow)
            dtype = data.draw(st.sampled_from(dtypes), label="dtype")
            if choice == "const":
                arr = draw_array(data, dtype, shape)
                return arr, arr, 0.0, fmt(arr)
            v = self.fresh(data, shape, dtype)
            return v.a, v.n, 0.0, v.name
        if choice == "compat":
            v = self.pick(
                data,
                lambda w: (fits_into(w.shape, target) if not grow else broadcasts(w.shape, target)) and ok(w),
            )
        else:
            v = self.pick(data, ok)
        if v is None:
            return scalar()
        return v.a, v.n, v.err, v.name

    def written(self, target_np, err):
        """A write happened to target_np's memory: every aliasing variable may now carry err."""
        for o in self.pool:
            if np.may_share_memory(o.n, target_np):
                o.err = max(o.err, err)

    def record(self, code, lg_fn, np_fn, kind_fn, allow_eval=False):
        """Run NumPy eagerly, record in lazygraph; if NumPy refuses, lazygraph must refuse now.

        kind_fn(np_result) gives the err of the result (None: don't keep it).
        """
        with quiet():
            try:
                n, n_exc = np_fn(), None
            except ERRORS as e:
                n, n_exc = None, e
            except DEPRECATED:
                return None
        before = evaluations()
        try:
            a = lg_fn()
        except Exception as e:
            if n_exc is None:
                raise AssertionError(
                    f"{code}: NumPy accepts it but lazygraph raised {type(e).__name__}: {e}"
                ) from e
            assert _family_ok(n_exc, e), (
                f"{code}: NumPy raises {type(n_exc).__name__} ({n_exc}) but lazygraph {type(e).__name__} ({e})"
            )
            if not allow_eval:
                assert evaluations() == before, f"{code}: the error was not raised at record time"
            note(f"# {code} -> {type(e).__name__} (as NumPy)")
            return None
        if n_exc is not None:
            raise AssertionError(
                f"{code}: NumPy raises {type(n_exc).__name__} ({n_exc}) but lazygraph recorded it"
            )
        if not allow_eval:
            assert evaluations() == before, f"{code}: recording evaluated the graph"
        return self.adopt(a, n, kind_fn(np.asarray(n)), code)

    # -- creation ------------------------------------------------------------------------

    @initialize(data=st.data())
    def start(self, data):
        for _ in range(2):
            self.fresh(data, data.draw(shapes, label="shape"))

    @rule(data=st.data())
    def create(self, data):
        shape = data.draw(shapes, label="shape")
        dtype = data.draw(st.sampled_from(DTYPES), label="dtype")
        form = data.draw(
            st.sampled_from(["asarray", "asarray", "list", "full", "zeros", "arange", "eye"]), label="form"
        )
        if form == "asarray":
            self.fresh(data, shape, dtype)
        elif form == "list":
            arr = draw_array(data, dtype, shape)
            lst = arr.tolist()
            self.adopt(
                lg.asarray(lst, dtype=dtype),
                np.asarray(lst, dtype=dtype),
                0.0,
                f"lg.asarray({lst!r}, dtype={dtype})",
            )
        elif form == "full":
            fill = data.draw(py_scalars(dtype.kind), label="fill")
            self.adopt(
                lg.full(shape, fill, dtype=dtype),
                np.full(shape, fill, dtype=dtype),
                0.0,
                f"lg.full({shape}, {fill!r}, dtype={dtype})",
            )
        elif form == "zeros":
            fn = data.draw(st.sampled_from(["zeros", "ones"]))
            self.adopt(
                getattr(lg, fn)(shape, dtype=dtype),
                getattr(np, fn)(shape, dtype=dtype),
                0.0,
                f"lg.{fn}({shape}, dtype={dtype})",
            )
        elif form == "arange":
            k = data.draw(st.integers(0, 6), label="n")
            dt = data.draw(st.sampled_from([None, np.int32, np.float64]), label="adtype")
            self.adopt(lg.arange(k, dtype=dt), np.arange(k, dtype=dt), 0.0, f"lg.arange({k}, dtype={dt})")
        else:
            r, c = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 4))
            k = data.draw(st.integers(-2, 2))
            self.adopt(
                lg.eye(r, c, k=k, dtype=dtype),
                np.eye(r, c, k=k, dtype=dtype),
                0.0,
                f"lg.eye({r}, {c}, k={k}, dtype={dtype})",
            )

    # -- elementwise -----------------------------------------------------------------------

    @rule(data=st.data())
    def binary(self, data):
        name = data.draw(st.sampled_from(sorted(BINARY)), label="op")
        npf, opf, kind = BINARY[name]
        x = self.pick(data)
        exact = kind in (DISC, SING, "shift")
        if exact and x.err > 0:
            return
        y = self.operand(data, x.shape, grow=True, exact=exact)
        ops = [(x.a, x.n, x.err, x.name), y]
        if data.draw(st.booleans(), label="swap"):
            ops.reverse()
        (xl, xn, ex, xs), (yl, yn, ey, ys) = ops
        forms = ["func", "ufunc"] + (["op"] if opf is not None else [])
        form = data.draw(st.sampled_from(forms), label="form")
        if form == "func":
            lg_fn, code = (lambda: getattr(lg, name)(xl, yl)), f"lg.{name}({xs}, {ys})"
        elif form == "ufunc":
            lg_fn, code = (lambda: npf(xl, yl)), f"np.{npf.__name__}({xs}, {ys})"
        else:
            lg_fn, code = (lambda: opf(xl, yl)), f"operator.{opf.__name__}({xs}, {ys})"
        ins = [(np.asarray(xn), ex), (np.asarray(yn), ey)]

        def err(out):
            if kind == "shift":
                sh = ins[1][0]
                if sh.dtype.kind not in "iu" or sh.size and (sh.min() < 0 or sh.max() > 8):
                    return None
            if out.dtype.kind in "iu":
                bound = int_bound(kind if kind in (ADD, MUL, "shift") else DISC, ins)
                if bound > INT_LIMIT or mag(out) > INT_KEEP:
                    return None
            return op_err(kind if kind != "shift" else DISC, ins, out)

        self.record(code, lg_fn, lambda: npf(xn, yn), err)

    @rule(data=st.data())
    def power(self, data):
        x = self.pick(data)
        k = data.draw(st.integers(0, 3), label="exponent")
        form = data.draw(st.sampled_from(["op", "func"]), label="form")
        lg_fn = (lambda: x.a**k) if form == "op" else (lambda: lg.pow(x.a, k))
        ins = [(x.n, x.err)]

        def err(out):
            if out.dtype.kind in "iu" and (int_bound("pow", ins, power=k) > INT_LIMIT or mag(out) > INT_KEEP):
                return None
            return op_err("pow", ins, out, power=k)

        np_fn = (lambda: x.n**k) if form == "op" else (lambda: np.power(x.n, k))
        self.record(f"{x.name} ** {k}" if form == "op" else f"lg.pow({x.name}, {k})", lg_fn, np_fn, err)

    @rule(data=st.data())
    def unary(self, data):
        name = data.draw(st.sampled_from(sorted(UNARY)), label="op")
        npf, opf, kind = UNARY[name]
        x = self.pick(data)
        if kind in (DISC, SING) and x.err > 0:
            return
        if name == "reciprocal" and x.n.dtype.kind in "biu":
            return  # integer reciprocal of 0 is undefined
        forms = ["func"] + (["ufunc"] if name not in NO_UFUNC else []) + (["op"] if opf is not None else [])
        form = data.draw(st.sampled_from(forms), label="form")
        if form == "func":
            lg_fn, code = (lambda: getattr(lg, name)(x.a)), f"lg.{name}({x.name})"
        elif form == "ufunc":
            lg_fn, code = (lambda: npf(x.a)), f"np.{npf.__name__}({x.name})"
        else:
            lg_fn, code = (lambda: opf(x.a)), f"{opf.__name__}({x.name})"
        ins = [(x.n, x.err)]

        def err(out):
            if out.dtype.kind in "iu" and mag(out) > INT_KEEP:
                return None
            return op_err(kind, ins, out) if kind != SQUARE else op_err(MUL, ins * 2, out)

        self.record(code, lg_fn, lambda: npf(x.n), err)

    @rule(data=st.data())
    def round_clip_where(self, data):
        form = data.draw(st.sampled_from(["round", "clip", "where"]), label="form")
        x = self.pick(data)
        if form == "round":
            if x.err > 0:
                return
            dec = data.draw(st.integers(0, 1), label="decimals")
            self.record(
                f"lg.round({x.name}, {dec})",
                lambda: lg.round(x.a, dec),
                lambda: np.round(x.n, dec),
                lambda out: 0.0 if dec == 0 or out.dtype.kind != "f" else 2 * eps_of(out.dtype) * mag(out),
            )
        elif form == "clip":
            kind = "i" if x.n.dtype.kind in "iu" else "f"
            lo = data.draw(st.one_of(st.none(), py_scalars(kind)), label="lo")
            hi = data.draw(st.one_of(st.none(), py_scalars(kind)), label="hi")
            if lo is None and hi is None:
                return
            method = data.draw(st.booleans(), label="method")
            lg_fn = (lambda: x.a.clip(lo, hi)) if method else (lambda: lg.clip(x.a, lo, hi))
            ins = [(x.n, x.err)]
            self.record(
                f"lg.clip({x.name}, {lo!r}, {hi!r})",
                lg_fn,
                lambda: np.clip(x.n, lo, hi),
                lambda out: op_err(SELECT, ins, out),
            )
        else:
            c = self.pick(data, lambda v: v.err == 0, label="cond")
            if c is None:
                return
            y = self.operand(data, c.shape)
            z = self.operand(data, c.shape)
            ins = [(x.n, x.err), (np.asarray(y[1]), y[2]), (np.asarray(z[1]), z[2])]
            self.record(
                f"lg.where({c.name}, {y[3]}, {z[3]})",
                lambda: lg.where(c.a, y[0], z[0]),
                lambda: np.where(c.n, y[1], z[1]),
                lambda out: op_err(SELECT, ins[1:], out),
            )

    # -- reductions and matmul ------------------------------------------------------------

    @rule(data=st.data())
    def reduce(self, data):
        x = self.pick(data)
        nd = x.n.ndim
        name = data.draw(
            st.sampled_from(sorted(REDUCTIONS) + ["argmax", "argmin", "cumsum", "cumprod"]), label="op"
        )
        scan_or_arg = name in ("argmax", "argmin", "cumsum", "cumprod")
        axis_st = [st.none(), st.integers(-nd - 1, nd)] if nd else [st.none(), st.just(0)]
        if not scan_or_arg and nd:
            axis_st.append(
                st.lists(st.integers(-nd, nd - 1), min_size=0, max_size=nd, unique=True).map(tuple)
            )
        axis = data.draw(st.one_of(*axis_st), label="axis")
        kw = {"axis": axis}
        if name not in ("cumsum", "cumprod"):
            kw["keepdims"] = data.draw(st.booleans(), label="keepdims")
        if name in ("var", "std"):
            kw["ddof"] = data.draw(st.integers(0, 1), label="ddof")
        if name == "sum" and data.draw(st.integers(0, 4)) == 0:
            kw["dtype"] = data.draw(st.sampled_from([np.float64, np.int64]), label="sdtype")
        kind = REDUCTIONS.get(name, DISC if name in ("argmax", "argmin") else name.removeprefix("cum"))
        if kind in (DISC, "prod") and x.err > 0:
            return
        form = data.draw(st.sampled_from(["func", "method", "np"]), label="form")
        if form == "func":
            lg_fn = lambda: getattr(lg, name)(x.a, **kw)  # noqa: E731
        elif form == "method":
            lg_fn = lambda: getattr(x.a, name)(**kw)  # noqa: E731
        else:
            lg_fn = lambda: getattr(np, name)(x.a, **kw)  # noqa: E731
        code = f"lg.{name}({x.name}, {', '.join(f'{k}={v!r}' for k, v in kw.items())})"
        ins = [(x.n, x.err)]

        def err(out):
            if scan_or_arg:
                count = x.n.shape[axis] if (axis is not None and nd) else x.n.size
            else:
                count = x.n.size // out.size if out.size else 0
            if out.dtype.kind in "iu" or kind == "sum" and "dtype" in kw:
                if (
                    int_bound(kind if kind != SELECT else DISC, ins, count=count) > INT_LIMIT
                    or mag(out) > INT_KEEP
                ):
                    return None
            if kind == "prod" and out.dtype.kind == "f" and count > 4:
                return None
            return op_err(kind, ins, out, count=count)

        self.record(code, lg_fn, lambda: getattr(np, name)(x.n, **kw), err)

    @rule(data=st.data())
    def matmul(self, data):
        a = self.pick(data, lambda v: v.n.ndim >= 1) or self.pick(data)
        sa = a.shape
        if data.draw(st.integers(0, 9), label="mismatch") == 0 or not sa:
            b = self.pick(data)
        else:
            k = sa[-1]
            m = data.draw(st.integers(0, 3), label="m")
            opts = [(k,), (k, m)]
            if len(sa) >= 3:
                opts.append((1, k, m))
            if len(sa) == 1:
                opts.append((2, k, m))
            want = data.draw(st.sampled_from(opts), label="bshape")
            b = self.pick(data, lambda v: v.shape == want) if data.draw(st.booleans()) else None
            if b is None:
                b = self.fresh(data, want)
        if data.draw(st.booleans(), label="swap") and len(b.shape) >= 2 and len(a.shape) >= 1:
            a, b = b, a
        form = data.draw(st.sampled_from(["@", "func", "einsum", "dot", "np"]), label="form")
        if form == "einsum" and not (a.n.ndim == 2 and b.n.ndim == 2):
            form = "@"
        if form == "dot" and not (a.n.ndim <= 2 and b.n.ndim <= 2):
            form = "@"
        if form == "@":
            lg_fn, np_fn, code = (lambda: a.a @ b.a), (lambda: a.n @ b.n), f"{a} @ {b}"
        elif form == "func":
            lg_fn, np_fn, code = (
                (lambda: lg.matmul(a.a, b.a)),
                (lambda: np.matmul(a.n, b.n)),
                f"lg.matmul({a}, {b})",
            )
        elif form == "np":
            lg_fn, np_fn, code = (lambda: a.n @ b.a), (lambda: a.n @ b.n), f"{a}_numpy @ {b}"
        elif form == "dot":
            lg_fn, np_fn, code = (lambda: lg.dot(a.a, b.a)), (lambda: np.dot(a.n, b.n)), f"lg.dot({a}, {b})"
        else:
            lg_fn = lambda: lg.einsum("ij,jk->ik", a.a, b.a)  # noqa: E731
            np_fn = lambda: np.einsum("ij,jk->ik", a.n, b.n)  # noqa: E731
            code = f"lg.einsum('ij,jk->ik', {a}, {b})"
        ea = 0.0 if form == "np" else a.err
        ins = [(a.n, ea), (b.n, b.err)]

        def err(out):
            k = a.n.shape[-1] if a.n.ndim else 1
            if form == "dot" and (a.n.ndim == 0 or b.n.ndim == 0):
                # np.dot scales with BLAS: 0 * nan may give 0 there
                finite = all(all_finite(x) for x, _ in ins)
                return op_err(MUL, ins, out) if finite else None
            if out.dtype.kind in "iu" and (
                int_bound("matmul", ins, count=k) > INT_LIMIT or mag(out) > INT_KEEP
            ):
                return None
            return op_err("matmul", ins, out, count=k)

        self.record(code, lg_fn, np_fn, err)

    # -- shapes and views (reads; results stay views) --------------------------------------

    @rule(data=st.data())
    def reshape_like(self, data):
        x = self.pick(data)
        nd = x.n.ndim
        op = data.draw(
            st.sampled_from(
                [
                    "reshape",
                    "transpose",
                    "T",
                    "mT",
                    "swapaxes",
                    "moveaxis",
                    "expand_dims",
                    "squeeze",
                    "flip",
                    "broadcast_to",
                    "ravel",
                ]
            ),
            label="op",
        )
        ax = st.integers(-nd - 1, nd)  # includes out-of-range axes (AxisError both sides)
        if op == "reshape":
            shape = data.draw(st.sampled_from(reshape_targets(x.n.size)), label="shape")
            how = data.draw(st.sampled_from(["method", "splat", "func"]), label="how")
            if how == "method":
                lg_fn, code = (lambda: x.a.reshape(shape)), f"{x}.reshape({shape})"
            elif how == "splat" and shape:
                lg_fn, code = (lambda: x.a.reshape(*shape)), f"{x}.reshape(*{shape})"
            else:
                lg_fn, code = (lambda: lg.reshape(x.a, shape)), f"lg.reshape({x}, {shape})"
            np_fn = lambda: np.reshape(x.n, shape)  # noqa: E731
        elif op == "transpose":
            axes = data.draw(
                st.one_of(
                    st.none(),
                    st.permutations(range(nd)).map(
                        lambda p: tuple(a - nd if i % 2 else a for i, a in enumerate(p))
                    ),
                ),
                label="axes",
            )
            lg_fn, code = (lambda: lg.permute_dims(x.a, axes)), f"lg.permute_dims({x}, {axes})"
            np_fn = lambda: np.transpose(x.n, axes)  # noqa: E731
        elif op == "T":
            lg_fn, np_fn, code = (lambda: x.a.T), (lambda: x.n.T), f"{x}.T"
        elif op == "mT":
            lg_fn, np_fn, code = (lambda: x.a.mT), (lambda: x.n.mT), f"{x}.mT"
        elif op == "swapaxes":
            a1, a2 = data.draw(ax), data.draw(ax)
            lg_fn, np_fn, code = (
                (lambda: lg.swapaxes(x.a, a1, a2)),
                (lambda: np.swapaxes(x.n, a1, a2)),
                f"lg.swapaxes({x}, {a1}, {a2})",
            )
        elif op == "moveaxis":
            a1, a2 = data.draw(ax), data.draw(ax)
            lg_fn, np_fn, code = (
                (lambda: lg.moveaxis(x.a, a1, a2)),
                (lambda: np.moveaxis(x.n, a1, a2)),
                f"lg.moveaxis({x}, {a1}, {a2})",
            )
        elif op == "expand_dims":
            axis = data.draw(
                st.one_of(
                    st.integers(-nd - 2, nd + 1),
                    st.lists(st.integers(-nd - 2, nd + 1), max_size=2).map(tuple),
                ),
                label="axis",
            )
            lg_fn, np_fn, code = (
                (lambda: lg.expand_dims(x.a, axis)),
                (lambda: np.expand_dims(x.n, axis)),
                f"lg.expand_dims({x}, {axis})",
            )
        elif op == "squeeze":
            ones = [i for i, d in enumerate(x.shape) if d == 1]
            axis = data.draw(
                st.one_of(
                    st.none(),
                    st.sampled_from(ones) if ones else st.none(),
                    st.lists(st.sampled_from(ones), unique=True).map(tuple) if ones else st.none(),
                    ax,
                ),
                label="axis",
            )
            lg_fn, np_fn, code = (
                (lambda: lg.squeeze(x.a, axis)),
                (lambda: np.squeeze(x.n, axis)),
                f"lg.squeeze({x}, {axis})",
            )
        elif op == "flip":
            axes = st.lists(st.integers(-nd, nd - 1), unique=True).map(tuple) if nd else st.just(())
            axis = data.draw(st.one_of(st.none(), ax, axes), label="axis")
            lg_fn, np_fn, code = (
                (lambda: lg.flip(x.a, axis)),
                (lambda: np.flip(x.n, axis)),
                f"lg.flip({x}, {axis})",
            )
        elif op == "broadcast_to":
            lead = data.draw(st.lists(st.integers(0, 3), max_size=2), label="lead")
            shape = tuple(lead) + tuple(
                data.draw(st.integers(1, 3)) if d == 1 and data.draw(st.booleans()) else d for d in x.shape
            )
            if data.draw(st.integers(0, 9), label="bad") == 0:
                shape = shape[1:] + (5,)
            lg_fn, np_fn, code = (
                (lambda: lg.broadcast_to(x.a, shape)),
                (lambda: np.broadcast_to(x.n, shape)),
                f"lg.broadcast_to({x}, {shape})",
            )
        else:
            lg_fn, np_fn, code = (lambda: lg.ravel(x.a)), (lambda: np.ravel(x.n)), f"lg.ravel({x})"
        self.record(code, lg_fn, np_fn, lambda out: x.err)

    @rule(data=st.data())
    def basic_index(self, data):
        x = self.pick(data)
        key = draw_basic_key(data, x.shape)
        code = f"{x}[{fmt_key(key)}]"

        def lg_fn():
            a = x.a[key]
            # one element by integers is a scalar, as in NumPy: `s += y` rebinds it (the "sub"
            # form of `inplace` checks that); the pool keeps a 0-d array of it, like NumPy's twin
            assert isinstance(a, Scalar) == isinstance(x.n[key], np.generic), f"{code}: scalar or view?"
            return a[...] if isinstance(a, Scalar) else a

        self.record(code, lg_fn, lambda: x.n[key], lambda out: x.err)

    @rule(data=st.data())
    def gather(self, data):
        x = self.pick(data)
        key = draw_adv_key(data, x.shape, for_write=False)
        if key is None:
            return
        with quiet():
            try:
                x.n[key]
                ok = True
            except (*ERRORS, DEPRECATED):
                ok = False
        lazy = ok and data.draw(st.booleans(), label="lazy_index")
        lkey, allow_eval = key, False
        if lazy:  # index arrays as lazy arrays: range checks move to evaluation (in range here)
            items = key if isinstance(key, tuple) else (key,)
            conv = tuple(lg.asarray(i) if isinstance(i, np.ndarray) else i for i in items)
            lkey = conv if isinstance(key, tuple) else conv[0]
            allow_eval = any(isinstance(i, np.ndarray) and i.dtype == np.bool_ for i in items)
        code = f"{x}[{fmt_key(key)}]" + ("  # lazy index" if lazy else "")
        self.record(code, lambda: x.a[lkey], lambda: x.n[key], lambda out: x.err, allow_eval=allow_eval)

    @rule(data=st.data())
    def gather_by_variable(self, data):
        """x[v] where v is a pool variable: a data-dependent (lazy) index or mask."""
        x = self.pick(data, lambda v: v.n.ndim >= 1)
        if x is None:
            return
        size = x.shape[0]
        idx = self.pick(
            data,
            lambda v: (
                v.err == 0
                and (
                    (
                        v.n.dtype.kind in "iu"
                        and v.n.ndim <= 2
                        and (v.n.size == 0 or (v.n.min() >= -size and v.n.max() < size))
                    )
                    or (v.n.dtype == np.bool_ and v.shape == x.shape[: v.n.ndim] and v.n.ndim >= 1)
                )
            ),
            label="index",
        )
        if idx is None:
            return
        self.record(f"{x}[{idx}]", lambda: x.a[idx.a], lambda: x.n[idx.n], lambda out: x.err, allow_eval=True)

    # -- joins -------------------------------------------------------------------------------

    @rule(data=st.data())
    def concat_stack(self, data):
        x = self.pick(data)
        stack = data.draw(st.booleans(), label="stack")
        nd = x.n.ndim
        if stack:
            axis = data.draw(st.integers(-nd - 1, nd), label="axis")
        else:
            axis = data.draw(
                st.one_of(st.none(), st.integers(-nd, nd - 1) if nd else st.just(0)), label="axis"
            )
        parts = [x]
        for _ in range(data.draw(st.integers(0, 2), label="n_more")):
            shape = list(x.shape)
            if not stack and nd and axis is not None:
                shape[axis] = data.draw(st.integers(0, 3), label="len")
            if data.draw(st.integers(0, 9), label="bad") == 0:
                shape.append(2)  # mismatch: ValueError on both sides
            shape = tuple(shape)
            v = self.pick(data, lambda w: w.shape == shape) if data.draw(st.booleans()) else None
            parts.append(v or self.fresh(data, shape))
        names = ", ".join(p.name for p in parts)
        ins = [(p.n, p.err) for p in parts]
        if stack:
            self.record(
                f"lg.stack([{names}], axis={axis})",
                lambda: lg.stack([p.a for p in parts], axis=axis),
                lambda: np.stack([p.n for p in parts], axis=axis),
                lambda out: op_err(SELECT, ins, out),
            )
        else:
            self.record(
                f"lg.concat([{names}], axis={axis})",
                lambda: lg.concat([p.a for p in parts], axis=axis),
                lambda: np.concatenate([p.n for p in parts], axis=axis),
                lambda out: op_err(SELECT, ins, out),
            )

    # -- copies and casts --------------------------------------------------------------------

    @rule(data=st.data())
    def copy_or_cast(self, data):
        x = self.pick(data)
        form = data.draw(
            st.sampled_from(["copy", "method", "array", "asarray_copy", "asarray", "flatten", "astype"]),
            label="form",
        )
        if form == "astype":
            dt = data.draw(st.sampled_from(DTYPES), label="to")
            method = data.draw(st.booleans(), label="method")
            ins = [(x.n, x.err)]

            def err(out):
                if x.n.dtype.kind == "f" and dt.kind in "iu":
                    if not all_finite(x.n) or mag(x.n) >= 2**31:
                        return None
                if dt.kind == "f":
                    return op_err("cast", ins, out)
                return op_err(DISC, ins, out)

            self.record(
                f"{x}.astype({dt})",
                (lambda: x.a.astype(dt)) if method else (lambda: lg.astype(x.a, dt)),
                lambda: x.n.astype(dt),
                err,
            )
            return
        lg_fn, np_fn = {
            "copy": (lambda: lg.copy(x.a), lambda: np.copy(x.n)),
            "method": (lambda: x.a.copy(), lambda: x.n.copy()),
            "array": (lambda: lg.array(x.a), lambda: np.array(x.n)),
            "asarray_copy": (lambda: lg.asarray(x.a, copy=True), lambda: np.asarray(x.n, copy=True)),
            "asarray": (lambda: lg.asarray(x.a), lambda: np.asarray(x.n)),  # no copy: aliases
            "flatten": (lambda: x.a.flatten(), lambda: x.n.flatten()),
        }[form]
        self.record(f"{form}({x})", lg_fn, np_fn, lambda out: x.err)

    # -- writes --------------------------------------------------------------------------------

    @rule(data=st.data())
    def inplace(self, data):
        """`v op= y`, `v[key] op= y` and `fn(x, y, out=v)`: NumPy's casting and shape rules."""
        v = self.pick(data)
        name = data.draw(st.sampled_from(sorted(INPLACE)), label="op")
        npf, _, kind = BINARY[name]
        form = data.draw(st.sampled_from(["aug", "aug", "sub", "out", "ufunc_out"]), label="form")
        exact = kind in (DISC, SING, "shift")
        if exact and v.err > 0:
            return
        key = None
        if form == "sub":
            key = (
                draw_basic_key(data, v.shape, oob_ok=False)
                if data.draw(st.booleans())
                else draw_adv_key(data, v.shape, for_write=True)
            )
            if key is None:
                return
            with quiet():
                try:
                    region = v.n[key]
                except (*ERRORS, DEPRECATED):
                    return
            tshape = np.shape(region)
        else:
            tshape = v.shape
        yl, yn, ey, ys = self.operand(
            data, tshape, grow=data.draw(st.integers(0, 5)) == 0, exact=exact, into=v.n.dtype
        )
        yn = np.asarray(yn) if not isinstance(yn, (bool, int, float)) else yn
        if form == "sub":
            code = f"{v}[{fmt_key(key)}] {name}= {ys}"
        elif form == "aug":
            code = f"{v} {name}= {ys}"
        else:
            code = (
                f"lg.{name}({v}, {ys}, out={v})"
                if form == "out"
                else f"np.{npf.__name__}({v}, {ys}, out={v})"
            )

        def np_apply(target):
            if form == "sub":
                # `v[key] op= y`: an element read by integers is a scalar (op= rebinds it with
                # NumPy's promotion, setitem casts back), anything else a view written in place
                t = target[key]
                t = INPLACE[name](t, yn)
                target[key] = t
            elif form == "aug":
                res = INPLACE[name](target, yn)
                assert res is target
            else:
                npf(target, yn, out=target)

        def lg_apply():
            if form == "sub":
                t = v.a[key]
                t = INPLACE[name](t, yl)
                v.a[key] = t
            elif form == "aug":
                res = INPLACE[name](v.a, yl)
                assert res is v.a, f"{code}: in-place operator did not return the same array"
            elif form == "out":
                res = getattr(lg, name)(v.a, yl, out=v.a)
                assert res is v.a
            else:
                res = npf(v.a, yl, out=v.a)
                assert res is v.a

        # 1. Does NumPy accept it? (on a copy; read-only targets on themselves: no change)
        answer = numpy_write(v, np_apply)
        if answer is None:
            return
        trial, n_exc = answer
        if n_exc is not None:
            refused_alike(code, n_exc, v, lg_apply)
            return
        # 2. Is the result safe to keep (overflow-free, within the error model)?
        region_n = v.n if key is None else np.asarray(v.n[key])
        ins = [(region_n, v.err), (np.asarray(yn), ey)]
        with quiet():
            full = npf(region_n, yn)
        if kind == "shift":
            sh = ins[1][0]
            if sh.dtype.kind not in "iu" or sh.size and (sh.min() < 0 or sh.max() > 8):
                return
        new = trial if key is None else np.asarray(trial[key])
        if np.asarray(full).dtype.kind in "iu" or new.dtype.kind in "iu":
            if (
                int_bound(kind if kind in (ADD, MUL, "shift") else DISC, ins) > INT_LIMIT
                or mag(full) > INT_KEEP
            ):
                return
        err = op_err(kind if kind != "shift" else DISC, ins, full)
        if err is not None and new.dtype != np.asarray(full).dtype and new.dtype.kind == "f":
            err = op_err("cast", [(full, err)], new)
        if err is None or (new.dtype.kind != "f" and not all_finite(full)):
            return
        # 3. Do it on both sides.
        before = evaluations()
        with quiet():
            np_apply(v.n)
        try:
            lg_apply()
        except Exception as e:
            raise AssertionError(
                f"{code}: NumPy accepts it but lazygraph raised {type(e).__name__}: {e}"
            ) from e
        assert evaluations() == before, f"{code}: recording evaluated the graph"
        assert v.a.shape == v.n.shape and v.a.dtype == v.n.dtype
        note(code + (f"    # err<={err:.3g}" if err else ""))
        self.written(v.n, err)

    @rule(data=st.data())
    def setitem(self, data):
        v = self.pick(data)
        advanced = v.n.ndim > 0 and data.draw(st.booleans(), label="advanced")
        key = draw_adv_key(data, v.shape, for_write=True) if advanced else draw_basic_key(data, v.shape)
        with quiet():
            try:
                tshape = np.shape(v.n[key])
            except (*ERRORS, DEPRECATED):
                tshape = v.shape
        if data.draw(st.integers(0, 9), label="bad_value") == 0:
            tshape = tshape + (3,)  # usually not broadcastable: ValueError on both sides
        yl, yn, ey, ys = self.operand(data, tshape, grow=False)
        code = f"{v}[{fmt_key(key)}] = {ys}"
        answer = numpy_write(v, lambda t: t.__setitem__(key, yn))
        if answer is None:
            return
        trial, n_exc = answer
        # A NumPy quirk lazygraph does not copy: an empty target accepts values of any shape.
        if n_exc is None and not fits_value(np.shape(yn), np.shape(trial[key])):
            return
        before = evaluations()
        if n_exc is not None:
            refused_alike(code, n_exc, v, lambda: v.a.__setitem__(key, yl))
            return
        yarr = np.asarray(yn)
        tdt = v.n.dtype
        if tdt.kind in "iu" and yarr.dtype.kind == "f" and (not all_finite(yarr) or mag(yarr) >= 2**31):
            return  # undefined cast
        if tdt.kind != "f":
            err = op_err(DISC, [(yarr, ey)], np.zeros((), tdt))
        elif yarr.dtype != tdt:
            err = op_err(
                "cast", [(yarr, ey)], np.asarray(yarr, dtype=tdt) if yarr.size else np.zeros((), tdt)
            )
        else:
            err = ey
        if err is None:
            return
        with quiet():
            v.n[key] = yn
        try:
            v.a[key] = yl
        except Exception as e:
            raise AssertionError(
                f"{code}: NumPy accepts it but lazygraph raised {type(e).__name__}: {e}"
            ) from e
        assert evaluations() == before, f"{code}: recording evaluated the graph"
        note(code)
        self.written(v.n, err)

    @rule(data=st.data())
    def drop(self, data):
        if len(self.pool) > 2:
            v = self.pick(data)
            self.pool.remove(v)
            note(f"del {v.name}")

    # -- evaluation points -----------------------------------------------------------------------

    @rule(data=st.data())
    def evaluate_one(self, data):
        v = self.pick(data)
        form = data.draw(
            st.sampled_from(["numpy", "asarray", "tolist", "iter", "print", "scalar"]), label="form"
        )
        note(f"# evaluate {v}: {form}")
        if form == "numpy":
            got = v.a.numpy()
            k = kernels()
            again = v.a.numpy()
            assert kernels() == k, f"{v}.numpy() ran kernels again: values are not memoized"
            np.testing.assert_array_equal(again, got)
        elif form == "asarray":
            got = np.asarray(v.a)
        elif form == "tolist":
            lst = v.a.tolist()
            got = np.asarray(lst, dtype=v.n.dtype).reshape(v.n.shape)
        elif form == "iter":
            if v.n.ndim == 0:
                with pytest.raises(TypeError):
                    list(v.a)
                got = v.a.numpy()
            else:
                rows = [r.numpy() for r in v.a]
                assert len(rows) == v.shape[0]
                got = np.array(rows, dtype=v.n.dtype).reshape(v.n.shape)
        elif form == "print":
            buf = io.StringIO()
            print(v.a, file=buf)
            got = v.a.numpy()
            assert buf.getvalue() == str(got) + "\n"
            if v.n.dtype.kind in "biu":
                assert buf.getvalue() == str(v.n) + "\n", f"print({v}) differs from NumPy"
        else:
            if v.n.size != 1:
                with pytest.raises(TypeError):
                    float(v.a)
                got = v.a.numpy()
            else:
                s = v.a if v.n.ndim == 0 else v.a.reshape(())
                f = float(s)
                expect = float(v.n.reshape(()))
                if math.isnan(expect):
                    assert math.isnan(f), f"float({v}) = {f}, numpy {expect}"
                else:
                    assert f == pytest.approx(expect, rel=1e-5, abs=1e-6 + 2 * v.err), f"float({v})"
                if v.n.dtype.kind in "biu":
                    assert int(s) == int(v.n.reshape(()))
                    assert bool(s) == bool(v.n.reshape(()))
                got = v.a.numpy()
        self.check(v, got, form)

    @rule(data=st.data())
    def evaluate_many(self, data):
        vs = data.draw(st.lists(st.sampled_from(self.pool), min_size=1, max_size=4), label="vars")
        note(f"# lg.eval({', '.join(v.name for v in vs)})")
        vals = lg.eval(*[v.a for v in vs])
        assert len(vals) == len(vs)
        for v, val in zip(vs, vals):
            self.check(v, val, "eval")

    @invariant()
    def debug_check_every_step(self):
        """LAZYGRAPH_FUZZ_CHECK_EVERY_STEP=1 evaluates and compares the whole pool after every
        step (to find the first divergent step of a failing example; it changes what is memoized)."""
        if os.environ.get("LAZYGRAPH_FUZZ_CHECK_EVERY_STEP"):
            for v in self.pool:
                self.check(v, v.a.numpy(), "numpy() after step")

    def teardown(self):
        if not self.pool:
            return
        vals = lg.eval(*[v.a for v in self.pool])
        for v, val in zip(self.pool, vals):
            self.check(v, val, "eval(all)")
        for v in self.pool:
            self.check(v, v.a.numpy())


def fmt_key(key) -> str:
    items = key if isinstance(key, tuple) else (key,)
    out = []
    for it in items:
        if it is Ellipsis:
            out.append("...")
        elif isinstance(it, slice):
            out.append(
                ":".join("" if p is None else str(p) for p in (it.start, it.stop, it.step)).rstrip(":") or ":"
            )
        elif isinstance(it, np.ndarray):
            out.append(f"np.array({it.tolist()!r})")
        else:
            out.append(repr(it))
    text = ", ".join(out)
    return text + "," if isinstance(key, tuple) and len(items) == 1 else text


_SUPPRESS = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

TestLazyPrograms = LazyProgram.TestCase
TestLazyPrograms.settings = settings(stateful_step_count=50, suppress_health_check=_SUPPRESS)


class LongLazyProgram(LazyProgram):
    """The same fuzzer with longer programs and many more of them (-m slow)."""


TestLongLazyPrograms = pytest.mark.slow(LongLazyProgram.TestCase)
TestLongLazyPrograms.settings = settings(
    max_examples=500, stateful_step_count=80, deadline=None, suppress_health_check=_SUPPRESS
)


# ---------------------------------------------------------------------------------------
# fixed programs


def test_issue_example():
    x = lg.asarray(np.arange(12.0).reshape(3, 4))
    v = x[1:, ::2]
    v += 1
    y = lg.tanh(x @ x.T) * 2
    xn = np.arange(12.0).reshape(3, 4)
    vn = xn[1:, ::2]
    vn += 1
    yn = np.tanh(xn @ xn.T) * 2
    np.testing.assert_allclose(y.numpy(), yn, rtol=1e-12)
    np.testing.assert_array_equal(x.numpy(), xn)
    np.testing.assert_array_equal(v.numpy(), vn)
    assert float(x.sum()) == float(xn.sum())


def test_reads_recorded_before_a_write_see_the_old_value():
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    y = x * 1
    t = x.T  # a view: sees the write
    row = x[1]  # a view: sees the write
    s = x.sum()  # recorded before: old value
    x += 1
    x[0, 0] = 100.0
    old = np.arange(6.0).reshape(2, 3)
    new = old + 1
    new[0, 0] = 100.0
    np.testing.assert_array_equal(y.numpy(), old)
    assert float(s) == old.sum()
    np.testing.assert_array_equal(t.numpy(), new.T)
    np.testing.assert_array_equal(row.numpy(), new[1])
    np.testing.assert_array_equal(x.numpy(), new)


def test_write_through_view_after_evaluation_is_seen_by_base_and_siblings():
    xn = np.arange(24, dtype=np.int64).reshape(2, 3, 4)
    x = lg.asarray(xn)
    xn = xn.copy()
    a, an = x[:, ::-1, 1:], xn[:, ::-1, 1:]
    b, bn = x.transpose(2, 0, 1)[::2], xn.transpose(2, 0, 1)[::2]
    np.testing.assert_array_equal(b.numpy(), bn)  # evaluate before the writes
    a *= 3
    an *= 3
    b[0] = -1
    bn[0] = -1
    x[x > 40] = 0  # boolean mask of a lazy array: an evaluation point inside indexing
    xn[xn > 40] = 0
    for got, want in zip(lg.eval(a, b, x), (an, bn, xn)):
        np.testing.assert_array_equal(got, want)


def test_full_integer_index_is_a_copy_not_a_view():
    # NumPy: x[1, 2] is a scalar; updating it in place must not write into x.
    x = lg.asarray(np.arange(6.0).reshape(2, 3))
    s = x[1, 2]
    s += 10
    np.testing.assert_array_equal(x.numpy(), np.arange(6.0).reshape(2, 3))
    assert float(s) == 15.0
    e = x[1, 2, ...]  # with an Ellipsis NumPy gives a 0-d view
    e += 1
    assert x.numpy()[1, 2] == 6.0


# ---------------------------------------------------------------------------------------
# regressions the fuzzer found (each once diverged from NumPy)


def test_flip_of_0d_array_is_a_copy():
    # np.flip(x) indexes x[()], which for a 0-d x is a scalar: later writes to x don't show.
    x = lg.asarray(np.array(False))
    f = lg.flip(x)
    x[()] = True
    assert not f.numpy()
    assert x.numpy()


def test_squeeze_of_0d_array_accepts_axis_0():
    x = lg.asarray(np.array(3.0))
    assert lg.squeeze(x, 0).shape == np.squeeze(np.array(3.0), 0).shape == ()
    assert lg.squeeze(x, -1).shape == ()
    with pytest.raises(np.exceptions.AxisError):
        lg.squeeze(x, 1)


def test_einsum_broadcasts_size_one_dimensions_like_numpy():
    b = np.array([[True, True]])
    one = np.ones((1, 1), dtype=np.int64)
    expected = np.einsum("ij,jk->ik", b, one)  # [[2]]: j of size 1 broadcasts against 2
    got = lg.einsum("ij,jk->ik", lg.asarray(b), lg.asarray(one)).numpy()
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == expected.dtype


@pytest.mark.parametrize(
    "make, expected",
    [
        # dtypes are resolved before shapes: a TypeError wins over a broadcast mismatch
        (lambda: lg.asarray(np.ones((2, 1), bool)).__ilshift__(lg.asarray(np.ones((1, 0, 1)))), TypeError),
        (lambda: lg.asarray(np.ones(2, bool)).__iadd__(lg.asarray(np.ones(0, np.int32))), TypeError),
        (lambda: lg.bitwise_and(lg.asarray(np.ones(2)), lg.asarray(np.ones(3))), TypeError),
        # a read-only output is reported before a casting problem
        (
            lambda: lg.floor_divide(lg.asarray(np.ones(3)), 2, out=lg.broadcast_to(lg.asarray(True), (3,))),
            ValueError,
        ),
    ],
)
def test_error_precedence_follows_numpy(make, expected):
    with pytest.raises(expected):
        make()


def test_boolean_mask_assignment_rule_only_for_whole_array_masks():
    x, xn = lg.asarray(np.zeros(3)), np.zeros(3)
    with pytest.raises(TypeError):  # as NumPy: a whole-array mask takes 0-d or 1-d values
        x[np.array([True, False, True])] = np.ones((1, 2))
    mask = np.zeros((1, 3), bool)[:, :0].reshape(0)  # an empty mask on a longer axis
    xn[mask] = np.ones((1, 1))
    x[mask] = np.ones((1, 1))
    np.testing.assert_array_equal(x.numpy(), xn)
