"""The Paddle optimizer family against float64 NumPy transcriptions of Paddle's
kernels (paddle/phi/kernels/..., read for each rule), 12 steps, rtol 1e-5 /
atol 1e-6 (float32 against float64); groups, need_clip, float16 master
weights; names, get_lr/set_lr and argument checks."""
import functools
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from trajectories import run_jitted
from gradxform import paddle as P
from gradxform import schedules as S
from gradxform._state_paths import find_states
from gradxform.paddle._adam import AdamState
from gradxform.paddle._adaptive import RAdamState
from gradxform.paddle._common import GroupState

SHAPES = {"b": (4,), "w": (3, 4)}  # flatten order: b, w


def setup(seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    w0 = {k: rng.standard_normal(s).astype(dtype) for k, s in SHAPES.items()}
    gs = [{k: (0.5 * rng.standard_normal(s)).astype(dtype) for k, s in SHAPES.items()} for _ in range(12)]
    return w0, gs


run = run_jitted


def reference(rule, w0, gs, lr=0.01, wd=0.0, **kw):
    """Runs ``rule(w, g, lr, t, state, **kw) -> w`` in float64, with L2 ``wd`` added to g first."""
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    st = {k: {} for k in w}
    for t, g in enumerate(gs, 1):
        for k in w:
            gk = g[k].astype(np.float64) + wd * w[k]
            w[k] = rule(w[k], gk, lr, t, st[k], **kw)
    return w


def r_sgd(w, g, lr, t, s):
    return w - lr * g


def r_momentum(w, g, lr, t, s, mu=0.9, nesterov=False, rescale=1.0, l2=0.0):
    g = rescale * g + l2 * w
    s["v"] = mu * s.get("v", 0.0) + g
    return w - (g + mu * s["v"]) * lr if nesterov else w - lr * s["v"]


def r_adam(w, g, lr, t, s, b1=0.9, b2=0.999, eps=1e-8, amsgrad=False, coeff=0.0):
    w = w - lr * coeff * w
    s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
    v = s["vmax"] = np.maximum(s.get("vmax", 0.0), s["v"]) if amsgrad else s["v"]
    lr_t = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    return w - lr_t * s["m"] / (np.sqrt(v) + eps * np.sqrt(1 - b2 ** t))


def r_adamax(w, g, lr, t, s, b1=0.9, b2=0.999, eps=1e-8):
    s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
    s["u"] = np.maximum(np.abs(g), b2 * s.get("u", 0.0) + eps)
    return w - lr / (1 - b1 ** t) * s["m"] / s["u"]


def r_adagrad(w, g, lr, t, s, eps=1e-6, init=0.0):
    s["h"] = s.get("h", init) + g * g
    return w - lr * g / (np.sqrt(s["h"]) + eps)


def r_adadelta(w, g, lr, t, s, rho=0.95, eps=1e-6):
    s["eg"] = rho * s.get("eg", 0.0) + (1 - rho) * g * g
    d = -np.sqrt(s.get("ex", 0.0) + eps) / np.sqrt(s["eg"] + eps) * g
    s["ex"] = rho * s.get("ex", 0.0) + (1 - rho) * d * d
    return w + lr * d


def r_rmsprop(w, g, lr, t, s, rho=0.95, eps=1e-6, mom=0.0, centered=False):
    s["ms"] = rho * s.get("ms", 0.0) + (1 - rho) * g * g
    den = s["ms"] + eps
    if centered:
        s["mg"] = rho * s.get("mg", 0.0) + (1 - rho) * g
        den = den - s["mg"] ** 2
    s["mom"] = mom * s.get("mom", 0.0) + lr * g / np.sqrt(den)
    return w - s["mom"]


def r_lamb(w, g, lr, t, s, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
    r = (s["m"] / (1 - b1 ** t)) / (np.sqrt(s["v"] / (1 - b2 ** t)) + eps) + wd * w
    pn, tn = np.linalg.norm(w), np.linalg.norm(r)
    ratio = pn / tn if pn > 0 and tn > 0 and wd != 0 else 1.0
    return w - lr * ratio * r


def r_nadam(w, g, lr, t, s, b1=0.9, b2=0.999, eps=1e-8, md=0.004):
    mu_t = b1 * (1 - 0.5 * 0.96 ** (t * md))
    mu_t1 = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * md))
    s["mup"] = s.get("mup", 1.0) * mu_t
    s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
    mh = mu_t1 * s["m"] / (1 - s["mup"] * mu_t1) + (1 - mu_t) * g / (1 - s["mup"])
    return w - lr * mh / (np.sqrt(s["v"] / (1 - b2 ** t)) + eps)


def r_radam(w, g, lr, t, s, b1=0.9, b2=0.999, eps=1e-8):
    rho_inf = 2 / (1 - b2) - 1
    rho_t = rho_inf - 2 * t * b2 ** t / (1 - b2 ** t)
    s["m"] = b1 * s.get("m", 0.0) + (1 - b1) * g
    s["v"] = b2 * s.get("v", 0.0) + (1 - b2) * g * g
    mh = s["m"] / (1 - b1 ** t)
    if rho_t > 5:
        r = np.sqrt((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t))
        return w - lr * mh * r * np.sqrt(1 - b2 ** t) / (np.sqrt(s["v"]) + eps)
    return w - lr * mh


def r_rprop(w, g, lr, t, s, lo=1e-5, hi=50.0, en=0.5, ep=1.2):
    prod = g * s.get("prev", 0.0)
    eta = np.where(prod > 0, ep, np.where(prod < 0, en, 1.0))
    g = np.where(prod < 0, 0.0, g)
    s["lrs"] = np.clip(s.get("lrs", np.full_like(w, lr)) * eta, lo, hi)
    s["prev"] = g
    return w - np.sign(g) * s["lrs"]


def r_asgd(w, g, lr, t, s, n=1):
    y = s.setdefault("y", [np.zeros_like(w) for _ in range(n)])
    i = (t - 1) % n
    s["d"] = s.get("d", 0.0) - y[i] + g
    y[i] = g
    return w - lr * s["d"] / min(t, n)


CASES = [
    ("sgd", dict(learning_rate=0.1), r_sgd, dict(lr=0.1)),
    ("sgd_l2", dict(learning_rate=0.1, weight_decay=0.05), r_sgd, dict(lr=0.1, wd=0.05)),
    ("momentum", dict(learning_rate=0.05), r_momentum, dict(lr=0.05)),
    ("momentum_nesterov_rescale_l2", dict(learning_rate=0.05, momentum=0.8, use_nesterov=True, rescale_grad=0.5,
                                          weight_decay=P.L2Decay(0.02)),
     r_momentum, dict(lr=0.05, mu=0.8, nesterov=True, rescale=0.5, l2=0.02)),
    ("adam", dict(learning_rate=0.01), r_adam, dict(lr=0.01)),
    ("adam_amsgrad", dict(learning_rate=0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, amsgrad=True),
     r_adam, dict(lr=0.01, b1=0.8, b2=0.99, eps=1e-6, amsgrad=True)),
    ("adamw", dict(learning_rate=0.01, weight_decay=0.1), r_adam, dict(lr=0.01, coeff=0.1)),
    ("adamax", dict(learning_rate=0.01), r_adamax, dict(lr=0.01)),
    ("adagrad", dict(learning_rate=0.1, initial_accumulator_value=0.2), r_adagrad, dict(lr=0.1, init=0.2)),
    ("adadelta", dict(learning_rate=0.5, rho=0.9), r_adadelta, dict(lr=0.5, rho=0.9)),
    ("rmsprop", dict(learning_rate=0.01, momentum=0.5, centered=True), r_rmsprop,
     dict(lr=0.01, mom=0.5, centered=True)),
    ("lamb", dict(learning_rate=0.01), r_lamb, dict(lr=0.01)),
    ("nadam", dict(learning_rate=0.01), r_nadam, dict(lr=0.01)),
    ("radam", dict(learning_rate=0.01, beta2=0.9), r_radam, dict(lr=0.01, b2=0.9)),
    ("rprop", dict(learning_rate=0.01, learning_rate_range=(1e-4, 0.05)), r_rprop, dict(lr=0.01, lo=1e-4, hi=0.05)),
    ("asgd", dict(learning_rate=0.05, batch_num=3), r_asgd, dict(lr=0.05, n=3)),
]


@pytest.mark.parametrize("label, kw, rule, ref", CASES, ids=[c[0] for c in CASES])
def test_float64_transcription_12_steps(label, kw, rule, ref):
    name = label.split("_")[0]
    w0, gs = setup()
    got, _ = run(getattr(P, name)(**kw), w0, gs)
    want = reference(rule, w0, gs, **ref)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6, err_msg=f"{label} {k}")


def test_groups_lr_ratio_regularizer_clip_per_group_and_unnamed_frozen():
    w0, gs = setup()
    w0["frozen"] = np.ones(2, np.float32)
    gs = [dict(g, frozen=np.ones(2, np.float32)) for g in gs]
    tx = P.sgd(0.1, parameters=[{"params": ["w"], "learning_rate": 0.5, "weight_decay": P.L1Decay(0.02)},
                                {"params": ["b"], "grad_clip": None}],
               weight_decay=0.05, grad_clip=P.ClipGradByGlobalNorm(0.5))
    got, _ = run(tx, w0, gs)
    w = {k: v.astype(np.float64) for k, v in w0.items()}
    for g in gs:
        gw = g["w"].astype(np.float64)
        gw = gw * 0.5 / max(np.linalg.norm(gw), 0.5)  # the group's own global norm
        w["w"] = w["w"] - 0.05 * (gw + 0.02 * np.sign(w["w"]))
        w["b"] = w["b"] - 0.1 * (g["b"] + 0.05 * w["b"])
    for k in ("w", "b"):
        np.testing.assert_allclose(got[k], w[k], rtol=1e-5, atol=1e-6)
    assert np.array_equal(got["frozen"], w0["frozen"])


def test_need_clip_leaves_a_parameter_out_of_the_norm():
    g = {"a": jnp.asarray([3.0, 4.0]), "b": jnp.asarray([0.0, 12.0])}
    c = P.ClipGradByGlobalNorm(1.0, need_clip={"b": False})
    out, _ = c.update(g, c.init(g))
    np.testing.assert_allclose(np.asarray(out["a"]), [0.6, 0.8], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(out["b"]), [0.0, 12.0])


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam"])
def test_float16_multi_precision_keeps_a_float32_master(name):
    w0, gs = setup(dtype=np.float16)
    tx = getattr(P, name)(learning_rate=0.01, multi_precision=True)
    got, _ = run(tx, w0, gs)
    rule = {"sgd": r_sgd, "momentum": r_momentum, "adam": r_adam}[name]
    want = reference(rule, {k: v.astype(np.float32) for k, v in w0.items()},
                     [{k: v.astype(np.float32) for k, v in g.items()} for g in gs], lr=0.01)
    for k in want:
        assert got[k].dtype == np.float16
        # one float16 rounding of the float32 master copy
        np.testing.assert_allclose(got[k].astype(np.float32), want[k], rtol=1e-3, atol=1e-3)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        getattr(P, name)(learning_rate=0.01).init({k: jnp.asarray(v) for k, v in w0.items()})
    assert any("multi_precision" in str(r.message) for r in rec)


def test_registered_names_and_class_name_constructors():
    for n in ("sgd", "momentum", "adam", "adamw", "adamax", "adagrad", "adadelta", "rmsprop", "lamb", "nadam",
              "radam", "rprop", "asgd"):
        assert f"paddle.{n}" in gx.registered_names()
    assert isinstance(P.L2Decay(0.1), type(P.l2_decay(0.1))) and P.L2Decay(0.1).coeff == 0.1
    assert P.clip_grad_by_norm(1.0).kind == P.ClipGradByNorm(1.0).kind == "norm"


def test_get_lr_and_set_lr_follow_paddle():
    p = {"w": jnp.ones(3)}
    st = P.momentum(0.1).init(p)
    assert P.get_lr(P.set_lr(st, 0.2)) == pytest.approx(0.2)
    with pytest.raises(TypeError, match="set_lr"):
        P.set_lr(st, "0.1")
    opt = P.momentum(S.PaddleStepDecay(0.1, step_size=2, gamma=0.5))
    sched = opt.init(p)
    with pytest.raises(RuntimeError, match="LRScheduler"):
        opt.set_lr(sched, 0.2)
    lrs = []  # Paddle: get_lr() before step t is the scheduler at last_epoch = t
    for _ in range(5):
        lrs.append(opt.get_lr(sched))
        _, sched = opt.update(p, sched, p)
    np.testing.assert_allclose(lrs, [0.1, 0.1, 0.05, 0.05, 0.025], rtol=1e-6)
    plateau = P.sgd(S.PaddleReduceOnPlateau(0.1)).init(p)
    with pytest.raises(RuntimeError, match="LRScheduler"):
        P.set_lr(plateau, 0.2)
    assert P.get_lr(plateau) == pytest.approx(0.1)


@pytest.mark.parametrize("fn, kw, exc, match", [
    (P.sgd, dict(learning_rate=None), ValueError, "learning_rate"),
    (P.momentum, dict(momentum=None), ValueError, "momentum"),
    (P.adam, dict(beta1=1.0), ValueError, "beta1"),
    (P.adam, dict(epsilon=-1.0), ValueError, "epsilon"),
    (P.adamw, dict(weight_decay=P.L2Decay(0.1)), TypeError, "weight_decay"),
    (P.rmsprop, dict(learning_rate=0.1, rho=-0.1), ValueError, "rho"),
    (P.rprop, dict(learning_rate=1.0, learning_rate_range=(1e-5, 0.5)), ValueError, "learning_rate_range"),
    (P.rprop, dict(etas=(1.2, 0.5)), ValueError, "etas"),
    (P.sgd, dict(weight_decay="l2"), TypeError, "weight_decay"),
    (P.sgd, dict(grad_clip=1.0), TypeError, "grad_clip"),
    (P.sgd, dict(parameters={"params": ["w"]}), TypeError, "parameters"),
    (P.adam, dict(parameters=[{"params": ["w"], "momentum": 0.5}]), ValueError, "momentum"),
    (P.adam, dict(parameters=[{"params": ["w"], "beta1": 1.5}]), ValueError, "beta1"),
    (P.rmsprop, dict(learning_rate=0.1, parameters=[{"params": ["w"], "centered": 1}]), TypeError, "centered"),
    (P.sgd, dict(multi_precision=1), TypeError, "multi_precision"),
])
def test_arguments_checked_at_construction(fn, kw, exc, match):
    with pytest.raises(exc, match=match):
        fn(**kw)


def test_a_group_naming_no_parameter_or_two_groups_sharing_one_is_an_error():
    p = {"w": jnp.ones(3), "b": jnp.ones(2)}
    with pytest.raises(ValueError, match="matches no parameter"):
        P.sgd(0.1, parameters=["nope"]).init(p)
    with pytest.raises(ValueError, match="more than one"):
        P.sgd(0.1, parameters=[{"params": ["w"]}, {"params": ["w", "b"]}]).init(p)


@pytest.mark.parametrize("name, kw, exact", [
    ("adam", dict(parameters=[{"params": ["w"], "learning_rate": 0.5, "weight_decay": P.L1Decay(0.01)},
                              {"params": ["b"]}], weight_decay=0.02, grad_clip=P.ClipGradByValue(0.3)), True),
    ("momentum", dict(parameters=[{"params": ["w"], "weight_decay": P.L1Decay(0.01)}, {"params": ["b"]}],
                      weight_decay=P.L2Decay(0.02), use_nesterov=True), True),
    ("lamb", dict(grad_clip=P.ClipGradByGlobalNorm(0.5)), False),
    ("adamw", dict(parameters=[{"params": ["w"], "weight_decay": 0.2}, {"params": ["b"]}],
                   grad_clip=P.ClipGradByGlobalNorm(0.5, need_clip={"b": False})), False),
])
def test_groups_and_clips_fuse(name, kw, exact):
    w0, gs = setup()
    tx = getattr(P, name)(learning_rate=0.01, **kw)
    ref, _ = run(tx, w0, gs[:4])
    got, state = run(gx.fused(tx, strict=True), w0, gs[:4])
    for k in ref:
        if exact:  # elementwise pieces with per-group scalars: bit for bit
            assert np.array_equal(ref[k], got[k]), k
        else:  # a norm summed over buffers in another order
            np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-7)


class _Param:
    """Paddle's ``model.parameters()`` hands out objects with a ``.name``."""

    def __init__(self, name):
        self.name = name


def test_group_params_as_objects_a_pattern_or_a_predicate():
    # Paddle optimizer.py 2136: each parameter of a group gets optimize_attr['learning_rate'] =
    # param_group.get('learning_rate', 1.0); the SGD kernel then steps by lr * that ratio.
    # A leaf no group names is not optimized; its GroupState ratio is ParamAttr's default 1.0.
    p = {k: jnp.ones(2) for k in ("a", "b", "c", "d")}
    g = {"a": jnp.asarray([1.0, -2.0]), "b": jnp.asarray([3.0, 4.0]), "c": jnp.asarray([0.5, 8.0]),
         "d": jnp.asarray([1.0, 1.0])}
    tx = P.sgd(0.1, parameters=[{"params": [_Param("a")], "learning_rate": 0.5},
                                {"params": "b", "learning_rate": 0.25},
                                {"params": lambda n: n == "c"}])
    state = tx.init(p)
    u, _ = jax.jit(tx.update)(g, state, p)
    for k, ratio in (("a", 0.5), ("b", 0.25), ("c", 1.0), ("d", 0.0)):
        np.testing.assert_allclose(np.asarray(u[k]), -0.1 * ratio * np.asarray(g[k]), rtol=1e-6, err_msg=k)
    gs = find_states(state, GroupState)[0]  # per-leaf vectors, an entry per leaf in flatten order
    at = {k: gx.param_names(p).index(k) for k in "abcd"}
    assert [int(gs.slot[at[k]]) for k in "abcd"] == [0, 1, 2, -1]
    assert [float(gs.lr_ratio[at[k]]) for k in "abcd"] == [0.5, 0.25, 1.0, 1.0]


@pytest.mark.parametrize("parameters, exc, match", [
    ([{"learning_rate": 0.5}], ValueError, "params should be set"),  # Paddle optimizer.py 283: assert 'params' in
    ([{"params": ["w"]}, {"learning_rate": 0.5}], ValueError, "params should be set"),
    ([{"params": {"w"}}], TypeError, "'params' must be"),  # Paddle optimizer.py 2108: a set is a TypeError
    ([{"params": ["w", 3]}], TypeError, "'params' must be"),
    ([{"params": 3}], TypeError, "'params' must be"),
    ([{"params": ["w"]}, "b"], TypeError, "all names or all group dicts"),
    (["w", 3], TypeError, "all names or all group dicts"),
    ({"params": ["w"]}, TypeError, "not a dict"),  # Paddle optimizer.py 231: dict type is a TypeError
    ("w", TypeError, "not a dict"),
])
def test_group_params_of_another_form_are_refused(parameters, exc, match):
    with pytest.raises(exc, match=match):
        P.sgd(0.1, parameters=parameters)


def test_multi_precision_regularizes_the_low_precision_gradient():
    # Paddle adds the regularizer to the float16 gradient (append_regularization_ops on the
    # float16 param and grad), then the kernel steps the float32 master: g = fp16(1 + fp16(1e-4 * 1))
    # = 1.0 exactly (float16's spacing at 1 is 2**-10), so master = 1 - 1.0 * 1 = 0. Regularizing
    # the float32 master in float32 would give 1.0001 and -1e-4.
    p = {"w": jnp.ones(1, jnp.float16)}
    tx = P.sgd(1.0, weight_decay=1e-4, multi_precision=True)
    u, _ = jax.jit(tx.update)({"w": jnp.ones(1, jnp.float16)}, tx.init(p), p)
    assert np.float16(np.asarray(p["w"]) + np.asarray(u["w"]))[0] == 0.0


@pytest.mark.parametrize("name", ["adamax", "adadelta"])
def test_optimizers_without_multi_precision_warn_for_float16(name):
    # Paddle adamax.py 198 / adadelta.py 158: self._multi_precision = False (no such argument),
    # and _add_accumulators warns for a float16 parameter (adamax.py 234-241, adadelta.py 185-192)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        getattr(P, name)(learning_rate=0.01).init({"w": jnp.ones(2, jnp.float16)})
    assert any("multi_precision" in str(r.message) for r in rec)


def test_clip_grad_by_value_bounds_as_paddle():
    # Paddle nn/clip.py 448-454: min None -> `assert max > 0.0; min = -max`; a given min is not
    # compared with max (paddle.clip(x, 1, 1) is 1 everywhere); gradxform refuses only min > max.
    with pytest.raises(ValueError, match="max must be > 0"):
        P.ClipGradByValue(0.0)
    g = {"x": jnp.asarray([-3.0, 0.2, 3.0])}
    for clip, want in ((P.ClipGradByValue(0.5), [-0.5, 0.2, 0.5]), (P.ClipGradByValue(1.0, min=1.0), [1.0] * 3)):
        out, _ = clip.update(g, clip.init(None))
        np.testing.assert_array_equal(np.asarray(out["x"]), np.float32(want))
    with pytest.raises(ValueError, match="min must be <= max"):
        P.ClipGradByValue(1.0, min=1.5)


def test_need_clip_an_exact_name_wins_over_an_earlier_glob():
    # need_clip_flags: an exact name first, else the first key that selects the leaf
    g = {"w1": jnp.asarray([3.0, 4.0]), "w2": jnp.asarray([0.0, 12.0])}
    c = P.ClipGradByGlobalNorm(1.0, need_clip={"w*": False, "w1": True})
    out, _ = jax.jit(c.update)(g, c.init(g))
    np.testing.assert_allclose(np.asarray(out["w1"]), [0.6, 0.8], rtol=1e-6)  # 5 -> 1: norm of w1 alone
    np.testing.assert_array_equal(np.asarray(out["w2"]), [0.0, 12.0])


def test_a_list_of_names_is_one_group_with_the_optimizers_options():
    # Paddle optimizer.py 2130-2138: the optimizer's weight_decay is each listed parameter's
    # regularizer, optimize_attr['learning_rate'] is 1.0; the clip runs first (_apply_optimize).
    # g = clip([3, -0.5], -1, 1) + 0.5 * [1, 2] = [1.5, 0.5]; u = -0.1 * g; "f" is not listed.
    p = {"f": jnp.ones(2), "w": jnp.asarray([1.0, 2.0])}
    tx = P.sgd(0.1, parameters=["w"], weight_decay=0.5, grad_clip=P.ClipGradByValue(1.0))
    u, _ = jax.jit(tx.update)({"f": jnp.ones(2), "w": jnp.asarray([3.0, -0.5])}, tx.init(p), p)
    np.testing.assert_allclose(np.asarray(u["w"]), [-0.15, -0.05], rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(u["f"]), [0.0, 0.0])


@pytest.mark.parametrize("label, kw, rule, ref", [
    # |w| < 1 and, with epsilon 1, |r| < 1: the trust ratio's guards (norms > 0, not > 1) and both
    # norms matter; lamb_weight_decay 0: Paddle skips the adaptation (ratio 1; lamb.py 264-270 and
    # impl/lamb_kernel_impl.h); a large epsilon shows its place in Adam's and Adamax's kernels
    ("lamb_norms_below_one", dict(epsilon=1.0), r_lamb, dict(eps=1.0)),
    # (reference's own wd is the L2 on g: r_lamb's decay goes through partial; checked in Paddle 3.3.1
    # by hand: Lamb(lamb_weight_decay=0.0, epsilon=1.0) steps with ratio 1, 0.01 with |w| / |r|)
    ("lamb_no_decay", dict(lamb_weight_decay=0.0, epsilon=1.0), functools.partial(r_lamb, wd=0.0), dict(eps=1.0)),
    ("adam_large_epsilon", dict(epsilon=0.5), r_adam, dict(eps=0.5)),
    ("adamax_large_epsilon", dict(epsilon=0.5), r_adamax, dict(eps=0.5)),
    # lr_ratio(p) multiplies the learning rate of the decay and of the Adam step (the docstring's
    # rule, as Paddle's GPU kernel; Paddle refuses lr_ratio on CPU, adamw.py 220): lr 0.01 * 0.5
    ("adamw_lr_ratio", dict(weight_decay=0.1, lr_ratio=lambda p: 0.5), functools.partial(r_adam, coeff=0.1),
     dict(lr=0.005)),
], ids=["lamb_norms_below_one", "lamb_no_decay", "adam_large_epsilon", "adamax_large_epsilon", "adamw_lr_ratio"])
def test_small_weights_and_large_epsilon_against_the_transcription(label, kw, rule, ref):
    w0, gs = setup()
    w0 = {k: (0.05 * v).astype(np.float32) for k, v in w0.items()}
    got, _ = run(getattr(P, label.split("_")[0])(learning_rate=0.01, **kw), w0, gs[:4])
    want = reference(rule, w0, gs[:4], **{"lr": 0.01, **ref})
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=f"{label} {k}")


@pytest.mark.parametrize("name", ["adam", "adamw", "adamax"])
def test_adam_bounds_are_paddles(name):
    # Paddle adam.py / adamw.py 202-207, adamax.py: 0 <= beta1 < 1, 0 <= beta2 < 1, 0 <= epsilon
    getattr(P, name)(beta1=0.0, beta2=0.0, epsilon=0.0)
    for kw in (dict(beta1=-0.1), dict(beta2=1.0), dict(epsilon=-1e-9)):
        with pytest.raises(ValueError, match=next(iter(kw))):
            getattr(P, name)(**kw)


def test_adamw_lr_ratio_bounds_and_adam_without_params():
    p = {"a": jnp.ones(2), "b": jnp.ones(2)}
    for ratios in ({"a": 0.0, "b": 0.5}, {"a": 1.0, "b": 3.0}):  # finite ratios >= 0 are taken
        P.adamw(lr_ratio=lambda i, r=ratios: r[i.name]).init(p)
    for bad in (-0.5, float("nan"), float("inf")):  # one bad ratio among good ones is refused
        with pytest.raises(ValueError, match="lr_ratio"):
            P.adamw(lr_ratio=lambda i, b=bad: b if i.name == "b" else 1.0).init(p)
    # Adam's rule reads no weight (no decoupled decay: AdamState.decay is 0), so params may be left out
    tx = P.adam(0.1)
    state = tx.init(p)
    assert [int(d) for d in find_states(state, AdamState)[0].decay] == [0, 0]
    u, _ = jax.jit(tx.update)({"a": jnp.ones(2), "b": -jnp.ones(2)}, state)
    # first step: m^ / (sqrt(v^) + eps') = g / (|g| + 1e-8 * sqrt(0.001)): -0.1 * sign(g)
    np.testing.assert_allclose(np.asarray(u["a"]), [-0.1, -0.1], rtol=1e-6)


def test_skip_nonfinite_is_off_by_default():
    # Paddle has no such guard: a NaN gradient reaches the weights. gradxform's skip_nonfinite is an
    # opt-in keyword of every Paddle optimizer (its default is not in Paddle's recorded signatures).
    names = [n for n in gx.registered_names() if n.startswith("paddle.")]
    assert names  # every Paddle optimizer, however many are registered
    for n in names:
        assert inspect.signature(getattr(P, n.split(".")[1])).parameters["skip_nonfinite"].default is False, n
    p = {"w": jnp.ones(2)}
    tx = P.sgd(0.1)
    u, _ = jax.jit(tx.update)({"w": jnp.asarray([np.nan, 1.0])}, tx.init(p), p)
    assert np.isnan(np.asarray(u["w"])[0]) and np.asarray(u["w"])[1] == np.float32(-0.1)


def test_a_global_norm_clip_and_lamb_are_not_bit_exact_when_fused():
    # fused: the group's norm is summed over the flat buffers, another order than leaf by leaf
    assert not gx.fused.bit_exact(P.sgd(0.1, grad_clip=P.ClipGradByGlobalNorm(1.0)))
    assert gx.fused.bit_exact(P.sgd(0.1, grad_clip=P.ClipGradByValue(1.0)))
    assert not gx.fused.bit_exact(P.lamb(0.1))  # Lamb's per-leaf norms: segment sums over a buffer


def test_need_clip_the_first_key_that_selects_a_leaf_decides_it():
    # need_clip_flags: else the first key that selects the leaf; Paddle nn/clip.py (ClipGradByNorm,
    # ClipGradByGlobalNorm _dygraph_clip): a need_clip=False parameter's gradient is passed on as it is
    g = {"b": jnp.asarray([0.0, 5.0]), "w1": jnp.asarray([3.0, 4.0]), "w2": jnp.asarray([0.0, 12.0])}
    for c in (P.ClipGradByGlobalNorm(1.0, need_clip={"w*": False, "*": True}),
              P.ClipGradByNorm(1.0, need_clip={"w*": False, "*": True})):
        out, _ = jax.jit(c.update)(g, c.init(g))
        np.testing.assert_allclose(np.asarray(out["b"]), [0.0, 1.0], rtol=1e-6)  # 5 -> 1
        for k in ("w1", "w2"):
            np.testing.assert_array_equal(np.asarray(out[k]), np.asarray(g[k]))


def test_a_regularizer_alone_and_its_defaults():
    # Paddle regularizer.py 113 / 230: L1Decay / L2Decay(coeff: float = 0.0); 142-143: L1 is
    # scale(sign(w), coeff), 259: L2 is scale(w, coeff); the optimizer adds the term to the gradient.
    # For float16 the scale op computes in float32 and rounds once: fp16(0.5 * [2, -3]) = [1, -1.5].
    for cls in (P.L1Decay, P.L2Decay, P.l1_decay, P.l2_decay):
        assert cls().coeff == 0.0
    w = {"w": jnp.asarray([2.0, -3.0], jnp.float16)}
    g = {"w": jnp.asarray([1.0, 1.0], jnp.float16)}
    for reg, want in ((P.L2Decay(0.5), [2.0, -0.5]), (P.L1Decay(0.5), [1.5, 0.5])):
        out, _ = reg.update(g, reg.init(w), w)
        assert out["w"].dtype == jnp.float16
        np.testing.assert_array_equal(np.asarray(out["w"]), np.float16(want))


def test_weight_decay_true_is_refused_and_a_leaf_outside_the_decayed_group_keeps_its_gradients_bits():
    # gradxform is stricter than Paddle here: optimizer.py 268-269 takes an int (so True) as
    # L2Decay(float(value)); a bool weight_decay is refused as a likely mistake, naming the types.
    for bad in (True, "l2"):
        with pytest.raises(TypeError, match="L1Decay / paddle.L2Decay"):
            P.sgd(0.1, weight_decay=bad)
        # AdamW's coefficient: adamw.py 208-211 (Paddle's message; a bool refused here too)
        with pytest.raises(TypeError, match="weight_decay should be int, float"):
            P.adamw(weight_decay=bad)
    # Paddle regularizes only the parameters with a regularizer; the sgd kernel then computes
    # w - lr * g = -0.0 - 0.1 * (-0.0) = +0.0 for the other group's w = g = -0.0
    p = {"a": jnp.ones(1), "b": jnp.asarray([-0.0])}
    tx = P.sgd(0.1, parameters=[{"params": ["a"], "weight_decay": 0.5}, {"params": ["b"]}])
    u, _ = jax.jit(tx.update)({"a": jnp.ones(1), "b": jnp.asarray([-0.0])}, tx.init(p), p)
    np.testing.assert_allclose(np.asarray(u["a"]), [-0.15], rtol=1e-6)
    b = np.asarray(p["b"] + u["b"])
    assert b[0] == 0.0 and not np.signbit(b[0])


def test_lamb_ratio_is_1_where_the_update_norm_underflows():
    # r = g / epsilon = 1e-23 per element (g * g underflows, so m2 = 0): r != 0 but sum(r * r) is 0 in
    # float32, and Paddle's kernel takes ratio 1 there (|w| > 0, |r| = 0). Run in Paddle 3.3.1 by hand
    # (CPU, Lamb(0.1, lamb_weight_decay=0.0, always_adapt=True), one step from these values):
    # [9.9999901e-19, -1.0000011e-18]; the ratio |w| / 1 would leave w as it was.
    p = {"w": jnp.asarray(np.float32([1e-18, -1e-18]))}
    tx = P.lamb(0.1, lamb_weight_decay=0.0, always_adapt=True)
    u, _ = jax.jit(tx.update)({"w": jnp.asarray(np.float32([1e-29, 1e-29]))}, tx.init(p), p)
    np.testing.assert_array_equal(np.asarray(p["w"] + u["w"]), np.float32([9.9999901e-19, -1.0000011e-18]))


@pytest.mark.parametrize("name, kw, hyper, taken, refused", [
    # rprop.py 139: '0.0 < etas[0] < 1.0 < etas[1]'; 130-135: '0.0 < learning_rate_range[0] <= ...'
    ("rprop", {}, "eta_positive", (1.0000001, 1.5, 3.0), (1.0, 0.5)),
    ("rprop", {}, "eta_negative", (1e-7, 0.5, 0.9999999), (0.0, 1.0)),
    ("rprop", {}, "lr_min", (1e-9,), (0.0, -1e-5)),
    # rmsprop.py 199-204: epsilon, momentum, rho >= 0, no upper bound
    ("rmsprop", dict(learning_rate=0.1), "rho", (0.0, 2.0), (-1e-9,)),
    ("rmsprop", dict(learning_rate=0.1), "momentum", (0.0, 2.0), (-1e-9,)),
    # nadam.py 184: momentum_decay >= 0
    ("nadam", {}, "momentum_decay", (0.0, 5.0), (-1e-9,)),
])
def test_set_hyper_ranges_of_the_adaptive_rules_are_paddles(name, kw, hyper, taken, refused):
    # set_hyper checks a value against the range the family declares (paddle/_adaptive.py RANGES),
    # which is Paddle's own check at construction
    state = getattr(P, name)(**kw).init({"w": jnp.ones(2)})
    for v in taken:
        got = gx.set_hyper(state, **{hyper: v})
        assert gx.get_hyper(got, hyper) == pytest.approx(v), (hyper, v)
    for v in refused:
        with pytest.raises(ValueError, match=hyper):
            gx.set_hyper(state, **{hyper: v})


def test_rprop_construction_bounds_are_paddles():
    # rprop.py 130-140: '0.0 < learning_rate_range[0] <= learning_rate <= learning_rate_range[1]' and
    # '0.0 < etas[0] < 1.0 < etas[1]'; each bound itself (run in Paddle 3.3.1 by hand: the same outcomes)
    P.rprop(0.01, learning_rate_range=(0.01, 0.01))
    for kw in (dict(learning_rate_range=(0.0, 1.0)), dict(learning_rate=0.01, learning_rate_range=(0.02, 1.0)),
               dict(learning_rate=0.01, learning_rate_range=(1e-5, 0.005))):
        with pytest.raises(ValueError, match="learning_rate_range"):
            P.rprop(**kw)
    P.rprop(etas=(1e-7, 1.0000001))
    for etas in ((0.0, 1.2), (1.0, 1.2), (0.5, 1.0)):
        with pytest.raises(ValueError, match="etas"):
            P.rprop(etas=etas)


def _kernel_rho_t(b2, steps):
    """Paddle's float32 RAdam kernel's rho_t after ``steps`` (radam_kernel_impl.h 74-108): every
    product stored, so rounded, before the next operation (NumPy float32 scalars do the same)."""
    f = np.float32
    rho, pw = f(1), f(1)
    for _ in range(steps):
        pw = pw * b2
        rho = (rho * (b2 - pw) + pw) / (f(1) - pw)
    return f(2) / (f(1) - b2) - f(1) - f(2) * rho


def test_radam_rho_t_of_exactly_5_is_not_rectified():
    # radam_kernel_impl.h 74-108 (Paddle 3.3.1, T = float32): rho_inf = 2 / (1 - beta2) - 1, the rho
    # recurrence, rho_t = rho_inf - 2 rho; `if (rho_t > 5)` rectifies, else w -= lr * m1^. With beta2 =
    # float32 0.76780677 the kernel's float32 rho_t at step 7 is exactly 5.0 (its float64 value with that
    # beta2 is 4.9999999), so step 7 is not rectified and step 8 is. Run in Paddle by hand (w = [1, -2,
    # 0.5], g_t = t [0.3, -0.2, 0.1], lr 0.1): step 7 moved w by [-0.132527828, 0.0883518457,
    # -0.0441759229], lr * m1^, as the float64 transcription r_radam. rtol 1e-5 / atol 1e-7.
    b2 = np.float32(0.76780677)
    assert _kernel_rho_t(b2, 7) == 5.0
    w0 = {"w": np.asarray([1.0, -2.0, 0.5], np.float32)}
    gs = [{"w": np.asarray([0.3, -0.2, 0.1], np.float32) * t} for t in range(1, 9)]
    for steps in (7, 8):
        got, _ = run(P.radam(learning_rate=0.1, beta2=float(b2)), w0, gs[:steps])
        want = reference(r_radam, w0, gs[:steps], lr=0.1, b2=float(b2))
        np.testing.assert_allclose(got["w"], want["w"], rtol=1e-5, atol=1e-7)
    want6 = reference(r_radam, w0, gs[:6], lr=0.1, b2=float(b2))["w"]
    np.testing.assert_allclose(reference(r_radam, w0, gs[:7], lr=0.1, b2=float(b2))["w"] - want6,
                               [-0.132527828, 0.0883518457, -0.0441759229], rtol=1e-6)


def test_radam_rho_recurrence_is_rounded_as_paddles_kernel_under_jit():
    # beta2 = float32 0.8397686: Paddle's float32 kernel (each product stored, so rounded, before the
    # next operation) gets rho_t == 5.0 exactly at step 6 and takes the plain step; Paddle 3.3.1 by hand
    # (w = [1, -2, 0.5], g_t = t [0.3, -0.2, 0.1], lr 0.1): step 6 moved w[0] by -0.11415654. A jitted
    # update whose products XLA:CPU contracted into fused multiply-adds got rho_t an ulp above 5 and
    # rectified (-0.027378). Both the jitted and the op-by-op update must give Paddle's step.
    b2 = np.float32(0.8397686)
    assert _kernel_rho_t(b2, 6) == 5.0
    tx = P.radam(learning_rate=0.1, beta2=float(b2))
    for update in (tx.update, jax.jit(tx.update)):
        p = {"w": jnp.asarray([1.0, -2.0, 0.5], jnp.float32)}
        s = tx.init(p)
        for t in range(1, 7):
            u, s = update({"w": jnp.asarray([0.3, -0.2, 0.1], jnp.float32) * t}, s, p)
            p = gx.apply_updates(p, u)
        np.testing.assert_allclose(float(u["w"][0]), -0.11415654, rtol=1e-6)


def test_radam_epsilon_past_the_rectifier_threshold_and_paddles_initial_state():
    # Paddle's rho_t passes 5 at the 6th step (beta2 0.9: 5.39); epsilon 0.5 shows its place in
    # sqrt(1 - beta2^t) / (sqrt(m2) + epsilon) (radam.py -> radam kernel; the default 1e-8 is below float32
    # resolution there). 8 steps against the float64 transcription r_radam, rtol 1e-5 / atol 1e-7.
    w0, gs = setup()
    got, _ = run(P.radam(learning_rate=0.01, beta2=0.9, epsilon=0.5), w0, gs[:8])
    want = reference(r_radam, w0, gs[:8], lr=0.01, b2=0.9, eps=0.5)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=k)
    # radam.py 213-231: beta1_pow, beta2_pow and rho accumulators start at fill_value=1.0
    st = find_states(P.radam().init({"w": jnp.ones(2)}), RAdamState)[0]
    assert [np.shape(x) for x in (st.beta1_pow, st.beta2_pow, st.rho)] == [(1,)] * 3  # one leaf: 'w'
    assert [float(x[0]) for x in (st.beta1_pow, st.beta2_pow, st.rho)] == [1.0, 1.0, 1.0]
    # rprop.py 121: learning_rate_range defaults to (1e-5, 50)
    assert inspect.signature(P.rprop).parameters["learning_rate_range"].default == (1e-5, 50)
