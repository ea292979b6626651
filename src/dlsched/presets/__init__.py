"""Cluster presets: one YAML data file per preset in this folder, loaded into a `Cluster`.

`PRESETS` maps each name to its one-line description (read from the files, so the list and the data
cannot drift apart). `load_cluster` takes a preset name or a path to a YAML file of the same shape
(`presets.schema`).
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from pathlib import Path

import numpy as np

from dlsched.config import read_yaml_model
from dlsched.core.cluster import Cluster, Network
from dlsched.core.errors import ConfigError
from dlsched.presets.schema import PresetSpec

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
    close = difflib.get_close_matches(key, PRESETS, n=3)
    hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise ConfigError(f"unknown cluster preset {key!r}.{hint} Presets: {', '.join(PRESETS)}; or give a YAML file path.")
