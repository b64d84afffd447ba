#!/usr/bin/env bash
# Install every Debian (and PyPI) package that Whale's build, tests and local
# cluster need. Non-interactive, idempotent, and quick when all is present.
# Every component adds its packages here, one per line, and nowhere else.
set -euo pipefail

DEB_PACKAGES=(
  # build
  meson ninja-build pkg-config gcc
  # runtime libraries
  libjansson-dev libzstd-dev libxxhash-dev libopenblas-dev libopenblas0-pthread libhwloc-dev
  libpmix-dev libpmix-bin libucx-dev ucx-utils
  # oneDNN: bf16 GEMMs of mixed precision on CPUs with AVX512_BF16 (optional at build time)
  libdnnl-dev
  # whale-data: SentencePiece tokenizer (C++ library; spm_encode for contrib/bench/tokenizer-bench.sh); g++ for its wrapper
  libsentencepiece-dev sentencepiece g++
  # tokenizer.json pre-tokenizer regexes and the NFC normalizer (runtime/tools/data/bpe.c)
  libpcre2-dev libicu-dev
  # Slurm + munge (plugin build and the local cluster)
  slurm-wlm slurmctld slurmd slurm-client libslurm-dev munge libmunge-dev
  # tests
  libcmocka-dev bats iproute2 procps util-linux python3
  # tests/unit/tools/man_pages.sh renders every man page (groff -ww)
  groff-base
  # tests/fuzz: libFuzzer harnesses (clang + its compiler-rt runtime)
  clang libclang-rt-dev
  # contrib/bench: PyTorch comparison for whale-train
  python3-torch
  # contrib/bench: Open MPI comparison for whale-bench comm
  openmpi-bin libopenmpi-dev
  # tests/cluster/observe.bats: whale-report's page rendered in a real headless browser
  chromium fonts-dejavu-core
)
PIP_PACKAGES=(
  # checkpoint interop test (tests/unit/ckpt/safetensors_python_reads_consolidated.py)
  numpy safetensors
  # tests/cluster/observe.bats: whale-train's Prometheus output read by the reference parser
  prometheus_client
)

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: run as root (apt-get needs it)" >&2
  exit 1
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
  # dpkg-query is fast; only call apt when something is absent.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # Debian's maintainer scripts would start slurmd/slurmctld/munge on a host
  # with an init system; the minicluster starts its own daemons.
  policy_added=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    policy_added=1
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  [ "$policy_added" = 1 ] && rm -f /usr/sbin/policy-rc.d
else
  echo "install-deps: all Debian packages present"
fi

if [ ${#PIP_PACKAGES[@]} -gt 0 ]; then
  need=()
  for p in "${PIP_PACKAGES[@]}"; do
    python3 -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('${p%%[=<>]*}'.replace('-','_')) else 1)" 2>/dev/null || need+=("$p")
  done
  if [ ${#need[@]} -gt 0 ]; then
    echo "install-deps: pip installing ${need[*]}"
    python3 -m pip install -q "${need[@]}"
  fi
fi

# Reference stack of the Hugging Face interchange test (tests/unit/ckpt/
# hf_interop.py): transformers on Debian's torch (python3-torch 1.13), for
# /usr/bin/python3 (the interpreter that has torch). 4.46 is the last
# release that still runs on torch 1.13 and has Llama, Mistral and Qwen2;
# no CUDA torch from PyPI. About 3 minutes on a fresh machine. jinja2 runs
# apply_chat_template (tests/unit/data/instruct_vs_hf.py).
HF_PIP=("transformers==4.46.3" "tokenizers>=0.20,<0.21" "safetensors>=0.4" "sentencepiece>=0.1.99" "jinja2>=3.1")
if ! /usr/bin/python3 -c "import transformers, tokenizers, safetensors, sentencepiece, jinja2, torch; assert transformers.__version__ == '4.46.3'" 2>/dev/null; then
  echo "install-deps: pip installing ${HF_PIP[*]} for /usr/bin/python3"
  /usr/bin/python3 -m pip install -q --break-system-packages "${HF_PIP[@]}"
fi
