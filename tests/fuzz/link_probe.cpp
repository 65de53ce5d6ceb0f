// The smallest libFuzzer target in C++20: whether a clang++ can build the fuzz
// test (tests/fuzz/CMakeLists.txt and scripts/install-deps.sh both compile it
// with -fsanitize=fuzzer,address,undefined).
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <span>

extern "C" int LLVMFuzzerTestOneInput(std::uint8_t const* data, std::size_t size)
{
  return std::span<std::uint8_t const>(data, size).empty() ? 0 : 0;
}
