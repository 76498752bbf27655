"""Sphinx configuration of ray_tt_ext's documentation (``scripts/docs`` builds it
into ``build/docs/``, warnings as errors)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))
os.environ.setdefault("RAY_TRAIN_ENABLE_V2_MIGRATION_WARNINGS", "0")

from ray_tt_ext import __version__  # noqa: E402

project = "ray_tt_ext"
author = "ray_tt_ext maintainers"
release = __version__
extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
    "rtt_docs",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_ext", "**/notes/*.md"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False
napoleon_google_docstring = True
napoleon_numpy_docstring = False
html_theme = "alabaster"
html_title = f"ray_tt_ext {release}"
html_static_path: list[str] = []
suppress_warnings = ["myst.xref_missing"] if os.environ.get("RTT_DOCS_LENIENT") else []
