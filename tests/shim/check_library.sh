#!/usr/bin/env bash
# Checks what libasyncshim.so shows to the programs it is loaded into:
#  - it exports exactly the names of its export list (written from
#    shim/cuda/api_table.def at build time), each of them defined, and
#    those are the names of tests/shim/expected_exports.txt (so that a row
#    lost from the table, or a new one, is seen);
#  - it has no NEEDED entry for libcudart/libcuda (it uses the program's own
#    runtime) nor for fmt/spdlog (header-only, hidden);
#  - no fmt::, spdlog:: or std:: symbol is in its dynamic symbol table;
#  - it runs no C++ static constructors at load time.
# usage: check_library.sh path/to/libasyncshim.so path/to/exports.map [expected_exports.txt]
set -euo pipefail
export LC_ALL=C  # one sort order everywhere
lib=$1
export_list=$2
golden=${3:-$(dirname "$0")/expected_exports.txt}
failed=0
fail() { echo "FAIL: $*"; failed=1; }

exported=$(nm -D --defined-only "$lib" | awk '{print $NF}' | sort | tr '\n' ' ')
# The names between "global:" and "local:", one per line ("name;").
expected=$(awk '/global:/ {on = 1; next} /local:/ {on = 0} on && /;/ {gsub(/[ \t;]/, ""); print}' "$export_list" | sort | tr '\n' ' ')
agreed=$(sort "$golden" | tr '\n' ' ')
if [[ "$expected" != "$agreed" ]]; then fail "the export list $export_list names '$expected', $golden names '$agreed'"; fi
if [[ "$exported" != "$expected" ]]; then fail "exported symbols are '$exported', expected '$expected'"; fi

needed=$(readelf -d "$lib" | awk '/NEEDED/ {print $NF}' | tr -d '[]' | tr '\n' ' ')
echo "NEEDED: $needed"
for bad in libcudart libcuda. libfmt libspdlog; do
  if [[ "$needed" == *"$bad"* ]]; then fail "NEEDED contains $bad"; fi
done

leaked=$(readelf --dyn-syms --wide "$lib" | awk '$7 != "UND" {print $8}' | c++filt | grep -E '^(fmt|spdlog|std)::|^_ZN?St' || true)
if [[ -n "$leaked" ]]; then fail "C++ library symbols in the dynamic symbol table:"$'\n'"$leaked"; fi

# No load-time constructors of our own. Our sources are *.cpp; where the
# toolchain links libstdc++ statically (seen on the GPU machine's image), its
# own initializers (*.cc) are listed but allowed: they are not ours and do no
# CUDA work. A stripped library with extra .init_array entries fails.
init_hex=$(readelf -S --wide "$lib" | awk '$2 == ".init_array" {print $6}')
init_entries=$(( 16#${init_hex:-0} / 8 ))
constructors=$(nm "$lib" 2>/dev/null | awk '/_GLOBAL__sub_I_/ {print $3}' || true)
ours=$(echo "$constructors" | grep -E '\.(cpp|cxx|cu)$' || true)
if [[ -n "$ours" ]]; then fail "load-time constructors in our code:"$'\n'"$ours"; fi
if [[ -z "$constructors" && $init_entries -gt 1 ]]; then
  fail ".init_array has $init_entries entries and the library has no symbols to say whose"
fi
if [[ -n "$constructors" ]]; then echo "toolchain initializers (static libstdc++):" $constructors; fi

if [[ $failed -ne 0 ]]; then exit 1; fi
echo "exports: $exported"
echo "library hygiene: OK"
