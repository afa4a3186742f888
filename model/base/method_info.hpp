#pragma once
// How a named method describes itself: its name, its kind, a one-line summary, the source it
// follows and the parameters it takes (each with its declared default, its meaning and, for a
// text parameter, its choices). Every registry of methods (model/quantizers/key_quantizer.hpp,
// solvers/scorers.hpp, seed_allocators.hpp, kvcobra_allocator.hpp, policy.hpp, problem.hpp)
// describes its entries with these, reads the parameters it is given with the one
// MethodParamReader, and scenarios/methods/catalogue.hpp lists them all.
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace tierlab {

// The parameters a method is given: name -> value text, as written ("bits" -> "2").
using MethodParams = std::map<std::string, std::string>;

// One parameter of a named method.
struct MethodParam {
  std::string name;
  std::string default_value;  // "" where the parameter has no default (it must be given)
  std::string help;
  std::vector<std::string> choices{};  // the allowed values of a text parameter (empty: any)
};

struct MethodInfo {
  std::string name;
  std::string kind;  // "key quantizer" | "eviction scorer" | "seed allocator" | "uniform policy" | "solver"
  std::string summary;
  std::string source;  // arXiv id and/or repository; "tierlab (FILE)" for the project's own
  std::vector<MethodParam> params;
  // Concrete spellings a menu may offer where the name is a grammar ("kivi:2" for
  // "kivi:B[:gG][:rR]"); empty where the name itself is what one writes.
  std::vector<std::string> examples{};
};

// One registered method of any kind: its description and its factory, whose signature is the
// kind's (a key quantizer's makes a KeyQuantizer from parameters, a scorer's an EvictionScorer
// from a reader, a seed allocator's an allocation of a problem).
template <class Factory>
struct MethodEntry {
  MethodInfo info;
  Factory make = nullptr;
  // The declared parameter `key`, or nullptr.
  const MethodParam* param(const std::string& key) const {
    for (const MethodParam& p : info.params)
      if (p.name == key) return &p;
    return nullptr;
  }
};

// The one reader of a method's parameters (key quantizers, scorers, seed allocators, KV-COBRA):
// each get_* takes the given value or else the DECLARED default (so no default is typed twice),
// checks it and records the effective value. Errors:
//   InputError  "SUBJECT: unknown parameter 'k'; valid parameters are a, b." (at construction);
//               "SUBJECT: parameter k = 'v' is not an integer." and the like; bad(k, why);
//   logic_error a parameter read but not declared, a declared default that does not parse or is
//               out of range, a declared parameter the factory never read (finish): defects of
//               the registry entry, caught by the registry tests.
// SUBJECT names the method as its kind does ("Key quantizer 'kivi'", "method 'snapkv'"). A
// declared name "p.*" declares a prefix: every given "p.<key>" is taken by take_prefixed("p.").
class MethodParamReader {
 public:
  MethodParamReader(std::string subject, std::vector<MethodParam> declared, MethodParams given);
  bool declares(const std::string& key) const;
  int get_int(const std::string& key, int lo = std::numeric_limits<int>::min(),
              int hi = std::numeric_limits<int>::max());
  double get_double(const std::string& key, double lo = -std::numeric_limits<double>::infinity(),
                    double hi = std::numeric_limits<double>::infinity());
  bool get_bool(const std::string& key);                // true | false | 1 | 0
  std::string get_string(const std::string& key);       // checked against the declared choices
  std::uint64_t get_seed(const std::string& key);       // a non-negative integer, no wrap-around
  // The value text (given or declared default) for a parser of the caller's own; the parsed
  // value's text is recorded with set_effective.
  const std::string& text(const std::string& key);
  void set_effective(const std::string& key, const std::string& value) { effective_[key] = value; }
  // Every given key starting with `prefix` (prefix removed); `prefix*` must be declared.
  MethodParams take_prefixed(const std::string& prefix);
  [[noreturn]] void bad(const std::string& key, const std::string& why) const;  // "SUBJECT: parameter k = v WHY"
  void finish() const;
  const MethodParams& effective() const { return effective_; }
  const std::string& subject() const { return subject_; }

 private:
  std::string subject_;
  std::vector<MethodParam> declared_;
  MethodParams given_, effective_;
  std::set<std::string> asked_;
  const MethodParam& declared(const std::string& key) const;  // logic_error when undeclared
  const std::string* find(const std::string& key);
  [[noreturn]] void bad_default(const std::string& key, const std::string& why) const;
};

}  // namespace tierlab
