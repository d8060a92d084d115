"""gradxform.mindspore against NumPy transcriptions of the seed's formulas
(TinyMS/MindSpore docs, the project's seed 003), 12 steps each, float32,
rtol 1e-5 / atol 1e-6; plus argument checks, names, hyperparameters, offload."""
import typing

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from trajectories import run_jitted
from gradxform import mindspore as M
from gradxform import schedules as S
from gradxform._state_paths import find_states, map_states
from gradxform.mindspore._adafactor import AdaFactorState

STEPS = 12
SHAPES = {"dense/weight": (3, 4), "dense/bias": (4,), "bn/gamma": (2, 3)}


def data(seed=0, zero_rows=False):
    rng = np.random.default_rng(seed)
    w0 = {k: rng.standard_normal(s).astype(np.float32) for k, s in SHAPES.items()}
    gs = [{k: (0.5 * rng.standard_normal(s)).astype(np.float32) for k, s in SHAPES.items()} for _ in range(STEPS)]
    if zero_rows:
        for t, g in enumerate(gs):
            g["dense/weight"][t % 3] = 0.0
    return w0, gs


run = run_jitted


def reference(w0, gs, step, init, decay=0.0, ls=1.0, filt=lambda n: "beta" not in n and "gamma" not in n):
    """The MindSpore base class around a per-parameter NumPy rule ``step(w, g, s, t, name)``."""
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    s = {k: init(v) for k, v in w.items()}
    for t, g in enumerate(gs, 1):
        for k in w:
            gg = g[k].astype(np.float64)
            if decay and filt(k):
                gg = gg + decay * ls * w[k]
            w[k], s[k] = step(w[k], gg / ls, s[k], t, k)
    return w


def close(got, want):
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=k)


Z = np.zeros_like


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum(nesterov):
    w0, gs = data()
    lr, u = 0.1, 0.9

    def step(w, g, v, t, k):
        v = v * u + g
        return (w - (g * lr + v * u * lr) if nesterov else w - lr * v), v

    got, _ = run(M.momentum(lr, u, weight_decay=0.01, loss_scale=4.0, use_nesterov=nesterov), w0, gs)
    close(got, reference(w0, gs, step, Z, decay=0.01, ls=4.0))


@pytest.mark.parametrize("kw", [dict(momentum=0.9, dampening=0.2), dict(momentum=0.9, nesterov=True),
                                dict(momentum=0.0),
                                # ints, converted as sgd.py 172-173, 182-183; momentum 0 is plain SGD
                                # whatever the dampening (run in mindspore.nn.SGD 2.10 by hand: w -= lr * g)
                                dict(momentum=0, dampening=1)])
def test_sgd_first_step_rule(kw):
    w0, gs = data()
    mu, d, nest = kw.get("momentum", 0.0), kw.get("dampening", 0.0), kw.get("nesterov", False)

    def step(w, g, s, t, k):
        v, first = s
        if mu > 0:
            v = g if first else mu * v + (1 - d) * g
            g = g + mu * v if nest else v
        return w - 0.1 * g, (v, False)

    got, _ = run(M.sgd(0.1, weight_decay=0.01, **kw), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (Z(x), True), decay=0.01))


@pytest.mark.parametrize("variant", ["plain", "nesterov", "amsgrad", "lazy", "offload"])
def test_adam_variants(variant):
    w0, gs = data(zero_rows=variant == "lazy")
    lr, b1, b2, eps = 0.01, 0.9, 0.999, 1e-8

    def step(w, g, s, t, k):
        m, v, vh, n = s
        rows = np.any(g.reshape(g.shape[0], -1) != 0, axis=1) if variant == "lazy" and g.ndim > 1 else None
        n = n + 1
        m2, v2 = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        vh2 = np.maximum(vh, v2)
        num = b1 * m2 + (1 - b1) * g if variant == "nesterov" else m2
        den = np.sqrt(vh2 if variant == "amsgrad" else v2) + eps
        w2 = w - lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * num / den
        if rows is not None:
            r = rows[:, None]
            w2, m2, v2 = np.where(r, w2, w), np.where(r, m2, m), np.where(r, v2, v)
        return w2, (m2, v2, vh2, n)

    kw = {"plain": {}, "nesterov": dict(use_nesterov=True), "amsgrad": dict(use_amsgrad=True),
          "lazy": dict(use_lazy=True), "offload": dict(use_offload=True)}[variant]
    wd = 0.0 if variant == "lazy" else 0.01  # lazy rows are judged on the raw gradient, before decay
    got, _ = run(M.adam(lr, weight_decay=wd, **kw), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (Z(x), Z(x), Z(x), 0), decay=wd))


def test_lazy_adam_leaves_untouched_rows_alone():
    # row 1 is touched on the first step only: afterwards LazyAdam (FusedSparseLazyAdam) keeps its weight
    # AND its moments, where plain Adam would go on moving it on its momentum
    w0, gs = data()
    for g in gs[1:]:
        g["dense/weight"][1] = 0.0
    got, state = run(M.lazy_adam(0.01), w0, gs)
    g0 = gs[0]["dense/weight"][1].astype(np.float64)
    m, v = 0.1 * g0, 0.001 * g0 * g0   # one step from zero moments, beta1 0.9, beta2 0.999
    w1 = w0["dense/weight"][1] - 0.01 * np.sqrt(1 - 0.999) / (1 - 0.9) * m / (np.sqrt(v) + 1e-8)
    np.testing.assert_allclose(got["dense/weight"][1], w1, rtol=1e-6)
    moments = [s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")]
    np.testing.assert_allclose(np.asarray(moments[0].mu["dense/weight"])[1], m, rtol=1e-6)


def test_adam_offload_state_in_host_memory_and_same_numbers():
    w0, gs = data()
    off, s_off = run(M.adam_offload(0.01), w0, gs)
    ref, _ = run(M.adam(0.01), w0, gs)
    close(off, ref)
    moments = [s for s in jax.tree.leaves(s_off, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")][0]
    kinds = {x.sharding.memory_kind for x in jax.tree.leaves((moments.mu, moments.nu))}
    # asked of the backend, not caught: a backend without the kind keeps the moments on the device
    offered = {m.kind for m in jax.devices()[0].addressable_memories()}
    assert kinds == ({"pinned_host"} if "pinned_host" in offered else {"device"}), (kinds, offered)
    if jax.default_backend() == "cpu":  # CPU and GPU both offer it: the check above is the host one here
        assert "pinned_host" in offered


def _moment_kinds(state):
    moments = [s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")][0]
    return [x.sharding.memory_kind for x in jax.tree.leaves((moments.mu, moments.nu))]


def test_adam_offload_moments_on_host_whatever_placement_the_state_arrives_with():
    """Both moments are placed at ``init``, eager or under ``jax.jit``; a state that reaches
    ``update`` on the device (from ``jax.device_put``, a restored checkpoint) leaves it in host
    memory again, eager and jitted, with the numbers of a state that never left the host."""
    tx = M.adam_offload(0.01)
    p = {"a": jnp.ones(3), "b": jnp.ones((2, 2))}
    g = {"a": jnp.full(3, 0.5), "b": jnp.full((2, 2), -0.25)}
    offered = {m.kind for m in jax.devices()[0].addressable_memories()}
    want = ["pinned_host" if "pinned_host" in offered else "device"] * 4
    for state in (tx.init(p), jax.jit(tx.init)(p)):
        assert _moment_kinds(state) == want
        moments = [s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "mu")) if hasattr(s, "mu")][0]
        assert not any(np.asarray(x).any() for x in jax.tree.leaves((moments.mu, moments.nu)))
    on_host = tx.update(g, tx.init(p), p)
    on_device = jax.device_put(tx.init(p), jax.memory.Space.Device)
    assert set(_moment_kinds(on_device)) == {"device"}
    for step in (tx.update, jax.jit(tx.update)):
        out, new = step(g, on_device, p)
        assert _moment_kinds(new) == want
        chex.assert_trees_all_equal(out, on_host[0])
        chex.assert_trees_all_equal(jax.device_get(new), jax.device_get(on_host[1]))


def test_adam_weight_decay():
    w0, gs = data()
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-6, 0.1

    def step(w, g, s, t, k):
        m, v = s
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        upd = m / (np.sqrt(v) + eps) + (wd * w if "gamma" not in k else 0)
        return w - lr * upd, (m, v)

    got, _ = run(M.adam_weight_decay(lr, weight_decay=wd), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (Z(x), Z(x))))


def test_lamb():
    w0, gs = data()
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-6, 0.01

    def step(w, g, s, t, k):
        m, v = s
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        r = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)
        u = r + (wd if "gamma" not in k else 0.0) * w
        return w - lr * np.linalg.norm(w) / np.linalg.norm(u) * u, (m, v)

    got, _ = run(M.lamb(lr, weight_decay=wd), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (Z(x), Z(x))))


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_lamb_clipped_trust_ratio_of_the_gpu_kernel(scale):
    """trust_ratio='clipped' (issue 15 item 3): the 2022-23 GPU kernel's
    ratio |w| / |m^/sqrt(v^ + eps) + wd w| clamped to [0, 10] (epsilon inside
    the root); the update itself keeps eps outside. scale=100 makes |w|
    large, so the clamp binds (ratio 10) and the two rules part."""
    w0, gs = data()
    w0 = {k: v * scale for k, v in w0.items()}
    lr, b1, b2, eps, wd = 0.01, 0.9, 0.999, 1e-6, 0.01

    def step(w, g, s, t, k):
        m, v = s
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g * g
        mh, vh = m / (1 - b1 ** t), v / (1 - b2 ** t)
        d = wd if "gamma" not in k else 0.0
        u = mh / (np.sqrt(vh) + eps) + d * w
        ratio = np.clip(np.linalg.norm(w) / np.linalg.norm(mh / np.sqrt(vh + eps) + d * w), 0.0, 10.0)
        return w - lr * ratio * u, (m, v)

    got, _ = run(M.lamb(lr, weight_decay=wd, trust_ratio="clipped"), w0, gs)
    want = reference(w0, gs, step, lambda x: (Z(x), Z(x)))
    for k in want:  # weights up to 100: relative tolerance as the other tests, atol scaled
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6 * scale, err_msg=k)
    default, _ = run(M.lamb(lr, weight_decay=wd), w0, gs)
    gap = max(np.max(np.abs(default[k] - got[k])) for k in got)
    assert (gap > 1e-2) if scale > 1 else (gap < 1e-5), gap
    with pytest.raises(ValueError, match="trust_ratio"):
        M.lamb(lr, trust_ratio="gpu")


def test_lamb_clipped_nan_ratio_is_zero():
    """trust_ratio='clipped': a NaN ratio is 0 (``lamb_gpu_kernel.h`` CalcTrustRatio, as the module
    docstring quotes it: ``w_norm > 0 ? (g_norm > 0 ? w_norm / g_norm : 1) : 1``, NaN -> 0, then the
    clamp). The ratio is NaN when both norms are inf (an inf weight under decay: inf / inf), and then
    the leaf's finite elements do not move; ratio 1 would move them by -lr * u."""
    tx = M.lamb(0.1, weight_decay=0.01, trust_ratio="clipped")
    p = {"w": jnp.asarray([np.inf, 1.0], jnp.float32)}
    u, _ = tx.update({"w": jnp.asarray([0.5, 0.5], jnp.float32)}, tx.init(p), p)
    assert float(u["w"][1]) == 0.0


def test_lamb_clipped_ratio_is_1_where_only_the_ratio_vector_is_0():
    """trust_ratio='clipped': the ratio's vector m^/sqrt(v^ + eps) + wd w (epsilon inside the root)
    can be exactly 0 where the update m^/(sqrt(v^) + eps) + wd w is not; the kernel's rule
    (``lamb_gpu_kernel.h`` CalcTrustRatio: ``w_norm > 0 ? (g_norm > 0 ? w_norm / g_norm : 1) : 1``)
    then takes ratio 1, not |w| / 1. First step from zero moments with beta1 = beta2 = 0.5, eps = 3,
    wd = 0.5, w = 1, g = -1 (all exact in float32): m^ = -1, v^ = 1, the ratio's vector
    -1 / sqrt(4) + 0.5 = 0, the update -1 / (1 + 3) + 0.5 = 0.25, so w moves by -lr * 1 * 0.25."""
    lr = 0.1
    tx = M.lamb(lr, beta1=0.5, beta2=0.5, eps=3.0, weight_decay=0.5, trust_ratio="clipped")
    p = {"w": jnp.ones(2, jnp.float32)}
    u, _ = jax.jit(tx.update)({"w": jnp.full(2, -1.0, jnp.float32)}, tx.init(p), p)  # one compile
    np.testing.assert_array_equal(np.asarray(u["w"]), np.full(2, -lr * 0.25, np.float32))


@pytest.mark.parametrize("use_clip", [False, True])
def test_lars_over_momentum(use_clip):
    w0, gs = data()
    lr, u, eps, coef, wd, ls = 0.1, 0.9, 1e-5, 0.02, 0.01, 2.0

    def step(w, g, v, t, k):
        if "bias" not in k:
            d = wd if "gamma" not in k else 0.0
            lam = coef * np.linalg.norm(w) / (np.linalg.norm(g) + d * np.linalg.norm(w) + eps)
            if use_clip:
                lam = min(lam / lr, 1.0)
            g = lam * (g + d * w)
        v = u * v + g
        return w - lr * v, v

    tx = M.lars(M.momentum(lr, u), epsilon=eps, coefficient=coef, use_clip=use_clip, weight_decay=wd,
                loss_scale=ls)
    got, _ = run(tx, w0, gs)
    close(got, reference(w0, gs, step, Z, ls=ls))


def _lars_momentum_reference(w0, gs, lr_of, wd_of, ls=1.0, coef=0.02, eps=1e-5, mu=0.9, use_clip=False,
                             lars_on=lambda k: "bias" not in k):
    """float64 MindSpore LARS over Momentum (lars.py + Ascend lars_v2_update, no
    zero-norm guard): g = g/ls; lam = coef |w| / (|g| + wd |w| + eps);
    use_clip: min(lam / lr, 1); g = lam (g + wd w); then v = mu v + g, w -= lr v.
    ``lr_of(k, t)``, ``wd_of(k, t)``: the parameter's lr and weight decay
    (0 where its decay flag is off) at update t (0-based, MindSpore's global_step)."""
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    v = {k: np.zeros_like(x) for k, x in w.items()}
    for t, g in enumerate(gs):
        for k in w:
            gg = g[k].astype(np.float64) / ls
            if lars_on(k):
                d, wn, gn = wd_of(k, t), np.linalg.norm(w[k]), np.linalg.norm(gg)
                lam = coef * wn / (gn + d * wn + eps)
                if use_clip:
                    lam = min(lam / lr_of(k, t), 1.0)
                gg = lam * (gg + d * w[k])
            v[k] = mu * v[k] + gg
            w[k] = w[k] - lr_of(k, t) * v[k]
    return w


def test_lars_zero_norm_weight_gets_ratio_zero():
    """Issue 15 item 4a: a zero-initialised 'beta' passing the filter is not
    moved (ratio 0, the seed's and lars_v2_update's rule); the old guard gave
    ratio 1, i.e. the raw gradient at full lr."""
    params = {"bn/beta": jnp.zeros(3), "dense/weight": jnp.ones((2, 3))}
    g = {"bn/beta": jnp.asarray([0.5, -1.0, 2.0]), "dense/weight": jnp.full((2, 3), 0.1)}
    tx = M.lars(M.momentum(0.1, 0.9), coefficient=0.02)
    u, _ = tx.update(g, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(u["bn/beta"]), 0.0)
    assert np.all(np.asarray(u["dense/weight"]) != 0.0)
    # a zero gradient with zero weight decay and epsilon 0: 0, not 0/0
    tx = M.lars(M.momentum(0.1, 0.9), epsilon=0.0)
    u, _ = tx.update(jax.tree.map(jnp.zeros_like, g), tx.init(params), params)
    assert all(np.all(np.asarray(x) == 0.0) for x in jax.tree.leaves(u))


@pytest.mark.parametrize("use_clip", [False, True])
def test_lars_takes_over_the_wrapped_optimizers_weight_decay_and_loss_scale(use_clip):
    """Issue 15 item 4c: lars(momentum(weight_decay=, loss_scale=)) decays and
    unscales in LARS (MindSpore's LARS.__init__ switches them off in the
    wrapped optimizer); before, both were applied again inside Momentum."""
    w0, gs = data()
    wd, ls = 0.01, 2.0
    tx = M.lars(M.momentum(0.1, 0.9, weight_decay=wd, loss_scale=ls), coefficient=0.02, use_clip=use_clip)
    got, state = run(tx, w0, gs)
    want = _lars_momentum_reference(w0, gs, lambda k, t: 0.1, lambda k, t: 0.0 if "gamma" in k else wd, ls=ls,
                                    use_clip=use_clip)
    close(got, want)
    # the wrapped optimizer's state keeps its values (switched off for its update only)
    assert float(gx.get_hyper(state, "weight_decay")) == pytest.approx(wd)
    assert float(gx.get_hyper(state, "loss_scale")) == pytest.approx(ls)
    # the same run as LARS's own weight_decay/loss_scale over a plain Momentum
    same, _ = run(M.lars(M.momentum(0.1, 0.9), coefficient=0.02, use_clip=use_clip, weight_decay=wd,
                         loss_scale=ls), w0, gs)
    close(got, same)
    with pytest.raises(ValueError, match="give it once"):
        M.lars(M.momentum(0.1, 0.9, weight_decay=wd), weight_decay=wd).init({k: jnp.asarray(v) for k, v in w0.items()})


def test_lars_use_clip_per_group_lr_and_per_group_weight_decay():
    """Issue 15 items 4b, 4d: use_clip divides by each parameter's own
    learning rate (MindSpore's ``LARS._get_lr`` with group lr), and each
    group's weight decay is used (groups: no beta/gamma filter)."""
    w0, gs = data()
    groups = [{"params": "dense/*", "lr": 0.05, "weight_decay": 0.05}, {"params": "bn/*", "weight_decay": 0.01}]
    tx = M.lars(M.momentum(0.2, 0.9, groups=groups), coefficient=0.5, use_clip=True)
    got, _ = run(tx, w0, gs)
    want = _lars_momentum_reference(w0, gs, lambda k, t: 0.05 if k.startswith("dense") else 0.2,
                                    lambda k, t: 0.05 if k.startswith("dense") else 0.01, coef=0.5, use_clip=True)
    close(got, want)
    # a list learning rate (dynamic lr) for use_clip, read at the update's step
    lrs = [0.1 * 0.9 ** i for i in range(STEPS)]
    got, _ = run(M.lars(M.momentum(lrs, 0.9, weight_decay=0.01), coefficient=0.5, use_clip=True), w0, gs)
    want = _lars_momentum_reference(w0, gs, lambda k, t: lrs[t], lambda k, t: 0.0 if "gamma" in k else 0.01,
                                    coef=0.5, use_clip=True)
    close(got, want)


def test_lars_dynamic_weight_decay():
    """Issue 15 item 4d: a weight-decay schedule (MindSpore's weight-decay
    Cell, read at global_step like a learning rate) and a list."""
    w0, gs = data()
    sched = S.ExponentialDecayLR(0.05, 0.5, 2)
    got, _ = run(M.lars(M.momentum(0.1, 0.9), coefficient=0.02, weight_decay=sched), w0, gs)
    want = _lars_momentum_reference(w0, gs, lambda k, t: 0.1,
                                    lambda k, t: 0.0 if "gamma" in k else 0.05 * 0.5 ** (t / 2))
    close(got, want)
    wds = [0.01 * (i + 1) for i in range(STEPS)]
    got, _ = run(M.lars(M.momentum(0.1, 0.9), coefficient=0.02, weight_decay=wds), w0, gs)
    want = _lars_momentum_reference(w0, gs, lambda k, t: 0.1, lambda k, t: 0.0 if "gamma" in k else wds[t])
    close(got, want)


def test_adagrad_and_update_slots():
    w0, gs = data()
    for slots in (True, False):
        def step(w, g, h, t, k):
            h = h + g * g if slots else h
            return w - 0.05 * g / np.sqrt(h), h

        got, _ = run(M.adagrad(accum=0.3, learning_rate=0.05, update_slots=slots), w0, gs)
        close(got, reference(w0, gs, step, lambda x: np.full_like(x, 0.3)))


def test_proximal_adagrad_l1_l2():
    w0, gs = data()
    lr, l1, l2 = 0.05, 0.01, 0.02

    def step(w, g, h, t, k):  # the kernels' rule: shrink with the adaptive rate lr / sqrt(h)
        h = h + g * g
        a = lr / np.sqrt(h)
        v = w - a * g
        return np.sign(v) * np.maximum(np.abs(v) - a * l1, 0) / (1 + a * l2), h

    got, _ = run(M.proximal_adagrad(0.1, lr, l1=l1, l2=l2), w0, gs)
    close(got, reference(w0, gs, step, lambda x: np.full_like(x, 0.1)))


def test_ftrl_l1_l2_all_parameters_decayed():
    w0, gs = data()
    lr, p, l1, l2, wd = 0.05, -0.3, 0.01, 0.02, 0.01

    def step(w, g, s, t, k):
        m, u = s
        m2 = m + g * g
        u = u + g - (m2 ** -p - m ** -p) / lr * w
        return np.where(np.abs(u) > l1, (np.sign(u) * l1 - u) / (m2 ** -p / lr + 2 * l2), 0.0), (m2, u)

    got, _ = run(M.ftrl(0.2, lr, p, l1, l2, weight_decay=wd), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (np.full_like(x, 0.2), Z(x)), decay=wd, filt=lambda n: True))


def test_ftrl_zero_accumulator_and_zero_gradient_give_zero_not_nan():
    """FTRL sets w = 0 where |u| <= l1, strictly ``|u| > l1`` for the closed form (``ftrl.py`` 51-52 and
    its formula, 137-138). With initial_accum 0, l1 = l2 = 0 and a zero gradient the closed form is
    0 / 0; MindSpore 2.10's CPU ``ApplyFtrl`` (run by hand: ``nn.FTRL(initial_accum=0.0,
    learning_rate=0.1)``, w = [0.5, -0.3, 0]) gives w = [0, 0, 0], then [-0.1, 0, 0.1] after
    g = [0.2, 0, -0.1] (u = g, m = g^2, w = -u / (|g| / 0.1))."""
    tx = M.ftrl(initial_accum=0.0, learning_rate=0.1)
    w = {"w": jnp.array([0.5, -0.3, 0.0])}
    state = tx.init(w)
    for g, want in (([0.0, 0.0, 0.0], [0.0, 0.0, 0.0]), ([0.2, 0.0, -0.1], [-0.1, 0.0, 0.1])):
        u, state = tx.update({"w": jnp.array(g)}, state, w)
        w = optax.apply_updates(w, u)
        np.testing.assert_allclose(w["w"], want, rtol=1e-6, atol=0)


@pytest.mark.parametrize("centered", [False, True])
def test_rmsprop_lr_inside_momentum_with_schedule(centered):
    w0, gs = data()
    sched = S.ExponentialDecayLR(0.01, 0.5, 2)
    rho, mu, eps = 0.9, 0.5, 1e-2  # an epsilon that shows (the default 1e-10 is below rtol)

    def step(w, g, s, t, k):
        ms, mg, mom = s
        lr = 0.01 * 0.5 ** ((t - 1) / 2)
        ms = rho * ms + (1 - rho) * g * g
        mg = rho * mg + (1 - rho) * g
        den = np.sqrt(ms - mg * mg + eps) if centered else np.sqrt(ms + eps)
        mom = mu * mom + lr * g / den
        return w - mom, (ms, mg, mom)

    got, _ = run(M.rmsprop(sched, momentum=mu, epsilon=eps, centered=centered), w0, gs)
    close(got, reference(w0, gs, step, lambda x: (np.ones_like(x), Z(x), Z(x))))


@pytest.mark.parametrize("kw", [dict(), dict(warmup_init=True, beta1=0.0),
                                dict(learning_rate=0.01, relative_step=False, weight_decay=0.1),
                                # an eps1 and a clip threshold that show (1e-30 and 1.0 hide + vs -, * vs /)
                                dict(eps=(1e-2, 1e-2), clip_threshold=0.5, decay_rate=0.7)])
def test_adafactor(kw):
    w0, gs = data()
    (e1, e2), b1 = kw.get("eps", (1e-30, 1e-3)), kw.get("beta1", 0.9)
    clip, dr = kw.get("clip_threshold", 1.0), kw.get("decay_rate", 0.8)
    rel, wd = kw.get("relative_step", True), kw.get("weight_decay", 0.0)
    rms = lambda x: np.sqrt(np.mean(x * x))  # noqa: E731

    def step(w, g, s, t, k):
        m, r, c, v = s
        lr = min(1e-6 * t if kw.get("warmup_init") else 1e-2, 1 / np.sqrt(t)) if rel else kw["learning_rate"]
        lr_u = lr * max(e2, rms(w))
        b = 1 - t ** -dr
        q = g * g + e1
        if g.ndim >= 2:
            r, c = b * r + (1 - b) * q.mean(-1), b * c + (1 - b) * q.mean(-2)
            u = g / np.sqrt(np.outer(r / r.mean(), c))
        else:
            v = b * v + (1 - b) * q
            u = g / np.sqrt(v)
        u = u / max(rms(u) / clip, 1.0) * lr_u
        if b1 > 0:
            m = b1 * m + (1 - b1) * u
            u = m
        return w - wd * lr_u * w - u, (m, r, c, v)

    init = lambda x: (Z(x), np.zeros(x.shape[:-1]), np.zeros(x.shape[-1:]), Z(x))  # noqa: E731
    got, _ = run(M.adafactor(**kw), w0, gs)
    close(got, reference(w0, gs, step, init))


def test_adafactor_compression_keeps_float16_second_moments():
    w0, gs = data()
    _, state = run(M.adafactor(compression=True), w0, gs)
    af = [s for s in jax.tree.leaves(state, is_leaf=lambda x: hasattr(x, "exp_avg_sq")) if hasattr(s, "exp_avg_sq")][0]
    assert af.exp_avg_sq["dense/bias"].dtype == jnp.float16
    assert af.exp_avg_sq_row["dense/weight"].dtype == jnp.float32


def _adafactor_slots(state):
    (st,) = find_states(state, AdaFactorState)
    return st


def test_adafactor_state_and_a_3d_step_as_mindspores():
    """``adafactor.py`` ``init_ada_factor_state`` (353-385): no first moment when beta1 <= 0; for rank > 1
    a row moment of shape[:-1], a column moment of shape[:-2] + shape[-1:] and a (1,) second moment; for
    rank <= 1 (1,) rows and columns and a second moment shaped as the parameter. Then one step of a
    rank-3 parameter against a float64 transcription of ``_run_opt_with_one_number`` (59-124) and
    ``_approx_sq_grad`` (38-46), whose reductions run over the last two axes (rtol 1e-5, float32)."""
    rng = np.random.RandomState(3)
    w = {k: jnp.asarray(rng.randn(*shape), jnp.float32) for k, shape in (("k3", (2, 3, 4)), ("k2", (3, 4)),
                                                                          ("b", (4,)))}
    g = {k: jnp.asarray(rng.randn(*v.shape), jnp.float32) for k, v in w.items()}
    assert _adafactor_slots(M.adafactor(beta1=0.0).init(w)).exp_avg == ()
    assert _adafactor_slots(M.adafactor(beta1=None).init(w)).exp_avg == ()   # 305: None is 0.0
    M.adafactor(beta1=0, weight_decay=0)   # ints taken: 327 [int, float]; _preprocess_weight_decay
    tx = M.adafactor(beta1=0.9)
    state = tx.init(w)
    st = _adafactor_slots(state)
    shapes = {k: tuple(jnp.shape(x[k]) for x in (st.exp_avg_sq_row, st.exp_avg_sq_col, st.exp_avg_sq)) for k in w}
    # a slot a leaf does not use holds nothing (MindSpore: a (1,) zero)
    assert shapes == {"k3": ((2, 3), (2, 4), (0,)), "k2": ((3,), (4,), (0,)), "b": ((0,), (0,), (4,))}
    assert st.exp_avg_sq["k2"] == () and st.exp_avg_sq_row["b"] == ()
    assert jax.tree.map(jnp.shape, st.exp_avg) == jax.tree.map(jnp.shape, w)
    u, _ = jax.jit(tx.update)(g, state, w)
    x, gx3 = np.asarray(w["k3"], np.float64), np.asarray(g["k3"], np.float64)
    lr_u = 1e-2 * max(1e-3, np.sqrt(np.mean(x * x)))      # relative_step at step 1, scale_parameter
    b2 = 1.0 - 1.0 ** -0.8                                 # beta2t at step 1: 0
    upd = gx3 * gx3 + 1e-30
    r, c = upd.mean(-1) * (1 - b2), upd.mean(-2) * (1 - b2)
    v = (1.0 / np.sqrt(r / r.mean(-1, keepdims=True)))[..., None] * (1.0 / np.sqrt(c))[..., None, :] * gx3
    v = v / max(np.sqrt(np.mean(v * v)) / 1.0, 1.0) * lr_u
    np.testing.assert_allclose(u["k3"], -(v * (1 - 0.9)), rtol=1e-5)   # exp_avg from 0, beta1 0.9


@pytest.mark.parametrize("warmup_init", [False, True])
def test_adafactor_relative_step_after_ten_thousand_steps(warmup_init):
    """``adafactor.py`` ``construct`` (410-418): ``lr = min(min_step, 1 / sqrt(step))`` with min_step 1e-2
    (1e-6 * step with warmup_init): 1/sqrt(step) is the smaller only past step 10^4. At step 40000 lr is
    1/200. A 1-D leaf of ones (RMS 1: lr_u = lr) with |g| equal everywhere and no first moment: every
    U_i = sign(g_i) / sqrt(1 - beta2t) before the clip, RMS(U) > 1, so the update is -lr * sign(g)."""
    w = {"b": jnp.ones(4)}
    tx = M.adafactor(beta1=0.0, warmup_init=warmup_init)
    state = map_states(lambda _, n: n._replace(count=jnp.asarray(39999, jnp.int32)) if hasattr(n, "leaf_counts")
                       else n, tx.init(w))
    u, _ = tx.update({"b": jnp.array([0.5, -0.5, 0.5, -0.5])}, state, w)
    np.testing.assert_allclose(u["b"], [-0.005, 0.005, -0.005, 0.005], rtol=1e-5)


def test_adafactor_dynamic_lr_turns_scale_parameter_off():
    """``adafactor.py`` 307-310 and 340-341: a learning rate that is not a float or int (a list, a
    schedule) sets scale_lr False and then scale_parameter False: lr_u = lr, not lr * RMS(w). Step 1
    (beta2t 0, no first moment) with |g| equal everywhere: U = sign(g), RMS 1, so w moves by -lr sign(g)
    although RMS(w) is 2."""
    w = {"b": jnp.full(4, 2.0)}
    g = {"b": jnp.array([0.5, -0.5, 0.5, -0.5])}
    tx = M.adafactor([0.01, 0.01], relative_step=False, beta1=0.0)
    u, _ = tx.update(g, tx.init(w), w)
    np.testing.assert_allclose(u["b"], [-0.01, 0.01, -0.01, 0.01], rtol=1e-5)
    # a fixed 0.05 without relative_step or scale_parameter is used as given (not the relative 1e-2)
    tx = M.adafactor(0.05, relative_step=False, scale_parameter=False, beta1=0.0)
    u, _ = tx.update(g, tx.init(w), w)
    np.testing.assert_allclose(u["b"], [-0.05, 0.05, -0.05, 0.05], rtol=1e-5)


def test_dynamic_lr_list_uses_ith_value_then_last():
    w0, gs = data()
    lrs = [0.1, 0.05, 0.02]

    def step(w, g, v, t, k):
        v = 0.9 * v + g
        return w - lrs[min(t - 1, 2)] * v, v

    got, _ = run(M.momentum(lrs, 0.9), w0, gs)
    close(got, reference(w0, gs, step, Z))


def test_registry_names_and_no_camelcase():
    for name in ("momentum", "sgd", "lars", "adam", "adam_weight_decay", "lazy_adam", "adam_offload", "lamb",
                 "adagrad", "proximal_adagrad", "ftrl", "rmsprop", "adafactor"):
        assert f"mindspore.{name}" in gx.registered_names()
    assert not any(n.split(".", 1)[1][0].isupper() for n in gx.registered_names() if n.startswith("mindspore."))
    with pytest.raises(ValueError, match="Cannot find"):
        gx.create("mindspore.nadam")


# MindSpore's class -> the snake_case factory it forwards to (each class's docstring names it)
FACTORY_OF = {"ASGD": "asgd", "AdaFactor": "adafactor", "AdaMax": "adamax", "Adadelta": "adadelta",
              "Adagrad": "adagrad", "Adam": "adam", "AdamOffload": "adam_offload",
              "AdamWeightDecay": "adam_weight_decay", "FTRL": "ftrl", "LARS": "lars", "Lamb": "lamb",
              "LazyAdam": "lazy_adam", "Momentum": "momentum", "ProximalAdagrad": "proximal_adagrad",
              "RMSProp": "rmsprop", "Rprop": "rprop", "SGD": "sgd", "thor": "thor"}


def test_factory_and_class_defaults_are_mindspores():
    """Every default of a class AND of the factory it forwards to (the class passes every
    argument, so the surface check, which reads the classes, never sees the factories' own)
    is MindSpore 2.10's as recorded in tests/data/surface/mindspore.json (inspect.signature
    of mindspore.nn.<class>); tuples by their repr (``Rprop``'s etas and step_sizes,
    AdaFactor's eps), which the surface check leaves out. gradxform's own ``skip_nonfinite``
    is off by default: MindSpore applies a non-finite update."""
    import inspect
    import json
    import pathlib
    surface = pathlib.Path(__file__).resolve().parent / "data" / "surface" / "mindspore.json"
    entries = [e for e in json.loads(surface.read_text())["entries"]
               if e["kind"] == "optimizer" and not e.get("out_of_scope")]
    assert sorted(e["mirror"].rsplit(".", 1)[1] for e in entries) == sorted(FACTORY_OF)
    checked = 0
    for e in entries:
        cls = e["mirror"].rsplit(".", 1)[1]
        for fn in {getattr(M, cls), getattr(M, FACTORY_OF[cls])}:
            sig = inspect.signature(fn).parameters
            if "skip_nonfinite" in sig:
                assert sig["skip_nonfinite"].default is False, fn
            for p in e["signature"]:
                if p.get("required") or p["name"] not in sig or p["kind"] == "VAR_KEYWORD":
                    continue
                got = sig[p["name"]].default
                if "value" in p:
                    assert got == p["value"] and type(got) is type(p["value"]), (fn, p["name"], got, p["value"])
                    checked += 1
                elif p["repr"].startswith("("):
                    assert repr(got) == p["repr"], (fn, p["name"], got, p["repr"])
                    checked += 1
    assert checked > 150
    for fn in (M.Adam, M.adam):  # Adam's **kwargs (adam.py 699-700): kwargs.get('use_lazy', False), 'use_offload'
        sig = inspect.signature(fn).parameters
        assert sig["use_lazy"].default is False and sig["use_offload"].default is False


def test_set_hyper_changes_learning_rate_without_retrace():
    w0, gs = data()
    tx = M.adam(0.01, weight_decay=0.01)
    params = {k: jnp.asarray(v) for k, v in w0.items()}
    state = tx.init(params)
    traces = []

    @jax.jit
    def step(g, s, p):
        traces.append(1)
        return tx.update(g, s, p)

    g = {k: jnp.asarray(v) for k, v in gs[0].items()}
    u1, _ = step(g, state, params)
    state2 = gx.set_hyper(state, learning_rate=0.02, weight_decay=0.0, beta1=0.8)
    u2, _ = step(g, state2, params)
    assert len(traces) == 1
    assert {"learning_rate", "weight_decay", "loss_scale", "beta1", "beta2", "epsilon"} <= set(gx.hyper_names(state))
    assert not np.allclose(np.asarray(u1["dense/bias"]), np.asarray(u2["dense/bias"]))


@pytest.mark.parametrize("make, exc, match", [
    (lambda: M.momentum("0.1", 0.9), TypeError, "learning_rate"),
    (lambda: M.momentum(-0.1, 0.9), ValueError, "learning_rate"),
    (lambda: M.momentum([[0.1]], 0.9), ValueError, "learning_rate"),
    (lambda: M.momentum(0.1, 1), TypeError, "momentum"),
    (lambda: M.momentum(0.1, -0.5), ValueError, "momentum"),
    (lambda: M.momentum(0.1, 0.9, weight_decay=-1.0), ValueError, "weight_decay"),
    (lambda: M.momentum(0.1, 0.9, weight_decay="x"), TypeError, "weight_decay"),
    # stricter than MindSpore, which reads True as 1.0 (optimizer.py _preprocess_weight_decay)
    (lambda: M.momentum(0.1, 0.9, weight_decay=True), TypeError, "weight_decay"),
    (lambda: M.momentum(0.1, 0.9, loss_scale=True), TypeError, "loss_scale"),
    (lambda: M.momentum(0.1, 0.9, loss_scale=0.0), ValueError, "loss_scale"),
    (lambda: M.momentum(0.1, 0.9, loss_scale="2"), TypeError, "loss_scale"),
    (lambda: M.momentum(0.1, 0.9, use_nesterov=1), TypeError, "use_nesterov"),
    (lambda: M.sgd(0.1, momentum=-1.0), ValueError, "momentum"),
    (lambda: M.sgd(0.1, dampening=-1.0), ValueError, "dampening"),
    (lambda: M.sgd(0.1, momentum=0.0, nesterov=True), ValueError, "nesterov"),
    (lambda: M.adam(beta1=1.0), ValueError, "beta1"),
    (lambda: M.adam(beta2=0.0), ValueError, "beta2"),
    (lambda: M.adam(eps=0.0), ValueError, "eps"),
    (lambda: M.adam(beta1=1), TypeError, "beta1"),
    (lambda: M.adam(use_locking=None), TypeError, "use_locking"),
    (lambda: M.adam(use_lazy=True, use_offload=True), ValueError, "use_lazy"),
    # adam.py 711-713: amsgrad with either of them (MindSpore: "no parameter named 'use_amsgrad'")
    (lambda: M.adam(use_amsgrad=True, use_lazy=True), ValueError, "use_amsgrad"),
    (lambda: M.Adam(None, use_amsgrad=True, use_offload=True), ValueError, "use_amsgrad"),
    (lambda: M.adam_weight_decay(eps=-1.0), ValueError, "eps"),
    # gradxform refuses what MindSpore ignores: AdamWeightDecay's and AdamOffload's construct never call
    # gradients_centralization (adam.py), so a group's grad_centralization=True would do nothing there
    (lambda: M.adam_weight_decay(groups=[{"params": "*", "grad_centralization": True}]), ValueError,
     "grad_centralization"),
    (lambda: M.adam_offload(groups=[{"params": "*", "grad_centralization": True}]), ValueError,
     "grad_centralization"),
    (lambda: M.lamb(0.1, beta2=1.5), ValueError, "beta2"),
    (lambda: M.ftrl(learning_rate=0.0), ValueError, "learning_rate"),
    (lambda: M.ftrl(lr_power=0.5), ValueError, "lr_power"),
    (lambda: M.ftrl(initial_accum=-0.1), ValueError, "initial_accum"),
    (lambda: M.ftrl(l1=-0.1), ValueError, "l1"),
    (lambda: M.ftrl(learning_rate=[0.1, 0.2]), TypeError, "learning_rate"),
    # ftrl.py 260-263: "Dynamic learning rate or group learning rate is currently not supported"
    (lambda: M.ftrl(groups=[{"params": ["w"], "lr": 0.01}]), ValueError, "per-group 'lr'"),
    (lambda: M.proximal_adagrad(accum=-1.0), ValueError, "accum"),
    (lambda: M.proximal_adagrad(l2=1), TypeError, "l2"),
    (lambda: M.adagrad(update_slots="yes"), TypeError, "update_slots"),
    (lambda: M.rmsprop(epsilon=0.0), ValueError, "epsilon"),
    (lambda: M.rmsprop(decay=-0.1), ValueError, "decay"),
    (lambda: M.rmsprop(centered=1), TypeError, "centered"),
    (lambda: M.adafactor(learning_rate=0.1), ValueError, "relative_step"),
    (lambda: M.adafactor(learning_rate=0.1, relative_step=False, warmup_init=True), ValueError, "warmup_init"),
    (lambda: M.adafactor(eps=(1e-30,)), ValueError, "eps"),
    (lambda: M.adafactor(decay_rate=1.0), ValueError, "decay_rate"),
    (lambda: M.adafactor(weight_decay=1.0), ValueError, "weight_decay"),
    # issue 15 item 6: the seed's Raises (beta1 in [0, 1), eps > 0), naming the argument
    (lambda: M.adafactor(beta1=1.5), ValueError, r"beta1 must be in \[0, 1\); got 1.5"),
    (lambda: M.adafactor(beta1=1.0), ValueError, "beta1"),
    (lambda: M.adafactor(beta1=-0.1), ValueError, "beta1"),
    (lambda: M.adafactor(beta1="0.9"), TypeError, "beta1"),
    (lambda: M.adafactor(eps=(0.0, 1e-3)), ValueError, r"eps\[0\] must be in \(0, inf\); got 0.0"),
    (lambda: M.adafactor(eps=(1e-30, -1e-3)), ValueError, r"eps\[1\]"),
    (lambda: M.adafactor(eps=(1e-30, 1)), TypeError, r"eps\[1\] must be a float"),
    (lambda: M.adafactor(eps=1e-3), TypeError, "eps"),
    (lambda: M.adafactor(loss_scale=0.0), ValueError, "loss_scale"),
    (lambda: M.adafactor(weight_decay=-0.1), ValueError, "weight_decay"),
    # AdaFactor.construct passes one lr to every parameter and never centralizes (adafactor.py 409-431)
    (lambda: M.adafactor(groups=[{"params": ["w"], "lr": 0.01}]), ValueError, "per-group 'lr'"),
    (lambda: M.adafactor(groups=[{"params": ["w"], "grad_centralization": True}]), ValueError,
     "grad_centralization"),
    (lambda: M.lars(M.momentum(0.1, 0.9), epsilon=1), TypeError, "epsilon"),
    (lambda: M.lars("sgd"), TypeError, "optimizer"),
    # a plain tuple, and a dict (it has .update, no .init), are not transformations
    (lambda: M.lars((1, 2)), TypeError, "optimizer"),
    (lambda: M.lars({}), TypeError, "optimizer"),
    (lambda: M.lars(M.momentum(0.1, 0.9), weight_decay=True), TypeError, "weight_decay"),
])
def test_arguments_checked_at_construction(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_lars_over_a_transformation_without_weight_decay_or_loss_scale():
    """LARS over an optax transformation (no weight decay, no loss scale to take over): g is used as
    given, no decay (lars.py ``_tensor_run_opt``: ``lars(weight, gradient, ..., 0.0, lr)`` without a
    decay flag). |w| = 5, |g| = 1: ratio = 0.5 * 5 / (1 + 0 + 0.5) = 5/3 (``LARSUpdate``); sgd(1.0)
    emits -5/3 * g. epsilon is large so that a loss scale of 2 would show. An int loss scale is taken
    as a float (MindSpore's ``Optimizer.__init__``: ``float(loss_scale)``)."""
    w, g = {"w": jnp.array([3.0, 4.0])}, {"w": jnp.array([0.6, 0.8])}
    tx = M.lars(optax.sgd(1.0), coefficient=0.5, epsilon=0.5)
    out, _ = tx.update(g, tx.init(w), w)
    np.testing.assert_allclose(out["w"], [-1.0, -4.0 / 3.0], rtol=1e-6)
    tx = M.lars(optax.sgd(1.0), coefficient=0.5, epsilon=0.5, loss_scale=2)
    out, _ = tx.update({"w": 2 * g["w"]}, tx.init(w), w)
    np.testing.assert_allclose(out["w"], [-1.0, -4.0 / 3.0], rtol=1e-6)
    # LARS's own weight decay 0.1 on every parameter (decay_filter=None): den = 1 + 0.1 * 5 + 0.5 = 2,
    # ratio 1.25, g + 0.1 * w = [0.9, 1.2]
    tx = M.lars(optax.sgd(1.0), coefficient=0.5, epsilon=0.5, weight_decay=0.1, decay_filter=None)
    out, _ = tx.update(g, tx.init(w), w)
    np.testing.assert_allclose(out["w"], [-1.125, -1.5], rtol=1e-6)


class _ScaledSgdState(typing.NamedTuple):
    hyper: dict


def test_lars_takes_over_a_loss_scale_kept_beside_other_hyperparameters():
    """lars.py 138-139, 158, 184-185: LARS unscales the gradient with the wrapped optimizer's
    reciprocal_scale and sets that optimizer's reciprocal_scale to 1.0, whatever else it holds. A
    wrapped rule whose hyperparameter dict keeps loss_scale beside its learning rate (as THOR's
    ThorState keeps damping): -lr * g / loss_scale, loss scale 4. |w| = 5, |g / 4| = 1: ratio
    0.5 * 5 / (1 + 0.5) = 5/3, so the rule emits -5/3 * g / 4 with its loss scale switched to 1 for the
    update, and its state keeps 4 (a second step is the same)."""
    def init(params):
        return _ScaledSgdState({"learning_rate": jnp.asarray(1.0), "loss_scale": jnp.asarray(4.0)})

    def update(g, state, params=None, **extra_args):
        h = state.hyper
        return jax.tree.map(lambda x: -h["learning_rate"] * x / h["loss_scale"], g), state

    w, g = {"w": jnp.array([3.0, 4.0])}, {"w": jnp.array([2.4, 3.2])}
    tx = M.lars(optax.GradientTransformation(init, update), coefficient=0.5, epsilon=0.5)
    state = tx.init(w)
    for _ in range(2):
        out, state = tx.update(g, state, w)
        np.testing.assert_allclose(out["w"], [-1.0, -4.0 / 3.0], rtol=1e-6)
        assert float(state.inner.hyper["loss_scale"]) == 4.0


def test_lars_ratio_is_0_where_the_denominator_underflows_to_0():
    """epsilon 0, no decay, and a gradient whose float32 squares underflow (1e-30^2 = 1e-60 is 0 in
    float32, so |g| = 0): the denominator |g| + wd |w| + epsilon is 0. ``LARSUpdate`` divides by it
    (coefficient |w| / 0 = inf, times g: inf), the exact-arithmetic ratio would be 0.5 * 5 / 1.4e-30;
    gradxform's rule (the docstring's footnote) is ratio 0 there: sgd(1.0) emits exactly 0, finite."""
    w = {"w": jnp.array([3.0, 4.0], jnp.float32)}
    tx = M.lars(optax.sgd(1.0), coefficient=0.5, epsilon=0.0)
    out, _ = tx.update({"w": jnp.array([1e-30, -1e-30], jnp.float32)}, tx.init(w), w)
    np.testing.assert_array_equal(np.asarray(out["w"]), [0.0, 0.0])


def test_lars_refuses_a_weight_decay_inside_the_wrapped_rule():
    """MindSpore's LARS.__init__ (``lars.py`` 153-159) switches off the base class's decay only
    (decay_flags, exec_weight_decay); AdaFactor's decoupled decay (``adafactor.py`` 117-118, its own
    ``weight_decay_flag``) stays on, so LARS(AdaFactor(weight_decay=0.1)) decays twice there. gradxform
    zeroed that decay and published none: no decay at all, silently. It is now refused, naming it;
    weight decay 0 in AdaFactor, the decay given to LARS, works (found by mutants #38, #41)."""
    p = {"w": jnp.array([[3.0, 4.0], [1.0, 2.0]])}
    with pytest.raises(ValueError, match=r"mindspore\.lars\(optimizer=\.\.\.\).*AdaFactorState\.weight_decay=0\.1"):
        M.lars(M.adafactor(learning_rate=0.01, relative_step=False, weight_decay=0.1)).init(p)
    M.lars(M.adafactor(learning_rate=0.01, relative_step=False), weight_decay=0.1).init(p)


def test_no_loss_scale_where_mindspore_has_none():
    """AdamWeightDecay and Lamb take no loss_scale (adam.py, lamb.py: ``super().__init__(learning_rate,
    params, weight_decay)``), so their state has no ``loss_scale`` to set; Adam has one."""
    p = {"w": jnp.ones(2)}
    assert "loss_scale" not in gx.hyper_names(M.adam_weight_decay(weight_decay=0.1).init(p))
    assert "loss_scale" not in gx.hyper_names(M.lamb(0.1, weight_decay=0.1).init(p))
    assert "loss_scale" in gx.hyper_names(M.adam().init(p))


def test_int_loss_scale_and_weight_decay_taken_as_floats():
    """MindSpore ``optimizer.py`` ``Optimizer.__init__``: ``if isinstance(loss_scale, int): loss_scale =
    float(loss_scale)``; ``_preprocess_weight_decay``: ``float(weight_decay)`` for an int."""
    from gradxform.mindspore._common import parse
    o = parse("mindspore.momentum", 0.1, 1, 2)
    assert (o.loss_scale, o.weight_decay) == (2.0, 1.0) and type(o.loss_scale) is float


def test_adafactor_ranges_hold_for_set_hyper_too():
    state = M.adafactor(beta1=0.0).init({"w": jnp.ones((2, 3))})
    assert float(gx.get_hyper(gx.set_hyper(state, beta1=0.5), "beta1")) == 0.5
    with pytest.raises(ValueError, match="beta1"):
        gx.set_hyper(state, beta1=1.0)
    with pytest.raises(ValueError, match="epsilon1"):
        gx.set_hyper(state, epsilon1=0.0)


# -- zero-size leaves and gradients checked where they come in --------------------------------

ZERO_SIZE = {"dense/weight": jnp.asarray([[0.5, -1.0, 2.0], [0.25, -0.75, 1.5]], jnp.float32),
             "empty_rows": jnp.zeros((0, 3), jnp.float32), "empty_cols": jnp.zeros((3, 0), jnp.float32),
             "empty": jnp.zeros((0,), jnp.float32)}


def _two_steps(tx, params):
    state = tx.init(params)
    for k in range(2):
        grads = jax.tree.map(lambda p: jnp.cos(jnp.arange(p.size, dtype=jnp.float32) + k).reshape(p.shape),
                             params)
        updates, state = tx.update(grads, state, params)
        assert jax.tree.map(jnp.shape, updates) == jax.tree.map(jnp.shape, params)
        params = gx.apply_updates(params, updates)
    return params, state


def test_lazy_adam_zero_size_leaves():
    # lazy rows reshaped a (0, 3) gradient to (0, -1): ZeroDivisionError
    params, state = _two_steps(M.lazy_adam(0.01), ZERO_SIZE)
    dense, _ = _two_steps(M.lazy_adam(0.01), {"dense/weight": ZERO_SIZE["dense/weight"]})
    np.testing.assert_array_equal(params["dense/weight"], dense["dense/weight"])  # others unchanged


@pytest.mark.parametrize("kw", [{}, {"learning_rate": 0.05, "relative_step": False, "beta1": 0.0}])
def test_adafactor_zero_size_leaves_keep_a_finite_state(kw):
    # a (0, 3) leaf's column moments were mean over 0 rows = NaN (a (3, 0) leaf's row moments)
    params, state = _two_steps(M.adafactor(**kw), ZERO_SIZE)
    for path, leaf in jax.tree_util.tree_flatten_with_path((params, state))[0]:
        assert np.all(np.isfinite(np.asarray(leaf))), jax.tree_util.keystr(path)
    assert np.asarray(state[-1].exp_avg_sq_col["empty_rows"]).shape == (3,)
    assert np.asarray(state[-1].exp_avg_sq_row["empty_cols"]).shape == (3,)
    dense, _ = _two_steps(M.adafactor(**kw), {"dense/weight": ZERO_SIZE["dense/weight"]})
    np.testing.assert_array_equal(params["dense/weight"], dense["dense/weight"])


def test_lars_checks_gradients_against_params():
    # LARS broadcast a (1, 4) gradient to the (3, 4) parameter and divided an int32 one into
    # float32 before the wrapped optimizer's checks saw them
    params = {"dense": {"kernel": jnp.ones((3, 4)), "bias": jnp.zeros(4)}}
    tx = M.lars(M.momentum(0.1, 0.9), weight_decay=1e-3)
    state = tx.init(params)
    grads = {"dense": {"kernel": jnp.ones((1, 4)), "bias": jnp.ones(4)}}
    with pytest.raises(ValueError, match=r"mindspore\.lars\.update: updates\['dense'\]\['kernel'\] has shape "
                                         r"\(1, 4\) but params\['dense'\]\['kernel'\] has shape \(3, 4\)"):
        tx.update(grads, state, params)
    grads = {"dense": {"kernel": jnp.ones((3, 4), jnp.int32), "bias": jnp.ones(4)}}
    with pytest.raises(TypeError, match=r"mindspore\.lars\.update: updates\['dense'\]\['kernel'\] is int32"):
        tx.update(grads, state, params)
    with pytest.raises(ValueError, match=r"mindspore\.lars\.update: the gradients and the parameters have "
                                         r"different pytree structures"):
        tx.update({"dense": {"kernel": jnp.ones((3, 4))}}, state, params)
    # float16 parameters: a float32 gradient reaches the wrapped optimizer, which takes it
    # with master weights and refuses it without
    half = jax.tree.map(lambda x: x.astype(jnp.float16), params)
    g32 = jax.tree.map(lambda x: jnp.full(x.shape, 0.5, jnp.float32), params)
    mp = M.lars(gx.create("mxnet.sgd", learning_rate=0.1, momentum=0.9, multi_precision=True))
    updates, _ = mp.update(g32, mp.init(half), half)
    stepped = gx.apply_updates(half, updates)
    assert all(w.dtype == jnp.float16 and np.all(np.isfinite(np.asarray(w))) for w in jax.tree.leaves(stepped))
    assert not np.array_equal(np.asarray(stepped["dense"]["bias"]), np.asarray(half["dense"]["bias"]))
    plain = M.lars(M.momentum(0.1, 0.9))
    with pytest.raises(TypeError, match=r"updates\['dense'\]\['bias'\] is float32 but params there are float16"):
        plain.update(g32, plain.init(half), half)
