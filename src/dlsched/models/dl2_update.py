"""One actor-critic step on DL2's network, and its settings: what offline RL (`rl.actor_critic`,
`rl.learner`) and the DL2 policy's online fine-tuning (`policies.dl2`, `online=True`) share.

The loss is DL2's (`train.py`, default settings): advantage A = r − V(s) weighted by the replay's
importance weights; policy loss −mean(w · log π(a|s) · A) − β · H̄ with DL2's entropy term
(`entropy_bonus`); critic loss mean(w · (V(s) − r)²); Adam. The replay's priorities are set to
|A| after the step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dlsched.models.dl2_network import DL2Net
from dlsched.models.replay import PrioritizedReplay


@dataclass
class RLConfig:
    episodes: int = 200
    lr: float = 1e-4
    entropy: float = 0.1
    batch: int = 256
    replay: int = 8192
    explore_rate: float = 0.2
    reward: str = "slot"  # one of REWARD_MODES (`credit`); "slot" is DL2's
    validate_every: int = 10
    seed: int = 0


def entropy_bonus(probs: torch.Tensor, logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """DL2's entropy term for a batch of (B, A) action distributions: −π log π averaged over the B
    states and the A actions, invalid actions counting 0 (as their probability is 0).

    Why the division by A matters: weighting the per-state entropy itself by β = 0.1 (what this
    code did until issue 16) makes the bonus A = 61 times DL2's at J = 20, and RL then drove the
    policy to uniform over the valid actions within ~100 episodes (docs/DL2.md, "Why RL did not
    move")."""
    return -(probs * logp.masked_fill(~mask, 0.0)).sum(1).mean() / probs.shape[1]


def update(net: DL2Net, opt: torch.optim.Optimizer, replay: PrioritizedReplay, cfg: RLConfig) -> tuple[float, float]:
    idx, s, m, a, r, w = replay.sample(cfg.batch)
    if len(idx) < 2:
        return 0.0, 0.0
    net.train()
    s_t, m_t = torch.from_numpy(s), torch.from_numpy(m)
    r_t, w_t, a_t = torch.from_numpy(r), torch.from_numpy(w), torch.from_numpy(a)
    logits = net.logits(s_t, m_t)
    logp = torch.log_softmax(logits, 1)
    probs = logp.exp()
    value = net.value(s_t)
    adv = (r_t - value).detach()
    policy_loss = -(w_t * logp.gather(1, a_t[:, None]).squeeze(1) * adv).mean()
    entropy = entropy_bonus(probs, logp, m_t)
    critic_loss = (w_t * (value - r_t) ** 2).mean()
    loss = policy_loss - cfg.entropy * entropy + critic_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
    net.eval()
    replay.update(idx, (r_t - value.detach()).numpy())
    return float(policy_loss.detach()), float(critic_loss.detach())
