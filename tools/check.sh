#!/usr/bin/env bash
# The whole test suite from a fresh clone: install packages, then build and run ctest in
# build/ (RelWithDebInfo), in build/asan (ASan + UBSan, Debug) and in build/tsan
# (ThreadSanitizer, Debug: the concurrency tests prove their claims race-free), two tests
# at a time (many wait on timeouts and peers), the Python suites alone; builds
# the benchmarks (bench/, not run: they measure, assert nothing about time) and the
# libFuzzer targets with clang, each fuzzed for FUZZ_SECONDS (default 10) from its saved
# corpus. With CI=true warnings are errors. The Python package is built and tested with every
# interpreter tools/pythons.sh lists in build/, with Debian's python3 under ASan, and
# not under TSan (an uninstrumented interpreter cannot host the TSan runtime). Every
# stage runs even if an earlier one failed; the exit code is non-zero if any failed, and
# a summary closes the output.
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

pythons=$(bash tools/pythons.sh | paste -sd ';')
echo "check.sh: Python interpreters: ${pythons//;/ }"

# build_and_test DIR BUILD_TYPE SANITIZE PYTHONS [CTEST ARGS...] (PYTHONS empty: no
# Python package)
build_and_test() {
    local dir=$1 type=$2 san=$3 pys=$4
    shift 4
    local py_flags=(-DPPK_PYTHON=OFF)
    [[ -n "$pys" ]] && py_flags=(-DPPK_PYTHON=ON "-DPPK_PYTHONS=$pys")
    cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE="$type" -DPPK_WERROR="$werror" \
        -DPPK_SANITIZE="$san" "${py_flags[@]}" &&
        cmake --build "$dir" -j2 &&
        (cd "$dir" && ctest -j2 --output-on-failure "$@")
}

stage "build+test (RelWithDebInfo, build/)" build_and_test build RelWithDebInfo "" "$pythons"
stage "build+test (ASan+UBSan, build/asan)" build_and_test build/asan Debug address,undefined \
    /usr/bin/python3
# The encoder's independent-decoder scripts and the pprofkit command (one thread) test
# bytes, not threads, and are the slowest under ThreadSanitizer: the TSan stage leaves
# them to the two stages above.
stage "build+test (TSan, build/tsan)" build_and_test build/tsan Debug thread "" \
    -E '^(test_decode|test_demo|test_pprofkit_cmd)$'

stage "benchmarks build (build/)" cmake --build build -j2 --target bench

# fuzz DIR: the libFuzzer targets built with clang, each run FUZZ_SECONDS on a copy of
# its saved corpus (a crash fails the stage and leaves its input in DIR).
fuzz() {
    local dir=$1 t
    CC=clang cmake -S . -B "$dir" -DPPK_FUZZ=ON -DPPK_WERROR="$werror" &&
        cmake --build "$dir" -j2 --target fuzz_profile fuzz_builder fuzz_reader || return 1
    for t in profile builder reader; do
        rm -rf "$dir/corpus-$t" && cp -r "tests/corpus/fuzz_$t" "$dir/corpus-$t" &&
            (cd "$dir" && "./fuzz_$t" -max_total_time="${FUZZ_SECONDS:-10}" -max_len=4096 \
                 "corpus-$t" 2>&1 | tail -n 2) || return 1
    done
}
stage "fuzz (clang, libFuzzer, build/fuzz)" fuzz build/fuzz

echo
echo "==== summary ($(($(date +%s) - start)) s)"
printf '%s\n' "${results[@]}"
if ((failed)); then
    echo "check.sh: FAILED"
    exit 1
fi
echo "check.sh: all passed"
