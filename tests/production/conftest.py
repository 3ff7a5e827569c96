"""Fixtures of the production tests: deployments (tests/support/deployment.py) on the session's emulator."""

from tests.support.deployment import deployment  # noqa: F401 - fixture
from tests.support.gcs_emulator import (  # noqa: F401 - fixtures
    fake_gcs_endpoint,
    gcs_bucket,
)
