"""The workload options `dlsched simulate`, `compare` and `replay` share: one definition each, so
the three commands say the same thing about a flag (and `cli_replay` need not import `cli`)."""

import typer

_TRACE = typer.Option(None, "--trace", "-t", help="Trace file (Philly, ITP, Alibaba 2023, Gavel, Pollux, DL2 CSV or dlsched CSV). Default: the embedded ITP slice.")
_TRACE_FORMAT = typer.Option(None, "--trace-format", help="Trace format when it cannot be detected (see `dlsched trace formats`).")
_CLUSTER = typer.Option(None, "--cluster", "-c", help="Cluster preset name or YAML file (see `dlsched presets`). Default: the trace's own preset.")
_OUT = typer.Option(None, "--out", "-o", help="Report folder (default: dlsched-report, or the first dlsched-report-N "
                    "that holds no report yet: an earlier run's report is never replaced silently).")
_OVERWRITE = typer.Option(False, "--overwrite", help="Replace the report files in a folder that already holds a report "
                          "(needed for an --out folder holding one; without --out: write to dlsched-report itself).")
_SEED = typer.Option(None, "--seed", help="Seed for the engine and policies (default 0).")
_CONFIG = typer.Option(None, "--config", help="YAML run config (trace, cluster, load, policies, sim, policy_options, throughput).")
_LIMIT = typer.Option(None, "--limit", help="Use only the first N jobs of the trace.")
_ELASTIC = typer.Option(None, "--elastic/--rigid", help="Default: jobs on measured curves are elastic (1 GPU up to where their curve stops improving), "
                        "duration-only jobs rigid. --elastic: every job elastic (duration-only ones 1..2x requested); --rigid: every job at its requested size.")
_PROFILES = typer.Option(None, "--profiles", help="Measured job behaviour: 'draw' (default: jobs whose trace names a measured "
                         "model run on its ElasticFlow curve, e.g. the ITP deadline traces, and every duration-only job, e.g. "
                         "Philly's, on a measured curve that fits its size, drawn with --seed and recorded in jobs.csv, as "
                         "Gavel and Pollux did), 'auto' (named models only: other jobs keep the trace's duration at their "
                         "recorded size, rigid), 'off' (duration-only, the old baseline).")
_LOAD = typer.Option(None, "--load", help="Size the cluster to this offered load (GPU-time the jobs demand / GPU-time the "
                     "cluster has while they arrive; for a burst of arrivals shorter than the median job, until the "
                     "last job could end), from whole nodes of the chosen cluster's node shapes, e.g. 0.8; "
                     "0.05 to 2. Every run prints its offered load and warns below 0.3 (policies barely differ) "
                     "and above 1.2 (overloaded: the queue grows for the whole arrival span).")
_VARIABILITY = typer.Option(None, "--variability", help="Machine speeds (docs/HETERO.md): 'static' (same-model GPUs "
                            "~8% apart, rare 1.5x-slow outliers), 'fluctuating' (plus drift, stragglers, contention), "
                            "'strong', or 'steady'; drawn by --seed, with per-GPU-type prices so fees are reported. "
                            "Default: the cluster's own speeds, no fees.")
_FORMAT = typer.Option("table", "--format", "-f", help="'table' (the deciding columns that fit the terminal, a legend, "
                       "and the report), or the rows alone on stdout for scripts: 'csv' (summary.csv's columns, hours), "
                       "'markdown', 'json' (every summary value; units in the keys: _s seconds, _h hours, _usd; "
                       "utilization and ratios 0..1). The report is written in every format.")
_SEEDS = typer.Option(None, "--seeds", help="Run every policy with N seeds (--seed, --seed + 1, ...: the engine, the "
                      "policies and any drawn profiles or machine speeds) and show the means with 95% Student-t "
                      "intervals; the report's plots and jobs.csv are the first seed's, seeds.csv and intervals.csv "
                      "hold the rest. Default 1.")
_COLUMNS = typer.Option(None, "--columns", help="Comma-separated columns for the table, csv or markdown output, by "
                        "summary.csv's header (e.g. mean_jct_h,p99_jct_h,preemptions). Default: as many deciding "
                        "columns as fit the terminal.")
_TRACES = typer.Option(None, "--traces", help="Shared traces folder (measured throughput tables, DL2 constants, Pollux profiles). "
                       "Default: $DLSCHED_TRACES, else ../shared/traces beside the source checkout; never the working directory.")
