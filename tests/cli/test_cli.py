"""The ``localllm`` command end to end: real subprocess CLI, real daemon, real model files."""

from __future__ import annotations

import http.server
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from localllm.backends.native import kernels
from localllm.server.engine_choice import MEASURED_ISAS

from support.cli import SMOLLM2_SHA256, CliEnv, assert_clean_error, write_ollama_model

from localllm import __version__

TERSE_MODELFILE = """\
FROM smollm2:135m
PARAMETER num_predict 12
PARAMETER temperature 0
SYSTEM You answer in one short sentence.
"""


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path) -> Iterator[CliEnv]:
    """A daemon started by ``localllm serve`` over a store that holds SmolLM2 in Ollama's format."""
    cli = CliEnv(tmp_path_factory.mktemp("cli"))
    cli.manifest_digest = write_ollama_model(cli.models_dir, smollm2_path)
    process = cli.start_daemon()
    yield cli
    process.terminate()
    cli.kill_daemons()


@pytest.fixture(scope="module")
def terse(env: CliEnv) -> str:
    """A model made with ``localllm create`` that answers in a few tokens."""
    (env.root / "Modelfile").write_text(TERSE_MODELFILE)
    result = env.run("create", "terse", "-f", "Modelfile")
    assert result.returncode == 0, result.stderr
    assert "success" in result.stderr
    return "terse"


# --- daemon start-up ---------------------------------------------------------


def test_auto_start_then_commands_reuse_the_daemon(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    try:
        first = cli.run("list")
        assert first.returncode == 0, first.stderr
        assert first.stdout.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
        pids = cli.daemon_pids(daemons_only=True)
        assert len(pids) == 1, "one background daemon"
        assert (cli.state_dir / "server.log").exists()
        again = cli.run("ps")
        assert again.returncode == 0, again.stderr
        assert cli.daemon_pids(daemons_only=True) == pids, "the second command used the running daemon"
        version = cli.run("--version")
        assert version.returncode == 0
        assert f"localllm version is {__version__}" in version.stdout
        assert f"client version is {__version__}" in version.stdout
    finally:
        cli.kill_daemons()


def test_concurrent_commands_start_one_daemon(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    command = [sys.executable, "-m", "localllm", "list"]
    try:
        processes = [subprocess.Popen(command, env=cli.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      stdin=subprocess.DEVNULL, text=True) for _ in range(3)]
        results = [(p.wait(timeout=120), p.stderr.read()) for p in processes]
        for p in processes:
            p.stdout.close()
            p.stderr.close()
        assert [code for code, _ in results] == [0, 0, 0], results
        deadline = time.monotonic() + 60  # daemons that lost the port exit on their own, however slowly
        while len(cli.daemon_pids(daemons_only=True)) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(cli.daemon_pids(daemons_only=True)) == 1
    finally:
        cli.kill_daemons()


def test_version_without_daemon_does_not_start_one(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    result = cli.run("--version")
    assert result.returncode == 0
    assert "could not connect" in result.stdout and f"client version is {__version__}" in result.stdout
    assert cli.daemon_pids() == []


def test_port_held_by_another_program_is_a_clear_error(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", cli.port), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = cli.run("list")
        assert_clean_error(result, f"port {cli.port}", "in use by another program", "LOCALLLM_HOST")
        assert cli.daemon_pids() == [], "no daemon was started"
    finally:
        server.shutdown()
        server.server_close()


def test_bad_host_setting_is_a_clear_error(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    cli.env["LOCALLLM_HOST"] = "127.0.0.1:notaport"
    assert_clean_error(cli.run("list"), "LOCALLLM_HOST")


# --- model management --------------------------------------------------------


def test_list_reads_a_store_written_by_ollama(env: CliEnv) -> None:
    result = env.run("ls")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "MODIFIED"]
    row = next(r for r in rows if r.startswith("smollm2:135m "))
    name, digest, size, unit, *modified = row.split()
    assert digest == env.manifest_digest[:12]
    assert size.isdigit() and unit == "MB", row
    assert " ".join(modified).endswith("ago")


def test_list_filters_by_prefix(env: CliEnv) -> None:
    result = env.run("list", "nothing-like-this")
    assert result.returncode == 0
    assert result.stdout.strip().splitlines() == [result.stdout.strip().splitlines()[0]]


def test_show_default_view(env: CliEnv) -> None:
    result = env.run("show", "smollm2:135m")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert re.search(r"^  Model$", out, re.M)
    assert re.search(r"^    architecture\s+llama$", out, re.M)
    assert re.search(r"^    parameters\s+\S+", out, re.M)
    assert re.search(r"^    context length\s+\d+$", out, re.M)
    assert re.search(r"^    embedding length\s+576$", out, re.M)
    assert re.search(r"^    quantization\s+Q4_1$", out, re.M), out
    assert re.search(r"^  Capabilities\n    completion", out, re.M)


def test_show_verbose_lists_metadata(env: CliEnv) -> None:
    result = env.run("show", "smollm2:135m", "--verbose")
    assert result.returncode == 0, result.stderr
    assert "  Metadata" in result.stdout
    assert re.search(r"^    general\.architecture\s+llama$", result.stdout, re.M)


def test_show_single_fields(env: CliEnv) -> None:
    modelfile = env.run("show", "smollm2:135m", "--modelfile")
    assert modelfile.returncode == 0, modelfile.stderr
    assert re.search(r"^FROM ", modelfile.stdout, re.M)
    template = env.run("show", "smollm2:135m", "--template")
    assert template.returncode == 0
    assert "im_start" in template.stdout
    for flag in ("--parameters", "--system", "--license"):
        assert env.run("show", "smollm2:135m", flag).returncode == 0


def test_show_two_fields_at_once_is_an_error(env: CliEnv) -> None:
    assert_clean_error(env.run("show", "smollm2:135m", "--template", "--system"), "only one of")


def test_unknown_model_errors(env: CliEnv) -> None:
    assert_clean_error(env.run("show", "no-such-model"), "not found")
    assert_clean_error(env.run("rm", "no-such-model"), "not found")
    assert_clean_error(env.run("cp", "no-such-model", "other"), "not found")
    assert_clean_error(env.run("stop", "no-such-model"), "no-such-model")


def test_invalid_name_is_an_error(env: CliEnv) -> None:
    result = env.run("show", "../../etc/passwd")
    assert_clean_error(result)


def test_cp_then_rm_several(env: CliEnv) -> None:
    assert env.run("cp", "smollm2:135m", "copy-a").stdout.strip() == "copied 'smollm2:135m' to 'copy-a'"
    assert env.run("cp", "smollm2:135m", "copy-b:v2").returncode == 0
    names = [line.split()[0] for line in env.run("list").stdout.splitlines()[1:]]
    assert {"copy-a:latest", "copy-b:v2", "smollm2:135m"} <= set(names)
    result = env.run("rm", "copy-a", "copy-b:v2")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["deleted 'copy-a'", "deleted 'copy-b:v2'"]
    names = [line.split()[0] for line in env.run("list").stdout.splitlines()[1:]]
    assert "copy-a:latest" not in names and "smollm2:135m" in names
    assert (env.models_dir / "blobs" / f"sha256-{SMOLLM2_SHA256}").exists(), "the shared blob stays"


def test_pull_of_unknown_model_fails_cleanly(env: CliEnv) -> None:
    result = env.run("pull", "no-such-model-anywhere:1b", timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")


def test_create_without_modelfile_is_an_error(env: CliEnv) -> None:
    assert_clean_error(env.run("create", "x", "-f", "missing/Modelfile"), "no Modelfile at")


# --- generation --------------------------------------------------------------


def test_create_streams_status(env: CliEnv, terse: str) -> None:
    listed = env.run("list", "terse").stdout
    assert "terse:latest" in listed
    params = env.run("show", terse, "--parameters")
    assert "num_predict" in params.stdout


def test_run_with_prompt_prints_answer(env: CliEnv, terse: str) -> None:
    result = env.run("run", terse, "Name a color.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip(), "an answer"
    assert "\x1b" not in result.stdout, "no terminal codes in piped output"


def test_run_reads_piped_stdin_and_verbose_prints_stats(env: CliEnv, terse: str) -> None:
    result = env.run("run", terse, "--verbose", input="Name a fruit.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()
    for label in ("total duration:", "load duration:", "prompt eval count:", "prompt eval rate:",
                  "eval count:", "eval rate:"):
        assert label in result.stderr, result.stderr
    assert re.search(r"eval rate:\s+[\d.]+ tokens/s", result.stderr)


def test_run_verbose_shows_the_draft_acceptance_rate(env: CliEnv, smollm2_path: Path) -> None:
    (env.root / "Modelfile.spec").write_text(f"FROM {smollm2_path}\nPARAMETER engine native\n"
                                             "PARAMETER speculative on\nPARAMETER num_predict 24\n"
                                             "PARAMETER temperature 0\n")
    assert env.run("create", "speculating", "-f", "Modelfile.spec").returncode == 0
    text = "The red fox ran over the hill, and the red fox ran over the hill again."
    result = env.run("run", "speculating", "--verbose", f"Repeat this sentence exactly: {text}")
    assert result.returncode == 0, result.stderr
    assert re.search(r"draft tokens:\s+\d+/\d+ accepted \([\d.]+%\)", result.stderr), result.stderr


def test_run_format_json_answers_json(env: CliEnv, terse: str) -> None:
    result = env.run("run", terse, "--format", "json", "--keepalive", "1m",
                     "Give a JSON object with a key named color.")
    assert result.returncode == 0, result.stderr
    assert result.stdout.lstrip().startswith("{")


def test_ps_shows_loaded_model_then_stop_unloads(env: CliEnv, terse: str) -> None:
    assert env.run("run", terse, "--keepalive", "10m", "Hi").returncode == 0
    result = env.run("ps")
    assert result.returncode == 0, result.stderr
    header, *rows = result.stdout.splitlines()
    assert header.split() == ["NAME", "ID", "SIZE", "PROCESSOR", "CONTEXT", "ENGINE", "RUNNER", "UNTIL"]
    row = next(r for r in rows if r.startswith("terse:latest"))
    assert "100% CPU" in row and "from now" in row
    assert ("native" in row) == (kernels.isa() in MEASURED_ISAS)
    shown = httpx.get(env.base_url + "/api/ps").json()["models"]
    context = next(m for m in shown if m["name"] == "terse:latest")["context_length"]
    assert re.search(rf"CPU\s+{context}\s", row), row
    stopped = env.run("stop", terse)
    assert stopped.returncode == 0, stopped.stderr
    assert not any(r.startswith("terse:latest") for r in env.run("ps").stdout.splitlines()[1:])


def test_ps_tells_a_models_generating_and_embedding_runners_apart(env: CliEnv, terse: str) -> None:
    """A chat and an embedding call load two runners of one model: ps names which is which, stop ends both."""
    assert env.run("run", terse, "--keepalive", "10m", "Hi").returncode == 0
    embedded = httpx.post(env.base_url + "/api/embed", json={"model": terse, "input": "Hi", "keep_alive": "10m"},
                          timeout=120)
    assert embedded.status_code == 200, embedded.text
    header, *rows = env.run("ps").stdout.splitlines()
    column = header.index("RUNNER")  # columns are padded to the header's widths
    ours = [row for row in rows if row.startswith("terse:latest")]
    assert sorted(row[column:].split()[0] for row in ours) == ["embed", "generate"], rows
    shown = [m for m in httpx.get(env.base_url + "/api/ps").json()["models"] if m["name"] == "terse:latest"]
    assert sorted(m["runner"] for m in shown) == ["embed", "generate"], shown
    assert env.run("stop", terse).returncode == 0
    assert not any(row.startswith("terse:latest") for row in env.run("ps").stdout.splitlines()[1:])


@pytest.mark.parametrize(("args", "needle"), [
    (["--format", "yaml"], "--format"),
    (["--keepalive", "soon"], "--keepalive"),
])
def test_run_bad_flags_are_clear_errors(env: CliEnv, args: list[str], needle: str) -> None:
    assert_clean_error(env.run("run", "smollm2:135m", *args, "hi"), needle)


def test_run_pulls_a_missing_model_first(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    try:
        (cli.root / "Modelfile").write_text(TERSE_MODELFILE)
        result = cli.run("run", "smollm2:135m", "--keepalive", "0", "Say hi.", timeout=600)
        assert result.returncode == 0, result.stderr
        assert "pulling manifest" in result.stderr and "success" in result.stderr
        assert result.stdout.strip()
        assert "smollm2:135m" in cli.run("list").stdout
    finally:
        cli.kill_daemons()


def test_run_of_missing_model_tries_to_pull_and_fails_cleanly(env: CliEnv) -> None:
    result = env.run("run", "no-such-model-anywhere:1b", "hi", timeout=120)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1].startswith("Error: ")


def test_version_with_port_held_by_another_program(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", cli.port), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        result = cli.run("--version")
        assert result.returncode == 0, result.stderr
        assert "could not connect" in result.stdout and "Traceback" not in result.stderr
    finally:
        server.shutdown()
        server.server_close()


def test_api_key_is_sent_as_bearer_token(tmp_path: Path) -> None:
    cli = CliEnv(tmp_path)
    cli.env["LOCALLLM_API_KEY"] = "sesame"
    try:
        result = cli.run("list")
        assert result.returncode == 0, result.stderr
        assert httpx.get(cli.base_url + "/api/tags", timeout=10).status_code == 401, "the daemon wants the key"
        del cli.env["LOCALLLM_API_KEY"]
        assert_clean_error(cli.run("list"))
    finally:
        cli.kill_daemons()
