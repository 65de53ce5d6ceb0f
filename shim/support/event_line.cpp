#include "support/event_line.hpp"

namespace asyncshim::shim {
namespace {

// Appends `value` in `base` (10 or 16, lower case), at least `width` digits.
char* put_unsigned(char* out, std::uint64_t value, unsigned base, int width = 1) noexcept
{
  char digits[24];
  int n = 0;
  do {
    unsigned const d = static_cast<unsigned>(value % base);
    digits[n++] = static_cast<char>(d < 10 ? '0' + d : 'a' + (d - 10));
    value /= base;
  } while (value != 0);
  while (n < width) {
    digits[n++] = '0';
  }
  while (n > 0) {
    *out++ = digits[--n];
  }
  return out;
}

char* put_text(char* out, char const* text) noexcept
{
  while (*text != '\0') {
    *out++ = *text++;
  }
  return out;
}

char const* action_text(event_action a) noexcept
{
  switch (a) {
    case event_action::allocate: return "allocate";
    case event_action::free: return "free";
    case event_action::allocate_failure: return "allocate failure";
  }
  return "allocate failure";
}

}  // namespace

std::size_t format_event_line(event_record const& r, long utc_offset_s, bool memory_column, char* out) noexcept
{
  char* p = out;
  p = put_unsigned(p, static_cast<std::uint64_t>(r.thread < 0 ? 0 : r.thread), 10);
  *p++ = ',';
  std::int64_t const local_s = r.time_ns / 1'000'000'000 + utc_offset_s;
  std::int64_t const of_day = ((local_s % 86400) + 86400) % 86400;
  std::int64_t const micros = (r.time_ns % 1'000'000'000) / 1000;
  p = put_unsigned(p, static_cast<std::uint64_t>(of_day / 3600), 10, 2);
  *p++ = ':';
  p = put_unsigned(p, static_cast<std::uint64_t>(of_day / 60 % 60), 10, 2);
  *p++ = ':';
  p = put_unsigned(p, static_cast<std::uint64_t>(of_day % 60), 10, 2);
  *p++ = '.';
  p = put_unsigned(p, static_cast<std::uint64_t>(micros < 0 ? 0 : micros), 10, 6);
  *p++ = ',';
  p = put_text(p, action_text(r.action));
  *p++ = ',';
  p = put_text(p, "0x");
  p = put_unsigned(p, r.pointer, 16);
  *p++ = ',';
  p = put_unsigned(p, r.bytes, 10);
  *p++ = ',';
  p = put_unsigned(p, r.stream, 16);
  if (memory_column) {
    *p++ = ',';
    p = put_text(p, r.memory == event_memory::pinned ? "pinned" : "device");
  }
  *p++ = '\n';
  return static_cast<std::size_t>(p - out);
}

}  // namespace asyncshim::shim
