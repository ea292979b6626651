"""Reruns of the papers' evaluations (one module per paper), used by `dlsched experiment ...`.

Each module exposes a plain function that runs the experiment and writes its table and plots to a
folder, so benchmarks and tests call the same code as the command line.
"""
