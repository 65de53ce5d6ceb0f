#!/bin/sh
# Runs the command only where a CUDA driver (libcuda.so.1) is installed; a
# program linked with -lcuda cannot even start elsewhere.
if ! ldconfig -p 2>/dev/null | grep -q 'libcuda\.so\.1 ' && [ ! -e /usr/lib/x86_64-linux-gnu/libcuda.so.1 ]; then
  echo "SKIP: no libcuda.so.1 (no CUDA driver) on this machine"
  exit 0
fi
exec "$@"
