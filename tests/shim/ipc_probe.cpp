// ipc_probe SCENARIO: legacy CUDA IPC (cudaIpcGetMemHandle,
// cudaIpcOpenMemHandle, cudaIpcCloseMemHandle) between processes, checked
// against what native CUDA does on an H200 with cudaMalloc memory. Runtime
// API only and no kernel, so it runs on the CUDA test doubles (CPU tier,
// under the shim) and on a GPU (natively and under the shim: both must pass).
// Child processes are this program again (fork + exec, as a CUDA program
// must), handed the handle in hexadecimal.
//
//   share [N]        a parent and N children (4) in the style of NVIDIA's
//                    simpleIPC: each child checks the parent's part and
//                    writes its own, the parent checks every part
//   driver-paths     the importer reaches cuIpcOpenMemHandle_v2 by dlsym and
//                    by cuGetProcAddress, and cuIpcCloseMemHandle by dlsym:
//                    one mapping, two opens (the CUDA 4.1 cuIpcOpenMemHandle,
//                    which natively refuses a second open, is left out)
//   semantics        flags, reopening, closing, cudaFree of an opened
//                    pointer, a handle of freed memory, of an interior
//                    pointer, a handle opened in the process that made it
//   exporter-frees   the exporter frees and reallocates while the importer
//                    has it open: the importer keeps the old bytes (GPU)
//   exporter-exits   the exporter exits while the importer has it open: the
//                    importer keeps the bytes
//   foreign-importer the importer runs without LD_PRELOAD: natively that
//                    opens; a handle of the shim's pool memory fails with
//                    cudaErrorInvalidValue (the expected error is the argument)
//   other-user       the importer runs as user nobody (only as root): the
//                    expected result is the argument (ok natively, refused
//                    under the shim)
//   pid-namespace    the importer runs in a PID namespace of its own, with its
//                    own /proc (unshare --pid --fork --mount-proc, where
//                    allowed): the expected result is the argument (it opens,
//                    natively and under the shim)
//   cross-device     the exporter's memory is on device 0, the importer opens
//                    it on device 1 (lazy peer access): it sees the bytes,
//                    cudaPointerGetAttributes says device 0, what it writes
//                    reaches the exporter; flags 0 there are invalid (needs
//                    two devices)
// Prints "<scenario>: ok" and exits 0 when every check held; each failed
// check prints a line and the exit status is 1. "SKIP: why" and 0 when the
// scenario cannot run here.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t chunk = 1 << 20;
int failures = 0;
char const* self = nullptr;

void expect(bool condition, std::string const& what)
{
  if (!condition) {
    std::printf("FAILED: %s\n", what.c_str());
    std::fflush(stdout);
    ++failures;
  }
}

void expect_error(cudaError_t got, cudaError_t wanted, std::string const& what)
{
  expect(got == wanted, what + ": " + cudaGetErrorName(got) + ", expected " + cudaGetErrorName(wanted));
  (void)cudaGetLastError();
}

std::string hex(cudaIpcMemHandle_t const& h)
{
  std::string out;
  char two[3];
  for (char c : h.reserved) {
    std::snprintf(two, sizeof two, "%02x", static_cast<unsigned char>(c));
    out += two;
  }
  return out;
}

cudaIpcMemHandle_t unhex(char const* text)
{
  cudaIpcMemHandle_t h{};
  for (std::size_t i = 0; i < sizeof h.reserved && text[2 * i] != 0; ++i) {
    unsigned value = 0;
    std::sscanf(text + 2 * i, "%2x", &value);
    h.reserved[i] = static_cast<char>(value);
  }
  return h;
}

// Whether `size` bytes at device address `p` all equal `value`.
bool holds(void const* p, std::size_t size, unsigned char value)
{
  std::vector<unsigned char> host(size);
  if (cudaMemcpy(host.data(), p, size, cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  for (unsigned char c : host) {
    if (c != value) { return false; }
  }
  return true;
}

void fill(void* p, std::size_t size, unsigned char value)
{
  expect(cudaMemset(p, value, size) == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess, "cudaMemset");
}

// Bytes that differ from their neighbours, so that a mapping at the wrong
// offset, or a copy of the wrong half, does not pass as a uniform fill would.
std::vector<unsigned char> pattern(std::size_t size, unsigned seed)
{
  std::vector<unsigned char> bytes(size);
  for (std::size_t i = 0; i < size; ++i) {
    bytes[i] = static_cast<unsigned char>((i * 131 + i / 4096 + seed) & 0xff);
  }
  return bytes;
}

// Whether the device bytes at `p` are `expected`.
bool holds(void const* p, std::vector<unsigned char> const& expected)
{
  std::vector<unsigned char> host(expected.size());
  if (cudaMemcpy(host.data(), p, host.size(), cudaMemcpyDeviceToHost) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return host == expected;
}

// Copies `bytes` from the host to `p`, complete on the device on return: a
// copy from pageable memory may still be in flight when cudaMemcpy returns,
// and another process reads these bytes next.
void write_bytes(void* p, std::vector<unsigned char> const& bytes, std::string const& what)
{
  expect(cudaMemcpy(p, bytes.data(), bytes.size(), cudaMemcpyHostToDevice) == cudaSuccess &&
           cudaDeviceSynchronize() == cudaSuccess,
         what);
}

struct pipe_pair {
  int read = -1;
  int write = -1;
};

pipe_pair make_pipe()
{
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(2);
  }
  return {fds[0], fds[1]};
}

void signal_peer(int fd) { expect(write(fd, "x", 1) == 1, "writing to the other process"); }
// False when the other end closed without writing (it exited).
bool wait_peer(int fd)
{
  char c = 0;
  return read(fd, &c, 1) == 1;
}

enum class as { same, without_preload, nobody, pid_namespace };

// User nobody may not reach this program or the preloaded library where they
// were built: copies of both in a directory of their own that everyone can read.
std::string nobody_program;
std::string nobody_preload;

bool copy_file(std::string const& from, std::string const& to)
{
  FILE* in = std::fopen(from.c_str(), "rb");
  FILE* out = in != nullptr ? std::fopen(to.c_str(), "wb") : nullptr;
  bool ok = out != nullptr;
  char buffer[65536];
  for (std::size_t n = 0; ok && in != nullptr && (n = std::fread(buffer, 1, sizeof buffer, in)) > 0;) {
    ok = std::fwrite(buffer, 1, n, out) == n;
  }
  if (in != nullptr) { std::fclose(in); }
  if (out != nullptr && std::fclose(out) != 0) { ok = false; }
  return ok && chmod(to.c_str(), 0755) == 0;
}

bool prepare_copies_for_nobody()
{
  char dir[] = "/tmp/ipc_probe.XXXXXX";
  if (mkdtemp(dir) == nullptr || chmod(dir, 0755) != 0) { return false; }
  nobody_program = std::string{dir} + "/ipc_probe";
  if (!copy_file(self, nobody_program)) { return false; }
  if (char const* preload = std::getenv("LD_PRELOAD"); preload != nullptr && *preload != 0) {
    nobody_preload = std::string{dir} + "/libasyncshim.so";
    if (std::strchr(preload, ':') != nullptr || std::strchr(preload, ' ') != nullptr ||
        !copy_file(preload, nobody_preload)) {
      return false;
    }
  }
  return true;
}

void become_nobody()
{
  passwd const* nobody = getpwnam("nobody");
  if (nobody == nullptr || setgid(nobody->pw_gid) != 0 || setuid(nobody->pw_uid) != 0) { _exit(3); }
  if (!nobody_preload.empty()) { setenv("LD_PRELOAD", nobody_preload.c_str(), 1); }
}

// Starts `self child ROLE HANDLE UP DOWN [ARG]`; `up` is the child's end to
// write to, `down` the child's end to read from.
pid_t spawn(char const* role, cudaIpcMemHandle_t const& handle, int up, int down, std::string const& arg = "",
            as who = as::same)
{
  pid_t const pid = fork();
  if (pid != 0) { return pid; }
  if (who == as::without_preload) { unsetenv("LD_PRELOAD"); }
  if (who == as::nobody) { become_nobody(); }
  std::string const h = hex(handle);
  std::string const u = std::to_string(up);
  std::string const d = std::to_string(down);
  if (who == as::pid_namespace) {
    execlp("unshare", "unshare", "--pid", "--fork", "--mount-proc", self, "child", role, h.c_str(), u.c_str(),
           d.c_str(), arg.c_str(), static_cast<char*>(nullptr));
  } else if (who == as::nobody) {
    execl(nobody_program.c_str(), nobody_program.c_str(), "child", role, h.c_str(), u.c_str(), d.c_str(), arg.c_str(),
          static_cast<char*>(nullptr));
  } else {
    execl(self, self, "child", role, h.c_str(), u.c_str(), d.c_str(), arg.c_str(), static_cast<char*>(nullptr));
  }
  _exit(4);
}

void expect_child(pid_t pid, std::string const& what)
{
  int status = 0;
  bool const waited = waitpid(pid, &status, 0) == pid;
  int const code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  expect(waited && code == 0, what + " exited with " + std::to_string(code));
}

void* device_alloc(std::size_t size)
{
  void* p = nullptr;
  expect(cudaMalloc(&p, size) == cudaSuccess, "cudaMalloc");
  return p;
}

cudaIpcMemHandle_t handle_of(void* p)
{
  cudaIpcMemHandle_t h{};
  expect_error(cudaIpcGetMemHandle(&h, p), cudaSuccess, "cudaIpcGetMemHandle");
  return h;
}

// ---- the exporting side of each scenario

int share(int children)
{
  void* buffer = device_alloc(chunk * static_cast<std::size_t>(children + 1));
  fill(buffer, chunk * static_cast<std::size_t>(children + 1), 0);
  fill(buffer, chunk, 0x10);
  cudaIpcMemHandle_t const h = handle_of(buffer);
  cudaIpcMemHandle_t again = handle_of(buffer);
  expect(std::memcmp(&h, &again, sizeof h) == 0, "a second handle of the same memory is the same");
  std::vector<pid_t> pids;
  for (int i = 0; i < children; ++i) {
    pids.push_back(spawn("share", h, -1, -1, std::to_string(i)));
  }
  for (int i = 0; i < children; ++i) {
    expect_child(pids[static_cast<std::size_t>(i)], "child " + std::to_string(i));
  }
  auto* base = static_cast<unsigned char*>(buffer);
  for (int i = 0; i < children; ++i) {
    expect(holds(base + chunk * static_cast<std::size_t>(i + 1), chunk, static_cast<unsigned char>(0x20 + i)),
           "the parent sees child " + std::to_string(i) + "'s part");
  }
  expect(holds(base, chunk, 0x10), "the parent's own part is unchanged");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree");
  return 0;
}

int semantics()
{
  void* buffer = device_alloc(4 * chunk);
  fill(buffer, 4 * chunk, 0x5a);
  cudaIpcMemHandle_t const h = handle_of(buffer);
  cudaIpcMemHandle_t const inner = handle_of(static_cast<char*>(buffer) + 4096);
  void* gone = device_alloc(chunk);
  cudaIpcMemHandle_t const freed = handle_of(gone);
  expect_error(cudaFree(gone), cudaSuccess, "cudaFree");
  void* own = nullptr;
  // Natively CUDA_ERROR_INVALID_CONTEXT, which the runtime reports as this.
  expect_error(cudaIpcOpenMemHandle(&own, h, cudaIpcMemLazyEnablePeerAccess), cudaErrorDeviceUninitialized,
               "opening a handle in the process that made it");
  pipe_pair up = make_pipe();
  pid_t const pid = spawn("semantics", h, up.write, -1, hex(inner) + hex(freed));
  expect_child(pid, "the importer");
  expect(holds(buffer, 4 * chunk, 0x5a), "the importer's cudaFree left the memory alone");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree");
  return 0;
}

int driver_paths()
{
  void* buffer = device_alloc(chunk);
  fill(buffer, chunk, 0x5a);
  pid_t const pid = spawn("driver-paths", handle_of(buffer), -1, -1);
  expect_child(pid, "the importer");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree");
  return 0;
}

int exporter_frees()
{
  void* buffer = device_alloc(4 * chunk);
  fill(buffer, 4 * chunk, 0x5a);
  cudaIpcMemHandle_t const h = handle_of(buffer);
  pipe_pair up = make_pipe();
  pipe_pair down = make_pipe();
  pid_t const pid = spawn("exporter-frees", h, up.write, down.read);
  expect(wait_peer(up.read), "the importer opened the handle");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree while another process has it open");
  void* reused = device_alloc(4 * chunk);
  fill(reused, 4 * chunk, 0x77);
  signal_peer(down.write);
  expect_child(pid, "the importer");
  expect_error(cudaFree(reused), cudaSuccess, "cudaFree");
  return 0;
}

// Run by the coordinator as a process of its own, which exits once the importer has the handle open.
int exits_exporter(int up, int down)
{
  void* buffer = device_alloc(4 * chunk);
  fill(buffer, 4 * chunk, 0x5a);
  cudaIpcMemHandle_t const h = handle_of(buffer);
  std::string const text = hex(h);
  expect(write(up, text.data(), text.size()) == static_cast<ssize_t>(text.size()), "handing the handle over");
  expect(wait_peer(down), "the importer opened the handle");
  return failures == 0 ? 0 : 1;  // exits with the memory still allocated
}

int exporter_exits()
{
  // Neither of these processes touches CUDA before exec.
  pipe_pair handle_pipe = make_pipe();
  pipe_pair opened = make_pipe();
  pid_t const exporter = fork();
  if (exporter == 0) {
    std::string const u = std::to_string(handle_pipe.write);
    std::string const d = std::to_string(opened.read);
    execl(self, self, "exits-exporter", u.c_str(), d.c_str(), static_cast<char*>(nullptr));
    _exit(4);
  }
  close(handle_pipe.write);
  char text[129] = {};
  expect(read(handle_pipe.read, text, 128) == 128, "the exporter handed the handle over");
  pipe_pair exited = make_pipe();
  pid_t const importer = spawn("exporter-exits", unhex(text), opened.write, exited.read);
  close(opened.write);
  expect_child(exporter, "the exporter");
  signal_peer(exited.write);  // the exporter is gone now
  expect_child(importer, "the importer");
  return 0;
}

int foreign_or_other_user(as who, char const* expected)
{
  if (who == as::nobody && geteuid() != 0) {
    std::printf("SKIP: not root: cannot start a process of another user\n");
    std::exit(0);
  }
  if (who == as::nobody) {
    // Whether nobody can run the copy at all (it finds its libraries).
    pid_t const pid = prepare_copies_for_nobody() ? fork() : -1;
    if (pid == 0) {
      become_nobody();
      execl(nobody_program.c_str(), nobody_program.c_str(), "runs", static_cast<char*>(nullptr));
      _exit(4);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::printf("SKIP: user nobody cannot run a copy of this program here (no such user, or its libraries are "
                  "not open to others)\n");
      std::exit(0);
    }
  }
  if (who == as::pid_namespace && std::system("unshare --pid --fork --mount-proc true >/dev/null 2>&1") != 0) {
    std::printf("SKIP: cannot make a PID namespace here (unshare --pid --fork --mount-proc needs CAP_SYS_ADMIN)\n");
    std::exit(0);
  }
  void* buffer = device_alloc(chunk);
  fill(buffer, chunk, 0x5a);
  cudaIpcMemHandle_t const h = handle_of(buffer);
  pid_t const pid = spawn("open-once", h, -1, -1, expected, who);
  expect_child(pid, who == as::nobody          ? "the importer of user nobody"
                    : who == as::pid_namespace ? "the importer in another PID namespace"
                                               : "the importer without LD_PRELOAD");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree");
  // The importer of another user closes its connection at once; the
  // exporter's channel thread says it refused once it gets to it, which a
  // busy machine may delay past this process's exit.
  if (who == as::nobody) { std::this_thread::sleep_for(std::chrono::seconds{2}); }
  return 0;
}

// The exporter's memory on device 0, opened on device 1. The exporter
// writes the first half, the importer checks it and writes the second.
constexpr unsigned exporter_seed = 0x11;
constexpr unsigned importer_seed = 0x77;

int cross_device(int device_count)
{
  if (device_count < 2) {
    std::printf("SKIP: cross-device needs two devices (cudaGetDeviceCount: %d)\n", device_count);
    std::exit(0);
  }
  int can_access = 0;
  if (cudaDeviceCanAccessPeer(&can_access, 1, 0) != cudaSuccess || can_access == 0) {
    (void)cudaGetLastError();
    std::printf("SKIP: device 1 cannot map device 0's memory (cudaDeviceCanAccessPeer)\n");
    std::exit(0);
  }
  expect_error(cudaSetDevice(0), cudaSuccess, "cudaSetDevice(0)");
  void* buffer = device_alloc(2 * chunk);
  if (buffer == nullptr) { return 0; }
  auto* base = static_cast<unsigned char*>(buffer);
  write_bytes(base, pattern(chunk, exporter_seed), "the exporter writing its half");
  fill(base + chunk, chunk, 0);
  pid_t const pid = spawn("cross-device", handle_of(buffer), -1, -1);
  expect_child(pid, "the importer on device 1");
  expect(holds(base + chunk, pattern(chunk, importer_seed)), "the exporter sees what the importer on device 1 wrote");
  expect(holds(base, pattern(chunk, exporter_seed)), "the exporter's own half is unchanged");
  expect_error(cudaFree(buffer), cudaSuccess, "cudaFree");
  return 0;
}

// ---- the importing side

void child(char const* role, cudaIpcMemHandle_t const& h, int up, int down, char const* arg)
{
  unsigned const lazy = cudaIpcMemLazyEnablePeerAccess;
  if (std::strcmp(role, "share") == 0) {
    int const index = std::atoi(arg);
    void* p = nullptr;
    expect_error(cudaIpcOpenMemHandle(&p, h, lazy), cudaSuccess, "cudaIpcOpenMemHandle");
    if (p == nullptr) { return; }
    auto* base = static_cast<unsigned char*>(p);
    expect(holds(base, chunk, 0x10), "the child sees the parent's part");
    fill(base + chunk * static_cast<std::size_t>(index + 1), chunk, static_cast<unsigned char>(0x20 + index));
    expect_error(cudaIpcCloseMemHandle(p), cudaSuccess, "cudaIpcCloseMemHandle");
  } else if (std::strcmp(role, "semantics") == 0) {
    cudaIpcMemHandle_t const inner = unhex(arg);
    cudaIpcMemHandle_t const freed = unhex(arg + 128);
    void* p = nullptr;
    expect_error(cudaIpcOpenMemHandle(&p, h, 0), cudaErrorInvalidValue, "flags 0");
    expect_error(cudaIpcOpenMemHandle(&p, h, 2), cudaErrorInvalidValue, "flags 2");
    expect_error(cudaIpcOpenMemHandle(&p, h, lazy), cudaSuccess, "cudaIpcOpenMemHandle");
    if (p == nullptr) { return; }
    expect(holds(p, 4 * chunk, 0x5a), "the importer sees the exporter's bytes");
    void* again = nullptr;
    expect_error(cudaIpcOpenMemHandle(&again, h, lazy), cudaSuccess, "opening the handle again");
    expect(again == p, "opening a handle again gives the same pointer");
    void* interior = nullptr;
    expect_error(cudaIpcOpenMemHandle(&interior, inner, lazy), cudaSuccess, "the handle of an interior pointer");
    expect(interior == p, "the handle of an interior pointer opens at the allocation's start");
    void* stale = nullptr;
    expect_error(cudaIpcOpenMemHandle(&stale, freed, lazy), cudaErrorInvalidValue, "a handle of freed memory");
    cudaIpcMemHandle_t zero{};
    expect_error(cudaIpcOpenMemHandle(&stale, zero, lazy), cudaErrorInvalidValue, "a handle of zeros");
    expect_error(cudaFree(p), cudaErrorInvalidValue, "cudaFree of an opened pointer");
    expect(holds(p, 4 * chunk, 0x5a), "still mapped after that cudaFree");
    for (int i = 0; i < 3; ++i) {
      expect_error(cudaIpcCloseMemHandle(p), cudaSuccess, "close " + std::to_string(i + 1) + " of 3 opens");
    }
    expect_error(cudaIpcCloseMemHandle(p), cudaErrorInvalidValue, "a close more than opens");
    expect_error(cudaIpcCloseMemHandle(reinterpret_cast<void*>(0x1234)), cudaErrorInvalidValue,
                 "closing a pointer never opened");
  } else if (std::strcmp(role, "exporter-frees") == 0 || std::strcmp(role, "exporter-exits") == 0) {
    void* p = nullptr;
    expect_error(cudaIpcOpenMemHandle(&p, h, lazy), cudaSuccess, "cudaIpcOpenMemHandle");
    expect(p != nullptr && holds(p, 4 * chunk, 0x5a), "the importer sees the exporter's bytes");
    signal_peer(up);
    (void)wait_peer(down);  // the exporter freed and reallocated, or exited
    if (p == nullptr) { return; }
    expect(holds(p, 4 * chunk, 0x5a), std::string{"the importer keeps the bytes after "} +
                                        (role[9] == 'f' ? "the exporter freed them" : "the exporter exited"));
    expect_error(cudaIpcCloseMemHandle(p), cudaSuccess, "cudaIpcCloseMemHandle");
  } else if (std::strcmp(role, "driver-paths") == 0) {
    using open_fn = CUresult (*)(CUdeviceptr*, CUipcMemHandle, unsigned);
    using close_fn = CUresult (*)(CUdeviceptr);
    using lookup_fn = CUresult (*)(char const*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
    (void)cudaFree(nullptr);  // the runtime makes the context current
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (driver == nullptr) { driver = dlopen("libcuda.so.1", RTLD_NOW); }
    expect(driver != nullptr, "dlopen libcuda.so.1");
    if (driver == nullptr) { return; }
    open_fn opens[2] = {reinterpret_cast<open_fn>(dlsym(driver, "cuIpcOpenMemHandle_v2")), nullptr};
    auto const lookup = reinterpret_cast<lookup_fn>(dlsym(driver, "cuGetProcAddress_v2"));
    CUdriverProcAddressQueryResult status{};
    void* found = nullptr;
    expect(lookup != nullptr && lookup("cuIpcOpenMemHandle", &found, 12000, 0, &status) == CUDA_SUCCESS,
           "cuGetProcAddress_v2(cuIpcOpenMemHandle)");
    opens[1] = reinterpret_cast<open_fn>(found);
    auto const close = reinterpret_cast<close_fn>(dlsym(driver, "cuIpcCloseMemHandle"));
    CUipcMemHandle handle{};
    std::memcpy(handle.reserved, h.reserved, sizeof handle.reserved);
    CUdeviceptr first = 0;
    char const* paths[2] = {"dlsym(cuIpcOpenMemHandle_v2)", "cuGetProcAddress"};
    for (int i = 0; i < 2; ++i) {
      CUdeviceptr p = 0;
      expect(opens[i] != nullptr && opens[i](&p, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) == CUDA_SUCCESS,
             std::string{"opening by "} + paths[i]);
      if (i == 0) { first = p; }
      expect(p != 0 && p == first, std::string{"the same pointer by "} + paths[i]);
    }
    expect(first != 0 && holds(reinterpret_cast<void*>(first), chunk, 0x5a), "the importer sees the exporter's bytes");
    for (int i = 0; i < 2; ++i) {
      expect(close != nullptr && close(first) == CUDA_SUCCESS, "close " + std::to_string(i + 1) + " of 2");
    }
    expect(close != nullptr && close(first) == CUDA_ERROR_INVALID_VALUE, "a close more than opens");
  } else if (std::strcmp(role, "cross-device") == 0) {
    // Before anything else, so that the runtime's context is device 1's.
    expect_error(cudaSetDevice(1), cudaSuccess, "cudaSetDevice(1)");
    void* p = nullptr;
    // The flags must be cudaIpcMemLazyEnablePeerAccess (CUDA's documentation;
    // 0 measured invalid on the exporter's device, see "semantics"): nothing
    // less opens on another device either.
    expect_error(cudaIpcOpenMemHandle(&p, h, 0), cudaErrorInvalidValue, "flags 0 on device 1");
    p = nullptr;
    expect_error(cudaIpcOpenMemHandle(&p, h, lazy), cudaSuccess, "cudaIpcOpenMemHandle on device 1");
    if (p == nullptr) { return; }
    int current = -1;
    expect(cudaGetDevice(&current) == cudaSuccess && current == 1,
           "device 1 is still current after the open (device " + std::to_string(current) + ")");
    cudaPointerAttributes attributes{};
    expect_error(cudaPointerGetAttributes(&attributes, p), cudaSuccess, "cudaPointerGetAttributes");
    // The device where the memory lives, not the one that opened it.
    expect(attributes.type == cudaMemoryTypeDevice && attributes.device == 0,
           "the opened memory is device memory of device 0 (type " + std::to_string(static_cast<int>(attributes.type)) +
             ", device " + std::to_string(attributes.device) + ")");
    auto* base = static_cast<unsigned char*>(p);
    expect(holds(base, pattern(chunk, exporter_seed)), "the importer on device 1 sees the exporter's bytes");
    write_bytes(base + chunk, pattern(chunk, importer_seed), "the importer writing its half on device 1");
    expect_error(cudaIpcCloseMemHandle(p), cudaSuccess, "cudaIpcCloseMemHandle");
  } else if (std::strcmp(role, "open-once") == 0) {
    if (cudaError_t const started = cudaFree(nullptr); started != cudaSuccess) {
      expect(false, std::string{"CUDA does not start in this process: "} + cudaGetErrorName(started));
      return;
    }
    void* p = nullptr;
    cudaError_t const r = cudaIpcOpenMemHandle(&p, h, lazy);
    expect(std::strcmp(cudaGetErrorName(r), arg) == 0,
           std::string{"cudaIpcOpenMemHandle: "} + cudaGetErrorName(r) + ", expected " + arg);
    if (r == cudaSuccess) {
      expect(holds(p, chunk, 0x5a), "the importer sees the exporter's bytes");
      expect_error(cudaIpcCloseMemHandle(p), cudaSuccess, "cudaIpcCloseMemHandle");
    }
  } else {
    std::printf("FAILED: unknown role %s\n", role);
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv)
{
  self = argv[0];
  alarm(120);  // never hang a test run
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc >= 6 && std::strcmp(argv[1], "child") == 0) {
    child(argv[2], unhex(argv[3]), std::atoi(argv[4]), std::atoi(argv[5]), argc > 6 ? argv[6] : "");
    return failures == 0 ? 0 : 1;
  }
  if (argc == 2 && std::strcmp(argv[1], "runs") == 0) { return 0; }
  if (argc == 4 && std::strcmp(argv[1], "exits-exporter") == 0) {
    return exits_exporter(std::atoi(argv[2]), std::atoi(argv[3]));
  }
  std::string const scenario = argc > 1 ? argv[1] : "";
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess || device_count == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  if (scenario == "share") {
    share(argc > 2 ? std::atoi(argv[2]) : 4);
  } else if (scenario == "semantics") {
    semantics();
  } else if (scenario == "driver-paths") {
    driver_paths();
  } else if (scenario == "exporter-frees") {
    exporter_frees();
  } else if (scenario == "exporter-exits") {
    exporter_exits();
  } else if (scenario == "foreign-importer" && argc > 2) {
    foreign_or_other_user(as::without_preload, argv[2]);
  } else if (scenario == "other-user" && argc > 2) {
    foreign_or_other_user(as::nobody, argv[2]);
  } else if (scenario == "pid-namespace" && argc > 2) {
    foreign_or_other_user(as::pid_namespace, argv[2]);
  } else if (scenario == "cross-device") {
    cross_device(device_count);
  } else {
    std::fprintf(stderr, "usage: ipc_probe share [N] | semantics | driver-paths | exporter-frees | exporter-exits | "
                         "foreign-importer ERROR | other-user ERROR | pid-namespace ERROR | cross-device\n");
    return 2;
  }
  if (failures == 0) { std::printf("%s: ok\n", scenario.c_str()); }
  return failures == 0 ? 0 : 1;
}
