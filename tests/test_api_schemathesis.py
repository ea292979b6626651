"""Property-based API test: schemathesis generates valid and invalid requests for every operation
of the OpenAPI schema. No response may be a server error, and every response must be one the
schema documents (status code, content type, body shape); invalid input must be refused."""

from __future__ import annotations

import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    negative_data_rejection,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from dlsched.live.api import create_app
from dlsched.live.store import Store
from tests.test_api import FakeController

# One in-memory store for the whole module: schemathesis builds its tests at import time.
app = create_app(Store("sqlite://"), FakeController())
schema = schemathesis.openapi.from_asgi("/openapi.json", app)

CHECKS = [not_a_server_error, response_schema_conformance, status_code_conformance, content_type_conformance,
          negative_data_rejection]


@schema.parametrize()
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_server_errors_and_responses_match_the_schema(case):
    case.call_and_validate(checks=CHECKS)
