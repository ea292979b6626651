"""Fuzzing every trace reader and every YAML loader: whatever bytes a user hands dlsched, the only
exceptions that come out are its own (DlschedError: ConfigError, TraceError), which the CLI prints
as one line with exit code 2, never a traceback.

Inputs are random bytes, valid samples of each format with random byte edits, and well-formed
files of random cells / random YAML values. Bounded for CI (a few dozen examples per test,
derandomized so a run is repeatable); a longer, random run locally:

    DLSCHED_FUZZ_EXAMPLES=3000 python -m pytest tests/test_fuzz.py -p no:xdist
"""

from __future__ import annotations

import json
import os
import string
import tempfile
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from dlsched.core.errors import DlschedError

EXAMPLES = int(os.environ.get("DLSCHED_FUZZ_EXAMPLES", "25"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize="DLSCHED_FUZZ_EXAMPLES" not in os.environ,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
)

# --------------------------------------------------------------------------- samples

TRACES: dict[str, tuple[str, str]] = {  # format -> (file name, a small valid file)
    "philly": ("philly.csv", "timestamp,duration,num_gpus,gpu_time,cluster\n"
                             "2017-10-09 07:01:55,66.0,1,66.0,vc1\n2017-10-09 08:00:00,120,4,480,vc2\n"),
    "itp": ("cluster04.csv", "job_id,submission_time,duration,num_gpu\na,5810,288476,16\nb,5813,2893,1\n"),
    "itp-deadline": ("cluster04.csv", "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
                                      "a,5810,3950230,inception3,314395,64,16,288476\nb,5813,4010,resnet50,308959,64,1,2893\n"),
    "alibaba2023": ("openb_pod_list_default.csv",
                    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
                    "p0,12000,16384,1,1000,,LS,Running,0,12537496,0\np1,6000,12288,1,460,V100M16,BE,Succeeded,427061,12902960,427061\n"),
    "gavel": ("vc1.csv", "job_type,num_steps_arg,needs_data_dir,total_steps,arrival_time,scale_factor\n"
                         "Transformer (batch size 128),-step,1,95121,0.000000,1\nRecommendation (batch size 8192),-n,1,10000,6.0,2\n"),
    "pollux": ("workload-1.csv", "name,time,application,num_replicas,batch_size\ncifar10-0,107,cifar10,6,256\ncifar10-1,110,cifar10,1,128\n"),
    "dl2-csv": ("job_trace_20180621.csv",
                '2018062108441339ed14c8_3126_411b_a0df_94a4e3cfe639,812d5aaa83d19a0a00adcf38a2ab4530,1529541853,1529544725,'
                '"ClusterInfo": "{"worker":{"count":2,"gpu":100}}"\n'
                '201806210939362b8e251e_30cb_4abb_9f63_5ee8efa7f7ed,146a5a6f219a5c0d502d486bd276a645,1529545176,1529548308,'
                '"ClusterInfo": "{"ps":{"count":1,"cpu":1000,"memory":20000},"worker":{"count":2,"cpu":1000,"memory":10000}}"\n'),
    "dlsched": ("mine.csv", '# dlsched-trace {"name": "mine", "cluster": "itp-small"}\n'
                            "job_id,submit_time,iterations,duration,num_workers,arch,model,worker_gpu,min_workers,max_workers,"
                            "num_ps,deadline,priority,queue,user,gpu_type,batch_size,work_known,utility,extra\n"
                            'a,0,100,100,2,allreduce,duration-only,1,1,4,0,500,1,q,u,,32,true,"sigmoid(1,2,3)","{""k"": 1}"\n'
                            "b,10,,50,1,single,duration-only,1,,,,,,,,,,false,,\n"),
}
HEADERS = {fmt: sample.splitlines()[1 if fmt == "dlsched" else 0] for fmt, (_, sample) in TRACES.items() if fmt != "dl2-csv"}

# a Pollux profile: the reader needs ../traces/<application>/validation-<batch>.csv beside the workload
PROFILE = "progress,iteration,metric,grad_sqr,grad_var\n391.0,390,0.44,8.9,5.0\n782.0,781,0.60,1.8,1.5\n"

RUN_CONFIG = ("trace: t.csv\ncluster: philly\npolicies: [fifo, tiresias]\nlimit: 20\nload: 0.8\n"
              "sim: {seed: 1, restart_overhead: 10}\npolicy_options: {tiresias: {promote_knob: 8}}\n"
              "throughput: {duration_alpha: 0.85}\n")
CLUSTER = ("name: lab\ndescription: d\nnetwork: {inter_node_gbps: 25}\nnode_groups:\n"
           "  - {count: 3, gpus: 4, cpus: 16, mem: 64, gpu_type: A100, nodes_per_rack: 2}\n"
           "  - {count: 1, gpus: 0, cpus: 64, mem: 256, rack: 1}\n")
NODES = "name: laptop\nnodes:\n  - {name: n0, gpus: 2, cpus: 4, mem_gb: 8}\n  - {name: n1, gpus: 2, cpus: 4, mem_gb: 8, rack: 1}\n"
JOBS = "- {model: cnn, steps: 3000, workers: 1, max_workers: 2}\n- {name: b, model: mlp, steps: 10, seed: 3}\n"
SERVICE = "port: 8765\nbackend: dry\npolicy: drf\npolicy_options: {share_by: user}\ntick: 0.5\nstop_jobs_on_exit: false\n"
DL2 = "rl_episodes: 2\nwarmup_traces: 1\nwindow: 10\nseed: 4\nteacher: drf\nworkloads: dl2\n"

# tokens that have broken parsers before: huge, tiny, non-finite, negative, odd text
TOKENS = ["", "0", "-1", "1", "1.5", "1e308", "-1e308", "1e-308", "9" * 30, "inf", "-inf", "nan", "NaN", "None",
          "null", "true", "~", "x", '"', '""', ",", "\n", "\r", "\x00", "\xff", "é", "2017-13-45 25:61:61",
          "2001-02-30", "0x10", "1_000", "[", "{", "}", "sigmoid(1,2,3)", "sigmoid(inf,1,1)", '{"a":1}', "..", "/",
          "../../etc", "💥", "\u202e", "-0", "+5", " 3 ", "1e400", "18446744073709551616"]
ALPHABET = [t for t in TOKENS if t] + list(string.printable) + ["\xff", "\x80", "\x00", "\ufeff"]
# YAML that parses but cannot be built, or is built into something odd
YAML_TOKENS = [" 2001-02-30", " !!int x", " !!float y", " !!binary @", " !!set {a}", " !!python/object:os.system x",
               " &a [1]", " *a", " *nope", "? [a]: 1\n", " [" * 2000, " 1" + "0" * 5000, " 0o777", " 1e400", " .nan",
               " .inf", " -.inf", " ~", " <<: {a: 1}", "\t", " '", ' "\\x"']


@st.composite
def mutated(draw: st.DrawFn, text: str, extra: tuple[str, ...] = ()) -> bytes:
    """`text` with a few random edits: delete, insert or replace a span by odd tokens."""
    data = text
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, len(data)))
        j = draw(st.integers(i, min(len(data), i + 12)))
        op = draw(st.sampled_from(["delete", "insert", "replace"]))
        token = "" if op == "delete" else draw(st.sampled_from(extra) if extra and draw(st.booleans())
                                               else st.sampled_from(ALPHABET))
        data = data[:i] + token + data[j if op != "insert" else i:]
    raw = data.encode("utf-8", "surrogatepass")
    if draw(st.booleans()) and raw:  # sometimes a raw byte that is not UTF-8
        k = draw(st.integers(0, len(raw) - 1))
        raw = raw[:k] + bytes([draw(st.integers(0x80, 0xff))]) + raw[k + 1:]
    return raw


CELL = st.one_of(st.sampled_from(TOKENS), st.integers().map(str), st.floats().map(repr), st.text(max_size=8))


@st.composite
def table(draw: st.DrawFn, header: str) -> bytes:
    """A well-formed CSV of `header` (sometimes with a column renamed) and random cells."""
    cols = header.split(",")
    if draw(st.booleans()):
        k = draw(st.integers(0, len(cols) - 1))
        cols[k] = draw(st.sampled_from(TOKENS[:20] + [cols[k][:-1], cols[k] + "s"]))
    rows = draw(st.lists(st.lists(CELL, min_size=len(cols), max_size=len(cols)), max_size=5))
    import csv
    import io

    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(cols)
    w.writerows(rows)
    return out.getvalue().encode("utf-8", "surrogatepass")


def contents(sample: str, header: str | None = None) -> st.SearchStrategy[bytes]:
    choices = [st.binary(max_size=300), mutated(sample)]
    if header is not None:
        choices.append(table(header))
    return st.one_of(*choices)


# --------------------------------------------------------------------------- the property


def only_our_errors(fn: Callable[[], Any]) -> Any:
    """fn's result, or None when it raised one of dlsched's own errors; anything else fails."""
    try:
        return fn()
    except DlschedError as exc:
        assert str(exc).strip(), "an error with no message"
        return None


@pytest.fixture(scope="module")
def folder():
    with tempfile.TemporaryDirectory(prefix="dlsched-fuzz-") as d:
        root = Path(d)
        for bs in (128, 256):
            prof = root / "traces" / "cifar10" / f"validation-{bs}.csv"
            prof.parent.mkdir(parents=True, exist_ok=True)
            prof.write_text(PROFILE)
        (root / "workloads").mkdir()
        yield root


def _trace_file(folder: Path, fmt: str, data: bytes) -> Path:
    name = TRACES[fmt][0]
    p = folder / "workloads" / name if fmt == "pollux" else folder / fmt / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)
    return p


def _check_trace(path: Path, fmt: str | None) -> None:
    from dlsched.traces import load_trace, trace_info, validate_trace

    problems = only_our_errors(lambda: validate_trace(path, fmt))
    w = only_our_errors(lambda: load_trace(path, fmt))
    if problems == []:  # validate and load read the same pipeline: a clean file loads
        assert w is not None, f"{path} validates clean but does not load"
    if w is not None:
        assert problems == [], f"{path} loads but validate reports {problems}"
        only_our_errors(lambda: trace_info(w))


def test_every_trace_format_has_a_sample_that_loads(folder):
    from dlsched.traces import FORMATS, load_trace
    from dlsched.traces.registry import GENERATORS

    assert set(FORMATS) - set(TRACES) == set(GENERATORS)  # dl2-ali is fuzzed below; synthetic reads nothing
    for fmt, (_, sample) in TRACES.items():
        p = _trace_file(folder, fmt, sample.encode())
        assert load_trace(p, fmt).jobs, fmt
        assert load_trace(p).jobs, fmt  # and detected


@pytest.mark.parametrize("fmt", sorted(TRACES))
@FUZZ
@given(data=st.data())
def test_trace_reader_raises_only_its_own_errors(folder, fmt, data):
    sample = TRACES[fmt][1]
    raw = data.draw(contents(sample, HEADERS.get(fmt)))
    p = _trace_file(folder, fmt, raw)
    _check_trace(p, fmt)
    _check_trace(p, None)  # format detection on the same bytes


@FUZZ
@given(data=st.data())
def test_dl2_generator_constants_raise_only_our_errors(folder, data):
    """`dl2-ali` reads DL2's workload_constants.json: a damaged copy is a TraceError."""
    from dlsched.paths import traces_dir
    from dlsched.traces import load_trace

    root = traces_dir(None)
    real = root / "dl2" / "workload_constants.json" if root is not None else None
    if real is None or not real.is_file():
        pytest.skip("the shared traces' dl2/workload_constants.json is not here")
    text = real.read_text()
    raw = data.draw(st.one_of(mutated(text), _json_edit(json.loads(text))))
    d = folder / "dl2ali"
    d.mkdir(exist_ok=True)
    (d / "workload_constants.json").write_bytes(raw)
    only_our_errors(lambda: load_trace(d, "dl2-ali", limit=20))


@st.composite
def _json_edit(draw: st.DrawFn, obj: Any) -> bytes:
    """`obj` with one value somewhere inside replaced by a random JSON value."""
    leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5),
                     st.lists(st.integers(-3, 3), max_size=3), st.just({}))
    node = obj
    parent, key = None, None
    for _ in range(draw(st.integers(1, 4))):
        if isinstance(node, dict) and node:
            parent, key = node, draw(st.sampled_from(sorted(node)))
        elif isinstance(node, list) and node:
            parent, key = node, draw(st.integers(0, len(node) - 1))
        else:
            break
        node = parent[key]
    if parent is not None:
        parent[key] = draw(leaf)
    return json.dumps(obj).encode()


# --------------------------------------------------------------------------- YAML loaders


def _loaders() -> dict[str, tuple[str, Callable[[Path], Any], list[str]]]:
    """name -> (a valid sample, the loader, the keys its model knows)."""
    from dlsched.cli_live import read_job_file
    from dlsched.config import read_yaml_model
    from dlsched.live.backends.nodes import LocalNodes, VirtualNode, load_nodes
    from dlsched.live.service import ServiceConfig, load_service_config
    from dlsched.live.spec import TrainJob
    from dlsched.presets import load_cluster
    from dlsched.presets.schema import NodeGroup, PresetSpec
    from dlsched.rl.train_dl2 import DL2TrainConfig
    from dlsched.run_config import RunConfig, load_run_config
    from dlsched.sim.config import SimConfig

    return {
        "run config": (RUN_CONFIG, load_run_config, [*RunConfig.model_fields, *SimConfig.model_fields]),
        "cluster file": (CLUSTER, load_cluster, [*PresetSpec.model_fields, *NodeGroup.model_fields]),
        "nodes file": (NODES, load_nodes, [*LocalNodes.model_fields, *VirtualNode.model_fields]),
        "job file": (JOBS, read_job_file, list(TrainJob.model_fields)),
        "service config": (SERVICE, load_service_config, list(ServiceConfig.model_fields)),
        "DL2 training config": (DL2, lambda p: read_yaml_model(p, DL2TrainConfig, "DL2 training config"),
                                list(DL2TrainConfig.model_fields)),
    }


LOADERS = ["run config", "cluster file", "nodes file", "job file", "service config", "DL2 training config"]


def _yaml_values(keys: list[str]) -> st.SearchStrategy[Any]:
    scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
                       st.sampled_from(TOKENS), st.sampled_from(["fifo", "drf", "philly", "dry", "cnn", "A100"]))
    key = st.one_of(st.sampled_from(keys), st.text(max_size=6), st.integers(-2, 2))
    return st.recursive(scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(key, inner, max_size=5)), max_leaves=20)


@st.composite
def yaml_documents(draw: st.DrawFn, sample: str, keys: list[str]) -> bytes:
    """Random YAML values under the model's own keys (so validation, not just parsing, is hit),
    or the sample with one value replaced."""
    values = _yaml_values(keys)
    if draw(st.booleans()):
        doc = draw(st.one_of(values, st.dictionaries(st.sampled_from(keys), values, max_size=6)))
    else:
        doc = yaml.safe_load(sample)
        target = doc[0] if isinstance(doc, list) else doc
        if isinstance(target, dict):
            k = draw(st.sampled_from(sorted(target)))
            target[k] = draw(values)
    return yaml.safe_dump(doc, allow_unicode=True).encode("utf-8", "surrogatepass")


@st.composite
def raw_values(draw: st.DrawFn, sample: str) -> bytes:
    """The sample with the value of one `key: value` replaced by raw YAML that parses but may not
    build (a date that does not exist, a bad tag, thousands of brackets...)."""
    lines = sample.splitlines()
    keyed = [i for i, line in enumerate(lines) if ": " in line]
    i = draw(st.sampled_from(keyed))
    key = lines[i].split(": ", 1)[0]
    lines[i] = f"{key}:{draw(st.sampled_from(YAML_TOKENS))}"
    return ("\n".join(lines) + "\n").encode()


def test_every_yaml_loader_reads_its_sample(tmp_path):
    for name, (sample, load, _) in _loaders().items():
        p = tmp_path / "sample.yaml"
        p.write_text(sample)
        assert load(p) is not None, name


@pytest.mark.parametrize("name", LOADERS)
@FUZZ
@given(data=st.data())
def test_yaml_loader_raises_only_our_errors(folder, name, data):
    sample, load, keys = _loaders()[name]
    raw = data.draw(st.one_of(st.binary(max_size=200), mutated(sample, tuple(YAML_TOKENS)), raw_values(sample),
                              yaml_documents(sample, keys)))
    p = folder / f"{name.replace(' ', '-')}.yaml"
    p.write_bytes(raw)
    only_our_errors(lambda: load(p))


# --------------------------------------------------------------------------- command-line values


@FUZZ
@given(flags=st.fixed_dictionaries({}, optional={
    "limit": st.integers(), "seed": st.integers(),
    "policies": st.lists(st.text(max_size=8), max_size=3), "trace": st.text(max_size=5),
    "cluster": st.text(max_size=5), "profiles": st.text(max_size=5),
}))
def test_run_flags_raise_only_our_errors(flags):
    from dlsched.run_config import RunConfig, with_flags

    only_our_errors(lambda: with_flags(RunConfig(), **flags))


# --------------------------------------------------------------------------- loaded means runnable

EXTREMES = st.one_of(st.sampled_from(["0", "0.5", "1e6", "999999", "1e9", "1e12", "1e15", "-1", "1e308", "inf"]),
                     st.floats(min_value=0, max_value=1e16).map(repr), st.integers(0, 10**7).map(str))


@st.composite
def row(draw: st.DrawFn) -> list[str]:
    """Mostly empty or plausible cells (so that many files load), one in five extreme;
    submit_time and iterations are required, so never empty."""
    cells = []
    for col in NUMERIC_COLUMNS:
        if draw(st.integers(0, 4)) == 0:
            cells.append(draw(EXTREMES))
        else:
            plausible = ["1", "2", "100", "3600"] if col not in ("min_workers", "max_workers", "deadline") else ["1"]
            cells.append(draw(st.sampled_from(plausible + ([] if col in ("submit_time", "iterations") else [""] * 4))))
    return cells


NUMERIC_COLUMNS = ["submit_time", "iterations", "duration", "num_workers", "worker_gpu", "worker_cpu", "worker_mem",
                   "min_workers", "max_workers", "deadline", "priority", "batch_size"]


@FUZZ
@given(rows=st.lists(row(), min_size=1, max_size=3), arch=st.sampled_from(["allreduce", "allreduce", "ps", "single"]))
def test_a_trace_that_loads_also_simulates(folder, rows, arch):
    """What `trace validate` accepts, `simulate` runs: `num_gpu=1e308` used to pass validation and
    then fail in the engine, blaming the policy. A job too large for the cluster is rejected by
    the engine with its reason, not an exception."""
    from dlsched.core.errors import DlschedError
    from dlsched.policies.registry import make_policy
    from dlsched.presets import load_cluster
    from dlsched.sim.config import SimConfig
    from dlsched.sim.engine import simulate
    from dlsched.throughput.registry import default_throughput
    from dlsched.traces import load_trace

    lines = ["job_id,arch," + ",".join(NUMERIC_COLUMNS)] + [f"j{i},{arch}," + ",".join(r) for i, r in enumerate(rows)]
    p = folder / "runnable.csv"
    p.write_text("\n".join(lines) + "\n")
    w = only_our_errors(lambda: load_trace(p, "dlsched"))
    event("loaded" if w is not None else "refused")
    if w is None:
        return
    try:
        simulate(w.jobs, load_cluster("itp-small"), make_policy("fifo"), default_throughput(None), SimConfig(max_time=1e13))
    except DlschedError as exc:  # only a policy error naming a bad plan would be a bug here
        pytest.fail(f"a loaded trace failed in the simulator: {exc}")
