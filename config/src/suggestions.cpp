#include "suggestions.hpp"

#include "asyncshim/config/settings.hpp"

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

namespace {

std::vector<std::string_view> words_of(std::string_view name)
{
  std::vector<std::string_view> words;
  while (!name.empty()) {
    std::size_t const end = name.find('_');
    std::string_view const word = name.substr(0, end);
    if (!word.empty()) { words.push_back(word); }
    if (end == std::string_view::npos) { break; }
    name.remove_prefix(end + 1);
  }
  return words;
}

bool starts_with_ignoring_case(std::string_view text, std::string_view prefix)
{
  return text.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), text.begin(),
                                                    [](char a, char b) { return to_lower(a) == to_lower(b); });
}

// Whether a word someone wrote stands for a word of a name: the same word
// (case aside), the start of it (ORDER for ORDERING, at least 4 letters), or
// the word with one letter wrong (STREEM, THRESHOLDS; words of 5 letters or more).
bool stands_for(std::string_view written, std::string_view word)
{
  std::size_t const distance = edit_distance(written, word);
  if (distance == 0) { return true; }
  if (written.size() >= 4 && starts_with_ignoring_case(word, written)) { return true; }
  return written.size() >= 5 && word.size() >= 5 && distance <= 1;
}

}  // namespace

std::optional<std::string> closest_name(std::string_view name, std::span<std::string const> candidates)
{
  // First by words: the candidate in which every word of `name` stands for
  // one of its own words, with the fewest words besides (POOL_SIZE is
  // INITIAL_POOL_SIZE, THRESHOLD is RELEASE_THRESHOLD, ORDER is ORDERING),
  // then the closer spelling, then the first.
  std::vector<std::string_view> const written = words_of(name);
  std::optional<std::string> best;
  std::size_t best_extra = 0;
  std::size_t best_distance = 0;
  for (std::string const& candidate : candidates) {
    std::vector<std::string_view> const words = words_of(candidate);
    bool const all_found = !written.empty() && std::all_of(written.begin(), written.end(), [&](std::string_view w) {
      return std::any_of(words.begin(), words.end(), [&](std::string_view c) { return stands_for(w, c); });
    });
    if (!all_found || words.size() < written.size()) { continue; }
    std::size_t const extra = words.size() - written.size();
    std::size_t const distance = edit_distance(name, candidate);
    if (!best || extra < best_extra || (extra == best_extra && distance < best_distance)) {
      best = candidate;
      best_extra = extra;
      best_distance = distance;
    }
  }
  if (best) { return best; }
  // Else by spelling alone.
  std::size_t const limit = std::max<std::size_t>(3, name.size() / 3);
  std::size_t closest = limit + 1;
  for (std::string const& candidate : candidates) {
    std::size_t const distance = edit_distance(name, candidate);
    if (distance < closest) {
      closest = distance;
      best = candidate;
    }
  }
  return best;
}

std::optional<std::string> closest_value(std::string_view value, std::string_view accepted)
{
  // The words of the list: each item's first word, and an alias in "(or ...)".
  std::vector<std::string_view> words;
  std::size_t start = 0;
  while (start < accepted.size()) {
    std::size_t const end = accepted.find_first_of(" ,()", start);
    std::string_view const word = accepted.substr(start, end == std::string_view::npos ? end : end - start);
    if (!word.empty() && word != "or") { words.push_back(word); }
    if (end == std::string_view::npos) { break; }
    start = end + 1;
  }
  std::size_t const limit = std::max<std::size_t>(2, value.size() / 3);
  std::optional<std::string> best;
  std::size_t closest = limit + 1;
  for (std::string_view const word : words) {
    std::size_t const distance = edit_distance(value, word);
    if (distance > 0 && distance < closest) {
      closest = distance;
      best = std::string(word);
    }
  }
  return best;
}

}  // namespace asyncshim::config::detail

namespace asyncshim::config {

std::optional<std::string> closest_of(std::string_view written, std::span<std::string const> candidates)
{
  return detail::closest_name(written, candidates);
}

}  // namespace asyncshim::config
