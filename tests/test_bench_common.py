"""scripts/bench: common.py's alternating rounds favour no side and an unmeasured figure is never printed as one; kernel_ab.py
times two builds of the kernels in turn."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts" / "bench"))

from common import alternating, not_measured, report, round_rows  # noqa: E402


def test_alternating_reverses_the_order_every_other_round() -> None:
    calls: list[str] = []
    counter = iter(range(100))

    def side(name: str):
        return lambda: (calls.append(name), next(counter))[1]

    rounds = alternating(4, {"ours": side("ours"), "theirs": side("theirs")})
    assert calls == ["ours", "theirs", "theirs", "ours", "ours", "theirs", "theirs", "ours"]
    assert rounds.orders == [("ours", "theirs"), ("theirs", "ours"), ("ours", "theirs"), ("theirs", "ours")]
    assert rounds == {"ours": [0, 3, 4, 7], "theirs": [1, 2, 5, 6]}  # each side's samples, in round order
    positions = {side: [order.index(side) for order in rounds.orders] for side in ("ours", "theirs")}
    assert positions == {"ours": [0, 1, 0, 1], "theirs": [1, 0, 1, 0]}  # first as often as last


def test_an_odd_number_of_rounds_is_rounded_up_so_each_side_goes_first_as_often() -> None:
    rounds = alternating(3, {"ours": lambda: 0, "theirs": lambda: 0})
    assert [order[0] for order in rounds.orders] == ["ours", "theirs", "ours", "theirs"]
    assert len(alternating(1, {"ours": lambda: 0, "theirs": lambda: 0}).orders) == 1  # a smoke run stays one


def test_alternating_balances_three_sides_too() -> None:
    calls: list[str] = []
    rounds = alternating(2, {name: (lambda n=name: calls.append(n)) for name in "abc"})
    assert calls == ["a", "b", "c", "c", "b", "a"]
    assert rounds.orders == [("a", "b", "c"), ("c", "b", "a")]


def test_each_rounds_pair_is_reported_in_the_order_it_ran() -> None:
    values = iter([10.0, 20.0, 21.0, 11.0])
    rounds = alternating(2, {"ours": lambda: next(values), "theirs": lambda: next(values)})
    assert rounds.pairs(lambda v: v * 2) == [{"order": ["ours", "theirs"], "ours": 20.0, "theirs": 40.0},
                                             {"order": ["theirs", "ours"], "ours": 22.0, "theirs": 42.0}]
    assert round_rows("tok/s", rounds.pairs()) == [("tok/s round 1", "ours 10.000, theirs 20.000"),
                                                   ("tok/s round 2", "theirs 21.000, ours 11.000")]


def results_with_a_gap() -> dict:
    results = {"measured_ratio": 0.0, "other": 1.5}
    not_measured(results, "kv_ratio", "the llama.cpp engine reports no KV blocks")
    return results


def test_an_unmeasured_figure_prints_as_not_measured_with_its_reason(capsys: pytest.CaptureFixture[str]) -> None:
    results = results_with_a_gap()
    report("t", [("measured_ratio", 0.0), ("kv_ratio", results["kv_ratio"])], results, as_json=False)
    out = capsys.readouterr().out
    assert "measured_ratio         0.000" in out  # a real zero is still a number
    kv_line = next(line for line in out.splitlines() if line.startswith("kv_ratio "))
    assert kv_line.split()[1:] == ["not", "measured"]
    assert "kv_ratio: not measured: the llama.cpp engine reports no KV blocks" in out

    report("t", [], results, as_json=True)
    printed = json.loads(capsys.readouterr().out)
    assert printed["kv_ratio"] is None
    assert printed["not_measured"] == {"kv_ratio": "the llama.cpp engine reports no KV blocks"}


def test_a_required_figure_not_measured_fails_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    results = results_with_a_gap()
    report("t", [("other", 1.5)], results, as_json=True, required=["other"])  # all there: no exit
    with pytest.raises(SystemExit) as failed:
        report("t", [("other", 1.5)], results, as_json=True, required=["other", "kv_ratio", "absent"])
    assert failed.value.code == 1
    err = capsys.readouterr().err
    assert ("benchmark failed: not measured: kv_ratio (the llama.cpp engine reports no KV blocks); "
            "absent (no figure)") in err


@pytest.mark.slow
def test_serving_shared_prefix_on_llama_cpp_reports_null_and_fails(tmp_path: Path) -> None:
    """The llama.cpp engine has no KV blocks to count: shared_prefix_kv_ratio is null, not a 0.0 that meets
    its target, and the benchmark exits 1 saying why."""
    env = {**os.environ, "LOCALLLM_ENGINE": "llama.cpp", "PYTHONPATH": str(ROOT)}
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "serving.py"), "--quick", "--json",
                          "--only", "shared_prefix"], capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 1, run.stderr[-2000:]
    results = json.loads(run.stdout)
    assert results["shared_prefix"]["engine"] == "llama.cpp"
    assert results["shared_prefix_kv_ratio"] is None
    assert results["not_measured"] == {"shared_prefix_kv_ratio": "the llama.cpp engine reports no KV blocks in /api/ps"}
    assert 0 < results["prefill_work_ratio"] <= 1
    assert "not measured: shared_prefix_kv_ratio (the llama.cpp engine reports no KV blocks in /api/ps)" in run.stderr


def _kernel_ab(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "bench" / "kernel_ab.py"), *args],
                          capture_output=True, text=True, env=env, timeout=600)


def test_kernel_ab_times_two_builds_in_turn_and_reports_their_ratio(smollm2_path: Path) -> None:
    run = _kernel_ab(str(smollm2_path), "--a", str(ROOT), "--b", str(ROOT / "kernels"), "--rounds", "4",
                     "--tokens", "2", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    results = json.loads(run.stdout)
    assert results["rounds"] == 4 and results["a_tokens_per_s"] > 0 and results["b_tokens_per_s"] > 0
    assert results["ratio_q1"] <= results["ratio_median"] <= results["ratio_q3"]
    assert "family" in results["cpu"]


def test_kernel_ab_names_a_side_that_is_neither_a_directory_nor_a_revision(smollm2_path: Path) -> None:
    run = _kernel_ab(str(smollm2_path), "--a", "no-such-revision", "--b", str(ROOT))
    assert run.returncode != 0
    assert "'no-such-revision' is neither a directory nor a git revision" in run.stderr
