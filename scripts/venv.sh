# Sourced by the other scripts: create .venv once and install stratamem into it.
# Usage: source scripts/venv.sh [extras]   e.g. "dev" or "dev,bench"
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
extras="${1:-}"
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
stamp=".venv/.installed-${extras:-base}"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    # torch first: its pin in pyproject.toml then resolves to the CPU build already installed,
    # not to the much larger default build with CUDA libraries.
    .venv/bin/pip install --quiet "torch==2.13.0"
    .venv/bin/pip install --quiet -e ".${extras:+[$extras]}"
    touch "$stamp"
fi
export PATH="$PWD/.venv/bin:$PATH"
