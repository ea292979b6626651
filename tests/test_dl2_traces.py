"""DL2 on trace jobs (issue 14): all-reduce placement in the slot builder, the model chosen for the
workload's kind of job, and the ITP training windows."""

from __future__ import annotations

import numpy as np
import pytest

from dlsched.core import Cluster, JobSpec
from dlsched.core.snapshot import JobState
from dlsched.framework.state import ClusterState
from dlsched.models.slot_builder import PS, WORKER, SlotBuilder
from dlsched.sim.config import SimConfig
from dlsched.sim.engine import simulate
from dlsched.throughput.parameter_server import ParameterServerModel
from tests.conftest import rigid_job

SLOT = 600.0


def _builder(specs: list[JobSpec], cluster: Cluster,
             running: dict[str, dict[int, tuple[int, int]]] | None = None) -> SlotBuilder:
    """A slot builder on a snapshot at t = 0 in which every job waits; with `running` (job id ->
    {node: (workers, PSs)}) those jobs run there and the builder is between slots."""
    from dlsched.core.allocation import Allocation
    from dlsched.core.snapshot import Clock

    clock = Clock(0.0)
    state = ClusterState(cluster, clock, 0.0, 0.0)
    for i, spec in enumerate(specs):
        job = JobState(spec=spec, index=i, clock=clock)
        job.rank = i
        state.arrive(job, 0.0)
        if running and spec.job_id in running:
            state.start(job, Allocation.of(running[spec.job_id]), 0.0)
    events = ("completion",) if running else ("arrival",)
    return SlotBuilder(state.snapshot(0.0, events, 0.0), window=4, slot_seconds=SLOT, between_slots=bool(running))


def test_an_allreduce_jobs_workers_go_to_its_own_node_while_they_fit():
    # Least-loaded placement alone puts each new worker on an emptier node, so a ring of 4 would
    # span 4 nodes and pay an inter-node all-reduce its packed measured curve never paid.
    cluster = Cluster.homogeneous("t", nodes=4, gpus=4, cpus=32, mem=256)
    job = JobSpec(job_id="ring", submit_time=0.0, iterations=100.0, num_workers=1, min_workers=1, max_workers=4)
    b = _builder([job], cluster)
    for _ in range(3):
        b.apply(b.action_for(b.jobs[0], WORKER))
    assert b.workers(b.jobs[0]) == 4
    assert [n for n, (w, _) in b.counts["ring"].items() if w] == [0]  # one node, not four


def test_a_ps_jobs_tasks_keep_dl2s_least_loaded_placement():
    cluster = Cluster.homogeneous("t", nodes=4, gpus=4, cpus=32, mem=256)
    job = JobSpec(job_id="ps", submit_time=0.0, iterations=100.0, num_workers=1, min_workers=1, max_workers=4,
                  arch="ps", num_ps=1, min_ps=1, max_ps=2)
    b = _builder([job], cluster)
    b.apply(b.action_for(b.jobs[0], WORKER))
    b.apply(b.action_for(b.jobs[0], PS))
    assert len([n for n, (w, p) in b.counts["ps"].items() if w or p]) > 1  # spread, as DL2 places


def _ps_jobs(n: int) -> list[JobSpec]:
    return [JobSpec(job_id=f"p{i}", submit_time=0.0, iterations=500.0, num_workers=1, min_workers=1, max_workers=3,
                    arch="ps", model="ps:t", num_ps=1, min_ps=1, max_ps=2, worker_demand=(1.0, 2.0, 4.0),
                    ps_demand=(0.0, 2.0, 4.0), work_known=True, extra={"compute_s": 0.2, "model_size_mb": 50.0})
            for i in range(n)]


@pytest.mark.parametrize("kind", ["ps", "allreduce"])
def test_dl2_picks_the_shipped_model_trained_on_the_workloads_kind_of_job_and_says_so(kind):
    from dlsched.policies.dl2 import SHIPPED_MODELS
    from dlsched.policies.registry import make_policy
    from dlsched.models.model_io import load_model
    from dlsched.throughput.duration_only import DurationOnly

    cluster = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    if kind == "ps":
        jobs, tp = _ps_jobs(4), ParameterServerModel()
    else:
        jobs, tp = [rigid_job(i, 0.0, 900.0, gpus=2, min_workers=1, max_workers=4) for i in range(4)], DurationOnly()
    policy = make_policy("dl2")
    r = simulate(jobs, cluster, policy, tp, SimConfig(restart_overhead=0))
    assert (r.jobs.status == "done").all()
    path, _ = SHIPPED_MODELS[kind]
    expected, _ = load_model(path)
    assert policy.window == expected.window
    assert all(np.array_equal(a.detach().numpy(), b.detach().numpy())
               for a, b in zip(policy.net.state_dict().values(), expected.state_dict().values()))
    assert len(policy.notes) == 1 and kind in policy.notes[0] and path.name in policy.notes[0]


def test_the_two_shipped_models_differ_and_are_small_enough_to_ship():
    from dlsched.policies.dl2 import SHIPPED_MODELS
    from dlsched.models.model_io import load_model

    (ps, _), (ring, _) = SHIPPED_MODELS["ps"], SHIPPED_MODELS["allreduce"]
    assert ps != ring and ps.stat().st_size < 1_000_000 and ring.stat().st_size < 2_000_000  # J = 60: 330k weights
    _, meta = load_model(ring)
    assert meta["config"]["workloads"] == "itp"  # trained on trace windows, as the choice promises


def test_itp_training_windows_are_reproducible_and_come_from_the_split_s_own_files():
    from dlsched.paths import traces_dir
    from dlsched.rl.train_dl2 import DL2TrainConfig

    root = traces_dir()
    if root is None or not (root / "elasticflow-itp" / "elasticflow" / "cluster02.csv").exists():
        pytest.skip("needs ../shared/traces (the ITP deadline traces)")
    cfg = DL2TrainConfig(workloads="itp", num_jobs=20, itp_train=("cluster05.csv",), itp_validation=("cluster02.csv",))
    train, val = cfg.workload_source("train", root), cfg.workload_source("validation", root)
    a, b = train(7), train(7)
    assert [j.job_id for j in a] == [j.job_id for j in b] and len(a) == 20
    assert all(j.model.startswith("elasticflow:") for j in a)  # on measured curves
    ids = {j.job_id for j in val(7)}
    assert not ids & {j.job_id for s in range(5) for j in train(s)}


def test_a_given_model_used_on_another_kind_of_job_says_it_is_outside_its_training_distribution():
    from dlsched.policies.dl2 import SHIPPED_MODEL, dl2
    from dlsched.throughput.duration_only import DurationOnly

    cluster = Cluster.homogeneous("t", nodes=3, gpus=4, cpus=16, mem=64)
    ring = [rigid_job(i, 0.0, 900.0, gpus=2, min_workers=1, max_workers=4) for i in range(3)]
    policy = dl2(model=str(SHIPPED_MODEL))
    simulate(ring, cluster, policy, DurationOnly(), SimConfig(restart_overhead=0))
    assert len(policy.notes) == 1 and "outside its training distribution" in policy.notes[0]
    simulate(_ps_jobs(3), cluster, policy, ParameterServerModel(), SimConfig(restart_overhead=0))
    assert policy.notes == []  # its own kind of job: nothing to say


# ---------------------------------------------------------------------- rigid trace jobs (issue 29)
def test_waiting_rigid_gangs_start_smallest_first_as_dl2s_teacher_drf_orders_them():
    # On a raw trace every job is rigid: the network can grow none of them, so the order of the
    # minimum gangs decides everything. Arrival order let one 4-GPU job hold back three 1-GPU jobs.
    cluster = Cluster.homogeneous("t", nodes=1, gpus=4, cpus=32, mem=256)
    jobs = [rigid_job(0, 0.0, 900.0, gpus=4)] + [rigid_job(i, 0.0, 900.0, gpus=1) for i in range(1, 4)]
    plan = _builder(jobs, cluster).plan()
    assert sorted(plan.allocations) == ["j1", "j2", "j3"]


def _dl2_run(jobs: list[JobSpec], cluster: Cluster):
    from dlsched.models.dl2_network import DL2Net
    from dlsched.policies.dl2 import DL2Policy
    from dlsched.throughput.duration_only import DurationOnly

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    return simulate(jobs, cluster, DL2Policy(DL2Net(4), slot_seconds=SLOT), DurationOnly(), SimConfig(restart_overhead=10.0))


def test_dl2_restarts_a_rigid_job_only_to_preempt_it_never_to_move_it():
    # Rebuilding every slot from nothing, in arrival order with least-loaded placement, moved
    # running rigid jobs to other nodes (5,020 restarts on an ITP raw trace, 316 of them
    # preemptions). Now a rigid job that keeps running keeps its nodes; it stops only when smaller
    # jobs ahead of it in DRF's order took its room, as DRF itself would stop it.
    rng = np.random.default_rng(4)
    jobs = [rigid_job(i, float(rng.integers(0, 12)) * 300.0, float(rng.integers(300, 4000)),
                      gpus=int(rng.choice([1, 2, 4, 8]))) for i in range(40)]
    r = _dl2_run(jobs, Cluster.homogeneous("t", nodes=3, gpus=4, cpus=32, mem=256))
    assert (r.jobs.status == "done").all()
    assert (r.jobs.restarts == r.jobs.preemptions).all()


def test_dl2_starts_an_arrival_between_slots_when_gpus_are_free():
    jobs = [rigid_job(0, 0.0, 5000.0, gpus=2), rigid_job(1, 100.0, 900.0, gpus=2)]  # slots at 0, 600, ...
    r = _dl2_run(jobs, Cluster.homogeneous("t", nodes=1, gpus=4, cpus=32, mem=256))
    starts = dict(zip(r.jobs.job_id, r.jobs.start))
    assert starts["j1"] == pytest.approx(100.0)  # not at the next slot (600 s)


def test_gpus_left_free_go_to_the_jobs_that_can_grow_smallest_share_first():
    # Between slots DL2 only started waiting jobs, so a GPU a completion freed stayed idle until the
    # next slot while running elastic jobs could use it (dl2 1.25x DRF on ITP cluster03 read elastic).
    cluster = Cluster.homogeneous("t", nodes=2, gpus=4, cpus=32, mem=256)
    big = JobSpec(job_id="big", submit_time=0.0, iterations=1e4, num_workers=3, min_workers=1, max_workers=8)
    small = JobSpec(job_id="small", submit_time=0.0, iterations=1e4, num_workers=1, min_workers=1, max_workers=2)
    b = _builder([big, small], cluster, {"big": {0: (3, 0)}, "small": {1: (1, 0)}})
    assert b.plan().allocations == {}  # without the fill: both keep running as they are
    b.fill_free()
    # small (the smaller share) to its maximum; big to what its own node has: the fill never
    # spreads a job onto another node (a ring over more nodes is slower on measured curves)
    assert (b.workers(big), b.workers(small)) == (4, 2)
    assert b.free[1, 0] == 2
    plan = b.plan()
    assert plan.keep_running and set(plan.allocations) == {"big", "small"}
    assert plan.allocations["big"].nodes == (0,) and plan.allocations["big"].num_workers == 4
    assert plan.allocations["small"].num_workers == 2


def test_the_fill_leaves_rigid_and_ps_jobs_as_they_are():
    cluster = Cluster.homogeneous("t", nodes=1, gpus=8, cpus=32, mem=256)
    rigid = rigid_job(0, 0.0, 900.0, gpus=2)
    ps = JobSpec(job_id="ps", submit_time=0.0, iterations=1e4, num_workers=1, num_ps=1, min_workers=1, max_workers=4,
                 min_ps=1, max_ps=4, arch="ps")
    b = _builder([rigid, ps], cluster, {"j0": {0: (2, 0)}, "ps": {0: (1, 1)}})
    b.fill_free()
    assert b.plan().allocations == {}


def test_dl2_without_the_fill_leaves_a_freed_gpu_idle_until_the_next_slot():
    from dlsched.models.dl2_network import DL2Net
    from dlsched.policies.dl2 import DL2Policy
    from dlsched.throughput.duration_only import DurationOnly

    torch = pytest.importorskip("torch")
    cluster = Cluster.homogeneous("t", nodes=1, gpus=4, cpus=32, mem=256)
    jobs = [rigid_job(0, 0.0, 300.0, gpus=2),
            JobSpec(job_id="e", submit_time=0.0, iterations=4000.0, duration=4000.0, num_workers=2, min_workers=2,
                    max_workers=4, arch="allreduce")]
    out = {}
    for fill in (True, False):
        torch.manual_seed(0)
        r = simulate(jobs, cluster, DL2Policy(DL2Net(4), slot_seconds=SLOT, fill=fill), DurationOnly(),
                     SimConfig(restart_overhead=10.0))
        out[fill] = r.jobs.set_index("job_id").end["e"]
    assert out[True] < out[False]  # j0 ends at 300 s: with the fill, e grows to 4 GPUs then, not at 600 s
