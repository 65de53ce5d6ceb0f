#include "support/ipc_handle.hpp"

#include <cstring>

namespace asyncshim::shim {
namespace {

// "ASHMIPC" and the format version. Its last two bytes are not zero, unlike
// those of a user-space address.
constexpr unsigned char magic[8] = {'A', 'S', 'H', 'M', 'I', 'P', 'C', 1};

// The layout, little-endian fields at fixed offsets:
//   0 magic, 8 exporter, 16 block, 24 size, 32 uid, 36 pid, 40 device,
//   44..59 zero, 60 CRC-32 of bytes 0..59.
constexpr std::size_t crc_offset = 60;

void put(unsigned char* at, std::uint64_t value, int bytes) noexcept
{
  for (int i = 0; i < bytes; ++i) {
    at[i] = static_cast<unsigned char>(value >> (8 * i));
  }
}

std::uint64_t get(unsigned char const* at, int bytes) noexcept
{
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) {
    value |= std::uint64_t{at[i]} << (8 * i);
  }
  return value;
}

}  // namespace

std::uint32_t crc32(unsigned char const* data, std::size_t size) noexcept
{
  std::uint32_t crc = 0xFFFFFFFFU;
  for (std::size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc >> 1) ^ (0xEDB88320U & (0U - (crc & 1U)));
    }
  }
  return ~crc;
}

ipc_handle_bytes encode(ipc_handle const& handle) noexcept
{
  ipc_handle_bytes bytes{};
  std::memcpy(bytes.data(), magic, sizeof magic);
  put(&bytes[8], handle.exporter, 8);
  put(&bytes[16], handle.block, 8);
  put(&bytes[24], handle.size, 8);
  put(&bytes[32], handle.uid, 4);
  put(&bytes[36], handle.pid, 4);
  put(&bytes[40], static_cast<std::uint32_t>(handle.device), 4);
  put(&bytes[crc_offset], crc32(bytes.data(), crc_offset), 4);
  return bytes;
}

std::optional<ipc_handle> decode_ipc_handle(unsigned char const* bytes) noexcept
{
  if (bytes == nullptr || std::memcmp(bytes, magic, sizeof magic) != 0) { return std::nullopt; }
  if (get(&bytes[crc_offset], 4) != crc32(bytes, crc_offset)) { return std::nullopt; }
  for (std::size_t i = 44; i < crc_offset; ++i) {
    if (bytes[i] != 0) { return std::nullopt; }
  }
  ipc_handle h;
  h.exporter = get(&bytes[8], 8);
  h.block = get(&bytes[16], 8);
  h.size = get(&bytes[24], 8);
  h.uid = static_cast<std::uint32_t>(get(&bytes[32], 4));
  h.pid = static_cast<std::uint32_t>(get(&bytes[36], 4));
  h.device = static_cast<std::int32_t>(static_cast<std::uint32_t>(get(&bytes[40], 4)));
  if (h.exporter == 0 || h.block == 0) { return std::nullopt; }
  return h;
}

}  // namespace asyncshim::shim
