"""Train an MLP on scikit-learn's digits with the gradxform Trainer, and compare optimizers.

The data are the 1,797 8x8 images bundled with scikit-learn (no download),
split 80/20. A 64-256-128-10 MLP is trained with `gradxform.Trainer`
(Gluon's Trainer: ``Trainer(params, 'sgd', {...})``) for each optimizer in
``CONFIGS`` -- SGD with momentum, Adam and RMSProp in their MXNet flavours and
MindSpore's Momentum -- on the same data, the same initial weights and the
same batches. It prints each one's test accuracy and writes a PNG of their
loss curves. The default run takes well under a minute on a 2-core laptop and
every run reaches about 98% test accuracy (97.5% at worst over seeds 0-3).

    python examples/train_digits.py                       # all four, digits_optimizers.png
    python examples/train_digits.py --optimizer sgd --epochs 50
    python examples/train_digits.py --optimizer nadam     # any gradxform.registered_names()
    python examples/train_digits.py --devices 4           # data parallel over 4 (fake CPU) devices
    python examples/train_digits.py --fast                # 1 epoch, a smoke test

``--optimizer`` takes any registered name with its default settings (and
``--lr``); names whose factory has required arguments get them from
``REQUIRED`` (``mindspore.momentum``, ``mindspore.lamb``; ``mindspore.lars``
wraps MindSpore's Momentum). ``adamax`` reaches NaN within the first epoch at its default
lr 0.002, faithfully: MXNet's Adamax divides by ``max(b2 * u, |g|)`` with no
epsilon, so a parameter whose gradient is exactly 0 from the first step on
(a dead ReLU unit's bias) gives 0/0. The accuracy panel's axis adapts to the
runs shown.

As in Gluon, the loss is the *sum* over the batch and ``batch_size`` goes to
the step, which divides the summed gradient by it.
"""
from __future__ import annotations

import argparse
import inspect
import os
import sys
import time


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--optimizer", default="adam",
                    help="the run whose test accuracy is reported: a key of CONFIGS (adam, sgd, rmsprop, "
                         "mindspore.momentum) or any registered name with its default settings and --lr")
    ap.add_argument("--lr", type=float, default=None, help="learning rate for --optimizer (overrides CONFIGS)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--devices", type=int, default=1,
                    help="data-parallel devices; on a CPU-only machine this many are faked")
    ap.add_argument("--seed", type=int, default=0, help="initial weights and batch order")
    ap.add_argument("--out", default="digits_optimizers.png", help="where to write the loss curves")
    ap.add_argument("--only", action="store_true", help="train --optimizer only (no comparison)")
    ap.add_argument("--fast", action="store_true", help="1 epoch: a smoke test, not a result")
    return ap.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and ARGS.devices > 1 and "xla_force_host_platform_device_count" not in \
        os.environ.get("XLA_FLAGS", ""):
    # Only read when JAX starts, so before `import jax`; GPUs/TPUs ignore it.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_force_host_platform_device_count={ARGS.devices}").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from tqdm import tqdm  # noqa: E402

import gradxform  # noqa: E402
from gradxform.lr_scheduler import CosineScheduler  # noqa: E402


def configs(steps: int) -> dict[str, tuple[str, dict]]:
    """label -> (name for gradxform.create, keywords). ``steps`` = total updates (for the schedules)."""
    return {
        "sgd": ("sgd", dict(learning_rate=0.1, momentum=0.9, wd=1e-4,
                            lr_scheduler=CosineScheduler(max_update=steps, base_lr=0.1))),
        "adam": ("adam", dict(learning_rate=3e-3, wd=1e-4,
                              lr_scheduler=CosineScheduler(max_update=steps, base_lr=3e-3))),
        "rmsprop": ("rmsprop", dict(learning_rate=1e-3, gamma1=0.9, wd=1e-4)),
        # MindSpore's nn.Momentum: its own keywords (weight_decay, not wd), and no
        # decay for parameters named *beta/*gamma, as in MindSpore.
        "mindspore.momentum": ("mindspore.momentum", dict(learning_rate=0.05, momentum=0.9, weight_decay=1e-4)),
    }


# -- data and model --------------------------------------------------------------------

def load_data(seed: int = 0):
    """Digits scaled to [-1, 1]; a fixed stratified 80/20 split (the same for every --seed)."""
    x, y = load_digits(return_X_y=True)
    x = (x / 8.0 - 1.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y.astype(np.int32), test_size=0.2, random_state=seed,
                                          stratify=y)
    return xtr, ytr, xte, yte


def init_mlp(key, sizes=(64, 256, 128, 10)):
    """A dict of layers; parameter names are e.g. 'dense0/weight' (see gradxform.param_names)."""
    params = {}
    for i, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        key, k = jax.random.split(key)
        params[f"dense{i}"] = {"weight": jax.random.normal(k, (n_in, n_out)) * np.sqrt(2.0 / n_in),
                               "bias": jnp.zeros((n_out,))}
    return params


def forward(params, x):
    n = len(params)
    for i in range(n):
        x = x @ params[f"dense{i}"]["weight"] + params[f"dense{i}"]["bias"]
        if i < n - 1:
            x = jax.nn.relu(x)
    return x


LABEL_SMOOTHING = 0.1  # worth about one point of test accuracy here


def loss_sum(params, batch):
    """Label-smoothed cross-entropy, summed over the batch (Gluon's convention:
    the Trainer divides the summed gradient by ``batch_size``)."""
    x, y = batch
    logp = jax.nn.log_softmax(forward(params, x))
    nll = -jnp.take_along_axis(logp, y[:, None], axis=1)[:, 0]
    return jnp.sum((1 - LABEL_SMOOTHING) * nll - LABEL_SMOOTHING * jnp.mean(logp, axis=1))


@jax.jit
def evaluate(params, x, y):
    logits = forward(params, x)
    loss = -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))
    return loss, jnp.mean(jnp.argmax(logits, axis=1) == y)


# -- one training run ---------------------------------------------------------------------

# values for the arguments a factory requires (no default), for --optimizer NAME with NAME not in
# CONFIGS: read from each factory's signature, so every registered name runs
REQUIRED = {"learning_rate": 0.01, "momentum": 0.9}
SEPARATE = {"mindspore.thor": "THOR preconditions with per-layer statistics captured in the forward and "
                              "backward pass each step: run examples/thor_digits.py"}


def required_kwargs(name: str) -> dict:
    """Keyword arguments that let ``gradxform.create(name, **kw)`` build with
    otherwise default settings (a learning rate where the optimizer has no
    default one; MindSpore's LARS wraps a Momentum)."""
    if name in SEPARATE:
        raise SystemExit(f"--optimizer {name}: {SEPARATE[name]}.")
    factory = gradxform.registered_factory(name)
    kw = {}
    for p in inspect.signature(factory).parameters.values():
        if p.name == "optimizer" and p.default is inspect.Parameter.empty:
            kw["optimizer"] = gradxform.create("mindspore.momentum", learning_rate=0.1, momentum=0.9)
        elif p.name in REQUIRED and p.default is inspect.Parameter.empty:
            kw[p.name] = REQUIRED[p.name]
    return kw


def train(label, name, kwargs, data, *, epochs, batch_size, devices, seed):
    xtr, ytr, xte, yte = data
    params = init_mlp(jax.random.PRNGKey(seed))  # the same start for every optimizer
    trainer = gradxform.Trainer(params, name, kwargs, devices=devices)
    step = trainer.compile_step(loss_sum)  # forward + backward + all-reduce + update, one program
    order = np.random.default_rng(seed)     # the same batches for every optimizer
    per_epoch = len(xtr) // batch_size
    history = {"train_loss": [], "test_loss": [], "test_acc": []}
    bar = None  # made after the first step, so that its compile time does not skew the ETA
    for _ in range(epochs):
        perm = order.permutation(len(xtr))
        for b in range(per_epoch):
            idx = perm[b * batch_size:(b + 1) * batch_size]
            loss = step((xtr[idx], ytr[idx]), batch_size)   # the loss summed over the batch
            if bar is None:
                bar = tqdm(total=epochs * per_epoch, initial=1, desc=f"{label:>18}", unit="step",
                           mininterval=0.5, file=sys.stdout)
            else:
                bar.update(1)
            if b % 8 == 7:
                bar.set_postfix(loss=f"{float(loss) / batch_size:.4f}", lr=f"{trainer.learning_rate:.2g}",
                                refresh=False)
        train_loss, _ = evaluate(trainer.params, xtr, ytr)
        test_loss, test_acc = evaluate(trainer.params, xte, yte)
        history["train_loss"].append(float(train_loss))
        history["test_loss"].append(float(test_loss))
        history["test_acc"].append(float(test_acc))
        bar.set_postfix(train_ce=f"{float(train_loss):.4f}", test_acc=f"{float(test_acc):.2%}")
    bar.close()
    return history


def plot(histories: dict, out: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    for label, h in histories.items():
        epochs = np.arange(1, len(h["train_loss"]) + 1)
        line, = ax_loss.plot(epochs, h["train_loss"], marker="o", markersize=3, label=label)  # 1 epoch: a dot
        ax_loss.plot(epochs, h["test_loss"], "--", marker="x", markersize=3, color=line.get_color(), alpha=0.7)
        ax_acc.plot(epochs, np.asarray(h["test_acc"]) * 100, marker="o", markersize=3, color=line.get_color(),
                    label=label)
    ax_loss.set(xlabel="epoch", ylabel="cross-entropy (solid: train, dashed: test)", yscale="log",
                title="loss")
    accs = [a * 100 for h in histories.values() for a in h["test_acc"] if np.isfinite(a)]
    low = min(90.0, np.floor((min(accs) if accs else 0.0) / 5) * 5)   # 90-100 unless a run is below
    ax_acc.set(xlabel="epoch", ylabel="test accuracy (%)", title="test accuracy", ylim=(low, 100.5))
    ax_loss.legend(fontsize=8)
    ax_acc.legend(fontsize=8, loc="lower right")
    ax_acc.grid(alpha=0.3)
    fig.suptitle("sklearn digits, 64-256-128-10 MLP, gradxform.Trainer")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(args) -> int:
    t0 = time.perf_counter()
    epochs = 1 if args.fast else args.epochs
    devices = jax.local_devices()
    if args.devices > len(devices):
        raise SystemExit(f"--devices {args.devices}: only {len(devices)} local devices.")
    devices = devices[:args.devices]
    if args.batch_size % len(devices):
        raise SystemExit(f"--batch-size {args.batch_size} must be a multiple of --devices {len(devices)}.")
    data = load_data()
    steps = epochs * (len(data[0]) // args.batch_size)
    runs = configs(steps)
    if args.optimizer not in runs:
        runs[args.optimizer] = (args.optimizer, required_kwargs(args.optimizer))
    if args.lr is not None:
        name, kw = runs[args.optimizer]
        kw = {k: v for k, v in kw.items() if k != "lr_scheduler"}
        runs[args.optimizer] = (name, dict(kw, learning_rate=args.lr))
    if args.only:
        runs = {args.optimizer: runs[args.optimizer]}
    print(f"digits: {len(data[0])} train / {len(data[2])} test images; {epochs} epochs of "
          f"{len(data[0]) // args.batch_size} steps; batch {args.batch_size} over "
          f"{len(devices)} {devices[0].platform} device(s)")

    histories = {}
    for label, (name, kw) in runs.items():
        histories[label] = train(label, name, kw, data, epochs=epochs, batch_size=args.batch_size,
                                 devices=devices, seed=args.seed)
    print("\ntest accuracy after the last epoch:")
    for label, h in histories.items():
        mark = "  <- --optimizer" if label == args.optimizer else ""
        print(f"  {label:>18}: {h['test_acc'][-1]:.2%}  (test loss {h['test_loss'][-1]:.4f}){mark}")
    if args.out:
        plot(histories, args.out)
        print(f"loss curves: {args.out}")
    acc = histories[args.optimizer]["test_acc"][-1]
    print(f"test accuracy ({args.optimizer}): {acc:.2%}; {time.perf_counter() - t0:.1f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(ARGS))
