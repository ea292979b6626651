"""How random is a DL2 network's policy? Per validation workload: the mean entropy of its action
distribution against the entropy of a uniform choice over the valid actions, the actions it takes
per slot, and the mean JCT of the episode it plays (sampling, as validation does).

This is the check that showed RL collapsing to uniform over the valid actions (docs/DL2.md, "Why
RL did not move"): a policy whose entropy equals the uniform figure has learned nothing but the
mask.

    python benchmarks/dl2/policy_entropy.py dl2-training/warmup_model.pt dl2-training/model.pt
    python benchmarks/dl2/policy_entropy.py dl2-training/checkpoint.pt --seeds 3
    python benchmarks/dl2/policy_entropy.py end-only --seeds 5   # a network that only ends slots
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from dlsched.paths import traces_dir
from dlsched.rl.dl2_config import DL2TrainConfig, make_env
from dlsched.models.dl2_network import DL2Net
from dlsched.models.model_io import load_model


def end_only(window: int) -> DL2Net:
    """A network whose only action is "end the slot": jobs keep their minimum gangs, nothing more."""
    net = DL2Net(window)
    with torch.no_grad():
        last = net.actor[-1]
        last.weight.zero_()
        last.bias.fill_(-1e6)
        last.bias[-1] = 0.0
    return net.eval()


def load(path: Path) -> DL2Net:
    """A saved model (`model.pt`, `warmup_model.pt`), the network of a training `checkpoint.pt`, or
    `end-only` (`end_only`)."""
    if str(path) == "end-only":
        return end_only(DL2TrainConfig().window)
    blob = torch.load(path, map_location="cpu", weights_only=False)
    if "net" in blob:  # checkpoint.pt: the network being trained, at its last validation point
        net = DL2Net(blob["config"]["window"])
        net.load_state_dict(blob["net"])
        return net.eval()
    return load_model(path)[0]


def play(net: DL2Net, env, seed: int) -> tuple[float, float, float, float]:
    """(mean entropy, mean uniform entropy over the valid actions, actions per slot, mean JCT s)."""
    rng = np.random.default_rng(seed)
    obs, info = env.reset(seed=seed)
    ent, uniform, steps, slots = [], [], 0, 0
    while True:
        mask = info["action_mask"]
        with torch.no_grad():
            p = torch.softmax(net.logits(torch.from_numpy(obs)[None], torch.from_numpy(mask)[None])[0], 0).numpy()
        valid = p[mask]
        ent.append(float(-(valid * np.log(valid + 1e-12)).sum()))
        uniform.append(float(np.log(mask.sum())))
        obs, _, term, trunc, info = env.step(int(rng.choice(len(p), p=p / p.sum())))
        steps += 1
        slots += bool(info["slot_end"])
        if term or trunc:
            return float(np.mean(ent)), float(np.mean(uniform)), steps / max(slots, 1), float(env.result.summary["mean_jct"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", type=Path, nargs="+", help="model.pt, warmup_model.pt, checkpoint.pt or end-only")
    ap.add_argument("--seeds", type=int, default=2, help="validation workloads (DL2TrainConfig's validation seeds)")
    args = ap.parse_args()
    cfg = DL2TrainConfig()
    env = make_env(cfg, traces_dir())
    print(f"{'model':<48} {'seed':>5} {'entropy':>8} {'uniform':>8} {'act/slot':>8} {'JCT slots':>9}")
    for path in args.models:
        net = load(path)
        for seed in cfg.seeds("validation", args.seeds):
            e, u, per_slot, jct = play(net, env, seed)
            print(f"{str(path)[-48:]:<48} {seed:>5} {e:>8.3f} {u:>8.3f} {per_slot:>8.1f} {jct / cfg.slot_seconds:>9.2f}")


if __name__ == "__main__":
    main()
