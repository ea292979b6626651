"""Cluster presets: one YAML data file per preset in this folder, loaded into a `Cluster`.

`PRESETS` maps each name to its one-line description (read from the files, so the list and the data
cannot drift apart). `load_cluster` takes a preset name or a path to a YAML file of the same shape
(`presets.schema`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dlsched.config import read_yaml_model
from dlsched.core.cluster import Cluster, Network
from dlsched.core.errors import ConfigError, did_you_mean
from dlsched.presets.schema import PresetSpec

if TYPE_CHECKING:
    from dlsched.traces.workload import Workload

PRESET_DIR = Path(__file__).resolve().parent


def _read(path: Path) -> PresetSpec:
    return read_yaml_model(path, PresetSpec, "cluster file")


def build_cluster(spec: PresetSpec) -> Cluster:
    """Expand node groups into the Cluster's per-node arrays."""
    caps, types, racks, speeds = [], [], [], []
    next_rack = 0
    for g in spec.node_groups:
        per_rack = g.nodes_per_rack or g.count
        first = next_rack if g.rack is None else g.rack
        caps.append(np.tile([g.gpus, g.cpus, g.mem], (g.count, 1)))
        types += [g.gpu_type if g.gpus > 0 else ""] * g.count
        rk = first + np.arange(g.count) // per_rack
        racks.append(rk)
        next_rack = max(next_rack, int(rk[-1]) + 1)
        speeds += [g.speed] * g.count
    n = len(types)
    return Cluster(
        name=spec.name,
        capacity=np.vstack(caps).astype(float),
        gpu_type=np.array(types, dtype=object),
        rack=np.concatenate(racks),
        speed=np.array(speeds, dtype=float),
        node_names=tuple(f"{spec.name}-n{i:04d}" for i in range(n)),
        network=Network(**spec.network.model_dump()),
    )


def _preset_files() -> dict[str, Path]:
    return {p.stem: p for p in sorted(PRESET_DIR.glob("*.yaml"))}


PRESETS: dict[str, str] = {name: _read(p).description for name, p in _preset_files().items()}


@lru_cache(maxsize=None)
def _load_preset(name: str) -> Cluster:
    return build_cluster(_read(PRESET_DIR / f"{name}.yaml"))


def load_cluster(name_or_path: str | Path) -> Cluster:
    """A preset by name (see PRESETS), or a cluster YAML file by path."""
    key = str(name_or_path)
    if key in PRESETS:
        return _load_preset(key)
    p = Path(key).expanduser()
    if p.suffix.lower() in (".yaml", ".yml") or p.is_file():
        if not p.is_file():
            raise ConfigError(f"cluster file {p} does not exist")
        return build_cluster(_read(p))
    raise ConfigError(f"unknown cluster preset {key!r}{did_you_mean(key, PRESETS, n=3)}; presets: "
                      f"{', '.join(PRESETS)}; or give a YAML file path")


def trace_cluster(workload: "Workload") -> Cluster:
    """The cluster a trace names for itself, for a run given no `--cluster`.

    A trace without one (a dlsched CSV whose `# dlsched-trace` line names no cluster) is an error
    asking for `--cluster`, not a guess: the cluster decides every result, and no default fits a
    trace we know nothing about. A name that is no preset says it came from the trace."""
    name = workload.cluster
    if not name:
        raise ConfigError(f"trace {workload.source} names no cluster: pass --cluster NAME or FILE.yaml "
                          f"(presets: {', '.join(PRESETS)})")
    if name not in PRESETS:
        raise ConfigError(f"trace {workload.source} names cluster {name!r}, which is no preset"
                          f"{did_you_mean(name, PRESETS)}: pass --cluster NAME or FILE.yaml (presets: "
                          f"{', '.join(PRESETS)})")
    return _load_preset(name)
