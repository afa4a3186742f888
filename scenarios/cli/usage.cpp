// Usage errors of the command line in tierlab's words (issue 15, item 6): one line that
// names the command and the option or value at fault, a "did you mean" for a misspelt
// command or option, and exit status 2, the status of every input error.
#include "scenarios/cli/usage.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <string>
#include <vector>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"

namespace tierlab::cli {

namespace {

// Levenshtein distance (insertions, deletions, substitutions), O(|a| |b|).
std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j)
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

}  // namespace

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  std::size_t best_d = std::string::npos;
  for (const std::string& c : candidates) {
    const std::size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  // Close enough to be a slip: at most 2 edits, or a third of the word.
  const std::size_t limit = std::max<std::size_t>(2, word.size() / 3);
  return best_d <= limit ? best : std::string();
}

namespace {

std::vector<std::string> subcommand_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; })) names.push_back(s->get_name());
  return names;
}

// Long option names (with their dashes) of a command.
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options())
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  return names;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i];
  return s;
}

}  // namespace

CLI::Validator at_least(long long lo) {
  return CLI::Validator(
      [lo](std::string& value) -> std::string {
        const std::optional<std::int64_t> v = read_integer(value);  // model/base/numbers.hpp: the whole value
        if (!v) return "'" + value + "' is not a whole number";
        if (*v < lo) return value + " is too small; it must be at least " + std::to_string(lo);
        return {};
      },
      ">= " + std::to_string(lo));
}

int usage_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  // The first word that is not an option names the command.
  const CLI::App* cmd = nullptr;
  std::string word;
  int at = 1;
  for (; at < argc; ++at) {
    const std::string a = argv[at];
    if (a.empty() || a[0] == '-') continue;
    word = a;
    for (const CLI::App* s : app.get_subcommands([](const CLI::App*) { return true; }))
      if (s->check_name(a)) cmd = s;
    break;
  }
  const std::string help = cmd ? "tierlab " + cmd->get_name() + " --help" : "tierlab --help";
  if (cmd == nullptr) {
    const std::vector<std::string> names = subcommand_names(app);
    if (word.empty()) {
      std::fprintf(stderr, "tierlab: error: no command given; commands: %s (see tierlab --help).\n", join(names).c_str());
    } else {
      const std::string guess = closest(word, names);
      std::fprintf(stderr, "tierlab: error: unknown command '%s'%s; commands: %s.\n", word.c_str(),
                   guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str(), join(names).c_str());
    }
    return 2;
  }
  // An option the command does not have, with the closest one it has.
  const std::vector<std::string> known = option_names(*cmd);
  for (int i = at + 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--") break;
    if (a.rfind("--", 0) != 0) continue;
    const std::size_t eq = a.find('=');
    if (eq != std::string::npos) a.resize(eq);
    if (std::find(known.begin(), known.end(), a) != known.end()) continue;
    const std::string guess = closest(a, known);
    std::fprintf(stderr, "tierlab: error: %s: unknown option '%s'%s (see %s).\n", cmd->get_name().c_str(), a.c_str(),
                 guess.empty() ? "" : (" (did you mean '" + guess + "'?)").c_str(), help.c_str());
    return 2;
  }
  // Anything else (a missing or unconvertible value, a missing argument, too many
  // values): CLI11's sentence names the option; say which command and where to look.
  std::string what = e.what();
  while (!what.empty() && (what.back() == '\n' || what.back() == ' ')) what.pop_back();
  std::fprintf(stderr, "tierlab: error: %s: %s (see %s).\n", cmd->get_name().c_str(), what.c_str(), help.c_str());
  return 2;
}

void only_with(const CLI::App& cmd, const std::string& option, const std::vector<std::string>& partners,
               const std::vector<std::string>& instead) {
  if (cmd.count(option) == 0) return;
  for (const std::string& p : partners)
    if (cmd.count(p) > 0) return;
  std::string list;
  for (std::size_t i = 0; i < partners.size(); ++i)
    list += (i == 0 ? "" : i + 1 == partners.size() ? " or " : ", ") + partners[i];
  std::string given;
  for (const std::string& o : instead)
    if (cmd.count(o) > 0) given = o;
  throw InputError("option " + option + " acts only with " + list + "; " +
                   (given.empty() ? std::string("none was given, so it would be ignored")
                                  : "it was given with " + given + ", which it does not change") +
                   " (tierlab " + cmd.get_name() + " --help).");
}

std::map<std::string, std::string> name_values(const std::vector<std::string>& items, const std::string& option) {
  std::map<std::string, std::string> out;
  std::map<std::string, std::string> item_of;
  for (const std::string& kv : items) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) throw InputError("option " + option + ": '" + kv + "' is not NAME=VALUE.");
    const std::string name = kv.substr(0, eq);
    if (item_of.count(name))
      throw InputError("option " + option + ": " + name + " is given twice ('" + item_of[name] + "' and '" + kv +
                       "'); give each parameter once.");
    item_of[name] = kv;
    out[name] = kv.substr(eq + 1);
  }
  return out;
}

}  // namespace tierlab::cli
