"""The live side: the same Policy objects as the simulator, driving real PyTorch training jobs.

- `spec`: what a user submits (`TrainJob`), and how it maps to the scheduler's `JobSpec`.
- `backend`: the interface every backend implements (local processes, Ray; Kubernetes later).
- `progress_log`: reading what a trainer writes into its job directory.
- `controller`: observe → snapshot → policy → plan → diff → actions, on wall-clock time.
- `store`, `api`, `service`: the persistent job store, the REST API and `dlsched serve`.
"""
