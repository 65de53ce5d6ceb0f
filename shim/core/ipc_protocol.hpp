// The messages of the legacy IPC channel (support/unix_channel.hpp): an
// importer asks an exporter for one block, named by the serial in the
// shim's handle (support/ipc_handle.hpp); the exporter answers with the
// block's pool export data and, with an answer of `ok`, the pool's
// descriptor. One request per connection.
#pragma once

#include "state/ipc_exports.hpp"

#include <cstdint>

namespace asyncshim::shim {

inline constexpr std::uint32_t ipc_request_magic = 0x51524841;  ///< "AHRQ"
inline constexpr std::uint32_t ipc_protocol_version = 1;
/// How long either side waits for the other, in milliseconds.
inline constexpr int ipc_timeout_ms = 10000;

struct ipc_request {
  std::uint32_t magic = ipc_request_magic;
  std::uint32_t version = ipc_protocol_version;
  std::uint64_t block = 0;
};

enum class ipc_status : std::uint32_t {
  ok = 0,
  unknown_block = 1,  ///< freed by the program (or never exported): a handle of freed memory
  other_user = 2,     ///< the importer is not of the exporter's user
  failed = 3,         ///< the exporter cannot share the block (no pool descriptor)
  bad_request = 4,    ///< another version or a malformed message
};

struct ipc_reply {
  ipc_status status = ipc_status::failed;
  std::int32_t device = 0;            ///< the exporter's device ordinal
  std::uint64_t size = 0;             ///< the block's size
  std::uint64_t pool_generation = 0;  ///< changes with the exporter's pool (pool_share)
  pool_export_data data{};
};

/// The exporting process's channel id (0 until it has exported a block).
[[nodiscard]] std::uint64_t own_channel_id() noexcept;

}  // namespace asyncshim::shim
