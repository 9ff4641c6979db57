#!/usr/bin/env bash
# test_api_misuse.sh BUILD_DIR SOURCE_DIR - misuse of the public header that must not
# compile: PPK_STR of a pointer or an array (sizeof would give the wrong length), while
# PPK_STR of a string literal and ppk_cstr of a pointer compile. The compiler is $CC
# (cc by default), with -Wall -Werror.
set -euo pipefail
SOURCE_DIR=$(cd "${2:?usage: test_api_misuse.sh BUILD_DIR SOURCE_DIR}" && pwd)
CC=${CC:-cc}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ppk-misuse.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

# compiles NAME BODY: 0 if a translation unit with BODY in a function compiles.
compiles() {
    printf '#include <pprofkit.h>\nppk_str f(const char *ptr);\nppk_str f(const char *ptr) {\n    char buf[16] = "abc";\n    (void)ptr; (void)buf;\n    %s\n}\n' "$2" > "$WORK/$1.c"
    "$CC" -std=c11 -Wall -Werror -fsyntax-only -I "$SOURCE_DIR/include" "$WORK/$1.c" 2> "$WORK/$1.err"
}

compiles literal 'return PPK_STR("abc");' || { cat "$WORK/literal.err"; echo "FAIL: PPK_STR(\"abc\") does not compile"; exit 1; }
compiles cstr 'return ppk_cstr(ptr);' || { cat "$WORK/cstr.err"; echo "FAIL: ppk_cstr does not compile"; exit 1; }
if compiles pointer 'return PPK_STR(ptr);'; then echo "FAIL: PPK_STR(pointer) compiles"; exit 1; fi
if compiles array 'return PPK_STR(buf);'; then echo "FAIL: PPK_STR(array) compiles"; exit 1; fi
echo "PASS"
