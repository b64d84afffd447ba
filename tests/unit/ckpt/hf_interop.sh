#!/bin/bash
# Runs hf_interop.py with /usr/bin/python3 (Debian's torch), installing the
# reference stack first when it is missing (contrib/install-deps.sh's pip
# step): a missing stack is a failure, not a skip.
# Usage: hf_interop.sh WHALE_CKPT WHALE_TRAIN WHALE_RUN SRC_DIR [FAMILIES...]
set -euo pipefail
CK=$1 TR=$2 RUN=$3 SRC=$4
shift 4
PY=/usr/bin/python3
if ! $PY -c "import transformers, safetensors, torch" 2>/dev/null; then
  echo "installing the reference stack (transformers on Debian's torch)"
  $PY -m pip install -q --break-system-packages "transformers==4.46.3" "tokenizers>=0.20,<0.21" "safetensors>=0.4"
fi
exec $PY "$SRC/tests/unit/ckpt/hf_interop.py" "$CK" "$TR" "$RUN" "$@"
