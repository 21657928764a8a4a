"""Settings read from the environment (``LOCALLLM_*``), with platformdirs paths.

Every setting is read when ``load_settings()`` is called, so tests and the
daemon's child processes see the environment they were started with.
"""

from __future__ import annotations

import ipaddress
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import platformdirs

APP_NAME = "localllm"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 11434
ENGINES = ("llama.cpp", "native")
DEFAULT_REGISTRY = "https://registry.ollama.ai"
DEFAULT_WORKER_PORT = 50052  # llama.cpp's rpc-server's
# The working folder of every Python process localllm starts (runners, render workers, the quantizer, worker
# probes): the folder holding this package. Python puts a child's working folder first on its import path (``-m``,
# ``-c``), so a child started wherever the daemon happens to run would import a stray ``json.py`` or another
# ``localllm/`` found there before our code.
CHILD_CWD = str(Path(__file__).resolve().parent.parent)


class SettingsError(ValueError):
    """An environment variable holds a value we cannot use."""


def parse_duration(value: str | int | float | None, default: float | None = None) -> float | None:
    """Parse an Ollama-style duration ("5m", "30s", "1h", "300", -1) into seconds.

    Returns ``None`` for "keep forever" (any negative value), ``default`` when
    the value is empty.
    """
    if value is None or value == "":
        return default
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            total = 0.0
            pos = 0
            for match in re.finditer(r"(-?\d+(?:\.\d+)?)(ms|h|m|s)", text):
                if match.start() != pos:
                    raise SettingsError(f"invalid duration {value!r}: use e.g. 30s, 5m, 1h, -1") from None
                number = float(match.group(1))
                unit = match.group(2)
                total += number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[unit]
                pos = match.end()
            if pos != len(text) or pos == 0:
                raise SettingsError(f"invalid duration {value!r}: use e.g. 30s, 5m, 1h, -1") from None
            seconds = total
    return None if seconds < 0 else seconds


def parse_host(value: str | None) -> tuple[str, int]:
    """Split ``LOCALLLM_HOST`` ("host", "host:port", "http://host:port", ":port")."""
    text = (value or "").strip()
    if not text:
        return DEFAULT_HOST, DEFAULT_PORT
    text = re.sub(r"^[a-z]+://", "", text).rstrip("/")
    if text.startswith("["):  # [::1]:port
        host, _, rest = text[1:].partition("]")
        port = rest.lstrip(":") or str(DEFAULT_PORT)
    elif text.count(":") == 1:
        host, port = text.split(":")
    else:
        host, port = text, str(DEFAULT_PORT)
    try:
        port_number = int(port)
    except ValueError:
        raise SettingsError(f"LOCALLLM_HOST has an invalid port: {value!r}") from None
    return host or DEFAULT_HOST, port_number


def is_loopback_host(host: str) -> bool:
    """True for names and addresses that can only mean this machine."""
    host = host.strip("[]").lower()
    if host in ("localhost", "") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


KV_CACHE_TYPES = ("f16", "q8_0", "q4_0")
NATIVE_KV_CACHE_TYPES = ("f16", "q8_0")  # without flash attention: llama.cpp would need it for q8_0
DEFAULT_KV_DISK = 4 << 30


def parse_worker_address(text: str) -> str:
    """A worker's ``host:port`` as ggml's RPC client takes it (it splits at the first colon: no IPv6)."""
    address = text.strip()
    host, sep, port = address.partition(":")
    if address.startswith("[") or ":" in port:
        raise SettingsError(f"worker address {text!r}: IPv6 addresses are not supported by ggml's RPC client; "
                            "use a host name or an IPv4 address")
    if not sep or not host or any(c.isspace() or c in "/@" for c in host):
        raise SettingsError(f"worker address {text!r} is not host:port (e.g. 192.168.1.20:50052)")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise SettingsError(f"worker address {text!r} has no valid port (1-65535)")
    return f"{host}:{int(port)}"


def parse_workers(value: str | None) -> tuple[str, ...]:
    """``LOCALLLM_WORKERS``: comma-separated ``host:port`` entries, each checked, duplicates dropped."""
    entries = [entry for entry in (value or "").split(",") if entry.strip()]
    return tuple(dict.fromkeys(parse_worker_address(entry) for entry in entries))


def _bool_env(name: str) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise SettingsError(f"{name} must be 1 or 0 (true or false), got {os.environ[name]!r}")


_SIZE_UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """A byte count such as ``1500M`` or ``8G`` (binary units; a bare number is bytes); 0 when empty."""
    raw = text.strip().upper().removesuffix("IB").removesuffix("B")
    number, scale = (raw[:-1], _SIZE_UNITS[raw[-1]]) if raw[-1:] in _SIZE_UNITS else (raw, 1)
    try:
        value = float(number) if raw else 0.0
        if not math.isfinite(value):
            raise ValueError(value)
    except ValueError:
        raise SettingsError(f"must be a size such as 8G or 1500M, got {text!r}") from None
    if value < 0:
        raise SettingsError(f"must not be negative, got {text!r}")
    return int(value * scale)


def _size_env(name: str) -> int:
    """The size setting ``name`` (see :func:`parse_size`); 0 when unset."""
    try:
        return parse_size(os.environ.get(name, ""))
    except SettingsError as exc:
        raise SettingsError(f"{name} {exc}") from None


#: LOCALLLM_GPU_MEMORY's key for a size that caps every device.
ALL_DEVICES = "*"


def parse_gpu_memory(value: str | None) -> dict[str, int]:
    """``LOCALLLM_GPU_MEMORY``: a size for every GPU (``6G``), or ``NAME=SIZE`` pairs by ggml device name
    (``CUDA0=6G,Vulkan1=2G``); a device named here is used even when it is a software one."""
    caps: dict[str, int] = {}
    for item in (value or "").split(","):
        if not item.strip():
            continue
        name, sep, size = item.rpartition("=")
        name = name.strip() if sep else ALL_DEVICES
        if not name or not re.fullmatch(r"[A-Za-z0-9_.:*-]+", name) or name in caps:
            raise SettingsError(f"LOCALLLM_GPU_MEMORY must be a size (6G) or NAME=SIZE pairs separated by commas "
                                f"(CUDA0=6G,Vulkan1=2G), each device once; got {item.strip()!r}")
        try:
            caps[name] = parse_size(size)
        except SettingsError as exc:
            raise SettingsError(f"LOCALLLM_GPU_MEMORY: {name if sep else 'the size'} {exc}") from None
        if not size.strip():
            raise SettingsError(f"LOCALLLM_GPU_MEMORY: {item.strip()!r} has no size")
    return caps


def _size_or_default(name: str, default: int) -> int:
    """A size setting where unset means ``default`` (and ``0`` means none)."""
    return _size_env(name) if os.environ.get(name, "").strip() else default


def _int_env(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"{name} must be a whole number, got {raw!r}") from None


@dataclass(frozen=True)
class RequestLimits:
    """Bounds on one request, each settable as ``LOCALLLM_MAX_<NAME>`` (e.g. LOCALLLM_MAX_MESSAGES)."""

    prompt_chars: int = 1 << 20  # characters of prompt, system and message text together
    messages: int = 1024
    tools: int = 128
    schema_bytes: int = 64 << 10  # a JSON schema or GBNF grammar, serialised
    num_predict: int = 1 << 17
    num_ctx: int = 1 << 17


@dataclass(frozen=True)
class Settings:
    """All of localllm's settings; see README.md for each variable."""

    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    models_dir: Path = field(default_factory=lambda: Path(platformdirs.user_data_dir(APP_NAME)) / "models")
    state_dir: Path = field(default_factory=lambda: Path(platformdirs.user_state_dir(APP_NAME)))
    keep_alive: float | None = 300.0
    num_parallel: int = 0  # 0: chosen from memory
    kv_tokens: int = 0  # native engine: positions in a runner's KV block pool; 0: four contexts
    kv_disk: int = DEFAULT_KV_DISK  # bytes of KV blocks the prefix cache keeps on disk (all models); 0: none
    kv_disk_dir: Path | None = None  # where; None: <state_dir>/kv-cache
    max_loaded_models: int = 0  # runners loaded at once; 0: 3 per GPU, 3 without one (Ollama's default)
    max_queue: int = 512
    memory_limit: int = 0  # bytes all loaded models may take together; 0: only free RAM limits them
    gpu_memory: dict[str, int] = field(default_factory=dict)  # device name (or ALL_DEVICES) -> most bytes it takes
    load_timeout: float = 300.0  # seconds a load waits for busy models to free memory or a slot
    kv_cache_type: str = "f16"  # f16 or q8_0 (both engines), q4_0 (llama.cpp, with flash attention)
    flash_attention: bool = False
    origins: tuple[str, ...] = ()
    api_key: str | None = None
    allow_remote_changes: bool = False  # model-changing endpoints answer non-loopback clients without an API key
    engine: str | None = None  # None: chosen per model load (the native engine where it runs the model)
    workers: tuple[str, ...] = ()  # host:port of `localllm worker`s (ggml RPC servers) to spread layers over
    worker_timeout: float = 120.0  # seconds one decode step may wait on workers before the runner gives up
    num_threads: int = 0  # 0: physical cores
    stream_interval: float = 0.1  # seconds: streamed pieces are handed on in bursts (runner/relay.py)
    max_body_bytes: int = 32 << 20
    max_audio_bytes: int = 256 << 20  # /v1/audio/ uploads: two hours of 16 kHz mono 16-bit WAV (230 MB)
    limits: "RequestLimits" = field(default_factory=lambda: RequestLimits())
    registry: str = DEFAULT_REGISTRY  # where names without a host (registry.ollama.ai/...) are pulled from
    registry_token: str | None = None  # for `registry` only, when it asks for authorization
    registry_tokens: dict[str, str] = field(default_factory=dict)  # host[:port] -> token, for other registries

    @property
    def base_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", ""):
            host = "127.0.0.1"
        elif host == "::":
            host = "::1"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    @property
    def kv_cache_dir(self) -> Path:
        """The disk tier of the native engine's prefix cache: one directory per model digest."""
        return self.kv_disk_dir or self.state_dir / "kv-cache"


def parse_registry(value: str | None) -> str:
    """``LOCALLLM_REGISTRY`` as a base URL: ``host[:port]`` is https; ``http://`` is kept (pulls then need insecure)."""
    text = (value or "").strip().rstrip("/")
    if not text:
        return DEFAULT_REGISTRY
    if "://" not in text:
        text = f"https://{text}"
    match = re.fullmatch(r"(https?)://([A-Za-z0-9._-]+|\[[0-9A-Fa-f:]+\])(:[0-9]{1,5})?", text, re.IGNORECASE)
    if match is None:
        raise SettingsError(
            f"LOCALLLM_REGISTRY must be a registry address such as https://registry.ollama.ai or host:port "
            f"(no path), got {value!r}"
        )
    return f"{match.group(1).lower()}://{match.group(2)}{match.group(3) or ''}"


def parse_registry_tokens(value: str | None) -> dict[str, str]:
    """``LOCALLLM_REGISTRY_TOKENS``: ``host[:port]=token`` pairs separated by commas."""
    tokens = {}
    for item in (value or "").split(","):
        host, sep, token = item.strip().partition("=")
        if not item.strip():
            continue
        if not sep or not re.fullmatch(r"[A-Za-z0-9._-]+(:[0-9]{1,5})?", host.strip()) or not token.strip():
            raise SettingsError(f"LOCALLLM_REGISTRY_TOKENS must be host[:port]=token pairs separated by commas, "
                                f"got an item starting {item.strip()[:20]!r}")
        tokens[host.strip().lower()] = token.strip()
    return tokens


def _workers_env() -> tuple[str, ...]:
    try:
        return parse_workers(os.environ.get("LOCALLLM_WORKERS"))
    except SettingsError as exc:
        raise SettingsError(f"LOCALLLM_WORKERS: {exc}") from None


def load_settings() -> Settings:
    """Read the settings from the current environment."""
    host, port = parse_host(os.environ.get("LOCALLLM_HOST"))
    models = os.environ.get("LOCALLLM_MODELS", "").strip()
    state = os.environ.get("LOCALLLM_STATE_DIR", "").strip()
    engine = os.environ.get("LOCALLLM_ENGINE", "").strip() or None
    if engine is not None and engine not in ENGINES:
        raise SettingsError(f"LOCALLLM_ENGINE must be 'llama.cpp' or 'native', got {engine!r}")
    kv_cache_type = os.environ.get("LOCALLLM_KV_CACHE_TYPE", "").strip().lower() or "f16"
    if kv_cache_type not in KV_CACHE_TYPES:
        raise SettingsError(f"LOCALLLM_KV_CACHE_TYPE must be one of {', '.join(KV_CACHE_TYPES)}, got {kv_cache_type!r}")
    flash_attention = _bool_env("LOCALLLM_FLASH_ATTENTION")
    if kv_cache_type not in NATIVE_KV_CACHE_TYPES and not flash_attention:
        raise SettingsError(f"LOCALLLM_KV_CACHE_TYPE={kv_cache_type} needs LOCALLLM_FLASH_ATTENTION=1 "
                            "(llama.cpp quantizes the V cache only with flash attention, and the native engine "
                            f"keeps {' or '.join(NATIVE_KV_CACHE_TYPES)})")
    origins = tuple(o.strip() for o in os.environ.get("LOCALLLM_ORIGINS", "").split(",") if o.strip())
    kv_tokens = _int_env("LOCALLLM_KV_TOKENS", 0)
    if kv_tokens < 0:
        raise SettingsError(f"LOCALLLM_KV_TOKENS must not be negative, got {kv_tokens}")
    kv_dir = os.environ.get("LOCALLLM_KV_DISK_DIR", "").strip()
    defaults = Settings()
    return Settings(
        host=host,
        port=port,
        models_dir=Path(models).expanduser() if models else defaults.models_dir,
        state_dir=Path(state).expanduser() if state else defaults.state_dir,
        keep_alive=parse_duration(os.environ.get("LOCALLLM_KEEP_ALIVE"), 300.0),
        num_parallel=_int_env("LOCALLLM_NUM_PARALLEL", 0),
        kv_tokens=kv_tokens,
        kv_disk=_size_or_default("LOCALLLM_KV_DISK", DEFAULT_KV_DISK),
        kv_disk_dir=Path(kv_dir).expanduser() if kv_dir else None,
        max_loaded_models=_int_env("LOCALLLM_MAX_LOADED_MODELS", 0),
        max_queue=_int_env("LOCALLLM_MAX_QUEUE", 512),
        memory_limit=_size_env("LOCALLLM_MEMORY_LIMIT"),
        gpu_memory=parse_gpu_memory(os.environ.get("LOCALLLM_GPU_MEMORY")),
        kv_cache_type=kv_cache_type,
        flash_attention=flash_attention,
        load_timeout=parse_duration(os.environ.get("LOCALLLM_LOAD_TIMEOUT"), defaults.load_timeout) or 0.0,
        origins=origins,
        api_key=os.environ.get("LOCALLLM_API_KEY") or None,
        allow_remote_changes=_bool_env("LOCALLLM_ALLOW_REMOTE_CHANGES"),
        engine=engine,
        workers=_workers_env(),
        worker_timeout=parse_duration(os.environ.get("LOCALLLM_WORKER_TIMEOUT"), defaults.worker_timeout)
        or defaults.worker_timeout,
        num_threads=_int_env("LOCALLLM_NUM_THREADS", 0),
        stream_interval=parse_duration(os.environ.get("LOCALLLM_STREAM_INTERVAL"), defaults.stream_interval) or 0.0,
        max_body_bytes=_int_env("LOCALLLM_MAX_BODY_BYTES", defaults.max_body_bytes),
        max_audio_bytes=_int_env("LOCALLLM_MAX_AUDIO_BYTES", defaults.max_audio_bytes),
        registry=parse_registry(os.environ.get("LOCALLLM_REGISTRY")),
        registry_token=os.environ.get("LOCALLLM_REGISTRY_TOKEN", "").strip() or None,
        registry_tokens=parse_registry_tokens(os.environ.get("LOCALLLM_REGISTRY_TOKENS")),
        limits=RequestLimits(**{
            name: _int_env(f"LOCALLLM_MAX_{name.upper()}", default)
            for name, default in vars(RequestLimits()).items()
        }),
    )
