"""Policy names a user can type, mapped to factories. Imports are lazy so that listing the
policies (or running one) never imports the others' heavy dependencies (e.g. PyTorch).

Next to the built-ins below, installed packages register policies through the `dlsched.policies`
entry points (`policies/plugins.py`, docs/PLUGINS.md): every function here answers for them as
for a built-in, so a plugin runs wherever a policy name is taken (simulate, compare, sweep, serve).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from dlsched.core.errors import ConfigError, did_you_mean
from dlsched.core.policy import Named, Policy
from dlsched.policies.plugins import PluginPolicy, Plugins, discover

# name -> (module, factory function, one-line description)
POLICIES: dict[str, tuple[str, str, str]] = {
    "fifo": ("dlsched.policies.fifo", "fifo", "first come first served, gang, no backfill"),
    "srtf": ("dlsched.policies.srtf", "srtf", "shortest remaining time first, preemptive (oracle)"),
    "drf": ("dlsched.policies.drf", "drf", "dominant resource fairness, progressive filling"),
    "tiresias": ("dlsched.policies.tiresias", "tiresias", "discretized 2D-LAS with starvation promotion"),
    "optimus": ("dlsched.policies.optimus", "optimus", "fitted speed/convergence models, greedy marginal gain"),
    "kube-default": ("dlsched.policies.kube_default", "kube_default", "default Kubernetes: pod by pod, spreading, no gang"),
    "dl2": ("dlsched.policies.dl2", "dl2", "DL2: neural network (warm-up on DRF, then RL) sizing workers/PSs every slot"),
    "dragon": ("dlsched.policies.dragon", "dragon", "DRAGON: dependency-aware gang, locality placement, load-aware scaling"),
    "oasis": ("dlsched.policies.oasis", "oasis", "OASiS: online primal-dual admission, committed per-slot plans (utility-driven; oracle on jobs without declared work)"),
    "rrh": ("dlsched.policies.rrh", "rrh", "risk-reward heuristic: admit/continue/pause by utility minus delay cost (oracle on jobs without declared work)"),
    "dorm": ("dlsched.policies.dorm", "dorm", "Dorm: MILP re-optimising counts for utilisation under fairness/adjustment limits"),
    "qos": ("dlsched.policies.qos", "qos", "QoS deadline framework: EDF + feasibility + predictive autoscaling"),
    "edf": ("dlsched.policies.edf", "edf", "earliest deadline first at requested sizes, no autoscaling"),
    "kube-autoscale": ("dlsched.policies.qos", "kube_autoscale", "arrival order, spreading, with the QoS autoscaler"),
    "dual-agent": ("dlsched.policies.dual_agent", "dual_agent", "Dual-Agent-style: learned ordering agent + placement agent with a GP of machine speeds (MAPPO)"),
    "tiresias-ll": ("dlsched.policies.tiresias", "tiresias_ll", "Tiresias ordering, least-loaded placement (heterogeneity-blind)"),
    "tiresias-random": ("dlsched.policies.hetero_random", "random_place", "Tiresias ordering, random placement (seeded per run)"),
    "gavel-style": ("dlsched.policies.gavel_style", "gavel_style", "Tiresias ordering, placement by per-GPU-type throughput (Gavel-lite; optionally per dollar)"),
    "pal-style": ("dlsched.policies.pal_style", "pal_style", "Tiresias ordering, placement by type throughput x measured machine speed (PAL-like)"),
}

#: Policies that decide by job utility: a comparison including one gives every job without a
#: utility the duration-derived default (`core.utility.with_default_utilities`) before any policy
#: runs, so all policies in it are scored on the same utilities.
UTILITY_DRIVEN: frozenset[str] = frozenset({"oasis", "rrh"})

#: Policies whose mechanism is resizing jobs (autoscaling, elastic sizing): a run that gives them
#: rigid jobs says so, since there they have nothing to scale (`experiment.rigid_note`).
RESIZING: frozenset[str] = frozenset({"optimus", "dl2", "dragon", "qos", "kube-autoscale", "oasis", "dorm"})

#: The six baselines.
BASELINES: tuple[str, ...] = ("fifo", "srtf", "drf", "tiresias", "optimus", "kube-default")
#: The published systems, each a policy over the same core.
PUBLISHED: tuple[str, ...] = ("dragon", "qos", "oasis", "dl2", "dual-agent")
#: Placement baselines for heterogeneous, fluctuating clusters: one ordering (Tiresias), four placements.
HETERO_BASELINES: tuple[str, ...] = ("tiresias-ll", "tiresias-random", "gavel-style", "pal-style")
#: What `dlsched simulate` compares when no policy is named: the published systems next to the baselines.
DEFAULT_POLICIES: tuple[str, ...] = BASELINES + PUBLISHED


def make_policy(name: str, **options: Any) -> Policy:
    """Build a policy by name; unknown names and options are a ConfigError naming the choices."""
    key = check_policy(name)
    fn = _factory(key)
    check_options(key, options)
    policy = fn(**options)
    if key in POLICIES:
        return policy
    if not isinstance(policy, Policy):
        raise ConfigError(f"plugin policy {key!r} ({_plugin(key).where}) returned a {type(policy).__name__!r} "
                          "object, not a dlsched Policy (subclass dlsched.core.policy.Policy)")
    # a plugin's rows carry the name the user typed, whatever the object calls itself
    return policy if policy.name == key else Named(policy, key)


def check_policy(name: str) -> str:
    """The registry key of a policy name a user typed; a ConfigError with a did-you-mean if unknown
    (or naming the plugin's distribution and entry point if a plugin by that name cannot be used)."""
    key = str(name).strip().lower()
    plugins = _plugins()  # also for a built-in name: a plugin that claims it is warned about once
    if key in POLICIES or plugins.get(key) is not None:
        return key
    known = policy_names()
    raise ConfigError(f"unknown policy {name!r}{did_you_mean(key, known)}; known: {', '.join(known)}")


def check_options(name: str, options: dict[str, Any]) -> None:
    """Refuse an option the policy's factory does not take, before anything runs (a typo in the
    last policy's options must not surface after the first ones have run for minutes). A factory
    taking `**kwargs` (a plugin's may) checks its own."""
    key = check_policy(name)
    params = inspect.signature(_factory(key)).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    named = [n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    bad = [k for k in options if k not in named]
    if bad:
        raise ConfigError(
            f"policy {key!r} has no option {bad[0]!r}{did_you_mean(bad[0], named)}; "
            f"its options: {', '.join(named) or 'none'}"
        )


def policy_names() -> list[str]:
    """Every policy name one can type: the built-ins, then the installed plugins (by name)."""
    return [*POLICIES, *sorted(_plugins().usable)]


def describe_policies() -> list[tuple[str, str, str]]:
    """(name, description, kind) of every policy, as `dlsched policies` lists them: the built-ins
    (kind "baseline", "published system" or ""), then the plugins ("plugin: <distribution>").
    Listing imports each plugin for its description; one that fails is left out with its warning
    (a broken plugin must not hide the built-ins)."""
    rows = [(name, desc, "baseline" if name in BASELINES else "published system" if name in PUBLISHED else "")
            for name, (_, _, desc) in POLICIES.items()]
    for name, plugin in sorted(_plugins().usable.items()):
        try:
            rows.append((name, plugin.description(), f"plugin: {plugin.distribution}"))
        except ConfigError:
            continue  # warned once, naming the entry point, when it failed to load
    return rows


def _plugins() -> Plugins:
    return discover(POLICIES)


def _plugin(key: str) -> PluginPolicy:
    """The plugin registered as `key` (a key `check_policy` returned that is not a built-in)."""
    plugin = _plugins().get(key)
    if plugin is None:
        raise ConfigError(f"unknown policy {key!r}; known: {', '.join(policy_names())}")
    return plugin


def _factory(key: str) -> Callable[..., Policy]:
    if key not in POLICIES:
        return _plugin(key).factory()
    module, factory, _ = POLICIES[key]
    return getattr(importlib.import_module(module), factory)


def parse_policy_list(text: str) -> list[str]:
    """The policy names of a comma-separated list (`-p fifo,drf`); an empty list is an error."""
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if not names:
        raise ConfigError(f"no policy given in {text!r}; known: {', '.join(policy_names())}")
    return [check_policy(n) for n in names]
