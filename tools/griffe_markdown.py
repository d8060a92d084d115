"""A griffe extension for the API reference (mkdocs.yml), which griffe builds by
inspecting the imported package (so each package's ``__all__`` is the one Python sees).

- The docstrings are plain text written for ``help()``, where a line may start with
  ``>`` (``learning_rate: >= 0``). Markdown would make such a line a block quote; this
  escapes the ``>`` (``\\>``) in the rendered copy only. ``>>>`` (doctest prompts) is
  left alone.
- A constant (``checkpoint.FORMAT_VERSION = 1``) has no docstring of its own;
  inspection would show its type's (``int``'s), so that one is dropped.
"""
from __future__ import annotations

import inspect
import re

import griffe

# a line's first character '>' (not '>>>'), after its indentation and an optional 'name: ' / 'name (kind): '
_QUOTE = re.compile(r"(?m)^([ \t]*(?:[A-Za-z_][\w.*]*(?: \([^)\n]*\))?:[ \t]+)?)>(?!>>)")


def escape_quotes(text: str) -> str:
    return _QUOTE.sub(r"\1\\>", text)


class PlainDocstrings(griffe.Extension):
    def on_instance(self, *, node, obj, **kwargs) -> None:
        if obj.docstring is None:
            return
        value = getattr(node, "obj", None)
        if obj.is_attribute and value is not None and obj.docstring.value == inspect.getdoc(type(value)):
            obj.docstring = None
        else:
            obj.docstring.value = escape_quotes(obj.docstring.value)
