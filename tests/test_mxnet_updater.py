"""The imperative MXNet Updater: per-index state, in-place NumPy weights, states round trip."""
import numpy as np
import pytest

import gradxform as gx


def run(updater, weights, grads):
    for i, (w, g) in enumerate(zip(weights, grads)):
        updater(i, g, w)


def test_updater_matches_the_functional_optimizer_and_updates_numpy_in_place():
    rng = np.random.RandomState(0)
    weights = [rng.randn(3, 2).astype(np.float32), rng.randn(4).astype(np.float32)]
    tx = gx.create("adam", learning_rate=0.01)
    updater = gx.mxnet.get_updater(tx)
    params = [w.copy() for w in weights]
    state = tx.init(params)
    for _ in range(3):
        grads = [rng.randn(*w.shape).astype(np.float32) for w in weights]
        run(updater, weights, grads)
        updates, state = tx.update(grads, state, params)
        params = gx.apply_updates(params, updates)
    for w, p in zip(weights, params):
        np.testing.assert_allclose(w, np.asarray(p), rtol=1e-6)


def test_schedule_sees_the_shared_num_update():
    sched = gx.lr_scheduler.FactorScheduler(step=1, factor=0.5, base_lr=1.0)
    updater = gx.mxnet.get_updater(gx.create("sgd", lr_scheduler=sched))
    w0, w1 = np.zeros(1, np.float32), np.zeros(1, np.float32)
    g = np.ones(1, np.float32)
    assert updater.num_update == 0   # Optimizer.__init__: num_update = begin_num_update (0)
    updater(0, g, w0)
    updater(1, g, w1)  # MXNet: index 1 reads num_update 1 as well
    assert updater.num_update == 1
    np.testing.assert_allclose([w0[0], w1[0]], [-1.0, -1.0])
    updater(0, g, w0)
    np.testing.assert_allclose(w0[0], -1.5)


def test_get_and_set_states_resume_exactly():
    rng = np.random.RandomState(1)
    tx = gx.create("rmsprop", centered=True, learning_rate=0.01)
    a, b = gx.mxnet.get_updater(tx), gx.mxnet.get_updater(tx)
    wa = [rng.randn(2, 2).astype(np.float32)]
    grads = [[rng.randn(2, 2).astype(np.float32)] for _ in range(4)]
    for g in grads[:2]:
        run(a, wa, g)
    b.set_states(a.get_states())
    wb = [wa[0].copy()]
    for g in grads[2:]:
        run(a, wa, g)
        run(b, wb, g)
    np.testing.assert_array_equal(wa[0], wb[0])


def test_set_states_of_another_optimizer_is_refused():
    a = gx.mxnet.get_updater(gx.create("adam"))
    a(0, np.ones(2, np.float32), np.zeros(2, np.float32))
    b = gx.mxnet.get_updater(gx.create("sgd", momentum=0.9))
    b.set_states(a.get_states())
    with pytest.raises(ValueError, match="state arrays"):
        b(0, np.ones(2, np.float32), np.zeros(2, np.float32))


def test_states_round_trip_an_index_that_holds_the_separator():
    # get_states keys each array "repr(index)|j": a name index with '|' in it still reads back
    tx = gx.create("sgd", momentum=0.9, learning_rate=0.1)
    a, b = gx.mxnet.get_updater(tx), gx.mxnet.get_updater(tx)
    wa = np.ones(3, np.float32)
    a("enc|dense0_weight", np.full(3, 0.5, np.float32), wa)
    b.set_states(a.get_states())
    wb = wa.copy()
    for u, w in ((a, wa), (b, wb)):
        u("enc|dense0_weight", np.full(3, 0.25, np.float32), w)
    np.testing.assert_array_equal(wa, wb)
    assert b.num_update == a.num_update == 2


def test_set_states_never_unpickles():
    # the states are plain arrays (np.savez, no pickle); an object array in the bytes is refused, not loaded
    import io
    buf = io.BytesIO()
    np.savez(buf, num_update=np.asarray(1), **{"0|0": np.array([{"a": 1}], dtype=object)})
    with pytest.raises(ValueError, match="allow_pickle"):
        gx.mxnet.get_updater(gx.create("sgd")).set_states(buf.getvalue())
