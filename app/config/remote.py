"""The ``remote`` section of the deploy config (ours): the vLLM-Omni server(s) a front forwards to.

Kept apart from :mod:`app.config.schema` (which imports :class:`RemoteConfig` for
``DeployConfig.remote``); same rules as its own sections: frozen, strict, unknown keys rejected.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

_OURS = ConfigDict(frozen=True, strict=True, extra="forbid")
"""As ``app.config.schema._OURS`` (not imported from there: that module imports this one)."""

PosInt = Annotated[int, Field(gt=0)]
PosFloat = Annotated[float, Field(gt=0)]


def _http_base_url(value: str) -> str:
    if not value.startswith(("http://", "https://")) or len(value.split("://", 1)[1]) == 0:
        raise ValueError(f"must be an http(s):// base URL, got {value!r}")
    return value.rstrip("/")


class RemoteBackendConfig(BaseModel):
    """One entry of ``remote.urls`` (ours): a vLLM-Omni server (or another instance of this app)."""

    model_config = _OURS

    url: str
    """http(s) base URL, e.g. ``http://10.0.0.7:8091``."""
    name: Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9._:-]+$")] | None = None
    """Label in ``/health``, ``/metrics`` and the admin routes; default ``host:port`` of ``url``."""
    api_key: str | None = None
    """Bearer key for this backend; default ``remote.api_key``."""
    model: Annotated[str, Field(min_length=1)] | None = None
    """The name this backend serves its model under; default ``remote.model``, else the first id
    on its ``/v1/models``."""
    weight: PosFloat = 1.0
    """Share of the load relative to the others: free slots count times it when placing a session,
    chat load counts divided by it."""
    max_sessions: PosInt | None = None
    """Cap on sessions this front opens there; default: what the backend says (its ``/health``,
    its sessions' ``capabilities.max_sessions``)."""
    drain: bool = False
    """Start drained: no new sessions or chats go there."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        return _http_base_url(value)


class RemoteConfig(BaseModel):
    """``remote`` (ours): the vLLM-Omni server(s) the ``vllm_omni`` family forwards to.

    Exactly one of ``url`` (one server) and ``urls`` (a pool) is set. ``urls`` entries are URLs or
    :class:`RemoteBackendConfig` mappings; :meth:`backends` gives both forms as the latter.
    """

    model_config = _OURS

    url: str | None = None
    """http(s) base URL of the one server, e.g. ``http://127.0.0.1:8091``."""
    urls: list[str | RemoteBackendConfig] | None = None
    """The pool: each a URL or ``{url, name, api_key, model, weight, max_sessions, drain}``."""
    model: Annotated[str, Field(min_length=1)] | None = None
    api_key: str | None = None
    timeout_s: PosFloat = 60.0
    ref_audio: Annotated[str, Field(min_length=1)] | None = None
    """Reference voice (path or data URL) sent as the session ``ref_audio``."""
    health_interval_s: PosFloat = 2.0
    """How often each backend's ``/health`` is probed, seconds."""
    admin_api_key: Annotated[str, Field(min_length=8)] | None = None
    """Bearer key of the ``/admin/backends`` routes (drain, undrain); unset = those routes are off.
    Separate from the users' API key."""

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        return None if value is None else _http_base_url(value)

    @field_validator("urls")
    @classmethod
    def _pool_urls(cls, value: list[Any] | None) -> list[Any] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("must list at least one backend")
        return [_http_base_url(v) if isinstance(v, str) else v for v in value]

    @model_validator(mode="after")
    def _one_of_url_urls(self) -> RemoteConfig:
        if (self.url is None) == (self.urls is None):
            raise ValueError("set exactly one of 'url' (one server) and 'urls' (a pool)")
        names = [b.name or b.url for b in self.backends()]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"backends must differ in url (or name): {', '.join(dupes)}")
        return self

    def backends(self) -> list[RemoteBackendConfig]:
        """Every backend as a :class:`RemoteBackendConfig` (``url`` alone gives a pool of one)."""
        if self.urls is None:
            return [RemoteBackendConfig(url=self.url or "")]
        return [RemoteBackendConfig(url=v) if isinstance(v, str) else v for v in self.urls]
