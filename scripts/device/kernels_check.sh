#!/usr/bin/env bash
# The native kernels on a lent machine's CPU (which may have AVX-512 and VNNI where this one has only AVX2): the C
# harness checks every SIMD level the CPU runs against the scalar reference (tests/backends/kernels_check.c), then,
# where the machine's Python has numpy and pytest, tests/backends/test_kernels.py at each level (the tests that
# compare with ggml's own kernels need llama-cpp-python, and are left to cuda_check.sh).
# Needs only a C compiler; prints what it ran. Usage: scripts/device/kernels_check.sh   (OUT=folder for the logs)
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=${OUT:-$(mktemp -d)}
cd "$REPO" || exit 1
echo "== CPU: $(lscpu | sed -n 's/^Model name: *//p'), family $(lscpu | sed -n 's/^CPU family: *//p') model $(lscpu | sed -n 's/^Model: *//p')"
echo "== SIMD flags: $(grep -o -w -E 'avx2|avx512f|avx512bw|avx512vl|avx512_vnni|avx_vnni|avx512_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
cc -O2 -std=gnu11 -fno-math-errno -o "$OUT/kernels_check" tests/backends/kernels_check.c kernels/*.c -lm -lpthread \
    || { echo "KERNELS CHECK FAILED: build"; exit 1; }
"$OUT/kernels_check" > "$OUT/kernels_check.log" 2>&1
status=$?
echo "== kernels_check (exit $status): $(tail -1 "$OUT/kernels_check.log")"
if python3 -c "import numpy, pytest" 2>/dev/null; then
    for wheel in .device1/whl/*.whl; do  # what localllm imports and the machine lacks (cuda_check.sh prepare)
        python3 -m pip install -q --no-deps --no-index --target "$OUT/deps" "$wheel" 2>/dev/null
    done
    PYTHONPATH="$OUT/deps" python3 -m pytest -q -p no:cacheprovider tests/backends/test_kernels.py -k "not ggml" > "$OUT/pytest.log" 2>&1 \
        || status=1
    tail -3 "$OUT/pytest.log"
else
    echo "== no numpy/pytest on this machine: the Python kernel tests were not run"
fi
exit $status
