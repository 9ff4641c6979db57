#!/usr/bin/env bash
# test_check_otlp.sh BUILD_DIR SOURCE_DIR - tests/check_otlp.py catches what it must:
# test_check_otlp.py builds a valid OTLP request and its pprof by hand, then breaks one
# rule at a time. The checker needs Debian's python3-protobuf, hence /usr/bin/python3.
set -euo pipefail
SOURCE_DIR=$(cd "${2:?usage: test_check_otlp.sh BUILD_DIR SOURCE_DIR}" && pwd)
PY=/usr/bin/python3
command -v protoc >/dev/null || { echo "FAIL: protoc is not installed" >&2; exit 1; }
"$PY" -c 'import google.protobuf' 2>/dev/null ||
    { echo "FAIL: $PY has no google.protobuf (package python3-protobuf)" >&2; exit 1; }
exec "$PY" "$SOURCE_DIR/tests/test_check_otlp.py"
