"""The two errors of `gradxform.migrate`, `short`, the only repr a message may
hold of a value read from a file, and `refuse_frameworkless`, the one answer for
an optimizer no framework has."""
from __future__ import annotations

import reprlib

from .._hyper import _hyper_dicts
from .._ranges import owner_of

__all__ = ["MigrateError", "UnsafePickleError", "short", "FRAMEWORKS", "frameworkless_message",
           "refuse_frameworkless"]

# the families whose framework's saved state gradxform.migrate reads (Gluon, Paddle, MindSpore files); a
# family outside it (gradxform.neutral: optimizers no framework has) has no framework state to migrate from
FRAMEWORKS = ("mxnet", "paddle", "mindspore")


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


def frameworkless_message(who: str, family: str, subject: str) -> str:
    """Why ``subject`` (the tx, or a ``framework=`` argument), of gradxform's
    own ``family``, has no framework state to migrate from."""
    return (f"{who}: {subject}: the {family!r} family holds optimizers that no framework has, so no framework "
            f"ever saved a state for them and there is nothing to migrate (gradxform.migrate reads the state of "
            f"the {', '.join(FRAMEWORKS)} optimizers). To continue a framework's run, build tx as that framework's "
            f"optimizer (gradxform.create('<framework>.<name>', ...)); a {family} optimizer's own state saves and "
            "loads with gradxform.save_state / gradxform.load_state.")


def refuse_frameworkless(state, who: str) -> None:
    """A `MigrateError` when ``state`` (``tx.init(params)``) belongs to an
    optimizer of a family outside `FRAMEWORKS` (``neutral.lion``), read from
    the name its hyperparameters carry (``gradxform._hyper.tag_owner``)."""
    owners = sorted({o for d in _hyper_dicts(state) for k in d if (o := owner_of(k))})
    foreign = [o for o in owners if o.split(".", 1)[0] not in FRAMEWORKS]
    if foreign:
        raise MigrateError(frameworkless_message(who, foreign[0].split(".", 1)[0], f"tx is {foreign[0]!r}"))
