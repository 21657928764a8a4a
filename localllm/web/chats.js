// Conversations kept in this browser (localStorage), newest first, exportable as JSON.
// A chat: {id, title, model, settings: {system, temperature, num_ctx, num_predict, seed,
// think, extra}, messages: [{role, content, audio?, thinking?, stats?, error?, stopped?}], updated};
// a user message's audio is a list of {name, data (base64 WAV, MP3 or FLAC)}.

const STORE_ITEM = "localllm.chats";

export function newChat(model) {
  return {
    id: crypto.randomUUID(), title: "New chat", model, updated: Date.now(), messages: [],
    settings: { system: "", temperature: "", num_ctx: "", num_predict: "", seed: "", think: false, extra: "" },
  };
}

export function loadChats() {
  try {
    const chats = JSON.parse(localStorage.getItem(STORE_ITEM) || "[]");
    return Array.isArray(chats) ? chats : [];
  } catch {
    return [];
  }
}

// Returns an error message when the browser refused to store them (quota), else null.
export function saveChats(chats) {
  chats.sort((a, b) => b.updated - a.updated);
  try {
    localStorage.setItem(STORE_ITEM, JSON.stringify(chats));
    return null;
  } catch (error) {
    return `Could not keep the conversations in this browser: ${error.message}`;
  }
}

export function exportChats(chats) {
  const blob = new Blob([JSON.stringify({ exported: new Date().toISOString(), chats }, null, 2)],
    { type: "application/json" });
  const link = document.createElement("a");
  link.href = URL.createObjectURL(blob);
  link.download = `localllm-chats-${new Date().toISOString().slice(0, 10)}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(link.href), 1000);
}

// The chats of an exported file (or a bare list of chats); throws a message naming what is wrong.
export function parseExport(text) {
  const data = JSON.parse(text);
  const chats = Array.isArray(data) ? data : data?.chats;
  if (!Array.isArray(chats)) throw new Error("the file holds no \"chats\" list");
  for (const [index, chat] of chats.entries()) {
    if (typeof chat?.id !== "string" || !Array.isArray(chat.messages)) {
      throw new Error(`chat ${index} has no "id" or no "messages" list`);
    }
    for (const message of chat.messages) {
      if (!["user", "assistant"].includes(message?.role) || typeof message.content !== "string") {
        throw new Error(`chat ${index} has a message without a user/assistant role and a text content`);
      }
      const audio = message.audio ?? [];
      if (!Array.isArray(audio) || !audio.every((a) => typeof a?.name === "string" && typeof a?.data === "string")) {
        throw new Error(`chat ${index} has a message whose "audio" is not a list of {name, data}`);
      }
    }
    chat.title = String(chat.title ?? "Imported chat");
    chat.updated = Number(chat.updated) || Date.now();
    chat.settings = { ...newChat("").settings, ...chat.settings };
  }
  return chats;
}

// The /api/chat body for the chat's history, its settings and the chosen model.
export function chatRequest(chat) {
  const { settings } = chat;
  const options = {};
  for (const name of ["temperature", "num_ctx", "num_predict", "seed"]) {
    if (settings[name] !== "" && settings[name] !== null) options[name] = Number(settings[name]);
  }
  const messages = [];
  if (settings.system.trim()) messages.push({ role: "system", content: settings.system });
  for (const message of chat.messages) {
    if (message.role === "user" || message.content) {
      const sent = { role: message.role, content: message.content };
      if (message.audio?.length) sent.images = message.audio.map((a) => a.data);  // Ollama's field carries audio
      messages.push(sent);
    }
  }
  let extra = {};
  if (settings.extra.trim()) {
    extra = JSON.parse(settings.extra);  // the caller reports a SyntaxError
    if (typeof extra !== "object" || extra === null || Array.isArray(extra)) {
      throw new SyntaxError("extra request fields must be a JSON object");
    }
  }
  const body = { ...extra, model: chat.model, messages, stream: true, options: { ...extra.options, ...options } };
  if (settings.think) body.think = true;
  return body;
}
