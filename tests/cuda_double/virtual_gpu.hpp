// virtual_gpu.hpp: the executing model of the CUDA TEST DOUBLES, on when
// CUDA_DOUBLE_SIMULATE=SEED is set (see cuda_double.hpp, "The virtual GPU").
//
// Invariants:
//  - a task runs only after every task it depends on: the task before it on
//    its stream, the legacy stream's implicit synchronization with the
//    blocking streams of its device, the record an event wait captured when
//    it was called, and the free a pool's internal dependency names;
//  - every choice of which ready task runs, and when, comes from one seeded
//    generator, and tasks run only inside CUDA calls, under the model's lock:
//    for a seed, the order of CUDA calls decides everything;
//  - a touch of memory is checked when its task runs: work submitted for one
//    owner of a range must not run after work of a later owner of an
//    overlapping range has run, nor while work of an earlier owner of it is
//    still pending. Owners are what the program was handed out
//    (cuda_double_sim_handout), so a block reissued by the pool or by an
//    allocator above it counts the same.
//
// INTERNAL to the driver double; guarded by model_state::mu like the rest.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cuda_double.hpp"

namespace cuda_double {

class virtual_gpu {
 public:
  using queue_key = std::uint64_t;
  struct touch {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    std::uint64_t owner = 0;  // resolved when the work is submitted
  };

  // lazy: no task runs but when a synchronization waits for it.
  void start(std::uint64_t seed, bool lazy);
  [[nodiscard]] bool on() const noexcept { return on_; }

  // The queue of a stream: the legacy stream of a device, a thread's
  // per-thread default stream of a device, or a created stream (its state's
  // address, never reused). Blocking queues synchronize with the legacy one.
  queue_key legacy_queue(int device);
  queue_key per_thread_queue(std::uint64_t thread, int device);
  queue_key stream_queue(void const* stream_state, int device, bool blocking, std::string const& name);

  // Puts one task on a queue; returns its id (never 0). `after`: one more
  // task it depends on (0: none; a finished one is ignored).
  std::uint64_t submit(queue_key queue, char const* what, std::vector<touch> touches = {}, std::uint64_t after = 0);
  [[nodiscard]] bool done(std::uint64_t task) const noexcept { return task == 0 || pending_.count(task) == 0; }
  [[nodiscard]] bool queue_done(queue_key queue) const;
  [[nodiscard]] std::uint64_t queue_tail(queue_key queue) const;
  // Whether `task` (pending) waits, directly or through others, for `target`.
  [[nodiscard]] bool depends_on(std::uint64_t task, std::uint64_t target) const;

  // At a CUDA call: maybe runs some ready tasks (its seed decides how many).
  void progress();
  // Runs tasks until the condition holds (a synchronization).
  void wait_task(std::uint64_t task);
  void wait_queue(queue_key queue);
  void wait_device(int device);
  void wait_all();

  // The touches of [p, p + n) now: the current owner of the range, if any.
  void add_touch(std::vector<touch>& touches, void const* p, std::size_t n);
  // The program was handed [p, p + n): a new owner of that range.
  void handout(void const* p, std::size_t n);
  // The program freed the owner of p (for the history only).
  void note_freed(void const* p);
  // Notes what happened to the current owner of p in its history.
  void note_at(void const* p, std::string what);
  [[nodiscard]] std::string queue_name(queue_key queue) const;

  // A pool block freed on `queue` by task `free_task` (0: already free),
  // kept for reuse instead of going back to the pool's memory.
  struct kept_block {
    std::uintptr_t address = 0;
    std::size_t size = 0;
    void const* pool = nullptr;
    queue_key freed_on = 0;
    std::uint64_t free_task = 0;
  };
  void keep(kept_block block) { kept_.push_back(block); }
  // A kept block of `pool` that an allocation of `size` bytes on `queue` may
  // take now by the pool's reuse rules, chosen by its seed; its free task
  // when the allocation must wait for it (internal dependencies), else 0.
  struct reuse_rules {
    bool follow_event_dependencies = false;
    bool allow_opportunistic = false;
    bool allow_internal_dependencies = false;
  };
  bool take_kept(void const* pool, std::size_t size, queue_key queue, reuse_rules rules, kept_block& out,
                 std::uint64_t& wait_for);
  // The kept blocks of `pool` that may go back (all, or only those whose
  // free has run), handed to `give_back`.
  void release_kept(void const* pool, bool only_finished, std::function<void(kept_block const&)> const& give_back);

  [[nodiscard]] cuda_double_sim_summary summary() const;

 private:
  struct queue_state {
    int device = 0;
    bool blocking = true;
    bool legacy = false;
    unsigned weight = 1;             // how often the scheduler picks it among ready tasks
    std::uint64_t paused_until = 0;  // a call number: none of its tasks runs before, but to end a wait
    std::uint64_t tail = 0;
    std::string name;
  };
  struct task_state {
    queue_key queue = 0;
    int device = 0;
    char const* what = "";
    std::vector<std::uint64_t> after;
    std::vector<touch> touches;
    std::uint64_t submitted_at = 0;  // call number
  };
  struct owner_state {
    std::uintptr_t begin = 0;
    std::uintptr_t end = 0;
    std::uint64_t pending = 0;  // touches submitted, not yet run
    std::uint64_t ran = 0;      // touches run
    bool superseded = false;    // a later owner took part of its range
    std::vector<std::string> history;
  };

  std::uint64_t next();  // the seeded generator
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }
  queue_state& queue_for(queue_key key, int device, bool blocking, bool legacy, std::string name);
  [[nodiscard]] bool ready(task_state const& t) const;
  bool run_one(bool waiting);  // false: nothing is ready; `waiting`: paused queues too, if need be
  void run(std::uint64_t id);
  void check(std::uint64_t id, task_state const& t, touch const& x);
  void note(std::uint64_t owner, std::string what);
  void forget_if_idle(std::uint64_t owner);
  // Calls each(id, owner) for every owner whose range overlaps [begin, end).
  template <class Each>
  void for_each_owner_overlapping(std::uintptr_t begin, std::uintptr_t end, Each each) const;
  void use_after_reissue(std::uint64_t id, task_state const& t, touch const& x, std::uint64_t other, char const* how);
  std::string task_text(std::uint64_t id, task_state const& t) const;

  bool on_ = false;
  std::uint64_t state_ = 0;
  // Per seed: how often a call runs tasks at all, and how many at most.
  unsigned idle_percent_ = 50;
  unsigned burst_ = 4;
  unsigned slow_percent_ = 25;   // queues made slow (picked rarely)
  unsigned pause_percent_ = 10;  // how often a queue pauses after a task of it ran
  std::uint64_t longest_pause_ = 100;
  std::uint64_t calls_ = 0;
  std::uint64_t next_task_ = 1;
  std::uint64_t next_owner_ = 1;
  std::map<queue_key, queue_state> queues_;
  std::map<std::uint64_t, task_state> pending_;
  std::map<std::uint64_t, owner_state> owners_;             // live or still awaited
  std::multimap<std::uintptr_t, std::uint64_t> owners_at_;  // begin -> owner
  std::size_t longest_owner_ = 0;
  std::vector<kept_block> kept_;
  cuda_double_sim_summary summary_{};
};

}  // namespace cuda_double
