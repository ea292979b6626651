"""Every input mistake a user can make on the command line is one `error:` line on stderr and exit
code 2 (with a did-you-mean where a name was mistyped), never a traceback and never silently
accepted: bad option values, YAML files that are not text or not buildable, misspelled trace
columns and policy names, values no cluster could hold, a trace that names no cluster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dlsched.cli import app
from dlsched.config import read_yaml
from dlsched.core.errors import ConfigError, TraceError

ITP = "job_id,submission_time,duration,num_gpu\n"
CANONICAL = "job_id,submit_time,duration\n"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    """A command that wrongly succeeds writes its report here, not into the checkout."""
    monkeypatch.chdir(tmp_path)


def run(*args: str):
    return CliRunner().invoke(app, list(args))


def one_line_error(res, *needles: str) -> str:
    """The single stderr line of a failed command (exit 2); it holds every needle."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    lines = [line for line in res.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), res.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def trace_error(res, *needles: str) -> None:
    """A trace that cannot load: exit 2, an `error:` line, then its `file:row: column: problem` lines."""
    assert res.exit_code == 2, (res.exit_code, res.output)
    assert "Traceback" not in res.output, res.output
    first, *rest = [line for line in res.stderr.splitlines() if line.strip()]
    assert first.startswith("error:") and all(line.startswith("  ") for line in rest), res.stderr
    for needle in needles:
        assert needle in res.stderr, (needle, res.stderr)


def write(tmp_path: Path, name: str, text: str | bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


# --------------------------------------------------------------------------- option values


@pytest.mark.parametrize("args", [
    ["simulate", "-p", "fifo", "--seed", "-1"],
    ["compare", "-t", "dl2-ali", "-p", "fifo", "--seed", "-1"],
    ["simulate", "-p", "fifo", "--seed", str(2**31)],
    ["experiment", "qos", "--seed", "-1"],
    ["experiment", "fidelity", "--seed", "-1"],
])
def test_a_negative_or_huge_seed_is_one_line(args):
    one_line_error(run(*args), "--seed")


@pytest.mark.parametrize("value", ["-5", "0"])
def test_limit_must_be_positive(value):
    """`--limit -5` used to drop the last five jobs and `--limit 0` meant all of them."""
    one_line_error(run("simulate", "-p", "fifo", "--limit", value), "--limit", value)


def test_oasis_trace_limit_must_be_positive(tmp_path):
    t = write(tmp_path, "c.csv", ITP + "a,0,100,1\n")
    one_line_error(run("experiment", "oasis", "--trace", str(t), "--limit", "0"), "--limit")


def test_empty_policy_list_is_an_error_not_the_defaults():
    one_line_error(run("simulate", "-p", "", "--limit", "3"), "no policy given")
    one_line_error(run("simulate", "-p", " , ", "--limit", "3"), "no policy given")


def test_seed_in_a_run_config_is_checked_too(tmp_path):
    cfg = write(tmp_path, "run.yaml", "sim: {seed: -3}\n")
    one_line_error(run("simulate", "-p", "fifo", "--config", str(cfg)), "run.yaml", "sim.seed")


@pytest.mark.parametrize("line", ["seed: -1", "train_seeds: [-5, 10]"])
def test_seeds_of_a_dl2_training_config_are_checked(tmp_path, line):
    cfg = write(tmp_path, "dl2.yaml", line + "\n")
    one_line_error(run("train", "dl2", "--config", str(cfg), "--out", str(tmp_path / "o")), "dl2.yaml", "seed")


def test_misspelled_policy_under_policy_options_suggests_the_name(tmp_path):
    cfg = write(tmp_path, "run.yaml", "policies: [fifo]\npolicy_options: {fifoo: {backfill: true}}\n")
    one_line_error(run("simulate", "--config", str(cfg), "--limit", "3"), "run.yaml", "'fifoo'", "did you mean 'fifo'")


def test_misspelled_policy_option_suggests_the_option_before_anything_runs(tmp_path):
    cfg = write(tmp_path, "run.yaml", "policy_options: {tiresias: {promote_knb: 8}}\n")
    out = tmp_path / "report"
    line = one_line_error(run("simulate", "-p", "fifo,tiresias", "--config", str(cfg), "--limit", "3", "--out", str(out)),
                          "promote_knb", "did you mean 'promote_knob'")
    assert not out.exists(), line  # fifo did not run first


def test_misspelled_policy_in_a_run_config_list(tmp_path):
    cfg = write(tmp_path, "run.yaml", "policies: [fifo, tiresas]\n")
    one_line_error(run("simulate", "--config", str(cfg)), "'tiresas'", "did you mean 'tiresias'")


# --------------------------------------------------------------------------- traces


def test_misspelled_column_of_a_dlsched_trace_is_an_error_with_a_suggestion(tmp_path):
    t = write(tmp_path, "mine.csv", "job_id,submit_time,duration,num_workrs\na,0,100,2\n")
    res = run("trace", "validate", str(t))
    assert res.exit_code == 1
    assert f"{t}:1: num_workrs: unknown column (did you mean 'num_workers'?)" in res.stdout
    trace_error(run("simulate", "-t", str(t), "-c", "philly", "-p", "fifo"), "1 problem", "did you mean 'num_workers'")


@pytest.mark.parametrize("fmt, text, problem", [
    ("itp", ITP + "a,0,100,1e308\nb,10,50,1\n", ":2: num_gpu: must be <= 1e+06, got 1e+308"),
    ("philly", "timestamp,duration,num_gpus\n2017-10-09 07:01:55,66,1e300\n", ":2: num_gpus: must be <= 1e+06"),
    ("dlsched", CANONICAL.replace("\n", ",num_workers\n") + "a,0,100,1e308\n", ":2: num_workers: must be <= 1e+06"),
    ("dlsched", CANONICAL.replace("\n", ",worker_gpu\n") + "a,0,100,1e9\n", ":2: worker_gpu: must be <= 1e+06"),
    ("dlsched", CANONICAL.replace("\n", ",priority\n") + "a,0,100,-1e300\n", ":2: priority: must be <= 1e+09"),
    ("dlsched", CANONICAL + "a,1e300,100\n", ":2: submit_time: must be <= 1e+12"),
])
def test_values_no_cluster_could_hold_fail_validation(tmp_path, fmt, text, problem):
    """`num_gpu=1e308` passed `trace validate` and then failed in simulate, blaming the policy."""
    t = write(tmp_path, f"{fmt}.csv", text)
    res = run("trace", "validate", str(t), "--trace-format", fmt)
    assert res.exit_code == 1 and problem in res.stdout, res.output
    trace_error(run("simulate", "-t", str(t), "--trace-format", fmt, "-c", "philly", "-p", "fifo"), problem)


def test_dlsched_trace_without_a_cluster_asks_for_one(tmp_path):
    t = write(tmp_path, "mine.csv", CANONICAL + "a,0,100\n")
    line = one_line_error(run("simulate", "-t", str(t), "-p", "fifo"), "names no cluster", "--cluster", "philly")
    assert "''" not in line
    res = run("simulate", "-t", str(t), "-p", "fifo", "-c", "itp-small", "--format", "json", "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output


def test_a_trace_naming_an_unknown_cluster_says_so_with_a_suggestion(tmp_path):
    t = write(tmp_path, "mine.csv", '# dlsched-trace {"cluster": "phily"}\n' + CANONICAL + "a,0,100\n")
    one_line_error(run("simulate", "-t", str(t), "-p", "fifo"), "names cluster 'phily'", "did you mean 'philly'")


def test_rows_with_one_field_too_many_are_reported_not_a_crash(tmp_path):
    """pandas took the extra first field as the index and the reader failed with a TypeError."""
    t = write(tmp_path, "c.csv", ITP + "a,0,100,1,9\nb,10,50,1,9\n")
    res = run("trace", "validate", str(t))
    assert res.exit_code == 1, res.output
    assert f"{t}:2: -: row has 5 fields, the header has 4" in res.stdout


@pytest.mark.parametrize("text, problem", [
    ('job_id,submission_time,duration,num_gpu\n"a,0,100,1\nb,10,50,1\n', ":3: -: not valid CSV"),  # rows were lost
    ('job_id,submission_time,duration,num_gpu\na,0,100,1,9\n"b,1,1,1\nc,2,2,2\n', ":4: -: not valid CSV"),  # a TypeError
    (b"job_id,submission_time,duration,num_gpu\na,0,100,1,\xff\n", "not UTF-8"),
])
def test_unparseable_csv_is_a_problem_line(tmp_path, text, problem):
    t = write(tmp_path, "c.csv", text)
    res = run("trace", "validate", str(t), "--trace-format", "itp")
    assert res.exit_code == 1 and problem in res.stdout, res.output


def test_numeric_timestamps_are_not_a_date_time_and_raise_no_warning(tmp_path):
    """pandas warned that numeric cells of a date-time column will be read as epoch seconds."""
    import warnings

    from dlsched.traces import validate_trace

    t = write(tmp_path, "philly.csv", "timestamp,duration,num_gpus\n20171009,66,1\n1507532515,60,1\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        problems = validate_trace(t)
    assert problems == [f"{t}:2: timestamp: not a date-time (expected %Y-%m-%d %H:%M:%S): '20171009'",
                        f"{t}:3: timestamp: not a date-time (expected %Y-%m-%d %H:%M:%S): '1507532515'"]


def test_empty_dl2_job_trace_is_a_problem(tmp_path):
    from dlsched.traces import load_trace, validate_trace

    t = write(tmp_path, "job_trace_20180621.csv", "")
    assert "no jobs" in validate_trace(t, "dl2-csv")[0]
    with pytest.raises(TraceError):
        load_trace(t, "dl2-csv")


def _dl2_constants() -> dict:
    return {
        "model_names_index_order": ["a", "b"],
        "per_model_constants": {"epoch_size_steps_per_epoch": [10, 20]},
        "per_model_task_resource_demand_cpu_gpu_slots": {"worker_public_DL2_repo": [[2, 4], [2, 0]],
                                                         "ps_public_DL2_repo": [[2, 0], [2, 0]]},
        "ali_trace": {"arrival_count_per_hour_slot_72": [3, 1], "job_length_class_mean_minutes": [10.0, 20.0],
                      "job_length_class_probability": [0.5, 0.5], "job_length_class_to_model_index": [0, 1]},
    }


@pytest.mark.parametrize("damage", [
    lambda c: c["ali_trace"].update(job_length_class_to_model_index=[0, 5]),
    lambda c: c["per_model_constants"].update(epoch_size_steps_per_epoch=[10]),
    lambda c: c["ali_trace"].update(arrival_count_per_hour_slot_72=[]),
    lambda c: c["per_model_task_resource_demand_cpu_gpu_slots"].update(ps_public_DL2_repo=[["x", 0], [2, 0]]),
    lambda c: c.update(model_names_index_order="ab"),
])
def test_damaged_dl2_constants_are_a_trace_error(tmp_path, damage):
    from dlsched.traces import load_trace

    d = tmp_path / "dl2"
    d.mkdir()
    c = _dl2_constants()
    (d / "workload_constants.json").write_text(json.dumps(c))
    assert len(load_trace(d, "dl2-ali", limit=5).jobs) == 5
    damage(c)
    (d / "workload_constants.json").write_text(json.dumps(c))
    with pytest.raises(TraceError, match="not DL2's workload_constants.json"):
        load_trace(d, "dl2-ali", limit=5)
    (d / "workload_constants.json").write_bytes(b"{\xff}")
    with pytest.raises(TraceError, match="not UTF-8"):
        load_trace(d, "dl2-ali", limit=5)


def test_trace_validate_never_wraps_a_problem_line(tmp_path):
    deep = tmp_path / ("a-rather-long-folder-name-" * 4)
    deep.mkdir()
    t = write(deep, "mine.csv", "job_id,submit_time,duration,num_workrs\na,0,100,2\n")
    res = run("trace", "validate", str(t))
    (line,) = [x for x in res.stdout.splitlines() if "num_workrs" in x]
    assert line.startswith(str(t)) and line.endswith("extra"), line


# --------------------------------------------------------------------------- YAML files

BAD_YAML = {
    "not UTF-8": (b"policy: fifo\nnote: caf\xff\n", "not UTF-8"),
    "no such date": (b"when: 2001-02-30\n", "day is out of range"),
    "bad int tag": (b"port: !!int x\n", "not valid YAML"),
    "too deep": (b"[" * 3000, "nested too deeply"),
    "huge int": (b"port: 1" + b"0" * 5000 + b"\n", "not valid YAML"),
}


def _yaml_commands(tmp_path: Path, bad: Path) -> dict[str, list[str]]:
    """Each of the six YAML loaders behind its command."""
    svc = write(tmp_path, "svc.yaml", f"backend: local\nnodes: {bad}\nwork_dir: {tmp_path / 'svc'}\nport: 0\n")
    return {
        "run config": ["simulate", "--config", str(bad)],
        "cluster file": ["simulate", "-p", "fifo", "--cluster", str(bad)],
        "service config": ["serve", "--config", str(bad), "--work-dir", str(tmp_path / "svc"), "--port", "0"],
        "nodes file": ["serve", "--config", str(svc)],
        "job file": ["submit", str(bad), "--url", "http://127.0.0.1:9"],
        "DL2 training config": ["train", "dl2", "--config", str(bad), "--out", str(tmp_path / "dl2")],
    }


@pytest.mark.parametrize("loader", ["run config", "cluster file", "service config", "nodes file", "job file",
                                    "DL2 training config"])
@pytest.mark.parametrize("case", sorted(BAD_YAML))
def test_every_yaml_loader_turns_a_bad_file_into_one_line(tmp_path, loader, case):
    data, needle = BAD_YAML[case]
    bad = write(tmp_path, "bad.yaml", data)
    one_line_error(run(*_yaml_commands(tmp_path, bad)[loader]), f"{loader} {bad}", needle)


@pytest.mark.parametrize("case", sorted(BAD_YAML))
def test_read_yaml_raises_config_error(tmp_path, case):
    data, needle = BAD_YAML[case]
    with pytest.raises(ConfigError, match=needle):
        read_yaml(write(tmp_path, "x.yaml", data), "some file")


@pytest.mark.parametrize("group, problem", [
    ("{count: 1000000000, gpus: 8, cpus: 8, mem: 8}", "count"),
    ("{count: 2, gpus: .inf, cpus: 8, mem: 8}", "gpus"),
    ("{count: 2, gpus: 8, cpus: 8, mem: 8, speed: .nan}", "speed"),
])
def test_cluster_file_values_are_bounded(tmp_path, group, problem):
    c = write(tmp_path, "c.yaml", f"name: lab\nnode_groups:\n  - {group}\n")
    one_line_error(run("simulate", "-p", "fifo", "--cluster", str(c)), f"node_groups.0.{problem}")
