// The one reader of a method's parameters (method_info.hpp).
#include "model/base/method_info.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include "model/base/error.hpp"
#include "model/base/numbers.hpp"
#include "model/base/text.hpp"

namespace tierlab {

namespace {

bool is_prefix_declaration(const std::string& name) { return !name.empty() && name.back() == '*'; }

std::string names_of(const std::vector<MethodParam>& ps) {
  std::vector<std::string> names;
  for (const auto& p : ps) names.push_back(p.name);
  return names.empty() ? std::string("(none)") : join(names);
}

}  // namespace

MethodParamReader::MethodParamReader(std::string subject, std::vector<MethodParam> declared, MethodParams given)
    : subject_(std::move(subject)), declared_(std::move(declared)), given_(std::move(given)) {
  for (const auto& [k, v] : given_) {
    bool known = false;
    for (const MethodParam& d : declared_)
      known = known || d.name == k ||
              (is_prefix_declaration(d.name) && k.rfind(d.name.substr(0, d.name.size() - 1), 0) == 0);
    if (!known)
      throw InputError(subject_ + ": unknown parameter '" + k + "'; valid parameters are " + names_of(declared_) + ".");
  }
}

bool MethodParamReader::declares(const std::string& key) const {
  return std::any_of(declared_.begin(), declared_.end(), [&](const MethodParam& d) { return d.name == key; });
}

const MethodParam& MethodParamReader::declared(const std::string& key) const {
  for (const auto& p : declared_)
    if (p.name == key) return p;
  throw std::logic_error(subject_ + ": parameter " + key + " is read but not declared in its registry entry.");
}

void MethodParamReader::bad_default(const std::string& key, const std::string& why) const {
  throw std::logic_error(subject_ + ": the declared default of parameter " + key + " = '" + declared(key).default_value +
                         "' " + why + " (an error in its registry entry).");
}

const std::string* MethodParamReader::find(const std::string& key) {
  declared(key);
  asked_.insert(key);
  auto it = given_.find(key);
  return it == given_.end() ? nullptr : &it->second;
}

const std::string& MethodParamReader::text(const std::string& key) {
  const std::string* s = find(key);
  return s ? *s : declared(key).default_value;
}

int MethodParamReader::get_int(const std::string& key, int lo, int hi) {
  const std::string* s = find(key);
  const std::optional<std::int64_t> v = read_integer(s ? *s : declared(key).default_value);  // the whole text
  if (!v && !s) bad_default(key, "is not an integer");
  if (!v) throw InputError(subject_ + ": parameter " + key + " = '" + *s + "' is not an integer.");
  if (*v < lo || *v > hi) {
    if (!s) bad_default(key, "is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
    throw InputError(subject_ + ": parameter " + key + " = " + std::to_string(*v) + " must be in [" + std::to_string(lo) +
                     ", " + std::to_string(hi) + "].");
  }
  effective_[key] = std::to_string(*v);
  return static_cast<int>(*v);
}

double MethodParamReader::get_double(const std::string& key, double lo, double hi) {
  const std::string* s = find(key);
  const std::optional<double> v = read_real(s ? *s : declared(key).default_value);  // the whole text, finite
  if (!v && !s) bad_default(key, "is not a number");
  if (!v) throw InputError(subject_ + ": parameter " + key + " = '" + *s + "' is not a number.");
  if (!(*v >= lo && *v <= hi)) {
    if (!s) bad_default(key, "is outside [" + format_number(lo) + ", " + format_number(hi) + "]");
    throw InputError(subject_ + ": parameter " + key + " = " + format_number(*v) + " must be in [" + format_number(lo) +
                     ", " + format_number(hi) + "].");
  }
  effective_[key] = format_number(*v);
  return *v;
}

bool MethodParamReader::get_bool(const std::string& key) {
  const std::string* s = find(key);
  const std::string& t = s ? *s : declared(key).default_value;
  bool v = false;
  if (t == "true" || t == "1") v = true;
  else if (t == "false" || t == "0") v = false;
  else if (!s) bad_default(key, "is not true or false");
  else throw InputError(subject_ + ": parameter " + key + " = '" + t + "' is not true or false.");
  effective_[key] = v ? "true" : "false";
  return v;
}

std::string MethodParamReader::get_string(const std::string& key) {
  const MethodParam& p = declared(key);
  const std::string* s = find(key);
  const std::string v = s ? *s : p.default_value;
  if (!p.choices.empty() && std::find(p.choices.begin(), p.choices.end(), v) == p.choices.end()) {
    if (!s) bad_default(key, "is not one of " + join(p.choices));
    throw InputError(subject_ + ": parameter " + key + " = '" + v + "' is not one of " + join(p.choices) + ".");
  }
  effective_[key] = v;
  return v;
}

std::uint64_t MethodParamReader::get_seed(const std::string& key) {
  const std::string* s = find(key);
  const std::optional<std::uint64_t> v = read_unsigned(s ? *s : declared(key).default_value);  // no sign, no wrap
  if (!v && !s) bad_default(key, "is not a non-negative integer");
  if (!v) throw InputError(subject_ + ": parameter " + key + " = '" + *s + "' is not a non-negative integer.");
  effective_[key] = std::to_string(*v);
  return *v;
}

MethodParams MethodParamReader::take_prefixed(const std::string& prefix) {
  declared(prefix + "*");
  asked_.insert(prefix + "*");
  MethodParams out;
  for (const auto& [k, v] : given_)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = v;
  return out;
}

void MethodParamReader::bad(const std::string& key, const std::string& why) const {
  const auto it = effective_.find(key);
  throw InputError(subject_ + ": parameter " + key + " = " + (it == effective_.end() ? std::string() : it->second) + " " +
                   why);
}

void MethodParamReader::finish() const {
  for (const MethodParam& d : declared_)
    if (!asked_.count(d.name))
      throw std::logic_error(subject_ + ": declared parameter " + d.name +
                             " is never read by its factory (an error in its registry entry).");
}

}  // namespace tierlab
