#include "support/unix_channel.hpp"

#include <sys/random.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace asyncshim::shim {
namespace {

// The address of channel `id`; its length goes to `length`.
sockaddr_un address_of(std::uint64_t id, socklen_t& length) noexcept
{
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  static constexpr char digits[] = "0123456789abcdef";
  char* at = address.sun_path + 1;  // sun_path[0] == 0: an abstract name
  std::memcpy(at, channel_prefix, sizeof channel_prefix - 1);
  at += sizeof channel_prefix - 1;
  for (int shift = 60; shift >= 0; shift -= 4) {
    *at++ = digits[(id >> shift) & 0xF];
  }
  length = static_cast<socklen_t>(at - reinterpret_cast<char*>(&address));
  return address;
}

bool set_timeouts(int fd, int timeout_ms) noexcept
{
  timeval tv{};
  tv.tv_sec = timeout_ms / 1000;
  tv.tv_usec = (timeout_ms % 1000) * 1000;
  return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) == 0 &&
         setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv) == 0;
}

std::uint64_t random_id() noexcept
{
  std::uint64_t id = 0;
  while (id == 0) {
    if (getrandom(&id, sizeof id, 0) != static_cast<ssize_t>(sizeof id)) {
      // No entropy call (an old kernel): the time and the process id are
      // enough to make the name unique; nothing depends on it being secret.
      timeval tv{};
      (void)gettimeofday(&tv, nullptr);
      id = (static_cast<std::uint64_t>(tv.tv_sec) << 32) ^ static_cast<std::uint64_t>(tv.tv_usec) ^
           (static_cast<std::uint64_t>(getpid()) << 20);
    }
  }
  return id;
}

}  // namespace

std::string channel_name(std::uint64_t id)
{
  socklen_t length = 0;
  sockaddr_un const address = address_of(id, length);
  return std::string(address.sun_path + 1, static_cast<std::size_t>(length) - offsetof(sockaddr_un, sun_path) - 1);
}

listening_channel open_channel() noexcept
{
  listening_channel channel;
  int const fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    channel.error = errno;
    return channel;
  }
  for (int attempt = 0; attempt < 8; ++attempt) {
    std::uint64_t const id = random_id();
    socklen_t length = 0;
    sockaddr_un const address = address_of(id, length);
    if (bind(fd, reinterpret_cast<sockaddr const*>(&address), length) == 0) {
      if (listen(fd, 64) != 0) { break; }
      channel.fd = fd;
      channel.id = id;
      return channel;
    }
    if (errno != EADDRINUSE) { break; }
  }
  channel.error = errno;
  (void)close(fd);
  return channel;
}

int accept_connection(int listening_fd, int timeout_ms) noexcept
{
  int fd = -1;
  do {
    fd = accept4(listening_fd, nullptr, nullptr, SOCK_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd >= 0 && !set_timeouts(fd, timeout_ms)) {
    int const error = errno;
    (void)close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

int connect_channel(std::uint64_t id, int timeout_ms) noexcept
{
  int const fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) { return -1; }
  socklen_t length = 0;
  sockaddr_un const address = address_of(id, length);
  if (!set_timeouts(fd, timeout_ms) || connect(fd, reinterpret_cast<sockaddr const*>(&address), length) != 0) {
    int const error = errno;
    (void)close(fd);
    errno = error;
    return -1;
  }
  return fd;
}

bool peer_user(int fd, uid_t& uid) noexcept
{
  ucred credentials{};
  socklen_t length = sizeof credentials;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0 || length != sizeof credentials) {
    return false;
  }
  uid = credentials.uid;
  return true;
}

bool send_message(int fd, void const* data, std::size_t size, int send_fd) noexcept
{
  iovec part{const_cast<void*>(data), size};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (send_fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof control;
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &send_fd, sizeof(int));
  }
  ssize_t sent = -1;
  do {
    sent = sendmsg(fd, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  return sent == static_cast<ssize_t>(size);
}

bool receive_message(int fd, void* data, std::size_t size, int& received_fd) noexcept
{
  received_fd = -1;
  iovec part{data, size};
  msghdr message{};
  message.msg_iov = &part;
  message.msg_iovlen = 1;
  // Room for a few descriptors, so that a peer sending more than one cannot
  // leave any behind unseen: the first is kept, every other one closed.
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  message.msg_control = control;
  message.msg_controllen = sizeof control;
  ssize_t got = -1;
  do {
    got = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
  } while (got < 0 && errno == EINTR);
  if (got >= 0) {
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr; header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) { continue; }
      std::size_t const count = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t i = 0; i < count; ++i) {
        int passed = -1;
        std::memcpy(&passed, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
        if (received_fd < 0) {
          received_fd = passed;
        } else {
          (void)close(passed);
        }
      }
    }
  }
  bool const whole = got == static_cast<ssize_t>(size) && (message.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) == 0;
  if (!whole && received_fd >= 0) {
    (void)close(received_fd);
    received_fd = -1;
  }
  return whole;
}

}  // namespace asyncshim::shim
