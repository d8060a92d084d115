"""create / register: names, namespaces, and errors raised at construction."""
import pytest

import gradxform as gx


def test_names_are_case_insensitive_and_bare_means_mxnet():
    assert gx.create("SGD", momentum=0.9) is not None
    assert gx.create("mxnet.Adam") is not None
    assert "mxnet.sgd" in gx.registered_names()


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="Cannot find optimizer 'adamw2'.*adam, adamax"):
        gx.create("adamw2")


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
    ("sgd", dict(clip_gradient=-1.0), r"clip_gradient must be in \(0, inf\)"),
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
