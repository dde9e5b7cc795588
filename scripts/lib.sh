# Shared by the set-up scripts: install what is missing, pick a build directory.
# shellcheck shell=bash

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@"
}

ensure_tools() {
  local want=()
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || want+=(mariadb-server)
  command -v mariadb >/dev/null || want+=(mariadb-client)
  command -v psql >/dev/null || want+=(postgresql-client)
  # A test stops and starts a private PostgreSQL server: it needs the server's programs.
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || want+=(postgresql)
  command -v python3 >/dev/null || want+=(python3 python3-pip)
  command -v openssl >/dev/null || want+=(openssl)
  command -v gcc >/dev/null || want+=(build-essential)
  command -v curl >/dev/null || want+=(curl ca-certificates)
  if [ ${#want[@]} -gt 0 ]; then
    echo "installing: ${want[*]}"
    apt_install "${want[@]}"
  fi
  if ! command -v cargo >/dev/null; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
      export PATH="$HOME/.cargo/bin:$PATH"
    else
      echo "installing the Rust toolchain (rustup)"
      curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal -c rustfmt,clippy
      export PATH="$HOME/.cargo/bin:$PATH"
    fi
  fi
  # Builds are large: keep them outside the checkout, and share them between checkouts.
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cdcfusion/target}"
}
