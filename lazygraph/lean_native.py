"""The lean recorders' hit path (lean_record.c) and the templates' matchers (lean_match.c) as one C
extension, built by the system compiler.

Recording `a + b` in Python costs about 1.5 us on a slow machine: the recorder's frame, the
node's, storage's and array's construction, a dozen attribute reads. The C recorder does the
same work in one call (about 1 us in all, most of it the three objects) for the case the
Python recorder's memo already answers, and hands everything else to the Python
recorder, so what gets recorded is decided in one place. Built once per machine, Python and
compiler (about 0.4 s, at the first import) and kept in the kernel cache beside the JIT's
launcher and the element extension (jit/extension.py: verified by its SHA-256, imported from
a private copy). Without a compiler or Python's headers, or with `LAZYGRAPH_NATIVE_RECORD=0`,
the Python recorders run alone. (A setuptools extension would be built at install time
instead; building here keeps `pip install` free of a compiler and shares the JIT's toolchain
and store.)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from jit import compile_c, extension
from ops.node import Node
from ops.settings import SETTINGS

MODULE = "_lazygraph_lean"
STORE_DIR = "lean"  # in the kernel cache, beside the JIT's launcher and the element extension
SOURCE = Path(__file__).with_name("lean_record.c")
MATCH_SOURCE = Path(__file__).with_name("lean_match.c")  # compiled into the same module, first


@functools.cache
def _extension() -> ModuleType | None:
    """The built module (the matchers' text, then the recorder's), or None: no compiler or
    headers, or it failed (warned)."""
    try:
        text = MATCH_SOURCE.read_text() + SOURCE.read_text()
        return extension.load(MODULE, text, STORE_DIR, [], "lean recorder C", None)
    except ImportError:
        return None  # no compiler or no Python.h: recording and matching stay in Python, as documented
    except (compile_c.CompileError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        warnings.warn(
            f"lazygraph: the C recorder and matcher are unavailable ({first}); they stay in Python",
            stacklevel=2,
        )
        return None


@functools.cache
def module() -> ModuleType | None:
    """The loaded extension for the recorders, or None (switched off, or no extension)."""
    return _extension() if SETTINGS.native_record else None


@functools.cache
def _ready(shared: Callable[[], tuple]) -> ModuleType | None:
    """The extension, given once the names every recorder reads (`shared()`), or None."""
    m = module()
    if m is not None:
        names = shared()
        m.setup(*names)
        names[1].__del__ = m.storage_finalizer()  # Storage's, without a Python frame per dropped array
    return m


def wrap(arity: int, opdef: Any, memo: dict, python: Any, swap: bool, shared: Callable[[], tuple]) -> Any:
    """The C recorder of one operator with `python` for everything it does not handle, or `python`.

    `swap`: a reflected dunder's (`__radd__(self, other)` records `other + self`); `shared`:
    the names every recorder reads (lean_record.c `setup`), asked for once per process.
    """
    m = _ready(shared)
    return python if m is None else m.make(arity, swap, opdef, memo, python)


@functools.cache
def match_module() -> ModuleType | None:
    """The extension for the templates' matchers (cache/tmatch.py `NATIVE`), or None (no extension).

    The recorders load it at import; with `LAZYGRAPH_NATIVE_RECORD=0` it is loaded when the first
    template's matcher is compiled (on the background worker when it runs).
    """
    m = _extension()
    if m is not None:
        m.match_setup(Node)
    return m


def native_matcher(loaded_only: bool = False) -> ModuleType | None:
    """`match_module()` as the setting stands now (a test switches it off and back); with
    `loaded_only`, None until the extension has been loaded (asking must not build it on a hit path)."""
    if not SETTINGS.native_match or loaded_only and _extension.cache_info().currsize == 0:
        return None
    return match_module()
