#include "support/own_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

namespace asyncshim::shim {
namespace {

// Why open() failed; by_rule when it is one of the shim's rules that said no.
std::string refusal_for(int error, bool& by_rule)
{
  by_rule = true;
  switch (error) {
    case ELOOP: return "it is a symbolic link";
    case EISDIR: return "it is a directory";
    case ENXIO: return "it is a FIFO (named pipe), a socket or a device";  // e.g. a FIFO without a reader
    default: by_rule = false; return std::strerror(error);
  }
}

}  // namespace

opened_file open_own_file(std::string const& path, file_write how) noexcept
{
  opened_file result;
  int fd = -1;
  try {
    // Not truncated here: an existing file is cut only once it passed the checks below.
    int const flags =
      O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | (how == file_write::append ? O_APPEND : 0);
    fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) {
      result.why = refusal_for(errno, result.by_rule);
      return result;
    }
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      result.why = std::strerror(errno);
    } else if (!S_ISREG(info.st_mode)) {
      result.why = S_ISFIFO(info.st_mode) ? "it is a FIFO (named pipe)" : "it is not a regular file";
      result.by_rule = true;
    } else if (info.st_uid != ::geteuid()) {
      result.why = fmt::format("it belongs to another user (uid {})", static_cast<unsigned long>(info.st_uid));
      result.by_rule = true;
    } else if (info.st_nlink > 1) {  // a hard link planted to another file of the user's
      result.why = "it has other hard links";
      result.by_rule = true;
    } else if (::fcntl(fd, F_SETFL, how == file_write::append ? O_APPEND : 0) != 0) {
      result.why = std::strerror(errno);
    } else if (how == file_write::replace && ::ftruncate(fd, 0) != 0) {
      result.why = std::strerror(errno);
    } else {
      result.fd = fd;
      return result;
    }
  } catch (...) {  // no memory for the reason
    result.why.clear();
  }
  if (fd >= 0) { ::close(fd); }
  result.fd = -1;
  return result;
}

bool write_all(int fd, char const* text, std::size_t size) noexcept
{
  while (size > 0) {
    ssize_t const n = ::write(fd, text, size);
    if (n < 0) {
      if (errno == EINTR) { continue; }
      return false;
    }
    text += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

written_file write_own_file(std::string const& path, std::string const& text) noexcept
{
  opened_file const file = open_own_file(path, file_write::replace);
  if (file.fd < 0) { return {false, file.by_rule, file.why}; }
  bool written = write_all(file.fd, text.data(), text.size());
  int error = errno;
  if (::close(file.fd) != 0 && written) {
    written = false;
    error = errno;
  }
  return {true, false, written ? std::string{} : std::strerror(error)};
}

}  // namespace asyncshim::shim
