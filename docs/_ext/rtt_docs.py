"""Sphinx extension of ray_tt_ext's docs.

* ``ray-overrides`` (a directive): the table of ``ray_tt_ext._compat.RAY_OVERRIDES``,
  every Ray method ray_tt_ext overrides, extends, patches or uses, where it runs
  and the Ray releases it was checked on (``:ours: PREFIX`` keeps the entries of
  ray_tt_ext's names that start with it), so that the design notes and the API
  reference never say it a second time by hand.
* A check of every docstring autodoc renders: each argument its ``Args:`` section
  names must be a parameter of the signature (a docstring that no longer
  matches its signature is a warning, an error in ``scripts/docs``).
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from docutils import nodes
from docutils.parsers.rst import directives
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger(__name__)

_ARG = re.compile(r"^ {4}(\*{0,2}\w+)(?: \(.*\))?:")


class RayOverrides(SphinxDirective):
    """``.. ray-overrides::`` (``:ours:`` optional): a table of ``RAY_OVERRIDES``."""

    option_spec = {"ours": directives.unchanged}

    def run(self) -> list[nodes.Node]:
        from ray_tt_ext._compat import RAY_OVERRIDES

        prefix = self.options.get("ours", "")
        entries = [e for e in RAY_OVERRIDES if e.ours.startswith(prefix)]
        if not entries:
            logger.warning(f"ray-overrides: no entry of ray_tt_ext starts with {prefix!r}")
            return []
        rows = [".. list-table::", "   :header-rows: 1", "   :widths: 30 30 8 22 10", ""]
        rows += [
            "   * - Ray",
            "     - ray_tt_ext",
            "     - how",
            "     - runs in",
            "     - Ray releases (used; checked)",
        ]
        for e in entries:
            used = f"{e.since} .. {e.until}" if e.until else f"{e.since}+"
            rows += [
                f"   * - ``{e.ray}``",
                f"     - ``{e.ours}``",
                f"     - {e.how}",
                f"     - {e.where}",
                f"     - {used}; {e.checked}",
            ]
        container = nodes.container()
        self.state.nested_parse(StringList(rows), self.content_offset, container)
        return container.children


def _documented_args(lines: list[str]) -> list[str]:
    names, inside = [], False
    for line in lines:
        if re.match(r"^(Args|Arguments|Parameters):\s*$", line):
            inside = True
            continue
        if inside:
            if line and not line.startswith(" "):
                inside = False
                continue
            m = _ARG.match(line)
            if m:
                names.append(m.group(1).lstrip("*"))
    return names


def check_args(
    app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    """Warn when the docstring's ``Args:`` names a parameter the signature lacks."""
    if what not in {"function", "method", "class"}:
        return
    target = obj.__init__ if what == "class" else obj
    try:
        parameters = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return
    accepts_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for arg in _documented_args(lines):
        if arg not in parameters and not accepts_any:
            logger.warning(
                f"{name}: the docstring documents {arg!r}, which its signature "
                f"{tuple(parameters)} does not have"
            )


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("ray-overrides", RayOverrides)
    # Before napoleon turns "Args:" into fields (its handler has priority 500).
    app.connect("autodoc-process-docstring", check_args, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
