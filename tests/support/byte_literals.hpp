// byte_literals.hpp: byte sizes for the tests (KiB, MiB, GiB, TiB, PiB), in
// one place. Reached through the CMake target asyncshim_test_support.
#pragma once

#include <cstddef>

namespace byte_literals {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;
inline constexpr std::size_t TiB = std::size_t{1} << 40;
inline constexpr std::size_t PiB = std::size_t{1} << 50;

}  // namespace byte_literals
