// The chat page: model picker, pull, conversations, streaming with stop, per-chat settings,
// audio (a file or the microphone) for models that hear.

import { Api, ApiError } from "./api.js";
import { Recorder, canRecord, fileAttachment } from "./audio.js";
import { chatRequest, exportChats, loadChats, newChat, parseExport, saveChats } from "./chats.js";
import { renderMarkdown } from "./render.js";

const $ = (id) => document.getElementById(id);
const SETTINGS = ["system", "temperature", "num_ctx", "num_predict", "seed", "extra"];

const state = {
  chats: loadChats(),
  current: null,   // the open chat
  models: [],      // /api/tags entries, each with .capabilities once /api/show answered
  generation: null, // {controller} while an answer streams
  audio: [],       // attachments for the next message: {name, data}
  recorder: null,  // the Recorder while the microphone records
  recordings: 0,   // recordings made on this page, to name them
};

const api = new Api(askKey);

// ---- errors -----------------------------------------------------------------

function showBanner(message) {
  const banner = $("banner");
  banner.textContent = message;
  banner.hidden = !message;
}

function askKey(reason) {
  const dialog = $("key-dialog");
  $("key-reason").textContent = `${reason}. Enter the daemon's API key (LOCALLLM_API_KEY); it is kept in this tab only.`;
  $("key-input").value = "";
  return new Promise((resolve) => {
    const ok = () => {
      dialog.close();
      resolve($("key-input").value.trim() || null);
    };
    $("key-ok").onclick = ok;
    $("key-input").onkeydown = (event) => { if (event.key === "Enter") ok(); };
    dialog.oncancel = () => resolve(null);
    dialog.showModal();
  });
}

// ---- models -----------------------------------------------------------------

function formatBytes(bytes) {
  const units = ["B", "KB", "MB", "GB", "TB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) { value /= 1000; unit += 1; }
  return `${value.toFixed(value < 10 && unit > 0 ? 1 : 0)} ${units[unit]}`;
}

async function loadModels() {
  try {
    state.models = (await api.json("/api/tags")).models;
  } catch (error) {
    showBanner(error.message);
    return;
  }
  const select = $("model");
  select.replaceChildren(...state.models.map((model) => {
    const option = document.createElement("option");
    option.value = model.name;
    option.textContent = `${model.name} (${formatBytes(model.size)})`;
    return option;
  }));
  if (!state.models.length) {
    showBanner('No models yet: pull one (e.g. "smollm2:135m") with "Pull a model" above.');
  }
  // The chat's model is selected in the same tick the options appear, so a pick the user makes
  // while capabilities are still arriving is never overwritten by it.
  showChat();
  await Promise.all(state.models.map(async (model) => {
    try {
      model.capabilities = (await api.json("/api/show", { model: model.name })).capabilities ?? [];
    } catch {
      model.capabilities = null;  // the picker still offers it; sending will show the daemon's error
    }
  }));
  pickModel(false);  // the selected model's details, now with its capabilities
}

function modelInfo(name) {
  const model = state.models.find((m) => m.name === name);
  if (!model) return name ? `${name} is not in the store` : "";
  const details = model.details ?? {};
  const parts = [details.parameter_size, details.quantization_level, formatBytes(model.size)];
  if (model.capabilities) parts.push(model.capabilities.join(", "));
  return parts.filter(Boolean).join(" · ");
}

async function pull(event) {
  event.preventDefault();
  const name = $("pull-name").value.trim();
  const progress = $("pull-progress");
  const status = $("pull-status");
  $("pull").disabled = true;
  progress.hidden = false;
  progress.removeAttribute("value");
  try {
    for await (const event of api.stream("/api/pull", { model: name, stream: true })) {
      status.textContent = event.status ?? "";
      if (event.total) {
        progress.value = (event.completed ?? 0) / event.total;
        status.textContent += ` ${formatBytes(event.completed ?? 0)} / ${formatBytes(event.total)}`;
      }
    }
    status.textContent = `${name}: pulled`;
    await loadModels();
    const pulled = state.models.find((m) => m.name === name || m.name === `${name}:latest`);
    if (pulled) $("model").value = pulled.name;
    pickModel();
  } catch (error) {
    status.textContent = `Pull failed: ${error.message}`;
  } finally {
    $("pull").disabled = false;
    progress.hidden = true;
  }
}

// ---- conversations ----------------------------------------------------------

function persist() {
  showBanner(saveChats(state.chats) ?? "");
  listChats();
}

function listChats() {
  $("chats").replaceChildren(...state.chats.map((chat) => {
    const item = document.createElement("li");
    item.classList.toggle("active", chat === state.current);
    const open = document.createElement("button");
    open.type = "button";
    open.className = "chat-title";
    open.textContent = chat.title;
    open.title = chat.title;
    open.onclick = () => { if (!state.generation) { state.current = chat; showChat(); } };
    const remove = document.createElement("button");
    remove.type = "button";
    remove.className = "chat-delete";
    remove.textContent = "×";
    remove.title = "Delete this conversation";
    remove.onclick = () => deleteChat(chat);
    item.append(open, remove);
    return item;
  }));
}

function deleteChat(chat) {
  if (state.generation && chat === state.current) return;
  state.chats = state.chats.filter((c) => c !== chat);
  if (state.current === chat) state.current = null;
  persist();
  showChat();
}

async function importChats() {
  const file = $("import-file").files[0];
  $("import-file").value = "";
  if (!file || state.generation) return;
  let imported;
  try {
    imported = parseExport(await file.text());
  } catch (error) {
    showBanner(`Cannot import ${file.name}: ${error.message}`);
    return;
  }
  const ids = new Set(imported.map((chat) => chat.id));
  state.chats = [...imported, ...state.chats.filter((chat) => !ids.has(chat.id))];
  state.current = imported[0] ?? state.current;
  persist();
  showChat();
}

function startChat() {
  if (state.generation) return;
  const chat = newChat($("model").value || state.models[0]?.name || "");
  state.chats.unshift(chat);
  state.current = chat;
  showChat();
}

function showChat() {
  if (!state.current) state.current = state.chats[0] ?? newChat(state.models[0]?.name ?? "");
  const chat = state.current;
  if (chat.model && !state.models.some((m) => m.name === chat.model) && state.models.length) {
    const option = document.createElement("option");  // a model since removed: kept, its error will show
    option.value = chat.model;
    option.textContent = `${chat.model} (not in the store)`;
    $("model").append(option);
  }
  $("model").value = chat.model;
  for (const name of SETTINGS) $(name).value = chat.settings[name] ?? "";
  $("think").checked = Boolean(chat.settings.think);
  pickModel(false);
  $("messages").replaceChildren(...chat.messages.map((message) => messageView(message).element));
  listChats();
  scrollToEnd();
}

function pickModel(fromUser = true) {
  const name = $("model").value;
  if (fromUser && state.current) state.current.model = name;
  $("model-info").textContent = modelInfo(name);
  const model = state.models.find((m) => m.name === name);
  const canThink = Boolean(model?.capabilities?.includes("thinking"));
  $("think-label").hidden = !canThink;
  const hears = Boolean(model?.capabilities?.includes("audio"));
  $("hearing").hidden = !hears;
  $("record").hidden = !hears || !canRecord();
  if (!hears) {
    state.recorder?.cancel();
    stopRecording();
    setAudio([]);
  }
}

// ---- audio ------------------------------------------------------------------

function setAudio(attachments) {
  state.audio = attachments;
  $("attachments").replaceChildren(...attachments.map((attachment) => {
    const item = document.createElement("li");
    item.textContent = attachment.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = `Remove ${attachment.name}`;
    remove.onclick = () => setAudio(state.audio.filter((a) => a !== attachment));
    item.append(remove);
    return item;
  }));
}

async function addAudioFiles() {
  const files = [...$("audio-file").files];
  $("audio-file").value = "";
  try {
    const added = await Promise.all(files.map(fileAttachment));
    setAudio([...state.audio, ...added]);
    showBanner("");
  } catch (error) {
    showBanner(`Cannot add audio: ${error.message}`);
  }
}

function stopRecording() {
  state.recorder = null;
  $("record").textContent = "Record";
  $("record").classList.remove("recording");
}

async function toggleRecording() {
  const recorder = state.recorder;
  if (recorder) {
    stopRecording();
    try {
      state.recordings += 1;
      setAudio([...state.audio, await recorder.stop(`recording ${state.recordings}.wav`)]);
    } catch (error) {
      showBanner(`Cannot add the recording: ${error.message}`);
    }
    return;
  }
  state.recorder = new Recorder();
  try {
    await state.recorder.start();
  } catch (error) {
    stopRecording();
    showBanner(`Cannot record from the microphone: ${error.message}`);
    return;
  }
  $("record").textContent = "Stop recording";
  $("record").classList.add("recording");
}

function readSettings() {
  const settings = state.current.settings;
  for (const name of SETTINGS) settings[name] = $(name).value;
  settings.think = $("think").checked && !$("think-label").hidden;
}

// ---- messages ---------------------------------------------------------------

// The element showing one message, with a `refresh(complete)` that redraws it.
function messageView(message) {
  const element = document.createElement("article");
  element.className = `message ${message.role}`;
  const thinking = document.createElement("details");
  thinking.className = "thinking";
  const summary = document.createElement("summary");
  summary.textContent = "Thinking";
  const thinkingText = document.createElement("div");
  thinking.append(summary, thinkingText);
  const body = document.createElement("div");
  body.className = "content";
  const footer = document.createElement("div");
  footer.className = "stats";
  const error = document.createElement("div");
  error.className = "error";
  error.setAttribute("role", "alert");
  element.append(thinking, body, error, footer);

  if (message.audio?.length) {
    const audio = document.createElement("ul");
    audio.className = "audio";
    audio.setAttribute("aria-label", "Audio sent");
    audio.replaceChildren(...message.audio.map((attachment) => {
      const item = document.createElement("li");
      item.textContent = attachment.name;
      return item;
    }));
    element.prepend(audio);
  }

  const refresh = (complete) => {
    thinking.hidden = !message.thinking;
    thinkingText.textContent = message.thinking ?? "";
    if (message.role === "user") body.textContent = message.content;
    else renderMarkdown(body, message.content, complete);
    error.hidden = !message.error;
    error.textContent = message.error ?? "";
    footer.textContent = statsLine(message);
  };
  refresh(true);
  return { element, refresh };
}

function statsLine(message) {
  const parts = [];
  if (message.stopped) parts.push("stopped");
  const stats = message.stats;
  const number = (name) => (Number.isFinite(stats?.[name]) ? stats[name] : null);
  if (number("tokens")) parts.push(`${stats.tokens} tokens`);
  if (number("tokensPerSecond")) parts.push(`${stats.tokensPerSecond.toFixed(1)} tokens/s`);
  if (number("ttftMs") !== null) parts.push(`time to first token ${Math.round(stats.ttftMs)} ms`);
  return parts.join(" · ");
}

function scrollToEnd() {
  const messages = $("messages");
  messages.scrollTop = messages.scrollHeight;
}

// Redraws a streaming answer at most once per frame budget: the longer the answer
// (the longer a redraw takes), the rarer the redraws, so the page stays responsive.
function throttledRefresh(view) {
  let scheduled = false;
  let cost = 0;
  let last = 0;
  return () => {
    if (scheduled) return;
    scheduled = true;
    const wait = Math.max(0, last + Math.max(50, cost * 4) - performance.now());
    setTimeout(() => requestAnimationFrame(() => {
      const start = performance.now();
      view.refresh(false);
      scrollToEnd();
      last = performance.now();
      cost = last - start;
      scheduled = false;
    }), wait);
  };
}

async function send(event) {
  event?.preventDefault();
  if (state.generation) return;
  const text = $("prompt").value;
  const audio = state.audio;
  if (!text.trim() && !audio.length) return;
  if (state.recorder) {
    showBanner("Stop the recording first: it is added to the message when it stops.");
    return;
  }
  const chat = state.current;
  readSettings();
  chat.model = $("model").value;
  if (!chat.model) {
    showBanner("Pick a model first (or pull one).");
    return;
  }
  let body;
  chat.messages.push(audio.length ? { role: "user", content: text, audio } : { role: "user", content: text });
  try {
    body = chatRequest(chat);
  } catch (error) {
    chat.messages.pop();
    showBanner(`Extra request fields: ${error.message}`);
    return;
  }
  showBanner("");
  $("prompt").value = "";
  setAudio([]);
  if (chat.title === "New chat") chat.title = (text.trim() || audio[0].name).slice(0, 60);
  if (!state.chats.includes(chat)) state.chats.unshift(chat);
  const answer = { role: "assistant", content: "", model: chat.model };
  chat.messages.push(answer);
  chat.updated = Date.now();
  persist();
  $("messages").append(messageView(chat.messages.at(-2)).element);
  const view = messageView(answer);
  $("messages").append(view.element);
  scrollToEnd();
  await stream(answer, body, view);
}

async function stream(answer, body, view) {
  const controller = new AbortController();
  state.generation = { controller };
  $("send").hidden = true;
  $("stop").hidden = false;
  const refresh = throttledRefresh(view);
  const started = performance.now();
  try {
    for await (const chunk of api.stream("/api/chat", body, controller.signal)) {
      const { content = "", thinking = "" } = chunk.message ?? {};
      if ((content || thinking) && answer.stats === undefined) {
        answer.stats = { ttftMs: performance.now() - started };
      }
      answer.content += content;
      if (thinking) answer.thinking = (answer.thinking ?? "") + thinking;
      if (chunk.done) {
        answer.stats = { ...answer.stats, tokens: chunk.eval_count };
        if (chunk.eval_duration) answer.stats.tokensPerSecond = chunk.eval_count / (chunk.eval_duration / 1e9);
        answer.doneReason = chunk.done_reason;
      }
      refresh();
    }
  } catch (error) {
    if (error.name === "AbortError") answer.stopped = true;
    else answer.error = error instanceof ApiError ? error.message : `${error.name}: ${error.message}`;
  } finally {
    state.generation = null;
    $("send").hidden = false;
    $("stop").hidden = true;
    view.element.dataset.done = "true";
    view.refresh(true);
    scrollToEnd();
    state.current.updated = Date.now();
    persist();
  }
}

// ---- wiring -----------------------------------------------------------------

$("composer").addEventListener("submit", send);
$("prompt").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) send(event);
});
$("stop").addEventListener("click", () => state.generation?.controller.abort());
$("new-chat").addEventListener("click", startChat);
$("export").addEventListener("click", () => exportChats(state.chats));
$("import").addEventListener("click", () => $("import-file").click());
$("import-file").addEventListener("change", importChats);
$("model").addEventListener("change", () => pickModel(true));
$("pull-form").addEventListener("submit", pull);
$("attach-audio").addEventListener("click", () => $("audio-file").click());
$("audio-file").addEventListener("change", addAudioFiles);
$("record").addEventListener("click", toggleRecording);
for (const name of [...SETTINGS, "think"]) {
  $(name).addEventListener("change", () => { if (state.current) { readSettings(); persist(); } });
}
listChats();
loadModels();
