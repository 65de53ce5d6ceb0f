// Prints what each open file descriptor of this process refers to, one per
// line ("<fd> <target>"), for a test that exec()s it from a program under the
// shim: what it lists, the exec'd program inherited.
#include <dirent.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main()
{
  DIR* fds = opendir("/proc/self/fd");
  if (fds == nullptr) {
    std::perror("list_fds: /proc/self/fd");
    return 1;
  }
  int const listing = dirfd(fds);
  while (dirent const* entry = readdir(fds)) {
    if (entry->d_name[0] == '.' || std::atoi(entry->d_name) == listing) { continue; }
    std::string const link = std::string{"/proc/self/fd/"} + entry->d_name;
    char target[4096] = {};
    ssize_t const n = readlink(link.c_str(), target, sizeof target - 1);
    std::printf("%s %s\n", entry->d_name, n > 0 ? target : "?");
  }
  closedir(fds);
  return 0;
}
