#!/usr/bin/env bash
# The GPU checks, as one run on the GPU machine: install the wheels of .wheels/,
# run benchmarks/throughput.py on the GPU against
# Stable-Baselines3 on the same GPU (ratios printed), tests/test_cuda.py, and
# throughput.py with torch.compile. Ends within 8 minutes (GPU_CHECK_SECONDS, 480 by default):
# each step has a time budget, cut to what is left of GPU_CHECK_SECONDS. The budgets
# are caps and add up to more than the deadline: steps that end early leave their
# time to the later ones, and the last (compile on top of the graphs) is the one a
# slow machine skips.
#
#     bash benchmarks/gpu_check.sh          # from the repository root
#
# Through the device tool, keep the whole log (its reply holds only the output's tail):
#
#     mkdir -p $OUT; bash benchmarks/gpu_check.sh 2>&1 | tee $OUT/gpu_check.log
#
# The machine has Python 3.12 and torch with CUDA but no network and none of
# gymnasium, MuJoCo, gin-config, Stable-Baselines3 (tensorboard is there). Their
# wheels come in .wheels/ (git-ignored), fetched on a machine with network by
#
#     make gpu-wheels
#
# (19 wheels, 13 MB, listed in the Makefile's GPU_WHEELS; installed without their
# dependencies: MuJoCo's viewer packages and pillow are not needed to step the envs.)
set -u
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DEADLINE=${GPU_CHECK_SECONDS:-480}
SITE=${TMPDIR:-/tmp}/alf_lite_gpu_check_site
export CUBLAS_WORKSPACE_CONFIG=:4096:8 PYTHONUNBUFFERED=1

# step NAME BUDGET_S COMMAND...: run COMMAND for at most BUDGET_S seconds (fewer
# when less is left), then say how it ended.
step() {
    local name=$1 budget=$2
    shift 2
    local left=$((DEADLINE - SECONDS))
    if ((left < 15)); then
        echo "=== $name: skipped, ${left} s left"
        return
    fi
    ((budget > left)) && budget=$left
    echo "=== $name (at most ${budget} s)"
    local start=$SECONDS
    timeout --signal=INT --kill-after=10 "$budget" "$@"
    echo "=== $name: exit code $? after $((SECONDS - start)) s"
}

if ! compgen -G '.wheels/*.whl' > /dev/null; then
    echo "=== no wheels in .wheels/: fetch them as above, with make gpu-wheels (and pass carry=['.wheels'] to the GPU machine)"
    exit 2
fi

echo "=== machine"
nvidia-smi --query-gpu=name,memory.used,memory.total,driver_version --format=csv,noheader
# Without a GPU every later step would fail or skip (and the script end with exit code 0):
# stop here, with what torch says.
if ! "$PYTHON" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
"CUDA", torch.version.cuda, "available", torch.cuda.is_available()); sys.exit(not torch.cuda.is_available())'; then
    echo "=== torch finds no CUDA GPU here (above; nvidia-smi's line tells whether the driver does): stopping"
    exit 2
fi

# Afresh: pip --target leaves a package folder that is already there as it was.
rm -rf "$SITE"
step "install .wheels" 60 "$PYTHON" -m pip install --quiet --no-index --no-deps \
    --disable-pip-version-check --target "$SITE" .wheels/*.whl
export PYTHONPATH="$SITE:$PWD"
# Every later step needs these: stop here, naming what is missing, rather than fail each step.
if ! "$PYTHON" -c 'import gymnasium, mujoco, gin, stable_baselines3, absl, psutil, pytest, alf_lite.trainer'; then
    echo "=== a package the checks need does not import (above); stopping"
    exit 2
fi

# The figures first (they are what a cut-short run must not lose), then the tests.
# throughput.py prints each rate over the whole timed window and once warm
# (after the first --learning_starts updates, which hold the graph captures).
BENCH=(benchmarks/throughput.py --device cuda --steps 2000 --learning_starts 500 --pairs 1
       --ceiling_updates 500 --threads 1 --sb3_threads 1)
step "SAC HalfCheetah-v5, CUDA graph" 85 "$PYTHON" "${BENCH[@]}" --algo sac --env HalfCheetah-v5 \
    --cuda_graph
step "TD3 HalfCheetah-v5, CUDA graph" 55 "$PYTHON" "${BENCH[@]}" --algo td3 --env HalfCheetah-v5 \
    --cuda_graph
step "SAC Humanoid-v5, CUDA graph" 90 "$PYTHON" "${BENCH[@]}" --algo sac --env Humanoid-v5 \
    --cuda_graph
# The compile tests last: a cold torch.compile takes long, and a cut must not
# take the whole-run, resume and RNG tests with it.
TESTS=(-m pytest -q -rs -p no:cacheprovider --durations=10 tests/test_cuda.py)
# Its tests are bound by Python's dispatch on one core each: four workers (each its
# own process and CUDA context) share the GPU. Without pytest-xdist, one process.
WORKERS=()
"$PYTHON" -c 'import xdist' 2> /dev/null && WORKERS=(-n 4 --dist load)
step "tests/test_cuda.py without compile" 150 "$PYTHON" "${TESTS[@]}" ${WORKERS[@]+"${WORKERS[@]}"} \
    -k "not compile"
step "tests/test_cuda.py compile tests" 90 "$PYTHON" "${TESTS[@]}" -k compile
# Last, as the deadline may cut it: torch.compile on top of the graphs, in whole runs,
# shorter (a cold compile comes first).
step "SAC HalfCheetah-v5, CUDA graph + compile" 60 "$PYTHON" "${BENCH[@]}" --algo sac \
    --env HalfCheetah-v5 --cuda_graph --compile --steps 1000 --learning_starts 250 \
    --ceiling_updates 300
echo "=== done in ${SECONDS} s"
