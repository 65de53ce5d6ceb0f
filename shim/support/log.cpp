#include "support/log.hpp"

#include "support/own_file.hpp"

#include <spdlog/logger.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

#include <unistd.h>

#include <atomic>
#include <memory>
#include <mutex>

namespace asyncshim::shim::log {
namespace {

spdlog::level::level_enum to_spdlog(log_level level)
{
  switch (level) {
    case log_level::trace: return spdlog::level::trace;
    case log_level::debug: return spdlog::level::debug;
    case log_level::info: return spdlog::level::info;
    case log_level::warn: return spdlog::level::warn;
    case log_level::error: return spdlog::level::err;
    case log_level::critical: return spdlog::level::critical;
    case log_level::off: return spdlog::level::off;
  }
  return spdlog::level::warn;
}

// ASYNCSHIM_LOG_FILE: each message is one write(2) to a descriptor the shim
// opened itself (support/own_file.hpp), so no other process's line lands inside it.
class descriptor_sink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit descriptor_sink(int fd) : fd_{fd} {}

 protected:
  void sink_it_(spdlog::details::log_msg const& msg) override
  {
    spdlog::memory_buf_t formatted;
    formatter_->format(msg, formatted);
    (void)write_all(fd_, formatted.data(), formatted.size());
  }
  void flush_() override {}

 private:
  int fd_;  // never closed: messages may come until the very end
};

// Checked before any formatting, so a disabled level costs one relaxed load.
std::atomic<int> current_level{static_cast<int>(log_level::warn)};

std::shared_ptr<spdlog::logger> make_logger(spdlog::sink_ptr sink)
{
  auto logger = std::make_shared<spdlog::logger>("asyncshim", std::move(sink));
  logger->set_pattern("asyncshim[%P]: %l: %v");
  logger->set_level(spdlog::level::trace);  // filtering happens in enabled()
  logger->flush_on(spdlog::level::trace);   // messages are rare; never lose one at exit
  return logger;
}

// The logger in use, replaced once by setup(). Never destroyed: messages may
// come from exit paths.
struct logger_state {
  std::mutex mutex;
  std::shared_ptr<spdlog::logger> logger = make_logger(std::make_shared<spdlog::sinks::stderr_sink_mt>());
};

logger_state& state()
{
  static auto* instance = new logger_state;
  return *instance;
}

}  // namespace

std::string setup(log_level level, std::string const& file) noexcept
{
  std::string problem;
  try {
    spdlog::sink_ptr sink;
    if (!file.empty()) {
      opened_file const opened = open_own_file(file, file_write::append);
      if (opened.fd >= 0) {
        try {
          sink = std::make_shared<descriptor_sink>(opened.fd);
        } catch (...) {
          ::close(opened.fd);
          throw;
        }
      } else {
        problem =
          opened.by_rule
            ? fmt::format("ASYNCSHIM_LOG_FILE='{}' is not used: {} ({}); logging to standard "
                          "error",
                          file, opened.why, own_file_rule)
            : fmt::format("ASYNCSHIM_LOG_FILE='{}' cannot be opened: {}; logging to standard error", file, opened.why);
      }
    }
    if (sink) {
      auto replacement = make_logger(std::move(sink));
      std::lock_guard lock{state().mutex};
      state().logger = std::move(replacement);
    }
  } catch (...) {
    problem = "cannot set up logging; logging to standard error";
  }
  current_level.store(static_cast<int>(level), std::memory_order_relaxed);
  return problem;
}

bool enabled(log_level level) noexcept
{
  return level != log_level::off && static_cast<int>(level) >= current_level.load(std::memory_order_relaxed);
}

void write(log_level level, std::string_view text) noexcept
{
  try {
    std::shared_ptr<spdlog::logger> logger;
    {
      std::lock_guard lock{state().mutex};
      logger = state().logger;
    }
    logger->log(to_spdlog(level), "{}", text);
  } catch (...) {  // a message must never take the program down
  }
}

}  // namespace asyncshim::shim::log
