// Opening the files the shim writes (ASYNCSHIM_LOG_FILE, ASYNCSHIM_STATS_FILE)
// the way SECURITY.md promises: close-on-exec, never when the file itself is
// a symbolic link, never blocking on a FIFO, and only a regular file with no
// other hard link that belongs to the process's own (effective) user; a new
// file is created with mode 0644 under the umask. An existing file is
// truncated (or appended to) only once all of that has been checked.
#pragma once

#include <string>

namespace asyncshim::shim {

enum class file_write { append, replace };

struct opened_file {
  int fd = -1;      ///< -1 when refused
  std::string why;  ///< when refused: a reason for people, e.g. "it is a symbolic link"
  /// The refusal is the shim's rule (a link, a directory, a FIFO, another
  /// user's file), not the system's (no such folder, no permission).
  bool by_rule = false;
};

/// What a refusal by rule adds to its message.
inline constexpr char const* own_file_rule =
  "asyncshim writes only regular files of its own user, never a symbolic link or a file with other hard links";

[[nodiscard]] opened_file open_own_file(std::string const& path, file_write how) noexcept;

/// Writes all of `text` to `fd`; false (errno set) on failure.
[[nodiscard]] bool write_all(int fd, char const* text, std::size_t size) noexcept;

/// A whole file written at once (the statistics, the leak report): replaced,
/// opened as open_own_file() opens it. `why` is empty when it was written.
struct written_file {
  bool opened = false;  ///< false: refused or not opened (opened_file's why and by_rule)
  bool by_rule = false;
  std::string why;
};
[[nodiscard]] written_file write_own_file(std::string const& path, std::string const& text) noexcept;

}  // namespace asyncshim::shim
