#!/usr/bin/env bash
# tinker-cookbook's recipes, from PyPI and unmodified, against `rlvr serve`: set up
# .venv-cookbook for the recipes (the clients) and run tests/serve/test_cookbook.py with the main
# environment's pytest (the service runs there). The cookbook has its own environment because
# tinker-cookbook 0.5.0 pins transformers <= 5.5.4 while rlvr needs >= 5.19 (0.6.x needs
# tml-renderers >= 0.4.1, which the package index here lacks).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-cookbook
.venv-cookbook/bin/pip install --no-compile -c constraints.txt "tinker-cookbook[math-rl]==0.5.0"
# a broken install must fail here, not in the middle of a recipe
.venv-cookbook/bin/python -c "import tinker_cookbook.recipes.sl_basic, tinker_cookbook.recipes.math_rl.train"
# with RLVR_COOKBOOK_PYTHON set the cookbook tests must run: --strict-skips fails a skip, and
# pytest exits 5 (a failure here) should -m cookbook select nothing
RLVR_COOKBOOK_PYTHON="$PWD/.venv-cookbook/bin/python" .venv/bin/pytest -m cookbook -n 0 --strict-skips "$@"
