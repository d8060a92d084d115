"""gradxform.fused: the flat multi-tensor path gives the per-leaf path's numbers.

Bit-exact (np.array_equal, NaN == NaN) for every registered optimizer: a fused
chain does per element the same float32 arithmetic with the same scalars as
the per-leaf chain, and a chain that cannot be fused keeps the per-leaf path.
The one stated tolerance is for a global norm (summed in another order).
"""
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import pieces

from cases import case as case_row, create as create_case, names as case_names
from gradxform._base import transformation
from gradxform._fused import FlatTree, FusedState
from gradxform._spec import spec_of

PARAMS = {
    "dense": {"kernel": jnp.linspace(-1.0, 1.0, 12, dtype=jnp.float32).reshape(3, 4),
              "bias": jnp.asarray([0.1, -0.2, 0.3, 0.05], jnp.float32)},
    "emb": jnp.linspace(0.5, -0.5, 10, dtype=jnp.float32).reshape(5, 2),
    "scale": jnp.asarray([1.5, -0.7], jnp.float32),
}


def _grads(k, params=PARAMS):
    # nonzero everywhere (Adamax divides by |g| history), different each step
    return jax.tree.map(lambda p: (0.3 * jnp.sin(3.0 * p + k) + 0.05 * (k + 1)).astype(p.dtype), params)


def _run(tx, params=PARAMS, steps=3, extra=None):
    step = jax.jit(lambda g, s, p: tx.update(g, s, p, **(extra or {})))
    state = tx.init(params)
    for k in range(steps):
        u, state = step(_grads(k, params), state, params)
        params = gradxform.apply_updates(params, u)
    return params, state


def _assert_same(a, b, rtol=0.0):
    for (path, x), y in zip(jax.tree_util.tree_flatten_with_path(a)[0], jax.tree.leaves(b)):
        x, y = np.asarray(x, np.float32), np.asarray(y, np.float32)
        if rtol == 0.0:
            assert np.array_equal(x, y, equal_nan=True), f"{jax.tree_util.keystr(path)}: {x} != {y}"
        else:
            np.testing.assert_allclose(x, y, rtol=rtol, atol=1e-7, err_msg=jax.tree_util.keystr(path))


@functools.lru_cache(maxsize=None)
def _both_paths(name):
    """The table row's optimizer and its per-leaf and fused runs (params, state): each compiled
    once for the two tests that compare them."""
    tx = create_case(name)  # the shared table's kwargs: momentum on, some weight decay
    return tx, _run(tx), _run(gradxform.fused(tx))


@pytest.mark.parametrize("name", case_names())
def test_every_registered_optimizer_matches_per_leaf(name):
    tx = create_case(name)
    ftx = gradxform.fused(tx)
    reasons = gradxform.fused.why_not_fused(tx)
    if reasons:  # kept on the per-leaf path: the very same transformation and state
        state = ftx.init(PARAMS)
        assert not isinstance(state, FusedState)
        assert jax.tree.structure(state) == jax.tree.structure(tx.init(PARAMS))
        return
    tx, (ref, _), (got, state) = _both_paths(name)
    assert isinstance(state, FusedState)
    # A chain that sums a norm (global, or per leaf as a segment sum) adds the
    # same float32 numbers in another order, and one that applies per-leaf
    # values per element (Nadam, lazy rows) may have XLA round a multiply-add
    # differently (FMA): about 1e-7 relative per step on these leaves, hence
    # 1e-6 (fused.bit_exact says which); every other chain is bit-exact.
    _assert_same(ref, got, rtol=0.0 if gradxform.fused.bit_exact(tx) else 1e-6)


def test_multipliers_make_groups_and_flat_tree_path_is_exact():
    tx = gradxform.create("adam", learning_rate=0.01, wd=0.01, lr_mult={"dense/*": 2.0},
                          wd_mult={"*bias": 0.0}, clip_gradient=0.2, rescale_grad=0.5)
    ftx = gradxform.fused(tx, strict=True)
    ref, _ = _run(tx)
    got, state = _run(ftx)
    _assert_same(ref, got)
    # dense/bias (lr 2, wd 0), dense/kernel (lr 2, wd 1), emb and scale (lr 1, wd 1)
    assert [len(g) for g in state.layout.groups] == [1, 1, 2]

    # the same run with params and grads owned as FlatTrees: no conversion in the step
    fstate = ftx.init(PARAMS)
    flat = gradxform.fused.ravel(PARAMS, fstate)
    step = jax.jit(lambda g, s, p: ftx.update(g, s, p))
    for k in range(3):
        u, fstate = step(gradxform.fused.ravel(_grads(k, flat.unravel()), fstate), fstate, flat)
        assert isinstance(u, FlatTree)
        flat = gradxform.apply_updates(flat, u)
    _assert_same(ref, flat.unravel())


def test_grad_through_unravel_returns_a_flat_tree():
    ftx = gradxform.fused(gradxform.create("sgd", momentum=0.9), strict=True)
    state = ftx.init(PARAMS)
    flat = gradxform.fused.ravel(PARAMS, state)
    loss = lambda f: sum(jnp.sum(x * x) for x in jax.tree.leaves(f.unravel()))  # noqa: E731
    g = jax.jit(jax.grad(loss))(flat)
    assert isinstance(g, FlatTree) and len(g.buffers) == 1
    _assert_same(jax.tree.map(lambda p: 2 * p, PARAMS), g.unravel())



def test_init_under_jit_gives_the_same_state_and_layout():
    # jax.jit(fused(tx).init) traces params: the groups come from a concrete probe
    tx = gradxform.create("adam", learning_rate=0.01, wd=1e-3, lr_mult={"dense/*": 2.0},
                          wd_mult={"*bias": 0.0})
    ftx = gradxform.fused(tx, strict=True)
    eager, jitted = ftx.init(PARAMS), jax.jit(ftx.init)(PARAMS)
    assert isinstance(jitted, FusedState) and jitted.layout == eager.layout
    assert [len(g) for g in eager.layout.groups] == [1, 1, 2]  # the multipliers split the buffers
    _assert_same(eager, jitted)

def test_low_precision_master_weights_group_by_dtype():
    params = dict(PARAMS, emb=PARAMS["emb"].astype(jnp.bfloat16), scale=PARAMS["scale"].astype(jnp.float16))
    tx = gradxform.create("sgd", momentum=0.9, wd=1e-3, multi_precision=True)
    ftx = gradxform.fused(tx, strict=True)
    ref, _ = _run(tx, params)
    got, state = _run(ftx, params)
    _assert_same(ref, got)
    assert sorted(len(g) for g in state.layout.groups) == [1, 1, 2]
    assert jax.tree.map(lambda x: x.dtype, got) == jax.tree.map(lambda x: x.dtype, params)


def test_read_lr_before_with_schedule_isolates_the_first_leaf():
    sched = gradxform.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=0.1)
    tx = gradxform.create("lbsgd", learning_rate=0.1, momentum=0.9, lr_scheduler=sched)
    ftx = gradxform.fused(tx, strict=True)
    ref, _ = _run(tx, steps=4)
    got, state = _run(ftx, steps=4)
    _assert_same(ref, got)
    assert state.layout.groups[0] == (0,)


def test_hyperparameters_stay_settable_without_retrace():
    ftx = gradxform.fused(gradxform.create("adam", learning_rate=0.01), strict=True)
    state = ftx.init(PARAMS)
    traces = []

    @jax.jit
    def step(g, s, p):
        traces.append(1)
        return ftx.update(g, s, p)

    _, state = step(_grads(0), state, PARAMS)
    state = gradxform.set_hyper(state, learning_rate=0.5, beta1=0.8)
    assert float(gradxform.get_hyper(state, "learning_rate")) == 0.5
    _, state = step(_grads(1), state, PARAMS)
    assert len(traces) == 1 and isinstance(state, FusedState)


def test_update_mask_constant_per_group():
    tx = gradxform.create("adam", lr_mult={"emb": 3.0})
    ftx = gradxform.fused(tx, strict=True)
    mask = jax.tree.map(lambda _: True, PARAMS)
    mask["emb"] = False
    ref, sref = _run(tx, extra={"update_mask": mask})
    got, sgot = _run(ftx, extra={"update_mask": mask})
    _assert_same(ref, got)


def test_global_norm_clip_within_tolerance():
    # the norm is summed over one buffer instead of leaf by leaf: float32
    # summation order only, so 1e-6 relative
    tx = gradxform.chain(pieces.track_step(0.1), pieces.clip_by_global_norm(0.5), pieces.trace(0.9),
                         pieces.scale_by_lr())
    ref, _ = _run(tx)
    got, state = _run(gradxform.fused(tx, strict=True))
    assert isinstance(state, FusedState)
    _assert_same(ref, got, rtol=1e-6)


def test_strict_names_the_piece_that_is_not_elementwise():
    with pytest.raises(ValueError, match="_langevin_noise"):
        gradxform.fused(gradxform.create("sgld"), strict=True)
    # the default keeps the per-leaf path and per-leaf state
    state = gradxform.fused(gradxform.create("sgld")).init(PARAMS)
    assert not isinstance(state, FusedState)


def test_ravel_checks_shapes():
    ftx = gradxform.fused(gradxform.create("sgd"), strict=True)
    state = ftx.init(PARAMS)
    bad = dict(PARAMS, scale=jnp.zeros(3))
    with pytest.raises(ValueError, match=r"\['scale'\].*shape \(3,\).*\(2,\)"):
        gradxform.fused.ravel(bad, state)


def _fusable_names():
    # the table says which fuse (test_table_says_which_optimizers_fuse checks it)
    return [n for n in case_names() if case_row(n).fuses]


@pytest.mark.parametrize("name", _fusable_names())
def test_state_round_trips_between_layouts(name):
    # unflatten_state gives exactly the per-leaf state of the same run, and
    # flatten_state gives back the fused state and layout
    tx, (_, per_leaf), (_, flat) = _both_paths(name)
    back = gradxform.fused.unflatten_state(tx, flat)
    assert jax.tree.structure(back) == jax.tree.structure(per_leaf)
    # the two runs differ in the last bits where fused.bit_exact says so (see above)
    _assert_same(per_leaf, back, rtol=0.0 if gradxform.fused.bit_exact(tx) else 1e-6)
    again = gradxform.fused.flatten_state(tx, back, PARAMS)
    assert again.layout == flat.layout
    _assert_same(flat, again)


# -- MindSpore and Paddle -----------------------------------------------------------

MINDSPORE_FUSED = ["mindspore.momentum", "mindspore.sgd", "mindspore.adam", "mindspore.adam_weight_decay",
                   "mindspore.adagrad", "mindspore.proximal_adagrad", "mindspore.ftrl", "mindspore.rmsprop"]


@pytest.mark.parametrize("name", MINDSPORE_FUSED)
def test_mindspore_elementwise_rules_take_the_fused_path(name):
    # a regression to the per-leaf path fails here, not silently in the shared test
    tx = create_case(name)
    assert gradxform.fused.why_not_fused(tx) == []
    ref, _ = _run(tx)
    got, state = _run(gradxform.fused(tx, strict=True))
    assert isinstance(state, FusedState)
    _assert_same(ref, got)


def test_adam_offload_and_asgd_keep_the_per_leaf_path_with_a_reason():
    assert any("offloaded_moments" in r for r in gradxform.fused.why_not_fused(create_case("mindspore.adam_offload")))
    for n in (1, 3):
        (reason,) = gradxform.fused.why_not_fused(create_case("paddle.asgd", batch_num=n))
        assert f"batch_num={n}" in reason and "ring" in reason


# sorted leaf order: bn/beta 0, bn/gamma 1, conv/kernel 2, dense/bias 3, dense/kernel 4, emb/table 5
MS_PARAMS = {
    "bn": {"beta": jnp.asarray([0.1, -0.3], jnp.float32), "gamma": jnp.asarray([1.2, 0.8], jnp.float32)},
    "conv": {"kernel": jnp.linspace(-0.6, 0.6, 24, dtype=jnp.float32).reshape(2, 3, 4)},
    "dense": PARAMS["dense"],
    "emb": {"table": PARAMS["emb"]},
}


def _ms_groups():
    return [{"params": "dense/*", "weight_decay": 0.01, "lr": 0.05},
            {"params": ["conv/kernel"], "lr": [0.1, 0.05, 0.02]},  # one value per update, then the last
            {"params": lambda n: n.startswith("bn/"), "weight_decay": 0.0,
             "lr": gradxform.schedules.ExponentialDecayLR(0.2, 0.5, 1)},
            {"order_params": ["dense/kernel", "bn/gamma", "conv/kernel", "dense/bias", "bn/beta"]}]


@pytest.mark.parametrize("name,kwargs", [
    ("mindspore.momentum", dict(learning_rate=0.1, momentum=0.9, weight_decay=0.02, loss_scale=4.0)),
    ("mindspore.adam", dict(learning_rate=[0.05, 0.04, 0.03], weight_decay=0.02, use_nesterov=True)),
    ("mindspore.adam_weight_decay", dict(learning_rate=0.05, weight_decay=0.02)),
    ("mindspore.rmsprop", dict(learning_rate=0.01, momentum=0.5, centered=True, weight_decay=0.02)),
])
def test_mindspore_parameter_groups_split_buffers_and_stay_exact(name, kwargs):
    tx = gradxform.create(name, groups=_ms_groups(), **kwargs)
    ref, ref_state = _run(tx, MS_PARAMS, steps=4)
    got, state = _run(gradxform.fused(tx, strict=True), MS_PARAMS, steps=4)
    _assert_same(ref, got)
    _assert_same(ref_state, gradxform.fused.unflatten_state(tx, state))
    # one buffer per MindSpore group; emb/table is in none: its own buffer, frozen
    assert state.layout.groups == ((0, 1), (2,), (3, 4), (5,))
    assert np.array_equal(got["emb"]["table"], MS_PARAMS["emb"]["table"])


def test_mindspore_default_decay_filter_splits_beta_and_gamma():
    tx = gradxform.create("mindspore.momentum", learning_rate=0.1, momentum=0.9, weight_decay=0.05)
    ref, _ = _run(tx, MS_PARAMS)
    got, state = _run(gradxform.fused(tx, strict=True), MS_PARAMS)
    _assert_same(ref, got)
    assert state.layout.groups == ((0, 1), (2, 3, 4, 5))  # bn/beta and bn/gamma are not decayed


def test_mindspore_group_hyperparameters_settable_on_the_fused_state():
    tx = gradxform.create("mindspore.momentum", learning_rate=0.1, momentum=0.9, groups=_ms_groups())
    ftx = gradxform.fused(tx, strict=True)
    _, state = _run(ftx, MS_PARAMS, steps=1)
    _, ref_state = _run(tx, MS_PARAMS, steps=1)
    step = jax.jit(lambda g, s, p: ftx.update(g, s, p))
    ref_step = jax.jit(lambda g, s, p: tx.update(g, s, p))
    change = dict(learning_rate=0.0, weight_decay=0.5)
    u, _ = step(_grads(1, MS_PARAMS), gradxform.set_hyper(state, group=0, **change), MS_PARAMS)
    ref_u, _ = ref_step(_grads(1, MS_PARAMS), gradxform.set_hyper(ref_state, group=0, **change), MS_PARAMS)
    _assert_same(ref_u, u)
    assert not np.any(np.asarray(u["dense"]["kernel"]))


def test_paddle_asgd_with_regularizers_and_window_matches_per_leaf():
    # ASGD itself stays per leaf (see the test above): fused(tx) must still
    # give its exact numbers over more steps than the window
    for kwargs in (dict(batch_num=3, weight_decay=1e-3),
                   dict(batch_num=2, weight_decay=gradxform.paddle.l1_decay(1e-3),
                        grad_clip=gradxform.paddle.clip_grad_by_value(0.2, -0.1)),
                   dict(batch_num=1, weight_decay=gradxform.paddle.l2_decay(1e-3))):
        tx = gradxform.create("paddle.asgd", learning_rate=0.05, **kwargs)
        ref, _ = _run(tx, steps=7)
        got, state = _run(gradxform.fused(tx), steps=7)
        assert not isinstance(state, FusedState)
        _assert_same(ref, got)


def test_paddle_regularizers_clips_and_plateau_fuse_in_a_chain():
    P = gradxform.paddle
    body = (P.l1_decay(1e-3), P.l2_decay(2e-3), pieces.trace(0.9), pieces.scale_by_lr())
    exact = [(P.clip_grad_by_value(0.2, -0.1),), (P.clip_grad_by_value(0.15),),
             ()]
    for extra in exact:
        # the plateau's rate piece takes track_step's place (one writer of lr)
        plateau = gradxform.schedules.PaddleReduceOnPlateau(0.1, patience=1)
        rate = plateau.piece() if not extra else pieces.track_step(0.1)
        tx = gradxform.chain(rate, *extra, *body)
        args = {"loss": jnp.float32(1.0)}
        ref, _ = _run(tx, steps=4, extra=args)
        got, state = _run(gradxform.fused(tx, strict=True), steps=4, extra=args)
        assert isinstance(state, FusedState)
        _assert_same(ref, got)
    # the global norm is summed in another order: the stated tolerance
    tx = gradxform.chain(pieces.track_step(0.1), P.clip_grad_by_global_norm(0.3), *body)
    ref, _ = _run(tx)
    got, _ = _run(gradxform.fused(tx, strict=True))
    _assert_same(ref, got, rtol=1e-6)
    with pytest.raises(ValueError, match="norm per parameter"):
        gradxform.fused(gradxform.chain(pieces.track_step(0.1), P.clip_grad_by_norm(0.3), *body), strict=True)


@pytest.mark.parametrize("name,kwargs", [
    ("mindspore.adam", dict(use_nesterov=True)),
    ("mindspore.adam", dict(use_amsgrad=True, loss_scale=8.0)),
    ("mindspore.adam", dict(learning_rate=gradxform.schedules.ExponentialDecayLR(0.05, 0.9, 1))),
    ("mindspore.rmsprop", dict(centered=True, momentum=0.5)),
    ("mindspore.rmsprop", dict(centered=False, momentum=0.5, loss_scale=2.0)),
    ("mindspore.sgd", dict(momentum=0.9, dampening=0.1, nesterov=False)),
    ("mindspore.sgd", dict(momentum=0.0, nesterov=False)),
    ("mindspore.momentum", dict(use_nesterov=True)),
    ("mindspore.adagrad", dict(update_slots=False)),
    ("mindspore.proximal_adagrad", dict(l1=1e-2, l2=1e-2)),
    ("mindspore.ftrl", dict(l1=1e-2, l2=1e-2, lr_power=-0.7)),
])
def test_mindspore_variants_bit_exact(name, kwargs):
    tx = create_case(name, **kwargs)
    ref, ref_state = _run(tx, MS_PARAMS, steps=4)
    got, state = _run(gradxform.fused(tx, strict=True), MS_PARAMS, steps=4)
    _assert_same(ref, got)
    _assert_same(ref_state, gradxform.fused.unflatten_state(tx, state))


def test_state_round_trip_with_master_weights_placeholders():
    # master weights keep a (0,) placeholder for float32 leaves: an empty group buffer
    params = dict(PARAMS, emb=PARAMS["emb"].astype(jnp.bfloat16))
    tx = gradxform.create("adam", learning_rate=0.01, multi_precision=True)
    _, per_leaf = _run(tx, params)
    _, flat = _run(gradxform.fused(tx, strict=True), params)
    back = gradxform.fused.unflatten_state(tx, flat)
    assert jax.tree.structure(back) == jax.tree.structure(per_leaf)
    assert [np.shape(x) for x in jax.tree.leaves(back)] == [np.shape(x) for x in jax.tree.leaves(per_leaf)]
    _assert_same(per_leaf, back)


# -- declarations: a piece says where it is defined whether it fuses ------------------

def _updates_of(tx) -> list:
    """Every update function `fused` inspects in ``tx`` (the transformations
    wrappers declare they run included)."""
    found, todo = [], [tx]
    while todo:
        t = todo.pop()
        if any(t.update is f for f in found):
            continue
        found.append(t.update)
        spec = spec_of(t)
        todo.extend(spec.inner if spec is not None else ())
    return found


@pytest.mark.parametrize("name", case_names())
def test_table_says_which_optimizers_fuse(name):
    # tests/cases.py states, per optimizer, whether fused(tx) takes the flat path and
    # whether it is bit-exact: a piece that loses (or gains) its declaration fails here
    row = case_row(name)
    assert row.fuses is not None, f"{name}: say in its tests/cases.py row whether it fuses (fuses=...)"
    tx = create_case(name)
    reasons = gradxform.fused.why_not_fused(tx)
    assert (not reasons) == row.fuses, reasons or "it fuses"
    assert gradxform.fused.bit_exact(tx) == row.bit_exact


@pytest.mark.parametrize("name", case_names())
def test_renamed_pieces_keep_their_fusion(name, monkeypatch):
    # the declaration travels with the function object: other names, qualnames and
    # modules for every update function in the chain change nothing
    tx = create_case(name)
    before = gradxform.fused(tx).init(PARAMS)
    for i, fn in enumerate(_updates_of(tx)):
        assert hasattr(fn, "__qualname__"), fn
        monkeypatch.setattr(fn, "__name__", f"renamed_{i}")
        monkeypatch.setattr(fn, "__qualname__", f"renamed_{i}.<locals>.update")
        monkeypatch.setattr(fn, "__module__", "somewhere_else")
    assert (not gradxform.fused.why_not_fused(tx)) == case_row(name).fuses
    assert gradxform.fused.bit_exact(tx) == case_row(name).bit_exact
    after = gradxform.fused(tx).init(PARAMS)
    assert isinstance(after, FusedState) == isinstance(before, FusedState)
    if isinstance(after, FusedState):
        assert after.layout == before.layout


def _renamed_copy(module_name: str, old: str, new: str, monkeypatch):
    """A copy of a gradxform module, executed from its source with ``old`` renamed
    to ``new`` everywhere (as an edit of the file would)."""
    import importlib
    import inspect
    import sys
    import types
    original = importlib.import_module(module_name)
    source = inspect.getsource(original)
    assert f"def {old}(" in source
    copy = types.ModuleType(module_name + "_renamed")
    copy.__package__, copy.__file__ = original.__package__, original.__file__
    monkeypatch.setitem(sys.modules, copy.__name__, copy)
    exec(compile(source.replace(old, new), original.__file__, "exec"), copy.__dict__)
    return copy


@pytest.mark.parametrize("module,old,factory,name", [
    ("gradxform.mxnet._adaptive", "_ftrl_step", "ftrl", "mxnet.ftrl"),
    ("gradxform.mindspore._adaptive", "_ftrl_step", "ftrl", "mindspore.ftrl"),
    ("gradxform.mxnet._momentum", "_lbsgd_accumulate", "lbsgd", "mxnet.lbsgd"),
    ("gradxform.mindspore._adam", "_lamb_direction", "lamb", "mindspore.lamb"),
])
def test_a_renamed_copy_of_a_piece_still_fuses(module, old, factory, name, monkeypatch):
    # the issue: renaming _ftrl_step in a copy took mxnet.ftrl off the fused path
    copy = _renamed_copy(module, old, old + "_v2", monkeypatch)
    # the copy's factory stands in for the registered one (its owner name comes from registration)
    monkeypatch.setitem(gradxform._registry._NAMES, getattr(copy, factory), name)
    row = case_row(name)
    tx = getattr(copy, factory)(**row.kwargs)
    assert any(f"{old}_v2.<locals>" in fn.__qualname__ for fn in _updates_of(tx))
    assert gradxform.fused.why_not_fused(tx) == []
    assert gradxform.fused.bit_exact(tx) == row.bit_exact
    ref, _ = _run(tx)
    got, state = _run(gradxform.fused(tx, strict=True))
    assert isinstance(state, FusedState)
    _assert_same(ref, got, rtol=0.0 if row.bit_exact else 1e-6)


class _LeafScaleState(NamedTuple):
    factor: Any  # a float32 scalar per leaf
    per_leaf_fields = ("factor",)


def _leaf_scale(factors):
    """A user piece: multiplies each leaf's update by its own factor."""
    def init(params):
        return _LeafScaleState(jax.tree.map(lambda p, f: jnp.asarray(f, jnp.float32), params, factors))

    def update(updates, state, params=None, **extra_args):
        return jax.tree.map(lambda u, f: u * f.astype(u.dtype), updates, state.factor), state

    return transformation(init, update)


def test_user_piece_fuses_once_declared():
    factors = {"dense": {"bias": 2.0, "kernel": 2.0}, "emb": 0.5, "scale": 2.0}
    piece = _leaf_scale(factors)
    tx = gradxform.chain(pieces.track_step(0.1), pieces.trace(0.9), piece, pieces.scale_by_lr())
    (reason,) = gradxform.fused.why_not_fused(tx)
    assert "_leaf_scale.<locals>.update is not declared elementwise" in reason
    assert gradxform.fused.fusable(piece) is piece  # marks piece.update
    assert gradxform.fused.why_not_fused(tx) == [] and gradxform.fused.bit_exact(tx)
    ref, _ = _run(tx)
    got, state = _run(gradxform.fused(tx, strict=True))
    _assert_same(ref, got)
    # leaves are grouped by the declared per-leaf field: dense/bias, dense/kernel, scale | emb
    assert state.layout.groups == ((0, 1, 3), (2,))
    with pytest.raises(TypeError, match="update function"):
        gradxform.fused.fusable("my_module:my_piece.<locals>.update")


def test_not_fusable_names_its_reason():
    def init(params):
        return ()

    k = 3

    @gradxform.fused.not_fusable(f"needs the whole tree at once (k={k})")
    def update(updates, state, params=None, **extra_args):
        return jax.tree.map(lambda u: u * k, updates), state

    tx = gradxform.chain(pieces.track_step(0.1), transformation(init, update), pieces.scale_by_lr())
    assert gradxform.fused.why_not_fused(tx) == ["needs the whole tree at once (k=3)"]
    with pytest.raises(ValueError, match="whole tree"):
        gradxform.fused(tx, strict=True)


def test_fed_trees_a_layout_packing_large_leaves_refuses_and_names_the_fast_paths():
    """Fed ordinary trees, a layout packing large leaves would concatenate them and slice them back
    every step (712 bytes a parameter on ResNet-50's shapes against 48 per leaf,
    benchmarks/bench_bytes.py --shapes): the update refuses at once, names the paths that avoid it,
    and leaves the state as it was; each of those paths gives the per-leaf numbers."""
    import warnings
    from gradxform._fused import TREE_PACK_LIMIT
    big = TREE_PACK_LIMIT + 1
    params = {"k": jnp.ones((big,)), "b": jnp.ones((3,))}
    grads = jax.tree.map(lambda x: 0.1 * x, params)
    tx = gradxform.create("adam", learning_rate=0.1)
    want, _ = tx.update(grads, tx.init(params), params)
    ftx = gradxform.fused(tx)
    state = ftx.init(params)
    before = jax.tree.map(np.array, state)
    for update in (ftx.update, jax.jit(ftx.update)):
        with pytest.raises(ValueError, match=rf"packs leaves of up to {big} elements.*"
                                             r"gradxform\.fused\.ravel\(params, state\).*"
                                             r"max_leaf_size=1024.*use tx itself.*Nothing was updated"):
            update(grads, state, params)
    jax.tree.map(np.testing.assert_array_equal, before, state)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        small_leaves_only = gradxform.fused(tx, max_leaf_size=1024)  # the large leaf is a buffer of its own
        got, _ = small_leaves_only.update(grads, small_leaves_only.init(params), params)
        _assert_same(want, got)
        flat, _ = ftx.update(gradxform.fused.ravel(grads, state), state, gradxform.fused.ravel(params, state))
        _assert_same(want, flat.unravel())  # flat buffers: nothing to concatenate
        small = {"a": jnp.ones((TREE_PACK_LIMIT,)), "b": jnp.ones((3,))}
        at_the_limit = gradxform.fused(tx)
        got, _ = at_the_limit.update(small, at_the_limit.init(small), small)
        _assert_same(tx.update(small, tx.init(small), small)[0], got)


def test_inside_an_nnx_optimizer_the_fused_step_is_the_per_leaf_step():
    """``nnx.Optimizer`` calls ``init`` on Variables and ``update`` on their arrays: the layout is
    made for the arrays (it raised "Custom node type mismatch" at the first update before), so the
    fused step trains as the per-leaf ``tx`` does, bit for bit, and ``set_learning_rate`` reaches it;
    a layout packing a leaf of 8,000 elements refuses the trees nnx feeds, naming ``max_leaf_size``."""
    nnx = pytest.importorskip("flax.nnx")
    tx = gradxform.create("adam", learning_rate=0.01, wd=1e-3)

    def train(opt_tx, din, dout):
        model = nnx.Linear(din, dout, rngs=nnx.Rngs(0))
        opt = nnx.Optimizer(model, opt_tx, wrt=nnx.Param)
        x = jnp.linspace(-1.0, 1.0, 4 * din).reshape(4, din)

        @nnx.jit
        def step(model, opt):
            grads = nnx.grad(lambda m: jnp.mean(jnp.square(m(x) - 0.5)))(model)
            opt.update(model, grads)

        for k in range(3):
            if k == 2:
                gradxform.set_learning_rate(opt.opt_state, 0.005)
            step(model, opt)
        return model, opt

    for din, dout, limit in ((10, 8, None), (100, 80, 1024)):
        fused_model, opt = train(gradxform.fused(tx, max_leaf_size=limit), din, dout)
        assert isinstance(nnx.as_pure(opt.opt_state), FusedState)
        plain_model, _ = train(tx, din, dout)
        _assert_same(nnx.as_pure(nnx.state(plain_model, nnx.Param)), nnx.as_pure(nnx.state(fused_model, nnx.Param)))
        assert float(gradxform.get_learning_rate(opt.opt_state)) == np.float32(0.005)
        params = nnx.state(fused_model, nnx.Param)  # Variables: ravel takes their arrays too
        flat = gradxform.fused.ravel(params, nnx.as_pure(opt.opt_state))
        _assert_same(nnx.as_pure(params), flat.unravel())
    with pytest.raises(ValueError, match=r"packs leaves of up to 8000 elements.*max_leaf_size=1024"):
        train(gradxform.fused(tx), 100, 80)


def test_variables_are_unwrapped_and_other_structures_still_refused():
    """`without_variables` replaces every Variable, beside plain arrays too; `Layout.matching` adopts a
    structure that differs only by Variables, never one with other keys (same shapes or not)."""
    nnx = pytest.importorskip("flax.nnx")
    from gradxform._tree import without_variables
    mixed = {"a": nnx.Param(jnp.ones((2,))), "b": jnp.zeros((3,))}
    assert jax.tree.structure(without_variables(mixed)) == jax.tree.structure({"a": 0, "b": 0})
    params = {"a": jnp.ones((2,)), "b": jnp.ones((2,))}
    ftx = gradxform.fused(gradxform.create("adam", learning_rate=0.1))
    state = ftx.init(params)
    renamed = {"a": jnp.ones((2,)), "c": jnp.ones((2,))}  # the same shapes under another key
    with pytest.raises(ValueError):
        ftx.update(renamed, state, params)


def test_a_trainer_on_nnx_variables_keeps_them_in_the_fused_layout():
    """The `Trainer` keeps the Variables of ``nnx.state(model, nnx.Param)`` (the structure it was
    given), where ``nnx.Optimizer`` feeds their arrays: the fused layout serves both, and the fused
    Trainer steps as the per-leaf one, bit for bit."""
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Linear(10, 8, rngs=nnx.Rngs(0))
    x = jnp.linspace(-1.0, 1.0, 40).reshape(4, 10)

    def loss_fn(params, batch):
        return jnp.mean(jnp.square(nnx.merge(nnx.graphdef(model), params)(batch) - 0.5))

    trained = {}
    for fused in (True, False):
        t = gradxform.Trainer(nnx.state(model, nnx.Param), "adam", {"learning_rate": 0.01}, fused=fused)
        assert t.fused == fused
        t.compile_step(loss_fn)(x, 4)
        t.step(t.grads(loss_fn, x), 4)
        assert jax.tree.structure(t.params) == jax.tree.structure(nnx.state(model, nnx.Param))
        trained[fused] = t.params
    _assert_same(trained[False], trained[True])
