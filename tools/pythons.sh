#!/usr/bin/env bash
# Prints the CPython interpreters to build and test the Python package with, one path
# per line, one per minor version from 3.11 to 3.13: Debian's /usr/bin/python3 (always;
# tools/deps.sh installs its headers), then the python3 on PATH (e.g. pyenv's default)
# and the newest pyenv-installed 3.12 and 3.13, for the versions not listed yet.
set -euo pipefail

candidates=(/usr/bin/python3)
if command -v python3 >/dev/null; then
    candidates+=("$(python3 -c 'import sys; print(sys.executable)')")
fi
root=${PYENV_ROOT:-$HOME/.pyenv}
for minor in 12 13; do
    best=$(find "$root/versions" -mindepth 1 -maxdepth 1 -name "3.$minor.*" 2>/dev/null |
        grep -E "/3\.$minor\.[0-9]+$" | sort -V | tail -n 1 || true)
    [[ -n "$best" && -x "$best/bin/python3" ]] && candidates+=("$best/bin/python3")
done

seen=()
for py in "${candidates[@]}"; do
    [[ -x "$py" ]] || continue
    minor=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || continue
    [[ "$minor" =~ ^3\.1[123]$ ]] || continue
    [[ " ${seen[*]-} " == *" $minor "* ]] && continue
    seen+=("$minor")
    echo "$py"
done
