// parse_handle_type, parse_stream, parse_log_level, parse_bool and the names.

#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "asyncshim/config/settings.hpp"

namespace {

namespace cfg = asyncshim::config;
using cfg::handle_type;
using cfg::log_level;
using cfg::stream_choice;

TEST(HandleType, EveryNameAndAlias)
{
  EXPECT_EQ(cfg::parse_handle_type("none"), handle_type::none);
  EXPECT_EQ(cfg::parse_handle_type("posix_file_descriptor"), handle_type::posix_file_descriptor);
  EXPECT_EQ(cfg::parse_handle_type("posix_fd"), handle_type::posix_file_descriptor);
  EXPECT_EQ(cfg::parse_handle_type("fabric"), handle_type::fabric);
  EXPECT_EQ(cfg::parse_handle_type("win32"), handle_type::win32);
  EXPECT_EQ(cfg::parse_handle_type("win32_kmt"), handle_type::win32_kmt);
}

TEST(HandleType, CaseInsensitiveAndTrimmed)
{
  EXPECT_EQ(cfg::parse_handle_type("NONE"), handle_type::none);
  EXPECT_EQ(cfg::parse_handle_type("Posix_File_Descriptor"), handle_type::posix_file_descriptor);
  EXPECT_EQ(cfg::parse_handle_type("POSIX_FD"), handle_type::posix_file_descriptor);
  EXPECT_EQ(cfg::parse_handle_type("Fabric"), handle_type::fabric);
  EXPECT_EQ(cfg::parse_handle_type("WIN32"), handle_type::win32);
  EXPECT_EQ(cfg::parse_handle_type("Win32_KMT"), handle_type::win32_kmt);
  EXPECT_EQ(cfg::parse_handle_type(" fabric "), handle_type::fabric);
}

TEST(HandleType, ValuesMatchCuda)
{
  // cudaMemHandleTypeNone/PosixFileDescriptor/Win32/Win32Kmt/Fabric.
  EXPECT_EQ(static_cast<int>(handle_type::none), 0x0);
  EXPECT_EQ(static_cast<int>(handle_type::posix_file_descriptor), 0x1);
  EXPECT_EQ(static_cast<int>(handle_type::win32), 0x2);
  EXPECT_EQ(static_cast<int>(handle_type::win32_kmt), 0x4);
  EXPECT_EQ(static_cast<int>(handle_type::fabric), 0x8);
}

TEST(HandleType, Rejected)
{
  for (char const* bad : {"", " ", "posix", "fd", "posix-fd", "posix-file-descriptor", "win", "win32kmt", "win32-kmt",
                          "nvlink", "1", "0x1", "none none", "fabricx"}) {
    EXPECT_EQ(cfg::parse_handle_type(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(HandleType, NamesReadBack)
{
  for (auto value : {handle_type::none, handle_type::posix_file_descriptor, handle_type::win32, handle_type::win32_kmt,
                     handle_type::fabric}) {
    EXPECT_EQ(cfg::parse_handle_type(cfg::to_string(value)), value) << cfg::to_string(value);
  }
  EXPECT_STREQ(cfg::to_string(handle_type::posix_file_descriptor), "posix_file_descriptor");
  EXPECT_STREQ(cfg::to_string(handle_type::win32_kmt), "win32_kmt");
}

TEST(Stream, Forms)
{
  EXPECT_EQ(cfg::parse_stream("legacy"), stream_choice::legacy);
  EXPECT_EQ(cfg::parse_stream("LEGACY"), stream_choice::legacy);
  EXPECT_EQ(cfg::parse_stream("per-thread"), stream_choice::per_thread);
  EXPECT_EQ(cfg::parse_stream("per_thread"), stream_choice::per_thread);
  EXPECT_EQ(cfg::parse_stream("Per-Thread"), stream_choice::per_thread);
  EXPECT_EQ(cfg::parse_stream("PER_THREAD"), stream_choice::per_thread);
  EXPECT_EQ(cfg::parse_stream("  per-thread\n"), stream_choice::per_thread);
}

TEST(Stream, Rejected)
{
  for (char const* bad : {"", "perthread", "per thread", "thread", "default", "0", "legacy-stream", "per--thread"}) {
    EXPECT_EQ(cfg::parse_stream(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(Stream, NamesReadBack)
{
  EXPECT_STREQ(cfg::to_string(stream_choice::legacy), "legacy");
  EXPECT_STREQ(cfg::to_string(stream_choice::per_thread), "per-thread");
  for (auto value : {stream_choice::legacy, stream_choice::per_thread}) {
    EXPECT_EQ(cfg::parse_stream(cfg::to_string(value)), value);
  }
}

TEST(LogLevel, EveryLevelAndAlias)
{
  EXPECT_EQ(cfg::parse_log_level("trace"), log_level::trace);
  EXPECT_EQ(cfg::parse_log_level("debug"), log_level::debug);
  EXPECT_EQ(cfg::parse_log_level("info"), log_level::info);
  EXPECT_EQ(cfg::parse_log_level("warn"), log_level::warn);
  EXPECT_EQ(cfg::parse_log_level("warning"), log_level::warn);
  EXPECT_EQ(cfg::parse_log_level("error"), log_level::error);
  EXPECT_EQ(cfg::parse_log_level("critical"), log_level::critical);
  EXPECT_EQ(cfg::parse_log_level("off"), log_level::off);
}

TEST(LogLevel, CaseInsensitive)
{
  EXPECT_EQ(cfg::parse_log_level("TRACE"), log_level::trace);
  EXPECT_EQ(cfg::parse_log_level("Debug"), log_level::debug);
  EXPECT_EQ(cfg::parse_log_level("WARNING"), log_level::warn);
  EXPECT_EQ(cfg::parse_log_level("Off"), log_level::off);
}

TEST(LogLevel, Rejected)
{
  for (char const* bad : {"", "verbose", "loud", "err", "fatal", "warnings", "0", "3", "none", "inf o"}) {
    EXPECT_EQ(cfg::parse_log_level(bad), std::nullopt) << "'" << bad << "'";
  }
}

TEST(LogLevel, NamesReadBack)
{
  for (auto value : {log_level::trace, log_level::debug, log_level::info, log_level::warn, log_level::error,
                     log_level::critical, log_level::off}) {
    EXPECT_EQ(cfg::parse_log_level(cfg::to_string(value)), value) << cfg::to_string(value);
  }
  EXPECT_STREQ(cfg::to_string(log_level::warn), "warn");
}

TEST(Bool, TrueForms)
{
  for (char const* text : {"1", "true", "yes", "on", "TRUE", "True", "YES", "On", " yes "}) {
    EXPECT_EQ(cfg::parse_bool(text), std::optional<bool>(true)) << "'" << text << "'";
  }
}

TEST(Bool, FalseForms)
{
  for (char const* text : {"0", "false", "no", "off", "FALSE", "No", "OFF", "\t0\n"}) {
    EXPECT_EQ(cfg::parse_bool(text), std::optional<bool>(false)) << "'" << text << "'";
  }
}

TEST(Bool, Rejected)
{
  for (char const* bad : {"", "2", "-1", "01", "y", "n", "t", "f", "enable", "disable", "yes please", "truee"}) {
    EXPECT_EQ(cfg::parse_bool(bad), std::nullopt) << "'" << bad << "'";
  }
}

}  // namespace
