"""Text formatting shared by the commands: sizes, times, tables, model info, stats.

The shapes follow Ollama's CLI (``format/`` and ``cmd/cmd.go``) so that output
reads the same to someone who knows ``ollama list`` or ``ollama show``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any


def human_bytes(size: int) -> str:
    """Decimal units like Ollama: ``98 MB``, ``1.5 GB``, ``512 B``."""
    for unit, scale in (("TB", 1000**4), ("GB", 1000**3), ("MB", 1000**2), ("KB", 1000)):
        if size >= scale:
            value = size / scale
            if value >= 10 or value == int(value):
                return f"{int(value)} {unit}"
            return f"{value:.1f} {unit}"
    return f"{size} B"


def human_number(n: int) -> str:
    """Parameter counts: ``134.52M``, ``7B``, ``270K``."""
    if n >= 1_000_000_000:
        value = n / 1_000_000_000
        return f"{value:.0f}B" if value == int(value) else f"{value:.1f}B"
    if n >= 1_000_000:
        value = n / 1_000_000
        return f"{value:.0f}M" if value == int(value) else f"{value:.2f}M"
    if n >= 1000:
        return f"{n / 1000:.0f}K"
    return str(n)


def parse_time(text: str | None) -> datetime | None:
    """Parse an RFC 3339 timestamp as the API sends it (nanoseconds, ``Z``), or ``None``."""
    if not text:
        return None
    text = text.strip().replace("Z", "+00:00")
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)  # Python keeps microseconds
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.year <= 1:  # Go's zero time
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


def _human_duration(seconds: float) -> str:
    whole = int(seconds)
    if whole < 1:
        return "Less than a second"
    if whole == 1:
        return "1 second"
    if whole < 60:
        return f"{whole} seconds"
    minutes = whole // 60
    if minutes == 1:
        return "About a minute"
    if minutes < 60:
        return f"{minutes} minutes"
    hours = round(seconds / 3600)
    if hours == 1:
        return "About an hour"
    if hours < 48:
        return f"{hours} hours"
    if hours < 24 * 14:
        return f"{hours // 24} days"
    if hours < 24 * 60:
        return f"{hours // (24 * 7)} weeks"
    if hours < 24 * 730:
        return f"{hours // (24 * 30)} months"
    return f"{int(seconds // 3600) // (24 * 365)} years"


def human_time(text: str | None, zero: str = "Never", now: datetime | None = None) -> str:
    """``2 hours ago``, ``4 minutes from now``, ``Forever`` (more than 20 years ahead)."""
    moment = parse_time(text)
    if moment is None:
        return zero
    delta = ((now or datetime.now(timezone.utc)) - moment).total_seconds()
    if delta < -20 * 365 * 24 * 3600:
        return "Forever"
    if delta < 0:
        return _human_duration(-delta) + " from now"
    return _human_duration(delta) + " ago"


def go_duration(nanoseconds: int) -> str:
    """A duration written the way Go's ``time.Duration`` prints it (``1.2345s``, ``85.1ms``)."""
    ns = int(nanoseconds)
    if ns < 1000:
        return f"{ns}ns"

    def trim(value: float, digits: int) -> str:
        return f"{value:.{digits}f}".rstrip("0").rstrip(".")

    if ns < 1_000_000:
        return trim(ns / 1000, 3) + "µs"
    if ns < 1_000_000_000:
        return trim(ns / 1_000_000, 6) + "ms"
    hours, rest = divmod(ns, 3600 * 10**9)
    minutes, rest = divmod(rest, 60 * 10**9)
    text = trim(rest / 10**9, 9) + "s"
    if hours:
        return f"{hours}h{minutes}m{text}"
    if minutes:
        return f"{minutes}m{text}"
    return text


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str] | None = None, padding: int = 4) -> str:
    """Left-aligned columns separated by ``padding`` spaces, no borders (Ollama's tables)."""
    all_rows = ([list(header)] if header else []) + [list(r) for r in rows]
    if not all_rows:
        return ""
    columns = max(len(r) for r in all_rows)
    widths = [max((len(r[i]) for r in all_rows if i < len(r)), default=0) for i in range(columns)]
    gap = " " * padding
    lines = [gap.join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in all_rows]
    return "\n".join(lines) + "\n"


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, list):
        shown: list[str] = []
        width = 1
        for item in value:
            piece = str(item)
            if shown and width + len(piece) + 2 > 10:
                break
            width += len(piece) + (2 if shown else 0)
            shown.append(piece)
        more = f" ...+{len(value) - len(shown)} more" if len(shown) < len(value) else ""
        return "[" + " ".join(shown) + more + "]"
    return str(value)


def _head(text: str, lines: int) -> list[list[str]]:
    kept = [line.strip() for line in text.splitlines() if line.strip()]
    rows = [["", line] for line in kept[:lines]]
    if len(kept) > lines:
        rows.append(["", "..."])
    return rows


def model_info_rows(info: dict[str, Any]) -> list[list[str]]:
    """The ``Model`` section: architecture, parameters, context/embedding length, quantization."""
    details = info.get("details") or {}
    meta = info.get("model_info") or {}
    rows: list[list[str]] = []
    arch = str(meta.get("general.architecture") or details.get("family") or "")
    if arch:
        rows.append(["", "architecture", arch])
    params = details.get("parameter_size") or ""
    if not params and isinstance(meta.get("general.parameter_count"), (int, float)):
        params = human_number(int(meta["general.parameter_count"]))
    if params:
        rows.append(["", "parameters", str(params)])
    for key, label in (("context_length", "context length"), ("embedding_length", "embedding length")):
        value = meta.get(f"{arch}.{key}")
        if isinstance(value, (int, float)):
            rows.append(["", label, _value_text(value)])
    rows.append(["", "quantization", str(details.get("quantization_level") or "")])
    context = info.get("context") or {}
    if context.get("length"):
        rows.append(["", "context", f"{context['length']} ({context.get('reason', '')})"])
    if info.get("requires"):
        rows.append(["", "requires", str(info["requires"])])
    return rows


def show_info(info: dict[str, Any], verbose: bool = False) -> str:
    """The default ``show`` view: Model, Capabilities, Parameters, (Metadata, Tensors), System, License."""
    sections: list[tuple[str, list[list[str]]]] = [("Model", model_info_rows(info))]
    if info.get("capabilities"):
        sections.append(("Capabilities", [["", str(c)] for c in info["capabilities"]]))
    if info.get("parameters"):
        rows = [[""] + line.split() for line in str(info["parameters"]).splitlines() if line.strip()]
        sections.append(("Parameters", rows))
    if verbose and info.get("model_info"):
        meta = info["model_info"]
        sections.append(("Metadata", [["", key, _value_text(meta[key])] for key in sorted(meta)]))
    if verbose and info.get("tensors"):
        rows = [["", t.get("name", ""), t.get("type", ""), str(t.get("shape", ""))] for t in info["tensors"]]
        sections.append(("Tensors", rows))
    if info.get("system"):
        sections.append(("System", _head(str(info["system"]), 2)))
    if info.get("license"):
        sections.append(("License", _head(str(info["license"]), 2)))
    return "".join(f"  {title}\n{render_table(rows)}\n" for title, rows in sections)


def stats_summary(final: dict[str, Any]) -> str:
    """The ``--verbose`` statistics of a finished generation (Ollama's ``Metrics.Summary``)."""
    lines: list[str] = []

    def add(label: str, value: str) -> None:
        lines.append(f"{label + ':':<22}{value}")

    total, load = final.get("total_duration") or 0, final.get("load_duration") or 0
    if total > 0:
        add("total duration", go_duration(total))
    if load > 0:
        add("load duration", go_duration(load))
    for prefix, label in (("prompt_eval", "prompt eval"), ("eval", "eval")):
        count, duration = final.get(f"{prefix}_count") or 0, final.get(f"{prefix}_duration") or 0
        if count > 0:
            add(f"{label} count", f"{count} token(s)")
        if duration > 0:
            add(f"{label} duration", go_duration(duration))
            add(f"{label} rate", f"{count / (duration / 1e9):.2f} tokens/s")
    drafted = final.get("draft_count") or 0
    if drafted > 0:
        accepted = final.get("draft_accepted_count") or 0
        add("draft tokens", f"{accepted}/{drafted} accepted ({100 * accepted / drafted:.1f}%)")
    return "\n".join(lines) + ("\n" if lines else "")
