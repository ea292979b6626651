"""A report re-runs itself: `dlsched simulate --config <report>/run.yaml` gives the same jobs.csv,
byte for byte, and the report's page and run.yaml say which code, trace, seed, command and
simulation options made it (issue 30)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess

import pytest
import yaml
from typer.testing import CliRunner

from dlsched import provenance
from dlsched.cli import app
from dlsched.metrics.report import holds_report
from dlsched.paths import source_checkout
from dlsched.run_config import RUN_FILE, RUN_FILE_ALT, load_run_config
from dlsched.sim.config import SimConfig
from dlsched.traces.embedded import data_path

SMALL = ["--limit", "30", "-p", "fifo,tiresias"]


def _simulate(*args: str) -> None:
    res = CliRunner().invoke(app, ["simulate", "--format", "csv", *args])
    assert res.exit_code == 0, res.output


def _rerun(report, out):
    """Re-run `report` from its own run.yaml into `out`; both jobs.csv as bytes."""
    _simulate("--config", str(report / RUN_FILE), "--out", str(out))
    return (report / "jobs.csv").read_bytes(), (out / "jobs.csv").read_bytes()


@pytest.mark.parametrize("args", [
    SMALL,
    [*SMALL, "--load", "2", "--seed", "3"],  # a load at which the 30 jobs queue, so it decides the jobs
    ["--limit", "40", "-p", "srtf,dragon", "--rigid", "--profiles", "off", "--seed", "5"],
], ids=["defaults", "load-seed", "rigid-profiles-off"])
def test_rerun_from_run_yaml_gives_the_same_jobs_csv(tmp_path, args):
    _simulate(*args, "--out", str(tmp_path / "a"))
    first, again = _rerun(tmp_path / "a", tmp_path / "b")
    assert first == again
    assert first.count(b"\n") > 30  # a real table (header + every job of both policies), not two empty files
    a, b = (load_run_config(tmp_path / d / RUN_FILE) for d in "ab")
    assert a.model_dump(exclude={"provenance"}) == b.model_dump(exclude={"provenance"})  # the re-run pins the same


def test_a_run_config_without_the_load_gives_other_jobs(tmp_path):
    """The control for the test above: run.yaml carries --load, and without it the jobs differ,
    so byte-identical files there mean the settings travelled, not that nothing matters."""
    _simulate(*SMALL, "--load", "2", "--out", str(tmp_path / "a"))
    data = yaml.safe_load((tmp_path / "a" / RUN_FILE).read_text())
    assert data["load"] == 2
    data["load"] = None
    (tmp_path / "noload.yaml").write_text(yaml.safe_dump(data))
    _simulate("--config", str(tmp_path / "noload.yaml"), "--out", str(tmp_path / "b"))
    assert (tmp_path / "a" / "jobs.csv").read_bytes() != (tmp_path / "b" / "jobs.csv").read_bytes()


def test_run_yaml_holds_every_setting_and_reruns_from_another_folder(tmp_path, monkeypatch):
    """A relative trace, a run config with sim and policy options and a --traces folder, run in one
    folder and re-run from another: the trace's path is absolute, every simulation option is
    written out, and the re-run is byte-identical."""
    work, elsewhere, roots = tmp_path / "work", tmp_path / "elsewhere", tmp_path / "roots"
    for d in (work, elsewhere, roots):
        d.mkdir()
    shutil.copy(data_path(), work / "slice.csv")
    (work / "mine.yaml").write_text("sim: {restart_overhead: 30, loss_noise: 0.02}\n"
                                    "policy_options: {tiresias: {promote_knob: 4}}\n")
    monkeypatch.chdir(work)
    _simulate("--trace", "slice.csv", "--config", "mine.yaml", *SMALL, "--seed", "7", "--traces", str(roots),
              "--out", "rep")
    data = yaml.safe_load((work / "rep" / RUN_FILE).read_text())
    assert data["trace"] == str(work / "slice.csv") and data["trace_format"] == "itp-deadline"
    assert data["sim"] == {**SimConfig().model_dump(), "seed": 7, "restart_overhead": 30, "loss_noise": 0.02}
    assert data["policies"] == ["fifo", "tiresias"] and data["limit"] == 30
    assert data["policy_options"] == {"tiresias": {"promote_knob": 4}}
    assert data["traces"] == str(roots) and "out" not in data
    assert data["throughput"] == {"duration_alpha": 0.85, "dl2": "measured"}
    prov = data["provenance"]
    assert prov["trace"]["sha256"] == hashlib.sha256((work / "slice.csv").read_bytes()).hexdigest()
    assert prov["seed"] == 7 and prov["cwd"] == str(work)
    assert prov["command"] == (f"dlsched simulate --trace slice.csv --policies fifo,tiresias --out rep --seed 7 "
                               f"--config mine.yaml --limit 30 --format csv --traces {roots}")
    monkeypatch.chdir(elsewhere)
    first, again = _rerun(work / "rep", elsewhere / "b")
    assert first == again
    page = (work / "rep" / "index.html").read_text()
    assert "restart_overhead = 30" in page and "loss_noise = 0.02" in page and "promote_knob = 4" in page


def test_page_shows_version_checksum_seed_and_overheads(tmp_path):
    _simulate(*SMALL, "--load", "0.8", "--seed", "3", "--out", str(tmp_path / "r"))
    page = (tmp_path / "r" / "index.html").read_text()
    checksum = hashlib.sha256(data_path().read_bytes()).hexdigest()
    assert "<h2>Reproduce</h2>" in page
    assert f"dlsched {provenance.version()}, " in page
    assert f"sha256 {checksum}" in page
    assert "<dt>Seed</dt><dd>3 (" in page
    assert "restart_overhead = 10; startup_overhead = 0" in page  # the engine's default pauses, applied and shown
    assert f"dlsched simulate --config {tmp_path / 'r' / RUN_FILE}" in page
    assert "load = 0.8" in page and '<a href="run.yaml">' in page
    prov = yaml.safe_load((tmp_path / "r" / RUN_FILE).read_text())["provenance"]
    assert prov["trace"]["path"] == "embedded:itp_cluster04_deadline_slice.csv"
    assert prov["trace"]["sha256"] == checksum and prov["dlsched"] == provenance.version()


def test_commit_is_recorded_from_a_checkout(tmp_path):
    """From this checkout the commit is git's HEAD; an installed package (no checkout) records none."""
    _simulate(*SMALL, "--out", str(tmp_path / "r"))
    git = yaml.safe_load((tmp_path / "r" / RUN_FILE).read_text())["provenance"]["git"]
    checkout = source_checkout()
    head = None
    if checkout is not None and (checkout / ".git").exists() and shutil.which("git"):
        head = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    if head:
        assert git["commit"] == head.strip() and isinstance(git["dirty"], bool)
        page = (tmp_path / "r" / "index.html").read_text()
        assert f"git commit {head.strip()}" in page
    else:
        assert git is None


def test_no_checkout_or_no_git_records_no_commit_without_failing(tmp_path, monkeypatch):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    with monkeypatch.context() as m:  # no git program
        m.setattr(provenance.subprocess, "run", no_git)
        assert provenance.git_state() is None
    fake = tmp_path / "checkout"
    (fake / ".git").mkdir(parents=True)  # a folder that looks like a checkout but is no repository
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.setattr(provenance, "source_checkout", lambda: fake)
    assert provenance.git_state() is None
    monkeypatch.setattr(provenance, "source_checkout", lambda: None)  # an installed wheel
    assert provenance.git_state() is None
    _simulate(*SMALL, "--out", str(tmp_path / "r"))  # and the run still writes its report
    assert yaml.safe_load((tmp_path / "r" / RUN_FILE).read_text())["provenance"]["git"] is None
    assert "not run from a git checkout (no commit)" in (tmp_path / "r" / "index.html").read_text()


def test_the_users_own_run_yaml_is_never_replaced(tmp_path, monkeypatch):
    """`--config run.yaml --out .` in a folder holding the user's run.yaml: the report writes its run
    config beside it under another name, and that one re-runs the report too."""
    monkeypatch.chdir(tmp_path)
    mine = "policies: [fifo, tiresias]\nlimit: 30\n"
    (tmp_path / RUN_FILE).write_text(mine)
    assert not holds_report(tmp_path)  # a config is not a report
    _simulate("--config", RUN_FILE, "--out", ".")
    assert (tmp_path / RUN_FILE).read_text() == mine
    assert '<a href="run.dlsched.yaml">' in (tmp_path / "index.html").read_text()
    _simulate("--config", RUN_FILE_ALT, "--out", "again")
    assert (tmp_path / "jobs.csv").read_bytes() == (tmp_path / "again" / "jobs.csv").read_bytes()


def test_a_folder_holding_only_a_reports_run_yaml_holds_a_report(tmp_path):
    _simulate(*SMALL, "--out", str(tmp_path / "r"))
    (tmp_path / "only").mkdir()
    shutil.copy(tmp_path / "r" / RUN_FILE, tmp_path / "only" / RUN_FILE)
    assert holds_report(tmp_path / "only")
