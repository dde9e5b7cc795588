#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit tests and integration tests against private
# MariaDB and PostgreSQL servers that the tests start and stop themselves, and the Debian
# package installed on this machine and purged again (tests/package.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_tools
ensure_test_clients
ensure_cargo_deb
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test
