"""Sweeps: a grid of cells (policy × trace × cluster × load × seed) run as Ray tasks, resumable.

`grid` reads the YAML, `cell` says what one cell runs, `store` keeps the results table, `runner`
runs the cells not yet in it, `report` compares policies across cells. See docs/SWEEP.md.
"""
