"""Sphinx configuration of the wirelessfl docs (``sphinx-build -W docs docs/_build``).

Sphinx rather than MkDocs: the docstrings are numpy style with math and cross-references
(``:func:``, ``:class:``), which autodoc + napoleon render as written, and sphinx-gallery
runs the tutorials as scripts during the build (their figures and output land in the pages),
as scipy, scikit-learn and Sionna do.
"""

import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("MPLBACKEND", "Agg")

import wirelessfl  # noqa: E402

project = "wirelessfl"
author = "The wirelessfl authors"
copyright = "2026, The wirelessfl authors"  # noqa: A001
release = version = wirelessfl.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinx_gallery.gen_gallery",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "tutorials", "papers/results", "sg_execution_times.rst", "Thumbs.db",
                    ".DS_Store"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]
myst_heading_anchors = 3

napoleon_numpy_docstring = True
napoleon_google_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "none"          # the numpy docstrings carry the types
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
autosummary_generate = False

sphinx_gallery_conf = {
    "examples_dirs": "tutorials",
    "gallery_dirs": "auto_tutorials",
    "filename_pattern": r"/tutorial_",
    "download_all_examples": False,
    "remove_config_comments": True,
    "within_subsection_order": "FileNameSortKey",
    "abort_on_example_error": True,
}

html_theme = "pydata_sphinx_theme"
html_title = f"wirelessfl {release}"
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
nitpicky = False
napoleon_use_ivar = True            # dataclass attributes: one description, not two

_LITERAL = re.compile(r"(``.*?``|`[^`]*`)")


def _escape_bars(app, what, name, obj, options, lines):
    """|x| in the docstrings is absolute value, not an RST substitution: escape it.

    Literal and role text (between backticks) is left as written.
    """
    for i, line in enumerate(lines):
        if "|" not in line:
            continue
        parts = _LITERAL.split(line)
        lines[i] = "".join(p if j % 2 else p.replace("|", r"\|") for j, p in enumerate(parts))


def setup(app):
    """Register the docstring hook."""
    app.connect("autodoc-process-docstring", _escape_bars)
