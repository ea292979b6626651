"""Rental prices per GPU type (USD per GPU-hour), for the fee a job pays on a public cloud.

Why: a Dual-Agent-style scheduler trades job completion time against the user's training fee,
fee = sum over the job's GPUs of GPU-hours x price(type). The numbers below are APPROXIMATE public
on-demand list prices (per GPU, US regions, as published around 2020-2023; they change and differ
by region and provider). They set the relative cost of the types, which is what a scheduler
trades; pass your own `table` to `node_prices` for other prices.

Sources (per GPU-hour, GPU only unless said):
- K80 0.45, P100 1.46, V100 2.48, T4 0.35: Google Cloud "GPU pricing" on-demand list (GPU only;
  the K80 is retired now).
- V100M32 (V100 32 GB) 3.90: AWS p3dn.24xlarge on-demand (31.212 USD/h for 8 GPUs, host included).
- A100 (40 GB) 2.93: Google Cloud A100 40GB GPU on-demand list price.
- A10 1.01: AWS g5.xlarge on-demand (1 A10G, host included).
- MISC 0.45: PAI 2020's "MISC" machines hold K40m/K80/M60 cards; priced as a K80 (a guess).
- G2 2.48 and G3 2.93: Alibaba's anonymised GPU models in the 2023 trace. A GUESS, not data:
  G2 (549 nodes of 8 GPUs, 96 CPUs) priced as a V100-class card, G3 (8 GPUs, 128 CPUs, 768 GiB:
  the largest hosts) as an A100-class card.
- anything else, including "generic": DEFAULT_PRICE = the V100 price (the type Gavel's throughput
  matrix assumes for a GPU it has no column for).
"""

from __future__ import annotations

import numpy as np

from dlsched.core.cluster import Cluster

#: USD per GPU-hour, approximate on-demand list prices (module docstring gives each source).
PRICES: dict[str, float] = {
    "K80": 0.45,
    "P100": 1.46,
    "V100": 2.48,
    "V100M16": 2.48,
    "V100M32": 3.90,
    "T4": 0.35,
    "A10": 1.01,
    "A100": 2.93,
    "MISC": 0.45,
    "G2": 2.48,  # a guess: Alibaba's anonymised model
    "G3": 2.93,  # a guess: Alibaba's anonymised model
}
#: The price of a GPU type not in the table (and of "generic"): the V100 price.
DEFAULT_PRICE: float = PRICES["V100"]


def price_of(gpu_type: str, table: dict[str, float] | None = None, default: float = DEFAULT_PRICE) -> float:
    """USD per GPU-hour of `gpu_type` (case-insensitive); `default` for a type not in the table."""
    tab = PRICES if table is None else table
    key = str(gpu_type).strip().upper()
    for name, price in tab.items():
        if name.upper() == key:
            return float(price)
    return float(default)


def node_prices(cluster: Cluster, table: dict[str, float] | None = None, default: float = DEFAULT_PRICE) -> np.ndarray:
    """USD per GPU-hour of each node's GPUs, (N,); a CPU-only node (no GPU type) costs 0."""
    return np.array([price_of(t, table, default) if t else 0.0 for t in cluster.gpu_type.tolist()], dtype=float)
