#!/usr/bin/env bash
# On a CUDA machine with rlvr importable (no vLLM, no hub): the unit tests with the GPU as the
# default device, the default `rlvr train` run timed, and vs_trl at the default shape.
#   bash benchmarks/gpu_check.sh [OUT_DIR]
# TEST_SECONDS, TRAIN_SECONDS and TRL_SECONDS cap each part; PYTEST_ARGS adds to the test line.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:-/tmp/rlvr-gpu-check}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())"

# Every test whose model lands on "auto" runs on the GPU here; xdist spreads them over the cores.
start=$(date +%s)
timeout -s INT "${TEST_SECONDS:-180}" python3 -m pytest -p no:cacheprovider -n "${WORKERS:-12}" \
    -m "not vllm" tests --ignore=tests/e2e -q -rfE --durations=15 ${PYTEST_ARGS:-} > "$out/tests.log" 2>&1
echo "tests: rc=$? in $(( $(date +%s) - start )) s"
grep -E "^(FAILED|ERROR)|passed|failed" "$out/tests.log" | tail -40

runs=$(mktemp -d)  # checkpoints and the report stay behind: only the metrics are copied
start=$(date +%s)
timeout "${TRAIN_SECONDS:-150}" python3 -c "from rlvr.cli import main; main()" train \
    log.run_dir="$runs" log.name=default > "$out/train.log" 2>&1
echo "default run: rc=$? in $(( $(date +%s) - start )) s (warm start included)"
tail -5 "$out/train.log"
cp "$runs/default/metrics.jsonl" "$out/train_metrics.jsonl"
python3 - "$out/train_metrics.jsonl" <<'PY'
import json, statistics, sys
records = [json.loads(line) for line in open(sys.argv[1])]
steps = [r for r in records if "time/step" in r]
evals = [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]
keys = ["time/step", "time/generate", "time/update"]
print(json.dumps({"steps": len(steps), "evals": evals,
                  **{k: round(statistics.median(s[k] for s in steps[1:]), 3) for k in keys}}))
PY

# TRL loads with transformers' defaults: with hub kernels on, a GPU without the hub crashes it.
USE_HUB_KERNELS=NO timeout "${TRL_SECONDS:-200}" python3 benchmarks/vs_trl.py --steps 10 --rounds 1 --eval-every 5 \
    > "$out/vs_trl.json" 2> "$out/vs_trl.err"
echo "vs_trl: rc=$?"
cat "$out/vs_trl.json"
tail -5 "$out/vs_trl.err"
