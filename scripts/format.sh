#!/usr/bin/env bash
# Applies the project's style (.clang-format) to every C++ and CUDA source in
# git, or with --check only says which files differ from it (and fails), or
# with --which prints the clang-format it would use (and fails without one).
#   scripts/format.sh [--check | --which]
# clang-format 16 or newer (InsertBraces); scripts/install-deps.sh installs it.
set -euo pipefail
cd "$(dirname "$0")/.."

mode=apply
case ${1:-} in
  --check) mode=check ;;
  --which) mode=which ;;
  "") ;;
  *) echo "usage: $0 [--check | --which]" >&2; exit 2 ;;
esac

formatter=""
for c in clang-format-{21,20,19,18,17,16} clang-format; do
  if command -v "$c" >/dev/null; then
    major=$("$c" --version | sed -n 's/.*version \([0-9]*\).*/\1/p')
    if [[ -n $major && $major -ge 16 ]]; then formatter=$c; break; fi
  fi
done
if [[ $mode == which ]]; then
  if [[ -z $formatter ]]; then exit 1; fi
  echo "$formatter"
  exit 0
fi
if [[ -z $formatter ]]; then
  echo "asyncshim: the style check needs clang-format 16 or newer; scripts/install-deps.sh installs it" >&2
  exit 1
fi

mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
if [[ $mode == check ]]; then
  if ! report=$("$formatter" --dry-run --Werror "${files[@]}" 2>&1); then
    grep -o '^[^:]*:[0-9]*' <<<"$report" | cut -d: -f1 | sort -u | sed 's/^/  not in the project style: /' >&2
    echo "asyncshim: run scripts/format.sh to apply .clang-format" >&2
    exit 1
  fi
  echo "asyncshim: ${#files[@]} sources in the project style ($formatter)"
else
  "$formatter" -i "${files[@]}"
fi
