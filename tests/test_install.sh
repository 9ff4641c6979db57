#!/usr/bin/env bash
# test_install.sh BUILD_DIR SOURCE_DIR - the installed library is usable, and relocatable.
#
# Installs the build (cmake --install) into a temporary prefix, moves the prefix
# elsewhere, then builds the README's C example (BUILD_DIR/readme_example.c) against the
# moved copy and runs it: with pkg-config (the shared library, and the archive with its
# Requires.private dependencies), and with a CMake project using
# find_package(pprofkit CONFIG) (pprofkit::pprofkit and pprofkit::pprofkit_static). The
# installed pprofkit command runs from the moved prefix too. A sanitizer build installs
# instrumented libraries that a plain program cannot link: it is not tested here.
set -euo pipefail

BUILD_DIR=$(cd "${1:?usage: test_install.sh BUILD_DIR SOURCE_DIR}" && pwd)
SOURCE_DIR=$(cd "${2:?usage: test_install.sh BUILD_DIR SOURCE_DIR}" && pwd)

fail() { echo "FAIL: $*" >&2; exit 1; }
if grep -Eq '^PPK_SANITIZE:[A-Z]+=.+' "$BUILD_DIR/CMakeCache.txt"; then
    echo "not tested: $BUILD_DIR is a sanitizer build (instrumented libraries)"
    exit 0
fi
[ -f "$BUILD_DIR/readme_example.c" ] || fail "readme_example.c not generated in $BUILD_DIR"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

echo "== install, then move the prefix"
cmake --install "$BUILD_DIR" --prefix "$WORK/first" > "$WORK/install.log" ||
    { cat "$WORK/install.log"; fail "cmake --install"; }
mv "$WORK/first" "$WORK/moved"
P="$WORK/moved"
pc=$(find "$P" -name pprofkit.pc)
cfg=$(find "$P" -name pprofkitConfig.cmake)
[ -n "$pc" ] && [ -n "$cfg" ] || fail "pprofkit.pc or pprofkitConfig.cmake not installed"
libdir=$(dirname "$(dirname "$pc")")
grep -rqs "$WORK/first" "$P" && fail "an installed file names the prefix it was installed to"
echo "ok   installed; no file names the first prefix"

run() { # NAME BINARY: runs the example in WORK (it writes example.pb.gz there)
    (cd "$WORK" && rm -f example.pb.gz && LD_LIBRARY_PATH="$libdir" "$2" > "$WORK/$1.out") ||
        fail "$1: the example failed"
    [ -s "$WORK/example.pb.gz" ] || fail "$1: no example.pb.gz"
    echo "ok   $1"
}

echo "== pkg-config"
export PKG_CONFIG_PATH="$libdir/pkgconfig"
[ "$(pkg-config --variable=includedir pprofkit)" -ef "$P/include" ] ||
    fail "pkg-config: includedir $(pkg-config --variable=includedir pprofkit) is not $P/include"
# shellcheck disable=SC2046
cc "$BUILD_DIR/readme_example.c" $(pkg-config --cflags --libs pprofkit) -o "$WORK/ex_pc"
run "pkg-config, shared" "$WORK/ex_pc"
# (ldd's output kept first: grep -q ending a pipeline early fails it under pipefail)
libs=$(LD_LIBRARY_PATH="$libdir" ldd "$WORK/ex_pc")
[[ $libs == *"$libdir/libpprofkit.so"* ]] || fail "ex_pc does not load the moved libpprofkit.so"
# The archive, with its dependencies (Requires.private) as shared libraries: Debian ships
# no static libcurl stack.
# shellcheck disable=SC2046
cc "$BUILD_DIR/readme_example.c" $(pkg-config --cflags pprofkit) "$libdir/libpprofkit.a" \
    $(pkg-config --libs $(pkg-config --print-requires-private pprofkit)) -lm -pthread \
    -o "$WORK/ex_static"
libs=$(ldd "$WORK/ex_static")
[[ $libs != *libpprofkit* ]] || fail "ex_static loads libpprofkit.so"
run "pkg-config, the archive" "$WORK/ex_static"

echo "== find_package(pprofkit CONFIG)"
mkdir -p "$WORK/proj"
cp "$BUILD_DIR/readme_example.c" "$WORK/proj/"
cat > "$WORK/proj/CMakeLists.txt" <<'CMAKE'
cmake_minimum_required(VERSION 3.16)
project(uses_pprofkit C)
find_package(pprofkit 0.1 CONFIG REQUIRED)
add_executable(ex_shared readme_example.c)
target_link_libraries(ex_shared PRIVATE pprofkit::pprofkit)
add_executable(ex_static readme_example.c)
target_link_libraries(ex_static PRIVATE pprofkit::pprofkit_static)
CMAKE
cmake -S "$WORK/proj" -B "$WORK/proj/build" -DCMAKE_PREFIX_PATH="$P" > "$WORK/proj.log" 2>&1 &&
    cmake --build "$WORK/proj/build" >> "$WORK/proj.log" 2>&1 ||
    { cat "$WORK/proj.log"; fail "the CMake project did not build"; }
run "CMake, pprofkit::pprofkit" "$WORK/proj/build/ex_shared"
run "CMake, pprofkit::pprofkit_static" "$WORK/proj/build/ex_static"

echo "== the installed pprofkit command"
"$P/bin/pprofkit" top -n 3 "$WORK/example.pb.gz" > "$WORK/top.out" || fail "pprofkit top"
grep -q "flat%" "$WORK/top.out" || fail "pprofkit top printed no table"
echo "ok   $P/bin/pprofkit runs from the moved prefix"
echo "PASS"
