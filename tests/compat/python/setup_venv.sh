#!/usr/bin/env bash
# Creates python/.venv with the pinned requirements; reuses it while requirements.txt is
# unchanged (pip's cache makes a rebuild quick). Prints the venv's python path.
set -euo pipefail
PY="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VENV="$PY/.venv"
STAMP="$VENV/.requirements.sha256"
HASH=$(sha256sum "$PY/requirements.txt" | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$HASH" ]; then
    rm -rf "$VENV"
    python3 -m venv "$VENV" >&2
    "$VENV/bin/pip" install -q -r "$PY/requirements.txt" >&2
    echo "$HASH" > "$STAMP"
fi
echo "$VENV/bin/python"
