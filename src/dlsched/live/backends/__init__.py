"""Backends: what turns the controller's Actions into running trainers and reports back.

`base` is the interface (one batched `apply` per decision, `observe` → Observations, node
events); `ranks` the judging shared by backends that run a job as rank processes; one module per
backend (`dry`, `local`, `ray_backend`); `registry` names them and their options for
`dlsched serve --backend NAME`.
"""
