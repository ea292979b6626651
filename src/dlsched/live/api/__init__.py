"""The REST API (FastAPI), its token, the status page and the Prometheus metrics."""

from dlsched.live.api.app import create_app

__all__ = ["create_app"]
