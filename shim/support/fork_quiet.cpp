#include "support/fork_quiet.hpp"

#include <pthread.h>

#include <cstring>

namespace asyncshim::shim {

namespace {

// Shared by the sections, exclusive across a fork. Writers first: a thread
// that starts sections again and again cannot keep a fork waiting.
// Constant-initialized: no load-time code.
pthread_rwlock_t sections = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
pthread_once_t installed = PTHREAD_ONCE_INIT;

void before_fork() noexcept { (void)pthread_rwlock_wrlock(&sections); }

void after_fork_in_parent() noexcept { (void)pthread_rwlock_unlock(&sections); }

// The child's thread is not the one that took the lock (glibc tells an
// exclusive owner by thread id): the lock is made new, as nothing else
// runs in the child yet.
void after_fork_in_child() noexcept
{
  pthread_rwlock_t const fresh = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
  std::memcpy(&sections, &fresh, sizeof sections);
}

void install() noexcept { (void)pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child); }

}  // namespace

void quiet_background_work_at_fork() noexcept { (void)pthread_once(&installed, install); }

background_work::background_work() noexcept { (void)pthread_rwlock_rdlock(&sections); }

background_work::~background_work() { (void)pthread_rwlock_unlock(&sections); }

}  // namespace asyncshim::shim
