"""create / register: names, namespaces, and errors raised at construction."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform as gx


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
    with pytest.raises(TypeError, match=r"unknown keyword 'bta1'; did you mean 'beta1'"):
        gx.mxnet.adam(bta1=0.9)   # called directly: the same message
    with pytest.raises(TypeError, match=r"unknown keyword 'wd'; did you mean 'weight_decay'"):
        gx.create("mindspore.adam", wd=0.1)


def test_help_lists_every_keyword_without_bare_kwargs():
    import inspect
    for key in gx.registered_names():
        from gradxform._registry import _REGISTRY
        sig = inspect.signature(_REGISTRY[key])
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
    saved = dict(_registry._REGISTRY)
    yield
    _registry._REGISTRY.clear()
    _registry._REGISTRY.update(saved)


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
    assert gx.mindspore.Momentum is gx.mindspore.momentum
    assert gx.mindspore.AdamWeightDecay is gx.mindspore.adam_weight_decay
    assert gx.paddle.AdamW is gx.paddle.adamw
    assert gx.mxnet.RMSProp is gx.mxnet.rmsprop and gx.mxnet.NAG is gx.mxnet.nag
    with pytest.raises(AttributeError, match="Momentm"):
        gx.mindspore.Momentm  # noqa: B018
    with pytest.raises(AttributeError):
        gx.mxnet.sgdd  # noqa: B018  (lower case: only class names are looked up)


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
