"""The two doors to the store — the REST API (FastAPI, with its token, the status page and the
Prometheus metrics) and the DLJob door (kubectl: the CRD in `dljob_crd`, kept in step by `dljobs`)."""

from dlsched.live.api.app import create_app

__all__ = ["create_app"]
