#!/usr/bin/env bash
# Starts a private MariaDB, captures a sample schema and prints its change stream while a small
# writer changes data. Everything it starts is stopped when it ends (or on Ctrl-C).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_tools
cargo run --quiet -- demo "$@"
