#include "state/out_of_memory_reports.hpp"

#include "support/json_text.hpp"

#include <fmt/format.h>

namespace asyncshim::shim {
namespace {

std::string optional_json(std::optional<std::uint64_t> value)
{
  return value ? fmt::format("{}", *value) : std::string("null");
}

std::string blocks_json(std::vector<out_of_memory_report::block> const& blocks)
{
  std::string out = "[";
  for (auto const& b : blocks) {
    std::string frames;
    for (auto const& f : b.frames) {
      frames += (frames.empty() ? "" : ", ") + json_string(f);
    }
    out += fmt::format("{}{{\"bytes\": {}, \"address\": \"{:#x}\", \"entry_point\": {}, \"stack\": [{}]}}",
                       out.size() > 1 ? ", " : "", b.bytes, b.address, json_string(b.entry_point), frames);
  }
  return out + "]";
}

std::string processes_json(std::optional<std::vector<out_of_memory_report::process>> const& processes)
{
  if (!processes) { return "null"; }
  std::string out = "[";
  for (auto const& p : *processes) {
    out +=
      fmt::format("{}{{\"pid\": {}, \"name\": {}, \"bytes\": {}, \"this_process\": {}}}", out.size() > 1 ? ", " : "",
                  p.pid, p.name.empty() ? "null" : json_string(p.name), optional_json(p.bytes), p.this_process);
  }
  return out + "]";
}

}  // namespace

void out_of_memory_reports::add(out_of_memory_report report)
{
  std::lock_guard<std::mutex> lock(mutex_);
  if (reports_.size() < kept_reports) { reports_.push_back(std::move(report)); }
}

std::vector<out_of_memory_report> out_of_memory_reports::all() const
{
  std::lock_guard<std::mutex> lock(mutex_);
  return reports_;
}

std::string out_of_memory_reports_json(std::vector<out_of_memory_report> const& reports)
{
  std::string out = "[";
  for (auto const& r : reports) {
    out +=
      fmt::format("{}\n    {{\"entry_point\": {}, \"bytes\": {}, \"device\": {}, \"limit\": {}, \"pool_reserved\": {}, "
                  "\"pool_used\": {}, \"cached_given_back\": {}, \"queued_issued\": {}, \"native_bytes\": {}, "
                  "\"device_free\": {}, \"device_total\": {}, \"largest_blocks\": {}, \"processes\": {}}}",
                  out.size() > 1 ? "," : "", json_string(to_string(r.call)), r.bytes, r.device, optional_json(r.limit),
                  r.pool_reserved, r.pool_used, r.cached, r.queued, r.native, r.device_free, r.device_total,
                  blocks_json(r.largest_blocks), processes_json(r.processes));
  }
  return out + (reports.empty() ? "]" : "\n  ]");
}

}  // namespace asyncshim::shim
