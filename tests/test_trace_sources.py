"""Where each trace comes from (`dlsched.traces.sources`, `dlsched trace sources`, docs/TRACES.md),
every error about a missing traces folder naming both ways to give one, and a provenance line
that says what served the jobs."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dlsched
from dlsched.cli import app
from dlsched.core.errors import DlschedError
from dlsched.paths import checkout_traces_dir, describe_traces, missing_traces_hint
from dlsched.throughput.registry import THROUGHPUT_MODELS
from dlsched.traces import FORMATS, detect_format, load_trace, validate_trace
from dlsched.traces.sources import JOBS, MEASURED, SOURCES

REPO = Path(dlsched.__file__).resolve().parents[2]
ROOT = checkout_traces_dir()
needs_shared = pytest.mark.skipif(ROOT is None, reason="the shared traces are not beside this checkout")
LICENCES = ("MIT", "Apache-2.0", "CC BY 4.0")


def _names_both(text: str) -> None:
    assert "--traces" in text and "DLSCHED_TRACES" in text, text


@pytest.fixture
def no_traces(monkeypatch):
    """No traces root at all: $DLSCHED_TRACES names a folder that does not exist."""
    monkeypatch.setenv("DLSCHED_TRACES", "/nonexistent")


# --------------------------------------------------------------------------- the list itself


def test_every_trace_format_and_measured_model_has_a_source() -> None:
    """A new format or measured table without a source entry fails here, so the list cannot fall behind."""
    fed = {f for s in SOURCES for f in s.feeds}
    assert set(FORMATS) - {"synthetic"} <= {f for s in SOURCES if s.kind == JOBS for f in s.feeds}  # synthetic reads no data
    measured = {k for k, d in THROUGHPUT_MODELS.items() if "measured" in d.lower()}
    assert {"elasticflow-curves", "gavel-matrix", "pollux-profile", "dl2-speed"} <= measured
    assert measured <= {f for s in SOURCES if s.kind == MEASURED for f in s.feeds}
    assert fed <= set(FORMATS) | set(THROUGHPUT_MODELS)  # nothing names a format that does not exist


def test_entries_are_complete_and_shipped_data_exists() -> None:
    assert len({s.name for s in SOURCES}) == len(SOURCES)
    for s in SOURCES:
        assert s.kind in (JOBS, MEASURED) and s.what and s.path and s.licence and s.command, s.name
        assert s.repository.startswith(("https://github.com/", "none:")), s.name
        assert (s.folder is None) == bool(s.shipped), s.name  # no root needed exactly when shipped
        if s.shipped:
            assert (REPO / s.shipped).exists(), s.shipped
        assert s.command.startswith("dlsched "), s.name


def test_traces_md_names_every_source() -> None:
    text = (REPO / "docs" / "TRACES.md").read_text()
    missing = [s.name for s in SOURCES if f"`{s.name}`" not in text]
    assert not missing, f"docs/TRACES.md does not name {missing}"
    for s in SOURCES:  # and gives each one's public repository
        for url in re.findall(r"https://github\.com/[\w.-]+/[\w.-]+", s.repository):
            assert url in text, (s.name, url)


def test_readme_points_to_traces_md() -> None:
    readme = (REPO / "README.md").read_text()
    first = readme.index("../shared/traces/")
    assert "docs/TRACES.md" in readme[:first + 400]


@needs_shared
def test_sources_agree_with_the_shared_readmes() -> None:
    """Each entry's repository and licence are the ones its folder's README states."""
    for s in SOURCES:
        readme = (REPO / "src/dlsched/data/README.md") if s.folder is None else ROOT / s.folder.split("/")[0] / "README.md"
        text = readme.read_text()
        for repo in re.findall(r"https://github\.com/([\w.-]+/[\w.-]+)", f"{s.repository} {s.path}"):
            assert repo in text, (s.name, repo, readme)
        if s.licence.startswith("not stated"):  # the README names no licence of its own
            assert not any(f"License: {lic}" in text for lic in LICENCES), s.name
            continue
        for lic in (x for x in LICENCES if x in s.licence):
            assert lic in text, (s.name, lic, readme)
        if s.licence.startswith("none"):
            assert "License: none" in text, s.name


@needs_shared
def test_every_folder_is_in_the_shared_copy_and_every_example_loads() -> None:
    for s in SOURCES:
        if s.folder is not None:
            assert (ROOT / s.folder).exists(), s.folder
        if s.example is not None:
            path = ROOT / s.example
            assert detect_format(path) in s.feeds, s.name
            w = load_trace(path, limit=5, traces=ROOT)
            assert len(w.jobs) == 5, s.name


@needs_shared
def test_the_gavel_conversion_is_the_one_documented() -> None:
    gavel = next(s for s in SOURCES if s.name == "gavel")
    with (ROOT / gavel.example).open() as f:
        header = next(csv.reader(f))
    assert ",".join(header) in gavel.note


# --------------------------------------------------------------------------- dlsched trace sources


def test_cli_json_says_which_entries_a_root_holds(tmp_path) -> None:
    (tmp_path / "philly-pollux").mkdir()
    res = CliRunner().invoke(app, ["trace", "sources", "--format", "json", "--traces", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["traces_root"] == str(tmp_path)
    rows = {r["name"]: r for r in data["sources"]}
    assert list(rows) == [s.name for s in SOURCES]
    assert rows["philly"]["present"] is True and rows["philly"]["folder"] == "philly-pollux"
    assert rows["elasticflow-curves"]["present"] is True  # shipped
    assert rows["itp-deadline"]["present"] is False
    assert rows["dl2-speeds"]["licence"].startswith("none")


def test_cli_table_without_a_root(no_traces) -> None:
    res = CliRunner().invoke(app, ["trace", "sources"])
    assert res.exit_code == 0, res.output
    flat = " ".join(res.stdout.split())
    for s in SOURCES:
        assert s.name in flat
    assert "no traces root" in flat and "Traces root: none" in flat
    _names_both(flat)  # says how to give one
    assert "github.com/microsoft/elasticflow-traces" in flat


def test_cli_bad_format_is_one_line() -> None:
    res = CliRunner().invoke(app, ["trace", "sources", "--format", "xml"])
    assert res.exit_code == 2 and "--format must be one of table, json" in res.stderr


# --------------------------------------------------------------------------- errors name --traces and DLSCHED_TRACES


def test_the_hint_names_both() -> None:
    _names_both(missing_traces_hint())
    assert "dl2/" in missing_traces_hint("dl2/")


def test_library_errors_name_both(no_traces, tmp_path) -> None:
    from dlsched.cli_support import use_shared_traces
    from dlsched.core.job import JobSpec
    from dlsched.experiments.real_traces import QUICK_CASES, load_case
    from dlsched.hetero.scenarios import workload
    from dlsched.paths import traces_dir
    from dlsched.policies.registry import make_policy
    from dlsched.presets import load_cluster
    from dlsched.rl.trace_workloads import itp_windows
    from dlsched.sim.engine import simulate
    from dlsched.throughput import trace_files
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces.dl2 import constants_path

    pollux_job = JobSpec(job_id="a", submit_time=0.0, iterations=10.0, model="pollux:cifar10")

    raising = {
        "--traces folder": lambda: traces_dir(tmp_path / "absent"),
        "use_shared_traces": lambda: use_shared_traces(None, "this"),
        "dl2 constants": lambda: constants_path(),
        "measured table": lambda: trace_files.require(None, trace_files.DL2_SPEED, "DL2 measured speeds"),
        "hetero": lambda: workload("static", load_cluster("hetero-small"), seed=0),
        "real-traces case": lambda: load_case("c", next(iter(QUICK_CASES.values())), tmp_path, 0),
        "itp windows, no root": lambda: itp_windows(None, ("cluster01.csv",), 10),
        "itp windows, not in root": lambda: itp_windows(tmp_path, ("cluster01.csv",), 10),
        "a job on a measured table": lambda: simulate([pollux_job], load_cluster("pollux"), make_policy("fifo"),
                                                      default_throughput(None)),
    }
    for what, call in raising.items():
        with pytest.raises(DlschedError) as e:
            call()
        assert "--traces" in str(e.value) and "DLSCHED_TRACES" in str(e.value), what


def test_pollux_workload_without_profiles_names_both(no_traces, tmp_path) -> None:
    wl = tmp_path / "workloads" / "workload-1.csv"
    wl.parent.mkdir()
    wl.write_text("name,time,application,num_replicas,batch_size\njob-0,0,cifar10,1,128\n")
    problems = validate_trace(wl)
    assert any("no Pollux profiles" in p for p in problems), problems
    _names_both(" ".join(problems))


@pytest.mark.parametrize("args", [
    ["experiment", "qos", "--quick"],
    ["experiment", "real-traces", "--quick"],
    ["experiment", "robustness", "--quick"],
    ["compare", "-t", "dl2-ali", "-p", "fifo"],
])
def test_commands_without_traces_name_both(no_traces, tmp_path, args) -> None:
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert res.exit_code == 2, res.output
    assert "Traceback" not in res.output
    _names_both(res.stderr)


def test_qos_experiment_takes_traces(tmp_path) -> None:
    res = CliRunner().invoke(app, ["experiment", "qos", "--quick", "--traces", str(tmp_path / "absent"),
                                   "--out", str(tmp_path / "out")])
    assert res.exit_code == 2 and "does not exist" in res.stderr, res.output
    _names_both(res.stderr)


# --------------------------------------------------------------------------- the report's provenance line


def test_describe_traces_claims_no_model_it_is_not_told(no_traces) -> None:
    line = describe_traces(None)
    assert "Traces root: none" in line and "analytic" not in line
    told = describe_traces(None, {"elasticflow-curves": 300, "duration-only": 2})
    assert "elasticflow-curves 300, duration-only 2" in told


def test_report_on_the_embedded_workload_without_traces_says_what_served_it(no_traces, tmp_path) -> None:
    out = tmp_path / "rep"
    res = CliRunner().invoke(app, ["simulate", "-p", "fifo", "--limit", "20", "--format", "json", "--out", str(out)])
    assert res.exit_code == 0, res.output
    with (out / "jobs.csv").open() as f:
        served = {row["throughput_model"] for row in csv.DictReader(f)}
    assert served == {"elasticflow-curves"}
    page = (out / "index.html").read_text()
    note = next(n for n in re.findall(r"<li>(.*?)</li>", page, re.S) if "Traces root" in n)
    assert "analytic" not in note and "elasticflow-curves 20" in note, note
