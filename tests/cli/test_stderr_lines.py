"""The CLI's own stderr lines reach the stream in one write each: Python's stderr writes
through, so a line written as text and newline apart can be split by another process writing to
the same pipe (a job script's Dask scheduler did so in CI, and the job's log then held the
``ebsdxc: cancelled`` line glued to a scheduler record)."""

from __future__ import annotations

import io

from ebsdxc import cli


class _Writes(io.StringIO):
    """A text stream that keeps every write call."""

    def __init__(self):
        super().__init__()
        self.calls = []

    def write(self, s):
        self.calls.append(s)
        return super().write(s)


def test_an_error_line_is_one_write(tmp_path, monkeypatch):
    err = _Writes()
    monkeypatch.setattr("sys.stderr", err)
    missing = tmp_path / "missing.h5"
    assert cli.main(["info", str(missing)]) == 2
    lines = [c for c in err.calls if c.startswith("ebsdxc: error:")]
    assert len(lines) == 1 and lines[0].endswith("\n") and "missing.h5" in lines[0], err.calls
    assert "\n" not in err.getvalue().rstrip("\n")  # one line in all


def test_the_cancelled_line_is_one_write(monkeypatch):
    """SIGTERM's line (a batch system's cancel), raised where a command runs."""
    err = _Writes()
    monkeypatch.setattr("sys.stderr", err)

    def terminated(a, argv):
        raise cli._Terminated()

    monkeypatch.setattr(cli, "_cmd_info", terminated)
    assert cli.main(["info", "whatever.h5"]) == 143
    assert err.calls == ["ebsdxc: cancelled (SIGTERM); the results file is marked incomplete; --resume continues\n"]
