"""The traces root is explicit (--traces, $DLSCHED_TRACES) or beside the source checkout, never
found from the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import dlsched
from dlsched.cli import app
from dlsched.core.errors import ConfigError
from dlsched.paths import checkout_traces_dir, describe_traces, traces_dir


def test_working_directory_does_not_matter(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("DLSCHED_TRACES", raising=False)
    fake = tmp_path / "shared" / "traces"
    (fake / "philly-pollux").mkdir(parents=True)
    (fake / "README.md").write_text("a traces folder the old cwd walk would have picked up\n")
    monkeypatch.chdir(tmp_path)
    assert traces_dir() == checkout_traces_dir()
    assert traces_dir() != fake


def test_checkout_default_is_beside_the_repository() -> None:
    checkout = Path(dlsched.__file__).resolve().parents[2]
    found = checkout_traces_dir()
    if (checkout / "pyproject.toml").is_file() and (checkout.parent / "shared" / "traces").is_dir():
        assert found == checkout.parent / "shared" / "traces"
    else:
        assert found is None


def test_explicit_then_env(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path))
    assert traces_dir() == tmp_path
    other = tmp_path / "other"
    other.mkdir()
    assert traces_dir(other) == other  # --traces wins over the environment
    with pytest.raises(ConfigError, match="does not exist"):
        traces_dir(tmp_path / "absent")  # an explicit folder that is not there is an error
    monkeypatch.setenv("DLSCHED_TRACES", str(tmp_path / "absent"))
    assert traces_dir() is None  # the environment can switch the measured tables off
    assert "is not a folder" in describe_traces(None)


def test_cli_rejects_a_missing_traces_folder(tmp_path) -> None:
    res = CliRunner().invoke(app, ["simulate", "--limit", "5", "--traces", str(tmp_path / "absent"),
                                   "--out", str(tmp_path / "rep")])
    assert res.exit_code == 2, res.output
    assert "does not exist" in res.stderr and "Traceback" not in res.output
