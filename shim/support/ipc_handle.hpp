// The legacy IPC handle asyncshim makes for pool memory (cudaIpcGetMemHandle
// on a block of the shim's pool). A pool block has no driver handle, so the
// shim's 64 bytes only name the block: which process's channel to ask (a
// random id, which also names its socket) and which block (a serial the
// exporter never reuses). The importer gets the pool's descriptor and the
// block's export data from the exporter over that channel (core/ipc_export.cpp).
//
// It is never mistaken for a driver handle, nor a driver handle for it: the
// driver's handles begin with a user-space address (the last two of its eight
// bytes zero, as every x86-64 and AArch64 user address is), the shim's with
// "ASHMIPC" and a format byte; a CRC-32 over the rest must match too. Nothing
// in it is a secret: the exporter gives the descriptor only to processes of
// its own user (support/unix_channel.hpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>

namespace asyncshim::shim {

inline constexpr std::size_t ipc_handle_size = 64;
using ipc_handle_bytes = std::array<unsigned char, ipc_handle_size>;

struct ipc_handle {
  std::uint64_t exporter = 0;  ///< the exporting process's channel id (random, not 0)
  std::uint64_t block = 0;     ///< the block's serial in that process (not 0)
  std::uint64_t size = 0;      ///< the block's size in bytes
  std::uint32_t uid = 0;       ///< the exporter's user, for messages
  std::uint32_t pid = 0;       ///< the exporter's process id in its own PID namespace, for messages
  std::int32_t device = 0;     ///< the exporter's device ordinal, for messages
  friend bool operator==(ipc_handle const&, ipc_handle const&) = default;
};

[[nodiscard]] ipc_handle_bytes encode(ipc_handle const& handle) noexcept;
/// The handle, when `bytes` are one of the shim's (magic, format and checksum
/// match); nothing for anything else, a driver handle among them.
[[nodiscard]] std::optional<ipc_handle> decode_ipc_handle(unsigned char const* bytes) noexcept;

/// CRC-32 (IEEE 802.3, as zlib computes it).
[[nodiscard]] std::uint32_t crc32(unsigned char const* data, std::size_t size) noexcept;

}  // namespace asyncshim::shim
