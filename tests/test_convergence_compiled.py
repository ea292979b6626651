"""The compiled loss-curve sampler gives `LossCurve`'s numbers bit for bit (the NumPy pass and
each curve's own call): Optimus' fits, and so its figures, are made from these samples."""

from __future__ import annotations

import numpy as np

from dlsched.sim import convergence
from dlsched.sim.convergence import LossCurve


def test_the_compiled_samples_are_the_numpy_and_the_scalar_samples(monkeypatch):
    rng = np.random.default_rng(5)
    curves = [LossCurve(f"job-{i}", float(rng.uniform(10, 1e7)), seed=i % 3, noise=float(rng.choice([0.0, 0.01, 0.05])))
              for i in range(60)]
    done = rng.uniform(0, 5e6, len(curves))
    done[:3] = [0.0, 0.5, 1e15]  # k = 0, below one iteration, many digits
    ks = np.linspace(done / 50, done, 50, axis=1)
    compiled = LossCurve.sample_many(curves, ks)
    monkeypatch.setattr(convergence, "kernel", lambda module, name: None)  # the NumPy pass
    plain = LossCurve.sample_many(curves, ks)
    assert np.array_equal(compiled, plain)
    scalar = np.array([[c(k) for k in row] for c, row in zip(curves, ks.tolist())])
    assert np.array_equal(compiled, scalar)
