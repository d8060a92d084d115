"""Issue 39 items 6 and 7: several optimizers in one state are never read or
written silently, and every message a ported script meets says what to type."""
import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import gradxform as gx
from gradxform.checkpoint import CheckpointError

PARAMS = {"w": jnp.ones((3,)), "b": jnp.ones((2, 2))}


# -- item 6: several holders -----------------------------------------------------
def _two(kind):
    a, b = gx.paddle.adamw(0.1), gx.paddle.adamw(0.5)
    if kind == "multi_transform":
        tx = optax.multi_transform({"a": a, "b": b}, {"w": "a", "b": "b"})
        return tx.init(PARAMS), ("inner_states/a", "inner_states/b"), ("a", "b")
    if kind == "partition":
        tx = optax.partition({"a": a, "b": b}, {"w": "a", "b": "b"})
        return tx.init(PARAMS), ("inner_states/a", "inner_states/b"), ("a", "b")
    tx = optax.chain(a, b)
    return tx.init(PARAMS), ("0", "1"), (0, 1)


@pytest.mark.parametrize("kind", ["multi_transform", "partition", "chain"])
@pytest.mark.parametrize("call", [
    lambda s: gx.get_learning_rate(s),
    lambda s: gx.set_learning_rate(s, 0.01),
    lambda s: gx.set_hyper(s, beta1=0.8),
    lambda s: gx.get_hyper(s, "beta1"),
], ids=["get_learning_rate", "set_learning_rate", "set_hyper", "get_hyper"])
def test_several_optimizers_holding_a_name_are_refused_naming_their_paths(kind, call):
    state, paths, _ = _two(kind)
    with pytest.raises(ValueError, match="2 optimizers in this state hold") as err:
        call(state)
    for p in paths:
        assert repr(p) in str(err.value)
    assert "where=" in str(err.value)


@pytest.mark.parametrize("kind", ["multi_transform", "partition", "chain"])
def test_where_chooses_one_optimizer_by_its_path_or_key(kind):
    state, paths, keys = _two(kind)
    for where in (paths[0], keys[0]):
        assert gx.get_learning_rate(state, where=where) == pytest.approx(0.1)
    assert gx.get_learning_rate(state, where=paths[1]) == pytest.approx(0.5)
    new = gx.set_learning_rate(state, 0.01, where=keys[1])
    assert gx.get_learning_rate(new, where=keys[0]) == pytest.approx(0.1)  # the other one untouched
    assert gx.get_learning_rate(new, where=keys[1]) == pytest.approx(0.01)
    new = gx.set_hyper(state, beta1=0.8, where=paths[0])
    assert float(gx.get_hyper(new, "beta1", where=paths[0])) == pytest.approx(0.8)
    assert float(gx.get_hyper(new, "beta1", where=paths[1])) == pytest.approx(0.9)
    both = gx.set_learning_rate(state, 0.02, where="*")
    assert [gx.get_learning_rate(both, where=k) for k in keys] == pytest.approx([0.02, 0.02])
    with pytest.raises(ValueError, match="names no optimizer.*" + re.escape(repr(paths[0]))):
        gx.get_learning_rate(state, where="nope")


def test_one_optimizer_beside_plain_optax_is_not_ambiguous():
    tx = optax.chain(optax.clip_by_global_norm(1.0), gx.mxnet.adam(0.1))
    state = tx.init(PARAMS)
    assert gx.get_learning_rate(state) == pytest.approx(0.1)
    assert gx.get_learning_rate(gx.set_learning_rate(state, 0.2)) == pytest.approx(0.2)


# -- item 7: messages that say what to type -----------------------------------------
@pytest.mark.parametrize("call, said", [
    (lambda: gx.paddle.AdamW(weight_decey=0.1), "gradxform.paddle.adamw: unknown keyword 'weight_decey'; "
                                                "did you mean 'weight_decay'?"),
    (lambda: gx.mxnet.sgd(momentun=0.9), "gradxform.mxnet.sgd: unknown keyword 'momentun'; did you mean 'momentum'?"),
    (lambda: gx.mxnet.SGD(momentun=0.9), "gradxform.mxnet.SGD: unknown keyword 'momentun'; did you mean 'momentum'?"),
    (lambda: gx.mxnet.adam(b1=0.9), "did you mean 'beta1'?"),
    (lambda: gx.mxnet.adam(lr=0.1), "did you mean 'learning_rate'?"),
    (lambda: gx.mindspore.Momentum(None, 0.1, 0.9, weight_decey=1e-4), "did you mean 'weight_decay'?"),
    (lambda: gx.mindspore.momentum(0.1, 0.9, weight_decey=1e-4), "did you mean 'weight_decay'?"),
    (lambda: gx.paddle.Momentum(learning_rat=0.1), "did you mean 'learning_rate'?"),
])
def test_a_keyword_typo_on_a_family_factory_or_class_gets_creates_message(call, said):
    with pytest.raises(TypeError, match=re.escape(said) + ".* It takes: "):
        call()


def test_keyword_checking_keeps_identity_signature_and_valid_calls():
    import inspect
    assert gx.paddle.AdamW is gx.paddle.adamw and gx.mxnet.Signum is gx.mxnet.signum
    assert "weight_decay" in inspect.signature(gx.paddle.adamw).parameters
    assert gx.mxnet.SGD(0.9, learning_rate=0.1).init(PARAMS) is not None


@pytest.mark.parametrize("name, said", [
    ("learning_rat", "did you mean 'learning_rate'?"),
    ("b1", "did you mean 'beta1'?"),          # create's alias
    ("lr", "did you mean 'learning_rate'?"),
])
def test_set_hyper_suggests_the_closest_name_and_creates_aliases(name, said):
    state = gx.mxnet.adam(0.1).init(PARAMS)
    with pytest.raises(KeyError, match=re.escape(said)):
        gx.set_hyper(state, **{name: 0.5})
    with pytest.raises(KeyError, match=re.escape(said)):
        gx.get_hyper(state, name)


@pytest.mark.parametrize("call", ["step", "update"])
def test_gluons_trainer_step_batch_size_says_to_pass_the_gradients(call):
    t = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.1})
    with pytest.raises(TypeError, match=re.escape(f"trainer.{call}(grads, batch_size=64)")):
        getattr(t, call)(64)
    with pytest.raises(TypeError, match=re.escape(f"missing batch_size: trainer.{call}(grads, batch_size)")):
        getattr(t, call)({"w": jnp.ones((t.num_devices, 3))})


def test_a_flax_module_as_trainer_params_says_what_to_pass():
    nn = pytest.importorskip("flax.linen")
    nnx = pytest.importorskip("flax.nnx")

    class MLP(nn.Module):
        @nn.compact
        def __call__(self, x):
            return nn.Dense(3)(x)

    with pytest.raises(TypeError, match=re.escape("Trainer(variables['params'], ...)")):
        gx.Trainer(MLP(), "sgd", {"learning_rate": 0.1})

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.dense, self.drop = nnx.Linear(2, 3, rngs=rngs), nnx.Dropout(0.1, rngs=rngs)

    with pytest.raises(TypeError, match=re.escape("Trainer(nnx.state(model, nnx.Param), ...)")):
        gx.Trainer(Net(nnx.Rngs(0)), "sgd", {"learning_rate": 0.1})


@pytest.mark.parametrize("build, said", [
    (lambda: gx.mindspore.momentum(gx.mindspore.WarmUpLR, 0.9), "call it: WarmUpLR(learning_rate, warmup_steps)"),
    (lambda: gx.mxnet.sgd(learning_rate=optax.cosine_decay_schedule),
     "call it: optax.cosine_decay_schedule(init_value, decay_steps, ...)"),
    (lambda: gx.mxnet.sgd(lr_scheduler=gx.lr_scheduler.FactorScheduler), "call it: FactorScheduler(step, ...)"),
    (lambda: gx.paddle.sgd(learning_rate=gx.paddle.lr.CosineAnnealingDecay),
     "call it: CosineAnnealingDecay(learning_rate, T_max, ...)"),
    (lambda: gx.Trainer(PARAMS, "sgd", {"lr_scheduler": gx.lr_scheduler.FactorScheduler}),
     "call it: FactorScheduler(step, ...)"),
])
def test_a_schedule_class_instead_of_an_instance_says_call_it(build, said):
    with pytest.raises(TypeError, match=re.escape(said)) as err:
        build()
    assert "Two ways out" not in str(err.value)


def test_create_adamw_names_both_decoupled_rules_and_how_they_differ():
    with pytest.raises(ValueError) as err:
        gx.create("adamw")
    text = str(err.value)
    assert "create('paddle.adamw'" in text and "optax.adamw's rule" in text
    assert "create('mindspore.adam_weight_decay'" in text and "without bias correction" in text


def test_trainer_learning_rate_is_shown_as_written():
    t = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.05})
    assert repr(t.learning_rate) == "0.05"
    assert np.float32(t.learning_rate) == np.float32(0.05)


def test_save_to_a_missing_folder_names_the_folder_given(tmp_path):
    target = tmp_path / "no_such_dir" / "ck.gx"
    with pytest.raises(FileNotFoundError, match=re.escape(f"the folder {str(target.parent)!r} does not exist")) as e:
        gx.save_state(target, {"a": jnp.ones(2)})
    assert ".tmp" not in str(e.value)
    t = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.05})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        t.save_states(target)


@pytest.mark.parametrize("saved, loaded, said", [
    ({"momentum": 0.9}, {"momentum": 0.0}, "the file's optimizer holds momentum, this one does not"),
    ({"momentum": 0.9}, {"momentum": 0.9, "clip_gradient": 1.0}, "this one holds clip_gradient, the file's does not"),
    ({"momentum": 0.9}, {"momentum": 0.9, "multi_precision": True}, "multi_precision=True"),
])
def test_loading_into_other_hyperparameters_says_which_in_a_line(tmp_path, saved, loaded, said):
    a = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.1, **saved})
    a.save_states(tmp_path / "a.gx")
    b = gx.Trainer({"w": jnp.ones(3)}, "sgd", {"learning_rate": 0.1, **loaded})
    with pytest.raises(CheckpointError, match=re.escape(said)) as err:
        b.load_states(tmp_path / "a.gx")
    assert "PyTreeDef" not in str(err.value) and len(str(err.value)) < 300


def test_load_states_of_a_gluon_file_does_not_warn_about_rescale_grad():
    import test_migrate_gluon as gluon  # the recorded MXNet run (tests/fixtures/mxnet/adam)
    z, meta = gluon.load("adam")
    t = gx.Trainer(gluon.params_at(z, meta, meta["k"] - 1), gluon.make_tx(meta, rescale_grad=1.0),
                   devices=jax.local_devices()[:1])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the file's rescale_grad (1/batch_size) is the Trainer's to set
        t.load_states(gluon.states_file("adam", meta))


@pytest.mark.parametrize("lr", [[0.1, 0.01], (0.1, 0.01), np.array([0.1, 0.01])])
def test_paddle_refuses_a_learning_rate_list_as_paddle(lr):
    with pytest.raises(TypeError, match="learning rate should be float or LRScheduler.*PiecewiseDecay"):
        gx.paddle.adamw(learning_rate=lr)


def test_dir_of_paddle_lr_lists_paddles_names_only():
    names = dir(gx.paddle.lr)
    assert names == sorted(gx.paddle.lr.__all__)
    assert not {"Callable", "HOST64", "math", "np"} & set(names)
