"""Running the installed ``ebsdxc`` console script and checking its one-line errors (shared by the
CLI tests of every part of the package)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def _exe():
    here = os.path.join(os.path.dirname(sys.executable), "ebsdxc")
    return here if os.path.exists(here) else shutil.which("ebsdxc")


def run_cli(*args, cwd=None):
    """Run the installed console script; return the CompletedProcess (text mode)."""
    exe = _exe()
    assert exe, "the ebsdxc console script is not installed"
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def assert_one_error(res, *names):
    """Exit 2, one stderr line ``ebsdxc: error: ...`` naming every string in ``names``."""
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = res.stderr.splitlines()
    assert len(lines) == 1, f"expected one error line, got:\n{res.stderr}"
    assert lines[0].startswith("ebsdxc: error:"), lines[0]
    for n in names:
        assert str(n) in lines[0], f"{n!r} not named in: {lines[0]}"
    assert res.stdout == "", res.stdout
    return lines[0]
