"""gradxform.paddle.asgd against a NumPy transcription of Paddle's ASGD
(clip -> regularize -> d/y rule), 12 steps, rtol 1e-5 / atol 1e-6; float16 with
master weights; ReduceOnPlateau as a piece; argument checks."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform import paddle as P
from gradxform import schedules as S
from gradxform.paddle._plateau import is_better, reduced
from gradxform.schedules._paddle import HOST64

SHAPES = {"w": (3, 4), "b": (4,)}


def setup(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    w0 = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    gs = [{k: (0.5 * rng.standard_normal(s)).astype(dtype) for k, s in SHAPES.items()} for _ in range(12)]
    return w0, gs


def run(tx, w0, gs, **extra):
    p = {k: jnp.asarray(v) for k, v in w0.items()}
    s = tx.init(p)
    step = jax.jit(tx.update)
    for i, g in enumerate(gs):
        kw = {k: v[i] for k, v in extra.items()}
        u, s = step({k: jnp.asarray(v) for k, v in g.items()}, s, p, **kw)
        p = gx.apply_updates(p, u)
    return {k: np.asarray(v) for k, v in p.items()}, s


def asgd_ref(w0, gs, lr, n, wd=0.0, l1=False, clip=None, lrs=None):
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    d = {k: np.zeros_like(x) for k, x in w.items()}
    y = {k: np.zeros((n,) + x.shape) for k, x in w.items()}
    for m, g in enumerate(gs):
        g = {k: v.astype(np.float64) for k, v in g.items()}
        if clip is not None:
            norm = np.sqrt(sum(np.sum(v * v) for v in g.values()))
            g = {k: v * clip / max(norm, clip) for k, v in g.items()}
        step_lr = lrs[m] if lrs is not None else lr
        for k in w:
            gk = g[k] + wd * (np.sign(w[k]) if l1 else w[k])
            i = m % n
            d[k] = d[k] - y[k][i] + gk
            y[k][i] = gk
            w[k] = w[k] - step_lr * d[k] / min(m + 1, n)
    return w


@pytest.mark.parametrize("kw, ref", [
    (dict(learning_rate=0.05, batch_num=3), dict(lr=0.05, n=3)),
    (dict(learning_rate=0.05, batch_num=4, weight_decay=0.05, grad_clip=P.clip_grad_by_global_norm(1.0)),
     dict(lr=0.05, n=4, wd=0.05, clip=1.0)),
    (dict(learning_rate=0.05, batch_num=2, weight_decay=P.l1_decay(0.02)), dict(lr=0.05, n=2, wd=0.02, l1=True)),
])
def test_asgd_transcription(kw, ref):
    w0, gs = setup()
    got, _ = run(P.asgd(**kw), w0, gs)
    want = asgd_ref(w0, gs, **ref)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_asgd_with_schedule_uses_completed_steps():
    w0, gs = setup()
    sched = S.PaddleStepDecay(0.1, step_size=4, gamma=0.5)
    got, _ = run(P.asgd(sched, batch_num=3), w0, gs)
    want = asgd_ref(w0, gs, None, 3, lrs=[0.1 * 0.5 ** (m // 4) for m in range(12)])
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def paddle_plateau_lrs(losses, learning_rate, factor, patience, threshold=1e-4, cooldown=0, min_lr=0.0,
                       epsilon=1e-8):
    """The learning rate before each ``step(loss)`` of Paddle's ReduceOnPlateau, mode
    'min', threshold_mode 'rel' (paddle/optimizer/lr.py ``ReduceOnPlateau.step`` and
    ``_is_better``, transcribed; float64)."""
    last_lr, best, bad, cool, out = learning_rate, None, 0, 0, []
    for m in losses:
        out.append(last_lr)
        if cool > 0:
            cool -= 1
            continue
        if best is None or m < best - best * threshold:
            best, bad = m, 0
        else:
            bad += 1
        if bad > patience:
            cool, bad = cooldown, 0
            new_lr = max(last_lr * factor, min_lr)
            if last_lr - new_lr > epsilon:
                last_lr = new_lr
    return out


def test_asgd_reduce_on_plateau_needs_loss_and_drops_lr():
    w0, gs = setup()
    rop = S.PaddleReduceOnPlateau(0.05, factor=0.5, patience=1)
    # improves, stalls (one bad step is within patience, the second halves), improves again
    losses = [1.0, 0.9, 0.9, 0.95, 0.8, 0.8, 0.8, 0.8, 0.7, 0.69999, 0.7, 0.7]
    got, state = run(P.asgd(rop, batch_num=2), w0, gs, loss=[jnp.float32(l) for l in losses])
    lrs = paddle_plateau_lrs([float(np.float32(l)) for l in losses], 0.05, 0.5, 1)
    # worked by hand: 0.69999 is within the relative threshold of 0.7 (1e-4), so not better
    assert lrs == [0.05] * 4 + [0.025] * 3 + [0.0125] * 4 + [0.00625]
    want = asgd_ref(w0, gs, None, 2, lrs=lrs)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)
    assert lrs[-1] < 0.05
    tx = P.asgd(rop)
    p = {k: jnp.asarray(v) for k, v in w0.items()}
    with pytest.raises(ValueError, match="loss"):
        tx.update(p, tx.init(p), p)


def test_asgd_float16_multi_precision_keeps_float32_master():
    w0, gs = setup(dtype=np.float16)
    got, state = run(P.asgd(0.05, batch_num=3, multi_precision=True), w0, gs)
    want = asgd_ref({k: v.astype(np.float32) for k, v in w0.items()},
                    [{k: v.astype(np.float32) for k, v in g.items()} for g in gs], 0.05, 3)
    for k in want:
        assert got[k].dtype == np.float16
        np.testing.assert_allclose(got[k].astype(np.float32), want[k], rtol=1e-3, atol=1e-3)  # one float16 rounding
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        P.asgd(0.05).init({k: jnp.asarray(v) for k, v in w0.items()})
    assert any("multi_precision" in str(r.message) for r in rec)


def test_clips():
    g = {"a": jnp.asarray([3.0, 4.0]), "b": jnp.asarray([0.0, 12.0])}
    out, _ = P.clip_grad_by_norm(1.0).update(g, P.clip_grad_by_norm(1.0).init(g))
    np.testing.assert_allclose(np.asarray(out["a"]), [0.6, 0.8], rtol=1e-6)
    out, _ = P.clip_grad_by_global_norm(6.5).update(g, P.clip_grad_by_global_norm(6.5).init(g))
    np.testing.assert_allclose(np.asarray(out["b"]), [0.0, 6.0], rtol=1e-6)
    c = P.clip_grad_by_value(2.0, min=-1.0)
    out, _ = c.update({"x": jnp.asarray([-3.0, 3.0])}, c.init(None))
    np.testing.assert_allclose(np.asarray(out["x"]), [-1.0, 2.0])


def test_registry_and_hyper():
    tx = gx.create("paddle.asgd", learning_rate=0.1, batch_num=2, weight_decay=0.01)
    p = {"w": jnp.ones(3)}
    st = tx.init(p)
    assert {"learning_rate", "l2_coeff"} <= set(gx.hyper_names(st))
    assert gx.get_learning_rate(gx.set_learning_rate(st, 0.2)) == pytest.approx(0.2)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(learning_rate=None), ValueError, "learning_rate"),
    (dict(batch_num=None), ValueError, "batch_num"),
    (dict(batch_num=0), ValueError, "batch_num"),
    (dict(batch_num=1.5), TypeError, "batch_num"),
    (dict(weight_decay="l2"), TypeError, "weight_decay"),
    (dict(weight_decay=-0.1), ValueError, "weight_decay"),
    (dict(grad_clip=1.0), TypeError, "grad_clip"),
    (dict(multi_precision=1), TypeError, "multi_precision"),
    (dict(learning_rate=-1.0), ValueError, "learning_rate"),
])
def test_asgd_arguments_checked_at_construction(kw, exc, match):
    with pytest.raises(exc, match=match):
        P.asgd(**kw)


@pytest.mark.parametrize("mode, tmode, cur, want", [
    # Paddle lr.py 1666-1677 (_is_better), best 10, threshold 0.1: min/rel "< 9", min/abs "< 9.9",
    # max/rel "> 11", max/abs "> 10.1", all strict
    ("min", "rel", 9.0, False), ("min", "rel", 8.5, True),
    ("min", "abs", 9.5, True), ("min", "abs", 9.95, False),
    ("max", "rel", 11.0, False), ("max", "rel", 10.5, False), ("max", "rel", 11.5, True),
    ("max", "abs", 10.5, True), ("max", "abs", 10.05, False),
])
def test_plateau_comparison_is_paddles(mode, tmode, cur, want):
    assert is_better(mode, tmode, 0.1, cur, 10.0) is want


def test_plateau_reduction_needs_more_than_epsilon():
    # Paddle lr.py 1658-1660: new = max(lr * factor, min_lr); taken only if lr - new > epsilon
    assert float(reduced(1.0, 0.5, 0.0, 0.5, HOST64)) == 1.0   # 0.5 is not > 0.5
    assert float(reduced(1.0, 0.5, 0.0, 0.25, HOST64)) == 0.5


def test_plateau_defaults_and_bounds():
    # Paddle lr.py 1544-1556: factor=0.1, patience=10; 1562: factor >= 1.0 is a ValueError;
    # 1574: a learning rate that is not a float or int is a TypeError. patience and cooldown are
    # counts (ints >= 0; Paddle does not check them: gradxform refuses 1.5 and -1)
    s = S.PaddleReduceOnPlateau(0.1)
    assert (s.factor, s.patience, s.cooldown) == (0.1, 10, 0)
    S.PaddleReduceOnPlateau(0.1, factor=0.99, patience=0, cooldown=0)
    for kw, exc in ((dict(factor=1.0), ValueError), (dict(learning_rate="0.1"), TypeError),
                    (dict(patience=1.5), TypeError), (dict(patience=-1), ValueError),
                    (dict(cooldown=1.5), TypeError), (dict(cooldown=-1), ValueError)):
        with pytest.raises(exc):
            S.PaddleReduceOnPlateau(**{"learning_rate": 0.1, **kw})


def test_plateau_state_counts_as_paddles():
    # Paddle lr.py 1650-1657: a cooldown step only counts down (cooldown_counter -= 1); best is set
    # after the first metric (PlateauState.has_best: int32 0/1); the rate piece alone (no step
    # context to publish a rate into) passes the updates through and still reads the loss
    r = S.PaddleReduceOnPlateau(0.1, patience=0, cooldown=2)
    s = r.update_metric(r.init_state(), 1.0)
    assert int(s.has_best) == 1
    s = r.update_metric(s, 2.0)  # one bad epoch > patience 0: reduce, cooldown 2
    assert float(s.last_lr) == pytest.approx(0.01, rel=1e-6) and int(s.cooldown_counter) == 2
    s = r.update_metric(s, 3.0)
    assert int(s.cooldown_counter) == 1 and int(s.has_best) == 1
    piece = r.piece()
    g = {"w": jnp.ones(2)}
    out, (_, st) = piece.update(g, piece.init(g), loss=1.0)
    assert out is g and int(st.has_best) == 1
