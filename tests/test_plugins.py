"""Policy plugins (docs/PLUGINS.md): the documented example package, pip-installed into a folder
of its own, is listed by `dlsched policies`, compared by `dlsched compare`, swept by `dlsched
sweep`, served by `dlsched serve`, and passes the policy contract every built-in passes (the
simulator and the live controller give the same actions). Broken plugins are warned about and
skipped without breaking the built-ins; using one by name is one error line naming its
distribution and entry point.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dlsched.core.errors import ConfigError
from dlsched.policies import plugins
from dlsched.policies.registry import POLICIES, check_policy, describe_policies, make_policy, policy_names
from tests.test_contract import actions, check_contract  # noqa: F401  (the contract check and its fixture)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin_policy"
NAME, DIST = "smallest-first", "dlsched-smallest-first"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The example plugin installed by pip (offline, no build isolation: setuptools is here) into a
    folder of its own. pip builds a copy, so the checkout's example folder gets no build files."""
    tmp = tmp_path_factory.mktemp("plugin")
    src = tmp / "plugin_policy"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation", "--no-index", "--quiet",
         "--disable-pip-version-check", "--target", str(target), str(src)],
        capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    assert list(target.glob("dlsched_smallest_first-*.dist-info")), sorted(p.name for p in target.iterdir())
    return target


def _dist_info(site: Path, dist: str, entry_points: dict[str, str], modules: dict[str, str] | None = None) -> None:
    """A distribution made by hand (what pip would leave): metadata, entry points, modules."""
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    lines = "".join(f"{k} = {v}\n" for k, v in entry_points.items())
    (info / "entry_points.txt").write_text(f"[dlsched.policies]\n{lines}")
    for name, text in (modules or {}).items():
        (site / f"{name}.py").write_text(text)


def _env(*sites: Path) -> dict[str, str]:
    path = os.pathsep.join([*map(str, sites), *filter(None, [os.environ.get("PYTHONPATH")])])
    return {**os.environ, "PYTHONPATH": path, "COLUMNS": "200"}


def _dlsched(args: list[str], *sites: Path, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dlsched.cli", *args], capture_output=True, text=True,
                          env=_env(*sites), cwd=cwd, timeout=timeout)


@pytest.fixture
def on_path(monkeypatch):
    """Put plugin folders on this process's path (found afresh); everything undone after."""
    modules = set(sys.modules)

    def add(*sites: Path) -> None:
        for s in sites:
            monkeypatch.syspath_prepend(str(s))
        plugins.forget()

    yield add
    plugins.forget()
    for name in set(sys.modules) - modules:
        if name in ("smallest_first", "not_a_policy"):
            del sys.modules[name]


# ------------------------------------------------------------------ the documented example


def test_the_documented_example_is_the_shipped_one():
    """docs/PLUGINS.md shows the example folder's two files verbatim, so the tested plugin is the
    documented one."""
    doc = (ROOT / "docs" / "PLUGINS.md").read_text()
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", doc, flags=re.S)
    assert (EXAMPLE / "smallest_first.py").read_text() in blocks
    assert (EXAMPLE / "pyproject.toml").read_text() in blocks
    code = (EXAMPLE / "smallest_first.py").read_text()
    assert len(code.splitlines()) <= 35
    assert "docs/PLUGINS.md" in (ROOT / "README.md").read_text()


def test_dlsched_policies_lists_the_plugin_beside_the_built_ins(site, tmp_path):
    done = _dlsched(["policies"], site, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "skipped" not in done.stderr
    rows = {line.split()[0]: line for line in done.stdout.splitlines() if line.strip()}
    assert set(POLICIES) <= set(rows) and "(baseline)" in rows["fifo"]
    assert rows[NAME].split(None, 1)[1] == f"fewest GPUs first (ties: arrival), at the requested size, packed; " \
                                           f"never preempts (plugin: {DIST})"


def test_simulate_compares_the_plugin_with_fifo(site, tmp_path):
    done = _dlsched(["simulate", "-p", f"{NAME},fifo", "--format", "json", "--out",
                     str(tmp_path / "report")], site, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    rows = {row["policy"]: row for row in json.loads(done.stdout)}
    assert set(rows) == {NAME, "fifo"}
    with open(tmp_path / "report" / "summary.csv") as f:
        summary = {row["policy"]: row for row in csv.DictReader(f)}
    assert set(summary) == {NAME, "fifo"}
    jobs = {p: int(float(summary[p]["jobs"])) for p in summary}
    assert jobs[NAME] == jobs["fifo"] == int(float(summary[NAME]["finished"])) > 0
    # smallest first with backfilling is not strict FIFO: on this queueing slice it waits less
    wait = {p: float(summary[p]["mean_queueing_delay_h"]) for p in summary}
    assert wait[NAME] < 0.9 * wait["fifo"], wait


def test_a_sweep_runs_the_plugin_with_its_options(site, tmp_path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(f"name: plug\npolicies: [{NAME}, fifo]\ntraces: [default]\nlimit: 40\nloads: [null]\nseeds: 1\n"
                    f"policy_options: {{{NAME}: {{backfill: false}}}}\n")
    done = _dlsched(["sweep", str(grid), "--in-process", "--out", str(tmp_path / "sweep")], site, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(tmp_path / "sweep" / "cells.csv") as f:
        cells = list(csv.DictReader(f))
    assert sorted(c["policy"] for c in cells) == ["fifo", NAME]
    # without backfilling, fewest-GPUs-first still runs every job of the slice
    assert all(int(float(c["finished"])) == int(float(c["jobs"])) > 0 for c in cells), cells


def test_the_plugin_passes_the_policy_contract(site, on_path, tmp_path, actions):
    """tests/test_contract.py's check, on the plugin: the scripted timeline through the live
    controller (dry backend) and through the simulator gives the same actions at the same times."""
    from dlsched.live.controller import live_refusal

    on_path(site)
    policy = make_policy(NAME)
    assert type(policy).__name__ == "SmallestFirst" and policy.name == NAME and not live_refusal(policy)
    check_contract(NAME, tmp_path, actions)


def test_dlsched_serve_schedules_with_the_plugin(site, tmp_path):
    from tests.live_service import Service

    svc = Service(tmp_path / "serve", NAME, None, backend="dry", env={"PYTHONPATH": _env(site)["PYTHONPATH"]})
    try:
        svc.start()
        job = svc.submit(model="mlp", steps=20)["id"]
        jobs = svc.wait(lambda js: js[0]["status"] == "done", 60, "the job to finish")
        assert [j["id"] for j in jobs] == [job]
    finally:
        svc.stop()


def test_options_and_names_are_checked_as_for_a_built_in(site, on_path):
    on_path(site)
    assert check_policy(" Smallest-First ") == NAME and policy_names()[-1] == NAME
    assert make_policy(NAME, backfill=False).backfill is False
    with pytest.raises(ConfigError, match=r"policy 'smallest-first' has no option 'backfil' \(did you mean 'backfill'\?\)"):
        make_policy(NAME, backfil=False)
    with pytest.raises(ConfigError, match=r"unknown policy 'smalest-first' \(did you mean 'smallest-first'\?\)"):
        check_policy("smalest-first")


# ------------------------------------------------------------------ broken plugins


@pytest.fixture
def broken(tmp_path) -> Path:
    """One distribution with every way a plugin can be unusable, and one that copies the example's
    name (so, beside the example, that name is claimed twice)."""
    site = tmp_path / "broken-site"
    _dist_info(site, "broken-plugins", {
        "fifo": "not_a_policy:make",  # a built-in's name
        "no-import": "no_such_module_dlsched_test:make",  # its module is not there
        "MyPolicy": "not_a_policy:make",  # a name no one can type
        "not-a-policy": "not_a_policy:make",  # imports, but builds no Policy
        "a-constant": "not_a_policy:VALUE",  # not callable
    }, {"not_a_policy": '"""A plugin gone wrong."""\nVALUE = 3\n\n\ndef make():\n    """makes a number"""\n    return 42\n'})
    _dist_info(site, "copycat", {NAME: "smallest_first:SmallestFirst"})
    return site


def test_a_broken_plugin_is_skipped_with_a_warning_and_the_built_ins_work(broken, on_path, caplog):
    on_path(broken)
    with caplog.at_level(logging.WARNING, logger="dlsched.plugins"):
        rows = {name: kind for name, _, kind in describe_policies()}
    assert list(rows)[:len(POLICIES)] == list(POLICIES) and rows["fifo"] == "baseline"
    assert set(rows) == {*POLICIES, "not-a-policy"}  # it imports; what it builds is checked when it is built
    warned = [r.getMessage() for r in caplog.records]
    for ep in ("fifo = not_a_policy:make", "no-import = no_such_module_dlsched_test:make",
               "MyPolicy = not_a_policy:make", "a-constant = not_a_policy:VALUE"):
        (line,) = [w for w in warned if f"'{ep}' of distribution broken-plugins 0.1" in w]
        assert "\n" not in line and "skipped" in line
    assert type(make_policy("fifo")).__module__.startswith("dlsched.")  # the built-in wins its name

    with pytest.raises(ConfigError, match=r"plugin policy 'no-import' cannot be used: entry point 'no-import = "
                                          r"no_such_module_dlsched_test:make' of distribution broken-plugins 0\.1 "
                                          r"cannot be imported: ModuleNotFoundError"):
        make_policy("no-import")
    with pytest.raises(ConfigError, match=r"plugin policy 'not-a-policy' \(entry point 'not-a-policy = "
                                          r"not_a_policy:make' of distribution broken-plugins 0\.1\) returned a 'int' object"):
        make_policy("not-a-policy")


def test_a_name_two_distributions_register_is_used_by_neither(site, broken, on_path, caplog):
    on_path(site, broken)
    with caplog.at_level(logging.WARNING, logger="dlsched.plugins"):
        names = policy_names()
    assert NAME not in names
    with pytest.raises(ConfigError, match=r"2 distributions register it .*copycat 0\.1.*dlsched-smallest-first 0\.1\.0"
                                          r"|2 distributions register it .*dlsched-smallest-first 0\.1\.0.*copycat 0\.1"):
        check_policy(NAME)
    assert any("2 distributions register it" in r.getMessage() for r in caplog.records)


def test_on_the_command_line_a_broken_plugin_is_a_warning_or_one_error_line(broken, tmp_path):
    listed = _dlsched(["policies"], broken, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert {line.split()[0] for line in listed.stdout.splitlines() if line.strip()} >= set(POLICIES)
    assert "Traceback" not in listed.stderr
    assert "plugin policy 'no-import' skipped: entry point 'no-import = no_such_module_dlsched_test:make' of " \
           "distribution broken-plugins 0.1 cannot be imported: ModuleNotFoundError" in listed.stderr

    used = _dlsched(["simulate", "-p", "no-import,fifo", "--limit", "10"], broken, cwd=tmp_path)
    assert used.returncode == 2 and "Traceback" not in used.stderr
    (line,) = [x for x in used.stderr.splitlines() if x.startswith("error:")]
    assert "'no-import = no_such_module_dlsched_test:make' of distribution broken-plugins 0.1" in line
