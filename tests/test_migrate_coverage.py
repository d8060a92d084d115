"""Every registered optimizer either migrates from its framework's saved state or is refused
by that framework's reader before any file is read, saying so (issue 37 item 6)."""
import jax.numpy as jnp
import pytest

import gradxform as gx
from gradxform.migrate import MigrateError

import cases

READERS = {"mxnet": gx.migrate.from_gluon_states, "mindspore": gx.migrate.from_mindspore_checkpoint,
           "paddle": gx.migrate.from_paddle_state_dict}
PARAMS = {"dense": {"kernel": jnp.ones((3, 2)), "bias": jnp.zeros(2)}}
MISSING = "/nonexistent/gradxform-test/optimizer.state"  # reading it would fail with FileNotFoundError


def test_every_framework_family_has_a_reader_and_migratable_optimizers():
    families = {k.split(".", 1)[0] for k, d in gx.declarations().items() if d.migrates}
    assert families == set(READERS) == set(gx.migrate._errors.FRAMEWORKS)


@pytest.mark.parametrize("name", [n for n in cases.names() if n.split(".")[0] in READERS])
def test_an_optimizer_migrates_or_is_refused_before_the_file_is_read(name):
    reader = READERS[name.split(".")[0]]
    tx = cases.create(name)
    if gx.declaration(name).migrates:
        with pytest.raises(FileNotFoundError):  # its reader goes on to read the file
            reader(MISSING, PARAMS, tx)
    else:
        with pytest.raises(MigrateError, match=rf"{name!r} cannot be migrated: .* reads the saved state of "):
            reader(MISSING, PARAMS, tx)


def test_a_reader_sends_another_familys_optimizer_to_its_own_reader():
    with pytest.raises(MigrateError, match=r"'paddle.adam', an optimizer of the 'paddle' family.*"
                                           r"gradxform.migrate.from_paddle_state_dict"):
        gx.migrate.from_gluon_states(MISSING, PARAMS, gx.create("paddle.adam"))
    with pytest.raises(MigrateError, match=r"'mxnet.sgd'.*gradxform.migrate.from_gluon_states"):
        gx.migrate.from_mindspore_checkpoint(MISSING, PARAMS, gx.create("sgd"))
