"""MXNet's Module-API loop (``opt = create(...)``, ``updater = get_updater(opt)``, ``updater(i, g, w)``):
per-index multipliers by ``param_idx2name``, ``set_lr_mult``/``set_wd_mult`` midway, against MXNet 1.9.1
goldens (tools/mxnet_updater_goldens.py), and the calls refused with what to type."""
import json
import pathlib

import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx

FIXTURES = pathlib.Path(__file__).parent / "fixtures" / "mxnet_updater"
CASES = sorted(FIXTURES.glob("*.npz"))


def load(path):
    with np.load(path) as z:
        meta = json.loads(str(z["meta"]))
        n, steps = meta["n"], meta["steps"]
        w0 = [z[f"w0_{i}"] for i in range(n)]
        grads = [[z[f"g_{t}_{i}"] for i in range(n)] for t in range(steps)]
        want = [[z[f"w_{t}_{i}"] for i in range(n)] for t in range(steps)]
    return meta, w0, grads, want


def idx2name(meta):
    return None if meta["idx2name"] is None else {i: n for i, n in meta["idx2name"]}


def replay(opt, meta, w0, grads, want, calls):
    updater = gx.mxnet.get_updater(opt)
    weights = [w.copy() for w in w0]
    for t, step_grads in enumerate(grads):
        for step, method, pairs in calls:
            if step == t:
                getattr(opt, method)({k: v for k, v in pairs})
        for i, g in enumerate(step_grads):
            updater(i, g, weights[i])
        for i, w in enumerate(weights):
            np.testing.assert_allclose(w, want[t][i], rtol=1e-5, atol=1e-6,
                                       err_msg=f"{meta['optimizer']} step {t + 1} index {i}")


def test_fixtures_are_there():
    assert len(CASES) >= 3


@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_updater_reproduces_mxnet(path):
    meta, w0, grads, want = load(path)
    kwargs = dict(meta["kwargs"])
    if meta["idx2name"] is not None:
        kwargs["param_idx2name"] = idx2name(meta)
    replay(gx.mxnet.create(meta["optimizer"], **kwargs), meta, w0, grads, want, meta["calls"])


@pytest.mark.parametrize("path", [p for p in CASES if json.loads(str(np.load(p)["meta"]))["idx2name"]],
                         ids=lambda p: p.stem)
def test_multipliers_given_as_keywords_resolve_by_mxnet_names(path):
    # the calls before step 0 given instead as create(lr_mult=..., wd_mult=...), by MXNet name
    meta, w0, grads, want = load(path)
    first = {m: {k: v for k, v in pairs} for s, m, pairs in meta["calls"] if s == 0}
    later = [c for c in meta["calls"] if c[0] != 0]
    opt = gx.mxnet.create(meta["optimizer"], param_idx2name=idx2name(meta), **meta["kwargs"],
                          lr_mult=first.get("set_lr_mult"), wd_mult=first.get("set_wd_mult"))
    replay(opt, meta, w0, grads, want, later)


def test_get_updater_by_name_takes_param_idx2name_and_multipliers():
    path = next(p for p in CASES if json.loads(str(np.load(p)["meta"]))["idx2name"])
    meta, w0, grads, want = load(path)
    first = {m: {k: v for k, v in pairs} for s, m, pairs in meta["calls"] if s == 0}
    updater = gx.mxnet.get_updater(meta["optimizer"], dict(meta["kwargs"], param_idx2name=idx2name(meta),
                                                           lr_mult=first.get("set_lr_mult"),
                                                           wd_mult=first.get("set_wd_mult")))
    weights = [w.copy() for w in w0]
    later = {c[0] for c in meta["calls"]} - {0}
    steps = min(later) if later else len(grads)
    for t in range(steps):
        for i, g in enumerate(grads[t]):
            updater(i, g, weights[i])
    for i, w in enumerate(weights):
        np.testing.assert_allclose(w, want[steps - 1][i], rtol=1e-5, atol=1e-6)


def test_a_name_index_is_its_own_name():
    # MXNet's _get_wd reads wd_mult[index]: an index that is a name gets that name's multiplier and rule
    names = {0: "fc_weight", 1: "fc_bias"}
    rng = np.random.default_rng(0)
    w0 = [rng.normal(size=(3, 2)).astype(np.float32), rng.normal(size=(3,)).astype(np.float32)]
    by_int = gx.mxnet.get_updater(gx.mxnet.create("sgd", wd=0.1, param_idx2name=names, lr_mult={"fc_bias": 2.0}))
    by_name = gx.mxnet.get_updater(gx.mxnet.create("sgd", wd=0.1, param_idx2name=names, lr_mult={"fc_bias": 2.0}))
    a, b = [w.copy() for w in w0], [w.copy() for w in w0]
    for _ in range(2):
        for i in range(2):
            g = np.ones_like(w0[i])
            by_int(i, g, a[i])
            by_name(names[i], g, b[i])
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_allclose(a[1], w0[1] - 2 * 0.01 * 2.0, rtol=1e-6)  # the bias: lr_mult 2, no decay


def test_param_idx2name_true_is_refused_by_the_updater():
    updater = gx.mxnet.get_updater(gx.mxnet.create("adam", wd=0.05, param_idx2name=True))
    with pytest.raises(ValueError, match=r"param_idx2name=True.*Pass the dict param_idx2name=\{0: 'fc1_weight'"):
        updater(0, np.ones(2, np.float32), np.zeros(2, np.float32))


def test_name_keyed_multipliers_without_param_idx2name_are_refused():
    updater = gx.mxnet.get_updater(gx.mxnet.create("adam", wd=0.05, lr_mult={"dense1_weight": 0.5}))
    with pytest.raises(ValueError, match=r"param_idx2name=\{0: 'dense1_weight', \.\.\.\}.*key lr_mult by index"):
        updater(0, np.ones(2, np.float32), np.zeros(2, np.float32))
    opt = gx.mxnet.create("adam", wd=0.05)
    updater = gx.mxnet.get_updater(opt)
    updater(0, np.ones(2, np.float32), np.zeros(2, np.float32))
    opt.set_wd_mult({"dense1_weight": 0.5})
    with pytest.raises(ValueError, match="without param_idx2name"):
        updater(0, np.ones(2, np.float32), np.zeros(2, np.float32))


def test_index_keyed_multipliers_work_without_param_idx2name():
    opt = gx.mxnet.create("sgd", learning_rate=0.1)
    updater = gx.mxnet.get_updater(opt)
    w0, w1 = np.zeros(2, np.float32), np.zeros(2, np.float32)
    opt.set_lr_mult({1: 0.5})
    updater(0, np.ones(2, np.float32), w0)
    updater(1, np.ones(2, np.float32), w1)
    np.testing.assert_allclose([w0[0], w1[0]], [-0.1, -0.05], rtol=1e-6)


def test_a_typo_in_a_multiplier_name_is_refused():
    opt = gx.mxnet.create("adam", param_idx2name={0: "fc_weight", 1: "fc_bias"})
    updater = gx.mxnet.get_updater(opt)
    opt.set_lr_mult({"fc_wieght": 0.5})
    with pytest.raises(ValueError, match="'fc_wieght' matches no parameter"):
        updater(0, np.ones(2, np.float32), np.zeros(2, np.float32))


def test_set_mult_checks_its_argument():
    opt = gx.mxnet.create("adam")
    with pytest.raises(TypeError, match="expected a dict"):
        opt.set_lr_mult([("w", 1.0)])
    with pytest.raises(ValueError, match="finite number >= 0"):
        opt.set_wd_mult({"w": -1.0})
    opt.set_lr_mult({"w": 0.5})
    assert opt.lr_mult == {"w": 0.5} and opt.wd_mult == {}


def test_set_mult_after_a_tree_state_says_what_to_type():
    opt = gx.mxnet.create("adam", wd=0.1)
    params = {"fc_weight": jnp.ones((2, 2))}
    opt.init(params)
    with pytest.raises(RuntimeError, match=r"get_updater\(opt\).*param_dict\['fc_weight'\]\.lr_mult = 0\.5"):
        opt.set_lr_mult({"fc_weight": 0.5})


def test_set_mult_before_a_tree_state_is_read_by_its_init():
    opt = gx.mxnet.create("sgd", learning_rate=0.1)
    opt.set_lr_mult({"b": 0.0})
    params = {"a": jnp.ones(2), "b": jnp.ones(2)}
    updates, _ = opt.update({"a": jnp.ones(2), "b": jnp.ones(2)}, opt.init(params), params)
    np.testing.assert_allclose(np.asarray(updates["a"]), -0.1, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(updates["b"]), 0.0)


def test_indices_of_one_shape_with_different_multipliers_and_a_resume():
    # two biases of one shape, one decayed and one not: the states differ in multipliers, not in structure
    names = {0: "a_gamma", 1: "a_bias", 2: "b_bias"}
    opt = gx.mxnet.create("sgd", momentum=0.9, wd=0.5, learning_rate=0.1, param_idx2name=names,
                          wd_mult={"b_bias": 2.0})
    updater = gx.mxnet.get_updater(opt)
    ws = [np.ones(3, np.float32) for _ in names]
    for i in names:
        updater(i, np.zeros(3, np.float32), ws[i])
    assert ws[1][0] == 1.0 and ws[0][0] < 1.0 and ws[2][0] < ws[0][0]  # a_bias: wd_mult 0 (MXNet's rule)
    opt.set_wd_mult({})
    resumed = gx.mxnet.get_updater(opt)
    resumed.set_states(updater.get_states())
    copies = [w.copy() for w in ws]
    for i in names:
        updater(i, np.zeros(3, np.float32), ws[i])
        resumed(i, np.zeros(3, np.float32), copies[i])
        np.testing.assert_array_equal(ws[i], copies[i])
    assert ws[1][0] == 1.0  # both read the replaced multipliers (MXNet keeps them on the optimizer, not the states)
