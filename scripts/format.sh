#!/usr/bin/env bash
# Applies the project's style (.clang-format) to every C++ and CUDA source in
# git, or with --check only says which files differ from it (and fails).
#   scripts/format.sh [--check]
# clang-format 16 or newer (InsertBraces); scripts/install-deps.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
case ${1:-} in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

formatter=""
for c in clang-format-{21,20,19,18,17,16} clang-format; do
  if command -v "$c" >/dev/null; then
    major=$("$c" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
    if [[ -n $major && $major -ge 16 ]]; then formatter=$c; break; fi
  fi
done
if [[ -z $formatter ]]; then
  echo "asyncshim: the style check needs clang-format 16 or newer; scripts/install-deps.sh installs it" >&2
  exit 1
fi

mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
if ((check)); then
  if ! "$formatter" --dry-run --Werror "${files[@]}" 2>/tmp/asyncshim-format.$$; then
    grep -o '^[^:]*:[0-9]*' /tmp/asyncshim-format.$$ | cut -d: -f1 | sort -u | sed 's/^/  not in the project style: /' >&2
    rm -f /tmp/asyncshim-format.$$
    echo "asyncshim: run scripts/format.sh to apply .clang-format" >&2
    exit 1
  fi
  rm -f /tmp/asyncshim-format.$$
  echo "asyncshim: ${#files[@]} sources in the project style ($formatter)"
else
  "$formatter" -i "${files[@]}"
fi
