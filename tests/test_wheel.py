"""The package as pip builds it: the wheel (from the tree, as `pip install .` builds it, and from the sdist) holds
every source file, and the commands it installs compile and run a kernel without the repository on the path.

The editable install of `make setup` hides a missing file: it imports from src/ whatever the wheel would lose
(a package directory without `__init__.py` dropped the whole tile-GPU layer once). So the wheels are built here
and their file lists compared with the tree; a scratch copy with an `__init__.py` removed shows the comparison
catches it. The installed-package check uses a venv whose site-packages links this one's dependencies but not
our editable install, with the wheel installed into it by pip (`--no-deps`: no download, about ten seconds).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
# where each installed import package's files come from in the tree
SOURCE_ROOTS = {"tileiras_async": REPO / "src" / "tileiras_async", "tileiras_tui": REPO / "tui"}
# files of the tree that are documentation, not part of the installed package
NOT_INSTALLED = {"README.md"}


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def expected_package_files(root: Path) -> set[str]:
    """Every tracked file the wheel must carry, as its path inside the wheel."""
    tracked = set(tracked_files(root))
    expected = set()
    for package, src in SOURCE_ROOTS.items():
        rel_src = src.relative_to(REPO).as_posix()
        for path in tracked:
            if path.startswith(rel_src + "/") and Path(path).name not in NOT_INSTALLED:
                expected.add(package + "/" + path[len(rel_src) + 1:])
    return expected


def wheel_package_files(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if n.split("/", 1)[0] in SOURCE_ROOTS}


def missing_from_wheel(root: Path, wheel: Path) -> list[str]:
    return sorted(expected_package_files(root) - wheel_package_files(wheel))


def build(root: Path, out: Path, *what: str) -> list[Path]:
    """`python -m build` without isolation (setuptools and build are test dependencies: no download)."""
    r = subprocess.run([sys.executable, "-m", "build", "--no-isolation", *what, "--outdir", str(out), str(root)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return sorted(out.iterdir())


def copy_tree(dest: Path) -> Path:
    """The tracked files of the repository (with today's edits), as a fresh clone would have them."""
    for path in tracked_files(REPO):
        src = REPO / path
        target = dest / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            target.symlink_to(os.readlink(src))
        elif src.is_file():
            shutil.copy2(src, target)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory) -> dict[str, Path]:
    """The wheel built from the tree (what `pip install .` installs) and the one built from the sdist."""
    tmp = tmp_path_factory.mktemp("wheels")
    tree = copy_tree(tmp / "tree")   # a copy: building writes build/ and *.egg-info into the source tree
    [direct] = build(tree, tmp / "direct", "--wheel")
    [sdist] = build(tree, tmp / "sdist", "--sdist")
    unpacked = tmp / "unpacked"
    shutil.unpack_archive(sdist, unpacked)
    [sdist_root] = list(unpacked.iterdir())
    [from_sdist] = build(sdist_root, tmp / "from-sdist", "--wheel")
    return {"direct": direct, "sdist": from_sdist}


@pytest.mark.parametrize("kind", ["direct", "sdist"])
def test_wheel_holds_every_source_file(wheels, kind):
    expected = expected_package_files(REPO)
    assert "tileiras_async/tilegpu/passes/select_mma.py" in expected and "tileiras_tui/app.tcss" in expected
    assert missing_from_wheel(REPO, wheels[kind]) == []


def test_a_missing_init_is_caught(tmp_path):
    tree = copy_tree(tmp_path / "tree")
    (tree / "src" / "tileiras_async" / "tilegpu" / "__init__.py").unlink()
    subprocess.run(["git", "init", "-q"], cwd=tree, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
    [wheel] = build(tree, tmp_path / "dist", "--wheel")
    missing = missing_from_wheel(tree, wheel)
    assert "tileiras_async/tilegpu/ir.py" in missing
    assert "tileiras_async/tilegpu/passes/select_mma.py" in missing


def venv_with_wheel(tmp: Path, wheel: Path) -> Path:
    """A venv that sees this one's dependencies (links) but not our editable install, with `wheel` installed."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "v")], check=True, timeout=120)
    site = Path(sysconfig.get_paths()["purelib"])
    lib = next((tmp / "v" / "lib").glob("python3*")) / "site-packages"
    ours = ("tileiras_async", "tileiras_tui", "__editable__.tileiras_async")
    for entry in site.iterdir():
        if not entry.name.startswith(ours) and not (lib / entry.name).exists():
            (lib / entry.name).symlink_to(entry)
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(tmp / "v" / "bin" / "python"), "install",
                        "--no-deps", "--no-index", "--disable-pip-version-check", "-q", str(wheel)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return tmp / "v" / "bin"


def installed_env(tmp: Path) -> dict:
    """No path into the repository, a cache of its own (a hit would hide a missing module), no compile server."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TILEIRAS_ASYNC_SOCKET")}
    env.update(TILEIRAS_ASYNC_CACHE_DIR=str(tmp / "cache"), TILEIRAS_ASYNC_SERVER="off")
    return env


def test_installed_commands_compile_and_run(wheels, tmp_path):
    bin_dir = venv_with_wheel(tmp_path, wheels["direct"])
    env = installed_env(tmp_path)
    where = subprocess.run([str(bin_dir / "python"), "-c", "import tileiras_async.tilegpu as t; print(t.__file__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    assert where.stdout.startswith(str(tmp_path / "v")), where.stdout

    cubin = tmp_path / "k.cubin"
    r = subprocess.run([str(bin_dir / "tileiras"), "--gpu-name", "sm_90", "-O3",
                        str(EXAMPLES / "matmul_bias_relu_f16.v13.4.tileirbc"), "-o", str(cubin)],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert cubin.read_bytes()[:4] == b"\x7fELF"

    n = 1024
    np.savez(tmp_path / "in.npz", **{"0": np.float32(2), "1": np.float32(3), "2": np.ones(n, np.float32),
                                     "3": np.full(n, 0.5, np.float32), "4": np.zeros(n, np.float32)})
    r = subprocess.run([str(bin_dir / "tileiras-async"), "run", str(EXAMPLES / "axpby_f32.v13.4.tileirbc"),
                        "--grid", "4", "--args", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz"),
                        "--engine", "both"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_allclose(out["4"], np.full(n, 2 * 1 + 3 * 0.5, np.float32))
