// The stream tracker's reader-writer lock (support/sharded_shared_mutex.hpp):
// a writer excludes every reader and another writer, a waiting writer holds
// back new readers but not a thread that already reads, and readers on many
// threads all get in at once.
#include "support/sharded_shared_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <vector>

namespace {

using asyncshim::shim::sharded_shared_mutex;
using namespace std::chrono_literals;

TEST(ShardedSharedMutex, AWriterExcludesReadersAndWriters)
{
  sharded_shared_mutex lock;
  long counter = 0;  // written only under the exclusive lock; read under the shared one
  std::atomic<bool> torn{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        if ((i + t) % 4 == 0) {
          std::unique_lock exclusive{lock};
          long const seen = counter;
          counter = seen + 1;
        } else {
          std::shared_lock shared{lock};
          long const a = counter;
          std::this_thread::yield();
          if (counter != a) { torn = true; }  // a writer got in while reading
        }
      }
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_FALSE(torn.load());
  EXPECT_EQ(counter, 8 * 2000 / 4);
}

TEST(ShardedSharedMutex, ReadersShareIt)
{
  sharded_shared_mutex lock;
  std::atomic<int> inside{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      std::shared_lock shared{lock};
      int const now = ++inside;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {}
      auto const until = std::chrono::steady_clock::now() + 2s;
      while (most.load() < 4 && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
      }
      --inside;
    });
  }
  for (auto& t : threads) {
    t.join();
  }
  EXPECT_EQ(most.load(), 4);
}

// A thread that reads may read again while a writer waits for it: the writer
// waits for both reads to end, and it does not wait for good.
TEST(ShardedSharedMutex, AReaderReadsAgainWhileAWriterWaits)
{
  sharded_shared_mutex lock;
  std::atomic<bool> writer_in{false};
  lock.lock_shared();
  std::thread writer([&] {
    std::unique_lock exclusive{lock};
    writer_in = true;
  });
  std::this_thread::sleep_for(50ms);  // the writer is waiting now
  EXPECT_FALSE(writer_in.load());
  lock.lock_shared();
  EXPECT_FALSE(writer_in.load());
  lock.unlock_shared();
  EXPECT_FALSE(writer_in.load());
  lock.unlock_shared();
  writer.join();
  EXPECT_TRUE(writer_in.load());
}

// A waiting writer holds back a reader that does not read yet.
TEST(ShardedSharedMutex, AWaitingWriterHoldsBackNewReaders)
{
  sharded_shared_mutex lock;
  std::atomic<bool> writer_done{false};
  std::atomic<bool> reader_in_before_writer{false};
  lock.lock_shared();
  std::thread writer([&] {
    std::unique_lock exclusive{lock};
    std::this_thread::sleep_for(20ms);
    writer_done = true;
  });
  std::this_thread::sleep_for(50ms);
  std::thread reader([&] {
    std::shared_lock shared{lock};
    reader_in_before_writer = !writer_done.load();
  });
  std::this_thread::sleep_for(50ms);
  lock.unlock_shared();
  writer.join();
  reader.join();
  EXPECT_FALSE(reader_in_before_writer.load());
}

}  // namespace
