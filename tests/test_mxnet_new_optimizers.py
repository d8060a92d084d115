"""MXNet LAMB, LARS and GroupAdaGrad (issue 24) against a float64 NumPy
transcription of MXNet 1.9.1's ``optimizer.py`` and kernels, and the
transcription against the goldens MXNet itself wrote (tools/mxnet_goldens.py
``layerwise_cases``; tests/test_mxnet_parity.py checks gradxform against the
same goldens at rtol 1e-5).

Tolerances: float32 rtol 2e-5, atol 2e-6 over 20 steps: the transcription is
float64, gradxform and MXNet round every operation to float32 and sum the
norms in another order, a few ulp per step. float16 with multi_precision:
rtol/atol 1e-3, one float16 ulp (the float32 master copies agree to ~1e-6).
The transcription never imports gradxform.
"""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from goldens_io import cases, load
from goldens_io import meta as golden_meta

NEW = ("lamb", "lars", "groupadagrad")
GOLDENS = [p for p in cases("mxnet") if golden_meta(p)["optimizer"] in NEW]


# -- the transcription (float64) ------------------------------------------------------------

class Factor:
    """mx.lr_scheduler.FactorScheduler without stop_factor_lr or warmup."""

    def __init__(self, step, factor, base_lr):
        self.step, self.factor, self.base_lr = step, factor, base_lr

    def __call__(self, n):
        return self.base_lr * self.factor ** max(0, (n - 1) // self.step)


class MX:
    """``mx.optimizer.Optimizer``'s counts, ``_get_lr``/``_get_wd`` and the
    per-rule ``update`` of LAMB, LARS and GroupAdaGrad, in float64."""

    def __init__(self, name, kwargs, names=None, lr_mult=None, wd_mult=None, sched=None):
        kw = dict(kwargs)
        self.name = name
        own_lr = {"lamb": 0.001}.get(name)
        lr = kw.pop("learning_rate", own_lr)
        if sched is not None and lr is not None:
            sched.base_lr = lr
        self.lr = lr if lr is not None else (sched.base_lr if sched else 0.01)
        self.sched = sched
        self.wd = kw.pop("wd", 0.0)
        self.rs = kw.pop("rescale_grad", 1.0)
        self.clip = kw.pop("clip_gradient", None)
        self.mp = kw.pop("multi_precision", False)
        self.kw = kw
        self.names = names
        self.lr_mult = dict(lr_mult or {})
        self.wd_mult = {}
        if names:  # set_wd_mult: LARS decays only *_weight; the base class *_weight and *_gamma
            keep = ("_weight",) if name == "lars" else ("_weight", "_gamma")
            self.wd_mult = {n: 0.0 for n in names if not n.endswith(keep)}
        self.wd_mult.update(wd_mult or {})
        self.counts, self.num_update, self.state = {}, 0, {}
        self.cur_lr = self.last_lr = None

    def _name(self, i):
        return self.names[i] if self.names else str(i)

    def _count(self, i):
        self.counts[i] = self.counts.get(i, 0) + 1
        self.num_update = max(self.num_update, self.counts[i])

    def _lr(self, i):
        lr = self.sched(self.num_update) if self.sched else self.lr
        return lr * (self.lr_mult.get(self._name(i), 1.0) if self.names else 1.0)

    def _wd(self, i):
        return self.wd * (self.wd_mult.get(self._name(i), 1.0) if self.names else 1.0)

    def _g(self, g):
        g = g * self.rs
        return np.clip(g, -self.clip, self.clip) if self.clip and self.clip > 0 else g

    def step(self, weights, grads):
        """One Gluon step: ``updater(list(indices), grads, weights)``."""
        if self.name == "lars":
            return self._lars(weights, grads)
        out = []
        for i, (w, g) in enumerate(zip(weights, grads)):
            self._count(i)
            out.append(getattr(self, "_" + self.name)(i, w, g, self._lr(i), self._wd(i)))
        return out

    def _lamb(self, i, w, g, lr, wd):
        k = self.kw
        b1, b2, eps = k.get("beta1", 0.9), k.get("beta2", 0.999), k.get("epsilon", 1e-6)
        m, v = self.state.setdefault(i, (np.zeros_like(w), np.zeros_like(w)))
        g = self._g(g)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        t = self.counts[i]
        if k.get("bias_correction", True):
            u = (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps) + wd * w
        else:
            u = m / (np.sqrt(v) + eps) + wd * w
        self.state[i] = (m, v)
        r1, r2 = np.linalg.norm(w), np.linalg.norm(u)
        if k.get("lower_bound"):
            r1 = max(r1, k["lower_bound"])
        if k.get("upper_bound"):
            r1 = min(r1, k["upper_bound"])
        ratio = 1.0 if r1 == 0 or r2 == 0 else r1 / r2
        return w - lr * ratio * u

    def _groupadagrad(self, i, w, g, lr, wd):
        eps = self.kw.get("eps", 1e-5)
        h = self.state.setdefault(i, np.zeros((w.shape[0],) + (1,) * (w.ndim - 1)))
        g = self._g(g)
        h = h + np.mean(g * g, axis=tuple(range(1, w.ndim)), keepdims=True)
        self.state[i] = h
        return w - lr * g / np.sqrt(h + eps)

    def _lars(self, weights, grads):
        k = self.kw
        mom, eta, eps = k.get("momentum", 0.0), k.get("eta", 0.001), k.get("eps", 0.0)
        for i in range(len(weights)):
            self._count(i)
        base = self.sched(self.num_update) if self.sched else self.lr
        self.last_lr = base if self.cur_lr is None else self.cur_lr
        self.cur_lr = base
        if mom > 0 and k.get("momentum_correction", True) and self.last_lr != 0:
            mom = mom * (self.cur_lr / self.last_lr)
        out = []
        for i, (w, g) in enumerate(zip(weights, grads)):
            lr, wd = self._lr(i), self._wd(i)
            if not self._name(i).endswith(("gamma", "beta", "bias")):
                w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g) * self.rs
                if w_norm > 0 and g_norm > 0:
                    lr = lr * eta * w_norm / (g_norm + wd * w_norm + eps)
            step = -lr * (self._g(g) + wd * w)
            if mom > 0:
                step = self.state[i] = mom * self.state.get(i, np.zeros_like(w)) + step
            out.append(w + step)
        return out


def transcription(meta, w0, grads):
    sched = meta.get("scheduler")
    sched = Factor(**sched["kwargs"]) if sched else None
    ref = MX(meta["optimizer"], meta["kwargs"], meta["names"] if meta["idx2name"] else None,
             meta["lr_mult"], meta["wd_mult"], sched)
    dtype = np.dtype(meta["dtype"])
    w = [x.astype(np.float64) for x in w0]
    out = []
    for g in grads:
        w = ref.step(w, [x.astype(np.float64) for x in g])
        if dtype == np.float16 and not ref.mp:
            w = [x.astype(dtype).astype(np.float64) for x in w]
        out.append([x.astype(dtype) for x in w])
    return out


def tolerance(dtype):
    return dict(rtol=1e-3, atol=1e-3) if np.dtype(dtype) == np.float16 else dict(rtol=2e-5, atol=2e-6)


# -- the tests ------------------------------------------------------------------------------------

def test_every_new_optimizer_has_goldens():
    assert {load(p)[0]["optimizer"] for p in GOLDENS} == set(NEW)


@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
def test_transcription_matches_mxnet(path):
    meta, w0, grads, expected = load(path)
    if meta["optimizer"] in ("lamb", "lars"):
        assert not np.any(w0[1]), "parameter 1 must start at 0 (a trust ratio's zero-norm branch)"
    for t, (got, want) in enumerate(zip(transcription(meta, w0, grads), expected)):
        for i, (a, b) in enumerate(zip(got, want)):
            np.testing.assert_allclose(a.astype(np.float64), b.astype(np.float64),
                                       err_msg=f"{path.stem}: step {t + 1}, {meta['names'][i]}",
                                       **tolerance(meta["dtype"]))


def _build(meta):
    kwargs = dict(meta["kwargs"])
    if meta.get("scheduler"):
        kwargs["lr_scheduler"] = gx.lr_scheduler.FactorScheduler(**meta["scheduler"]["kwargs"])
    if meta["idx2name"]:
        kwargs["param_idx2name"] = dict(enumerate(meta["names"]))
        by_index = {n: i for i, n in enumerate(meta["names"])}
        for what in ("lr_mult", "wd_mult"):
            if meta[what]:
                kwargs[what] = {by_index[k]: v for k, v in meta[what].items()}
    return gx.create("mxnet." + meta["optimizer"], **kwargs)


@pytest.mark.parametrize("path", GOLDENS, ids=[p.stem for p in GOLDENS])
@pytest.mark.parametrize("fused", [False, True], ids=["per_leaf", "fused"])
def test_gradxform_matches_the_transcription(path, fused):
    """On the goldens' inputs, per leaf and on `gradxform.fused` flat buffers."""
    meta, w0, grads, _ = load(path)
    tx = _build(meta)
    if fused:
        tx = gx.fused(tx)
    params = [jnp.asarray(w) for w in w0]
    state = tx.init(params)
    step = jax.jit(lambda p, s, g: (lambda u, s2: (gx.apply_updates(p, u), s2))(*tx.update(g, s, p)))
    for t, (g, want) in enumerate(zip(grads, transcription(meta, w0, grads))):
        params, state = step(params, state, [jnp.asarray(x) for x in g])
        for i, (a, b) in enumerate(zip(params, want)):
            assert a.dtype == b.dtype
            np.testing.assert_allclose(np.asarray(a, np.float64), b.astype(np.float64),
                                       err_msg=f"{path.stem}: step {t + 1}, {meta['names'][i]}",
                                       **tolerance(meta["dtype"]))


@pytest.mark.parametrize("name, kwargs", [
    ("lamb", dict(learning_rate=0.02, beta1=0.8, epsilon=1e-4, wd=0.05, upper_bound=1.0)),
    ("lamb", dict(learning_rate=0.02, bias_correction=False, lower_bound=2.0, clip_gradient=0.3)),
])
def test_named_tree_with_large_gradients(name, kwargs):
    """A pytree in leaf order, gradients up to 30x larger every 4th step."""
    rng = np.random.RandomState(5)
    shapes = [(6, 5), (5,), (3, 4, 2)]
    w0 = [rng.randn(*s) for s in shapes]
    w0[1][:] = 0.0
    grads = [[rng.randn(*s) * (30.0 if t % 4 == 0 else 0.5) for s in shapes] for t in range(25)]
    ref = MX(name, kwargs)
    tx = gx.create("mxnet." + name, **kwargs)
    params = {"a": jnp.asarray(w0[0], jnp.float32), "b": jnp.asarray(w0[1], jnp.float32),
              "c": jnp.asarray(w0[2], jnp.float32)}
    state = tx.init(params)
    w = w0
    for g in grads:
        w = ref.step(w, [x.astype(np.float32).astype(np.float64) for x in g])
        u, state = tx.update({k: jnp.asarray(x, jnp.float32) for k, x in zip("abc", g)}, state, params)
        params = gx.apply_updates(params, u)
        for k, want in zip("abc", w):
            np.testing.assert_allclose(np.asarray(params[k], np.float64), want, rtol=2e-5, atol=2e-6, err_msg=k)
    assert math.isfinite(float(np.abs(w[1]).max()))


def test_lamb_bounds_and_flags_are_checked():
    with pytest.raises(TypeError, match="lower_bound"):
        gx.mxnet.LAMB(lower_bound="1")
    with pytest.raises(TypeError, match="bias_correction"):
        gx.mxnet.LAMB(bias_correction=1)
    with pytest.raises(ValueError, match="beta1"):
        gx.mxnet.LAMB(0.01, 1.5)
    # MXNet: a bound that is not > 0 is no bound
    assert gx.mxnet.LAMB(lower_bound=0).init([jnp.ones(2)]) is not None


def test_lars_names_by_param_idx2name_on_a_named_tree():
    """param_idx2name's values name the leaves: LARS skips the ratio for
    *_bias/*_gamma and decays only *_weight by name, whatever the leaf order
    (JAX sorts dict keys: bn_gamma, fc_bias, fc_weight; MXNet's indices differ)."""
    rng = np.random.RandomState(7)
    mx_order = ["fc_weight", "fc_bias", "bn_gamma"]
    shapes = {"fc_weight": (5, 4), "fc_bias": (4,), "bn_gamma": (4,)}
    w0 = {n: rng.randn(*shapes[n]) for n in mx_order}
    grads = [{n: rng.randn(*shapes[n]) for n in mx_order} for _ in range(15)]
    sched = lambda: gx.lr_scheduler.FactorScheduler(step=4, factor=0.5, base_lr=0.1)  # noqa: E731
    kw = dict(momentum=0.9, eta=0.05, wd=0.02, rescale_grad=0.5, clip_gradient=0.4)
    ref = MX("lars", dict(kw, learning_rate=0.1), names=mx_order, sched=Factor(4, 0.5, 0.1))
    tx = gx.mxnet.LARS(**kw, learning_rate=0.1, lr_scheduler=sched(), param_idx2name=dict(enumerate(mx_order)))
    params = {n: jnp.asarray(w0[n], jnp.float32) for n in mx_order}
    state = tx.init(params)
    w = [w0[n] for n in mx_order]
    for g in grads:
        w = ref.step(w, [g[n].astype(np.float32).astype(np.float64) for n in mx_order])
        u, state = tx.update({n: jnp.asarray(g[n], jnp.float32) for n in mx_order}, state, params)
        params = gx.apply_updates(params, u)
        for n, want in zip(mx_order, w):
            np.testing.assert_allclose(np.asarray(params[n], np.float64), want, rtol=2e-5, atol=2e-6, err_msg=n)


def test_lars_and_groupadagrad_arguments():
    with pytest.raises(ValueError, match="weight decay is not supported"):
        gx.mxnet.GroupAdaGrad(wd=0.01)
    with pytest.raises(TypeError, match="wd_mult"):
        gx.mxnet.LARS(wd_mult=lambda names: np.ones(len(names)))
    with pytest.raises(TypeError, match="momentum_correction"):
        gx.mxnet.LARS(momentum_correction="yes")
    with pytest.raises(ValueError, match="eta"):
        gx.mxnet.LARS(eta=-1.0)
    # MXNet's positional order: LARS(momentum, lazy_update, eta, ...), GroupAdaGrad(eps)
    a, b = gx.mxnet.LARS(0.9, True, 0.01), gx.create("mxnet.lars", momentum=0.9, eta=0.01)
    p = [jnp.ones((2, 2))]
    assert gx.get_hyper(a.init(p), "eta") == gx.get_hyper(b.init(p), "eta") == pytest.approx(0.01)
    assert gx.get_hyper(gx.mxnet.GroupAdaGrad(1e-3).init(p), "eps") == pytest.approx(1e-3)
