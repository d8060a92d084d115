"""What a piece declares about itself for `gradxform.fused` (the protocol is
described in `gradxform._fused`'s module docstring).

A piece marks its ``update`` function with `fusable` (or `not_fusable`); the
mark is an attribute of the function object, so it goes wherever the function
goes, whatever its name. A state NamedTuple lists the fields that hold one
number per leaf in a ``per_leaf_fields`` class attribute. This module imports
nothing from gradxform, so every piece can import it.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

__all__ = ["Fusable", "fusable", "not_fusable", "declaration", "per_leaf_fields", "ATTR"]

ATTR = "gx_fusable"  # the attribute `fusable` sets on an update function


@dataclasses.dataclass(frozen=True)
class Fusable:
    """The declaration `fusable` attaches (as ``update.gx_fusable``).

    ``check(closure_cells: dict, facts: dict) -> reason | None``: refuses some
    configurations of the piece (a reason string) or notes facts about them
    (``facts["bit_exact"] = False``, ``facts["isolate_first"] = True``);
    None: every configuration fuses.

    ``bit_exact``: False where the fused run agrees with the per-leaf one to
    float32 rounding only. A norm (global, or per leaf as a segment sum over a
    buffer, see `gradxform.pieces._segments`) adds the same float32 numbers in
    another order. Per-leaf values applied per element (spread over a buffer,
    or row flags) are the same arithmetic, but XLA fuses it differently than
    with a broadcast scalar, and XLA:CPU contracts a multiply-add into an FMA
    per fusion, so a result may differ in its last bit (measured: 2e-7
    relative)."""
    check: Callable | None = None
    bit_exact: bool = True


def _is_tx(x) -> bool:
    return isinstance(x, tuple) and hasattr(x, "init") and callable(getattr(x, "update", None))


def fusable(update=None, check: Callable | None = None, *, bit_exact: bool = True):
    """Declares a piece elementwise with per-leaf scalars (or per-leaf
    reductions), so `gradxform.fused` runs chains using it on flat buffers.

    ``update``: the piece's update function (or a transformation, whose
    ``update`` is marked); returns it. Without it, a decorator::

        @fusable                        # always elementwise, bit-exact
        def update(updates, state, params=None, **extra_args): ...

        @fusable(bit_exact=False)       # e.g. a per-leaf norm (segment sums)
        @fusable(check=my_check)        # my_check(closure_cells, facts) -> reason | None
    """
    if isinstance(update, str):
        raise TypeError("fusable: pieces are declared on their update function now, not by "
                        f"'module:qualname' ({update!r}); pass the function (or use @fusable on it).")
    decl = Fusable(check, bit_exact)

    def mark(target):
        fn = target.update if _is_tx(target) else target
        if not callable(fn):
            raise TypeError(f"fusable: expected an update function or a transformation; got {target!r}.")
        setattr(getattr(fn, "__func__", fn), ATTR, decl)
        return target

    return mark if update is None else mark(update)


def not_fusable(reason: str | Callable[[dict], str]):
    """Declares a piece that is never fused, with the reason `why_not_fused`
    gives: a string, or ``reason(closure_cells) -> str``. (An undeclared piece
    is not fused either; this only names why.)"""
    return fusable(check=lambda cells, facts: reason(cells) if callable(reason) else reason)


def declaration(fn) -> Fusable | None:
    """The `Fusable` declared on an update function, or None."""
    decl = getattr(fn, ATTR, None)
    return decl if isinstance(decl, Fusable) else None


def per_leaf_fields(node) -> tuple:
    """The fields a state NamedTuple declares per leaf (``per_leaf_fields``)."""
    return tuple(getattr(type(node), "per_leaf_fields", ()))
