#!/usr/bin/env bash
# Install rkvoice as a systemd service (called by `install.sh --service`; needs root).
#
#   systemd/install-service.sh [--install-dir DIR] [--no-start]
#       creates the `rkvoice` system user (in the `audio` group) and /var/lib/rkvoice,
#       installs /etc/systemd/system/rkvoice.service, enables and starts it.
#   systemd/install-service.sh --render OUT [--install-dir DIR]
#       only writes the unit for DIR to OUT (no root needed; used by the tests).
#   systemd/install-service.sh --uninstall
#       stops and disables the service and removes the unit (keeps the user and its state).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
install_dir=$(dirname "$here")
template="$here/rkvoice.service"
unit_path=/etc/systemd/system/rkvoice.service
state_dir=/var/lib/rkvoice
user=rkvoice
mode=install
render_out=""
start=1

die() { echo "install-service: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
  case "$1" in
    --install-dir) install_dir=$(cd "${2:?--install-dir needs a directory}" && pwd); shift 2 ;;
    --render) mode=render; render_out=${2:?--render needs an output path}; shift 2 ;;
    --uninstall) mode=uninstall; shift ;;
    --no-start) start=0; shift ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) die "unknown option $1 (see --help)" ;;
  esac
done

render() {
  # ProtectHome=yes would hide an install dir under /home or /root from the service
  local protect_home=yes
  case "$install_dir/" in
    /home/*|/root/*|/run/user/*) protect_home=read-only ;;
  esac
  case "$install_dir" in
    *'#'*|*' '*) die "install dir '$install_dir' contains a space or '#'; move it (e.g. /opt/rkvoice)" ;;
  esac
  sed -e "s#@INSTALL_DIR@#$install_dir#g" -e "s#@PROTECT_HOME@#$protect_home#g" "$template" > "$1"
}

if [ "$mode" = render ]; then
  render "$render_out"
  exit 0
fi

[ "$(id -u)" = 0 ] || die "must run as root (sudo ./install.sh --service)"
command -v systemctl >/dev/null || die "systemctl not found: this system does not run systemd"

if [ "$mode" = uninstall ]; then
  systemctl disable --now rkvoice.service 2>/dev/null || true
  rm -f "$unit_path"
  systemctl daemon-reload
  echo "rkvoice service removed (user '$user' and $state_dir kept; remove them by hand if wanted)"
  exit 0
fi

[ -x "$install_dir/py312/bin/python" ] || die "$install_dir/py312/bin/python is missing: run ./install.sh first"
[ -f "$install_dir/assistant.py" ] || die "$install_dir/assistant.py is missing: is --install-dir the rkvoice checkout?"

getent group audio >/dev/null || groupadd --system audio
if id -u "$user" >/dev/null 2>&1; then
  usermod -a -G audio "$user"
else
  useradd --system --user-group --groups audio --home-dir "$state_dir" --no-create-home \
    --shell /usr/sbin/nologin --comment "rkvoice voice assistant" "$user"
fi
install -d -o "$user" -g "$user" -m 0750 "$state_dir"
install -d -m 0755 /etc/rkvoice

# the service user must be able to read the code, the interpreter and the models
if command -v runuser >/dev/null && ! runuser -u "$user" -- test -r "$install_dir/assistant.py" -a -x "$install_dir/py312/bin/python"; then
  die "user '$user' cannot read $install_dir (a home directory of mode 0700/0750 is closed to other users): clone rkvoice into /opt/rkvoice (README.md, Getting the code), or open the permissions of $install_dir and its parents"
fi

tmpdir=$(mktemp -d)
trap 'rm -rf "$tmpdir"' EXIT
tmp="$tmpdir/rkvoice.service"  # systemd-analyze needs the .service name
render "$tmp"
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "$tmp" || die "systemd-analyze rejected the unit (see above)"
fi
install -m 0644 "$tmp" "$unit_path"
systemctl daemon-reload
if [ "$start" = 1 ]; then
  systemctl enable rkvoice.service
  systemctl restart rkvoice.service
fi

cat <<MSG
rkvoice service installed: $unit_path (runs $install_dir/assistant.py as user '$user')
  state (todos, reminders):  $state_dir
  config overrides:          /etc/rkvoice/config.yaml   (apply with: systemctl reload rkvoice)
  status:                    systemctl status rkvoice
  logs:                      journalctl -u rkvoice -f
MSG
