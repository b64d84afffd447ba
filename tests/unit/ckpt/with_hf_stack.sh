#!/bin/bash
# Runs a Python test with /usr/bin/python3 (the interpreter with Debian's
# torch), installing the Hugging Face reference stack first when it is
# missing (the same pins as contrib/install-deps.sh): a missing stack is a
# failure of the install, never a skip.
# Usage: with_hf_stack.sh SCRIPT.py ARGS...
set -euo pipefail
PY=/usr/bin/python3
# the tests using it run beside each other: one installs at a time
exec 9>"${TMPDIR:-/tmp}/whale-hf-stack.lock"
flock 9
if ! $PY -c "import transformers, tokenizers, safetensors, sentencepiece, jinja2, torch" 2>/dev/null; then
  echo "installing the reference stack (transformers on Debian's torch)"
  $PY -m pip install -q --break-system-packages "transformers==4.46.3" "tokenizers>=0.20,<0.21" "safetensors>=0.4" "sentencepiece>=0.1.99" "jinja2>=3.1"
fi
flock -u 9
exec 9>&-
exec $PY "$@"
