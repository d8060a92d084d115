"""Test setup: 4 fake CPU devices (set before JAX starts), and strict dtype promotion off-by-default
checks kept to the tests that ask for them."""
import os
import shutil
import tempfile

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")
os.environ.setdefault("JAX_PLATFORMS", "cpu")

# One JAX compilation cache for the run, shared by the xdist workers (they inherit the
# controller's environment) and the subprocesses tests start: most tests of an optimizer
# compile the same small programs, once per worker without it. Made before JAX is imported,
# removed when the run ends; a cache dir already set (a developer's own) is left alone.
_OWN_CACHE = None
if "PYTEST_XDIST_WORKER" not in os.environ and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="gradxform-tests-jaxcache-")
    os.environ.update(JAX_COMPILATION_CACHE_DIR=_OWN_CACHE,
                      JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",  # every program: most are tiny
                      JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_enable_x64", False)


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (long fuzzing)")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: a long test, run only with --slow")


def pytest_unconfigure(config):
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


def pytest_collection_modifyitems(config, items):
    if not config.getoption("--slow"):
        skip = pytest.mark.skip(reason="slow: run with --slow")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(skip)
