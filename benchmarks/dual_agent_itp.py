"""Where the Dual-Agent-style policy and the speed-aware placement stand on the embedded ITP run.

The run of the README's quick start (`dlsched simulate`: the ITP cluster04 slice on `itp-small`,
a homogeneous A100 cluster, ElasticFlow's measured scaling curves, no prices), outside the
Dual-Agent-style policy's training distribution (Gavel-matrix jobs on K80/P100/V100). It splits
the gap to Tiresias into ordering and placement: Tiresias (its own `Pack` placement), the same
ordering with the speed-aware placement (gavel-style) with and without consolidation patience
(`SpeedAwarePlacement.min_efficiency`), the untrained teachers, the full policy and the two
single-agent variants. Mean JCT and GPU-hours per policy, one seed (the default run's).

    python benchmarks/dual_agent_itp.py
"""

from __future__ import annotations

from dlsched.experiment import prepare_run
from dlsched.policies.dual_agent import build, load, model_path
from dlsched.policies.registry import make_policy
from dlsched.run_config import RunConfig
from dlsched.sim.engine import simulate


def main() -> None:
    cfg = RunConfig()
    run = prepare_run(cfg, ["tiresias"], None)
    net, _ = load(model_path("full"))
    policies = {
        "tiresias (Pack)": make_policy("tiresias"),
        "gavel-style, no patience": make_policy("gavel-style", min_efficiency=0.0),
        "gavel-style": make_policy("gavel-style"),
        "pal-style": make_policy("pal-style"),
        "dual-agent-teachers": build("full", net, "teacher"),
        "dual-agent": make_policy("dual-agent"),
        "placement-agent-only": make_policy("dual-agent", variant="placement-only"),
        "ordering-agent-only": make_policy("dual-agent", variant="ordering-only"),
    }
    print(f"{run.workload.name} on {run.cluster.name}, throughput model {run.throughput.name}")
    print(f"{'policy':28s} {'mean JCT h':>10s} {'GPU-h':>8s} {'mean nodes':>10s} {'preemptions':>11s}")
    for name, policy in policies.items():
        res = simulate(run.workload.jobs, run.cluster, policy, run.throughput, cfg.sim)
        s = res.summary
        print(f"{name:28s} {s['mean_jct'] / 3600:10.3f} {res.jobs.gpu_seconds.sum() / 3600:8.0f} "
              f"{s['mean_nodes_spanned']:10.3f} {int(s['preemptions']):11d}", flush=True)


if __name__ == "__main__":
    main()
