"""The typed step context (gradxform.StepContext), the chain's build-time order
check, and the one schedule protocol of the three families (issue 14, items 2 and 4)."""
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform import pieces as P
from gradxform import schedules as S

PARAMS = {"a": jnp.ones((2, 3)), "b": jnp.full((3,), 2.0)}
GRADS = jax.tree.map(lambda p: jnp.linspace(-1.0, 1.0, p.size).reshape(p.shape), PARAMS)


# -- the context and the chain's check ---------------------------------------------

def test_consumer_without_provider_fails_when_the_chain_is_built():
    with pytest.raises(ValueError, match=r"scale_by_lr .*needs 'lr' from track_step earlier"):
        gx.chain(P.scale_by_lr())
    with pytest.raises(ValueError, match=r"bias_correction .*needs 'count' from track_step"):
        gx.chain(P.bias_correction(0.9, 0.999), P.scale_by_lr(), needs=("lr",))


def test_provider_after_its_consumer_is_named():
    with pytest.raises(ValueError, match=r"scale_by_lr \(piece 0\) needs 'lr' .*after it \(piece 1\)"):
        gx.chain(P.scale_by_lr(), P.track_step(0.1))


def test_wrappers_are_looked_through():
    with pytest.raises(ValueError, match="scale_by_lr"):
        gx.chain(P.lazy_rows(P.scale_by_lr()))
    gx.chain(P.track_step(0.1), P.lazy_rows(P.scale_by_lr()))


def test_nested_chain_declares_what_it_takes_from_its_parent():
    with pytest.raises(ValueError, match=r"needs=\('lr',\)"):
        gx.chain(P.scale_by_lr(), P.trace(0.9))
    body = gx.chain(P.scale_by_lr(), P.trace(0.9), needs=("lr",))
    with pytest.raises(ValueError, match="scale_by_lr .*needs 'lr' from track_step"):
        gx.chain(body)  # the parent is checked in turn
    tx = gx.chain(P.track_step(0.1), body)
    flat = gx.chain(P.track_step(0.1), P.scale_by_lr(), P.trace(0.9))
    u1, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)
    u2, _ = flat.update(GRADS, flat.init(PARAMS), PARAMS)
    jax.tree.map(np.testing.assert_array_equal, u1, u2)
    with pytest.raises(TypeError, match="not a step-context field"):
        gx.chain(P.trace(0.9), needs=("learning_rate",))


def test_the_context_holds_typed_fields_and_no_num_update():
    ctx = gx.StepContext()
    tx = gx.chain(P.track_step(0.1), P.add_decayed_weights(0.01), P.scale_by_lr())
    tx.update(GRADS, tx.init(PARAMS), PARAMS, gx_context=ctx)
    assert _written(ctx) == {"lr", "count", "mask", "wd"}
    np.testing.assert_allclose(jax.tree.leaves(ctx.lr), [0.1, 0.1])
    assert ctx.segments is None
    with pytest.raises(TypeError, match="not a step-context field"):
        ctx.publish(num_update=1)
    with pytest.raises(TypeError, match="not a step-context field"):
        "my_flag" in ctx  # no undeclared keys
    with pytest.raises(AttributeError, match="publish"):
        ctx.lr = 1.0
    with pytest.raises(TypeError, match="takes a gradxform.StepContext"):
        tx.update(GRADS, tx.init(PARAMS), PARAMS, gx_context={})  # a caller's dict is not written into


def _written(ctx) -> set:
    return {f for f in ("lr", "count", "mask", "wd", "segments") if f in ctx}


def test_lbsgd_values_stay_inside_its_chain():
    ctx = gx.StepContext()
    tx = gx.create("lbsgd", learning_rate=0.1, batch_scale=2, warmup_strategy="lars", wd=0.01)
    tx.update(GRADS, tx.init(PARAMS), PARAMS, gx_context=ctx)
    assert _written(ctx) == {"lr", "count", "mask", "wd"}
    with pytest.raises(ValueError, match="lbsgd_apply' from LBSGD's accumulator"):
        gx.chain(P.track_step(0.1), P.gated(P.trace(0.9), gx.mxnet._momentum.LBSGD_APPLY))


def test_a_field_has_one_writer_in_a_chain():
    with pytest.raises(ValueError, match=r"piece 1 provides 'lr', 'count', 'mask', which piece 0 already provides"):
        gx.chain(P.track_step(0.1), P.track_step(0.2))
    with pytest.raises(ValueError, match="'lr', 'count', 'mask', which piece 0 already provides"):
        gx.chain(P.track_step(0.1), gx.chain(P.trace(0.9), P.track_step(0.2)))  # nested: seen by the parent
    with pytest.raises(ValueError, match="'lr', which the chain this one runs in already provides"):
        gx.chain(P.track_step(0.2), P.scale_by_lr(), needs=("lr",))
    with pytest.raises(ValueError, match="'wd', which piece 1 already provides"):
        gx.chain(P.track_step(0.1), P.provide_weight_decay(0.1), P.add_decayed_weights(0.2))


def _writers(tx, key) -> list:
    """The pieces under ``tx`` that write ``key`` themselves (a chain only passes its pieces' writes on)."""
    spec = gx._spec.spec_of(tx)
    if spec is None:
        return []
    own = [spec.who] if key in spec.provides and not spec.sealed else []
    return own + [w for t in spec.inner for w in _writers(t, key)]


@pytest.mark.parametrize("kwargs", [
    {},
    {"parameters": [{"params": ["a"], "learning_rate": 0.5}, {"params": ["b"]}]},
])
def test_every_optimizer_has_one_writer_of_each_field(kwargs):
    import cases
    checked = 0
    for name in cases.names():
        try:
            tx = cases.create(name, **kwargs)
        except (TypeError, ValueError):
            assert kwargs, name  # without groups every optimizer builds
            continue
        checked += 1
        for key in ("lr", "count", "mask", "wd"):
            assert len(_writers(tx, key)) <= 1, (name, key, _writers(tx, key))
    assert checked >= (40 if not kwargs else 10)


def test_adjusted_rate_is_the_one_writer_of_a_plateau_and_group_rates():
    plateau = S.PaddleReduceOnPlateau(0.1, factor=0.5, patience=0)
    tx = gx.create("paddle.sgd", learning_rate=plateau,
                   parameters=[{"params": ["a"], "learning_rate": 0.5}, {"params": ["b"]}])
    assert _writers(tx, "lr") == ["track_step"]
    state = tx.init(PARAMS)
    seen = []
    for loss in (1.0, 2.0, 3.0):  # worse each time: the plateau halves its rate after each
        ctx = gx.StepContext()
        _, state = tx.update(GRADS, state, PARAMS, loss=jnp.float32(loss), gx_context=ctx)
        seen.append([float(ctx.lr["a"]), float(ctx.lr["b"])])
    # group 'a' scales the plateau's rate by its ratio 0.5 (Paddle: lr * group['learning_rate'])
    np.testing.assert_allclose(seen, [[0.05, 0.1], [0.05, 0.1], [0.025, 0.05]], rtol=1e-6)
    with pytest.raises(TypeError, match="RateAdjuster"):
        P.adjusted_rate(P.track_step(0.1), P.trace(0.9))


def test_adjusted_rate_declares_what_its_parts_declare():
    spec = gx._spec.spec_of
    keep = P.RateAdjuster("keep", lambda p: (), lambda lr, count, u, s, extra: (lr, s))
    assert spec(P.adjusted_rate(P.track_step(0.1), keep)).fusion == gx._spec.Fusion()
    refused = P.RateAdjuster("no", keep.init, keep.adjust, gx._spec.Fusion(refuse="its own reason"))
    approx = P.RateAdjuster("approx", keep.init, keep.adjust, gx._spec.Fusion(bit_exact=False))
    fusion = spec(P.adjusted_rate(P.track_step(0.1), approx, refused)).fusion
    assert fusion.refuse == "its own reason" and fusion.bit_exact is False and fusion.isolate_first is False
    before = P.track_step(0.1, schedule=lambda n, base: base / n, read_lr="before")
    assert spec(P.adjusted_rate(before, keep)).fusion.isolate_first is True  # track's own, kept
    undeclared = P.RateAdjuster("undeclared", keep.init, keep.adjust, None)
    assert spec(P.adjusted_rate(P.track_step(0.1), keep, undeclared)).fusion is None
    with pytest.raises(TypeError, match="track must provide lr, count and mask"):
        P.adjusted_rate(P.trace(0.9), keep)
    tx = P.adjusted_rate(P.track_step(0.1), keep, keep)
    state = tx.init(PARAMS)
    assert len(state) == 3 and state[1] == () == state[2]
    with pytest.raises(ValueError, match="expected a state of 3 parts"):
        tx.update(GRADS, state[:2], PARAMS)
    ctx = gx.StepContext()
    _, new = tx.update(GRADS, state, PARAMS, gx_context=ctx)
    assert int(new[0].count) == 1
    np.testing.assert_allclose(jax.tree.leaves(ctx.lr), [0.1, 0.1], rtol=1e-7)


def test_a_chain_refuses_a_state_of_another_length_and_names_undeclared_readers():
    tx = gx.chain(P.track_step(0.1), P.scale_by_lr())
    with pytest.raises(ValueError, match="expected a state of 2 pieces"):
        tx.update(GRADS, tx.init(PARAMS) + ((),), PARAMS)

    def my_rule(updates, state, params=None, **extra_args):  # a reader without a declaration
        return updates, state

    with pytest.raises(ValueError, match=r"test_context.test_a_chain_refuses.* needs 'lr' from track_step"):
        gx.context_value({}, "lr", my_rule)
    declared = gx.uses_context(needs=("lr",))(my_rule)  # no name given: where it is defined
    assert gx._spec.spec_of(declared).who == "test_context.test_a_chain_refuses_a_state_of_another_length_and_" \
                                            "names_undeclared_readers"


def test_a_whole_optimizer_is_one_transformation_in_optax_chain():
    inner = gx.create("adam", learning_rate=0.01)
    tx = optax.chain(optax.clip_by_global_norm(1.0), inner)
    u, _ = tx.update(GRADS, tx.init(PARAMS), PARAMS)
    want, _ = gx.chain(optax.clip_by_global_norm(1.0), inner).update(GRADS, tx.init(PARAMS), PARAMS)
    jax.tree.map(np.testing.assert_array_equal, u, want)


# -- one schedule protocol ----------------------------------------------------------

def test_lr_scheduler_is_a_thin_re_export():
    assert gx.lr_scheduler.FactorScheduler is S.FactorScheduler
    assert issubclass(S.FactorScheduler, S.Schedule)


@pytest.mark.parametrize("sched, shift", [
    (S.FactorScheduler(step=2, factor=0.5, base_lr=1.0), 0),          # MXNet: num_update after the bump
    (S.ExponentialDecayLR(0.1, 0.5, 1), 1),                             # MindSpore: global_step before it
    (S.PaddleStepDecay(0.5, step_size=2, gamma=0.1), 1),                      # Paddle: last_epoch before it
])
def test_each_schedule_maps_the_update_count_to_its_own_index(sched, shift):
    counts = jnp.arange(1, 8)
    np.testing.assert_array_equal(sched.lr_for_update(counts), sched(counts - shift))
    assert sched.indexed_by == (S.NUM_UPDATE if shift == 0 else S.COMPLETED)
    assert sched.rebase == (S.REPLACE if shift == 0 else S.SCALE)


def test_rebase_meaning_per_family():
    mx = S.FactorScheduler(step=1, factor=0.5, base_lr=1.0)
    np.testing.assert_allclose(mx.lr_for_update(jnp.arange(1, 4), 0.2), [0.2, 0.1, 0.05], rtol=1e-6)
    ms = S.ExponentialDecayLR(0.1, 0.5, 1)
    np.testing.assert_allclose(ms.lr_for_update(jnp.arange(1, 4), 0.2), [0.2, 0.1, 0.05], rtol=1e-6)
    poly = S.PolyScheduler(max_update=4, base_lr=1.0, pwr=1)  # MXNet: keeps its constructor's base
    np.testing.assert_array_equal(poly.lr_for_update(jnp.arange(1, 4), 5.0), poly.lr_for_update(jnp.arange(1, 4)))


def test_an_adapter_is_one_small_class():
    class FromOptax(S.Schedule):  # an optax schedule: count 0 at the first update
        indexed_by, rebase = S.COMPLETED, S.SCALE

        def __init__(self, fn, base_lr):
            self.fn, self.base_lr = fn, base_lr

        def value(self, step):
            return self.fn(step)

    sched = FromOptax(optax.exponential_decay(0.5, 2, 0.1, staircase=True), 0.5)
    tx = P.track_step(0.5, schedule=sched)
    state, seen = tx.init(PARAMS), []
    for _ in range(5):
        ctx = gx.StepContext()
        _, state = tx.update(GRADS, state, gx_context=ctx)
        seen.append(float(ctx["lr"]["a"]))
    np.testing.assert_allclose(seen, [0.5, 0.5, 0.05, 0.05, 0.005], rtol=1e-6)


def test_a_plain_function_is_a_num_update_schedule():
    tx = P.track_step(1.0, schedule=lambda n, base: base / n)
    state, seen = tx.init(PARAMS), []
    for _ in range(3):
        ctx = gx.StepContext()
        _, state = tx.update(GRADS, state, gx_context=ctx)
        seen.append(float(ctx["lr"]["b"]))
    np.testing.assert_allclose(seen, [1.0, 0.5, 1 / 3], rtol=1e-6)
