"""Pydantic models of the deploy config (``configs/*.yaml``).

Field names follow vLLM-Omni's deploy YAMLs (``vllm_omni/deploy/minicpmo_4_5*.yaml``, schema in
``vllm_omni/config/stage_config.py``: ``StageDeployConfig``, ``DuplexSessionRuntimeConfig``,
``DeployConfig``) wherever the meaning is the same, so one file can be read against the other.
Fields marked "ours" have no vLLM-Omni counterpart.

Every model is frozen and strict (``"4"`` or ``true`` is not an int). Our own sections reject
unknown keys so typos fail loudly. Keys that only a vLLM-Omni engine reads are accepted and
stored: every top-level key vLLM-Omni's ``DeployConfig`` knows is declared here; stage entries
and ``default_sampling_params`` keep undeclared keys in ``model_extra`` (engine pass-through),
except for ``model_family: tiny``, whose in-process stages read none of them, where they are
errors. Named connector definitions (``connectors.<name>: {name, extra}``) are stored likewise.
"""

from __future__ import annotations

import difflib
import itertools
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    field_validator,
    model_validator,
)

from app.config.remote import RemoteConfig
from app.constants import (
    ALLOWED_UNIT_MS,
    DEFAULT_CODEC_CHUNK_FRAMES,
    DEFAULT_CODEC_LEFT_CONTEXT_FRAMES,
)

MiB = 1024 * 1024

STAGE_IDS: tuple[int, int, int] = (0, 1, 2)
"""Stage ids every deploy config has: 0 Thinker, 1 Talker, 2 Code2Wav."""

STAGE_NAMES: dict[int, str] = {0: "thinker", 1: "talker", 2: "code2wav"}
"""Role of each stage id."""

TINY_PIPELINE = "tiny"
"""``pipeline`` value of the embedded tiny family (any other value names a vLLM-Omni pipeline)."""

PosInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
PosFloat = Annotated[float, Field(gt=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]

_OURS = ConfigDict(frozen=True, strict=True, extra="forbid")
_PASS_THROUGH = ConfigDict(frozen=True, strict=True, extra="allow")


def _hint(key: str, model: type[BaseModel]) -> str:
    match = difflib.get_close_matches(key, list(model.model_fields), n=1, cutoff=0.75)
    return f"; did you mean {match[0]!r}?" if match else ""


class SamplingDefaults(BaseModel):
    """A stage's ``default_sampling_params`` (vLLM ``SamplingParams`` names; ``None`` = unset).

    Other vLLM / diffusion sampling keys (``min_p``, ``ignore_eos``, ``extra_args`` …) are kept in
    ``model_extra`` and passed through by engine-backed families.
    """

    model_config = _PASS_THROUGH

    temperature: Annotated[float, Field(ge=0)] | None = None
    top_p: Fraction | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    """``-1`` (or ``0``) disables top-k, as in vLLM."""
    repetition_penalty: PosFloat | None = None
    min_tokens: NonNegInt | None = None
    max_tokens: PosInt | None = None
    stop_token_ids: list[NonNegInt] | None = None
    seed: int | None = None
    detokenize: bool | None = None

    @model_validator(mode="after")
    def _min_le_max(self) -> SamplingDefaults:
        if self.min_tokens is not None and self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens ({self.min_tokens}) exceeds max_tokens ({self.max_tokens})")
        return self

    def as_dict(self) -> dict[str, Any]:
        """The keys that are set (declared and pass-through), as vLLM-Omni merges them into ``SamplingParams``."""
        return self.model_dump(exclude_none=True)


class StageConfig(BaseModel):
    """One ``stages[]`` entry (vLLM-Omni ``StageDeployConfig``).

    Engine-only keys not declared here (``hf_overrides``, ``skip_mm_profiling`` …) are kept in
    ``model_extra`` for engine-backed families and rejected for ``model_family: tiny``.
    """

    model_config = _PASS_THROUGH

    stage_id: Annotated[int, Field(ge=0)]
    max_num_seqs: PosInt = 4
    """Most requests (sessions) the stage batches per step."""
    devices: Annotated[str, Field(min_length=1)] | None = None
    """Device list, e.g. ``"0"`` or ``"0,1,2,3"`` (CUDA_VISIBLE_DEVICES style)."""
    num_replicas: PosInt = 1
    gpu_memory_utilization: Fraction | None = None
    enforce_eager: bool | None = None
    tensor_parallel_size: PosInt | None = None
    max_num_batched_tokens: PosInt | None = None
    max_model_len: PosInt | None = None
    async_scheduling: bool | None = None
    enable_chunked_prefill: bool | None = None
    async_chunk: bool | None = None
    """``false`` opts this stage out of the pipeline-wide ``async_chunk``."""
    env: dict[str, Any] | None = None
    output_connectors: dict[str, str] | None = None
    input_connectors: dict[str, str] | None = None
    interleave_mm_strings: bool | None = None
    media_io_kwargs: dict[str, Any] | None = None
    limit_mm_per_prompt: dict[str, NonNegInt] | None = None
    compilation_config: dict[str, Any] | None = None
    additional_config: dict[str, Any] | None = None
    kv_cache_memory_bytes: PosInt | None = None
    default_sampling_params: SamplingDefaults = Field(default_factory=SamplingDefaults)
    inbox_size: PosInt = 64
    """Ours: length of the stage worker's bounded inbox queue (full => backpressure)."""
    stage_timeout_s: PosFloat | None = 60.0
    """Ours: watchdog limit of one stage call, seconds (null: none). A call that runs longer fails
    its request; the stage's queued work moves to a fresh worker thread (see ``pipeline/workers.py``)."""

    @property
    def name(self) -> str:
        """Role of the stage: ``thinker``, ``talker`` or ``code2wav``."""
        return STAGE_NAMES.get(self.stage_id, f"stage{self.stage_id}")

    @property
    def engine_extras(self) -> dict[str, Any]:
        """Undeclared (engine pass-through) keys of this stage entry."""
        return dict(self.model_extra or {})


class DuplexSessionConfig(BaseModel):
    """``duplex_session``: server-owned session lifecycle and buffer limits.

    The first block mirrors vLLM-Omni's ``DuplexSessionRuntimeConfig`` (same names, same
    defaults, except ``max_sessions``: 4 here, 1 there; a loaded config without ``max_sessions``
    derives it from the stage capacities, see :class:`DeployConfig`).
    """

    model_config = _OURS

    max_sessions: PosInt = 4
    idle_ttl_s: PosFloat | None = 300.0
    """Idle session lifetime, s; ``None`` disables the idle reaper."""
    disconnect_grace_s: PosFloat = 30.0
    reaper_interval_s: PosFloat = 5.0
    resume_replay_ttl_s: PosFloat = 60.0
    resume_replay_max_bytes_per_session: PosInt = 8 * MiB
    max_pending_input_bytes_per_session: PosInt = 16 * MiB
    max_pending_turns_per_session: PosInt = 4
    completed_append_cache_size: PosInt = 256
    server_vad_model_path: Annotated[str, Field(min_length=1)] | None = None
    warmup_frames: int = 0
    """vLLM-Omni startup warmup units; 0 = none, negative disables every warmup."""
    # ---- ours ----
    chunk_period_ms: StrictInt = 1000
    """Unit length, ms; one of ``app.constants.ALLOWED_UNIT_MS``."""
    max_message_bytes: PosInt = 4 * MiB
    """Largest realtime WebSocket frame accepted; larger => ``event_too_large``."""
    inbox_size: PosInt = 256
    """Bounded command queue per session."""
    output_buffer_events: PosInt = 512
    """Bounded event buffer per session (vLLM-Omni's output buffer is 512 events)."""
    max_context_tokens: PosInt | None = None
    """Thinker context budget per session, tokens; ``None`` = the family's declared capability."""
    context_watermark_ratio: Fraction = 0.85
    """Fraction of the Thinker context at which the session starts reclaiming / refusing."""
    max_frames_per_unit: PosInt = 2
    """Images accepted per unit (base frame + optional composite on the wire)."""
    max_sessions_per_client: PosInt | None = None
    """Concurrent sessions one API key (or, with no key configured, one client address) may hold,
    realtime and page together; None = only ``max_sessions``. Refused with ``resource_exhausted``."""
    max_session_s: PosFloat | None = None
    """Longest a session may last, s (a public demo); then ``session.expired{reason:
    "max_session_length"}``. None = no limit."""

    @field_validator("chunk_period_ms")
    @classmethod
    def _allowed_unit(cls, value: int) -> int:
        if value not in ALLOWED_UNIT_MS:
            raise ValueError(f"must be one of {list(ALLOWED_UNIT_MS)} ms, got {value}")
        return value


class ConnectorsConfig(BaseModel):
    """``connectors``: Talker -> Code2Wav chunking, plus vLLM-Omni's named connector definitions.

    vLLM-Omni writes the codec knobs inside a named connector
    (``connectors.connector_of_shared_memory.extra.codec_chunk_frames``); we also accept them flat
    (``connectors.codec_chunk_frames``). Absent flat values are lifted from the named connectors;
    a flat value that disagrees with a named one is an error.
    """

    model_config = _PASS_THROUGH

    codec_chunk_frames: PosInt = DEFAULT_CODEC_CHUNK_FRAMES
    """Codec frames per Talker -> Code2Wav chunk (25 Hz => 25 frames is ~1 s of speech)."""
    codec_left_context_frames: NonNegInt = DEFAULT_CODEC_LEFT_CONTEXT_FRAMES
    """Frames of left context sent with each chunk."""

    @model_validator(mode="before")
    @classmethod
    def _lift_named(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("codec_chunk_frames", "codec_left_context_frames"):
            found: dict[str, Any] = {}
            for name, spec in data.items():
                if isinstance(spec, dict) and isinstance(spec.get("extra"), dict) and key in spec["extra"]:
                    found[name] = spec["extra"][key]
            values = set(map(repr, found.values()))
            if key in data and found and values != {repr(data[key])}:
                raise ValueError(f"connectors.{key} ({data[key]!r}) disagrees with named connectors {found}")
            if key not in data and found:
                if len(values) > 1:
                    raise ValueError(f"named connectors disagree on {key}: {found}")
                data[key] = next(iter(found.values()))
        return data

    @model_validator(mode="after")
    def _check_named(self) -> ConnectorsConfig:
        for name, spec in (self.model_extra or {}).items():
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
                raise ValueError(f"connectors.{name}: a named connector must be a mapping with a string 'name'")  # noqa: TRY004
        if self.codec_left_context_frames >= self.codec_chunk_frames:
            raise ValueError(
                f"connectors.codec_left_context_frames ({self.codec_left_context_frames}) must be smaller "
                f"than codec_chunk_frames ({self.codec_chunk_frames})"
            )
        return self

    @property
    def named(self) -> dict[str, dict[str, Any]]:
        """vLLM-Omni named connector definitions, e.g. ``{"connector_of_shared_memory": {...}}``."""
        return dict(self.model_extra or {})


class ServerConfig(BaseModel):
    """``server`` (ours): where ``python -m app serve`` listens and the model name it reports."""

    model_config = _OURS

    host: Annotated[str, Field(min_length=1)] = "0.0.0.0"
    port: Annotated[int, Field(ge=1, le=65535)] = 7860
    served_model_name: Annotated[str, Field(min_length=1)] = "tiny-omni"
    served_model_aliases: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    """Further names ``/v1/models`` lists and the routes accept (``--served-model-name A B`` -> ``B``)."""
    api_key: Annotated[str, Field(min_length=1)] | list[Annotated[str, Field(min_length=1)]] | None = None
    """Key(s) every ``/v1/*`` route, the realtime WebSocket and the page need (vLLM's ``--api-key``);
    None = open. ``python -m app serve --api-key`` and env ``OMNI_API_KEY`` override it."""
    public_page: bool = False
    """With a key set: serve the page (and its Gradio / WebRTC routes) without one (a public demo
    whose API stays keyed). Without a key the page is open anyway."""
    metrics_require_key: bool = False
    """With a key set: ``/metrics`` needs it too (``/health`` is always open)."""
    ssl_keyfile: Annotated[str, Field(min_length=1)] | None = None
    ssl_certfile: Annotated[str, Field(min_length=1)] | None = None
    """TLS key and certificate (PEM) for https/wss; browsers allow the microphone only on https or localhost."""
    malloc_arena_max: Annotated[int, Field(ge=0, le=64)] = 2
    """glibc malloc arenas for the server process (0 = glibc's default, 8 x cores; env
    ``MALLOC_ARENA_MAX`` wins). 2 keeps a long run's RSS flat: see :mod:`app.backend.malloc`."""
    ice_servers: list[dict[str, Any]] = Field(default_factory=list)
    """The page's WebRTC ICE servers (``[{"urls": "stun:host:3478"}, {"urls": "turn:h", "username": u,
    "credential": c}]``); empty = host candidates only, nothing leaves the host."""

    @property
    def api_keys(self) -> tuple[str, ...]:
        """The configured keys (empty: no key needed)."""
        if self.api_key is None:
            return ()
        return (self.api_key,) if isinstance(self.api_key, str) else tuple(self.api_key)

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("server.ssl_keyfile and server.ssl_certfile go together")
        for i, ice in enumerate(self.ice_servers):
            if not isinstance(ice.get("urls"), str | list) or not ice["urls"]:
                raise ValueError(f"server.ice_servers[{i}]: needs 'urls' (a STUN/TURN URL or a list of them)")
        return self


class LimitsConfig(BaseModel):
    """``limits`` (ours): request and media limits; exceeding one is an HTTP 400 / realtime error."""

    model_config = _OURS

    max_request_bytes: PosInt = 32 * MiB
    max_audio_seconds: PosFloat = 120.0
    max_image_pixels: PosInt = 40_000_000
    max_image_bytes: PosInt = 16 * MiB
    max_video_seconds: PosFloat = 60.0
    max_video_frames: PosInt = 64
    max_messages: PosInt = 64
    max_text_chars: PosInt = 16_000
    """Text characters a chat request may carry in all its messages (larger => 400)."""
    allowed_local_media_path: Annotated[str, Field(min_length=1)] | None = None
    """Directory ``file://`` media may be read from (vLLM's ``--allowed-local-media-path``); None = none."""
    allow_remote_media: bool = False
    """Whether ``http(s)://`` media URLs are fetched."""
    remote_media_timeout_s: PosFloat = 10.0


class TurnPolicyConfig(BaseModel):
    """``turn_policy`` (ours): the tiny family's VAD-based per-unit speak/listen policy."""

    model_config = _OURS

    detector: Literal["silence", "manual", "smart_turn"] = "silence"
    """Who decides that the user's turn has ended: ``silence`` = the VAD silence timer below;
    ``manual`` = only ``input_audio_buffer.commit`` ends a turn (push-to-talk; speech onsets are
    still detected for barge-in and overlap); ``smart_turn`` = VAD pauses scored by the Smart Turn
    v3.2 end-of-turn model (``smart_turn_*``, ``max_pause_ms``). The family must declare it."""
    smart_turn_checks_ms: list[PosFloat] = Field(default_factory=lambda: [200.0, 400.0, 700.0, 1100.0, 1600.0])
    """``smart_turn``: silence after the user's last speech at which the pause is scored, ms, increasing."""
    smart_turn_thresholds: list[Annotated[float, Field(gt=0, lt=1)]] = Field(
        default_factory=lambda: [0.9, 0.8, 0.6, 0.4, 0.25])
    """``smart_turn``: the probability that ends the turn at each check (one per check; falling)."""
    smart_turn_text_cues: bool = True
    """``smart_turn``: also read the transcript of the utterance so far: words that trail off ("... to",
    "... the", a trailing comma) keep the turn open, a finished sentence ends it at
    ``smart_turn_sentence_threshold`` (the decision then waits for the transcript)."""
    smart_turn_sentence_threshold: Annotated[float, Field(gt=0, lt=1)] = 0.5
    """``smart_turn``: the probability that ends the turn when the transcript ends a sentence."""
    smart_turn_sentence_end_ms: PosFloat | None = None
    """``smart_turn``: silence after which any transcript that ends a sentence ends the turn whatever
    the model says, ms (checked at the first check at or after it); None = no such rule (the
    default since the text model's ``smart_turn_confident_*`` rule: on the dev split it took
    fragments misheard as questions, "What is the, um" -> "What is her arm?", for ends)."""
    smart_turn_completion_threshold: Annotated[float, Field(ge=0, lt=1)] = 0.045
    """``smart_turn`` with text cues: the family's text end-of-turn model (the ``tiny`` Thinker's LM:
    the probability that the transcript's words end there) below this keeps the turn open until
    ``max_unfinished_pause_ms`` whatever the acoustic model says; 0 = not used. Tuned on the dev split of
    ``benchmarks/tune_turns.py``."""
    smart_turn_confident_text: Annotated[float, Field(gt=0, le=1)] = 0.25
    """``smart_turn`` with the text model: a transcript that ends a sentence with a text
    end-of-turn probability at or above this ends the turn after ``smart_turn_confident_end_ms``
    of silence whatever the acoustic model says (flat synthetic prosody scores low acoustically)."""
    smart_turn_confident_end_ms: PosFloat = 700.0
    """``smart_turn``: see ``smart_turn_confident_text`` (checked at the first check at or after it), ms."""
    max_pause_ms: Annotated[int, Field(ge=2000)] = 2000
    """``smart_turn``: a pause this long ends the turn whatever the model says, ms (at least 2000)."""
    max_unfinished_pause_ms: Annotated[int, Field(ge=2000)] = 2500
    """``smart_turn``: the cap instead of ``max_pause_ms`` while the transcript says the words go on
    (they trail off, or the text model expects more): someone who stopped at "Could you, um" is
    still thinking. Fillers the VAD does not hear count as silence, so the wait is longer. ms."""
    echo_gate: bool = False
    """Discount the assistant's own voice coming back through the user's mic (a loudspeaker with no
    echo cancellation): VAD windows the released audio explains are not speech
    (:mod:`app.backend.duplex.echo`). Off by default: before it has locked the echo delay it hears
    a barge-in at the very start of a reply up to 256 ms late, also for clients with no echo."""
    resume_window_ms: Annotated[int, Field(ge=0)] = 0
    """Speech that starts within this long after the end of the user's last turn, while the reply to
    it is still under way, means the turn had not ended (a wrong end of turn): the reply is dropped
    (cancelled if already open) and the next reply answers the whole utterance, fragment + rest,
    ms (0 = off: the new speech is a turn of its own)."""
    vad_threshold: Annotated[float, Field(gt=0, lt=1)] = 0.5
    """Speech probability above which a frame counts as speech."""
    far_speech_drop_db: PosFloat | None = 20.0
    """Speech whose onset is more than this far below the user's own level is not the user (a TV,
    someone across the room): it starts no turn and no barge-in, dB (None = no such gate). The
    user's level is learned from their finished turns, starting from
    ``speech_level_reference_dbfs`` (:mod:`app.backend.turns.level_gate`)."""
    speech_level_reference_dbfs: Annotated[float, Field(ge=-80, le=0)] = -20.0
    """The user's active speech level assumed before their first turn, dBFS: about what a
    browser's automatic gain control delivers (WebRTC's AGC aims speech peaks near -3 dBFS;
    speech RMS sits some 15-20 dB below its peaks)."""
    end_of_turn_silence_ms: PosInt = 500
    """Silence after speech that ends the user's turn, ms."""
    speculative_silence_ms: PosInt = 80
    """Silence after which the reply is prepared speculatively (shown only at end of turn), ms.
    80 against 150: the reply's ASR is then done before the first end-of-turn check (200 ms), and
    realtime first audio came 100 ms sooner (``benchmarks/results/duplex_spec80.json``) for 1.4
    more dropped starts per minute of speech (dev split: 13.9 vs 12.5)."""
    min_speech_ms: PosInt = 250
    """Speech needed before a sound counts as the user talking, ms (clicks and short coughs do not)."""
    barge_in_ms: PosInt = 300
    """User speech over a reply longer than this ends it at the next unit boundary, ms."""
    overlap_short_ack_ms: PosInt = 700
    """An utterance said over a reply that outlives it: with less speech than this (a backchannel,
    "uh-huh") it is acknowledged and dropped, else answered when the reply ends, ms (the name and
    700 ms default of vLLM-Omni's session setting)."""
    reply_at: Literal["end_of_turn", "unit_boundary"] = "end_of_turn"
    """When a reply to a finished user turn may open: ``end_of_turn`` = as soon as the VAD ends the
    turn (and the reply is ready), mid-unit; ``unit_boundary`` = at the next unit boundary only,
    as MiniCPM-o's once-per-unit speak/listen decision does (adds half a unit on average)."""
    max_reply_tokens: PosInt = 48

    @model_validator(mode="after")
    def _checks_match_thresholds(self) -> TurnPolicyConfig:
        checks, thresholds = self.smart_turn_checks_ms, self.smart_turn_thresholds
        if len(checks) != len(thresholds) or not checks:
            raise ValueError("smart_turn_checks_ms and smart_turn_thresholds need the same, non-zero length")
        if any(b <= a for a, b in itertools.pairwise(checks)):
            raise ValueError("smart_turn_checks_ms must increase")
        return self


class UIConfig(BaseModel):
    """``ui`` (ours): the Gradio / FastRTC page."""

    model_config = _OURS

    concurrency_limit: PosInt = 4
    """FastRTC ``concurrency_limit``: simultaneous WebRTC peers."""
    default_stack_frames: PosInt = 1
    """Camera frames per unit (1 = base frame only; N>1 tiles N-1 sub-frames into a composite)."""
    title: str = "Omni Duplex"


class RecordingConfig(BaseModel):
    """``recording`` (ours): session recordings (``serve --record-dir``); personal data, off by default."""

    model_config = _OURS

    dir: str | None = None
    """Folder for one sub-folder per duplex session (None = no recording)."""
    max_total_mb: PosFloat = 2048.0
    """Disk bound of all recordings, MB: the oldest are deleted first when a session starts."""
    max_age_days: PosFloat | None = None
    """Recordings older than this are deleted when a session starts (None = kept until the disk bound)."""


class DeployConfig(BaseModel):
    """The whole deploy config: vLLM-Omni's top level plus our sections.

    Derived defaults (only when the key is absent from the input):
        * ``model_family``: ``"vllm_omni"`` if ``pipeline`` names a pipeline other than ``tiny``
          (vLLM-Omni's own YAMLs), else ``"tiny"``.
        * ``duplex_session.max_sessions`` and ``active_stream_window``: the smaller of the Thinker
          and Talker ``max_num_seqs`` (vLLM-Omni: "keep max_sessions = S0/S1 max_num_seqs").

    Raises (on validation): ``pydantic.ValidationError``; the loader turns it into ``ConfigError``.
    """

    model_config = _OURS

    model_family: Literal["tiny", "minicpmo", "vllm_omni"] = "tiny"
    pipeline: str | None = None
    base_config: str | None = None
    """The ``base_config`` overlay this file named (already merged by the loader)."""
    session_mode: Literal["duplex", "turn"] = "duplex"
    async_chunk: bool = True
    active_stream_window: NonNegInt = 4
    model_runner: Literal["v1", "v2"] = "v1"
    stages: list[StageConfig]
    duplex_session: DuplexSessionConfig = Field(default_factory=DuplexSessionConfig)
    connectors: ConnectorsConfig = Field(default_factory=ConnectorsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    turn_policy: TurnPolicyConfig = Field(default_factory=TurnPolicyConfig)
    remote: RemoteConfig | None = None
    model: Annotated[str, Field(min_length=1)] | None = None
    """``model_family: vllm_omni`` without ``remote`` (ours): the model directory (or id) vLLM-Omni
    loads in this process; default ``$OMNI_VLLM_MODEL``, else ``openbmb/MiniCPM-o-4_5``."""
    ui: UIConfig = Field(default_factory=UIConfig)
    recording: RecordingConfig = Field(default_factory=RecordingConfig)
    # ---- vLLM-Omni pipeline-wide keys: stored, applied by engine-backed families only ----
    platforms: dict[str, dict[str, Any] | None] | None = None
    """Per-platform stage overlays (``cuda``, ``npu`` …); applied only via ``load_deploy_config(platform=)``."""
    edges: list[dict[str, Any]] | None = None
    trust_remote_code: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    distributed_executor_backend: str | None = None
    dtype: str | None = None
    quantization: str | None = None
    data_parallel_size: PosInt | None = None
    pipeline_parallel_size: PosInt | None = None
    custom_voice_dir: str | None = None
    forced_aligner: Any = None

    @model_validator(mode="before")
    @classmethod
    def _derive_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if "stage_args" in data:
            raise ValueError("stage_args: removed vLLM-Omni schema; put per-stage settings under 'stages'")
        if "model_family" not in data:
            pipeline = data.get("pipeline")
            data["model_family"] = "tiny" if pipeline in (None, TINY_PIPELINE) else "vllm_omni"
        seqs = {}
        for stage in data.get("stages") or []:
            sid = stage.get("stage_id") if isinstance(stage, dict) else getattr(stage, "stage_id", None)
            n = stage.get("max_num_seqs", 4) if isinstance(stage, dict) else getattr(stage, "max_num_seqs", 4)
            if sid in (0, 1) and isinstance(n, int) and not isinstance(n, bool) and n > 0:
                seqs[sid] = n
        if seqs:
            capacity = min(seqs.values())
            session = data.get("duplex_session")
            if session is None or (isinstance(session, dict) and "max_sessions" not in session):
                data["duplex_session"] = {**(session or {}), "max_sessions": capacity}
            data.setdefault("active_stream_window", capacity)
        return data

    @model_validator(mode="after")
    def _check_stages(self) -> DeployConfig:
        ids = [s.stage_id for s in self.stages]
        if sorted(ids) != list(STAGE_IDS):
            raise ValueError(f"stages: expected stage ids {list(STAGE_IDS)} (Thinker, Talker, Code2Wav), got {ids}")
        if ids != sorted(ids):
            object.__setattr__(self, "stages", sorted(self.stages, key=lambda s: s.stage_id))
        named = self.connectors.named
        for i, stage in enumerate(self.stages):
            where = f"stages[{i}]"
            if self.model_family == "tiny":
                for key in stage.model_extra or {}:
                    raise ValueError(f"{where}.{key}: unknown stage key for model_family 'tiny'{_hint(key, StageConfig)}")
                for key in stage.default_sampling_params.model_extra or {}:
                    raise ValueError(
                        f"{where}.default_sampling_params.{key}: unknown sampling key for model_family 'tiny'"
                        f"{_hint(key, SamplingDefaults)}"
                    )
            for attr in ("output_connectors", "input_connectors"):
                for edge, ref in (getattr(stage, attr) or {}).items():
                    if ref not in named:
                        raise ValueError(f"{where}.{attr}.{edge}: unknown connector {ref!r} (defined: {sorted(named)})")
        self._check_gpu_memory()
        return self

    def _check_gpu_memory(self) -> None:
        """Per device, the stages' ``gpu_memory_utilization`` may not sum above 1.0 (a stage without
        ``devices`` is on device 0, as CUDA_VISIBLE_DEVICES would give it)."""
        per_device: dict[str, list[StageConfig]] = {}
        for stage in self.stages:
            if stage.gpu_memory_utilization is None:
                continue
            for dev in (stage.devices or "0").split(","):
                per_device.setdefault(dev.strip(), []).append(stage)
        for dev, stages in sorted(per_device.items()):
            total = sum(s.gpu_memory_utilization or 0.0 for s in stages)
            if total > 1.0 + 1e-9:
                parts = " + ".join(f"stage {s.stage_id} ({s.name}) {s.gpu_memory_utilization:g}" for s in stages)
                raise ValueError(f"stages: gpu_memory_utilization on device {dev} sums to {total:.2f} > 1.0: {parts}; "
                                 "lower one of them or move a stage to another device")

    def stage(self, stage_id: int) -> StageConfig:
        """The stage with ``stage_id`` (0 Thinker, 1 Talker, 2 Code2Wav); ``KeyError`` if absent."""
        for stage in self.stages:
            if stage.stage_id == stage_id:
                return stage
        raise KeyError(f"no stage with stage_id {stage_id}")

    @property
    def thinker(self) -> StageConfig:
        """Stage 0."""
        return self.stage(0)

    @property
    def talker(self) -> StageConfig:
        """Stage 1."""
        return self.stage(1)

    @property
    def code2wav(self) -> StageConfig:
        """Stage 2."""
        return self.stage(2)


CONFIG_MODELS: tuple[type[BaseModel], ...] = (
    DeployConfig,
    StageConfig,
    SamplingDefaults,
    DuplexSessionConfig,
    ConnectorsConfig,
    ServerConfig,
    LimitsConfig,
    TurnPolicyConfig,
    RemoteConfig,
    UIConfig,
)
"""Every model of the schema (used for "did you mean" hints)."""


def known_keys() -> set[str]:
    """All field names declared anywhere in the schema."""
    return {name for model in CONFIG_MODELS for name in model.model_fields}
