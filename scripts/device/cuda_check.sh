#!/usr/bin/env bash
# The CUDA offload check on a lent NVIDIA machine with no network, in two calls to the same warm machine.
#
#   scripts/device/cuda_check.sh prepare # here, with network: .device1/ and .device2/ in the checkout
#   scripts/device/cuda_check.sh build   # call 1: carried wheels, llama-cpp-python built for CUDA, model part 1
#   scripts/device/cuda_check.sh check   # call 2: model part 2, then tests/server/test_cuda_offload.py and
#                                        #         scripts/bench/gpu_offload.py on the GPU
#
# What travels: .device1/ (wheels of the packages the machine lacks in whl/, the llama-cpp-python sdist trimmed
# of what a CUDA build never reads, in llama-cpp-python.tgz, and the model's first bytes in model.part1) and
# .device2/ (model.part2): SmolLM2 (98 MB) is more than one call may carry. What call 1 makes is kept in $WORK
# (build/cuda-check: ignored, so the machine keeps it for the next call); what a call prints and logs goes to $OUT.
#
# The build: CMAKE_ARGS as the README's CUDA build (-DGGML_CUDA=on -DGGML_RPC=on) for the H100 alone
# (CMAKE_CUDA_ARCHITECTURES=90-real: no PTX copy), 16 parallel jobs with ninja, and two parts turned off that
# localllm does not use here: flash attention's CUDA kernels (GGML_CUDA_FA=OFF; localllm asks llama.cpp for flash
# attention only under LOCALLLM_FLASH_ATTENTION=1, off by default) and NCCL (one GPU).
# CUDA_CHECK_CMAKE_ARGS replaces those arguments (a CPU dry run elsewhere: CUDA_CHECK_CMAKE_ARGS=-DGGML_RPC=on).
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=${CUDA_CHECK_WORK:-$REPO/build/cuda-check}  # build/ is ignored: kept between calls on a warm machine
OUT=${OUT:-$WORK/out}
PYTHON=${PYTHON:-python3}
MODEL=SmolLM2-135M-Instruct.Q4_1.gguf
MODEL_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
CMAKE_ARGS_CUDA="-DGGML_CUDA=on -DGGML_RPC=on -DCMAKE_CUDA_ARCHITECTURES=90-real -DGGML_CUDA_FA=OFF -DGGML_CUDA_NCCL=OFF"
mkdir -p "$WORK" "$OUT"

say() { echo "== $(date -u +%H:%M:%S) $*"; }
fail() { echo "CUDA CHECK FAILED: $*"; exit 1; }

# The CMake arguments: CMAKE_ARGS_CUDA (or CUDA_CHECK_CMAKE_ARGS), plus where cuBLAS and the driver library are when
# CMake would not find them itself.
cmake_args() {
    local args=${CUDA_CHECK_CMAKE_ARGS:-$CMAKE_ARGS_CUDA}
    if [[ $args == *GGML_CUDA=on* ]]; then
        args="$args$(cublas_args)$(driver_args)"
    fi
    echo "$args"
}

toolkits() {
    dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")"
    echo "${CUDA_HOME:-/usr/local/cuda}"
}

# cuBLAS, which ggml-cuda links: the toolkit's, else NVIDIA's pip package (nvidia-cublas) in the Python there
# (a compiler-only toolkit), whose directory then goes on LD_LIBRARY_PATH for the check.
cublas_args() {
    local toolkit found
    for toolkit in $(toolkits); do
        if compgen -G "$toolkit/lib64/libcublas.so*" >/dev/null || compgen -G "$toolkit/targets/*/lib/libcublas.so*" >/dev/null; then
            return 0
        fi
    done
    found=$("$PYTHON" - <<'EOF'
import glob, site
print(next(iter(sorted(p for d in site.getsitepackages() for p in glob.glob(f"{d}/nvidia/**/libcublas.so.*", recursive=True))), ""))
EOF
)
    [ -n "$found" ] || return 0
    local lib include
    lib=$(dirname "$found") include=$(dirname "$(dirname "$found")")/include
    echo "$lib" > "$WORK/cublas-dir"
    echo -n " -DCUDA_cublas_LIBRARY=$found -DCUDA_cublasLt_LIBRARY=$(ls "$lib"/libcublasLt.so.* | head -1)"
    echo -n " -DCMAKE_CUDA_FLAGS=-I$include -DCMAKE_CXX_FLAGS=-I$include"
}

# The driver library for ggml's virtual-memory pool (CUDA::cuda_driver): the toolkit's stub or the driver's own
# library named to CMake; with neither, the build goes without that pool (GGML_CUDA_NO_VMM), as engine_builds does.
driver_args() {
    local toolkit found=""
    for toolkit in $(toolkits); do
        found=$(ls "$toolkit"/lib64/stubs/libcuda.so "$toolkit"/targets/*/lib/stubs/libcuda.so 2>/dev/null | head -1)
        [ -n "$found" ] && return 0
    done
    found=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so(\.1)? /{print $NF; exit}')
    [ -z "$found" ] && found=$(ls /usr/local/nvidia/lib64/libcuda.so* /usr/lib/x86_64-linux-gnu/libcuda.so* 2>/dev/null | head -1)
    if [ -n "$found" ]; then echo -n " -DCUDA_cuda_driver_LIBRARY=$found"; else echo -n " -DGGML_CUDA_NO_VMM=ON"; fi
}

environment() {
    export PYTHONPATH="$WORK/cuda-site:$WORK/deps:$REPO" LOCALLLM_CUDA_SITE="$WORK/cuda-site"
    export LOCALLLM_TEST_CACHE="$WORK/models" PYTHONUNBUFFERED=1
    [ -s "$WORK/cublas-dir" ] && export LD_LIBRARY_PATH="$(cat "$WORK/cublas-dir")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    return 0
}

build() {
    local started=$SECONDS
    say "machine"
    nvidia-smi -L; nvcc --version | tail -2; cmake --version | head -1; echo "ninja $(ninja --version)"
    "$PYTHON" --version; nproc; command -v pgrep cc
    [ -d "$REPO/.device1/whl" ] || fail "no .device1/ here: call 1 carries it (carry [\".device1\"])"

    say "wheels of what the machine lacks -> $WORK/deps"
    "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$WORK/deps" \
        "$REPO"/.device1/whl/*.whl || fail "the carried wheels did not install"

    say "model, first part -> $WORK/models"
    mkdir -p "$WORK/models"
    cp "$REPO/.device1/model.part1" "$WORK/models/$MODEL.part1" || fail "no .device1/model.part1"

    say "llama-cpp-python from its trimmed sdist"
    rm -rf "$WORK/src" "$WORK/cuda-site" && mkdir -p "$WORK/src"
    tar xzf "$REPO/.device1/llama-cpp-python.tgz" -C "$WORK/src" || fail "no .device1/llama-cpp-python.tgz"
    local args
    rm -f "$WORK/cublas-dir"
    args=$(cmake_args)
    echo "CMAKE_ARGS=$args"
    if [ -n "${CUDA_CHECK_CONFIGURE_ONLY:-}" ]; then  # a dry run where the build would take too long: CMake's step
        # shellcheck disable=SC2086
        cmake -S "$WORK/src" -B "$WORK/configure" -G Ninja -DSKBUILD_PLATLIB_DIR="$WORK/configure/platlib" $args \
            > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; fail "CMake's configure failed"; }
        grep -E "CUDA|cuBLAS|cublas|Including" "$OUT/configure.log"
        say "configured only: CONFIGURE OK"
        return 0
    fi
    local build_started=$SECONDS
    CMAKE_ARGS="$args" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) CMAKE_GENERATOR=Ninja \
        "$PYTHON" -m pip install --no-index --no-deps --no-build-isolation --no-cache-dir -v \
        --target "$WORK/cuda-site" "$WORK/src" > "$OUT/llama-build.log" 2>&1 \
        || { tail -40 "$OUT/llama-build.log"; fail "the llama-cpp-python build failed (llama-build.log)"; }
    say "llama-cpp-python built in $((SECONDS - build_started)) s"
    ls "$WORK/cuda-site/llama_cpp/lib"

    environment
    say "localllm's kernels library (compiled from kernels/ on first use) and ggml's devices on this build"
    "$PYTHON" - <<'EOF' || fail "localllm does not load on this build"
from localllm.backends.native.lib import library
from localllm.server.memory import describe_devices, gpu_devices
print("kernels library:", library()._name)
print("devices:", describe_devices(gpu_devices()))
EOF
    say "build phase done in $((SECONDS - started)) s: BUILD OK"
}

check() {
    local started=$SECONDS
    [ -d "$WORK/cuda-site/llama_cpp" ] || fail "no CUDA build in $WORK: this is not the machine call 1 built on (rerun call 1)"
    [ -f "$WORK/models/$MODEL.part1" ] || [ -f "$WORK/models/$MODEL" ] || fail "call 1's model part is gone (rerun call 1)"
    if [ ! -f "$WORK/models/$MODEL" ]; then
        say "model, second part"
        cat "$WORK/models/$MODEL.part1" "$REPO/.device2/model.part2" > "$WORK/models/$MODEL.partial" \
            || fail "no .device2/model.part2 (carry [\".device2\"])"
        echo "$MODEL_SHA256  $WORK/models/$MODEL.partial" | sha256sum -c --quiet || fail "the model's sha256 differs"
        mv "$WORK/models/$MODEL.partial" "$WORK/models/$MODEL"
    fi
    say "model ok (sha256 $MODEL_SHA256)"
    environment
    nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv

    say "tests/server/test_cuda_offload.py"
    (cd "$REPO" && "$PYTHON" -m pytest -v -s -rA -p no:cacheprovider --basetemp="$WORK/pytest" \
        tests/server/test_cuda_offload.py) > "$OUT/pytest.log" 2>&1
    local tests=$?
    if grep -q "^SKIPPED" "$OUT/pytest.log"; then  # a skip here means the GPU went unchecked: no "OK" for it
        echo "the CUDA tests skipped: see the reason below"; tests=5
    fi
    grep -E "^(PASSED|FAILED|ERROR|SKIPPED)|passed|failed|^(listed|ps|measured|all layers|15 layers|under a)" \
        "$OUT/pytest.log" | tail -30

    say "scripts/bench/gpu_offload.py --layers 31 --rounds 3 --json"
    mkdir -p "$WORK/tmp"  # the benchmark's daemon store (and log) under $WORK
    (cd "$REPO" && TMPDIR="$WORK/tmp" "$PYTHON" scripts/bench/gpu_offload.py --layers 31 --rounds 3 --json) \
        > "$OUT/bench.json" 2> "$OUT/bench.log"
    local bench=$?
    cat "$OUT/bench.json"; tail -5 "$OUT/bench.log"
    # the daemons' logs, each under its name: the tests' and the benchmark's
    tail -n +1 "$WORK"/pytest/*/daemon.log "$WORK"/pytest/*/*/daemon.log "$WORK"/tmp/localllm-bench-*/daemon.log 2>/dev/null \
        | tail -c 8000000 > "$OUT/daemon-logs.txt"
    say "check phase done in $((SECONDS - started)) s: tests rc=$tests, bench rc=$bench"
    [ $tests -eq 0 ] && [ $bench -eq 0 ] && echo "CUDA CHECK OK"
}

# Here, with network: .device1/ and .device2/ (add /.device1/ and /.device2/ to .git/info/exclude). The sdist
# loses what a CUDA build never reads (vocab test models, docs, other backends, git history): 77 MB -> 5 MB.
prepare() {
    local tmp wheels="fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 typing-inspection
        annotated-types uvicorn==0.54.0 platformdirs==4.14.8 gguf==0.19.0 llguidance==1.9.1 jsonschema==4.26.0
        jsonschema-specifications referencing==0.37.0 rpds-py httptools==0.9.0 diskcache==5.6.3 typing-extensions
        opentelemetry-api==1.45.2"
    tmp=$(mktemp -d) && mkdir -p "$REPO/.device1/whl" "$REPO/.device2"
    # shellcheck disable=SC2086
    "$PYTHON" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_31_x86_64 --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d "$REPO/.device1/whl" $wheels || fail "wheels"
    [ -n "${SDIST:-}" ] || { "$PYTHON" -m pip download -q --no-deps --no-binary :all: -d "$tmp" llama-cpp-python==0.3.36 \
        && SDIST=$(ls "$tmp"/llama_cpp_python-*.tar.gz); } || fail "the sdist"
    mkdir "$tmp/src" && tar xzf "$SDIST" -C "$tmp/src" --strip-components=1 || fail "unpacking $SDIST"
    (cd "$tmp/src" && v=vendor/llama.cpp \
        && rm -rf .git .github examples docs docker tests $v/.git $v/ci $v/models $v/docs $v/media $v/benches \
            $v/examples $v/pocs $v/tests $v/gguf-py $v/conversion $v/app $v/.devops $v/.github \
        && find $v/tools -mindepth 1 -maxdepth 1 ! -name mtmd ! -name CMakeLists.txt -exec rm -rf {} + \
        && find $v/ggml/src -mindepth 1 -maxdepth 1 -type d -name 'ggml-*' ! -name ggml-cpu ! -name ggml-cuda \
            ! -name ggml-rpc -exec rm -rf {} +) || fail "trimming the sdist"
    tar czf "$REPO/.device1/llama-cpp-python.tgz" -C "$tmp/src" . || fail "packing the sdist"
    local model=${LOCALLLM_TEST_CACHE:-$HOME/.cache/localllm-tests}/$MODEL
    head -c 44040192 "$model" > "$REPO/.device1/model.part1" && tail -c +44040193 "$model" > "$REPO/.device2/model.part2"
    cat "$REPO/.device1/model.part1" "$REPO/.device2/model.part2" | sha256sum | grep -q "$MODEL_SHA256" \
        || fail "the model parts do not make $MODEL"
    rm -rf "$tmp"
    du -sb "$REPO/.device1" "$REPO/.device2"
}

case "${1:-}" in
    prepare) prepare ;;
    build) build 2>&1 | tee "$OUT/build.log" ;;
    check) check 2>&1 | tee "$OUT/check.log" ;;
    *) echo "usage: $0 prepare|build|check" >&2; exit 2 ;;
esac
