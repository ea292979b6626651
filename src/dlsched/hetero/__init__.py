"""Heterogeneous, fluctuating GPU clusters: per-machine speed factors and their change over time
(`speeds`), per-GPU-type prices (`prices`) and named scenarios from homogeneous to strongly
heterogeneous (`scenarios`). See docs/HETERO.md."""
