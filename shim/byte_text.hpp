// Byte counts for people: "1.5 GiB", "512 B".
#pragma once

#include <cstdint>
#include <string>

namespace asyncshim::shim {

[[nodiscard]] std::string approximate_bytes(std::uint64_t bytes);

}  // namespace asyncshim::shim
