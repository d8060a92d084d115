#!/usr/bin/env python3
"""Records the objects' surface of a framework: the public methods (with signatures), properties and
instance attributes of its optimizer base class (and each registered optimizer's additions), its trainer
and its learning-rate scheduler base class, plus the private attributes real training scripts read.

Run it in the framework's own virtual environment (issue 38 item 1)::

    /root/.pyenv/versions/3.8.18/bin/python -m venv /work/venvs/mxnet
    /work/venvs/mxnet/bin/pip install mxnet==1.9.1 numpy==1.23.5
    /work/venvs/mxnet/bin/python tools/record_object_surface.py mxnet

    /root/.pyenv/versions/3.11.7/bin/python -m venv /work/venvs/mindspore
    /work/venvs/mindspore/bin/pip install mindspore "numpy<2"   # 2.10.0's extension needs numpy 1.x
    /work/venvs/mindspore/bin/python tools/record_object_surface.py mindspore

It writes tests/data/surface/objects/<framework>.json; tests/test_optimizer_objects.py walks it. The
lists are introspected from live objects (``dir`` of the class, ``vars`` of an instance built as a
script builds one); only ``private_read`` is written here by hand: each entry says where scripts read it.
"""
import inspect
import json
import os
import sys
import warnings

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "tests", "data", "surface", "objects")

# Private attributes that public training code reads or writes, and where (searched on GitHub).
MXNET_PRIVATE = {
    "mxnet.optimizer.Optimizer": {
        "_index_update_count": "per-parameter update counts (custom optimizers, GluonCV's LR logging)",
        "_get_lr": "custom optimizers' update: lr = self._get_lr(index)",
        "_get_wd": "custom optimizers' update: wd = self._get_wd(index)",
        "_update_count": "custom optimizers' update: self._update_count(index)",
        "_all_index_update_counts": "read beside _index_update_count by per-context scripts",
    },
    "mxnet.gluon.Trainer": {
        "_optimizer": "trainer._optimizer.lr / .wd / .num_update / .set_learning_rate (GluonCV, d2l, Gluon-NLP)",
        "_params": "the trainer's Parameters in index order (Gluon-NLP's clip_grad_global_norm(trainer._params))",
        "_kvstore": "trainer._kvstore.rank / .num_workers (Horovod and dist scripts)",
        "_update_on_kvstore": "AMP's and Gluon-NLP's checks before calling allreduce_grads/update",
        "_scale": "the loss scale Gluon-NLP's FP16Trainer and AMP read and set (rescale_grad base)",
        "_contexts": "the devices (Gluon-NLP's FP16Trainer)",
        "_optimizer.num_update": "the step count in logs (GluonCV's train scripts)",
    },
    "mxnet.lr_scheduler.LRScheduler": {
        "base_lr": "scripts read and set trainer._optimizer.lr_scheduler.base_lr",
    },
}
MINDSPORE_PRIVATE = {
    "mindspore.nn.Optimizer": {
        "learning_rate": "a Parameter (or a LearningRateSchedule); callbacks read optimizer.learning_rate.data",
        "parameters": "the optimized Parameters (model zoo callbacks, EMA code)",
        "global_step": "the step Parameter callbacks read to log the learning rate",
        "dynamic_lr": "whether learning_rate is a list or a schedule",
        "is_group": "whether parameter groups were given",
        "is_group_lr": "whether the groups have their own learning rates",
        "weight_decay": "the (scaled) weight decay",
    },
}


def sig(obj):
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return None


def methods_of(cls, exclude=()):
    out = {}
    for name in sorted(dir(cls)):
        if name.startswith("__") or name in exclude:
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            continue
        if isinstance(attr, (staticmethod, classmethod)) or inspect.isfunction(attr) or callable(attr):
            if name.startswith("_") and not name.startswith("_get"):
                continue
            out[name] = sig(getattr(cls, name))
    return {k: v for k, v in out.items() if not k.startswith("_")}


def properties_of(cls, exclude=()):
    return sorted(n for n in dir(cls) if not n.startswith("_") and n not in exclude
                  and isinstance(inspect.getattr_static(cls, n), property))


def attributes_of(obj, exclude=()):
    return sorted(n for n in vars(obj) if not n.startswith("_") and n not in exclude)


def entry(name, cls, instance, *, base=None, base_instance=None, private=None, built_as=None):
    exclude_m = set(methods_of(base)) if base is not None else set()
    exclude_p = set(properties_of(base)) if base is not None else set()
    exclude_a = set(attributes_of(base_instance)) if base_instance is not None else set()
    e = {"name": name, "methods": {k: v for k, v in methods_of(cls).items() if k not in exclude_m},
         "properties": [p for p in properties_of(cls) if p not in exclude_p]}
    if instance is not None:
        e["attributes"] = [a for a in attributes_of(instance) if a not in exclude_a]
        e["built_as"] = built_as
    if private:
        e["private_read"] = private
    return e


def record_mxnet():
    import mxnet as mx
    from mxnet import gluon
    O = mx.optimizer.Optimizer
    objects = []
    base = mx.optimizer.create("sgd")
    # the base class with what every optimizer instance holds (an SGD built by name, as Gluon builds it)
    e = entry("mxnet.optimizer.Optimizer", O, base, private=MXNET_PRIVATE["mxnet.optimizer.Optimizer"],
              built_as="mx.optimizer.create('sgd')")
    e["attributes"] = [a for a in e["attributes"] if a not in ("momentum", "lazy_update")]  # SGD's own
    objects.append(e)
    base_attrs = set(e["attributes"])
    for name in sorted(O.opt_registry):
        cls = O.opt_registry[name]
        try:
            inst = mx.optimizer.create(name)
        except Exception as err:  # noqa: BLE001 -- recorded, not hidden
            inst, why = None, f"{type(err).__name__}: {err}"
        else:
            why = None
        sub = {"name": f"mxnet.optimizer.{cls.__name__}", "registered_as": name,
               "methods": {k: v for k, v in methods_of(cls).items() if k not in methods_of(O)},
               "attributes": sorted(set(attributes_of(inst)) - base_attrs) if inst is not None else None}
        if why:
            sub["not_built"] = why
        objects.append(sub)
    import mxnet.ndarray as nd
    net = gluon.nn.Dense(1, in_units=2)
    net.initialize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    with mx.autograd.record():
        loss = net(nd.ones((2, 2))).sum()
    loss.backward()
    trainer.step(2)  # the kvstore and optimizer attributes exist once a step ran
    objects.append(entry("mxnet.gluon.Trainer", gluon.Trainer, trainer, private=MXNET_PRIVATE["mxnet.gluon.Trainer"],
                         built_as="gluon.Trainer(net.collect_params(), 'sgd', {'learning_rate': 0.1}), one step"))
    L = mx.lr_scheduler.LRScheduler
    base_sched = L()
    objects.append(entry("mxnet.lr_scheduler.LRScheduler", L, base_sched,
                         private=MXNET_PRIVATE["mxnet.lr_scheduler.LRScheduler"], built_as="LRScheduler()"))
    for cls, args in ((mx.lr_scheduler.FactorScheduler, (10,)), (mx.lr_scheduler.MultiFactorScheduler, ([10, 20],)),
                      (mx.lr_scheduler.PolyScheduler, (100,)), (mx.lr_scheduler.CosineScheduler, (100,))):
        objects.append(entry(f"mxnet.lr_scheduler.{cls.__name__}", cls, cls(*args), base=L, base_instance=base_sched,
                             built_as=f"{cls.__name__}{args!r}".replace(",)", ")")))
    return {"framework": "mxnet", "version": mx.__version__, "objects": objects}


def record_mindspore():
    import mindspore as ms
    from mindspore import nn
    ms.set_context(mode=ms.PYNATIVE_MODE)
    cell = nn.Cell()
    cell_methods = set(dir(nn.Cell))
    net = nn.Dense(2, 1)
    objects = []
    O = nn.Optimizer
    base = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    e = entry("mindspore.nn.Optimizer", O, base, private=MINDSPORE_PRIVATE["mindspore.nn.Optimizer"],
              built_as="nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)")
    e["methods"] = {k: v for k, v in e["methods"].items() if k not in cell_methods}
    e["properties"] = [p for p in e["properties"] if p not in cell_methods]
    e["attributes"] = sorted(set(e["attributes"]) - set(attributes_of(cell)) - {"moments", "momentum", "opt"})
    e["excluded"] = "nn.Cell's own methods, properties and attributes (every Cell has them)"
    objects.append(e)
    for name in sorted(dir(nn)):
        cls = getattr(nn, name)
        if not (inspect.isclass(cls) and issubclass(cls, O) and cls is not O):
            continue
        objects.append({"name": f"mindspore.nn.{name}",
                        "methods": {k: v for k, v in methods_of(cls).items() if k not in methods_of(O)
                                    and k not in cell_methods}})
    S = nn.learning_rate_schedule.LearningRateSchedule
    e = entry("mindspore.nn.learning_rate_schedule.LearningRateSchedule", S, None)
    e["methods"] = {k: v for k, v in e["methods"].items() if k not in cell_methods}
    e["methods"]["construct"] = sig(S.construct)
    e["properties"] = [p for p in e["properties"] if p not in cell_methods]
    objects.append(e)
    for name in ("WarmUpLR", "PolynomialDecayLR", "CosineDecayLR", "ExponentialDecayLR", "NaturalExpDecayLR",
                 "InverseDecayLR"):
        cls = getattr(nn, name)
        objects.append({"name": f"mindspore.nn.{name}", "signature": sig(cls)})
    return {"framework": "mindspore", "version": ms.__version__, "objects": objects}


def main(argv):
    which = argv[1] if len(argv) > 1 else ""
    if which not in ("mxnet", "mindspore"):
        sys.exit("usage: record_object_surface.py mxnet|mindspore (in that framework's venv)")
    warnings.simplefilter("ignore")
    data = record_mxnet() if which == "mxnet" else record_mindspore()
    data["python"] = sys.version.split()[0]
    data["recorded_by"] = "tools/record_object_surface.py"
    os.makedirs(OUT, exist_ok=True)
    path = os.path.join(OUT, f"{which}.json")
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=False)
        f.write("\n")
    print(f"{path}: {len(data['objects'])} objects, {which} {data['version']}")


if __name__ == "__main__":
    main(sys.argv)
