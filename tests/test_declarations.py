"""Each optimizer is declared once (`gradxform.Declaration`, in its family module's ``DECLARED``)
and everything reads that declaration: the registry, the family package's re-exports, the ranges,
the migration readers (tests/test_migrate_coverage.py) and the tests below."""
from __future__ import annotations

import json

import numpy as np
import pytest

import gradxform as gx
from gradxform._ranges import Range, declared_range
from goldens_io import GOLDENS


DECLARED = gx.declarations()


def _recorded() -> dict[str, list[str]]:
    """``{'family.name': [golden files]}``: the optimizer each committed framework golden
    records (its meta's ``optimizer``, resolved as `gradxform.create` resolves a name)."""
    out: dict[str, list[str]] = {}
    for path in sorted(GOLDENS.glob("*/**/*.npz")):
        family = path.relative_to(GOLDENS).parts[0]
        with np.load(path) as z:
            meta = json.loads(str(z["meta"])) if "meta" in z.files else {}
        name = meta.get("optimizer") if isinstance(meta, dict) else None
        if name and family in {k.split(".", 1)[0] for k in DECLARED}:
            key = next(k for k in DECLARED if gx.declaration(f"{family}.{name}") is DECLARED[k])
            out.setdefault(key, []).append(path.name)
    return out


def test_every_family_optimizer_is_declared_once():
    ours = [k for k in gx.registered_names() if gx.registered_factory(k).__module__.startswith("gradxform.")]
    assert sorted(DECLARED) == ours  # (a test's own gx.register'd optimizers are not gradxform's)
    for key, decl in DECLARED.items():
        family = key.split(".", 1)[0]
        assert key == f"{family}.{decl.name}"
        package = getattr(gx, family)
        assert gx.registered_factory(key) is getattr(package, decl.name)
        for cls in decl.classes:
            assert callable(getattr(package, cls)) and cls in package.__all__, (key, cls)
    classes = [(k.split(".", 1)[0], c) for k, d in DECLARED.items() for c in d.classes]
    assert len(classes) == len(set(classes)), "a class name is declared twice in one family"


def test_a_declared_range_is_the_one_the_checks_read():
    ranged = {k: d.ranges for k, d in DECLARED.items() if d.ranges}
    assert ranged, "no optimizer declares a range of its own"
    for key, ranges in ranged.items():
        for hyper, rng in ranges.items():
            assert declared_range(key, hyper) is rng, (key, hyper)


@pytest.mark.parametrize("key", sorted(DECLARED))
def test_goldens_exist_exactly_where_the_declaration_says(key):
    """A declaration without ``no_goldens`` is recorded by its framework in tests/goldens; one with
    a reason has no golden there, so the reason cannot go stale."""
    recorded = _RECORDED.get(key, [])
    if DECLARED[key].no_goldens is None:
        assert recorded, f"{key}: no golden in tests/goldens records it; record some or declare no_goldens"
    else:
        assert not recorded, f"{key} declares no_goldens but {recorded} record it"


_RECORDED = _recorded()


def test_a_declaration_refuses_malformed_fields():
    with pytest.raises(TypeError, match=r"classes=\.\.\.\): a tuple of class names"):
        gx.Declaration("x", classes="X")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"ranges=\.\.\.\): 'beta' is not a Range"):
        gx.Declaration("x", ranges={"beta": (0, 1)})  # type: ignore[dict-item]
    assert gx.Declaration("x", ranges={"beta": Range(0.0, 1.0)}).migrates is False


def test_declaration_resolves_names_as_create_does():
    assert gx.declaration("paddle.AdamW") is DECLARED["paddle.adamw"]
    assert gx.declaration("SGD") is DECLARED["mxnet.sgd"]
    with pytest.raises(ValueError, match="Cannot find optimizer 'paddle.adamz'"):
        gx.declaration("paddle.adamz")


def test_a_users_optimizer_under_a_declared_name_has_no_declaration():
    """`register` over a family's name replaces the optimizer: gradxform no longer declares it
    (a reader then refuses it, the table shows '-'); restored afterwards for the other tests."""
    from gradxform import _registry
    key = "neutral.lion"
    old, decl = _registry._REGISTRY[key], _registry._DECLARED[key]
    try:
        with pytest.warns(UserWarning, match="'neutral.lion' is being overridden"):
            gx.register("lion", family="neutral")(lambda **kw: gx.identity())
        assert gx.declaration(key) is None and key not in gx.declarations()
    finally:
        _registry._REGISTRY[key], _registry._DECLARED[key] = old, decl
    assert gx.declaration(key) is decl
