"""create / register: names, namespaces, and errors raised at construction."""
import inspect
import pathlib
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx
from gradxform._registry import registered_factory, registered_name


def test_names_are_case_insensitive_and_bare_means_mxnet():
    assert gx.create("SGD", momentum=0.9) is not None
    assert gx.create("mxnet.Adam") is not None
    assert "mxnet.sgd" in gx.registered_names()


def test_unknown_name_suggests_the_closest_names_in_a_short_message():
    with pytest.raises(ValueError, match="Cannot find optimizer 'adma'; did you mean .*'adam' ") as err:
        gx.create("adma")
    assert len(str(err.value)) < 160
    with pytest.raises(ValueError, match="did you mean 'mindspore.lazy_adam'"):
        gx.create("mindspore.lazyadma")


@pytest.mark.parametrize("name, key", [
    ("mindspore.AdamWeightDecay", "mindspore.adam_weight_decay"), ("mindspore.LazyAdam", "mindspore.lazy_adam"),
    ("mindspore.ProximalAdagrad", "mindspore.proximal_adagrad"), ("mindspore.RMSProp", "mindspore.rmsprop"),
    ("mindspore.Momentum", "mindspore.momentum"), ("SGD", "mxnet.sgd"), ("mxnet.NAG", "mxnet.nag"),
    ("paddle.ASGD", "paddle.asgd"), ("paddle.AdamW", "paddle.adamw"), ("mindspore.adam_weight_decay", "mindspore.adam_weight_decay"),
])
def test_framework_class_names_resolve_case_and_underscore_blind(name, key):
    from gradxform._registry import _resolve
    assert _resolve(name) == key
    kw = {"learning_rate": 0.1, "momentum": 0.9} if key == "mindspore.momentum" else {}
    assert gx.create(name, **kw) is not None


def test_unknown_keyword_names_the_optimizers_own_keywords_and_the_closest():
    with pytest.raises(TypeError, match=r"unknown keyword 'lr'; did you mean 'learning_rate'\? It takes: "
                                        r"learning_rate, beta1, beta2, epsilon, lazy_update, wd, rescale_grad"):
        gx.create("adam", lr=0.1)
    with pytest.raises(TypeError, match=r"gradxform.mxnet.adam: unknown keyword 'bta1'; did you mean 'beta1'\?"):
        gx.mxnet.adam(bta1=0.9)   # called directly: create's message, not Python's bare one (issue 39)
    with pytest.raises(TypeError, match=r"unknown keyword 'wd'; did you mean 'weight_decay'"):
        gx.create("mindspore.adam", wd=0.1)


def test_help_lists_every_keyword_without_bare_kwargs():
    import inspect
    for key in gx.registered_names():
        sig = inspect.signature(registered_factory(key))
        assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()), key
    sig = inspect.signature(gx.mxnet.adam)
    for k in ("wd", "rescale_grad", "clip_gradient", "lr_mult", "lr_scheduler", "param_dict", "aggregate_num"):
        assert k in sig.parameters


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="momentun"):
        gx.create("sgd", momentun=0.9)
    with pytest.raises(TypeError, match="beta3"):
        gx.create("adam", beta3=0.9)


@pytest.mark.parametrize("name, kwargs, message", [
    ("sgd", dict(learning_rate=-0.1), r"mxnet.sgd\(learning_rate=...\): learning_rate must be in \[0, inf\)"),
    ("adam", dict(beta1=1.0), r"beta1 must be in \[0, 1\)"),
    ("adam", dict(beta2=-0.1), r"beta2 must be in \[0, 1\)"),
    ("adam", dict(epsilon=0.0), r"epsilon must be in \(0, inf\)"),
    ("rmsprop", dict(epsilon=-1e-8), "epsilon"),
    ("sgd", dict(wd=-1e-4), r"wd must be in \[0, inf\)"),
    ("sgd", dict(momentum=1.2), "momentum"),
    ("lbsgd", dict(warmup_strategy="cubic"), "warmup_strategy"),
    ("signum", dict(momentum=0.0, wd_lh=0.1), "wd_lh"),
])
def test_bad_values_raise_at_construction(name, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gx.create(name, **kwargs)


def test_multiplier_that_matches_no_parameter_is_reported_at_init():
    tx = gx.create("sgd", lr_mult={"decoder/*": 2.0})
    with pytest.raises(ValueError, match="decoder"):
        tx.init({"encoder": {"w": 1.0}})


@pytest.fixture
def clean_registry():
    """Registrations made by a test do not leak into the others (the README's table, the harness)."""
    from gradxform import _registry
    saved, names = dict(_registry._REGISTRY), dict(_registry._NAMES)
    yield
    _registry._REGISTRY.clear()
    _registry._REGISTRY.update(saved)
    _registry._NAMES.clear()
    _registry._NAMES.update(names)


def test_register_adds_a_factory_and_warns_on_override(clean_registry):
    @gx.register("my_sgd", family="custom")
    def my_sgd(learning_rate=0.1):
        return gx.mxnet.sgd(learning_rate=learning_rate)

    assert gx.create("custom.my_sgd", learning_rate=0.2) is not None
    with pytest.warns(UserWarning, match="overridden"):
        gx.register("my_sgd", family="custom")(lambda: None)


def test_bare_register_on_a_function_and_on_a_class(clean_registry):
    @gx.register
    def my_plain_sgd(learning_rate=0.1):
        return gx.mxnet.sgd(learning_rate=learning_rate)

    assert callable(my_plain_sgd) and my_plain_sgd.__name__ == "my_plain_sgd"   # not replaced
    tx = gx.create("my_plain_sgd", learning_rate=0.5)
    params = {"w": jnp.ones(2)}
    u, _ = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
    np.testing.assert_allclose(u["w"], -0.5)

    @gx.register                     # MXNet's idiom: @mx.optimizer.Optimizer.register on a class
    class MyOptimizer:
        def __init__(self, learning_rate=0.01):
            self.lr = learning_rate

        def init(self, params):
            return ()

        def update(self, updates, state, params=None):
            return jax.tree.map(lambda g: -self.lr * g, updates), state

    assert isinstance(MyOptimizer, type)
    tx = gx.create("MyOptimizer", learning_rate=0.25)   # create_optimizer('MyOptimizer')
    u, _ = tx.update({"w": jnp.ones(2)}, tx.init(params), params)
    np.testing.assert_allclose(u["w"], -0.25)
    with pytest.raises(TypeError, match="unknown keyword 'lr'; did you mean 'learning_rate'"):
        gx.create("myoptimizer", lr=0.1)


def test_family_modules_answer_to_their_frameworks_class_names():
    # a script that wrote nn.Momentum(...) / paddle.optimizer.AdamW(...) runs with its import changed
    assert gx.paddle.AdamW is gx.paddle.adamw
    assert gx.mxnet.RMSProp is gx.mxnet.rmsprop and gx.mindspore.LARS is gx.mindspore.lars
    with pytest.raises(AttributeError, match="Momentm"):
        gx.mindspore.Momentm  # noqa: B018
    with pytest.raises(AttributeError):
        gx.mxnet.sgdd  # noqa: B018


# -- issue 26 item 2: one construction path, names from registration, truthful signatures ---------

FAMILIES = tuple(sorted({k.split(".", 1)[0] + "." for k in gx.registered_names()}))  # every family, from the registry
OWNER_PARAMS = {"dense": {"kernel": jnp.ones((2, 2)), "bias": jnp.ones(2)}}


@pytest.mark.parametrize("key", [k for k in gx.registered_names() if k.startswith(FAMILIES)])
def test_every_family_factory_owner_name_is_its_registered_name(key):
    import tests.cases as cases
    from gradxform._hyper import _hyper_dicts
    from gradxform._ranges import owner_of

    factory = registered_factory(key)
    assert registered_name(factory) == key
    kwargs = cases.case(key).kwargs
    if key == "mindspore.lars":
        kwargs = dict(optimizer=gx.mindspore.momentum(0.1, 0.9))
    state = cases.create(key, **kwargs).init(OWNER_PARAMS)
    # the owner that finalize/tag_owner stamps on the optimizer's own hyperparameters
    owners = {owner_of(k) for d in _hyper_dicts(state) for k in d if isinstance(k, str)} - {None}
    if key == "mindspore.lars":
        owners -= {"mindspore.momentum"}  # the wrapped optimizer keeps its own
    assert owners == {key}, (key, owners)


@pytest.mark.parametrize("key", [k for k in gx.registered_names() if k.startswith(FAMILIES)
                                 and k != "mindspore.lars"])  # LARS wraps an optimizer: no learning rate of its own
def test_bad_value_messages_name_the_registered_optimizer(key):
    # the owner in messages is the registered name (lazy_adam and ccsgd name themselves)
    import tests.cases as cases
    with pytest.raises((ValueError, TypeError), match=re.escape(key)):
        gx.create(key, **{**cases.case(key).kwargs, "learning_rate": -1.0})


def test_no_signature_rewriting_and_no_private_registry_access_in_the_package():
    root = pathlib.Path(gx.__file__).parent
    for path in root.rglob("*.py"):
        text = path.read_text()
        assert "__signature__" not in text, path
        if path.name != "_registry.py":
            assert "_REGISTRY" not in text, path


def test_mxnet_factories_and_classes_list_the_common_keywords_with_mxnets_defaults():
    from gradxform.mxnet._common import COMMON_DEFAULTS
    names = [c for d in gx.declarations("mxnet").values() for c in d.classes]
    classes = [getattr(gx.mxnet, n) for n in names]
    assert len(classes) >= 18, classes
    for f in [registered_factory(k) for k in gx.registered_names() if k.startswith("mxnet.")] + classes:
        ps = inspect.signature(f).parameters
        for k, v in COMMON_DEFAULTS.items():
            assert k in ps, (f.__name__, k)
            if ps[k].kind is not inspect.Parameter.POSITIONAL_OR_KEYWORD:  # LBSGD: multi_precision positional
                assert ps[k].kind is inspect.Parameter.KEYWORD_ONLY, (f.__name__, k)
            assert ps[k].default == v, (f.__name__, k)
        assert not any(p.kind is p.VAR_KEYWORD for p in ps.values()), f.__name__


def _one_step(tx, params={"fc1_weight": jnp.full(3, 2.0), "fc1_bias": jnp.full(3, -1.0)}):
    grads = jax.tree.map(lambda p: jnp.full_like(p, 0.5), params)
    u, _ = tx.update(grads, tx.init(params), params)
    return u


@pytest.mark.parametrize("cls, args, factory, kwargs", [
    ("AdaDelta", (0.5,), "adadelta", dict(rho=0.5)),                 # mx.optimizer.AdaDelta(0.5): rho
    ("AdaGrad", (1e-3,), "adagrad", dict(eps=1e-3)),
    ("DCASGD", (0.5, 0.1), "dcasgd", dict(momentum=0.5, lamda=0.1)),
    ("FTML", (0.5, 0.9, 1e-6), "ftml", dict(beta1=0.5, beta2=0.9, epsilon=1e-6)),
    ("Ftrl", (0.02, 0.3, 2.0), "ftrl", dict(lamda1=0.02, learning_rate=0.3, beta=2.0)),
    ("LBSGD", (0.5, False, "sqrt", 2), "lbsgd", dict(momentum=0.5, warmup_strategy="sqrt", warmup_epochs=2)),
    ("NAG", (0.5,), "nag", dict(momentum=0.5)),
    ("SGD", (0.5,), "sgd", dict(momentum=0.5)),
    ("ccSGD", (0.5,), "ccsgd", dict(momentum=0.5)),
])
def test_mxnet_classes_take_mxnets_positional_order(cls, args, factory, kwargs):
    common = dict(wd=0.01, learning_rate=0.2) if cls != "Ftrl" else dict(wd=0.01)
    a = _one_step(getattr(gx.mxnet, cls)(*args, **common))
    b = _one_step(getattr(gx.mxnet, factory)(**kwargs, **common))
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_array_equal(x, y)
    assert float(jnp.abs(jax.tree.leaves(a)[0]).max()) > 0


def test_mxnet_create_and_register_are_mxnets():
    np.testing.assert_array_equal(_one_step(gx.mxnet.create("SGD", learning_rate=0.1, momentum=0.9))["fc1_weight"],
                                  _one_step(gx.mxnet.sgd(0.1, 0.9))["fc1_weight"])
    with pytest.raises(ValueError, match="Cannot find optimizer"):
        gx.mxnet.create("sgdd")
    with pytest.raises(ValueError, match=r"gradxform.create\('mindspore.adam'\)"):
        gx.mxnet.create("mindspore.adam")
    assert list(inspect.signature(gx.mxnet.register).parameters) == ["klass"]


def test_mxnet_register_takes_a_class_as_mxnet_does(clean_registry):
    @gx.mxnet.register
    class HalfSGD:
        def __init__(self, learning_rate=0.1):
            self.lr = learning_rate

        def init(self, params):
            return ()

        def update(self, updates, state, params=None):
            return jax.tree.map(lambda g: -self.lr / 2 * g, updates), state

    assert "mxnet.halfsgd" in gx.registered_names()
    np.testing.assert_allclose(_one_step(gx.mxnet.create("halfsgd", learning_rate=0.5))["fc1_weight"], -0.125)


def test_mindspore_classes_take_params_first_and_show_it():
    for name in ("Momentum", "SGD", "Adam", "LazyAdam", "AdamOffload", "AdamWeightDecay", "Lamb", "Adagrad",
                 "ProximalAdagrad", "FTRL", "RMSProp", "AdaFactor"):
        assert list(inspect.signature(getattr(gx.mindspore, name)).parameters)[0] == "params", name
    assert list(inspect.signature(gx.mindspore.thor).parameters)[:4] == ["net", "learning_rate", "damping",
                                                                         "momentum"]
    groups = [{"params": ["fc1_weight"], "lr": 0.05}, {"params": ["fc1_bias"]}]
    a = _one_step(gx.mindspore.Momentum(groups, 0.1, 0.9, 0.01))
    b = _one_step(gx.mindspore.momentum(0.1, 0.9, 0.01, params=groups))
    c = _one_step(gx.mindspore.momentum(0.1, 0.9, 0.01, groups=groups))
    for x, y, z in zip(jax.tree.leaves(a), jax.tree.leaves(b), jax.tree.leaves(c)):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(x, z)
    with pytest.raises(TypeError, match=r"params.*the parameters come first"):
        gx.mindspore.SGD(0.1, 0.9)   # a learning rate where MindSpore puts params


def test_mindspore_thor_requires_its_hyperparameters():
    with pytest.raises(TypeError, match="missing required argument 'damping'"):
        gx.create("mindspore.thor", learning_rate=0.1, momentum=0.9, layers={})


def test_help_of_create_lists_the_families_and_registered_names():
    doc = gx.create.__doc__
    for word in ("registered_names()", "gradxform.mxnet", "gradxform.mindspore", "gradxform.paddle"):
        assert word in doc, word


@pytest.mark.parametrize("name", ["adamw", "AdamW", "mxnet.adamw", "adam_weight_decay"])
def test_asking_for_adamw_names_the_decoupled_rules(name):
    with pytest.raises(ValueError) as err:
        gx.create(name)
    msg = str(err.value)
    assert "'paddle.adamw'" in msg and "'mindspore.adam_weight_decay'" in msg and "coupled" in msg
    assert "did you mean 'adam'" not in msg


def test_weight_decay_on_mxnet_adam_says_what_wd_is():
    with pytest.raises(TypeError) as err:
        gx.create("adam", weight_decay=0.01)
    msg = str(err.value)
    assert "'wd'" in msg and "coupled L2" in msg and "'paddle.adamw'" in msg
