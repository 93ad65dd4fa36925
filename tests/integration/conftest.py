"""Fixtures shared by the chat-completions tests: the openai SDK client and the served model name."""

from __future__ import annotations

import pytest
from openai import OpenAI


@pytest.fixture(scope="module")
def client(server) -> OpenAI:
    """The real openai SDK pointed at the loopback server (no retries, long timeout: real models)."""
    return OpenAI(base_url=server.base_url + "/v1", api_key="EMPTY", max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def model(deploy_config) -> str:
    """The model name the default config serves."""
    return deploy_config.server.served_model_name
