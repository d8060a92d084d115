"""MXNet family against the NumPy transcription in mxnet_reference.py.

The goldens pin gradxform to MXNet on fixed configurations; this crosses
each optimizer with the options a port uses (wd, rescale_grad,
clip_gradient, lr_mult/wd_mult by name and glob, begin_num_update, every
scheduler (the reference runs its own transcription of mxnet/lr_scheduler.py,
checked against MXNet's recorded rates), float16 master weights) over 12 steps. Tolerance: float32 rtol
2e-5, atol 2e-6 (operation order differs from the kernels' by a few ulp per
step); float16 with master weights rtol/atol 1e-3 (one float16 ulp).
"""
from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
import mxnet_schedules_reference as mxs
from mxnet_reference import Reference

NAMES = ["enc/dense0_weight", "enc/dense0_bias", "head/bn_gamma"]
SHAPES = [(4, 3), (3,), (2, 2)]
OWN = {
    "sgd": dict(momentum=0.9), "ccsgd": dict(momentum=0.5), "nag": dict(momentum=0.9),
    "signum": dict(momentum=0.8, wd_lh=0.02), "ftml": dict(beta1=0.5, epsilon=1e-3), "adam": dict(beta1=0.8),
    "adagrad": dict(eps=1e-6), "rmsprop": dict(centered=True, gamma2=0.8, clip_weights=3.0),
    "adadelta": dict(rho=0.8), "ftrl": dict(lamda1=0.02, beta=0.5), "adamax": dict(beta2=0.99),
    # nadam/ftml epsilon 1e-3: at the default 1e-8 beside sqrt(v) its sign is under every tolerance
    "nadam": dict(schedule_decay=0.01, epsilon=1e-3), "dcasgd": dict(lamda=0.3),
    # begin_epoch=1: num_cums starts at init_updates + 1 = 4 (LBSGD._cumulate_gradient), inside the warmup
    # of 6 (the goldens all start at 0)
    "lbsgd": dict(momentum=0.9, warmup_strategy="sqrt", warmup_epochs=2, updates_per_epoch=3, batch_scale=2,
                  begin_epoch=1),
}
LR = {"adadelta": None, "ftrl": 0.1, "adam": 0.01, "rmsprop": 0.01, "nadam": 0.01, "adamax": 0.01}
SCHEDULE_KWARGS = {
    "factor": ("FactorScheduler", dict(step=4, factor=0.7, base_lr=0.05)),
    "multifactor": ("MultiFactorScheduler", dict(step=[2, 5, 9], factor=0.5, base_lr=0.05)),
    "poly": ("PolyScheduler", dict(max_update=10, base_lr=0.05, pwr=2, final_lr=0.001, warmup_steps=3,
                                   warmup_begin_lr=0.01)),
    "cosine": ("CosineScheduler", dict(max_update=10, base_lr=0.05, final_lr=0.001, warmup_steps=2,
                                       warmup_mode="constant", warmup_begin_lr=0.02)),
}
# (gradxform's scheduler, the reference's own transcription of MXNet's): the same arguments
SCHEDULES = {k: (lambda c=c, kw=kw: getattr(gx.lr_scheduler, c)(**kw),
                 lambda c=c, kw=kw: getattr(mxs, c)(**kw)) for k, (c, kw) in SCHEDULE_KWARGS.items()}


def problem(dtype, steps=12, seed=0):
    rng = np.random.RandomState(seed)
    w0 = [rng.randn(*s).astype(dtype) for s in SHAPES]
    grads = [[(rng.randn(*s) * (3.0 if t % 4 == 0 else 0.5)).astype(dtype) for s in SHAPES]
             for t in range(steps)]
    return w0, grads


def run_both(name, common, sched=None, dtype=np.float32, lr_mult=None, wd_mult=None):
    w0, grads = problem(dtype)
    lr = LR.get(name, 0.05)
    kwargs = dict(OWN.get(name, {}), **common)
    mults = {}
    if lr_mult is not None:
        mults["lr_mults"] = lr_mult[1]
    if wd_mult is not None:
        mults["wd_mults"] = wd_mult[1]
    ref = Reference(name, learning_rate=None if sched else lr, lr_scheduler=sched[1]() if sched else None,
                    **mults, **({"ftrl_lr": lr} if name == "ftrl" else {}), **kwargs)
    tx = gx.create(name, **({} if sched or lr is None else {"learning_rate": lr}),
                   **({"lr_scheduler": sched[0]()} if sched else {}),
                   **({"lr_mult": lr_mult[0]} if lr_mult else {}),
                   **({"wd_mult": wd_mult[0]} if wd_mult else {}), **kwargs)
    params = {"enc": {"dense0_weight": jnp.asarray(w0[0]), "dense0_bias": jnp.asarray(w0[1])},
              "head": {"bn_gamma": jnp.asarray(w0[2])}}
    assert gx.param_names(params) == ["enc/dense0_bias", "enc/dense0_weight", "head/bn_gamma"]
    order = [1, 0, 2]  # MXNet index i = leaf order[i]... rebuilt below in leaf order
    del order
    leaf_w0 = [w0[1], w0[0], w0[2]]
    state = tx.init(params)
    # op by op: no compile per configuration; the compiled step is checked against the goldens
    step = lambda p, s, g: (lambda u, s2: (gx.apply_updates(p, u), s2))(*tx.update(g, s, p))  # noqa: E731
    ref_w = leaf_w0
    for g in grads:
        leaf_g = [g[1], g[0], g[2]]
        ref_w = ref.step(ref_w, leaf_g)
        tree_g = {"enc": {"dense0_weight": jnp.asarray(g[0]), "dense0_bias": jnp.asarray(g[1])},
                  "head": {"bn_gamma": jnp.asarray(g[2])}}
        params, state = step(params, state, tree_g)
        got = jax.tree.leaves(params)
        tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float16 else dict(rtol=2e-5, atol=2e-6)
        for a, b, nm in zip(got, ref_w, sorted(NAMES)):
            assert a.dtype == b.dtype, nm
            np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), err_msg=nm, **tol)
    return params


ALL = sorted(OWN)
COMMON = dict(wd=0.01, rescale_grad=0.5, clip_gradient=1.5)


@pytest.mark.parametrize("name", ALL)
def test_plain(name):
    run_both(name, {})


@pytest.mark.parametrize("name", ALL)
def test_wd_rescale_clip_and_begin(name):
    run_both(name, dict(COMMON, begin_num_update=3))


@pytest.mark.parametrize("name", ["sgd", "adam", "nag", "lbsgd", "ftrl", "signum"])
@pytest.mark.parametrize("sched", sorted(SCHEDULES))
def test_schedules(name, sched):
    run_both(name, COMMON, sched=SCHEDULES[sched])


@pytest.mark.parametrize("name", ["sgd", "adam", "rmsprop", "adagrad", "nadam", "ftrl"])
def test_multipliers_by_name_and_glob(name):
    # leaf order: 0 enc/dense0_bias, 1 enc/dense0_weight, 2 head/bn_gamma
    run_both(name, COMMON, lr_mult=({"enc/*_bias": 2.0, "head/bn_gamma": 0.5}, {0: 2.0, 2: 0.5}),
             wd_mult=({"head/*": 0.0}, {2: 0.0}))


@pytest.mark.parametrize("name", ["sgd", "nag", "adam", "rmsprop", "ftml", "adamax"])
def test_float16_master_weights(name):
    run_both(name, dict(COMMON, multi_precision=True), dtype=np.float16)


def test_scheduler_transcription_reproduces_mxnets_recorded_rates():
    """The reference's schedulers against MXNet 1.9.1's own (goldens/mxnet/schedulers.npz,
    num_update 1..60, every kind with and without warmup): float64 both sides, rtol 1e-12."""
    z = np.load(os.path.join(os.path.dirname(__file__), "goldens", "mxnet", "schedulers.npz"))
    meta = json.loads(str(z["meta"]))
    assert len(meta["schedulers"]) == 14
    for key, spec in meta["schedulers"].items():
        sched = getattr(mxs, spec["type"])(**spec["kwargs"])
        got = [sched(n) for n in meta["num_update"]]
        np.testing.assert_allclose(got, z["lr_" + key], rtol=1e-12, atol=0, err_msg=key)


# -- the common keywords (gradxform/mxnet/_common.py) as MXNet 1.9.1 reads them ----------------
# One eager step of plain SGD (or NAG without momentum: MXNet's NAG then calls sgd_update too,
# optimizer.py NAG._update_impl) on a tiny named tree: sgd_update is
# ``w -= lr * (clip(rescale * g) + wd * w)`` with MXNet's per-parameter lr and wd, so every
# multiplier is read off the update. Expected multipliers from MXNet's source, cited per test.

MX = {"bn_beta": 1.0, "bn_gamma": -2.0, "fc1_bias": -1.0, "fc1_weight": 2.0}   # leaf order = sorted


def _mx_update(name="sgd", grad=0.5, **kw):
    params = {k: jnp.full(3, v) for k, v in MX.items()}
    tx = gx.create(name, **{"learning_rate": 0.1, "wd": 0.5, **kw})
    u, _ = tx.update({k: jnp.full(3, grad) for k in MX}, tx.init(params), params)
    return {k: float(np.asarray(v)[0]) for k, v in u.items()}


def _expected(lr_mult=None, wd_mult=None, lr=0.1, g=0.5):
    lr_mult, wd_mult = lr_mult or {}, wd_mult or {}
    return {k: -lr * lr_mult.get(k, 1.0) * (g + 0.5 * wd_mult.get(k, 1.0) * w) for k, w in MX.items()}


def _assert_update(got, want):
    # atol: NAG without momentum runs sgd_update, which writes w_new = (1 - lr*wd) * w - lr * g in
    # float32; its update w_new - w is MXNet's to the bit (bn_gamma: 0.05000007, as
    # mx.nd.sgd_update gives it) and within an ulp of |w| = 2 (2.4e-7) of the float64 value
    for k in MX:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-6, atol=2.5e-7, err_msg=k)


@pytest.mark.parametrize("name", ["sgd", "nag"])
def test_param_idx2name_true_decays_only_weight_and_gamma_and_leaves_lr_alone(name):
    # Optimizer.set_wd_mult (optimizer.py line 389-391): every name idx2name gives that does not end
    # in _weight or _gamma gets wd_mult 0; lr_mult has no such rule (set_lr_mult). True: the leaf names.
    # sgd decays through add_wd, nag through provide_wd: both resolvers.
    _assert_update(_mx_update(name, param_idx2name=True), _expected(wd_mult={"bn_beta": 0.0, "fc1_bias": 0.0}))
    # None and False: no names, no rule (``if param_idx2name is None: param_idx2name = {}``, line 129)
    for off in (None, False):
        _assert_update(_mx_update(name, param_idx2name=off), _expected())


def test_param_idx2name_naming_some_parameters_decays_the_others():
    # _get_wds (line 485-491): an index idx2name does not name keeps wd * 1; only named ones get the rule
    import types
    _assert_update(_mx_update(param_idx2name={0: "fc1_bias", 1: "bn_gamma"}), _expected(wd_mult={"fc1_bias": 0.0}))
    # Gluon's parameter objects in place of the names (collect_params().values()): each one's .name
    objs = {0: types.SimpleNamespace(name="fc1_bias"), 1: types.SimpleNamespace(name="bn_beta")}
    _assert_update(_mx_update(param_idx2name=objs), _expected(wd_mult={"fc1_bias": 0.0, "bn_beta": 0.0}))


def test_param_idx2name_that_matches_neither_names_nor_indices_is_refused_listing_four():
    with pytest.raises(ValueError, match=r"cannot be matched") as e:
        _mx_update(param_idx2name={0: "a", 1: "b", 2: "c", 3: "d", 4: "e", 5: "fc1_weight"})
    assert "['a', 'b', 'c', 'd']" in str(e.value) and "'e'" not in str(e.value)
    # a list tree (leaf names '0', '1'): index keys must all be leaves, some are not
    params = [jnp.ones(2), jnp.ones(2)]
    tx = gx.create("sgd", learning_rate=0.1, wd=0.5, param_idx2name={0: "x_weight", 7: "y_bias"})
    with pytest.raises(ValueError, match=r"cannot be matched"):
        tx.init(params)


def test_param_dict_objects_win_and_a_missing_multiplier_is_gluons_default_1():
    import types
    # _get_lrs/_get_wds (lines 447-448, 486-487): param_dict[index].lr_mult / .wd_mult win over
    # lr_mult/wd_mult; gluon.Parameter's lr_mult and wd_mult default to 1.0 (gluon/parameter.py line 80-84)
    pd = {0: {"wd_mult": 0.0}, 3: types.SimpleNamespace(lr_mult=2.0)}
    got = _mx_update(param_dict=pd, lr_mult={"bn_beta": 3.0, "fc1_weight": 5.0}, wd_mult={"fc1_weight": 4.0})
    _assert_update(got, _expected(lr_mult={"fc1_weight": 2.0}, wd_mult={"bn_beta": 0.0}))


def test_clip_gradient_at_and_under_one_and_at_zero():
    # sgd_update clips rescale*grad to [-c, c]; c <= 0 is no clipping in MXNet's kernels
    _assert_update(_mx_update(grad=2.0, clip_gradient=0.5), _expected(g=0.5))
    _assert_update(_mx_update(grad=2.0, clip_gradient=1), _expected(g=1.0))
    for off in (0, 0.0, -1.0, None):
        _assert_update(_mx_update(grad=2.0, clip_gradient=off), _expected(g=2.0))


def test_learning_rate_defaults_as_mxnet():
    # Optimizer.__init__ (optimizer.py line 109-116): no scheduler and no rate: 0.01; a scheduler and
    # no rate: the scheduler's base_lr, untouched; a rate and a scheduler: the rate becomes base_lr
    _assert_update(_mx_update(learning_rate=None), _expected(lr=0.01))
    sched = gx.lr_scheduler.FactorScheduler(step=100, factor=0.5, base_lr=0.3)
    _assert_update(_mx_update(learning_rate=None, lr_scheduler=sched), _expected(lr=0.3))
    assert sched.base_lr == 0.3
    sched = gx.lr_scheduler.FactorScheduler(step=100, factor=0.5, base_lr=0.3)
    _assert_update(_mx_update(learning_rate=0.2, lr_scheduler=sched), _expected(lr=0.2))

    class Own:   # a user's MXNet-style scheduler: base_lr and __call__(num_update), nothing else
        base_lr = 0.3

        def __call__(self, num_update):
            return self.base_lr

    own = Own()
    _assert_update(_mx_update(learning_rate=None, lr_scheduler=own), _expected(lr=0.3))
    assert own.base_lr == 0.3
    own = Own()
    _assert_update(_mx_update(learning_rate=0.2, lr_scheduler=own), _expected(lr=0.2))
    assert own.base_lr == 0.2


@pytest.mark.parametrize("agg, ok", [(1, True), (4, True), (4.0, True), (float("inf"), True), (0, False),
                                     (0.5, False), (2.5, False), (True, False), ("4", False), ([4], False)])
def test_aggregate_num_is_none_an_int_from_1_or_inf(agg, ok):
    # MXNet 2.x: the number of weights per fused kernel call (an int, MXNET_OPTIMIZER_AGGREGATION_SIZE
    # in 1.9.1, optimizer.py line 581); it changes no number here
    if ok:
        _assert_update(_mx_update(aggregate_num=agg, use_fused_step=True), _expected())
    else:
        with pytest.raises(ValueError, match=r"aggregate_num=\.\.\.\): must be None, an int >= 1 or inf"):
            gx.create("sgd", aggregate_num=agg)


def test_each_factorys_defaults_are_its_mxnet_classs():
    # The classes' own arguments are pinned to MXNet 1.9.1's signatures by tests/test_surface.py
    # (tests/data/surface/mxnet.json), their common keywords by test_registry's COMMON_DEFAULTS check;
    # the lowercase factory each class calls (``dcasgd(**locals())``) must take the same defaults.
    import inspect
    for decl in gx.declarations("mxnet").values():
        (name,) = decl.classes
        cls, factory = getattr(gx.mxnet, name), getattr(gx.mxnet, decl.name)
        a, b = inspect.signature(cls).parameters, inspect.signature(factory).parameters
        assert set(a) == set(b), name
        for k in a:
            assert (a[k].default, type(a[k].default)) == (b[k].default, type(b[k].default)), (name, k)


@pytest.mark.parametrize("name", ["sgd", "ccsgd", "nag", "signum", "dcasgd", "lbsgd", "lars"])
def test_momentum_0_keeps_no_momentum_buffer_as_mxnets_create_state(name):
    # SGD/NAG/LBSGD/DCASGD.create_state (optimizer.py): ``momentum = None; if self.momentum != 0.0:
    # momentum = zeros(weight.shape...)``; Signum the same (signsgd_update without a state). With
    # momentum 0 the state holds one parameter-shaped buffer fewer (DCASGD keeps its previous weight,
    # LBSGD its accumulated gradient), and a migrated Gluon state has none to put there.
    params = {"w": jnp.zeros((5, 7))}

    def buffers(momentum):
        tx = gx.create(name, learning_rate=0.1, momentum=momentum)
        return sum(x.shape == (5, 7) for x in jax.tree.leaves(jax.eval_shape(tx.init, params)))

    assert buffers(0.0) + 1 == buffers(0.5) and buffers(0.5) == buffers(1e-6), name


# -- LAMB's bounds and LARS's decay multipliers (gradxform/mxnet/_layerwise.py) ----------------

def _lamb_first_step(w, g, lr=0.1, wd=0.5, eps=1e-6, lower=None, upper=None):
    # LAMB._update_impl, step 1 with bias correction (lamb_update_phase1/2): m^ = g, v^ = g^2,
    # u = m^ / (sqrt(v^) + eps) + wd w; r1 = clip(|w|, lower, upper), r2 = |u|; w -= lr r1 / r2 u
    w, g = np.float64(w), np.float64(g)
    u = g / (np.abs(g) + eps) + wd * w
    r1 = np.linalg.norm(w)
    r1 = max(r1, lower) if lower is not None else r1
    r1 = min(r1, upper) if upper is not None else r1
    return -lr * r1 / np.linalg.norm(u) * u


@pytest.mark.parametrize("lower, upper, ref", [(None, None, (None, None)), (0, 0, (None, None)),
                                               (-1.0, -2, (None, None)), (None, 0.5, (None, 0.5)),
                                               (9.0, None, (9.0, None)), (1, 1, (1.0, 1.0))])
def test_lamb_bounds_apply_only_when_positive(lower, upper, ref):
    # LAMB._update_impl (optimizer.py line 1299-1302): ``if self.lower_bound: kwargs['lower_bound'] = ...``
    # (the same for upper): 0 is not passed; the kernel applies a bound only when it is >= 0.
    w, g = np.array([3.0, -4.0, 1.0], np.float32), np.array([0.5, 2.0, -1.0], np.float32)
    tx = gx.create("lamb", learning_rate=0.1, wd=0.5, lower_bound=lower, upper_bound=upper)
    u, _ = tx.update(jnp.asarray(g), tx.init(jnp.asarray(w)), jnp.asarray(w))
    # rtol 3e-5: float32 bias correction (1 - float32(0.999) is 1.3e-5 off 0.001), doubled by the
    # cancellation in u's second and third elements; a bound changes the step by 10 % or more
    np.testing.assert_allclose(np.asarray(u), _lamb_first_step(w, g, lower=ref[0], upper=ref[1]), rtol=3e-5)


@pytest.mark.parametrize("bad", [True, "1", [1.0]])
def test_lamb_bound_of_another_type_is_refused(bad):
    with pytest.raises(TypeError, match=r"upper_bound=\.\.\.\): must be None or a number"):
        gx.create("lamb", upper_bound=bad)


def test_lars_wd_mult_by_index_and_param_dict_as_mxnets_get_wds():
    import types
    # _get_wds (optimizer.py line 485-491): param_dict[index].wd_mult wins (gluon.Parameter's default 1.0),
    # then wd_mult[index]; multi_lars: lr_i = lr eta |w| / (|g| + wd_i |w| + eps) with both norms > 0;
    # then w -= lr_i (g + wd_i w) (preloaded_multi_sgd_update). Leaves in order: MX's sorted names.
    params = {k: jnp.full(3, v) for k, v in MX.items()}
    g = np.array([0.5, -1.0, 2.0])   # not along w: with g parallel to w the ratio would cancel wd
    grads = {k: jnp.asarray(g, jnp.float32) for k in MX}

    def lars_update(**kw):
        tx = gx.create("lars", learning_rate=0.1, wd=0.5, eta=0.01, **kw)
        u, _ = tx.update(grads, tx.init(params), params)
        return np.stack([np.asarray(u[k]) for k in MX])

    def expected(wd_mult):
        out = []
        for k, w in MX.items():
            wd = 0.5 * wd_mult.get(k, 1.0)
            wn, gn = np.sqrt(3) * abs(w), np.linalg.norm(g)
            out.append(-0.1 * 0.01 * wn / (gn + wd * wn) * (g + wd * w))
        return np.stack(out)

    np.testing.assert_allclose(lars_update(wd_mult={0: 0.0, 3: 2.0}), expected({"bn_beta": 0.0, "fc1_weight": 2.0}),
                               rtol=1e-6)
    pd = {0: {}, 1: types.SimpleNamespace(lr_mult=1.0), 3: types.SimpleNamespace(wd_mult=3.0),
          "fc1_bias": {"wd_mult": 0.0}}
    np.testing.assert_allclose(lars_update(wd_mult={0: 0.0, 1: 0.0, 3: 2.0}, param_dict=pd),
                               expected({"fc1_weight": 3.0, "fc1_bias": 0.0}), rtol=1e-6)

    class CallableDict(dict):   # still a mapping: read as one, not refused as a callable
        def __call__(self, name):
            return 5.0

    np.testing.assert_allclose(lars_update(wd_mult=CallableDict({0: 0.0, 3: 2.0})),
                               expected({"bn_beta": 0.0, "fc1_weight": 2.0}), rtol=1e-6)
    for bad in ({4: 1.0}, {-1: 1.0}):
        with pytest.raises(ValueError, match=r"wd_mult: index -?\d is out of range for 4 parameters"):
            lars_update(wd_mult=bad)
    for bad in ({4: {}}, {-1: {}}, {"nope": {}}):
        with pytest.raises(ValueError, match=r"param_dict: .* is not a parameter index or name here"):
            lars_update(param_dict=bad)


@pytest.mark.parametrize("wd", [0.01, 1.0, 2.0])
def test_groupadagrad_refuses_any_weight_decay(wd):
    # contrib.GroupAdaGrad.update: ``assert wd == 0, 'Weight decay is not supported for GroupAdaGrad'``
    with pytest.raises(ValueError, match="weight decay is not supported for GroupAdaGrad"):
        gx.create("groupadagrad", wd=wd)



def test_lbsgd_lars_zero_gradient_without_decay_leaves_the_weight():
    # LBSGD._get_lars: sqrt(|w|^2 / (|g|^2 + wd |w|^2 + 1e-18)) clipped to [0.01, 100]: with g = 0 and
    # wd = 0 that is sqrt(|w|^2 / 1e-18) -> 100, and sgd_update moves w by lr * 100 * (0 + 0 * w) = 0
    params = {"a": jnp.asarray([3.0, -4.0, 12.0]), "b": jnp.asarray([1.0, 2.0, 2.0])}
    grads = {"a": jnp.zeros(3), "b": jnp.asarray([0.5, -0.5, 0.5])}
    tx = gx.create("lbsgd", learning_rate=0.1, warmup_strategy="lars", batch_scale=1)
    u, _ = tx.update(grads, tx.init(params), params)
    np.testing.assert_array_equal(np.asarray(u["a"]), [0.0, 0.0, 0.0])
    # b: lars = sqrt(9 / 0.75) = 3.4641 (inside the bounds), so the update is -lr * lars * g
    np.testing.assert_allclose(np.asarray(u["b"]), -0.1 * np.sqrt(9 / 0.75) * np.array([0.5, -0.5, 0.5]),
                               rtol=1e-6)


@pytest.mark.parametrize("kw", [dict(warmup_epochs=0), dict(updates_per_epoch=0), dict(begin_epoch=0)])
def test_lbsgd_takes_a_zero_warmup_and_refuses_a_negative_one(kw):
    # MXNet's LBSGD.__init__ checks none of these; warmup_epochs * updates_per_epoch = 0 is no warmup
    # (_get_lbmult: nup >= nwup from the first update), a negative count is refused here
    gx.create("lbsgd", batch_scale=2, **kw)
    with pytest.raises(ValueError, match=next(iter(kw))):
        gx.create("lbsgd", **{k: -1 for k in kw})



def test_sgld_drift_and_noise_as_mxnet():
    # SGLD.update (optimizer.py): weight += -lr / 2 * (clip(rescale * grad) + wd * weight)
    #                                       + normal(0, sqrt(lr), weight.shape)
    # The noise does not reproduce MXNet's stream: the same state draws the same noise, so the drift
    # is the difference of two updates; the noise's scale (0.1 here) is checked loosely on 15 draws
    # (a sample std of 15 normals is in [0.05, 0.2] * 1/0.1 with probability > 1 - 1e-6).
    params = {"a": jnp.full((4, 3), 2.0), "b": jnp.full((3,), -1.0)}
    tx = gx.create("sgld", learning_rate=0.01, wd=0.5, seed=3)
    state = tx.init(params)
    update = jax.jit(tx.update)   # one compile for both (eager would compile each operation)
    zero, _ = update(jax.tree.map(jnp.zeros_like, params), state, params)
    one, _ = update(jax.tree.map(jnp.ones_like, params), state, params)
    noise = []
    for k, w in (("a", 2.0), ("b", -1.0)):
        # the gradient's drift: -lr / 2 * 1 (the decay term is in both updates)
        np.testing.assert_allclose(np.asarray(one[k]) - np.asarray(zero[k]), -0.01 / 2, atol=1e-6)
        noise.append(np.asarray(zero[k]).ravel() - (-0.01 / 2 * 0.5 * w))   # less the decay's drift
    assert 0.05 < np.concatenate(noise).std() < 0.2, noise
    assert not np.allclose(noise[0][:3], noise[1])   # a key per leaf


def test_sgld_noise_is_the_documented_stream_of_its_seed():
    # MXNet draws SGLD's noise from its global generator (optimizer.py SGLD.update:
    # normal(0, sqrt(lr), shape)), which JAX cannot reproduce; gradxform's stream is fixed instead
    # (`_langevin_noise`'s docstring): key(seed); each step key, sub = split(key), leaf i's noise
    # sqrt(lr) * normal(split(sub, leaves)[i]). The expected draws come from jax.random alone. One
    # leaf, the default seed 0, two steps, under jax_threefry_partitionable off: with it on (JAX's
    # default) split(sub, 1) and split(sub, 2) share their first key, so that setting could not tell
    # a one-leaf tree's key from another split's; the recipe is the same under both.
    lr, g = 0.04, np.asarray([0.5, -1.0, 2.0], np.float32)
    with jax.threefry_partitionable(False):
        tx = gx.mxnet.sgld(lr)
        state, update = tx.init({"w": jnp.zeros(3)}), jax.jit(tx.update)  # one compile, not one per operation
        key = jax.random.key(0)
        for _ in range(2):
            got, state = update({"w": jnp.asarray(g)}, state, {"w": jnp.zeros(3)})
            key, sub = jax.random.split(key)
            draw = np.asarray(jax.random.normal(jax.random.split(sub, 1)[0], (3,), jnp.float32), np.float64)
            want = -lr / 2 * g.astype(np.float64) + np.sqrt(lr) * draw
            np.testing.assert_allclose(np.asarray(got["w"]), want, rtol=1e-6, atol=1e-7)


# -- the adaptive rules' own defaults and edges (gradxform/mxnet/_adaptive.py) ------------------

def test_adam_by_default_updates_a_row_whose_gradient_is_zero():
    # mx.optimizer.Adam(lazy_update=True) (optimizer.py 1594-1595) acts only on row_sparse gradients
    # ("If the storage types of grad is row_sparse, and lazy_update is True", 1553); a dense gradient
    # takes adam_update's dense path, every row: g = rescale * grad + wd * w, m = (1 - b1) g,
    # v = (1 - b2) g^2, lr_t = lr * sqrt(1 - b2) / (1 - b1) (1614-1617), w -= lr_t * m / (sqrt(v) + eps).
    # gradxform's default is False for that reason (a dense JAX gradient); True skips row 0 here.
    w = np.asarray([[1.0, -2.0], [0.5, 0.25]])
    g = np.asarray([[0.0, 0.0], [0.3, -0.6]])
    wd, lr, b1, b2, eps = 0.1, 0.01, 0.9, 0.999, 1e-8
    gg = g + wd * w
    want = -lr * np.sqrt(1 - b2) / (1 - b1) * ((1 - b1) * gg) / (np.sqrt((1 - b2) * gg * gg) + eps)
    tx = gx.mxnet.adam(learning_rate=lr, wd=wd)
    u, _ = tx.update({"w": jnp.asarray(g, jnp.float32)}, tx.init({"w": jnp.asarray(w, jnp.float32)}),
                     {"w": jnp.asarray(w, jnp.float32)})
    # float32: 1 - float32(0.999) is 1.3e-5 off 0.001 in the bias correction (rtol 1e-4)
    np.testing.assert_allclose(np.asarray(u["w"]), want, rtol=1e-4)
