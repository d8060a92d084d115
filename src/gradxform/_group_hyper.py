"""The hyperparameters parameter groups set for themselves, one array per field (`GroupHyper`).

A MindSpore or Paddle parameter group may give its own learning rate, weight
decay, beta1, clip norm, ...; a group that gives none uses the optimizer's.
The optimizer's value is the hyperparameter ``name`` of a piece's ``hyper``
dict; the values the groups give are one more entry, ``name + "_groups"``
(`group_key`), a `GroupHyper`: a float32 vector with one value per group
that sets ``name``, and which groups those are (static: part of the tree
structure, fixed when the optimizer is built). A piece reads a leaf's value
with its group known when the program is built (`group_value`) or from the
group slot its state holds (`slot_value`).

`gradxform.get_hyper` / `gradxform.set_hyper` take ``group=k``; the vector is
range-checked like any hyperparameter, entry by entry, against the range of
``name``.

Files written before (each group's value a scalar ``<name>_group_<k>``,
``tests/fixtures/group_hyper_v1/``) load through `group_hyper_plan`.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import DictKey, GetAttrKey, keystr

from ._group_values import ValuesByGroup
from ._state_paths import map_states, state_paths
from ._tree import variable_value as _raw  # the array inside an nnx Variable

__all__ = ["GroupHyper", "SUFFIX", "group_key", "base_name", "with_group_hyper", "group_value", "slot_value",
           "former_group_hyper", "group_hyper_plan", "group_difference"]

SUFFIX = "_groups"
_FORMER = "{name}_group_{group}"  # the key of one group's value in files written before
HYPER = "hyper"


@jax.tree_util.register_pytree_with_keys_class
class GroupHyper(ValuesByGroup):
    """The values some parameter groups give hyperparameter ``name``:
    ``values[i]`` is group ``groups[i]``'s (``values``: float32, shape
    ``(len(groups),)``, the one leaf; ``groups``: positions in the
    optimizer's groups, counted from 0 as given, kept in the tree structure)."""
    __slots__ = ()

    @property
    def shape(self) -> tuple[int, ...]:
        """``(len(groups),)``, with a batch's leading axes (a vmapped state) first."""
        return tuple(np.shape(_raw(self.values)))

    @property
    def dtype(self):
        return getattr(self.values, "dtype", None)

    def __array__(self, dtype=None, copy=None):
        host = np.asarray(_raw(self.values))
        return host if dtype is None else host.astype(dtype)

    def position(self, group: int) -> int | None:
        """Where group ``group``'s value is in ``values``; None when it sets none."""
        return self.groups.index(group) if group in self.groups else None

    def of(self, group: int):
        """Group ``group``'s value (a float32 scalar; one per run of a vmapped batch of states)."""
        return _raw(self.values)[..., self.groups.index(group)]

    def __repr__(self) -> str:
        return f"GroupHyper({self.values!r}, groups={self.groups})"


def group_key(name: str) -> str:
    """The ``hyper`` key of the groups' own values of ``name``."""
    return name + SUFFIX


def base_name(key: str) -> str:
    """``name`` for the key ``name + "_groups"`` of a `GroupHyper`."""
    return str(key).removesuffix(SUFFIX)


def with_group_hyper(hyper: Mapping[str, Any], own: Mapping[int, Mapping[str, Any]]) -> dict:
    """``hyper`` (the optimizer's values) as float32 scalars, plus a
    `GroupHyper` for each name that a group of ``own`` (``{group: {name:
    value}}``) sets, its groups in increasing order."""
    out: dict[str, Any] = {k: jnp.asarray(v, jnp.float32) for k, v in hyper.items()}
    names: list[str] = []
    for vals in own.values():
        names.extend(n for n in vals if n not in names)
    for n in names:
        groups = sorted(g for g, vals in own.items() if n in vals)
        out[group_key(n)] = GroupHyper(jnp.asarray([np.float32(own[g][n]) for g in groups], jnp.float32), groups)
    return out


def group_value(hyper: Mapping, name: str, group: int):
    """Group ``group``'s own value of ``name`` (the group known when the
    program is built, and one that sets ``name``)."""
    return hyper[group_key(name)].of(group)


def slot_value(hyper: Mapping, name: str, slot):
    """The value of ``name`` for the leaves whose group position is ``slot``
    (an int32 array, traced: the group slot a state holds): the group's own
    where it sets one, else the optimizer's."""
    out = hyper[name] if name in hyper else None
    held = hyper.get(group_key(name))
    if not isinstance(held, GroupHyper):
        return out
    values = _raw(held.values)
    for i, g in enumerate(held.groups):
        out = values[..., i] if out is None else jnp.where(slot == g, values[..., i], out)
    return out


def _former_keys(key, held: GroupHyper) -> list[str]:
    return [_FORMER.format(name=base_name(key), group=g) for g in held.groups]


def former_group_hyper(tree):
    """``tree`` with every `GroupHyper` of a ``hyper`` dict written out as the
    scalars files held before (``<name>_group_<k>``, one per group). Only
    key paths and leaf shapes matter: what a file of that layout is matched
    against (`group_hyper_plan`)."""
    def spread(_, node):
        d = getattr(node, HYPER, None)
        if not isinstance(d, dict):
            return node
        out = {}
        for k, v in d.items():
            if isinstance(v, GroupHyper):
                out.update({f: jax.ShapeDtypeStruct((), v.dtype) for f in _former_keys(k, v)})
            else:
                out[k] = v
        return node._replace(**{HYPER: out})
    return map_states(spread, tree)


def _spread_paths(like) -> dict[str, list[str]]:
    """``{keystr path of a GroupHyper's values in like: the keystr paths of its
    groups' scalars in the former layout}``."""
    out: dict[str, list[str]] = {}
    for path, node in state_paths(like):
        d = getattr(node, HYPER, None)
        if not isinstance(d, dict):
            continue
        at = path + (GetAttrKey(HYPER),)
        for k, v in d.items():
            if isinstance(v, GroupHyper):
                out[keystr(at + (DictKey(k), GetAttrKey("values")))] = [keystr(at + (DictKey(f),))
                                                                        for f in _former_keys(k, v)]
    return out


def _paths(tree) -> list[str]:
    return [keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


def group_hyper_plan(file_paths: Sequence[str], like, inner_plan: Callable) -> list[tuple[int, ...]] | None:
    """For each leaf of ``like``, the entries of a file written before
    (per-group values as ``<name>_group_<k>`` scalars) it is read from: a
    `GroupHyper`'s values from its groups' scalars, in its groups' order,
    any other leaf from its own entry; None when the file is not ``like`` in
    that layout. ``inner_plan(file_paths, former_paths, former)`` matches a
    file of a still older layout to the former tree (`gradxform._state_v1.v1_plan`)."""
    spread = _spread_paths(like)
    if not spread:
        return None
    former = former_group_hyper(like)
    former_paths = _paths(former)
    inner = [(i,) for i in range(len(file_paths))] if list(file_paths) == former_paths else \
        inner_plan(file_paths, former_paths, former)
    if inner is None:
        return None
    at = {p: i for i, p in enumerate(former_paths)}
    plan = []
    for p in _paths(like):  # the former tree is made from like: each of its paths is there
        plan.append(tuple(f for s in spread.get(p, [p]) for f in inner[at[s]]))
    return plan


def group_difference(file_paths: Sequence[str], like) -> str:
    """``'weight_decay: groups [0, 1] in the file, [0, 1, 2] here'`` for each
    `GroupHyper` of ``like`` whose groups differ from those a file written
    before holds scalars for (``<name>_group_<k>``); '' when none differ."""
    notes = []
    for path, node in state_paths(like):
        d = getattr(node, HYPER, None)
        if not isinstance(d, dict):
            continue
        at = keystr(path + (GetAttrKey(HYPER),))
        for k, v in d.items():
            if not isinstance(v, GroupHyper):
                continue
            former = re.compile(re.escape(f"{at}['{base_name(k)}_group_") + r"(\d+)'\]")
            held = sorted(int(m.group(1)) for p in file_paths for m in [former.fullmatch(p)] if m)
            if held and held != list(v.groups):
                notes.append(f"{base_name(k)}: groups {held} in the file, {list(v.groups)} here")
    return "; ".join(notes)
