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
  the same jit, which a layout packing large leaves refuses (`TREE_PACK_LIMIT`;
  ``benchmarks/README.md`` has what it would cost).

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
* A state NamedTuple whose fields hold one number per leaf (counts,
  multipliers, group slots, beta powers) keeps each as one 1-D array with an
  entry per leaf in flatten order (`gradxform._tree.host_leaf_vector` in
  ``init``), or as `gradxform.GroupValues` (one entry per group of leaves
  that share a number: `group_by_value`, `partition`), which
  ``leaf_values(vector, updates)`` reads in ``update``, and lists them in a class attribute,
  ``per_leaf_fields = ("leaf_counts",)``: leaves are grouped by those values
  and the fused state's vector has one entry per group. Any other
  params-shaped tree in a state becomes flat buffers.
"""
from __future__ import annotations

import warnings
from typing import Any, NamedTuple

import jax
import jax.core
import numpy as np
from jax.sharding import NamedSharding

from ._base import CONTEXT_KEY, GradientTransformation, StepContext, transformation
from ._elementwise import fusable, not_fusable
from ._flat import (FlatTree, Layout, _abstract_params, _flatten_state, _inspect, _layout_for, _make_layout,
                    _unflatten_state, bit_exact, why_not_fused)
from ._group_values import GroupValues
from ._packed import packed
from ._spec import declare
from ._state_paths import map_param_shaped, with_optional_like
from .pieces.internal import layout_segments

__all__ = ["fused", "fuse", "Fused", "FlatTree", "FusedState", "Layout", "bit_exact", "buffer_lengths", "fusable",
           "not_fusable", "flatten_state", "packed", "ravel", "unflatten_state", "why_not_fused"]


# -- layout and flat trees ------------------------------------------------------

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

_TEMPLATES: dict = {}  # (tx.init, layout) -> the per-leaf state's shapes; see _template
_MAX_TEMPLATES = 16


def _template(tx: GradientTransformation, layout: Layout, state=None):
    """The structure and leaf shapes of ``tx``'s per-leaf state for ``layout``
    (``jax.eval_shape`` of its ``init``), or of ``state``, a concrete one just made.

    Cached, and seeded by `fused`'s concrete ``init``: tracing ``init`` over N
    leaves costs about a tenth of a first step, and every checkpoint of a
    fused state needs it (`unflatten_state`)."""
    key = (tx.init, layout)
    if key not in _TEMPLATES:
        if state is None:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                state = jax.eval_shape(tx.init, _abstract_params(layout))
        if len(_TEMPLATES) >= _MAX_TEMPLATES:
            _TEMPLATES.pop(next(iter(_TEMPLATES)))
        _TEMPLATES[key] = jax.tree.map(lambda x: x if isinstance(x, jax.ShapeDtypeStruct) else jax.ShapeDtypeStruct(
            np.shape(x), x.dtype if hasattr(x, "dtype") else jax.numpy.result_type(x)), state)
    return _TEMPLATES[key]


def buffer_lengths(tx: GradientTransformation, layout: Layout):
    """A tree shaped like ``fused(tx)``'s inner state for ``layout``: at each
    flat buffer (a params-shaped tree of the per-leaf state, one buffer per
    group) its length, and -1 at every other leaf (per-group values,
    hyperparameters, keys). What the Trainer shards over devices."""
    template = _template(tx, layout)

    def lengths(t):  # a placeholder tree (master weights of a float32 leaf) has its own sizes
        sizes = [int(np.prod(np.shape(x), dtype=np.int64)) for x in layout.treedef.flatten_up_to(t)]
        return tuple(sum(sizes[i] for i in g) for g in layout.groups)

    reps = np.asarray([g[0] for g in layout.groups], np.intp)

    def per_leaf(_, x):  # a per-leaf vector is one leaf (GroupValues keeps its groups); a tree one per group
        if isinstance(x, GroupValues):
            return GroupValues(-1, x[reps].groups)
        return -1 if hasattr(x, "shape") else (-1,) * len(layout.groups)

    marks = map_param_shaped(template, layout.treedef, per_leaf=per_leaf, param_tree=lengths)
    return jax.tree.map(lambda m: m if type(m) is int else -1, marks)


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
    _refuse_sharded_params(params, "fused.flatten_state")
    layout = _layout_for(params, state, facts)
    # concrete leaves (a checkpoint's) are packed in NumPy: no concatenation of N operands compiled
    concrete = not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(state))
    return FusedState(_flatten_state(state, layout, concrete=concrete), layout)


def unflatten_state(tx: GradientTransformation, state):
    """The per-leaf state of ``tx`` holding the same numbers as ``fused(tx)``'s
    ``state`` (for checkpoints that either path can resume, or to leave the
    fused path); a per-leaf state is returned as it is."""
    layout = _layout_of(state)
    if layout is None:
        return state
    template = _template(tx, layout)
    # counts per group (a state loaded after stale steps) where init shares one
    template = with_optional_like(template, state.inner, _abstract_params(layout))
    return _unflatten_state(state.inner, template, layout)


# -- the wrapper ------------------------------------------------------------------

#: Fed ordinary trees, a layout that packs a leaf larger than this (elements)
#: would make every step concatenate it and slice it back: `fuse`'s update
#: refuses such trees (measured bytes in its docstring; 4096 costs ResNet-50's
#: shapes 49.0 bytes a parameter, 48 per leaf).
TREE_PACK_LIMIT = 4096


def _refuse_costly_trees(layout: Layout) -> None:
    sizes = layout.sizes()
    packed = [sizes[i] for g in layout.groups if len(g) > 1 for i in g]
    if packed and max(packed) > TREE_PACK_LIMIT:
        raise ValueError(
            f"fused(tx).update: fed ordinary trees, but this state's layout packs leaves of up to {max(packed)} "
            "elements into shared buffers, so every step would concatenate them and slice the updates back "
            "(an Adam step on ResNet-50's shapes: 712 bytes a parameter, against 48 for tx itself). Either "
            "keep the parameters and gradients flat (flat = gradxform.fused.ravel(params, state); update "
            "takes and returns FlatTrees), build it as fused(tx, max_leaf_size=1024) to feed trees (only "
            f"leaves of at most {TREE_PACK_LIMIT} elements may share a buffer), or use tx itself: the "
            "numbers are the same on every path. Nothing was updated.")


def _refuse_sharded_params(params, who: str) -> None:
    """A flat buffer concatenates leaves: one sharded over devices would sit whole on every device
    (or, under explicit mesh axes, fail to concatenate). Such parameters keep the per-leaf `tx`."""
    for path, x in jax.tree_util.tree_flatten_with_path(params)[0]:
        try:
            sharding = jax.typeof(x).sharding if isinstance(x, jax.core.Tracer) else getattr(x, "sharding", None)
        except (TypeError, AttributeError):  # an abstract value without a sharding (pmap's, a placeholder)
            continue
        if isinstance(sharding, NamedSharding) and not sharding.is_fully_replicated:
            raise ValueError(
                f"{who}: params{jax.tree_util.keystr(path)} is sharded over devices ({sharding.spec}); the fused "
                "layout concatenates leaves into flat buffers, which cannot keep that sharding (its state would "
                "sit whole on every device). Use tx itself: its state follows each leaf's sharding. For a flat "
                "state sharded over data-parallel devices, use gradxform.Trainer(..., update_on_kvstore=True).")


def fuse(tx: GradientTransformation, *, strict: bool = False,
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
    group (the chain keeps one update count per group). Parameters sharded
    over devices (a `NamedSharding` that is not fully replicated) are refused
    at ``init``: a flat buffer cannot keep a leaf's sharding, and ``tx``
    itself keeps its state sharded like the parameters. Flax nnx Variables
    are taken as the arrays they hold (``nnx.Optimizer`` calls ``init`` on
    Variables and ``update`` on arrays; the updates come back in the form
    they were given).

    Speed: fed ordinary trees, every step concatenates the gradients and
    parameters into the buffers and slices the updates back. Where a buffer
    packs large leaves that costs more than the fused pass saves (with the
    default ``max_leaf_size=None`` a donated Adam step would move 712 bytes per
    parameter on ResNet-50's shapes and 660 on GPT-2's, against 48 per leaf:
    XLA's cost analysis, ``benchmarks/bench_bytes.py --shapes resnet50,gpt2``),
    so an update fed trees raises when its layout packs a leaf of more than
    `TREE_PACK_LIMIT` elements, and names the other paths. The fast paths keep
    the arrays flat: `FlatTree` params and grads from `ravel` (made once,
    updated in place), or `gradxform.Trainer`, which holds them so. For
    ordinary trees use ``tx`` itself, or ``max_leaf_size=1024`` (only the
    small leaves are packed: 48.6 and 48.1 bytes on those shapes).
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
        _refuse_sharded_params(params, "fused(tx).init")
        if not any(isinstance(x, jax.core.Tracer) for x in jax.tree.leaves(params)):
            # Concrete parameters: init op by op and pack on the host. The
            # compiled alternative below takes a program whose compile time grows
            # faster than the leaves (measured: 89 s of a 103 s Trainer
            # construction at 20,000 leaves), and this init's own per-leaf values
            # give the groups, so no probe is needed either.
            state = tx.init(params)
            layout = _layout_for(params, state, facts)
            _template(tx, layout, state)  # what unflatten_state (a checkpoint) would trace init for
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
        if not flat_in:
            _refuse_costly_trees(layout)
            layout = layout.matching(updates)  # nnx.Optimizer: Variables at init, their arrays here
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
        # Pieces that reduce per leaf (norms, row flags) find the leaves of each
        # buffer in a context of the chain's own (gradxform.pieces._segments): the
        # caller's per-leaf values do not fit the buffers, and its dict is not written.
        ctx = StepContext.on_buffers(layout_segments(layout))
        with ctx.running(tx):
            out, inner = tx.update(u, state.inner, p, **{**extra_args, CONTEXT_KEY: ctx})
        out = FlatTree(out, layout) if flat_in else layout.unravel(out)
        return out, FusedState(inner, state.layout)

    return transformation(init, update)


class Fused:
    """``gradxform.fused``: call it on a transformation (`fuse`: one elementwise pass
    per buffer instead of one per leaf), and find the flat form's helpers on it
    (``gradxform.fused.FlatTree``, ``.ravel``, ``.why_not_fused``, ``.bit_exact``,
    ``.fusable``, ``.not_fusable``, ``.flatten_state``, ``.unflatten_state``,
    ``.packed``). One object with its attributes declared here, so a reader and a
    type checker see them (they were set on a function at import)."""

    __slots__ = ()

    def __call__(self, tx: GradientTransformation, *, strict: bool = False,
                 max_leaf_size: int | None = None) -> GradientTransformation:
        """`fuse`: ``tx`` on flat per-group buffers (see the module docstring)."""
        return fuse(tx, strict=strict, max_leaf_size=max_leaf_size)

    ravel = staticmethod(ravel)
    FlatTree = FlatTree
    why_not_fused = staticmethod(why_not_fused)
    bit_exact = staticmethod(bit_exact)
    fusable = staticmethod(fusable)
    not_fusable = staticmethod(not_fusable)
    flatten_state = staticmethod(flatten_state)
    unflatten_state = staticmethod(unflatten_state)
    packed = staticmethod(packed)


fused = Fused()
