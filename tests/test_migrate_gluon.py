"""gradxform.migrate.from_gluon_states against states files written by MXNet 1.9.1.

Fixtures (tests/fixtures/mxnet/<case>/, made by tools/mxnet_migration_fixtures.py with
the real MXNet): a Gluon run saved with ``Trainer.save_states`` after k=5 steps (or a
Module ``.states`` file), the raw gradients of all n=10 steps and the parameters after
each. We load the file into gradxform, feed the recorded gradients of steps k..n-1 and
compare with MXNet's parameters after every step.

Tolerances: float32 parameters rtol 1e-5 (atol 1e-6 for entries near zero);
float16 parameters (multi_precision) within one float16 ulp (rtol 2**-10).
"""
import glob
import io
import json
import os
import pickle
import struct
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform import lr_scheduler
from gradxform.migrate import MigrateError, UnsafePickleError, from_gluon_states, read_gluon_states
from gradxform.migrate import _gluon
from gradxform.migrate._gluon import _shape_of
from gradxform.migrate._pickle import decode_ndarray
from gradxform.migrate._state import Slot, fill_state
from gradxform.pieces.internal import StepState

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "fixtures", "mxnet")
CASES = sorted(os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "*", "trajectory.npz")))


def test_fixtures_present():
    assert len(CASES) >= 15, CASES  # every MXNet optimizer with state, mp and Module cases


def load(case):
    z = np.load(os.path.join(ROOT, case, "trajectory.npz"))
    meta = json.loads(str(z["meta"]))
    return z, meta


def make_tx(meta, **override):
    kw = dict(meta["optimizer_params"])
    sched = kw.pop("lr_scheduler", None)
    if sched is not None:
        kw["lr_scheduler"] = getattr(lr_scheduler, sched["type"])(**sched["kwargs"])
    kw["rescale_grad"] = 1.0 / meta["batch_size"]  # Trainer.step(batch_size) / Module rescale
    if meta["api"] == "module":
        kw["param_idx2name"] = True  # Module: biases get no weight decay
    kw.update(override)
    return gx.create(meta["optimizer"], **kw)


def states_file(case, meta):
    return os.path.join(ROOT, case, meta["states_file"])


def params_at(z, meta, t):
    return {n: jnp.asarray(z[f"p_{t}_{n}"]) for n in meta["names"]}


def resume(case, **kw):
    z, meta = load(case)
    k = meta["k"]
    tx = make_tx(meta)
    params = params_at(z, meta, k - 1)
    if meta["api"] == "module":
        kw = dict(dict(optimizer=meta["optimizer"], num_update=k, order=meta["names"]), **kw)
    state = from_gluon_states(states_file(case, meta), params, tx, **kw)
    return z, meta, tx, params, state


def run(z, meta, tx, params, state):
    out = []
    for t in range(meta["k"], meta["n"]):
        g = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}
        updates, state = tx.update(g, state, params)
        params = gx.apply_updates(params, updates)
        out.append((t, params))
    return out, state


def assert_params(z, meta, t, params):
    for n in meta["names"]:
        want = z[f"p_{t}_{n}"]
        got = np.asarray(params[n])
        assert got.dtype == want.dtype, (n, got.dtype, want.dtype)
        if want.dtype == np.float16:
            np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2**-10, atol=0,
                                       err_msg=f"step {t}, {n}")
        else:
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"step {t}, {n}")


@pytest.mark.parametrize("case", CASES)
def test_resume_matches_mxnet(case):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tx matches the run: no hyperparameter-mismatch warning
        z, meta, tx, params, state = resume(case)
    steps, _ = run(z, meta, tx, params, state)
    assert len(steps) == meta["n"] - meta["k"] == 5
    for t, p in steps:
        assert_params(z, meta, t, p)


@pytest.mark.parametrize("case", CASES)
def test_decoded_arrays_bit_exact(case):
    """The restricted reader's arrays equal MXNet's own (asnumpy) state arrays bit for bit."""
    z, meta = load(case)
    states, opt = read_gluon_states(states_file(case, meta))
    assert (opt is None) == (meta["api"] == "module")

    def walk(layout, st):
        if layout is None:
            assert st is None
        elif "nd" in layout:
            want = z[layout["nd"]]
            assert st.dtype == want.dtype and st.shape == want.shape
            assert st.tobytes() == want.tobytes(), layout["nd"]
        else:
            kids = layout.get("tuple", layout.get("list"))
            assert isinstance(st, tuple) and len(st) == len(kids)
            for a, b in zip(kids, st):
                walk(a, b)

    for i, n in enumerate(meta["names"]):
        walk(meta["state_layout"][n], states[i])
    if opt is not None:
        at_k = meta["opt_at_k"]
        assert opt.num_update == at_k["num_update"] == meta["k"]
        assert {str(k): v for k, v in opt._index_update_count.items()} == at_k["_index_update_count"]
        if "m_schedule" in at_k:
            assert opt.m_schedule == at_k["m_schedule"]


def _find(state, cls):
    found = []

    def walk(node):
        if isinstance(node, tuple) and hasattr(node, "_fields"):
            if type(node).__name__ == cls:
                found.append(node)
            for f in node._fields:
                walk(getattr(node, f))
        elif isinstance(node, (tuple, list)):
            for c in node:
                walk(c)
    walk(state)
    return found


def test_counts_and_nadam_schedule_restored():
    _, meta, _, _, state = resume("nadam")
    (step,) = _find(state, "StepState")
    # every index at 5: the shared form (StepState.leaf_counts None: each leaf's count is count)
    assert step.leaf_counts is None and int(step.count) == 5
    (nadam,) = _find(state, "NadamState")
    np.testing.assert_allclose(float(nadam.m_schedule), meta["opt_at_k"]["m_schedule"], rtol=1e-7)


@pytest.mark.parametrize("case,path", [("sgd_mom_mp_fp16", "1"), ("adam_mp_fp16", "0")])
def test_master_weights_restored_exactly(case, path):
    """float16 + multi_precision: the float32 masters come from the file, not from the fp16 weights."""
    z, meta, _, params, state = resume(case)
    (mw,) = _find(state, "MasterWeightsState")
    for n in meta["names"]:
        want = z[f"s_{n}_{path}"]
        assert want.dtype == np.float32
        np.testing.assert_array_equal(np.asarray(mw.master[n]), want)
        assert not np.array_equal(want, np.asarray(params[n], np.float32))  # masters carry more bits


def test_fresh_state_would_not_match():
    """Control: the comparison is sharp enough to see a state that was not restored."""
    z, meta = load("adam")
    tx = make_tx(meta)
    params = params_at(z, meta, meta["k"] - 1)
    steps, _ = run(z, meta, tx, params, tx.init(params))
    t, p = steps[-1]
    with pytest.raises(AssertionError):
        assert_params(z, meta, t, p)


def test_module_file_needs_counts_and_name():
    z, meta = load("module_sgd_mom")
    params = params_at(z, meta, meta["k"] - 1)
    tx = make_tx(meta)
    with pytest.raises(MigrateError, match="optimizer="):
        from_gluon_states(states_file("module_sgd_mom", meta), params, tx, order=meta["names"])
    with pytest.raises(MigrateError, match="num_update"):
        from_gluon_states(states_file("module_sgd_mom", meta), params, tx, order=meta["names"],
                          optimizer="sgd")


def test_nested_params_and_order():
    """gradxform names are '/'-joined key paths; ``order`` maps MXNet indices to them."""
    z, meta = load("module_sgd_mom")  # Module order: fc0_weight, fc0_bias, fc1_weight, fc1_bias
    k = meta["k"]
    nested = {layer: {kind: jnp.asarray(z[f"p_{k - 1}_{layer}_{kind}"]) for kind in ("weight", "bias")}
              for layer in ("fc0", "fc1")}
    order = [n.replace("_", "/") for n in meta["names"]]
    tx = make_tx(meta, param_idx2name=None, wd_mult={"*/bias": 0.0})
    state = from_gluon_states(states_file("module_sgd_mom", meta), nested, tx, order=order,
                              optimizer="sgd", num_update=k)
    params = nested
    for t in range(k, meta["n"]):
        g = {layer: {kind: jnp.asarray(z[f"g_{t}_{layer}_{kind}"]) for kind in ("weight", "bias")}
             for layer in ("fc0", "fc1")}
        u, state = tx.update(g, state, params)
        params = gx.apply_updates(params, u)
        flat = {f"{a}_{b}": params[a][b] for a in ("fc0", "fc1") for b in ("weight", "bias")}
        assert_params(z, meta, t, flat)
    with pytest.raises(MigrateError, match="not listed"):
        from_gluon_states(states_file("module_sgd_mom", meta), nested, tx, order=order[:3],
                          optimizer="sgd", num_update=k)


# --- safety --------------------------------------------------------------------------------

class _Evil:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


@pytest.mark.parametrize("wrap", ["bare", "as_optimizer", "inside_state"])
def test_malicious_pickle_rejected_without_running(tmp_path, wrap):
    marker = tmp_path / "pwned"
    evil = _Evil(f"touch {marker}")
    z, meta = load("adam")
    if wrap == "bare":
        obj = evil
    elif wrap == "as_optimizer":
        obj = ({0: None}, evil)
    else:
        obj = {0: (evil, None)}
    f = tmp_path / "trainer.states"
    f.write_bytes(pickle.dumps(obj))
    params = params_at(z, meta, 0)
    with pytest.raises(UnsafePickleError, match=r"posix\.system|nt\.system|os\.system"):
        from_gluon_states(f, params, make_tx(meta))
    assert not marker.exists()


def test_other_globals_rejected(tmp_path):
    for obj in (eval, print, np.load, jax.jit):
        data = pickle.dumps(obj)
        with pytest.raises(UnsafePickleError, match="refusing"):
            read_gluon_states(__import__("io").BytesIO(data))


def test_truncated_file(tmp_path):
    z, meta = load("adam")
    data = open(states_file("adam", meta), "rb").read()
    params = params_at(z, meta, 4)
    for cut in (len(data) // 2, len(data) - 1, 10):
        f = tmp_path / f"cut{cut}"
        f.write_bytes(data[:cut])
        with pytest.raises(MigrateError, match="truncated|cannot read"):
            from_gluon_states(f, params, make_tx(meta))


def test_truncated_ndarray_bytes():
    raw = struct.pack("<IiiqiiI", 0xF993FAC9, 0, 1, 3, 1, 0, 0) + np.arange(3, dtype="<f4").tobytes()
    np.testing.assert_array_equal(decode_ndarray(raw), [0, 1, 2])
    with pytest.raises(MigrateError, match="truncated"):
        decode_ndarray(raw[:-1])
    with pytest.raises(MigrateError, match="magic"):
        decode_ndarray(b"\0" * len(raw))


def test_ndarray_layout_examples():
    """The examples of tools/MXNET_NOTES.md section 8.5."""
    arange = bytes.fromhex("c9fa93f9 00000000 02000000 02000000 00000000 03000000 00000000 01000000 "
                           "00000000 00000000 00000000 0000803f 00000040 00004040 00008040 0000a040")
    a = decode_ndarray(arange)
    assert a.dtype == np.float32 and a.shape == (2, 3)
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    h = decode_ndarray(bytes.fromhex("c9fa93f9 00000000 01000000 01000000 00000000 01000000 00000000 "
                                     "02000000 003e"))
    assert h.dtype == np.float16 and h.tolist() == [1.5]
    rsp = (struct.pack("<Ii", 0xF993FAC9, 1) + struct.pack("<iqq", 2, 1, 2) + struct.pack("<iqq", 2, 3, 2)
           + struct.pack("<iii", 1, 0, 0) + struct.pack("<iiq", 6, 1, 1)
           + np.array([1, 2], "<f4").tobytes() + np.array([1], "<i8").tobytes())
    np.testing.assert_array_equal(decode_ndarray(rsp), [[0, 0], [1, 2], [0, 0]])


# --- mismatches ----------------------------------------------------------------------------

def test_other_parameter_shapes_named():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    params["net_dense1_weight"] = jnp.zeros((3, 3), jnp.float32)
    with pytest.raises(MigrateError, match=r"'net_dense1_weight' \(MXNet index 3\).*shape \(2, 3\)"):
        from_gluon_states(states_file("adam", meta), params, make_tx(meta))


def test_missing_and_extra_entries_named():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    fewer = {n: params[n] for n in meta["names"][:3]}
    with pytest.raises(MigrateError, match="index 3 but there are only 3 parameters"):
        from_gluon_states(states_file("adam", meta), fewer, make_tx(meta))
    more = dict(params, net_zz_extra=jnp.zeros((2,), jnp.float32))
    with pytest.raises(MigrateError, match=r"no state for parameter 'net_zz_extra' \(MXNet index 4"):
        from_gluon_states(states_file("adam", meta), more, make_tx(meta))


def test_wrong_optimizer_or_options():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    with pytest.raises(MigrateError, match="MomentsState"):
        from_gluon_states(states_file("adam", meta), params, gx.create("sgd", momentum=0.9))
    z16, meta16 = load("adam_mp_fp16")
    p16 = params_at(z16, meta16, 4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the float16 warning of a non-mp tx
        with pytest.raises(MigrateError, match="multi_precision=True"):
            from_gluon_states(states_file("adam_mp_fp16", meta16), p16, make_tx(meta16, multi_precision=False))


def test_hyperparameter_mismatch_warns():
    z, meta = load("adam")
    params = params_at(z, meta, 4)
    with pytest.warns(UserWarning, match=r"learning_rate: tx 0.02 vs file 0.01"):
        from_gluon_states(states_file("adam", meta), params, make_tx(meta, learning_rate=0.02))
    with pytest.warns(UserWarning, match="rescale_grad"):
        from_gluon_states(states_file("adam", meta), params, make_tx(meta, rescale_grad=1.0))


# --- LBSGD (no MXNet fixture): a file in MXNet's exact format written here -----------------

def _mx_raw(a):
    """MXNet NDArray V2 bytes (tools/MXNET_NOTES.md 8.5) for a dense float32 array."""
    a = np.ascontiguousarray(a, "<f4")
    return (struct.pack("<Iii", 0xF993FAC9, 0, a.ndim) + struct.pack(f"<{a.ndim}q", *a.shape)
            + struct.pack("<iii", 1, 0, 0) + a.tobytes())


def _fake_mxnet(monkeypatch):
    """Stand-ins registered as mxnet.* so that pickle names MXNet's class paths."""
    import sys
    import types

    mods = {m: types.ModuleType(m) for m in ("mxnet", "mxnet.ndarray", "mxnet.ndarray.ndarray",
                                            "mxnet.optimizer", "mxnet.optimizer.optimizer")}

    class NDArray:
        def __init__(self, a):
            self.raw = bytearray(_mx_raw(a)) if a is not None else None

        def __reduce__(self):
            return (NDArray, (None,), {"handle": self.raw})

    class LBSGD:
        def __init__(self, attrs):
            self.__dict__.update(attrs)

    for cls, mod in ((NDArray, "mxnet.ndarray.ndarray"), (LBSGD, "mxnet.optimizer.optimizer")):
        cls.__module__, cls.__qualname__ = mod, cls.__name__
        setattr(mods[mod], cls.__name__, cls)
    for name, m in mods.items():
        monkeypatch.setitem(sys.modules, name, m)
    return NDArray, LBSGD


def test_lbsgd_accumulators_round_trip(tmp_path, monkeypatch):
    """Mid-accumulation (batch_scale=2, 5 calls): momentum, cum_grad and num_cums all come back,
    and the continued run equals the uninterrupted one bit for bit. (The same reader was checked
    by hand against a real MXNet 1.9.1 LBSGD run; no committed fixture exists for it.)"""
    NDArray, LBSGD = _fake_mxnet(monkeypatch)
    kw = dict(learning_rate=0.1, momentum=0.9, wd=0.01, batch_scale=2, warmup_epochs=1, updates_per_epoch=4,
              rescale_grad=0.125)
    tx = gx.create("lbsgd", **kw)
    rs = np.random.RandomState(0)
    params = {"a": jnp.asarray(rs.randn(3, 2), jnp.float32), "b": jnp.asarray(rs.randn(2), jnp.float32)}
    grads = [{k: jnp.asarray(rs.randn(*v.shape), jnp.float32) for k, v in params.items()} for _ in range(9)]
    state = tx.init(params)
    for g in grads[:5]:
        u, state = tx.update(g, state, params)
        params = gx.apply_updates(params, u)
    (mom,) = [s for s in _find(state, "TraceState") if "momentum" in s.hyper]
    (acc,) = _find(state, "LBSGDState")
    names = ["a", "b"]
    states = {i: NDArray(np.asarray(mom.trace[n])) for i, n in enumerate(names)}
    opt = LBSGD({"num_update": 5, "begin_num_update": 0, "_index_update_count": {0: 5, 1: 5},
                 "multi_precision": False, "lr": 0.1, "wd": 0.01, "momentum": 0.9, "rescale_grad": 0.125,
                 "lr_scheduler": None, "init_updates": 0, "batch_scale": 2,
                 "cumgrads": {i: {"cum_grad": NDArray(np.asarray(acc.cum_grad[n])),
                                  "num_cums": int(np.asarray(acc.num_cums)[i])} for i, n in enumerate(names)}})
    f = tmp_path / "trainer.states"
    f.write_bytes(pickle.dumps((states, opt)))
    loaded = from_gluon_states(f, params, gx.create("lbsgd", **kw))
    assert [np.asarray(x).tolist() for x in jax.tree.leaves(loaded)] == \
        [np.asarray(x).tolist() for x in jax.tree.leaves(state)]
    p1, p2, s1, s2 = params, params, state, loaded
    for g in grads[5:]:
        u1, s1 = tx.update(g, s1, p1)
        u2, s2 = tx.update(g, s2, p2)
        p1, p2 = gx.apply_updates(p1, u1), gx.apply_updates(p2, u2)
    for n in names:
        np.testing.assert_array_equal(np.asarray(p1[n]), np.asarray(p2[n]))
    assert np.any(np.asarray(acc.cum_grad["a"]) != 0)  # the file was written mid-accumulation


def test_scheduler_mismatch_warns():
    z, meta = load("sgd_mom_clip_sched")
    params = params_at(z, meta, 4)
    no_sched = dict(meta["optimizer_params"])
    no_sched.pop("lr_scheduler")
    tx = gx.create("sgd", rescale_grad=1 / meta["batch_size"], **no_sched)
    with pytest.warns(UserWarning, match="FactorScheduler"):
        from_gluon_states(states_file("sgd_mom_clip_sched", meta), params, tx)


def test_example_resume_from_gluon(capsys):
    """examples/resume_from_gluon.py: the continued steps equal MXNet's (|dw| <= 1e-6) and the
    full-data loss goes on decreasing from where the Gluon run left it (no jump)."""
    import runpy

    runpy.run_path(os.path.join(HERE, "..", "examples", "resume_from_gluon.py"), run_name="__main__")
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    full = [float(r[3]) for r in rows]
    diffs = [float(r[4]) for r in rows if len(r) == 5]
    assert [r[1] for r in rows[:5]] == ["mxnet"] * 5 and len(diffs) == 5 and max(diffs) <= 1e-6
    assert all(b < a for a, b in zip(full, full[1:])), full  # smooth and decreasing across step 5


def test_counts_equal_to_num_update_stay_shared_and_differing_ones_are_written_per_leaf():
    params = {"a": jnp.ones(2), "b": jnp.ones(3)}
    tx = gx.create("adam", learning_rate=0.1)
    count, num_update = Slot(StepState, "leaf_counts"), Slot(StepState, "count")

    def filled(counts):
        state = fill_state(tx.init(params), params, {}, {count: np.asarray(counts, np.int32),
                                                         num_update: np.asarray(4, np.int32)}, who="t", hint="")
        (step,) = _find(state, "StepState")
        return state, step

    _, step = filled([4, 4])
    assert step.leaf_counts is None and int(step.count) == 4
    state, step = filled([4, 2])  # index 'b' missed two updates (stale gradients)
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [4, 2]
    _, state = jax.jit(tx.update)(params, state, params)
    (step,) = _find(state, "StepState")
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [5, 3] and int(step.count) == 5


# --- the reader's edges (issue 28: mutants of gradxform/migrate/_gluon.py) -------------------

def _states_pickle(obj) -> "io.BytesIO":
    return io.BytesIO(pickle.dumps(obj, protocol=4))


@pytest.mark.parametrize("key, want", [("0", 0), ("123456789", 123456789), (7, 7),
                                       ("1234567890", "not an integer index"), (True, "not an integer index"),
                                       (1.5, "not an integer index"), ("x1", "not an integer index")])
def test_state_keys(key, want):
    """Gluon's states are keyed by the int index; a digit string of up to 9 digits (always an
    int32 index) is read as that int; a bool, a float, a longer or non-digit string is refused
    (a kvstore driven with string keys)."""
    if isinstance(want, str):
        with pytest.raises(MigrateError, match=want):
            read_gluon_states(_states_pickle(({key: None}, None)))
    else:
        assert read_gluon_states(_states_pickle(({key: None}, None))) == ({want: None}, None)


def test_a_module_file_of_two_states_is_not_a_states_optimizer_pair():
    """The Module API pickles the states dict alone: one of exactly two parameters is a dict of
    length 2, not Gluon's (states, optimizer) tuple."""
    assert read_gluon_states(_states_pickle({0: None, 1: None})) == ({0: None, 1: None}, None)


def test_a_state_holds_at_most_16_items():
    """_MAX_STATE_ITEMS: a state may hold 16 items in all, the tuples counted (MXNet's largest,
    (w32, (n, g, delta)), holds 6); a tuple of 15 Nones is 16, of 16 is 17."""
    assert read_gluon_states(_states_pickle(({0: (None,) * 15}, None)))[0] == {0: (None,) * 15}
    with pytest.raises(MigrateError, match="state 0 holds more than 16 items"):
        read_gluon_states(_states_pickle(({0: (None,) * 16}, None)))


def test_sgld_keeps_no_state_and_other_names_are_not_supported():
    """MXNet's SGLD keeps no state (``create_state`` returns None: mxnet/optimizer/optimizer.py,
    class SGLD); a name MXNet 1.9.1 does not have is refused by name."""
    z, meta = load("module_sgd_mom")
    params = params_at(z, meta, meta["k"] - 1)
    kw = dict(order=meta["names"], num_update=meta["k"])
    with pytest.raises(MigrateError, match="has a state .*; MXNet sgld keeps none"):
        from_gluon_states(states_file("module_sgd_mom", meta), params, make_tx(meta), optimizer="sgld", **kw)
    with pytest.raises(MigrateError, match="MXNet optimizer 'adamw' is not supported"):
        from_gluon_states(states_file("module_sgd_mom", meta), params, make_tx(meta), optimizer="adamw", **kw)


def _read_edited(monkeypatch, case, edit):
    """from_gluon_states made to read the fixture's (states, optimizer) as ``edit`` changes them: a
    forged file without writing MXNet's pickle."""
    z, meta = load(case)
    states, opt = read_gluon_states(states_file(case, meta))
    edit(states, opt)
    monkeypatch.setattr(_gluon, "read_gluon_states", lambda fname: (states, opt))
    return z, meta


@pytest.mark.parametrize("key, want", [("3", None), ("1234567890", "keyed by '1234567890'"),
                                       (True, "keyed by True"), (3.0, "keyed by 3.0")])
def test_update_count_keys(monkeypatch, key, want):
    """The optimizer's per-index update counts are keyed as the states are (an int, or a digit
    string of at most 9 digits); anything else is refused naming the key."""
    def edit(states, opt):
        counts = opt.attrs["_index_update_count"]
        opt.attrs["_index_update_count"] = {**{k: c for k, c in counts.items() if k not in (3, key)}, key: 2}
    z, meta = _read_edited(monkeypatch, "adam", edit)
    params, tx = params_at(z, meta, meta["k"] - 1), make_tx(meta)
    if want is not None:
        with pytest.raises(MigrateError, match=f"an update count is {want}, not by an MXNet index"):
            from_gluon_states("x", params, tx)
        return
    (step,) = _find(from_gluon_states("x", params, tx), "StepState")
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [5, 5, 5, 2]


def test_messages_name_the_mxnet_parameter_from_idx2name(monkeypatch):
    """Where the optimizer holds ``idx2name`` (MXNet index -> parameter name), a message names
    both the gradxform parameter and MXNet's."""
    def edit(states, opt):
        opt.attrs["idx2name"] = {3: "dense1_weight"}
    z, meta = _read_edited(monkeypatch, "adam", edit)
    params = dict(params_at(z, meta, 4), net_dense1_weight=jnp.zeros((3, 3), jnp.float32))
    with pytest.raises(MigrateError, match=r"'net_dense1_weight' \(MXNet index 3, 'dense1_weight'\)"):
        from_gluon_states("x", params, make_tx(meta))


def test_rmsprop_without_centered_is_mxnets_default_not_centered(monkeypatch):
    """An RMSProp record without ``centered`` is read with MXNet's default, False
    (``RMSProp.__init__(..., centered=False)``, mxnet/optimizer/optimizer.py): its (n,) states load."""
    z, meta = _read_edited(monkeypatch, "rmsprop", lambda states, opt: opt.attrs.pop("centered"))
    params = params_at(z, meta, meta["k"] - 1)
    steps, _ = run(z, meta, make_tx(meta), params, from_gluon_states("x", params, make_tx(meta)))
    assert_params(z, meta, *steps[0])


def test_the_optimizer_argument_must_name_the_files_optimizer():
    z, meta = load("adam")
    params = params_at(z, meta, meta["k"] - 1)
    from_gluon_states(states_file("adam", meta), params, make_tx(meta), optimizer="Adam")
    with pytest.raises(MigrateError, match=r"optimizer='sgd'\): the file holds an MXNet Adam"):
        from_gluon_states(states_file("adam", meta), params, make_tx(meta), optimizer="sgd")


def test_a_record_without_multi_precision_is_mxnets_default_false(monkeypatch):
    """An optimizer record without ``multi_precision`` is read with MXNet's default, False
    (``Optimizer.__init__(..., multi_precision=False)``, mxnet/optimizer/optimizer.py): a float16
    parameter's state is then the plain (mean, var), as MXNet keeps it without multi_precision."""
    def edit(states, opt):
        del opt.attrs["multi_precision"]
        for i, st in states.items():
            states[i] = st[1]  # (w32, (mean, var)) -> (mean, var)
    z, meta = _read_edited(monkeypatch, "adam_mp_fp16", edit)
    params = params_at(z, meta, meta["k"] - 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float16 parameters without multi_precision
        state = from_gluon_states("x", params, make_tx(meta, multi_precision=False))
    (moments,) = _find(state, "MomentsState")
    for n in meta["names"]:
        # (held in the float16 state of a tx without multi_precision)
        np.testing.assert_array_equal(np.asarray(moments.mu[n]), z[f"s_{n}_1_0"].astype(np.float16))


def test_a_multi_precision_state_must_be_a_pair(monkeypatch):
    """Under multi_precision a float16 parameter's state is MXNet's (w32, state) pair (Adam:
    ``create_state_multi_precision``); a third item is refused, not ignored."""
    def edit(states, opt):
        states[0] = states[0] + (None,)
    z, meta = _read_edited(monkeypatch, "adam_mp_fp16", edit)
    with pytest.raises(MigrateError, match=r"'net_dense0_bias' \(MXNet index 0\) is float16 under multi_precision, "
                                           r"so its state should be a \(state, float32 weight\) pair; got "
                                           r"\(an array \(3,\), \(an array \(3,\), an array \(3,\)\), None\)"):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_a_state_tuple_of_another_length_is_refused(monkeypatch):
    def edit(states, opt):
        states[2] = states[2] + (states[2][0],)
    z, meta = _read_edited(monkeypatch, "adam", edit)
    with pytest.raises(MigrateError, match=r"index 2\): MXNet adam keeps \(mean, var\); the file has \(an array"):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_a_momentum_missing_for_one_parameter_only_is_refused_naming_it(monkeypatch):
    """MXNet keeps None for every parameter (momentum 0) or for none: one None among arrays is a
    corrupt file, named by its parameter."""
    def edit(states, opt):
        states[2] = None
    z, meta = _read_edited(monkeypatch, "sgd_mom", edit)
    with pytest.raises(MigrateError, match=f"state 'mom' is None for parameter '{meta['names'][2]}' but not"):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


@pytest.mark.parametrize("begin, want", [(None, 0), (3, 3)])
def test_an_index_never_updated_counts_from_begin_num_update(monkeypatch, begin, want):
    """MXNet's ``_update_count`` starts an index it has not seen at ``begin_num_update``
    (default 0: mxnet/optimizer/optimizer.py, ``Optimizer.__init__`` and ``_update_count``);
    a record without the attribute has MXNet's default."""
    def edit(states, opt):
        del opt.attrs["_index_update_count"][1]
        opt.attrs.pop("begin_num_update")
        if begin is not None:
            opt.attrs["begin_num_update"] = begin
    z, meta = _read_edited(monkeypatch, "adam", edit)
    (step,) = _find(from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta)), "StepState")
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [5, want, 5, 5]


def test_masters_are_restored_where_only_some_parameters_are_float16(monkeypatch):
    """multi_precision keeps (w32, state) for float16 parameters only; a float32 parameter beside
    them has its plain state, and the float16 ones still get the file's masters."""
    def edit(states, opt):
        states[0] = states[0][1]  # net_dense0_bias: float32 now, its plain (mean, var)
    z, meta = _read_edited(monkeypatch, "adam_mp_fp16", edit)
    params = params_at(z, meta, meta["k"] - 1)
    first = meta["names"][0]
    params[first] = params[first].astype(jnp.float32)
    state = from_gluon_states("x", params, make_tx(meta))
    (mw,) = _find(state, "MasterWeightsState")
    for n in meta["names"][1:]:
        np.testing.assert_array_equal(np.asarray(mw.master[n]), z[f"s_{n}_0"])


def test_counts_come_from_device_0s_table_without_index_update_count(monkeypatch):
    """``Optimizer._index_update_count`` is ``_all_index_update_counts[0]`` until a device is
    chosen (mxnet/optimizer/optimizer.py, ``Optimizer.__init__``); a record without the former
    is read from the latter's device 0."""
    def edit(states, opt):
        del opt.attrs["_index_update_count"]
        opt.attrs["_all_index_update_counts"] = {0: {0: 5, 1: 2, 2: 5, 3: 5}, 1: {0: 1, 1: 1, 2: 1, 3: 1}}
    z, meta = _read_edited(monkeypatch, "adam", edit)
    (step,) = _find(from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta)), "StepState")
    assert [int(c) for c in np.asarray(step.leaf_counts)] == [5, 2, 5, 5]


def test_a_count_for_an_index_past_the_last_is_refused(monkeypatch):
    z, meta = _read_edited(monkeypatch, "adam", lambda states, opt: opt.attrs["_index_update_count"].update({4: 5}))
    with pytest.raises(MigrateError, match="counts updates of MXNet index 4, but there are 4 parameters"):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_a_nadam_record_without_m_schedule_starts_at_1(monkeypatch):
    """MXNet's Nadam starts ``m_schedule`` at 1 (``Nadam.__init__``: ``self.m_schedule = 1.``)."""
    z, meta = _read_edited(monkeypatch, "nadam", lambda states, opt: opt.attrs.pop("m_schedule"))
    (nadam,) = _find(from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta)), "NadamState")
    assert float(nadam.m_schedule) == 1.0


@pytest.mark.parametrize("entry", ["not a dict", "index 4", "no num_cums", "no cum_grad", "100,000 keys"])
def test_a_malformed_lbsgd_accumulator_is_refused(monkeypatch, entry):
    """LBSGD's ``cumgrads`` map an index of a parameter to ``{'cum_grad', 'num_cums'}``
    (``_cumulate_gradient`` writes both keys and reads ``cgrad['num_cums']`` of any non-empty
    record, mxnet/optimizer/optimizer.py lines 1187-1201); anything else is refused."""
    def edit(states, opt):
        cum = opt.attrs["cumgrads"]
        if entry == "not a dict":
            cum[0] = 5
        elif entry == "index 4":
            cum[4] = dict(cum[0])
        elif entry == "100,000 keys":  # a hostile record: the message names a bounded part of it
            cum[0] = {f"key{i}": 0 for i in range(100_000)}
        else:
            del cum[0][entry.split()[1]]
    z, meta = _read_edited(monkeypatch, "lbsgd_lars_bs2", edit)
    bad = 4 if entry == "index 4" else 0
    with pytest.raises(MigrateError, match=f"LBSGD accumulator {bad} is malformed") as err:
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))
    assert len(str(err.value)) < 400


@pytest.mark.parametrize("init_updates", [None, 3])
@pytest.mark.parametrize("record", ["absent", "empty"])
def test_an_lbsgd_index_without_an_accumulator_starts_from_init_updates(monkeypatch, init_updates, record):
    """An index MXNet's LBSGD has not accumulated yet has no ``cumgrads`` entry; its next gradient
    starts the count at ``init_updates + 1`` (``cumulate_gradients``; ``init_updates =
    begin_epoch * updates_per_epoch``, 0 by default): so nothing accumulated and ``init_updates``
    done, while the other indices keep the file's accumulators. An empty record is read the
    same way (``if cgrad:`` in ``_cumulate_gradient``)."""
    def edit(states, opt):
        if record == "absent":
            del opt.attrs["cumgrads"][2]
        else:
            opt.attrs["cumgrads"][2] = {}
        opt.attrs.pop("init_updates")
        if init_updates is not None:
            opt.attrs["init_updates"] = init_updates
    z, meta = _read_edited(monkeypatch, "lbsgd_lars_bs2", edit)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # init_updates 3: not the tx's
        state = from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))
    (acc,) = _find(state, "LBSGDState")
    names = meta["names"]
    assert [int(c) for c in np.asarray(acc.num_cums)] == [5, 5, init_updates or 0, 5]
    assert not np.any(np.asarray(acc.cum_grad[names[2]]))
    assert np.any(np.asarray(acc.cum_grad[names[0]]))  # mid-accumulation: the file's


def test_state_shapes_in_messages_are_bounded():
    """`_shape_of` describes a state in a message: tuples 3 deep and 4 wide at most, the rest
    "(...)" and "..." (an MXNet state is at most (w32, (n, g, delta)))."""
    a = np.zeros((2, 3), np.float32)
    assert _shape_of((a, (a, a))) == "(an array (2, 3), (an array (2, 3), an array (2, 3)))"
    assert _shape_of((None,) * 4) == "(None, None, None, None)"
    assert _shape_of((None,) * 5) == "(None, None, None, None, ...)"
    assert _shape_of((((None,),),)) == "(((None)))"
    assert _shape_of(((((None,),),),)) == "((((...))))"
    assert _shape_of("x") == "str"


@pytest.mark.parametrize("attr, value, match", [
    ("wd", "0.01", "the optimizer's wd is '0.01'; MXNet keeps a number there"),
    ("wd", True, "the optimizer's wd is True; MXNet keeps a number there"),
    ("idx2name", [1, 2], r"the optimizer's idx2name is \[1, 2\], not a dict"),
])
def test_optimizer_attributes_of_another_type_are_refused(monkeypatch, attr, value, match):
    def edit(states, opt):
        opt.attrs[attr] = value
    z, meta = _read_edited(monkeypatch, "adam", edit)
    with pytest.raises(MigrateError, match=match):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_a_state_with_one_nan_is_refused(monkeypatch):
    """One NaN among finite values: MXNet's run had diverged when it was saved."""
    def edit(states, opt):
        mean = states[1][0].copy()
        mean.flat[2] = np.nan
        states[1] = (mean, states[1][1])
    z, meta = _read_edited(monkeypatch, "adam", edit)
    with pytest.raises(MigrateError, match=r"index 1\): state 'mean' holds NaN or Inf"):
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_the_scheduler_warnings_point_at_the_caller():
    """Both directions warn (the run had an lr_scheduler and tx has none, and the reverse), at the
    line that called from_gluon_states."""
    z, meta = load("adam_sched")
    params = params_at(z, meta, 4)
    no_sched = dict(meta["optimizer_params"])
    no_sched.pop("lr_scheduler")
    with pytest.warns(UserWarning, match="used an lr_scheduler .* but tx does not") as rec:
        from_gluon_states(states_file("adam_sched", meta), params,
                          gx.create("adam", rescale_grad=1 / meta["batch_size"], **no_sched))
    assert {w.filename for w in rec if "the learning rates will differ" in str(w.message)} == {__file__}
    z, meta = load("adam")
    with pytest.warns(UserWarning, match="did not use an lr_scheduler .* but tx does"):
        from_gluon_states(states_file("adam", meta), params_at(z, meta, 4),
                          make_tx(meta, lr_scheduler=lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=0.01)))


def test_a_scheduled_runs_lr_attribute_is_not_compared(monkeypatch):
    """Under an lr_scheduler MXNet's ``_get_lr`` takes the scheduler's rate, never ``self.lr``
    (mxnet/optimizer/optimizer.py), so the record's ``lr`` is not compared with tx's."""
    z, meta = _read_edited(monkeypatch, "adam_sched", lambda states, opt: opt.attrs.update(lr=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from_gluon_states("x", params_at(z, meta, meta["k"] - 1), make_tx(meta))


def test_a_dcasgd_momentum_buffer_is_read_as_it_is(monkeypatch):
    """MXNet 1.9.1's DCASGD cannot run with momentum > 0 (tools/MXNET_NOTES.md), so no MXNet file
    holds a non-zero buffer; one in MXNet's layout, (mom, previous_weight), written from a
    gradxform DCASGD run, reads back bit for bit as that run's state (mom as it is, as SGD's is:
    ``weight += mom`` in both)."""
    z, meta = load("dcasgd")
    params = params_at(z, meta, meta["k"] - 1)
    kw = dict(meta["optimizer_params"], momentum=0.9, rescale_grad=1.0 / meta["batch_size"])
    tx = gx.create("dcasgd", **kw)
    state = tx.init(params)
    for t in range(meta["k"], meta["k"] + 2):
        u, state = tx.update({n: jnp.asarray(z[f"g_{t}_{n}"]) for n in meta["names"]}, state, params)
        params = gx.apply_updates(params, u)
    (mom,) = [s for s in _find(state, "TraceState") if "momentum" in s.hyper]
    (prev,) = _find(state, "DCASGDState")

    def edit(states, opt):
        for i, n in enumerate(meta["names"]):
            states[i] = (np.asarray(mom.trace[n]), np.asarray(prev.previous_weight[n]))
        opt.attrs.update(momentum=0.9, num_update=2, _index_update_count={i: 2 for i in range(len(meta["names"]))})
    _read_edited(monkeypatch, "dcasgd", edit)
    loaded = from_gluon_states("x", params, gx.create("dcasgd", **kw))
    assert np.any(np.asarray(mom.trace[meta["names"][0]]))
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_lars_last_rate_is_the_saved_cur_lr_times_each_multiplier(monkeypatch):
    """MXNet LARS divides by the previous step's rate (``cur_lr`` on the optimizer, before
    multipliers); gradxform holds each leaf's own rate, so the reader writes cur_lr * lr_mult.
    A cur_lr no run reaches is refused."""
    from gradxform.pieces.internal import LrRatioTraceState
    z, meta = load("lars_sched")
    params = params_at(z, meta, meta["k"] - 1)
    bias = meta["names"][0]
    assert bias.endswith("bias")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the multiplier is not the run's: a mismatch warning
        state = from_gluon_states(states_file("lars_sched", meta), params, make_tx(meta, lr_mult={bias: 2.0}))
    (node,) = gx._state_paths.find_states(state, LrRatioTraceState)
    cur = read_gluon_states(states_file("lars_sched", meta))[1].attrs["cur_lr"]
    want = [2.0 * cur if n == bias else cur for n in sorted(meta["names"])]  # leaves in flatten order
    np.testing.assert_allclose(np.asarray(node.last_lr), want, rtol=1e-7)

    real = _gluon.read_gluon_states
    for bad in (float("nan"), -0.5, "0.1"):
        def hostile(fname, bad=bad):
            states, opt = real(fname)
            opt.attrs["cur_lr"] = bad
            return states, opt
        monkeypatch.setattr(_gluon, "read_gluon_states", hostile)
        with pytest.raises(MigrateError, match="LARS cur_lr"):
            from_gluon_states(states_file("lars_sched", meta), params, make_tx(meta))
