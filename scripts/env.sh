# Sourced by scripts/test and scripts/serve: make a virtual environment at $1 holding exactly the
# hashed, pinned requirements file $2 (made by scripts/lock), plus this project without dependencies.
set -euo pipefail
command -v uv >/dev/null 2>&1 || python3 -m pip install --quiet uv
venv="$1"
requirements="$2"
uv venv --quiet --allow-existing --python "${XLA_CACHE_PYTHON:-python3}" "$venv"
uv pip sync --quiet --python "$venv/bin/python" --require-hashes "$requirements"
uv pip install --quiet --python "$venv/bin/python" --no-deps --editable .
