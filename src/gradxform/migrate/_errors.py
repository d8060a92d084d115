"""The two errors of `gradxform.migrate`, `short`, the only repr a message may
hold of a value read from a file, `refuse_frameworkless`, the one answer for
an optimizer no framework has, and `refuse_unmigratable`, the one answer for
an optimizer whose framework's file a reader does not read."""
from __future__ import annotations

import reprlib

from .._hyper import _hyper_dicts
from .._ranges import owner_of
from .._registry import declarations

__all__ = ["MigrateError", "UnsafePickleError", "short", "FRAMEWORKS", "READERS", "frameworkless_message",
           "refuse_frameworkless", "refuse_unmigratable", "migratable"]

# the families whose framework's saved state gradxform.migrate reads (Gluon, Paddle, MindSpore files); a
# family outside it (gradxform.neutral: optimizers no framework has) has no framework state to migrate from
FRAMEWORKS = ("mxnet", "paddle", "mindspore")
# each family's reader of its framework's saved optimizer state
READERS = {"mxnet": "from_gluon_states", "paddle": "from_paddle_state_dict",
           "mindspore": "from_mindspore_checkpoint"}


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


def _owners(state) -> list[str]:
    """The registered names the hyperparameters of ``state`` carry (`gradxform._hyper.tag_owner`)."""
    return sorted({o for d in _hyper_dicts(state) for k in d if (o := owner_of(k))})


def refuse_frameworkless(state, who: str) -> None:
    """A `MigrateError` when ``state`` (``tx.init(params)``) belongs to an
    optimizer of a family outside `FRAMEWORKS` (``neutral.lion``), read from
    the name its hyperparameters carry (``gradxform._hyper.tag_owner``)."""
    foreign = [o for o in _owners(state) if o.split(".", 1)[0] not in FRAMEWORKS]
    if foreign:
        raise MigrateError(frameworkless_message(who, foreign[0].split(".", 1)[0], f"tx is {foreign[0]!r}"))


def migratable(family: str) -> frozenset[str]:
    """The registered names of ``family`` whose `Declaration` says its
    reader continues their runs from the framework's saved state."""
    return frozenset(k for k, d in declarations(family).items() if d.migrates)


def refuse_unmigratable(state, who: str, family: str) -> None:
    """A `MigrateError`, before any file is read, unless every optimizer
    ``state`` (``tx.init(params)``) belongs to is `migratable` (its
    declaration says ``family``'s reader ``who`` reads its saved state): an
    optimizer of another family is sent to its own reader, one of this family
    that the reader does not read is named with the ones it does. A state of
    unnamed pieces (a chain built by hand) is let through: its slots are
    matched as the file's are."""
    refuse_frameworkless(state, who)
    owners = _owners(state)
    mine = [o for o in owners if o.split(".", 1)[0] == family]
    others = [o for o in owners if o.split(".", 1)[0] != family]
    if others and not mine:
        other = others[0].split(".", 1)[0]
        raise MigrateError(f"{who}: tx is {others[0]!r}, an optimizer of the {other!r} family; {who} reads the "
                           f"files of {family!r} optimizers. A {other} run's state goes through "
                           f"gradxform.migrate.{READERS.get(other, '?')}.")
    migrates = migratable(family)
    missing = [o for o in mine if o not in migrates]
    if missing:
        readable = ", ".join(sorted(n.split(".", 1)[1] for n in migrates))
        raise MigrateError(f"{who}: {missing[0]!r} cannot be migrated: {who} reads the saved state of {readable} "
                           f"only; the layout of {missing[0].split('.', 1)[1]}'s file is not one it knows, so a run "
                           f"of it cannot continue from its framework's file. Start from tx.init(params) (its "
                           f"moments from zero), or continue with one of those optimizers.")
