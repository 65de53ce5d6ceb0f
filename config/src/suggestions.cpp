#include "suggestions.hpp"

#include <algorithm>
#include <vector>

#include "text.hpp"

namespace asyncshim::config::detail {

std::size_t edit_distance(std::string_view a, std::string_view b)
{
  // One row of the dynamic-programming table at a time.
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];  // table[i-1][j-1]
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t const above = row[j];  // table[i-1][j]
      std::size_t const cost = to_lower(a[i - 1]) == to_lower(b[j - 1]) ? 0 : 1;
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + cost});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_name(std::string_view name, std::span<std::string const> candidates)
{
  std::size_t const limit = std::max<std::size_t>(3, name.size() / 3);
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (std::string const& candidate : candidates) {
    std::size_t const distance = edit_distance(name, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

}  // namespace asyncshim::config::detail
