"""Constrained sampling: tokens/s with and without a JSON-schema constraint, and schema coverage.

Both sides run through the real daemon (``/api/chat``) on SmolLM2-135M, one
request at a time, alternating for ``--rounds`` rounds; the decode rate is the
runner's own ``eval_count / eval_duration``, so prompt processing does not blur
it. The coverage part sends every schema of ``schemas.json`` with ``format``
and counts those accepted (no 400) and satisfied (the output parses and
validates with ``jsonschema``).

    python scripts/bench/constrained.py [--rounds 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import httpx
import jsonschema

from common import MODEL, alternating, not_measured, report, round_rows, start_daemon

SCHEMAS = Path(__file__).with_name("schemas.json")
RATE_SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string"},
        "chapters": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "pages": {"type": "integer"}}, "required": ["name", "pages"]}},
    },
    "required": ["title", "chapters"],
}
PROMPT = "Write the table of contents of a long book about dragons as JSON with many chapters."


def decode_rate(url: str, fmt: dict | None, tokens: int) -> float:
    body = {"model": MODEL, "messages": [{"role": "user", "content": PROMPT}], "stream": False,
            "options": {"temperature": 0, "num_predict": tokens}}
    if fmt is not None:
        body["format"] = fmt
    answer = httpx.post(f"{url}/api/chat", json=body, timeout=600).json()
    return answer["eval_count"] / (answer["eval_duration"] / 1e9)


def coverage(url: str) -> tuple[int, int, int, list[str]]:
    corpus = json.loads(SCHEMAS.read_text())
    accepted = satisfied = 0
    failures = []
    for entry in corpus:
        body = {"model": MODEL, "stream": False, "format": entry["schema"],
                "messages": [{"role": "user", "content": entry["prompt"]}],
                "options": {"temperature": 0.7, "seed": 1, "num_predict": 256}}
        response = httpx.post(f"{url}/api/chat", json=body, timeout=600)
        if response.status_code == 400:
            failures.append(f"{entry['name']}: refused ({response.json()['error']})")
            continue
        accepted += 1
        answer = response.json()
        try:
            jsonschema.validate(json.loads(answer["message"]["content"]), entry["schema"])
            satisfied += 1
        except (ValueError, jsonschema.ValidationError) as exc:
            failures.append(f"{entry['name']}: {answer.get('done_reason')}: {str(exc)[:80]}")
    return len(corpus), accepted, satisfied, failures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--json", action="store_true", help="print a JSON object instead of a table")
    args = parser.parse_args()
    daemon = start_daemon(LOCALLLM_NUM_THREADS="2")
    try:
        decode_rate(daemon.url, None, 8)  # load the model
        rates = alternating(args.rounds, {"free": lambda: decode_rate(daemon.url, None, args.tokens),
                                          "constrained": lambda: decode_rate(daemon.url, RATE_SCHEMA, args.tokens)})
        free, constrained = rates["free"], rates["constrained"]
        total, accepted, satisfied, failures = coverage(daemon.url)
    finally:
        daemon.stop()
    results = {
        "unconstrained_tokens_per_s": statistics.median(free),
        "constrained_tokens_per_s": statistics.median(constrained),
        "constrained_ratio": statistics.median(constrained) / statistics.median(free),
        "round_pairs": rates.pairs(lambda rate: round(rate, 1)),
        "schemas": total,
        "schemas_accepted_share": accepted / total,
        "failures": failures,
    }
    if accepted:
        results["schemas_satisfied_share"] = satisfied / accepted
    else:
        not_measured(results, "schemas_satisfied_share", "no schema of the corpus was accepted")
    report("constrained sampling (SmolLM2-135M, 2 threads)", [
        ("unconstrained tokens/s", results["unconstrained_tokens_per_s"]),
        ("constrained tokens/s", results["constrained_tokens_per_s"]),
        ("constrained_ratio", results["constrained_ratio"]),
        *round_rows("tokens/s", results["round_pairs"]),
        ("schemas in corpus", total),
        ("accepted share", results["schemas_accepted_share"]),
        ("satisfied share (of accepted)", results["schemas_satisfied_share"]),
    ], results, args.json, required=["constrained_ratio", "schemas_satisfied_share"])
    if not args.json:
        for line in failures:
            print("  " + line)


if __name__ == "__main__":
    main()
