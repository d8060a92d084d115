"""What ``parameters=`` binds (issue 38 item 2): arrays (a pytree, ``(name,
array)`` pairs, an ``nnx.Module`` / ``nnx.State``, or group dicts whose
``'params'`` hold arrays) make the optimizer the stateful
`gradxform.paddle._face.Optimizer`; names, globs and predicates select, as
before (`gradxform.paddle._common.parse`)."""
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


def _arrays_of(owner: str, where: str, x):
    """``(params, module)`` of an array argument, or None when ``x`` holds no arrays."""
    nnx = nnx_module()
    if nnx is not None and isinstance(x, nnx.Module):
        return nnx.state(x, nnx.Param), x
    if _pairs(x):  # model.named_parameters()
        return dict(x), None
    if isinstance(x, (list, tuple)) and x and any(isinstance(v, str) for v in x):
        return None
    if not isinstance(x, (str, bytes)) and not callable(x) and _all_arrays(x):
        if isinstance(x, (list, tuple)) and where.endswith("['params']"):
            raise TypeError(f"{owner}({where}=...): a group's arrays need names to be told apart: give a dict "
                            "{name: array} or a list of (name, array) pairs (model.named_parameters()).")
        return x, None
    return None


def bind_parameters(owner: str, parameters):
    """Splits ``parameters=`` into what selects (names, group dicts of names,
    as `parse` takes) and the arrays it binds (`Bound`, or None when it
    names parameters only)."""
    if parameters is None or isinstance(parameters, (str, bytes)):
        return parameters, None
    got = _arrays_of(owner, "parameters", parameters)
    if got is not None:
        return None, Bound(*got)
    if isinstance(parameters, (list, tuple)) and parameters and all(isinstance(g, dict) for g in parameters):
        found = [None if "params" not in g else _arrays_of(owner, f"parameters[{i}]['params']", g["params"])
                 for i, g in enumerate(parameters)]
        if any(f is not None for f in found):
            if any(f is None for f in found):
                bad = found.index(None)
                raise TypeError(f"{owner}(parameters=...): group {bad}'s 'params' names parameters while another "
                                "group holds arrays; give every group its arrays ({name: array}).")
            pairs = [f for f in found if f is not None]  # every one, as just checked
            if any(m is not None for _, m in pairs):
                raise TypeError(f"{owner}(parameters=...): a group's 'params' is an nnx.Module; give its arrays by "
                                "name instead: dict(nnx.to_flat_state(nnx.state(model, nnx.Param))) split by group.")
            merged: dict = {}
            groups = []
            for g, (arrays, _) in zip(parameters, pairs):
                names = param_names(arrays)
                for n, leaf in zip(names, jax.tree.leaves(arrays)):
                    merged.setdefault(n, leaf)
                groups.append(dict(g, params=names))
            return groups, Bound(_nested(owner, merged))
    return parameters, None


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
