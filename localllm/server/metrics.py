"""``GET /metrics``: Prometheus text format, per model.

Requests, queue depth, tokens in and out, prefix-cache hits, time to first
token, per-token latency and preemptions per request. Small enough to keep in one file without a
client library.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field

from .runner_client import Health

TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
TOKEN_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64)
PREEMPTION_BUCKETS = (0, 1, 2, 4, 8, 16)  # a request preempted again and again is thrashing


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def observe(self, value: float) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def lines(self, name: str, labels: str) -> list[str]:
        out = []
        running = 0
        for bound, count in zip(self.buckets, self.counts or [0] * len(self.buckets)):
            running += count
            out.append(f'{name}_bucket{{{labels},le="{bound}"}} {running}')
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        out.append(f"{name}_sum{{{labels}}} {self.total:.6f}")
        out.append(f"{name}_count{{{labels}}} {self.count}")
        return out


@dataclass
class ModelMetrics:
    requests: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # by outcome
    prompt_tokens: int = 0
    cached_tokens: int = 0
    generated_tokens: int = 0
    draft_tokens: int = 0  # speculative decoding: tokens drafted ...
    draft_accepted_tokens: int = 0  # ... and kept
    in_flight: int = 0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    token_latency: Histogram = field(default_factory=lambda: Histogram(TOKEN_BUCKETS))
    preemptions: Histogram = field(default_factory=lambda: Histogram(PREEMPTION_BUCKETS))


class Metrics:
    """All counters of the daemon, keyed by model name."""

    def __init__(self) -> None:
        self.models: dict[str, ModelMetrics] = defaultdict(ModelMetrics)

    def started(self, model: str) -> None:
        self.models[model].in_flight += 1

    def finished(self, model: str, outcome: str, done: dict | None, ttft_s: float | None) -> None:
        """Record one request's end; ``done`` is the runner's final event when it completed."""
        entry = self.models[model]
        entry.in_flight -= 1
        entry.requests[outcome] += 1
        if ttft_s is not None:
            entry.ttft.observe(ttft_s)
        if done:
            entry.prompt_tokens += done.get("prompt_eval_count", 0) + done.get("cached_tokens", 0)
            entry.cached_tokens += done.get("cached_tokens", 0)
            entry.preemptions.observe(done.get("preemptions", 0))
            generated = done.get("eval_count", 0)
            entry.generated_tokens += generated
            entry.draft_tokens += done.get("draft_count", 0)
            entry.draft_accepted_tokens += done.get("draft_accepted_count", 0)
            if generated:
                entry.token_latency.observe(done.get("eval_duration", 0) / 1e9 / generated)

    def render(self, queue_depths: dict[str, int], runners: list[tuple[str, str, Health]] | None = None) -> str:
        """The text exposition; ``runners``: (model, engine, its runner's ``/health``) of each generating runner."""
        lines: list[str] = []

        def family(name: str, kind: str, help_text: str) -> None:
            lines.append(f"# HELP {name} {help_text}")
            lines.append(f"# TYPE {name} {kind}")

        family("localllm_requests_total", "counter", "Completion requests by outcome.")
        for model, m in self.models.items():
            for outcome, count in sorted(m.requests.items()):
                lines.append(f'localllm_requests_total{{model="{model}",outcome="{outcome}"}} {count}')
        family("localllm_requests_in_flight", "gauge", "Requests being served or waiting.")
        for model, m in self.models.items():
            lines.append(f'localllm_requests_in_flight{{model="{model}"}} {m.in_flight}')
        family("localllm_queue_depth", "gauge", "Requests waiting for a free sequence slot.")
        for model, depth in queue_depths.items():
            lines.append(f'localllm_queue_depth{{model="{model}"}} {depth}')
        for name, attr, help_text in (
            ("localllm_prompt_tokens_total", "prompt_tokens", "Prompt tokens, cached or evaluated."),
            ("localllm_prompt_cached_tokens_total", "cached_tokens", "Prompt tokens served from the prefix cache."),
            ("localllm_generated_tokens_total", "generated_tokens", "Tokens generated."),
            ("localllm_draft_tokens_total", "draft_tokens", "Speculative draft tokens verified."),
            ("localllm_draft_accepted_tokens_total", "draft_accepted_tokens", "Speculative draft tokens kept."),
        ):
            family(name, "counter", help_text)
            for model, m in self.models.items():
                lines.append(f'{name}{{model="{model}"}} {getattr(m, attr)}')
        runners = runners or []
        family("localllm_kv_blocks", "gauge", "Native engine KV blocks: in use, shared, cached for reuse, spilled to RAM.")
        for model, engine, health in runners:
            for state, count in sorted(health.kv_blocks.items()):
                if state != "block_size":
                    lines.append(f'localllm_kv_blocks{{model="{model}",engine="{engine}",state="{state}"}} {count}')
        family("localllm_prefix_cache_hit_ratio", "gauge", "Share of prompt tokens served from cached KV.")
        for model, engine, health in runners:
            lines.append(f'localllm_prefix_cache_hit_ratio{{model="{model}",engine="{engine}"}} '
                         f'{health.cache_hit_rate}')
        family("localllm_time_to_first_token_seconds", "histogram", "Time from request to first token.")
        for model, m in self.models.items():
            lines.extend(m.ttft.lines("localllm_time_to_first_token_seconds", f'model="{model}"'))
        family("localllm_time_per_output_token_seconds", "histogram", "Mean decode time per token of a request.")
        for model, m in self.models.items():
            lines.extend(m.token_latency.lines("localllm_time_per_output_token_seconds", f'model="{model}"'))
        family("localllm_request_preemptions", "histogram",
               "Times a completed request gave its KV back to a full pool (native engine); the sum is the total.")
        for model, m in self.models.items():
            lines.extend(m.preemptions.lines("localllm_request_preemptions", f'model="{model}"'))
        return "\n".join(lines) + "\n"
