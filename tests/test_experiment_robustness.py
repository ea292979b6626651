"""`dlsched experiment robustness` on a tiny real slice: every cell and policy in the tables, every
claim evaluated (a failing one reported as failing), reasons kept in the docs page, resume."""

from __future__ import annotations

import pandas as pd
import pytest

from dlsched.experiments import robustness as exp
from dlsched.experiments.real_traces import TraceCase
from dlsched.traces.embedded import data_path

#: Fast policies only (dl2 and dual-agent take seconds to minutes even here): their claims read "not run".
POLICIES = ("fifo", "drf", "kube-default", "dragon", "oasis")


@pytest.fixture()
def root(tmp_path):
    """A traces root holding the first 60 jobs of the embedded ITP slice (deadline format, which the
    raw reader reads too) and of the shared Philly trace's format (written here, so no shared traces needed)."""
    lines = data_path().read_text().splitlines()[:61]
    (tmp_path / "itp").mkdir()
    (tmp_path / "itp" / "slice.csv").write_text("\n".join(lines) + "\n")
    rows = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    rows += [f"2017-10-09 {6 + i // 60:02d}:{i % 60:02d}:00,{600 + 97 * i},{(1, 2, 4, 8)[i % 4]},0,c1" for i in range(60)]
    (tmp_path / "philly.csv").write_text("\n".join(rows) + "\n")
    return tmp_path


def _claims(out):
    return pd.read_csv(out / "claims.csv", dtype={"holds": str, "reference": str})


FORMS = {
    "itp-raw": exp.TraceForm(TraceCase("itp/slice.csv", "itp", None, "auto", "itp"), "itp-small", "rigid"),
    "itp-raw-elastic": exp.TraceForm(TraceCase("itp/slice.csv", "itp", None, "auto", "itp", elastic=True),
                                     "itp-small", "elastic"),
    "itp-deadline": exp.TraceForm(TraceCase("itp/slice.csv", "itp-deadline", None, "auto", "itp"), "itp-small", "curves"),
    "philly-draw": exp.TraceForm(TraceCase("philly.csv", "philly", None, "draw", "philly"), "philly", "drawn"),
}


def test_every_cell_policy_and_claim_is_reported_and_a_rerun_resumes(root, tmp_path):
    out, docs = tmp_path / "out", tmp_path / "ROBUSTNESS.md"
    runs = exp.run(out, root, forms=FORMS, policies=POLICIES, docs=docs, command="dlsched experiment robustness (test)")
    cells = [exp.cell_name(f, s) for f in FORMS for s in exp.SIZES]
    assert len(runs) == len(cells) * len(POLICIES)
    # the two sizes are different clusters: the preset as is and the load-0.8 one
    gpus = runs.groupby("case")["gpus"].first()
    assert gpus["itp-raw@preset"] == 128 and gpus["itp-raw@load0.8"] != 128
    assert abs(runs.loc[runs["case"] == "itp-raw@load0.8", "offered_load"].iloc[0] - 0.8) < 0.2

    summary = pd.read_csv(out / "summary.csv")
    assert set(summary["case"]) == set(cells) and set(summary["policy"]) == set(POLICIES)
    assert len(summary) == len(cells) * len(POLICIES) * len(exp.METRICS)
    ran = summary.dropna(subset=["value"])
    assert ((ran["low"] <= ran["value"] + 1e-9) & (ran["value"] <= ran["high"] + 1e-9)).all()

    claims = _claims(out)
    # every claim on every cell it applies to: 8 claims per cell, dragon vs kube-default on two cells only
    assert len(claims) == 8 * len(cells) + 2
    assert set(claims.loc[claims["claim"].str.contains("kube-default"), "cell"]) == {"itp-raw@load0.8", "philly-draw@load0.8"}
    not_run = claims[claims["policy"].isin(["dl2", "dual-agent", "qos"])]
    assert (not_run["holds"] == "not run").all() and not_run["value"].isna().all()
    measured = claims[claims["policy"].isin(["dragon", "oasis"])]
    assert measured["holds"].isin(["True", "False"]).all() and measured["value"].notna().all()
    assert set(claims.loc[claims["claim"].str.contains("best baseline"), "reference"].dropna()) \
        <= set(exp.REFERENCE_BASELINES)

    page = (out / "RESULTS.md").read_text()
    assert page == docs.read_text()
    assert "dlsched experiment robustness (test)" in page
    for name in (*cells, *POLICIES):
        assert f"| {name} |" in page or f" {name} |" in page, name

    # a reason written into the docs for a claim that does not hold survives a rerun; the rerun runs
    # nothing (resumes)
    line = next(x for x in page.splitlines() if x.startswith("| dl2 mean JCT") and "itp-raw@preset" in x)
    assert "| not run |" in line
    assert line.endswith("|  |")  # the reason column is empty as written
    docs.write_text(page.replace(line, line[:-2] + "jobs tie here |"))
    stamp = {f: f.stat().st_mtime_ns for f in (out / "cells").iterdir()}
    again = exp.run(out, root, forms=FORMS, policies=POLICIES, docs=docs)
    assert {f: f.stat().st_mtime_ns for f in (out / "cells").iterdir()} == stamp
    pd.testing.assert_frame_equal(runs.drop(columns="wall_s"), again.drop(columns="wall_s"))
    kept = [x for x in docs.read_text().splitlines() if "jobs tie here" in x]
    assert len(kept) == 1 and "itp-raw@preset" in kept[0] and kept[0].startswith("| dl2 mean JCT")


def test_an_impossible_bound_is_reported_as_failing(root, tmp_path):
    impossible = (exp.Claim("dragon", "mean_jct_h", "fifo", "<=", 0.0),
                  exp.Claim("dragon", "mean_jct_h", exp.BEST, "<", float("inf"), forms=("itp-deadline",)))
    exp.run(tmp_path / "out", root, forms={"itp-deadline": FORMS["itp-deadline"]}, policies=("fifo", "drf", "dragon"),
            claims=impossible)
    claims = _claims(tmp_path / "out")
    first = claims[claims["reference"] == "fifo"]
    assert len(first) == 2 and (first["holds"] == "False").all() and (first["value"] > 0).all()
    best = claims[claims["claim"].str.contains("best baseline")]
    assert len(best) == 2 and (best["holds"] == "True").all() and best["reference"].isin(["fifo", "drf"]).all()
    assert "2 hold, 2 miss, 0 not measured, of 4." in (tmp_path / "out" / "RESULTS.md").read_text()


def test_the_best_baseline_is_the_lowest_mean_jct_of_the_reference_set():
    def table(jct):
        return pd.DataFrame({"run": 0, "job_id": ["a", "b"], "done": True, "jct_h": jct, "has_deadline": False,
                             "met": False, "utility": 1.0, "gpu_h": 1.0})

    tables = {"c/fifo": table([5.0, 5.0]), "c/drf": table([2.0, 3.0]), "c/srtf": table([1.0, 1.0])}
    assert exp.best_baseline(tables, "c", exp.REFERENCE_BASELINES) == "drf"  # srtf is an oracle: not a reference
    assert exp.best_baseline(tables, "c", ("fifo", "srtf")) == "srtf"
    assert exp.best_baseline(tables, "other", exp.REFERENCE_BASELINES) is None


def test_an_unknown_size_is_an_input_error():
    from dlsched.core.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown size 'load0.5'"):
        exp.grid(FORMS, ("preset", "load0.5"))


@pytest.mark.parametrize("args, says", [
    (["--forms", "itp-raw,nope"], "unknown form 'nope'; known: itp-raw, itp-raw-rigid, itp-raw-elastic"),
    (["--sizes", "load0.5"], "unknown size 'load0.5'"),
])
def test_the_command_refuses_an_unknown_form_or_size_before_running_anything(root, tmp_path, args, says):
    from typer.testing import CliRunner

    from dlsched.cli import app

    res = CliRunner().invoke(app, ["experiment", "robustness", "--traces", str(root), "--out", str(tmp_path / "o"), *args])
    assert res.exit_code == 2, res.output
    assert says in res.stderr and "Traceback" not in res.output
    assert not (tmp_path / "o" / "cells").exists()


def test_kept_reasons_go_to_their_own_claim_only():
    """Two claims of one policy and metric on one cell differ only in their bound: a reason written
    for one must not land on the other (nor on a later run's row whose reference changed)."""
    old = "\n".join([
        "| dual-agent mean JCT (h) <= 1.05x best baseline (drf) | c@x | 1.2 | False | its order |",
        "| dual-agent mean JCT (h) <= 1.5x best baseline (drf) | c@x | 1.2 | True |  |",
    ])
    page = "\n".join([
        "| dual-agent mean JCT (h) <= 1.05x best baseline (optimus) | c@x | 1.1 | False |  |",
        "| dual-agent mean JCT (h) <= 1.5x best baseline (optimus) | c@x | 1.1 | True |  |",
        "| dual-agent mean JCT (h) <= 1.05x best baseline (drf) | c@y | 1.1 | False |  |",
    ])
    out = exp.keep_reasons(page, old).splitlines()
    assert out[0].endswith("| False | its order |")
    assert out[1].endswith("| True |  |") and out[2].endswith("| False |  |")


def test_a_claim_that_now_holds_drops_its_reason():
    old = "| dual-agent mean JCT (h) <= 1.05x best baseline (drf) | c@x | 1.5 | False | runs at requested size |"
    now = "| dual-agent mean JCT (h) <= 1.05x best baseline (drf) | c@x | {} | {} |  |"
    assert exp.keep_reasons(now.format(1.0, True), old).endswith("| True |  |")
    assert exp.keep_reasons(now.format(1.2, False), old).endswith("| False | runs at requested size |")
