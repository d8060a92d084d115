"""gradxform.migrate.from_paddle_state_dict against ASGD states written by Paddle 3.3.1.

Fixtures (tests/fixtures/paddle/<case>/, written with the real Paddle):
``paddle.save(opt.state_dict(), 'opt.pdopt')`` after k=5 steps (and that step's
``scheduler.step()``), the gradients of all n=10 steps and the parameters after
each. We load the state, feed the recorded gradients of steps k..n-1 and compare
with Paddle's parameters after every step: float32 rtol 1e-5 (atol 1e-6 near zero).
"""
import glob
import json
import os
import pickle
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform.migrate import MigrateError, UnsafePickleError, from_paddle_state_dict, read_paddle_state_dict
from gradxform.schedules import _paddle as paddle_lr

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "paddle")
CASES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "*", "opt.pdopt")))


def test_fixtures_present():
    assert "asgd_batch3" in CASES and any("decay" in c for c in CASES), CASES


def load(case):
    z = np.load(os.path.join(ROOT, case, "trajectory.npz"))
    return z, json.loads(str(z["meta"]))


def make_tx(meta, **override):
    kw = dict(meta["kwargs"])
    if meta["lr_schedule"]:
        spec = meta["lr_schedule"]
        kw["learning_rate"] = getattr(paddle_lr, "Paddle" + spec["type"])(**spec["kwargs"])
    kw.update(override)
    return gx.create("paddle.asgd", **kw)


def pdopt(case):
    return os.path.join(ROOT, case, "opt.pdopt")


def params_at(z, meta, t):
    return {n: jnp.asarray(z[f"p_{t}_{n}"]) for n in meta["names"]}


def run_and_check(z, meta, tx, params, state):
    for t in range(meta["k"], meta["n"]):
        g = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}
        updates, state = tx.update(g, state, params)
        params = gx.apply_updates(params, updates)
        for n in meta["names"]:
            np.testing.assert_allclose(np.asarray(params[n]), z[f"p_{t}_{n}"], rtol=1e-5, atol=1e-6,
                                       err_msg=f"step {t}, {n}")


@pytest.mark.parametrize("case", CASES)
def test_resume_matches_paddle(case):
    z, meta = load(case)
    tx = make_tx(meta)
    params = params_at(z, meta, meta["k"] - 1)
    run_and_check(z, meta, tx, params, from_paddle_state_dict(pdopt(case), params, tx))


def test_from_a_dict_and_with_names():
    """The state dict itself works too; names= maps gradxform names to Paddle's."""
    z, meta = load("asgd_batch3_wd_stepdecay")
    sd = {k[len("sd_"):]: z[k] for k in z.files if k.startswith("sd_")}
    sd["LR_Scheduler"] = meta["state_keys"]["LR_Scheduler"]
    k = meta["k"]
    params = {"l0": {"w": jnp.asarray(z[f"p_{k - 1}_linear_0.w_0"]), "b": jnp.asarray(z[f"p_{k - 1}_linear_0.b_0"])},
              "l1": {"w": jnp.asarray(z[f"p_{k - 1}_linear_1.w_0"]), "b": jnp.asarray(z[f"p_{k - 1}_linear_1.b_0"])}}
    names = {f"l{i}/{c}": f"linear_{i}.{c}_0" for i in (0, 1) for c in ("w", "b")}
    tx = make_tx(meta)
    state = from_paddle_state_dict(sd, params, tx, names=names)
    for t in range(k, meta["n"]):
        g = {f"l{i}": {c: jnp.asarray(z[f"g_{t}_linear_{i}.{c}_0"]) for c in ("w", "b")} for i in (0, 1)}
        u, state = tx.update(g, state, params)
        params = gx.apply_updates(params, u)
        np.testing.assert_allclose(np.asarray(params["l1"]["w"]), z[f"p_{t}_linear_1.w_0"], rtol=1e-5, atol=1e-6)


def test_state_contents():
    z, meta = load("asgd_batch3_wd_stepdecay")
    params = params_at(z, meta, meta["k"] - 1)
    state = from_paddle_state_dict(pdopt("asgd_batch3_wd_stepdecay"), params, make_tx(meta))
    leaves = [np.asarray(x) for x in jax.tree.leaves(state)]
    for key in ("sd_linear_0.w_0_d_0", "sd_linear_1.w_0_y_0"):
        assert any(x.shape == z[key].shape and np.array_equal(x, z[key]) for x in leaves), key
    (step,) = [n for n in jax.tree.leaves(state, is_leaf=lambda n: type(n).__name__ == "StepState")
               if type(n).__name__ == "StepState"]
    # per-parameter m all 5: the shared form (leaf_counts None: each leaf's count is count)
    assert step.leaf_counts is None and int(step.count) == 5
    lr_next = float(z["lr_5"])  # Paddle's lr for step 5 (StepDecay: 0.1 * 0.5 ** (5 // 3))
    assert lr_next == pytest.approx(0.05)


def test_fresh_state_would_not_match():
    z, meta = load("asgd_batch3")
    tx = make_tx(meta)
    params = params_at(z, meta, meta["k"] - 1)
    with pytest.raises(AssertionError):
        run_and_check(z, meta, tx, params, tx.init(params))


def test_missing_extra_shapes_and_batch_num():
    z, meta = load("asgd_batch3")
    params = params_at(z, meta, 4)
    tx = make_tx(meta)
    fewer = {n: params[n] for n in meta["names"][:3]}
    with pytest.raises(MigrateError, match=r"'linear_1.b_0_d_0', which belongs to no parameter"):
        from_paddle_state_dict(pdopt("asgd_batch3"), fewer, make_tx(meta))
    more = dict(params, **{"linear_2.w_0": jnp.zeros((2, 2), jnp.float32)})
    with pytest.raises(MigrateError, match=r"no 'd' accumulator .* for parameter 'linear_2.w_0'"):
        from_paddle_state_dict(pdopt("asgd_batch3"), more, make_tx(meta))
    other = dict(params, **{"linear_0.w_0": jnp.zeros((3, 4), jnp.float32)})
    with pytest.raises(MigrateError, match=r"'linear_0.w_0_d_0' has shape \(4, 3\) but parameter 'linear_0.w_0'"):
        from_paddle_state_dict(pdopt("asgd_batch3"), other, tx)
    with pytest.raises(MigrateError, match="batch_num=2"):
        from_paddle_state_dict(pdopt("asgd_batch3"), params, make_tx(meta, batch_num=2))


class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


def test_malicious_pickle_rejected(tmp_path):
    marker = tmp_path / "pwned"
    z, meta = load("asgd_batch3")
    f = tmp_path / "opt.pdopt"
    f.write_bytes(pickle.dumps({"linear_0.w_0_d_0": _Evil(f"touch {marker}")}))
    with pytest.raises(UnsafePickleError, match="system"):
        from_paddle_state_dict(f, params_at(z, meta, 4), make_tx(meta))
    assert not marker.exists()
    # MXNet classes are not allowed in a Paddle file either
    f.write_bytes(open(os.path.join(ROOT, "..", "mxnet", "adam", "trainer.states"), "rb").read())
    with pytest.raises(UnsafePickleError, match="mxnet"):
        read_paddle_state_dict(f)


def test_truncated_file(tmp_path):
    z, meta = load("asgd_batch3")
    data = open(pdopt("asgd_batch3"), "rb").read()
    for cut in (len(data) - 1, len(data) // 2, 5):
        f = tmp_path / f"cut{cut}"
        f.write_bytes(data[:cut])
        with pytest.raises(MigrateError, match="truncated|cannot read"):
            from_paddle_state_dict(f, params_at(z, meta, 4), make_tx(meta))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_numpy_pickles_of_every_protocol(tmp_path, protocol):
    """paddle.save writes protocols 2-4; numpy arrays and scalars of any protocol are read."""
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    f = tmp_path / "x.pdopt"
    f.write_bytes(pickle.dumps({"w_d_0": a, "w_m_0": np.array([3], np.int64), "s": np.float64(0.5),
                                "LR_Scheduler": {"last_epoch": 3, "last_lr": 0.5}}, protocol=protocol))
    sd = read_paddle_state_dict(f)
    np.testing.assert_array_equal(sd["w_d_0"], a)
    assert sd["w_m_0"].dtype == np.int64 and sd["s"] == 0.5 and sd["LR_Scheduler"]["last_epoch"] == 3


def test_build_on_an_allowed_function_is_rejected(tmp_path):
    """A stream may try BUILD on an allowed global (setting attributes on it); refused."""
    f = tmp_path / "x.pdopt"
    f.write_bytes(b"cnumpy\ndtype\n(dS'__defaults__'\n(I1\ntsb.")
    with pytest.raises(UnsafePickleError, match="modify an allowed function"):
        read_paddle_state_dict(f)
    f.write_bytes(pickle.dumps({"a": np.zeros(2, object)}))
    with pytest.raises(UnsafePickleError, match="object"):
        read_paddle_state_dict(f)


# -- the rest of the Paddle family (issue 17; trajectories in test_paddle_optimizers_parity.py) --

FAMILY_FIX = os.path.join(os.path.dirname(__file__), "fixtures", "paddle")


def _family_params():
    return {"dense.weight": jnp.ones((4, 3)), "dense.bias": jnp.ones(3), "bn.gamma": jnp.ones((2, 2, 2))}


def test_a_state_of_another_optimizer_is_refused_naming_the_entry():
    params = _family_params()
    adam = os.path.join(FAMILY_FIX, "opt_adam_default.pdopt")
    with pytest.raises(MigrateError, match="velocity"):
        from_paddle_state_dict(adam, params, gx.paddle.momentum(0.1))
    with pytest.raises(MigrateError, match="moment1"):
        from_paddle_state_dict(os.path.join(FAMILY_FIX, "opt_momentum_default.pdopt"), params, gx.paddle.adam())


def test_accumulators_land_where_paddle_keeps_them():
    params = _family_params()
    sd = read_paddle_state_dict(os.path.join(FAMILY_FIX, "opt_adam_amsgrad_l2.pdopt"))
    tx = gx.paddle.adam(0.01, beta1=0.8, beta2=0.99, epsilon=1e-6, amsgrad=True, weight_decay=gx.paddle.L2Decay(0.01))
    st = from_paddle_state_dict(sd, params, tx)
    adam = [s for s in jax.tree.leaves(st, is_leaf=lambda x: isinstance(x, gx.paddle._adam.AdamState))
            if isinstance(s, gx.paddle._adam.AdamState)][0]
    np.testing.assert_array_equal(np.asarray(adam.moment2_max["dense.bias"]), sd["dense.bias_moment2_max_0"])
    # the powers: one vector, an entry per leaf in flatten order
    at = gx.param_names(params).index("bn.gamma")
    assert float(adam.beta1_pow[at]) == float(sd["bn.gamma_beta1_pow_acc_0"][0])
    for field, acc in (("beta1_pow", "beta1_pow_acc"), ("beta2_pow", "beta2_pow_acc")):  # each parameter its own
        assert np.asarray(getattr(adam, field)).tolist() == [float(sd[f"{n}_{acc}_0"][0]) for n in gx.param_names(params)]


def test_float16_master_weights_and_a_named_optimizer_are_read():
    """Paddle's CPU has no float16 kernel, so this state dict is written in
    Paddle's layout by hand: ``name='opt'`` prefixes the accumulator names,
    ``master_weights`` holds the float32 copies."""
    params = {"w": jnp.asarray([1.0, 2.0], jnp.float16)}
    tx = gx.paddle.momentum(0.1, multi_precision=True)
    sd = {"w_opt_velocity_0": np.asarray([0.5, -0.5], np.float32),
          "master_weights": {"w": np.asarray([1.0001, 2.0002], np.float32)}}
    st = from_paddle_state_dict(sd, params, tx)
    u, _ = tx.update({"w": jnp.asarray([1.0, 1.0], jnp.float16)}, st, params)
    master = np.asarray([1.0001, 2.0002], np.float32) - np.float32(0.1) * (
        np.float32(0.9) * np.asarray([0.5, -0.5], np.float32) + 1)
    np.testing.assert_array_equal(np.asarray(gx.apply_updates(params, u)["w"]), master.astype(np.float16))


def test_nested_params_find_paddles_dotted_names_and_powers_hold_one_value():
    # Paddle names a parameter 'dense.weight'; a nested tree names it 'dense/weight', read as
    # the dotted name unless the state's own keys use the slash name (a hand-written state)
    sd = read_paddle_state_dict(os.path.join(FAMILY_FIX, "opt_adam_default.pdopt"))
    flat = _family_params()
    nested = {"dense": {"weight": flat["dense.weight"], "bias": flat["dense.bias"]}, "bn": {"gamma": flat["bn.gamma"]}}
    tx = gx.paddle.adam()  # amsgrad off: its moment2_max is () and Paddle writes none
    by_flat = from_paddle_state_dict(sd, flat, tx)
    by_nested = from_paddle_state_dict(sd, nested, tx)
    slashed = {k.replace("dense.", "dense/").replace("bn.", "bn/"): v for k, v in sd.items()}
    by_slashed = from_paddle_state_dict(slashed, nested, tx)
    for st in (by_nested, by_slashed):
        adam = [s for s in jax.tree.leaves(st, is_leaf=lambda x: isinstance(x, gx.paddle._adam.AdamState))
                if isinstance(s, gx.paddle._adam.AdamState)][0]
        np.testing.assert_array_equal(np.asarray(adam.moment1["dense"]["weight"]), sd["dense.weight_moment1_0"])
        np.testing.assert_array_equal(np.asarray(adam.moment2["bn"]["gamma"]), sd["bn.gamma_moment2_0"])
        at = gx.param_names(nested).index("dense/bias")  # the powers: a vector, an entry per leaf
        assert float(adam.beta2_pow[at]) == float(sd["dense.bias_beta2_pow_acc_0"][0])
    # the same state as the flat, dotted-name tree's (its leaves sort in the same order)
    assert [np.asarray(x).tolist() for x in jax.tree.leaves(by_nested)] == \
        [np.asarray(x).tolist() for x in jax.tree.leaves(by_flat)]
    # Paddle's beta powers are one value per parameter ([1], or parameter-shaped and all equal)
    shaped = from_paddle_state_dict(dict(sd, **{"dense.bias_beta1_pow_acc_0": np.full(3, 0.729, np.float32)}),
                                    flat, tx)
    adam = [s for s in jax.tree.leaves(shaped, is_leaf=lambda x: isinstance(x, gx.paddle._adam.AdamState))
            if isinstance(s, gx.paddle._adam.AdamState)][0]
    at = gx.param_names(flat).index("dense.bias")
    assert np.shape(adam.beta1_pow) == (len(flat),) and float(adam.beta1_pow[at]) == np.float32(0.729)
    for bad in (np.asarray([0.9, 0.8], np.float32), np.zeros(0, np.float32)):
        with pytest.raises(MigrateError, match="dense.bias_beta1_pow_acc_0.*should hold one value"):
            from_paddle_state_dict(dict(sd, **{"dense.bias_beta1_pow_acc_0": bad}), flat, tx)


# -- the scheduler entry, partial master weights and ASGD's step counts (issue 28 item 2) ------

def _step_state(state):
    (step,) = [n for n in jax.tree.leaves(state, is_leaf=lambda n: type(n).__name__ == "StepState")
               if type(n).__name__ == "StepState"]
    return step


def test_uneven_asgd_counts_are_paddles_and_agree_with_the_scheduler():
    """``asgd_uneven_counts`` (Paddle 3.3.1): linear_1 had no gradient at steps 1 and 3, so Paddle
    skipped it (``Optimizer._apply_optimize`` updates only parameters with a gradient) and its
    ``m`` is 3 where linear_0's is 5; the StepDecay was stepped 5 times. The position is the
    largest count (track_step's ``count = max(count, leaf_counts[i])``), which agrees with
    Paddle's ``last_epoch``: no warning. (test_resume_matches_paddle continues this run.)"""
    z, meta = load("asgd_uneven_counts")
    assert [int(z[f"sd_{n}_m_0"][0]) for n in meta["names"]] == [5, 5, 3, 3]
    assert meta["state_keys"]["LR_Scheduler"]["last_epoch"] == 5
    params = params_at(z, meta, meta["k"] - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        step = _step_state(from_paddle_state_dict(pdopt("asgd_uneven_counts"), params, make_tx(meta)))
    assert int(step.count) == 5
    at = gx.param_names(params)  # leaf_counts: a vector, an entry per leaf in flatten order
    assert [int(step.leaf_counts[at.index(n)]) for n in meta["names"]] == [5, 5, 3, 3]


def test_a_scheduler_out_of_step_with_the_optimizer_warns_at_the_callers_line():
    z, meta = load("asgd_batch3_wd_stepdecay")
    params, sd = params_at(z, meta, meta["k"] - 1), read_paddle_state_dict(pdopt("asgd_batch3_wd_stepdecay"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # as Paddle wrote it: last_epoch 5 over 5 steps
        from_paddle_state_dict(sd, params, make_tx(meta))
    sd["LR_Scheduler"] = dict(sd["LR_Scheduler"], last_epoch=3)
    with pytest.warns(UserWarning, match="stepped 3 times over 5 optimizer steps") as rec:
        state = from_paddle_state_dict(sd, params, make_tx(meta))
    assert [w.filename for w in rec] == [__file__]
    assert int(_step_state(state).count) == 3  # the schedule continues from the scheduler's position
    # the other optimizers have no count of their own to disagree with
    sgd = os.path.join(FAMILY_FIX, "opt_sgd_l2_float_stepdecay.pdopt")
    assert read_paddle_state_dict(sgd)["LR_Scheduler"]["last_epoch"] == 10
    tx = gx.paddle.sgd(learning_rate=paddle_lr.PaddleStepDecay(learning_rate=0.1, step_size=4, gamma=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert int(_step_state(from_paddle_state_dict(sgd, _family_params(), tx)).count) == 10


@pytest.mark.parametrize("entry", [{}, {"last_lr": 0.1}, 5, "last_epoch"])
def test_a_scheduler_entry_without_last_epoch_is_refused(entry):
    tx = gx.paddle.sgd(learning_rate=paddle_lr.PaddleStepDecay(learning_rate=0.1, step_size=4))
    with pytest.raises(MigrateError, match="'LR_Scheduler' should be a scheduler state dict with 'last_epoch'"):
        from_paddle_state_dict({"LR_Scheduler": entry}, _family_params(), tx)


def _plateau(state):
    (node,) = [n for n in jax.tree.leaves(state, is_leaf=lambda n: type(n).__name__ == "PlateauState")
               if type(n).__name__ == "PlateauState"]
    return {f: np.asarray(getattr(node, f)).item() for f in ("last_lr", "best", "has_best", "num_bad_epochs",
                                                                "cooldown_counter")}


def test_a_plateau_state_before_its_first_metric_is_a_fresh_one():
    """``plateau_before_metric.pdopt`` (Paddle 3.3.1, tools/paddle_migration_fixtures.py plateau):
    Momentum + ReduceOnPlateau after two steps and no ``step(metric)``: Paddle writes ``best: None``
    and its ``__init__``'s counters (paddle/optimizer/lr.py lines 1586-1588: cooldown_counter 0,
    best None, num_bad_epochs 0). No best yet is ``has_best`` 0 with ``best`` 0, the fresh state's."""
    path = os.path.join(FAMILY_FIX, "plateau_before_metric.pdopt")
    sd = read_paddle_state_dict(path)
    assert sd["LR_Scheduler"] == {"cooldown_counter": 0, "best": None, "num_bad_epochs": 0, "last_epoch": 0,
                                  "last_lr": 0.1}
    params = {"linear_0.w_0": jnp.zeros((3, 2)), "linear_0.b_0": jnp.zeros(2)}
    tx = gx.paddle.momentum(learning_rate=gx.schedules.PaddleReduceOnPlateau(learning_rate=0.1, patience=1, cooldown=2))
    fresh = {"last_lr": np.float32(0.1).item(), "best": 0.0, "has_best": 0, "num_bad_epochs": 0,
             "cooldown_counter": 0}
    assert _plateau(from_paddle_state_dict(path, params, tx)) == fresh == _plateau(tx.init(params))
    # an entry without the counters (Paddle always writes them) reads them as Paddle's __init__ sets them
    sd["LR_Scheduler"] = {"last_epoch": 0, "last_lr": 0.1, "best": 2.5}
    assert _plateau(from_paddle_state_dict(sd, params, tx)) == dict(fresh, best=2.5, has_best=1)


def test_the_missing_accumulator_message_names_paddles_name_when_it_differs():
    z, meta = load("asgd_batch3")
    flat = dict(params_at(z, meta, 4), **{"linear_2.w_0": jnp.zeros((2, 2), jnp.float32)})
    with pytest.raises(MigrateError, match=r"for parameter 'linear_2.w_0'; pass names") as err:
        from_paddle_state_dict(pdopt("asgd_batch3"), flat, make_tx(meta))
    assert "(Paddle name" not in str(err.value)
    nested = {"linear_0": {"w_0": flat["linear_0.w_0"], "b_0": flat["linear_0.b_0"]},
              "linear_1": {"w_0": flat["linear_1.w_0"], "b_0": flat["linear_1.b_0"]},
              "linear_2": {"w_0": flat["linear_2.w_0"]}}
    with pytest.raises(MigrateError, match=r"for parameter 'linear_2/w_0' \(Paddle name 'linear_2.w_0'\); pass"):
        from_paddle_state_dict(pdopt("asgd_batch3"), nested, make_tx(meta))


@pytest.mark.parametrize("m", [np.asarray([5, 5], np.int64), np.asarray([5.0], np.float32),
                               np.zeros(0, np.int64), np.asarray([[5]], np.float64)])
def test_asgd_m_must_be_one_integer(m):
    """Paddle's ``m`` accumulator is int64 of shape [1] (paddle/optimizer/asgd.py line 185)."""
    z, meta = load("asgd_batch3")
    sd = read_paddle_state_dict(pdopt("asgd_batch3"))
    sd["linear_1.b_0_m_0"] = m
    with pytest.raises(MigrateError, match=r"'linear_1.b_0_m_0' should be one integer step count"):
        from_paddle_state_dict(sd, params_at(z, meta, 4), make_tx(meta))


def test_an_asgd_state_of_no_parameters_has_taken_no_steps():
    tx = gx.create("paddle.asgd", learning_rate=0.1)
    assert int(_step_state(from_paddle_state_dict({}, {}, tx)).count) == 0


# Paddle keeps a master weight only for a float16/bfloat16 parameter (Optimizer._is_dtype_fp16_or_bf16,
# paddle/optimizer/optimizer.py line 2172; asgd.py line 154 and momentum.py `_create_accumulators`);
# Paddle's CPU has no float16 kernel, so these states are written in Paddle's layout by hand.
W16, B32 = np.asarray([1.0, 2.0], np.float16), np.asarray([0.5, -1.0], np.float32)
MASTER = np.asarray([1.00048, 2.00096], np.float32)  # float16: [1, 2], the parameters
G16, G32 = np.asarray([1.0, -1.0], np.float16), np.asarray([0.25, 0.5], np.float32)


def test_master_weights_of_some_parameters_are_read_momentum():
    params = {"b": jnp.asarray(B32), "w": jnp.asarray(W16)}
    tx = gx.paddle.momentum(0.1, multi_precision=True)
    v = {"b": np.asarray([0.1, 0.2], np.float32), "w": np.asarray([0.5, -0.5], np.float32)}
    sd = {"b_velocity_0": v["b"], "w_velocity_0": v["w"], "master_weights": {"w": MASTER}}
    st = from_paddle_state_dict(sd, params, tx)
    new = gx.apply_updates(params, tx.update({"b": jnp.asarray(G32), "w": jnp.asarray(G16)}, st, params)[0])
    # Paddle's momentum kernel: v = mu * v + g; p = p - lr * v, on the float32 master for 'w'
    lr, mu = np.float32(0.1), np.float32(0.9)
    want_w = (MASTER - lr * (mu * v["w"] + G16.astype(np.float32))).astype(np.float16)
    want_b = B32 - lr * (mu * v["b"] + G32)
    np.testing.assert_array_equal(np.asarray(new["w"]), want_w)
    np.testing.assert_allclose(np.asarray(new["b"]), want_b, rtol=1e-6)
    assert not np.array_equal(want_w, (W16.astype(np.float32) - lr * (mu * v["w"] + G16)).astype(np.float16))


def test_master_weights_of_some_parameters_are_read_asgd():
    params = {"b": jnp.asarray(B32), "w": jnp.asarray(W16)}
    tx = gx.create("paddle.asgd", learning_rate=0.1, batch_num=1, multi_precision=True)
    d = {"b": np.asarray([0.1, 0.2], np.float32), "w": np.asarray([0.5, -0.5], np.float32)}
    sd = {f"{n}_{a}_0": x for n in ("b", "w") for a, x in (("d", d[n]), ("y", d[n][None]),
                                                            ("m", np.asarray([3], np.int64)))}
    sd["master_weights"] = {"w": MASTER}
    st = from_paddle_state_dict(sd, params, tx)
    new = gx.apply_updates(params, tx.update({"b": jnp.asarray(G32), "w": jnp.asarray(G16)}, st, params)[0])
    # Paddle's asgd_ kernel with batch_num 1: d = d - y[0] + g = g; p = p - lr * d / min(m + 1, 1)
    lr = np.float32(0.1)
    np.testing.assert_array_equal(np.asarray(new["w"]), (MASTER - lr * G16.astype(np.float32)).astype(np.float16))
    np.testing.assert_allclose(np.asarray(new["b"]), B32 - lr * G32, rtol=1e-6)
