"""A model's template is bounded in time and memory by the worker process it renders in, whatever
constructs it uses, and a template past a limit costs the daemon one request, not its service."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from support.gguf_builders import tiny_model

from localllm.templates.gotemplate import TemplateError
from localllm.templates.prompt import PromptError, build_generate_prompt, build_prompt, render_chat_prompt, \
    render_ollama_template
from localllm.templates import worker
from localllm.templates.worker import MAX_RENDER_SECONDS, call_bounded

LIMIT = 0.5
USER = [{"role": "user", "content": "hi"}]
LOOPS_2 = "{% set x = range(20000)|list %}{% for a in x %}{% for b in x %}{% endfor %}{% endfor %}"
LOOPS_3 = ("{% set x = range(99999)|list %}"
           "{% for a in x %}{% for b in x %}{% for c in x %}{% endfor %}{% endfor %}{% endfor %}")


def jinja(source: str, seconds: float = LIMIT) -> str:
    return call_bounded(render_chat_prompt, {"messages": USER, "system": None, "model_template": None,
                                             "gguf_chat_template": source, "bos_token": "", "eos_token": ""}, seconds)


@pytest.fixture(autouse=True)
def warm_worker() -> None:
    """A started worker, so the times measured are the render's, not a Python start's."""
    jinja("{{ messages[0].content }}")


def assert_stopped_near_the_limit(render, limit: float = LIMIT) -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match=f"rendering took longer than {limit:g} s"):
        render()
    assert time.monotonic() - started < limit + 1.0


@pytest.mark.parametrize("source", [
    LOOPS_2,
    LOOPS_3,
    "{% for a in range(99999) %}{% for b in range(99999) %}{% if a == b %}{% endif %}{% endfor %}{% endfor %}",
    # a filter that runs as one C-level call: sum of 3000 lists of 3000 items is quadratic
    "{% set x = range(3000)|list %}{{ ([x] * 3000) | sum(start=[]) | length }}",
    "{% set x = range(99999)|list %}{% for a in x %}{{ x | sort | first }}{% endfor %}",
    "{% macro m(n) %}{{ n }}{% endmacro %}{% for a in range(99999) %}{% for b in range(99999) %}"
    "{{ m(b) if b < 0 }}{% endfor %}{% endfor %}",
    "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}{{ f(60) }}",
    "{% set ns = namespace(s='') %}{% for a in range(99999) %}{% for b in range(99999) %}"
    "{% set ns.s = (ns.s ~ 'x')[-10:] %}{% endfor %}{% endfor %}",
], ids=["loops2", "loops3", "loops-if", "sum-of-lists", "sort-in-loop", "macro-in-loops", "recursion", "string-building"])
def test_a_jinja_template_stops_near_the_time_limit(source: str) -> None:
    assert_stopped_near_the_limit(lambda: jinja(source))


DOUBLED_GO = '{{ $x := printf "%9999s" "" }}' + '{{ $x = printf "%s%s" $x $x }}' * 10  # $x: 10 M characters
SLOW_GO = DOUBLED_GO + '{{ range 200000 }}{{ $y := printf "%s%s" $x "." }}{{ end }}'


def test_a_go_template_stops_near_the_time_limit() -> None:
    assert_stopped_near_the_limit(lambda: call_bounded(render_ollama_template, {"text": SLOW_GO, "messages": USER},
                                                       LIMIT))


@pytest.mark.parametrize("source", [
    "{% set s = 'x' * 100000 %}{{ s.replace('', s) | length }}",  # 10 G characters from one call
    # values each within the size limit, 8 MB apiece, kept until they pass the memory limit
    "{% set ns = namespace(kept=[]) %}{% for i in range(1000) %}"
    "{% set ns.kept = ns.kept + [('x' * 8000000) ~ i] %}{% endfor %}{{ ns.kept | length }}",
])
def test_a_jinja_template_is_bounded_in_memory(source: str) -> None:
    with pytest.raises(TemplateError, match="more than 1024 MiB of memory"):
        jinja(source, seconds=30)
    assert jinja("{{ messages[0].content }}") == "hi"  # the worker that ran out was replaced


def test_a_go_template_is_bounded_in_memory() -> None:
    kept = "".join(f'{{{{ $k{i} := printf "%s%d" $x {i} }}}}' for i in range(200))  # 200 values of 10 M characters
    with pytest.raises(TemplateError, match="more than 1024 MiB of memory"):
        call_bounded(render_ollama_template, {"text": DOUBLED_GO + kept, "messages": USER}, 30)


@pytest.mark.parametrize("source,message", [
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
     "string larger"),
    ("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = [ns.s, ns.s] | join %}{% endfor %}",
     "value larger"),
    ("{{ 'a' * 10**10 }}", "repetition larger"),
    ("{{ ['a'] * 10**10 }}", "repetition larger"),
    ("{{ ('ab' * 1000000) * 1000 }}", "repetition larger"),
])
def test_string_doubling_and_big_repetition_are_refused_at_the_size_limit(source: str, message: str) -> None:
    started = time.monotonic()
    with pytest.raises(TemplateError, match=f"refused to build a {message} than 8388608"):
        jinja(source, seconds=10)
    assert time.monotonic() - started < 5


def test_output_up_to_its_limit_comes_back_whole_and_more_is_refused_naming_it() -> None:
    assert jinja("{{ 'é' * 4000000 }}{{ '\U0001F600' * 4000000 }}", seconds=30) == "é" * 4000000 + "\U0001F600" * 4000000
    with pytest.raises(TemplateError, match="output larger than 8388608 characters"):
        jinja("{% for i in range(3) %}{{ 'x' * 4000000 }}{% endfor %}", seconds=30)


def test_limits_leave_normal_renders_and_errors_as_they_were() -> None:
    go = "{{ range .Messages }}[{{ .Role }}] {{ .Content }}{{ end }}"
    assert build_prompt(messages=USER, system="Be brief.", model_template=go, gguf_chat_template=None,
                        bos_token="", eos_token="") == "[system] Be brief.[user] hi"
    with pytest.raises(TemplateError, match="tokenizer.chat_template: no such role"):
        build_prompt(messages=USER, system=None, model_template=None, bos_token="", eos_token="",
                     gguf_chat_template="{{ raise_exception('no such role') }}")
    with pytest.raises(TemplateError, match="line 1, col 4") as err:
        build_prompt(messages=USER, system=None, model_template="{{ .Nope.Deeper 1 }}", gguf_chat_template=None,
                     bos_token="", eos_token="")
    assert err.value.line == 1
    with pytest.raises(PromptError, match="does not support insert"):
        build_generate_prompt(prompt="a", system=None, suffix="b", template_override=None, model_template=None,
                              gguf_chat_template="{{ messages }}", bos="", eos="", raw=False)


def test_renders_run_side_by_side_with_a_slow_one() -> None:
    both = [threading.Thread(target=jinja, args=("{{ messages[0].content }}",)) for _ in range(2)]
    for thread in both:  # two workers started, the times below are the renders'
        thread.start()
    for thread in both:
        thread.join()
    slow = threading.Thread(target=lambda: pytest.raises(TemplateError, jinja, LOOPS_3, 3.0))
    slow.start()
    try:
        assert jinja("{{ messages[0].content }}") == "hi"
        assert slow.is_alive()  # answered beside the slow render, not after it
    finally:
        slow.join()


def test_waiting_for_a_free_render_process_is_held_to_the_limit() -> None:
    """Every render process busy with an endless template: another render is refused within its own limit,
    not after theirs."""
    busy = [threading.Thread(target=lambda: pytest.raises(TemplateError, jinja, LOOPS_3, 4.0))
            for _ in range(worker.MAX_WORKERS)]
    for thread in busy:
        thread.start()
    try:
        time.sleep(2.0)  # every worker taken (and started, on a slow machine)
        started = time.monotonic()
        with pytest.raises(TemplateError, match=f"no render process came free within {LIMIT:g} s"):
            jinja("{{ messages[0].content }}")
        assert time.monotonic() - started < LIMIT + 1.0
    finally:
        for thread in busy:
            thread.join()


# --- through the daemon ----------------------------------------------------------------------


@pytest.mark.slow  # two model loads and a render to its limit: about 20 s
def test_a_daemon_answers_an_endless_gguf_template_with_a_400_and_goes_on_serving(daemon, tmp_path: Path) -> None:
    endless = tiny_model(tmp_path / "endless.gguf", extra=lambda w: w.add_chat_template(LOOPS_3))
    daemon.create("tiny-endless", f"FROM {endless}")

    def chat(model: str) -> httpx.Response:
        return httpx.post(f"{daemon.url}/api/chat", timeout=60, json={
            "model": model, "messages": USER, "stream": False, "options": {"num_predict": 4}})

    assert chat("smollm2:135m").status_code == 200  # loaded, so the times below are the requests'
    hostile: dict[str, object] = {}

    def send_hostile() -> None:
        started = time.monotonic()
        hostile["response"] = chat("tiny-endless")
        hostile["seconds"] = time.monotonic() - started

    sender = threading.Thread(target=send_hostile)
    sender.start()
    try:
        time.sleep(1.0)
        meanwhile = chat("smollm2:135m")
        assert meanwhile.status_code == 200, meanwhile.text
        assert sender.is_alive()  # answered while the endless render was still going
    finally:
        sender.join()
    response = hostile["response"]
    assert response.status_code == 400, response.text
    assert f"rendering took longer than {MAX_RENDER_SECONDS:g} s" in response.json()["error"]
    assert "tiny-endless" in response.json()["error"]
    assert hostile["seconds"] < MAX_RENDER_SECONDS + 10  # the limit, a load of the tiny model, a busy machine
    after = chat("smollm2:135m")
    assert after.status_code == 200 and after.json()["message"]["role"] == "assistant"


def test_create_refuses_an_endless_modelfile_template_in_time(daemon) -> None:
    started = time.monotonic()
    response = httpx.post(f"{daemon.url}/api/create", timeout=60, json={
        "model": "endless-go", "stream": False,
        "modelfile": f'FROM smollm2:135m\nTEMPLATE """{SLOW_GO}"""'})
    assert response.status_code == 400, response.text
    assert "TEMPLATE cannot be used" in response.text
    assert time.monotonic() - started < MAX_RENDER_SECONDS + 5


def test_a_render_process_imports_nothing_from_the_daemons_working_folder(tmp_path: Path, monkeypatch) -> None:
    """Python puts a child's working folder first on its import path: a render process started where a stray
    ``json.py`` lies must not run it."""
    marker = tmp_path / "ran"
    (tmp_path / "json.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise SystemExit(3)\n")
    monkeypatch.chdir(tmp_path)
    process = worker._Worker()  # a fresh process, started here (the pool's may have started elsewhere)
    try:
        assert not marker.exists()
        assert process.process.poll() is None
    finally:
        process.kill()
