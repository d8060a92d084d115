"""What ``Trainer.load_states`` reads besides its own checkpoints: a Gluon
``.states`` file or a migrated state tree, and Gluon's rule that loading keeps
the current per-parameter multipliers."""
from __future__ import annotations

import io
import itertools
import os

import jax
import numpy as np

from .._domains import domain_error
from .._files import read_regular
from .._hyper import HYPER_FIELDS, READ_ONLY
from .._ranges import Range, check_value, declared_range, owner_of
from .._state_paths import get_path, replace_fields, state_paths, written_out
from ..checkpoint import MAGIC, CheckpointError

__all__ = ["is_file", "is_gluon_states", "read_source", "migrated_state", "no_order", "keep_multipliers",
           "state_forms", "check_values", "value_error"]

MULTIPLIER_FIELDS = ("lr_mult", "wd_mult")


def is_file(x) -> bool:
    """A path (str, bytes, os.PathLike) or an open file, rather than a state tree."""
    return isinstance(x, (str, bytes, os.PathLike)) or hasattr(x, "read")


# How a pickle of Gluon's states can begin: PROTO (protocols 2-5), MARK (a
# (states, optimizer) tuple at protocol 0/1, or a Module dict at protocol 0),
# EMPTY_DICT (a Module dict at protocol 1).
_PICKLE_STARTS = (b"\x80", b"(", b"}")


def is_gluon_states(data: bytes) -> bool:
    """Whether the bytes of a file are a Gluon/Module ``.states`` pickle (any
    protocol `gradxform.migrate.from_gluon_states` reads) rather than a
    gradxform checkpoint (which starts with its magic, or a part of it when truncated)."""
    if MAGIC.startswith(data[:len(MAGIC)]) and data:
        return False
    return data[:1] in _PICKLE_STARTS


def read_source(fname) -> io.BytesIO:
    """The file's bytes, read once (so detecting its format and loading it see
    the same bytes), named as the file; a FIFO, device or directory is refused
    as a corrupt checkpoint before a byte is read."""
    data, label = read_regular(fname, "Trainer.load_states",
                               lambda label, why: CheckpointError("corrupt", label, why))
    out = io.BytesIO(data)
    out.name = label
    return out


def no_order(order) -> None:
    """``load_states(order=...)`` is for a Gluon file: a gradxform checkpoint or a
    state tree is in the Trainer's own leaf order already."""
    if order is not None:
        raise ValueError("Trainer.load_states(order=...): order maps a Gluon .states file's MXNet indices onto "
                         "the parameters; this is a gradxform checkpoint or a state tree, already in the "
                         "Trainer's order: call trainer.load_states(fname) without order.")


def migrated_state(source, params, like, tx, *, order=None):
    """The optimizer state from a Gluon ``.states`` file (read for ``tx`` by
    `gradxform.migrate.from_gluon_states`, in ``order``: default Gluon's,
    `gradxform.migrate._gluon.gluon_order`) or a migrated state tree, checked
    against ``like`` (the Trainer's per-leaf state: structure and shapes).
    ``tx`` wrapped by the Trainer (skip_nonfinite, loss_scale): the wrapper's
    counters, which a Gluon file does not hold, start afresh, as MXNet's own
    resume starts a new AMP ``LossScaler`` at 2**16."""
    if not is_file(source):
        no_order(order)
    else:
        from ..migrate import from_gluon_states  # noqa: PLC0415  (the readers load only when used)
        from ..migrate._state import SET_BY_CALLER  # noqa: PLC0415
        token = SET_BY_CALLER.set(("rescale_grad",))  # step() sets it (1/batch_size), as Gluon's
        try:
            source = from_gluon_states(source, params, tx, order=order)
        finally:
            SET_BY_CALLER.reset(token)
    got = jax.tree.structure(source)
    like = next((f for f in state_forms(like, params) if jax.tree.structure(f) == got), like)
    want = jax.tree.structure(like)
    if want != got:
        raise ValueError(f"Trainer.load_states: the state tree has structure {got}; this Trainer's "
                         f"optimizer state has {want}.")
    for (path, w), g in zip(jax.tree_util.tree_leaves_with_path(like), jax.tree.leaves(source)):
        if tuple(np.shape(g)) != tuple(w.shape):
            raise ValueError(f"Trainer.load_states: state{jax.tree_util.keystr(path)} has shape "
                             f"{tuple(np.shape(g))}; expected {tuple(w.shape)}.")
    return jax.tree.map(lambda g, w: np.asarray(g, w.dtype), source, like)


def state_forms(state, params) -> list:
    """The forms a saved state may take for a Trainer whose state is ``state``
    now, ``state`` first: each optional per-leaf field (step counts shared or
    per leaf, as after a step with stale gradients; multipliers absent or
    stored) either way, in every combination of the first 8 such fields (256
    forms at most, each of which a load tries; later ones stay as now)."""
    slots = [(path, f) for path, node in state_paths(state) for f in getattr(type(node), "optional_fields", {})]
    forms = []
    for choice in itertools.product((False, True), repeat=min(len(slots), 8)):
        edits: dict = {}
        for (path, field), per_leaf in zip(slots, choice):
            node = get_path(state, path)
            edits.setdefault(path, {})[field] = \
                getattr(written_out(node, field, params), field) if per_leaf else None
        forms.append(replace_fields(state, edits))
    current = jax.tree.structure(state)
    return [state] + [f for f in forms if jax.tree.structure(f) != current]


def keep_multipliers(state, current):
    """``state`` with ``current``'s ``lr_mult``/``wd_mult``: Gluon's
    ``load_states`` restores the optimizer's state but keeps the multipliers
    of the parameters it is given (they are set on the Parameters)."""
    edits = {path: {f: getattr(node, f) for f in MULTIPLIER_FIELDS if hasattr(node, f)}
             for path, node in state_paths(current)}
    return replace_fields(state, {p: e for p, e in edits.items() if e})


def value_error(state) -> str | None:
    """Why a loaded ``state`` holds a value no run can reach, or None: every
    hyperparameter in its owner's declared range (`gradxform._ranges`, as
    `set_hyper` checks it; finite where none is declared), and every state
    field in the domain its class declares (`gradxform._domains`: step counts
    in [0, 2**31 - 2], second moments >= 0, beta powers in [0, 1], ...).
    Checked before a loaded state replaces the Trainer's."""
    for path, node in state_paths(state):
        for field in HYPER_FIELDS:
            hyper = getattr(node, field, None) if field in getattr(node, "_fields", ()) else None
            for name, value in (hyper.items() if isinstance(hyper, dict) else ()):
                owner = owner_of(name)
                rng = (declared_range(owner, name) if name not in READ_ONLY else None) or Range()
                if name == "scheduled":
                    continue
                why = _out_of(rng, value, f"{type(node).__name__}.{field}[{str(name)!r}]", owner)
                if why:
                    return why
    return domain_error(state)


def check_values(state, label: str | None) -> None:
    """`value_error` raised: a `CheckpointError` ('corrupt') naming the file
    ``label``, or a ValueError for a state tree (``label`` None)."""
    why = value_error(state)
    if why is not None and label is None:
        raise ValueError(f"Trainer.load_states: the state tree holds a value no run reaches: {why}")
    if why is not None:
        raise CheckpointError("corrupt", label, f"it holds a value no run reaches: {why}")


def _out_of(rng: Range, value, what: str, owner) -> str | None:
    for v in np.asarray(value, np.float64).reshape(-1):
        try:
            check_value("Trainer.load_states", what, float(v), rng, as_stored=False,
                        suffix=f" (the range of {owner})" if owner else "")
        except (TypeError, ValueError) as err:
            return str(err)
    return None
