"""Optimizer state by path: the one walker over optimizer states.

An optimizer state is a pytree whose *state nodes* are NamedTuples (every
piece's state class, optax's too), held in tuples, lists, dicts or any other
registered pytree container. Everything here finds state nodes by their class
(the class object, never its name) and addresses them by their
`jax.tree_util` key path, so callers never recurse over a state themselves:

* `state_paths` / `find_states`: the state nodes, with their paths;
* `get_path`: the node at a path;
* `map_states`: a state with every state node (of a class) replaced;
* `replace_fields`: a state with fields written at given paths;
* `with_fields`: one node with fields written;
* `map_param_trees`: a function applied to every subtree shaped like the
  parameters (for per-leaf selection);
* `map_param_shaped`: the same, told apart from the per-leaf fields a state
  class declares (what `gradxform.fused` turns into buffers and per-group values).

State classes declare what their fields hold as class attributes:
``per_leaf_fields`` (one number per parameter leaf, held as one 1-D array
with an entry per leaf in flatten order: `is_leaf_vector`; read by
`gradxform.fused`, which keeps one entry per buffer) and
``optional_fields`` (per-leaf fields that may be None, and what every leaf
holds then: `written_out`, `with_optional_like`) and ``renamed_fields``
(``{field: its former name}``, for files written before a rename: `former_names`).
No state class stores a field derived from another, so a writer never has
anything to keep in step.

Order: depth first, a node before the states it holds, containers in
`jax.tree_util`'s flatten order (so dict keys sorted).
"""
from __future__ import annotations

import re
import collections
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.tree_util import DictKey, GetAttrKey, SequenceKey

from ._group_values import GroupValues

__all__ = ["hyper_difference", "shaped_like", "NOT_PARAMS", "former_names", "is_optax_placeholder", "per_leaf_fields_unmarked", "find_states", "get_path",
           "is_state", "map_param_shaped", "map_param_trees", "map_states",
           "replace_fields", "state_paths", "with_fields", "with_optional_like", "written_out"]

KeyPath = tuple  # of jax.tree_util key entries (GetAttrKey, DictKey, SequenceKey, ...)


def is_state(x) -> bool:
    """A state node: a NamedTuple instance."""
    return isinstance(x, tuple) and hasattr(x, "_fields")


def _top_states(tree) -> list[tuple[KeyPath, Any]]:
    """(path, node) of the outermost state nodes of ``tree`` (``tree`` itself if it is one)."""
    if not any(map(is_state, jax.tree_util.tree_leaves(tree, is_leaf=is_state))):
        return []  # the common case (a tree of arrays): no paths to build
    flat, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=is_state)
    return [(p, x) for p, x in flat if is_state(x)]


def state_paths(state, kind: type | tuple[type, ...] | None = None) -> list[tuple[KeyPath, Any]]:
    """``(path, node)`` of every state node in ``state`` (only instances of
    ``kind``, a class or tuple of classes, when given), outermost first."""
    out: list[tuple[KeyPath, Any]] = []

    def go(tree, prefix):
        for path, node in _top_states(tree):
            path = prefix + path
            if kind is None or isinstance(node, kind):
                out.append((path, node))
            for f in node._fields:
                go(getattr(node, f), path + (GetAttrKey(f),))
    go(state, ())
    return out


def find_states(state, kind: type | tuple[type, ...]) -> list:
    """Every node of class ``kind`` (a class or tuple of classes) in ``state``, outermost first."""
    return [node for _, node in state_paths(state, kind)]


def get_path(tree, path: KeyPath):
    """The subtree of ``tree`` at ``path`` (key entries as `jax.tree_util` gives them)."""
    for key in path:
        if isinstance(key, GetAttrKey):
            tree = getattr(tree, key.name)
        elif isinstance(key, DictKey):
            tree = tree[key.key]
        elif isinstance(key, SequenceKey):
            tree = tree[key.idx]
        else:  # FlattenedIndexKey: the custom node's children in flatten order
            tree = jax.tree_util.tree_flatten(tree, is_leaf=lambda x, t=tree: x is not t)[0][key.key]
    return tree


def with_fields(node, **fields):
    """``node._replace(**fields)`` (one place for every writer of state fields)."""
    return node._replace(**fields)


def map_states(fn: Callable[[KeyPath, Any], Any], state, kind: type | tuple[type, ...] | None = None):
    """``state`` with every state node of class ``kind`` (every state node when
    None) replaced by ``fn(path, node)``. Innermost first: ``fn`` gets a node
    whose own fields were mapped already."""
    def go(tree, prefix):
        if not any(map(is_state, jax.tree_util.tree_leaves(tree, is_leaf=is_state))):
            return tree  # a tree of arrays: nothing to map
        changed = False

        def one(path, node):
            nonlocal changed
            if not is_state(node):
                return node
            path = prefix + path
            kids = {f: go(getattr(node, f), path + (GetAttrKey(f),)) for f in node._fields}
            new = node
            if any(kids[f] is not getattr(node, f) for f in node._fields):
                new = node._replace(**kids)
            if kind is None or isinstance(new, kind):
                new = fn(path, new)
            changed = changed or new is not node
            return new

        out = jax.tree_util.tree_map_with_path(one, tree, is_leaf=is_state)
        return out if changed else tree  # untouched containers stay as they were (dict order too)
    return go(state, ())


def replace_fields(state, edits: Mapping[KeyPath, Mapping[str, Any]]):
    """``state`` with ``edits[path]`` (field -> new value) written into the state
    node at each ``path`` (through `with_fields`: derived fields follow)."""
    edits = dict(edits)

    def fn(path, node):
        return with_fields(node, **edits[path]) if path in edits else node
    return map_states(fn, state)


def shaped_like(treedef):
    """Whether a subtree has the parameters' structure: exactly, or with
    ``()`` at the leaves whose slot holds nothing (MindSpore AdaFactor's
    factors of a vector; `map_param_trees` hands those on as ``()``)."""
    def like(x) -> bool:
        if treedef.num_leaves == 0 or isinstance(x, tuple) and not x:
            return False
        if jax.tree.structure(x) == treedef:
            return True
        try:
            parts = treedef.flatten_up_to(x)
        except (ValueError, TypeError):
            return False
        holes = [isinstance(p, tuple) and not p for p in parts]
        return any(holes) and all(hole or jax.tree_util.treedef_is_leaf(jax.tree.structure(p))
                                  for p, hole in zip(parts, holes))

    return like


def map_param_trees(fn: Callable, treedef, tree, *rest):
    """``tree`` with every subtree that has the parameters' structure
    ``treedef`` replaced by ``fn(subtree, *matching subtrees of rest)``;
    everything else (counters, scalars) is kept from ``tree``. A leaf whose
    slot holds nothing reaches ``fn`` as ``()``."""
    like = shaped_like(treedef)
    return jax.tree.map(lambda x, *r: fn(x, *r) if like(x) else x, tree, *rest, is_leaf=like)


def is_leaf_vector(node, field: str, num_leaves: int | None = None) -> bool:
    """Whether ``node.field`` is a declared per-leaf field (``per_leaf_fields``)
    held as one 1-D array (of ``num_leaves`` entries, when given)."""
    x: Any = getattr(node, field, None)
    if field not in getattr(type(node), "per_leaf_fields", ()) or not hasattr(x, "shape") or len(x.shape) != 1:
        return False
    return num_leaves is None or x.shape[0] == num_leaves


def leaf_vector_fields(node) -> tuple[str, ...]:
    """The declared per-leaf fields ``node`` holds as 1-D arrays."""
    return tuple(f for f in getattr(type(node), "per_leaf_fields", ()) if is_leaf_vector(node, f))


class _Declared:
    """A per-leaf field (its vector or tree), held as one opaque leaf while the rest is mapped."""
    __slots__ = ("field", "tree")

    def __init__(self, field: str, tree):
        self.field, self.tree = field, tree


def map_param_shaped(state, treedef, *, per_leaf: Callable[[str, Any], Any],
                     param_tree: Callable[[Any], Any]):
    """``state`` with the two kinds of subtrees shaped like the parameters
    (``treedef``, two leaves or more) replaced: a field that a state class
    lists in ``per_leaf_fields`` and that holds one number per leaf (a 1-D
    array of ``treedef.num_leaves`` entries, or a tree of scalars shaped like
    the parameters: counts, multipliers) by ``per_leaf(field_name, value)``, and every other
    params-shaped subtree (moments, master weights) by ``param_tree(subtree)``."""
    like = lambda x: treedef.num_leaves > 1 and jax.tree.structure(x) == treedef  # noqa: E731

    def scalars(x) -> bool:
        return not hasattr(x, "shape") and jax.tree.structure(x) == treedef

    def hide(_, node):
        fields = {f: _Declared(f, getattr(node, f)) for f in getattr(type(node), "per_leaf_fields", ())
                  if scalars(getattr(node, f)) or is_leaf_vector(node, f, treedef.num_leaves)}
        return node._replace(**fields) if fields else node

    hidden = map_states(hide, state)
    return jax.tree.map(lambda x: per_leaf(x.field, x.tree) if isinstance(x, _Declared) else param_tree(x)
                        if like(x) else x, hidden, is_leaf=lambda x: isinstance(x, _Declared) or like(x))


def written_out(node, field: str, params, fill=None):
    """``node`` with its optional per-leaf ``field`` (declared in its class's
    ``optional_fields``) held per leaf: when None, every leaf gets the value
    the declaration names (another field's, or a number), or ``fill``."""
    if getattr(node, field) is not None:
        return node
    if fill is None:
        fill = type(node).optional_fields[field]
    value = getattr(node, fill) if isinstance(fill, str) else np.float32(fill)
    n = jax.tree.structure(params).num_leaves
    if isinstance(value, jax.ShapeDtypeStruct):  # an abstract state (jax.eval_shape)
        return node._replace(**{field: jax.ShapeDtypeStruct((n,), value.dtype)})
    return node._replace(**{field: jnp.full((n,), value, jnp.result_type(value))})


def with_optional_like(template, other, params, fill=None):
    """``template`` with each optional per-leaf field that it holds as None and
    ``other`` (a state of the same chain) holds per leaf written out
    (`written_out`, every leaf ``fill`` when given), so the two have one structure."""
    edits: dict = {}
    for path, node in state_paths(template):
        for field in getattr(type(node), "optional_fields", {}):
            if getattr(node, field) is None and getattr(get_path(other, path), field, None) is not None:
                edits.setdefault(path, {})[field] = getattr(written_out(node, field, params, fill), field)
    return replace_fields(template, edits) if edits else template


class _NotParams:
    """Stands, in a state built from optax's parameter placeholder, for a
    field of per-leaf scalars: ``optax.tree_map_params`` then hands that field
    to ``transform_non_params`` (a replicated sharding, say) instead of giving
    each scalar its parameter's sharding."""

    def __repr__(self):
        return "NOT_PARAMS"


NOT_PARAMS = _NotParams()


def is_optax_placeholder(params) -> bool:
    """Whether ``params`` is the stand-in ``optax.tree_map_params`` passes to
    ``init`` (a tree with no leaves, of optax's private placeholder class)."""
    cls = type(params)
    return cls.__name__ == "_ParamsPlaceholder" and cls.__module__.startswith("optax")


def per_leaf_fields_unmarked(state):
    """``state`` (built from optax's placeholder) with each declared per-leaf
    field (``per_leaf_fields``) that came out as the placeholder replaced by
    `NOT_PARAMS`: per-leaf scalars are not shaped like the parameters."""
    def mark(_, node):
        # (or GroupValues made for no leaves: its groups are not the real state's)
        marked = {f: NOT_PARAMS for f in getattr(node, "per_leaf_fields", ())
                  if is_optax_placeholder(x := getattr(node, f, None)) or isinstance(x, GroupValues)}
        return node._replace(**marked) if marked else node
    return map_states(mark, state)


_FORMER: dict[type, type] = {}  # state class -> a NamedTuple class of its fields' former names


def former_names(tree):
    """``tree`` with every state node whose class declares ``renamed_fields``
    (``{field: its former name}``) rebuilt as a NamedTuple of the former
    names, fields and their order unchanged: the key paths that a file
    written before the rename holds, leaf for leaf (`gradxform.checkpoint.load_state`
    matches them); None when ``tree`` holds no such node."""
    renamed = False

    def rebuild(_, node):
        nonlocal renamed
        former = getattr(type(node), "renamed_fields", None)
        if not former:
            return node
        renamed = True
        if type(node) not in _FORMER:
            _FORMER[type(node)] = collections.namedtuple(type(node).__name__, [former.get(f, f) for f in node._fields])
            _FORMER[type(node)].per_leaf_fields = tuple(former.get(f, f) for f in getattr(node, "per_leaf_fields", ()))  # pyright: ignore[reportAttributeAccessIssue]
        return _FORMER[type(node)](*node)
    out = map_states(rebuild, tree)
    return out if renamed else None


_HYPER_LEAF = re.compile(r"\.(?:hyper|hyperparams)\[['\"]([^'\"]+)['\"]\]$")


def hyper_difference(missing: list[str], extra: list[str]) -> str:
    """``'the file has momentum, this optimizer has not; ...'`` when the two
    trees differ in their hyperparameters (an optimizer built with other
    keywords: momentum=0 keeps no momentum, clip_gradient=None no clip) or
    their master weights (multi_precision); '' otherwise."""
    def names(paths):
        return sorted({m.group(1) for p in paths if (m := _HYPER_LEAF.search(p))})
    only_file, only_here = [n for n in names(extra) if n not in names(missing)], \
        [n for n in names(missing) if n not in names(extra)]
    master = [any(".master" in p for p in ps) for ps in (extra, missing)]
    if only_file and only_here:  # names on both sides: another optimizer, not other keywords of one
        return ""
    parts = []
    if only_file:
        parts.append(f"the file's optimizer holds {', '.join(only_file)}, this one does not")
    if only_here:
        parts.append(f"this one holds {', '.join(only_here)}, the file's does not")
    if master[0] != master[1]:
        parts.append(f"{'the file' if master[0] else 'this one'} keeps float32 master weights (multi_precision=True)")
    if not parts:
        return ""
    return "; ".join(parts) + ". Build the optimizer with the saved run's keywords, then load"
