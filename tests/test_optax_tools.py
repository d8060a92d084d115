"""optax's tree helpers and wrappers around gradxform optimizers (issue 25 item 5).

* ``optax.tree_utils.tree_get(state, 'count')`` is the update count
  (`StepState.count`, MXNet's ``num_update``) for every registered optimizer,
  and ``tree_set`` of the count or the learning rate, as the Python numbers
  it stores, is what the next update uses, under jit: bit for bit the update
  of the same values written as typed arrays, and the state keeps init's
  dtypes (a ``lax.scan`` carry keeps its type); a value out of its range or
  an array of another dtype is refused by the update, naming the slot.
* ``optax.contrib.sam`` (whose state selection ``c * a + (1 - c) * b``
  turned bool flags into int32), ``lookahead``, ``schedule_free``,
  ``MultiSteps``, ``masked`` and ``multi_transform`` around gradxform
  optimizers give the numbers of the same wrapper around the equivalent optax
  rule (Paddle/MindSpore momentum is optax.sgd's arithmetic: v = mu * v + g,
  w -= lr * v), or of a NumPy transcription of MXNet Adam
  (tests/mxnet_reference.py), all inside ``jax.lax.scan``.

Tolerances: float32 both sides; rtol 1e-6 where the two rules do the same
float32 operations (a different association at most), 1e-5 against the
NumPy reference (MXNet's bias correction is float64 on the host there).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from optax import tree_utils as otu

import gradxform as gx
from gradxform._state_paths import map_states
from gradxform.pieces.internal import StepState
from tests import cases, quick_compile
from tests.mxnet_reference import Reference

PARAMS = {"b": jnp.asarray([0.5, -1.0, 2.0], jnp.float32), "w": jnp.asarray([[1.0, -2.0], [0.25, 3.0]], jnp.float32)}
TARGET = jax.tree.map(lambda p: 0.5 * p - 0.25, PARAMS)
GRADS = jax.tree.map(lambda p: jnp.sin(3.0 * p) + 0.2, PARAMS)
RTOL_SAME, RTOL_REF = 1e-6, 1e-5


def grad_of(params):
    """The gradient of 0.5 * |p - TARGET|^2 (so wrappers that evaluate it at other points see other values)."""
    return jax.tree.map(lambda p, t: p - t, params, TARGET)


def avals(tree):
    return jax.tree.map(lambda x: (jnp.shape(x), jnp.result_type(x)), tree)


@pytest.mark.parametrize("name", cases.names())
def test_tree_get_count_and_tree_set_count_and_learning_rate(name):
    tx = cases.create(name)
    state = tx.init(PARAMS)
    assert int(otu.tree_get(state, "count")) == 0
    lr = float(otu.tree_get(state, "learning_rate")) / 2
    py = otu.tree_set(state, count=5, learning_rate=lr)  # Python numbers, as tree_set stores them
    assert isinstance(otu.tree_get(py, "count"), int)
    typed = map_states(lambda _, n: n._replace(count=jnp.asarray(5, jnp.int32)),
                       gx.set_hyper(state, learning_rate=lr), StepState)

    @quick_compile.jit  # both states stepped by one program
    def both(a, b):
        return tx.update(GRADS, a, PARAMS), tx.update(GRADS, b, PARAMS)

    (u_py, s_py), (u_typed, s_typed) = both(py, typed)
    jax.tree.map(np.testing.assert_array_equal, (u_py, s_py), (u_typed, s_typed))
    assert int(otu.tree_get(s_py, "count")) == 6
    assert float(otu.tree_get(s_py, "learning_rate")) == np.float32(lr)
    assert avals(s_py) == avals(state)  # init's dtypes again: a scan carry keeps its type


def test_tree_set_count_is_the_update_number_mxnet_counts():
    """MXNet Adam's bias correction at update 6 after ``tree_set(count=5)``,
    and the halved learning rate, against the NumPy transcription started at
    ``begin_num_update=5``; eager and jitted alike."""
    tx = gx.create("mxnet.adam", learning_rate=0.05, wd=1e-3)
    state = otu.tree_set(tx.init(PARAMS), count=5, learning_rate=0.025)
    ref = Reference("adam", learning_rate=0.025, wd=1e-3, begin_num_update=5)
    want = ref.step([np.asarray(PARAMS[k]) for k in "bw"], [np.asarray(GRADS[k]) for k in "bw"])
    for update in (tx.update, jax.jit(tx.update)):
        u, _ = update(GRADS, state, PARAMS)
        got = optax.apply_updates(PARAMS, u)
        for k, w in zip("bw", want):
            np.testing.assert_allclose(got[k], w, rtol=RTOL_REF)
    fresh, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)  # the count changes the step (bias correction)
    assert not np.allclose(fresh["w"], u["w"], rtol=1e-3)


def test_tree_set_of_a_mistyped_array_or_a_value_out_of_range_names_the_slot():
    """tree_set checks nothing: the update does, before any arithmetic (an
    out-of-range Python number eagerly; inside jit it is traced)."""
    tx = gx.create("mxnet.adam", learning_rate=0.05)
    state = otu.tree_set(tx.init(PARAMS), count=jnp.asarray(5.0, jnp.float32))
    with pytest.raises(ValueError, match=r"\.count is float32\[\] .* int32\[\].*tree_set.*Python number"):
        tx.update(GRADS, state, PARAMS)
    for name, value in (("learning_rate", -0.1), ("beta1", 1.0)):
        state = otu.tree_set(tx.init(PARAMS), **{name: value})
        with pytest.raises(ValueError, match=rf"{name} must be in .*; got {value}.*hyper\['{name}'\].*tree_set"):
            tx.update(GRADS, state, PARAMS)


def _scan(opt, params, steps: int, grad=grad_of, **extra):
    """``steps`` updates of ``opt`` inside one ``lax.scan`` (the carry must keep its types)."""
    def body(carry, _):
        p, s = carry
        u, s = opt.update(grad(p), s, p, **extra)
        return (optax.apply_updates(p, u), s), None
    (p, s), _ = jax.jit(lambda p, s: jax.lax.scan(body, (p, s), None, length=steps))(params, opt.init(params))
    return p, s


def _close(a, b, rtol):
    jax.tree.map(lambda x, y: np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=1e-7), a, b)


SGD_LIKE = [
    # every kind of flag: scheduled, Paddle's need_clip/use_nesterov, the guard's tripped; MindSpore's decay_flag
    ("paddle.momentum", dict(learning_rate=0.1, momentum=0.9, skip_nonfinite=True)),
    ("mindspore.momentum", dict(learning_rate=0.1, momentum=0.9)),
]


@pytest.mark.parametrize("name, kwargs", SGD_LIKE)
def test_sam_equals_sam_around_the_optax_rule(name, kwargs):
    adv = optax.sgd(0.05)
    got, state = _scan(optax.contrib.sam(gx.create(name, **kwargs), adv), PARAMS, 6)
    want, _ = _scan(optax.contrib.sam(optax.sgd(0.1, momentum=0.9), adv), PARAMS, 6)
    _close(got, want, RTOL_SAME)
    assert int(otu.tree_get(state.opt_state, "count")) == 3  # the outer rule ran every second step


def test_sam_around_mxnet_adam_against_a_hand_computed_sam():
    """sync_period 2: an ascent step p + rho * g(p) from the synced p, then
    MXNet Adam's step from p with the gradient taken there (NumPy reference)."""
    rho = 0.05
    opt = optax.contrib.sam(gx.create("mxnet.adam", learning_rate=0.05, wd=1e-3, skip_nonfinite=True),
                            optax.sgd(rho))
    got, _ = _scan(opt, PARAMS, 4)
    ref = Reference("adam", learning_rate=0.05, wd=1e-3)
    p = [np.asarray(PARAMS[k], np.float32) for k in "bw"]
    t = [np.asarray(TARGET[k], np.float32) for k in "bw"]
    for _ in range(2):
        ascended = [x + np.float32(rho) * (x - y) for x, y in zip(p, t)]
        p = ref.step(p, [a - y for a, y in zip(ascended, t)])
    for k, w in zip("bw", p):
        np.testing.assert_allclose(got[k], w, rtol=RTOL_REF)


def test_lookahead_and_multisteps_equal_the_optax_rule():
    tx, ref = gx.create("paddle.momentum", learning_rate=0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9)
    look = optax.LookaheadParams.init_synced(PARAMS)
    lgrad = lambda lp: grad_of(lp.fast)  # noqa: E731  (lookahead takes the fast parameters' gradient)
    got, _ = _scan(optax.lookahead(tx, 2, 0.5), look, 5, lgrad)
    want, _ = _scan(optax.lookahead(ref, 2, 0.5), look, 5, lgrad)
    _close(got, want, RTOL_SAME)
    got, state = _scan(optax.MultiSteps(tx, every_k_schedule=3), PARAMS, 6)
    want, _ = _scan(optax.MultiSteps(ref, every_k_schedule=3), PARAMS, 6)
    _close(got, want, RTOL_SAME)
    assert int(otu.tree_get(state.inner_opt_state, "count")) == 2


def test_masked_multi_transform_and_schedule_free_equal_the_optax_rule():
    tx, ref = gx.create("mindspore.momentum", learning_rate=0.1, momentum=0.9), optax.sgd(0.1, momentum=0.9)
    mask = {"b": False, "w": True}
    frozen = lambda o: optax.chain(optax.masked(o, mask), optax.masked(optax.set_to_zero(), {"b": True, "w": False}))  # noqa: E731
    got, _ = _scan(frozen(tx), PARAMS, 3)
    want, _ = _scan(frozen(ref), PARAMS, 3)
    _close(got, want, RTOL_SAME)
    np.testing.assert_array_equal(got["b"], PARAMS["b"])
    labels = {"b": "optax", "w": "gx"}
    got, _ = _scan(optax.multi_transform({"gx": tx, "optax": optax.sgd(0.05)}, labels), PARAMS, 3)
    want, _ = _scan(optax.multi_transform({"gx": ref, "optax": optax.sgd(0.05)}, labels), PARAMS, 3)
    _close(got, want, RTOL_SAME)
    plain = gx.create("paddle.sgd", learning_rate=1.0)  # schedule_free scales the base rule's updates by its own lr
    got, _ = _scan(optax.contrib.schedule_free(plain, 0.1), PARAMS, 4)
    want, _ = _scan(optax.contrib.schedule_free(optax.sgd(1.0), 0.1), PARAMS, 4)
    _close(got, want, RTOL_SAME)


@pytest.mark.parametrize("name", cases.names())
def test_every_optimizer_object_is_an_ordinary_pytree_and_prints_in_nnx(name):
    # jax.tree.map and _replace rebuild an optimizer from its two functions (a Paddle optimizer keeps its
    # methods' schedule through them); nnx.Optimizer walks and prints it
    from flax import nnx  # noqa: PLC0415 (a test extra)

    tx = cases.create(name)
    rebuilt = jax.tree.map(lambda f: f, tx)
    assert type(rebuilt) is type(tx) and rebuilt == tx
    assert tx._replace(update=tx.update) == tx
    opt = nnx.Optimizer(nnx.Linear(3, 2, rngs=nnx.Rngs(0)), tx, wrt=nnx.Param)
    assert "Optimizer" in str(opt)


def test_a_paddle_optimizer_keeps_its_scheduler_through_tree_map_and_replace():
    sched = gx.paddle.lr.StepDecay(0.1, 1)
    tx = gx.create("paddle.adamw", learning_rate=sched)
    assert jax.tree.map(lambda f: f, tx).lr_scheduler is sched
    wrapped = tx._replace(update=lambda u, s, p=None, **kw: tx.update(u, s, p, **kw))
    assert wrapped.lr_scheduler is sched and wrapped.get_lr(wrapped.init({"w": jnp.ones(2)})) == 0.1
