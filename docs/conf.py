"""Sphinx configuration of the rdma documentation."""
import os
import sys

sys.path.insert(0, os.path.abspath(".."))

project = "rdma"
author = "the rdma developers"
copyright = "2026, the rdma developers"
release = "0.1.0"
extensions = ["sphinx.ext.autodoc", "sphinx.ext.viewcode"]
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "description"
nitpicky = False
# ref.python: "more than one target" for EndPort and Device, which are
# documented as rdma.X and rdma.devices.X (one class each); annotations
# whose names are imported for type checkers only stay unqualified.
suppress_warnings = ["autodoc.import_object", "ref.python"]
