"""Writing values read from a framework file into the state ``tx.init(params)`` made.

Readers describe *where* each value goes with a `Slot`: a piece's state
NamedTuple class (the class itself), one of its fields, and optionally a hyperparameter
name that piece must hold (to tell apart e.g. a momentum trace from an RMS
accumulator, both ``TraceState``). A field is either per-parameter (a pytree
with the params' structure: one array per leaf, in leaf order) or a whole
array (a step counter, a scalar). `fill_state` checks every slot matches
exactly one place in the state, checks shapes and dtypes, and builds the new
state in one go: nothing is half-loaded.
"""
from __future__ import annotations

import contextvars
import functools
import os
import struct
from typing import Any, Mapping, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._domains import MAX_COUNT, domain_error
from .._group_hyper import GroupHyper, base_name
from .._state_paths import get_path, is_leaf_vector, replace_fields, shaped_like, state_paths
from .._tree import param_names
from .._files import PathTypeError
from .._ranges import Range, check_value
from .._warn import warn_at_caller
from ._errors import short
from ._pickle import MigrateError

__all__ = ["Slot", "checked_value", "file_label", "fill_state", "has_slot", "resolve_order", "tree_hyper", "warn_hyper_mismatch"]


class Slot(NamedTuple):
    cls: type                # the state NamedTuple's class
    field: str               # its field
    key: str | None = None   # a hyperparameter the node must hold (disambiguation)


def _matches(node, slot: Slot, treedef, per_leaf: bool) -> bool:
    if type(node) is not slot.cls or slot.field not in node._fields:
        return False
    if slot.key is not None:
        hyper = getattr(node, "hyper", None)
        if not isinstance(hyper, dict) or slot.key not in hyper:
            return False
    if per_leaf:  # a tree shaped like the parameters (with () where a leaf's slot holds nothing:
        # AdaFactor's factors of a vector), or a declared per-leaf vector
        field = getattr(node, slot.field)
        return jax.tree.structure(field) == treedef or is_leaf_vector(node, slot.field, treedef.num_leaves) \
            or shaped_like(treedef)(field)
    return True


def _find(state, slot: Slot, treedef, per_leaf: bool) -> list[tuple]:
    return [p for p, node in state_paths(state, slot.cls) if _matches(node, slot, treedef, per_leaf)]


def has_slot(state, params, slot: Slot, per_leaf: bool = True) -> bool:
    return bool(_find(state, slot, jax.tree.structure(params), per_leaf))


def _describe(slot: Slot) -> str:
    return f"{slot.cls.__name__}.{slot.field}" + (f" (holding {slot.key!r})" if slot.key else "")


def fill_state(state, params, per_leaf: Mapping[Slot, Sequence[Any]], whole: dict[Slot, Any], *,
               who: str, hint: str) -> Any:
    """Returns ``state`` with the given values written in.

    ``per_leaf[slot]``: one numpy array (or None: keep the initial value) per
    parameter leaf, in leaf order. ``whole[slot]``: one array replacing the
    field (cast to the field's dtype; the shape must match). Raises
    `MigrateError` naming the slot when it is missing or ambiguous in
    ``state`` (``hint`` says which optimizer ``tx`` should be), naming the
    parameter when a shape does not fit, and naming the field, the leaf and
    the value when the filled state holds a value outside the domain its
    class declares (`gradxform._domains`: a negative second moment, a beta
    power above 1): every reader ends here, so each gets the check.
    """
    treedef = jax.tree.structure(params)
    names = param_names(params)
    edits: dict[tuple, dict[str, Any]] = {}
    for table, is_leaf in ((per_leaf, True), (whole, False)):
        for slot, value in table.items():
            paths = _find(state, slot, treedef, is_leaf)
            if not paths:
                raise MigrateError(f"{who}: tx's state has no {_describe(slot)}, which the file has "
                                   f"values for; {hint}")
            if len(paths) > 1:
                raise MigrateError(f"{who}: tx's state has {len(paths)} places for {_describe(slot)}; "
                                   "cannot tell which one the file's values belong to.")
            edits.setdefault(paths[0], {})[slot.field] = (value, is_leaf, slot)

    def convert(old, new, what):
        old_a = jnp.asarray(old)
        new = np.asarray(new)
        if new.shape != old_a.shape:
            raise MigrateError(f"{who}: {what} has shape {new.shape} in the file; tx expects {old_a.shape}.")
        if jnp.issubdtype(old_a.dtype, jnp.floating):
            if not np.issubdtype(new.dtype, np.floating):
                raise MigrateError(f"{who}: {what} is {new.dtype} in the file; a framework keeps it as "
                                   f"floating point ({old_a.dtype} in tx), so the file is corrupt.")
            if not np.all(np.isfinite(new)):
                raise MigrateError(f"{who}: {what} holds NaN or Inf in the file: the run had already "
                                   "diverged when it was saved (resume from an earlier checkpoint).")
        if new.dtype != old_a.dtype:
            if not (np.issubdtype(new.dtype, np.number) or new.dtype == np.bool_):
                raise MigrateError(f"{who}: {what} has dtype {new.dtype} in the file; tx expects {old_a.dtype}.")
            if np.issubdtype(new.dtype, np.floating) and np.issubdtype(old_a.dtype, np.floating) \
                    and np.finfo(new.dtype).bits > np.finfo(old_a.dtype).bits:
                warn_at_caller(f"{who}: {what} is {new.dtype} in the file and {old_a.dtype} in tx; it is "
                               "rounded (MXNet keeps some accumulators in float32 for float16 weights; "
                               "use multi_precision=True to keep them exact).")
        return jnp.asarray(new, dtype=old_a.dtype)

    # Convert everything first (all errors surface before anything is built).
    converted: dict[tuple, dict[str, Any]] = {}
    for path, fields in edits.items():
        node = get_path(state, path)
        out = {}
        for field, (value, is_leaf, slot) in fields.items():
            old = getattr(node, field)
            if is_leaf and is_leaf_vector(node, field, treedef.num_leaves):
                # one entry per parameter leaf: each leaf's value from the file, or kept
                if len(value) != treedef.num_leaves:
                    raise MigrateError(f"{who}: internal: {len(value)} values for {treedef.num_leaves} leaves.")
                out[field] = jnp.stack([old[i] if v is None else convert(old[i], v, f"{_describe(slot)} of "
                                                                         f"parameter {n!r}")
                                        for i, (v, n) in enumerate(zip(value, names))]) \
                    if treedef.num_leaves else old
            elif is_leaf:
                old_leaves = treedef.flatten_up_to(old)
                if len(value) != len(old_leaves):
                    raise MigrateError(f"{who}: internal: {len(value)} values for {len(old_leaves)} leaves.")
                new_leaves = [o if v is None else convert(o, v, f"{_describe(slot)} of parameter {n!r}")
                              for o, v, n in zip(old_leaves, value, names)]
                out[field] = treedef.unflatten(new_leaves)
            elif old is None and isinstance(getattr(type(node), "optional_fields", {}).get(field), str):
                # a per-leaf field the state holds shared (StepState.leaf_counts None: every
                # leaf's count is count): kept shared when the file's values all are
                out[field] = _shared_or_per_leaf(node, field, fields, value, treedef, names, convert,
                                                 _describe(slot))
            elif is_leaf_vector(node, field):
                vec = np.asarray(value)
                if vec.shape != (treedef.num_leaves,):
                    raise MigrateError(f"{who}: {_describe(slot)} has shape {vec.shape} in the file; "
                                       f"tx expects one value per parameter ({treedef.num_leaves},).")
                out[field] = convert(old, vec, _describe(slot))
            elif not hasattr(old, "shape") and jax.tree.structure(old) == treedef:
                # a per-leaf scalar field (step counts, LBSGD's num_cums): the file's vector, split
                vec = np.asarray(value)
                if vec.shape != (treedef.num_leaves,):
                    raise MigrateError(f"{who}: {_describe(slot)} has shape {vec.shape} in the file; "
                                       f"tx expects one value per parameter ({treedef.num_leaves},).")
                out[field] = treedef.unflatten([convert(o, v, f"{_describe(slot)} of parameter {n!r}")
                                                for o, v, n in zip(treedef.flatten_up_to(old), vec, names)])
            else:
                out[field] = convert(old, value, _describe(slot))
        converted[path] = out

    # derived fields (StepState's largest count) follow the counts written: `with_fields`
    new_state = replace_fields(state, converted)
    why = domain_error(new_state)  # every reader's values, against what each state class declares
    if why is not None:
        raise MigrateError(f"{who}: the file holds a value no run reaches: {why}.")
    return new_state


def _shared_or_per_leaf(node, field, fields, value, treedef, names, convert, what):
    """The value of a per-leaf field that ``node`` holds shared (None: every leaf
    has the value of the field its class's ``optional_fields`` names): None again when
    the file's vector is that value at every leaf, else the tree of them."""
    vec = np.asarray(value)
    if vec.shape != (treedef.num_leaves,):
        raise MigrateError(f"{what} has shape {vec.shape} in the file; tx expects one value per parameter "
                           f"({treedef.num_leaves},).")
    other = type(node).optional_fields[field]
    shared = np.asarray(fields[other][0] if other in fields else getattr(node, other))
    if np.all(vec == shared):
        return None
    like = np.asarray(getattr(node, other))  # the dtype the state keeps
    return jnp.stack([convert(like, v, f"{what} of parameter {n!r}") for v, n in zip(vec, names)])




def checked_count(value, what: str) -> int:
    """``value`` (a Python or numpy integer, or a one-element integer array)
    as a step count in [0, MAX_COUNT]; `MigrateError` naming ``what`` otherwise."""
    if isinstance(value, np.ndarray) and value.size == 1:
        value = value.reshape(-1)[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise MigrateError(f"{what} is {short(value)}; a step count is an integer.")
    if not 0 <= int(value) <= MAX_COUNT:
        raise MigrateError(f"{what} is {int(value)}; a step count lies in [0, {MAX_COUNT}].")
    return int(value)


def file_label(source) -> str | None:
    """How messages name a reader's source: the path, an open file's name
    (``'<file>'`` without one), or None for an in-memory state dict."""
    if isinstance(source, (str, bytes, os.PathLike)):
        return os.fsdecode(source)
    if hasattr(source, "read"):
        name = getattr(source, "name", None)
        return os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else "<file>"
    return None


def checked_value(value, what: str, rng: Range) -> float:
    """``value`` (a number, or a one-element numeric array) as a float inside
    ``rng`` (a range of `gradxform._ranges`); `MigrateError` naming ``what`` otherwise."""
    if isinstance(value, np.ndarray) and value.size == 1 and value.dtype.kind in "iuf":
        value = value.reshape(-1)[0]
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise MigrateError(f"{what} is {short(value)}; expected a number.")
    try:
        check_value(what, "value", float(value), rng, as_stored=False)
    except ValueError:
        raise MigrateError(f"{what} is {float(value)!r}; a run only reaches values in {rng}.") from None
    return float(value)


def at_boundary(who: str):
    """Decorates a reader so that every failure is a `MigrateError` naming
    ``who`` and the file (its first argument): whatever a corrupt file trips
    inside it (an unexpected type, a key, an index) is reported as such,
    never as a bare TypeError."""
    def wrap(fn):
        @functools.wraps(fn)
        def reader(*args, **kwargs):
            label = file_label(args[0]) if args else None
            head = who if label is None else f"{who}({label!r})"
            try:
                return fn(*args, **kwargs)
            except PathTypeError:
                raise
            except MigrateError as err:
                msg = str(err)
                if label is None or repr(label) in msg:
                    raise
                rest = msg[len(who) + 1:].lstrip() if msg.startswith(who + ":") else msg
                raise type(err)(f"{head}: {rest}") from err.__cause__
            except (ValueError, TypeError, IndexError, KeyError, AttributeError, OverflowError,
                    RecursionError, MemoryError, SystemError, UnicodeError, struct.error) as err:
                raise MigrateError(f"{head}: the file is corrupt or does not fit these parameters "
                                   f"({type(err).__name__}: {str(err)[:300]})") from err
        return reader
    return wrap


def resolve_order(params, order, n_entries: int | None, who: str) -> list[int]:
    """Leaf position of each framework index: ``order[i]`` names the leaf the
    framework calls index ``i`` (default: leaf order)."""
    names = param_names(params)
    if order is None:
        return list(range(len(names)))
    order = list(order)
    unknown = [o for o in order if o not in names]
    if unknown:
        raise MigrateError(f"{who}(order=...): {unknown[0]!r} is not a parameter name; the names are "
                           f"{names[:8]}{' ...' if len(names) > 8 else ''}.")
    dup = sorted({o for o in order if order.count(o) > 1})
    if dup:
        raise MigrateError(f"{who}(order=...): {dup[0]!r} is listed twice.")
    missing = [n for n in names if n not in order]
    if missing:
        raise MigrateError(f"{who}(order=...): parameter {missing[0]!r} is not listed; order must name "
                           f"every parameter once ({len(names)} of them).")
    return [names.index(o) for o in order]


def _with_groups_spread(h: dict):
    for k, v in h.items():
        if isinstance(v, GroupHyper):
            yield from ((f"{base_name(k)}_group_{g}", x) for g, x in zip(v.groups, np.asarray(v)))
        else:
            yield k, v


def tree_hyper(state) -> dict[str, float]:
    """Every hyperparameter in ``state`` (the first one of each name); a
    parameter group's own value (`GroupHyper`) as ``<name>_group_<i>``, the
    name MindSpore's checkpoints give a group's learning rate."""
    out: dict[str, float] = {}
    for _, node in state_paths(state):
        h = getattr(node, "hyper", None)
        if isinstance(h, dict):
            for k, v in _with_groups_spread(h):
                if k not in out:
                    try:
                        out[k] = float(np.asarray(v))
                    except (TypeError, ValueError):
                        pass
    return out


# hyperparameters the caller sets itself, whatever the file says (the Trainer's rescale_grad,
# 1/batch_size at each step as Gluon's): no warning for them (`warn_hyper_mismatch`)
SET_BY_CALLER: contextvars.ContextVar[tuple] = contextvars.ContextVar("SET_BY_CALLER", default=())


def warn_hyper_mismatch(state, expected: dict[str, float], who: str, notes: dict[str, str] | None = None) -> None:
    """Warns when a hyperparameter of ``tx`` differs from the run's (the file's),
    but for those the caller sets itself (`SET_BY_CALLER`); ``notes``: what to
    say instead of "build tx with the run's value" for a name whose file value
    is not the one to copy."""
    have, notes = tree_hyper(state), notes or {}
    bad = [(k, have[k], float(v)) for k, v in expected.items()
           if k in have and v is not None and k not in SET_BY_CALLER.get()
           and not np.isclose(have[k], np.float32(v), rtol=1e-6, atol=0)]
    noted = [notes[k] for k, _, _ in bad if k in notes]
    if len(noted) < len(bad):
        listing = ", ".join(f"{k}: tx {a:g} vs file {b:g}" for k, a, b in bad if k not in notes)
        warn_at_caller(f"{who}: tx's hyperparameters differ from the saved run's ({listing}); the next "
                       "steps follow tx's. Build tx with the run's values (or gradxform.set_hyper) to "
                       "continue the same run.")
    for note, (k, a, b) in zip(noted, [x for x in bad if x[0] in notes]):
        warn_at_caller(f"{who}: {k}: tx {a:g} vs file {b:g}. {note}")
