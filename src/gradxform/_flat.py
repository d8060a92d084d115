"""The flat layout of `gradxform.fused` and `gradxform.fused.packed`: which chains
fuse (read from the pieces' declarations), how leaves are grouped into flat
buffers (`Layout`, `FlatTree`), and a state's conversion between its per-leaf
and its flat form. See `gradxform._fused` for the whole story; this module
holds what both wrappers build on, so neither imports the other.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np

from ._base import GradientTransformation
from ._spec import spec_of
from ._state_paths import map_param_shaped
from ._tree import without_variables

__all__ = ["FlatTree", "Layout", "bit_exact", "why_not_fused"]


# -- which chains fuse ------------------------------------------------------------

def _inspect(tx) -> tuple[list[str], dict]:
    """Reasons the chain cannot be fused (empty when it can), and facts,
    from the pieces' declarations (`gradxform._spec.Spec`) and those of the
    transformations they declare they run."""
    reasons: list[str] = []
    facts: dict = {"isolate_first": False, "bit_exact": True}
    seen: set[int] = set()

    def visit(t):
        fn = t.update
        if id(fn) in seen:
            return
        seen.add(id(fn))
        spec = spec_of(fn)
        if spec is None or spec.fusion is None:
            name = f"{getattr(fn, '__module__', '?')}:{getattr(fn, '__qualname__', repr(fn))}"
            reasons.append(f"{name} is not declared elementwise (gradxform.fused.fusable)")
            return
        fusion = spec.fusion
        facts["bit_exact"] = facts["bit_exact"] and fusion.bit_exact
        facts["isolate_first"] = facts["isolate_first"] or fusion.isolate_first
        if fusion.refuse:
            reasons.append(fusion.refuse)
        for inner in spec.inner:
            visit(inner)

    visit(tx)
    return reasons, facts


def why_not_fused(tx: GradientTransformation) -> list[str]:
    """Why ``fused(tx)`` keeps the per-leaf path (an empty list: it fuses)."""
    return _inspect(tx)[0]


def bit_exact(tx: GradientTransformation) -> bool:
    """Whether ``fused(tx)`` gives bit-identical results to ``tx`` (True too
    when it keeps the per-leaf path). False where the chain sums a norm in
    another order, or applies per-leaf values per element (per-leaf
    reductions, Nadam's schedule, lazy rows): those agree to float32
    rounding (about 1e-7 relative per step), not bit for bit."""
    reasons, facts = _inspect(tx)
    return bool(reasons) or facts["bit_exact"]


# -- layout and flat trees ------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Layout:
    """How the leaves of a tree map to flat buffers: ``groups[j]`` lists the
    leaf indices (flatten order) stored one after another in buffer ``j``."""
    treedef: Any
    shapes: tuple
    dtypes: tuple
    groups: tuple

    @property
    def num_leaves(self) -> int:
        return len(self.shapes)

    def sizes(self) -> list[int]:
        return [int(np.prod(s, dtype=np.int64)) for s in self.shapes]

    def ravel_leaves(self, leaves) -> tuple:
        out = []
        for group in self.groups:
            parts = [jnp.reshape(leaves[i], (-1,)) for i in group]
            out.append(parts[0] if len(parts) == 1 else jnp.concatenate(parts))
        return tuple(out)

    def matching(self, tree) -> "Layout":
        """This layout, with ``tree``'s own structure where the two differ only by
        Flax nnx Variables around the leaves: ``nnx.Optimizer`` calls ``init`` on
        Variables and ``update`` on their arrays, the `Trainer` keeps the
        Variables. Any other difference is left for ``flatten_up_to`` to report."""
        structure = jax.tree.structure(tree)
        if structure == self.treedef or _without_variables_structure(structure) != \
                _without_variables_structure(self.treedef):
            return self
        return dataclasses.replace(self, treedef=structure)

    def _leaves_of(self, tree) -> list:
        """``tree``'s leaves, checked against this layout's structure and shapes."""
        leaves = self.matching(tree).treedef.flatten_up_to(tree)
        for i, (x, shape) in enumerate(zip(leaves, self.shapes)):
            if np.shape(x) != shape:
                path = jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(tree)[0][i][0])
                raise ValueError(f"fused: tree{path} has shape {np.shape(x)}; this state was "
                                 f"made for shape {shape}.")
        return leaves

    def ravel(self, tree) -> tuple:
        """The group buffers of ``tree`` (which must have this layout's structure)."""
        return self.ravel_leaves(self._leaves_of(tree))

    def ravel_concrete(self, tree) -> tuple:
        """`ravel` of concrete arrays (outside jit): a leaf with a buffer of its
        own is reshaped where it is; the leaves packed together are
        concatenated in NumPy. Eagerly on the device a packing is one dispatch
        per leaf and a concatenation program compiled for that many operands
        (measured: 6.8 s for 5,000 leaves of 16 floats; in NumPy 0.1 s)."""
        return self.pack_concrete(self._leaves_of(tree))

    def pack_concrete(self, leaves) -> tuple:
        """`ravel_leaves` for concrete leaves (see `ravel_concrete`); the leaves'
        own shapes are used (a state's placeholders may differ from the layout's)."""
        return tuple(jnp.reshape(b, (-1,)) if len(g) == 1 else jnp.asarray(b.reshape(-1))
                     for b, g in zip(self.pack_host(leaves, 1), self.groups))

    def pack_host(self, leaves, lead: int) -> list:
        """Each group's buffer for concrete leaves that carry ``lead`` leading
        entries (one per device): the leaves of a group of several concatenated
        in NumPy, a ``(lead, total)`` array; a leaf with a buffer of its own
        passed as it is (a reshape inside the program). What `gradxform.Trainer`
        hands its step on XLA:CPU for many leaves, whose compile time grows
        with the number of array arguments (20,000 gradients: 82.5 s)."""
        return [leaves[g[0]] if len(g) == 1 else
                np.concatenate([np.asarray(leaves[i]).reshape(lead, -1) for i in g], axis=1) for g in self.groups]

    def unravel_leaves(self, buffers) -> list:
        # A custom VJP: the cotangent of the slices is the concatenation of
        # the leaves' cotangents (one pass). Autodiff of the slices instead
        # pads every leaf's cotangent to the whole buffer and adds them all:
        # quadratic in the leaves (measured: a 400-leaf MLP's training step
        # took 79x its forward+backward on XLA CPU).
        return list(_unravel(self, tuple(buffers)))

    def _slice_leaves(self, buffers, shapes=None) -> list:
        """The leaves stored in ``buffers``, of this layout's shapes or of
        ``shapes`` (one per leaf, e.g. a state's placeholders). NumPy buffers
        (on the host, with any leading axes) are cut into NumPy views: a
        checkpoint of N leaves then costs no program of N outputs (`gradxform.Trainer`)."""
        shapes = self.shapes if shapes is None else shapes
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        leaves: list = [None] * self.num_leaves
        for buf, group in zip(buffers, self.groups):
            start = 0
            if isinstance(buf, np.ndarray):
                for i in group:
                    leaves[i] = buf[..., start:start + sizes[i]].reshape(buf.shape[:-1] + tuple(shapes[i]))
                    start += sizes[i]
                continue
            for i in group:
                piece = buf if len(group) == 1 else jax.lax.slice(buf, (start,), (start + sizes[i],))
                leaves[i] = jnp.reshape(piece, shapes[i])
                start += sizes[i]
        return leaves

    def unravel(self, buffers):
        return self.treedef.unflatten(self.unravel_leaves(buffers))


@functools.lru_cache(maxsize=64)
def _without_variables_structure(treedef):
    """``treedef`` with its nnx Variable nodes replaced by their leaf (the structure
    ``nnx.as_pure`` gives); unchanged where it holds none."""
    return jax.tree.structure(without_variables(treedef.unflatten([0] * treedef.num_leaves)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _unravel(layout: Layout, buffers: tuple) -> tuple:
    return tuple(layout._slice_leaves(buffers))


def _unravel_fwd(layout, buffers):
    return _unravel(layout, buffers), None


def _unravel_bwd(layout, _, cotangents):
    return (layout.ravel_leaves(list(cotangents)),)


_unravel.defvjp(_unravel_fwd, _unravel_bwd)


@jax.tree_util.register_pytree_node_class
class FlatTree:
    """A tree stored as the flat buffers of a `Layout`: a pytree whose leaves
    are the buffers, so `apply_updates`, ``jax.grad`` and donation act on them
    directly. ``unravel()`` gives the original tree (reshaped slices: inside
    jit XLA reads them in place)."""

    def __init__(self, buffers, layout: Layout):
        self.buffers = tuple(buffers)
        self.layout = layout

    def tree_flatten(self):
        return self.buffers, self.layout

    @classmethod
    def tree_unflatten(cls, layout, buffers):
        return cls(buffers, layout)

    def unravel(self):
        return self.layout.unravel(self.buffers)

    def __repr__(self):
        shapes = ", ".join(f"{getattr(b, 'dtype', '?')}[{np.size(b) if hasattr(b, 'shape') else '?'}]"
                           for b in self.buffers)
        return f"FlatTree({self.layout.num_leaves} leaves in {len(self.buffers)} buffers: {shapes})"


# -- state conversion -------------------------------------------------------------

def _per_leaf_vectors(state, treedef) -> list[np.ndarray]:
    found: list[np.ndarray] = []

    def leaf_fn(_, x):
        found.append(np.asarray(x) if hasattr(x, "shape") else
                     np.asarray([np.asarray(v) for v in treedef.flatten_up_to(x)]))
        return x

    map_param_shaped(state, treedef, per_leaf=leaf_fn, param_tree=lambda t: t)
    return found


def _make_layout(tx, params, facts) -> Layout:
    # concrete even under an outer jit (``jax.jit(fused(tx).init)``): the
    # groups come from the per-leaf numbers of a one-element probe's state
    probe = jax.tree.map(lambda x: np.zeros((1,), jnp.result_type(x)), params)
    with warnings.catch_warnings(), jax.ensure_compile_time_eval():
        warnings.simplefilter("ignore")
        return _layout_for(params, tx.init(probe), facts)


def _layout_for(params, per_leaf_state, facts) -> Layout:
    """Groups the leaves of ``params`` by dtype and by the per-leaf values
    ``per_leaf_state`` holds (so a state whose counts diverged, e.g. one
    loaded from a checkpoint, gets the groups its own numbers need)."""
    leaves, treedef = jax.tree.flatten(params)
    vectors = _per_leaf_vectors(per_leaf_state, treedef)
    keys: dict = {}
    groups: list[list[int]] = []
    for i, x in enumerate(leaves):
        key = (str(jnp.result_type(x)),) + tuple(v[i].item() for v in vectors)
        if i == 0 and facts["isolate_first"]:
            key = ("first",) + key
        if facts.get("max_leaf_size") is not None and np.size(x) > facts["max_leaf_size"]:
            key = ("alone", i)  # a buffer of its own: ravel and unravel are reshapes, no copy
        if key not in keys:
            keys[key] = len(groups)
            groups.append([])
        groups[keys[key]].append(i)
    return Layout(treedef, tuple(tuple(jnp.shape(x)) for x in leaves),
                  tuple(str(jnp.result_type(x)) for x in leaves), tuple(tuple(g) for g in groups))


def _flatten_state(state, layout: Layout, *, concrete: bool = False):
    reps = [g[0] for g in layout.groups]

    def leaf_fn(field, x):
        vector = hasattr(x, "shape")  # a per-leaf vector: the fused one has an entry per group
        if vector and not isinstance(getattr(x, "values", x), jax.core.Tracer):  # (x may be GroupValues)
            host = np.asarray(x)
            if any(np.unique(host[list(g)]).size > 1 for g in layout.groups):
                raise ValueError(f"fused: per-leaf {field} differs inside a group; this state cannot be fused.")
        if vector:
            return x[np.asarray(reps)]
        leaves = layout.treedef.flatten_up_to(x)
        for g in layout.groups:  # the chain keeps one value per group: they must agree
            vals = [leaves[i] for i in g]
            if not any(isinstance(v, jax.core.Tracer) for v in vals) and \
                    np.unique(np.asarray([np.asarray(v) for v in vals])).size > 1:
                raise ValueError(f"fused: per-leaf {field} differs inside a group; this state "
                                 "cannot be fused.")
        return tuple(leaves[i] for i in reps)

    pack = layout.pack_concrete if concrete else layout.ravel_leaves
    return map_param_shaped(state, layout.treedef, per_leaf=leaf_fn,
                            param_tree=lambda t: pack(layout.treedef.flatten_up_to(t)))


class _Split:
    """Where a params-shaped tree was, and its leaves' shapes."""
    def __init__(self, shapes):
        self.shapes = shapes


_PER_LEAF = _Split(None)  # where a per-leaf field (a tree of scalars) was
_PER_LEAF_VECTOR = _Split(None)  # where a per-leaf vector was


def _unflatten_state(flat, template, layout: Layout):
    """The per-leaf state for a flat one: ``template`` (the per-leaf state, or
    its `jax.eval_shape`) says where a params-shaped tree and a per-leaf field
    were (`map_param_shaped`, as `_flatten_state` found them)."""
    treedef = layout.treedef
    owner = [0] * layout.num_leaves
    for j, group in enumerate(layout.groups):
        for i in group:
            owner[i] = j
    # slice by the template's own leaf shapes: a params-shaped state tree may
    # hold placeholders, e.g. master weights keep a (0,) array for a float32
    # leaf, so its group buffer is empty
    marks = map_param_shaped(template, treedef,
                             per_leaf=lambda _, t: _PER_LEAF_VECTOR if hasattr(t, "shape") else _PER_LEAF,
                             param_tree=lambda t: _Split([tuple(np.shape(x)) for x in treedef.flatten_up_to(t)]))

    def restore(mark, f):
        if mark is _PER_LEAF_VECTOR:
            return f[np.asarray(owner)]
        if mark is _PER_LEAF:  # a NumPy f (on the host) gives 0-d views, as jax gives 0-d arrays
            at = (lambda j: f[j, ...]) if isinstance(f, np.ndarray) else (lambda j: f[j])
            return treedef.unflatten([at(owner[i]) for i in range(layout.num_leaves)])
        if isinstance(mark, _Split):
            return treedef.unflatten(layout._slice_leaves(f, mark.shapes))
        return f

    return jax.tree.map(restore, marks, flat, is_leaf=lambda x: isinstance(x, _Split))


def _abstract_params(layout: Layout):
    return layout.treedef.unflatten([jax.ShapeDtypeStruct(s, d) for s, d in zip(layout.shapes, layout.dtypes)])
