"""Every YAML file dlsched reads goes through `dlsched.config.read_yaml`: a file that is not UTF-8
or not YAML is one ConfigError line naming the file, never a traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.config import read_yaml, read_yaml_model
from dlsched.core.errors import ConfigError
from dlsched.live.backends.nodes import load_nodes
from dlsched.presets import load_cluster
from dlsched.run_config import RunConfig, load_run_config

NOT_UTF8 = b"cluster: dl2\nnote: caf\xff\n"
NOT_YAML = b"cluster: [dl2\npolicies: fifo\n"


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _one_line_naming(exc: pytest.ExceptionInfo, path: Path) -> None:
    msg = str(exc.value)
    assert "\n" not in msg and str(path) in msg, msg


@pytest.mark.parametrize("data, needle", [(NOT_UTF8, "not UTF-8 text (byte 0xff"), (NOT_YAML, "not valid YAML: line")])
def test_bad_bytes_or_syntax_is_one_line_naming_the_file(tmp_path, data, needle):
    p = _write(tmp_path, "bad.yaml", data)
    for read in (lambda: read_yaml(p, "some file"), lambda: read_yaml_model(p, RunConfig, "config file"),
                 lambda: load_run_config(p), lambda: load_cluster(p), lambda: load_nodes(p)):
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(")) as exc:
            read()
        _one_line_naming(exc, p)


def test_cluster_file_with_a_non_utf8_byte(tmp_path):
    p = _write(tmp_path, "cluster.yaml", b"name: lab\n# \xff\n")
    with pytest.raises(ConfigError, match="cluster file .*not UTF-8") as exc:
        load_cluster(p)
    _one_line_naming(exc, p)


def test_missing_file_is_one_line(tmp_path):
    with pytest.raises(ConfigError, match="cannot read nodes file") as exc:
        read_yaml(tmp_path / "nope.yaml", "nodes file")
    _one_line_naming(exc, tmp_path / "nope.yaml")


def test_empty_file_reads_as_none(tmp_path):
    assert read_yaml(_write(tmp_path, "empty.yaml", b""), "config file") is None


@pytest.mark.parametrize("data", [NOT_UTF8, NOT_YAML])
def test_simulate_with_a_bad_config_exits_2_with_one_line(tmp_path, data):
    p = _write(tmp_path, "bad.yaml", data)
    res = CliRunner().invoke(app, ["simulate", "--config", str(p)])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "bad.yaml" in lines[0], res.stderr
    assert "Traceback" not in res.output
