#!/usr/bin/env bash
# The whole test suite from a fresh clone: install packages, then build and run ctest in
# build/ (RelWithDebInfo), in build/asan (ASan + UBSan, Debug) and in build/tsan
# (ThreadSanitizer, Debug: the concurrency tests prove their claims race-free). With
# CI=true warnings are errors. Every stage runs even if an earlier one failed; the exit
# code is non-zero if any failed, and a summary closes the output.
set -uo pipefail
cd "$(dirname "$0")/.."

start=$(date +%s)
results=()
failed=0

# stage NAME COMMAND...: runs the command, records its result.
stage() {
    local name=$1
    shift
    local t0=$(date +%s)
    echo
    echo "==== $name: $*"
    if "$@"; then
        results+=("PASS  $name ($(($(date +%s) - t0)) s)")
    else
        results+=("FAIL  $name ($(($(date +%s) - t0)) s)")
        failed=1
    fi
}

stage "packages" bash tools/deps.sh
if ((failed)); then
    echo "check.sh: could not install the packages; stopping" >&2
    exit 1
fi

werror=OFF
if [[ "${CI:-}" == "true" ]]; then
    werror=ON
fi
echo "check.sh: gcc $(gcc -dumpfullversion), $(cmake --version | head -n 1), PPK_WERROR=$werror"

# build_and_test DIR BUILD_TYPE SANITIZE [CTEST ARGS...]
build_and_test() {
    local dir=$1 type=$2 san=$3
    shift 3
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DPPK_WERROR="$werror" \
        -DPPK_SANITIZE="$san" &&
        cmake --build "$dir" -j2 &&
        (cd "$dir" && ctest --output-on-failure "$@")
}

stage "build+test (RelWithDebInfo, build/)" build_and_test build RelWithDebInfo ""
stage "build+test (ASan+UBSan, build/asan)" build_and_test build/asan Debug address,undefined
# The encoder's independent-decoder scripts test bytes, not threads, and are the slowest
# under ThreadSanitizer: the TSan stage leaves them to the two stages above.
stage "build+test (TSan, build/tsan)" build_and_test build/tsan Debug thread \
    -E '^(test_decode|test_demo)$'

echo
echo "==== summary ($(($(date +%s) - start)) s)"
printf '%s\n' "${results[@]}"
if ((failed)); then
    echo "check.sh: FAILED"
    exit 1
fi
echo "check.sh: all passed"
