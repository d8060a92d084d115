"""The short forms of `gradxform._spec.declare` that say how a piece fuses
(the protocol is described in `gradxform._fused`'s module docstring).

``@fusable`` declares a piece elementwise with per-leaf scalars (or per-leaf
reductions); ``@not_fusable(reason)`` names why it never fuses. Both fill in
the update function's one `Spec` and go wherever the function goes, whatever
its name. A piece that also reads or writes the step context says it all in
one `gradxform._spec.declare` (``@declare(needs=("lr",), fusion=Fusion())``). A state NamedTuple lists the
fields that hold one number per leaf in a ``per_leaf_fields`` class
attribute (each a 1-D array, an entry per leaf). This module imports only `gradxform._spec`, so every piece can
import it.
"""
from __future__ import annotations

from typing import Iterable

from ._spec import Fusion, declare

__all__ = ["fusable", "not_fusable"]


def fusable(update=None, *, bit_exact: bool = True, isolate_first: bool = False, reductions: Iterable = ()):
    """Declares a piece elementwise with per-leaf scalars (or per-leaf
    reductions, named in ``reductions``), so `gradxform.fused` runs chains
    using it on flat buffers; ``bit_exact`` and ``isolate_first`` as in
    `gradxform._spec.Fusion`, decided by the factory from its own options.

    ``update``: the piece's update function (or a transformation, whose
    ``update`` is marked); returns it. Without it, a decorator::

        @fusable                        # always elementwise, bit-exact
        def update(updates, state, params=None, **extra_args): ...

        @fusable(bit_exact=False, reductions=("leaf_sum",))   # a per-leaf norm
    """
    if isinstance(update, str):
        raise TypeError("fusable: pieces are declared on their update function now, not by "
                        f"'module:qualname' ({update!r}); pass the function (or use @fusable on it).")
    return declare(update, fusion=Fusion(bit_exact, isolate_first, None, tuple(reductions)))


def not_fusable(reason: str):
    """Declares a piece that is never fused, with the reason `why_not_fused`
    gives (a string the factory makes from its own options). An undeclared
    piece is not fused either; this only names why."""
    if not isinstance(reason, str):
        raise TypeError("not_fusable(reason): a string, made where the piece is built (a function of "
                        f"its closure is no longer read); got {reason!r}.")
    return declare(fusion=Fusion(refuse=reason))
