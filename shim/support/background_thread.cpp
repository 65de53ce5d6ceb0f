#include "support/background_thread.hpp"

#include <pthread.h>
#include <signal.h>

namespace asyncshim::shim {

int start_background_thread(void* (*body)(void*), void* argument, char const* name) noexcept
{
  // The new thread inherits this thread's mask: block everything around its creation.
  sigset_t all;
  sigset_t previous;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &previous);
  pthread_t thread{};
  int const made = pthread_create(&thread, nullptr, body, argument);
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (made != 0) { return made; }
  (void)pthread_setname_np(thread, name);
  (void)pthread_detach(thread);
  return 0;
}

}  // namespace asyncshim::shim
