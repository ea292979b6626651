"""Model names and per-model defaults, importable without torch (so bad arguments fail fast)."""

MODELS: tuple[str, ...] = ("mlp", "cnn", "transformer")
#: `--width` default per model: MLP hidden units, CNN channels, transformer d_model.
DEFAULT_WIDTH = {"mlp": 128, "cnn": 16, "transformer": 64}
DEFAULT_LR = {"mlp": 3e-3, "cnn": 3e-3, "transformer": 3e-3}
