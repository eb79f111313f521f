"""Arrays that read another array's current value through an operator and write back into it.

`z.real`/`z.imag` (numlib_complex.ComplexPart) and `a.view(dtype)` (array_methods.DtypeView)
are not memory views, since a lazy value is not memory: each is an operator applied to its
owner's value, re-read whenever the owner was written since, and a write into it is recorded as
a write of the owner's new value. This base holds that bookkeeping once; a subclass says how
to read (`_read`) and how its new value becomes the owner's (`_owner_value`).
"""

from __future__ import annotations

from typing import Any

from lazygraph.array import Array


class OwnedView(Array):
    """An operator's view of `owner`: reads follow the owner, writes are recorded into it."""

    __slots__ = ("_owner", "_seen")

    #: what a write into the view is called in the owner's errors
    write_name = "view assignment"

    def __init__(self, owner: Array, **kw: Any) -> None:
        self._owner = owner
        super().__init__(self._read()._storage, **kw)
        self._seen = owner.node

    def _read(self) -> Array:
        """The view's value recorded from the owner's current value."""
        raise NotImplementedError

    def _owner_value(self, mine: Array) -> Array:
        """The owner's new value once the view holds `mine`."""
        raise NotImplementedError

    def _refresh(self) -> None:
        owner = self._owner.node
        if owner is not self._seen:  # the owner was written since: read it again
            self._seen = owner
            self._storage.set(self._read().node)

    @property
    def node(self) -> Any:
        """The view of the owner's current value (or what was written through the view)."""
        self._refresh()
        return Array.node.fget(self)

    def _derive(self, view: Any, readonly: bool = False) -> Array:
        self._refresh()
        return super()._derive(view, readonly)

    def _write_back(self) -> None:
        self._owner._write(self._owner_value(Array(self._storage)), op=self.write_name)
        self._seen = self._owner.node

    def __setitem__(self, key: Any, value: Any) -> None:
        self._refresh()
        super().__setitem__(key, value)
        self._write_back()

    def _inplace(self, op: str, other: Any) -> Array:
        self._refresh()
        super()._inplace(op, other)
        self._write_back()
        return self
