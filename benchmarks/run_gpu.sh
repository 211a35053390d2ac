#!/usr/bin/env bash
# The GPU run: `pytest -m gpu`, then benchmarks/bench_gpu.py, which writes
# benchmarks/results/gpu-<device>.md (device, versions, GEMM TFLOP/s against the published peak,
# trainer step times, rounding-kernel throughput, and the GPU tests' summary).
#
# Run it on a machine with a CUDA GPU, from anywhere:  bash benchmarks/run_gpu.sh [bench_gpu options]
# It installs nothing. It uses $PYTHON, else .venv/bin/python, else python3; that interpreter needs
# floatlab with its dev extra and the gpu extra (CuPy and numba-cuda) already installed.
# GPU_PYTEST_ARGS adds pytest options (with pytest-xdist: GPU_PYTEST_ARGS="-n 8", so that the
# CPU kernels the tests compare against compile on several cores at once). pytest-benchmark, where
# it is installed, is left out: under xdist it warns, and the suite turns warnings into errors.
set -uo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-}"
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export NUMBA_CACHE_DIR="${NUMBA_CACHE_DIR:-$PWD/.numba_cache}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

missing=$("$PY" - <<'PY'
import importlib.util
need = ["numpy", "numba", "ml_dtypes", "pytest", "cupy", "numba_cuda"]
print(" ".join(m for m in need if importlib.util.find_spec(m) is None))
PY
)
if [ -n "$missing" ]; then
    echo "run_gpu.sh: missing Python packages for $PY: $missing (pip install -e '.[dev,gpu]')" >&2
    exit 2
fi
if ! "$PY" -c "from floatlab.backend import require_cupy; require_cupy()"; then
    echo "run_gpu.sh: no usable CUDA device" >&2
    exit 2
fi
"$PY" -c "from floatlab.backend import get_backend; b = get_backend('cupy'); print('device:', b.device_name())"

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# shellcheck disable=SC2086
"$PY" -m pytest -m gpu tests/suites/test_gpu.py -p no:cacheprovider -p no:benchmark -q -rfE ${GPU_PYTEST_ARGS:-} 2>&1 | tee "$log"
tests_status=${PIPESTATUS[0]}

"$PY" benchmarks/bench_gpu.py --pytest-log "$log" "$@"
bench_status=$?

echo "run_gpu.sh: GPU tests exit status $tests_status, benchmarks exit status $bench_status"
[ "$tests_status" -eq 0 ] && [ "$bench_status" -eq 0 ]
