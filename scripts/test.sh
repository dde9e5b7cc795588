#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit tests and integration tests against private
# MariaDB servers that the tests start and stop themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_tools
ensure_test_clients
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test
