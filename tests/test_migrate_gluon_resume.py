"""Resuming Gluon runs: the Trainer's parameter order, and a scheduler of the script's own class.

Fixtures (tests/fixtures/mxnet_resume/, made by tools/mxnet_resume_fixtures.py with MXNet 1.9.1):
``order12`` is 12 same-shape Dense layers under Adam, whose Trainer numbers the parameters by
sorted Gluon name (dense0_*, dense10_*, dense11_*, dense1_*, ...); ``user_sched`` is SGD with a
``__main__.StepWarmup`` scheduler (an ``mx.lr_scheduler.LRScheduler`` subclass); ``user_seq`` a
user scheduler holding two of those in a list. Each ``.npz`` holds the parameters when the file
was saved and after each later step, and the raw gradients of those steps, all raveled in the
Trainer's order. Tolerance: float32, rtol 1e-5 / atol 1e-6 (as tests/test_migrate_gluon.py).
"""
import io
import json
import os
import pickle
import sys
import tracemalloc
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform.migrate import MigrateError, UnsafePickleError, from_gluon_states, read_gluon_states
from gradxform.migrate._gluon import gluon_order
from gradxform.migrate._user_class import UserRecord
from test_migrate_gluon import _fake_mxnet
from test_migrate_pickle import P4, fuzz_reader, glob4, sunicode

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "fixtures", "mxnet_resume")
DEV1 = jax.devices()[:1]


def load(case):
    z = np.load(os.path.join(ROOT, case + ".npz"))
    return z, json.loads(str(z["meta"]))


def split(row, meta) -> dict:
    """A raveled row -> {gluon name: array}, in the Trainer's (sorted) order."""
    out, at = {}, 0
    for name, shape in zip(meta["names"], meta["shapes"]):
        size = int(np.prod(shape))
        out[name] = np.asarray(row[at:at + size]).reshape(shape)
        at += size
    return out


def nested(flat: dict) -> dict:
    """{'dense0_weight': w} -> {'dense0': {'weight': w}}: the docs' naming of a Gluon net."""
    out: dict = {}
    for name, a in flat.items():
        layer, kind = name.rsplit("_", 1)
        out.setdefault(layer, {})[kind] = jnp.asarray(a)
    return out


def as_flat(params) -> dict:
    if isinstance(params, list):
        return {f"dense{i}_{k}": a for i, layer in enumerate(params) for k, a in layer.items()}
    if all(isinstance(v, dict) for v in params.values()):
        return {f"{layer}_{k}": a for layer, d in params.items() for k, a in d.items()}
    return params


FORMS = {
    "flat": lambda flat: {n: jnp.asarray(a) for n, a in flat.items()},
    "nested": nested,
}


def assert_step(z, meta, j, params, what):
    want = split(z["p"][j], meta)
    got = as_flat(params)
    for n in meta["names"]:
        np.testing.assert_allclose(np.asarray(got[n]), want[n], rtol=1e-5, atol=1e-6,
                                   err_msg=f"{what}: step {meta['k'] + j - 1}, {n}")


def continue_with_tx(z, meta, tx, params, state) -> list:
    """Feeds MXNet's recorded gradients: the parameters after each later step."""
    out = []
    for j in range(1, meta["n"] - meta["k"] + 1):
        grads = jax.tree.map(jnp.asarray, _like(params, split(z["g"][j - 1], meta)))
        updates, state = tx.update(grads, state, params)
        params = gx.apply_updates(params, updates)
        out.append(params)
    return out


def _like(params, flat_values):
    """``flat_values`` (gluon names) in the structure of ``params``."""
    if isinstance(params, list):
        return [{k: flat_values[f"dense{i}_{k}"] for k in layer} for i, layer in enumerate(params)]
    if all(isinstance(v, dict) for v in params.values()):
        return {layer: {k: flat_values[f"{layer}_{k}"] for k in d} for layer, d in params.items()}
    return {n: flat_values[n] for n in params}


# --- the Trainer's order -------------------------------------------------------------------

@pytest.mark.parametrize("form", sorted(FORMS))
def test_from_gluon_states_resumes_the_12_layer_run_in_gluons_order(form):
    """MXNet index i is the i-th parameter by sorted Gluon name: for the nested tree that is not
    JAX's leaf order (dense1/* before dense10/*), and the resumed run must still be MXNet's."""
    z, meta = load("order12")
    params = FORMS[form](split(z["p"][0], meta))
    tx = gx.create("adam", learning_rate=0.05, rescale_grad=1.0 / meta["batch_size"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        state = from_gluon_states(os.path.join(ROOT, "order12.states"), params, tx)
    for j, p in enumerate(continue_with_tx(z, meta, tx, params, state), 1):
        assert_step(z, meta, j, p, form)


def test_jax_leaf_order_would_give_other_numbers_silently():
    """The fixture tells the orders apart: mapping MXNet index i to JAX's i-th leaf of the nested
    tree (the old default) loads without a word and then drifts from MXNet's run."""
    z, meta = load("order12")
    params = nested(split(z["p"][0], meta))
    tx = gx.create("adam", learning_rate=0.05, rescale_grad=1.0 / meta["batch_size"])
    state = from_gluon_states(os.path.join(ROOT, "order12.states"), params, tx, order=gx.param_names(params))
    last = as_flat(continue_with_tx(z, meta, tx, params, state)[-1])
    want = split(z["p"][-1], meta)
    worst = max(float(np.max(np.abs(np.asarray(last[n]) - want[n]))) for n in meta["names"])
    assert worst > 1e-3, worst


@pytest.mark.parametrize("form", sorted(FORMS))
def test_trainer_load_states_resumes_the_12_layer_run_step_for_step(form):
    z, meta = load("order12")
    t = gx.Trainer(FORMS[form](split(z["p"][0], meta)), "adam", {"learning_rate": 0.05}, devices=DEV1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t.load_states(os.path.join(ROOT, "order12.states"))
    for j in range(1, meta["n"] - meta["k"] + 1):
        g = _like(t.params, {n: a[None] for n, a in split(z["g"][j - 1], meta).items()})
        t.step(g, meta["batch_size"])
        assert_step(z, meta, j, t.params, f"Trainer, {form}")


def test_a_loss_scaled_trainer_resumes_a_gluon_file_with_a_fresh_scaler_as_mxnet():
    """MXNet's .states holds no AMP loss scale; its resume starts a new LossScaler at 2**16. The
    Trainer with loss_scale= does the same and continues the run (the gradients given to step are
    of the scaled loss, a power of two: the numbers are unchanged)."""
    z, meta = load("order12")
    t = gx.Trainer(nested(split(z["p"][0], meta)), "adam", {"learning_rate": 0.05}, devices=DEV1,
                   loss_scale="dynamic")
    t.load_states(os.path.join(ROOT, "order12.states"))
    assert t.loss_scale == 2.0 ** 16
    for j in range(1, meta["n"] - meta["k"] + 1):
        g = _like(t.params, {n: a[None] * t.loss_scale for n, a in split(z["g"][j - 1], meta).items()})
        t.step(g, meta["batch_size"])
        assert_step(z, meta, j, t.params, "Trainer with loss_scale")


def test_a_list_of_arrays_keeps_its_order():
    """A list at the top: MXNet index i is leaf str(i) (the list written in the Trainer's order)."""
    z, meta = load("order12")
    flat = split(z["p"][0], meta)
    params = [jnp.asarray(flat[n]) for n in meta["names"]]
    assert gluon_order(params) == list(range(24))
    tx = gx.create("adam", learning_rate=0.05, rescale_grad=1.0 / meta["batch_size"])
    state = from_gluon_states(os.path.join(ROOT, "order12.states"), params, tx)
    for j in range(1, meta["n"] - meta["k"] + 1):
        g = split(z["g"][j - 1], meta)
        updates, state = tx.update([jnp.asarray(g[n]) for n in meta["names"]], state, params)
        params = gx.apply_updates(params, updates)
        assert_step(z, meta, j, dict(zip(meta["names"], params)), "list")


def test_gluon_order_is_the_sorted_underscore_joined_path():
    w = jnp.zeros(2)
    tree = {f"dense{i}": {"weight": w, "bias": w} for i in range(12)}
    names = gx.param_names(tree)
    got = [names[i] for i in gluon_order(tree)]
    assert got == sorted(names, key=lambda n: n.replace("/", "_"))
    assert got[:6] == ["dense0/bias", "dense0/weight", "dense10/bias", "dense10/weight", "dense11/bias",
                       "dense11/weight"] and got[-2:] == ["dense9/bias", "dense9/weight"]
    flat = {n.replace("/", "_"): w for n in names}
    assert gluon_order(flat) == list(range(24))  # a flat dict: JAX's order is already sorted
    assert gluon_order([{"weight": w, "bias": w}] * 12) == list(range(24))  # a list at the top
    assert gluon_order(w) == [0]
    assert gluon_order({"layers": [w, w]}) == [0, 1]  # list below a key, but both orders agree


def test_an_order_gluon_names_cannot_give_is_refused_saying_what_to_type():
    w = jnp.zeros(2)
    with pytest.raises(MigrateError, match=r"list position below a dict key.*order=\['layers/0'"):
        gluon_order({"layers": [w] * 12})
    with pytest.raises(MigrateError, match="'a/b' and 'a_b' have the same Gluon name 'a_b'.*order="):
        gluon_order({"a": {"b": w}, "a_b": w})


def test_trainer_load_states_takes_order_where_gluon_names_cannot_tell_and_changes_nothing_before():
    """{'layers': [12 layers]}: refused naming what to type, the Trainer as it was; with order=
    (the gradxform names in the Trainer's order) the run continues as MXNet's."""
    z, meta = load("order12")
    flat = split(z["p"][0], meta)
    params = {"layers": [{k: jnp.asarray(flat[f"dense{i}_{k}"]) for k in ("weight", "bias")}
                         for i in range(12)]}
    t = gx.Trainer(params, "adam", {"learning_rate": 0.05}, devices=DEV1)
    before = jax.tree.map(np.asarray, t.state)
    path = os.path.join(ROOT, "order12.states")
    with pytest.raises(MigrateError, match=r"trainer.load_states\(fname, order="):
        t.load_states(path)
    jax.tree.map(np.testing.assert_array_equal, jax.tree.map(np.asarray, t.state), before)
    order = [f"layers/{n.split('_')[0][len('dense'):]}/{n.split('_')[1]}" for n in meta["names"]]
    t.load_states(path, order=order)
    for j in range(1, meta["n"] - meta["k"] + 1):
        g = split(z["g"][j - 1], meta)
        t.step({"layers": [{k: g[f"dense{i}_{k}"][None] for k in ("weight", "bias")} for i in range(12)]},
               meta["batch_size"])
        got = {f"dense{i}_{k}": t.params["layers"][i][k] for i in range(12) for k in ("weight", "bias")}
        assert_step(z, meta, j, got, "Trainer, order=")


def test_trainer_load_states_order_is_only_for_a_gluon_file(tmp_path):
    t = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.1}, devices=DEV1)
    with pytest.raises(ValueError, match="without order"):
        t.load_states(t.state, order=["w"])
    t.save_states(str(tmp_path / "ckpt"))
    with pytest.raises(ValueError, match="without order"):
        t.load_states(str(tmp_path / "ckpt"), order=["w"])


# --- a scheduler of the script's own class ---------------------------------------------------

class StepWarmup(gx.lr_scheduler.LRScheduler):
    """The port of the fixture's ``__main__.StepWarmup`` (same attributes, same rule)."""

    def __init__(self, base_lr=0.01, warmup=2, step=3, factor=0.5):
        super().__init__(base_lr)
        self.warmup, self.step, self.factor = warmup, step, factor

    def __call__(self, num_update):
        if num_update <= self.warmup:
            return self.base_lr * num_update / self.warmup
        return self.base_lr * self.factor ** ((num_update - self.warmup) // self.step)


def _sched_trainer(z, meta, sched):
    return gx.Trainer({n: jnp.asarray(a) for n, a in split(z["p"][0], meta).items()}, "sgd",
                      dict(meta["optimizer_params"], lr_scheduler=sched), devices=DEV1)


def test_a_run_with_a_user_scheduler_class_resumes_step_for_step():
    z, meta = load("user_sched")
    t = _sched_trainer(z, meta, StepWarmup(warmup=2, step=3, factor=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the port's scheduler holds the file's attributes: nothing to say
        t.load_states(os.path.join(ROOT, "user_sched.states"))
    for j in range(1, meta["n"] - meta["k"] + 1):  # updates 5..8: the rate halves at update 5 and 8
        t.step({n: a[None] for n, a in split(z["g"][j - 1], meta).items()}, meta["batch_size"])
        assert_step(z, meta, j, t.params, "user scheduler")


def test_the_file_holds_the_scheduler_as_an_inert_record():
    _, opt = read_gluon_states(os.path.join(ROOT, "user_sched.states"))
    sched = opt.attrs["lr_scheduler"]
    assert type(sched) is UserRecord and sched.cls_path == "__main__.StepWarmup"
    assert {k: sched.attrs[k] for k in ("base_lr", "warmup", "step", "factor")} == \
        {"base_lr": 0.1, "warmup": 2, "step": 3, "factor": 0.5}
    assert not hasattr(sys.modules["__main__"], "StepWarmup")  # nothing imported, nothing defined


def test_a_user_schedulers_differing_attributes_warn_once():
    z, meta = load("user_sched")
    t = _sched_trainer(z, meta, StepWarmup(warmup=2, step=2, factor=0.5))
    with pytest.warns(UserWarning) as caught:
        t.load_states(os.path.join(ROOT, "user_sched.states"))
    said = [str(w.message) for w in caught if "user class" in str(w.message)]
    assert len(said) == 1 and "step: tx 2 vs file 3" in said[0] and "__main__.StepWarmup" in said[0], said


def test_a_user_scheduler_is_said_to_be_unchecked_where_tx_holds_no_scheduler_object():
    z, meta = load("user_sched")
    params = {n: jnp.asarray(a) for n, a in split(z["p"][0], meta).items()}
    tx = gx.create("sgd", rescale_grad=1.0 / meta["batch_size"], **meta["optimizer_params"],
                   lr_scheduler=gx.lr_scheduler.FactorScheduler(step=3, factor=0.5, base_lr=0.1))
    with pytest.warns(UserWarning) as caught:
        from_gluon_states(os.path.join(ROOT, "user_sched.states"), params, tx)
    said = [str(w.message) for w in caught if "user class" in str(w.message)]
    assert len(said) == 1 and "not checked" in said[0] and "from update 5 on" in said[0], said


def test_a_user_scheduler_holding_user_schedulers_is_read():
    """GluonCV's LRSequential pattern: the records inside the scheduler's own attributes are read too."""
    _, opt = read_gluon_states(os.path.join(ROOT, "user_seq.states"))
    seq = opt.attrs["lr_scheduler"]
    assert seq.cls_path == "__main__.Sequence" and seq.attrs["switch"] == 4
    assert [s.cls_path for s in seq.attrs["schedulers"]] == ["__main__.StepWarmup"] * 2
    assert [s.attrs["base_lr"] for s in seq.attrs["schedulers"]] == [0.1, 0.05]


# --- ... and nowhere else -----------------------------------------------------------------------

class Sched:
    """A class this module defines: a global the reader does not know."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


class _Called:
    """Pickles as a call of a user class with arguments (``__reduce__``)."""

    def __reduce__(self):
        return (Sched, (1,))


class _NewArgs(Sched):
    def __getnewargs__(self):
        return (1,)


class _System:
    def __init__(self, cmd):
        self.cmd = cmd

    def __reduce__(self):
        return (os.system, (self.cmd,))


PATH = f"{__name__}.Sched"


@pytest.mark.parametrize("protocol", range(6))
def test_a_user_class_is_read_as_the_optimizers_scheduler_at_every_protocol(monkeypatch, protocol):
    NDArray, Opt = _fake_mxnet(monkeypatch)
    data = pickle.dumps(({0: NDArray(np.ones(2))}, Opt({"lr_scheduler": Sched(base_lr=0.1, step=3)})),
                        protocol=protocol)
    _, opt = read_gluon_states(io.BytesIO(data))
    sched = opt.attrs["lr_scheduler"]
    assert type(sched) is UserRecord and sched.cls_path == PATH and sched.attrs == {"base_lr": 0.1, "step": 3}


def _placements(Opt):
    s = Sched(base_lr=0.1)
    return {
        "as_the_optimizer": ({0: None}, s),
        "in_a_state": ({0: Sched()}, Opt({})),
        "in_another_attribute": ({0: None}, Opt({"idx2name": Sched()})),
        "beside_the_scheduler": ({0: None}, Opt({"lr_scheduler": None, "extra": [Sched()]})),
        "shared_with_a_state": ({0: (s,)}, Opt({"lr_scheduler": s})),
        "module_file": {0: Sched()},
        "top_level": Sched(),
        "scheduler_of_a_scheduler_record": ({0: None}, Sched(lr_scheduler=Sched())),
    }


@pytest.mark.parametrize("where", sorted(_placements(dict)))
@pytest.mark.parametrize("protocol", [0, 2, 4])
def test_a_user_class_anywhere_else_is_refused(monkeypatch, where, protocol):
    _, Opt = _fake_mxnet(monkeypatch)
    data = pickle.dumps(_placements(Opt)[where], protocol=protocol)
    with pytest.raises(UnsafePickleError, match=f"refusing to load the global '{PATH}'"):
        read_gluon_states(io.BytesIO(data))


@pytest.mark.parametrize("value, match", [
    (_Called(), f"refusing to load the global '{PATH}'"),
    (_NewArgs(), rf"refusing to load the global '{__name__}\._NewArgs'"),
    (Sched, f"refusing to load the global '{PATH}'"),  # the class itself, not an object of it
])
def test_a_user_class_in_the_schedulers_place_is_never_called(monkeypatch, value, match):
    _, Opt = _fake_mxnet(monkeypatch)
    with pytest.raises(UnsafePickleError, match=match):
        read_gluon_states(io.BytesIO(pickle.dumps(({0: None}, Opt({"lr_scheduler": value})), protocol=4)))


def test_a_command_in_the_schedulers_place_is_refused_without_running(monkeypatch, tmp_path):
    _, Opt = _fake_mxnet(monkeypatch)
    marker = tmp_path / "pwned"
    data = pickle.dumps(({0: None}, Opt({"lr_scheduler": _System(f"touch {marker}")})), protocol=4)
    with pytest.raises(UnsafePickleError, match=r"refusing to load the global '(os|posix|nt)\.system'"):
        read_gluon_states(io.BytesIO(data))
    assert not marker.exists()


def test_a_global_that_is_not_a_class_path_is_refused_as_before():
    with pytest.raises(UnsafePickleError, match="refusing to load the global 'a b.c'"):
        read_gluon_states(io.BytesIO(P4 + glob4("a b", "c") + b")\x81."))


def test_many_distinct_user_classes_stay_inside_the_files_budget():
    """Each unknown class path costs the reader a record of it, charged to the file's budget."""
    body = b"".join(sunicode("m") + sunicode(f"C{i}") + b"\x93)\x81" for i in range(40000))
    data = P4 + b"(" + body + b"l."
    tracemalloc.start()
    try:
        with pytest.raises(MigrateError):
            read_gluon_states(io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * len(data) + (8 << 20), peak


def test_fuzzed_user_scheduler_files_load_or_are_refused():
    files = [os.path.join(ROOT, f) for f in ("user_sched.states", "user_seq.states")]
    out = fuzz_reader(read_gluon_states, files, 40, seed=3)
    assert out["refused"] > 0


def test_a_rescale_grad_that_differs_from_the_files_says_to_give_one_over_the_batch_size():
    # the file holds the last step's 1/batch_size (an AMP run's, 1/(loss_scale*batch_size)): copying it is wrong
    z, meta = load("order12")
    tx = gx.create("adam", learning_rate=0.05, rescale_grad=1.0)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        from_gluon_states(os.path.join(ROOT, "order12.states"), nested(split(z["p"][0], meta)), tx)
    said = [str(r.message) for r in rec]
    assert len(said) == 1 and "give tx rescale_grad=1/batch_size, not the file's value" in said[0], said
