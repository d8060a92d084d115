"""One name per object (issue 37, item 5): a name that a shared namespace of gradxform exports means
one object wherever gradxform exports it. The shared namespaces are those of no framework
(`gradxform.schedules`, `.pieces`, `.checkpoint`, `.migrate`, `.trainer`); a framework face may keep
its framework's names, but not for something else than the shared namespace calls by that name
(e.g. Paddle's stateful ``gradxform.paddle.lr.StepDecay`` against the in-graph
``gradxform.schedules.PaddleStepDecay``)."""
from __future__ import annotations

import importlib
import pkgutil
import types

import gradxform

SHARED = ["gradxform.schedules", "gradxform.pieces", "gradxform.checkpoint", "gradxform.migrate",
          "gradxform.trainer"]
INTERNAL = {"gradxform.schedules.internal", "gradxform.pieces.internal"}  # declared internal surfaces


def _public_modules() -> dict[str, types.ModuleType]:
    """Every public module of gradxform, the package itself included: no dotted component starting
    with ``_``, and not a declared internal surface."""
    found = {"gradxform": gradxform}
    for info in pkgutil.walk_packages(gradxform.__path__, "gradxform."):
        if info.name in INTERNAL or any(part.startswith("_") for part in info.name.split(".")):
            continue
        found[info.name] = importlib.import_module(info.name)
    return found


def _exports(module: types.ModuleType) -> set[str]:
    declared = getattr(module, "__all__", None)
    if declared is not None:
        return set(declared)
    return {n for n, v in vars(module).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}


def test_the_walk_sees_the_shared_namespaces_and_the_faces():
    modules = _public_modules()
    for name in SHARED + ["gradxform", "gradxform.paddle", "gradxform.paddle.lr", "gradxform.mxnet",
                          "gradxform.mindspore", "gradxform.lr_scheduler"]:
        assert name in modules, name
    assert not INTERNAL & set(modules)


def test_a_shared_name_is_one_object_in_every_public_module():
    modules = _public_modules()
    clashes = []
    for shared in SHARED:
        home = modules[shared]
        for name in sorted(home.__all__):
            obj = getattr(home, name)
            for other, module in sorted(modules.items()):
                if other != shared and name in _exports(module) and getattr(module, name) is not obj:
                    clashes.append(f"{shared}.{name} is not {other}.{name}")
    assert not clashes, "one name, different objects:\n" + "\n".join(clashes)
