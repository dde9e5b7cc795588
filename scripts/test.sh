#!/usr/bin/env bash
# Runs the whole test suite: formatting, lints, unit tests and integration tests against private
# MariaDB servers that the tests start and stop themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
ensure_tools
cargo fmt --check
cargo clippy --all-targets --quiet -- -D warnings
cargo test
# The S3 state store against a live S3-compatible server (moto, installed from PyPI by the
# test). Opt-in: the `s3` feature changes object_store's features, so DataFusion and
# everything else that depends on object_store is built a second time.
if [ "${CDCFUSION_TEST_S3:-}" = 1 ]; then
  cargo clippy --all-targets --features s3 --quiet -- -D warnings
  cargo test --features s3 --test s3_store
fi
