"""What ``parameters=`` binds (issue 38 item 2): arrays (a pytree, ``(name,
array)`` pairs, an ``nnx.Module`` / ``nnx.State``, or group dicts whose
``'params'`` hold arrays) make the optimizer the stateful
`gradxform.paddle._face.Optimizer`; names, globs and predicates select, as
before (`gradxform.paddle._common.parse`).

A list of group dicts is always groups, never one pytree (Paddle clips each
group on its own). Groups name their arrays (``{name: array}``, pairs; merged
into one tree by name, a name two groups give different arrays refused) or
all give bare arrays (``[w1, b1]``: bound by position, the tree ``[[w1, b1],
[w2, b2]]``); one array in two groups is Paddle's overlap ValueError."""
from __future__ import annotations

import sys
from typing import Any, ClassVar

import jax
import numpy as np

from .._tree import param_names

__all__ = ["Bound", "bind_parameters", "nnx_module"]


class Bound:
    """The arrays ``parameters=`` gave: ``params`` (a pytree), and the
    ``nnx.Module`` to write the stepped values back into (or None)."""

    __slots__ = ("params", "module")
    face: ClassVar[Any] = None  # the stateful class (`gradxform.paddle._face.Optimizer`), set when it is imported

    def __init__(self, params, module=None):
        self.params, self.module = params, module


def nnx_module():
    return sys.modules.get("flax.nnx")


def _is_array(x) -> bool:
    return isinstance(x, (jax.Array, np.ndarray)) and not isinstance(x, (str, bytes))


def _all_arrays(tree) -> bool:
    leaves = jax.tree.leaves(tree)
    return bool(leaves) and all(_is_array(x) for x in leaves)


def _pairs(x) -> bool:
    return (isinstance(x, (list, tuple)) and bool(x)
            and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and _all_arrays(p[1])
                    for p in x))


def _groups(x) -> bool:
    """Paddle's list of group dicts (``[{'params': ...}, ...]``): never one pytree of arrays."""
    return (isinstance(x, (list, tuple)) and bool(x) and all(isinstance(g, dict) for g in x)
            and any("params" in g for g in x))


def _arrays_of(x):
    """``(params, module)`` of an array argument, or None when ``x`` holds no arrays."""
    nnx = nnx_module()
    if nnx is not None and isinstance(x, nnx.Module):
        return nnx.state(x, nnx.Param), x
    if _pairs(x):  # model.named_parameters()
        return dict(x), None
    if isinstance(x, (list, tuple)) and x and any(isinstance(v, str) for v in x):
        return None
    if not isinstance(x, (str, bytes)) and not callable(x) and _all_arrays(x):
        return x, None
    return None


def _unnamed(x) -> bool:
    """A group's ``'params'`` given as bare arrays: a list of them (Paddle's
    ``[model.fc1.weight, model.fc1.bias]``) or one array."""
    return _is_array(x) or isinstance(x, (list, tuple)) and not _pairs(x) and all(map(_unnamed, x))


def bind_parameters(owner: str, parameters):
    """Splits ``parameters=`` into what selects (names, group dicts of names,
    as `parse` takes) and the arrays it binds (`Bound`, or None when it
    names parameters only).

    Group dicts whose ``'params'`` are arrays bind too: named ones (``{name:
    array}``, ``(name, array)`` pairs) are merged into one tree by name;
    groups that all give lists of bare arrays bind as the list of those
    lists (``opt.parameters`` is ``[[w1, b1], [w2, b2]]``, each group its
    own arrays, by position)."""
    if parameters is None or isinstance(parameters, (str, bytes)):
        return parameters, None
    if not _groups(parameters):
        got = _arrays_of(parameters)
        if got is not None:
            return None, Bound(*got)
    if isinstance(parameters, (list, tuple)) and parameters and all(isinstance(g, dict) for g in parameters):
        empty = [isinstance(g.get("params"), (list, tuple)) and not g["params"] for g in parameters]
        found = [([], None) if e else None if "params" not in g else _arrays_of(g["params"])
                 for g, e in zip(parameters, empty)]  # an empty group (Paddle takes one) fits either form
        if any(f is not None and not e for f, e in zip(found, empty)):
            if any(f is None for f in found):
                bad = found.index(None)
                raise TypeError(f"{owner}(parameters=...): group {bad}'s 'params' names parameters while another "
                                "group holds arrays; give every group its arrays ({name: array}).")
            pairs = [f for f in found if f is not None]  # every one, as just checked
            if any(m is not None for _, m in pairs):
                raise TypeError(f"{owner}(parameters=...): a group's 'params' is an nnx.Module; give its arrays by "
                                "name instead: dict(nnx.to_flat_state(nnx.state(model, nnx.Param))) split by group.")
            unnamed = [None if e else _unnamed(g["params"]) for g, e in zip(parameters, empty)]
            if False not in unnamed:
                return _by_position(owner, parameters)
            if True in unnamed:
                i, j = unnamed.index(True), unnamed.index(False)
                raise TypeError(f"{owner}(parameters[{i}]['params']=...): group {i} gives bare arrays while group "
                                f"{j} names its arrays; give every group the same form: lists of arrays "
                                "([{'params': [w1, b1]}, {'params': [w2, b2]}]) or arrays by full name "
                                "([{'params': {'fc1/weight': w1, 'fc1/bias': b1}}, ...]).")
            return _by_name(owner, parameters, [a for a, _ in pairs])
    return parameters, None


def _same_array(owner: str, where: str, first: str, name: str = ""):
    """Paddle's ValueError for one parameter in two groups."""
    return ValueError(f"{owner}(parameters=...): some parameters appear in more than one parameter group "
                      f"({name + ': ' if name else ''}{where} is the same array as {first}); give each array to "
                      "one group only.")


def _by_position(owner: str, parameters):
    """Groups of bare arrays: the tree ``[group 0's arrays, group 1's, ...]``,
    each group selecting its own leaves by their names in it ('0/1': group 0,
    its second array)."""
    tree = [list(g["params"]) if isinstance(g["params"], (list, tuple)) else [g["params"]] for g in parameters]
    seen: dict[int, str] = {}
    for i, arrays in enumerate(tree):
        for j, a in enumerate(arrays):
            where = f"parameters[{i}]['params'][{j}]"
            if id(a) in seen:
                raise _same_array(owner, where, seen[id(a)])
            seen[id(a)] = where
    names = param_names(tree)
    groups, start = [], 0
    for g, arrays in zip(parameters, tree):
        groups.append(dict(g, params=names[start:start + len(arrays)]))
        start += len(arrays)
    return groups, Bound(tree)


def _by_name(owner: str, parameters, arrays_per_group):
    """Groups of named arrays: merged into the model's tree by name; a name two
    groups give different arrays (sub-trees of the model, whose names are
    relative: ``params['fc1']`` and ``params['fc2']`` both name 'weight') is
    refused, saying to give full names."""
    merged: dict = {}
    owner_of: dict[str, int] = {}
    groups = []
    for i, (g, arrays) in enumerate(zip(parameters, arrays_per_group)):
        names = param_names(arrays)
        for n, leaf in zip(names, jax.tree.leaves(arrays)):
            if n in merged and merged[n] is not leaf:
                k = owner_of[n]
                raise ValueError(
                    f"{owner}(parameters[{i}]['params']=...): groups {k} and {i} both name a parameter {n!r}, "
                    "with different arrays: a group's names are its arrays' paths inside what 'params' gives, so "
                    "a sub-tree of the model (params['fc1']) names its leaves 'weight', 'bias' without the "
                    "layer. Give full names: {'params': {'fc1': params['fc1']}} (names 'fc1/weight', "
                    "'fc1/bias'), or {'params': {'fc1/weight': W1, 'fc1/bias': b1}}, or a list of (name, array) "
                    "pairs.")
            if n in merged:
                raise _same_array(owner, f"parameters[{i}]['params']", f"parameters[{owner_of[n]}]['params']",
                                  repr(n))
            merged[n], owner_of[n] = leaf, i
        groups.append(dict(g, params=names))
    return groups, Bound(_nested(owner, merged))


def _nested(owner: str, flat: dict) -> dict:
    """``{'dense/weight': w}`` as ``{'dense': {'weight': w}}`` (the model's tree
    again, whose `param_names` are the same names)."""
    out: dict = {}
    for name, leaf in flat.items():
        *path, last = name.split("/")
        node = out
        for i, key in enumerate(path):
            node = node.setdefault(key, {})
            if not isinstance(node, dict):
                raise ValueError(f"{owner}(parameters=...): {'/'.join(path[:i + 1])!r} is a parameter and also "
                                 f"holds {name!r}; rename one of them.")
        if last in node:
            raise ValueError(f"{owner}(parameters=...): {name!r} names a parameter and a subtree; rename one.")
        node[last] = leaf
    return out
