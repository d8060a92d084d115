"""The API reference (issue 39 item 3): ``python -m mkdocs build --strict`` (mkdocs.yml) builds
docs/ and the pages docs/api/*.md render from the docstrings by mkdocstrings (griffe, inspecting
the imported package). A warning of any kind (a docstring griffe cannot parse, an argument
documented that the signature lacks, a broken link, a page left out of the nav) fails the build.

The tools come with the ``test`` extra (and the ``docs`` one): this test does not skip.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module -> its API page (docs/api/<page>.md); every name in the module's __all__ must be rendered there
PAGES = {
    "gradxform": "gradxform", "gradxform.pieces": "pieces", "gradxform.schedules": "schedules",
    "gradxform.lr_scheduler": "lr_scheduler", "gradxform.mxnet": "mxnet", "gradxform.mindspore": "mindspore",
    "gradxform.paddle": "paddle", "gradxform.paddle.lr": "paddle-lr", "gradxform.paddle.regularizer": "paddle-regularizer",
    "gradxform.migrate": "migrate", "gradxform.checkpoint": "checkpoint", "gradxform.neutral": "neutral",
}
# names re-exported from another package, documented in the page's text instead of rendered
EXTERNAL = {"gradxform.GradientTransformation": "optax.GradientTransformationExtraArgs"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    log = proc.stdout + proc.stderr
    assert "No module named mkdocs" not in log, "the docs tools are missing: python -m pip install -e '.[test]'"
    warnings = [ln for ln in log.splitlines() if "WARNING" in ln or "ERROR" in ln]
    assert proc.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + "\n".join(warnings or [log[-4000:]])
    return out


def test_every_public_name_is_in_the_reference(site):
    missing = []
    for module, page in PAGES.items():
        html = (site / "api" / page / "index.html").read_text()
        mod = importlib.import_module(module)
        for name in mod.__all__:
            if inspect.ismodule(getattr(mod, name)):
                continue  # a package's submodule: a page of its own, or private API
            if f"{module}.{name}" in EXTERNAL:
                assert EXTERNAL[f"{module}.{name}"] in html, name
            elif f'id="{module}.{name}"' not in html:
                missing.append(f"{module}.{name}")
    assert not missing, f"not rendered in docs/api/: {missing}"


def test_every_api_page_is_in_the_nav_and_the_index():
    nav = (ROOT / "mkdocs.yml").read_text()
    index = (ROOT / "docs" / "index.md").read_text()
    for page in sorted((ROOT / "docs" / "api").glob("*.md")):
        assert f"api/{page.name}" in nav and f"(api/{page.name})" in index, page.name
    for page in PAGES.values():
        assert (ROOT / "docs" / "api" / f"{page}.md").exists(), page


def _args_lines(doc: str):
    """The lines of a docstring's Args section."""
    inside = False
    for line in doc.splitlines():
        if re.match(r"^(Args|Arguments|Parameters):\s*$", line):
            inside = True
        elif inside and line and not line.startswith(" "):
            inside = False
        elif inside:
            yield line


def test_one_argument_per_line_in_help():
    """``help(gradxform.mxnet.sgd)`` once ran ``momentum:`` and ``lazy_update:`` into
    ``learning_rate``'s line; an Args entry starts its own line, for every public callable."""
    run_together = []
    for module in PAGES:
        mod = importlib.import_module(module)
        for name in mod.__all__:
            obj = getattr(mod, name)
            objs = [obj] + ([v for k, v in vars(obj).items() if not k.startswith("_") and callable(v)]
                            if inspect.isclass(obj) else [])
            for o in objs:
                if not callable(o) or inspect.ismodule(o):
                    continue
                try:
                    params = set(inspect.signature(o).parameters)
                except (TypeError, ValueError):
                    continue
                for line in _args_lines(inspect.getdoc(o) or ""):
                    body = line.strip()
                    # 'a: ... . b: ...' or 'a: ...; b: ...' where b is an argument of the signature
                    for m in re.finditer(r"[.;)]\s+([A-Za-z_]\w*):\s", body):
                        if m.group(1) in params:
                            run_together.append(f"{module}.{name}: {body[:100]}")
    assert not run_together, "one Args entry per line:\n" + "\n".join(run_together)


def test_the_sgd_help_lists_each_argument_on_its_own_line():
    import gradxform
    lines = [ln.strip() for ln in _args_lines(inspect.getdoc(gradxform.mxnet.sgd))]
    starts = [ln.split(":")[0] for ln in lines if re.match(r"^\w+:", ln)]
    assert starts == ["learning_rate", "momentum", "lazy_update"], lines
