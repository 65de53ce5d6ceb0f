// shared_devices.cpp: the memory that the processes of one CUDA_DOUBLE_SHARED_MEMORY
// file take from each other. Part of the driver double, libcuda.so.1.
#include "shared_devices.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "model.hpp"

namespace cuda_double {
namespace {

struct process_slot {
  std::int64_t pid;  // 0: free
  std::uint64_t taken[shared_device_count];
};

struct shared_file {
  process_slot* slots = nullptr;  // shared_slots of them, mapped from the file; nullptr: not shared
  int mine = -1;                  // this process's slot
  pid_t owner = 0;                // the pid that claimed it (a forked child claims its own)
};

shared_file& shared()
{
  static shared_file* const s = [] {
    auto* made = new shared_file;
    std::string const& path = config().shared_memory;
    if (path.empty()) { return made; }
    int const fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) {
      std::fprintf(stderr, "cuda_double: ignoring CUDA_DOUBLE_SHARED_MEMORY=\"%s\": cannot open it\n", path.c_str());
      return made;
    }
    off_t const size = static_cast<off_t>(sizeof(process_slot) * shared_slots);
    // Every process grows the file to the same size: a zeroed file is a file of free slots.
    if (::lseek(fd, 0, SEEK_END) < size && ::ftruncate(fd, size) != 0) {
      ::close(fd);
      return made;
    }
    void* mapped = ::mmap(nullptr, static_cast<std::size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
    if (mapped != MAP_FAILED) { made->slots = static_cast<process_slot*>(mapped); }
    return made;
  }();
  return *s;
}

bool alive(std::int64_t pid) { return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM); }

void leave()
{
  shared_file& s = shared();
  if (s.slots == nullptr || s.mine < 0 || s.owner != ::getpid()) { return; }
  process_slot& slot = s.slots[s.mine];
  for (auto& t : slot.taken) {
    __atomic_store_n(&t, 0, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&slot.pid, 0, __ATOMIC_RELEASE);
}

// This process's slot, claimed at its first publish (again in a forked child).
process_slot* my_slot()
{
  shared_file& s = shared();
  if (s.slots == nullptr) { return nullptr; }
  pid_t const me = ::getpid();
  if (s.mine >= 0 && s.owner == me) { return &s.slots[s.mine]; }
  for (int i = 0; i < shared_slots; ++i) {
    std::int64_t pid = __atomic_load_n(&s.slots[i].pid, __ATOMIC_ACQUIRE);
    if (pid != 0 && alive(pid)) { continue; }
    if (!__atomic_compare_exchange_n(&s.slots[i].pid, &pid, static_cast<std::int64_t>(me), false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
      continue;
    }
    for (auto& t : s.slots[i].taken) {
      __atomic_store_n(&t, 0, __ATOMIC_RELAXED);
    }
    bool const first = s.mine < 0;
    s.mine = i;
    s.owner = me;
    if (first) {
      std::atexit(leave);  // a forked child inherits the registration
    }
    return &s.slots[i];
  }
  std::fprintf(stderr, "cuda_double: CUDA_DOUBLE_SHARED_MEMORY: all %d slots are taken\n", shared_slots);
  return nullptr;
}

}  // namespace

std::uint64_t shared_memory_file::taken_by_others(int device)
{
  shared_file& s = shared();
  if (s.slots == nullptr || device < 0 || device >= shared_device_count) { return 0; }
  pid_t const me = ::getpid();
  std::uint64_t total = 0;
  for (int i = 0; i < shared_slots; ++i) {
    std::int64_t const pid = __atomic_load_n(&s.slots[i].pid, __ATOMIC_ACQUIRE);
    if (pid == 0 || pid == me || !alive(pid)) { continue; }
    total += __atomic_load_n(&s.slots[i].taken[device], __ATOMIC_RELAXED);
  }
  return total;
}

void shared_memory_file::publish(int device, std::uint64_t bytes)
{
  if (device < 0 || device >= shared_device_count) { return; }
  if (process_slot* slot = my_slot()) { __atomic_store_n(&slot->taken[device], bytes, __ATOMIC_RELAXED); }
}

int shared_memory_file::processes(int device, std::uint64_t mine, unsigned* pids, unsigned long long* bytes, int max)
{
  shared_file& s = shared();
  int n = 0;
  if (s.slots == nullptr || device < 0 || device >= shared_device_count) {
    if (mine > 0 && max > 0) {
      pids[0] = static_cast<unsigned>(::getpid());
      bytes[0] = mine;
      n = 1;
    }
    return n;
  }
  for (int i = 0; i < shared_slots && n < max; ++i) {
    std::int64_t const pid = __atomic_load_n(&s.slots[i].pid, __ATOMIC_ACQUIRE);
    std::uint64_t const taken = __atomic_load_n(&s.slots[i].taken[device], __ATOMIC_RELAXED);
    if (pid == 0 || taken == 0 || !alive(pid)) { continue; }
    pids[n] = static_cast<unsigned>(pid);
    bytes[n] = taken;
    ++n;
  }
  return n;
}

shared_memory_file& shared_devices()
{
  static shared_memory_file devices;
  return devices;
}

}  // namespace cuda_double
