// ASYNCSHIM_MEMORY_LIMIT's grammar, its messages and memory_limits' own
// members:
//   limit := ws* "off" ws* | entry ( "," entry )*
//   entry := ws* ( device ws* ":" )? size       (at most one entry without a device)
// where size is parse_size's (no half-free) and greater than 0, and device a
// decimal index from 0 to memory_limits::max_device, each device once.

#include "memory_limit.hpp"

#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

#include <fmt/format.h>

#include "size_parser.hpp"
#include "text.hpp"

namespace asyncshim::config {

std::optional<size_spec> memory_limits::of(int device) const
{
  for (auto const& [index, limit] : devices) {
    if (index == device) { return limit; }
  }
  return others;
}

std::string memory_limits::to_string() const
{
  if (!any()) { return "off"; }
  std::string text;
  for (auto const& [index, limit] : devices) {
    if (!text.empty()) { text += ','; }
    text += fmt::format("{}:{}", index, limit.to_string());
  }
  if (others) {
    if (!text.empty()) { text += ','; }
    text += others->to_string();
  }
  return text;
}

std::optional<memory_limits> parse_memory_limit(std::string_view text)
{
  return detail::parse_memory_limit_detailed("ASYNCSHIM_MEMORY_LIMIT", text, "").value;
}

namespace detail {
namespace {

bool zero(size_spec const& s) { return s.unit == size_spec::kind::bytes ? s.bytes == 0 : s.percent == 0.0; }

}  // namespace

memory_limit_parse parse_memory_limit_detailed(std::string_view name, std::string_view text, std::string_view accepted)
{
  memory_limit_parse result;
  auto refuse = [&](std::string why) {
    result.message = fmt::format("{}={} is not a valid limit: {}; expected {}", name, quoted(text), why, accepted);
    return result;
  };
  if (iequals(trim(text), "off")) {
    result.value = memory_limits{};
    return result;
  }
  memory_limits limits;
  std::size_t at = 0;
  for (;;) {
    std::size_t const comma = text.find(',', at);
    std::string_view const entry = trim(text.substr(at, comma == std::string_view::npos ? comma : comma - at));
    if (entry.empty()) { return refuse("an entry between commas is empty"); }
    std::optional<int> device;
    std::string_view size_text = entry;
    if (std::size_t const colon = entry.find(':'); colon != std::string_view::npos) {
      std::string_view const index_text = trim(entry.substr(0, colon));
      int index = -1;
      auto const [end, ec] = std::from_chars(index_text.data(), index_text.data() + index_text.size(), index);
      if (index_text.empty() || ec != std::errc{} || end != index_text.data() + index_text.size() || index < 0 ||
          index > memory_limits::max_device) {
        return refuse(fmt::format("{} is not a device index (0 to {})", quoted(index_text), memory_limits::max_device));
      }
      device = index;
      size_text = entry.substr(colon + 1);
    }
    auto const parsed = parse_size_detailed(size_text);
    if (!parsed.value) { return refuse(fmt::format("{} is not a size", quoted(trim(size_text)))); }
    if (parsed.value->unit == size_spec::kind::half_of_free) {
      return refuse("half-free is accepted only by ASYNCSHIM_INITIAL_POOL_SIZE");
    }
    if (zero(*parsed.value)) { return refuse("a limit of 0 would refuse every allocation (off sets none)"); }
    if (device) {
      for (auto const& listed : limits.devices) {
        if (listed.first == *device) { return refuse(fmt::format("device {} is given twice", *device)); }
      }
      limits.devices.emplace_back(*device, *parsed.value);
    } else {
      if (limits.others) { return refuse("more than one size without a device (one is for every device not listed)"); }
      limits.others = parsed.value;
    }
    if (comma == std::string_view::npos) { break; }
    at = comma + 1;
  }
  result.value = std::move(limits);
  return result;
}

}  // namespace detail
}  // namespace asyncshim::config
