// Methods named in scenario files (methods_spec.hpp).
#include "scenarios/methods/methods_spec.hpp"

#include <cmath>
#include <memory>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "model/base/text.hpp"
#include "scenarios/io/yaml_reader.hpp"
#include "scenarios/methods/catalogue.hpp"
#include "scenarios/methods/compressors.hpp"

#include "model/base/enum_names.hpp"
#include "model/base/error.hpp"
#include "model/quantizers/key_quantizer.hpp"
#include "solvers/families.hpp"

namespace tierlab {

// The kind keys of a method entry, in the order the messages list them.
constexpr auto kMethodKinds = enum_table<MethodSpec::Kind>("method kind", {{MethodSpec::Kind::Quantizer, "quantizer"},
                                                                          {MethodSpec::Kind::Scorer, "scorer"},
                                                                          {MethodSpec::Kind::Seed, "seed"},
                                                                          {MethodSpec::Kind::Policy, "policy"},
                                                                          {MethodSpec::Kind::Family, "family"}});

std::string to_string(MethodSpec::Kind k) { return std::string(enum_name(kMethodKinds, k)); }

namespace {

const std::string kKindKeys = enum_choices(kMethodKinds);  // "quantizer, scorer, seed, policy, family"

// One axis of the expansion of an entry: a key and its values.
struct Axis {
  std::string key;  // "param:NAME", "keep", "budget"
  std::vector<YAML::Node> values;
};

// Default label: the kind's name and the values the file gave.
std::string default_label(const MethodSpec& m, const std::vector<std::pair<std::string, std::string>>& given) {
  std::string s;
  switch (m.kind) {
    case MethodSpec::Kind::Family: s = m.name + "*"; break;
    case MethodSpec::Kind::Seed: s = m.name; break;
    default: s = m.name;
  }
  for (const auto& [k, v] : given) s += " " + k + "=" + v;
  return s;
}

// Checks one expanded method against its registry (everything that can be checked without a
// trace), through the catalogue entry it names (catalogue.hpp) or, for a family, its own check.
void check_method(const MethodSpec& m) {
  if (m.kind == MethodSpec::Kind::Family)
    method_factories::check_family(m);
  else
    catalogue_entry(m).check(m);
  if ((m.kind == MethodSpec::Kind::Seed || m.kind == MethodSpec::Kind::Family) && !std::isfinite(m.budget))
    throw InputError(to_string(m.kind) + " '" + m.name + "' needs the key 'budget' (B, bits per key element)");
}

std::vector<MethodSpec> parse_entry(const YamlReader& w, const YAML::Node& e, const std::string& key,
                                    const RateLadder& default_ladder, bool quantizers_only) {
  MethodSpec base;
  base.where = w.at(e);
  base.ladder = default_ladder;
  if (e.IsScalar()) {
    if (!quantizers_only)
      w.fail(e, "key '" + key + "': an entry must be a mapping with one of the keys " + kKindKeys +
                    " (e.g. {quantizer: kivi, bits: 2}).");
    base.kind = MethodSpec::Kind::Quantizer;
    base.name = e.as<std::string>();
    try {
      make_key_quantizer(base.name, {});
    } catch (const InputError& err) {
      w.fail(e, "key '" + key + "': " + err.what());
    }
    base.label = base.name;
    return {base};
  }
  if (!e.IsMap()) w.fail(e, "key '" + key + "': an entry must be a mapping with one of the keys " + std::string(kKindKeys) + ".");
  int found = 0;
  YAML::Node kind_node;
  for (const auto& [kind, k] : kMethodKinds.names)
    if (e[std::string(k)]) {
      ++found;
      base.kind = kind;
      kind_node = e[std::string(k)];
    }
  if (found != 1)
    w.fail(e, "key '" + key + "': an entry needs exactly one of the keys " + kKindKeys + " (it has " +
                  std::to_string(found) + ").");
  if (quantizers_only && base.kind != MethodSpec::Kind::Quantizer)
    w.fail(e, "key '" + key + "': only quantizers are allowed here ({quantizer: NAME, ...} or a name).");
  base.name = w.str(kind_node, key + "." + to_string(base.kind));

  const std::set<std::string> reserved = {"quantizer", "scorer", "seed", "policy", "family",
                                          "params",    "keep",   "budget", "label", "ladder"};
  std::vector<Axis> axes;
  auto add_param = [&](const std::string& p, const YAML::Node& v) {
    for (const auto& a : axes)
      if (a.key == "param:" + p) w.fail(v, "key '" + key + "': parameter '" + p + "' is given twice.");
    axes.push_back({"param:" + p, w.list(v, key + "." + p)});
  };
  for (const auto& kv : e) {
    const std::string k = kv.first.as<std::string>();
    if (k == "params") {
      if (!kv.second.IsMap()) w.fail(kv.second, "key '" + key + ".params' must be a mapping of parameter: value.");
      for (const auto& pv : kv.second) add_param(pv.first.as<std::string>(), pv.second);
    } else if (k == "keep") {
      if (base.kind != MethodSpec::Kind::Scorer) w.fail(kv.first, "key '" + key + "': 'keep' is for scorers only.");
      axes.push_back({"keep", w.list(kv.second, key + ".keep")});
    } else if (k == "budget") {
      if (base.kind != MethodSpec::Kind::Seed && base.kind != MethodSpec::Kind::Family)
        w.fail(kv.first, "key '" + key + "': 'budget' is for seed allocators and families only.");
      axes.push_back({"budget", w.list(kv.second, key + ".budget")});
    } else if (k == "label") {
      base.label = w.str(kv.second, key + ".label");
    } else if (k == "ladder") {
      if (base.kind != MethodSpec::Kind::Seed && base.kind != MethodSpec::Kind::Family)
        w.fail(kv.first, "key '" + key + "': 'ladder' is for seed allocators and families only.");
      try {
        base.ladder = RateLadder::parse(w.str(kv.second, key + ".ladder"));
      } catch (const InputError& err) {
        w.fail(kv.second, "key '" + key + ".ladder': " + err.what());
      }
    } else if (!reserved.count(k)) {
      add_param(k, kv.second);
    }
  }
  if (base.kind == MethodSpec::Kind::Family) {
    try {
      method_factories::family_of(base.name);
    } catch (const InputError& err) {
      w.fail(kind_node, "key '" + key + "': " + err.what());
    }
  }
  if (quantizers_only)
    for (const auto& a : axes)
      if (a.key == "param:bits")
        w.fail(e, "key '" + key + "': do not give 'bits' here; the analysis sets it from mismatch.bits.");

  // Cartesian product of the axes, in key order.
  std::vector<MethodSpec> out;
  std::vector<std::size_t> idx(axes.size(), 0);
  const bool expanded = [&] {
    for (const auto& a : axes)
      if (a.values.size() > 1) return true;
    return false;
  }();
  if (expanded && !base.label.empty())
    w.fail(e, "key '" + key + "': an entry that expands into several methods (a list value) cannot have one 'label'.");
  while (true) {
    MethodSpec m = base;
    std::vector<std::pair<std::string, std::string>> given;
    const YAML::Node* last = &e;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      const YAML::Node& v = axes[i].values[idx[i]];
      const std::string s = v.as<std::string>();
      last = &axes[i].values[idx[i]];
      if (axes[i].key == "keep") {
        m.keep = s;
        given.push_back({"keep", s});
      } else if (axes[i].key == "budget") {
        m.budget = w.num(v, key + ".budget", 0.01, 16.0);
        given.push_back({"B", s});
      } else {
        const std::string p = axes[i].key.substr(6);
        m.params[p] = s;
        given.push_back({p, s});
      }
    }
    if (m.label.empty()) m.label = default_label(m, given);
    try {
      check_method(m);
    } catch (const InputError& err) {
      w.fail(axes.empty() ? kind_node : *last, "key '" + key + "', method '" + m.label + "': " + err.what());
    }
    out.push_back(std::move(m));
    std::size_t i = 0;
    for (; i < axes.size(); ++i) {
      if (++idx[i] < axes[i].values.size()) break;
      idx[i] = 0;
    }
    if (i == axes.size()) break;
  }
  return out;
}

}  // namespace

std::vector<MethodSpec> parse_method_specs(const YAML::Node& list, const std::string& file, const std::string& key,
                                           const RateLadder& default_ladder, bool quantizers_only) {
  const YamlReader w{file};
  if (!list.IsSequence() || list.size() == 0) w.fail(list, "key '" + key + "' must be a non-empty list of method entries.");
  std::vector<MethodSpec> out;
  std::set<std::string> labels;
  for (const auto& e : list)
    for (MethodSpec& m : parse_entry(w, e, key, default_ladder, quantizers_only)) {
      if (!labels.insert(m.label).second)
        w.fail(e, "key '" + key + "': the method '" + m.label + "' is listed twice (give a distinct 'label').");
      out.push_back(std::move(m));
    }
  return out;
}

std::vector<MethodSpec> parse_method_spec_text(const std::string& text, const std::string& option,
                                               const RateLadder& default_ladder,
                                               const std::vector<std::string>& default_keep) {
  const std::string named = option + " '" + text + "'";
  YAML::Node entry;
  try {
    entry = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw InputError(named + ": not a method (" + e.msg + "); give a uniform policy (kivi:2) or an entry of a " +
                     "scenario's methods list ({quantizer: kivi, bits: 2}).");
  }
  if (entry.IsScalar()) {
    YAML::Node policy(YAML::NodeType::Map);
    policy["policy"] = text;
    entry = policy;
  }
  if (entry.IsMap() && entry["scorer"] && !entry["keep"] && !default_keep.empty()) {
    YAML::Node keep(YAML::NodeType::Sequence);
    for (const std::string& k : default_keep) keep.push_back(k);
    entry["keep"] = keep;
  }
  YAML::Node list(YAML::NodeType::Sequence);
  list.push_back(entry);
  std::vector<MethodSpec> out;
  try {
    out = parse_method_specs(list, option, option, default_ladder);
  } catch (const InputError& e) {
    // "OPTION:LINE: key 'OPTION'...": the text has no lines worth naming.
    std::string what = e.what();
    const std::string prefix = option + ":";
    if (what.rfind(prefix, 0) == 0) {
      const std::size_t colon = what.find(": ", prefix.size());
      if (colon != std::string::npos) what = what.substr(colon + 2);
    }
    for (const std::string& key : {"key '" + option + "', ", "key '" + option + "': "})
      if (what.rfind(key, 0) == 0) what = what.substr(key.size());
    throw InputError(named + ": " + what);
  }
  for (MethodSpec& m : out) m.where = named;
  return out;
}

ModelCompressor make_model_compressor(const MethodSpec& m, const MethodContext& ctx) {
  const ModelCompressor body = m.kind == MethodSpec::Kind::Family ? method_factories::make_family(m, ctx)
                                                                  : catalogue_entry(m).compress(m, ctx);
  return [m, body](const std::vector<std::vector<HeadData>>& heads) {
    try {
      return body(heads);
    } catch (const InputError& e) {
      throw InputError(m.where + ": method '" + m.label + "': " + e.what());
    }
  };
}

}  // namespace tierlab
