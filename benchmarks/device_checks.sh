#!/usr/bin/env bash
# Every GPU check in one command, for a lent device machine (about 7 minutes on an H200):
#   bash benchmarks/device_checks.sh [OUTDIR]      (OUTDIR defaults to $OUT, else /tmp/device_checks)
# 1. benchmarks/gpu_check.py: each schedule on CUDA and NCCL, compared with one process, step times;
# 2. benchmarks/gpu_cli_check.sh cuda: the command line, torchrun with the weight-gradient side
#    stream, bf16, checkpoints resumed bit for bit;
# 3. the tests that need (or skip on) CUDA: pytest -k cuda;
# 4. benchmarks/concurrency_real.py three times (3 runs per plan, CP-SAT 5 s).
# Each writes OUTDIR/<name>.txt ending with "# took N s, rc=R". Python packages the machine lacks
# (ortools, pydantic, ...) travel as wheels in .whl/ (see .library/device/README.md); they are
# installed under /tmp/site first when that folder is there.
set -u
O=${1:-${OUT:-/tmp/device_checks}}
mkdir -p "$O"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH="/tmp/site:$PWD"
fi
step() {
    local name=$1 s rc took
    shift
    s=$(date +%s)
    "$@" >"$O/$name.txt" 2>&1
    rc=$?
    took=$(($(date +%s) - s))
    echo "# took $took s, rc=$rc" >>"$O/$name.txt"
    echo "$name: rc=$rc, $took s"
}
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())"
step gpu_check python3 benchmarks/gpu_check.py
step gpu_cli_check bash benchmarks/gpu_cli_check.sh cuda
step cuda_tests python3 -m pytest -q -p no:cacheprovider -rs -k cuda tests
for i in 1 2 3; do
    step "concurrency_real-run$i" python3 benchmarks/concurrency_real.py --runs 3 --time-limit 5
done
