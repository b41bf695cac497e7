"""The package's layout rules hold (issue 14): the import contracts of pyproject.toml (layers,
io knowing nothing of correlation, no import cycles), ruff's rules, and no module importing
another module's private names.

ruff and import-linter are in the ``test`` extra, so these tests never skip: a missing tool
is a broken test environment, and fails.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "ebsdxc"


def _tool(name: str) -> str:
    """The console script installed beside this interpreter (the test extra's), else on PATH."""
    here = Path(sys.executable).with_name(name)
    exe = str(here) if here.exists() else shutil.which(name)
    assert exe, f"{name} is not installed; the test extra provides it: pip install '.[test]'"
    return exe


def _run(*cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    # lint-imports reads [tool.importlinter] from pyproject.toml and puts the working directory
    # first on sys.path, so it checks this checkout's ebsdxc, not an installed copy.
    res = _run(_tool("lint-imports"), "--no-cache", "--no-logo")
    assert res.returncode == 0, f"import contracts broken:\n{res.stdout}\n{res.stderr}"


def test_ruff_finds_nothing():
    res = _run(_tool("ruff"), "check", "--no-cache", "--output-format", "concise", ".")
    assert res.returncode == 0, f"ruff check:\n{res.stdout}\n{res.stderr}"


# ----------------------------------------------------------------------------- private names
#
# What counts as importing another module's private name, for every module of ebsdxc/:
# - ``from M import _x`` (absolute or relative) where M is another module: forbidden, unless
#   ``M._x`` is itself a module whose parent package contains the importer (a package-private
#   module such as ``ebsdxc._resources``, imported by any module of ebsdxc);
# - ``import M._x`` / ``from M._x import y``: the same rule for private modules;
# - ``m._x`` where ``m`` names an ebsdxc module bound by an import in this file
#   (``from . import runner`` then ``runner._plan``, ``import ebsdxc.runner`` then
#   ``ebsdxc.runner._plan``): forbidden.
# Dunder names (``__version__``, ``__future__``) are public. Attribute access on objects other
# than imported modules (``self._x``, ``obj._cache``) is not judged: it cannot be told cheaply.


def _modules() -> dict[str, Path]:
    """Dotted name -> file, for every module of the package (a package is its __init__)."""
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _is_module(name: str) -> bool:
    # a folder of modules without __init__ (a namespace package) counts as a module too
    return name in MODULES or (ROOT / Path(*name.split("."))).is_dir()


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: str, package: bool, node: ast.ImportFrom) -> str:
    """The absolute module name that ``from ... import`` in ``module`` imports from."""
    if not node.level:
        return node.module or ""
    base = (module if package else module.rpartition(".")[0]).split(".")
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _private_part_allowed(importer: str, target: str) -> bool:
    """Whether ``importer`` may import the module ``target``, whose path has private parts:
    every private part must be a module whose parent package contains the importer."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if _private(part):
            parent = ".".join(parts[:i])
            if not _is_module(".".join(parts[:i + 1])) or not importer.startswith(parent + "."):
                return False
    return True


def _dotted(node) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def private_imports(module: str, source: str, *, package: bool = False) -> list[str]:
    """Where ``module`` (a package's __init__ when ``package``), whose text is ``source``, uses
    another module's private names: ``line: what`` for each."""
    tree = ast.parse(source)
    problems = []
    bound: dict[str, str] = {}  # local name -> the ebsdxc module it is bound to

    def report(node, what):
        problems.append(f"{node.lineno}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != PACKAGE:
                    continue
                if not _private_part_allowed(module, alias.name):
                    report(node, f"import {alias.name}")
                if alias.asname:
                    bound[alias.asname] = alias.name
                else:
                    bound[PACKAGE] = PACKAGE
        elif isinstance(node, ast.ImportFrom):
            origin = _resolve(module, package, node)
            if origin.split(".")[0] != PACKAGE:
                continue
            if origin != module and not _private_part_allowed(module, origin):
                report(node, f"from {origin} import ...")
            for alias in node.names:
                full = f"{origin}.{alias.name}"
                if _private(alias.name) and origin != module and not (
                        _is_module(full) and _private_part_allowed(module, full)):
                    report(node, f"from {origin} import {alias.name}")
                if _is_module(full):
                    bound[alias.asname or alias.name] = full
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            head = _dotted(node.value)
            if head is None:
                continue
            first, _, rest = head.partition(".")
            if first not in bound:
                continue
            target = bound[first] + (f".{rest}" if rest else "")
            if _is_module(target) and target != module and not (
                    _is_module(f"{target}.{node.attr}")
                    and _private_part_allowed(module, f"{target}.{node.attr}")):
                report(node, f"{head}.{node.attr}")
    return problems


def test_no_module_imports_another_modules_private_names():
    problems = []
    for module, path in MODULES.items():
        where = path.relative_to(ROOT)
        problems += [f"{where}:{p}" for p in private_imports(module, path.read_text(),
                                                             package=path.name == "__init__.py")]
    assert not problems, "private names used across modules:\n" + "\n".join(problems)


# The checker itself, on made-up modules (so that a rule that never fires is noticed).


@pytest.mark.parametrize("name, code", [
    ("ebsdxc.fake", "from .errors import _hidden\n"),
    ("ebsdxc.fake", "from ebsdxc.errors import _hidden\n"),
    ("ebsdxc.io.fake", "from ..errors import _hidden\n"),
    ("ebsdxc.fake", "from . import errors\nx = errors._hidden\n"),
    ("ebsdxc.fake", "import ebsdxc.errors\nx = ebsdxc.errors._hidden\n"),
    ("ebsdxc.fake", "import ebsdxc.errors as r\nx = r._hidden(1)\n"),
    ("ebsdxc.io.fake", "from .. import io\nx = io.hdf5._open\n"),
    ("ebsdxc.fake", "def f():\n    from .io import hdf5\n    return hdf5._open\n"),
    ("ebsdxc.fake", "from .io import _private_module_that_does_not_exist\n"),
])
def test_the_checker_finds_private_names(name, code):
    assert private_imports(name, code), code


@pytest.mark.parametrize("name, code", [
    ("ebsdxc.fake", "from __future__ import annotations\nfrom . import __version__\n"),
    ("ebsdxc.fake", "from ._resources import data_dir\nfrom . import _resources\n"),
    ("ebsdxc.io.fake", "from .._resources import data_dir\nimport ebsdxc._resources\n"),
    ("ebsdxc.fake", "from . import errors\nx = errors.InputError\nclass A:\n    _y = 1\n    z = A._y\n"),
    ("ebsdxc.fake", "import numpy as np\nx = np._core\n"),
    ("ebsdxc.fake", "from .errors import InputError\nx = InputError('a')._private\n"),
    ("ebsdxc.io", "from .source import ArraySource\n"),
])
def test_the_checker_allows_what_is_public(name, code):
    assert private_imports(name, code, package=name == "ebsdxc.io") == []


def test_every_package_folder_is_installed():
    """A wheel holds the packages pyproject.toml lists: a new folder of ebsdxc/ must be listed."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib

    with open(ROOT / "pyproject.toml", "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    folders = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "ebsdxc").rglob("__init__.py")}
    assert folders, "no packages found under ebsdxc/"
    assert folders <= listed, f"not listed in [tool.setuptools] packages: {sorted(folders - listed)}"
