#include "coordinator/constrain/json_schema.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "common/frame.h"
#include "coordinator/constrain/literal_trie.h"
#include "coordinator/constrain/number_range.h"
#include "coordinator/constrain/regex.h"
#include "coordinator/text/tokenizer.h"

namespace llama2::constrain {
namespace {

using Json = nlohmann::ordered_json;

// Keywords that only annotate (or hold definitions): accepted and ignored.
const std::set<std::string> kAnnotations = {
    "$schema",         "$id",           "$comment",    "$anchor",     "$defs",
    "definitions",     "title",         "description", "default",     "examples",
    "format",          "deprecated",    "readOnly",    "writeOnly",   "contentMediaType",
    "contentEncoding", "discriminator", "nullable",    "x-spring-ai", "$vocabulary"};

// Keywords that change validity and are not supported: refused by name.
const std::set<std::string> kUnsupported = {"not",
                                            "if",
                                            "then",
                                            "else",
                                            "dependentRequired",
                                            "dependentSchemas",
                                            "dependencies",
                                            "patternProperties",
                                            "propertyNames",
                                            "minProperties",
                                            "maxProperties",
                                            "unevaluatedProperties",
                                            "unevaluatedItems",
                                            "contains",
                                            "minContains",
                                            "maxContains",
                                            "multipleOf",
                                            "$dynamicRef",
                                            "$recursiveRef",
                                            "additionalItems"};

const std::set<std::string> kObjectKeys = {"properties", "required", "additionalProperties"};
const std::set<std::string> kArrayKeys = {"items", "prefixItems", "minItems", "maxItems",
                                          "uniqueItems"};
const std::set<std::string> kStringKeys = {"pattern", "minLength", "maxLength"};
const std::set<std::string> kNumberKeys = {"minimum", "maximum", "exclusiveMinimum",
                                           "exclusiveMaximum"};

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const Json& root, const JsonSchemaOptions& opt)
      : g_(g), json_(g, opt.whitespace), root_(root) {}

  Symbol run() {
    const Symbol top = compile(root_, "#", 0);
    while (!pending_.empty()) {  // $ref targets, compiled here so $ref chains do not recurse
      const auto [pointer, rule] = pending_.back();
      pending_.pop_back();
      g_.set_alternatives(rule, {{compile(resolve(pointer), pointer, 0)}});
    }
    return top;
  }

 private:
  [[noreturn]] static void fail(const std::string& at, const std::string& what) {
    throw ConstraintError("json schema at " + at + ": " + what);
  }

  // The JSON pointer of a local $ref ("#/$defs/A~1B" -> $defs, then "A/B"), walked by hand.
  const Json& resolve(const std::string& ref) {
    if (ref.empty() || ref[0] != '#') {
      fail(ref, "only local references ('#', '#/$defs/Name', ...) are supported in $ref");
    }
    const Json* node = &root_;
    size_t i = 1;
    while (i < ref.size()) {
      if (ref[i] != '/') fail(ref, "$ref is not a JSON pointer ('#/...')");
      const size_t end = std::min(ref.find('/', i + 1), ref.size());
      std::string token;
      for (size_t k = i + 1; k < end; ++k) {
        if (ref[k] == '~' && k + 1 < end && (ref[k + 1] == '0' || ref[k + 1] == '1')) {
          token += ref[++k] == '0' ? '~' : '/';
        } else {
          token += ref[k];
        }
      }
      if (node->is_object() && node->contains(token)) {
        node = &(*node)[token];
      } else if (node->is_array() && !token.empty() &&
                 token.find_first_not_of("0123456789") == std::string::npos && token.size() < 9 &&
                 std::stoul(token) < node->size()) {
        node = &(*node)[std::stoul(token)];
      } else {
        fail(ref, "$ref points to nothing in the document");
      }
      i = end;
    }
    return *node;
  }

  Symbol reference(const std::string& ref) {
    auto it = refs_.find(ref);
    if (it != refs_.end()) return Grammar::ref(it->second);
    resolve(ref);  // fail now, naming the reference
    const uint32_t rule = g_.add_rule(ref);
    refs_.emplace(ref, rule);
    pending_.push_back({ref, rule});
    return Grammar::ref(rule);
  }

  // Keywords beside `key` other than annotations: refused when `key` cannot combine with them.
  static void only_annotations_beside(const Json& s, const std::string& key,
                                      const std::string& at) {
    for (const auto& [k, v] : s.items()) {
      if (k != key && !kAnnotations.count(k)) {
        fail(at, "'" + key + "' together with '" + k + "' is not supported");
      }
    }
  }

  Symbol compile(const Json& s, const std::string& at, int depth) {
    if (depth > g_.limits().max_nesting) {
      fail(at, "schemas nest deeper than " + std::to_string(g_.limits().max_nesting) +
                   " (limit max_nesting)");
    }
    if (s.is_boolean()) {
      if (!s.get<bool>()) fail(at, "the schema 'false' allows no value");
      return json_.any_value();
    }
    if (!s.is_object()) fail(at, "a schema must be an object or a boolean");
    for (const auto& [k, v] : s.items()) {
      if (kUnsupported.count(k)) fail(at, "keyword '" + k + "' is not supported");
      if (k == "uniqueItems" && v == true) fail(at, "keyword 'uniqueItems' is not supported");
    }
    if (s.contains("$ref")) {
      only_annotations_beside(s, "$ref", at);
      if (!s["$ref"].is_string()) fail(at, "'$ref' must be a string");
      return reference(s["$ref"].get<std::string>());
    }
    if (s.contains("allOf")) {
      only_annotations_beside(s, "allOf", at);
      const Json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) {
        fail(at, "'allOf' is supported with exactly one subschema");
      }
      return compile(all[0], at + "/allOf/0", depth + 1);
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!s.contains(key)) continue;
      only_annotations_beside(s, key, at);
      const Json& branches = s[key];
      if (!branches.is_array() || branches.empty()) {
        fail(at, std::string("'") + key + "' must be a non-empty array");
      }
      std::vector<Sequence> alts;
      for (size_t i = 0; i < branches.size(); ++i) {
        alts.push_back({compile(branches[i], at + "/" + key + "/" + std::to_string(i), depth + 1)});
      }
      return g_.choice(std::move(alts));
    }
    if (s.contains("const")) return json_.literal(s["const"].dump());
    if (s.contains("enum")) return enumeration(s, at);
    std::vector<Sequence> alts;
    for (const std::string& type : types_of(s, at)) alts.push_back({typed(s, type, at, depth)});
    return g_.choice(std::move(alts));
  }

  // The types the value may take: `type` (string or array), else inferred from the keywords
  // present (an object schema without "type" produces objects: a subset of what it allows).
  std::vector<std::string> types_of(const Json& s, const std::string& at) {
    static const std::set<std::string> kTypes = {"null",   "boolean", "integer", "number",
                                                 "string", "array",   "object"};
    std::vector<std::string> types;
    if (s.contains("type")) {
      const Json& t = s["type"];
      const Json list = t.is_array() ? t : Json::array({t});
      for (const Json& e : list) {
        if (!e.is_string() || !kTypes.count(e.get<std::string>())) {
          fail(at, "unknown type " + e.dump());
        }
        types.push_back(e.get<std::string>());
      }
      if (types.empty()) fail(at, "'type' is an empty array");
      return types;
    }
    auto has_any = [&](const std::set<std::string>& keys) {
      for (const auto& k : keys)
        if (s.contains(k)) return true;
      return false;
    };
    if (has_any(kObjectKeys)) types.push_back("object");
    if (has_any(kArrayKeys)) types.push_back("array");
    if (has_any(kStringKeys)) types.push_back("string");
    if (has_any(kNumberKeys)) types.push_back("number");
    if (types.empty()) types.push_back("any");
    return types;
  }

  Symbol typed(const Json& s, const std::string& type, const std::string& at, int depth) {
    if (type == "null") return json_.literal("null");
    if (type == "boolean") return g_.choice({{json_.literal("true")}, {json_.literal("false")}});
    if (type == "integer") return integer_in_range(g_, bound(s, true, at), bound(s, false, at));
    if (type == "number") return number_in_range(g_, bound(s, true, at), bound(s, false, at));
    if (type == "string") return string(s, at);
    if (type == "array") return array(s, at, depth);
    if (type == "object") return object(s, at, depth);
    return json_.any_value();
  }

  Symbol enumeration(const Json& s, const std::string& at) {
    const Json& values = s["enum"];
    if (!values.is_array() || values.empty()) fail(at, "'enum' must be a non-empty array");
    std::vector<std::string> texts;
    const bool typed_enum = s.contains("type");
    const std::vector<std::string> types =
        typed_enum ? types_of(s, at) : std::vector<std::string>{};
    for (const Json& v : values) {
      if (typed_enum && !has_type(v, types)) continue;
      texts.push_back(v.dump());
    }
    if (texts.empty()) fail(at, "no 'enum' value has the schema's 'type'");
    return literal_trie(g_, texts, "enum at " + at);
  }

  static bool has_type(const Json& v, const std::vector<std::string>& types) {
    for (const auto& t : types) {
      if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) ||
          (t == "string" && v.is_string()) || (t == "array" && v.is_array()) ||
          (t == "object" && v.is_object()) || (t == "number" && v.is_number()) ||
          (t == "integer" &&
           (v.is_number_integer() ||
            (v.is_number_float() &&
             v.get<double>() == static_cast<double>(static_cast<long long>(v.get<double>()))))))
        return true;
    }
    return false;
  }

  static int count(const Json& s, const char* key, int none, const std::string& at) {
    if (!s.contains(key)) return none;
    const Json& v = s[key];
    if (!v.is_number_integer() || v.get<long long>() < 0) {
      fail(at, std::string("'") + key + "' must be a non-negative integer");
    }
    return v.get<long long>() > 1'000'000'000 ? 1'000'000'000
                                              : static_cast<int>(v.get<long long>());
  }

  // minimum/exclusiveMinimum (lower) or maximum/exclusiveMaximum, in both drafts' forms.
  static std::optional<Bound> bound(const Json& s, bool lower, const std::string& at) {
    const char* inclusive_key = lower ? "minimum" : "maximum";
    const char* exclusive_key = lower ? "exclusiveMinimum" : "exclusiveMaximum";
    std::optional<Bound> b;
    auto tighter = [&](const Bound& c) {
      if (!b) return true;
      const int cmp = compare(c.value, b->value);
      return lower ? (cmp > 0 || (cmp == 0 && c.exclusive))
                   : (cmp < 0 || (cmp == 0 && c.exclusive));
    };
    if (s.contains(inclusive_key)) {
      if (!s[inclusive_key].is_number())
        fail(at, std::string("'") + inclusive_key + "' must be a number");
      const bool draft4_exclusive = s.contains(exclusive_key) && s[exclusive_key].is_boolean() &&
                                    s[exclusive_key].get<bool>();
      b = Bound{Decimal::parse(s[inclusive_key].dump()), draft4_exclusive};
    }
    if (s.contains(exclusive_key) && !s[exclusive_key].is_boolean()) {
      if (!s[exclusive_key].is_number())
        fail(at, std::string("'") + exclusive_key + "' must be a number");
      const Bound c{Decimal::parse(s[exclusive_key].dump()), true};
      if (tighter(c)) b = c;
    }
    return b;
  }

  Symbol string(const Json& s, const std::string& at) {
    const int min = count(s, "minLength", 0, at), max = count(s, "maxLength", -1, at);
    if (s.contains("pattern")) {
      if (s.contains("minLength") || s.contains("maxLength")) {
        fail(at, "'pattern' together with 'minLength'/'maxLength' is not supported");
      }
      if (!s["pattern"].is_string()) fail(at, "'pattern' must be a string");
      const Symbol body =
          compile_regex(g_, s["pattern"].get<std::string>(), RegexMode::kJsonStringSearch);
      return g_.group({g_.byte('"'), body, g_.byte('"')});
    }
    if (max >= 0 && max < min) fail(at, "'maxLength' is below 'minLength'");
    return json_.string(min, max);
  }

  Symbol array(const Json& s, const std::string& at, int depth) {
    const int min = count(s, "minItems", 0, at), max = count(s, "maxItems", -1, at);
    if (max >= 0 && max < min) fail(at, "'maxItems' is below 'minItems'");
    std::vector<Symbol> prefix;
    if (s.contains("prefixItems")) {
      const Json& p = s["prefixItems"];
      if (!p.is_array()) fail(at, "'prefixItems' must be an array");
      for (size_t i = 0; i < p.size(); ++i)
        prefix.push_back(compile(p[i], at + "/prefixItems/" + std::to_string(i), depth + 1));
    }
    std::optional<Symbol> item = json_.any_value();
    if (s.contains("items")) {
      const Json& it = s["items"];
      if (it.is_array())
        fail(at, "'items' as an array (draft 4 tuples) is not supported; use 'prefixItems'");
      if (it.is_boolean() && !it.get<bool>()) {
        item.reset();
      } else {
        item = compile(it, at + "/items", depth + 1);
      }
    }
    const int k = static_cast<int>(prefix.size());
    const int most = item ? max : (max < 0 ? k : std::min(max, k));
    if (min > most && most >= 0) fail(at, "'minItems' cannot be met with the items allowed");
    const Symbol comma = g_.group({g_.byte(','), json_.ws()});
    auto element = [&](int j) { return j < k ? prefix[static_cast<size_t>(j)] : *item; };
    // tail(j): what may follow j elements, built from the back.
    Symbol tail = g_.group({});
    const int explicit_upto = std::max(k, 1);
    if (item) {
      const int from = explicit_upto;  // elements from index `from` on are all `item`
      const int rmin = std::max(0, min - from), rmax = most < 0 ? -1 : std::max(0, most - from);
      tail = g_.repeat(g_.group({comma, *item}), rmin, rmax);
    }
    for (int j = explicit_upto - 1; j >= 1; --j) {
      std::vector<Sequence> alts;
      if (j >= min) alts.push_back({});
      if (most < 0 || j < most) alts.push_back({comma, element(j), tail});
      if (alts.empty()) alts.push_back({g_.nothing()});
      tail = g_.choice(std::move(alts));
    }
    std::vector<Sequence> alts;
    if (min == 0) alts.push_back({g_.byte('['), json_.ws(), g_.byte(']')});
    if (most != 0) {
      alts.push_back({g_.byte('['), json_.ws(), element(0), tail, json_.ws(), g_.byte(']')});
    }
    return g_.choice(std::move(alts));
  }

  Symbol object(const Json& s, const std::string& at, int depth) {
    struct Prop {
      std::string name;
      Symbol value;
      bool required;
    };
    std::vector<Prop> props;
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) fail(at, "'required' must be an array");
      for (const Json& r : s["required"]) {
        if (!r.is_string()) fail(at, "'required' must list strings");
        required.insert(r.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) fail(at, "'properties' must be an object");
      for (const auto& [name, sub] : s["properties"].items()) {
        const Symbol v = compile(sub, at + "/properties/" + name, depth + 1);
        props.push_back({name, v, required.count(name) > 0});
      }
    }
    for (const std::string& r : required) {
      bool declared = false;
      for (const Prop& p : props) declared = declared || p.name == r;
      if (!declared) props.push_back({r, json_.any_value(), true});
    }
    if (props.empty()) return map_object(s, at, depth);
    // Members in the schema's order; each optional one may be left out. S(i): members from i on
    // with none written yet; R(i): from i on after at least one (so each starts with a comma).
    const Symbol comma = g_.group({g_.byte(','), json_.ws()});
    Symbol r_next = g_.group({});
    std::optional<Symbol> s_next;  // none: no member can start at i
    for (size_t i = props.size(); i-- > 0;) {
      const Prop& p = props[i];
      const Symbol m = json_.member(json_.literal(Json(p.name).dump()), p.value);
      const Symbol r =
          p.required ? g_.group({comma, m, r_next}) : g_.choice({{comma, m, r_next}, {r_next}});
      std::vector<Sequence> s_alts{{m, r_next}};
      if (!p.required && s_next) s_alts.push_back({*s_next});
      s_next = g_.choice(std::move(s_alts));
      r_next = r;
    }
    const bool all_optional = required.empty();
    return json_.object(*s_next, all_optional);
  }

  // An object without declared properties: a map of additionalProperties (any values when it is
  // absent or true, nothing but {} when false).
  Symbol map_object(const Json& s, const std::string& at, int depth) {
    Symbol value = json_.any_value();
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean() && !a.get<bool>()) return json_.literal("{}");
      value = compile(a, at + "/additionalProperties", depth + 1);
    }
    const Symbol comma = g_.group({g_.byte(','), json_.ws()});
    const Symbol m = json_.member(json_.string(0, -1), value);
    return json_.object(g_.group({m, g_.star(g_.group({comma, m}))}), true);
  }

  Grammar& g_;
  JsonGrammar json_;
  const Json& root_;
  std::map<std::string, uint32_t> refs_;
  std::vector<std::pair<std::string, uint32_t>> pending_;
};

}  // namespace

void compile_json_schema(Grammar& grammar, const std::string& text,
                         const JsonSchemaOptions& options) {
  if (json_nesting_exceeds(text, grammar.limits().max_nesting)) {
    throw ConstraintError("json schema nests deeper than " +
                          std::to_string(grammar.limits().max_nesting) +
                          " levels (limit max_nesting)");
  }
  if (!is_valid_utf8(text)) throw ConstraintError("json schema is not valid UTF-8");
  Json root;
  try {
    root = Json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConstraintError(std::string("json schema is not valid JSON: ") + e.what());
  }
  SchemaCompiler compiler(grammar, root, options);
  const Symbol top = compiler.run();
  grammar.set_root(grammar.intern("root", {{top}}));
}

void compile_json_object(Grammar& grammar, const JsonSchemaOptions& options) {
  JsonGrammar json(grammar, options.whitespace);
  grammar.set_root(grammar.intern("root", {{json.any_object()}}));
}

}  // namespace llama2::constrain
