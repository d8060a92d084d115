"""A fused multi-tensor step: the same chain, run on one flat buffer per group of leaves.

An optimizer step is pure memory traffic (Adam reads p, g, m, v and writes
p, m, v: 28 bytes per float32 parameter), so its speed is set by how many
passes over memory it makes and how many kernels it launches. Run leaf by
leaf, a chain launches its fused elementwise loop once per leaf (161 leaves
for ResNet-50, thousands for some models) and XLA has a graph of thousands of
small ops to compile. `fused` runs the *same* chain on a handful of 1-D
buffers instead:

* Leaves are grouped by dtype and by every per-leaf number the chain holds
  (``lr_mult``, ``wd_mult``, update counts), so inside a group those numbers
  are one scalar and the chain's arithmetic per element is exactly the per-leaf
  arithmetic: results are bit-identical to the per-leaf chain.
* A per-leaf reduction (a LARS/LAMB norm, a lazy row's flag) is a segment
  reduction over a buffer: the step context carries each buffer's leaves
  (``"segments"``, see `gradxform.pieces._segments`), and a piece gets each
  leaf's value at every element of it. A norm summed in another order, or a
  per-leaf value applied per element, agrees with the per-leaf chain to
  float32 rounding rather than bit for bit (`bit_exact` says which chains).
* The state is kept flat: each moment buffer is one array per group, and each
  per-leaf vector (``count``, ``lr_mult``, ...) has one entry per group.
* Parameters and gradients enter flat for free when the caller owns them as
  a `FlatTree` (`ravel` once, hand the loss function ``flat.unravel()`` views
  inside the jitted step: the gradient comes back as a `FlatTree`); given as
  ordinary trees they are concatenated and the updates sliced back, inside
  the same jit (see ``benchmarks/README.md`` for what that costs).

Exactness is decided per chain, never guessed: `fused` reads the declaration
(`gradxform._spec.Spec`) of each piece a chain is built from, and of the
transformations that wrappers such as `chain`, `gated`,
`with_master_weights` and the guards declare they run, and fuses only when
every one declares itself elementwise with per-leaf scalars or per-leaf
reductions. Anything else (per-leaf PRNG noise, Adafactor's factored
moments, any undeclared piece) keeps the per-leaf path, so ``fused(tx)`` is
always safe to apply. ``fused(tx, strict=True)`` raises instead, naming the
piece.

The declaration protocol (`gradxform._spec`; a contributor adding a piece
writes both parts where the piece is defined):

* Declare the piece's ``update`` function with ``@fusable`` (public as
  ``gradxform.fused.fusable``; the short form of `gradxform._spec.declare`).
  The declaration is an attribute of the function object, so renaming or
  moving the function, or any variable it captures, keeps it::

      def my_piece(decay):
          def init(params): ...

          @fusable                      # or @fusable(bit_exact=False, reductions=("leaf_sum",))
          def update(updates, state, params=None, **extra_args): ...

          return transformation(init, update)

  ``bit_exact=False``: the fused run agrees to float32 rounding only (a norm
  summed over a buffer, per-leaf values applied per element).
  ``isolate_first=True``: leaf 0 gets a buffer of its own. The factory
  decides both from its own options. ``@not_fusable(reason)`` names why a
  piece is never fused. A wrapper declares the transformations it runs
  (``declare(inner=(tx,))``), and they are checked in turn.
* A state NamedTuple whose fields hold one scalar per leaf (a tree of scalars
  shaped like the parameters: counts, multipliers, group slots) lists them in
  a class attribute, ``per_leaf_fields = ("count",)``: leaves are grouped by
  those values and the fused state keeps one entry per group. Any other
  params-shaped tree in a state becomes flat buffers.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ._base import CONTEXT_KEY, GradientTransformation, transformation
from ._elementwise import fusable, not_fusable
from ._spec import declare, spec_of
from ._state_paths import map_param_shaped, with_optional_like
from .pieces.internal import SEGMENTS_KEY, layout_segments

__all__ = ["fused", "FlatTree", "FusedState", "Layout", "bit_exact", "buffer_lengths", "fusable", "not_fusable",
           "flatten_state", "packed", "packing", "ravel", "unflatten_state", "why_not_fused"]


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

    def _leaves_of(self, tree) -> list:
        """``tree``'s leaves, checked against this layout's structure and shapes."""
        leaves = self.treedef.flatten_up_to(tree)
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
        ``shapes`` (one per leaf, e.g. a state's placeholders)."""
        shapes = self.shapes if shapes is None else shapes
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        leaves: list = [None] * self.num_leaves
        for buf, group in zip(buffers, self.groups):
            start = 0
            for i in group:
                piece = buf if len(group) == 1 else jax.lax.slice(buf, (start,), (start + sizes[i],))
                leaves[i] = jnp.reshape(piece, shapes[i])
                start += sizes[i]
        return leaves

    def unravel(self, buffers):
        return self.treedef.unflatten(self.unravel_leaves(buffers))


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


class FusedState(NamedTuple):
    """``inner``: the chain's own state, built on the flat buffers (moment
    buffers are one array per group; per-leaf vectors have one entry per
    group); ``layout``: static (not a pytree leaf)."""
    inner: Any
    layout: Layout


jax.tree_util.register_pytree_node(
    FusedState, lambda s: ((s.inner,), s.layout), lambda layout, kids: FusedState(kids[0], layout))


def ravel(tree, state) -> FlatTree:
    """``tree`` (params or grads) as a `FlatTree` in the layout of a fused
    ``state``: the once-per-run conversion for a training step that owns flat
    parameters."""
    layout = _layout_of(state)
    if layout is None:
        raise ValueError("fused.ravel: this state is not fused (the chain kept the per-leaf path; "
                         "see gradxform.fused.why_not_fused).")
    if any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(tree)):
        return FlatTree(layout.ravel(tree), layout)
    return FlatTree(layout.ravel_concrete(tree), layout)  # packed in NumPy: no program of N operands


def _layout_of(state):
    return state.layout if isinstance(state, FusedState) else None


# -- state conversion -------------------------------------------------------------

def _per_leaf_vectors(state, treedef) -> list[np.ndarray]:
    found: list[np.ndarray] = []

    def leaf_fn(_, x):
        found.append(np.asarray([np.asarray(v) for v in treedef.flatten_up_to(x)]))
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


_PER_LEAF = _Split(None)  # where a per-leaf field was


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
    marks = map_param_shaped(template, treedef, per_leaf=lambda _, t: _PER_LEAF,
                             param_tree=lambda t: _Split([tuple(np.shape(x)) for x in treedef.flatten_up_to(t)]))

    def restore(mark, f):
        if mark is _PER_LEAF:
            return treedef.unflatten([f[owner[i]] for i in range(layout.num_leaves)])
        if isinstance(mark, _Split):
            return treedef.unflatten(layout._slice_leaves(f, mark.shapes))
        return f

    return jax.tree.map(restore, marks, flat, is_leaf=lambda x: isinstance(x, _Split))


def buffer_lengths(tx: GradientTransformation, layout: Layout):
    """A tree shaped like ``fused(tx)``'s inner state for ``layout``: at each
    flat buffer (a params-shaped tree of the per-leaf state, one buffer per
    group) its length, and -1 at every other leaf (per-group values,
    hyperparameters, keys). What the Trainer shards over devices."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        template = jax.eval_shape(tx.init, _abstract_params(layout))

    def lengths(t):  # a placeholder tree (master weights of a float32 leaf) has its own sizes
        sizes = [int(np.prod(np.shape(x), dtype=np.int64)) for x in layout.treedef.flatten_up_to(t)]
        return tuple(sum(sizes[i] for i in g) for g in layout.groups)

    marks = map_param_shaped(template, layout.treedef, per_leaf=lambda _, x: (-1,) * len(layout.groups),
                             param_tree=lengths)
    return jax.tree.map(lambda m: m if type(m) is int else -1, marks)


def _abstract_params(layout: Layout):
    return layout.treedef.unflatten([jax.ShapeDtypeStruct(s, d) for s, d in zip(layout.shapes, layout.dtypes)])


def flatten_state(tx: GradientTransformation, state, params, *,
                  max_leaf_size: int | None = None) -> "FusedState":
    """``fused(tx)``'s state for a per-leaf ``state`` of ``tx`` (from
    ``tx.init``, a checkpoint or `gradxform.migrate`): the inverse of
    `unflatten_state`. The groups follow the state's own per-leaf numbers
    (``max_leaf_size``: as in `fused`)."""
    reasons, facts = _inspect(tx)
    facts["max_leaf_size"] = max_leaf_size
    if reasons:
        raise ValueError("fused.flatten_state: this chain keeps the per-leaf path: " + "; ".join(reasons))
    if len(jax.tree.leaves(params)) < 2:
        raise ValueError("fused.flatten_state: a tree of fewer than two leaves keeps the per-leaf path.")
    layout = _layout_for(params, state, facts)
    return FusedState(_flatten_state(state, layout), layout)


def unflatten_state(tx: GradientTransformation, state):
    """The per-leaf state of ``tx`` holding the same numbers as ``fused(tx)``'s
    ``state`` (for checkpoints that either path can resume, or to leave the
    fused path); a per-leaf state is returned as it is."""
    layout = _layout_of(state)
    if layout is None:
        return state
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        template = jax.eval_shape(tx.init, _abstract_params(layout))
    # counts per group (a state loaded after stale steps) where init shares one
    template = with_optional_like(template, state.inner, _abstract_params(layout))
    return _unflatten_state(state.inner, template, layout)


# -- the wrapper ------------------------------------------------------------------

def fused(tx: GradientTransformation, *, strict: bool = False,
          max_leaf_size: int | None = None) -> GradientTransformation:
    """Runs ``tx`` on flat per-group buffers: the same results, one
    elementwise pass per buffer instead of one per leaf.

    ``init(params)`` groups the leaves (by dtype and per-leaf multipliers and
    counts) and builds the chain's state on flat buffers. ``update`` takes
    ordinary trees (concatenated and sliced back inside the step: a drop-in)
    or `FlatTree` params and grads (no conversion at all; see `ravel`), and
    returns updates in the same form. Chains that cannot be fused exactly,
    and trees of fewer than two leaves, keep the per-leaf path with the
    per-leaf state (``strict=True`` raises for the former instead).

    ``max_leaf_size``: leaves with more elements than this get a buffer of
    their own (None: no limit). Such a buffer is the leaf itself, reshaped,
    so it enters and leaves the flat form for free; packing only the small
    leaves (biases, norms) removes most per-leaf launches without the copies
    a packed large leaf costs a training step (the concatenation of its
    gradient, and on XLA CPU a copy of its slice before each matmul; see
    ``benchmarks/README.md``).

    Limits: an ``update_mask`` extra argument must be constant inside each
    group (the chain keeps one update count per group).
    """
    reasons, facts = _inspect(tx)
    if max_leaf_size is not None and (not isinstance(max_leaf_size, int) or max_leaf_size < 1):
        raise ValueError(f"fused(max_leaf_size=...): expected a positive int or None; got {max_leaf_size!r}.")
    facts["max_leaf_size"] = max_leaf_size
    if reasons and strict:
        raise ValueError("fused(strict=True): this chain cannot be fused exactly: " + "; ".join(reasons))

    def init(params):
        if reasons or len(jax.tree.leaves(params)) < 2:
            return tx.init(params)
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(params)):
            # Concrete parameters: init op by op and pack on the host. The
            # compiled alternative below takes a program whose compile time grows
            # faster than the leaves (measured: 89 s of a 103 s Trainer
            # construction at 20,000 leaves), and this init's own per-leaf values
            # give the groups, so no probe is needed either.
            state = tx.init(params)
            layout = _layout_for(params, state, facts)
            return FusedState(_flatten_state(state, layout, concrete=True), layout)
        layout = _make_layout(tx, params, facts)
        # One compiled program: the per-leaf state is never materialised
        # next to its flat copy (XLA writes the zeros straight into the buffers).
        inner = jax.jit(lambda p: _flatten_state(tx.init(p), layout))(params)
        return FusedState(inner, layout)

    @declare(inner=(tx,))  # runs tx; not itself a piece that fuses
    def update(updates, state, params=None, **extra_args):
        layout = _layout_of(state)
        flat_in = isinstance(updates, FlatTree)
        if layout is None:  # the per-leaf path
            if not flat_in:
                return tx.update(updates, state, params, **extra_args)
            out, state = tx.update(updates.unravel(), state,
                                   params.unravel() if isinstance(params, FlatTree) else params, **extra_args)
            return FlatTree(updates.layout.ravel(out), updates.layout), state
        if flat_in:
            if updates.layout != layout:
                raise ValueError("fused.update: the FlatTree of updates has another layout than this "
                                 "state; make it with gradxform.fused.ravel(tree, state).")
            u = updates.buffers
        else:
            u = layout.ravel(updates)
        if params is None:
            p = None
        elif isinstance(params, FlatTree):
            p = params.buffers
        else:
            p = layout.ravel(params)
        mask = extra_args.get("update_mask")
        if mask is not None:
            leaves = layout.treedef.flatten_up_to(mask)
            extra_args = dict(extra_args, update_mask=tuple(leaves[g[0]] for g in layout.groups))
        # Pieces that reduce per leaf (norms, row flags) find the leaves of
        # each buffer here (gradxform.pieces._segments); a caller's context is added to.
        if extra_args.get(CONTEXT_KEY) is None:
            extra_args = {**extra_args, CONTEXT_KEY: {}}
        extra_args[CONTEXT_KEY][SEGMENTS_KEY] = layout_segments(layout)
        out, inner = tx.update(u, state.inner, p, **extra_args)
        out = FlatTree(out, layout) if flat_in else layout.unravel(out)
        return out, FusedState(inner, layout)

    return transformation(init, update)


fused.ravel = ravel
fused.FlatTree = FlatTree
fused.why_not_fused = why_not_fused
fused.bit_exact = bit_exact
fused.fusable = fusable
fused.not_fusable = not_fusable
fused.flatten_state = flatten_state
fused.unflatten_state = unflatten_state


# `packed` and `packing` live in their own module (`gradxform._packed`); they
# are attributes of `fused` like the helpers above.
from ._packed import packed, packing  # (it imports this module)

fused.packed = packed
fused.packing = packing
