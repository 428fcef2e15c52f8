"""Package layout (the rest of the metadata is in pyproject.toml).

The compiler lives in src/tileiras_async; the dashboard keeps its top-level folder tui/ but installs
as `tileiras_tui` (a bare `tui` is another project's name on the package registry), through the link
src/tileiras_tui -> ../tui. One source root with no renamed package keeps `pip install -e` a plain path
entry: a package_dir rename made setuptools install an import hook whose own imports (pathlib,
importlib.util) cost every Python process ~15 ms, half of a drop-in cache hit.
"""
from setuptools import find_packages, setup

setup(
    packages=find_packages("src", include=["tileiras_async", "tileiras_async.*", "tileiras_tui"]),
    package_dir={"": "src"},
)
