"""Records the surface of Paddle's stateful objects (issue 38 item 1):
``paddle.optimizer.Optimizer`` and each subclass in ``paddle.optimizer``, and
``paddle.optimizer.lr.LRScheduler`` and each subclass in ``paddle.optimizer.lr``.

Run in Paddle's own venv (never gradxform's)::

    /root/.pyenv/versions/3.11.7/bin/python -m venv /work/venvs/paddle
    /work/venvs/paddle/bin/pip install paddlepaddle==3.3.1
    /work/venvs/paddle/bin/python tools/record_object_surface_paddle.py > tests/data/surface/objects/paddle.json

For each class: its public methods with their signatures (``inspect``), the
public attributes of an instance (built over one ``paddle.nn.Linear`` and, for
optimizers, after one ``step()``), and the private attributes that public
training code reads or writes (``PRIVATE_READ``, with where they are used),
each with the type of its value on that instance. Data, not hand-edited.
"""
import inspect
import json
import sys

import paddle

PRIVATE_READ = {
    "optimizer": {
        "_learning_rate": "isinstance(opt._learning_rate, LRScheduler): opt._learning_rate.step() "
                          "(PaddleDetection/PaddleClas/PaddleSeg loops, paddle.hapi LRScheduler callback)",
        "_parameter_list": "GradScaler._unscale, group-sharded wrappers: params=opt._parameter_list",
        "_param_groups": "EMA(opt._param_groups), loops setting group['learning_rate'] by hand",
        "_grad_clip": "if opt._grad_clip is not None: scaler.unscale_(opt) (PaddleClas); replaced by MoE clips",
        "_accumulators": "checkpoint code (PaddleNLP unified checkpoint): opt._accumulators[name][param]",
        "_master_weights": "checkpoint code: opt._master_weights (multi_precision)",
        "_multi_precision": "AMP decorators read whether master weights are kept",
        "_name": "the optimizer's name= (accumulator key prefix)",
    },
    "lr": {},
}

SCHED_ARGS = {
    "LRScheduler": {},
    "NoamDecay": dict(d_model=16, warmup_steps=4),
    "PiecewiseDecay": dict(boundaries=[2], values=[0.1, 0.01]),
    "NaturalExpDecay": dict(learning_rate=0.1, gamma=0.5),
    "InverseTimeDecay": dict(learning_rate=0.1, gamma=0.5),
    "PolynomialDecay": dict(learning_rate=0.1, decay_steps=4),
    "LinearWarmup": dict(learning_rate=0.1, warmup_steps=2, start_lr=0.0, end_lr=0.1),
    "ExponentialDecay": dict(learning_rate=0.1, gamma=0.5),
    "MultiStepDecay": dict(learning_rate=0.1, milestones=[2, 4]),
    "StepDecay": dict(learning_rate=0.1, step_size=2),
    "LambdaDecay": dict(learning_rate=0.1, lr_lambda=lambda e: 0.9 ** e),
    "ReduceOnPlateau": dict(learning_rate=0.1),
    "CosineAnnealingDecay": dict(learning_rate=0.1, T_max=4),
    "MultiplicativeDecay": dict(learning_rate=0.1, lr_lambda=lambda e: 0.9),
    "OneCycleLR": dict(max_learning_rate=0.1, total_steps=8),
    "CyclicLR": dict(base_learning_rate=0.01, max_learning_rate=0.1, step_size_up=2),
    "LinearLR": dict(learning_rate=0.1, total_steps=4),
    "CosineAnnealingWarmRestarts": dict(learning_rate=0.1, T_0=2),
}


def signature(fn):
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    out = []
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        e = {"name": p.name, "kind": p.kind.name}
        if p.default is inspect.Parameter.empty:
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                e["required"] = True
        else:
            e["value"] = p.default if isinstance(p.default, (int, float, str, bool, type(None))) else repr(p.default)
        out.append(e)
    return out


def methods(cls):
    out = {}
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, property):
            continue
        fn = getattr(cls, name)
        if callable(fn):
            out[name] = signature(fn)
    return out


def attributes(obj, cls):
    names = set(vars(obj)) | {n for n in dir(cls) if isinstance(inspect.getattr_static(cls, n), property)}
    return {n: type(getattr(obj, n, None)).__name__ for n in sorted(names) if not n.startswith("_")}


def private(obj, kind):
    return {n: {"type": type(getattr(obj, n)).__name__, "read_by": why}
            for n, why in PRIVATE_READ[kind].items() if hasattr(obj, n)}


def record_optimizers():
    base = paddle.optimizer.Optimizer
    classes = [base] + sorted((c for c in vars(paddle.optimizer).values()
                               if inspect.isclass(c) and issubclass(c, base) and c is not base),
                              key=lambda c: c.__name__)
    out = []
    for cls in classes:
        e = {"framework_name": f"paddle.optimizer.{cls.__name__}", "kind": "optimizer",
             "signature": signature(cls.__init__), "methods": methods(cls)}
        paddle.seed(0)
        lin = paddle.nn.Linear(2, 2)
        try:
            try:
                sched = paddle.optimizer.lr.StepDecay(0.1, step_size=2)
                opt = cls(learning_rate=sched, parameters=lin.parameters())
            except TypeError:  # Rprop compares learning_rate with its learning_rate_range: a float
                opt = cls(learning_rate=0.1, parameters=lin.parameters())
                e["instance_learning_rate"] = 0.1
            loss = lin(paddle.ones([1, 2])).sum()
            loss.backward()
            opt.step() if cls.__name__ != "LBFGS" else opt.step(lambda: lin(paddle.ones([1, 2])).sum())
            e["attributes"] = attributes(opt, cls)
            e["private_attributes"] = private(opt, "optimizer")
            e["state_dict_keys"] = sorted(opt.state_dict())
        except Exception as exc:  # the base class is abstract in use; record why
            e["instance_error"] = f"{type(exc).__name__}: {exc}"[:200]
        out.append(e)
    return out


def record_schedulers():
    lr = paddle.optimizer.lr
    base = lr.LRScheduler
    classes = [base] + sorted((c for c in vars(lr).values()
                               if inspect.isclass(c) and issubclass(c, base) and c is not base),
                              key=lambda c: c.__name__)
    out = []
    for cls in classes:
        e = {"framework_name": f"paddle.optimizer.lr.{cls.__name__}", "kind": "lr_scheduler",
             "signature": signature(cls.__init__), "methods": methods(cls)}
        try:
            if cls.__name__ not in SCHED_ARGS:
                raise LookupError("no constructor arguments recorded for this class")
            s = cls(**SCHED_ARGS[cls.__name__])
            e["attributes"] = attributes(s, cls)
            e["state_dict_keys"] = sorted(s.state_dict())
        except Exception as exc:  # the base class's get_lr is abstract
            e["instance_error"] = f"{type(exc).__name__}: {exc}"[:200]
        out.append(e)
    return out


if __name__ == "__main__":
    json.dump({"framework": "paddle", "version": paddle.__version__,
               "recorded_by": "tools/record_object_surface_paddle.py", "python": sys.version.split()[0],
               "entries": record_optimizers() + record_schedulers()}, sys.stdout, indent=1, sort_keys=False)
    sys.stdout.write("\n")
