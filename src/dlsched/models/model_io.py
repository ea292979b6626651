"""Saving and loading networks (DL2's, the Dual-Agent-style ones): the file format `dlsched train
dl2` / `train dual-agent` write and the policies read.

It lives in `rl/` (with the network it serialises) so that training never has to import the
policy module: `policies.dl2` depends on `rl`, never the other way round.
"""

from __future__ import annotations

from pathlib import Path

import torch

from dlsched.core.errors import ConfigError
from dlsched.models.dl2_network import DL2Net


def save_model(net: torch.nn.Module, path: Path, meta: dict | None = None) -> None:
    """Write the network's constructor arguments, weights and free-form `meta` to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"config": net.config(), "state_dict": net.state_dict(), "meta": meta or {}}, path)


def load_model(path: Path, cls: type = DL2Net, what: str = "a DL2 model") -> tuple[torch.nn.Module, dict]:
    """The network (of class `cls`, built from the saved config) saved at `path`, in eval mode, and
    its `meta`. A missing file raises FileNotFoundError; any other unreadable file a ConfigError
    naming it."""
    try:
        blob = torch.load(path, map_location="cpu", weights_only=True)
        net = cls(**blob["config"])
        net.load_state_dict(blob["state_dict"])
    except FileNotFoundError:
        raise
    except Exception as exc:  # a truncated or foreign file: say which
        raise ConfigError(f"{path}: not {what} saved by dlsched ({exc})") from None
    return net.eval(), blob.get("meta", {})
