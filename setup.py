"""Package layout (the rest of the metadata is in pyproject.toml).

The compiler lives in src/tileiras_async; the dashboard keeps its top-level folder tui/ but installs
as `tileiras_tui` (a bare `tui` is another project's name on the package registry).
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages("src", include=["tileiras_async", "tileiras_async.*"]) + ["tileiras_tui"],
    package_dir={"": "src", "tileiras_tui": "tui"},
)
