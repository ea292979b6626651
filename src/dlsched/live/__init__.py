"""The live side: the same Policy objects as the simulator, driving real PyTorch training jobs.

- `spec`: what a user submits (`TrainJob`), and how it maps to the scheduler's `JobSpec`.
- `backend`: the interface every backend implements (local processes, Ray; Kubernetes later).
- the trainer's job-directory files are read with `dlsched.trainer.protocol` (the trainer owns its protocol).
- `controller`: observe → snapshot → policy → plan → diff → actions, on wall-clock time.
- `store`, `api`, `service`: the persistent job store, the REST API and `dlsched serve`.
"""
