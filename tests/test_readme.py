"""The README's quick-start commands stay what CI runs and what the package provides."""

import os
import re

ROOT = os.path.join(os.path.dirname(__file__), os.pardir)


def _quick_start():
    with open(os.path.join(ROOT, "README.md")) as f:
        text = f.read()
    section = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.*?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_quick_start_commands():
    cmds = _quick_start()
    assert len(cmds) == 2 and all("\n" not in c for c in cmds)
    assert "ebsdxc process sample_data/scan.h5 --ref sample_data/ref.tif" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command():
    with open(os.path.join(ROOT, ".ci", "run")) as f:
        ci = f.read()
    assert _quick_start()[1] in ci.splitlines()


def test_sample_data_named_in_readme_exists():
    for name in ("scan.h5", "ref.tif", "truth.h5", "make_sample_data.py"):
        assert os.path.isfile(os.path.join(ROOT, "sample_data", name))
