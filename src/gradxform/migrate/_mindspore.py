"""Reading a MindSpore optimizer checkpoint (``.ckpt``, protobuf) without MindSpore.

Schema (``mindspore/train/checkpoint.proto``, proto2, no package; see
``tools/MINDSPORE_NOTES.md`` section 8)::

    message Checkpoint {
      message Value { required string tag = 1;
                      oneof value { TensorProto tensor = 2; MapTensorProto maptensor = 3; } }
      repeated Value value = 1;
    }
    message TensorProto { repeated int64 dims = 1; required string tensor_type = 2;
                          required bytes tensor_content = 3; }
    message MapTensorProto { repeated TensorProto tensor = 1; }

The file is a concatenation of one-``Value`` messages (so it parses as one
``Checkpoint``); a tensor over 512 MiB is split along axis 0 into consecutive
values with the same tag, each carrying the full dims; a ``crc_num`` trailer
(``crc_check=True``) is checked and stripped. The message classes are built
here at runtime from a ``descriptor_pb2`` description: no generated code.
"""
from __future__ import annotations

import binascii
import math
from functools import lru_cache

import jax
import jax.numpy as jnp
import numpy as np

from .._tree import param_names
from .._warn import warn_at_caller
from ..mindspore._adam import AmsgradState, BetaPowerState, LambState
from ..mindspore._adafactor import AdaFactorState
from ..mindspore._adaptive import AccumState, MindSporeFtrlState, RMSPropState
from ..mindspore._get_lr import options_of
from ..mindspore._momentum import SGDMomentumState
from ..pieces.internal import AdadeltaState, AveragedState, MomentsState, RpropState, RunningPowerState, TraceState
from ..pieces.internal import StepState
from ._errors import refuse_unmigratable, short
from ._ndarray import Budget
from ._pickle import _BUDGET_FACTOR, _BUDGET_SLACK, MigrateError, read_bytes
from ._loss_scale import mindspore_scale
from ._state import SET_BY_CALLER, Slot, at_boundary, checked_count, fill_state, has_slot, tree_hyper

__all__ = ["read_mindspore_checkpoint", "from_mindspore_checkpoint"]

WHO = "from_mindspore_checkpoint"
_ENTRY_BYTES = 800  # measured (tracemalloc): ~790 bytes of Python objects per entry, result included

_DTYPES = {"Float32": "<f4", "Float16": "<f2", "Float64": "<f8", "Int8": "i1", "UInt8": "u1",
           "Int16": "<i2", "UInt16": "<u2", "Int32": "<i4", "UInt32": "<u4", "Int64": "<i8",
           "UInt64": "<u8", "Bool": "?"}


@lru_cache(maxsize=1)
def _checkpoint_class():
    from google.protobuf import descriptor_pb2, descriptor_pool  # noqa: PLC0415  (optional extra)
    try:
        from google.protobuf.message_factory import GetMessageClass  # noqa: PLC0415  # pyright: ignore[reportAssignmentType]  # the fallback below is for older protobuf
    except ImportError:  # protobuf < 4.22
        from google.protobuf import message_factory  # noqa: PLC0415

        def GetMessageClass(desc):  # noqa: N802
            return message_factory.MessageFactory(desc.file.pool).GetPrototype(desc)  # pyright: ignore[reportAttributeAccessIssue]  # protobuf < 4.22 only

    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="gradxform_ms_checkpoint.proto", package="gradxform_ms",
                                             syntax="proto2")

    def field(msg, name, number, label, ftype, type_name=None, oneof=None):
        f = msg.field.add(name=name, number=number, label=label, type=ftype)
        if type_name:
            f.type_name = type_name
        if oneof is not None:
            f.oneof_index = oneof

    tensor = fdp.message_type.add(name="TensorProto")
    field(tensor, "dims", 1, F.LABEL_REPEATED, F.TYPE_INT64)
    field(tensor, "tensor_type", 2, F.LABEL_REQUIRED, F.TYPE_STRING)
    field(tensor, "tensor_content", 3, F.LABEL_REQUIRED, F.TYPE_BYTES)
    maptensor = fdp.message_type.add(name="MapTensorProto")
    field(maptensor, "tensor", 1, F.LABEL_REPEATED, F.TYPE_MESSAGE, ".gradxform_ms.TensorProto")
    ckpt = fdp.message_type.add(name="Checkpoint")
    value = ckpt.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "tag", 1, F.LABEL_REQUIRED, F.TYPE_STRING)
    field(value, "tensor", 2, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, ".gradxform_ms.TensorProto", oneof=0)
    field(value, "maptensor", 3, F.LABEL_OPTIONAL, F.TYPE_MESSAGE, ".gradxform_ms.MapTensorProto", oneof=0)
    field(ckpt, "value", 1, F.LABEL_REPEATED, F.TYPE_MESSAGE, ".gradxform_ms.Checkpoint.Value")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return GetMessageClass(pool.FindMessageTypeByName("gradxform_ms.Checkpoint"))


@at_boundary(WHO)
def read_mindspore_checkpoint(fname) -> dict[str, object]:
    """``{tag: numpy array}`` (strings as ``str``) from a MindSpore ``.ckpt``.

    Needs the ``protobuf`` package (``pip install gradxform[migrate]``).
    Raises `MigrateError` for a truncated, corrupt, encrypted or CRC-failing file.
    """
    data, label = read_bytes(fname, WHO)
    what = f"{WHO}({label!r})"
    if len(data) >= 17 and data[-17:-10] == b"crc_num":
        want = int.from_bytes(data[-10:], "big")
        if binascii.crc32(data[:-17]) & 0xFFFFFFFF != want:
            raise MigrateError(f"{what}: the CRC check failed; the file is corrupt or truncated.")
        data = data[:-17]
    try:
        from google.protobuf.message import DecodeError  # noqa: PLC0415
    except ImportError as err:  # pragma: no cover - the extra is declared
        raise ImportError("from_mindspore_checkpoint needs protobuf: pip install 'gradxform[migrate]'") from err
    msg = _checkpoint_class()()
    try:
        msg.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as err:
        raise MigrateError(f"{what}: not a readable MindSpore checkpoint ({err}); the file is truncated, "
                           "corrupt, or encrypted (enc_key).") from None
    if not msg.value:
        raise MigrateError(f"{what}: the checkpoint holds no tensors.")
    # Entries are counted against the file: each costs the reader about _ENTRY_BYTES
    # of Python objects however few bytes it takes on disk, and its data is copied
    # twice (out of the message, into the array).
    budget = Budget(_BUDGET_FACTOR * len(data) + _BUDGET_SLACK)
    out: dict[str, object] = {}
    pieces: list[tuple[str, list, str, list]] = []  # consecutive slices with one tag are joined
    seen: set[str] = set()
    for v in msg.value:
        budget.take(_ENTRY_BYTES, what)
        if v.WhichOneof("value") != "tensor":
            raise MigrateError(f"{what}: entry {short(v.tag)} is a MapTensor (a MapParameter); not supported.")
        if not isinstance(v.tag, str) or not v.tag:
            raise MigrateError(f"{what}: an entry's tag is {short(v.tag)}, not a parameter name (text).")
        t = v.tensor
        if t.tensor_type != "str" and t.tensor_type not in _DTYPES:
            raise MigrateError(f"{what}: {short(v.tag)} has tensor type {short(t.tensor_type)}, which is not "
                               "supported.")
        if len(t.dims) > 32:
            raise MigrateError(f"{what}: {short(v.tag)} has {len(t.dims)} dims; not an array shape.")
        content = t.tensor_content
        budget.take(2 * len(content), what)
        if pieces and pieces[-1][0] == v.tag:
            if list(t.dims) != pieces[-1][1] or t.tensor_type != pieces[-1][2]:
                raise MigrateError(f"{what}: slices of {short(v.tag)} disagree on dims or type.")
            pieces[-1][3].append(content)
        else:
            if v.tag in seen:  # a set: a file of n tags is checked in O(n), not O(n**2)
                raise MigrateError(f"{what}: tag {short(v.tag)} appears twice.")
            seen.add(v.tag)
            pieces.append((v.tag, list(t.dims), t.tensor_type, [content]))
    for tag, dims, ttype, chunks in pieces:
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if ttype == "str":
            out[tag] = np.frombuffer(raw, f"<U{len(raw) // 4}")[0] if raw else ""
            continue
        dt = np.dtype(_DTYPES[ttype])
        shape = () if dims in ([], [0]) else tuple(int(d) for d in dims)
        if any(d < 0 for d in shape):
            raise MigrateError(f"{what}: {short(tag)} has dims {short(shape)}; not an array shape.")
        n = math.prod(shape)
        if len(raw) != n * dt.itemsize:
            raise MigrateError(f"{what}: {short(tag)} holds {len(raw)} bytes; dims {short(shape)} of {ttype} "
                               f"need {n * dt.itemsize} (truncated or corrupt).")
        out[tag] = np.frombuffer(raw, dt).reshape(shape).astype(dt.newbyteorder("="))
    return out


# ---------------------------------------------------------------------------
# Checkpoint entries -> gradxform state
# ---------------------------------------------------------------------------
# Where MindSpore keeps a (1,) zero for a slot a parameter does not use (AdaFactor's factors of a
# vector, its full second moment of a matrix), gradxform keeps nothing, ``()``: a shape function
# gives the file's shape of a parameter's entry, or None for such a placeholder.
def _factored_row(shape):
    return shape[:-1] if len(shape) > 1 else None


def _factored_col(shape):
    return shape[:-2] + shape[-1:] if len(shape) > 1 else None


def _unfactored(shape):
    return shape if len(shape) <= 1 else None


def _per_parameter_scalar(shape):
    return ()


def _slot(spec) -> Slot:
    return spec if isinstance(spec, Slot) else spec[0]


class _Kind:
    """One optimizer's layout. ``slots``: a tag prefix, separator included ('moment1.', 'mu_'), ->
    the `Slot` each parameter's entry fills (or ``(Slot, shape function)`` when the entry is not
    shaped like its parameter). ``optional``: ``{prefix: (slot, what the file's entries hold, what
    tx's slot holds)}``, entries a run keeps or not with its hyperparameters, as tx keeps the slot.
    ``whole``: a tag -> the `Slot` the one number fills (when present). ``needs``/``without``:
    tags that tell it apart from a kind with the same prefixes (all present / none present).
    ``steps``: tags holding the step count again, checked against ``global_step``."""

    def __init__(self, name, slots, whole=None, needs=(), without=(), optional=None, steps=()):
        self.name, self.slots, self.whole = name, dict(slots), dict(whole or {})
        self.needs, self.without, self.steps = tuple(needs), tuple(without), tuple(steps)
        self.optional = dict(optional or {})

    @property
    def prefixes(self):
        return tuple(self.slots)

    def fits(self, present, tags):
        return set(self.prefixes) <= present and all(t in tags for t in self.needs) and \
            not any(t in tags for t in self.without)


_BETA_POWERS = {"beta1_power": Slot(BetaPowerState, "beta1_power"),
                "beta2_power": Slot(BetaPowerState, "beta2_power")}
# Tried in order: the first kind that fits (its prefixes, ``needs`` and ``without``): AdaMax before
# Adam (the same moment1/moment2, one beta power), Adadelta before Adagrad (accum beside accum_update).
_KINDS = (
    _Kind("Adam (amsgrad)", {"moment1.": Slot(AmsgradState, "mu"), "moment2.": Slot(AmsgradState, "nu"),
                             "vhat.": Slot(AmsgradState, "vhat")}, whole=_BETA_POWERS),
    _Kind("AdaMax", {"moment1.": Slot(MomentsState, "mu"), "moment2.": Slot(MomentsState, "nu")},
          whole={"beta1_power": Slot(RunningPowerState, "beta1_power")}, needs=("beta1_power",),
          without=("beta2_power",)),
    _Kind("Adam / LazyAdam / AdamOffload", {"moment1.": Slot(MomentsState, "mu"),
                                            "moment2.": Slot(MomentsState, "nu")}, whole=_BETA_POWERS),
    _Kind("AdamWeightDecay", {"adam_m.": Slot(MomentsState, "mu"), "adam_v.": Slot(MomentsState, "nu")}),
    _Kind("Lamb", {"lamb_m.": Slot(LambState, "mu"), "lamb_v.": Slot(LambState, "nu")}),
    _Kind("FTRL", {"moments.": Slot(MindSporeFtrlState, "accum"), "linear.": Slot(MindSporeFtrlState, "linear")}),
    _Kind("Momentum", {"moments.": Slot(TraceState, "trace", "momentum")}),
    _Kind("SGD", {"accum.": Slot(SGDMomentumState, "accum"), "stat.": Slot(SGDMomentumState, "stat")}),
    _Kind("Adadelta", {"accum.": Slot(AdadeltaState, "accum"), "accum_update.": Slot(AdadeltaState, "accum_update")}),
    _Kind("Adagrad / ProximalAdagrad", {"accum.": Slot(AccumState, "accum")}),
    _Kind("RMSProp (centered)", {"mean_square.": Slot(RMSPropState, "mean_square"),
                                 "mean_grad.": Slot(RMSPropState, "mean_grad"),
                                 "moment.": Slot(RMSPropState, "moment")}),
    _Kind("RMSProp", {"mean_square.": Slot(RMSPropState, "mean_square"),
                      "moment.": Slot(RMSPropState, "moment")}),
    _Kind("Rprop", {"prev.": Slot(RpropState, "prev"), "step_size.": Slot(RpropState, "step_size")}),
    # mindspore/nn/optim/asgd.py: Parameter(name='mu_' + p.name), 'eta_' + p.name (one float32 each),
    # self._parameters.clone(prefix='ax_') ('ax_.' + p.name)
    _Kind("ASGD", {"ax_.": Slot(AveragedState, "ax"), "mu_": (Slot(AveragedState, "mu"), _per_parameter_scalar),
                   "eta_": (Slot(AveragedState, "eta"), _per_parameter_scalar)}),
    # mindspore/nn/optim/adafactor.py: 'exp_avg_sq_row_' + p.name etc.; exp_avg.<p> only with beta1 > 0
    # (else one shared unnamed zero, 'Parameter$1', which nothing reads); afactor_step: float32 (1,)
    _Kind("AdaFactor", {"exp_avg_sq_row_": (Slot(AdaFactorState, "exp_avg_sq_row"), _factored_row),
                        "exp_avg_sq_col_": (Slot(AdaFactorState, "exp_avg_sq_col"), _factored_col),
                        "exp_avg_sq_": (Slot(AdaFactorState, "exp_avg_sq"), _unfactored)},
          optional={"exp_avg.": (Slot(AdaFactorState, "exp_avg"), "a first moment (the run's beta1 > 0)",
                                 "a first moment (tx's beta1 > 0; a run with beta1=0 keeps none)")},
          steps=("afactor_step",)),
)
# every state entry's prefix, its separator included: '<prefix><parameter name>' is a slot of that
# parameter ('moment1.' + 'dense1.weight', 'mu_' + 'dense1.weight'); `read_mindspore_params` and
# `convert_run` read them too
_PREFIXES = sorted({p for k in _KINDS for p in (*k.prefixes, *k.optional)})
_SUPPORTED = ("Momentum, SGD, Adam, LazyAdam, AdamOffload, AdamWeightDecay, Lamb, FTRL, Adagrad, ProximalAdagrad, "
              "RMSProp, AdaMax, Adadelta, Rprop, ASGD, AdaFactor")


def _ms_name(gname: str, names: dict, tags) -> str:
    if gname in names:
        return names[gname]
    if gname in tags or "/" not in gname:
        return gname
    dotted = gname.replace("/", ".")  # nested dicts: 'dense1/weight' -> 'dense1.weight'
    # 'exp_avg.dense1.weight', and 'mu_dense1.weight' (ASGD, AdaFactor: a prefix without a dot)
    return dotted if any(t.endswith(("." + dotted, "_" + dotted)) or t == dotted for t in tags) else gname


@at_boundary(WHO)
def from_mindspore_checkpoint(fname, params, tx, names=None):
    """The gradxform state of ``tx`` (``gradxform.create('mindspore.<name>', ...)``
    with the run's hyperparameters) continuing a MindSpore run from a
    checkpoint of its optimizer (``ms.save_checkpoint(opt, path)``, or a
    training checkpoint that includes the optimizer's parameters).

    Reads Momentum, SGD, Adam, LazyAdam, AdamOffload, AdamWeightDecay, Lamb,
    FTRL, Adagrad, ProximalAdagrad, RMSProp, AdaMax, Adadelta, Rprop, ASGD
    and AdaFactor (not LARS or THOR: refused before the file is read).
    Restores the per-parameter slots (``moment1.<p>``/``moment2.<p>``,
    ``moments.<p>``, ``accum.<p>``, ``stat.<p>``, ``linear.<p>``,
    ``mean_square.<p>``, ``mean_grad.<p>``, ``moment.<p>``, ``adam_m.<p>``,
    ``adam_v.<p>``, ``vhat.<p>``, ``lamb_m.<p>``, ``lamb_v.<p>``,
    ``accum_update.<p>``, ``prev.<p>``, ``step_size.<p>``, ASGD's
    ``ax_.<p>``, ``mu_<p>`` and ``eta_<p>``, AdaFactor's ``exp_avg.<p>``,
    ``exp_avg_sq_row_<p>``, ``exp_avg_sq_col_<p>`` and ``exp_avg_sq_<p>``,
    whose (1,) zero in a slot a parameter does not use is checked and
    read as gradxform's ``()``) and the step count from ``global_step``,
    which positions a learning-rate list or schedule and Adam's bias
    correction (``beta1_power``/``beta2_power`` are checked against
    ``beta^global_step``; AdaMax's running ``beta1_power`` is restored;
    AdaFactor's ``afactor_step`` must equal ``global_step``; ASGD's
    ``mu``/``eta`` are checked against tx's ``t0``, ``lambd``, ``alpha``:
    a warning when they differ). A training checkpoint of a
    ``TrainOneStepWithLossScaleCell`` also gives the loss scale
    (``scale_sense``, and ``DynamicLossScaleUpdateCell``'s counters), restored
    into ``tx``'s `gradxform.pieces.dynamic_loss_scale`; where ``tx`` scales
    no loss, a `MigrateError` says what to wrap it in.

    Args:
      fname: the ``.ckpt`` path (or a binary file object).
      params: the parameters (as for ``tx.init``).
      tx: the gradxform optimizer.
      names: gradxform name ('/'-joined key path) -> MindSpore parameter name
        (``dense1.weight``); default identical, or with '/' read as '.'.

    Raises: `MigrateError` naming the parameter for a missing or extra entry
    or a shape/dtype that does not fit, or when the checkpoint's optimizer
    is not the one ``tx`` is.
    """
    state0 = tx.init(params)
    refuse_unmigratable(state0, WHO, "mindspore")  # before the file is read
    ckpt = read_mindspore_checkpoint(fname)
    return _fill(ckpt, params, tx, state0, dict(names or {}))


def _fill(ckpt, params, tx, state0, names):
    gnames = param_names(params)
    unknown = sorted(set(names) - set(gnames))
    if unknown:
        raise MigrateError(f"{WHO}(names=...): {unknown[0]!r} is not a parameter name; the names are "
                           f"{gnames[:8]}{' ...' if len(gnames) > 8 else ''}.")
    leaves = jax.tree.leaves(params)
    tags = set(ckpt)
    msn = [_ms_name(g, names, tags) for g in gnames]
    present = {p for p in _PREFIXES for t in tags if t.startswith(p)}
    kind = next((k for k in _KINDS if k.fits(present, tags)), None)
    if kind is None:
        found = sorted({p.rstrip(".") for p in present}) or "none"
        raise MigrateError(f"{WHO}: no supported optimizer state in the checkpoint (state prefixes found: "
                           f"{found}); supported: {_SUPPORTED}.")
    slots = dict(kind.slots)
    for prefix, (slot, in_file, in_tx) in kind.optional.items():  # read where tx keeps the slot
        if has_slot(state0, params, slot) != (prefix in present) and \
                has_slot(state0, params, _slot(next(iter(kind.slots.values())))):  # tx is this kind
            raise MigrateError(f"{WHO}: the checkpoint's {kind.name} state has "
                               + (f"{prefix}<parameter> entries, {in_file}, where tx keeps none"
                                  if prefix in present else f"no {prefix}<parameter> entries, which tx keeps: {in_tx}")
                               + "; build tx with the run's hyperparameters.")
        if prefix in present:
            slots[prefix] = slot
    # Every state entry must belong to one of our parameters, and each parameter must have all.
    known = {p + m for p in (*kind.prefixes, *kind.optional) for m in msn} | set(msn)
    for t in sorted(tags):
        if t not in known and any(t.startswith(p) for p in (*kind.prefixes, *kind.optional)):
            raise MigrateError(f"{WHO}: the checkpoint has {t!r}, a {kind.name} state for a parameter that "
                               "is not in params (or is named differently: pass names={gradxform name: "
                               "MindSpore name}).")
    per_leaf = {}
    for prefix, spec in slots.items():
        slot, shape_of = (spec, None) if isinstance(spec, Slot) else spec
        vals = []
        for g, m, leaf in zip(gnames, msn, leaves):
            tag = prefix + m
            if tag not in ckpt:
                raise MigrateError(f"{WHO}: the checkpoint has no {tag!r} for parameter {g!r}"
                                   + (" (MindSpore name)" if m == g else f" (MindSpore name {m!r})") + ".")
            vals.append(_entry(ckpt[tag], tag, g, tuple(np.shape(leaf)), shape_of))
        if any(v is not None for v in vals):  # all placeholders: the slot keeps nothing to write
            per_leaf[slot] = vals
    for g, m, leaf in zip(gnames, msn, leaves):  # the weights themselves, when saved alongside
        a = ckpt.get(m)
        if isinstance(a, np.ndarray) and a.shape != tuple(np.shape(leaf)):
            raise MigrateError(f"{WHO}: the checkpoint's weight {m!r} has shape {a.shape} but parameter "
                               f"{g!r} has shape {tuple(np.shape(leaf))}.")
    if "global_step" not in ckpt:
        raise MigrateError(f"{WHO}: the checkpoint has no 'global_step'; is it an optimizer checkpoint?")
    step = checked_count(np.asarray(ckpt["global_step"]), f"{WHO}: global_step")
    whole = {Slot(StepState, "leaf_counts"): np.full((len(gnames),), step, np.int32),
             Slot(StepState, "count"): np.asarray(step, np.int32)}
    for tag, slot in kind.whole.items():  # beta powers: one float32, kept as MindSpore keeps it (issue 15 item 7)
        if tag in ckpt:
            if not isinstance(ckpt[tag], np.ndarray):
                raise MigrateError(f"{WHO}: {tag!r} is text in the checkpoint; MindSpore keeps a number there.")
            whole[slot] = np.asarray(ckpt[tag], np.float32).reshape(())
    for tag in kind.steps:  # AdaFactor's own float32 count: gradxform's AdaFactor reads global_step's
        a = ckpt.get(tag)
        if not isinstance(a, np.ndarray) or a.size != 1 or a.dtype.kind not in "iuf":
            raise MigrateError(f"{WHO}: the checkpoint has {'no' if a is None else 'a malformed'} {tag!r} "
                               f"({kind.name}'s step count, one number beside global_step).")
        if float(a.item()) != float(np.float32(step)):
            raise MigrateError(f"{WHO}: {tag!r} is {float(a.item())!r} but global_step is {step}; "
                               f"MindSpore advances both on every update, and gradxform's {kind.name} counts "
                               "with the one step count, so the two must agree.")
    hint = f"the checkpoint holds {kind.name} state; was tx made with gradxform.create('mindspore.<that>', ...)?"
    new_state = mindspore_scale(ckpt, fill_state(state0, params, per_leaf, whole, who=WHO, hint=hint), WHO)
    _warn_run_mismatch(ckpt, tx, new_state)
    _check_beta_powers(ckpt, new_state, step)
    if kind.name == "ASGD":
        _check_asgd(ckpt, new_state, step, [f"eta_{m}" for m in msn], [f"mu_{m}" for m in msn])
    return new_state


def _describe(v) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, np.ndarray):
        head = ", ".join(f"{x:g}" for x in v[:3])
        return f"a list of {v.size} [{head}{', ...' if v.size > 3 else ''}]"
    return f"a schedule ({type(v).__name__})"


def _tx_rate(schedule, base):
    """tx's rate: a float (fixed), the list's values as a float32 array (as the base rescales them:
    exactly the list at the base it was built with), or the schedule object."""
    if schedule is None:
        return float(base)
    values = getattr(schedule, "values", None)
    if isinstance(values, np.ndarray):
        scale = 1.0 if not schedule.base_lr else float(base) / float(schedule.base_lr)
        return np.asarray(values * np.float32(scale), np.float32)
    return schedule


def _same(tx_rate, file_rate) -> bool:
    """Whether tx gives the file's rates: equal numbers, or equal rates for each update of the
    file's list (a number is the same rate at every update; a schedule is read at those updates)."""
    if isinstance(tx_rate, float) and isinstance(file_rate, float):
        return bool(np.isclose(tx_rate, np.float32(file_rate), rtol=1e-6, atol=0))
    if isinstance(file_rate, float):
        if not isinstance(tx_rate, np.ndarray):
            return False  # a schedule against a fixed rate
        file_rate = np.full(tx_rate.shape, file_rate, np.float32)
    if isinstance(tx_rate, float):
        tx_rate = np.full(file_rate.shape, tx_rate, np.float32)
    elif not isinstance(tx_rate, np.ndarray):  # a schedule: its rates for the file's updates
        try:
            tx_rate = np.asarray(tx_rate.lr_for_update(jnp.arange(1, file_rate.size + 1)), np.float32)
        except Exception:  # noqa: BLE001 - a schedule that cannot be read so: not the same
            return False
    return tx_rate.shape == file_rate.shape and bool(np.allclose(tx_rate, file_rate, rtol=1e-6, atol=0))


def _warn_run_mismatch(ckpt, tx, state) -> None:
    """Warns (`warn_hyper_mismatch`'s words) when tx's momentum or learning rates differ from the
    file's: ``learning_rate`` and each ``learning_rate_group_<i>``, a number (a fixed rate) or a 1-D
    list (MindSpore's list, one value per update) in the file; a schedule Cell has no entry there.
    tx's rates come from the options it was built with (a number, a list or a schedule)."""
    have, skip = tree_hyper(state), SET_BY_CALLER.get()
    bad = []
    v = ckpt.get("momentum")
    if isinstance(v, np.ndarray) and v.ndim == 0 and "momentum" in have and "momentum" not in skip \
            and not _same(have["momentum"], float(v)):
        bad.append(f"momentum: tx {have['momentum']:g} vs file {float(v):g}")
    options = options_of(tx)
    for tag in sorted(t for t in ckpt if t == "learning_rate" or t.startswith("learning_rate_group_")):
        file_rate = ckpt[tag]
        if tag in skip or not isinstance(file_rate, np.ndarray) or file_rate.ndim > 1 or not file_rate.size:
            continue
        file_rate = float(file_rate.reshape(())) if file_rate.ndim == 0 else np.asarray(file_rate, np.float32)
        if options is None:  # not built by gradxform.mindspore: its fixed rate, as a hyperparameter
            if tag not in have or not isinstance(file_rate, float):
                continue
            tx_rate = have[tag]
        elif tag == "learning_rate":
            tx_rate = _tx_rate(options.schedule, have.get(tag, options.learning_rate))
        else:
            spec = next((sp for sp in options.specs or () if tag == f"learning_rate_group_{sp.index}"
                         and sp.lr is not None), None)
            if spec is None:
                bad.append(f"{tag}: tx has no such group rate (that group uses learning_rate) vs file "
                           f"{_describe(file_rate)}")
                continue
            tx_rate = _tx_rate(spec.lr_schedule, have.get(tag, spec.lr_base))
        if not _same(tx_rate, file_rate):
            bad.append(f"{tag}: tx {_describe(tx_rate)} vs file {_describe(file_rate)}")
    if bad:
        warn_at_caller(f"{WHO}: tx's hyperparameters differ from the saved run's ({'; '.join(bad)}); the next "
                       "steps follow tx's. Build tx with the run's values (or gradxform.set_hyper) to "
                       "continue the same run.")


def _entry(a, tag, g, shape, shape_of):
    """The array for parameter ``g`` (of ``shape``) from ``a``, the checkpoint's ``tag``; None for
    MindSpore's (1,) zero in a slot the parameter does not use (gradxform keeps ``()``)."""
    want = shape if shape_of is None else shape_of(shape)
    if want is None:
        if not (isinstance(a, np.ndarray) and a.shape == (1,) and a.dtype.kind in "iuf" and a[0] == 0):
            raise MigrateError(f"{WHO}: {tag!r} is {short(a)} but parameter {g!r} (shape {shape}) does not use "
                               "that slot, where MindSpore keeps a (1,) zero; the file is corrupt.")
        return None
    if not isinstance(a, np.ndarray) or a.shape != want:
        need = "" if shape_of is None else f", so {tag!r} needs {want}"
        raise MigrateError(f"{WHO}: {tag!r} has shape {getattr(a, 'shape', None)} but parameter {g!r} has shape "
                           f"{shape}{need}; was the checkpoint saved for other parameters?")
    return a


def _check_beta_powers(ckpt, state, step):
    hyper = tree_hyper(state)
    for b in ("beta1", "beta2"):
        power = ckpt.get(f"{b}_power")
        if power is None or b not in hyper:
            continue
        have = float(np.asarray(power).reshape(()))  # one number, as for the Adam kinds above
        want = float(np.float64(hyper[b]) ** step)
        if not np.isclose(have, want, rtol=1e-4, atol=1e-12):
            warn_at_caller(f"{WHO}: {b}_power is {have:.7g} in the checkpoint but tx's {b}={hyper[b]:g} "
                           f"gives {want:.7g} after {step} steps; tx's {b} differs from the run's.")


def _check_asgd(ckpt, state, step, eta_tags, mu_tags):
    """ASGD's per-parameter ``mu = 1 / max(1, t - t0)`` and, with one fixed learning rate,
    ``eta = lr / (1 + lambd lr t)^alpha`` after ``t`` = global_step steps: a warning naming the
    hyperparameters when tx's give other values than the file holds (tx's differ from the run's)."""
    h = tree_hyper(state)
    if step == 0:  # MindSpore's eta starts at 0, not at the formula's lr
        return
    mu = np.array([float(ckpt[t]) for t in mu_tags])
    want = 1.0 / max(1.0, step - h["t0"])
    if not np.allclose(mu, want, rtol=1e-4, atol=0):
        warn_at_caller(f"{WHO}: ASGD's mu is {mu[0]:.7g} in the checkpoint but tx's t0={h['t0']:g} gives "
                       f"{want:.7g} after {step} steps; tx's t0 differs from the run's.")
    eta, lr = np.array([float(ckpt[t]) for t in eta_tags]), ckpt.get("learning_rate")
    if isinstance(lr, np.ndarray) and lr.ndim == 0 and eta.size and np.all(eta == eta[0]):  # one fixed lr
        want = float(lr) / (1.0 + h["lambd"] * float(lr) * step) ** h["alpha"]
        if not np.isclose(eta[0], want, rtol=1e-4, atol=0):
            warn_at_caller(f"{WHO}: ASGD's eta is {eta[0]:.7g} in the checkpoint but tx's lambd={h['lambd']:g}, "
                           f"alpha={h['alpha']:g} give {want:.7g} after {step} steps at the file's learning rate; "
                           "tx's lambd or alpha differs from the run's.")
