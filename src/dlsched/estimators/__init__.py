"""Estimators a live system can run: job speed vs. size, and remaining work from the loss curve.

Optimus' two models (EuroSys'18), usable by any policy (Optimus, the QoS-deadline policy):

- `speed_model`: iterations/s at (PSs, workers), NNLS fit per job type (`SpeedPool`).
- `convergence_fit`: the loss curve fitted to predict total iterations, with a range.
- `progress_predictor`: remaining iterations of a job with its source (`RemainingWork`).
"""

from dlsched.estimators.convergence_fit import ConvergenceFit, fit_convergence
from dlsched.estimators.progress_predictor import (
    Estimate, RemainingWork, combine, estimate_remaining, oracle_estimate,
)
from dlsched.estimators.speed_model import SpeedModel, SpeedPool, form_for, profile_key

__all__ = [
    "ConvergenceFit", "Estimate", "RemainingWork", "SpeedModel", "SpeedPool", "combine",
    "estimate_remaining", "fit_convergence", "form_for", "oracle_estimate", "profile_key",
]
