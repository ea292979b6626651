"""Reinforcement-learning schedulers: the slot builder, a Gymnasium environment over the simulator, DL2."""
