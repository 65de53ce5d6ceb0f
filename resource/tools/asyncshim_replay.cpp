// asyncshim-replayer: replays an allocation event log in RMM's CSV format
// (ASYNCSHIM_EVENT_LOG, or RMM's logging_resource_adaptor) against one
// allocator and prints what happened as one JSON object. Driven by
// asyncshim-replay, which runs it once per configuration.
//
//   asyncshim-replayer LOG [--allocator native|pool]
//
// native: cudaMalloc/cudaFree (the shim's, when it is preloaded); pool: the
// raw pool (asyncshim::cuda_async_memory_resource, cudaMallocFromPoolAsync /
// cudaFreeAsync) on a stream of each thread's own. Each of the log's threads
// is replayed on a thread of its own, and the events in the log's order
// across threads (as RMM's replay does): a free may come from another thread
// than its allocation. "allocate failure" lines are counted, not replayed;
// so are the lines of pinned host memory (Memory column "pinned", which the
// shim's log has with its host pool on).
#include <asyncshim/cuda_async_memory_resource.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

namespace {

enum class action { allocate, free };

struct event {
  action act = action::allocate;
  std::size_t bytes = 0;
  std::size_t thread = 0;      // the replay thread (0 .. threads-1)
  std::size_t allocation = 0;  // a free: the event index of its allocation
};

struct parsed_log {
  std::vector<event> events;
  std::size_t threads = 0;
  std::uint64_t failures_in_log = 0;
  std::uint64_t pinned_in_log = 0;  // lines about pinned host memory
  std::uint64_t frees_without_allocation = 0;
  std::uint64_t peak_bytes = 0;  // the most the log has allocated at once
};

[[noreturn]] void fail(std::string const& what)
{
  std::fprintf(stderr, "asyncshim-replayer: %s\n", what.c_str());
  std::exit(2);
}

std::vector<std::string_view> split(std::string_view line)
{
  std::vector<std::string_view> fields;
  std::size_t start = 0;
  for (;;) {
    std::size_t const comma = line.find(',', start);
    fields.push_back(line.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) { return fields; }
    start = comma + 1;
  }
}

std::string_view trimmed(std::string_view s)
{
  while (!s.empty() && (s.front() == ' ' || s.front() == '"')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '"' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

// A pointer as RMM's logs write it: hexadecimal with or without 0x; (nil) or 0x0 for none.
std::uint64_t parse_pointer(std::string_view text, std::size_t line)
{
  text = trimmed(text);
  if (text == "(nil)") { return 0; }
  if (text.starts_with("0x") || text.starts_with("0X")) { text.remove_prefix(2); }
  if (text.empty()) { fail("line " + std::to_string(line) + ": an empty pointer"); }
  std::uint64_t value = 0;
  for (char c : text) {
    int const d = c >= '0' && c <= '9'   ? c - '0'
                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                         : -1;
    if (d < 0) { fail("line " + std::to_string(line) + ": '" + std::string(text) + "' is not a hexadecimal pointer"); }
    value = value * 16 + static_cast<std::uint64_t>(d);
  }
  return value;
}

std::uint64_t parse_decimal(std::string_view text, std::size_t line, char const* what)
{
  text = trimmed(text);
  if (text.empty()) { fail("line " + std::to_string(line) + ": an empty " + what); }
  std::uint64_t value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') { fail("line " + std::to_string(line) + ": '" + std::string(text) + "' is not a " + what); }
    value = value * 10 + static_cast<std::uint64_t>(c - '0');
  }
  return value;
}

parsed_log parse(std::string const& path)
{
  std::ifstream in{path};
  if (!in) { fail("cannot read " + path); }
  std::string line;
  if (!std::getline(in, line)) { fail(path + " is empty"); }
  std::map<std::string, std::size_t> column;
  auto const header = split(line);
  for (std::size_t i = 0; i < header.size(); ++i) {
    column[std::string(trimmed(header[i]))] = i;
  }
  for (char const* name : {"Thread", "Action", "Pointer", "Size"}) {
    if (!column.contains(name)) {
      fail(path + ": the header has no " + name + " column (expected RMM's Thread,Time,Action,Pointer,Size,Stream)");
    }
  }
  parsed_log log;
  std::unordered_map<std::uint64_t, std::size_t> thread_of;  // the log's thread id -> replay thread
  std::unordered_map<std::uint64_t, std::size_t> live;       // pointer -> its allocation's event index
  std::uint64_t in_use = 0;
  std::size_t number = 1;
  while (std::getline(in, line)) {
    ++number;
    if (trimmed(line).empty()) { continue; }
    auto const fields = split(line);
    if (fields.size() < header.size()) {
      // A last line cut short (the program was killed as it was written) is left out.
      if (in.peek() == std::char_traits<char>::eof()) {
        std::fprintf(stderr, "asyncshim-replayer: the last line (%zu) is incomplete; it is left out\n", number);
        break;
      }
      fail("line " + std::to_string(number) + " has too few fields");
    }
    if (auto const memory = column.find("Memory");
        memory != column.end() && trimmed(fields[memory->second]) == "pinned") {
      ++log.pinned_in_log;
      continue;
    }
    std::string_view const act = trimmed(fields[column["Action"]]);
    std::uint64_t const tid = parse_decimal(fields[column["Thread"]], number, "thread id");
    auto const [where, made] = thread_of.try_emplace(tid, thread_of.size());
    event e;
    e.thread = where->second;
    e.bytes = parse_decimal(fields[column["Size"]], number, "size");
    std::uint64_t const pointer = parse_pointer(fields[column["Pointer"]], number);
    if (act == "allocate failure") {
      ++log.failures_in_log;
      continue;
    }
    if (act == "allocate") {
      e.act = action::allocate;
      live[pointer] = log.events.size();
      in_use += e.bytes;
      log.peak_bytes = std::max(log.peak_bytes, in_use);
    } else if (act == "free" || act == "deallocate") {
      auto const found = live.find(pointer);
      if (found == live.end()) {
        ++log.frees_without_allocation;
        continue;
      }
      e.act = action::free;
      e.allocation = found->second;
      in_use -= log.events[found->second].bytes;
      live.erase(found);
    } else {
      fail("line " + std::to_string(number) + ": unknown action '" + std::string(act) +
           "' (expected allocate, free, deallocate or allocate failure)");
    }
    log.events.push_back(e);
  }
  log.threads = thread_of.size();
  return log;
}

struct outcome {
  std::uint64_t failures = 0;
  double seconds = 0;
  std::uint64_t device_used_peak = 0;  // total - free, sampled every 256 allocations
  std::uint64_t pool_reserved_high = 0;
};

outcome replay(parsed_log const& log, bool raw_pool)
{
  std::optional<asyncshim::cuda_async_memory_resource> pool;
  if (raw_pool) { pool.emplace(std::size_t{0}); }
  std::vector<void*> pointers(log.events.size(), nullptr);
  std::atomic<std::size_t> next{0};
  std::atomic<std::uint64_t> failures{0};
  std::atomic<std::uint64_t> used_peak{0};
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  (void)cudaMemGetInfo(&free_bytes, &total_bytes);
  auto const start = std::chrono::steady_clock::now();
  std::vector<std::vector<std::size_t>> mine(log.threads);  // each thread's events, in order
  for (std::size_t i = 0; i < log.events.size(); ++i) {
    mine[log.events[i].thread].push_back(i);
  }
  std::vector<std::thread> threads;
  for (std::size_t t = 0; t < log.threads; ++t) {
    threads.emplace_back([&, t] {
      cudaStream_t stream = nullptr;
      if (raw_pool && cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) { stream = nullptr; }
      std::size_t allocations = 0;
      for (std::size_t const i : mine[t]) {
        event const& e = log.events[i];
        while (next.load(std::memory_order_acquire) != i) {  // the log's order across threads
          std::this_thread::yield();
        }
        if (e.act == action::allocate) {
          void* p = nullptr;
          cudaError_t const r = raw_pool ? pool->try_allocate_async(&p, e.bytes, stream) : cudaMalloc(&p, e.bytes);
          if (r != cudaSuccess) {
            (void)cudaGetLastError();
            ++failures;
          }
          pointers[i] = r == cudaSuccess ? p : nullptr;
          if (++allocations % 256 == 0) {
            std::size_t f = 0;
            std::size_t total = 0;
            if (cudaMemGetInfo(&f, &total) == cudaSuccess) {
              std::uint64_t const used = total - f;
              std::uint64_t seen = used_peak.load();
              while (used > seen && !used_peak.compare_exchange_weak(seen, used)) {}
            }
          }
        } else if (void* p = pointers[e.allocation]) {
          if (raw_pool) {
            (void)pool->try_deallocate_async(p, stream);
          } else {
            (void)cudaFree(p);
          }
        }
        next.store(i + 1, std::memory_order_release);
      }
      if (stream != nullptr) {
        (void)cudaStreamSynchronize(stream);
        (void)cudaStreamDestroy(stream);
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  (void)cudaDeviceSynchronize();
  outcome o;
  o.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  o.failures = failures.load();
  o.device_used_peak = used_peak.load();
  if (raw_pool) {
    std::uint64_t high = 0;  // cudaMemPoolAttrReservedMemHigh is a 64-bit value
    if (cudaMemPoolGetAttribute(pool->pool_handle(), cudaMemPoolAttrReservedMemHigh, &high) == cudaSuccess) {
      o.pool_reserved_high = high;
    }
  }
  return o;  // what the log left allocated goes with the process
}

}  // namespace

int main(int argc, char** argv)
{
  if (argc < 2 || std::string_view{argv[1]} == "--help" || std::string_view{argv[1]} == "-h") {
    std::fprintf(stderr, "usage: asyncshim-replayer LOG [--allocator native|pool]\n");
    return argc < 2 ? 2 : 0;
  }
  std::string const path = argv[1];
  bool raw_pool = false;
  for (int i = 2; i < argc; ++i) {
    std::string_view const arg = argv[i];
    if (arg == "--allocator" && i + 1 < argc) {
      std::string_view const which = argv[++i];
      if (which != "native" && which != "pool") {
        fail("--allocator " + std::string(which) + ": expected native or pool");
      }
      raw_pool = which == "pool";
    } else {
      fail("unknown option " + std::string(arg) + " (usage: asyncshim-replayer LOG [--allocator native|pool])");
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 0;
  }
  parsed_log const log = parse(path);
  outcome const o = replay(log, raw_pool);
  std::printf("{\"allocator\": \"%s\", \"events\": %zu, \"threads\": %zu, \"seconds\": %.6f, \"failures\": %llu, "
              "\"failures_in_log\": %llu, \"pinned_in_log\": %llu, \"frees_without_allocation\": %llu, "
              "\"log_peak_bytes\": %llu, "
              "\"device_used_peak_bytes\": %llu, \"pool_reserved_high_bytes\": %llu}\n",
              raw_pool ? "pool" : "native", log.events.size(), log.threads, o.seconds,
              static_cast<unsigned long long>(o.failures), static_cast<unsigned long long>(log.failures_in_log),
              static_cast<unsigned long long>(log.pinned_in_log),
              static_cast<unsigned long long>(log.frees_without_allocation),
              static_cast<unsigned long long>(log.peak_bytes), static_cast<unsigned long long>(o.device_used_peak),
              static_cast<unsigned long long>(o.pool_reserved_high));
  return 0;
}
