"""Per-leaf reductions that work on both paths: leaf by leaf, or as segment
reductions over the flat buffers of `gradxform.fused`.

A piece that needs one number per leaf (a LARS or LAMB trust ratio, a row's
"is this row present" flag) calls these helpers with the tree it works on
and its extra arguments, and uses the result elementwise:

* on the per-leaf path (no layout in the step context) a helper returns a
  tree of 0-d values, one per leaf, computed as the per-leaf code always did
  (``jnp.sum`` of the leaf, in float32);
* under `fused` the step context holds, under ``"segments"``, one `Segments`
  per flat buffer: the static list of leaves stored in it, one after
  another. A helper then returns, per buffer, each leaf's value repeated at
  every element of that leaf (or one 0-d value when the buffer holds one
  leaf), so ``value * buffer`` is per element the per-leaf arithmetic.

A per-leaf sum over a buffer is a segment sum. ``jax.ops.segment_sum`` alone
(a scatter-add) would add a leaf's elements one after the other: on CPU a 4M
element leaf then loses about 3e-3 of its relative precision and takes 7
times as long as ``jnp.sum``, and on GPU it becomes atomics contending for a
handful of addresses. `Segments` therefore reduces in blocks (`_Plan`): the
buffer is viewed as rows of ``_BLOCK`` elements; rows that lie inside one
leaf are summed densely (``x.reshape(rows, _BLOCK).sum(1)``) and their sums
reduced again the same way, level by level; only the rows that straddle a
leaf boundary (at most one per boundary, and the partial last row) go
through a scatter-add. Spreading values back is the same per-row view. The
constants are per row, and per element of the straddling rows only, so
nothing of the buffer's size is baked into the program (a per-element id
array is, and XLA then spends seconds constant-folding it), and the number
of traced operations does not grow with the number of leaves. The sums
match the per-leaf ``jnp.sum`` to float32 rounding of a sum (measured 6e-7
relative on a 4M element leaf), not bit for bit.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._base import StepContext
from .._selectors import Selector
from .._tree import param_names

__all__ = ["SEGMENTS_KEY", "Segments", "ShardedSegments", "layout_segments", "buffer_segments", "leaf_sum",
           "leaf_sq_norm", "leaf_flags", "spread_leaf_values", "row_sums", "whole_buffers", "on_every_shard"]

SEGMENTS_KEY = "segments"

# Elements per row of the blocked reduction: rows of 256 reduce densely on
# CPU and GPU, a straddling row costs 256 scatter-adds at most, and a leaf of
# 16M elements is reduced in three levels of at most 256 additions each.
_BLOCK = 256


@dataclasses.dataclass(frozen=True)
class _Plan:
    """The static blocked reduction of a buffer cut into segments of ``sizes``."""
    n: int
    k: int
    starts: np.ndarray        # (k,) first element of each segment
    ids: np.ndarray | None    # (n,) segment of each element: only for n <= _BLOCK
    nb: int                   # rows of _BLOCK elements (the last one padded with zeros)
    row_seg: np.ndarray       # (nb,) segment of each row's first element
    pure: np.ndarray          # (nb,) the row lies inside one segment
    row_sizes: tuple          # rows per segment (by row_seg): the next level's segments
    mixed: np.ndarray         # (m,) the rows that straddle a boundary
    mixed_pos: np.ndarray     # (nb,) a row's index in ``mixed`` (0 for pure rows)
    mixed_local: np.ndarray   # (m, _BLOCK) segment of each element of a mixed row, minus its row_seg

    @property
    def mixed_ids(self) -> jax.Array:
        return jnp.asarray(self.row_seg[self.mixed])[:, None] + jnp.asarray(self.mixed_local, jnp.int32)


@functools.lru_cache(maxsize=512)
def _plan(sizes: tuple) -> _Plan:
    sizes_np = np.asarray(sizes, np.int64)
    n, k = int(sizes_np.sum()), len(sizes)
    starts = np.concatenate([[0], np.cumsum(sizes_np)[:-1]]).astype(np.int64)

    def seg_of(pos):  # the last segment starting at or before pos: empty segments own nothing
        return np.searchsorted(starts, pos, side="right") - 1

    if n <= _BLOCK:
        return _Plan(n, k, starts, seg_of(np.arange(n)).astype(np.int32), 1, np.zeros(1, np.int32),
                     np.zeros(1, bool), (), np.zeros(0, np.int32), np.zeros(1, np.int32),
                     np.zeros((0, _BLOCK), np.uint8))
    nb = -(-n // _BLOCK)
    first = np.arange(nb, dtype=np.int64) * _BLOCK
    row_seg = seg_of(first)
    # a partial last row counts as straddling: whole rows are summed in place
    pure = (row_seg == seg_of(np.minimum(first + _BLOCK, n) - 1)) & (first + _BLOCK <= n)
    mixed = np.nonzero(~pure)[0]
    mixed_pos = np.zeros(nb, np.int32)
    mixed_pos[mixed] = np.arange(mixed.size, dtype=np.int32)
    # padding past n belongs to the last non-empty segment and holds zeros
    local = seg_of(first[mixed, None] + np.arange(_BLOCK)[None, :]) - row_seg[mixed, None]
    top = int(local.max()) if local.size else 0
    local = local.astype(np.uint8 if top < 2 ** 8 else np.uint16 if top < 2 ** 16 else np.int32)
    row_sizes = tuple(int(c) for c in np.bincount(row_seg[:n // _BLOCK], minlength=k))
    return _Plan(n, k, starts, None, nb, row_seg.astype(np.int32), pure, row_sizes, mixed.astype(np.int32),
                 mixed_pos, local)


def _segment_sums(x: jax.Array, sizes: tuple) -> jax.Array:
    """``(k,)`` sums of the consecutive segments of ``sizes`` in the 1-D ``x``."""
    k, n = len(sizes), int(sum(sizes))
    if k == 1:
        return jnp.sum(x).reshape(1)
    if n == 0:
        return jnp.zeros((k,), x.dtype)
    if len(set(sizes)) == 1:  # equal segments: one dense row reduction
        return jnp.sum(x.reshape(k, sizes[0]), axis=1)
    plan = _plan(sizes)
    if plan.ids is not None:
        return jax.ops.segment_sum(x, jnp.asarray(plan.ids), k, indices_are_sorted=True)
    whole = n // _BLOCK
    rows = x[:whole * _BLOCK].reshape(whole, _BLOCK)  # read in place, no padded copy
    total = jnp.zeros((k,), x.dtype)
    if plan.pure.any():
        # a straddling row's sum is zeroed here and added element by element below
        row_sums = jnp.where(jnp.asarray(plan.pure[:whole]), jnp.sum(rows, axis=1), jnp.zeros((), x.dtype))
        total = _segment_sums(row_sums, plan.row_sizes)
    straddling = [rows[jnp.asarray(plan.mixed[plan.mixed < whole])]]
    if whole < plan.nb:  # the partial last row, padded with zeros
        straddling.append(jnp.pad(x[whole * _BLOCK:], (0, plan.nb * _BLOCK - n))[None])
    values = jnp.concatenate(straddling).reshape(-1)
    if values.size:
        total = total + jax.ops.segment_sum(values, plan.mixed_ids.reshape(-1), k, indices_are_sorted=True)
    return total


def _spread(values: jax.Array, sizes: tuple) -> jax.Array:
    """``values[i]`` at every element of segment ``i``: a 1-D array of ``sum(sizes)``."""
    values = jnp.asarray(values)
    k, n = len(sizes), int(sum(sizes))
    if k == 1:
        return jnp.broadcast_to(values[0], (n,))
    if len(set(sizes)) == 1:
        return jnp.broadcast_to(values[:, None], (k, sizes[0])).reshape(n)
    plan = _plan(sizes)
    if plan.ids is not None:
        return values[jnp.asarray(plan.ids)]
    # per row: the row's value, or per element for the rows that straddle a
    # boundary; all of it fuses into the consumer's elementwise loop
    per_row = values[jnp.asarray(plan.row_seg)][:, None]
    if plan.mixed.size:
        per_elem = values[plan.mixed_ids][jnp.asarray(plan.mixed_pos)]
        per_row = jnp.where(jnp.asarray(plan.pure)[:, None], per_row, per_elem)
    return jnp.broadcast_to(per_row, (plan.nb, _BLOCK)).reshape(-1)[:n]


@dataclasses.dataclass(frozen=True)
class Segments:
    """The leaves that `fused` stores one after another in one flat buffer:
    their indices in flatten order, shapes and parameter names (static)."""
    leaves: tuple
    shapes: tuple
    names: tuple

    @functools.cached_property
    def sizes(self) -> tuple:
        return tuple(int(np.prod(s, dtype=np.int64)) for s in self.shapes)

    def sums(self, x: jax.Array) -> jax.Array:
        """``(k,)``: the sum of each leaf's elements of the buffer ``x``."""
        return _segment_sums(x, self.sizes)

    def spread(self, values) -> jax.Array:
        """``values[i]`` (one per leaf of this buffer) at each element of leaf
        ``i``; a 0-d value when the buffer holds a single leaf."""
        values = jnp.asarray(values)
        if len(self.sizes) == 1:
            return values.reshape(())
        return _spread(values, self.sizes)

    def reduce(self, x: jax.Array) -> jax.Array:
        """Each element's leaf sum: ``spread(sums(x))``."""
        if len(self.sizes) == 1:
            return jnp.sum(x)
        return self.spread(self.sums(x))

    def row_sums(self, x: jax.Array) -> jax.Array:
        """Each element's row sum, for an integer ``x`` (exact in any order):
        a row is a slice along a leaf's first axis, a single element for
        leaves of fewer than two dimensions. A scatter-add over row ids that
        each element computes from its leaf's offset, row length and first
        row id (constants per leaf, none per element)."""
        row_len = np.asarray([int(np.prod(s[1:], dtype=np.int64)) if len(s) >= 2 else 1 for s in self.shapes])
        if (row_len == 1).all():
            return x
        rows = np.asarray([s[0] if len(s) >= 2 else n for s, n in zip(self.shapes, self.sizes)], np.int64)
        starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]])
        first_row = np.concatenate([[0], np.cumsum(rows)[:-1]])
        pos = jax.lax.iota(jnp.int32, int(sum(self.sizes)))
        start, length = self.spread(starts.astype(np.int32)), self.spread(row_len.astype(np.int32))
        ids = self.spread(first_row.astype(np.int32)) + (pos - start) // length
        return jax.ops.segment_sum(x, ids, int(rows.sum()), indices_are_sorted=True)[ids]


@dataclasses.dataclass(frozen=True)
class ShardedSegments:
    """A `Segments` whose buffer is split over the devices of a mesh axis:
    each device holds ``chunk`` consecutive elements (the last shard padded
    by repeating the buffer's last element, so a padding element computes
    exactly what that element computes and is finite when it is). Used by
    the Trainer's sharded optimizer state (``update_on_kvstore=True``).

    A reduction gathers the buffer whole and reduces it as the unsharded
    `Segments` does, in the same order, then keeps this device's shard of
    any per-element result: the sums are those of the unsharded fused step,
    bit for bit, at the cost of one all-gather of the reduced buffer (LARS,
    LAMB, the global-norm clips and lazy rows are the only users)."""
    whole: Segments
    axis: str
    num_shards: int

    leaves = property(lambda self: self.whole.leaves)
    shapes = property(lambda self: self.whole.shapes)
    names = property(lambda self: self.whole.names)
    sizes = property(lambda self: self.whole.sizes)

    @property
    def length(self) -> int:
        return int(sum(self.sizes))

    @property
    def chunk(self) -> int:
        return -(-self.length // self.num_shards)

    def gather(self, x: jax.Array) -> jax.Array:
        """The whole buffer from every device's shard ``x``."""
        if jnp.ndim(x) == 0 or self.length == 0:  # XLA refuses to all-gather a zero-length axis
            return x  # length 0: chunk is 0, so the shard is already the whole (empty) buffer
        return jax.lax.all_gather(x, self.axis, tiled=True)[:self.length]

    def local(self, x) -> jax.Array:
        """This device's shard of a whole per-element array ``x`` (0-d: as it is)."""
        return shard_of(x, self.axis, self.num_shards)

    def sums(self, x: jax.Array) -> jax.Array:
        return self.whole.sums(self.gather(x))

    def spread(self, values) -> jax.Array:
        return self.local(self.whole.spread(values))

    def reduce(self, x: jax.Array) -> jax.Array:
        return self.local(self.whole.reduce(self.gather(x)))

    def row_sums(self, x: jax.Array) -> jax.Array:
        return self.local(self.whole.row_sums(self.gather(x)))


def shard_of(x, axis: str, num_shards: int) -> jax.Array:
    """This device's (``jax.lax.axis_index(axis)``) shard of the 1-D ``x``:
    ``ceil(len / num_shards)`` elements, the last shard padded with copies of
    the last element; a 0-d ``x`` is returned as it is."""
    x = jnp.asarray(x)
    if x.ndim == 0 or x.shape[0] == 0:
        return x
    n = x.shape[0]
    chunk = -(-n // num_shards)
    start = jax.lax.axis_index(axis) * chunk
    if chunk * num_shards == n:
        return jax.lax.dynamic_slice_in_dim(x, start, chunk)
    # a gather with the index clamped to the last element: the padded shard
    # without materialising a padded copy of the whole buffer
    return x[jnp.minimum(start + jax.lax.iota(jnp.int32, chunk), n - 1)]


def whole_buffers(tree, extra_args: dict) -> list:
    """The leaves of ``tree``, or under a sharded step (`ShardedSegments` in
    the context) each buffer gathered whole: for a reduction over all
    elements (a global norm) that must see them in the unsharded order."""
    segs = buffer_segments(extra_args, "whole")
    leaves = jax.tree.leaves(tree)
    if not segs or not isinstance(segs[0], ShardedSegments):
        return leaves
    return [s.gather(x) for x, s in zip(_buffers(tree, segs), segs)]


def on_every_shard(flag: jax.Array, extra_args: dict | None) -> jax.Array:
    """``flag`` (a scalar bool computed on this device's shards) and-ed over
    every shard of a sharded step (an exact integer all-reduce); as it is otherwise."""
    segs = buffer_segments(extra_args, "whole") if extra_args else None
    if not segs or not isinstance(segs[0], ShardedSegments):
        return flag
    bad = jax.lax.psum(1 - jnp.asarray(flag, jnp.int32), segs[0].axis)
    return bad == 0


def layout_segments(layout) -> tuple:
    """One `Segments` per buffer of a fused `Layout` (cached per layout)."""
    return _layout_segments(layout)


@functools.lru_cache(maxsize=64)
def _layout_segments(layout) -> tuple:
    names = param_names(layout.treedef.unflatten(list(range(layout.num_leaves))))
    return tuple(Segments(tuple(g), tuple(layout.shapes[i] for i in g), tuple(names[i] for i in g))
                 for g in layout.groups)


def buffer_segments(extra_args: dict, reduction: str | None = None) -> tuple | None:
    """The fused layout of the buffers being updated, or None on the per-leaf
    path. ``reduction``: the per-leaf reduction (`gradxform._spec.REDUCTIONS`)
    the caller supplies from it, which the running piece must have declared
    (`StepContext.require_reduction`)."""
    ctx = StepContext.of(extra_args)
    if ctx is None:
        return None
    if reduction is not None:
        ctx.require_reduction(reduction)
    return ctx.segments


def _buffers(tree, segs) -> list:
    leaves = jax.tree.leaves(tree)
    if len(leaves) != len(segs):
        raise ValueError(f"segment reduction: {len(leaves)} buffers for a layout of {len(segs)}.")
    return leaves


def leaf_sum(tree, extra_args: dict):
    """Each leaf's sum, accumulated in float32: a tree of 0-d values, or
    under `fused` per buffer each element's leaf sum."""
    segs = buffer_segments(extra_args, "leaf_sum")
    if segs is None:
        return jax.tree.map(lambda x: jnp.sum(x.astype(jnp.float32)), tree)
    out = [s.reduce(x.astype(jnp.float32)) for x, s in zip(_buffers(tree, segs), segs)]
    return jax.tree.structure(tree).unflatten(out)


def leaf_sq_norm(tree, extra_args: dict):
    """Each leaf's squared L2 norm ``sum(x^2)`` in float32 (see `leaf_sum`)."""
    return leaf_sum(jax.tree.map(lambda x: jnp.square(x.astype(jnp.float32)), tree), extra_args)


def leaf_flags(tree, extra_args: dict, predicate: Callable[[str], bool]):
    """``predicate(name)`` of each parameter name, static: a tree of Python
    bools, or under `fused` per buffer one bool where all its leaves agree
    and else a bool per element."""
    predicate = Selector.of(predicate)  # a predicate may read x.name: MindSpore's filters
    segs = buffer_segments(extra_args, "leaf_flags")
    if segs is None:
        names = param_names(tree)
        return jax.tree.structure(tree).unflatten([bool(b) for b in predicate.select(names)])
    out = []
    for s in segs:
        flags = np.asarray(predicate.select(list(s.names)))
        out.append(bool(flags[0]) if (flags == flags[0]).all() else s.spread(flags))
    return jax.tree.structure(tree).unflatten(out)


def _present_rows(g):
    g = jnp.asarray(g)
    if g.ndim <= 1:
        return g != 0
    # any() over the trailing axes, not a reshape to (rows, -1): -1 is
    # ambiguous for a leaf with no elements (ZeroDivisionError for (0, 3))
    return jnp.any(g != 0, axis=tuple(range(1, g.ndim)))


def present_rows(tree, extra_args: dict):
    """Whether each row (first axis; each element below two dimensions) of
    ``tree`` has a nonzero: per leaf a flag per row; under `fused` per buffer
    a flag per element, from its row's count of nonzeros (an integer segment
    sum: exact)."""
    if buffer_segments(extra_args, "row_sums") is None:
        return jax.tree.map(_present_rows, tree)
    counts = row_sums(jax.tree.map(lambda g: (g != 0).astype(jnp.int32), tree), extra_args)
    return jax.tree.structure(tree).unflatten([c > 0 for c in counts])


def leaf_scan(step: Callable, out: Callable, carry, xs: Sequence, extra_args: dict) -> tuple:
    """Carries ``carry`` over the leaves in index order, as a per-leaf loop
    does: at each leaf ``carry = step(carry, x)``, and that leaf's values are
    ``out(carry, x)`` (a tuple). ``xs``: a tuple of scalars per entry of the
    tree being updated (a leaf; under `fused` a buffer, whose leaves share
    its scalars). Returns (the last carry, per entry the tuple of values:
    per leaf 0-d; under `fused` each leaf's value at each element of its
    leaf in the buffer).

    Per leaf this is a Python loop; under `fused` a ``lax.scan`` over one
    scalar per leaf (the same operations in the same order), whose
    outputs ``out`` computes for all leaves at once, spread per element."""
    segs = buffer_segments(extra_args, "leaf_scan")
    if segs is None or not xs:
        outs = []
        for x in xs:
            carry = step(carry, x)
            outs.append(out(carry, x))
        return carry, outs
    owner = np.zeros(sum(len(s.leaves) for s in segs), np.int32)
    for j, s in enumerate(segs):
        owner[list(s.leaves)] = j
    per_leaf = tuple(jnp.stack([jnp.asarray(x[k]) for x in xs])[owner] for k in range(len(xs[0])))

    def body(c, x):
        c = step(c, x)
        return c, c

    last, carries = jax.lax.scan(body, carry, per_leaf)
    values = [spread_leaf_values(v, segs) for v in out(carries, per_leaf)]
    return last, [tuple(v[j] for v in values) for j in range(len(segs))]


def spread_leaf_values(values: jax.Array, segs: Sequence[Segments]) -> list:
    """Per buffer, ``values[leaf]`` (a vector over all leaves in flatten
    order) at each element of that leaf (0-d for a buffer of one leaf)."""
    return [s.spread(values[np.asarray(s.leaves)]) for s in segs]


def row_sums(tree, extra_args: dict) -> list:
    """Under `fused`: per buffer of the integer tree, each element's row sum
    (`Segments.row_sums`)."""
    segs = buffer_segments(extra_args, "row_sums")
    assert segs is not None, "row_sums: only under fused (present_rows checks)"
    return [s.row_sums(x) for x, s in zip(_buffers(tree, segs), segs)]
