"""`even_spread` compiled with Numba: `one_task` (most trace jobs) and `spread` (the rest).

Why: Optimus asks `even_spread` for every start and re-plan; on full Philly its NumPy passes over
the (nodes, 3) free array (~10-30 calls of a microsecond or two each, whatever the cluster's
size) were ~8% of the run for one-task jobs (93% of Philly's) and, once those were compiled, 5%
for the others. `one_task`'s walk costs 1.4 µs on the 80-node `philly` preset (NumPy: 21 µs).

The same allocation as the NumPy path, by construction: the same IEEE expressions in the same
order (a task's demand w·worker + p·PS, room = (free + eps) / demand per needed resource, the
lower bound on servers, the per-server counts), minima, maxima and orders by comparisons (room
descending, then node index, as `np.lexsort`), the first maximum as `np.argmax` (NaN wins both
minimum and maximum, as in NumPy, for `one_task`). `tests/test_placement_compiled.py` compares
them on random clusters, masks and demands.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, error_model="numpy", nogil=True)
def one_task(free, mask, masked, w0, w1, w2, p0, p1, p2, workers, ps, eps):
    """The node `placement._one_task` picks for one task of `workers` workers and `ps` PSs
    (demands w0..w2, p0..p2: GPU, CPU, memory), or -1; `mask` (read when `masked`): the
    eligible nodes. `free` has 3 columns."""
    u0, u1, u2 = workers * w0 + ps * p0, workers * w1 + ps * p1, workers * w2 + ps * p2
    best, best_room = -1, 0.0
    for i in range(free.shape[0]):
        if masked and not mask[i]:
            room = -1.0
        elif u0 > 0 or u1 > 0 or u2 > 0:
            room = np.inf
            for a, u in ((free[i, 0], u0), (free[i, 1], u1), (free[i, 2], u2)):
                if u > 0:
                    v = (a + eps) / u
                    if v < room or v != v:  # np.min: NaN propagates
                        room = v
                        if v != v:
                            break
        else:
            room = 1.0  # nothing needed: every node has room for the one task
        if best < 0 or room > best_room or (room != room and best_room == best_room):
            best, best_room = i, room  # np.argmax: the first maximum, the first NaN before all
            if room != room:
                break
    if best < 0 or not best_room > 0:
        return -1
    if not (free[best, 0] + eps >= u0 and free[best, 1] + eps >= u1 and free[best, 2] + eps >= u2):
        return -1
    return best


@njit(cache=True, error_model="numpy", nogil=True)
def spread(free, mask, masked, w0, w1, w2, p0, p1, p2, workers, ps, eps, w_all, p_all):
    """`placement.even_spread` of `workers` + `ps` > 1 tasks: fills the per-node counts w_all and
    p_all (zeros on entry) and returns True, or False when no k fits. `free` has 3 columns."""
    tasks = workers + ps
    n = free.shape[0]
    t0, t1, t2 = workers * w0 + ps * p0, workers * w1 + ps * p1, workers * w2 + ps * p2
    a0, a1, a2 = t0 / tasks, t1 / tasks, t2 / tasks
    room = np.empty(n)
    for i in range(n):
        if masked and not mask[i]:
            room[i] = -1.0
        elif a0 > 0 or a1 > 0 or a2 > 0:
            r = np.inf
            if a0 > 0:
                r = min(r, (free[i, 0] + eps) / a0)
            if a1 > 0:
                r = min(r, (free[i, 1] + eps) / a1)
            if a2 > 0:
                r = min(r, (free[i, 2] + eps) / a2)
            room[i] = r
        else:
            room[i] = float(tasks)
    # roomiest first, then the lowest index (np.lexsort((arange, -room))), only room > 0
    order = np.argsort(-room, kind="mergesort")
    m = 0
    for j in range(n):
        if room[order[j]] > 0:
            order[m] = order[j]
            m += 1
    if m == 0:
        return False
    top0 = top1 = top2 = -np.inf  # over the candidates: eligible nodes only (a masked one has room -1)
    for j in range(m):
        i = order[j]
        top0, top1, top2 = max(top0, free[i, 0]), max(top1, free[i, 1]), max(top2, free[i, 2])
    k_lo = -np.inf
    for t, top in ((t0, top0), (t1, top1), (t2, top2)):
        k_lo = max(k_lo, np.ceil(t / max(top, eps) - 1e-9) if t > eps else 1.0)
    k_min, k_max = max(1, int(min(k_lo, float(tasks)))), min(tasks, m)
    for k in range(k_min, k_max + 1):
        fits = True
        for idx in range(k_max):  # as NumPy's table: servers k.. of the k_max get 0 tasks, still checked
            wc = workers // k + (1 if idx < workers % k else 0) if idx < k else 0
            pc = ps // k + (1 if (idx - workers) % k < ps % k else 0) if idx < k else 0
            i = order[idx]
            if not (free[i, 0] + eps >= wc * w0 + pc * p0 and free[i, 1] + eps >= wc * w1 + pc * p1
                    and free[i, 2] + eps >= wc * w2 + pc * p2):
                fits = False
                break
        if fits:
            for idx in range(k):
                w_all[order[idx]] = workers // k + (1 if idx < workers % k else 0)
                p_all[order[idx]] = ps // k + (1 if (idx - workers) % k < ps % k else 0)
            return True
    return False
