"""Learned models: what a trained policy needs at decision time — its networks, the features and
slot state they read, the file format they are saved in, and the one learning step that online
fine-tuning shares with offline training.

Why a package of its own: `dlsched.policies` imports these to decide, and `dlsched.rl` (environments,
rollouts, the training loops) imports both these and the policies (teachers, variants), so the
dependency runs one way: policies → models ← rl → policies. `tests/test_import_layers.py` holds it.
"""
