"""`dlsched experiment ...`: rerun a paper's evaluation on our simulator and write its figures.

One command per paper; the work itself lives in `dlsched.experiments.<paper>` so that benchmarks
and tests run the same code.
"""

from __future__ import annotations

import typer

experiment_app = typer.Typer(
    help="Rerun a published system's evaluation (its setup, its baselines) and write tables and plots.",
    add_completion=False,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
)

# Commands are added below, one function per experiment, each decorated with
# @experiment_app.command("<name>") and dlsched.cli_support.friendly.
