// virtual_gpu.cpp: the executing model of the CUDA TEST DOUBLES (see virtual_gpu.hpp).
#include "virtual_gpu.hpp"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace cuda_double {
namespace {

// Queue keys: a created stream's state address (aligned, so its low bits are
// 0), or a tagged number for the legacy and per-thread streams.
constexpr std::uint64_t legacy_tag = 1;
constexpr std::uint64_t per_thread_tag = 2;
// A report names the first few uses in full; every one is counted.
constexpr std::uint64_t reports_in_full = 3;
constexpr std::size_t history_length = 12;

std::string hex(std::uintptr_t a)
{
  char text[32];
  std::snprintf(text, sizeof text, "0x%" PRIxPTR, a);
  return text;
}

}  // namespace

void virtual_gpu::start(std::uint64_t seed, bool lazy)
{
  on_ = true;
  state_ = seed ^ 0x9e3779b97f4a7c15ULL;
  // Swarm: each seed runs the GPU at its own pace.
  idle_percent_ = lazy ? 100 : static_cast<unsigned>(below(95));
  burst_ = 1 + static_cast<unsigned>(below(8));
  slow_percent_ = static_cast<unsigned>(below(60));
  pause_percent_ = static_cast<unsigned>(below(30));
  longest_pause_ = 1 + below(3000);
  summary_.enabled = 1;
  summary_.seed = seed;
}

std::uint64_t virtual_gpu::next()
{
  // splitmix64: tiny, and the same on every machine.
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

virtual_gpu::queue_state& virtual_gpu::queue_for(queue_key key, int device, bool blocking, bool legacy,
                                                 std::string name)
{
  auto [it, made] = queues_.try_emplace(key);
  if (made) {
    it->second.device = device;
    it->second.blocking = blocking;
    it->second.legacy = legacy;
    it->second.name = std::move(name);
    it->second.weight = below(100) < slow_percent_ ? 1 : 24;
  }
  return it->second;
}

virtual_gpu::queue_key virtual_gpu::legacy_queue(int device)
{
  queue_key const key = (static_cast<std::uint64_t>(device) << 4) | legacy_tag;
  queue_for(key, device, true, true, "the legacy stream of device " + std::to_string(device));
  return key;
}

virtual_gpu::queue_key virtual_gpu::per_thread_queue(std::uint64_t thread, int device)
{
  queue_key const key = (thread << 20) | (static_cast<std::uint64_t>(device) << 4) | per_thread_tag;
  queue_for(key, device, true, false,
            "the per-thread stream of thread " + std::to_string(thread) + " on device " + std::to_string(device));
  return key;
}

virtual_gpu::queue_key virtual_gpu::stream_queue(void const* stream_state, int device, bool blocking,
                                                 std::string const& name)
{
  auto const key = static_cast<queue_key>(reinterpret_cast<std::uintptr_t>(stream_state));
  queue_for(key, device, blocking, false, name);
  return key;
}

std::uint64_t virtual_gpu::submit(queue_key queue, char const* what, std::vector<touch> touches, std::uint64_t after)
{
  queue_state& q = queues_.at(queue);
  task_state t;
  t.queue = queue;
  t.device = q.device;
  t.what = what;
  t.submitted_at = calls_;
  auto const add = [&](std::uint64_t id) {
    if (!done(id) && std::find(t.after.begin(), t.after.end(), id) == t.after.end()) { t.after.push_back(id); }
  };
  add(q.tail);
  add(after);
  // The legacy stream waits for the blocking streams of its device, and they
  // wait for it (non-blocking streams do neither).
  if (q.blocking) {
    for (auto const& [key, other] : queues_) {
      if (key == queue || other.device != q.device || !other.blocking) { continue; }
      if (q.legacy || other.legacy) { add(other.tail); }
    }
  }
  for (touch const& x : touches) {
    if (x.owner != 0) { ++owners_.at(x.owner).pending; }
  }
  t.touches = std::move(touches);
  std::uint64_t const id = next_task_++;
  for (touch const& x : t.touches) {
    if (x.owner != 0) { note(x.owner, "submitted: " + task_text(id, t)); }
  }
  pending_.emplace(id, std::move(t));
  q.tail = id;
  ++summary_.tasks_submitted;
  summary_.most_pending = std::max<unsigned long long>(summary_.most_pending, pending_.size());
  return id;
}

bool virtual_gpu::queue_done(queue_key queue) const
{
  auto it = queues_.find(queue);
  return it == queues_.end() || done(it->second.tail);
}

std::uint64_t virtual_gpu::queue_tail(queue_key queue) const
{
  auto it = queues_.find(queue);
  return it == queues_.end() || done(it->second.tail) ? 0 : it->second.tail;
}

bool virtual_gpu::depends_on(std::uint64_t task, std::uint64_t target) const
{
  if (done(target) || done(task)) { return false; }
  std::vector<std::uint64_t> todo{task};
  std::vector<std::uint64_t> seen;
  while (!todo.empty()) {
    std::uint64_t const id = todo.back();
    todo.pop_back();
    if (id == target) { return true; }
    auto it = pending_.find(id);
    // Ids only grow along dependencies: nothing older than the target leads to it.
    if (it == pending_.end() || id < target) { continue; }
    for (std::uint64_t before : it->second.after) {
      if (!done(before) && std::find(seen.begin(), seen.end(), before) == seen.end()) {
        seen.push_back(before);
        todo.push_back(before);
      }
    }
  }
  return false;
}

bool virtual_gpu::ready(task_state const& t) const
{
  return std::all_of(t.after.begin(), t.after.end(), [this](std::uint64_t id) { return done(id); });
}

bool virtual_gpu::run_one(bool waiting)
{
  // Weighted by queue: a slow queue's task is picked rarely, not never; a
  // paused queue's not at all until its pause ends (a wait may end it early).
  std::vector<std::pair<std::uint64_t, unsigned>> candidates;
  unsigned long long total = 0;
  for (bool paused_too : {false, true}) {
    if (paused_too && (!waiting || !candidates.empty())) { break; }
    for (auto const& [id, t] : pending_) {
      queue_state const& q = queues_.at(t.queue);
      if ((q.paused_until > calls_) != paused_too || !ready(t)) { continue; }
      candidates.emplace_back(id, q.weight);
      total += q.weight;
    }
  }
  if (candidates.empty()) { return false; }
  std::uint64_t pick = below(total);
  for (auto const& [id, w] : candidates) {
    if (pick < w) {
      if (id != candidates.front().first) { ++summary_.out_of_order_runs; }
      run(id);
      return true;
    }
    pick -= w;
  }
  return false;
}

void virtual_gpu::run(std::uint64_t id)
{
  auto node = pending_.extract(id);
  task_state& t = node.mapped();
  queue_state& q = queues_.at(t.queue);
  q.paused_until = 0;
  if (below(100) < pause_percent_) { q.paused_until = calls_ + 1 + below(longest_pause_); }
  for (touch const& x : t.touches) {
    if (x.owner != 0) { check(id, t, x); }
  }
  ++summary_.tasks_run;
  for (touch const& x : t.touches) {
    if (x.owner == 0) { continue; }
    owner_state& o = owners_.at(x.owner);
    --o.pending;
    ++o.ran;
    note(x.owner, "ran: " + task_text(id, t));
    forget_if_idle(x.owner);
  }
}

void virtual_gpu::progress()
{
  ++calls_;
  if (!on_ || pending_.empty() || below(100) < idle_percent_) { return; }
  for (std::uint64_t n = 1 + below(burst_); n > 0 && run_one(false); --n) {}
}

void virtual_gpu::wait_task(std::uint64_t task)
{
  while (!done(task)) {
    if (!run_one(true)) {
      std::fprintf(stderr, "cuda_double: virtual GPU (seed %llu): task %" PRIu64 " can never run\n", summary_.seed,
                   task);
      return;
    }
  }
}

void virtual_gpu::wait_queue(queue_key queue) { wait_task(queue_tail(queue)); }

void virtual_gpu::wait_device(int device)
{
  for (;;) {
    auto it =
      std::find_if(pending_.begin(), pending_.end(), [device](auto const& p) { return p.second.device == device; });
    if (it == pending_.end()) { return; }
    std::uint64_t const task = it->first;
    wait_task(task);
    if (!done(task)) { return; }  // stuck: reported
  }
}

void virtual_gpu::wait_all()
{
  while (!pending_.empty()) {
    if (!run_one(true)) {
      std::fprintf(stderr, "cuda_double: virtual GPU (seed %llu): %zu tasks can never run\n", summary_.seed,
                   pending_.size());
      return;
    }
  }
}

void virtual_gpu::add_touch(std::vector<touch>& touches, void const* p, std::size_t n)
{
  auto const begin = reinterpret_cast<std::uintptr_t>(p);
  auto const end = begin + std::max<std::size_t>(n, 1);
  // The current owner: the latest one whose range holds p.
  std::uint64_t found = 0;
  for_each_owner_overlapping(begin, begin + 1, [&](std::uint64_t id, owner_state const& o) {
    if (!o.superseded) { found = std::max(found, id); }
  });
  touches.push_back(touch{begin, end, found});
}

void virtual_gpu::handout(void const* p, std::size_t n)
{
  if (!on_ || p == nullptr) { return; }
  auto const begin = reinterpret_cast<std::uintptr_t>(p);
  auto const end = begin + std::max<std::size_t>(n, 1);
  std::uint64_t const id = next_owner_++;
  std::vector<std::uint64_t> earlier;
  for_each_owner_overlapping(begin, end, [&](std::uint64_t e, owner_state const&) { earlier.push_back(e); });
  owner_state& o = owners_[id];
  o.begin = begin;
  o.end = end;
  owners_at_.emplace(begin, id);
  longest_owner_ = std::max<std::size_t>(longest_owner_, end - begin);
  note(id, "handed out [" + hex(begin) + ", " + hex(end) + ") at call " + std::to_string(calls_));
  for (std::uint64_t e : earlier) {
    owners_.at(e).superseded = true;
    note(e, "reissued as owner #" + std::to_string(id) + " at call " + std::to_string(calls_));
    note(id, "was owner #" + std::to_string(e) + "'s range before");
    forget_if_idle(e);
  }
  ++summary_.handouts;
}

void virtual_gpu::note_freed(void const* p) { note_at(p, "freed by the program at call " + std::to_string(calls_)); }

void virtual_gpu::note_at(void const* p, std::string what)
{
  if (!on_) { return; }
  std::vector<touch> found;
  add_touch(found, p, 1);
  if (found.front().owner != 0) { note(found.front().owner, std::move(what)); }
}

std::string virtual_gpu::queue_name(queue_key queue) const { return queues_.at(queue).name; }

void virtual_gpu::note(std::uint64_t owner, std::string what)
{
  auto& h = owners_.at(owner).history;
  if (h.size() == history_length) {
    // Keep how it began and what came last.
    if (h[2] != "...") { h.insert(h.begin() + 2, "..."); }
    h.erase(h.begin() + 3);
  }
  h.push_back(std::move(what));
}

void virtual_gpu::forget_if_idle(std::uint64_t owner)
{
  auto it = owners_.find(owner);
  if (it == owners_.end() || !it->second.superseded || it->second.pending != 0) { return; }
  auto [first, last] = owners_at_.equal_range(it->second.begin);
  for (auto at = first; at != last; ++at) {
    if (at->second == owner) {
      owners_at_.erase(at);
      break;
    }
  }
  owners_.erase(it);
}

void virtual_gpu::check(std::uint64_t id, task_state const& t, touch const& x)
{
  ++summary_.touches_checked;
  for_each_owner_overlapping(x.begin, x.end, [&](std::uint64_t other_id, owner_state const& other) {
    if (other_id > x.owner && other.ran != 0) {
      use_after_reissue(id, t, x, other_id, "ran after work of the block's next owner had run");
    } else if (other_id < x.owner && other.pending != 0) {
      use_after_reissue(id, t, x, other_id, "ran while work of the block's previous owner was still pending");
    }
  });
}

template <class Each>
void virtual_gpu::for_each_owner_overlapping(std::uintptr_t begin, std::uintptr_t end, Each each) const
{
  // Owners are kept by where they begin; none is longer than longest_owner_.
  for (auto it = owners_at_.lower_bound(end); it != owners_at_.begin();) {
    --it;
    if (it->first + longest_owner_ <= begin) { break; }
    owner_state const& o = owners_.at(it->second);
    if (o.begin < end && begin < o.end) { each(it->second, o); }
  }
}

void virtual_gpu::use_after_reissue(std::uint64_t id, task_state const& t, touch const& x, std::uint64_t other,
                                    char const* how)
{
  ++summary_.uses_after_reissue;
  if (summary_.uses_after_reissue > reports_in_full) { return; }
  std::fprintf(stderr,
               "cuda_double: USE AFTER REISSUE (virtual GPU seed %llu): %s touched [%s, %s) of owner #%" PRIu64
               " and %s (owner #%" PRIu64 ")\n",
               summary_.seed, task_text(id, t).c_str(), hex(x.begin).c_str(), hex(x.end).c_str(), x.owner, how, other);
  for (std::uint64_t o : {std::min(x.owner, other), std::max(x.owner, other)}) {
    std::fprintf(stderr, "  owner #%" PRIu64 ":\n", o);
    for (std::string const& line : owners_.at(o).history) {
      std::fprintf(stderr, "    %s\n", line.c_str());
    }
  }
}

std::string virtual_gpu::task_text(std::uint64_t id, task_state const& t) const
{
  return std::string(t.what) + " #" + std::to_string(id) + " on " + queues_.at(t.queue).name + " (submitted at call " +
         std::to_string(t.submitted_at) + ")";
}

bool virtual_gpu::take_kept(void const* pool, std::size_t size, queue_key queue, reuse_rules rules, kept_block& out,
                            std::uint64_t& wait_for)
{
  wait_for = 0;
  std::uint64_t const tail = queue_tail(queue);
  std::vector<std::pair<std::size_t, std::uint64_t>> allowed;  // index, the free to wait for
  for (std::size_t i = 0; i < kept_.size(); ++i) {
    kept_block const& b = kept_[i];
    if (b.pool != pool || b.size != size) { continue; }
    if (b.freed_on == queue || (rules.allow_opportunistic && done(b.free_task)) ||
        (rules.follow_event_dependencies && tail != 0 && depends_on(tail, b.free_task))) {
      allowed.emplace_back(i, 0);
    } else if (rules.allow_internal_dependencies) {
      allowed.emplace_back(i, b.free_task);
    }
  }
  // Mostly reuse what may be reused: that is where a wrong order shows.
  if (allowed.empty() || below(100) < 10) { return false; }
  auto const [index, free_task] = allowed[below(allowed.size())];
  out = kept_[index];
  wait_for = free_task;
  kept_.erase(kept_.begin() + static_cast<std::ptrdiff_t>(index));
  ++summary_.pool_reuses;
  if (out.freed_on != queue) { ++summary_.reuses_across_streams; }
  return true;
}

void virtual_gpu::release_kept(void const* pool, bool only_finished,
                               std::function<void(kept_block const&)> const& give_back)
{
  for (auto it = kept_.begin(); it != kept_.end();) {
    if (it->pool == pool && (!only_finished || done(it->free_task))) {
      kept_block const b = *it;
      it = kept_.erase(it);
      give_back(b);
    } else {
      ++it;
    }
  }
}

cuda_double_sim_summary virtual_gpu::summary() const
{
  cuda_double_sim_summary s = summary_;
  s.tasks_pending = pending_.size();
  return s;
}

}  // namespace cuda_double
