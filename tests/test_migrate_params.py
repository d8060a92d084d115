"""Parameter files (issue 39 item 5): Gluon ``.params``, Paddle ``.pdparams`` and MindSpore ``.ckpt``
read without the framework, mapped onto flax nnx and equinox models, and a whole run converted.

Fixtures: ``tools/param_file_fixtures.py`` (MXNet 1.9.1, Paddle 3.3.1, MindSpore 2.10.0): a
Sequential(Dense 4->3, BatchNorm 3, ReLU, Dense 3->2) trained 3 Adam steps under a step-decay
schedule; its parameter file, optimizer state, eval-mode output on a fixed input, and 3 more steps.
"""
import io
import json
import os
import struct
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform.migrate import (
    LAYOUTS,
    MigrateError,
    UnsafePickleError,
    convert_run,
    load_run,
    read_gluon_params,
    read_mindspore_params,
    read_paddle_params,
    read_params,
    to_tree,
)
from gradxform.schedules import FactorScheduler, PaddleStepDecay

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "fixtures", "params")
FRAMEWORKS = ("mxnet", "paddle", "mindspore")
READERS = {"mxnet": read_gluon_params, "paddle": read_paddle_params, "mindspore": read_mindspore_params}
# float32 forward of 2 small layers, and 3 Adam steps from the converted state
FORWARD_TOL = dict(rtol=1e-5, atol=1e-6)
RESUME_TOL = dict(rtol=1e-5, atol=1e-7)


def load(fw):
    z = np.load(os.path.join(FIX, fw, "run.npz"))
    return z, json.loads(str(z["meta"]))


def files(fw):
    meta = load(fw)[1]
    return os.path.join(FIX, fw, meta["files"]["params"]), os.path.join(FIX, fw, meta["files"]["state"])


# -- the readers return exactly the framework's arrays ------------------------------------------------
@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_each_reader_returns_the_frameworks_arrays(fw):
    z, meta = load(fw)
    pfile = files(fw)[0]
    with open(pfile, "rb") as f:
        results = (READERS[fw](pfile), read_params(pfile), read_params(f))
    for got in results:
        assert list(got) == meta["names"]
        for n, a in got.items():
            want = z["file_" + n]
            assert a.dtype == want.dtype and a.shape == want.shape, n
            np.testing.assert_array_equal(a, want)


def test_mindspore_optimizer_entries_are_left_out_unless_asked():
    opt = files("mindspore")[1]
    assert list(read_mindspore_params(opt)) == load("mindspore")[1]["trainable"]
    everything = read_mindspore_params(opt, optimizer_entries=True)
    assert "moment1.0.weight" in everything and "global_step" in everything


# -- hostile and truncated files -------------------------------------------------------------------
def _gluon_bytes():
    return open(files("mxnet")[0], "rb").read()


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_every_truncation_is_refused(fw):
    """Gluon and Paddle files end in a known place; a MindSpore file is a run of entries with no
    count, so one cut between entries reads as the entries before the cut (then `to_tree` names
    the missing ones); a cut inside an entry is refused."""
    with open(files(fw)[0], "rb") as f:
        data = f.read()
    names = load(fw)[1]["names"]
    for cut in range(0, len(data), max(1, len(data) // 60)):
        try:
            got = READERS[fw](io.BytesIO(data[:cut]))
        except MigrateError:
            continue
        assert fw == "mindspore" and list(got) == names[:len(got)] and len(got) < len(names), cut


def test_gluon_forged_counts_and_names_are_refused():
    data = _gluon_bytes()
    many = data[:16] + struct.pack("<Q", 1 << 60) + data[24:]
    with pytest.raises(MigrateError, match="holds 1152921504606846976 arrays"):
        read_gluon_params(io.BytesIO(many))
    with pytest.raises(MigrateError, match="not an MXNet NDArray file"):
        read_gluon_params(io.BytesIO(b"\x13" + data[1:]))
    with pytest.raises(MigrateError, match="bytes after the last name"):
        read_gluon_params(io.BytesIO(data + b"\0"))
    # the last name's length made huge
    last = data.rfind(b"3.bias") - 8
    with pytest.raises(MigrateError, match="name 7 is 4294967296 bytes long"):
        read_gluon_params(io.BytesIO(data[:last] + struct.pack("<Q", 1 << 32) + data[last + 8:]))
    # two names alike
    dup = data.replace(b"3.bias", b"3.wbia").replace(b"3.wbia", b"0.bias")
    with pytest.raises(MigrateError, match="appears twice"):
        read_gluon_params(io.BytesIO(dup))


def test_gluon_file_of_many_tiny_arrays_stays_within_the_budget():
    """20,000 empty-shaped NDArrays: Python objects would outweigh the file; refused at the budget."""
    one = struct.pack("<IiI", 0xF993FAC9, 0, 1) + struct.pack("<q", 0) + struct.pack("<iii", 1, 0, 0)
    n = 20000
    data = struct.pack("<QQQ", 0x112, 0, n) + one * n + struct.pack("<Q", 0)
    tracemalloc.start()
    try:
        with pytest.raises(MigrateError, match="more than the"):
            read_gluon_params(io.BytesIO(data))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < len(data) + 4 * len(data) + (1 << 20) + (384 << 10)


def test_paddle_pickles_naming_anything_else_are_refused():
    evil = b"\x80\x04\x8c\x02os\x8c\x06system\x93\x8c\x02id\x85R."
    with pytest.raises(UnsafePickleError):
        read_paddle_params(io.BytesIO(evil))
    with pytest.raises(UnsafePickleError):
        read_params(io.BytesIO(evil))
    with pytest.raises(MigrateError, match="rather than parameters"):
        read_paddle_params(os.path.join(FIX, "paddle", "opt.pdopt"))  # LR_Scheduler is a dict
    with pytest.raises(MigrateError, match="expected a dict of arrays"):
        read_paddle_params(io.BytesIO(b"\x80\x04]."))


def test_unknown_formats_and_special_files_are_refused(tmp_path):
    with pytest.raises(MigrateError, match="not a parameter file gradxform reads"):
        read_params(io.BytesIO(b"PK\x03\x04 a zip"))
    with pytest.raises(MigrateError):
        read_params(str(tmp_path))  # a directory
    with pytest.raises(MigrateError):
        read_mindspore_params(io.BytesIO(b"\x0a\xff\xff\xff\xff\x0f"))


# -- to_tree: onto flax nnx and equinox, the framework's forward output ------------------------------
def _flax_rules(fw):
    bn = {"mxnet": ("gamma", "beta", "running_mean", "running_var"),
          "paddle": ("weight", "bias", "_mean", "_variance"),
          "mindspore": ("gamma", "beta", "moving_mean", "moving_variance")}[fw]
    dense = None if fw == "paddle" else "to_flax"   # Paddle's Linear weight is already (in, out)
    rules = [(r"0\.weight", "l1/kernel", dense), (r"0\.bias", "l1/bias"),
             (r"3\.weight", "l2/kernel", dense), (r"3\.bias", "l2/bias")]
    rules += [(rf"1\.{src}", f"bn/{dst}") for src, dst in zip(bn, ("scale", "bias", "mean", "var"))]
    return rules


def _nnx_model():
    from flax import nnx

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.l1 = nnx.Linear(4, 3, rngs=rngs)
            self.bn = nnx.BatchNorm(3, use_running_average=True, epsilon=1e-5, rngs=rngs)
            self.l2 = nnx.Linear(3, 2, rngs=rngs)

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.bn(self.l1(x))))

    return Net(nnx.Rngs(0))


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_flax_nnx_model_gives_the_frameworks_output(fw):
    from flax import nnx
    z, _ = load(fw)
    model = _nnx_model()
    state = to_tree(read_params(files(fw)[0]), like=nnx.state(model), rules=_flax_rules(fw))
    nnx.update(model, state)
    np.testing.assert_allclose(np.asarray(model(jnp.asarray(z["x_eval"]))), z["out_eval"], **FORWARD_TOL)


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_equinox_model_gives_the_frameworks_output(fw):
    import equinox as eqx

    class BatchNorm(eqx.Module):  # eval mode: the running statistics as plain leaves
        weight: jax.Array
        bias: jax.Array
        mean: jax.Array
        var: jax.Array

        def __call__(self, x):
            return (x - self.mean) / jnp.sqrt(self.var + 1e-5) * self.weight + self.bias

    class Net(eqx.Module):
        l1: eqx.nn.Linear
        bn: BatchNorm
        l2: eqx.nn.Linear

        def __call__(self, x):
            return self.l2(jax.nn.relu(self.bn(self.l1(x))))

    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    model = Net(eqx.nn.Linear(4, 3, key=k1), BatchNorm(*[jnp.zeros(3)] * 4), eqx.nn.Linear(3, 2, key=k2))
    z, _ = load(fw)
    # equinox's Linear weight is (out, in) like MXNet's and MindSpore's; Paddle's (in, out) is transposed
    rules = [(rf"{i}\.weight", f"{l}/weight", "T" if fw == "paddle" else None) for i, l in (("0", "l1"), ("3", "l2"))]
    rules += [(rf"{i}\.bias", f"{l}/bias") for i, l in (("0", "l1"), ("3", "l2"))]
    rules += [(r"1\.(?:gamma|weight)", "bn/weight"), (r"1\.(?:beta|bias)", "bn/bias"),
              (r"1\.(?:running_mean|_mean|moving_mean)", "bn/mean"),
              (r"1\.(?:running_var|_variance|moving_variance)", "bn/var")]
    model = to_tree(read_params(files(fw)[0]), like=model, rules=rules)
    out = jax.vmap(model)(jnp.asarray(z["x_eval"]))
    np.testing.assert_allclose(np.asarray(out), z["out_eval"], **FORWARD_TOL)


def _target():
    return {"l1": {"kernel": jnp.zeros((4, 3)), "bias": jnp.zeros(3)}, "bn": {"scale": jnp.zeros(3)}}


def test_to_tree_names_every_problem_with_names_and_shapes():
    arrays = read_gluon_params(files("mxnet")[0])
    with pytest.raises(MigrateError) as e:
        to_tree(arrays, like=_target(), rules=[(r"0\.weight", "l1/kernel"), (r"0\.bias", "l1/bias"),
                                               (r"1\.beta", "bn/shift")])
    msg = str(e.value)
    assert "source '0.weight' has shape (3, 4); target 'l1/kernel' has shape (4, 3) (its transpose fits" in msg
    assert "source '1.beta' maps to 'bn/shift', which the target tree does not have" in msg
    assert "unused source names" in msg and "'1.gamma'" in msg and "'3.bias'" in msg
    assert "target leaves with no source: ['bn/scale']" in msg


def test_to_tree_dict_and_callable_rules_ignore_and_duplicates():
    arrays = read_gluon_params(files("mxnet")[0])
    rules = {"0.weight": ("l1/kernel", "to_flax"), "0.bias": "l1/bias", "1.gamma": "bn/scale"}
    out = to_tree(arrays, like=_target(), rules=rules, ignore=r"1\..*|3\..*")
    np.testing.assert_array_equal(out["l1"]["kernel"], arrays["0.weight"].T)
    assert out["l1"]["kernel"].dtype == jnp.float32
    out2 = to_tree(arrays, like=_target(), rules=lambda n: rules.get(n), ignore=())  # None: dropped on purpose
    np.testing.assert_array_equal(out2["bn"]["scale"], arrays["1.gamma"])
    with pytest.raises(MigrateError, match="sources '0.bias' and '1.gamma' both map to 'l1/bias'"):
        to_tree(arrays, like=_target(), rules=dict(rules, **{"1.gamma": "l1/bias"}), ignore=r"[13]\..*")
    with pytest.raises(MigrateError, match="layout 'T' does not apply to a 1-D array"):
        to_tree(arrays, like=_target(), rules=dict(rules, **{"0.bias": ("l1/bias", "T")}), ignore=r"[13]\..*")
    with pytest.raises(ValueError, match="unknown layout 'NCHW'"):
        to_tree(arrays, like=_target(), rules={"0.weight": ("l1/kernel", "NCHW")}, ignore=r".*bias|[13]\..*")


def test_conv_layouts():
    w = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)  # OIHW: out 2, in 3, 4x5
    hwio = LAYOUTS["OIHW->HWIO"](w)
    assert hwio.shape == (4, 5, 3, 2) and hwio[1, 2, 0, 1] == w[1, 0, 1, 2]
    np.testing.assert_array_equal(LAYOUTS["HWIO->OIHW"](hwio), w)
    np.testing.assert_array_equal(LAYOUTS["to_flax"](w), hwio)
    np.testing.assert_array_equal(LAYOUTS["from_flax"](LAYOUTS["to_flax"](w[:, :, 0])), w[:, :, 0])
    out = to_tree({"c.weight": w}, like={"conv": {"kernel": jnp.zeros((4, 5, 3, 2))}},
                  rules=[(r"c\.weight", "conv/kernel", "OIHW->HWIO")])
    np.testing.assert_array_equal(out["conv"]["kernel"], hwio)
    with pytest.raises(MigrateError, match=r"layout 'to_flax' fits"):
        to_tree({"c.weight": w}, like={"conv": {"kernel": jnp.zeros((4, 5, 3, 2))}}, rules={"c.weight": "conv/kernel"})


# -- the whole run: convert, restore with load_state, continue --------------------------------------
def _tx(fw, meta):
    if fw == "mxnet":   # Trainer.step(1): no rescale; mx.lr_scheduler.FactorScheduler(step=2, factor=0.5)
        return gx.create("adam", learning_rate=meta["lr"],
                         lr_scheduler=FactorScheduler(step=meta["step_size"], factor=meta["gamma"], base_lr=meta["lr"]))
    if fw == "paddle":  # PaddleStepDecay stepped once per opt.step()
        return gx.paddle.adam(learning_rate=PaddleStepDecay(meta["lr"], step_size=meta["step_size"],
                                                            gamma=meta["gamma"]))
    return gx.create("mindspore.adam", learning_rate=meta["learning_rate"])  # the learning-rate list


@pytest.mark.parametrize("fw", FRAMEWORKS)
def test_converted_run_continues_as_the_framework_did(fw, tmp_path):
    z, meta = load(fw)
    tx = _tx(fw, meta)
    out = tmp_path / "run.gxckpt"
    tree = convert_run(fw, *files(fw), tx, out)
    assert list(tree["params"]) == meta["trainable"]
    assert set(tree["buffers"]) == set(meta["names"]) - set(meta["trainable"])
    info = gx.checkpoint.read_metadata(out)
    assert info["step"] == meta["k"] and info["names"] == meta["names"]
    if fw == "paddle":
        assert info["LR_Scheduler"]["last_epoch"] == meta["k"]
    if fw == "mindspore":
        assert info["global_step"] == meta["k"]
    # a JAX user restores it with gradxform.load_state, like = the same structure
    params0 = {n: jnp.zeros(meta["shapes"][n]) for n in meta["trainable"]}
    like = {"params": params0, "buffers": {n: jnp.zeros(meta["shapes"][n]) for n in tree["buffers"]},
            "opt_state": tx.init(params0)}
    restored = gx.load_state(out, like=like)
    assert jax.tree.structure(restored) == jax.tree.structure(load_run(out, tx))
    params, state = restored["params"], restored["opt_state"]
    for n in meta["names"]:
        got = restored["params"].get(n, restored["buffers"].get(n))
        np.testing.assert_array_equal(np.asarray(got), z["file_" + n])
    step = jax.jit(tx.update)
    for t in range(meta["n"]):
        grads = {n: jnp.asarray(z[f"g_{t}_{n}"]) for n in params}
        updates, state = step(grads, state, params)
        params = optax.apply_updates(params, updates)
        for n in params:
            np.testing.assert_allclose(np.asarray(params[n]), z[f"p_{t}_{n}"], **RESUME_TOL,
                                       err_msg=f"{fw} step {meta['k'] + t}: {n}")


def test_convert_run_refuses_unknown_trainable_names_and_frameworks():
    tx = gx.paddle.adam(learning_rate=0.01)
    with pytest.raises(MigrateError, match="trainable name 'nope' is not in the parameter file"):
        convert_run("paddle", *files("paddle"), tx, trainable=["nope"])
    with pytest.raises(ValueError, match="one of"):
        convert_run("torch", *files("paddle"), tx)
