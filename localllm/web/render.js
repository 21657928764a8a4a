// Model output is untrusted: Markdown is rendered with raw HTML shown as text, links
// only to http(s)/mailto, images shown as links, and the result passes DOMPurify,
// whose Trusted Types policy is the only one the page's CSP allows to write HTML.

const SAFE_LINK = /^(https?:|mailto:)/i;
const HIGHLIGHT_LIMIT = 20000;  // longer code is highlighted once the answer is complete

function escapeHtml(text) {
  return text.replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

hljs.configure({ hideUpgradeWarningAcceptNoSupportOrSecurityUpdates: true });
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const renderer = new marked.Renderer();
renderer.html = (html) => escapeHtml(html);
renderer.link = (href, title, text) => (SAFE_LINK.test(href ?? "")
  ? `<a href="${escapeHtml(href)}"${title ? ` title="${escapeHtml(title)}"` : ""}>${text}</a>`
  : `${text} (${escapeHtml(href ?? "")})`);
renderer.image = (href, title, text) => (SAFE_LINK.test(href ?? "")
  ? `<a href="${escapeHtml(href)}">${escapeHtml(text || href)}</a>` : escapeHtml(`![${text}](${href ?? ""})`));

function highlighter(complete) {
  return (code, language) => {
    if (!complete && code.length > HIGHLIGHT_LIMIT) return null;
    if (language && hljs.getLanguage(language)) return hljs.highlight(language, code, true).value;
    return code.length <= HIGHLIGHT_LIMIT ? hljs.highlightAuto(code).value : null;
  };
}

// Renders `text` into `element`; `complete` once the answer has ended.
export function renderMarkdown(element, text, complete) {
  const html = marked.parse(text, { renderer, gfm: true, breaks: false, highlight: highlighter(complete) });
  element.innerHTML = DOMPurify.sanitize(html, { RETURN_TRUSTED_TYPE: true, ADD_ATTR: ["target"] });
  for (const pre of element.querySelectorAll("pre")) pre.append(copyButton(pre));
}

function copyButton(pre) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "copy";
  button.textContent = "Copy";
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(pre.querySelector("code")?.textContent ?? pre.textContent);
      button.textContent = "Copied";
    } catch {
      button.textContent = "Copy failed";
    }
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  });
  return button;
}
