#!/usr/bin/env bash
# On a GPU machine (no hub needed): build a Qwen2-0.5B-shaped model locally, then print
# HF-vs-vLLM generate tokens/s, weight-sync seconds (full and LoRA), and RL step times with
# each engine. Needs rlvr installed with the vllm extra: pip install -e '.[vllm]'.
#   bash benchmarks/gpu_smoke.sh [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-/tmp/rlvr-gpu-smoke}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python -m rlvr.models.scratch "$out/qwen2-0.5b" --preset qwen2-0.5b --dtype bfloat16
python benchmarks/vllm_engine.py --model "$out/qwen2-0.5b" --dtype bfloat16 --batch 256 \
    --max-new-tokens 128 > "$out/engines.json"
cat "$out/engines.json"
for engine in hf vllm; do
    rlvr train model.name="$out/qwen2-0.5b" model.dtype=bfloat16 task.name=arithmetic \
        rollout.engine=$engine rollout.batch_size=256 rollout.group_size=8 \
        rollout.max_new_tokens=128 train.micro_batch_size=32 train.steps=4 train.eval_every=0 \
        task.eval_size=64 train.lr=1e-6 log.run_dir="$out/runs" log.name=$engine log.quiet=true
    python - "$out/runs/$engine/metrics.jsonl" "$engine" <<'PY'
import json, statistics, sys
steps = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
keys = ["time/step", "time/generate", "time/update", "time/weight_sync", "mismatch/abs_diff_mean"]
print(json.dumps({"engine": sys.argv[2], **{k: statistics.median(s[k] for s in steps[1:]) for k in keys if k in steps[-1]}}))
PY
done
