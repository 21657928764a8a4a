"""Files in Ollama's own layout (as its library ships them) load through the real daemon: translated once
for llama.cpp into the store's cache, giving the same logits as the same weights in llama.cpp's layout;
an encoder carried inside the one file is split out as the projector, so images work; the cache counts in
the model's size and goes with it; a file that cannot be translated or loaded is a clear error."""

from __future__ import annotations

import hashlib
import json

import httpx
import ollama
import openai
import pytest
from support import arch_models
from support.images import data_url, picture

from localllm.registry.ollama_compat import TRANSLATION_VERSION

QUESTION = "What colour is this picture? Answer in one word."
CHATML = ('TEMPLATE """{{- range .Messages }}<|im_start|>{{ .Role }}\n{{ .Content }}<|im_end|>\n'
          '{{ end }}<|im_start|>assistant\n"""\n')


def _sha256(path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def _translated(daemon, digest: str):
    return daemon.root / "models" / "translated" / f"sha256-{digest.removeprefix('sha256:')}"


def _layers(daemon, name: str) -> list[dict]:
    """The config and layer descriptors of model ``name``'s manifest."""
    path = daemon.root / "models" / "manifests" / "registry.ollama.ai" / "library" / name / "latest"
    manifest = json.loads(path.read_text())
    return [*manifest["layers"], manifest["config"]]


def _logprobs(client: openai.OpenAI, model: str) -> tuple[str, list[tuple[str, float, list[tuple[str, float]]]]]:
    answer = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Tell me a story about a red fox."}], max_tokens=8,
        temperature=0, logprobs=True, top_logprobs=5)
    content = answer.choices[0].logprobs.content
    return answer.choices[0].message.content, [
        (t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs]) for t in content]


@pytest.fixture(scope="module")
def oss_files(tmp_path_factory, smollm2_path):
    root = tmp_path_factory.mktemp("oss")
    upstream = arch_models.gpt_oss(root / "upstream.gguf", smollm2_path, "upstream")
    theirs = arch_models.gpt_oss(root / "ollama.gguf", smollm2_path, "ollama")
    return upstream, theirs


@pytest.mark.slow  # two models loaded, one of them twice
def test_ollama_gpt_oss_gives_the_upstream_logits_and_its_translation_goes_with_it(daemon, oss_files):
    upstream, theirs = oss_files
    blob_digest, blob_bytes = _sha256(theirs), theirs.read_bytes()
    daemon.create("oss-upstream", f"FROM {upstream}\n")
    daemon.create("oss-ollama", f"FROM {theirs}\n")
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "oss-ollama"}).json()
    assert shown["details"]["family"] == "gptoss"  # the blob is Ollama's, as ollama show says

    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    text, logprobs = _logprobs(client, "oss-ollama")
    assert logprobs and (text, logprobs) == _logprobs(client, "oss-upstream")

    ps = {m["name"]: m for m in httpx.get(f"{daemon.url}/api/ps").json()["models"]}
    assert ps["oss-ollama:latest"]["engine"] == "native"  # the translated file is a gpt-oss the native engine runs
    translated = _translated(daemon, blob_digest)
    files = [p for p in translated.rglob("*") if p.is_file()]
    assert [p.name for p in files] == ["model.gguf"]
    assert theirs.read_bytes() == blob_bytes  # the file itself (the store links it) is never changed
    assert not list((daemon.root / "models" / "partial").glob(".tmp-*"))

    tags = {m["name"]: m for m in httpx.get(f"{daemon.url}/api/tags").json()["models"]}
    layers = sum(d["size"] for d in _layers(daemon, "oss-ollama"))
    assert tags["oss-ollama:latest"]["size"] == layers + files[0].stat().st_size  # the cache counts as its disk

    # a second load (after an unload) reuses the translation rather than writing it again
    mtime = files[0].stat().st_mtime_ns
    ollama.Client(host=daemon.url).generate(model="oss-ollama", prompt="", keep_alive=0)
    assert _logprobs(client, "oss-ollama")[1] == logprobs
    assert files[0].stat().st_mtime_ns == mtime

    assert httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "oss-ollama"}).status_code == 200
    assert not translated.exists()
    assert httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "oss-upstream"}).status_code == 200


def test_ollama_olmo3_gives_the_olmo2_logits(daemon, tmp_path, smollm2_path):
    daemon.create("olmo-upstream", f"FROM {arch_models.olmo(tmp_path / 'up.gguf', smollm2_path, 'upstream')}\n"
                                   "PARAMETER engine llama.cpp\n")
    daemon.create("olmo-ollama", f"FROM {arch_models.olmo(tmp_path / 'ol.gguf', smollm2_path, 'ollama')}\n"
                                 "PARAMETER engine llama.cpp\n")
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)
    assert _logprobs(client, "olmo-ollama") == _logprobs(client, "olmo-upstream")
    for name in ("olmo-upstream", "olmo-ollama"):  # show finds each one's runner, the translation's too
        context = httpx.post(f"{daemon.url}/api/show", json={"model": name}).json()["context"]
        assert context["loaded"] is True, (name, context)
    for name in ("olmo-upstream", "olmo-ollama"):
        httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": name})


@pytest.fixture(scope="module")
def one_file_vision(daemon, tmp_path_factory, smollm2_path, projector_path):
    """SmolLM2 with the colour projector inside its one GGUF (Ollama's way), and the same as a pair."""
    path = arch_models.embedded_projector(tmp_path_factory.mktemp("vision") / "one.gguf", smollm2_path,
                                          projector_path)
    params = "PARAMETER temperature 0\nPARAMETER num_ctx 1024\n"
    daemon.create("vision-one", f"FROM {path}\n{CHATML}{params}")
    daemon.create("vision-pair", f"FROM {smollm2_path}\nFROM {projector_path}\n{CHATML}{params}")
    yield path
    for name in ("vision-one", "vision-pair"):
        httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": name})


def _ask(daemon, model: str, colour: str) -> str:
    answer = ollama.Client(host=daemon.url).chat(model=model, options={"num_predict": 12, "temperature": 0},
                                                 messages=[{"role": "user", "content": QUESTION,
                                                            "images": [picture(colour)]}])
    return answer.message.content


@pytest.mark.slow  # four image questions on a shared 2-core machine
def test_an_encoder_inside_the_model_file_is_split_out_as_its_projector(daemon, one_file_vision):
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "vision-one"}).json()
    assert "vision" in shown["capabilities"]
    answers = {colour: _ask(daemon, "vision-one", colour) for colour in ("red", "blue")}
    assert answers == {colour: _ask(daemon, "vision-pair", colour) for colour in ("red", "blue")}
    assert "red" in answers["red"].lower() and answers["red"] != answers["blue"]  # the picture is seen
    translated = _translated(daemon, _sha256(one_file_vision))
    assert sorted(p.name for p in translated.rglob("*.gguf")) == ["model.gguf", "projector.gguf"]
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "vision-one"}).json()
    assert shown["projector_info"]["clip.projector_type"] == "mlp"


def test_a_truncated_ollama_file_is_refused_at_create(daemon, tmp_path, smollm2_path, projector_path):
    whole = arch_models.embedded_projector(tmp_path / "whole.gguf", smollm2_path, projector_path)
    cut = arch_models.embedded_projector(tmp_path / "cut.gguf", smollm2_path, projector_path,
                                         truncate_to=whole.stat().st_size - 1000)
    response = httpx.post(f"{daemon.url}/api/create", json={"model": "cut", "modelfile": f"FROM {cut}\n",
                                                           "stream": False}, timeout=60)
    assert response.status_code == 400 and "truncated" in response.json()["error"]
    assert "error" not in ollama.Client(host=daemon.url).generate(model="smollm2:135m", prompt="Hi",
                                                                  options={"num_predict": 2})


def test_an_inconsistent_ollama_file_is_a_400_naming_what_is_missing(daemon, tmp_path, smollm2_path):
    broken = arch_models.gpt_oss(tmp_path / "broken.gguf", smollm2_path, "ollama",
                                 drop=("blk.0.ffn_gate_exps.weight",))
    daemon.create("oss-broken", f"FROM {broken}\n")
    for _ in range(2):  # the same answer again: nothing was left half-done by the first
        response = httpx.post(f"{daemon.url}/api/chat", json={
            "model": "oss-broken", "messages": [{"role": "user", "content": "Hi"}], "stream": False}, timeout=60)
        assert response.status_code == 400
        error = response.json()["error"]
        assert "'gptoss'" in error and "blk.0.ffn_gate_exps.weight" in error and "expert_feed_forward_length" in error
    assert not _translated(daemon, _sha256(broken)).exists()
    assert not list((daemon.root / "models" / "partial").glob(".tmp-*"))
    assert "error" not in ollama.Client(host=daemon.url).generate(model="smollm2:135m", prompt="Hi",
                                                                  options={"num_predict": 2})
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "oss-broken"})


def test_a_translated_file_llama_cpp_still_refuses_names_the_architecture_and_the_tensor(daemon, tmp_path,
                                                                                          smollm2_path):
    broken = arch_models.gpt_oss(tmp_path / "nosinks.gguf", smollm2_path, "ollama", drop=("blk.1.attn_sinks",))
    daemon.create("oss-nosinks", f"FROM {broken}\n")
    response = httpx.post(f"{daemon.url}/api/chat", json={
        "model": "oss-nosinks", "messages": [{"role": "user", "content": "Hi"}], "stream": False}, timeout=120)
    error = response.json()["error"]
    assert response.status_code >= 400
    assert "architecture 'gpt-oss': the file lacks the tensor 'blk.1.attn_sinks.weight'" in error
    assert "error" not in ollama.Client(host=daemon.url).generate(model="smollm2:135m", prompt="Hi",
                                                                  options={"num_predict": 2})
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "oss-nosinks"})


def test_ollama_gemma3_with_its_encoder_inside_sees_images_as_the_upstream_pair(daemon, tmp_path):
    model, projector = arch_models.gemma3_vision(tmp_path / "up", "upstream")
    one, _ = arch_models.gemma3_vision(tmp_path / "ol", "ollama")
    daemon.create("g3-pair", f"FROM {model}\nFROM {projector}\n{CHATML}")
    daemon.create("g3-one", f"FROM {one}\n{CHATML}")
    client = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="x", max_retries=0)

    def ask(name: str, colour: str):
        image = {"type": "image_url", "image_url": {"url": data_url(picture(colour))}}
        content = [{"type": "text", "text": "w1 w2"}, image]
        answer = client.chat.completions.create(model=name, max_tokens=4, temperature=0, logprobs=True,
                                                top_logprobs=5, messages=[{"role": "user", "content": content}])
        return [(t.token, t.logprob, [(a.token, a.logprob) for a in t.top_logprobs])
                for t in answer.choices[0].logprobs.content]

    red = ask("g3-one", "red")
    assert red == ask("g3-pair", "red") and red != ask("g3-one", "blue")  # the same encoder, and it sees
    for name in ("g3-pair", "g3-one"):
        httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": name})



@pytest.mark.slow  # its own daemon and registry, two models loaded
def test_pulled_from_a_registry_as_ollama_ships_it_runs_and_rm_takes_its_translation(tmp_path, oss_files):
    """``localllm pull gpt-oss:20b`` of a file in Ollama's layout (a local registry in place of Ollama's), then
    ``run``, ``list`` and ``rm`` through the CLI."""
    import subprocess
    import sys

    from support.daemon import Daemon
    from support.registry_servers import RegistryServer

    from localllm.registry.store import MEDIA_MODEL

    upstream, theirs = oss_files
    with RegistryServer(tmp_path / "registry") as registry:
        registry.publish("library/gpt-oss", "20b", [(MEDIA_MODEL, theirs)])
        daemon = Daemon(tmp_path / "daemon", LOCALLLM_REGISTRY=registry.url).start()
        try:
            def cli(*args: str) -> str:
                done = subprocess.run([sys.executable, "-m", "localllm", *args], env=daemon.env, text=True,
                                      capture_output=True, timeout=300, stdin=subprocess.DEVNULL)
                assert done.returncode == 0, done.stderr
                return done.stdout

            cli("pull", "--insecure", "gpt-oss:20b")
            daemon.create("oss-upstream", f"FROM {upstream}\n")
            client = ollama.Client(host=daemon.url)
            options = {"temperature": 0, "num_predict": 8}
            pulled = client.generate(model="gpt-oss:20b", prompt="Once upon a time", options=options, raw=True)
            assert pulled.response == client.generate(model="oss-upstream", prompt="Once upon a time",
                                                      options=options, raw=True).response
            translated = _translated(daemon, _sha256(theirs))
            made = translated / f"v{TRANSLATION_VERSION}" / "model.gguf"
            assert made.is_file()
            listed = next(m for m in client.list().models if m.model == "gpt-oss:20b")
            assert listed.size == theirs.stat().st_size + made.stat().st_size + len(
                b'{"model_format":"gguf","rootfs":{"type":"layers","diff_ids":[]}}')
            cli("rm", "gpt-oss:20b")
            assert not translated.exists()
        finally:
            daemon.stop()


@pytest.mark.parametrize("family", ["qwen25vl", "qwen3vl", "qwen35", "glmocr", "gemma4", "llama4"])
def test_an_encoder_inside_the_file_sees_images_as_libmtmd_does(daemon, tmp_path, family):
    """Ollama's one file of each family whose encoder is split out: the image's answer is libmtmd's own (its
    logits after the prompt, through the upstream pair), and the next turn, which reuses the image's cells and
    continues after it (at the positions after an M-RoPE image's 2D grid: Qwen-VL, Qwen 3.5, GLM-OCR), equals a
    fresh runner's."""
    import numpy as np

    from support.images import COLOURS

    model, mmproj, one = arch_models.vision_family(tmp_path / family, family)
    name = f"vision-{family}"
    daemon.create(name, f"FROM {one}\n{CHATML}")
    client = ollama.Client(host=daemon.url)
    assert "vision" in client.show(name).capabilities
    size = (48, 40)

    evaluated: list[int] = []  # each answer's prompt tokens computed (not taken from the cache)

    def top(prompt: str, colour: str) -> list[float]:
        answer = client.generate(model=name, prompt=prompt, images=[picture(colour, size=size)], raw=True,
                                 options={"temperature": 0, "num_predict": 1, "repeat_penalty": 1.0},
                                 logprobs=True, top_logprobs=5)
        evaluated.append(answer.prompt_eval_count)
        return sorted((t.logprob for t in answer.logprobs[0].top_logprobs), reverse=True)

    rgb = bytes(COLOURS["red"]) * (size[0] * size[1])
    logits = arch_models.libmtmd_logits(model, mmproj, "<__media__>look here", rgb, *size).astype(np.float64)
    logprobs = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    ours = top("look here", "red")
    theirs = sorted(logprobs, reverse=True)[:5]
    assert len(ours) == 5 and np.allclose(ours, theirs, atol=2e-3), (ours, theirs)
    longer = top("look here and there", "red")  # the image's cells reused, the text after it at its positions
    httpx.post(f"{daemon.url}/api/generate", json={"model": name, "keep_alive": 0}).raise_for_status()
    assert np.allclose(longer, top("look here and there", "red"), atol=1e-4)  # a fresh runner (other batches)
    assert evaluated[1] < evaluated[2] // 2  # the image came from the cache
    assert not np.allclose(ours, top("look here", "blue"), atol=1e-3)
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": name})


def test_gemma4_hears_through_the_audio_encoder_inside_its_file(daemon, tmp_path):
    """Ollama's gemma4 file carrying its vision and audio encoders: both are split out into one projector, so
    the model lists both; a clip's next-token logprobs are libmtmd's through the upstream pair (mmproj with the
    conformer), another clip gives others, and the chat (OpenAI ``input_audio``) and transcription APIs answer
    from what the clip holds."""
    import numpy as np

    from support.audio import b64, chirp, tone, wav

    model, mmproj, one = arch_models.gemma4_hearing(tmp_path / "gemma4-audio")
    name = "hearing-gemma4"
    daemon.create(name, f"FROM {one}\n{CHATML}")
    client = ollama.Client(host=daemon.url)
    assert {"audio", "vision"} <= set(client.show(name).capabilities)
    low, sweep = wav(tone(300, 0.6)), wav(chirp(200, 4000, 0.6))

    def top(clip: bytes) -> list[float]:
        answer = client.generate(model=name, prompt="listen", images=[clip], raw=True, logprobs=True, top_logprobs=5,
                                 options={"temperature": 0, "num_predict": 1, "repeat_penalty": 1.0})
        return sorted((t.logprob for t in answer.logprobs[0].top_logprobs), reverse=True)

    logits = arch_models.libmtmd_logits(model, mmproj, "<__media__>listen", media_file=low).astype(np.float64)
    logprobs = logits - logits.max() - np.log(np.exp(logits - logits.max()).sum())
    heard = top(low)
    assert np.allclose(heard, sorted(logprobs, reverse=True)[:5], atol=2e-3), heard
    assert not np.allclose(heard, top(sweep), atol=1e-3)

    oai = openai.OpenAI(base_url=f"{daemon.url}/v1", api_key="unused", max_retries=0)

    def first_token(clip: bytes) -> dict[str, float]:
        answer = oai.chat.completions.create(model=name, max_tokens=4, temperature=0, logprobs=True, top_logprobs=5,
                                             messages=[{"role": "user", "content": [
                                                 {"type": "input_audio", "input_audio": {"data": b64(clip), "format": "wav"}},
                                                 {"type": "text", "text": "What do you hear?"}]}])
        return {t.token: t.logprob for t in answer.choices[0].logprobs.content[0].top_logprobs}

    assert first_token(low) != first_token(sweep)
    transcripts = [oai.audio.transcriptions.create(model=name, file=("clip.wav", clip), response_format="verbose_json")
                   for clip in (low, sweep)]
    assert all(t.segments for t in transcripts)
    assert transcripts[0].segments[0].avg_logprob != transcripts[1].segments[0].avg_logprob
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": name})
