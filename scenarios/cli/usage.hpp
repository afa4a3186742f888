#pragma once
// Command-line usage errors (CLI11's ParseError) in tierlab's words: one line on stderr that
// names the command and the option or value at fault, with "did you mean" for a misspelt
// command or long option; returns 2, the exit status of every input error.
#include <CLI/CLI.hpp>

#include <map>
#include <string>
#include <vector>

namespace tierlab::cli {

// A check for an integer option: at least `lo` (CLI11's own ranges print 308-digit bounds).
// The message, after "--option: ", says what was given and what is valid.
CLI::Validator at_least(long long lo);

// Prints the usage error of `e` (argv as given to main) and returns 2.
int usage_error(const CLI::App& app, const CLI::ParseError& e, int argc, char** argv);

// The candidate closest to `word` by edit distance when it is close enough to be a slip
// (at most 2 edits, or a third of the word's length); empty otherwise.
std::string closest(const std::string& word, const std::vector<std::string>& candidates);

// Options that act only beside others (issue 33: they were ignored silently). After parsing:
// when `option` was given and none of `partners` was, throws InputError naming both, and
// what was given instead when one of `instead` was ("option --keep acts only with --scorer;
// it was given with --policy, which it does not change").
void only_with(const CLI::App& cmd, const std::string& option, const std::vector<std::string>& partners,
               const std::vector<std::string>& instead = {});

// NAME=VALUE items of a repeatable option (--param): a map, refusing an item without '=' or
// a name given twice, naming the option and both items.
std::map<std::string, std::string> name_values(const std::vector<std::string>& items, const std::string& option);

}  // namespace tierlab::cli
