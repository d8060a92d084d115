"""Per-leaf reductions under gradxform.fused: segment reductions over the flat
buffers give the per-leaf path's numbers.

Tolerance: a segment sum adds a leaf's float32 squares in another order than
the per-leaf ``jnp.sum``, so a norm differs by float32 rounding of a sum
(about 1e-7 relative on these leaves), and it reaches the parameters through
a trust ratio. Chains that apply per-leaf values per element (Nadam's
schedule, lazy rows) compute the same numbers, but XLA:CPU may contract a
multiply-add into an FMA differently in the other fusion. Either way the
results agree to 1e-6 relative over these runs (measured: 2e-7 after 20
steps), which is what `_assert_close` checks; `fused.bit_exact` is False for
exactly these chains, and the helpers' own building blocks (spreading values,
integer row counts) are checked bit for bit.
"""
import dataclasses
import warnings

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import pieces
from gradxform._base import CONTEXT_KEY, StepContext, transformation
from gradxform._elementwise import fusable
from gradxform._fused import FlatTree, FusedState
from gradxform.mxnet._adaptive import _nadam_direction
from gradxform.mindspore._adam import _lamb_direction
from gradxform.pieces import _segments as seg
import quick_compile

M = gradxform.mindspore
pytestmark = pytest.mark.filterwarnings("ignore:Accumulating with float16")  # the bfloat16 leaf

# One float32 group holding leaves of different sizes (a 0-d leaf, a size-1
# leaf, an all-zero weight whose norm is 0 on the first step, a leaf whose
# gradient is always 0) and names the MindSpore LARS filters act on; a
# bfloat16 leaf makes a second group.
PARAMS = {
    "dense": {"kernel": jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4),
              "bias": jnp.asarray([0.1, -0.2, 0.3, 0.05], jnp.float32)},
    "LayerNorm": {"gamma": jnp.asarray([1.0, 0.9, 1.1], jnp.float32),
                  "beta": jnp.asarray([0.01, -0.02, 0.0], jnp.float32)},
    "emb": jnp.linspace(0.5, -0.5, 10, dtype=jnp.float32).reshape(5, 2),
    "conv": jnp.linspace(0.3, -0.4, 24, dtype=jnp.float32).reshape(2, 3, 4),
    "scalar": jnp.asarray(0.3, jnp.float32),
    "single": jnp.asarray([0.2], jnp.float32),
    "zero_w": jnp.zeros((3,), jnp.float32),
    "frozen": jnp.asarray([0.4, -0.6], jnp.float32),
    "half": jnp.linspace(0.5, -0.5, 6, dtype=jnp.bfloat16),
}

# Leaves larger than a block of the blocked reduction (straddling rows and
# whole rows, two levels), next to small ones.
BIG = {
    "w1": jnp.sin(jnp.arange(1300, dtype=jnp.float32)).reshape(260, 5),
    "b1": jnp.cos(jnp.arange(7, dtype=jnp.float32)),
    "w2": jnp.cos(jnp.arange(70000, dtype=jnp.float32) * 0.01).reshape(700, 100),
    "s": jnp.asarray(1.5, jnp.float32),
}


def _grads(k, params):
    def one(path, p):
        name = jax.tree_util.keystr(path)
        g = 0.3 * jnp.sin(3.0 * p.astype(jnp.float32) + k) + 0.05 * (k + 1)
        if "frozen" in name:
            g = jnp.zeros_like(g)
        if g.ndim >= 2:  # an all-zero row, a different one each step (lazy updates skip it)
            g = g.at[k % g.shape[0]].set(0.0)
        return g.astype(p.dtype)
    return jax.tree_util.tree_map_with_path(one, params)


def _run(tx, params, steps=6):  # compared within a tolerance (`_assert_close`): a quick compile
    step = quick_compile.jit(lambda g, s, p: tx.update(g, s, p))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bfloat16 without master weights warns
        state = tx.init(params)
    for k in range(steps):
        u, state = step(_grads(k, params), state, params)
        params = gradxform.apply_updates(params, u)
    return params, state


def _run_flat(ftx, params, steps):
    """`_run` of a fused transformation on `FlatTree` params and grads (a layout that packs large
    leaves refuses ordinary trees); returns the params as a tree."""
    step = quick_compile.jit(lambda g, s, p: ftx.update(g, s, p))
    state = ftx.init(params)
    flat = gradxform.fused.ravel(params, state)
    for k in range(steps):
        u, state = step(gradxform.fused.ravel(_grads(k, flat.unravel()), state), state, flat)
        flat = gradxform.apply_updates(flat, u)
    return flat.unravel(), state


def _assert_close(ref, got, rtol=1e-6):
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(ref)[0], jax.tree.leaves(got)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        np.testing.assert_allclose(y, x, rtol=rtol, atol=1e-7, err_msg=jax.tree_util.keystr(path))


CHAINS = {
    "mindspore.lars(momentum)": lambda: M.lars(M.momentum(0.1, 0.9), weight_decay=1e-3),
    "mindspore.lars(momentum, use_clip)": lambda: M.lars(M.momentum(0.1, 0.9), coefficient=0.5, use_clip=True,
                                                         weight_decay=1e-3),
    "mindspore.lars(sgd, all leaves)": lambda: M.lars(M.sgd(0.1, momentum=0.9), lars_filter=lambda n: True,
                                                      decay_filter=None, weight_decay=1e-2),
    "mindspore.lamb": lambda: gradxform.create("mindspore.lamb", learning_rate=0.05, weight_decay=1e-3),
    "mxnet.lbsgd(lars)": lambda: gradxform.create("mxnet.lbsgd", learning_rate=0.1, momentum=0.9, wd=1e-3,
                                                  warmup_strategy="lars", batch_scale=2),
    "mxnet.lbsgd(lars, batch_scale=1)": lambda: gradxform.create("mxnet.lbsgd", learning_rate=0.1, wd=1e-3,
                                                                 warmup_strategy="lars"),
    "mxnet.nadam": lambda: gradxform.create("mxnet.nadam", learning_rate=0.05, wd=1e-3),
    "mxnet.nadam(lr_mult)": lambda: gradxform.create("mxnet.nadam", learning_rate=0.05,
                                                     lr_mult={"dense/*": 2.0, "emb": 0.5}),
    "mindspore.lazy_adam": lambda: gradxform.create("mindspore.lazy_adam", learning_rate=0.05, weight_decay=1e-3),
    "mxnet.sgd(lazy_update)": lambda: gradxform.create("mxnet.sgd", learning_rate=0.1, momentum=0.9, wd=1e-3,
                                                       lazy_update=True),
    "mxnet.adam(lazy_update)": lambda: gradxform.create("mxnet.adam", learning_rate=0.05, lazy_update=True),
}


@pytest.mark.parametrize("name", list(CHAINS))
def test_fused_matches_per_leaf(name):
    tx = CHAINS[name]()
    assert gradxform.fused.why_not_fused(tx) == []
    assert not gradxform.fused.bit_exact(tx)
    ref, ref_state = _run(tx, PARAMS)
    got, state = _run(gradxform.fused(tx, strict=True), PARAMS)
    assert isinstance(state, FusedState)
    sizes = [state.layout.sizes()[i] for i in max(state.layout.groups, key=len)]
    assert len(sizes) >= 5 and len(set(sizes)) > 2 and 1 in sizes  # a multi-leaf group with 0-d / (1,) leaves
    _assert_close(ref, got)
    back = gradxform.fused.unflatten_state(tx, state)
    _assert_close(jax.tree.leaves(ref_state), jax.tree.leaves(back))


@pytest.mark.parametrize("name", ["mindspore.lars(momentum)", "mindspore.lamb", "mxnet.lbsgd(lars)"])
def test_fused_matches_per_leaf_on_leaves_larger_than_a_block(name):
    tx = CHAINS[name]()
    ref, _ = _run(tx, BIG, steps=3)
    got, state = _run_flat(gradxform.fused(tx, strict=True), BIG, steps=3)  # packed on purpose: the segments
    assert len(state.layout.groups) == 1
    _assert_close(ref, got)


def test_trust_ratio_of_a_zero_norm_leaf_is_zero():
    # zero_w has |w| = 0 on the first step and frozen has |g| = 0 on every step:
    # ratio 0 for zero_w (no guard, as the seed and Ascend's lars_v2_update: issue 15
    # item 4a) and 0 * (g + 0 w) = 0 for frozen, fused as per leaf
    tx = M.lars(M.momentum(0.1, 0.0), coefficient=0.5, lars_filter=lambda n: True, decay_filter=None)
    g = _grads(0, PARAMS)
    ref, _ = tx.update(g, tx.init(PARAMS), PARAMS)
    ftx = gradxform.fused(tx, strict=True)
    got, _ = jax.jit(ftx.update)(g, ftx.init(PARAMS), PARAMS)
    np.testing.assert_array_equal(got["zero_w"], 0.0)
    np.testing.assert_array_equal(got["frozen"], 0.0)
    _assert_close(ref, got)


def test_flat_tree_inputs_and_a_caller_context():
    tx = CHAINS["mindspore.lamb"]()
    ftx = gradxform.fused(tx, strict=True)
    state = ftx.init(PARAMS)
    ctx = gradxform.StepContext()
    flat = gradxform.fused.ravel(PARAMS, state)
    u, _ = ftx.update(gradxform.fused.ravel(_grads(0, PARAMS), state), state, flat, **{CONTEXT_KEY: ctx})
    assert isinstance(u, FlatTree)
    assert ctx.lr is None and ctx.segments is None  # the layout goes to the chain in a context of its own; the caller's is not written
    ref, _ = tx.update(_grads(0, PARAMS), tx.init(PARAMS), PARAMS)
    _assert_close(ref, u.unravel())


def _count_eqns(jaxpr) -> int:
    n = 0
    for eqn in jaxpr.eqns:
        n += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            n += _count_eqns(sub)
    return n


@pytest.mark.parametrize("name", ["mindspore.lamb", "mxnet.lbsgd(lars)", "mindspore.lars(momentum)"])
def test_traced_ops_do_not_grow_with_the_leaves_of_a_group(name):
    def ops(num_leaves):
        # one group; sizes vary, and the buffer has whole and straddling blocks
        params = {f"w{i:03d}": jnp.full((3 + i % 5, 7), 0.1 * (i + 1), jnp.float32) for i in range(num_leaves)}
        ftx = gradxform.fused(CHAINS[name](), strict=True)
        state = ftx.init(params)
        assert len(state.layout.groups) == 1
        flat = gradxform.fused.ravel(params, state)
        return _count_eqns(jax.make_jaxpr(ftx.update)(flat, state, flat).jaxpr)

    assert ops(12) == ops(60)


def test_adafactor_says_why_it_keeps_the_per_leaf_path():
    tx = gradxform.create("mindspore.adafactor", learning_rate=0.05, relative_step=False, scale_parameter=False)
    (reason,) = gradxform.fused.why_not_fused(tx)
    assert "AdaFactor" in reason and "factored second moments" in reason
    assert gradxform.fused.bit_exact(tx)


def test_bit_exact_is_a_property_of_the_chain():
    assert gradxform.fused.bit_exact(gradxform.create("mxnet.lbsgd", warmup_strategy="linear"))
    assert gradxform.fused.bit_exact(gradxform.create("mxnet.adam"))
    assert not gradxform.fused.bit_exact(gradxform.chain(pieces.track_step(0.1), pieces.clip_by_global_norm(1.0),
                                                         pieces.scale_by_lr()))
    assert not gradxform.fused.bit_exact(gradxform.chain(pieces.track_step(0.1), pieces.provide_weight_decay(0.0),
                                                         _lamb_direction(0.9, 0.999, 1e-6), pieces.scale_by_lr()))
    assert not gradxform.fused.bit_exact(gradxform.chain(pieces.track_step(0.1),
                                                         _nadam_direction(0.9, 0.999, 1e-8, 0.004)))


# -- the helpers themselves ---------------------------------------------------------

SIZES = [(5,), (4, 4, 4), (12, 4, 0, 1, 10, 2), (1, 1), (0, 3), (1000, 1, 0, 300, 256, 512, 7),
         (256, 256, 1), (70000, 3, 257, 1, 999),
         # a boundary at the last element of a row (255): that row straddles two leaves
         (255, 257, 3),
         # 255 empty leaves inside one row: an element 256 leaves past its row's first (uint16 offsets)
         (1,) + (0,) * 255 + (300,),
         (100, 412),  # whole rows only (512 elements): no partial last row
         # 65,535 empty leaves inside one row: an element 65,536 leaves past its row's first (int32
         # offsets: uint16 would wrap it to 0)
         (1,) + (0,) * 65535 + (300,)]


@pytest.mark.parametrize("sizes", SIZES)
def test_segment_sums_and_spread(sizes):
    rng = np.random.default_rng(len(sizes))
    n = sum(sizes)
    x = rng.standard_normal(n).astype(np.float32)
    ref = np.asarray([np.sum(np.square(p.astype(np.float64))) for p in np.split(x, np.cumsum(sizes)[:-1])])
    got = np.asarray(jax.jit(lambda x: seg._segment_sums(jnp.square(x), sizes))(x))
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    # spreading is a gather: exact
    values = np.arange(1, len(sizes) + 1, dtype=np.float32)
    spread = np.asarray(jax.jit(lambda v: seg._spread(v, sizes))(values))
    np.testing.assert_array_equal(spread, np.repeat(values, sizes))


def test_leaf_helpers_on_both_paths():
    tree = {"a": jnp.ones((2, 3)), "bias": jnp.full((4,), 2.0), "c": jnp.asarray(3.0)}
    per_leaf = seg.leaf_sq_norm(tree, {})
    assert {k: float(v) for k, v in per_leaf.items()} == {"a": 6.0, "bias": 16.0, "c": 9.0}
    assert seg.leaf_flags(tree, {}, lambda n: "bias" not in n) == {"a": True, "bias": False, "c": True}
    segs = (seg.Segments((0, 1, 2), ((2, 3), (4,), ()), ("a", "bias", "c")),)
    ctx = {CONTEXT_KEY: StepContext.on_buffers(segs)}
    buf = (jnp.concatenate([jnp.ones(6), jnp.full((4,), 2.0), jnp.asarray([3.0])]),)
    (norms,) = seg.leaf_sq_norm(buf, ctx)
    np.testing.assert_array_equal(norms, [6.0] * 6 + [16.0] * 4 + [9.0])
    (flags,) = seg.leaf_flags(buf, ctx, lambda n: "bias" not in n)
    np.testing.assert_array_equal(flags, [True] * 6 + [False] * 4 + [True])
    (same,) = seg.leaf_flags(buf, ctx, lambda n: True)
    assert same is True  # agreeing leaves stay a static bool
    # Segments.spread/reduce (docstrings): per element of each leaf; 0-d for a buffer of one leaf
    two = seg.Segments((0, 1), ((2,), (3,)), ("a", "b"))
    np.testing.assert_array_equal(two.spread(jnp.asarray([1.0, 2.0])), [1.0, 1.0, 2.0, 2.0, 2.0])
    np.testing.assert_array_equal(two.reduce(jnp.arange(5.0)), [1.0, 1.0, 9.0, 9.0, 9.0])
    one = seg.Segments((0,), ((3,),), ("a",))
    assert one.spread(jnp.asarray([5.0])).shape == () and float(one.reduce(jnp.arange(3.0))) == 3.0


def test_row_sums_count_rows_exactly():
    shapes = ((3, 4), (5,), (), (2, 3, 2), (300, 2), (1,))
    segs = seg.Segments(tuple(range(len(shapes))), shapes, tuple("abcdef"))
    rng = np.random.default_rng(0)
    leaves = [(rng.random(s) < 0.3).astype(np.int32) for s in shapes]
    flat = np.concatenate([x.reshape(-1) for x in leaves])
    got = np.asarray(jax.jit(segs.row_sums)(jnp.asarray(flat)))
    want = np.concatenate([
        np.repeat(x.reshape(x.shape[0], -1).sum(1), int(np.prod(x.shape[1:]))) if x.ndim >= 2 else x.reshape(-1)
        for x in leaves])
    np.testing.assert_array_equal(got, want)
    # every leaf 2-D with rows of 2: no row is a single element, so no element is its own row sum
    two = seg.Segments((0, 1), ((3, 2), (4, 2)), ("a", "b"))
    x = np.arange(14, dtype=np.int32) % 3
    np.testing.assert_array_equal(jax.jit(two.row_sums)(jnp.asarray(x)), np.repeat(x.reshape(7, 2).sum(1), 2))


def test_present_rows_a_row_with_any_nonzero_on_both_paths():
    """`present_rows` (docstring; MXNet's row_sparse keeps a row with any nonzero): per leaf one
    flag per row (first axis), each element of a 1-D leaf its own row; under `fused` the same flag
    at every element of the row. Rows with some zeros and some nonzeros are present."""
    tree = {"m": jnp.asarray([[0.0, 1.0], [0.0, 0.0], [2.0, 3.0]]),
            "t": jnp.asarray([[[0.0, 0.0], [0.0, 4.0]], [[0.0, 0.0], [0.0, 0.0]]]),
            "v": jnp.asarray([0.0, 5.0])}
    rows = jax.jit(lambda t: seg.present_rows(t, {}))(tree)  # one compile per path, not one per operation
    want = {"m": [True, False, True], "t": [True, False], "v": [False, True]}
    for k in want:
        np.testing.assert_array_equal(rows[k], want[k], err_msg=k)
    segs = (seg.Segments((0, 1, 2), ((3, 2), (2, 2, 2), (2,)), ("m", "t", "v")),)
    ctx = {CONTEXT_KEY: StepContext.on_buffers(segs)}
    flat = jax.jit(lambda b: seg.present_rows((b,), ctx)[0])(jnp.concatenate([x.reshape(-1) for x in tree.values()]))
    np.testing.assert_array_equal(flat, [1, 1, 0, 0, 1, 1] + [1] * 4 + [0] * 4 + [0, 1])


def test_segments_are_static_values_and_shard_of_pads_with_the_last_element():
    """`Segments` and `ShardedSegments` describe a layout (static): immutable and hashable, equal
    layouts equal. ``chunk`` is each device's ceil(length / num_shards) elements; `shard_of` gives
    device i elements [i * chunk, (i + 1) * chunk), the last shard padded with copies of the last
    element (its docstring), and returns a 0-d value (a one-leaf buffer's spread or sum) and an empty
    buffer as they are."""
    a = seg.Segments((0, 1), ((7, 5), (3,)), ("w", "b"))
    b = seg.Segments((0, 1), ((7, 5), (3,)), ("w", "b"))
    sharded = seg.ShardedSegments(a, "data", 4)
    assert hash(a) == hash(b) and a == b and hash(sharded) == hash(seg.ShardedSegments(b, "data", 4))
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.names = ("x", "y")
    with pytest.raises(dataclasses.FrozenInstanceError):
        sharded.num_shards = 2
    assert (sharded.length, sharded.chunk) == (38, 10)  # 35 + 3 elements over 4 devices: ceil 9.5
    assert seg.ShardedSegments(a, "data", 2).chunk == 19
    assert float(seg.shard_of(jnp.asarray(2.5), "data", 4)) == 2.5
    assert seg.shard_of(jnp.zeros((0,)), "data", 4).shape == (0,)
    for n, want in ((10, [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9, 9, 9]]), (8, [[0, 1], [2, 3], [4, 5], [6, 7]])):
        x = jnp.arange(n, dtype=jnp.float32)
        shards = jax.jit(jax.vmap(lambda i: seg.shard_of(x, "data", 4), axis_name="data"))(jnp.arange(4))
        np.testing.assert_array_equal(shards, want)


def _norm_scaling(reductions):
    # a piece that divides each leaf by its norm: a per-leaf reduction (leaf_sum)
    def init(params):
        return ()

    @fusable(bit_exact=False, reductions=reductions)
    def update(updates, state, params=None, **extra_args):
        norms = seg.leaf_sq_norm(updates, extra_args)
        return jax.tree.map(lambda u, n: u / jnp.sqrt(n + 1.0), updates, norms), state

    return transformation(init, update)


def test_a_reduction_the_piece_did_not_declare_is_refused_on_buffers():
    # the layout supplies only the reductions a piece declares (Fusion.reductions)
    g = jax.tree.map(lambda p: 0.5 * jnp.cos(p), PARAMS)
    declared = gradxform.chain(_norm_scaling(("leaf_sum",)))
    undeclared = gradxform.chain(_norm_scaling(()))
    ref, _ = undeclared.update(g, undeclared.init(PARAMS), PARAMS)  # per leaf: nothing to supply
    got, _ = gradxform.fused(declared).update(g, gradxform.fused(declared).init(PARAMS), PARAMS)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    with pytest.raises(ValueError, match="per-leaf reduction 'leaf_sum' on flat buffers without declaring it"):
        gradxform.fused(undeclared).update(g, gradxform.fused(undeclared).init(PARAMS), PARAMS)
