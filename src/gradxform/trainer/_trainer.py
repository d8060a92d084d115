"""Gluon's `Trainer` (mxnet/gluon/trainer.py) over JAX devices and processes.

The class docstring says how to use it; the design notes (devices and
processes, per-device gradients, compression, the fused layout, the
sharded optimizer state) are in ``docs/trainer.md``.
"""
from __future__ import annotations

import io
import warnings
from typing import Callable, cast

import jax
import numpy as np
import optax

from .._hyper import check_range, get_hyper, get_learning_rate, hyper_names, set_learning_rate
from ..pieces.internal import MXNET_AMP, check_guard, dynamic_loss_scale, get_loss_scale, host_done
from ..pieces.internal import skip_nonfinite as guard_nonfinite
from .._fused import FlatTree, FusedState, flatten_state, fuse, unflatten_state
from .._registry import _resolve, create
from ..schedules.internal import HostSchedule, take_host_schedule
from .._tree import param_names
from ..checkpoint import load_state, read_metadata, save_state
from . import _allreduce as ar
from ._compression import parse_compression, zeros_residual
from . import _host as host
from ._resume import (check_values, is_file, is_gluon_states, keep_multipliers, migrated_state, no_order,
                      read_source, state_forms)
from ._kvstore import check_kvstore, compression_in_kvstore, scaled_loss, wants_sharding
from ._optimizer_object import MXNetOptimizer
from ._usage import NO_BATCH_SIZE, NO_GRADS, check_params_arg, check_stale, gluon_call
from ._model_state import MODEL_STATE, batch_hint, check_aux, compile_with_state
from ._zero import ShardedState

__all__ = ["Trainer"]

_KIND = "gradxform.Trainer/1"


class Trainer:
    """Applies an optimizer to a set of parameters replicated over devices (Gluon's ``Trainer``).

    Gluon's split is kept: ``step(grads, batch_size)`` is ``allreduce_grads``
    then ``update``; call the two yourself to transform the summed gradients
    in between (e.g. clip them by their global norm)::

        trainer = gradxform.Trainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9})
        grads = trainer.grads(loss_fn, batch)      # per device: leading axis = local devices
        trainer.step(grads, batch_size=len(batch)) # sum over devices, then w -= lr * sum / batch_size

        g = trainer.allreduce_grads(grads)         # summed, still one copy per device
        g = jax.vmap(clip_fn)(g)                   # any per-copy transform
        trainer.update(g, batch_size)

        step = trainer.compile_step(loss_fn)       # one program: forward, backward, all-reduce, update
        loss = step(batch, batch_size)

    **Devices and processes.** Parameters and optimizer state live on every
    device (``devices``, default all local devices); after
    `jax.distributed.initialize` the same code sums over every process's
    devices (docs/trainer.md: how).

    **Stale gradients.** A leaf given as None is a parameter the step did not
    use. With ``ignore_stale_grad=False`` that raises UserWarning (Gluon's
    exception type) naming the parameter; with True that parameter and its
    optimizer state stay as they were (the optimizer gets
    ``update_mask=`` so that its step counter skips them too).

    **Compression.** ``compression_params={'type': '2bit', 'threshold': t}``
    (or ``'1bit'``) is MXNet's gradient compression with error feedback
    before the all-reduce (`gradxform.trainer._compression`: the rule).

    Args:
      params: a pytree of floating-point arrays (one copy). Parameter names are
        '/'-joined key paths (`gradxform.param_names`); a Gluon ``.states`` file
        maps onto them in Gluon's order (`gradxform.migrate.from_gluon_states`).
      optimizer: a name for `gradxform.create` or a ready transformation.
      optimizer_params: keywords for `gradxform.create`; must be empty when
        ``optimizer`` is a transformation (as in Gluon).
      devices: the devices to replicate over (default: all local devices).
      kvstore: Gluon's kvstore type. Every synchronous one ('device'
        (default), 'local', 'nccl', 'horovod', 'dist_sync',
        'dist_device_sync') sums the gradients over all devices of all
        processes; 'dist_async' is refused. None or a single device in one
        process means no kvstore, so ``compression_params`` is ignored with
        a warning, as Gluon does.
      update_on_kvstore: None or False: every device holds the whole
        optimizer state and updates its own copy. True (MXNet's update on
        the kvstore servers): the optimizer state is sharded over the
        devices of all processes (ZeRO-1): each device keeps 1/N of every
        state buffer, updates its slice of the parameters, and the new
        parameters are all-gathered; the unsharded fused Trainer's
        arithmetic and sums (bit for bit, or one float32 rounding where XLA
        contracts an FMA differently). It needs the fused layout (ValueError with
        ``fused=False`` or for a chain that cannot run on flat buffers) and
        the first stale (None) gradient ends the sharding (with a warning:
        per-leaf counts need the per-leaf layout). Unlike Gluon, ``allreduce_grads``
        and ``update`` still work. Ignored, with a warning, without a
        kvstore or on a single device, as in Gluon.
      shard_optimizer_state: the same choice as ``update_on_kvstore``, spelled plainly.
      compression_params: see above; None for none.
      skip_nonfinite: a step whose summed gradient, optimizer update or new optimizer
        state has a NaN/Inf changes neither parameters nor state (nor residuals, for a
        gradient's); `gradxform.pieces.skip_nonfinite`, and `gradxform.check_guard` after
        every step raises `NonFiniteError` once ``max_consecutive`` steps in a row were
        bad. True, or a dict of keywords for the guard (``{'max_consecutive': 10}``).
      loss_scale: None, ``'dynamic'`` or a dict of keywords for
        `gradxform.pieces.dynamic_loss_scale` (float16 training as MXNet AMP's
        ``amp.init_trainer``: start at 2**16, skip a step whose gradients
        overflow and halve, double after 2000 clean steps up to 2**24, a new scale
        reaching the loss one step late (``delayed``); a dict overrides these:
        ``{'growth_interval': 1000}`` for ``_scale_seq_len``). `compile_step` and `grads` multiply
        the loss by the current scale (``trainer.loss_scale``) before the
        backward pass and the optimizer divides it out; gradients you compute
        yourself for `step`/`update` must be of ``loss * trainer.loss_scale``.
      fused: hold the parameters, optimizer state and residuals as a few
        flat buffers (`gradxform.fused`), so that an update is one
        elementwise pass per buffer and the all-reduce sums a few large
        buffers. None (default): whenever the chain runs on that path with
        the same arithmetic (`gradxform.fused.why_not_fused` is empty and
        `gradxform.fused.bit_exact` is True: no norm summed in another
        order, as LARS, LAMB or a global-norm clip would) and there are two
        or more parameters; True: required (ValueError where the chain
        cannot be fused at all); False: per leaf.
        Leaves of more than ``fused_max_leaf_size`` elements (default 2**16)
        keep a buffer of their own (free to enter and leave the flat form);
        the small ones are packed. None packs every leaf.
      pack_grads_on_host: ``step`` packs the gradients into the fused buffers
        in NumPy, not inside the program: a first call far shorter for many
        leaves, each step ~3 us per leaf dearer (20,000 leaves: 95.6 s -> 9.2 s;
        benchmarks/README.md). None: from 10,000 leaves on CPU devices of one
        process. The fused layout only.

    Differences from Gluon: gradients are passed in, not read from
    ``Parameter.grad``; the Trainer owns the parameters (``trainer.params``)
    and ``save_states`` stores them with the optimizer state.
    """

    def __init__(self, params, optimizer, optimizer_params=None, kvstore="device", compression_params=None,
                 update_on_kvstore=None, *, devices=None, skip_nonfinite=False, loss_scale=None, fused=None,
                 fused_max_leaf_size: int | None = 1 << 16, shard_optimizer_state=None,
                 pack_grads_on_host: bool | None = None):
        self._host_lr, given = None, optimizer_params  # an untraceable schedule, evaluated before each update
        if isinstance(optimizer, str):
            optimizer_params, self._host_lr = take_host_schedule(optimizer_params)
            tx = create(optimizer, **(optimizer_params or {}))
            self._opt_name = _resolve(optimizer)
        elif hasattr(optimizer, "init") and hasattr(optimizer, "update"):
            if optimizer_params:
                raise ValueError("Trainer(optimizer_params=...): optimizer_params must be None if optimizer is a "
                                 "transformation instead of a name (as in Gluon); build it with those parameters.")
            tx, self._opt_name = optimizer, None
            if getattr(optimizer, "lr_scheduler", None) is not None:  # a Paddle optimizer given its scheduler
                self._host_lr = HostSchedule(optimizer.lr_scheduler, "learning_rate")
        else:
            raise TypeError(f"Trainer(optimizer=...): expected an optimizer name or a transformation; "
                            f"got {type(optimizer).__name__}.")
        self._optimizer = MXNetOptimizer.bound(tx, self, given if self._opt_name else None, self._opt_name)
        if loss_scale is not None:
            kw = {} if loss_scale == "dynamic" else dict(loss_scale)
            tx = dynamic_loss_scale(tx, **{**MXNET_AMP, **kw})
        if skip_nonfinite:
            tx = guard_nonfinite(tx, **({} if skip_nonfinite is True else dict(skip_nonfinite)))
        self._guarded = bool(skip_nonfinite) or loss_scale is not None
        self._loss_scaled = loss_scale is not None
        self._leaf_tx = optax.with_extra_args_support(tx)
        leaves, self._treedef = jax.tree.flatten(params)
        self._names = param_names(params)
        check_params_arg(params, self._names, leaves)
        self._shapes = [tuple(np.shape(x)) for x in leaves]
        self._kvstore = check_kvstore(kvstore, update_on_kvstore)
        n_global = len(devices) if devices is not None else jax.device_count()
        sharded = wants_sharding(kvstore, update_on_kvstore, shard_optimizer_state, n_global)
        if sharded and fused is False:
            raise ValueError("Trainer(update_on_kvstore=True, fused=False): the sharded optimizer state "
                             "is cut from the fused layout's flat buffers; leave fused=None.")
        self._fused = ar.choose_fused(True if sharded else fused, tx, len(leaves), sharded)
        self._max_leaf = fused_max_leaf_size
        self._tx = (optax.with_extra_args_support(fuse(tx, max_leaf_size=fused_max_leaf_size))
                    if self._fused else self._leaf_tx)
        if devices is None:
            self._devices, local = None, jax.local_devices()
        else:
            self._devices = tuple(devices)
            local = [d for d in self._devices if d.process_index == jax.process_index()]
            if not local:
                raise ValueError("Trainer(devices=...): none of the devices belongs to this process.")
        self._local_devices = tuple(local)
        self._n = len(local)
        self._n_global = len(self._devices) if self._devices is not None else jax.device_count()
        self._compression = parse_compression(compression_params)
        self._compression = compression_in_kvstore(self._compression, kvstore, self._n)
        self._place = ar.Placement(self._n, self._devices)
        self._pack_on_host = ar.packs_on_host(pack_grads_on_host, len(leaves), self._devices or local) and self._fused
        self._zero = ShardedState(self._leaf_tx, self._devices) if sharded else None

        state = self._tx.init(params)
        self._has_rescale = "rescale_grad" in hyper_names(state)
        self._scale = float(get_hyper(state, "rescale_grad")) if self._has_rescale else 1.0
        if self._fused:
            layout = cast(FusedState, state).layout  # fuse(tx).init's state
            params = FlatTree(layout.ravel_concrete(params), layout)
        residual = [zeros_residual(x) for x in jax.tree.leaves(params)] if self._compression else []
        self._params, self._residual = self._place.put((params, residual))
        self._state = self._put_state(state)
        self._programs: dict = {}
        self._scaled_losses: dict = {}

    # -- layout conversions ------------------------------------------------------
    def _leaf_form(self):
        """(params, state, residual), replicated, in the per-leaf form."""
        if not self._fused:
            return self._params, self._state, self._residual
        key = ("to_leaves",)
        if key not in self._programs:
            leaf_tx, zero = self._leaf_tx, self._zero

            def body(params, state, residual):
                layout = params.layout
                if zero is not None:
                    state = zero.gather_state(state)
                return (params.unravel(), unflatten_state(leaf_tx, state),
                        layout.unravel_leaves(residual) if residual else [])

            self._programs[key] = ar.spmap(body, in_axes=(ar.STORED,) * 3, out_axes=(ar.STORED,) * 3,
                                           devices=self._devices)
        return self._programs[key](self._params, self._state, self._residual)

    def _put_state(self, state):
        """A whole optimizer state (one copy) placed as the Trainer keeps it."""
        return self._zero.put(state, self._place) if self._zero is not None else self._place.put(state)

    def _unfuse(self) -> None:
        """Moves to the per-leaf layout for good (stale gradients need per-leaf counts), state whole."""
        self._params, self._state, self._residual = self._leaf_form()
        self._fused, self._tx, self._zero = False, self._leaf_tx, None
        self._programs = {k: v for k, v in self._programs.items() if k[0] == "set"}

    @property
    def fused(self) -> bool:
        """Whether parameters and state are held as flat buffers (see ``fused=``)."""
        return self._fused

    # -- properties ------------------------------------------------------------
    @property
    def optimizer(self):
        """MXNet's Optimizer bound to this Trainer's state (`_optimizer_object`); also the transformation."""
        return self._optimizer

    @property
    def params(self):
        """A copy of the current parameters (the first local device's), per
        leaf: its arrays are the caller's, which later steps leave alone."""
        on_device = host.params_on_device(self._params, self._place.single)
        return on_device if on_device is not None else self._hand_out(host.params_of(self._params, self._place.single))

    @property
    def state(self):
        """A copy of the optimizer state (the first local device's), per leaf
        whatever the layout (`gradxform.fused.unflatten_state`); later steps
        leave it alone."""
        return self._hand_out(self._host_state())

    def _hand_out(self, tree):
        """``tree`` (per leaf, on the host) in fresh device buffers.

        Every step donates the stored arrays (deleting them): a stored array
        handed out as it is raised "Array has been deleted" in the caller's
        hands after the next step. Read on the host (`_host`) and put back,
        the copy costs a pass over the bytes and no program compiled for N
        leaves; benchmarks/README.md ("Arrays handed out", "Checkpoints at scale")."""
        return host.hand_out(tree, self._local_devices[0])

    def _host_state(self):
        """The optimizer state per leaf in NumPy, one copy (`_host`)."""
        state, zero = self._state, self._zero
        if not host.gathers_on_host(state, zero):  # shards in other processes: the all-gather program
            state, zero = self._leaf_form()[1], None
        return host.state_of(state, leaf_tx=self._leaf_tx, zero=zero, single=self._place.single)

    def _host_form(self):
        """(params, state, residual) per leaf in NumPy, one copy; residuals per local device."""
        layout = self._params.layout if self._fused else None
        return (host.params_of(self._params, self._place.single), self._host_state(),
                host.residual_of(self._residual, layout, self._place.single))

    model_state = MODEL_STATE

    @property
    def num_devices(self) -> int:
        """Local devices the parameters are replicated over (the gradients' leading axis)."""
        return self._n

    @property
    def learning_rate(self) -> float:
        """The current learning rate, schedule included: the float32 the step uses, shortest repr (0.05)."""
        lr = get_learning_rate(self._hyper_view())
        return float(str(np.float32(lr)))

    def set_learning_rate(self, lr: float) -> None:
        """Sets a new base learning rate without a recompile of the step.

        Raises UserWarning, as Gluon does, when the optimizer has a schedule."""
        if self._host_lr is not None:
            raise UserWarning("LRScheduler of the optimizer has already been defined.")
        set_learning_rate(self._hyper_view(), lr)  # host-side checks and Gluon's error
        self._set_hyper(learning_rate=lr)

    @property
    def loss_scale(self) -> float:
        """The current dynamic loss scale (1.0 without ``loss_scale=``)."""
        if not self._loss_scaled:
            return 1.0
        return float(get_loss_scale(self._hyper_view()))

    def _loss_scale_mapped(self):
        return get_loss_scale(self._state)  # one copy per device, inside the replicated state

    def _after_step(self) -> None:
        if self._guarded:
            check_guard(self._hyper_view())

    def _hyper_view(self):
        # Hyperparameters are the only per-copy scalars; slicing just those is cheap.
        if self._place.single:
            return self._state
        return jax.tree.map(lambda x: ar.unreplicate(x) if np.ndim(x) <= 1 else x, self._state)

    def _feed_host_lr(self) -> None:
        if self._host_lr is not None:  # the next update's learning rate, from the host schedule
            self._set_hyper(learning_rate=self._host_lr.next_lr(lambda: host_done(self._hyper_view())))

    def _host_lr_ran(self) -> None:
        # counted once the update ran (a failed step retries at its rate); a guard may skip it
        if self._host_lr is not None:
            self._host_lr.commit(counted=not self._guarded)

    def _set_hyper(self, **values):
        key = ("set", tuple(sorted(values)))
        if key not in self._programs:
            self._programs[key] = ar.build_set_hyper(key[1], self._devices)
        self._state = self._programs[key](self._state, {k: np.float32(v) for k, v in values.items()})

    # -- gradients ------------------------------------------------------------
    def grads(self, loss_fn: Callable, batch, *, with_loss: bool = False, has_aux: bool = False):
        """Per-device gradients of ``loss_fn(params, shard)`` at the current
        parameters, this process's ``batch`` split evenly over the local
        devices (see `per_device_grads`).

        Returns ``grads``; ``(loss, grads)`` with ``with_loss``. With
        ``has_aux`` the loss function returns ``(loss, aux)`` (model state
        such as BatchNorm statistics, metrics) and, as `jax.grad` does, this
        returns ``(grads, aux)``, or ``((loss, aux), grads)`` with
        ``with_loss``; every leaf has a leading device axis."""
        with batch_hint("grads", batch, self._n):
            batch = ar.split_batch(batch, self._n)
            if self._loss_scaled:
                key = (loss_fn, has_aux)
                scaled = self._scaled_losses.setdefault(key, scaled_loss(loss_fn, has_aux))
                value, grads = ar.grad_program(scaled, True, self._devices, with_state=True, has_aux=has_aux)(
                    self._params, batch, self._state)
                unscale = lambda x: x / self._loss_scale_mapped()  # noqa: E731
                value = (unscale(value[0]), value[1]) if has_aux else unscale(value)
            else:
                value, grads = ar.grad_program(loss_fn, True, self._devices, has_aux=has_aux)(self._params, batch)
        if with_loss:
            return value, grads
        return (grads, value[1]) if has_aux else grads

    def _split_grads(self, grads, where: str, *, need_mapped: bool):
        """(present flags, present leaves, per-device?) after host-side checks."""
        try:
            leaves = self._treedef.flatten_up_to(grads)
        except (ValueError, TypeError) as err:
            raise ValueError(f"Trainer.{where}: grads must have the parameters' structure "
                             f"{self._treedef}; {err}") from None
        mapped = None
        for name, shape, g in zip(self._names, self._shapes, leaves):
            if g is None:
                continue
            s = tuple(np.shape(g))
            per_device = s in ((self._n,) + shape, (self._n_global,) + shape)  # local stack, or global array
            this = True if per_device else False if s == shape and not need_mapped else None
            if this is None:
                raise ValueError(
                    f"Trainer.{where}: the gradient of parameter {name!r} has shape {s}; expected "
                    f"{(self._n,) + shape} (one copy per device, as a pmapped gradient gives)"
                    + ("" if need_mapped else f" or {shape} (one copy)") + ".")
            if mapped is not None and this != mapped:
                raise ValueError(f"Trainer.{where}: gradient {name!r} is "
                                 f"{'per device' if this else 'one copy'} but earlier ones are not; "
                                 "give all per device or all as one copy.")
            mapped = this
        present = tuple(g is not None for g in leaves)
        return present, [g for g in leaves if g is not None], bool(mapped)

    def _rescale(self, batch_size, where: str) -> np.float32:
        check_range(f"Trainer.{where}", "batch_size", batch_size, low=0.0, low_open=True)
        return np.float32(self._scale / batch_size)

    def _residual_of(self, present):
        return [r for here, r in zip(present, self._residual) if here] if self._compression else []

    def _set_residual(self, present, new):
        if self._compression:
            it = iter(new)
            self._residual = [next(it) if here else r for here, r in zip(present, self._residual)]

    def _leave_fused_if_stale(self, present) -> None:
        if self._zero is not None and not all(present):
            name = self._names[present.index(False)]
            warnings.warn(f"Trainer: the gradient of {name!r} is None (stale); the sharded optimizer state keeps one "
                          "step count per group of parameters, so from this step on every device holds the whole "
                          "state, per parameter (as after update_on_kvstore=False); the numbers are Gluon's.",
                          UserWarning, stacklevel=3)
        if self._fused and not all(present):
            self._unfuse()

    def _program(self, key, build):
        if key not in self._programs:
            self._programs[key] = build()
        return self._programs[key]

    # -- Gluon's step / allreduce_grads / update ------------------------------
    def allreduce_grads(self, grads=NO_GRADS):
        """Sums per-device gradients over all devices (of all processes).

        Returns the sums, still one (identical) copy per device, None where the
        input was None; with compression, what is summed is each device's
        quantized gradient and the residuals advance. Transform the result per
        copy (``jax.vmap(fn)(summed)``) and pass it to `update`.
        """
        gluon_call("allreduce_grads", grads, None)  # Gluon's allreduce_grads(): say what to type
        present, g_leaves, _ = self._split_grads(grads, "allreduce_grads", need_mapped=True)
        if not any(present):
            return grads
        self._leave_fused_if_stale(present)
        layout = self._params.layout if self._fused else None
        program = self._program(("reduce",), lambda: ar.build_reduce(self._compression, self._devices, layout))
        summed, residual = program(g_leaves, self._residual_of(present))
        self._set_residual(present, residual)
        self._after_step()
        it = iter(summed)
        return self._treedef.unflatten([next(it) if here else None for here in present])

    def update(self, grads=NO_GRADS, batch_size=NO_BATCH_SIZE, ignore_stale_grad: bool = False) -> None:
        """Applies already-summed gradients (per device, or one copy), each
        normalized by ``1 / batch_size``; see the class docstring for stale ones."""
        gluon_call("update", grads, batch_size)
        present, g_leaves, mapped = self._split_grads(grads, "update", need_mapped=False)
        check_stale(self._names, present, "update", ignore_stale_grad)
        rescale = self._rescale(batch_size, "update")
        if not any(present):
            return
        self._leave_fused_if_stale(present)
        program = self._program(("update", present, mapped), lambda: ar.build_update(
            self._tx, present, mapped, has_rescale=self._has_rescale, devices=self._devices, zero=self._zero))
        self._feed_host_lr()
        self._params, self._state = program(self._params, self._state, g_leaves, rescale)
        self._host_lr_ran()
        self._after_step()

    def step(self, grads=NO_GRADS, batch_size=NO_BATCH_SIZE, ignore_stale_grad: bool = False) -> None:
        """``allreduce_grads`` then ``update``, as one program.

        Args:
          grads: per-device gradients (leading axis = local devices); None
            leaves are stale.
          batch_size: the examples behind the summed gradient (over all
            devices and processes); gradients are normalized by 1/batch_size.
            Use 1 if the loss was already averaged over the global batch. (Gluon's
            ``step(batch_size)`` without grads raises TypeError saying what to type.)
          ignore_stale_grad: skip (rather than reject) parameters whose gradient is None.
        """
        gluon_call("step", grads, batch_size)
        present, g_leaves, _ = self._split_grads(grads, "step", need_mapped=True)
        check_stale(self._names, present, "step", ignore_stale_grad)
        rescale = self._rescale(batch_size, "step")
        if not any(present):
            return
        self._leave_fused_if_stale(present)
        packed = self._fused and self._pack_on_host and all(present)
        if packed:
            g_leaves = self._params.layout.pack_host(g_leaves, int(np.shape(g_leaves[0])[0]))
        program = self._program(("step", present, packed), lambda: ar.build_step(
            self._tx, present, self._compression, has_rescale=self._has_rescale, devices=self._devices,
            zero=self._zero, packed=packed))
        self._feed_host_lr()
        self._params, self._state, residual = program(
            self._params, self._state, g_leaves, self._residual_of(present), rescale)
        self._host_lr_ran()
        self._set_residual(present, residual)
        self._after_step()

    def compile_step(self, loss_fn: Callable, *, has_aux: bool = False, reduce_aux: str | None = None,
                     model_state=None, sync_model_state: bool = True) -> Callable:
        """One program: forward, backward, all-reduce, update.

        Returns ``run(batch, batch_size) -> loss``: ``batch`` is this process's
        batch (split over the local devices), ``loss`` the sum of
        ``loss_fn(params, shard)`` over all devices. With ``has_aux`` the loss
        function returns ``(loss, aux)``, as for `jax.value_and_grad`, and
        ``run`` returns ``(loss, aux)``, each device's aux stacked on a leading
        axis, or with ``reduce_aux='mean'`` (BatchNorm statistics) or ``'sum'``
        (counts) reduced over all devices of all processes inside the
        program, one value without that axis. Parameters, optimizer state and residuals
        are donated to the program, so no second copy is held. Same result as
        ``step(trainer.grads(loss_fn, batch), batch_size)``. Model state (BatchNorm
        statistics): ``model_state=state0`` with ``loss_fn(params, model_state, shard) ->
        (loss, new_model_state)``; the Trainer keeps it (``trainer.model_state``), averaged
        over devices each step or, ``sync_model_state=False``, per device (`_model_state`).
        """
        check_aux(has_aux, reduce_aux)
        if model_state is not None:
            return compile_with_state(self, loss_fn, model_state, sync_model_state, has_aux, reduce_aux)
        key = ("compiled", loss_fn, has_aux, reduce_aux)

        def build():
            return ar.build_compiled(
                self._tx, loss_fn, self._compression, has_rescale=self._has_rescale, devices=self._devices,
                loss_scaled=self._loss_scaled, has_aux=has_aux, zero=self._zero, reduce_aux=reduce_aux)

        self._program(key, build)

        def run(batch, batch_size):
            rescale = self._rescale(batch_size, "compile_step")
            program = self._program(key, build)  # rebuilt if the layout changed
            self._feed_host_lr()
            with batch_hint("compile_step", batch, self._n):
                self._params, self._state, self._residual, loss, aux = program(
                    self._params, self._state, self._residual, ar.split_batch(batch, self._n), rescale)
            self._host_lr_ran()
            self._after_step()
            return (loss, aux) if has_aux else loss

        return run

    # -- checkpoints ------------------------------------------------------------
    def _meta(self) -> dict:
        return {"kind": _KIND, "optimizer": self._opt_name,
                "compression": self._compression.describe() if self._compression else None}

    def save_states(self, fname) -> None:
        """Writes everything needed to resume to ``fname``, atomically (`gradxform.save_state`): the
        parameters, the optimizer state (step counts, hyperparameters, RNG keys), a host scheduler's
        position (its ``state_dict()``, restored by `load_states` as Gluon's pickled optimizer is) and
        each device's compression residual. Several processes: one file each (``f"{fname}.{rank}"``)."""
        save_state(fname, self._tree(*self._host_form()),
                   meta={**self._meta(), **(self._host_lr.position() if self._host_lr else {})})

    def load_states(self, fname, order=None) -> None:
        """Loads a ``save_states`` file; training then continues bit for bit.

        Also takes a Gluon ``.states`` file (read by `gradxform.migrate.from_gluon_states`
        for this Trainer's optimizer) or a migrated state tree: the Trainer keeps its
        parameters, residuals restart at zero, and (as in Gluon) its ``lr_mult``/``wd_mult``.
        ``fname``: a path (str, bytes, os.PathLike) or an open binary file, read once; the
        format is told from its first bytes (checkpoint magic, or a pickle of any protocol).
        ``order``: only for a Gluon file, as `from_gluon_states`' (default: Gluon's own order).

        Raises `gradxform.checkpoint.CheckpointError` ('truncated'; 'corrupt': also a FIFO,
        device or directory, or a value no run reaches, `_resume.value_error`; 'mismatch':
        another optimizer, parameter structure or compression), `gradxform.migrate.MigrateError`
        for an unusable Gluon file, ValueError for a state tree of another structure; changes
        nothing then."""
        params, state, residual = self._host_form()  # one copy of params and state; residuals per device
        current = state
        source, file_meta = read_source(fname) if is_file(fname) else fname, None
        if not is_file(fname) or is_gluon_states(source.getvalue()):
            params = self.params
            state = migrated_state(source, params, state, self._leaf_tx if self._guarded else self._optimizer,
                                   order=order)
            residual = [np.zeros(r.shape, r.dtype) for r in residual]
        else:
            no_order(order)
            forms = [self._tree(params, f, residual) for f in state_forms(state, params)]
            loaded = load_state(source, like=forms[0], alternatives=forms[1:], meta=self._meta())
            params, state, residual = loaded["params"], loaded["state"], loaded["residual"]
            file_meta = read_metadata(io.BytesIO(source.getvalue()))
        check_values(state, source.name if is_file(fname) else None)
        state = keep_multipliers(state, current)
        if self._fused:  # groups follow the loaded counts and multipliers
            state = flatten_state(self._leaf_tx, state, params, max_leaf_size=self._max_leaf)
            layout = state.layout
            params = FlatTree(layout.ravel_concrete(params), layout)
            residual = [np.concatenate([np.reshape(residual[i], (self._n, -1)) for i in group], axis=1)
                        for group in layout.groups] if self._compression else []
        params, state = self._place.put(params), self._put_state(state)
        residual = self._place.put_per_device(residual) if self._compression else []
        self._params, self._state, self._residual = params, state, residual
        if self._host_lr is not None:  # the scheduler where the file's run stopped; the count from the state
            self._host_lr.resume(file_meta)

    @staticmethod
    def _tree(params, state, residual) -> dict:
        return {"params": params, "state": state, "residual": list(residual)}


