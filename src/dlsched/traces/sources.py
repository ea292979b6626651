"""Where every trace and measured table dlsched reads comes from, and how to point dlsched at it.

Why: a clone holds only the embedded ITP slice and ElasticFlow's curves (`src/dlsched/data/`); every
other trace is read in place from the traces root (`--traces DIR`, `$DLSCHED_TRACES`, or
`../shared/traces` beside the checkout: `dlsched.paths`). A newcomer needs, for each one, the public
repository it was copied from, its licence (some have none: they cannot be shipped), the folder
under the traces root where dlsched looks for it, and a command that uses it. This list is that one
place: `dlsched trace sources` prints it and docs/TRACES.md explains it (a test keeps the two
naming the same entries, and another checks every trace format and measured throughput model has
an entry).

The facts come from each shared folder's README (`<traces root>/<folder>/README.md`, which names its
source commit and licence) and the readers' docstrings. Where a README does not state a licence,
`licence` says "not stated"; nothing here is guessed.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from dlsched.core.errors import ConfigError
from dlsched.throughput import trace_files

#: The two kinds of entry, in the order they are listed, with their headings.
JOBS = "job trace"
MEASURED = "measured throughput"
_HEADINGS = {JOBS: "Job traces", MEASURED: "Measured throughput data"}
SHIPPED = "shipped in the package"  # the `folder` of data that needs no traces root


@dataclass(frozen=True)
class TraceSource:
    """One trace or measured table: what it is, where its public copy lives, and how dlsched reads it.

    `feeds`: the `dlsched trace formats` name(s) a job trace is read as, or the throughput model(s)
    (`jobs.csv`'s `throughput_model`) measured data serves. `folder`: where dlsched looks under the
    traces root; None for data shipped in the package (`shipped` says where), which needs no root.
    `example`: one file or folder under the root that loads as a trace (None for measured tables),
    so a test can check the entry against a real traces root. `command` names the root
    `$DLSCHED_TRACES` (export it, or give the same folder as `--traces DIR`).
    """

    name: str
    kind: str
    what: str
    feeds: tuple[str, ...]
    repository: str
    path: str
    licence: str
    paper: str
    folder: str | None
    example: str | None
    command: str
    note: str = ""
    shipped: str = ""

    def present(self, root: Path | None) -> bool | None:
        """Whether the traces root `root` holds this entry (True for shipped data; None: no root)."""
        if self.folder is None:
            return True
        if root is None:
            return None
        return (Path(root) / self.folder).exists()


_ITP_REPO = "https://github.com/microsoft/elasticflow-traces"
_ITP_PAPER = "Gu et al., \"ElasticFlow: An Elastic Serverless Training Platform for Distributed Deep Learning\", ASPLOS 2023"
_ADAPTDL = "https://github.com/petuum/adaptdl"
_POLLUX_PAPER = "Qiao et al., \"Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning\", OSDI 2021"
_GAVEL = "https://github.com/stanford-futuredata/gavel"
_GAVEL_PAPER = ("Narayanan et al., \"Heterogeneity-Aware Cluster Scheduling Policies for Deep Learning Workloads\", "
                "OSDI 2020")
_DL2_PAPER = ("Peng et al., \"DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters\", IEEE TPDS 2021 "
              "(arXiv 1909.06040)")
_DL2_LICENCE = ("none (neither DL2 repository, pengyanghua/DL2 or yxd886/scheduler, has a licence: all rights reserved "
                "by the authors; read for research reproduction only, never shipped or redistributed)")
_R = "$DLSCHED_TRACES"  # how the commands below name the traces root

SOURCES: tuple[TraceSource, ...] = (
    # ------------------------------------------------------------------ job traces
    TraceSource(
        name="embedded-itp",
        kind=JOBS,
        what="300 consecutive jobs (rows 201-500) of ITP cluster04 in its deadline form: the default workload",
        feeds=("itp-deadline",),
        repository=_ITP_REPO,
        path="data/elasticflow-traces.tar.gz (commit 277ed24d): elasticflow/cluster04.csv, rows 201-500",
        licence="MIT (the licence text ships beside it: src/dlsched/data/LICENSE-ITP)",
        paper=_ITP_PAPER,
        folder=None,
        example=None,
        command="dlsched simulate",
        shipped="src/dlsched/data/itp_cluster04_deadline_slice.csv",
    ),
    TraceSource(
        name="itp-deadline",
        kind=JOBS,
        what=("Microsoft ITP 2021 jobs (10 clusters, 69,351 jobs; the shared copy holds 7) with ElasticFlow's "
              "generated model, batch size and deadline columns, plus the 195-job testbed trace"),
        feeds=("itp-deadline",),
        repository=_ITP_REPO,
        path="data/elasticflow-traces.tar.gz (commit 277ed24d), unpacked: elasticflow/clusterNN.csv, 195job.csv",
        licence="MIT",
        paper=_ITP_PAPER,
        folder="elasticflow-itp/elasticflow",
        example="elasticflow-itp/elasticflow/cluster04.csv",
        command=f"dlsched compare --trace {_R}/elasticflow-itp/elasticflow/cluster04.csv -p fifo,qos,dragon --load 0.8",
        note="submission time, duration and GPU count are real; model, batch and deadline were generated",
    ),
    TraceSource(
        name="itp",
        kind=JOBS,
        what="Microsoft ITP 2021 raw cluster files: job_id, submission_time, duration, num_gpu",
        feeds=("itp",),
        repository=_ITP_REPO,
        path="data/raw-traces.tar.gz (commit 277ed24d), unpacked: clusterNN.csv",
        licence="MIT",
        paper=_ITP_PAPER,
        folder="elasticflow-itp/raw",
        example="elasticflow-itp/raw/cluster04.csv",
        command=f"dlsched compare --trace {_R}/elasticflow-itp/raw/cluster04.csv -p tiresias,optimus",
    ),
    TraceSource(
        name="philly",
        kind=JOBS,
        what="Microsoft Philly 2017 job list as processed for Pollux: 82,247 jobs in 15 virtual clusters",
        feeds=("philly",),
        repository=_ADAPTDL,
        path=("branch osdi21-artifact, simulator/traces/philly.csv; original data "
              "https://github.com/msr-fiddle/philly-traces"),
        licence="Philly data CC BY 4.0 (msr-fiddle/philly-traces); the adaptdl repository Apache-2.0",
        paper=("Jeon et al., \"Analysis of Large-Scale Multi-Tenant GPU Clusters for DNN Training Workloads\", "
               "USENIX ATC 2019"),
        folder="philly-pollux",
        example="philly-pollux/philly.csv",
        command=f"dlsched compare --trace {_R}/philly-pollux/philly.csv -p fifo,srtf,tiresias",
    ),
    TraceSource(
        name="alibaba2023",
        kind=JOBS,
        what="Alibaba GPU cluster trace v2023 ('openb'): 8,152 GPU-sharing pods and 1,523 heterogeneous nodes",
        feeds=("alibaba2023",),
        repository="https://github.com/alibaba/clusterdata",
        path="cluster-trace-gpu-v2023/csv/ (commit 7a6c496e): openb_pod_list_default.csv, openb_node_list_*.csv",
        licence=("not stated (no licence file in cluster-trace-gpu-v2023/; the repository README asks users to cite "
                 "the paper and encourages research use)"),
        paper=("Weng et al., \"Beware of Fragmentation: Scheduling GPU-Sharing Workloads with Fragmentation Gradient "
               "Descent\", USENIX ATC 2023"),
        folder="alibaba-gpu-v2023",
        example="alibaba-gpu-v2023/openb_pod_list_default.csv",
        command=(f"dlsched compare -t {_R}/alibaba-gpu-v2023/openb_pod_list_default.csv -c alibaba2023 "
                 "-p gavel-style,pal-style,dual-agent --variability static --load 0.8"),
        note="openb_node_list_gpu_node.csv beside the pod list is used to check GPU models",
    ),
    TraceSource(
        name="gavel",
        kind=JOBS,
        what=("Gavel's Philly-derived per-VC traces, seed 0: Philly arrivals and GPU counts with Gavel's job "
              "types and step counts (15 files, 15,264 jobs)"),
        feeds=("gavel",),
        repository=_GAVEL,
        path="scheduler/traces/msr/seed=0/*.trace (commit c4fa4009)",
        licence="MIT (Gavel); the underlying Philly data CC BY 4.0",
        paper=_GAVEL_PAPER,
        folder="gavel-philly-derived/seed0",
        example="gavel-philly-derived/seed0/6214e9.csv",
        command=(f"dlsched compare -t {_R}/gavel-philly-derived/seed0/6214e9.csv -c gavel -p tiresias,gavel-style "
                 "--limit 500"),
        note=("the public files are tab-separated <vc>.trace files without a header; dlsched reads them converted to "
              "CSV: the 2nd field (a launch command) dropped, the header job_type,num_steps_arg,needs_data_dir,"
              "total_steps,arrival_time,scale_factor added, every other value verbatim. `dlsched experiment "
              "dual-agent` and `dlsched train dual-agent` draw their workloads from this folder"),
    ),
    TraceSource(
        name="pollux",
        kind=JOBS,
        what="Pollux's workloads: 160-job samples of Philly mapped onto six profiled applications (and 0.5x-2x loads)",
        feeds=("pollux",),
        repository=_ADAPTDL,
        path="branch osdi21-artifact, simulator/workloads*/workload-N.csv (next to simulator/traces/<app>/)",
        licence="Apache-2.0 (the repository's master-branch LICENSE)",
        paper=_POLLUX_PAPER,
        folder="pollux-profiles",
        example="pollux-profiles/workloads/workload-1.csv",
        command=f"dlsched compare -t {_R}/pollux-profiles/workloads/workload-1.csv -p fifo,tiresias,optimus",
        note=("a workload needs the profiles (pollux-profiles, below): read from ../traces/<app>/ beside its folder, "
              "as in adaptdl's simulator/, else from the traces root"),
    ),
    TraceSource(
        name="dl2-alibaba-2018",
        kind=JOBS,
        what="Alibaba 2018 deep-learning job trace from DL2's development repository: daily CSVs, 43,244 jobs",
        feeds=("dl2-csv",),
        repository="https://github.com/yxd886/scheduler",
        path="trace/ali-v2/job_trace_YYYYMMDD.csv (commit 38ed4eb)",
        licence=_DL2_LICENCE,
        paper=_DL2_PAPER,
        folder="dl2/ali-v2",
        example="dl2/ali-v2/job_trace_20180821.csv",
        command=f"dlsched compare -t {_R}/dl2/ali-v2 -p drf,optimus,dl2 --limit 500",
        note="one day's file or the whole folder; not part of Alibaba's public clusterdata releases",
    ),
    TraceSource(
        name="dl2-constants",
        kind=JOBS,
        what=("DL2's workload constants: Alibaba hourly arrivals, job-length classes, per-model epoch sizes and "
              "demands, from which the dl2-ali generator builds DL2's workloads (the analytic parameter-server and "
              "ring all-reduce models also read its per-model constants)"),
        feeds=("dl2-ali",),
        repository="https://github.com/pengyanghua/DL2 and https://github.com/yxd886/scheduler",
        path=("transcribed from trace.py and parameters.py (both repositories), testbed-experiments/trace.py and "
              "draw/AnalyticalModel.py; the JSON file itself has no public copy"),
        licence=_DL2_LICENCE,
        paper=_DL2_PAPER,
        folder=trace_files.DL2_CONSTANTS,
        example=trace_files.DL2_CONSTANTS,
        command="dlsched compare -t dl2-ali -p drf,optimus,dl2  (also `dlsched train dl2`)",
        note="its README (dl2/README.md) says how each value was transcribed and checked against ali-v2",
    ),
    TraceSource(
        name="pai20k",
        kind=JOBS,
        what=("the 20,000 Philly jobs the Alibaba PAI simulator runs, in dlsched's own CSV, with its 6,500-GPU "
              "cluster (speed and fidelity anchor)"),
        feeds=("dlsched",),
        repository="none: derived by this project from philly-pollux/philly.csv (see pai-sim-input/README.md)",
        path="the PAI simulator it mirrors: https://github.com/alibaba/clusterdata, cluster-trace-gpu-v2020/simulator",
        licence="not stated (derived from the Philly data, whose licence is CC BY 4.0)",
        paper="-",
        folder="pai-sim-input",
        example="pai-sim-input/pai20k.dlsched.csv",
        command=(f"dlsched compare -t {_R}/pai-sim-input/pai20k.dlsched.csv -c {_R}/pai-sim-input/pai1node.yaml "
                 "-p fifo --format json"),
    ),
    # ------------------------------------------------------------------ measured throughput
    TraceSource(
        name="elasticflow-curves",
        kind=MEASURED,
        what=("ElasticFlow's measured A100 scaling curves: iterations/s on 1-64 GPUs for each (model, batch) of the "
              "ITP deadline traces"),
        feeds=("elasticflow-curves",),
        repository="https://github.com/pkusys/ElasticFlow",
        path="ElasticFlow/scheduler/throughputs_A100/*.csv (commit 04a0109a)",
        licence="Apache-2.0 (the licence text ships beside them: src/dlsched/data/elasticflow/LICENSE)",
        paper=_ITP_PAPER,
        folder=None,
        example=None,
        command="dlsched simulate  (ITP deadline jobs use them; --profiles draw gives other jobs one)",
        note="the traces root's elasticflow-profiles/ holds the same A100 files and the T4 ones; dlsched does not read it",
        shipped="src/dlsched/data/elasticflow/A100",
    ),
    TraceSource(
        name="gavel-throughputs",
        kind=MEASURED,
        what="Gavel's measured throughputs (steps/s) per job type, GPU count (1-8) and GPU type (K80, P100, V100)",
        feeds=("gavel-matrix",),
        repository=_GAVEL,
        path="scheduler/simulation_throughputs.json (commit c4fa4009)",
        licence="MIT",
        paper=_GAVEL_PAPER,
        folder=trace_files.GAVEL_THROUGHPUTS,
        example=None,
        command=f"dlsched compare -t {_R}/gavel-philly-derived/seed0/6214e9.csv -c gavel -p gavel-style --limit 500",
        note=("without it, 'gavel:' jobs of the job types the analytic ring all-reduce model knows run on that model; "
              "the others cannot run"),
    ),
    TraceSource(
        name="pollux-profiles",
        kind=MEASURED,
        what=("Pollux's measured step and sync times vs. placement and batch size, and gradient statistics, for six "
              "applications on 16 nodes x 4 T4 GPUs"),
        feeds=("pollux-profile",),
        repository=_ADAPTDL,
        path="branch osdi21-artifact, simulator/traces/<app>/ (placements.csv, scalability.csv, validation-*.csv)",
        licence="Apache-2.0 (the repository's master-branch LICENSE)",
        paper=_POLLUX_PAPER,
        folder=trace_files.POLLUX_PROFILES,
        example=None,
        command=f"dlsched compare -t {_R}/pollux-profiles/workloads/workload-1.csv -p fifo,optimus",
    ),
    TraceSource(
        name="dl2-speeds",
        kind=MEASURED,
        what=("DL2's measured training speeds on its MXNet testbed: per-worker speeds for every (model, PS count, "
              "worker count), 804 records"),
        feeds=("dl2-speed",),
        repository="https://github.com/pengyanghua/DL2",
        path="config_speed.txt (commit 2e54920)",
        licence=_DL2_LICENCE,
        paper=_DL2_PAPER,
        folder=trace_files.DL2_SPEED,
        example=None,
        command="dlsched compare -t dl2-ali -p drf,dl2  (also `dlsched experiment dl2`)",
        note="without it, 'dl2:' jobs have no measured speed (the dl2-ali workload needs it)",
    ),
)

OUTPUT_FORMATS = ("table", "json")


def sources_json(root: Path | None) -> dict:
    """Every entry as JSON-ready data, with whether the traces root `root` holds it."""
    return {
        "traces_root": str(root) if root is not None else None,
        "sources": [{**asdict(s), "feeds": list(s.feeds), "present": s.present(root)} for s in SOURCES],
    }


def _root_line(root: Path | None) -> str:
    from dlsched.paths import describe_traces, missing_traces_hint

    line = describe_traces(root)
    return line if root is not None else f"{line} To use the traces below, {missing_traces_hint()}."


def print_sources(output_format: str, traces: str | Path | None, console) -> None:
    """`dlsched trace sources`: the list, readable (a block per entry, grouped by kind, each saying
    whether the traces root in effect holds it) or as JSON on stdout."""
    from rich.markup import escape
    from rich.table import Table

    from dlsched.paths import traces_dir

    if output_format not in OUTPUT_FORMATS:
        raise ConfigError(f"--format must be one of {', '.join(OUTPUT_FORMATS)}, not {output_format!r}")
    root = traces_dir(traces)
    if output_format == "json":
        print(json.dumps(sources_json(root), indent=2))
        return
    console.print(escape(_root_line(root)), highlight=False)
    console.print(escape(f"The commands name the traces root {_R}: export it, or give the folder as --traces DIR."),
                  highlight=False)
    for kind, heading in _HEADINGS.items():
        console.print(f"\n[bold underline]{heading}[/]")
        for s in (x for x in SOURCES if x.kind == kind):
            have = s.present(root)
            state = {True: "[green]present[/]", False: "[red]missing[/]", None: "[yellow]no traces root[/]"}[have]
            where = f"{SHIPPED}: {s.shipped}" if s.folder is None else f"<traces root>/{s.folder}"
            grid = Table.grid(padding=(0, 2))
            grid.add_column(style="bold", no_wrap=True, min_width=max(len(x.name) for x in SOURCES))
            grid.add_column(overflow="fold")
            grid.add_row(escape(s.name), escape(s.what))
            grid.add_row("public copy", escape(f"{s.repository} ({s.path})"))
            grid.add_row("licence", escape(s.licence))
            grid.add_row("folder", escape(where) + f"  {state}")
            grid.add_row("used as", escape(", ".join(s.feeds)))
            grid.add_row("use", escape(s.command))
            if s.note:
                grid.add_row("note", escape(s.note))
            console.print(grid)
            console.print()
    console.print("More: docs/TRACES.md (folder layout, --traces and $DLSCHED_TRACES).", highlight=False)
