"""Write the per-trace ITP presets (src/dlsched/presets/itp-clusterNN.yaml): the `itp` preset's node
shape, as many nodes as give the ITP deadline trace of that cluster an offered load of 0.8.

    python benchmarks/size_itp_presets.py            # (re)write the presets from the traces
    python benchmarks/size_itp_presets.py --check    # exit 1 if a preset differs from what it computes

The counts come from `dlsched.traces.load.size_for_load` (whole nodes, never too few for the
trace's largest job), not by hand: rerun this when the reader or the definition of load changes.
Durations are in the deadline files, so no throughput model is involved.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from dlsched.config import read_yaml_model
from dlsched.paths import traces_dir
from dlsched.presets import PRESET_DIR, load_cluster
from dlsched.presets.schema import PresetSpec
from dlsched.traces import load_trace
from dlsched.traces.load import size_for_load

CLUSTERS = ("01", "02", "03", "04", "05", "09", "10")
TRACE = "elasticflow-itp/elasticflow/cluster{}.csv"
LOAD = 0.8
BASE = "itp"


def preset_text(nn: str, traces: Path) -> str:
    """The YAML of preset itp-clusterNN, sized on the trace under `traces`."""
    jobs = load_trace(traces / TRACE.format(nn), "itp-deadline").jobs
    sizing = size_for_load(jobs, load_cluster(BASE), LOAD)
    c, ol = sizing.cluster, sizing.offered
    group = read_yaml_model(PRESET_DIR / f"{BASE}.yaml", PresetSpec, "cluster file").node_groups[0]
    if c.total_gpus % group.gpus:
        raise SystemExit(f"cluster{nn}: {c.total_gpus} GPUs is not whole {group.gpus:g}-GPU nodes")
    shape = group.model_dump(exclude_defaults=True) | {"count": c.num_nodes}
    fields = ", ".join(f"{k}: {shape[k]:g}" for k in ("count", "gpus", "cpus", "mem", "nodes_per_rack") if k in shape)
    why = f" {sizing.note}." if sizing.note else ""
    source = (
        f"Computed by benchmarks/size_itp_presets.py (dlsched.traces.load.size_for_load, target load {LOAD:g}) on "
        f"elasticflow-itp/elasticflow/cluster{nn}.csv (itp-deadline, {len(jobs):,} jobs): {ol.describe()}.{why} "
        f"Node shape as in the `{BASE}` preset ({group.cpus:g} CPU / {group.mem:g} GiB, {group.nodes_per_rack} nodes "
        "per rack: assumptions; the trace records only GPU counts). Network: dlsched defaults."
    )
    return (
        f"name: itp-cluster{nn}\n"
        f'description: "ITP cluster{nn} deadline trace at offered load {ol.load:.2f}: {c.num_nodes} nodes x '
        f'{group.gpus:g} GPUs = {c.total_gpus} GPUs"\n'
        "source: >-\n"
        f"{textwrap.fill(source, 104, initial_indent='  ', subsequent_indent='  ')}\n"
        "node_groups:\n"
        f"  - {{{fields}}}\n"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the presets instead of writing them")
    ap.add_argument("--traces", type=Path, default=None, help="shared traces folder (default: dlsched's)")
    args = ap.parse_args()
    root = args.traces or traces_dir()
    if root is None:
        raise SystemExit("shared traces not found: pass --traces DIR")
    stale = []
    for nn in CLUSTERS:
        text, path = preset_text(nn, root), PRESET_DIR / f"itp-cluster{nn}.yaml"
        print(text.splitlines()[1])
        if args.check:
            if not path.is_file() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    if stale:
        print(f"differ from what they compute: {', '.join(stale)}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
