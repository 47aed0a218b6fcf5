#!/usr/bin/env bash
# scripts/install-rocm.sh: the ROCm toolchain that candle-rocm builds and tests against, in a private
# prefix, on Debian 12 (bookworm) x86_64, without touching the system's apt state.
#
# What it installs (from Debian unstable, the only Debian suite that ships ROCm 6.4 and an AMDGPU
# device library for its clang):
#   * headers: hip/ hsa/ amd_comgr/ rocblas/ miopen/ rccl/ (the *-dev packages);
#   * Debian's RCCL library (librccl1) for the symbol-table check of crates/rccl-safe only: it is
#     RCCL 5.4, built against ROCm 5's HIP, so it is unpacked without its dependencies and never
#     loaded (CANDLE_ROCM_RCCL=0 leaves RCCL out; its .deb is 120 MB);
#   * the real libamdhip64, libhiprtc, librocblas, libMIOpen and their closure, with rocBLAS' GEMM
#     kernels (its Tensile library) for the chosen GPU architectures only (all of them are 2.9 GB;
#     see CANDLE_ROCM_TENSILE_ARCHS below);
#   * an AMDGPU clang + lld + clang-offload-bundler + llvm-readelf + the device libraries, and
#     `bin/hip-clang`, a device-only HIP compiler wrapper;
#   * unstable's glibc/libstdc++ in `sysroot/` (everything from unstable needs glibc >= 2.38) and
#     `bin/sid-run PROGRAM ARGS...`, which runs a bookworm-built program under that glibc so that it
#     can dlopen the unstable ROCm libraries (cargo: CARGO_TARGET_<triple>_RUNNER=<prefix>/bin/sid-run);
#   * `rocm/`, laid out like a ROCm install (include/ lib/ bin/ share/ llvm/ amdgcn/), for ROCM_PATH;
#   * `env.sh` (source it), MANIFEST.txt (package, version, size) and a stamp file.
#
# The toolchain executables are patched to use the prefix's own ld.so by absolute path: do not move
# the prefix, re-run the script with the new location instead (downloads are cached in the prefix).
#
# Usage: scripts/install-rocm.sh [--prefix DIR] [--update | --force | --check] [--no-selftest]
#                                [--tensile-archs LIST]
#   (no option)    install, or do nothing if the stamp says the prefix is complete (no network)
#   --update       re-resolve against Debian unstable now; downloads and re-installs only on change
#   --force        re-install from scratch (cached .debs are reused where unchanged)
#   --check        exit 0 if the prefix is up to date, 1 if it is not; changes nothing
#   --no-selftest  skip the closing compile + dlopen test
#   --tensile-archs LIST   same as CANDLE_ROCM_TENSILE_ARCHS=LIST
# Knobs (environment):
#   CANDLE_ROCM_PREFIX       install location (default $HOME/.cache/candle-rocm/rocm-deb)
#   ROCM_PATH                if it holds a ROCm install (include/hip/hip_runtime_api.h and
#                            lib/libamdhip64.so*), nothing is installed: env.sh points at it
#   CANDLE_ROCM_MIRROR       Debian mirror (default http://deb.debian.org/debian)
#   CANDLE_ROCM_SUITE        Debian suite (default sid)
#   CANDLE_ROCM_LLVM_MAJOR   LLVM major version to use (default: discovered, see below)
#   CANDLE_ROCM_TENSILE_ARCHS  which GPU architectures get rocBLAS' Tensile kernels (the GEMM kernels
#                            rocBLAS loads at its first GEMM, and without which it aborts the process;
#                            rocblas-safe refuses to create a handle instead). Debian ships them all in
#                            the librocblas package (no separate package), for the architectures its
#                            X-Rocm-Gpu-Architecture field lists (ROCm 6.4: gfx803 gfx900 gfx906 gfx908
#                            gfx90a gfx1010 gfx1030 gfx1100 gfx1101 gfx1102; not gfx942/gfx950 (MI300/
#                            MI350) nor RDNA3.5/RDNA4: use AMD's ROCm there, ROCM_PATH). Values:
#                              auto (default): the AMD GPUs of this machine (read from the KFD topology,
#                                     /sys/class/kfd) that Debian builds for, plus gfx1010 (13 MB, the
#                                     smallest: the tier-2 tests check a real Tensile directory with it)
#                              none: no Tensile files at all
#                              all:  every architecture (2.9 GB); CANDLE_ROCM_WITH_TENSILE=1 is the same
#                              a list, e.g. "gfx90a gfx1100": those (each must be one Debian builds)
#                            They land in <prefix>/root/usr/lib/x86_64-linux-gnu/rocblas/<version>/library,
#                            where Debian's rocBLAS looks (env.sh: CANDLE_ROCM_TENSILE_DIR)
#   CANDLE_ROCM_RCCL         0: no RCCL header and library (default 1; see above)
#   CANDLE_ROCM_SELFTEST     0: skip the self test (default 1)
#   CANDLE_ROCM_ARCHS        self-test offload archs (default "gfx90a gfx942 gfx1100 gfx1201")
#
# Discovery, not hard-coding: the LLVM major is the highest N for which the suite has an AMDGPU
# device library package (rocm-device-libs-N, or amd-device-libs-N) and clang-N, lld-N, llvm-N,
# clang-tools-N; the sonamed runtime packages (libamdhip64-6, libhiprtc6, librocblas4, libmiopen1,
# ...) are read from the -dev packages' dependencies. If the suite no longer has what is needed, the
# script stops with one sentence that names what is missing.
set -euo pipefail
umask 022

SCRIPT_PATH=$(readlink -f "${BASH_SOURCE[0]}" 2>/dev/null || echo "${BASH_SOURCE[0]}")
STAMP_FORMAT=1

die() { printf 'install-rocm: %s\n' "$*" >&2; exit 1; }
log() { printf '\n== %s\n' "$*"; }
note() { printf '%s\n' "$*"; }

# ------------------------------------------------------------------------------------------ options
user_home() { [ -n "${HOME:-}" ] && echo "$HOME" || getent passwd "$(id -u)" | cut -d: -f6; }
PREFIX=${CANDLE_ROCM_PREFIX:-$(user_home)/.cache/candle-rocm/rocm-deb}
MIRROR=${CANDLE_ROCM_MIRROR:-http://deb.debian.org/debian}
SUITE=${CANDLE_ROCM_SUITE:-sid}
LLVM_OVERRIDE=${CANDLE_ROCM_LLVM_MAJOR:-}
WITH_TENSILE=${CANDLE_ROCM_WITH_TENSILE:-0}
TENSILE_REQ=${CANDLE_ROCM_TENSILE_ARCHS:-auto}
[ "$WITH_TENSILE" = 1 ] && [ -z "${CANDLE_ROCM_TENSILE_ARCHS:-}" ] && TENSILE_REQ=all
SELFTEST=${CANDLE_ROCM_SELFTEST:-1}
WITH_RCCL=${CANDLE_ROCM_RCCL:-1}
ARCHS=${CANDLE_ROCM_ARCHS:-"gfx90a gfx942 gfx1100 gfx1201"}
MODE=install
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; PREFIX=$2; shift;;
    --prefix=*) PREFIX=${1#--prefix=};;
    --update) MODE=update;;
    --force) MODE=force;;
    --check) MODE=check;;
    --no-selftest) SELFTEST=0;;
    --tensile-archs) [ $# -ge 2 ] || die "--tensile-archs needs a list (auto, none, all or e.g. \"gfx90a gfx1100\")"; TENSILE_REQ=$2; shift;;
    --tensile-archs=*) TENSILE_REQ=${1#--tensile-archs=};;
    -h|--help) sed -n '2,/^set -euo/p' "$SCRIPT_PATH" | sed '$d; s/^# \{0,1\}//'; exit 0;;
    *) die "unknown argument '$1' (try --help)";;
  esac
  shift
done
case "$PREFIX" in /*) ;; *) PREFIX=$(pwd)/$PREFIX;; esac
PREFIX=${PREFIX%/}
case "$SUITE" in unstable) SUITE_NAME="Debian unstable";; sid) SUITE_NAME="Debian unstable";; *) SUITE_NAME="Debian $SUITE";; esac

# ------------------------------------------------------------------ rocBLAS Tensile architectures
# The AMD GPUs of this machine, as gfx names, from the KFD topology (gfx_target_version 90010 is
# gfx90a: major*10000 + minor*100 + stepping, minor and stepping written in hex).
gpu_archs() {
  local f v
  for f in /sys/class/kfd/kfd/topology/nodes/*/properties; do
    [ -r "$f" ] || continue
    v=$(awk '$1 == "gfx_target_version" { print $2 }' "$f" 2>/dev/null)
    case "$v" in ''|0|*[!0-9]*) continue;; esac
    printf 'gfx%d%x%x\n' $((v / 10000)) $((v / 100 % 100)) $((v % 100))
  done | sort -u | tr '\n' ' '
}
TENSILE_REQ=$(echo "$TENSILE_REQ" | tr ',' ' ' | xargs)
case "$TENSILE_REQ" in
  auto) TENSILE_ARCHS=$(echo "gfx1010 $(gpu_archs)" | tr ' ' '\n' | grep . | sort -u | xargs);;
  none|all) TENSILE_ARCHS=$TENSILE_REQ;;
  *) for a in $TENSILE_REQ; do
       case "$a" in gfx[0-9]*) ;; *) die "CANDLE_ROCM_TENSILE_ARCHS: '$a' is not an architecture name (gfx90a, gfx1100, ...; or auto, none, all)";; esac
     done
     TENSILE_ARCHS=$(echo "$TENSILE_REQ" | tr ' ' '\n' | sed 's/:.*//' | sort -u | xargs);;
esac

# ------------------------------------------------------------------------------------------ layout
APTDIR=$PREFIX/apt        # private apt config, lists and cache
DEBS=$PREFIX/debs         # downloaded .debs (kept: a re-install fetches only what changed)
ROOT=$PREFIX/root         # ROCm + LLVM files (usr/include, usr/lib/x86_64-linux-gnu, usr/lib/llvm-N)
SYS=$PREFIX/sysroot       # unstable's glibc + libstdc++ + libgcc_s only
TOOLS=$PREFIX/tools       # patchelf (install-time only)
BIN=$PREFIX/bin
ROCMDIR=$PREFIX/rocm      # ROCm-like layout of symlinks, for ROCM_PATH
STAGE=$PREFIX/.staging
STAMP=$PREFIX/.install-stamp
ENVFILE=$PREFIX/env.sh
LIBDIR=$ROOT/usr/lib/x86_64-linux-gnu
SYSLIB=$SYS/usr/lib/x86_64-linux-gnu
LDSO=$SYSLIB/ld-linux-x86-64.so.2
SIDRUN_PATH="$SYSLIB:$LIBDIR:$ROOT/lib/x86_64-linux-gnu"

libclang_dir() {   # a host libclang for bindgen (bookworm's libclang-14 parses the ROCm headers fine)
  local d
  for d in $(ls -d /usr/lib/llvm-*/lib 2>/dev/null | sort -t- -k2 -rn); do
    ls "$d"/libclang.so* >/dev/null 2>&1 && { echo "$d"; return; }
  done
  return 0
}

# -------------------------------------------------------------------- ROCM_PATH: use what is there
has_rocm() { [ -f "$1/include/hip/hip_runtime_api.h" ] && ls "$1"/lib/libamdhip64.so* >/dev/null 2>&1; }

if [ -n "${ROCM_PATH:-}" ] && [ "$MODE" != check ]; then
  RP=$(readlink -f "$ROCM_PATH" 2>/dev/null || echo "$ROCM_PATH")
  OWN=$(readlink -f "$ROCMDIR" 2>/dev/null || echo "$ROCMDIR")
  if [ "$RP" != "$OWN" ] && has_rocm "$RP"; then
    note "ROCM_PATH=$ROCM_PATH holds a ROCm install; nothing to install. Writing $ENVFILE for it."
    SBIN=$PREFIX/system-bin   # kept apart from bin/ so that a Debian install in the same prefix survives
    mkdir -p "$SBIN"
    DEVLIB=""
    for d in "$RP/amdgcn/bitcode" "$RP"/lib/llvm/lib/clang/*/lib/amdgcn/bitcode "$RP"/llvm/lib/clang/*/lib/amdgcn/bitcode; do
      [ -f "$d/ockl.bc" ] && { DEVLIB=$d; break; }
    done
    rm -f "$SBIN"/*
    if [ -x "$RP/llvm/bin/clang" ]; then
      for t in clang clang++ ld.lld llvm-readelf llvm-objdump llvm-nm clang-offload-bundler; do
        [ -e "$RP/llvm/bin/$t" ] && ln -sf "$RP/llvm/bin/$t" "$SBIN/$t"
      done
      cat > "$SBIN/hip-clang" <<EOF
#!/bin/sh
# device-only HIP compile with ROCm's own clang: hip-clang --offload-arch=gfx942 [-O3] k.hip -o k.hsaco|k.hipfb
exec "$RP/llvm/bin/clang" -x hip --cuda-device-only --hip-path="$RP" ${DEVLIB:+--rocm-device-lib-path="$DEVLIB"} \\
  -mcode-object-version=\${HIP_COV:-5} "\$@"
EOF
      chmod +x "$SBIN/hip-clang"
    else
      note "note: $RP/llvm/bin/clang not found: no hip-clang in $SBIN"
    fi
    LC=$(libclang_dir)
    cat > "$ENVFILE" <<EOF
# candle-rocm ROCm environment (source me); written by scripts/install-rocm.sh for ROCM_PATH=$RP
export CANDLE_ROCM_KIND="system"
export CANDLE_ROCM_PATH="$RP"
export CANDLE_ROCM_SID_RUN=""
export CANDLE_ROCM_BIN="$SBIN"
export ROCM_DEB_PREFIX="$PREFIX"
export ROCM_DEB_INCLUDE="$RP/include"
export ROCM_DEB_LIB="$RP/lib"
export HIP_DEVICE_LIB_PATH="$DEVLIB"
# rocBLAS' Tensile directory of this install, if it is where AMD's packages put it (the
# architectures in it are whatever the install has: nothing was installed)
export CANDLE_ROCM_TENSILE_DIR="$( [ -d "$RP/lib/rocblas/library" ] && echo "$RP/lib/rocblas/library" )"
export CANDLE_ROCM_TENSILE_ARCHS=""
export PATH="$SBIN:\$PATH"
export BINDGEN_EXTRA_CLANG_ARGS="-I$RP/include -D__HIP_PLATFORM_AMD__"
${LC:+export LIBCLANG_PATH=\"$LC\"}
EOF
    note "done: source $ENVFILE"
    exit 0
  fi
  [ "$RP" = "$OWN" ] || note "note: ROCM_PATH=$ROCM_PATH holds no ROCm install (no include/hip/hip_runtime_api.h or lib/libamdhip64.so*); installing into $PREFIX"
fi

# ------------------------------------------------------------------------- requirements + lock
[ "$(uname -m)" = x86_64 ] || die "only x86_64 is supported (Debian ships ROCm for amd64 only); set ROCM_PATH to an existing ROCm install instead."
for c in dpkg-deb apt-get apt-cache gpgv tar sha256sum find readlink; do
  command -v "$c" >/dev/null 2>&1 || die "'$c' is missing; this script needs a Debian (12 or later) system with apt, dpkg and gpgv, or ROCM_PATH set to an existing ROCm install."
done
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
[ -r "$KEYRING" ] || die "$KEYRING is missing; install the debian-archive-keyring package."

RECIPE=$(sha256sum "$SCRIPT_PATH" 2>/dev/null | cut -c1-16 || echo unknown)
CONFIG="format=$STAMP_FORMAT suite=$SUITE tensile=$(echo "$TENSILE_ARCHS" | tr ' ' ,) llvm=${LLVM_OVERRIDE:-auto} prefix=$PREFIX"

stamp_get() { [ -f "$STAMP" ] && sed -n "s/^$1 //p" "$STAMP" | head -1; }

# the stamp is valid: same recipe, same configuration, and every file it lists still exists
stamp_valid() {
  [ -f "$STAMP" ] || { WHY="not installed yet"; return 1; }
  [ "$(stamp_get recipe)" = "$RECIPE" ] || { WHY="scripts/install-rocm.sh changed since the last install"; return 1; }
  [ "$(stamp_get config)" = "$CONFIG" ] || { WHY="configuration changed ($(stamp_get config) -> $CONFIG)"; return 1; }
  local f
  while read -r f; do
    [ -e "$f" ] || { WHY="$f is missing"; return 1; }
  done < <(sed -n 's/^file //p' "$STAMP")
  return 0
}

if [ "$MODE" = check ]; then
  if stamp_valid; then note "ROCm prefix up to date: $PREFIX"; exit 0; fi
  note "ROCm prefix not up to date: $PREFIX ($WHY)"; exit 1
fi
mkdir -p "$PREFIX"
if command -v flock >/dev/null 2>&1; then
  exec 9>"$PREFIX/.lock"
  flock -n 9 || { note "waiting for another install-rocm run on $PREFIX ..."; flock 9; }
fi

# env.sh of a Debian install; written only if its content changes
write_env() {   # write_env <llvm major> <device lib dir> <Tensile dir or ""> <Tensile archs>
  local lc tmp; lc=$(libclang_dir); tmp=$ENVFILE.tmp.$$
  cat > "$tmp" <<EOF
# candle-rocm ROCm environment (source me); written by scripts/install-rocm.sh
export CANDLE_ROCM_KIND="deb"
# laid out like a ROCm install; bookworm programs load its libraries through sid-run
export CANDLE_ROCM_PATH="$ROCMDIR"
export CANDLE_ROCM_SID_RUN="$BIN/sid-run"
export CANDLE_ROCM_BIN="$BIN"
export CANDLE_ROCM_LLVM_MAJOR="$1"
export ROCM_DEB_PREFIX="$PREFIX"
export ROCM_DEB_INCLUDE="$ROOT/usr/include"
export ROCM_DEB_LIB="$LIBDIR"
export HIP_DEVICE_LIB_PATH="$2"
# rocBLAS' Tensile (GEMM kernel) directory, where Debian's rocBLAS finds it by itself, and the
# architectures it has kernels for (CANDLE_ROCM_TENSILE_ARCHS chooses them)
export CANDLE_ROCM_TENSILE_DIR="${3:-}"
export CANDLE_ROCM_TENSILE_ARCHS="${4:-}"
export PATH="$BIN:\$PATH"
# bindgen (bookworm libclang is fine): hip_runtime_api.h + rocblas.h parse as C; miopen.h needs '-x c++'
export BINDGEN_EXTRA_CLANG_ARGS="-I$ROOT/usr/include -D__HIP_PLATFORM_AMD__"
${lc:+export LIBCLANG_PATH=\"$lc\"}
EOF
  if cmp -s "$tmp" "$ENVFILE"; then rm -f "$tmp"; else mv -f "$tmp" "$ENVFILE"; note "wrote $ENVFILE"; fi
}

if [ "$MODE" = install ]; then
  if stamp_valid; then
    write_env "$(stamp_get llvm)" "$(stamp_get devlibs)" "$(stamp_get tensiledir)" "$(stamp_get tensilearchs)"
    note "ROCm prefix up to date: $PREFIX"
    exit 0
  fi
  note "installing ROCm into $PREFIX ($WHY)"
fi
T0=$SECONDS

# --------------------------------------------------------------------------- private apt config
# APT_CONFIG is read before anything else; it turns off the system's apt.conf(.d), sources,
# preferences and dpkg status, so that only the suite below is seen and nothing of the system changes.
log "private apt config for $SUITE in $APTDIR"
mkdir -p "$APTDIR/lists/partial" "$APTDIR/cache/archives/partial" "$APTDIR/state" "$DEBS"
: > "$APTDIR/status"
echo "deb [signed-by=$KEYRING] $MIRROR $SUITE main" > "$APTDIR/sources.list"
# from the host's apt configuration, keep only how to reach the mirror (proxies, timeouts, and the
# Release validity checks that a host pinned to a snapshot mirror turns off)
HOST_ACQUIRE=$(apt-config dump 2>/dev/null \
  | grep -E '^Acquire::(https?::|Check-Valid-Until |Check-Date |Max-ValidTime|Min-ValidTime|ForceIPv[46] )' || true)
{
  cat <<EOF
Dir::Etc::main "/dev/null";
Dir::Etc::parts "/dev/null";
Dir::Etc::SourceList "$APTDIR/sources.list";
Dir::Etc::SourceParts "/dev/null";
Dir::Etc::Preferences "/dev/null";
Dir::Etc::PreferencesParts "/dev/null";
Dir::State "$APTDIR/state";
Dir::State::Lists "$APTDIR/lists";
Dir::State::status "$APTDIR/status";
Dir::Cache "$APTDIR/cache";
APT::Architecture "amd64";
APT::Architectures { "amd64"; };
Acquire::Languages "none";
Acquire::Retries "3";
Acquire::GzipIndexes "true";
Dir::Cache::srcpkgcache "";
EOF
  if [ "$(id -u)" = 0 ]; then echo 'APT::Sandbox::User "root";'; fi
  if [ -n "$HOST_ACQUIRE" ]; then echo "$HOST_ACQUIRE"; fi
} > "$APTDIR/apt.conf"
export APT_CONFIG=$APTDIR/apt.conf
apt-get -qq update || die "could not read the $SUITE package index from $MIRROR (apt-get update failed, see above); check the network or set ROCM_PATH to an existing ROCm install instead."

cand() { apt-cache policy "$1" 2>/dev/null | awk '/Candidate:/{ if ($2 != "(none)") print $2 }'; }
have() { [ -n "$(cand "$1")" ]; }
# exact-name dependencies (first alternative, no version)
deps_of() {
  apt-cache show --no-all-versions "$1" | sed -n 's/^\(Pre-\)\{0,1\}Depends: //p' | tr ',' '\n' \
    | sed 's/|.*//; s/(.*)//; s/:any//; s/ //g' | grep -v '^$' || true
}
closure() {   # recursive Depends closure, no recommends
  apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
    --no-enhances "$@" | grep -v '^[ <]' | sort -u
}
missing() { die "$SUITE_NAME no longer provides $*; set ROCM_PATH to an existing ROCm install instead."; }

# --------------------------------------------------------------------------------- discovery
log "discovery"
[ -n "$(apt-cache pkgnames libc6 | head -1)" ] || die "the $SUITE package index from $MIRROR is empty; check CANDLE_ROCM_MIRROR / CANDLE_ROCM_SUITE."

DEV_PKGS=""
for pw in "libamdhip64-dev:the HIP runtime" "libhsa-runtime-dev:the HSA runtime" \
          "libamd-comgr-dev:the AMD code object manager" "librocblas-dev:rocBLAS" "libmiopen-dev:MIOpen"; do
  p=${pw%%:*}
  have "$p" || missing "$p (the headers of ${pw#*:})"
  DEV_PKGS="$DEV_PKGS $p"
done
have libhiprtc-dev && DEV_PKGS="$DEV_PKGS libhiprtc-dev"   # should hipRTC ever get its own -dev package

DEV_DEPS=$(for p in $DEV_PKGS; do deps_of "$p"; done | sort -u)
pick() {   # pick <what> <regex> : the sonamed runtime package(s) the -dev packages depend on
  local r; r=$(echo "$DEV_DEPS" | grep -E "$2" || true)
  [ -n "$r" ] || die "$SUITE_NAME's ROCm -dev packages ($(echo $DEV_PKGS)) no longer depend on a $1 package; set ROCM_PATH to an existing ROCm install instead."
  echo "$r"
}
RT_HIP=$(pick "HIP runtime library (libamdhip64-N)" '^libamdhip64-?[0-9][0-9a-z.]*$')
RT_RTC=$(pick "hipRTC library (libhiprtcN)" '^libhiprtc-?[0-9][0-9a-z.]*$')
RT_BLAS=$(pick "rocBLAS library (librocblasN)" '^librocblas-?[0-9][0-9a-z.]*$')
RT_DNN=$(pick "MIOpen library (libmiopenN)" '^libmiopen-?[0-9][0-9a-z.]*$')
RT_TOP=$(echo "$DEV_DEPS" | grep -E '^lib(amdhip64|hiprtc|hiprtc-builtins|hsa-runtime64|amd-comgr|rocblas|miopen)-?[0-9][0-9a-z.]*$' | sort -u)
note "runtime: $(echo $RT_TOP)"

# rocBLAS' Tensile kernels ship inside its runtime package (there is no separate package); its
# X-Rocm-Gpu-Architecture field lists the architectures it was built for.
BLAS_ARCHS=$(for p in $RT_BLAS; do apt-cache show --no-all-versions "$p" | sed -n 's/^X-Rocm-Gpu-Architecture: //p'; done \
  | tr ' ' '\n' | grep . | sort -u | xargs || true)
if [ -z "$BLAS_ARCHS" ] && [ "$TENSILE_ARCHS" != none ] && [ "$TENSILE_ARCHS" != all ]; then
  die "$SUITE_NAME's $(echo $RT_BLAS) no longer says which GPU architectures it was built for (X-Rocm-Gpu-Architecture); set CANDLE_ROCM_TENSILE_ARCHS=all (2.9 GB) or none."
fi
TENSILE_KEEP=""; TENSILE_SKIP=""
case "$TENSILE_ARCHS" in
  none) ;;
  all) TENSILE_KEEP=$BLAS_ARCHS;;
  *) for a in $TENSILE_ARCHS; do
       if case " $BLAS_ARCHS " in *" $a "*) true;; *) false;; esac; then TENSILE_KEEP="$TENSILE_KEEP $a"
       elif [ "$TENSILE_REQ" = auto ]; then note "note: this machine's $a has no rocBLAS kernels in $SUITE_NAME (it builds $BLAS_ARCHS); rocblas-safe will refuse to create a handle on it: use AMD's ROCm (ROCM_PATH) for $a"
       else die "$SUITE_NAME's rocBLAS ($(echo $RT_BLAS)) has no Tensile kernels for $a; it is built for $BLAS_ARCHS. For $a use AMD's ROCm packages (set ROCM_PATH to that install)."
       fi
     done;;
esac
TENSILE_KEEP=$(echo $TENSILE_KEEP)
for a in $BLAS_ARCHS; do case " $TENSILE_KEEP " in *" $a "*) ;; *) TENSILE_SKIP="$TENSILE_SKIP $a";; esac; done
note "rocBLAS Tensile kernels for: ${TENSILE_KEEP:-(none)} (of $BLAS_ARCHS)"

if [ -n "$LLVM_OVERRIDE" ]; then
  CANDIDATES=$LLVM_OVERRIDE
else
  CANDIDATES=$(apt-cache pkgnames | sed -n -E 's/^(rocm|amd)-device-libs-([0-9]+)$/\2/p' | sort -rn -u)
  [ -n "$CANDIDATES" ] || missing "an AMDGPU device library package (rocm-device-libs-N / amd-device-libs-N)"
fi
LLVM_MAJOR=""; DEVLIBS_PKG=""; LACK=""
for n in $CANDIDATES; do
  dl=""; for p in rocm-device-libs-$n amd-device-libs-$n; do have "$p" && { dl=$p; break; }; done
  lack=""; [ -n "$dl" ] || lack="rocm-device-libs-$n/amd-device-libs-$n"
  for p in clang-$n lld-$n llvm-$n clang-tools-$n libclang-common-$n-dev libllvm$n libclang-cpp$n; do
    have "$p" || lack="$lack${lack:+, }$p"
  done
  if [ -z "$lack" ]; then LLVM_MAJOR=$n; DEVLIBS_PKG=$dl; break; fi
  LACK="$LACK${LACK:+; }LLVM $n lacks $lack"
done
[ -n "$LLVM_MAJOR" ] || missing "a complete AMDGPU LLVM toolchain with its device library ($LACK)"
note "LLVM $LLVM_MAJOR with $DEVLIBS_PKG"

SKIP_RE='^(libc6|libgcc-s1|libstdc\+\+6|gcc-[0-9]+-base|libc-gconv-modules-extra)$'
V=$LLVM_MAJOR
{
  for p in $DEV_PKGS; do echo "root $p"; done
  # RCCL: header (bindgen) and library (tier-2 symbol check), no dependency closure (see top).
  if [ "$WITH_RCCL" = 1 ]; then
    for p in librccl-dev librccl1; do
      if have "$p"; then echo "root $p"; else note "note: $SUITE_NAME has no $p; crates/rccl-safe's tier-2 check will say so" >&2; fi
    done
  fi
  for p in $(closure $RT_TOP | grep -Ev "$SKIP_RE"); do echo "root $p"; done
  for p in clang-$V lld-$V llvm-$V clang-tools-$V libclang-common-$V-dev $DEVLIBS_PKG; do echo "root $p"; done
  for p in $(closure libllvm$V libclang-cpp$V | grep -Ev "$SKIP_RE"); do echo "root $p"; done
  echo "tools patchelf"
  for p in $(closure patchelf | grep -Ev "$SKIP_RE" | grep -vx patchelf); do echo "root $p"; done
  for p in libc6 libgcc-s1 libstdc++6; do echo "sysroot $p"; done
} | awk '!seen[$2]++' > "$APTDIR/wanted"

# --------------------------------------------------------------------------------- download
# `apt-get download --print-uris`: 'URI' FILE SIZE SHA256:HASH for each candidate
(cd "$APTDIR" && apt-get download --print-uris $(awk '{print $2}' "$APTDIR/wanted")) | tr -d "'" > "$APTDIR/uris" \
  || die "apt-get could not resolve the packages to download (see above)."
# plan: group pkg file size sha256
awk 'NR==FNR { split($2, a, "_"); file[a[1]] = $2; size[a[1]] = $3; sha[a[1]] = substr($4, 8); next }
     { if (!($2 in file)) { print "unresolved " $2 > "/dev/stderr"; exit 1 }
       print $1, $2, file[$2], size[$2], sha[$2] }' "$APTDIR/uris" "$APTDIR/wanted" > "$APTDIR/plan" \
  || die "apt-get did not offer every wanted package for download."

OLD_PKGS=$(sed -n 's/^pkg //p' "$STAMP" 2>/dev/null | awk '{print $1, $2, $3}' | sort || true)
NEW_PKGS=$(awk '{print $1, $2, $3}' "$APTDIR/plan" | sort)
if [ "$MODE" = update ] && [ "$OLD_PKGS" = "$NEW_PKGS" ] && stamp_valid; then
  write_env "$(stamp_get llvm)" "$(stamp_get devlibs)" "$(stamp_get tensiledir)" "$(stamp_get tensilearchs)"
  note "ROCm prefix up to date: $PREFIX (no package changed in $SUITE)"
  exit 0
fi
rm -f "$STAMP"

FETCH=""; NFETCH=0; BYTES=0
while read -r group pkg file size sha; do
  if [ -f "$DEBS/$file" ] && [ "$(stat -c %s "$DEBS/$file")" = "$size" ] \
     && [ "$(sha256sum "$DEBS/$file" | cut -d' ' -f1)" = "$sha" ]; then continue; fi
  rm -f "$DEBS/$file"; FETCH="$FETCH $pkg"; NFETCH=$((NFETCH + 1)); BYTES=$((BYTES + size))
done < "$APTDIR/plan"
log "download: $NFETCH of $(wc -l < "$APTDIR/plan") packages, $((BYTES / 1048576)) MiB ($(( $(awk '{s += $4} END {print s}' "$APTDIR/plan") / 1048576 )) MiB in all)"
if [ -n "$FETCH" ]; then
  (cd "$DEBS" && apt-get -qq download $FETCH) || die "downloading from $MIRROR failed (see above); re-run to resume."
fi
while read -r group pkg file size sha; do
  [ "$(sha256sum "$DEBS/$file" 2>/dev/null | cut -d' ' -f1)" = "$sha" ] || die "$DEBS/$file is missing or corrupt after download; re-run to fetch it again."
done < "$APTDIR/plan"
# drop .debs that are no longer wanted (older versions)
for f in "$DEBS"/*.deb; do
  [ -e "$f" ] || continue
  awk -v f="$(basename "$f")" '$3 == f { found = 1 } END { exit !found }' "$APTDIR/plan" || rm -f "$f"
done

# --------------------------------------------------------------------------------- extraction
# into .staging, then swapped into place, so that a failed run leaves the previous install intact
log "extract into $STAGE"
rm -rf "$STAGE"; mkdir -p "$STAGE/root" "$STAGE/sysroot" "$STAGE/tools"
EXCL=(--exclude=./usr/share/doc --exclude=./usr/share/lintian --exclude=./usr/share/man --exclude=./usr/share/bug
      --exclude=./usr/share/locale)
# rocBLAS' Tensile directory (usr/lib/<triple>/rocblas/<version>/library): every file named after an
# architecture not kept is left out (TensileLibrary_lazy_gfx908.dat, ..._gfx908.co,
# Kernels.so-000-gfx90a-xnack+.hsaco); the architecture-neutral *_fallback.dat files stay.
if [ "$TENSILE_ARCHS" = none ]; then
  EXCL+=(--exclude='./usr/lib/*/rocblas/*')
else
  for a in $TENSILE_SKIP; do EXCL+=(--exclude="./usr/lib/*/rocblas/*$a[!0-9a-z]*"); done
fi
extract() { dpkg-deb --fsys-tarfile "$2" | tar -x -C "$1" "${EXCL[@]}"; }
# the biggest package (rocBLAS, ~280 MB of xz) is unpacked in the background alongside the others
BIG=$(sort -k4,4n "$APTDIR/plan" | tail -1)
set -- $BIG; BIG_GROUP=$1; BIG_FILE=$3
extract "$STAGE/$BIG_GROUP" "$DEBS/$BIG_FILE" & BIG_PID=$!
while read -r group pkg file size sha; do
  [ "$file" = "$BIG_FILE" ] || extract "$STAGE/$group" "$DEBS/$file" || { kill "$BIG_PID" 2>/dev/null; die "could not unpack $file"; }
done < "$APTDIR/plan"
wait "$BIG_PID" || die "could not unpack $BIG_FILE"

S_LIBDIR=$STAGE/root/usr/lib/x86_64-linux-gnu
S_SYSLIB=$STAGE/sysroot/usr/lib/x86_64-linux-gnu
TENSILE_REL=""; TENSILE_FILES=""
if [ -n "$TENSILE_KEEP" ]; then
  for a in $TENSILE_KEEP; do
    f=$(cd "$STAGE/root" && find usr/lib -path "*/rocblas/*" -name "TensileLibrary_lazy_$a.dat" 2>/dev/null | sort | head -1)
    [ -n "$f" ] || die "$(echo $RT_BLAS) was supposed to hold rocBLAS' Tensile kernels for $a (TensileLibrary_lazy_$a.dat) but does not; set CANDLE_ROCM_TENSILE_ARCHS without $a."
    TENSILE_REL=$(dirname "$f"); TENSILE_FILES="$TENSILE_FILES $f"
  done
  note "rocBLAS Tensile directory: /$TENSILE_REL ($(du -sh "$STAGE/root/$TENSILE_REL" | cut -f1))"
fi
S_LLVMBIN=$STAGE/root/usr/lib/llvm-$V/bin
[ -x "$S_SYSLIB/ld-linux-x86-64.so.2" ] || die "$SUITE_NAME's libc6 has no ld-linux-x86-64.so.2 in /usr/lib/x86_64-linux-gnu any more."
for t in clang ld.lld clang-offload-bundler llvm-readelf; do
  [ -e "$S_LLVMBIN/$t" ] || missing "$t in /usr/lib/llvm-$V/bin (LLVM $V packages)"
done
# the device library: find it rather than assume its place
DEVLIB_REL=$(cd "$STAGE/root" && find usr -path '*/amdgcn/bitcode/ockl.bc' 2>/dev/null | sort | awk -v v="llvm-$V/" 'index($0, v) { print; exit } { first = first ? first : $0 } END { if (first) print first }' | head -1)
[ -n "$DEVLIB_REL" ] || missing "the AMDGPU device library bitcode (amdgcn/bitcode/ockl.bc) in $DEVLIBS_PKG"
DEVLIB_REL=$(dirname "$DEVLIB_REL")
libfile() {   # libfile <stem>: the versioned soname link of a library in the staged lib dir
  (cd "$S_LIBDIR" && ls "$1".so.[0-9]* 2>/dev/null | awk -F. 'NF == 3' | sort -V | tail -1)
}
LIBS=""
for l in libamdhip64 libhiprtc librocblas libMIOpen libhsa-runtime64 libamd_comgr; do
  f=$(libfile "$l"); [ -n "$f" ] || die "$l.so.N is not in the unpacked packages ($(echo $RT_TOP)); $SUITE_NAME's ROCm packaging changed, set ROCM_PATH to an existing ROCm install instead."
  LIBS="$LIBS $f"
done
note "libraries:$LIBS"

# --------------------------------------------------------------------- patchelf: use our ld.so
log "patch the toolchain to use $LDSO"
PE=("$S_SYSLIB/ld-linux-x86-64.so.2" --library-path "$S_SYSLIB:$S_LIBDIR" "$STAGE/tools/usr/bin/patchelf")
"${PE[@]}" --version >/dev/null || die "the unpacked patchelf does not run"
RPATH="$SYSLIB:$LIBDIR:$ROOT/lib/x86_64-linux-gnu"
n=0
for f in "$S_LLVMBIN"/*; do
  [ -f "$f" ] && [ ! -L "$f" ] || continue
  [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
  "${PE[@]}" --print-interpreter "$f" >/dev/null 2>&1 || continue   # executables only
  "${PE[@]}" --set-interpreter "$LDSO" --force-rpath --set-rpath "$RPATH" "$f"; n=$((n + 1))
done
# shared libraries with RUNPATH $ORIGIN/../lib: make their deps (libxml2, libz3, ...) resolve next to them
for l in "$S_LIBDIR"/libLLVM.so.* "$S_LIBDIR"/libLLVM-*.so* "$S_LIBDIR"/libclang-cpp.so.*; do
  [ -f "$l" ] && [ ! -L "$l" ] && "${PE[@]}" --set-rpath '$ORIGIN' "$l"
done
note "patched $n executables"

# ------------------------------------------------------------------------------ swap into place
log "install into $PREFIX"
for d in root sysroot tools; do
  rm -rf "${PREFIX:?}/$d.old"
  [ -e "$PREFIX/$d" ] && mv "$PREFIX/$d" "$PREFIX/$d.old"
  mv "$STAGE/$d" "$PREFIX/$d"
done
rm -rf "$PREFIX/root.old" "$PREFIX/sysroot.old" "$PREFIX/tools.old" "$STAGE"

LLVMBIN=$ROOT/usr/lib/llvm-$V/bin
DEVLIB=$ROOT/$DEVLIB_REL
rm -rf "$BIN"; mkdir -p "$BIN"
for t in clang clang++ ld.lld llvm-readelf llvm-objdump llvm-nm llvm-dis llvm-link llvm-mc llvm-ar \
         clang-offload-bundler clang-offload-packager llc opt; do
  [ -e "$LLVMBIN/$t" ] && ln -s "$LLVMBIN/$t" "$BIN/$t"
done
cat > "$BIN/hip-clang" <<EOF
#!/bin/sh
# device-only HIP compile: hip-clang --offload-arch=gfx942 [--offload-arch=...] [-O3] k.hip -o k.hsaco|k.hipfb
# one arch + --no-gpu-bundle-output => plain code object (.hsaco); several archs => clang offload bundle
exec "$LLVMBIN/clang" -x hip --cuda-device-only --hip-path="$ROOT/usr" \\
  --rocm-device-lib-path="$DEVLIB" -mcode-object-version=\${HIP_COV:-5} "\$@"
EOF
cat > "$BIN/sid-run" <<EOF
#!/bin/sh
# run a (bookworm-built) program under $SUITE's glibc so that it can dlopen the $SUITE ROCm libraries,
# e.g. sid-run /usr/bin/python3 x.py, or CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER=$BIN/sid-run
[ \$# -ge 1 ] || { echo "usage: sid-run PROGRAM [ARGS...]" >&2; exit 2; }
p=\$1; shift
case "\$p" in */*) ;; *) p=\$(command -v "\$p") || { echo "sid-run: \$1: not found" >&2; exit 127; };; esac
exec "$LDSO" --library-path "$SIDRUN_PATH\${SID_RUN_LIBRARY_PATH:+:\$SID_RUN_LIBRARY_PATH}" "\$p" "\$@"
EOF
chmod +x "$BIN/hip-clang" "$BIN/sid-run"

rm -rf "$ROCMDIR"; mkdir -p "$ROCMDIR"
ln -s ../root/usr/include "$ROCMDIR/include"
ln -s ../root/usr/lib/x86_64-linux-gnu "$ROCMDIR/lib"
ln -s ../bin "$ROCMDIR/bin"
ln -s ../root/usr/share "$ROCMDIR/share"   # share/hip/version: clang's HIP detection with --hip-path=$ROCMDIR
ln -s "../root/usr/lib/llvm-$V" "$ROCMDIR/llvm"
ln -s "../root/$(dirname "$DEVLIB_REL")" "$ROCMDIR/amdgcn"

write_env "$V" "$DEVLIB" "${TENSILE_REL:+$ROOT/$TENSILE_REL}" "$TENSILE_KEEP"
{ echo "# group package version download-bytes (from $SUITE, $MIRROR)"
  while read -r group pkg file size sha; do
    printf '%s %s %s %s\n' "$group" "$pkg" "$(dpkg-deb -f "$DEBS/$file" Version)" "$size"
  done < "$APTDIR/plan"; } > "$PREFIX/MANIFEST.txt"
note "downloads: $(du -sh "$DEBS" | cut -f1); installed: $(du -sh "$ROOT" | cut -f1) root, $(du -sh "$SYS" | cut -f1) sysroot"

# --------------------------------------------------------------------------------- self test
if [ "$SELFTEST" = 1 ]; then
  TD=$PREFIX/selftest; rm -rf "$TD"; mkdir -p "$TD"
  log "self test: compile a kernel for $ARCHS"
  cat > "$TD/k.hip" <<'EOF'
#include <hip/hip_runtime.h>
#include <hip/hip_fp16.h>
#include <hip/hip_bfloat16.h>
extern "C" __global__ void gelu_tanh(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) { float v = x[i]; y[i] = 0.5f * v * (1.f + tanhf(0.79788456f * (v + 0.044715f * v * v * v))); }
}
extern "C" __global__ void exp_f16(const __half* x, __half* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __float2half(expf(__half2float(x[i])));
}
extern "C" __global__ void scale_bf16(const hip_bfloat16* x, hip_bfloat16* y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = hip_bfloat16(static_cast<float>(x[i]) * s);
}
extern "C" __global__ void warp_sum(const float* x, float* out) {
  float v = x[blockIdx.x * blockDim.x + threadIdx.x];
  for (int o = warpSize / 2; o > 0; o >>= 1) v += __shfl_xor(v, o);
  if (threadIdx.x == 0) out[blockIdx.x] = v;
}
EOF
  offl=()
  for a in $ARCHS; do
    "$BIN/hip-clang" --offload-arch="$a" --no-gpu-bundle-output -O3 "$TD/k.hip" -o "$TD/k-$a.hsaco" \
      || die "self test failed: hip-clang could not compile a kernel for $a (see above)."
    k=$("$BIN/llvm-readelf" --dyn-syms "$TD/k-$a.hsaco" | awk '$4 == "FUNC" { print $8 }' | sort | tr '\n' ' ')
    case "$k" in *warp_sum*) ;; *) die "self test failed: the $a code object has no kernel symbols.";; esac
    printf '  %-8s %s kernels: %s\n' "$a" "$("$BIN/llvm-readelf" -h "$TD/k-$a.hsaco" | sed -n 's/^ *Flags: *//p')" "$k"
    offl+=(--offload-arch="$a")
  done
  "$BIN/hip-clang" "${offl[@]}" -O3 "$TD/k.hip" -o "$TD/k.hipfb" || die "self test failed: multi-arch bundle."
  "$BIN/clang-offload-bundler" -list -type=o -input="$TD/k.hipfb" | sed 's/^/  bundle: /'

  log "self test: load the libraries under $SUITE's glibc"
  PY=""
  for c in /usr/bin/python3 "$(command -v python3 2>/dev/null || true)"; do
    [ -n "$c" ] && [ -x "$c" ] || continue
    e=$("$c" -c 'import sys; print(sys.executable)' 2>/dev/null) || continue
    e=$(readlink -f "$e")
    [ "$(head -c 4 "$e" | od -An -c | tr -d ' ')" = '177ELF' ] && { PY=$e; break; }
  done
  if [ -n "$PY" ]; then
    cat > "$TD/dl.py" <<'EOF'
import ctypes, sys
d, lib = sys.argv[1], sys.argv[2]
h = ctypes.CDLL(d + "/" + lib)
if lib.startswith("libamdhip64"):
    h.hipGetErrorName.restype = ctypes.c_char_p
    r = h.hipInit(0); n = ctypes.c_int(-1); r2 = h.hipGetDeviceCount(ctypes.byref(n))
    v = ctypes.c_int(); h.hipRuntimeGetVersion(ctypes.byref(v))
    print(f"  {lib}: runtime {v.value}; hipInit={r} ({h.hipGetErrorName(r).decode()}), devices={n.value}")
elif lib.startswith("libhiprtc"):
    a, b = ctypes.c_int(), ctypes.c_int(); r = h.hiprtcVersion(ctypes.byref(a), ctypes.byref(b))
    if r != 0: sys.exit(f"hiprtcVersion returned {r}")
    print(f"  {lib}: hipRTC {a.value}.{b.value}")
elif lib.startswith("librocblas"):
    b = ctypes.create_string_buffer(64); h.rocblas_get_version_string(b, ctypes.c_size_t(64))
    print(f"  {lib}: rocBLAS {b.value.decode()}")
else:
    a, b, c = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
    h.miopenGetVersion(ctypes.byref(a), ctypes.byref(b), ctypes.byref(c))
    print(f"  {lib}: MIOpen {a.value}.{b.value}.{c.value}")
EOF
    for l in $LIBS; do
      case "$l" in libhsa*|libamd_comgr*) continue;; esac
      "$BIN/sid-run" "$PY" "$TD/dl.py" "$LIBDIR" "$l" || die "self test failed: $l does not load under $BIN/sid-run (see above)."
    done
  else
    note "  (no python3: checking that every library's symbols resolve with ld.so instead)"
    for l in $LIBS; do
      out=$(LD_TRACE_LOADED_OBJECTS=1 LD_BIND_NOW=1 LD_WARN=1 "$LDSO" --library-path "$SIDRUN_PATH" "$LIBDIR/$l" 2>&1) \
        || die "self test failed: ld.so cannot load $l: $out"
      bad=$(echo "$out" | grep -E 'not found|undefined symbol' | head -3 || true)
      [ -z "$bad" ] || die "self test failed: $l does not link under $SUITE's glibc: $bad"
      note "  $l: all symbols resolve"
    done
  fi
fi

# --------------------------------------------------------------------------------- stamp
rm -f "$APTDIR"/cache/*.bin   # 50 MB, rebuilt from the lists by the next update
{
  echo "candle-rocm install-rocm stamp"
  echo "recipe $RECIPE"
  echo "config $CONFIG"
  echo "llvm $V"
  echo "devlibs $DEVLIB"
  echo "tensiledir ${TENSILE_REL:+$ROOT/$TENSILE_REL}"
  echo "tensilearchs $TENSILE_KEEP"
  for f in $TENSILE_FILES; do echo "file $ROOT/$f"; done
  for f in "$ROOT/usr/include/hip/hip_runtime_api.h" "$ROOT/usr/include/rocblas/rocblas.h" \
           "$ROOT/usr/include/miopen/miopen.h" "$LDSO" "$DEVLIB/ockl.bc" "$LLVMBIN/clang" "$LLVMBIN/ld.lld" \
           "$LLVMBIN/clang-offload-bundler" "$LLVMBIN/llvm-readelf" "$BIN/hip-clang" "$BIN/sid-run" \
           "$TOOLS/usr/bin/patchelf" "$ENVFILE"; do
    echo "file $f"
  done
  for l in $LIBS; do echo "file $LIBDIR/$l"; echo "file $ROCMDIR/lib/$l"; done
  echo "file $ROCMDIR/include/hip/hip_runtime_api.h"
  while read -r group pkg file size sha; do echo "pkg $group $pkg $file"; done < "$APTDIR/plan"
} > "$STAMP"
log "done in $((SECONDS - T0)) s: source $ENVFILE (ROCM_PATH for the libraries: $ROCMDIR, run programs with $BIN/sid-run)"
