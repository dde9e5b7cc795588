# Shared by the set-up scripts: install what is missing, pick a build directory.
# shellcheck shell=bash

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "need root to run: $*" >&2; return 1; fi
}

apt_updated=
apt_install() {
  if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o Dpkg::Use-Pty=0 "$@" >/dev/null
}

# The toolchain rust-toolchain.toml pins, with rustfmt and clippy: rustup's when the cargo on
# the PATH is another version (a distribution's cargo, or rustup without that toolchain).
ensure_rust() {
  local pinned
  pinned=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
  if ! command -v rustup >/dev/null && [ -x "$HOME/.cargo/bin/rustup" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v rustup >/dev/null; then
    if command -v cargo >/dev/null && cargo --version | grep -q "^cargo $pinned "; then
      return
    fi
    echo "installing the Rust toolchain $pinned (rustup)"
    curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs |
      sh -s -- -y --profile minimal --default-toolchain none
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! rustup toolchain list | grep -q "^$pinned-"; then
    echo "installing the Rust toolchain $pinned"
    rustup toolchain install "$pinned" --profile minimal -c rustfmt,clippy
  fi
  # Inside the checkout, rustup's cargo is the pinned one (rust-toolchain.toml).
  if ! cargo --version | grep -q "^cargo $pinned "; then
    echo "cargo on the PATH ($(command -v cargo)) is not rustup's $pinned; put ~/.cargo/bin first" >&2
    return 1
  fi
}

# Debian packages for the client comparisons (pgjdbc under Java, node-postgres under Node.js),
# installed when missing; tests call this too when run without scripts/test.sh.
ensure_test_clients() {
  local want=()
  command -v java >/dev/null || want+=(default-jre-headless)
  [ -f /usr/share/java/postgresql.jar ] || want+=(libpostgresql-jdbc-java)
  command -v node >/dev/null || want+=(nodejs)
  command -v npm >/dev/null || want+=(npm)
  if [ ${#want[@]} -gt 0 ]; then
    echo "installing: ${want[*]}"
    apt_install "${want[@]}"
  fi
}

# cargo-deb, which builds the Debian package (tests/package.rs, docs/operations.md).
ensure_cargo_deb() {
  if ! cargo deb --version >/dev/null 2>&1; then
    echo "installing cargo-deb"
    cargo install --quiet --locked cargo-deb --version 3.8.0
  fi
}

ensure_tools() {
  local want=()
  command -v mariadbd >/dev/null || [ -x /usr/sbin/mariadbd ] || want+=(mariadb-server)
  command -v mariadb >/dev/null && command -v mariadb-binlog >/dev/null || want+=(mariadb-client)
  command -v psql >/dev/null || want+=(postgresql-client)
  # A test stops and starts a private PostgreSQL server: it needs the server's programs.
  compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || want+=(postgresql)
  command -v python3 >/dev/null || want+=(python3)
  # Test clients are installed with `python3 -m pip install --target` (no system site).
  python3 -m pip --version >/dev/null 2>&1 || want+=(python3-pip)
  command -v openssl >/dev/null || want+=(openssl)
  command -v gcc >/dev/null || want+=(build-essential)
  command -v curl >/dev/null || want+=(curl ca-certificates)
  if [ ${#want[@]} -gt 0 ]; then
    echo "installing: ${want[*]}"
    apt_install "${want[@]}"
  fi
  ensure_rust
  # Builds are large: keep them outside the checkout, and share them between checkouts.
  export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/cdcfusion/target}"
}
