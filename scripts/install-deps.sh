#!/usr/bin/env bash
# Installs what building and testing asyncshim needs and is not yet there
# (Debian/Ubuntu packages), and checks for the CUDA toolkit in /usr/local/cuda,
# which no Debian package provides.
set -euo pipefail

packages=(cmake ninja-build g++ make libfmt-dev libspdlog-dev libgtest-dev binutils python3)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "asyncshim: installing ${missing[*]}"
  sudo=""
  if [[ $(id -u) -ne 0 ]]; then sudo="sudo"; fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [[ ! -f /usr/local/cuda/include/cuda_runtime_api.h ]]; then
  echo "asyncshim: the CUDA toolkit (12.x or 13.x) is needed in /usr/local/cuda for its headers;" >&2
  echo "           install it from NVIDIA's packages, then run this again" >&2
  exit 1
fi
