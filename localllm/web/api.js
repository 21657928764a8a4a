// The daemon's Ollama API as the page uses it: same origin, the API key (when the
// daemon asks for one) kept in this tab's sessionStorage only, NDJSON streams read
// line by line, and every failure turned into one sentence a person can act on.

const KEY_ITEM = "localllm.apiKey";

export class ApiError extends Error {
  constructor(message, status = 0) {
    super(message);
    this.status = status;
  }
}

export class Api {
  // askKey(reason) -> Promise<string|null>: called when the daemon answers 401.
  constructor(askKey) {
    this.askKey = askKey;
  }

  headers() {
    const headers = { "Content-Type": "application/json" };
    const key = sessionStorage.getItem(KEY_ITEM);
    if (key) headers.Authorization = `Bearer ${key}`;
    return headers;
  }

  // fetch, asking for the key again for as long as the daemon refuses it.
  async fetch(path, body, signal) {
    for (;;) {
      let response;
      try {
        response = await fetch(path, {
          method: body === undefined ? "GET" : "POST",
          headers: this.headers(),
          body: body === undefined ? undefined : JSON.stringify(body),
          signal,
        });
      } catch (error) {
        if (error.name === "AbortError") throw error;
        throw new ApiError(`Cannot reach the localllm daemon at ${location.origin}: is it running? (start it with "localllm serve")`);
      }
      if (response.status === 401) {
        const message = await errorMessage(response);
        const key = await this.askKey(message);
        if (key === null) throw new ApiError(message, 401);
        sessionStorage.setItem(KEY_ITEM, key);
        continue;
      }
      if (!response.ok) throw new ApiError(await errorMessage(response), response.status);
      return response;
    }
  }

  async json(path, body) {
    return (await this.fetch(path, body)).json();
  }

  // Yields each object of an NDJSON stream; an {"error": ...} line is thrown.
  async *stream(path, body, signal) {
    const response = await this.fetch(path, body, signal);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let pending = "";
    for (;;) {
      let chunk;
      try {
        chunk = await reader.read();
      } catch (error) {
        if (error.name === "AbortError") throw error;
        throw new ApiError("The connection to the daemon was lost in the middle of the answer (did the daemon stop?)");
      }
      if (chunk.done) break;
      pending += decoder.decode(chunk.value, { stream: true });
      const lines = pending.split("\n");
      pending = lines.pop();
      for (const line of lines) {
        if (line.trim()) yield parseLine(line);
      }
    }
    if (pending.trim()) yield parseLine(pending);
  }
}

function parseLine(line) {
  const object = JSON.parse(line);
  if (object.error) throw new ApiError(object.error);
  return object;
}

async function errorMessage(response) {
  const text = await response.text();
  try {
    const body = JSON.parse(text);
    const error = body.error;
    return `${response.status}: ${typeof error === "string" ? error : error?.message ?? text}`;
  } catch {
    return `${response.status}: ${text || response.statusText}`;
  }
}
