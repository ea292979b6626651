"""DL2: the slot builder, the Gymnasium environment, replay, warm-up, the policy and the pipeline."""

from __future__ import annotations

import csv
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dlsched.core import Cluster, JobSpec
from dlsched.core.errors import ConfigError
from dlsched.policies.drf import drf
from dlsched.models.dl2_network import ActorInference, DL2Net
from dlsched.rl.env import SchedulingEnv
from dlsched.models.replay import PrioritizedReplay
from dlsched.models.slot_builder import ROWS, action_dim
from dlsched.rl.warmup import collect, train_supervised
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.parameter_server import ParameterServerModel

SLOT = 600.0


def ps_jobs(n: int, seed: int) -> list[JobSpec]:
    rng = np.random.default_rng(seed)
    return [JobSpec(job_id=f"j{i}", submit_time=float(rng.integers(0, 4)) * SLOT, iterations=float(rng.integers(200, 3000)),
                    num_workers=1, min_workers=1, max_workers=int(rng.integers(1, 6)), arch="ps", model="ps:t",
                    num_ps=1, min_ps=1, max_ps=int(rng.integers(1, 4)), worker_demand=(1.0, 2.0, 4.0),
                    ps_demand=(0.0, 2.0, 4.0), work_known=True, extra={"compute_s": 0.2, "model_size_mb": 50.0})
            for i in range(n)]


def make_env(n: int = 8, window: int = 4, nodes: int = 3) -> SchedulingEnv:
    cluster = Cluster.homogeneous("t", nodes=nodes, gpus=4, cpus=16, mem=64)
    return SchedulingEnv(lambda s: ps_jobs(n, s), cluster, ParameterServerModel(), window=window,
                         slot_seconds=SLOT, config=SimConfig(restart_overhead=0))


def random_episode(env: SchedulingEnv, seed: int, stop_prob: float = 0.1) -> tuple[float, int]:
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        assert obs.shape == (ROWS, env.window) and info["action_mask"][-1]
        valid = np.flatnonzero(info["action_mask"])
        a = int(valid[-1]) if rng.random() < stop_prob else int(rng.choice(valid))
        obs, r, term, trunc, info = env.step(a)
        total += r
        steps += 1
        if term or trunc:
            return total, steps


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_random_valid_actions_always_give_valid_plans_and_the_rewards_sum_to_the_jobs_finished(seed):
    env = make_env()
    total, _ = random_episode(env, seed)
    result = env.result  # the engine validated every plan (capacity, gang, caps) on the way
    assert (result.jobs.status == "done").all()
    assert total == pytest.approx(len(result.jobs))  # each job's slot fractions add up to 1


def test_invalid_action_is_an_error_not_a_silent_no_op():
    env = make_env()
    _, info = env.reset(seed=1)
    invalid = np.flatnonzero(~info["action_mask"])
    assert len(invalid) > 0
    with pytest.raises(ValueError, match="not valid"):
        env.step(int(invalid[0]))


def test_same_seed_same_episode():
    a = make_env()
    b = make_env()
    assert random_episode(a, 7) == random_episode(b, 7)
    assert a.result.summary["mean_jct"] == b.result.summary["mean_jct"]


def test_every_job_gets_its_minimum_gang_before_the_agent_acts():
    env = make_env(n=3, window=4, nodes=3)
    env.reset(seed=0)
    b = env.builder
    for job in b.jobs:
        assert (b.workers(job), b.ps(job)) == (job.spec.min_workers, job.spec.min_ps)


def test_replay_samples_by_priority_and_clips_errors():
    rb = PrioritizedReplay(4, (2,), 3, seed=0)
    for r in (0.0, 0.0, 0.0, 10.0):
        rb.add(np.zeros(2), np.ones(3, bool), 0, r)
    idx, *_ , w = rb.sample(2000)
    assert (idx == 3).mean() > 0.5  # the surprising sample is drawn most
    assert w.max() == pytest.approx(1.0)
    rb.update(np.array([3]), np.array([100.0]))
    assert rb.priority[3] == pytest.approx((1.0 + rb.eps) ** rb.alpha)


def test_entropy_bonus_is_dl2s_mean_over_states_and_actions():
    # DL2's network.py: entropy = reduce_mean(p * log p) over the (batch, actions) matrix. A state
    # uniform over k valid actions of A has entropy log k, so the term is log k / A per state.
    from dlsched.models.dl2_update import entropy_bonus

    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    logits = torch.zeros(2, 4).masked_fill(~mask, -1e9)
    logp = torch.log_softmax(logits, 1)
    got = float(entropy_bonus(logp.exp(), logp, mask))
    assert got == pytest.approx((math.log(2) / 4 + math.log(4) / 4) / 2, rel=1e-6)


def test_credit_modes_on_a_hand_computed_slot():
    # a slot of three actions: a worker for job a, a PS for job b, then "end the slot"; a did 0.3
    # of its work during the slot, b 0.1 and c (untouched) 0.2: the slot's reward is 0.6
    from dlsched.rl.actor_critic import credit

    obs, mask = np.zeros(1), np.ones(1, bool)
    slot = [(obs, mask, 0, "a"), (obs, mask, 4, "b"), (obs, mask, 9, None)]
    per_job = {"a": 0.3, "b": 0.1, "c": 0.2}
    assert credit(slot, 0.6, per_job, "slot") == [0.6, 0.6, 0.6]
    assert credit(slot, 0.6, per_job, "job") == [0.3, 0.1, 0.6]
    assert credit(slot, 0.6, per_job, "job-mean") == pytest.approx([0.3, 0.1, 0.2])
    with pytest.raises(ValueError, match="reward mode"):
        credit(slot, 0.6, per_job, "jobs")


def test_stay_cap_saturates_state_row_1_and_travels_with_the_model(tmp_path):
    from dlsched.models.model_io import load_model, save_model

    torch.manual_seed(0)
    net = DL2Net(4, stay_cap=0.5).eval()
    s = torch.rand(3, ROWS, 4)
    mask = torch.ones(3, action_dim(4), dtype=torch.bool)
    longer = s.clone()
    longer[:, 1] = s[:, 1] + 7.0  # every job in the system 70 slots longer: all beyond the cap
    at_cap = s.clone()
    at_cap[:, 1] = 0.5
    capped = s.clone()
    capped[:, 1] = s[:, 1].clamp(max=0.5)
    with torch.no_grad():
        assert torch.equal(net.logits(longer, mask), net.logits(at_cap, mask))
        assert torch.equal(net.value(longer), net.value(at_cap))
        assert torch.equal(net.logits(s, mask), net.logits(capped, mask))
        plain = DL2Net(4).eval()
        assert not torch.allclose(plain.logits(s, mask), plain.logits(longer, mask))
    save_model(net, tmp_path / "m.pt")
    again, _ = load_model(tmp_path / "m.pt")
    assert again.stay_cap == 0.5 and again.config()["stay_cap"] == 0.5
    save_model(DL2Net(4), tmp_path / "plain.pt")  # a model without the key: DL2's state, as before
    assert load_model(tmp_path / "plain.pt")[0].stay_cap is None and "stay_cap" not in DL2Net(4).config()


@pytest.mark.parametrize("stay_cap", [None, 1.0])
def test_numpy_inference_gives_the_networks_logits_and_the_same_draws(stay_cap):
    """`ActorInference` (the slot loop's NumPy forward pass) against the network itself through
    PyTorch: logits to float32 rounding, and the same action drawn by a same-seeded generator as
    `rng.choice` over the PyTorch softmax, on states from trained batch-norm statistics."""
    torch.manual_seed(3)
    net = DL2Net(window=20, stay_cap=stay_cap)
    net.train()
    with torch.no_grad():
        net.actor(net._inputs(torch.rand(64, ROWS, 20) * 3))  # running statistics away from 0/1
    net.eval()
    actor = ActorInference(net)
    gen, r_torch, r_numpy = np.random.default_rng(0), np.random.default_rng(5), np.random.default_rng(5)
    for _ in range(500):
        state = (gen.random((ROWS, 20)) * gen.random() * 5).astype(np.float32)
        mask = gen.random(action_dim(20)) < gen.random()
        mask[-1] = True
        with torch.no_grad():
            logits = net.logits(torch.from_numpy(state)[None], torch.from_numpy(mask)[None])[0]
        np.testing.assert_allclose(actor.logits(state, mask)[mask], logits.numpy()[mask], rtol=1e-5, atol=1e-5)
        p = torch.softmax(logits, 0).numpy().astype(float)
        assert actor.choose(state, mask, r_numpy) == r_torch.choice(len(p), p=p / p.sum())
        assert actor.choose(state, mask, r_numpy, greedy=True) == int(torch.argmax(logits))
    assert r_numpy.random() == r_torch.random()  # one uniform per draw on both sides


def test_warmup_imitates_the_teacher():
    env = make_env(n=10, window=6)
    data = collect(env, drf, [1, 2, 3])
    assert len(data) > 50 and data.masks[np.arange(len(data)), data.actions].all()
    torch.manual_seed(0)
    net = DL2Net(6)
    losses = train_supervised(net, data, epochs=40, lr=0.005, batch=64)
    assert losses[-1] < 0.5 * losses[0]
    with torch.no_grad():
        acc = (net.logits(torch.from_numpy(data.states), torch.from_numpy(data.masks)).argmax(1).numpy() == data.actions).mean()
    majority = np.bincount(data.actions).max() / len(data)
    assert acc > max(0.7, majority + 0.1)  # learned the teacher, not just its most common action


def test_dl2_policy_runs_in_the_simulator_and_every_job_finishes():
    from dlsched.policies.dl2 import DL2Policy

    torch.manual_seed(0)
    net = DL2Net(4).eval()
    cluster = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    r = simulate(ps_jobs(8, 3), cluster, DL2Policy(net, slot_seconds=SLOT), ParameterServerModel(), SimConfig(restart_overhead=0))
    assert (r.jobs.status == "done").all() and r.summary["policy_calls"] > 0


def test_dl2_without_a_model_says_how_to_get_one(tmp_path):
    from dlsched.policies.dl2 import dl2

    with pytest.raises(ConfigError, match="dlsched train dl2"):
        dl2(model=str(tmp_path / "none.pt"))
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="not a DL2 model"):
        dl2(model=str(bad))


def test_action_dim_matches_dl2():
    assert action_dim(20) == 61


def test_training_pipeline_writes_a_model_and_resumes_without_redoing_work(tmp_path):
    from dlsched.paths import traces_dir

    if traces_dir() is None:
        pytest.skip("needs ../shared/traces (DL2 workload constants and speeds)")
    from dlsched.policies.dl2 import DL2Policy, dl2
    from dlsched.policies.registry import make_policy
    from dlsched.rl.train_dl2 import DL2TrainConfig, train_dl2

    cfg = DL2TrainConfig(num_jobs=6, warmup_traces=1, warmup_epochs=2, rl_episodes=2, validate_every=1,
                         validation_traces=1, batch=16, replay=64, window=4)
    roles = dict(teacher=lambda: make_policy(cfg.teacher), student=DL2Policy, traces=traces_dir())
    phases: list[str] = []
    meta = train_dl2(cfg, tmp_path, **roles, progress=lambda phase, done, total, note: phases.append(phase))
    assert {"warm-up: training", "RL: actor-critic"} <= set(phases)
    assert (tmp_path / "model.pt").exists() and (tmp_path / "validation.csv").read_text().count("\n") == 4  # header, before RL, 2 episodes
    assert np.isfinite(meta["best_validation_jct_s"])
    phases.clear()
    train_dl2(cfg, tmp_path, **roles, resume=True, progress=lambda phase, done, total, note: phases.append(phase))
    assert not phases  # everything was done: nothing re-run
    assert dl2(model=str(tmp_path / "model.pt")).window == 4
    with pytest.raises(ConfigError, match="another config"):
        train_dl2(cfg.model_copy(update={"rl_lr": 1e-3}), tmp_path, **roles, resume=True)
    with pytest.raises(ConfigError, match="trained 2 RL episodes already"):
        train_dl2(cfg.model_copy(update={"rl_episodes": 1}), tmp_path, **roles, resume=True)
    # a larger budget extends the finished training from its last network: only the new episodes run
    last = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["state"]["last_net"]
    phases.clear()
    meta = train_dl2(cfg.model_copy(update={"rl_episodes": 3}), tmp_path, **roles, resume=True,
                     progress=lambda phase, done, total, note: phases.append((phase, done)))
    assert [p for p in phases if p[0].startswith("RL")] == [("RL: actor-critic", 3)]
    assert [r["episode"] for r in csv.DictReader(open(tmp_path / "validation.csv"))] == ["0", "1", "2", "3"]
    assert meta["config"]["rl_episodes"] == 3
    after = torch.load(tmp_path / "checkpoint.pt", weights_only=False)["state"]["last_net"]
    assert any(not torch.equal(last[k], after[k]) for k in last if last[k].is_floating_point())


def test_online_fine_tuning_learns_from_measured_progress_and_changes_the_network():
    from dlsched.policies.dl2 import DL2Policy
    from dlsched.models.dl2_update import RLConfig

    torch.manual_seed(0)
    net = DL2Net(4).eval()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    policy = DL2Policy(net, slot_seconds=SLOT, online=True, rl=RLConfig(batch=8, replay=64))
    cluster = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    r = simulate(ps_jobs(8, 3), cluster, policy, ParameterServerModel(), SimConfig(restart_overhead=0))
    assert (r.jobs.status == "done").all()
    assert policy.updates > 0 and len(policy.replay) > 0
    assert 0 < policy.replay.rewards[: len(policy.replay)].max() <= 8.0  # progress fractions of ≤ 8 jobs
    assert any(not torch.equal(before[k], v) for k, v in net.state_dict().items())
    frozen = DL2Policy(DL2Net(4).eval(), slot_seconds=SLOT)
    simulate(ps_jobs(8, 3), cluster, frozen, ParameterServerModel(), SimConfig(restart_overhead=0))
    assert frozen.updates == 0  # off by default


def test_the_shipped_model_works_on_a_fresh_install_through_the_registry():
    from dlsched.policies.dl2 import SHIPPED_MODEL
    from dlsched.policies.registry import make_policy

    assert SHIPPED_MODEL.exists() and SHIPPED_MODEL.stat().st_size < 1_000_000  # small enough to ship
    policy = make_policy("dl2")
    cluster = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    r = simulate(ps_jobs(6, 5), cluster, policy, ParameterServerModel(), SimConfig(restart_overhead=0))
    assert (r.jobs.status == "done").all()
