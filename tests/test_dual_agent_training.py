"""`dlsched train dual-agent` and `dlsched experiment dual-agent` end to end on tiny budgets
(they need Gavel's matrix and jobs from the shared traces), and `--variability` on any run."""

from __future__ import annotations

import math

import pytest
import torch

from dlsched.core.errors import ConfigError
from dlsched.paths import traces_dir
from dlsched.policies.dual_agent import load, trained
from dlsched.rl.dual_agent_config import DualAgentTrainConfig

needs_traces = pytest.mark.skipif(traces_dir() is None, reason="needs the shared traces (Gavel's matrix and jobs)")

TINY = dict(jobs=12, warmup_episodes=2, warmup_epochs=2, episodes_per_iteration=1, ppo_epochs=1,
            validate_every=1, validation_episodes=1, hidden=8)


@needs_traces
def test_training_writes_a_model_that_schedules_and_resumes_to_train_further(tmp_path):
    from dlsched.rl.train_dual_agent import train

    seen = []
    cfg = DualAgentTrainConfig(**TINY, rl_iterations=1)
    meta = train(cfg, tmp_path / "full", progress=lambda *a: seen.append(a[0]))
    assert meta["variant"] == "full" and meta["iterations"] == 1 and meta["training_seconds"] > 0
    assert {"warm-up episodes (teachers)", "warm-up (imitate teachers)", "MAPPO iterations"} <= set(seen)
    net, saved = load(tmp_path / "full" / "model.pt")
    assert saved["best_validation"] <= saved["warmup_validation"]  # the best network is kept
    assert math.isfinite(saved["best_validation"])
    meta2 = train(DualAgentTrainConfig(**TINY, rl_iterations=2), tmp_path / "full", resume=True)
    assert meta2["iterations"] == 2 and meta2["training_seconds"] >= meta["training_seconds"]
    with pytest.raises(ConfigError, match="another config"):
        train(DualAgentTrainConfig(**{**TINY, "jobs": 13}, rl_iterations=2), tmp_path / "full", resume=True)
    assert trained("full", str(tmp_path / "full" / "model.pt")).name == "dual-agent"


@needs_traces
def test_validation_is_relative_to_the_teachers_so_an_untrained_network_scores_one():
    # the residual actors start at zero: an untrained network decides as its teachers do
    from dlsched.rl.train_dual_agent import new_net, validate, validation_scores

    cfg = DualAgentTrainConfig(**{**TINY, "validation_episodes": 2})
    net = new_net(cfg)
    teachers = validation_scores(cfg, net, "teacher")
    assert len(teachers) == 2 and teachers[0] != teachers[1]
    assert validate(cfg, net, teachers) == pytest.approx(1.0)
    assert validate(cfg, net, [2 * t for t in teachers]) == pytest.approx(0.5)


@needs_traces
def test_the_experiment_pairs_policies_by_seed_and_checks_the_claims(tmp_path):
    from dlsched.experiments.dual_agent import run_experiment
    from dlsched.policies.dual_agent import save
    from dlsched.models.dual_agent_net import DualAgentNet

    torch.manual_seed(0)
    save(DualAgentNet(hidden=8), tmp_path / "models" / "full" / "model.pt", {"variant": "full"})
    res = run_experiment(tmp_path / "out", scenarios=("fluctuating",), seeds=2, jobs=12,
                         policies=("gavel-style", "dual-agent-teachers", "dual-agent"), models=str(tmp_path / "models"))
    runs = res["runs"]
    assert len(runs) == 6 and set(runs["seed"]) == {0, 1}
    assert (runs["finished"] == 12).all() and (runs["total_fee"] > 0).all()
    r = res["ratios"].set_index("policy")
    want = runs[runs.policy == "gavel-style"].set_index("seed")["mean_jct_h"] / \
        runs[runs.policy == "dual-agent"].set_index("seed")["mean_jct_h"]
    assert r.loc["gavel-style", "mean_jct_h"] == pytest.approx(want.mean())
    text = (tmp_path / "out" / "RESULTS.md").read_text()
    assert "gavel-style" in text and "not measured" in text  # claims whose policies did not run say so
    assert all(v in ("HOLDS", "POINT ESTIMATE ONLY (95% interval includes 1)", "DOES NOT HOLD", "not measured")
               for _, v, _ in res["claims"])


def test_variability_gives_speed_factors_events_and_prices_on_any_run():
    from dlsched.experiment import prepare_run
    from dlsched.run_config import RunConfig, with_flags

    cfg = with_flags(RunConfig(), variability="fluctuating", seed=3)
    prepared = prepare_run(cfg, ["fifo"], None)
    assert prepared.cluster.price is not None and (prepared.cluster.price > 0).all()
    assert prepared.node_events and prepared.variability_note
    assert abs(prepared.cluster.speed - 1).max() > 0.01
    again = prepare_run(cfg, ["fifo"], None)
    assert (again.cluster.speed == prepared.cluster.speed).all()  # drawn by the seed
    with pytest.raises(ConfigError, match="--variability"):
        with_flags(RunConfig(), variability="wobbly")


def test_fluctuating_speeds_on_a_huge_cluster_for_months_are_refused_with_a_way_out():
    from dlsched.hetero.scenarios import vary
    from dlsched.presets import load_cluster

    with pytest.raises(ConfigError, match="million events: use --limit"):
        vary(load_cluster("alibaba2023"), "fluctuating", 0, 150 * 86400.0)
    cluster, events = vary(load_cluster("alibaba2023"), "static", 0, 150 * 86400.0)
    assert not events and cluster.price is not None
