"""Regions and their compiled kernels: the callable the engine (or a benchmark) runs.

`Region` is a fusable subgraph: member nodes in topological order, the external inputs
they read (arrays or Python scalars) and the members whose values leave the region.
`compile_region` returns a `FusedKernel` shared by every region with the same structure
(operators, attributes, dtypes, connections, which dimensions are 1 — never sizes or
values); calling it with the inputs' values returns the outputs. Each distinct layout of
the arguments (coalesced loops, unit strides) is searched (A*), rendered and compiled once;
later calls only pack arguments and launch. Compiling, loading and launching are a backend's
(jit/backend/): the CPU's by default, another's when the call names it; the kernel source
comes from the generator of the backend's language (jit/generate.py).
"""

from __future__ import annotations

import sys
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from jit import astar, background, compile_c, generate, launch, types
from jit import layout as lay
from jit.backend import Backend, Program
from jit.backend import get as get_backend
from jit.blas_quiet import park_blas_workers
from jit.domain import Domain, NotFusable
from jit.layout import Layout
from jit.malloc_keep import keep_freed_memory
from jit.spec import Spec, build_spec
from ops import settings
from ops.node import Node
from ops.settings import SETTINGS

#: the elements from which a fused kernel parks OpenBLAS's spinning workers first
#: (jit/blas_quiet.py): a few milliseconds of work. A shorter kernel loses less to them than
#: restarting them can cost: each park makes the next BLAS call start the workers again,
#: 10-15 ms when the cores had idled. The MLP training step parked before its Adam updates
#: (1M elements): 54-61 ms a step when the loop paused 30 ms between steps, 26-31 ms
#: without those parks, and the same 25-30 ms either way with no pause.
PARK_MIN = 1 << 22


def enabled() -> bool:
    """False when the `jit` setting (LAZYGRAPH_JIT=0) turns fused kernels off."""
    return SETTINGS.jit


def debug_level() -> int:
    """LAZYGRAPH_DEBUG as an int (the JIT prints kernels at 3)."""
    return settings.debug_level()


def log(msg: str) -> None:
    """One debug message on stderr."""
    print(f"[lazygraph] {msg}", file=sys.stderr)


@dataclass
class Region:
    """A fusable subgraph (see the module docstring)."""

    nodes: list[Node]
    inputs: list[Node]
    outputs: list[Node]
    domain: Domain = field(repr=False, default=None)  # type: ignore[assignment]


def make_region(nodes: list[Node], outputs: list[Node]) -> Region:
    """A region from members in topological order; raises NotFusable when they are not one kernel."""
    d = Domain()
    for n in nodes:
        d.add(n)
    members = {id(n) for n in nodes}
    inputs: list[Node] = []
    seen: set[int] = set()
    for n in nodes:
        for c in n.inputs:
            if id(c) not in members and id(c) not in seen:
                seen.add(id(c))
                inputs.append(c)
    for o in outputs:
        if id(o) not in members:
            raise NotFusable("an output is not a member of the region")
    return Region(list(nodes), inputs, list(outputs), d)


def signature(region: Region) -> tuple:
    """Structure of a region: equal signatures compute the same function of their inputs."""
    idx: dict[int, int] = {}
    parts: list[Any] = []
    for n in region.inputs:
        idx[id(n)] = len(idx)
        if n.op.name == "scalar":
            parts.append(("scalar", str(n.dtype), type(n.buffer).__name__))
        else:
            parts.append(("array", str(n.dtype), tuple(d == 1 for d in n.shape)))
    for n in region.nodes:
        idx[id(n)] = len(idx)
        attrs = tuple(sorted((k, repr(v)) for k, v in n.attrs.items()))
        ins = tuple(idx[id(c)] for c in n.inputs)
        parts.append((n.op.name, str(n.dtype), attrs, ins, tuple(d == 1 for d in n.shape)))
    parts.append(tuple(idx[id(o)] for o in region.outputs))
    return tuple(parts)


_warned = False


def _warn_no_compiler() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(
            "lazygraph: no C compiler found ($CC, cc, gcc, clang); fused regions run op by op on NumPy",
            RuntimeWarning,
            stacklevel=3,
        )


class Shaped(NamedTuple):
    """What a launch's layout reads of an array, without the array (`FusedKernel.plan`)."""

    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int
    size: int

    @staticmethod
    def of(a: np.ndarray) -> Shaped:
        """An existing array's."""
        return Shaped(a.shape, a.strides, a.itemsize, a.size)

    @staticmethod
    def contiguous(shape: tuple[int, ...], dtype: Any) -> Shaped:
        """A C-contiguous array's (what `np.empty` gives)."""
        item = np.dtype(dtype).itemsize
        strides, step = [], item
        for d in reversed(shape):
            strides.append(step)
            step *= max(d, 1)
        return Shaped(tuple(shape), tuple(reversed(strides)), item, int(np.prod(shape, dtype=np.int64)))


class Variant(NamedTuple):
    """One compiled variant of a kernel: the loaded program, its search and source, its launch shape."""

    program: Program
    result: astar.SearchResult
    source: str
    launch: Callable[[list[int]], tuple[int, int]]


class _Launch(NamedTuple):
    """A CPU launch for one argument signature: `run(values, outs)` (None: run on NumPy)."""

    size: int  # elements of the largest array (the min_size rule compares it)
    run: Callable[[tuple, list], None] | None
    outs: tuple[tuple[tuple[int, ...], np.dtype], ...]  # shape and dtype of each output
    #: `run` checking the arrays' shapes and strides itself (launch.checked_launcher), for the
    #: repeated call without `out=` (FusedKernel._last); None: the key lookup only
    checked: Callable[[tuple, list], bool] | None = None


class _DeviceLaunch(NamedTuple):
    """A device backend's launch for one argument signature: the loaded program, its loop
    arguments and launch shape, and the outputs to allocate (all fixed by the signature)."""

    size: int
    program: Any
    ints: list[int]
    grid: int
    block: int
    outs: tuple[tuple[tuple[int, ...], np.dtype], ...]


#: a launch this large releases the GIL while the kernel runs (smaller ones would pay for
#: taking it back, up to a thread switch interval when another thread holds it)
NOGIL_SIZE = 1 << 16
#: argument signatures remembered per kernel
MAX_LAUNCHES = 256


class FusedKernel:
    """One region structure's kernels, one per backend and argument layout (see the module docstring)."""

    def __init__(self, region: Region) -> None:
        # kernels allocate outputs every call: freed ones should come back without page faults
        keep_freed_memory()
        self.spec: Spec = build_spec(region.domain, region.nodes, region.inputs, region.outputs)
        # No references to graph nodes are kept (they would keep whole graphs alive): the
        # NumPy fallback replays (operator, attributes, input slots) instead.
        self.in_dtypes = [n.dtype for n in region.inputs]
        self.spec.inputs = []
        self.spec.out_nodes = []
        slot = {id(n): i for i, n in enumerate(region.inputs)}
        self.program = []
        for n in region.nodes:
            self.program.append((n.op, n.attrs, tuple(slot[id(c)] for c in n.inputs)))
            slot[id(n)] = len(slot)
        self.out_slots = [slot[id(o)] for o in region.outputs]
        self.names = [n.op.name for n in region.nodes]
        # keyed by backend, layout and the generator's mode (numeric mode: fast math may change
        # between calls; for C also whether block loops may be shorter than a block)
        self.variants: dict[tuple[str, Layout, tuple], Variant] = {}
        # threads share kernels: one builds a layout's variant while the others wait for it
        self.lock = threading.Lock()
        # argument signature -> what a CPU launch needs (see __call__)
        self.launches: dict[tuple, _Launch] = {}
        #: the same for device backends (cuda, cuda-emulated): layout, variant and loop
        #: arguments are worked out once per signature, not at every launch
        self.device_launches: dict[tuple, _DeviceLaunch] = {}
        self._array_pos = [i for i, (kind, _) in enumerate(self.spec.arg_of_input) if kind != "scalar"]
        plan = []
        for (kind, k), dt in zip(self.spec.arg_of_input, self.in_dtypes):
            if kind != "scalar":
                plan.append((launch.ARRAY, 0, dt.itemsize))
            else:
                plan.append((launch.FLOAT if dt.kind == "f" else launch.INT, k, 0))
        self._plan = launch.pack_plan(plan)
        #: (numeric mode, entry) of the last launch without `out=` whose launcher checks the
        #: argument signature itself: a repeated call skips building and hashing the key
        self._last: tuple[bool, _Launch] | None = None

    # -- sizes, outputs, layout -----------------------------------------------------------
    def _sizes(self, arrays: list[Any]) -> dict[int, int]:
        sizes: dict[int, int] = {}
        for ref, arr in zip(self.spec.arrays, arrays):
            for dim, root in enumerate(ref.roots):
                if root >= 0:
                    sizes[root] = arr.shape[dim]
        return sizes

    def __call__(
        self, *values: Any, out: Any = None, backend: Backend | None = None, min_size: int = 0
    ) -> list[Any]:
        """Run the kernel on the inputs' values (arrays and scalars, in `Region.inputs` order).

        `backend` runs it (the CPU's by default; inputs are copied to its memory where they are
        not there). `out` receives the first output (the engine's planned buffer); it must be
        the backend's array of the output's shape and dtype and share no memory with an input
        the kernel reads. Arrays all smaller than `min_size` elements run op by op on NumPy
        (the engine passes `LAZYGRAPH_JIT_MIN_SIZE`; where launches go through ctypes, a
        nonzero `min_size` is at least `launch.CTYPES_MIN_SIZE`).

        On the CPU, what one argument signature (shapes and strides of the arrays, the `out`
        buffer's, the numeric mode) determines is kept in `self.launches`: a repeated call
        looks it up, allocates the outputs and launches (jit/launch.py).
        """
        last = self._last
        if last is not None and out is None and backend is None and last[0] is SETTINGS.fast_math:
            e = last[1]
            if e.size >= min_size and launch.FAST:
                if e.size >= PARK_MIN:
                    park_blas_workers()
                outs = [np.empty(shp, dt) for shp, dt in e.outs]
                try:
                    if e.checked(values, outs):  # type: ignore[misc]
                        return outs
                except TypeError:
                    pass  # as below: the general path converts the value or explains
        if min_size and not launch.FAST:
            min_size = max(min_size, launch.CTYPES_MIN_SIZE)  # ctypes' fixed cost: NumPy is faster
        if backend is None or backend.name == "cpu":
            try:
                key = (
                    SETTINGS.fast_math,
                    None if out is None else (out.shape, out.strides, out.dtype, type(out)),
                    *[(values[i].shape, values[i].strides) for i in self._array_pos],
                )
            except (AttributeError, IndexError):
                key = None  # not arrays where arrays are expected: the general path converts them
            e = self.launches.get(key) if key is not None else None
            if e is not None:
                if e.size < min_size:
                    return self.fallback(values, out)
                if e.run is not None:
                    if e.size >= PARK_MIN:  # long enough that OpenBLAS's spinners would cost it
                        park_blas_workers()
                    outs = [np.empty(shp, dt) for shp, dt in e.outs]
                    if out is not None:
                        outs[0] = out
                    try:
                        e.run(values, outs)
                        if out is None and e.checked is not None:
                            self._last = (key[0], e)
                        return outs
                    except TypeError:
                        pass  # a value the launcher cannot read directly: the general path
            return self._launch(values, out, get_backend("cpu"), min_size, key)
        return self._device_call(values, out, backend, min_size)

    def _device_call(self, values: tuple, out: Any, be: Backend, min_size: int) -> list[Any]:
        """A device backend's launch: the signature's remembered launch, else the general path."""
        try:
            key = (
                be.name,
                SETTINGS.fast_math,
                None if out is None else (out.shape, out.strides, out.dtype, type(out)),
                *[(values[i].shape, values[i].strides, type(values[i])) for i in self._array_pos],
            )
        except (AttributeError, IndexError):
            return self._launch(values, out, be, min_size, None)
        e = self.device_launches.get(key)
        if e is None or e.size < min_size:
            return self._launch(values, out, be, min_size, None, key)
        arrays, _, fs, is_ = self._arguments(values, be)
        if out is not None and any(be.may_share(out, a) for a in arrays):
            raise ValueError("jit region: out= shares memory with an input the kernel reads")
        outs = [
            out if j == 0 and out is not None else be.empty(shp, dt) for j, (shp, dt) in enumerate(e.outs)
        ]
        e.program(arrays + outs, e.ints, fs, is_, e.grid, e.block)
        return outs

    def _arguments(self, values: tuple, be: Backend) -> tuple[list[Any], list[Any], list[float], list[int]]:
        """(arrays in the backend's memory, every value converted, float scalars, int scalars)."""
        spec = self.spec
        arrays: list[Any] = []
        converted: list[Any] = []
        fs = [0.0] * len(spec.scalars)  # scalar k is read from fs[k] (floats) or is_[k]
        is_ = [0] * len(spec.scalars)
        to_device = be.to_device
        for (kind, k), v, dt in zip(spec.arg_of_input, values, self.in_dtypes):
            if kind == "scalar":
                if dt.kind == "f":
                    fs[k] = float(v)
                else:
                    iv = int(v)
                    is_[k] = iv - (1 << 64) if iv >= 1 << 63 else iv
            else:
                v = to_device(v)
                arrays.append(v)
            converted.append(v)
        return arrays, converted, fs, is_

    def _launch(
        self,
        values: tuple,
        out: Any,
        be: Backend,
        min_size: int,
        key: tuple | None,
        device_key: tuple | None = None,
    ) -> list[Any]:
        """The general path: layout, variant (built on first use), loop arguments, launch.

        `key` (the CPU's) or `device_key` (a device backend's) remembers the launch."""
        spec = self.spec
        arrays, converted, fs, is_ = self._arguments(values, be)
        sizes = self._sizes(arrays)
        shapes = [tuple(1 if r < 0 else sizes[r] for r in spec.arrays[ai].roots) for _, ai in spec.outputs]
        size = max([a.size for a in arrays] + [int(np.prod(s)) for s in shapes] + [1 if values else 0])
        if size < min_size:
            if key is not None:
                self._remember(key, _Launch(size, None, ()))
            return self.fallback(values, out)
        if out is not None and any(be.may_share(out, a) for a in arrays):
            raise ValueError("jit region: out= shares memory with an input the kernel reads")
        outs = []
        for (_, ai), shp in zip(spec.outputs, shapes):
            ref = spec.arrays[ai]
            if out is not None and not outs:
                _check_out(be, out, shp, ref.dtype)
                outs.append(out)
            else:
                outs.append(be.empty(shp, ref.dtype))
        if self._deferred(be, None):
            return self.fallback(values, out)  # the toolchain is probed in the background
        if not be.available():
            if be.language != "c":
                raise RuntimeError(f"jit region: the {be.name} backend cannot compile and run kernels here")
            _warn_no_compiler()
            return self.fallback(values, out)
        if any(sizes[a] == 0 for a in spec.K):
            return outs  # a kept axis of size 0: every output is empty
        allarr = arrays + outs
        strides = lay.axis_strides(spec, allarr)
        layout = lay.make_layout(spec, sizes, strides)
        ints = lay.loop_args(spec, layout, sizes, strides)
        gen = generate.GENERATORS[be.language]
        vkey = (be.name, layout, gen.mode(layout, ints))
        v = self.variants.get(vkey)
        if v is None:
            if self._deferred(be, vkey):
                return self.fallback(values, out)  # compiled in the background; op by op meanwhile
            with self.lock:
                v = self.variants.get(vkey) or self._build(be, vkey)
        address = getattr(v.program, "address", None)
        if key is None or address is None:
            grid, block = v.launch(ints)
            v.program(allarr, ints, fs, is_, grid, block)
            if device_key is not None:
                if len(self.device_launches) >= MAX_LAUNCHES:
                    self.device_launches.clear()
                shapes_out = tuple((tuple(o.shape), o.dtype) for o in outs)
                self.device_launches[device_key] = _DeviceLaunch(
                    size, v.program, ints, grid, block, shapes_out
                )
            return outs
        flags = (launch.CHECK_OUT if out is not None else 0) | (launch.NOGIL if size >= NOGIL_SIZE else 0)
        run = launch.launcher(address, ints, self._plan, flags)
        checked = None
        if out is None:
            checked = launch.checked_launcher(address, ints, self._plan, flags, arrays)
        if size >= PARK_MIN:
            park_blas_workers()
        entry = _Launch(size, run, tuple((o.shape, o.dtype) for o in outs), checked)
        self._remember(key, entry)
        run(tuple(converted), outs)
        if checked is not None:
            self._last = (key[0], entry)
        return outs

    def _remember(self, key: tuple, entry: _Launch) -> None:
        if len(self.launches) >= MAX_LAUNCHES:
            self.launches.clear()  # argument signatures that keep changing: start over
        self.launches[key] = entry

    def source(self, layout: Layout, language: str = "c", mode: tuple | None = None) -> generate.Source:
        """The generated source of a layout in `language` (mode: the current numeric mode's, full blocks)."""
        gen = generate.GENERATORS[language]
        return gen.render(self.spec, layout, mode if mode is not None else gen.mode(layout, []))

    def _deferred(self, be: Backend, key: tuple[str, Layout, tuple] | None) -> bool:
        """Whether this launch runs on NumPy while the background compiles (jit/background.py).

        `key` None asks about the toolchain probe. Only the CPU backend (whose fallback values
        are its own arrays) defers; a job that failed is redone here, raising as it would.
        """
        if be.name != "cpu" or not background.enabled():
            return False
        if key is None:
            if background.toolchain_probed():
                return False
            background.probe_toolchain()
            return True
        return background.submit(("kernel", id(self), key), lambda: self._build_once(be, key))

    def _build_once(self, be: Backend, key: tuple[str, Layout, tuple]) -> None:
        with self.lock:
            if key not in self.variants:
                self._build(be, key)

    def _build(self, be: Backend, key: tuple[str, Layout, tuple]) -> Variant:
        src = self.render_variant(be, key)
        try:
            binary = be.compile(src.text, "lazygraph_kernel")
        except compile_c.CompileError as e:
            raise compile_c.CompileError(f"JIT kernel ({self.label()}) for {be.name}: {e}") from None
        return self.install(be, key, src, binary)

    def label(self) -> str:
        """The kernel's operators, for messages (`LAZYGRAPH_DEBUG` output, compile errors)."""
        more = ", ..." if len(self.names) > 8 else ""
        return f"{len(self.names)} ops: {', '.join(self.names[:8])}{more}"

    def render_variant(self, be: Backend, key: tuple[str, Layout, tuple]) -> generate.Source:
        """The source of one variant (printed at LAZYGRAPH_DEBUG=3)."""
        _, layout, mode = key
        src = generate.GENERATORS[be.language].render(self.spec, layout, mode)
        if debug_level() >= 3:
            log(
                f"JIT kernel for {be.name} ({len(self.names)} ops: {', '.join(self.names)})\n"
                f"{src.explain}\n{compile_c.numbered(src.text)}"
            )
        return src

    def install(
        self, be: Backend, key: tuple[str, Layout, tuple], src: generate.Source, binary: Any
    ) -> Variant:
        """Load a compiled variant and publish it (the caller holds `lock`)."""
        program = be.load(binary, "lg_kernel", src.scalars)
        if be.name == "cpu":
            launch.prepare()  # the launcher, built once per machine like a kernel
        v = self.variants[key] = Variant(program, src.result, src.text, src.launch)
        return v

    def plan(self, be: Backend, args: Sequence[Shaped | None], min_size: int = 0) -> tuple | None:
        """The variant key a launch with arrays of these shapes and strides would use (None: none).

        `args` follows `Region.inputs` (None for scalars); the outputs are taken as fresh
        C-contiguous arrays, as the launch allocates them (a planned `out=` buffer is one too).
        Mirrors `_launch`: None where that launch would not compile (small sizes, empty axes).
        """
        if min_size and not launch.FAST:
            min_size = max(min_size, launch.CTYPES_MIN_SIZE)
        spec = self.spec
        arrays = [a for (kind, _), a in zip(spec.arg_of_input, args) if kind != "scalar"]
        if any(a is None for a in arrays):
            return None
        sizes = self._sizes(arrays)
        outs = []
        for _, ai in spec.outputs:
            shp = tuple(1 if r < 0 else sizes[r] for r in spec.arrays[ai].roots)
            outs.append(Shaped.contiguous(shp, spec.arrays[ai].dtype))
        size = max([a.size for a in arrays + outs] + [1 if args else 0])
        if size < min_size or any(sizes[a] == 0 for a in spec.K):
            return None
        allarr = arrays + outs
        strides = lay.axis_strides(spec, allarr)  # type: ignore[arg-type]
        layout = lay.make_layout(spec, sizes, strides)
        ints = lay.loop_args(spec, layout, sizes, strides)
        return (be.name, layout, generate.GENERATORS[be.language].mode(layout, ints))

    def layout_for(self, arrays: list[Any]) -> tuple[Layout, dict[int, int], list[dict[int, int]]]:
        """Layout, axis sizes and strides for input arrays plus output arrays of the right shapes."""
        sizes = self._sizes(arrays)
        outs = []
        for _, ai in self.spec.outputs:
            ref = self.spec.arrays[ai]
            outs.append(np.empty(tuple(1 if r < 0 else sizes[r] for r in ref.roots), dtype=ref.dtype))
        strides = lay.axis_strides(self.spec, arrays + outs)
        return lay.make_layout(self.spec, sizes, strides), sizes, strides

    def fallback(self, values: tuple, out: np.ndarray | None = None) -> list[np.ndarray]:
        """The region op by op with the NumPy reference kernels (the first output copied to `out`)."""
        env: list[Any] = list(values)
        with np.errstate(all="ignore"):
            for op, attrs, ins in self.program:
                env.append(np.asarray(op.kernel(*(env[i] for i in ins), **attrs)))
        outs = [np.asarray(env[i]) for i in self.out_slots]
        if out is not None:
            _check_out(get_backend("cpu"), out, outs[0].shape, outs[0].dtype)
            np.copyto(out, outs[0])
            outs[0] = out
        return outs


def _check_out(be: Backend, out: Any, shape: tuple, dtype: np.dtype) -> None:
    """A given output buffer must be a writeable array of the backend, of the output's shape and dtype."""
    writeable = getattr(getattr(out, "flags", None), "writeable", True)
    if not be.is_buffer(out) or out.shape != shape or out.dtype != dtype or not writeable:
        got = f"{getattr(out, 'shape', None)} {getattr(out, 'dtype', type(out).__name__)}"
        raise ValueError(f"jit region: out= is {got}, the output is {shape} {np.dtype(dtype)}")


_kernels: dict[tuple, FusedKernel] = {}
_kernels_lock = threading.Lock()


def compile_region(region: Region) -> FusedKernel:
    """The kernel for `region`'s structure (built once per structure, whichever thread asks)."""
    sig = signature(region)
    k = _kernels.get(sig)
    if k is None:
        with _kernels_lock:
            k = _kernels.get(sig)
            if k is None:
                k = _kernels[sig] = FusedKernel(region)
    return k


def kernel_count() -> int:
    """Distinct region structures compiled in this process."""
    return len(_kernels)


def dtype_ok(node: Node) -> bool:
    """True when fused kernels support the node's dtype."""
    return types.supported(node.dtype)
