"""The deploy config: pydantic schema (:mod:`app.config.schema`, ``remote`` in :mod:`app.config.remote`) and YAML loader (:mod:`app.config.loader`).

Usage::

    from app.config import load_deploy_config
    cfg = load_deploy_config("configs/minicpmo_4_5.yaml", '{"0": {"max_num_seqs": 2}}')
    cfg.stage(0).max_num_seqs, cfg.duplex_session.max_sessions
"""

from app.config.errors import ConfigError
from app.config.loader import (
    CONFIGS_DIR,
    DEFAULT_CONFIG_PATH,
    apply_platform,
    apply_stage_overrides,
    deep_merge,
    load_deploy_config,
    parse_deploy_config,
    parse_stage_overrides,
    resolve_yaml,
)
from app.config.remote import RemoteBackendConfig, RemoteConfig
from app.config.schema import (
    STAGE_IDS,
    STAGE_NAMES,
    ConnectorsConfig,
    DeployConfig,
    DuplexSessionConfig,
    LimitsConfig,
    SamplingDefaults,
    ServerConfig,
    StageConfig,
    TurnPolicyConfig,
    UIConfig,
)

__all__ = [
    "CONFIGS_DIR",
    "DEFAULT_CONFIG_PATH",
    "STAGE_IDS",
    "STAGE_NAMES",
    "ConfigError",
    "ConnectorsConfig",
    "DeployConfig",
    "DuplexSessionConfig",
    "LimitsConfig",
    "RemoteBackendConfig",
    "RemoteConfig",
    "SamplingDefaults",
    "ServerConfig",
    "StageConfig",
    "TurnPolicyConfig",
    "UIConfig",
    "apply_platform",
    "apply_stage_overrides",
    "deep_merge",
    "load_deploy_config",
    "parse_deploy_config",
    "parse_stage_overrides",
    "resolve_yaml",
]
