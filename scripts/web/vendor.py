"""Copy the chat page's front-end libraries from Debian's packages into ``localllm/web/vendor/``.

npm is out of reach, so the libraries come from Debian (``apt-get install libjs-marked
node-dompurify node-highlight.js``). highlight.js is built as a subset: its core and
the languages listed below, each registered as highlight.js's own custom builds do,
instead of the 830 KB bundle of 180 languages. Each library's Debian copyright file
(which names its license) goes to ``vendor/licenses/`` and ``vendor/VERSIONS.md``
records the package versions and the sizes shipped. Run it again to update them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

VENDOR = Path(__file__).resolve().parents[2] / "localllm" / "web" / "vendor"
HLJS = Path("/usr/share/nodejs/highlight.js")
#: The languages small models write most often (highlight.js 9 names).
LANGUAGES = ("bash", "cpp", "cs", "css", "diff", "go", "java", "javascript", "json", "kotlin",
             "makefile", "markdown", "php", "plaintext", "python", "ruby", "rust", "shell", "sql", "swift",
             "typescript", "xml", "yaml", "dockerfile", "ini", "lua", "r")
MARKED = "/usr/share/javascript/marked/marked.umd.min.js"


def package_version(package: str) -> str:
    return subprocess.run(["dpkg-query", "-W", "-f=${Version}", package], check=True, capture_output=True,
                          text=True).stdout


#: Debian's backport of the CVE-2024-47875 fix to DOMPurify 2.4.1 (2.4.1+dfsg+~2.4.0-2+deb12u1) reads
#: ``shadowNode`` outside the function that declares it, so every ``sanitize()`` of a string holding
#: a tag throws a ReferenceError. The check is dropped from the vendored copy; the per-node depth
#: check the same fix added to the node loop stays.
PURIFY_BROKEN_CHECK = "(shadowNode.__depth>=st||k(shadowNode.__depth))&&vt(r.firstChild);"


def purify() -> str:
    """Debian's DOMPurify with the broken line of its security backport removed (see above)."""
    source = Path("/usr/share/nodejs/dompurify/dist/purify.min.js").read_text()
    return source.replace(PURIFY_BROKEN_CHECK, "")


def highlight_subset() -> str:
    """highlight.js's core and each language module, wrapped as the browser build does."""
    core = (HLJS / "lib" / "highlight.js").read_text()
    core = core.replace("module.exports = Highlight;", "")  # Debian's CommonJS tail; the core sets window.hljs
    parts = [core]
    for name in LANGUAGES:
        module = (HLJS / "lib" / "languages" / f"{name}.js").read_text()
        parts.append(f"Highlight.registerLanguage({name!r}, (function () {{ var module = {{}};\n{module}\n"
                     "return module.exports; })());")
    return "(function () {\n" + "\n".join(parts) + "\n})();\n"


def main() -> None:
    (VENDOR / "licenses").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MARKED, VENDOR / "marked.min.js")
    (VENDOR / "purify.min.js").write_text(purify())
    (VENDOR / "highlight.js").write_text(highlight_subset())
    shutil.copyfile(HLJS / "styles" / "github.css", VENDOR / "highlight.css")
    rows = []
    for package in ("libjs-marked", "node-dompurify", "node-highlight.js"):
        shutil.copyfile(f"/usr/share/doc/{package}/copyright", VENDOR / "licenses" / f"{package}.copyright")
        rows.append(f"| {package} | {package_version(package)} |")
    # DOMPurify's copyright file names Apache-2.0 (our choice of its two) without its text
    shutil.copyfile("/usr/share/common-licenses/Apache-2.0", VENDOR / "licenses" / "Apache-2.0.txt")
    sizes = [f"| {path.name} | {path.stat().st_size:,} |" for path in sorted(VENDOR.glob("*.*")) if path.suffix != ".md"]
    (VENDOR / "VERSIONS.md").write_text(
        "# Vendored front-end libraries\n\nWritten by `scripts/web/vendor.py` from Debian's packages; their "
        "copyright files (naming each license: marked MIT, DOMPurify Apache-2.0 or MPL-2.0, highlight.js "
        "BSD-3-Clause) are in `licenses/`. DOMPurify has one line of Debian's security backport removed, which "
        "referenced an undeclared variable and broke every sanitize() (see the script).\n\n| Debian package | version |\n| --- | --- |\n" + "\n".join(rows)
        + f"\n\nhighlight.js is a subset: the core and {', '.join(LANGUAGES)}.\n\n| file | bytes |\n| --- | --- |\n"
        + "\n".join(sizes) + "\n")


if __name__ == "__main__":
    main()
