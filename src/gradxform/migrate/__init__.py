"""Continue a training run from the optimizer state MXNet/Gluon, MindSpore or Paddle saved.

Each reader returns a state for a gradxform optimizer ``tx`` (made with
`gradxform.create` and the run's hyperparameters) such that the next
``tx.update`` computes the framework's next step:

* `from_gluon_states`: Gluon ``Trainer.save_states`` / Module ``.states`` (MXNet 1.x);
* `from_mindspore_checkpoint`: a MindSpore ``.ckpt`` of the optimizer (protobuf);
* `from_paddle_state_dict`: a Paddle ``opt.state_dict()`` or its ``.pdopt`` file (every
  optimizer of `gradxform.paddle` whose declaration migrates: SGD, Momentum, Adam, AdamW,
  Adamax, Adagrad, Adadelta, RMSProp, Lamb, NAdam, RAdam, Rprop, ASGD).

No framework is needed, and no file is unpickled without an allow-list (see
`UnsafePickleError`). Every problem (a missing or extra entry, a shape that
does not fit, a state for another optimizer) is a `MigrateError` raised
before anything is built.

An optimizer of `gradxform.neutral` (``neutral.lion``: optimizers no framework
has) has no framework state to migrate from: every reader, and `convert_run`
with ``framework='neutral'``, refuses it with a `MigrateError` saying so.
"""
from ._gluon import from_gluon_states, read_gluon_states
from ._mindspore import from_mindspore_checkpoint, read_mindspore_checkpoint
from ._paddle import from_paddle_state_dict, read_paddle_state_dict
from ._params import LAYOUTS, read_gluon_params, read_mindspore_params, read_paddle_params, read_params, to_tree
from ._pickle import MigrateError, UnsafePickleError
from ._run import convert_run, load_run

__all__ = [
    "from_gluon_states", "from_mindspore_checkpoint", "from_paddle_state_dict",
    "read_gluon_states", "read_mindspore_checkpoint", "read_paddle_state_dict",
    "MigrateError", "UnsafePickleError",
    "read_params", "read_gluon_params", "read_paddle_params", "read_mindspore_params", "to_tree", "LAYOUTS",
    "convert_run", "load_run",
]
