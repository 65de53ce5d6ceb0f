// Stress test of the ordering guarantees that cudaMalloc/cudaFree give a
// program, run with and without libasyncshim.so (ASYNCSHIM_ORDERING=device,
// stream, sync). Natively, cudaFree waits for all work queued on the device
// before it, and memory from cudaMalloc is usable from any stream at once. A
// pool's cudaFreeAsync on the legacy stream does not wait for streams created
// with cudaStreamNonBlocking, so a block could be handed out again while a
// kernel on such a stream still reads or writes it: this program makes that as
// likely as it can and counts the damage.
//
// Threads (--threads, default 16), each with its own non-blocking stream and
// the legacy stream, allocate buffers of mixed sizes (256 B .. 256 MiB, mostly
// small) and fill each, with a kernel, with a pattern made of the buffer's
// 64-bit allocation id and the word index. Buffers are verified by a kernel that
// adds the bytes that differ from the pattern to a device counter of that
// allocation (corrupted_bytes sums them over all verifications; a buffer is
// verified once or twice), and freed right after the verify kernel was launched (on the
// thread's non-blocking stream, the kernel slowed down on purpose), or freed
// right after their fill kernel was launched, or handed to other threads
// through a shared queue (right after their fill, or right after a verify
// kernel was launched on them), which verify and free them (or free them at
// once), or kept a while and verified later. Fills run on the legacy stream for part
// of the buffers. Work of another stream is waited for with events exactly
// where the native semantics need it, and nowhere else: a correct allocator
// gives zero corrupted bytes.
//
// Some verifications read a buffer in other ways than a plain kernel launch:
// after a slow host function on the stream, through a copy on the stream (the
// copy is then verified), or with a graph launch. With --size-classes N the
// sizes come from N fixed sizes (256 B .. 1 MiB), so that most allocations can
// be served with a block of the same size freed a moment before (the shim's
// reuse cache under device ordering).
//
// With --blocking-streams the threads' streams are blocking ones, which
// synchronize with the legacy stream: stream ordering must then see no
// corruption either (README, "Choosing an ordering"). Device ordering then
// frees in the legacy stream's order (no non-blocking stream exists), and
// --late-non-blocking adds the moment that ends: halfway through, each thread
// makes a non-blocking stream and uses it (and non-blocking temporary
// streams) from then on, while blocks freed in order before may still be in
// use on the legacy and the blocking streams. With --side-streams N, N
// non-blocking streams that all threads share are made at the start, and a
// tenth of the fills and verifications run on one of them: with
// --blocking-streams they are the only non-blocking streams, idle most of
// the time (device ordering then frees in order while none has work in
// progress, and a block handed out again is filled on one at once).
//
// Two controls tell a fault of the allocator from one of the program or the
// driver: --fresh-events (no event is recorded twice) and --deferred-free-ms N
// (cudaFree is made by one thread every N ms, so no block can be reused while
// the program uses it; natively the device runs on between those frees'
// synchronizations). Corruption with --deferred-free-ms and no shim is not the
// allocator's. A third control, --program-pool cudaMalloc|cudaMallocAsync,
// has no cudaFree in the run at all: the program keeps what it frees, and
// one thread makes a cudaDeviceSynchronize every millisecond and only then
// lets a block freed before it be handed out again, either from the
// program's own lists (cudaMalloc) or by cudaFreeAsync on the legacy stream
// to the device's default pool, which cudaMallocAsync on the legacy stream
// allocates from (cudaMallocAsync: the pool operations on the legacy stream
// that the shim makes, without the shim). The device then runs on as under
// the shim, and an early verify there is not the shim's.
//
// Every verify kernel also checks, as it starts, that its buffer's fill has
// finished (early_verifies counts those that started before: a wait that did
// not hold, whatever the bytes). For each corrupted buffer the
// program says what happened to it (explain_corruption), including when its
// fill started and ended and which event its last verify waited for.
//
// The exact check, which needs no damaged byte: every access to a buffer
// records when it ran on the device's clock (globaltimer): kernels from
// their first block's start to their last block's end, copies and host
// functions between two one-thread stamp kernels queued around them. After
// the run, for every two owners of overlapping address ranges (every
// allocation, the threads' scratch buffers included), the later one's first
// access must start no earlier than the earlier one's last access ended, and
// the later one must have been allocated after the earlier one was freed;
// each that does not is an overlap (overlaps=, each reported with both
// histories). The bytes are the second witness.
//
// An operation is one cudaMalloc or one cudaFree (--operations, default
// 1000000, i.e. 500000 allocations, each freed once). The live set is bounded
// by --max-live-bytes (default 8 GiB). One summary line at the end:
//   ordering_stress: ordering=<ASYNCSHIM_ORDERING or unset> shim=<yes|no> threads=16 operations=1000000
//     allocations=500000 bytes_verified=... corrupted_bytes=0 corrupted_buffers=0 early_verifies=0
//     overlaps=0 seconds=...
// Exit 0 when no byte was corrupted, no verify started early and no two
// owners overlapped (or with --allow-corruption), 1 when any of these
// happened, 2 on an unexpected CUDA error or bad options. "SKIP: no CUDA
// device" and exit 0 where there is no device.
#include "byte_literals.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace {

using byte_literals::GiB;
using byte_literals::KiB;
using byte_literals::MiB;

[[noreturn]] void cuda_failure(char const* what, cudaError_t e, int line)
{
  std::printf("ordering_stress: unexpected CUDA error: %s returned %s (%s) at line %d\n", what, cudaGetErrorName(e),
              cudaGetErrorString(e), line);
  std::fflush(stdout);
  std::_Exit(2);  // other threads are still inside CUDA: no destructors, no atexit handlers
}

#define CK(call)                                                  \
  do {                                                            \
    cudaError_t const e_ = (call);                                \
    if (e_ != cudaSuccess) { cuda_failure(#call, e_, __LINE__); } \
  } while (0)

#define CK_LAUNCH(what) CK((what, cudaGetLastError()))

// ---- device side --------------------------------------------------------------

__host__ __device__ inline std::uint64_t pattern(std::uint64_t id, std::uint64_t word)
{
  std::uint64_t x = id * 0x9E3779B97F4A7C15ull + word * 0xD1B54A32D192ED03ull + 0x632BE59BD9B4E019ull;
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

__device__ inline unsigned long long device_clock_ns()
{
  unsigned long long t = 0;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// When one access to a buffer ran, on the device's clock: start is the
// earliest and end the latest of what its blocks (or its stamps) saw.
// Initialized to {~0, 0}: not run.
struct access {
  unsigned long long start_ns;
  unsigned long long end_ns;
};

// The slots of access records each allocation has: its fill and up to two
// verifications, each of which may take two (a host function, then a kernel).
constexpr int access_slots = 6;

__device__ inline void access_started(access* a)
{
  if (a != nullptr) { atomicMin(&a->start_ns, device_clock_ns()); }
}

__device__ inline void access_ended(access* a)
{
  if (a != nullptr) { atomicMax(&a->end_ns, device_clock_ns()); }
}

// One thread: marks the start (edge 0) or the end (edge 1) of the copy or
// host function queued between two of these, in the records of a and b.
__global__ void stamp_kernel(access* a, access* b, int edge)
{
  if (edge == 0) {
    access_started(a);
    access_started(b);
  } else {
    access_ended(a);
    access_ended(b);
  }
}

// When an allocation's fill kernel ran: how many of its blocks have finished,
// when the first one started and when the last one finished (the device's
// clock, in ns; 0: not yet).
struct fill_progress {
  unsigned long long blocks_done;
  unsigned long long done_at_ns;
  unsigned long long started_at_ns;
};

__global__ void fill_kernel(std::uint64_t* data, std::size_t words, std::uint64_t id, fill_progress* progress,
                            access* record)
{
  if (threadIdx.x == 0) {
    access_started(record);
    atomicCAS(&progress->started_at_ns, 0ull, device_clock_ns());
  }
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    data[i] = pattern(id, i);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicMax(&progress->done_at_ns, device_clock_ns());
    atomicAdd(&progress->blocks_done, 1ull);
    access_ended(record);
  }
}

// Sleeps delay_ns first and spin_ns before each word it reads, so that it is
// still reading when a block freed right after its launch could be refilled.
// What the verifications of one allocation found: the bytes that differed,
// and one word that differed (its index and value, to tell whose pattern it
// holds). Managed memory, not the allocator's.
struct damage {
  unsigned long long bytes;
  unsigned long long word;  // ~0: none recorded
  unsigned long long value;
  unsigned long long seen_at_ns;        // when that word was read
  unsigned long long fill_blocks_seen;  // how many blocks of the allocation's fill had finished then
  // A verify that started before the fill had finished: 1 + how many of the
  // fill's blocks had finished then (0: none did).
  unsigned long long early_blocks_seen;
  unsigned long long early_at_ns;  // when it started
};

// `early` counts verifies whose first block started before every block of
// the allocation's fill (`fill_blocks`) had finished: each verify is ordered
// after its fill, so any is a wait that did not hold, whatever the bytes.
__global__ void verify_kernel(std::uint64_t const* data, std::size_t words, std::uint64_t id, damage* found,
                              fill_progress* progress, unsigned fill_blocks, unsigned long long* early,
                              unsigned delay_ns, unsigned spin_ns, access* record)
{
  if (threadIdx.x == 0) { access_started(record); }
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    unsigned long long const finished = atomicAdd(&progress->blocks_done, 0ull);
    if (finished < fill_blocks) {
      atomicAdd(early, 1ull);
      if (atomicCAS(&found->early_blocks_seen, 0ull, finished + 1) == 0ull) { found->early_at_ns = device_clock_ns(); }
    }
  }
  if (delay_ns != 0) { __nanosleep(delay_ns); }
  unsigned long long bad = 0;
  std::size_t const stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += stride) {
    if (spin_ns != 0) { __nanosleep(spin_ns); }
    std::uint64_t const value = data[i];
    std::uint64_t diff = value ^ pattern(id, i);
    if (diff != 0) {  // count the bytes that differ
      if (bad == 0 && atomicCAS(&found->word, ~0ull, static_cast<unsigned long long>(i)) == ~0ull) {
        found->value = value;
        found->seen_at_ns = device_clock_ns();
        found->fill_blocks_seen = atomicAdd(&progress->blocks_done, 0ull);
      }
      diff |= diff >> 4;
      diff |= diff >> 2;
      diff |= diff >> 1;
      bad += static_cast<unsigned long long>(__popcll(diff & 0x0101010101010101ull));
    }
  }
  if (bad != 0) { atomicAdd(&found->bytes, bad); }
  __syncthreads();
  if (threadIdx.x == 0) { access_ended(record); }
}

// ---- options ------------------------------------------------------------------

// --program-pool (a native control): where the program's buffers come
// from and go back to. none: cudaMalloc and cudaFree. buffers: cudaMalloc,
// and a freed buffer is kept by the program and handed out again (same size)
// once a device synchronization made after its free has returned.
// async_legacy: cudaMallocAsync on the legacy stream from the device's
// default pool, and a freed buffer goes back by cudaFreeAsync on the legacy
// stream once such a synchronization has returned.
enum class program_pool_kind { none, buffers, async_legacy };

char const* name_of(program_pool_kind kind)
{
  switch (kind) {
    case program_pool_kind::buffers: return "cudaMalloc";
    case program_pool_kind::async_legacy: return "cudaMallocAsync";
    case program_pool_kind::none: break;
  }
  return "none";
}

struct options {
  int threads = 16;
  std::uint64_t operations = 1000000;
  std::uint64_t seed = 1;
  std::size_t max_live_bytes = 8 * GiB;
  bool allow_corruption = false;
  // A verify kernel first sleeps 0 .. this long: the window in which a block
  // freed right after its launch must not be handed out and refilled.
  std::uint64_t max_verify_delay_us = 200;
  // 0: sizes drawn at random (rarely the same twice); N: drawn from N fixed
  // sizes, so that most allocations can get a block of the same size that was
  // freed a moment before (the shim's reuse cache).
  int size_classes = 0;
  bool kernels_only = false;  // --kernels-only: every verification a plain kernel launch
  // --no-graphs: no graph launches; --no-host-functions: no host functions,
  // nor the copies that come after them. Those verifications become plain
  // kernel launches, to tell which kind a fault or a hang needs.
  bool graphs = true;
  bool host_functions = true;
  // Controls, to tell a fault of the allocator from one of the program or the
  // driver. --fresh-events: an event is never recorded twice (each wait gets
  // an event of its own, destroyed at the free), so no wait can depend on
  // how a recycled event behaves. --deferred-free-ms N: cudaFree is not
  // called at the free but by one thread every N ms for everything freed
  // meanwhile, so a block is never given out again while the program still
  // uses it, whatever the allocator; natively the device then runs on between
  // those frees' synchronizations, as it does under the shim's device ordering.
  bool fresh_events = false;
  unsigned deferred_free_ms = 0;
  // --program-pool: see program_pool_kind.
  program_pool_kind program_pool = program_pool_kind::none;
  // --blocking-streams: the threads' own streams (and the temporary ones) are
  // blocking streams, which synchronize with the legacy stream: what
  // ASYNCSHIM_ORDERING=stream is documented to be correct for.
  bool blocking_streams = false;
  // --late-non-blocking (with --blocking-streams): halfway through, each
  // thread switches to a non-blocking stream of its own.
  bool late_non_blocking = false;
  // --side-streams N: N non-blocking streams all threads share, made at the
  // start; a tenth of the fills and verifications run on one of them.
  int side_streams = 0;
};

[[noreturn]] void usage(char const* problem)
{
  if (problem != nullptr) { std::fprintf(stderr, "ordering_stress: %s\n", problem); }
  std::fprintf(stderr, "usage: ordering_stress [--threads N] [--operations N] [--seed N] [--max-live-bytes N[K|M|G]]\n"
                       "                       [--max-verify-delay-us N] [--size-classes N] [--kernels-only]\n"
                       "                       [--no-graphs] [--no-host-functions]\n"
                       "                       [--fresh-events] [--deferred-free-ms N] [--blocking-streams]\n"
                       "                       [--late-non-blocking] [--side-streams N]\n"
                       "                       [--program-pool cudaMalloc|cudaMallocAsync]\n"
                       "                       [--allow-corruption]\n"
                       "  an operation is one cudaMalloc or one cudaFree (default 1000000); exit 0: no corruption\n"
                       "  or overlap, 1: either (0 with --allow-corruption), 2: CUDA error or bad options\n");
  std::exit(2);
}

std::uint64_t parse_number(char const* text, bool allow_unit)
{
  char* end = nullptr;
  errno = 0;
  unsigned long long const value = std::strtoull(text, &end, 10);
  if (errno != 0 || end == text || text[0] == '-') { usage("bad number"); }
  std::uint64_t unit = 1;
  if (allow_unit && *end != '\0') {
    std::string const suffix = end;
    if (suffix == "K" || suffix == "KiB") {
      unit = KiB;
    } else if (suffix == "M" || suffix == "MiB") {
      unit = MiB;
    } else if (suffix == "G" || suffix == "GiB") {
      unit = GiB;
    } else {
      usage("bad unit (K, M, G: powers of 1024)");
    }
  } else if (*end != '\0') {
    usage("bad number");
  }
  return value * unit;
}

options parse_options(int argc, char** argv)
{
  options o;
  for (int i = 1; i < argc; ++i) {
    std::string const arg = argv[i];
    auto value = [&]() -> char const* {
      if (i + 1 >= argc) { usage("missing value"); }
      return argv[++i];
    };
    if (arg == "--threads") {
      o.threads = static_cast<int>(parse_number(value(), false));
    } else if (arg == "--operations") {
      o.operations = parse_number(value(), false);
    } else if (arg == "--seed") {
      o.seed = parse_number(value(), false);
    } else if (arg == "--max-live-bytes") {
      o.max_live_bytes = parse_number(value(), true);
    } else if (arg == "--allow-corruption") {
      o.allow_corruption = true;
    } else if (arg == "--max-verify-delay-us") {
      o.max_verify_delay_us = parse_number(value(), false);
    } else if (arg == "--kernels-only") {
      o.kernels_only = true;
    } else if (arg == "--no-graphs") {
      o.graphs = false;
    } else if (arg == "--no-host-functions") {
      o.host_functions = false;
    } else if (arg == "--size-classes") {
      o.size_classes = static_cast<int>(parse_number(value(), false));
    } else if (arg == "--blocking-streams") {
      o.blocking_streams = true;
    } else if (arg == "--late-non-blocking") {
      o.late_non_blocking = true;
    } else if (arg == "--side-streams") {
      o.side_streams = static_cast<int>(parse_number(value(), false));
    } else if (arg == "--fresh-events") {
      o.fresh_events = true;
    } else if (arg == "--deferred-free-ms") {
      std::uint64_t const ms = parse_number(value(), false);
      if (ms < 1 || ms > 10000) { usage("--deferred-free-ms must be 1..10000"); }
      o.deferred_free_ms = static_cast<unsigned>(ms);
    } else if (arg == "--program-pool") {
      std::string const kind = value();
      if (kind == "cudaMalloc") {
        o.program_pool = program_pool_kind::buffers;
      } else if (kind == "cudaMallocAsync") {
        o.program_pool = program_pool_kind::async_legacy;
      } else {
        usage("--program-pool must be cudaMalloc or cudaMallocAsync");
      }
    } else if (arg == "--help" || arg == "-h") {
      usage(nullptr);
    } else {
      usage(("unknown option " + arg).c_str());
    }
  }
  if (o.threads < 1 || o.threads > 1024) { usage("--threads must be 1..1024"); }
  if (o.max_verify_delay_us > 1000000) { usage("--max-verify-delay-us must be at most 1000000"); }
  if (o.operations < 2) { usage("--operations must be at least 2"); }
  if (o.size_classes < 0 || o.size_classes > 1000) { usage("--size-classes must be 0..1000"); }
  if (o.max_live_bytes < 512 * MiB) { usage("--max-live-bytes must be at least 512M"); }
  if (o.late_non_blocking && !o.blocking_streams) { usage("--late-non-blocking needs --blocking-streams"); }
  if (o.side_streams < 0 || o.side_streams > 64) { usage("--side-streams must be 0..64"); }
  if (o.program_pool != program_pool_kind::none && o.deferred_free_ms > 0) {
    usage("--program-pool and --deferred-free-ms are two different controls: give one");
  }
  return o;
}

bool shim_loaded()
{
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.find("libasyncshim.so") != std::string::npos) { return true; }
  }
  return false;
}

std::uint64_t splitmix(std::uint64_t x)
{
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// ---- shared state -----------------------------------------------------------

struct buffer {
  std::uint64_t* ptr = nullptr;
  std::size_t bytes = 0;
  std::uint64_t id = 0;
  cudaStream_t last = nullptr;  // the stream of the last work queued on it (its fill)
  cudaEvent_t done = nullptr;   // recorded on `last` after that work, when another stream must wait for it
};

// What happened to one allocation, to explain a corrupted one: who allocated
// and freed it, when (in the order of all cudaMalloc/cudaFree calls), where it
// was filled and how it was last verified.
struct history {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  unsigned fill_blocks = 0;
  std::uint64_t allocated_at = 0;
  std::uint64_t freed_at = 0;
  int allocated_by = -1;
  int freed_by = -1;
  char const* filled_on = "";
  char const* fate = "";
  char const* verified_on = "not verified";
  char const* verified_how = "";
  // How the last verify was ordered after the fill (order_after): the event
  // waited for, and how many times that event had been taken before.
  char const* wait = "none";
  std::uintptr_t wait_event = 0;
  unsigned wait_event_takes = 0;
  // What each access record (shared_state::accesses) was, and on which stream.
  int slots_used = 0;
  char const* slot_what[access_slots] = {};
  char const* slot_stream[access_slots] = {};
};

// A buffer made by cudaMalloc outside the allocations' budget (a thread's
// scratch buffer), for the overlap check: its address range, when it was
// allocated and freed, and one access record spanning all its uses.
struct scratch_owner {
  std::uintptr_t address = 0;
  std::size_t bytes = 0;
  std::uint64_t allocated_at = 0;
  std::uint64_t freed_at = 0;
};

struct shared_state {
  std::uint64_t allocation_budget = 0;
  std::size_t max_live_bytes = 0;
  unsigned max_verify_delay_ns = 0;
  int size_classes = 0;
  bool kernels_only = false;
  bool graphs = true;
  bool host_functions = true;
  bool fresh_events = false;
  unsigned stream_flags = cudaStreamNonBlocking;  // of the threads' own and temporary streams
  bool late_non_blocking = false;                 // then non-blocking ones from halfway through
  std::vector<cudaStream_t> side_streams;         // non-blocking, shared by all threads (--side-streams)
  // --deferred-free-ms and --program-pool: what was freed and waits, for its
  // cudaFree or for the next device synchronization (finish_deferred_frees).
  bool deferred_frees = false;
  std::mutex deferred_mutex;
  std::vector<std::pair<void*, std::size_t>> deferred;
  // --program-pool, and (cudaMalloc) the buffers that may be handed out
  // again, by size.
  program_pool_kind program_pool = program_pool_kind::none;
  std::mutex program_pool_mutex;
  std::unordered_multimap<std::size_t, void*> idle_buffers;
  // How many cudaFree calls were made (by any thread), or with
  // --program-pool how many freed buffers became free to hand out again.
  std::atomic<std::uint64_t> cuda_frees{0};
  damage* found = nullptr;                       // one per allocation id
  unsigned long long* early_verifies = nullptr;  // verify_kernel's count (managed memory)
  fill_progress* fills = nullptr;                // one per allocation id
  std::vector<history> histories;                // one per allocation id
  access* accesses = nullptr;                    // access_slots per allocation id, then one per scratch buffer
  std::vector<scratch_owner> scratch;            // one per thread
  std::atomic<std::uint64_t> clock{0};           // orders the cudaMalloc and cudaFree calls of all threads
  std::atomic<std::uint64_t> next_id{0};
  std::atomic<std::size_t> live_bytes{0};
  std::atomic<int> producers{0};
  std::mutex queue_mutex;
  std::deque<buffer> queue;  // handed over, to be freed by any thread
  std::size_t queue_limit = 0;
  std::mutex finished_mutex;
  std::vector<cudaStream_t> streams;  // destroyed by main after the final synchronization
  std::vector<cudaEvent_t> events;
  // Which events a buffer owns now (taken, not yet back in a free list), and
  // how often each was taken: an event taken while a buffer owns it would be
  // a bug of this program (a wait on it could follow the wrong record).
  std::mutex events_mutex;
  std::unordered_map<cudaEvent_t, unsigned> event_takes;
  std::unordered_set<cudaEvent_t> owned_events;
  std::atomic<std::uint64_t> events_taken_while_owned{0};
};

struct thread_totals {
  std::uint64_t mallocs = 0;
  std::uint64_t frees = 0;
  std::uint64_t bytes_verified = 0;
  // How the verifications read the buffers besides a plain kernel launch.
  std::uint64_t after_host_function = 0;  // a slow host function ran first on the stream
  std::uint64_t by_copy = 0;              // copied on the stream, the copy then verified
  std::uint64_t by_graph = 0;             // a graph launch of the verify kernel
};

// Holds the stream up, so that the work queued after it starts late.
void CUDART_CB slow_host_function(void*) { std::this_thread::sleep_for(std::chrono::microseconds(50)); }

class worker {
 public:
  worker(shared_state& shared, int index, std::uint64_t seed, thread_totals& totals)
      : shared_{shared},
        index_{index},
        rng_{splitmix(seed ^ splitmix(static_cast<std::uint64_t>(index) + 1))},
        totals_{totals}
  {
  }

  void run()
  {
    stream_flags_ = shared_.stream_flags;
    CK(cudaStreamCreateWithFlags(&stream_, stream_flags_));
    CK(cudaMalloc(&scratch_, scratch_bytes));
    scratch_owner& scratch = shared_.scratch[static_cast<std::size_t>(index_)];
    scratch.address = reinterpret_cast<std::uintptr_t>(scratch_);
    scratch.bytes = scratch_bytes;
    scratch.allocated_at = shared_.clock.fetch_add(1);
    scratch_access_ = shared_.accesses + shared_.allocation_budget * access_slots + index_;
    for (;;) {
      std::uint64_t const id = shared_.next_id.fetch_add(1, std::memory_order_relaxed);
      if (id >= shared_.allocation_budget) { break; }
      if (shared_.late_non_blocking && stream_flags_ != cudaStreamNonBlocking && id >= shared_.allocation_budget / 2) {
        // The old stream stays (buffers still name it) until the end. The
        // new one waits for its work: the scratch buffer a copy's verify
        // reads there is written by the next copy on the new one.
        earlier_streams_.push_back(stream_);
        stream_flags_ = cudaStreamNonBlocking;
        CK(cudaStreamCreateWithFlags(&stream_, stream_flags_));
        cudaEvent_t const old_work = take_event();
        CK(cudaEventRecord(old_work, earlier_streams_.back()));
        CK(cudaStreamWaitEvent(stream_, old_work, 0));
        give_back_event(old_work);
      }
      one_allocation(id);
      // Often also free a buffer some other thread handed over.
      if (chance(0.5)) {
        if (auto b = pop_shared()) { retire_foreign(*b); }
      }
    }
    shared_.producers.fetch_sub(1);
    while (!local_.empty()) {
      retire_local_oldest();
    }
    for (;;) {  // drain what the others hand over until every producer is done
      if (auto b = pop_shared()) {
        retire_foreign(*b);
      } else if (shared_.producers.load() == 0) {
        if (auto last = pop_shared()) {
          retire_foreign(*last);
          continue;
        }
        break;
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    CK(cudaStreamSynchronize(stream_));
    // A graph of this thread's may have gone to another stream, and may
    // still wait there behind a host function. Destroying it then is allowed,
    // but under compute-sanitizer's memcheck with the shim preloaded the
    // process hung inside the driver and the sanitizer (README, Known
    // limits). This program tests ordering, not that: its graphs have run.
    CK(cudaDeviceSynchronize());
    for (cudaGraphExec_t g : graphs_) {
      CK(cudaGraphExecDestroy(g));
    }
    scratch.freed_at = shared_.clock.fetch_add(1);
    CK(cudaFree(scratch_));
    std::lock_guard<std::mutex> lock{shared_.finished_mutex};
    shared_.streams.push_back(stream_);
    shared_.streams.insert(shared_.streams.end(), earlier_streams_.begin(), earlier_streams_.end());
    shared_.events.insert(shared_.events.end(), free_events_.begin(), free_events_.end());
  }

 private:
  bool chance(double p) { return std::uniform_real_distribution<double>{0.0, 1.0}(rng_) < p; }

  std::size_t log_uniform(std::size_t lo, std::size_t hi)
  {
    double const x = std::uniform_real_distribution<double>{std::log(double(lo)), std::log(double(hi))}(rng_);
    return static_cast<std::size_t>(std::exp(x));
  }

  // Mostly 256 B .. 1 MiB; 1% 1 .. 16 MiB; 0.05% 64 .. 256 MiB. Multiples of 8 bytes.
  std::size_t draw_size()
  {
    if (shared_.size_classes > 0) {  // the same sizes in every thread: 256 B .. 1 MiB, log-spaced
      int const k = std::uniform_int_distribution<int>{0, shared_.size_classes - 1}(rng_);
      double const step = shared_.size_classes > 1 ? std::log(4096.0) / (shared_.size_classes - 1) : 0.0;
      std::size_t const bytes = static_cast<std::size_t>(256.0 * std::exp(step * k)) & ~std::size_t{7};
      return std::max<std::size_t>(256, bytes);
    }
    double const r = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    std::size_t bytes = 0;
    if (r < 0.0005) {
      bytes = log_uniform(64 * MiB, 256 * MiB);
    } else if (r < 0.0105) {
      bytes = log_uniform(1 * MiB, 16 * MiB);
    } else {
      bytes = log_uniform(256, 1 * MiB);
    }
    bytes = std::max<std::size_t>(256, bytes & ~std::size_t{7});
    return std::min(bytes, shared_.max_live_bytes / 4);
  }

  cudaEvent_t take_event()
  {
    cudaEvent_t e = nullptr;
    if (free_events_.empty() || shared_.fresh_events) {
      CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    } else {
      e = free_events_.back();
      free_events_.pop_back();
    }
    std::lock_guard<std::mutex> lock{shared_.events_mutex};
    ++shared_.event_takes[e];
    if (!shared_.owned_events.insert(e).second) {
      shared_.events_taken_while_owned.fetch_add(1);
      std::printf("ordering_stress: internal error: event 0x%llx taken while a buffer owns it\n",
                  static_cast<unsigned long long>(reinterpret_cast<std::uintptr_t>(e)));
    }
    return e;
  }

  // The buffer that owned `e` is gone: destroyed (fresh events) or kept for the next take.
  void give_back_event(cudaEvent_t e)
  {
    {
      std::lock_guard<std::mutex> lock{shared_.events_mutex};
      shared_.owned_events.erase(e);
    }
    if (shared_.fresh_events) {
      CK(cudaEventDestroy(e));  // allowed once the wait on it is queued: the wait keeps its record
    } else {
      free_events_.push_back(e);
    }
  }

  // Makes `stream` wait for the work queued on b so far (its fill).
  void order_after(buffer& b, cudaStream_t stream)
  {
    history& h = shared_.histories[b.id];
    if (b.last == stream) {
      h.wait = "none needed (the same stream)";
      return;
    }
    h.wait = "on the event of its hand-over";
    if (b.done == nullptr) {  // only for this thread's own buffers: `last` is its stream or the legacy one
      b.done = take_event();
      CK(cudaEventRecord(b.done, b.last));
      h.wait = "on an event recorded after its fill";
    }
    CK(cudaStreamWaitEvent(stream, b.done, 0));
    h.wait_event = reinterpret_cast<std::uintptr_t>(b.done);
    std::lock_guard<std::mutex> lock{shared_.events_mutex};
    h.wait_event_takes = shared_.event_takes[b.done];
  }

  // The next access record of allocation `id`, for `what` on the stream named `where`.
  access* next_access(std::uint64_t id, char const* what, char const* where)
  {
    history& h = shared_.histories[id];
    if (h.slots_used >= access_slots) {
      std::printf("ordering_stress: internal error: allocation %llu has more than %d accesses\n",
                  static_cast<unsigned long long>(id), access_slots);
      std::fflush(stdout);
      std::_Exit(2);
    }
    h.slot_what[h.slots_used] = what;
    h.slot_stream[h.slots_used] = where;
    return shared_.accesses + id * access_slots + static_cast<std::uint64_t>(h.slots_used++);
  }

  // Queues a one-thread kernel that marks the start (edge 0) or the end (1)
  // of what is queued between two of them, in the records a and b.
  void stamp(cudaStream_t stream, access* a, access* b, int edge)
  {
    CK_LAUNCH((stamp_kernel<<<1, 1, 0, stream>>>(a, b, edge)));
  }

  bool reserve(std::size_t bytes)
  {
    std::size_t current = shared_.live_bytes.load();
    while (current + bytes <= shared_.max_live_bytes) {
      if (shared_.live_bytes.compare_exchange_weak(current, current + bytes)) { return true; }
    }
    return false;
  }

  void one_allocation(std::uint64_t id)
  {
    std::size_t const bytes = draw_size();
    while (!reserve(bytes)) {  // keep the live set bounded: free something first
      if (!local_.empty()) {
        retire_local_oldest();
      } else if (auto b = pop_shared()) {
        retire_foreign(*b);
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    buffer b;
    b.bytes = bytes;
    b.id = id;
    void* const p = allocate(bytes);
    ++totals_.mallocs;
    b.ptr = static_cast<std::uint64_t*>(p);
    // Usable from any stream at once: filled on the legacy stream, this
    // thread's stream or a side stream.
    b.last = side_stream_now() ? pick_side_stream() : chance(0.3) ? cudaStreamLegacy : stream_;
    history& h = shared_.histories[id];
    h.address = reinterpret_cast<std::uintptr_t>(p);
    h.bytes = bytes;
    h.allocated_at = shared_.clock.fetch_add(1);
    h.allocated_by = index_;
    h.filled_on = b.last == stream_            ? "its thread's own stream"
                  : b.last == cudaStreamLegacy ? "the legacy stream"
                                               : "a side stream";
    std::size_t const words = bytes / 8;
    unsigned const fill_blocks = static_cast<unsigned>(std::clamp<std::size_t>((words + 1023) / 1024, 1, 1024));
    CK_LAUNCH((fill_kernel<<<fill_blocks, 256, 0, b.last>>>(b.ptr, words, id, shared_.fills + id,
                                                            next_access(id, "fill kernel", h.filled_on))));
    h.fill_blocks = fill_blocks;

    double const fate = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    h.fate = fate < 0.05   ? "verified on a temporary stream, freed"
             : fate < 0.40 ? "verified, freed at once"
             : fate < 0.50 ? "freed right after its fill"
             : fate < 0.65 ? "handed over after its fill"
             : fate < 0.75 ? "verified, then handed over"
                           : "kept a while, verified, freed";
    if (fate < 0.05) {  // verify on a stream of its own, destroy that stream at once, then free
      cudaStream_t temporary = nullptr;
      CK(cudaStreamCreateWithFlags(&temporary, stream_flags_));
      verify(b, temporary);
      CK(cudaStreamDestroy(temporary));  // its work goes on: the free must still wait for it
      free_now(b);
    } else if (fate < 0.40) {  // verify (slowly) and free right after launching the verify
      verify_then_free(b, verify_stream());
    } else if (fate < 0.50) {  // free right after launching the fill
      free_now(b);
    } else if (fate < 0.65) {  // hand over: another thread verifies and frees it, or frees it at once
      push_shared(b);
    } else if (fate < 0.75) {  // verify here, then hand over: the other thread may free it while this verify runs
      verify(b, stream_);
      b.last = stream_;
      push_shared(b);
    } else {  // keep a while, verify and free later
      if (local_.size() >= 8) { retire_local_oldest(); }
      local_.push_back(b);
    }
  }

  // Mostly the thread's non-blocking stream; else the legacy stream or the
  // thread's per-thread default stream (a blocking one).
  cudaStream_t verify_stream()
  {
    if (side_stream_now()) { return pick_side_stream(); }
    double const r = std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    return r < 0.7 ? stream_ : r < 0.85 ? cudaStreamLegacy : cudaStreamPerThread;
  }

  bool is_side_stream(cudaStream_t s) const
  {
    return std::find(shared_.side_streams.begin(), shared_.side_streams.end(), s) != shared_.side_streams.end();
  }
  // --side-streams: a tenth of the fills and verifications.
  bool side_stream_now() { return !shared_.side_streams.empty() && chance(0.1); }
  cudaStream_t pick_side_stream()
  {
    auto const count = static_cast<int>(shared_.side_streams.size());
    return shared_.side_streams[static_cast<std::size_t>(std::uniform_int_distribution<int>{0, count - 1}(rng_))];
  }

  // A new buffer of `bytes`, from cudaMalloc or the program's pool.
  void* allocate(std::size_t bytes)
  {
    void* p = nullptr;
    if (shared_.program_pool == program_pool_kind::async_legacy) {
      CK(cudaMallocAsync(&p, bytes, cudaStreamLegacy));
      return p;
    }
    if (shared_.program_pool == program_pool_kind::buffers) {
      std::lock_guard<std::mutex> lock{shared_.program_pool_mutex};
      auto const idle = shared_.idle_buffers.find(bytes);
      if (idle != shared_.idle_buffers.end()) {
        p = idle->second;
        shared_.idle_buffers.erase(idle);
        return p;
      }
    }
    CK(cudaMalloc(&p, bytes));
    return p;
  }

  void verify_then_free(buffer& b, cudaStream_t stream)
  {
    verify(b, stream);
    free_now(b);  // at once, while the verify kernel is (about to be) running
  }

  void verify(buffer& b, cudaStream_t stream)
  {
    order_after(b, stream);
    std::size_t const words = b.bytes / 8;
    unsigned const blocks = static_cast<unsigned>(std::clamp<std::size_t>((words + 2047) / 2048, 1, 256));
    unsigned delay_ns =
      static_cast<unsigned>(std::uniform_int_distribution<unsigned>{0, shared_.max_verify_delay_ns}(rng_));
    unsigned const spin_ns = chance(0.5) ? 100u : 0u;
    damage* const bad = shared_.found + b.id;
    fill_progress* const progress = shared_.fills + b.id;
    history& h = shared_.histories[b.id];
    h.verified_on = stream == stream_               ? "its verifier's own stream"
                    : stream == cudaStreamLegacy    ? "the legacy stream"
                    : stream == cudaStreamPerThread ? "a per-thread default stream"
                    : is_side_stream(stream)        ? "a side stream"
                                                    : "a temporary stream";
    h.verified_how = "kernel";
    totals_.bytes_verified += b.bytes;
    double const how = shared_.kernels_only ? 1.0 : std::uniform_real_distribution<double>{0.0, 1.0}(rng_);
    if (how < 0.05 && shared_.host_functions) {  // a host function holds the stream up first
      access* const held = next_access(b.id, "host function", h.verified_on);
      stamp(stream, held, nullptr, 0);
      CK(cudaLaunchHostFunc(stream, slow_host_function, nullptr));
      stamp(stream, held, nullptr, 1);
      ++totals_.after_host_function;
      h.verified_how = "kernel after a host function";
    } else if (how < 0.10 && shared_.host_functions && stream == stream_ && b.bytes <= scratch_bytes) {
      // A copy reads the buffer (after a host function, so that it starts
      // late), and the copy is verified: a block handed out again before the
      // copy ran would show in the copy.
      access* const held = next_access(b.id, "host function", h.verified_on);
      stamp(stream, held, nullptr, 0);
      CK(cudaLaunchHostFunc(stream, slow_host_function, nullptr));
      stamp(stream, held, nullptr, 1);
      access* const copied = next_access(b.id, "copy to the scratch buffer", h.verified_on);
      stamp(stream, copied, scratch_access_, 0);
      CK(cudaMemcpyAsync(scratch_, b.ptr, b.bytes, cudaMemcpyDeviceToDevice, stream));
      stamp(stream, copied, scratch_access_, 1);
      CK_LAUNCH((verify_kernel<<<blocks, 256, 0, stream>>>(scratch_, words, b.id, bad, progress, h.fill_blocks,
                                                           shared_.early_verifies, 0, 0, scratch_access_)));
      ++totals_.by_copy;
      h.verified_how = "copy, then kernel";
      return;
    } else if (how >= 0.05 && how < 0.11 && shared_.graphs) {  // a graph launch (below 0.05: a host function's draw)
      launch_verify_graph(b, stream, blocks, words, bad, delay_ns, spin_ns,
                          next_access(b.id, "verify kernel (graph launch)", h.verified_on));
      ++totals_.by_graph;
      h.verified_how = "graph launch";
      return;
    }
    CK_LAUNCH((verify_kernel<<<blocks, 256, 0, stream>>>(b.ptr, words, b.id, bad, progress, h.fill_blocks,
                                                         shared_.early_verifies, delay_ns, spin_ns,
                                                         next_access(b.id, "verify kernel", h.verified_on))));
  }

  void launch_verify_graph(buffer const& b, cudaStream_t stream, unsigned blocks, std::size_t words, damage* bad,
                           unsigned delay_ns, unsigned spin_ns, access* record)
  {
    std::uint64_t const* data = b.ptr;
    std::uint64_t id = b.id;
    fill_progress* progress = shared_.fills + b.id;
    unsigned fill_blocks = shared_.histories[b.id].fill_blocks;
    unsigned long long* early = shared_.early_verifies;
    void* args[] = {&data, &words, &id, &bad, &progress, &fill_blocks, &early, &delay_ns, &spin_ns, &record};
    cudaKernelNodeParams params{};
    params.func = reinterpret_cast<void*>(&verify_kernel);
    params.gridDim = dim3(blocks);
    params.blockDim = dim3(256);
    params.kernelParams = args;
    cudaGraph_t graph = nullptr;
    cudaGraphNode_t node = nullptr;
    cudaGraphExec_t exec = nullptr;
    CK(cudaGraphCreate(&graph, 0));
    CK(cudaGraphAddKernelNode(&node, graph, nullptr, 0, &params));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaGraphDestroy(graph));
    CK(cudaGraphLaunch(exec, stream));
    graphs_.push_back(exec);  // destroyed once the thread's work has finished
  }

  void free_now(buffer& b)
  {
    history& h = shared_.histories[b.id];
    h.freed_at = shared_.clock.fetch_add(1);
    h.freed_by = index_;
    ++totals_.frees;
    if (shared_.deferred_frees) {  // the block stays allocated (and counted live) until its free is finished
      std::lock_guard<std::mutex> lock{shared_.deferred_mutex};
      shared_.deferred.emplace_back(b.ptr, b.bytes);
    } else {
      CK(cudaFree(b.ptr));
      shared_.cuda_frees.fetch_add(1);
      shared_.live_bytes.fetch_sub(b.bytes);
    }
    if (b.done != nullptr) { give_back_event(b.done); }
    b = buffer{};
  }

  void retire_local_oldest()
  {
    buffer b = local_.front();
    local_.pop_front();
    verify_then_free(b, stream_);
  }

  // A buffer another thread (or this one) handed over: its fill may still be running.
  void retire_foreign(buffer& b)
  {
    if (chance(0.3)) {
      free_now(b);
    } else {
      verify_then_free(b, verify_stream());
    }
  }

  void push_shared(buffer& b)
  {
    if (b.done != nullptr && shared_.fresh_events) {  // recorded already (a verify waited on it): a new one
      give_back_event(b.done);
      b.done = nullptr;
    }
    if (b.done == nullptr) { b.done = take_event(); }
    CK(cudaEventRecord(b.done, b.last));
    {
      std::lock_guard<std::mutex> lock{shared_.queue_mutex};
      if (shared_.queue.size() < shared_.queue_limit) {
        shared_.queue.push_back(b);
        return;
      }
    }
    verify_then_free(b, stream_);  // the queue is full
  }

  std::optional<buffer> pop_shared()
  {
    std::lock_guard<std::mutex> lock{shared_.queue_mutex};
    if (shared_.queue.empty()) { return std::nullopt; }
    buffer b = shared_.queue.front();
    shared_.queue.pop_front();
    return b;
  }

  shared_state& shared_;
  int index_;
  std::mt19937_64 rng_;
  thread_totals& totals_;
  cudaStream_t stream_ = nullptr;
  unsigned stream_flags_ = cudaStreamNonBlocking;  // of stream_ and the temporary streams
  std::vector<cudaStream_t> earlier_streams_;      // replaced by stream_ (--late-non-blocking)
  static constexpr std::size_t scratch_bytes = 1 * MiB;
  std::uint64_t* scratch_ = nullptr;  // where copies of buffers are verified (this thread's stream only)
  access* scratch_access_ = nullptr;  // one record spanning every use of it
  std::vector<cudaGraphExec_t> graphs_;
  std::deque<buffer> local_;
  std::vector<cudaEvent_t> free_events_;
};

void describe(char const* what, std::uint64_t id, history const& h, fill_progress const& fill)
{
  std::printf("ordering_stress:   %s %llu: %zu bytes at 0x%llx, allocated by thread %d at call %llu, filled on %s, "
              "%s; last verified on %s (%s); freed by thread %d at call %llu\n",
              what, static_cast<unsigned long long>(id), h.bytes, static_cast<unsigned long long>(h.address),
              h.allocated_by, static_cast<unsigned long long>(h.allocated_at), h.filled_on, h.fate, h.verified_on,
              h.verified_how, h.freed_by, static_cast<unsigned long long>(h.freed_at));
  std::printf("ordering_stress:     its fill: %llu of %u blocks, the first started at %llu ns, the last done at "
              "%llu ns; its last verify waited %s (event 0x%llx, taken %u times by then)\n",
              fill.blocks_done, h.fill_blocks, fill.started_at_ns, fill.done_at_ns, h.wait,
              static_cast<unsigned long long>(h.wait_event), h.wait_event_takes);
}

// For the first few corrupted allocations, or verified before their fill
// had finished: what happened to each, and which allocation's pattern a
// differing word holds (the one that wrote it).
void explain_corruption(shared_state const& shared)
{
  int explained = 0;
  for (std::uint64_t id = 0; id < shared.allocation_budget && explained < 4; ++id) {
    damage const& d = shared.found[id];
    if (d.bytes == 0 && d.early_blocks_seen == 0) { continue; }
    ++explained;
    if (d.bytes == 0) {
      std::printf("ordering_stress: verified early, bytes right: allocation %llu\n",
                  static_cast<unsigned long long>(id));
      std::printf("ordering_stress:   a verify started at %llu ns, when %llu blocks of its fill had finished\n",
                  d.early_at_ns, d.early_blocks_seen - 1);
      describe("allocation", id, shared.histories[id], shared.fills[id]);
      continue;
    }
    if (d.early_blocks_seen != 0) {
      std::printf("ordering_stress: allocation %llu: a verify started at %llu ns, when %llu blocks of its fill had "
                  "finished\n",
                  static_cast<unsigned long long>(id), d.early_at_ns, d.early_blocks_seen - 1);
    }
    std::printf("ordering_stress: corrupted: %llu bytes of allocation %llu; word %llu holds 0x%016llx\n", d.bytes,
                static_cast<unsigned long long>(id), d.word, d.value);
    std::printf("ordering_stress:   read at %llu ns, when %llu blocks of its fill had finished\n", d.seen_at_ns,
                d.fill_blocks_seen);
    describe("allocation", id, shared.histories[id], shared.fills[id]);
    bool writer_found = false;
    for (std::uint64_t other = 0; other < shared.allocation_budget; ++other) {
      if (other != id && d.word != ~0ull && pattern(other, d.word) == d.value) {
        describe("its word holds the pattern of allocation", other, shared.histories[other], shared.fills[other]);
        writer_found = true;
      }
    }
    if (!writer_found) { std::printf("ordering_stress:   the word holds no allocation's pattern\n"); }
  }
}

// One owner of an address range, for the overlap check: an allocation or a
// thread's scratch buffer, with its first and last access on the device.
struct owner {
  std::uintptr_t begin = 0;
  std::uintptr_t end = 0;
  std::uint64_t allocated_at = 0;
  std::uint64_t freed_at = ~std::uint64_t{0};  // never freed
  unsigned long long first_ns = ~0ull;
  unsigned long long last_ns = 0;
  std::uint64_t id = 0;  // allocation id, or the thread of a scratch buffer
  bool scratch = false;
};

void describe_owner(shared_state const& shared, owner const& o)
{
  if (o.scratch) {
    std::printf("ordering_stress:   thread %llu's scratch buffer: %llu bytes at 0x%llx, allocated at call %llu, freed "
                "at call %llu, used on the device from %llu to %llu ns\n",
                static_cast<unsigned long long>(o.id), static_cast<unsigned long long>(o.end - o.begin),
                static_cast<unsigned long long>(o.begin), static_cast<unsigned long long>(o.allocated_at),
                static_cast<unsigned long long>(o.freed_at), o.first_ns, o.last_ns);
    return;
  }
  history const& h = shared.histories[o.id];
  describe("allocation", o.id, h, shared.fills[o.id]);
  for (int slot = 0; slot < h.slots_used; ++slot) {
    access const& a = shared.accesses[o.id * access_slots + static_cast<std::uint64_t>(slot)];
    std::printf("ordering_stress:     access %d: %s on %s, from %llu to %llu ns\n", slot + 1, h.slot_what[slot],
                h.slot_stream[slot], a.start_ns, a.end_ns);
  }
}

// The exact check: every two owners of overlapping address ranges, taken in
// the order of their allocations. The later one must have been allocated
// after the earlier one was freed, and its first access must not start
// before the earlier one's last access ended. Returns how many pairs broke
// that, and describes the first few with both histories.
std::uint64_t check_overlaps(shared_state const& shared)
{
  std::vector<owner> owners;
  owners.reserve(shared.allocation_budget + shared.scratch.size());
  for (std::uint64_t id = 0; id < shared.allocation_budget; ++id) {
    history const& h = shared.histories[id];
    owner o;
    o.begin = h.address;
    o.end = h.address + h.bytes;
    o.allocated_at = h.allocated_at;
    o.freed_at = h.freed_by >= 0 ? h.freed_at : ~std::uint64_t{0};
    o.id = id;
    for (int slot = 0; slot < h.slots_used; ++slot) {
      access const& a = shared.accesses[id * access_slots + static_cast<std::uint64_t>(slot)];
      o.first_ns = std::min(o.first_ns, a.start_ns);
      o.last_ns = std::max(o.last_ns, a.end_ns);
    }
    owners.push_back(o);
  }
  for (std::size_t t = 0; t < shared.scratch.size(); ++t) {
    scratch_owner const& sc = shared.scratch[t];
    access const& a = shared.accesses[shared.allocation_budget * access_slots + t];
    owner o;
    o.begin = sc.address;
    o.end = sc.address + sc.bytes;
    o.allocated_at = sc.allocated_at;
    o.freed_at = sc.freed_at;
    o.first_ns = a.start_ns;
    o.last_ns = a.end_ns;
    o.id = t;
    o.scratch = true;
    owners.push_back(o);
  }
  std::sort(owners.begin(), owners.end(),
            [](owner const& a, owner const& b) { return a.allocated_at < b.allocated_at; });
  // Which owner each piece of the address space was last given to (the one
  // with the latest last access, should a later owner have overlapped it).
  struct piece {
    std::uintptr_t end;
    std::size_t owner;
  };
  std::map<std::uintptr_t, piece> pieces;
  std::uint64_t overlaps = 0;
  for (std::size_t n = 0; n < owners.size(); ++n) {
    owner const& later = owners[n];
    if (later.begin == later.end) { continue; }
    auto it = pieces.upper_bound(later.begin);
    if (it != pieces.begin() && std::prev(it)->second.end > later.begin) { --it; }
    std::vector<std::pair<std::uintptr_t, piece>> kept;  // the parts outside, and the new parts inside
    std::uintptr_t covered = later.begin;
    std::vector<std::size_t> reported;
    auto give = [&](std::uintptr_t from, std::uintptr_t to, std::size_t who) {
      if (!kept.empty() && kept.back().second.end == from && kept.back().second.owner == who) {
        kept.back().second.end = to;
      } else {
        kept.push_back({from, piece{to, who}});
      }
    };
    while (it != pieces.end() && it->first < later.end) {
      std::uintptr_t const from = it->first;
      piece const p = it->second;
      it = pieces.erase(it);
      owner const& earlier = owners[p.owner];
      if (from < later.begin) { give(from, later.begin, p.owner); }
      if (covered < std::max(from, later.begin)) { give(covered, std::max(from, later.begin), n); }
      bool const still_owned = earlier.freed_at > later.allocated_at;
      bool const too_early = later.first_ns < earlier.last_ns;
      if ((still_owned || too_early) && std::find(reported.begin(), reported.end(), p.owner) == reported.end()) {
        reported.push_back(p.owner);
        if (++overlaps <= 4) {
          std::printf("ordering_stress: overlap: %s (0x%llx..0x%llx) %s\n",
                      later.scratch ? "a scratch buffer" : "an allocation",
                      static_cast<unsigned long long>(later.begin), static_cast<unsigned long long>(later.end),
                      still_owned ? "was allocated while the one below still owned part of it"
                                  : "was first accessed before the last access of the one below ended");
          describe_owner(shared, later);
          describe_owner(shared, earlier);
        }
      }
      std::uintptr_t const inside_end = std::min(p.end, later.end);
      give(std::max(from, later.begin), inside_end, earlier.last_ns > later.last_ns ? p.owner : n);
      covered = inside_end;
      if (p.end > later.end) { give(later.end, p.end, p.owner); }
    }
    if (covered < later.end) { give(covered, later.end, n); }
    for (auto const& [from, p] : kept) {
      pieces.emplace(from, p);
    }
  }
  return overlaps;
}

}  // namespace

int main(int argc, char** argv)
{
  options const opts = parse_options(argc, argv);

  int devices = 0;
  cudaError_t const counted = cudaGetDeviceCount(&devices);
  if (counted != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device (cudaGetDeviceCount: %s, %d devices)\n", cudaGetErrorName(counted), devices);
    return 0;
  }
  char const* ordering_env = std::getenv("ASYNCSHIM_ORDERING");
  std::string const ordering = ordering_env != nullptr && ordering_env[0] != '\0' ? ordering_env : "unset";

  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  CK(cudaMemGetInfo(&free_bytes, &total_bytes));

  shared_state shared;
  shared.allocation_budget = opts.operations / 2;
  shared.max_live_bytes = std::min(opts.max_live_bytes, free_bytes / 2);
  shared.max_verify_delay_ns = static_cast<unsigned>(opts.max_verify_delay_us * 1000);
  shared.size_classes = opts.size_classes;
  shared.kernels_only = opts.kernels_only;
  shared.graphs = opts.graphs;
  shared.host_functions = opts.host_functions;
  shared.fresh_events = opts.fresh_events;
  shared.stream_flags = opts.blocking_streams ? cudaStreamDefault : cudaStreamNonBlocking;
  shared.late_non_blocking = opts.late_non_blocking;
  for (int s = 0; s < opts.side_streams; ++s) {
    cudaStream_t side = nullptr;
    CK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    shared.side_streams.push_back(side);
    shared.streams.push_back(side);  // destroyed at the end
  }
  shared.deferred_frees = opts.deferred_free_ms > 0 || opts.program_pool != program_pool_kind::none;
  shared.program_pool = opts.program_pool;
  if (opts.program_pool == program_pool_kind::async_legacy) {
    // The pool keeps its memory across the synchronizations, as the shim's does.
    cudaMemPool_t pool = nullptr;
    CK(cudaDeviceGetDefaultMemPool(&pool, 0));
    std::uint64_t keep_all = ~std::uint64_t{0};
    CK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep_all));
  }
  shared.queue_limit = static_cast<std::size_t>(opts.threads) * 4;
  shared.producers = opts.threads;
  // The counters live in managed memory: cudaMallocManaged is not the allocator under test.
  std::size_t const damage_bytes = shared.allocation_budget * sizeof(damage);
  CK(cudaMallocManaged(&shared.found, damage_bytes));
  CK(cudaMallocManaged(&shared.early_verifies, sizeof(unsigned long long)));
  *shared.early_verifies = 0;
  CK(cudaMallocManaged(&shared.fills, shared.allocation_budget * sizeof(fill_progress)));
  for (std::uint64_t id = 0; id < shared.allocation_budget; ++id) {
    shared.found[id] = damage{0, ~0ull, 0, 0, 0, 0, 0};
    shared.fills[id] = fill_progress{0, 0, 0};
  }
  shared.histories.resize(shared.allocation_budget);
  shared.scratch.resize(static_cast<std::size_t>(opts.threads));
  std::size_t const records = shared.allocation_budget * access_slots + static_cast<std::size_t>(opts.threads);
  CK(cudaMallocManaged(&shared.accesses, records * sizeof(access)));
  for (std::size_t r = 0; r < records; ++r) {
    shared.accesses[r] = access{~0ull, 0};
  }
  CK(cudaDeviceSynchronize());

  std::vector<thread_totals> totals(static_cast<std::size_t>(opts.threads));
  auto const start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < opts.threads; ++t) {
    threads.emplace_back([&, t] { worker{shared, t, opts.seed, totals[static_cast<std::size_t>(t)]}.run(); });
  }
  // --deferred-free-ms: one thread makes the cudaFree calls, every N ms.
  // --program-pool: every millisecond, one thread lets the blocks freed
  // before a device synchronization be handed out again.
  std::atomic<bool> workers_done{false};
  auto const finish_deferred_frees = [&shared] {
    std::vector<std::pair<void*, std::size_t>> batch;
    {
      std::lock_guard<std::mutex> lock{shared.deferred_mutex};
      batch.swap(shared.deferred);
    }
    if (batch.empty()) { return; }
    if (shared.program_pool != program_pool_kind::none) {
      CK(cudaDeviceSynchronize());  // all work queued before these frees has finished
    }
    for (auto const& [p, bytes] : batch) {
      if (shared.program_pool == program_pool_kind::none) {
        CK(cudaFree(p));
      } else if (shared.program_pool == program_pool_kind::async_legacy) {
        CK(cudaFreeAsync(p, cudaStreamLegacy));
      } else {
        std::lock_guard<std::mutex> lock{shared.program_pool_mutex};
        shared.idle_buffers.emplace(bytes, p);
      }
      shared.cuda_frees.fetch_add(1);
      shared.live_bytes.fetch_sub(bytes);
    }
  };
  std::thread deferred_freer;
  if (shared.deferred_frees) {
    unsigned const period_ms = opts.deferred_free_ms > 0 ? opts.deferred_free_ms : 1;
    deferred_freer = std::thread{[&, period_ms] {
      while (!workers_done.load()) {
        std::this_thread::sleep_for(std::chrono::milliseconds(period_ms));
        finish_deferred_frees();
      }
    }};
  }
  for (auto& th : threads) {
    th.join();
  }
  workers_done = true;
  if (deferred_freer.joinable()) { deferred_freer.join(); }
  finish_deferred_frees();  // what the last round left
  CK(cudaDeviceSynchronize());
  for (auto const& [bytes, p] : shared.idle_buffers) {
    CK(cudaFree(p));
  }
  auto const stop = std::chrono::steady_clock::now();

  thread_totals sum;
  for (auto const& t : totals) {
    sum.mallocs += t.mallocs;
    sum.frees += t.frees;
    sum.bytes_verified += t.bytes_verified;
    sum.after_host_function += t.after_host_function;
    sum.by_copy += t.by_copy;
    sum.by_graph += t.by_graph;
  }
  unsigned long long corrupted_bytes = 0;
  unsigned long long corrupted_buffers = 0;
  for (std::uint64_t id = 0; id < shared.allocation_budget; ++id) {
    corrupted_bytes += shared.found[id].bytes;
    corrupted_buffers += shared.found[id].bytes != 0 ? 1 : 0;
  }
  explain_corruption(shared);
  std::uint64_t const overlaps = check_overlaps(shared);
  for (cudaStream_t s : shared.streams) {
    CK(cudaStreamDestroy(s));
  }
  for (cudaEvent_t e : shared.events) {
    CK(cudaEventDestroy(e));
  }
  unsigned long long const early_verifies = *shared.early_verifies;
  CK(cudaFree(shared.found));
  CK(cudaFree(shared.early_verifies));
  CK(cudaFree(shared.fills));
  CK(cudaFree(shared.accesses));
  CK(cudaGetLastError());
  if (shared.events_taken_while_owned.load() != 0) {
    std::printf("ordering_stress: internal error: %llu events taken while a buffer owned them\n",
                static_cast<unsigned long long>(shared.events_taken_while_owned.load()));
    return 2;
  }
  if (sum.mallocs != shared.allocation_budget || sum.frees != sum.mallocs || shared.cuda_frees.load() != sum.frees ||
      shared.live_bytes.load() != 0) {
    std::printf("ordering_stress: internal error: %llu cudaMalloc, %llu frees, %llu cudaFree, %zu bytes still "
                "counted live\n",
                static_cast<unsigned long long>(sum.mallocs), static_cast<unsigned long long>(sum.frees),
                static_cast<unsigned long long>(shared.cuda_frees.load()), shared.live_bytes.load());
    return 2;
  }

  double const seconds = std::chrono::duration<double>(stop - start).count();
  std::printf("ordering_stress: ordering=%s shim=%s threads=%d size_classes=%d operations=%llu allocations=%llu "
              "bytes_verified=%llu verified_after_host_function=%llu verified_by_copy=%llu verified_by_graph=%llu "
              "fresh_events=%s deferred_free_ms=%u program_pool=%s blocking_streams=%s late_non_blocking=%s "
              "side_streams=%d "
              "corrupted_bytes=%llu "
              "corrupted_buffers=%llu early_verifies=%llu overlaps=%llu "
              "seconds=%.2f\n",
              ordering.c_str(), shim_loaded() ? "yes" : "no", opts.threads, opts.size_classes,
              static_cast<unsigned long long>(sum.mallocs + sum.frees), static_cast<unsigned long long>(sum.mallocs),
              static_cast<unsigned long long>(sum.bytes_verified),
              static_cast<unsigned long long>(sum.after_host_function), static_cast<unsigned long long>(sum.by_copy),
              static_cast<unsigned long long>(sum.by_graph), opts.fresh_events ? "yes" : "no", opts.deferred_free_ms,
              name_of(opts.program_pool), opts.blocking_streams ? "yes" : "no", opts.late_non_blocking ? "yes" : "no",
              opts.side_streams, corrupted_bytes, corrupted_buffers, early_verifies,
              static_cast<unsigned long long>(overlaps), seconds);
  if ((corrupted_bytes == 0 && early_verifies == 0 && overlaps == 0) || opts.allow_corruption) { return 0; }
  return 1;
}
