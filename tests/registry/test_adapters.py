"""Modelfile ADAPTER: a LoRA GGUF stored as an adapter layer and applied by llama.cpp."""

from __future__ import annotations

import httpx

from support.gguf_builders import lora_adapter

SMOLLM2_EMBD, SMOLLM2_LAYERS = 576, 30
GREEDY = {"temperature": 0, "num_predict": 24, "seed": 1}


def _generate(daemon, model: str) -> httpx.Response:
    return httpx.post(f"{daemon.url}/api/generate", timeout=300, json={
        "model": model, "prompt": "Why is the sky blue?", "stream": False, "options": GREEDY})


def test_lora_adapter_is_stored_and_changes_the_output(daemon, smollm2_path, tmp_path):
    lora_adapter(tmp_path / "lora.gguf", SMOLLM2_EMBD, SMOLLM2_LAYERS)
    (tmp_path / "Modelfile").write_text(f"FROM {smollm2_path}\nADAPTER ./lora.gguf\n")
    response = httpx.post(f"{daemon.url}/api/create", timeout=120, json={
        "model": "smollm2-lora", "modelfile": (tmp_path / "Modelfile").read_text(), "stream": False,
        "path": str(tmp_path / "Modelfile")})
    assert response.status_code == 200, response.text
    shown = httpx.post(f"{daemon.url}/api/show", json={"model": "smollm2-lora"}).json()
    assert "ADAPTER " in shown["modelfile"]

    base, adapted = _generate(daemon, "smollm2:135m"), _generate(daemon, "smollm2-lora")
    assert base.status_code == adapted.status_code == 200, adapted.text
    assert adapted.json()["response"] != base.json()["response"]
    assert _generate(daemon, "smollm2-lora").json()["response"] == adapted.json()["response"]  # greedy: stable


def test_adapter_for_another_model_is_a_clear_error(daemon, smollm2_path, tmp_path):
    lora_adapter(tmp_path / "wrong.gguf", 64, 1)  # shapes of a much smaller model
    response = httpx.post(f"{daemon.url}/api/create", timeout=120, json={
        "model": "smollm2-wrong-lora", "stream": False, "path": str(tmp_path / "Modelfile"),
        "modelfile": f"FROM {smollm2_path}\nADAPTER {tmp_path / 'wrong.gguf'}\n"})
    assert response.status_code == 200, response.text  # the files are fine; the pairing shows at load
    answer = _generate(daemon, "smollm2-wrong-lora")
    assert answer.status_code == 500
    assert "adapter" in answer.json()["error"]
    assert _generate(daemon, "smollm2:135m").status_code == 200  # the daemon is fine
