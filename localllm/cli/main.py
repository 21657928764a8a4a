"""The ``localllm`` command: a Typer app whose commands talk to the daemon over HTTP.

Every command except ``serve`` connects through :func:`localllm.client.connect`,
which starts the daemon in the background when none answers. Failures end
with ``Error: <one line>`` on stderr and exit code 1, never a traceback.
"""

from __future__ import annotations

import dataclasses
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from localllm import __version__
from localllm.audio import WINDOW_SECONDS, AudioError, check_audio
from localllm.cli.display import Spinner
from localllm.cli.format import human_bytes, human_time, render_table, show_info
from localllm.cli.progress import SecondsBar, show_progress
from localllm.cli.repl import ChatRepl
from localllm.cli.run import (
    RunOptions, ensure_model, load_model, parse_format, parse_keep_alive, parse_think, register_file, run_once,
)
from localllm.client import APIError, Client, DaemonError, connect
from localllm.config import DEFAULT_WORKER_PORT, SettingsError, load_settings, parse_worker_address
from localllm.registry.names import looks_like_path


class LocalLLMApp(typer.Typer):
    """Typer app that turns expected failures into a one-line error and exit code 1."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except (DaemonError, SettingsError) as exc:
            sys.stderr.write(f"Error: {exc}\n")
            sys.exit(1)


app = LocalLLMApp(
    name="localllm",
    help="Run large language models locally (an Ollama-compatible runner).",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    """``--version``: the daemon's version if one is running, and the client's."""
    if not value:
        return
    settings = load_settings()
    try:
        with Client(settings) as client:
            daemon = client.version()
    except DaemonError:
        daemon = ""
    if daemon:
        print(f"localllm version is {daemon}")
    else:
        print(f"Warning: could not connect to a running localllm daemon at {settings.base_url}")
    warning = "Warning: " if daemon and daemon != __version__ else ""
    print(f"{warning}client version is {__version__}")
    raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", "-v", callback=_print_version, is_eager=True, help="Show version information."
    ),
) -> None:
    """Run large language models locally (an Ollama-compatible runner)."""


@app.command()
def serve(
    worker: list[str] = typer.Option(
        [], "--worker", help="host:port of a `localllm worker` to spread models over (repeatable; adds to "
                             "LOCALLLM_WORKERS)."),
) -> None:
    """Start the daemon in the foreground."""
    from localllm.server.app import run_server  # the daemon's dependencies load only here

    settings = load_settings()
    workers = tuple(dict.fromkeys([*settings.workers, *(parse_worker_address(w) for w in worker)]))
    run_server(dataclasses.replace(settings, workers=workers))


@app.command("worker")
def worker_command(
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(DEFAULT_WORKER_PORT, "--port", help="Port to listen on."),
    threads: int | None = typer.Option(None, "--threads", help="CPU threads (default: physical cores)."),
    device: list[str] = typer.Option(
        [], "--device", help="A local device to offer, as llama.cpp names it (CPU, CUDA0, ...; repeatable). "
                             "Default: every GPU, or else the CPU."),
    allow_remote: bool = typer.Option(
        False, "--allow-remote", help="Allow a --host other than loopback (ggml's RPC protocol has no "
                                      "authentication: private networks only)."),
) -> None:
    """Serve this machine's compute and memory to other localllm daemons (llama.cpp's RPC backend)."""
    from localllm.backends.rpc import RpcUnavailable
    from localllm.workers.serve import WorkerError, run_worker

    try:
        run_worker(host, port, threads, [name for names in device for name in names.split(",") if name],
                   allow_remote)
    except (WorkerError, RpcUnavailable) as exc:
        sys.stderr.write(f"Error: {exc}\n")
        sys.exit(1)


_INSECURE_HELP = "Allow a registry over plain http."


@app.command()
def pull(
    model: str = typer.Argument(..., help="Model name, e.g. llama3.2:1b, smollm2:135m or hf.co/org/repo:Q4_K_M"),
    insecure: bool = typer.Option(False, "--insecure", help=_INSECURE_HELP),
) -> None:
    """Pull a model into the local store (from the registry, Hugging Face or a URL)."""
    with connect() as client:
        show_progress(client.pull(model, insecure=insecure))


@app.command()
def push(
    model: str = typer.Argument(..., help="Model name, e.g. registry.example.com/me/mymodel:latest"),
    insecure: bool = typer.Option(False, "--insecure", help=_INSECURE_HELP),
) -> None:
    """Push a model to a registry (the one its name starts with, else LOCALLLM_REGISTRY)."""
    with connect() as client:
        show_progress(client.push(model, insecure=insecure))


@app.command("list")
def list_models(prefix: str | None = typer.Argument(None, help="Only names starting with this.")) -> None:
    """List the local models."""
    with connect() as client:
        models = client.list()
    rows = [
        [m.get("name", ""), str(m.get("digest", ""))[:12], human_bytes(int(m.get("size") or 0)),
         human_time(m.get("modified_at"))]
        for m in models
        if not prefix or str(m.get("name", "")).lower().startswith(prefix.lower())
    ]
    sys.stdout.write(render_table(rows, header=["NAME", "ID", "SIZE", "MODIFIED"]))


app.command("ls", help="List the local models (alias of list).")(list_models)


@app.command()
def show(
    model: str,
    license: bool = typer.Option(False, "--license", help="Show the license."),
    modelfile: bool = typer.Option(False, "--modelfile", help="Show the Modelfile."),
    parameters: bool = typer.Option(False, "--parameters", help="Show the parameters."),
    template: bool = typer.Option(False, "--template", help="Show the template."),
    system: bool = typer.Option(False, "--system", help="Show the system message."),
    verbose: bool = typer.Option(False, "--verbose", help="Show the full metadata and tensors."),
) -> None:
    """Show information about a model."""
    chosen = [name for name, on in (("license", license), ("modelfile", modelfile), ("parameters", parameters),
                                    ("template", template), ("system", system)) if on]
    if len(chosen) > 1:
        raise DaemonError("only one of '--license', '--modelfile', '--parameters', '--system', or '--template' "
                          "can be given")
    with connect() as client:
        info = client.show(model, verbose=verbose)
    if not chosen:
        sys.stdout.write(show_info(info, verbose=verbose))
        return
    text = str(info.get(chosen[0]) or "")
    sys.stdout.write(text if chosen[0] in ("system", "template") else text + "\n")


@app.command()
def cp(source: str, destination: str) -> None:
    """Copy a model."""
    with connect() as client:
        client.copy(source, destination)
    print(f"copied '{source}' to '{destination}'")


@app.command()
def rm(models: list[str] = typer.Argument(..., help="One or more model names.")) -> None:
    """Remove models (unloading them first)."""
    with connect() as client:
        for name in models:
            try:
                load_model(client, RunOptions(model=name, keep_alive=0))
            except APIError as exc:  # 409, 412: the model cannot be loaded; the delete below stops it if it runs
                if "not found" not in str(exc).lower() and exc.status_code not in (409, 412):
                    sys.stderr.write(f"Warning: unable to stop model '{name}'\n")
            client.delete(name)
            print(f"deleted '{name}'")


cache_app = typer.Typer(help="The prompt cache the native engine keeps on disk.", no_args_is_help=True)
app.add_typer(cache_app, name="cache")


@cache_app.command("clear")
def cache_clear(model: str | None = typer.Argument(None, help="Only this model's (default: every model's).")) -> None:
    """Delete the KV blocks of earlier prompts kept on disk (they reveal the prompts)."""
    with connect() as client:
        freed = client.clear_cache(model or "")
    print(f"cleared {human_bytes(freed)} of cached prompts" + (f" of '{model}'" if model else ""))


def _processor(model: dict[str, Any]) -> str:
    size, vram = int(model.get("size") or 0), int(model.get("size_vram") or 0)
    if vram == 0:
        return "100% CPU"
    if vram == size:
        return "100% GPU"
    if vram > size or size == 0:
        return "Unknown"
    cpu = round((size - vram) / size * 100)
    return f"{cpu}%/{100 - cpu}% CPU/GPU"


@app.command()
def ps() -> None:
    """List the loaded models."""
    with connect() as client:
        models = client.ps()
    split = any((entry.get("host"), entry.get("device")) != ("local", "CPU") for m in models
                for entry in m.get("split") or ())
    rows = []
    for m in models:
        until = human_time(m.get("expires_at"), zero="Forever")
        if until.endswith(" ago"):
            until = "Stopping..."
        rows.append([m.get("name", ""), str(m.get("digest", ""))[:12], human_bytes(int(m.get("size") or 0)),
                     _processor(m), str(m.get("context_length") or ""), m.get("engine", ""), m.get("runner", ""),
                     until] + ([_layers_per_machine(m)] if split else []))
    header = ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "ENGINE", "RUNNER", "UNTIL"] + (["LAYERS"] if split else [])
    sys.stdout.write(render_table(rows, header=header))


def _layers_per_machine(model: dict[str, Any]) -> str:
    """``ps``'s LAYERS column for a model split over GPUs or workers: "10 CPU (25 MB), 20 Vulkan0 (50 MB), ...",
    and for a mixture of experts where its experts are ("GPU: attention all 48 layers, experts 12 of 48; ...")."""
    parts = []
    for entry in model.get("split") or ():
        where = entry.get("device") if entry.get("host") == "local" else entry.get("host")
        parts.append(f"{entry.get('layers', 0)} {where} ({human_bytes(int(entry.get('size') or 0))})")
    placement = model.get("placement")
    return ", ".join(parts) + (f"; {placement}" if placement else "")


@app.command()
def stop(model: str) -> None:
    """Unload a running model."""
    with connect() as client:
        try:
            load_model(client, RunOptions(model=model, keep_alive=0))
        except APIError as exc:
            if "not found" in str(exc).lower():
                raise DaemonError(f"couldn't find model \"{model}\" to stop") from None
            raise


@app.command()
def create(
    model: str,
    file: Path = typer.Option(Path("Modelfile"), "--file", "-f", help="Path to the Modelfile."),
    quantize: str | None = typer.Option(None, "--quantize", "-q", help="Quantize to this type (e.g. q4_K_M)."),
) -> None:
    """Create a model from a Modelfile."""
    path = file.expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DaemonError(f"no Modelfile at {path}; give one with -f PATH") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DaemonError(f"cannot read the Modelfile {path}: {exc}") from None
    # The daemon parses the text; "path" (Ollama's field) anchors relative FROM/ADAPTER paths.
    body: dict[str, Any] = {"model": model, "modelfile": text, "path": str(path.resolve())}
    if quantize:
        body["quantize"] = quantize
    with connect() as client:
        show_progress(client.create(body))


class _RunCommand(TyperCommand):
    """``run``, whose ``--think`` takes its value only as ``--think=LEVEL``: a bare ``--think``
    means true and leaves the next word to the prompt (Ollama's flag works this way)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        args = ["--think=true" if arg == "--think" else arg for arg in args[:end]] + args[end:]
        return super().parse_args(ctx, args)


def _think_option(value: str | None) -> bool | str | None:
    if value is None:
        return None
    try:
        return parse_think(value)
    except ValueError as exc:
        raise DaemonError(f"invalid --think: {exc}") from None


@app.command()
def transcribe(
    model: str = typer.Argument(..., help="A model that hears (capability 'audio' in 'localllm show')."),
    file: Path = typer.Argument(..., help="The recording: WAV, MP3 or FLAC."),
    format: str = typer.Option("text", "--format", help="text, json, srt, vtt or verbose_json."),
    language: str | None = typer.Option(None, "--language", help="The spoken language (ISO-639-1, e.g. en)."),
    prompt: str | None = typer.Option(None, "--prompt", help="Context: names, spellings, the topic."),
    translate: bool = typer.Option(False, "--translate", help="Translate the speech into English."),
) -> None:
    """Print what a recording says (OpenAI's /v1/audio/transcriptions); long files go in pieces, with a bar."""
    try:
        audio = file.read_bytes()
    except OSError as exc:
        raise DaemonError(f"cannot read {file}: {exc.strerror or exc}") from None
    seconds = _recording_seconds(audio) if format == "text" else 0.0  # only a stream tells how far it got
    with connect() as client:
        bar = SecondsBar(f"Transcribing {file.name}", seconds) if seconds > WINDOW_SECONDS else None
        text_above_bar = bar is not None and bar.shown and sys.stdout.isatty()  # a piece a line, not word by word
        spinner = Spinner("Transcribing" if bar is None or not bar.shown else None)
        try:
            for event in client.transcribe(model, audio, file.name, response_format=format,
                                           language=language or "", prompt=prompt or "", translate=translate):
                spinner.stop()
                kind = event.get("type")
                if kind == "transcript.text.segment" and bar is not None:
                    bar.update(float(event.get("end") or 0))
                    if text_above_bar and event.get("text"):
                        bar.print(str(event["text"]))
                elif kind == "transcript.text.delta" and not text_above_bar:
                    sys.stdout.write(event["delta"])
                elif kind == "transcript.text.done" and format != "text":
                    sys.stdout.write(event["text"])
                sys.stdout.flush()
        finally:
            spinner.stop()
            if bar is not None:
                bar.stop()
    if format == "text" and not text_above_bar:
        sys.stdout.write("\n")


def _recording_seconds(audio: bytes) -> float:
    """How long the recording is, as its header says (0 where it does not say; the daemon names any problem)."""
    try:
        return check_audio(audio).seconds or 0.0
    except AudioError:
        return 0.0


@app.command(cls=_RunCommand)
def run(
    model: str = typer.Argument(..., help="Model name, or a GGUF file (./model.gguf) to run where it is."),
    prompt: list[str] | None = typer.Argument(None, help="The prompt; without one, an interactive chat."),
    verbose: bool = typer.Option(False, "--verbose", help="Show timings and token rates."),
    format: str | None = typer.Option(None, "--format", help="Response format: json or a JSON schema."),
    keepalive: str | None = typer.Option(None, "--keepalive", help="How long to keep the model loaded (5m)."),
    nowordwrap: bool = typer.Option(False, "--nowordwrap", help="Don't wrap words to the terminal width."),
    think: str | None = typer.Option(
        None, "--think", metavar="[=LEVEL]",
        help="Thinking for models that think: --think (true), --think=false, or --think=low|medium|high. "
             "Unset: on if the model thinks."),
    hidethinking: bool = typer.Option(False, "--hidethinking", help="Don't show the model's thinking."),
) -> None:
    """Run a model: answer a prompt, or chat."""
    # Ctrl+C stops a generation; a shell that started us in the background may have
    # left SIGINT ignored, which would make it do nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    opts = RunOptions(model=model, format=parse_format(format), keep_alive=parse_keep_alive(keepalive),
                      wordwrap=not nowordwrap, verbose=verbose, think=_think_option(think),
                      think_chosen=think is not None, hide_thinking=hidethinking)
    words = list(prompt or [])
    interactive = not words
    if not sys.stdin.isatty():
        piped = sys.stdin.read()
        if piped:
            words.insert(0, piped)
        interactive = False
    if not sys.stdout.isatty():
        interactive = False
    settings = load_settings()
    with connect(settings) as client:
        if looks_like_path(model):
            opts.model = model = register_file(client, model)
        opts.apply_show(ensure_model(client, model))
        if not interactive:
            run_once(client, opts, " ".join(words))
            return
        load_model(client, opts)
        ChatRepl(client, opts, settings.state_dir / "history").run()
