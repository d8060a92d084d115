"""The two errors of `gradxform.migrate`, and `short`, the only repr a message may
hold of a value read from a file."""
from __future__ import annotations

import reprlib

__all__ = ["MigrateError", "UnsafePickleError", "short"]


class MigrateError(ValueError):
    """A state file that cannot be turned into a gradxform state: corrupt,
    truncated, hostile, or not matching the parameters or the optimizer."""


class UnsafePickleError(MigrateError):
    """The pickle names a global outside the allow-list, or asks for a
    construct a state file never needs; nothing was called."""


_REPR = reprlib.Repr()
_REPR.maxlevel = 3            # a tuple graph that shares nodes is never walked as a tree
_REPR.maxstring = _REPR.maxother = 60
_REPR.maxtuple = _REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = 6


def short(value) -> str:
    """A repr of ``value`` costing at most a few hundred characters of work,
    whatever the file made it (nested a million deep, or a graph of shared
    tuples whose full repr would take 2**64 steps): `reprlib` with at most 60
    characters of a string or of an object's own repr (bytes included), 6
    items of a container and 3 levels of nesting, each cut marked ``...``."""
    try:
        return _REPR.repr(value)
    except Exception:  # noqa: BLE001 -- a message must never fail
        return f"<{type(value).__name__}>"
