"""Issue 26: what a chain is comes from its pieces' declarations (`gradxform._spec`),
never from their closures, and the fused path keeps to itself."""
from __future__ import annotations

import importlib
import inspect
import pathlib
import sys
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gradxform
from gradxform import pieces
from gradxform._base import transformation
from gradxform._spec import Fusion, context_use, declare, spec_of

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import spine_check  # noqa: E402

PARAMS = {"a": jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3), "b": jnp.ones((4,), jnp.float32),
          "c": jnp.full((3,), 2.0, jnp.float32)}


def _renamed_copy(module_name: str, old: str, new: str, monkeypatch):
    """A copy of a gradxform module, executed from its source with the
    identifier ``old`` renamed to ``new`` everywhere (as an edit would)."""
    original = importlib.import_module(module_name)
    source = inspect.getsource(original)
    assert source.count(old) >= 2, f"{old!r} is not used in {module_name}"
    copy = types.ModuleType(module_name + "_renamed")
    copy.__package__, copy.__file__ = original.__package__, original.__file__
    monkeypatch.setitem(sys.modules, copy.__name__, copy)
    exec(compile(source.replace(old, new), original.__file__, "exec"), copy.__dict__)
    return copy


def test_a_renamed_captured_variable_keeps_isolate_first(monkeypatch):
    # track_step(read_lr='before') with a schedule puts leaf 0 in a buffer of its own;
    # renaming the variable its update captures (as a copy of the module would) must not
    # change that: the factory declares it
    copy = _renamed_copy("gradxform.pieces._step", "read_lr", "read_order", monkeypatch)
    sched = lambda n, base: base * 0.5 ** n  # noqa: E731
    for make in (pieces.track_step, copy.track_step):
        kw = {"read_order" if make is copy.track_step else "read_lr": "before"}
        tx = gradxform.chain(make(0.1, schedule=sched, **kw), pieces.scale_by_lr())
        state = gradxform.fused(tx).init(PARAMS)
        assert state.layout.groups == ((0,), (1, 2)), make
        assert spec_of(make(0.1, schedule=sched, **kw)).fusion.isolate_first


def test_a_renamed_captured_variable_keeps_bit_exact(monkeypatch):
    # LBSGD's LARS warmup sums per-leaf norms over buffers: not bit-exact, whatever the
    # name of the variable its accumulator captures
    copy = _renamed_copy("gradxform.mxnet._momentum", "warmup_strategy", "warmup_kind", monkeypatch)
    # the copy's factory stands in for the registered one (owner names come from registration)
    monkeypatch.setitem(gradxform._registry._NAMES, copy.lbsgd, "mxnet.lbsgd")
    for make, key in ((gradxform.mxnet.lbsgd, "warmup_strategy"), (copy.lbsgd, "warmup_kind")):
        assert not gradxform.fused.bit_exact(make(learning_rate=0.1, batch_scale=2, **{key: "lars"}))
        assert gradxform.fused.bit_exact(make(learning_rate=0.1, batch_scale=2, **{key: "linear"}))


def test_the_declaration_is_what_counts():
    # a piece whose closure holds a transformation it does not declare is one piece:
    # neither fusion nor the order check look inside it
    inner = pieces.scale_by_lr()

    def init(params):
        return inner.init(params)

    @declare(fusion=Fusion())
    def update(updates, state, params=None, **extra_args):
        return inner.update(updates, state, params, **extra_args)

    hidden = transformation(init, update)
    assert context_use(hidden).needs == {}  # undeclared inner: not seen
    tx = gradxform.chain(pieces.track_step(0.1), hidden)
    assert gradxform.fused.why_not_fused(tx) == []
    declare(update, inner=(inner,))  # now it says what it runs
    assert set(context_use(hidden).needs) == {"lr"}
    with pytest.raises(ValueError, match="scale_by_lr"):
        gradxform.chain(hidden, pieces.track_step(0.1))


def test_an_optax_transformation_stays_opaque():
    import optax
    tx = gradxform.chain(pieces.track_step(0.1), optax.scale(-1.0), pieces.scale_by_lr())
    (reason,) = gradxform.fused.why_not_fused(tx)
    assert "not declared elementwise" in reason
    params = PARAMS
    state = gradxform.fused(tx).init(params)
    g = jax.tree.map(jnp.ones_like, params)
    u, _ = gradxform.fused(tx).update(g, state, params)
    u_ref, _ = tx.update(g, tx.init(params), params)
    for a, b in zip(jax.tree.leaves(u), jax.tree.leaves(u_ref)):
        np.testing.assert_array_equal(a, b)


def test_no_closure_reads_in_gradxform():
    found = spine_check.scan()
    assert found["closure reads"] == []
    assert found["locals() calls"] == []  # a factory passes its arguments on by name
    assert found["literal range bounds in pieces"] == []  # a piece's check reads its declared range
    assert found["optimizers finished outside Setup.build"] == []  # one builder, the families' hooks


@pytest.mark.parametrize("source, by_hand", [
    ("setup.finish(chain(setup.track(), rule))", True),   # what Lion did before the one builder
    ("finalize(tx, multi_precision=True)", True),
    ("class MyOptions(Setup):\n    def build(self, *body):\n        return body", True),
    ("o.build(o.rescale(), o.clip(), scale_by_lr())", False),
])
def test_the_builder_count_sees_an_optimizer_finished_by_hand(source, by_hand):
    import ast
    assert any(spine_check._builds_by_hand(n) for n in ast.walk(ast.parse(source))) is by_hand


@pytest.mark.parametrize("wrap", ["fused", "packed"])
def test_the_fused_path_leaves_a_callers_context_untouched(wrap):
    # the layout reaches the chain in a context of its own; a caller's
    # StepContext is neither written nor read for it
    # (packed packs bit-exact chains only; LAMB's per-leaf norms exercise the layout under fused)
    if wrap == "fused":
        tx = gradxform.create("mindspore.lamb", learning_rate=0.05, weight_decay=1e-3)
        ftx = gradxform.fused(tx, strict=True)
    else:
        tx = gradxform.create("mxnet.adam", learning_rate=0.05, wd=1e-3)
        ftx = gradxform.fused.packed(tx, max_leaf_size=8)
    g = jax.tree.map(lambda p: 0.1 * jnp.cos(p), PARAMS)
    state = ftx.init(PARAMS)
    sctx = gradxform.StepContext()
    got, _ = ftx.update(g, state, PARAMS, gx_context=sctx)
    assert sctx.segments is None and sctx.lr is None
    ref, _ = tx.update(g, tx.init(PARAMS), PARAMS)
    for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(ref)):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_no_import_cycles_and_no_fused_packed_cycle():
    found = spine_check.scan()
    assert not [c for c in found["import cycles"] if "gradxform._fused" in c or "gradxform._packed" in c]
    assert not any("_PACKING" in line for line in (ROOT / "src" / "gradxform" / "_packed.py").read_text().splitlines())


def test_no_import_cycles_outside_migrate():
    # (gradxform.migrate's own cycle is another change's)
    assert [c for c in spine_check.scan()["import cycles"] if "gradxform.migrate" not in c] == []


def test_every_state_is_typed():
    # state fields say what they hold (gradxform._types), and the hints resolve:
    # every NamedTuple state of the pieces and the families (the registry's)
    import importlib
    import pkgutil
    import typing
    checked = 0
    for pkg in ("pieces", *sorted({k.split(".", 1)[0] for k in gradxform.registered_names()})):
        package = importlib.import_module(f"gradxform.{pkg}")
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"gradxform.{pkg}.{info.name}")
            for cls in vars(module).values():
                if isinstance(cls, type) and issubclass(cls, tuple) and hasattr(cls, "_fields") and \
                        cls.__module__ == module.__name__ and cls.__name__.endswith("State"):
                    hints = typing.get_type_hints(cls)
                    assert set(hints) == set(cls._fields), cls
                    assert object not in hints.values() and dict not in hints.values(), (cls, hints)
                    checked += 1
    assert checked >= 50, checked  # 54 when written


def test_spine_counts_are_at_their_targets():
    # issue 26's targets, counted by the script kept apart (tools/spine_check.py)
    found = spine_check.scan()
    for what in ("closure reads", "__signature__ assignments", "_REGISTRY outside _registry.py",
                 "owner names written by hand in the families", "import cycles"):
        assert found[what] == [], (what, found[what])
    assert len(found["gradxform imports inside functions"]) <= 3, found["gradxform imports inside functions"]
