#!/usr/bin/env bash
# Installs what building and testing asyncshim needs and is not yet there
# (Debian/Ubuntu packages), and checks for the CUDA toolkit in /usr/local/cuda,
# which no Debian package provides.
#   scripts/install-deps.sh [--fuzz] [--style]
# --fuzz (scripts/test.sh): also clang++ with libFuzzer, for the fuzz test of
# the environment parser (tests/fuzz), and checks that it links a fuzzer.
# --style (scripts/test.sh): also clang-format 16 or newer, for the style
# check (scripts/format.sh --check).
set -euo pipefail

fuzz=0
style=0
for arg in "$@"; do
  case $arg in
    --fuzz) fuzz=1 ;;
    --style) style=1 ;;
    *) echo "usage: $0 [--fuzz] [--style]" >&2; exit 2 ;;
  esac
done

sudo=""
if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
updated=0
apt_update_once() { if ((!updated)); then $sudo apt-get update -qq; updated=1; fi; }
apt_install() {
  apt_update_once
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

packages=(cmake ninja-build g++ make libfmt-dev libspdlog-dev libgtest-dev binutils python3
          pkgconf              # reads the installed asyncshim.pc in the tests (tests/install)
          python3-jsonschema   # validates the statistics files in the tests (tests/support/stats_schema.py)
          python3-prometheus-client)  # parses the metrics file in the tests (tests/shim/check_metrics.py)
missing=()
for p in "${packages[@]}"; do
  installed "$p" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "asyncshim: installing ${missing[*]}"
  apt_install "${missing[@]}"
fi

# The wheel's test (tests/install/wheel.cmake) makes a virtual environment
# with pip in it: Debian's python3 needs python3-venv for that.
if ! python3 -c 'import ensurepip, venv' 2>/dev/null; then
  echo "asyncshim: installing python3-venv"
  apt_install python3-venv
fi

if [[ ! -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  echo "asyncshim: the CUDA toolkit (12.x or 13.x) is needed in /usr/local/cuda for its headers;" >&2
  echo "           install it from NVIDIA's packages, then run this again" >&2
  exit 1
fi

if ((fuzz)); then
  # The fuzz test needs a clang++ that links -fsanitize=fuzzer (clang 14 or
  # newer for C++20). libFuzzer itself is in libclang-rt-<N>-dev on Debian 12+
  # and Ubuntu 24.04+ (only recommended by clang, so not installed with
  # --no-install-recommends), in libclang-common-<N>-dev on Ubuntu 22.04.
  clangxx() {
    for c in clang++ clang++-{21,20,19,18,17,16,15,14}; do
      if command -v "$c" >/dev/null; then echo "$c"; return; fi
    done
  }
  probe_output=""
  link_probe="$(cd "$(dirname "$0")/.." && pwd)/tests/fuzz/link_probe.cpp"  # the fuzz build's own check
  links_a_fuzzer() {
    local cxx dir status
    cxx=$(clangxx)
    [[ -n $cxx ]] || return 1
    dir=$(mktemp -d)
    "$cxx" -std=c++20 -fsanitize=fuzzer,address,undefined "$link_probe" -o "$dir/probe" >"$dir/log" 2>&1
    status=$?
    probe_output=$(cat "$dir/log")
    rm -rf "$dir"
    return $status
  }
  if ! links_a_fuzzer; then
    if [[ -z $(clangxx) ]]; then
      echo "asyncshim: installing clang (for the fuzz test)"
      apt_install clang
    fi
    if ! links_a_fuzzer; then
      major=$("$(clangxx)" -dumpversion | cut -d. -f1)
      for p in "libclang-rt-$major-dev" libclang-rt-dev "libclang-common-$major-dev"; do
        apt_update_once
        if [[ -n $(apt-cache policy "$p" 2>/dev/null | awk '/Candidate:/ && $2 != "(none)"') ]]; then
          echo "asyncshim: installing $p (libFuzzer, for the fuzz test)"
          apt_install "$p"
          break
        fi
      done
    fi
    if ! links_a_fuzzer; then
      echo "asyncshim: $(clangxx || echo clang++) cannot link a libFuzzer target (-fsanitize=fuzzer,address,undefined):" >&2
      echo "${probe_output:-}" >&2
      echo "           install clang 14 or newer and its compiler-rt (libclang-rt-<version>-dev)" >&2
      exit 1
    fi
  fi
fi

if ((style)); then
  # InsertBraces needs clang-format 16: Debian 12 has it as clang-format-16,
  # Ubuntu 24.04's plain clang-format is 18. The style check's own search
  # says whether one is there.
  format_script="$(cd "$(dirname "$0")" && pwd)/format.sh"
  has_style_formatter() { "$format_script" --which >/dev/null; }
  if ! has_style_formatter; then
    apt_update_once
    if apt-cache show clang-format-16 >/dev/null 2>&1; then
      echo "asyncshim: installing clang-format-16"
      apt_install clang-format-16
    else
      echo "asyncshim: installing clang-format"
      apt_install clang-format
    fi
    if ! has_style_formatter; then
      echo "asyncshim: no clang-format 16 or newer could be installed; the style check needs one" >&2
      exit 1
    fi
  fi
fi
