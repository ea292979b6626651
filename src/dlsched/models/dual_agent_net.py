"""The Dual-Agent-style networks: an ordering agent, a placement agent and their shared critic.

Our reconstruction of Xing et al. (KDD'23), whose text beyond the abstract is not public
(research/dualagent.md §4.2-4.4); every choice below is ours.

- Ordering agent, "SC-pool" (our reading of "squeeze-and-communicate"): each job is encoded by a
  small MLP; the encodings are *squeezed* into a global context (mean and max over the jobs:
  permutation-invariant, linear in the queue length, so one network serves any queue), and
  combined with the *message* from the placement agent (the mean and max of its machine
  encodings) into one priority score per job. The hidden vector behind a job's score is the
  ordering agent's message back to the placement agent when it places that job.
- Placement agent: a pointer network over machines. Each machine's features (the RW-OU GP's
  predicted speed and its uncertainty, free GPUs, the job's affinity for the machine's GPU type,
  its price, whether the whole job fits) and the ordering agent's message for the job give one
  logit per machine; machines are picked one at a time until the job's workers are placed.
- Critic: one value of the global state for both agents (MAPPO's centralised critic).

Both actors are residual policies (our choice): the ordering score is the teacher's score plus a
learned correction, the placement logits a prior on the teacher's machine plus a learned
correction, the corrections' last layers starting at zero. An untrained network therefore acts as
its teachers do (continuous Tiresias with waiting; the speed-aware placement over the GP), and
reinforcement learning moves it from there. Imitating the teachers through a small network from
scratch lost 5% of mean JCT against the teachers themselves on held-out workloads, which RL did not
win back in its budget.

`communicate=False` (an ablation) zeroes both messages.
"""

from __future__ import annotations

import torch
from torch import nn

#: Per-job inputs of the ordering agent (`policies.dual_agent.job_features`).
JOB_FEATURES = 8
#: Per-machine inputs of the placement agent that do not depend on the job (the message's source).
MACHINE_FEATURES = 6
#: Per-machine inputs that depend on the job being placed.
PICK_FEATURES = 5
#: Global inputs of the critic.
GLOBAL_FEATURES = 8
#: The placement agent's prior for its teacher's machine (a logit): sampled, it follows the teacher
#: about 80-90% of the time among 32 machines, so exploration stays near a good placement.
PRIOR_LOGIT = 5.0


def _mlp(inputs: int, hidden: int, out: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, hidden), nn.Tanh(), nn.Linear(hidden, out), nn.Tanh())


class DualAgentNet(nn.Module):
    """Both actors and the critic in one module (one file, one optimiser)."""

    def __init__(self, hidden: int = 32, communicate: bool = True):
        super().__init__()
        self.hidden, self.communicate = hidden, communicate
        h = hidden
        self.job_enc = _mlp(JOB_FEATURES, h, h)
        self.machine_enc = _mlp(MACHINE_FEATURES, h, h)
        self.order_head = nn.Sequential(nn.Linear(h + 2 * h + 2 * h, h), nn.Tanh())
        self.order_out = nn.Linear(h, 1)
        self.pick = nn.Sequential(nn.Linear(PICK_FEATURES + MACHINE_FEATURES + h + h, h), nn.Tanh(), nn.Linear(h, 1))
        self.critic = nn.Sequential(nn.Linear(GLOBAL_FEATURES + 4 * h, 2 * h), nn.Tanh(), nn.Linear(2 * h, 1))
        self.log_std = nn.Parameter(torch.tensor(-2.0))  # the ordering agent's score noise (exploration)
        # residual heads: zero at the start, so an untrained network acts as its teachers do
        for head in (self.order_out, self.pick[-1]):
            nn.init.zeros_(head.weight)
            nn.init.zeros_(head.bias)

    def config(self) -> dict:
        return {"hidden": self.hidden, "communicate": self.communicate}

    # ------------------------------------------------------------------ the placement agent's message
    def machines(self, mfeat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Machine encodings (N, h) and the squeezed message (2h,) (zeros without communication)."""
        e = self.machine_enc(mfeat)
        msg = torch.cat([e.mean(0), e.max(0).values])
        return e, msg if self.communicate else torch.zeros_like(msg)

    # ------------------------------------------------------------------ ordering
    def order(self, jfeat: torch.Tensor, msg: torch.Tensor, prior: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Scores (J,) = the teacher's score (`prior`) + the learned correction, the job messages
        (J, h) and the squeezed job context (2h,)."""
        e = self.job_enc(jfeat)
        ctx = torch.cat([e.mean(0), e.max(0).values])
        x = torch.cat([e, ctx.expand(len(e), -1), msg.expand(len(e), -1)], 1)
        hid = self.order_head(x)
        return prior + self.order_out(hid).squeeze(-1), hid if self.communicate else torch.zeros_like(hid), ctx

    # ------------------------------------------------------------------ placement
    def pick_logits(self, pfeat: torch.Tensor, mfeat: torch.Tensor, menc: torch.Tensor, job_msg: torch.Tensor,
                    mask: torch.Tensor, prior: int) -> torch.Tensor:
        """Masked logits over machines for one pick of one job: PRIOR_LOGIT on the teacher's machine
        (`prior`) + the learned correction."""
        x = torch.cat([pfeat, mfeat, menc, job_msg.expand(len(pfeat), -1)], 1)
        logits = self.pick(x).squeeze(-1)
        bonus = torch.zeros_like(logits)
        bonus[prior] = PRIOR_LOGIT
        return (logits + bonus).masked_fill(~mask, -1e9)

    # ------------------------------------------------------------------ critic
    def value(self, gfeat: torch.Tensor, ctx: torch.Tensor, msg: torch.Tensor) -> torch.Tensor:
        return self.critic(torch.cat([gfeat, ctx.detach(), msg.detach()])).squeeze(-1)
