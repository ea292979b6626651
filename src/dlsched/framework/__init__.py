"""The one scheduling core both drivers share: the job lifecycle and the accounting of used and
held resources (`ClusterState`), plan validation, the actions a plan turns into, the trigger rule,
feasibility and packing. The simulator (`dlsched.sim`) and the live controller (`dlsched.live`)
are thin drivers over it; policies (`dlsched.policies`) see only its read-only snapshots."""
