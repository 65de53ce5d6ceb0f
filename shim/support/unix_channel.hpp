// The channel an exporting process answers legacy IPC requests on: a Unix
// socket (SOCK_SEQPACKET, so each message arrives whole) with an abstract
// name made of a random id, "\0asyncshim-ipc-<16 hex digits>". Abstract names
// belong to the network namespace, not the PID namespace, and leave nothing
// in the file system: processes in different PID namespaces of one host
// reach each other as long as they share a network namespace.
//
// Each side checks the other's credentials (SO_PEERCRED): the exporter
// answers only processes of its own user, and an importer trusts only an
// exporter of its own user (anyone can bind an abstract name). A pool
// descriptor travels with SCM_RIGHTS, which works in unprivileged containers
// (pidfd_getfd does not). Every descriptor is close-on-exec, and every wait
// has a timeout: a process that stops answering never hangs its peer.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace asyncshim::shim {

/// The abstract socket name of channel `id` (without the leading zero byte):
/// the prefix and the id in 16 hexadecimal digits (messages print it as
/// "{}{:016x}", channel_prefix, id, which allocates nothing).
/// @{
inline constexpr char channel_prefix[] = "asyncshim-ipc-";
[[nodiscard]] std::string channel_name(std::uint64_t id);
/// @}

struct listening_channel {
  int fd = -1;
  std::uint64_t id = 0;
  int error = 0;  ///< errno when fd is -1
};
/// Binds a new channel under a fresh random id and listens on it.
[[nodiscard]] listening_channel open_channel() noexcept;

/// Accepts the next connection (-1 and errno on failure); the connection has
/// receive and send timeouts of `timeout_ms`.
[[nodiscard]] int accept_connection(int listening_fd, int timeout_ms) noexcept;
/// Connects to channel `id` (-1 and errno: ECONNREFUSED or ENOENT when nobody
/// listens under that name in this network namespace).
[[nodiscard]] int connect_channel(std::uint64_t id, int timeout_ms) noexcept;

/// The user id of the process at the other end of a connected socket; false
/// when the system cannot tell.
[[nodiscard]] bool peer_user(int fd, uid_t& uid) noexcept;

/// One message of at most `size` bytes, with a descriptor when `send_fd` >= 0.
[[nodiscard]] bool send_message(int fd, void const* data, std::size_t size, int send_fd = -1) noexcept;
/// One message of exactly `size` bytes; `received_fd` is a descriptor that
/// came with it (close-on-exec, the caller's to close), else -1. False on a
/// timeout, a closed connection or a message of another size (any
/// descriptor that came with it is closed).
[[nodiscard]] bool receive_message(int fd, void* data, std::size_t size, int& received_fd) noexcept;

}  // namespace asyncshim::shim
